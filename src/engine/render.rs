//! Rendering a step's templates into work for an executor: HTTP requests, tool calls and
//! their headers, Job names.

use serde_json::{Value, json};

use super::effects::{Action, Body, HeaderValue, HttpRequest};
use super::{context, template};
use crate::api::{
    ChildWorkflowStep, Header, HttpStep, Run, Step, StepKind, StepRecord, ToolStep, item_of,
};

pub(super) fn render_header(h: &Header, ctx: &Value) -> Result<HeaderValue, String> {
    match (&h.value, &h.value_from) {
        (Some(v), _) => Ok(HeaderValue::Inline {
            name: h.name.clone(),
            value: template::render(v, ctx).map_err(|e| format!("header {}: {e}", h.name))?,
        }),
        (None, Some(from)) => Ok(HeaderValue::Secret {
            name: h.name.clone(),
            secret: from.secret_key_ref.name.clone(),
            key: from.secret_key_ref.key.clone(),
        }),
        (None, None) => Err(format!("header {} has no value", h.name)),
    }
}

/// Render a `tool` step's arguments (an object; `{}` when absent) and server headers.
pub(super) fn render_tool(
    tool: &ToolStep,
    ctx: &Value,
) -> Result<(Value, Vec<HeaderValue>), String> {
    let arguments = match &tool.arguments {
        None => json!({}),
        Some(a) => template::render_value(a, ctx).map_err(|e| format!("tool.arguments: {e}"))?,
    };
    if !arguments.is_object() {
        return Err(format!(
            "tool.arguments must render to an object, not {arguments}"
        ));
    }
    Ok((arguments, tool_headers(tool, ctx)?))
}

pub(super) fn tool_headers(tool: &ToolStep, ctx: &Value) -> Result<Vec<HeaderValue>, String> {
    tool.server
        .headers
        .iter()
        .map(|h| render_header(h, ctx))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("tool.server.{e}"))
}

/// The server and rendered headers of `tool` step `step` of a started Run, for work that
/// reaches its upstream outside an attempt (cancelling the upstream task).
pub fn upstream_server(run: &Run, step: &str) -> Result<(ToolStep, Vec<HeaderValue>), String> {
    let wf = run
        .workflow_snapshot()
        .ok_or("the run has no workflow snapshot")?;
    let Some(StepKind::Tool(tool)) = wf.step(step).map(Step::kind) else {
        return Err(format!("step {step} is not a tool step"));
    };
    let status = run.status.clone().unwrap_or_default();
    let ctx = context(run, &status);
    Ok((tool.clone(), tool_headers(tool, &ctx)?))
}

/// Deterministic Job name for a run, step (or item, `deploy[2]`) and attempt: a DNS label of
/// at most 63 characters.
pub fn job_name(run: &str, step: &str, attempt: u32) -> String {
    let suffix = format!("-{}-{attempt}", dns_part(step));
    let keep = 63usize.saturating_sub(suffix.len()).min(run.len());
    format!("{}{suffix}", &run[..keep]).to_lowercase()
}

/// Deterministic name of the child Run a `workflow` step's attempt starts: `<run>-<step>-<n>`,
/// shortened with a hash of the whole when longer than 63 characters (so that it stays a
/// valid label value and two long names never meet).
pub fn child_run_name(run: &str, step: &str, attempt: u32) -> String {
    let full = format!("{run}-{}-{attempt}", dns_part(step)).to_lowercase();
    if full.len() <= 63 {
        return full;
    }
    let hash = format!("-{:016x}", super::stable_hash(full.bytes()));
    let mut keep = 63 - hash.len();
    while !full.is_char_boundary(keep) {
        keep -= 1;
    }
    format!("{}{hash}", full[..keep].trim_end_matches('-'))
}

/// A step or item name as a DNS label part: `_` and brackets become `-`.
fn dns_part(name: &str) -> String {
    name.replace(['_', '['], "-").replace(']', "")
}

/// The request of an `http` step, its templates rendered.
pub(super) fn render_http(http: &HttpStep, ctx: &Value) -> Result<HttpRequest, String> {
    let url = template::render_url(&http.url, ctx).map_err(|e| format!("url: {e}"))?;
    let headers = http
        .headers
        .iter()
        .map(|h| render_header(h, ctx))
        .collect::<Result<Vec<_>, _>>()?;
    let body = match &http.body {
        None => None,
        Some(Value::String(s)) => Some(Body::Text(
            template::render(s, ctx).map_err(|e| format!("body: {e}"))?,
        )),
        Some(v) => Some(Body::Json(
            template::render_value(v, ctx).map_err(|e| format!("body: {e}"))?,
        )),
    };
    let method = http
        .method
        .clone()
        .unwrap_or_else(|| if body.is_some() { "POST" } else { "GET" }.into())
        .to_uppercase();
    Ok(HttpRequest {
        method,
        url,
        headers,
        body,
        success_codes: http.success_codes.clone(),
    })
}

/// The work a running `http`, `tool`, `workflow` or `job` step asks for, its templates
/// rendered against `ctx`; `None` for a kind that has no executor work.
pub(super) fn running_action(
    run: &Run,
    kind: StepKind<'_>,
    rec: &StepRecord,
    ctx: &Value,
) -> Option<Result<Action, String>> {
    let run_name = run.metadata.name.as_deref().unwrap_or("run");
    Some(match kind {
        StepKind::Http(http) => render_http(http, ctx).map(Action::Http),
        StepKind::Tool(tool) => render_tool(tool, ctx).map(|(arguments, headers)| Action::Tool {
            step: tool.clone(),
            arguments,
            headers,
            upstream_task_id: rec.upstream_task_id.clone(),
            answers: rec.pending_answers.clone(),
            request_state: rec.upstream_request_state.clone(),
        }),
        StepKind::Workflow(child) => child_action(run_name, child, rec, ctx),
        StepKind::Job(job) => Ok(Action::Job {
            step: job.clone(),
            job_name: rec
                .job_name
                .clone()
                .unwrap_or_else(|| job_name(run_name, &rec.name, rec.attempt)),
            env: item_env(&rec.name, ctx),
        }),
        _ => return None,
    })
}

/// A `workflow` step's child Run: its arguments rendered (an object) and its name, fixed at
/// the first attempt that chose one.
fn child_action(
    run_name: &str,
    child: &ChildWorkflowStep,
    rec: &StepRecord,
    ctx: &Value,
) -> Result<Action, String> {
    let arguments = match &child.arguments {
        None => json!({}),
        Some(a) => {
            template::render_value(a, ctx).map_err(|e| format!("workflow.arguments: {e}"))?
        }
    };
    if !arguments.is_object() {
        return Err(format!(
            "workflow.arguments must render to an object, not {arguments}"
        ));
    }
    Ok(Action::Child {
        workflow: child.name.clone(),
        arguments,
        run_name: rec
            .child_run
            .clone()
            .unwrap_or_else(|| child_run_name(run_name, &rec.name, rec.attempt)),
    })
}

/// `RUNWAY_ITEM` (a string item as it is, anything else as JSON) and `RUNWAY_INDEX` for the
/// Job of an item of a `forEach` step; nothing for any other step.
fn item_env(record: &str, ctx: &Value) -> Vec<(String, String)> {
    if item_of(record).is_none() {
        return Vec::new();
    }
    let item = match &ctx["item"] {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    vec![
        ("RUNWAY_ITEM".to_owned(), item),
        ("RUNWAY_INDEX".to_owned(), ctx["index"].to_string()),
    ]
}
