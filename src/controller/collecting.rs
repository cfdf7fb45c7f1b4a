//! Deleting finished Runs whose time to live is over, each written to the archive first (when
//! there is one): a Run leaves the store only after its archive entry is committed.

use std::time::Duration;

use jiff::Timestamp;
use tokio::time::Instant;

use super::Controller;
use super::queue::Key;
use super::retiring::{RetireError, retire_tree};
use crate::api::{Run, labels};
use crate::engine::Event;
use crate::engine::schedule;
use crate::telemetry::ErrorKind;

/// Pause before archiving a Run again after the archive failed.
const ARCHIVE_RETRY: Duration = Duration::from_secs(10);
/// Pause before looking again at a Run whose child Runs have not all finished.
const CHILDREN_RETRY: Duration = Duration::from_secs(5);
/// Pause before reading again a Run written while it was archived: the cache the next pass
/// reads it from has then seen that write.
const CHANGED_RETRY: Duration = Duration::from_secs(1);

impl Controller {
    /// A finished Run the engine keeps for good because its labels say a schedule started it
    /// (its history limits keep such Runs instead of a time to live) or it is a child (kept
    /// with its tree): when that schedule is gone (removed, renamed, or its Workflow deleted),
    /// or the labels were not Runway's (no seal holds: a copied Run), nothing else would ever
    /// delete it, so its own time to live applies. Runs that had finished before their
    /// schedule went are the scheduler's to find.
    pub(super) async fn collect_orphan(&self, k: &Key, run: &Run) {
        let Some(l) = run.metadata.labels.as_ref() else {
            return;
        };
        let marks = &self.config.marks;
        match (l.get(labels::WORKFLOW), l.get(labels::SCHEDULE)) {
            (Some(workflow), Some(name)) if schedule::started_by(marks, run, workflow, name) => {
                let wf = self.workflows.get(&k.namespace, workflow).await;
                if schedule::keeps_history(wf.as_ref(), name) {
                    return;
                }
            }
            _ if l.contains_key(labels::ROOT) && crate::steps::child::sealed_child(marks, run) => {
                return;
            }
            _ if l.contains_key(labels::SCHEDULE) || l.contains_key(labels::ROOT) => {}
            _ => return,
        }
        let Some(at) = schedule::orphan_delete_at(run) else {
            return;
        };
        if at <= Timestamp::now() {
            self.collect(k, run).await;
        } else {
            self.queue.add_at(k.clone(), super::work::instant_at(at));
        }
    }

    /// Delete `decided`, a finished Run whose time to live is over, and the child Runs below
    /// it (they are kept as long as their top-level Run: they are the count that bounds its
    /// tree). It is read again for the archive; a Run that has taken its name since is not it.
    pub(super) async fn collect(&self, k: &Key, decided: &Run) {
        let run = match self.store.get(&k.namespace, &k.name).await {
            Ok(Some(run))
                if run.metadata.uid == decided.metadata.uid && run.phase().is_terminal() =>
            {
                run
            }
            Ok(_) => return,
            Err(e) => return self.retry_later(k, e),
        };
        let archive = self.config.archive.as_deref();
        match retire_tree(&*self.store, archive, &self.config.marks, &run).await {
            Ok(()) => {
                tracing::info!(namespace = %k.namespace, run = %k.name, "finished run garbage-collected");
            }
            Err(RetireError::Store(e)) => self.retry_later(k, e),
            Err(e @ RetireError::Changed(_)) => {
                tracing::debug!(namespace = %k.namespace, run = %k.name, reason = %e, "finished run read again before it is deleted");
                self.queue.add_at(k.clone(), Instant::now() + CHANGED_RETRY);
            }
            Err(e @ RetireError::Unfinished(_)) => {
                tracing::debug!(namespace = %k.namespace, run = %k.name, reason = %e, "finished run kept until its children have finished");
                self.queue
                    .add_at(k.clone(), Instant::now() + CHILDREN_RETRY);
            }
            Err(RetireError::Archive { run, name, source }) => {
                self.config.metrics.reconcile_error(ErrorKind::Archive);
                tracing::error!(namespace = %k.namespace, run = %name, error = %source, "cannot archive a finished run; it is kept until it can be");
                self.events.record(
                    &run,
                    &Event {
                        reason: crate::api::event_reasons::ARCHIVE_FAILED,
                        message: format!("not deleted yet: {source}"),
                        warning: true,
                    },
                );
                self.queue.add_at(k.clone(), Instant::now() + ARCHIVE_RETRY);
            }
        }
    }
}
