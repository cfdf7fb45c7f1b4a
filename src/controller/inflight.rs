//! The effects in progress, by Run: started once, aborted when their Run is cancelled or
//! deleted, ended when their outcome is written.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use tokio_util::sync::CancellationToken;

use super::queue::Key;
use super::work::effect_id;
use crate::api::Run;
use crate::engine::{self, Effect};

/// One effect in progress: its token, whether a cancel of its Run leaves it to finish
/// ([`engine::survives_cancel`]), and the uid of the Run it was started for (a Run deleted and
/// created again under its name is another Run).
struct Started {
    token: CancellationToken,
    survives_cancel: bool,
    /// A cleanup, which a finished Run still performs.
    cleanup: bool,
    uid: String,
    /// What it performs, and the version of the Run it was started from.
    effect: Effect,
    from: Option<u64>,
}

/// The effects of one Run name in progress, by [`effect_id`].
type RunEffects = HashMap<String, Started>;

/// The effects in progress of every Run, and whether a cancel aborts them (`finally` steps and
/// cleanups must not be aborted: the next reconcile would send them again).
#[derive(Default)]
pub(super) struct Inflight {
    by_run: Mutex<HashMap<Key, RunEffects>>,
    /// Told whenever the last effect in progress ends.
    emptied: tokio::sync::Notify,
}

impl Inflight {
    /// `run` was cancelled: abort what a cancel stops (each effect then ends itself).
    pub(super) fn abort(&self, k: &Key, run: &Run) {
        self.abort_where(k, run, |e| !e.survives_cancel);
    }

    /// `run` was deleted: abort everything of it, `finally` steps and cleanups too.
    pub(super) fn abort_all(&self, k: &Key, run: &Run) {
        self.abort_where(k, run, |_| true);
    }

    /// `run` finished: abort everything of it but the cleanups, which undo what its ended
    /// steps left running outside.
    pub(super) fn abort_finished(&self, k: &Key, run: &Run) {
        self.abort_where(k, run, |e| !e.cleanup);
    }

    /// A new version of `run` came: abort what it no longer runs (a step fail-fast stopped,
    /// an attempt whose end was recorded). A version older than the one an effect was
    /// started from says nothing of it.
    pub(super) fn abort_undue(&self, k: &Key, run: &Run) {
        let inflight = self.by_run.lock().expect("inflight lock");
        let Some(effects) = inflight.get(k) else {
            return;
        };
        let uid = run.metadata.uid.as_deref().unwrap_or_default();
        let version = version_of(run);
        // The Run's running attempts, read once however many effects are in flight (a
        // fan-out's items).
        let running: HashSet<(&str, u32)> = engine::running_attempts(run).collect();
        for e in effects.values() {
            let known = e.from.zip(version).is_some_and(|(from, now)| now >= from);
            if e.uid == uid && known && !engine::is_due_among(run, &e.effect, &running) {
                e.token.cancel();
            }
        }
    }

    fn abort_where(&self, k: &Key, run: &Run, aborted: impl Fn(&Started) -> bool) {
        let uid = run.metadata.uid.as_deref().unwrap_or_default();
        if let Some(effects) = self.by_run.lock().expect("inflight lock").get(k) {
            for e in effects.values().filter(|e| e.uid == uid && aborted(e)) {
                e.token.cancel();
            }
        }
    }

    pub(super) fn start(&self, k: &Key, effect: &Effect, run: &Run) -> Option<CancellationToken> {
        let mut inflight = self.by_run.lock().expect("inflight lock");
        let effects = inflight.entry(k.clone()).or_default();
        let id = effect_id(effect);
        if effects.contains_key(&id) {
            return None;
        }
        let token = CancellationToken::new();
        let started = Started {
            token: token.clone(),
            survives_cancel: engine::survives_cancel(run, effect),
            cleanup: matches!(effect.action, engine::Action::Cleanup(_)),
            uid: run.metadata.uid.clone().unwrap_or_default(),
            effect: effect.clone(),
            from: version_of(run),
        };
        effects.insert(id, started);
        Some(token)
    }

    pub(super) fn end(&self, k: &Key, effect: &Effect) {
        let mut inflight = self.by_run.lock().expect("inflight lock");
        if let Some(effects) = inflight.get_mut(k) {
            effects.remove(&effect_id(effect));
            if effects.is_empty() {
                inflight.remove(k);
            }
        }
        if inflight.is_empty() {
            self.emptied.notify_waiters();
        }
    }

    /// Abort and forget every effect of a Run (its worker panicked, and the Run fails).
    pub(super) fn forget(&self, k: &Key) {
        let effects = {
            let mut inflight = self.by_run.lock().expect("inflight lock");
            let effects = inflight.remove(k);
            if inflight.is_empty() {
                self.emptied.notify_waiters();
            }
            effects
        };
        for e in effects.into_iter().flat_map(HashMap::into_values) {
            e.token.cancel();
        }
    }

    /// Once no effect is in progress (each ended: its outcome written, or nothing to write).
    pub(super) async fn until_empty(&self) {
        loop {
            let emptied = self.emptied.notified();
            tokio::pin!(emptied);
            // Registered before the look, so that an end between the two is not missed.
            emptied.as_mut().enable();
            if self.by_run.lock().expect("inflight lock").is_empty() {
                return;
            }
            emptied.await;
        }
    }
}

/// `run`'s resource version as a number.
fn version_of(run: &Run) -> Option<u64> {
    run.metadata.resource_version.as_deref()?.parse().ok()
}
