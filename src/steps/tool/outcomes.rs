//! Upstream answers and failures as step outcomes: what failed, whether it is worth another
//! attempt, and upstream text clipped to a bounded size.

use std::collections::BTreeMap;

use rmcp::model::InputRequiredResult;
use rmcp::transport::DynamicTransportError;
use rmcp::transport::streamable_http_client::StreamableHttpError;
use serde_json::{Value, json};

use crate::api::{ErrorClass, RunError};
use crate::engine::Outcome;
use crate::protocol::codes;

/// Whether a failed poll is worth repeating: the connection, a timeout, an overloaded or
/// failing server; not an answer that the task or request is wrong.
pub(super) fn is_transient(out: &Outcome) -> bool {
    let class = match out {
        Outcome::Failed { class, .. } | Outcome::UpstreamFailed { class, .. } => *class,
        _ => return false,
    };
    matches!(
        class,
        ErrorClass::Timeout
            | ErrorClass::Connection
            | ErrorClass::ServerError
            | ErrorClass::TooManyRequests
    )
}

/// Longest upstream text kept in a failure message, in characters.
pub(super) const MAX_MESSAGE_CHARS: usize = 500;

/// The outcome of an upstream task that failed with `error`: the task is over whatever its
/// error says.
pub(super) fn task_failed(id: &str, error: &Value) -> Outcome {
    let code = error
        .get("code")
        .and_then(Value::as_i64)
        .unwrap_or(codes::INTERNAL_ERROR);
    let message = error
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or("failed");
    let mut out = rpc_failure(
        &format!("upstream task {id} failed"),
        code,
        message,
        error.get("data").cloned(),
    );
    if let Outcome::UpstreamFailed { call_ended, .. } = &mut out {
        *call_ended = true;
    }
    out
}

/// A `CallToolResult` as the step's outcome: output `structuredContent` when present, else the
/// content items; `isError` fails the attempt as a tool error.
pub(super) fn result_outcome(what: &str, result: Value) -> Outcome {
    if result.get("isError").and_then(Value::as_bool) == Some(true) {
        let text: Vec<&str> = result["content"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c.get("text").and_then(Value::as_str))
            .collect();
        let detail = if text.is_empty() {
            "the tool reported an error".to_owned()
        } else {
            text.join("\n")
        };
        return Outcome::UpstreamFailed {
            class: ErrorClass::ToolError,
            message: format!("{what}: {}", clip(&detail)),
            error: None,
            call_ended: true,
        };
    }
    Outcome::Succeeded(match result.get("structuredContent") {
        Some(sc) if !sc.is_null() => sc.clone(),
        _ => result.get("content").cloned().unwrap_or_else(|| json!([])),
    })
}

/// An upstream MRTR `input_required` result as this Run's input requests.
pub(super) fn input_required(what: &str, ir: InputRequiredResult) -> Outcome {
    let requests: BTreeMap<String, Value> = ir
        .input_requests
        .iter()
        .flatten()
        .map(|(k, r)| (k.clone(), request_value(r)))
        .collect();
    if requests.is_empty() {
        return Outcome::Failed {
            detail: None,
            class: ErrorClass::ServerError,
            message: format!("{what}: input_required without input requests"),
        };
    }
    Outcome::NeedsInput {
        requests,
        request_state: ir.request_state,
    }
}

/// An upstream input request as `{method, params}`.
pub(super) fn request_value(r: &impl serde::Serialize) -> Value {
    let v = serde_json::to_value(r).unwrap_or(Value::Null);
    json!({
        "method": v.get("method").cloned().unwrap_or_else(|| json!(crate::protocol::METHOD_ELICITATION)),
        "params": v.get("params").cloned().unwrap_or_else(|| json!({})),
    })
}

/// Whether an upstream JSON-RPC error is worth retrying: internal and generic server errors
/// are; request errors (`-32602`, `-32601`, …) are the caller's and are not.
pub(super) fn rpc_class(code: i64) -> ErrorClass {
    match code {
        codes::INTERNAL_ERROR | -32000 => ErrorClass::ServerError,
        _ => ErrorClass::ClientError,
    }
}

pub(super) fn rpc_failure(what: &str, code: i64, message: &str, data: Option<Value>) -> Outcome {
    let class = rpc_class(code);
    Outcome::UpstreamFailed {
        class,
        message: format!("{what}: upstream error {code}: {}", clip(message)),
        error: Some(RunError {
            code,
            message: clip(message),
            data,
        }),
        // A request error ends the call (or the task); a server error may pass.
        call_ended: class == ErrorClass::ClientError,
    }
}

/// A failure of a request about a task that goes on whatever its answer: the task is still
/// there (a refused `tasks/update` leaves it waiting for an answer), so the step keeps its id
/// and the cleanup cancels it, whatever the error's class.
pub(super) fn task_goes_on(failure: Outcome) -> Outcome {
    match failure {
        Outcome::UpstreamFailed {
            class,
            message,
            error,
            ..
        } => Outcome::UpstreamFailed {
            class,
            message,
            error,
            call_ended: false,
        },
        other => other,
    }
}

pub(super) fn service_failure(what: &str, e: rmcp::ServiceError) -> Outcome {
    match e {
        rmcp::ServiceError::McpError(err) => {
            rpc_failure(what, err.code.0 as i64, &err.message, err.data)
        }
        rmcp::ServiceError::Timeout { .. } => request_timeout(what),
        rmcp::ServiceError::TransportSend(error) => transport_failure(what, &error),
        other => transport_failure(what, &other),
    }
}

pub(super) fn request_timeout(what: &str) -> Outcome {
    Outcome::Failed {
        detail: None,
        class: ErrorClass::Timeout,
        message: format!("{what}: timed out"),
    }
}

/// Classify a failure below JSON-RPC: HTTP status, timeout, or connection.
pub(super) fn transport_failure(what: &str, e: &(dyn std::error::Error + 'static)) -> Outcome {
    let mut class = ErrorClass::Connection;
    // The HTTP client's own error says it best ("error sending request …: Connection refused").
    let mut detail = None;
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(h) = err.downcast_ref::<StreamableHttpError<reqwest::Error>>() {
            match h {
                StreamableHttpError::HttpStatus(s) => {
                    class = status_class(s.status);
                    detail = Some(format!("HTTP {}", s.status));
                    break;
                }
                StreamableHttpError::AuthRequired(_) => {
                    class = ErrorClass::ClientError;
                    detail = Some("authentication required (HTTP 401)".into());
                    break;
                }
                StreamableHttpError::InsufficientScope(_) => {
                    class = ErrorClass::ClientError;
                    detail = Some("insufficient scope (HTTP 403)".into());
                    break;
                }
                StreamableHttpError::Client(r) => {
                    class = reqwest_class(r);
                    detail = Some(error_chain(r));
                    break;
                }
                _ => {}
            }
        }
        if let Some(r) = err.downcast_ref::<reqwest::Error>() {
            class = reqwest_class(r);
            detail = Some(error_chain(r));
            break;
        }
        cur = err.source();
    }
    // Without a better one, the transport's own error, not its wrapper's type name.
    let detail = detail.unwrap_or_else(|| match e.downcast_ref::<DynamicTransportError>() {
        Some(d) => error_chain(d.error.as_ref()),
        None => error_chain(e),
    });
    Outcome::Failed {
        detail: None,
        class,
        message: format!("{what}: {}", clip(&detail)),
    }
}

pub(super) fn status_class(status: u16) -> ErrorClass {
    match status {
        429 => ErrorClass::TooManyRequests,
        500..=599 => ErrorClass::ServerError,
        _ => ErrorClass::ClientError,
    }
}

pub(super) fn reqwest_class(e: &reqwest::Error) -> ErrorClass {
    if e.is_timeout() {
        ErrorClass::Timeout
    } else if let Some(s) = e.status() {
        status_class(s.as_u16())
    } else {
        ErrorClass::Connection
    }
}

pub(super) fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let next = c.to_string();
        if !s.contains(&next) {
            s.push_str(": ");
            s.push_str(&next);
        }
        cur = c.source();
    }
    s
}

pub(super) fn clip(s: &str) -> String {
    match s.char_indices().nth(MAX_MESSAGE_CHARS) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_result_is_its_structured_content_or_its_content() {
        let out = result_outcome(
            "t",
            json!({"content": [{"type": "text", "text": "x"}], "structuredContent": {"n": 1}}),
        );
        assert_eq!(out, Outcome::Succeeded(json!({"n": 1})));
        let out = result_outcome("t", json!({"content": [{"type": "text", "text": "x"}]}));
        assert_eq!(
            out,
            Outcome::Succeeded(json!([{"type": "text", "text": "x"}]))
        );
    }

    #[test]
    fn is_error_is_a_tool_error_that_ends_the_call() {
        let out = result_outcome(
            "t",
            json!({"content": [{"type": "text", "text": "boom"}], "isError": true}),
        );
        let Outcome::UpstreamFailed {
            class,
            message,
            error,
            call_ended,
        } = out
        else {
            panic!("{out:?}")
        };
        assert_eq!(class, ErrorClass::ToolError);
        assert!(message.contains("boom"));
        assert!(error.is_none() && call_ended);
    }

    #[test]
    fn request_errors_are_not_retryable_and_server_errors_are() {
        assert_eq!(rpc_class(codes::INVALID_PARAMS), ErrorClass::ClientError);
        assert_eq!(rpc_class(codes::METHOD_NOT_FOUND), ErrorClass::ClientError);
        assert_eq!(rpc_class(codes::INTERNAL_ERROR), ErrorClass::ServerError);
        assert_eq!(status_class(503), ErrorClass::ServerError);
        assert_eq!(status_class(429), ErrorClass::TooManyRequests);
        assert_eq!(status_class(404), ErrorClass::ClientError);
        let Outcome::UpstreamFailed {
            error, call_ended, ..
        } = rpc_failure("x", -32602, "bad", None)
        else {
            panic!()
        };
        assert_eq!(error.unwrap().code, -32602);
        assert!(call_ended);
    }
}
