//! Following the store's watch: what each change of a Run means for this controller.

use futures::StreamExt;

use super::queue::Key;
use super::{Controller, STORE_RETRY};
use crate::api::Run;
use crate::store::{StoreError, WatchEvent};

impl Controller {
    /// Follow the store: queue every Run of this controller's shards that changes, abort
    /// the effects of Runs cancelled or deleted, and wake the Runs waiting behind one that
    /// ended.
    pub(super) async fn watch(&self) {
        loop {
            // The keys and the version come from one snapshot: a Run created before the
            // version and missing from a lagging cache would be in neither the list nor the
            // watch, and nothing else would ever reconcile it.
            let rv = match self.store.keys_now().await {
                Ok((keys, rv)) => {
                    for k in keys.into_iter().filter(|k| self.config.shards.owns(k)) {
                        self.queue.add(k);
                    }
                    rv
                }
                Err(e) => {
                    tracing::error!(error = %e, "cannot list runs; retrying");
                    tokio::time::sleep(STORE_RETRY).await;
                    continue;
                }
            };
            let mut stream = self.store.watch(Some(rv));
            while let Some(ev) = stream.next().await {
                match ev {
                    Ok(WatchEvent::Applied(run)) => {
                        if run.phase().is_terminal() {
                            self.wake_queued(&run);
                        }
                        let Some(k) = Key::of(&run.metadata) else {
                            continue;
                        };
                        if !self.config.shards.owns(&k) {
                            continue;
                        }
                        if run.spec.cancel.is_some() {
                            self.inflight.abort(&k);
                        }
                        self.queue.add(k);
                    }
                    Ok(WatchEvent::Deleted(run)) => {
                        self.wake_queued(&run);
                        if let Some(k) = Key::of(&run.metadata) {
                            self.outcomes.lock().expect("outcomes lock").remove(&k);
                            self.waiting.leave(&k, &run);
                            self.inflight.abort(&k);
                        }
                    }
                    Err(StoreError::Gone) => break,
                    Err(e) => {
                        tracing::warn!(error = %e, "watch failed; listing again");
                        break;
                    }
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
