//! A Run's first decision taken before its create, where the store writes a Run and its status
//! in one write: a Run that finishes at once is then one durable write instead of two, and a
//! `tools/call` answers after one commit instead of queueing behind another Run's status.

use std::sync::Arc;

use async_trait::async_trait;
use jiff::Timestamp;

use super::EventSink;
use super::work::{decide, transitions};
use crate::api::{Run, Workflow};
use crate::store::{RunStore, StartRun, StoreError};
use crate::telemetry::Metrics;

/// Creates the Runs that calls ask for, deciding their first status as the controller's
/// reconcile would, and recording what that status tells (Events, metrics) as a status write
/// does. The controller still drives every Run from there: the watch brings it the created Run,
/// whose next decision finds this status already written and acts on what follows.
pub struct Starter {
    store: Arc<dyn RunStore>,
    events: Arc<dyn EventSink>,
    metrics: Metrics,
}

impl std::fmt::Debug for Starter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Starter")
            .field("creates_with_status", &self.store.creates_with_status())
            .finish_non_exhaustive()
    }
}

impl Starter {
    /// A starter over `store`, recording Events in `events` and counts in `metrics` (the
    /// controller's own, so that a Run started here is counted once, as any other).
    pub fn new(store: Arc<dyn RunStore>, events: Arc<dyn EventSink>, metrics: Metrics) -> Self {
        Self {
            store,
            events,
            metrics,
        }
    }
}

/// Whether `run` starts from `workflow` at once, with nothing else to consult: a paused
/// Workflow queues its Runs, a concurrency limit reads the other Runs, a retry takes over
/// another Run's records, and a Workflow not Ready at its generation is the reconcile's to judge.
fn starts_alone(run: &Run, workflow: &Workflow) -> bool {
    workflow.is_ready()
        && !workflow.spec.suspend
        && workflow.spec.execution.concurrency.is_none()
        && run.spec.retry_of.is_none()
        && run.status.is_none()
}

#[async_trait]
impl StartRun for Starter {
    async fn start(&self, mut run: Run, workflow: &Workflow) -> Result<Run, StoreError> {
        if !self.store.creates_with_status() || !starts_alone(&run, workflow) {
            return self.store.create(run).await;
        }
        // What the store would set, set before the decision that may read it.
        let m = &mut run.metadata;
        m.uid = Some(crate::store::new_uid());
        m.generation = Some(1);
        m.creation_timestamp = Some(crate::api::kube_time(Timestamp::now()));
        let requested = Arc::new(run);
        let decision = decide(&requested, Some(&workflow.spec)).await;
        let mut run = Arc::unwrap_or_clone(requested);
        let Some(status) = decision.status else {
            return self.store.create(run).await;
        };
        run.status = Some(status);
        let written = self.store.create_started(run).await?;
        for e in &decision.events {
            self.events.record(&written, e);
        }
        transitions(&self.metrics, None, &written);
        Ok(written)
    }
}
