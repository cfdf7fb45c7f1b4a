//! The effects in progress, by Run: started once, aborted when their Run is cancelled or
//! deleted, ended when their outcome is written.

use std::collections::HashMap;
use std::sync::Mutex;

use tokio_util::sync::CancellationToken;

use super::queue::Key;
use super::work::effect_id;
use crate::api::Run;
use crate::engine::{self, Effect};

/// The effects of one Run in progress, by [`effect_id`]: each one's token, and whether a
/// cancel of the Run leaves it to finish ([`engine::survives_cancel`]).
type RunEffects = HashMap<String, (CancellationToken, bool)>;

/// The effects in progress of every Run, and whether a cancel aborts them (`finally` steps and
/// cleanups must not be aborted: the next reconcile would send them again).
#[derive(Default)]
pub(super) struct Inflight(Mutex<HashMap<Key, RunEffects>>);

impl Inflight {
    /// The Run was cancelled: abort what a cancel stops (each effect then ends itself).
    pub(super) fn abort(&self, k: &Key) {
        self.abort_where(k, |survives| !survives);
    }

    /// The Run was deleted: abort everything of it, `finally` steps and cleanups too.
    pub(super) fn abort_all(&self, k: &Key) {
        self.abort_where(k, |_| true);
    }

    fn abort_where(&self, k: &Key, aborted: impl Fn(bool) -> bool) {
        if let Some(effects) = self.0.lock().expect("inflight lock").get(k) {
            for (t, _) in effects.values().filter(|(_, survives)| aborted(*survives)) {
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
        effects.insert(id, (token.clone(), engine::survives_cancel(run, effect)));
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

    /// Abort and forget every effect of a Run (its worker panicked, and the Run fails).
    pub(super) fn forget(&self, k: &Key) {
        let effects = self.0.lock().expect("inflight lock").remove(k);
        for (t, _) in effects.into_iter().flat_map(HashMap::into_values) {
            t.cancel();
        }
    }
}
