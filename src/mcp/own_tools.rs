//! Runway's own tools by name and definition: `runway_list_runs` for models and apps, and the
//! app tools the console and the MCP Apps view call. `builtin` answers them.

use std::sync::Arc;

use rmcp::model::Tool;
use serde_json::{Map, Value, json};

use super::state::McpState;
use crate::api::RunPhase;
use crate::protocol::BUILTIN_TOOL_PREFIX;

/// Lists the caller's Runs of the namespace (a model and app tool).
pub(crate) const LIST_RUNS: &str = "runway_list_runs";
/// One Run in full: steps, questions, answers, Events (an app tool).
pub(crate) const GET_RUN: &str = "runway_get_run";
/// Answers a Run's open questions, as `tasks/update` does (an app tool).
pub(crate) const ANSWER_RUN: &str = "runway_answer_run";
/// Cancels a Run, as `tasks/cancel` does (an app tool).
pub(crate) const CANCEL_RUN: &str = "runway_cancel_run";
/// Pauses a Run: no new step starts until it is resumed (an app tool).
pub(crate) const PAUSE_RUN: &str = "runway_pause_run";
/// Resumes a paused Run (an app tool).
pub(crate) const RESUME_RUN: &str = "runway_resume_run";
/// Retries a failed Run from its failed step (an app tool).
pub(crate) const RETRY_RUN: &str = "runway_retry_run";
/// The namespace's Workflows with their Ready condition, start form and schedules (an app
/// tool).
pub(crate) const LIST_WORKFLOWS: &str = "runway_list_workflows";

/// Page size of `runway_list_runs` when the call names none.
pub(super) const DEFAULT_LIMIT: usize = 20;
/// Largest page of `runway_list_runs`.
pub(super) const MAX_LIMIT: usize = 100;

/// Whether `name` is one of Runway's own tools.
pub(crate) fn is_builtin(name: &str) -> bool {
    name.starts_with(BUILTIN_TOOL_PREFIX)
}

/// Whether the list tool is on for `namespace`.
pub(crate) fn list_tool_on(state: &McpState, namespace: &str) -> bool {
    state.config.list_tool && !state.config.list_tool_off_in.contains(namespace)
}

fn schema(v: Value) -> Arc<Map<String, Value>> {
    Arc::new(v.as_object().cloned().unwrap_or_default())
}

fn task_id_schema() -> Value {
    json!({"type": "string", "description": "The Run's name (the MCP taskId)", "maxLength": 253})
}

/// The list tool's definition.
pub(crate) fn list_tool() -> Tool {
    let phases: Vec<&str> = RunPhase::ALL.iter().map(|p| p.as_str()).collect();
    Tool::new(
        LIST_RUNS,
        "List Runs (tasks) of this namespace that you may see, newest first: the ones you \
         requested, asked you or you answered, or all of them if you may list runs. \
         Use it to find a taskId again; then use tasks/get.",
        schema(json!({
            "type": "object",
            "properties": {
                "workflow": {"type": "string", "description": "Only Runs of this Workflow (its name)"},
                "phase": {"type": "string", "enum": phases},
                "waitingForMe": {"type": "boolean", "description": "Only Runs with a question you may answer"},
                "requestedByMe": {"type": "boolean", "description": "Only Runs you requested"},
                "requestedBy": {"type": "string", "maxLength": 256, "description": "Only Runs this user requested (a user name)"},
                "since": {"type": "string", "format": "date-time", "description": "Only Runs created at or after this time (RFC 3339)"},
                "until": {"type": "string", "format": "date-time", "description": "Only Runs created before this time (RFC 3339)"},
                "labels": {"type": "string", "maxLength": 1024, "description": "Only Runs whose labels match this selector, as kubectl -l takes it: k=v, k!=v, k, !k, comma-separated"},
                "order": {"type": "string", "enum": ["newest", "oldest"], "default": "newest", "description": "Newest (default) or oldest first"},
                "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT},
                "cursor": {"type": "string", "description": "nextCursor of the previous page"},
                "archived": {"type": "boolean", "default": false, "description": "List finished Runs from the archive (kept after they are deleted) instead of the live ones"}
            },
            "additionalProperties": false
        })),
    )
    .with_title("List Runs")
    .with_annotations(reads_only())
}

/// What a tool that only reads the namespace tells clients about itself.
fn reads_only() -> rmcp::model::ToolAnnotations {
    rmcp::model::ToolAnnotations::new()
        .read_only(true)
        .destructive(false)
        .idempotent(true)
        .open_world(false)
}

/// What pausing and resuming tell clients: they change one Run, not destructively, and asking
/// twice is asking once.
fn changes_one_run() -> rmcp::model::ToolAnnotations {
    rmcp::model::ToolAnnotations::new()
        .read_only(false)
        .destructive(false)
        .idempotent(true)
        .open_world(false)
}

fn task_and_reason() -> Arc<Map<String, Value>> {
    schema(json!({
        "type": "object",
        "properties": {
            "taskId": task_id_schema(),
            "reason": {"type": "string", "maxLength": 1024}
        },
        "required": ["taskId"],
        "additionalProperties": false
    }))
}

/// The retry tool's definition.
fn retry_tool() -> Tool {
    Tool::new(
        RETRY_RUN,
        "Retry a failed or cancelled Run of yours from the step that failed: a new Run (its \
         own taskId) takes over the outputs of the steps that succeeded and runs the rest \
         again. Arguments are the original's, overridden key by key by `arguments`.",
        schema(json!({
            "type": "object",
            "properties": {
                "taskId": task_id_schema(),
                "arguments": {"type": "object", "description": "Arguments to change (the others are the original's)"}
            },
            "required": ["taskId"],
            "additionalProperties": false
        })),
    )
    .with_title("Retry a Run from its failed step")
    .with_annotations(
        rmcp::model::ToolAnnotations::new()
            .read_only(false)
            .destructive(false)
            .idempotent(false)
            .open_world(true),
    )
}

/// The app tools' definitions (listed for clients that declare MCP Apps).
pub(crate) fn app_tools() -> Vec<Tool> {
    vec![
        Tool::new(
            GET_RUN,
            "One Run in full: arguments, steps and attempts, questions and answers, Events; \
             with `archived`, as the archive kept it after it was deleted.",
            schema(json!({
                "type": "object",
                "properties": {
                    "taskId": task_id_schema(),
                    "archived": {"type": "boolean", "default": false, "description": "Read the Run from the archive"}
                },
                "required": ["taskId"],
                "additionalProperties": false
            })),
        )
        .with_title("Show a Run"),
        Tool::new(
            ANSWER_RUN,
            "Answer a Run's open questions (as tasks/update).",
            schema(json!({
                "type": "object",
                "properties": {
                    "taskId": task_id_schema(),
                    "inputResponses": {"type": "object", "description": "Answers by question key: {action, content}"}
                },
                "required": ["taskId", "inputResponses"],
                "additionalProperties": false
            })),
        )
        .with_title("Answer a Run"),
        Tool::new(
            CANCEL_RUN,
            "Cancel a Run (as tasks/cancel).",
            task_and_reason(),
        )
        .with_title("Cancel a Run"),
        Tool::new(
            PAUSE_RUN,
            "Pause a Run: steps that run finish, no new step starts until it is resumed; its \
             deadline keeps running.",
            task_and_reason(),
        )
        .with_title("Pause a Run")
        .with_annotations(changes_one_run()),
        Tool::new(
            RESUME_RUN,
            "Resume a paused Run, or one Runway paused when a step ran out of retries (that \
             step is tried once more).",
            task_and_reason(),
        )
        .with_title("Resume a Run")
        .with_annotations(changes_one_run()),
        retry_tool(),
        Tool::new(
            LIST_WORKFLOWS,
            "The namespace's Workflows: tool, Ready condition, the form that starts one, \
             schedules with their next and last time and the Runs they started.",
            schema(json!({"type": "object", "properties": {}, "additionalProperties": false})),
        )
        .with_title("List Workflows")
        .with_annotations(reads_only()),
    ]
}
