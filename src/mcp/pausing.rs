//! `runway_pause_run` and `runway_resume_run`: record a pause or resume request in a Run's
//! `spec.pause`, for whoever may cancel the Run (RBAC `update runs` and the owner rule).

use jiff::Timestamp;
use rmcp::model::ErrorData;

use super::access::{Access, task_run};
use super::errors::{internal, invalid, unknown_task};
use super::handler::RunwayMcp;
use super::state::Tenant;
use crate::api::{PauseRequest, Run};
use crate::store::StoreError;

/// What a pause or resume request came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Paused {
    /// Recorded; the controller acts on it.
    Requested,
    /// Nothing to do: already paused (for a pause) or not paused (for a resume).
    Already,
}

/// Why a Run takes no pause or resume now, or `None` when it does.
fn refusal(run: &Run, task_id: &str) -> Option<String> {
    if run.phase().is_terminal() {
        return Some(format!(
            "task {task_id} has finished; it cannot be paused or resumed"
        ));
    }
    run.spec
        .cancel
        .is_some()
        .then(|| format!("task {task_id} is being cancelled; it cannot be paused or resumed"))
}

/// Whether `run` already is as a request for `paused` would leave it.
fn already(run: &Run, paused: bool) -> bool {
    let asked = run.spec.pause.as_ref().map(|p| p.paused);
    let held = run.status.as_ref().is_some_and(|s| s.paused.is_some());
    if paused {
        asked == Some(true)
    } else {
        asked != Some(true) && !held
    }
}

impl RunwayMcp {
    /// Pause (`paused`) or resume the caller's task `task_id`. `Ok` only once the request is
    /// durable; a finished or cancelled Run is refused with why.
    pub(super) async fn pause_task_of(
        &self,
        t: &Tenant,
        task_id: &str,
        paused: bool,
        reason: Option<&str>,
    ) -> Result<Paused, ErrorData> {
        task_run(&self.state, t, task_id, Access::Cancel)
            .await?
            .ok_or_else(unknown_task)?;
        let reason = reason.map(|r| super::tasks::bounded_reason(r).to_owned());
        for _ in 0..crate::store::MAX_CONFLICT_RETRIES {
            let mut run = self.stored_run(t, task_id).await?;
            if let Some(why) = refusal(&run, task_id) {
                return Err(invalid(why));
            }
            if already(&run, paused) {
                return Ok(Paused::Already);
            }
            run.spec.pause = Some(PauseRequest {
                paused,
                reason: reason.clone(),
                requested_by: Some(t.identity.principal.username.clone()),
                requested_at: Some(Timestamp::now().to_string()),
            });
            match self.state.store.update(run).await {
                Err(StoreError::Conflict) => continue,
                Err(StoreError::NotFound) => return Err(unknown_task()),
                Err(e) => return Err(internal(e)),
                Ok(_) => {
                    tracing::info!(namespace = %t.namespace, run = task_id, by = %t.identity.principal.username, paused, "pause requested");
                    return Ok(Paused::Requested);
                }
            }
        }
        Err(internal(StoreError::Conflict))
    }
}
