//! The tasks of revision 2025-11-25 on the same Runs as the 2026 extension: `tasks/get`,
//! `tasks/result` (held until the Run ends, asking its questions on the stream),
//! `tasks/list` (the caller's tasks, newest first, paged) and `tasks/cancel`. The owner rule
//! and the one "unknown task" answer are the same as in 2026-07-28.

use std::sync::Arc;

use axum::http::StatusCode;
use axum::response::Response;
use rmcp::model::ErrorData;
use serde_json::{Value, json};

use super::held::{Asker, Held};
use super::session::Session;
use super::wire::{self, json_response, task};
use crate::api::Run;
use crate::auth::{Resource, Verb};
use crate::mcp::access::{
    Access, allowed, answered, awaits_answer_from, is_owner, readable_run, task_run,
};
use crate::mcp::config::TaskAccess;
use crate::mcp::cursor::{Position, place};
use crate::mcp::errors::{err, forbidden, internal, invalid, unknown_task};
use crate::mcp::handler::RunwayMcp;
use crate::mcp::state::Tenant;
use crate::mcp::tasks::live_spec;
use crate::protocol::{
    METHOD_CANCEL_TASK, METHOD_GET_TASK, METHOD_LIST_TASKS, METHOD_TASK_RESULT, codes,
};

/// Tasks in one page of `tasks/list`.
const PAGE: usize = 50;

/// Serve one `tasks/*` request (`token`: the bearer token it came with).
#[allow(clippy::too_many_arguments)]
pub(crate) async fn serve(
    mcp: RunwayMcp,
    t: Tenant,
    session: Session,
    bound: String,
    id: Value,
    method: &str,
    params: Value,
    token: Option<Arc<str>>,
) -> Response {
    let task_id = params
        .get("taskId")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let outcome = match (method, task_id) {
        (METHOD_LIST_TASKS, _) => list(&mcp, &t, &params).await,
        (_, None) if method != METHOD_LIST_TASKS => {
            Err(invalid(format!("{method}: params.taskId must be a string")))
        }
        (METHOD_GET_TASK, Some(task_id)) => get(&mcp, &t, &task_id).await,
        (METHOD_CANCEL_TASK, Some(task_id)) => cancel(&mcp, &t, &task_id).await,
        (METHOD_TASK_RESULT, Some(task_id)) => {
            return match watches(&mcp, &t, &task_id).await {
                Ok(watches) => {
                    let asker = Asker { token, watches };
                    Held::result(mcp, t, session, bound, id, task_id, asker)
                }
                Err(e) => json_response(StatusCode::OK, &wire::error(&id, &e)),
            };
        }
        (other, _) => Err(err(
            codes::METHOD_NOT_FOUND,
            format!("method not found: {other}"),
            None,
        )),
    };
    let message = match outcome {
        Ok(result) => wire::result(&id, result),
        Err(e) => wire::error(&id, &e),
    };
    json_response(StatusCode::OK, &message)
}

/// For a `tasks/result` of `task_id`, a task the caller may read: whether the caller may also
/// watch Runs, and so be told the task's status on the stream as it changes.
async fn watches(mcp: &RunwayMcp, t: &Tenant, task_id: &str) -> Result<bool, ErrorData> {
    readable_run(&mcp.state, t, task_id)
        .await?
        .ok_or_else(unknown_task)?;
    // Only the status updates depend on it: a review that cannot answer now leaves them out.
    Ok(allowed(&mcp.state, t, Verb::Watch, Resource::Runs)
        .await
        .unwrap_or(false))
}

/// `tasks/get`: the task, flat.
async fn get(mcp: &RunwayMcp, t: &Tenant, task_id: &str) -> Result<Value, ErrorData> {
    let run = readable_run(&mcp.state, t, task_id)
        .await?
        .ok_or_else(unknown_task)?;
    let live = live_spec(&mcp.state, &run).await;
    Ok(task(&run, live.as_ref()))
}

/// `tasks/cancel`: record the intent and answer the task as it is now. A finished task cannot
/// be cancelled (this revision says so with `-32602`).
async fn cancel(mcp: &RunwayMcp, t: &Tenant, task_id: &str) -> Result<Value, ErrorData> {
    let run = task_run(&mcp.state, t, task_id, Access::Cancel)
        .await?
        .ok_or_else(unknown_task)?;
    // A task whose cancel was taken shows as `cancelled`, a terminal status, already; decided
    // again where the cancel is written, so that a cancel racing another, or the Run's end,
    // is told so too.
    let ended = || {
        invalid(format!(
            "cannot cancel task {task_id}: it has already ended"
        ))
    };
    if run.phase().is_terminal() || run.spec.cancel.is_some() {
        return Err(ended());
    }
    if !mcp
        .cancel_task_of(t, task_id, "requested via tasks/cancel")
        .await?
    {
        return Err(ended());
    }
    let run = mcp.stored_run(t, task_id).await?;
    let live = live_spec(&mcp.state, &run).await;
    Ok(task(&run, live.as_ref()))
}

/// `tasks/list`: the Runs the caller may read, newest first, a page at a time.
async fn list(mcp: &RunwayMcp, t: &Tenant, params: &Value) -> Result<Value, ErrorData> {
    let state = &mcp.state;
    if !allowed(state, t, Verb::Get, Resource::Runs).await? {
        return Err(forbidden(t, Verb::Get, Resource::Runs));
    }
    let after = match params.get("cursor") {
        None | Some(Value::Null) => None,
        Some(Value::String(c)) => {
            Some(Position::decode(c).ok_or_else(|| invalid("invalid cursor"))?)
        }
        Some(_) => return Err(invalid("cursor must be a string")),
    };
    let sees_all = state.config.task_access == TaskAccess::Namespace
        || allowed(state, t, Verb::List, Resource::Runs).await?;
    let runs = state
        .store
        .list(Some(&t.namespace), &Default::default())
        .await
        .map_err(internal)?;
    let me = &t.identity.principal;
    let mut found: Vec<&Run> = runs
        .iter()
        .map(|r| &**r)
        // What `tasks/get` would show this caller: its own, those whose open questions name
        // it, those it answered (2025-11-25: retrievable by one means listed by the other).
        .filter(|r| sees_all || is_owner(r, me) || awaits_answer_from(r, me) || answered(r, me))
        .filter(|r| after.as_ref().is_none_or(|p| place(r) < p.place()))
        .collect();
    found.sort_by(|x, y| place(y).cmp(&place(x)));
    let more = found.len() > PAGE;
    found.truncate(PAGE);
    let mut tasks = Vec::with_capacity(found.len());
    for run in &found {
        let live = live_spec(state, run).await;
        tasks.push(task(run, live.as_ref()));
    }
    let mut result = json!({ "tasks": tasks });
    if more && let Some(last) = found.last() {
        result["nextCursor"] = json!(Position::of(last).encode());
    }
    Ok(result)
}
