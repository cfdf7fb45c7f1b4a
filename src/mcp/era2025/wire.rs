//! The 2025-era wire: JSON-RPC messages as whole HTTP responses or SSE events, and the
//! reshaping of results built for 2026-07-28 (the same rmcp types) into what older revisions
//! define — no `resultType`, no cache hints.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::sse::Event;
use axum::response::{IntoResponse, Response};
use jiff::Timestamp;
use rmcp::model::{ErrorData, TaskStatus};
use serde::Serialize;
use serde_json::{Value, json};

use crate::api::{Run, WorkflowSpec};
use crate::mcp::projection::{self, Shown};
use crate::protocol::HEADER_SESSION_ID;

/// Fields that 2026-07-28 added to results and older revisions do not have.
const NEWER_RESULT_FIELDS: [&str; 3] = ["resultType", "ttlMs", "cacheScope"];

/// `value` (a result built for 2026-07-28) as an older revision shapes it.
pub(crate) fn older(value: impl Serialize) -> Value {
    let mut value = serde_json::to_value(value).unwrap_or_else(|_| json!({}));
    if let Value::Object(m) = &mut value {
        for f in NEWER_RESULT_FIELDS {
            m.remove(f);
        }
    }
    value
}

/// A JSON-RPC response carrying `result`.
pub(crate) fn result(id: &Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

/// A JSON-RPC error response.
pub(crate) fn error(id: &Value, e: &ErrorData) -> Value {
    let mut error = json!({"code": e.code.0, "message": e.message});
    if let Some(data) = &e.data {
        error["data"] = data.clone();
    }
    json!({"jsonrpc": "2.0", "id": id, "error": error})
}

/// A JSON-RPC notification.
pub(crate) fn notification(method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "method": method, "params": params})
}

/// A JSON-RPC request the server sends the client.
pub(crate) fn request(id: &str, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

/// One message as an SSE event.
pub(crate) fn event(message: &Value) -> Event {
    Event::default().event("message").data(message.to_string())
}

/// One message as a whole JSON response.
pub(crate) fn json_response(status: StatusCode, message: &Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        message.to_string(),
    )
        .into_response()
}

/// `202 Accepted` with no body: what a notification or a response the client sends gets.
pub(crate) fn accepted() -> Response {
    StatusCode::ACCEPTED.into_response()
}

/// A whole JSON response naming the session it belongs to.
pub(crate) fn with_session(mut resp: Response, session_id: &str) -> Response {
    if let Ok(v) = HeaderValue::from_str(session_id) {
        resp.headers_mut().insert(HEADER_SESSION_ID, v);
    }
    resp
}

/// A Run as this revision's task: the 2026 projection's status, message and times, with
/// `ttl` (always there: null while there is no expiry) and `pollInterval` under their older
/// names. Borrowed from the Run, for the hot `tasks/get` to write it without copies.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct OldTask<'a> {
    task_id: &'a str,
    status: &'a TaskStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    status_message: Option<&'a str>,
    created_at: Shown<Timestamp>,
    last_updated_at: Shown<Timestamp>,
    ttl: Option<u64>,
    poll_interval: u64,
}

impl<'a> OldTask<'a> {
    /// The task `view` shows. A task whose cancel was taken is `cancelled` at once: 2025-11-25
    /// has `tasks/cancel` move it there before it answers, and a Run with a cancel ends
    /// cancelled whatever it still runs (`finally`), so the status never changes again. A tool
    /// error (`isError: true`) is `failed`, as that revision has it.
    pub(crate) fn of(view: &'a projection::TaskView<'a>) -> Self {
        let ending = matches!(
            view.status,
            TaskStatus::Completed | TaskStatus::Failed | TaskStatus::Cancelled
        );
        Self {
            task_id: view.task_id,
            status: if view.tool_error {
                &TaskStatus::Failed
            } else if view.cancel_requested && !ending {
                &TaskStatus::Cancelled
            } else {
                &view.status
            },
            status_message: view.status_message,
            created_at: Shown(view.created_at),
            last_updated_at: Shown(view.last_updated_at),
            ttl: view.ttl_ms,
            poll_interval: view.poll_interval_ms,
        }
    }
}

/// [`OldTask`] of `run`, as a value.
pub(crate) fn task(run: &Run, live: Option<&WorkflowSpec>) -> Value {
    let view = projection::view(run, live);
    serde_json::to_value(OldTask::of(&view)).unwrap_or_else(|_| json!({}))
}

/// The `CreateTaskResult` of a task-augmented `tools/call`: the task as it begins, `working`
/// with no message and no `ttl` (2025-11-25 has every task begin there), even when the Run got
/// further before the answer (a call that found its Run by idempotency key, a Run that asked
/// at once); `tasks/get` shows where it is.
pub(crate) fn created(run: &Run, live: Option<&WorkflowSpec>) -> Value {
    let view = projection::view(run, live);
    let mut task = OldTask::of(&view);
    // As it begins: no message of a later state, and no expiry (it has not ended).
    task.status = &TaskStatus::Working;
    task.status_message = None;
    task.ttl = None;
    json!({ "task": task })
}

/// The `_meta` of a request's params.
pub(crate) fn meta(params: &Value) -> Option<&serde_json::Map<String, Value>> {
    params.get("_meta").and_then(Value::as_object)
}

/// Whether a form's `requestedSchema` is one a client of 2025-06-18 or 2025-03-26 can show: in
/// those revisions a field is a string, a number or integer, a boolean or a single choice of
/// plain `enum` values, with no `default` but on a boolean, no titled choices and no
/// multi-select, which came with 2025-11-25. A client that checks what it is sent refuses
/// anything else, and its refusal would read as the person declining.
pub(crate) fn older_form(schema: &Value) -> bool {
    let known = |field: &Value| {
        let Some(f) = field.as_object() else {
            return false;
        };
        let keys: &[&str] = match f.get("type").and_then(Value::as_str) {
            Some("string") if f.contains_key("enum") => {
                &["type", "title", "description", "enum", "enumNames"]
            }
            Some("string") => &[
                "type",
                "title",
                "description",
                "minLength",
                "maxLength",
                "format",
            ],
            Some("number" | "integer") => &["type", "title", "description", "minimum", "maximum"],
            Some("boolean") => &["type", "title", "description", "default"],
            _ => return false,
        };
        f.keys().all(|k| keys.contains(&k.as_str()))
    };
    let fields = schema.get("properties").and_then(Value::as_object);
    fields.is_none_or(|f| f.values().all(known))
}
