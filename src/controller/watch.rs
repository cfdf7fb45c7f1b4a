//! Following the store's watch: what each change of a Run means for this controller.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use futures::StreamExt;

use super::queue::Key;
use super::work::{Behind, behind};
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
        let mut first = true;
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
            let Some(cached) = self.cached().await else {
                tokio::time::sleep(STORE_RETRY).await;
                continue;
            };
            if std::mem::take(&mut first) {
                self.read_unfinished_at_source(&cached);
            }
            self.queue_all(cached.keys().cloned());
            // Held only until the source's keys are in: a hundred thousand keys weigh megabytes.
            let mut cached = Some(cached);
            // A cache that lags the version the watch starts from can lack a Run created
            // before it, or hold one as it was before a change, which the watch will not
            // deliver either: nothing would reconcile the first, and the second would be
            // decided from its old state (a cancel or an answer given to another replica
            // during the gap, never acted on). The source's keys and versions (a snapshot at
            // or after that version) are weighed as they come, while the watch is already
            // followed; a Run held at another version is read at the source by its reconcile.
            let mut catch_up = std::pin::pin!(self.store.keys_now());
            let mut caught_up = false;
            let mut stream = self.store.watch(Some(rv));
            let since = tokio::time::Instant::now();
            loop {
                tokio::select! {
                    keys = &mut catch_up, if !caught_up => {
                        caught_up = true;
                        let cached = cached.take().unwrap_or_default();
                        let found = keys.map(|(keys, _)| behind(cached, keys));
                        if let Err(e) = found.map(|found| self.weigh(found)) {
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
                        ended => {
                            // A watch that ran longer than the pause was not failing over and
                            // over (a quiet one delivers nothing to reset it).
                            if since.elapsed() > pause {
                                pause = STORE_RETRY;
                            }
                            if let Some(Err(e)) = ended {
                                tracing::warn!(error = %e, "watch failed; listing again in {pause:?}");
                            }
                            tokio::time::sleep(pause).await;
                            pause = (pause * 2).min(STORE_RETRY_MAX);
                            break;
                        }
                    },
                }
            }
        }
    }

    /// Every Run the cache holds, by key (`None`: the store failed, said in the log).
    async fn cached(&self) -> Option<HashMap<Key, Arc<Run>>> {
        match self.store.list(None, &BTreeMap::new()).await {
            Ok(runs) => Some(runs.into_iter().filter_map(keyed).collect()),
            Err(e) => {
                tracing::error!(error = %e, "cannot list runs; retrying");
                None
            }
        }
    }

    /// At the start of a term, have the unfinished Runs read at the source before they are
    /// decided: the previous owner may have recorded an attempt's end moments ago, which this
    /// cache may not hold yet, and deciding from the older copy would send the attempt again.
    fn read_unfinished_at_source(&self, cached: &HashMap<Key, Arc<Run>>) {
        let unfinished = cached
            .iter()
            .filter(|(_, r)| !r.phase().is_terminal())
            .map(|(k, _)| k.clone());
        self.read_at_source(unfinished.collect());
    }

    /// Act on what a relist found: queue the Runs the cache lacks, have those it holds at
    /// another version read at the source first, and take those the source no longer has
    /// for deleted (no delete event will come for them).
    fn weigh(&self, found: Behind) {
        self.queue_all(found.missing);
        self.read_at_source(found.stale);
        for run in found.gone {
            self.follow(WatchEvent::Deleted(run));
        }
    }

    /// Queue the keys of this controller's shards whose cached copies lag the source, for a
    /// reconcile that reads them there first.
    fn read_at_source(&self, keys: Vec<Key>) {
        let mine: Vec<Key> = keys
            .into_iter()
            .filter(|k| self.config.shards.owns(k))
            .collect();
        self.behind
            .lock()
            .expect("behind lock")
            .extend(mine.iter().cloned());
        self.queue_all(mine);
    }

    /// Catch `k` up with the source if the last relist found its cached copy behind: the
    /// store serves what it read to the reads that follow.
    pub(super) async fn catch_up(&self, k: &Key) {
        if self.behind.lock().expect("behind lock").remove(k)
            && let Err(e) = self.store.get_now(&k.namespace, &k.name).await
        {
            // The reconcile goes on from the cache: a write from its old copy conflicts, and
            // the conflict reads the Run again.
            tracing::warn!(error = %e, "cannot read the run at the source");
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
                } else {
                    if run.spec.cancel.is_some() {
                        self.inflight.abort(&k, &run);
                    }
                    self.inflight.abort_undue(&k, &run);
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

/// A Run by its key.
fn keyed(run: Arc<Run>) -> Option<(Key, Arc<Run>)> {
    Some((Key::of(&run.metadata)?, run))
}
