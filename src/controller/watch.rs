//! Following the store's watch: what each change of a Run means for this controller.

use std::collections::{BTreeMap, HashSet};

use futures::StreamExt;

use super::queue::Key;
use super::{Controller, STORE_RETRY, STORE_RETRY_MAX};
use crate::api::Run;
use crate::engine;
use crate::store::{StoreError, WatchEvent};

impl Controller {
    /// Follow the store: queue every Run of this controller's shards that changes, abort
    /// the effects of Runs cancelled or deleted, and wake the Runs waiting behind one that
    /// ended.
    pub(super) async fn watch(&self) {
        // Before listing again after a watch failed: a watch refused as soon as it starts
        // (API Priority and Fairness, rights, an API server rolling out) would otherwise have
        // every Run queued again in a tight loop.
        let mut pause = STORE_RETRY;
        loop {
            let rv = match self.store.resource_version().await {
                Ok(rv) => rv,
                Err(e) => {
                    tracing::error!(error = %e, "cannot read the store; retrying");
                    tokio::time::sleep(STORE_RETRY).await;
                    continue;
                }
            };
            // The cache's Runs at once, without a trip to the source.
            let cached: HashSet<Key> = match self.store.list(None, &BTreeMap::new()).await {
                Ok(runs) => runs.iter().filter_map(|r| Key::of(&r.metadata)).collect(),
                Err(e) => {
                    tracing::error!(error = %e, "cannot list runs; retrying");
                    tokio::time::sleep(STORE_RETRY).await;
                    continue;
                }
            };
            self.queue_all(cached.iter().cloned());
            // Held only until the source's keys are in: a hundred thousand keys weigh megabytes.
            let mut cached = Some(cached);
            // A cache that lags the version the watch starts from can lack a Run created
            // before it, which the watch will not deliver either: nothing would reconcile it.
            // The source's keys (a snapshot at or after that version) are queued as they come,
            // while the watch is already followed.
            let mut catch_up = std::pin::pin!(self.store.keys_now());
            let mut caught_up = false;
            let mut stream = self.store.watch(Some(rv));
            loop {
                tokio::select! {
                    keys = &mut catch_up, if !caught_up => {
                        caught_up = true;
                        let cached = cached.take().unwrap_or_default();
                        let missed = keys.map(|(keys, _)| keys.into_iter().filter(|k| !cached.contains(k)));
                        if let Err(e) = missed.map(|keys| self.queue_all(keys)) {
                            tracing::warn!(error = %e, "cannot list runs at the source; listing again");
                            tokio::time::sleep(STORE_RETRY).await;
                            break;
                        }
                    }
                    ev = stream.next() => match ev {
                        Some(Ok(ev)) => {
                            self.follow(ev);
                            pause = STORE_RETRY;
                        }
                        Some(Err(StoreError::Gone)) => break,
                        Some(Err(e)) => {
                            tracing::warn!(error = %e, "watch failed; listing again in {pause:?}");
                            tokio::time::sleep(pause).await;
                            pause = (pause * 2).min(STORE_RETRY_MAX);
                            break;
                        }
                        None => {
                            tokio::time::sleep(pause).await;
                            pause = (pause * 2).min(STORE_RETRY_MAX);
                            break;
                        }
                    },
                }
            }
        }
    }

    /// Queue the keys of this controller's shards.
    fn queue_all(&self, keys: impl IntoIterator<Item = Key>) {
        for k in keys.into_iter().filter(|k| self.config.shards.owns(k)) {
            self.queue.add(k);
        }
    }

    /// What one change of a Run means here.
    fn follow(&self, ev: WatchEvent) {
        match ev {
            WatchEvent::Applied(run) => {
                let finished = run.phase().is_terminal();
                if finished {
                    self.wake_queued(&run);
                }
                let Some(k) = Key::of(&run.metadata) else {
                    return;
                };
                if !self.config.shards.owns(&k) {
                    return;
                }
                // A Run ends with its effects under way only when it failed internally (a
                // status too large to write, a panic): what they do now goes nowhere, but the
                // cleanups of the steps it ended go on.
                if finished {
                    self.inflight.abort_finished(&k, &run);
                } else if run.spec.cancel.is_some() {
                    self.inflight.abort(&k, &run);
                }
                self.queue.add(k);
            }
            WatchEvent::Deleted(run) => {
                self.wake_queued(&run);
                if let Some(k) = Key::of(&run.metadata) {
                    self.drop_outcomes(&k, |effect| engine::is_effect_of(&run, effect));
                    self.waiting.leave(&k, &run);
                    self.inflight.abort_all(&k, &run);
                }
            }
        }
    }

    /// Wake the Runs waiting unstarted whenever a Workflow changes: a Workflow that was paused
    /// may have been resumed (and a waiting Run that finds it still paused waits again).
    pub(super) async fn wake_on_workflow_changes(&self) {
        let mut changes = self.workflows.changes();
        while changes.changed().await.is_ok() {
            for k in self.waiting.everyone() {
                self.queue.add(k);
            }
        }
    }

    /// A Run ended or went away: the Runs queued behind it here (whatever shard it is in) may
    /// have a slot now.
    fn wake_queued(&self, run: &Run) {
        for k in self.waiting.behind(run) {
            self.queue.add(k);
        }
    }
}
