//! The 2025 era's `tasks/get`, answered before the message is parsed into a `Value`: clients
//! of that era poll it as much as 2026 clients poll theirs, and the general path reads the
//! whole message as a `Value` and builds the answer as one. Only a request of exactly this
//! shape is answered here — `{jsonrpc, id, method: "tasks/get", params: {taskId}}` with a
//! string or integer id, from a session this server issued to the caller on this path, that
//! negotiated the revision's tasks, for a task the caller may read; anything else (an unknown
//! task among them) goes the general way. `tests/integration/mcp_endpoint/era2025.rs` compares
//! both answers.

use std::borrow::Cow;
use std::rc::Rc;

use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::Value;

use super::opened;
use super::wire::OldTask;
use crate::mcp::access::readable_run;
use crate::mcp::fast::Envelope;
use crate::mcp::headers::only;
use crate::mcp::projection;
use crate::mcp::rendered::{self, Shape};
use crate::mcp::state::{McpState, Tenant};
use crate::mcp::tasks::live_spec;
use crate::protocol::{HEADER_PROTOCOL_VERSION, HEADER_SESSION_ID, METHOD_GET_TASK};

/// `tasks/get`'s params in this revision: the task id alone.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Params<'a> {
    #[serde(rename = "taskId", borrow)]
    task_id: Cow<'a, str>,
}

/// Answer the 2025-era `tasks/get` in `body` of `tenant` on `path`, if it has this path's
/// shape; `None` sends it the general way.
pub(crate) async fn get_task(
    state: &McpState,
    tenant: &Tenant,
    path: &str,
    headers: &HeaderMap,
    body: &[u8],
) -> Option<Response> {
    // With traces exported, the general path names the request's span.
    if crate::telemetry::enabled() {
        return None;
    }
    let sealed = only(headers, HEADER_SESSION_ID)?;
    let get: Envelope<Params> = serde_json::from_slice(body).ok()?;
    if get.jsonrpc != "2.0" || get.method != METHOD_GET_TASK {
        return None;
    }
    // Echoed as the general path echoes it: a string or an integer only.
    let id: Value = match get.id.get().as_bytes().first()? {
        b'"' => Value::String(serde_json::from_str(get.id.get()).ok()?),
        _ => Value::from(serde_json::from_str::<i64>(get.id.get()).ok()?),
    };
    // The session is this thread's (`Rc`): it is read here, before the first wait.
    let serves_tasks = {
        let session = opened::open(state, sealed, &tenant.identity.principal.username, path)?;
        let version_agrees = match headers.get(HEADER_PROTOCOL_VERSION) {
            None => true,
            Some(v) => v.to_str().is_ok_and(|v| v.trim() == session.version),
        };
        version_agrees && session.has_tasks()
    };
    if !serves_tasks {
        return None;
    }
    // Anything but a Run to show (an error included) is the general path's to answer.
    let run = readable_run(state, tenant, &get.params.task_id)
        .await
        .ok()
        .flatten()?;
    let live = live_spec(state, &run).await;
    let write = || serde_json::to_vec(&OldTask::of(&projection::view(&run, live.as_ref())));
    let result = if live.is_some() {
        // Read with the Workflow as it is now: not this version's answer alone.
        write().map(Rc::from)
    } else {
        rendered::result_json(&run, Shape::Task2025, write)
    };
    let body = result
        .and_then(|result| rendered::response_json(&id, &result))
        .ok()?;
    state.config.metrics.request(METHOD_GET_TASK, 200);
    Some(
        (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            body,
        )
            .into_response(),
    )
}
