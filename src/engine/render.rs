//! Rendering a step's templates into work for an executor: HTTP requests, tool calls and
//! their headers, Job names.

use serde_json::{Value, json};

use super::effects::{Body, HeaderValue, HttpRequest};
use super::{context, template};
use crate::api::{Header, HttpStep, Run, Step, StepKind, ToolStep};

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
