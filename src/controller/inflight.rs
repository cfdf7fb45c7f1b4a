//! The effects in progress, by Run: started once, aborted when their Run is cancelled or
//! deleted, ended when their outcome is written.

use std::collections::HashMap;
use std::sync::Mutex;

use tokio_util::sync::CancellationToken;

use super::queue::Key;
use super::work::effect_id;
use crate::api::Run;
use crate::engine::Effect;

/// The effects of one Run in progress, by [`effect_id`]: each one's token, and whether the
/// Run was already cancelled when it started.
type RunEffects = HashMap<String, (CancellationToken, bool)>;

/// The effects in progress of every Run, and whether their Run was already cancelled when they
/// started (`finally` steps of a cancelled Run must not be aborted).
#[derive(Default)]
pub(super) struct Inflight(Mutex<HashMap<Key, RunEffects>>);

impl Inflight {
    pub(super) fn abort(&self, k: &Key) {
        if let Some(effects) = self.0.lock().expect("inflight lock").get(k) {
            for (t, _) in effects.values().filter(|(_, cancelled)| !cancelled) {
                t.cancel();
            }
        }
    }

    pub(super) fn start(&self, k: &Key, effect: &Effect, run: &Run) -> Option<CancellationToken> {
        let mut inflight = self.0.lock().expect("inflight lock");
        let effects = inflight.entry(k.clone()).or_default();
        let id = effect_id(effect);
        if effects.contains_key(&id) {
            return None;
        }
        let token = CancellationToken::new();
        effects.insert(id, (token.clone(), run.spec.cancel.is_some()));
        Some(token)
    }

    pub(super) fn end(&self, k: &Key, effect: &Effect) {
        let mut inflight = self.0.lock().expect("inflight lock");
        if let Some(effects) = inflight.get_mut(k) {
            effects.remove(&effect_id(effect));
            if effects.is_empty() {
                inflight.remove(k);
            }
        }
    }

    /// Forget every effect of a Run (its worker panicked).
    pub(super) fn forget(&self, k: &Key) {
        self.0.lock().expect("inflight lock").remove(k);
    }
}
