//! Checks of single fields (names, templates, durations, URLs, JSON Schemas) and the error they
//! give: the leaves every other validation uses.

use serde_json::Value;

use crate::api::reasons;
use crate::engine::{duration, template};

/// Why a Workflow is not Ready.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}: {message}")]
pub struct Invalid {
    /// Condition reason (`api::reasons`).
    pub reason: &'static str,
    /// What is wrong, naming the field.
    pub message: String,
}

pub(super) fn invalid(reason: &'static str, message: impl Into<String>) -> Invalid {
    Invalid {
        reason,
        message: message.into(),
    }
}

/// What the store this server runs on can execute.
#[derive(Debug, Clone, Copy)]
pub struct Capabilities {
    /// `job` steps need the Kubernetes store.
    pub jobs: bool,
}

/// A JSON Schema (2020-12) that compiles and that can be met: the values it names itself
/// (`enum`, `const`, `default`) are of its own `type`, and what it requires are properties it
/// has. The message locates the problem (`tool.inputSchema at /properties/zone/enum/1: …`).
pub(super) fn json_schema(field: &str, schema: &Value) -> Result<(), Invalid> {
    jsonschema::draft202012::new(schema).map_err(|e| {
        let at = e.instance_path().to_string();
        let located = if at.is_empty() {
            format!("{field}: {e}")
        } else {
            format!("{field} at {at}: {e}")
        };
        invalid(reasons::INVALID_SCHEMA, located)
    })?;
    match unmeetable(schema, "") {
        Some(why) => Err(invalid(
            reasons::INVALID_SCHEMA,
            format!("{field} at {why}"),
        )),
        None => Ok(()),
    }
}

/// Whether `v` is of JSON Schema type `ty`.
fn of_type(ty: &str, v: &Value) -> bool {
    match ty {
        "string" => v.is_string(),
        "integer" => v.is_i64() || v.is_u64() || v.as_f64().is_some_and(|f| f.fract() == 0.0),
        "number" => v.is_number(),
        "boolean" => v.is_boolean(),
        "null" => v.is_null(),
        "object" => v.is_object(),
        "array" => v.is_array(),
        _ => true,
    }
}

/// Keywords whose value is one subschema, and those whose value holds subschemas by key or
/// index: where [`unmeetable`] looks further.
const ONE_SUBSCHEMA: [&str; 8] = [
    "items",
    "additionalProperties",
    "not",
    "if",
    "then",
    "else",
    "contains",
    "propertyNames",
];
const MANY_SUBSCHEMAS: [&str; 8] = [
    "properties",
    "patternProperties",
    "$defs",
    "definitions",
    "dependentSchemas",
    "allOf",
    "anyOf",
    "oneOf",
];

/// The first place in `schema` (a JSON pointer below `at`) that names a value its own type
/// refuses or requires a property it does not define, and what is wrong there.
fn unmeetable(schema: &Value, at: &str) -> Option<String> {
    let obj = schema.as_object()?;
    let types: Vec<&str> = match obj.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => vec![],
    };
    let refused = |v: &Value| !types.is_empty() && !types.iter().any(|t| of_type(t, v));
    let shown_type = types.join(" or ");
    if let Some(values) = obj.get("enum").and_then(Value::as_array) {
        for (i, v) in values.iter().enumerate() {
            if refused(v) {
                return Some(format!(
                    "{at}/enum/{i}: {v} is not of type {shown_type} (quote it in YAML if it is meant as text)"
                ));
            }
        }
    }
    for key in ["const", "default"] {
        if let Some(v) = obj.get(key).filter(|v| refused(v)) {
            return Some(format!("{at}/{key}: {v} is not of type {shown_type}"));
        }
    }
    if let (Some(required), Some(props)) = (
        obj.get("required").and_then(Value::as_array),
        obj.get("properties").and_then(Value::as_object),
    ) && !obj.contains_key("patternProperties")
    {
        for (i, r) in required.iter().enumerate() {
            if let Some(name) = r.as_str().filter(|n| !props.contains_key(*n)) {
                return Some(format!(
                    "{at}/required/{i}: {name:?} names no property (properties: {})",
                    props.keys().cloned().collect::<Vec<_>>().join(", ")
                ));
            }
        }
    }
    for key in ONE_SUBSCHEMA {
        if let Some(sub) = obj.get(key)
            && let Some(why) = unmeetable(sub, &format!("{at}/{key}"))
        {
            return Some(why);
        }
    }
    for key in MANY_SUBSCHEMAS {
        let found = match obj.get(key) {
            Some(Value::Object(m)) => m
                .iter()
                .find_map(|(k, sub)| unmeetable(sub, &format!("{at}/{key}/{k}"))),
            Some(Value::Array(items)) => items
                .iter()
                .enumerate()
                .find_map(|(i, sub)| unmeetable(sub, &format!("{at}/{key}/{i}"))),
            _ => None,
        };
        if found.is_some() {
            return found;
        }
    }
    if let Some(items) = obj.get("prefixItems").and_then(Value::as_array) {
        return items
            .iter()
            .enumerate()
            .find_map(|(i, sub)| unmeetable(sub, &format!("{at}/prefixItems/{i}")));
    }
    None
}

pub(super) fn tmpl(field: &str, v: &Value) -> Result<(), Invalid> {
    template::check_value(v)
        .map_err(|e| invalid(reasons::INVALID_TEMPLATE, format!("{field}: {e}")))
}

pub(super) fn text(field: &str, s: &str) -> Result<(), Invalid> {
    template::check(s).map_err(|e| invalid(reasons::INVALID_TEMPLATE, format!("{field}: {e}")))
}

/// A duration field: a template, or else a literal that must parse now.
pub(super) fn dur(field: &str, s: &str) -> Result<(), Invalid> {
    if s.contains("{{") {
        text(field, s)
    } else {
        duration::parse(s)
            .map(|_| ())
            .map_err(|e| invalid(reasons::INVALID_DURATION, format!("{field}: {e}")))
    }
}

pub(super) fn step_name(s: &str) -> Result<(), Invalid> {
    let b = s.as_bytes();
    let inner = |c: &u8| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-');
    let ok = (1..=63).contains(&b.len())
        && b.iter().all(inner)
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric();
    if ok {
        Ok(())
    } else {
        Err(invalid(
            reasons::INVALID_SPEC,
            format!(
                "step name {s:?} must be 1-63 letters, digits, '_' or '-', starting and ending \
                 with a letter or digit"
            ),
        ))
    }
}

/// An MCP tool name: `^[A-Za-z0-9_.-]{1,128}$` (the CRD's pattern, for stores without one).
pub(super) fn tool_name(field: &str, s: &str) -> Result<(), Invalid> {
    let ok = (1..=128).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(invalid(
            reasons::INVALID_SPEC,
            format!("{field}: {s:?} must match ^[A-Za-z0-9_.-]{{1,128}}$"),
        ))
    }
}

/// A `requestedSchema` (`field` names it): a form as the protocol has them, asking for no secret.
pub(super) fn form(field: &str, schema: &Value) -> Result<(), Invalid> {
    no_secret(field, schema)?;
    match crate::engine::forms::not_a_form(schema) {
        Some(why) => Err(invalid(reasons::INVALID_SCHEMA, format!("{field}: {why}"))),
        None => Ok(()),
    }
}

/// Refuse a form (`field` names its `requestedSchema`) that asks for a secret.
fn no_secret(field: &str, schema: &Value) -> Result<(), Invalid> {
    match crate::engine::forms::secret_field(schema) {
        None => Ok(()),
        Some(secret) => Err(invalid(
            reasons::INVALID_SPEC,
            format!(
                "{field}: field {secret} asks for a secret; forms must not collect passwords, \
                 tokens, API keys, PINs or card data (their answers are stored in the Run): use \
                 url mode (url:) to send the person to a page that takes it"
            ),
        )),
    }
}

pub(super) fn url(field: &str, s: &str) -> Result<(), Invalid> {
    let parsed = url::Url::parse(s)
        .map_err(|e| invalid(reasons::INVALID_SPEC, format!("{field}: {s:?}: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(invalid(
            reasons::INVALID_SPEC,
            format!("{field}: {s:?}: scheme must be http or https"),
        ));
    }
    Ok(())
}
