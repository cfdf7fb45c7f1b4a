//! Every refusal the endpoint gives: JSON-RPC errors for rmcp's handler and HTTP responses for
//! what the gate answers itself. Messages that could tell one tenant about another's objects
//! are the same whatever the reason.

use std::borrow::Cow;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use rmcp::model::{ErrorCode, ErrorData};
use serde_json::{Value, json};

use super::state::Tenant;
use crate::auth::{Resource, Verb};
use crate::protocol::codes;

/// Message of every "no such task" answer, whatever the real reason.
pub(super) const UNKNOWN_TASK: &str = "unknown task";

/// A JSON-RPC error with `code`, `message` and optional `data`.
pub(super) fn err(
    code: i64,
    message: impl Into<Cow<'static, str>>,
    data: Option<Value>,
) -> ErrorData {
    ErrorData::new(ErrorCode(code as i32), message, data)
}

pub(super) fn invalid(message: impl Into<Cow<'static, str>>) -> ErrorData {
    err(codes::INVALID_PARAMS, message, None)
}

pub(super) fn unknown_task() -> ErrorData {
    invalid(UNKNOWN_TASK)
}

/// A failure of this server's own: logged here, and answered without its text, which may carry
/// what a backend said about objects the caller may not see.
pub(super) fn internal(e: impl std::fmt::Display) -> ErrorData {
    tracing::warn!(error = %e, "request failed");
    err(codes::INTERNAL_ERROR, "internal error; retry later", None)
}

pub(super) fn missing_capability(what: &str, caps: Value) -> ErrorData {
    err(
        codes::MISSING_CAPABILITY,
        format!("this tool needs the client capability {what}"),
        Some(json!({ "requiredCapabilities": caps })),
    )
}

/// The caller may not `verb` `resource` in the tenant's namespace.
pub(super) fn forbidden(t: &Tenant, verb: Verb, resource: Resource) -> ErrorData {
    err(
        codes::FORBIDDEN,
        format!(
            "forbidden: {} may not {} {} in namespace {}",
            t.identity.principal.username,
            verb.as_str(),
            resource.as_str(),
            t.namespace
        ),
        None,
    )
}

/// A JSON-RPC error as a whole HTTP response, for what the gate refuses before rmcp.
pub(super) fn rpc_error(status: StatusCode, id: Value, code: i64, message: &str) -> Response {
    let body = json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}});
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// The answer past the concurrency limit.
pub(super) fn busy() -> Response {
    let mut resp = rpc_error(
        StatusCode::SERVICE_UNAVAILABLE,
        Value::Null,
        codes::INTERNAL_ERROR,
        "server busy; retry later",
    );
    resp.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    resp
}

/// The end of a stream whose token no longer signs its caller in: not the task's end, nor an
/// unknown task, but a request to ask again with a fresh token.
pub(super) fn signed_out() -> ErrorData {
    err(
        codes::UNAUTHENTICATED,
        "unauthenticated: the token this stream was opened with is no longer accepted; ask again with a fresh one",
        None,
    )
}

/// Why a request is refused when its caller or namespace holds its share already.
pub(super) const TOO_MANY_IN_PROGRESS: &str =
    "too many requests of this caller or namespace in progress; retry later";

/// 429 with `Retry-After`, saying which limit.
pub(super) fn too_many(why: &str) -> Response {
    let mut resp = rpc_error(
        StatusCode::TOO_MANY_REQUESTS,
        Value::Null,
        codes::INTERNAL_ERROR,
        why,
    );
    resp.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    resp
}
