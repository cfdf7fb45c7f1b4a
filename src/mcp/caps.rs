//! What a client declared it can do (the `clientCapabilities` of a request's `_meta`), read
//! in one place: the Tasks extension, forms, URLs, sampling, MCP Apps.

use std::cell::RefCell;

use rmcp::RoleServer;
use rmcp::service::RequestContext;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::protocol::{META_CLIENT_CAPABILITIES, TASKS_EXTENSION, UI_EXTENSION, UI_MIME_TYPE};

/// The client capabilities a request's `_meta` declares (`{}` when none).
pub(super) fn raw_caps(ctx: &RequestContext<RoleServer>) -> Value {
    ctx.meta
        .get(META_CLIENT_CAPABILITIES)
        .cloned()
        .unwrap_or_else(|| json!({}))
}

/// Whether `caps` declare the Tasks extension.
pub(super) fn declares_tasks(caps: &Value) -> bool {
    caps.get("extensions")
        .and_then(|e| e.get(TASKS_EXTENSION))
        .is_some()
}

/// Whether the client can show forms: `elicitation: {form: {}}`, or an empty `elicitation: {}`
/// (which means form mode alone). A client that declares only `url` mode cannot.
pub(super) fn declares_forms(caps: &Value) -> bool {
    match caps.get("elicitation") {
        Some(Value::Object(modes)) => modes.is_empty() || modes.contains_key("form"),
        _ => false,
    }
}

/// Whether the client can send a person to a URL (`elicitation: {url: {}}`).
pub(super) fn declares_urls(caps: &Value) -> bool {
    caps.get("elicitation")
        .and_then(|e| e.get("url"))
        .is_some_and(Value::is_object)
}

/// Whether the client lets the server ask its model (`sampling: {}`).
pub(super) fn declares_sampling(caps: &Value) -> bool {
    caps.get("sampling").is_some_and(Value::is_object)
}

/// Whether capabilities read as rmcp's type (as the fast path reads them) declare the Tasks
/// extension: the same rule as [`declares_tasks`].
pub(super) fn typed_declares_tasks(caps: &rmcp::model::ClientCapabilities) -> bool {
    caps.extensions
        .as_ref()
        .is_some_and(|e| e.contains_key(TASKS_EXTENSION))
}

/// The deepest capabilities [`raw_declares_tasks`] reads: well inside the parser's limit for a
/// whole message (128), less the levels above them (the message, `params`, `_meta`).
const MAX_NESTING: usize = 100;

/// How many arrays and objects deep `value` goes (a scalar is 0).
fn nesting(value: &Value) -> usize {
    match value {
        Value::Array(items) => 1 + items.iter().map(nesting).max().unwrap_or(0),
        Value::Object(fields) => 1 + fields.values().map(nesting).max().unwrap_or(0),
        _ => 0,
    }
}

/// Whether capabilities sent as the JSON text `raw` read as rmcp's type (`None` when rmcp would
/// refuse them) and declare the Tasks extension. A client sends the same text with every
/// request, so each thread keeps its last answer and compares text instead of reading the
/// capabilities into rmcp's maps again (a few per cent of a `tasks/get`).
///
/// Capabilities nested deeper than [`MAX_NESTING`] read as refused here: the whole message has a
/// nesting limit, which they might reach where they sit in it.
pub(super) fn raw_declares_tasks(raw: &str) -> Option<bool> {
    /// Longer texts are read every time rather than kept.
    const KEPT_UP_TO: usize = 1024;
    thread_local! {
        static LAST: RefCell<Option<(Box<str>, Option<bool>)>> = const { RefCell::new(None) };
    }
    LAST.with_borrow_mut(|last| {
        if let Some((text, answer)) = last.as_ref()
            && **text == *raw
        {
            return *answer;
        }
        // Read as the general path reads them: a JSON value first (which refuses what skipping
        // them unread let through, a lone surrogate or a number past `f64`), then rmcp's type.
        let answer = serde_json::from_str::<Value>(raw)
            .ok()
            .filter(|caps| nesting(caps) <= MAX_NESTING)
            .and_then(|caps| rmcp::model::ClientCapabilities::deserialize(&caps).ok())
            .map(|caps| typed_declares_tasks(&caps));
        if raw.len() <= KEPT_UP_TO {
            *last = Some((raw.into(), answer));
        }
        answer
    })
}

/// Whether a request's `params._meta` declares the Tasks extension.
pub(super) fn declares_tasks_in(params: Option<&Value>) -> bool {
    params
        .and_then(|p| p.get("_meta"))
        .and_then(|m| m.get(META_CLIENT_CAPABILITIES))
        .is_some_and(declares_tasks)
}

/// Capabilities in `required` that `caps` lacks (objects nest, e.g. `extensions`).
pub(super) fn missing_caps(required: &Value, caps: &Value) -> Option<Value> {
    let req = required.as_object()?;
    let mut missing = Map::new();
    for (k, v) in req {
        match caps.get(k) {
            None | Some(Value::Null) => {
                missing.insert(k.clone(), v.clone());
            }
            Some(have) if k == "extensions" => {
                if let Some(m) = missing_caps(v, have) {
                    missing.insert(k.clone(), m);
                }
            }
            Some(_) => {}
        }
    }
    (!missing.is_empty()).then_some(Value::Object(missing))
}

/// Whether the client declared MCP Apps for HTML views.
pub(super) fn declares_ui(ctx: &RequestContext<RoleServer>) -> bool {
    declares_ui_in(&raw_caps(ctx))
}

/// Whether `caps` declare MCP Apps for HTML views.
pub(super) fn declares_ui_in(caps: &Value) -> bool {
    let Some(ui) = caps
        .get("extensions")
        .and_then(|e| e.get(UI_EXTENSION))
        .filter(|u| u.is_object())
    else {
        return false;
    };
    match ui.get("mimeTypes").and_then(Value::as_array) {
        Some(types) => types.iter().any(|t| t.as_str() == Some(UI_MIME_TYPE)),
        None => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capabilities_read_from_text_answer_as_the_typed_rule_whatever_came_before() {
        let tasks = r#"{"extensions":{"io.modelcontextprotocol/tasks":{}}}"#;
        let none = r#"{"elicitation":{}}"#;
        // rmcp reads `extensions` as a map: a number there is refused, not "no tasks".
        let refused = r#"{"extensions":5}"#;
        for _ in 0..2 {
            assert_eq!(raw_declares_tasks(tasks), Some(true));
            assert_eq!(raw_declares_tasks(tasks), Some(true));
            assert_eq!(raw_declares_tasks(none), Some(false));
            assert_eq!(raw_declares_tasks(refused), None);
            assert_eq!(raw_declares_tasks(refused), None);
            assert_eq!(raw_declares_tasks("null"), None);
        }
        // Text too long to keep is read each time, and answers the same.
        let long = format!(
            r#"{{"extensions":{{"io.modelcontextprotocol/tasks":{{}}}},"experimental":{{"x":{{"note":"{}"}}}}}}"#,
            "y".repeat(2000)
        );
        assert_eq!(raw_declares_tasks(&long), Some(true));
        assert_eq!(raw_declares_tasks(none), Some(false));
        assert_eq!(raw_declares_tasks(&long), Some(true));
    }
}
