//! What comes before a Run's first decision: standing in line for a paused Workflow, and
//! taking over the records a retry reuses from the Run it retries.

use std::sync::Arc;

use jiff::Timestamp;

use super::queue::Key;
use super::{Controller, OnRefusal, Wrote};
use crate::api::{Run, Workflow};
use crate::engine::retry::{self, RetryRefusal};

impl Controller {
    /// `run` made ready for its decision, or `None` when this reconcile ends here (a refused
    /// retry was failed, or the store must be asked again later). Only a Run that has not
    /// started (`live` is its Workflow) is touched.
    pub(super) async fn before_start(
        self: &Arc<Self>,
        k: &Key,
        mut run: Arc<Run>,
        live: Option<&Workflow>,
    ) -> Option<Arc<Run>> {
        let Some(wf) = live else {
            return Some(run);
        };
        // Its Workflow paused: in line to be woken when that changes.
        if wf.spec.suspend {
            self.waiting.join(k, &run);
        } else {
            self.waiting.leave(k, &run);
        }
        let Some(of) = run.spec.retry_of.clone() else {
            return Some(run);
        };
        let original = match self.store.get(&k.namespace, &of.name).await {
            Ok(o) => o,
            Err(e) => {
                self.retry_later(k, e);
                return None;
            }
        };
        let planned = match &original {
            Some(o) => retry::plan(&run, o, &wf.spec),
            None => Err(RetryRefusal::NotFound(of.name.clone())),
        };
        match planned {
            // Written with the Run's first status, together with its snapshot, or not at all.
            Ok(records) => {
                Arc::make_mut(&mut run).status.get_or_insert_default().steps = records;
                Some(run)
            }
            Err(why) => {
                let decision = retry::refuse(&run, &why, Timestamp::now());
                if let Some(status) = decision.status {
                    let wrote = self
                        .write_status(k, &run, status, &decision.events, OnRefusal::FailRun)
                        .await;
                    if let Wrote::Conflict = wrote {
                        self.queue.add(k.clone());
                    }
                }
                None
            }
        }
    }
}
