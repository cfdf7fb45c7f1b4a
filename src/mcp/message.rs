//! One HTTP body as JSON-RPC: a single message both eras serve, a batch (2025-03-26 only), or
//! the reason it is neither — a leaf the gate uses before any handler sees the message.

use serde_json::Value;

use crate::protocol::codes;

/// Why a request body is not one JSON-RPC object.
#[derive(Debug, thiserror::Error)]
pub(super) enum MessageError {
    /// Not JSON.
    #[error("parse error: {0}")]
    Parse(#[source] serde_json::Error),
    /// An array: a batch, which only sessions of revision 2025-03-26 may send.
    #[error("one JSON-RPC object per request (batches are part of revision 2025-03-26 only)")]
    Batch(Vec<Value>),
    /// JSON, but neither an object nor an array.
    #[error("one JSON-RPC object per request")]
    NotAnObject,
    /// An object, but not a JSON-RPC 2.0 request, notification or response.
    #[error("invalid request: {0}")]
    NotJsonRpc(&'static str),
}

impl MessageError {
    /// The JSON-RPC code that refuses the request.
    pub(super) fn code(&self) -> i64 {
        match self {
            Self::Parse(_) => codes::PARSE_ERROR,
            Self::Batch(_) | Self::NotAnObject | Self::NotJsonRpc(_) => codes::INVALID_REQUEST,
        }
    }
}

/// The request body as one JSON-RPC object, or why it is refused.
pub(super) fn parse_message(bytes: &[u8]) -> Result<Value, MessageError> {
    let msg = serde_json::from_slice::<Value>(bytes).map_err(MessageError::Parse)?;
    let fields = match msg {
        Value::Array(items) => return Err(MessageError::Batch(items)),
        Value::Object(ref fields) => fields,
        _ => return Err(MessageError::NotAnObject),
    };
    match not_json_rpc(fields) {
        Some(why) => Err(MessageError::NotJsonRpc(why)),
        None => Ok(msg),
    }
}

/// A member of a batch as a message, or its id (when it has a usable one) and why it is not.
pub(super) fn member(item: Value) -> Result<Value, (Value, &'static str)> {
    let Some(fields) = item.as_object() else {
        return Err((Value::Null, "a member of a batch must be an object"));
    };
    match not_json_rpc(fields) {
        None => Ok(item),
        Some(why) => {
            let id = match fields.get("id") {
                Some(id @ Value::String(_)) => id.clone(),
                Some(Value::Number(n)) if n.is_i64() => Value::Number(n.clone()),
                _ => Value::Null,
            };
            Err((id, why))
        }
    }
}

/// Why `msg` is not a JSON-RPC 2.0 message as MCP allows it, if it is not: the version, an id
/// that is a string or an integer (never null), and a method or an answer. Both eras' handlers
/// then meet only well-formed messages (rmcp refused the rest with a 415 and no JSON-RPC error;
/// the 2025 path would have served a request with a null id).
fn not_json_rpc(msg: &serde_json::Map<String, Value>) -> Option<&'static str> {
    if msg.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Some("jsonrpc must be \"2.0\"");
    }
    match msg.get("id") {
        None | Some(Value::String(_)) => {}
        Some(Value::Number(n)) if n.is_i64() => {}
        Some(_) => return Some("id must be a string or an integer"),
    }
    let request = msg.get("method").is_some_and(Value::is_string);
    let answer =
        msg.contains_key("id") && (msg.contains_key("result") || msg.contains_key("error"));
    (!request && !answer).then_some("neither a method nor a result or error")
}
