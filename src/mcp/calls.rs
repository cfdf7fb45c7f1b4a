//! What a `tools/call` must satisfy and how it is answered, before and after its Run: a
//! Workflow as a tool, the answer mode for the caller's capabilities, the arguments and the
//! idempotency key, and a finished Run as the call's result.

use std::sync::Arc;

use rmcp::model::{CallToolResponse, CallToolResult, ErrorData, Tool};
use serde_json::{Map, Value, json};

use super::caps::{declares_forms, declares_sampling, declares_tasks, missing_caps};
use super::errors::{err, internal, invalid, missing_capability};
use crate::api::{ExecutionMode, Run, RunPhase, Workflow};
use crate::engine::budget;
use crate::protocol::{META_IDEMPOTENCY_KEY, TASKS_EXTENSION, codes};

/// Whether `wf` asks the caller's model anywhere.
pub(super) fn has_sample_steps(wf: &Workflow) -> bool {
    wf.spec.all_steps().any(|s| s.sample.is_some())
}

pub(super) fn has_input_steps(wf: &Workflow) -> bool {
    wf.spec.all_steps().any(|s| s.input.is_some())
}

/// A cancelled call's answer: a tool error saying who cancelled it and why.
fn cancelled(message: Option<String>) -> CallToolResponse {
    let msg = message.unwrap_or_else(|| "cancelled".into());
    CallToolResult::error(vec![rmcp::model::ContentBlock::text(msg)]).into()
}

/// The answer of a Run whose cancel the controller took while it still winds down (`finally`
/// steps, cleanups): the cancelled ending it has already settled on. 2025-11-25 shows such a task
/// `cancelled` at once, a terminal status, whose `tasks/result` answers without waiting.
pub(super) fn cancel_taken_result(run: &Run) -> Option<CallToolResponse> {
    let st = run.status.as_ref()?;
    let ending = st.ending.as_ref()?;
    let taken = run.spec.cancel.is_some() && ending.phase == RunPhase::Cancelled;
    (taken && !st.phase.is_terminal()).then(|| cancelled(ending.message.clone()))
}

pub(super) fn run_result(run: &Run) -> Result<CallToolResponse, ErrorData> {
    let st = run.status.clone().unwrap_or_default();
    if let Some(e) = st.error {
        return Err(err(e.code, e.message, e.data));
    }
    if st.phase == RunPhase::Cancelled {
        return Ok(cancelled(st.status_message));
    }
    let mut parsed: CallToolResult = match &st.result {
        Some(text) => serde_json::from_str(text.get()).map_err(internal)?,
        None => serde_json::from_value(json!({"content": []})).map_err(internal)?,
    };
    parsed.result_type = Some(rmcp::model::ResultType::COMPLETE);
    Ok(parsed.into())
}

pub(super) fn tool_of(wf: &Workflow) -> Tool {
    let schema = match &wf.spec.tool.input_schema {
        Some(Value::Object(m)) => m.clone(),
        _ => json!({"type": "object", "properties": {}})
            .as_object()
            .cloned()
            .unwrap_or_default(),
    };
    let mut tool = Tool::new(
        wf.tool_name().to_owned(),
        wf.spec.tool.description.clone().unwrap_or_default(),
        Arc::new(schema),
    );
    if let Some(title) = &wf.spec.tool.title {
        tool = tool.with_title(title.clone());
    }
    if let Some(Value::Object(out)) = &wf.spec.tool.output_schema {
        tool = tool.with_raw_output_schema(Arc::new(out.clone()));
    }
    if let Some(a) = &wf.spec.tool.annotations
        && let Ok(a) = serde_json::from_value(a.clone())
    {
        tool = tool.with_annotations(a);
    }
    tool
}

/// Why a call's arguments were not taken: they are larger than the budget or refused by the
/// tool's `inputSchema` (the caller's to correct), or the schema cannot be used (the server's).
pub(super) enum BadArguments {
    /// The caller's arguments, refused.
    Refused {
        message: String,
        errors: Option<Value>,
    },
    /// The tool's own fault.
    Internal(ErrorData),
}

impl BadArguments {
    /// As a tool error: the protocol counts input validation among the errors a model can
    /// correct, so they come as a result it is shown, not as a protocol error. A fault of the
    /// server's stays a protocol error.
    pub(super) fn result(self) -> Result<CallToolResult, ErrorData> {
        match self {
            Self::Refused { message, .. } => Ok(CallToolResult::error(vec![
                rmcp::model::ContentBlock::text(message),
            ])),
            Self::Internal(e) => Err(e),
        }
    }

    /// As `-32602` with `data.errors`: for a request that must be answered with a task or an
    /// error (a 2025-era task-augmented call) and for Runway's own tools.
    pub(super) fn error(self) -> ErrorData {
        match self {
            Self::Refused { message, errors } => {
                let data = errors.map(|errors| json!({ "errors": errors }));
                err(codes::INVALID_PARAMS, message, data)
            }
            Self::Internal(e) => e,
        }
    }
}

/// Whether `args` are arguments `wf` takes.
pub(super) fn check_args(wf: &Workflow, args: &Map<String, Value>) -> Result<(), BadArguments> {
    let instance = Value::Object(args.clone());
    budget::check("arguments", &instance, budget::MAX_ARGUMENT_BYTES).map_err(|e| {
        BadArguments::Refused {
            message: format!("invalid arguments: {e}"),
            errors: None,
        }
    })?;
    let Some(schema) = &wf.spec.tool.input_schema else {
        return Ok(());
    };
    let errors = budget::schema_errors(schema, &instance)
        .map_err(|e| BadArguments::Internal(internal(e)))?;
    if errors.is_empty() {
        return Ok(());
    }
    let summary = errors
        .iter()
        .filter_map(|e| e["message"].as_str())
        .collect::<Vec<_>>()
        .join("; ");
    Err(BadArguments::Refused {
        message: format!("invalid arguments: {summary}"),
        errors: Some(json!(errors)),
    })
}

/// [`check_args`] as a protocol error.
pub(super) fn validate_args(wf: &Workflow, args: &Map<String, Value>) -> Result<(), ErrorData> {
    check_args(wf, args).map_err(BadArguments::error)
}

/// Whether a call of `wf` is answered with a task (else it blocks): the client must declare
/// what the Workflow requires, the Tasks extension for task-only tools, and form elicitation
/// (or tasks) for tools that ask questions.
pub(super) fn answer_mode(wf: &Workflow, caps: &Value) -> Result<bool, ErrorData> {
    if let Some(req) = &wf.spec.execution.required_client_capabilities
        && let Some(missing) = missing_caps(req, caps)
    {
        let names = missing
            .as_object()
            .map(|m| m.keys().cloned().collect::<Vec<_>>().join(", "))
            .unwrap_or_default();
        return Err(missing_capability(&names, missing));
    }
    // Only the caller's own model can answer a `sample` step, whichever way the call runs.
    if has_sample_steps(wf) && !declares_sampling(caps) {
        return Err(missing_capability("sampling", json!({"sampling": {}})));
    }
    let tasks = declares_tasks(caps);
    let mode = wf.spec.execution.mode;
    if mode == ExecutionMode::Task && !tasks {
        return Err(missing_capability(
            TASKS_EXTENSION,
            json!({"extensions": {TASKS_EXTENSION: {}}}),
        ));
    }
    let as_task = tasks && mode != ExecutionMode::Sync;
    if !as_task && has_input_steps(wf) && !declares_forms(caps) {
        let caps = if mode == ExecutionMode::Sync {
            json!({"elicitation": {"form": {}}})
        } else {
            json!({"elicitation": {"form": {}}, "extensions": {TASKS_EXTENSION: {}}})
        };
        return Err(missing_capability(
            "form elicitation or io.modelcontextprotocol/tasks",
            caps,
        ));
    }
    Ok(as_task)
}

/// The call's `_meta` idempotency key, which must be a string when present.
pub(super) fn idempotency_key(meta: Option<&Value>) -> Result<Option<String>, ErrorData> {
    match meta {
        None => Ok(None),
        Some(Value::String(k)) => Ok(Some(k.clone())),
        Some(_) => Err(invalid(format!(
            "_meta.{META_IDEMPOTENCY_KEY} must be a string"
        ))),
    }
}
