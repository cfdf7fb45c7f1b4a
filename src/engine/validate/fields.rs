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

pub(super) fn json_schema(field: &str, schema: &Value) -> Result<(), Invalid> {
    jsonschema::draft202012::new(schema)
        .map(|_| ())
        .map_err(|e| invalid(reasons::INVALID_SCHEMA, format!("{field}: {e}")))
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

/// Refuse a form (`field` names its `requestedSchema`) that asks for a secret.
pub(super) fn no_secret(field: &str, schema: &Value) -> Result<(), Invalid> {
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
