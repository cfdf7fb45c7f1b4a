//! `tasks/get`, `tasks/update` and `tasks/cancel` on Runs.

use std::collections::BTreeMap;

use jiff::Timestamp;
use rmcp::RoleServer;
use rmcp::model::{ErrorData, GetTaskParams, GetTaskResult};
use rmcp::service::RequestContext;
use serde_json::{Value, json};

use super::access::{Access, awaiting_answer_from, readable_run, task_run};
use super::caller::tenant;
use super::errors::{internal, unknown_task};
use super::handler::RunwayMcp;
use super::projection;
use super::state::{McpState, Tenant};
use crate::api::{CancelRequest, Run};
use crate::protocol::META_AWAITING_YOU;
use crate::store::StoreError;

/// First pause before a read at the source that failed is tried again, and the longest.
const READ_AGAIN: std::time::Duration = std::time::Duration::from_secs(1);
const READ_AGAIN_MAX: std::time::Duration = std::time::Duration::from_secs(8);

/// The Workflow spec of a Run that has no snapshot yet (only just created).
pub(super) async fn live_spec(state: &McpState, run: &Run) -> Option<crate::api::WorkflowSpec> {
    if run.status.as_ref().is_some_and(|s| s.workflow.is_some()) {
        return None;
    }
    let ns = run.metadata.namespace.as_deref().unwrap_or_default();
    state
        .workflows
        .get(ns, &run.spec.workflow_ref.name)
        .await
        .map(|w| w.spec)
}

/// The progress a held call owes its client for `run`: (progress, total, message) when the
/// step count or the message changed since `sent`; `sent` remembers it. One rule for held calls
/// of both protocol eras.
///
/// The protocol wants `progress` to increase with every notification. The finished steps
/// count it; a new message within the same step (an item done, a question asked) moves it half
/// the way left to the next step, so it still increases and never reaches a step that has not
/// finished (nor `total`). When no increase is left to show, the message waits for the next step.
pub(super) fn progress_due(
    run: &Run,
    sent: &mut Option<(f64, String)>,
) -> Option<(f64, f64, String)> {
    let (done, total) = step_progress(run);
    let msg = run
        .status
        .as_ref()
        .and_then(|s| s.status_message.clone())
        .unwrap_or_else(|| "queued".into());
    let progress = match sent.as_ref() {
        None => done,
        Some((last, _)) if done > *last => done,
        Some((_, told)) if *told == msg => return None,
        Some((last, _)) if done.floor() < last.floor() => return None,
        Some((last, _)) => {
            let half = last + ((done + 1.0).min(total) - last) / 2.0;
            if half <= *last {
                return None;
            }
            half
        }
    };
    *sent = Some((progress, msg.clone()));
    Some((progress, total, msg))
}

/// (finished main steps, total main steps) of a Run; finished Runs are complete.
pub(super) fn step_progress(run: &Run) -> (f64, f64) {
    let Some(wf) = run.workflow_snapshot() else {
        return (0.0, 1.0);
    };
    let total = wf.steps.len().max(1) as f64;
    if run.phase().is_terminal() {
        return (total, total);
    }
    let done = run
        .status
        .as_ref()
        .map(|s| {
            s.steps
                .iter()
                .filter(|r| !r.finally && r.phase.is_terminal())
                .count()
        })
        .unwrap_or(0) as f64;
    (done, total)
}

impl RunwayMcp {
    /// Run `name` of the caller's namespace as the store has it now; "unknown task" when gone.
    /// Callers have checked the caller's rights to it.
    pub(super) async fn stored_run(&self, t: &Tenant, name: &str) -> Result<Run, ErrorData> {
        self.state
            .store
            .get(&t.namespace, name)
            .await
            .map_err(internal)?
            .ok_or_else(unknown_task)
    }

    /// Run `name` read at the source, after a gap the change feed could not vouch for (a cache
    /// may not have caught up either). A read that fails is tried again for a while (1 s
    /// doubling to 8 s), since the Run goes on meanwhile; gone is the unknown task.
    pub(super) async fn stored_run_now(&self, t: &Tenant, name: &str) -> Result<Run, ErrorData> {
        let mut pause = READ_AGAIN;
        loop {
            match self.state.store.get_now(&t.namespace, name).await {
                Ok(Some(run)) => return Ok(std::sync::Arc::unwrap_or_clone(run)),
                Ok(None) => return Err(unknown_task()),
                Err(e) if pause > READ_AGAIN_MAX => return Err(internal(e)),
                Err(_) => {
                    tokio::time::sleep(pause).await;
                    pause *= 2;
                }
            }
        }
    }

    /// Record the cancel intent in `spec.cancel` (once). `Ok` only when it is durable (or the
    /// Run is gone, finished or already cancelled): whether this call recorded it, decided on
    /// the version written, so that of two cancels, or a cancel and the Run's end, racing, one
    /// answer says which came first.
    pub(super) async fn cancel(
        &self,
        t: &Tenant,
        name: &str,
        reason: &str,
    ) -> Result<bool, StoreError> {
        let reason = bounded_reason(reason);
        for _ in 0..crate::store::MAX_CONFLICT_RETRIES {
            let Some(mut run) = self.state.store.get(&t.namespace, name).await? else {
                return Ok(false);
            };
            if run.spec.cancel.is_some() || run.phase().is_terminal() {
                return Ok(false);
            }
            run.spec.cancel = Some(CancelRequest {
                reason: Some(reason.to_owned()),
                requested_by: Some(t.identity.principal.username.clone()),
                requested_at: Some(Timestamp::now().to_string()),
            });
            match self.state.store.update(run).await {
                Err(StoreError::Conflict) => continue,
                Err(StoreError::NotFound) => return Ok(false),
                Err(e) => {
                    tracing::error!(run = name, error = %e, "cannot record cancellation");
                    return Err(e);
                }
                Ok(_) => {
                    tracing::info!(namespace = %t.namespace, run = name, by = %t.identity.principal.username, reason, "cancel requested");
                    return Ok(true);
                }
            }
        }
        Err(StoreError::Conflict)
    }

    /// `tasks/update` (and the console's answers): record the answers to open questions of a
    /// task the caller may answer. A finished task takes no answers and says nothing.
    pub(super) async fn update_task_of(
        &self,
        t: &Tenant,
        task_id: &str,
        responses: &BTreeMap<String, Value>,
    ) -> Result<(), ErrorData> {
        let run = task_run(&self.state, t, task_id, Access::Answer)
            .await?
            .ok_or_else(unknown_task)?;
        if run.phase().is_terminal() {
            return Ok(());
        }
        self.answer(t, task_id, responses).await?.into_result()
    }

    /// `tasks/cancel` (and the console's cancel button): acknowledged only once the intent is
    /// durable; a store failure is an error, not an acknowledgement.
    pub(super) async fn cancel_task_of(
        &self,
        t: &Tenant,
        task_id: &str,
        reason: &str,
    ) -> Result<bool, ErrorData> {
        task_run(&self.state, t, task_id, Access::Cancel)
            .await?
            .ok_or_else(unknown_task)?;
        self.cancel(t, task_id, reason).await.map_err(internal)
    }

    /// `tasks/get` through rmcp (requests the fast path declined).
    pub(super) async fn get(
        &self,
        request: GetTaskParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        get_task(&self.state, &tenant(&ctx)?, &request.task_id).await
    }
}

/// What a `tasks/get` found: the Run, the Workflow it starts from while it has no snapshot,
/// and the `_meta` of the answer.
pub(super) struct FoundTask {
    /// The Run the task is.
    pub run: std::sync::Arc<Run>,
    /// Its Workflow, while the Run has no snapshot of its own.
    pub live: Option<crate::api::WorkflowSpec>,
    /// Which open questions wait for the caller, when any are open.
    pub meta: Option<rmcp::model::MetaObject>,
}

/// `tasks/get`: the task, and which open questions wait for the caller. One function for both
/// ways a request arrives (rmcp, or the fast path in front of it, which writes the task from
/// it without copying).
pub(super) async fn find_task(
    state: &McpState,
    t: &Tenant,
    task_id: &str,
) -> Result<FoundTask, ErrorData> {
    let run = readable_run(state, t, task_id)
        .await?
        .ok_or_else(unknown_task)?;
    let live = live_spec(state, &run).await;
    // Present (possibly empty) whenever questions are open, so a client can tell "none of
    // them is yours" from a server that does not say.
    let meta = awaiting_answer_from(state, t, &run).await.map(|awaiting| {
        let mut meta = rmcp::model::MetaObject::default();
        meta.0.insert(META_AWAITING_YOU.into(), json!(awaiting));
        meta
    });
    Ok(FoundTask { run, live, meta })
}

/// [`find_task`] as rmcp's result.
pub(super) async fn get_task(
    state: &McpState,
    t: &Tenant,
    task_id: &str,
) -> Result<GetTaskResult, ErrorData> {
    let found = find_task(state, t, task_id).await?;
    let mut result = GetTaskResult::new(projection::project(&found.run, found.live.as_ref()));
    result.meta = found.meta;
    Ok(result)
}

/// Longest cancel reason kept (characters): it is stored on the Run and logged.
pub(crate) const MAX_CANCEL_REASON: usize = 1024;

/// `reason`, cut to [`MAX_CANCEL_REASON`] characters.
pub(super) fn bounded_reason(reason: &str) -> &str {
    match reason.char_indices().nth(MAX_CANCEL_REASON) {
        Some((at, _)) => &reason[..at],
        None => reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run_at(done_steps: usize, message: &str) -> Run {
        let steps: Vec<_> = (0..4)
            .map(|i| json!({"name": format!("s{i}"), "delay": {"duration": "1s"}}))
            .collect();
        let records: Vec<_> = (0..done_steps)
            .map(|i| json!({"name": format!("s{i}"), "phase": "Succeeded"}))
            .collect();
        serde_json::from_value(json!({
            "apiVersion": "runway.dev/v1alpha1", "kind": "Run",
            "metadata": {"name": "r", "namespace": "n"},
            "spec": {"workflowRef": {"name": "w"}},
            "status": {"phase": "Running", "statusMessage": message, "steps": records,
                       "workflow": {"steps": steps}},
        }))
        .unwrap()
    }

    #[test]
    fn progress_increases_with_every_notification_and_stays_below_the_next_step() {
        let mut sent = None;
        let mut told = Vec::new();
        for (done, message) in [
            (0, "queued"),
            (0, "step 1/4"),
            (0, "step 1/4"),
            (0, "step 1/4: 1/10 items"),
            (0, "step 1/4: 2/10 items"),
            (1, "step 2/4"),
            (1, "step 2/4: asking"),
            (4, "done"),
            (4, "done, really"),
        ] {
            if let Some((p, total, _)) = progress_due(&run_at(done, message), &mut sent) {
                assert_eq!(total, 4.0);
                told.push((p, done));
            }
        }
        assert_eq!(told.len(), 7, "{told:?}");
        for pair in told.windows(2) {
            assert!(pair[1].0 > pair[0].0, "{told:?}");
        }
        // Never past a step that has not finished, nor past the total.
        for (p, done) in &told {
            let done = *done as f64;
            assert!(*p >= done && (*p < done + 1.0 || *p == 4.0), "{told:?}");
        }
    }
}
