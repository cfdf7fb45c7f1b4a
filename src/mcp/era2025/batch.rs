//! JSON-RPC batches, which revision 2025-03-26 (alone) has servers accept: each message of
//! the array is served as if it had come alone, in order, and the answers go back together —
//! a JSON array, or one SSE stream carrying them all when a held call is among them.

use axum::body::Body;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde_json::Value;

use super::serve::{Caller, open_session, serve};
use super::session::binding;
use super::wire::{self, accepted};
use crate::mcp::errors::{err, internal, rpc_error};
use crate::mcp::headers::no_proxy_buffering;
use crate::protocol::{HEADER_SESSION_ID, METHOD_INITIALIZE, codes};

/// The one revision whose sessions may send batches (2025-06-18 removed them).
pub(crate) const BATCH_REVISION: &str = "2025-03-26";

/// The most messages one batch may carry. A batch takes one of its caller's request shares,
/// however many calls it holds; this bounds what one HTTP request can set going (Runs, held
/// streams, answers kept until the last member is served).
pub(crate) const MAX_BATCH: usize = 16;

/// The largest whole-JSON answer read back to be put in the array; every answer this era
/// makes as a whole response (not a stream) is far smaller.
const MAX_ANSWER_BYTES: usize = 16 << 20;

/// Serve a batch of a 2025-era session. `items` are the array's members, each a message or
/// why it is not a JSON-RPC message (answered with its own error, as JSON-RPC has it).
pub(crate) async fn serve_batch(
    state: std::sync::Arc<crate::mcp::state::McpState>,
    caller: Caller,
    headers: &HeaderMap,
    items: Vec<Result<Value, (Value, &'static str)>>,
) -> Response {
    let bound = binding(&caller.identity.principal.username, &caller.path);
    let sealed = headers
        .get(HEADER_SESSION_ID)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let session = match open_session(&state, headers, sealed, &bound, &Value::Null) {
        Ok(s) => s,
        Err(refused) => return *refused,
    };
    if session.version != BATCH_REVISION {
        let why = format!(
            "batches are part of revision {BATCH_REVISION} only; this session speaks {}",
            session.version
        );
        return rpc_error(
            StatusCode::BAD_REQUEST,
            Value::Null,
            codes::INVALID_REQUEST,
            &why,
        );
    }
    if items.is_empty() || items.len() > MAX_BATCH {
        let why = format!(
            "a batch carries 1 to {MAX_BATCH} messages, not {}",
            items.len()
        );
        return rpc_error(
            StatusCode::BAD_REQUEST,
            Value::Null,
            codes::INVALID_REQUEST,
            &why,
        );
    }
    let mut answers = Vec::new();
    let mut streams = Vec::new();
    for item in items {
        let msg = match item {
            Ok(msg) if msg.get("method").and_then(Value::as_str) == Some(METHOD_INITIALIZE) => {
                let id = msg.get("id").cloned().unwrap_or(Value::Null);
                let e = err(
                    codes::INVALID_REQUEST,
                    "initialize is never part of a batch",
                    None,
                );
                answers.push(wire::error(&id, &e));
                continue;
            }
            Ok(msg) => msg,
            Err((id, why)) => {
                let e = err(
                    codes::INVALID_REQUEST,
                    format!("invalid request: {why}"),
                    None,
                );
                answers.push(wire::error(&id, &e));
                continue;
            }
        };
        let resp = Box::pin(serve(state.clone(), caller.clone(), headers, msg)).await;
        match Answer::of(resp).await {
            Answer::Nothing => {}
            Answer::Message(m) => answers.push(m),
            Answer::Stream(body) => streams.push(body),
        }
    }
    together(answers, streams)
}

/// What serving one member of a batch gave.
enum Answer {
    /// `202 Accepted`: a notification or a response of the client, taken.
    Nothing,
    /// One JSON-RPC message.
    Message(Value),
    /// An SSE stream (a held call), which ends with the call's answer.
    Stream(Body),
}

impl Answer {
    /// What `resp` carries. A whole JSON body is read here, before the batch's answer goes
    /// out: no such body is a task handed over (a `CreateTaskResult`, whose delivery the
    /// client's leaving would undo), since 2025-03-26 sessions have no tasks.
    async fn of(resp: Response) -> Self {
        if resp.status() == StatusCode::ACCEPTED {
            return Self::Nothing;
        }
        let sse = resp
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|ct| ct.starts_with("text/event-stream"));
        if sse {
            return Self::Stream(resp.into_body());
        }
        let bytes = match axum::body::to_bytes(resp.into_body(), MAX_ANSWER_BYTES).await {
            Ok(b) => b,
            Err(e) => return Self::Message(wire::error(&Value::Null, &internal(e))),
        };
        match serde_json::from_slice(&bytes) {
            Ok(m) => Self::Message(m),
            Err(e) => Self::Message(wire::error(&Value::Null, &internal(e))),
        }
    }
}

/// The batch's answers as one response: nothing to say (only notifications and responses),
/// a JSON array, or, with held calls among them, an SSE stream with the answers ready now
/// first and then every held call's messages as they come; it ends when the last call ends.
fn together(answers: Vec<Value>, streams: Vec<Body>) -> Response {
    if streams.is_empty() {
        if answers.is_empty() {
            return accepted();
        }
        return (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            Value::Array(answers).to_string(),
        )
            .into_response();
    }
    let ready = answers.into_iter().map(|m| {
        Ok::<_, axum::Error>(bytes::Bytes::from(format!("event: message\ndata: {m}\n\n")))
    });
    let held =
        futures::stream::select_all(streams.into_iter().map(|b| b.into_data_stream().boxed()));
    let body = Body::from_stream(futures::stream::iter(ready).chain(held));
    let mut resp = (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response();
    no_proxy_buffering(&mut resp);
    resp
}
