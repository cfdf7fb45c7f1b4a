//! Deleting finished Runs whose time to live is over, each written to the archive first (when
//! there is one): a Run leaves the store only after its archive entry is committed.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

use super::Controller;
use super::queue::Key;
use crate::api::Run;
use crate::engine::Event;
use crate::store::StoreError;
use crate::telemetry::ErrorKind;

/// Pause before archiving a Run again after the archive failed.
const ARCHIVE_RETRY: Duration = Duration::from_secs(10);

impl Controller {
    /// Delete a finished Run whose time to live is over, and the child Runs below it (they
    /// are kept as long as their top-level Run: they are the count that bounds its tree).
    /// The children go first, so that a collection cut short is found again through the Run.
    pub(super) async fn collect(&self, k: &Key) {
        let run = match self.store.get(&k.namespace, &k.name).await {
            Ok(Some(run)) => run,
            Ok(None) => return,
            Err(e) => return self.retry_later(k, e),
        };
        if let Some(uid) = run.metadata.uid.clone() {
            let below = BTreeMap::from([(crate::api::labels::ROOT.to_owned(), uid)]);
            let children = match self.store.list(Some(&k.namespace), &below).await {
                Ok(c) => c,
                Err(e) => return self.retry_later(k, e),
            };
            for child in children
                .iter()
                .filter(|c| crate::steps::child::sealed_child(&self.config.marks, c))
            {
                if !self.retire(k, child).await {
                    return;
                }
            }
        }
        if self.retire(k, &run).await {
            tracing::info!(namespace = %k.namespace, run = %k.name, "finished run garbage-collected");
        }
    }

    /// Archive `run`, then delete it; `false` (and `k` queued again) when either failed.
    async fn retire(&self, k: &Key, run: &Run) -> bool {
        let name = run.metadata.name.as_deref().unwrap_or_default();
        if let Some(archiver) = &self.config.archive
            && let Err(e) = archiver.keep(run).await
        {
            self.config.metrics.reconcile_error(ErrorKind::Archive);
            tracing::error!(namespace = %k.namespace, run = %name, error = %e, "cannot archive a finished run; it is kept until it can be");
            self.events.record(
                run,
                &Event {
                    reason: crate::api::event_reasons::ARCHIVE_FAILED,
                    message: format!("not deleted yet: {e}"),
                    warning: true,
                },
            );
            self.queue.add_at(k.clone(), Instant::now() + ARCHIVE_RETRY);
            return false;
        }
        match self.store.delete(&k.namespace, name).await {
            Ok(()) | Err(StoreError::NotFound) => true,
            Err(e) => {
                self.retry_later(k, e);
                false
            }
        }
    }
}
