//! How the controller gives up on a Run it cannot drive: a status the store refuses, a
//! reconcile that panicked, or a store error to try again after.

use tokio::time::Instant;

use jiff::Timestamp;

use super::queue::Key;
use super::{Controller, MAX_CYCLES, OnRefusal, STORE_RETRY, Wrote};
use crate::engine;
use crate::store::StoreError;
use crate::telemetry::ErrorKind;

impl Controller {
    /// Fail the Run whose status the store refused (a write retried forever would never be
    /// accepted either).
    pub(super) async fn fail_refused(&self, k: &Key, why: &str) {
        tracing::error!(namespace = %k.namespace, run = %k.name, error = %why, "the store refused the run's status; failing the run");
        self.fail_internal(
            k,
            format!("the store refused the run's status: {why}"),
            ErrorKind::Refused,
        )
        .await;
    }

    /// Fail the Run whose reconcile panicked. A Run that is already finished is left alone.
    pub(super) async fn fail_after_panic(&self, k: &Key, why: String) {
        tracing::error!(namespace = %k.namespace, run = %k.name, panic = %why, "reconcile panicked; failing the run");
        self.inflight.forget(k);
        self.outcomes.lock().expect("outcomes lock").remove(k);
        self.fail_internal(k, why, ErrorKind::Panic).await;
    }

    /// Fail the Run with an internal error (`why`), counted as `kind`. A finished Run stays
    /// as it is, but gives up the cleanups it was still performing: one of them is what
    /// failed, and would fail again.
    async fn fail_internal(&self, k: &Key, why: String, kind: ErrorKind) {
        self.config.metrics.reconcile_error(kind);
        for _ in 0..MAX_CYCLES {
            let run = match self.store.get(&k.namespace, &k.name).await {
                Ok(Some(run)) => run,
                Ok(None) => return,
                Err(e) => return self.retry_later(k, e),
            };
            let status = if run.phase().is_terminal() {
                match engine::give_up_cleanups(&run) {
                    Some(status) => status,
                    None => return,
                }
            } else {
                engine::fail_internal(&run, &why, Timestamp::now())
            };
            match self
                .write_status(k, &run, status, &[], OnRefusal::GiveUp)
                .await
            {
                Wrote::Conflict => continue,
                Wrote::Run(_) | Wrote::Gone | Wrote::Refused | Wrote::Later => return,
            }
        }
    }

    /// Reconcile the Run again after [`STORE_RETRY`]: the store failed.
    pub(super) fn retry_later(&self, k: &Key, e: StoreError) {
        self.config.metrics.reconcile_error(ErrorKind::Store);
        tracing::error!(namespace = %k.namespace, run = %k.name, error = %e, "store error; will retry");
        self.queue.add_at(k.clone(), Instant::now() + STORE_RETRY);
    }
}
