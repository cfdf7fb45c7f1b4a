//! `tasks/get` answered in front of rmcp. Agents poll it more than anything else, and rmcp's
//! stateless mode builds a service, spawns a task and parses the message a second time for
//! every POST. Only a request that every one of rmcp's checks would accept is answered here —
//! anything unusual (a missing or extra header, a weighted `Accept`, a Base64 `Mcp-Name`, a
//! float id, an unknown field) goes on to rmcp, which gives the protocol's answer. The answer
//! itself comes from the same function rmcp's handler calls, serialized as the same rmcp types.

use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use rmcp::model::{
    ClientCapabilities, JsonRpcError, JsonRpcMessage, JsonRpcResponse, JsonRpcVersion2_0,
    RequestId, ServerJsonRpcMessage, ServerResult,
};
use serde::Deserialize;
use serde_json::Value;

use super::{McpState, Tenant, declares_tasks, tasks};
use crate::protocol::{
    HEADER_METHOD, HEADER_NAME, HEADER_PROTOCOL_VERSION, META_CLIENT_CAPABILITIES,
    META_PROTOCOL_VERSION, METHOD_GET_TASK, PROTOCOL_VERSION,
};

const JSON: &str = "application/json";
const EVENT_STREAM: &str = "text/event-stream";

/// The request id and task id of a `tasks/get` this path may answer; `None` sends the request
/// on to rmcp.
pub(super) fn eligible<'a>(headers: &HeaderMap, msg: &'a Value) -> Option<(RequestId, &'a str)> {
    let obj = msg.as_object()?;
    if obj.len() != 4
        || obj.get("jsonrpc")?.as_str()? != "2.0"
        || obj.get("method")?.as_str()? != METHOD_GET_TASK
    {
        return None;
    }
    let id = match obj.get("id")? {
        Value::String(s) => RequestId::String(s.as_str().into()),
        Value::Number(n) => RequestId::Number(n.as_i64()?),
        _ => return None,
    };
    let params = obj.get("params")?.as_object()?;
    if params.keys().any(|k| k != "taskId" && k != "_meta") {
        return None;
    }
    // A task id is a DNS subdomain; anything else (a Base64 sentinel among them) is rmcp's.
    let task_id = params
        .get("taskId")?
        .as_str()
        .filter(|t| crate::api::is_dns_subdomain(t))?;
    let meta = params.get("_meta")?;
    if meta.get(META_PROTOCOL_VERSION)?.as_str()? != PROTOCOL_VERSION
        || ClientCapabilities::deserialize(meta.get(META_CLIENT_CAPABILITIES)?).is_err()
        || !declares_tasks(obj.get("params"))
    {
        return None;
    }
    let headers_ok = only(headers, HEADER_PROTOCOL_VERSION) == Some(PROTOCOL_VERSION)
        && only(headers, HEADER_METHOD) == Some(METHOD_GET_TASK)
        && only(headers, HEADER_NAME) == Some(task_id)
        && only(headers, header::CONTENT_TYPE.as_str())
            .is_some_and(|v| essence(v).eq_ignore_ascii_case(JSON))
        && accepts_json_and_sse(headers);
    headers_ok.then_some((id, task_id))
}

/// The one value of a header, as text.
fn only<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    let mut values = headers.get_all(name).iter();
    let first = values.next()?;
    if values.next().is_some() {
        return None;
    }
    first.to_str().ok()
}

/// A media type without its parameters.
fn essence(media: &str) -> &str {
    media.split(';').next().unwrap_or_default().trim()
}

/// `Accept` lists both media types, unweighted (weights are left to rmcp to judge).
fn accepts_json_and_sse(headers: &HeaderMap) -> bool {
    let (mut json, mut sse) = (false, false);
    for value in headers.get_all(header::ACCEPT) {
        let Ok(value) = value.to_str() else {
            return false;
        };
        for media in value.split(',') {
            if media.contains(';') || media.contains('"') {
                return false;
            }
            json |= media.trim().eq_ignore_ascii_case(JSON);
            sse |= media.trim().eq_ignore_ascii_case(EVENT_STREAM);
        }
    }
    json && sse
}

/// Answer an eligible `tasks/get`.
pub(super) async fn get_task(
    state: &McpState,
    tenant: &Tenant,
    id: RequestId,
    task_id: &str,
) -> Response {
    let message: ServerJsonRpcMessage = match tasks::get_task(state, tenant, task_id).await {
        Ok(result) => JsonRpcMessage::Response(JsonRpcResponse {
            jsonrpc: JsonRpcVersion2_0,
            id,
            result: ServerResult::GetTaskResult(result),
        }),
        Err(error) => JsonRpcMessage::Error(JsonRpcError::new(Some(id), error)),
    };
    match serde_json::to_vec(&message) {
        // Every error `tasks/get` gives (unknown task, forbidden, internal) is an in-band
        // JSON-RPC error, HTTP 200, as rmcp answers them.
        Ok(body) => (StatusCode::OK, [(header::CONTENT_TYPE, JSON)], body).into_response(),
        Err(e) => super::rpc_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            Value::Null,
            crate::protocol::codes::INTERNAL_ERROR,
            &format!("cannot serialize the answer: {e}"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::protocol::TASKS_EXTENSION;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    const STANDARD: &[(&str, &str)] = &[
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
        ("mcp-protocol-version", PROTOCOL_VERSION),
        ("mcp-method", "tasks/get"),
        ("mcp-name", "quick-abc"),
    ];

    fn body() -> Value {
        json!({"jsonrpc": "2.0", "id": 3, "method": "tasks/get", "params": {
        "taskId": "quick-abc",
        "_meta": {
            META_PROTOCOL_VERSION: PROTOCOL_VERSION,
            META_CLIENT_CAPABILITIES: {"extensions": {TASKS_EXTENSION: {}}},
        }}})
    }

    #[test]
    fn a_standard_request_is_answered_here() {
        let b = body();
        let (id, task) = eligible(&headers(STANDARD), &b).unwrap();
        assert_eq!((id, task), (RequestId::Number(3), "quick-abc"));
        let mut b = b.clone();
        b["id"] = json!("seven");
        let h = headers(&[STANDARD, &[("accept", "text/plain")]].concat());
        assert_eq!(
            eligible(&h, &b).unwrap().0,
            RequestId::String("seven".into())
        );
    }

    #[test]
    fn anything_unusual_is_left_to_rmcp() {
        let header_changes: &[(&str, Option<&str>)] = &[
            ("content-type", None),
            ("content-type", Some("text/plain")),
            ("accept", None),
            ("accept", Some("application/json")),
            ("accept", Some("application/json;q=0, text/event-stream")),
            ("mcp-protocol-version", None),
            ("mcp-protocol-version", Some("2025-11-25")),
            ("mcp-method", None),
            ("mcp-method", Some("tasks/cancel")),
            ("mcp-name", None),
            ("mcp-name", Some("quick-other")),
            ("mcp-name", Some("=?base64?cXVpY2stYWJj?=")),
        ];
        for (name, value) in header_changes {
            let mut h: Vec<(&str, &str)> = STANDARD
                .iter()
                .filter(|(k, _)| k != name)
                .copied()
                .collect();
            h.extend(value.map(|v| (*name, v)));
            assert!(
                eligible(&headers(&h), &body()).is_none(),
                "{name}: {value:?}"
            );
        }
        let twice = [STANDARD, &[("mcp-name", "quick-abc")]].concat();
        assert!(eligible(&headers(&twice), &body()).is_none());

        let body_changes: &[(&str, Value)] = &[
            ("/id", json!(1.5)),
            ("/id", json!(null)),
            ("/jsonrpc", json!("1.0")),
            ("/params/taskId", json!(7)),
            ("/params/taskId", json!("Not A Name")),
            (
                "/params/_meta/io.modelcontextprotocol~1protocolVersion",
                json!("2025-11-25"),
            ),
            (
                "/params/_meta/io.modelcontextprotocol~1clientCapabilities",
                json!({"extensions": 5}),
            ),
            (
                "/params/_meta/io.modelcontextprotocol~1clientCapabilities",
                json!({}),
            ),
        ];
        for (path, value) in body_changes {
            let mut b = body();
            *b.pointer_mut(path).unwrap() = value.clone();
            assert!(
                eligible(&headers(STANDARD), &b).is_none(),
                "{path}: {value}"
            );
        }
        let mut extra = body();
        extra["params"]["cursor"] = json!("x");
        assert!(eligible(&headers(STANDARD), &extra).is_none());
        let mut extra = body();
        extra["extra"] = json!(1);
        assert!(eligible(&headers(STANDARD), &extra).is_none());
    }
}
