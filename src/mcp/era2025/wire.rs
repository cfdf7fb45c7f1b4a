//! The 2025-era wire: JSON-RPC messages as whole HTTP responses or SSE events, and the
//! reshaping of results built for 2026-07-28 (the same rmcp types) into what older revisions
//! define — no `resultType`, no cache hints.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::sse::Event;
use axum::response::{IntoResponse, Response};
use rmcp::model::ErrorData;
use serde::Serialize;
use serde_json::{Value, json};

use crate::api::{Run, WorkflowSpec};
use crate::mcp::projection;
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
/// `ttl` and `pollInterval` under their older names.
pub(crate) fn task(run: &Run, live: Option<&WorkflowSpec>) -> Value {
    let t = projection::task(run, live);
    // `ttl` is always there (null: no expiry yet); the optional fields only when known.
    let mut task = json!({
        "taskId": t.task_id,
        "status": t.status,
        "createdAt": t.created_at,
        "lastUpdatedAt": t.last_updated_at,
        "ttl": t.ttl_ms,
    });
    if let Some(m) = t.status_message {
        task["statusMessage"] = json!(m);
    }
    if let Some(p) = t.poll_interval_ms {
        task["pollInterval"] = json!(p);
    }
    task
}

/// The `CreateTaskResult` of a task-augmented `tools/call`.
pub(crate) fn created(run: &Run, live: Option<&WorkflowSpec>) -> Value {
    json!({ "task": task(run, live) })
}

/// The `_meta` of a request's params.
pub(crate) fn meta(params: &Value) -> Option<&serde_json::Map<String, Value>> {
    params.get("_meta").and_then(Value::as_object)
}
