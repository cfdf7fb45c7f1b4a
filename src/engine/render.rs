//! Rendering a step's templates into work for an executor: HTTP requests, tool calls and
//! their headers, Job names.

use serde_json::{Value, json};

use super::context;
use super::effects::{Action, Body, HeaderValue, HttpRequest};
use super::template::{self, TemplateError};
use crate::api::{
    ChildWorkflowStep, Header, HttpStep, Run, Step, StepKind, StepRecord, ToolStep, item_of,
};

/// Why a step's header has no value.
#[derive(Debug, thiserror::Error)]
pub enum HeaderError {
    /// Its `value` did not render.
    #[error("header {name}: {source}")]
    Template {
        /// The header's name.
        name: String,
        /// The template's error.
        #[source]
        source: TemplateError,
    },
    /// It has neither `value` nor `valueFrom`.
    #[error("header {name} has no value")]
    NoValue {
        /// The header's name.
        name: String,
    },
}

/// Why a step's templates do not render into work for an executor; the message names the
/// field.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// A header of an `http` step.
    #[error(transparent)]
    Header(#[from] HeaderError),
    /// A header of a `tool` step's server.
    #[error("tool.server.{0}")]
    ServerHeader(#[source] HeaderError),
    /// The `url` of an `http` step did not render.
    #[error("url: {0}")]
    Url(#[source] TemplateError),
    /// The `body` of an `http` step did not render.
    #[error("body: {0}")]
    Body(#[source] TemplateError),
    /// `tool.arguments` or `workflow.arguments` did not render.
    #[error("{field}: {source}")]
    Arguments {
        /// The field.
        field: &'static str,
        /// The template's error.
        #[source]
        source: TemplateError,
    },
    /// `tool.arguments` or `workflow.arguments` rendered to something else than an object.
    #[error("{field} must render to an object, not {value}")]
    NotAnObject {
        /// The field.
        field: &'static str,
        /// What it rendered to.
        value: Value,
    },
    /// Rendered arguments over the depth or size budget (they become a stored Run or a stored
    /// request).
    #[error(transparent)]
    Budget(#[from] super::budget::BudgetError),
    /// The Run has not started: there is no snapshot to read the step from.
    #[error("the run has no workflow snapshot")]
    NoSnapshot,
    /// The step named is not a `tool` step of the snapshot.
    #[error("step {0} is not a tool step")]
    NotAToolStep(String),
}

pub(super) fn render_header(h: &Header, ctx: &Value) -> Result<HeaderValue, HeaderError> {
    match (&h.value, &h.value_from) {
        (Some(v), _) => Ok(HeaderValue::Inline {
            name: h.name.clone(),
            value: template::render(v, ctx).map_err(|source| HeaderError::Template {
                name: h.name.clone(),
                source,
            })?,
        }),
        (None, Some(from)) => Ok(HeaderValue::Secret {
            name: h.name.clone(),
            secret: from.secret_key_ref.name.clone(),
            key: from.secret_key_ref.key.clone(),
        }),
        (None, None) => Err(HeaderError::NoValue {
            name: h.name.clone(),
        }),
    }
}

/// Render `tool.arguments` or `workflow.arguments` (named `field`): an object, `{}` when
/// absent.
fn render_arguments(
    field: &'static str,
    arguments: Option<&Value>,
    ctx: &Value,
) -> Result<Value, RenderError> {
    let value = match arguments {
        None => json!({}),
        Some(a) => template::render_value(a, ctx)
            .map_err(|source| RenderError::Arguments { field, source })?,
    };
    if !value.is_object() {
        return Err(RenderError::NotAnObject { field, value });
    }
    super::budget::check(field, &value, super::budget::MAX_ARGUMENT_BYTES)?;
    Ok(value)
}

/// Render a `tool` step's arguments (an object; `{}` when absent) and server headers.
pub(super) fn render_tool(
    tool: &ToolStep,
    ctx: &Value,
) -> Result<(Value, Vec<HeaderValue>), RenderError> {
    let arguments = render_arguments("tool.arguments", tool.arguments.as_ref(), ctx)?;
    Ok((arguments, tool_headers(tool, ctx)?))
}

pub(super) fn tool_headers(tool: &ToolStep, ctx: &Value) -> Result<Vec<HeaderValue>, RenderError> {
    tool.server
        .headers
        .iter()
        .map(|h| render_header(h, ctx))
        .collect::<Result<Vec<_>, _>>()
        .map_err(RenderError::ServerHeader)
}

/// The server and rendered headers of `tool` step `step` of a started Run, for work that
/// reaches its upstream outside an attempt (cancelling the upstream task).
pub fn upstream_server(run: &Run, step: &str) -> Result<(ToolStep, Vec<HeaderValue>), RenderError> {
    let wf = run.workflow_snapshot().ok_or(RenderError::NoSnapshot)?;
    let Some(StepKind::Tool(tool)) = wf.step(step).map(Step::kind) else {
        return Err(RenderError::NotAToolStep(step.to_owned()));
    };
    let status = run.status.clone().unwrap_or_default();
    let ctx = context(run, &status);
    Ok((tool.clone(), tool_headers(tool, &ctx)?))
}

/// Deterministic Job name for a run, step (or item, `deploy[2]`) and attempt: a DNS label of
/// at most 63 characters, as [`child_run_name`] makes it (a long name keeps a hash of the
/// whole, so that two Runs whose names share a long prefix never meet).
pub fn job_name(run: &str, step: &str, attempt: u32) -> String {
    child_run_name(run, step, attempt)
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

/// A step or item name as a DNS label part: `_` and brackets become `-`, letters lowercase.
/// Workflow validation refuses two steps whose Jobs or child Runs this would name alike.
pub(crate) fn dns_part(name: &str) -> String {
    name.replace(['_', '['], "-")
        .replace(']', "")
        .to_lowercase()
}

/// The request of an `http` step, its templates rendered.
pub(super) fn render_http(http: &HttpStep, ctx: &Value) -> Result<HttpRequest, RenderError> {
    let url = template::render_url(&http.url, ctx).map_err(RenderError::Url)?;
    let headers = http
        .headers
        .iter()
        .map(|h| render_header(h, ctx))
        .collect::<Result<Vec<_>, _>>()?;
    let body = match &http.body {
        None => None,
        Some(Value::String(s)) => Some(Body::Text(
            template::render(s, ctx).map_err(RenderError::Body)?,
        )),
        Some(v) => Some(Body::Json(
            template::render_value(v, ctx).map_err(RenderError::Body)?,
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
) -> Option<Result<Action, RenderError>> {
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
) -> Result<Action, RenderError> {
    let arguments = render_arguments("workflow.arguments", child.arguments.as_ref(), ctx)?;
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
/// Job of an item of a `forEach` step; nothing for any other step. The kubelet expands
/// `$(NAME)` in env values from the container's other variables, which may come from Secrets,
/// and reads `$$` as one `$`, so every `$` of an item is doubled: escaping only `$(` would
/// turn `$$(NAME)` into `$$$(NAME)`, a literal `$` and then an expansion. The container sees
/// the item as it was.
fn item_env(record: &str, ctx: &Value) -> Vec<(String, String)> {
    if item_of(record).is_none() {
        return Vec::new();
    }
    let item = match &ctx["item"] {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
    .replace('$', "$$");
    vec![
        ("RUNWAY_ITEM".to_owned(), item),
        ("RUNWAY_INDEX".to_owned(), ctx["index"].to_string()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The kubelet's reading of an env value (Kubernetes' `third_party/forked/golang/expansion`):
    /// `$$` is one `$`, `$(NAME)` of a defined variable its value, anything else as written.
    fn kubelet_expands(value: &str, vars: &[(&str, &str)]) -> String {
        let mut out = String::new();
        let mut rest = value;
        while let Some(at) = rest.find('$') {
            out.push_str(&rest[..at]);
            let after = &rest[at + 1..];
            if let Some(tail) = after.strip_prefix('$') {
                out.push('$');
                rest = tail;
            } else if let Some(open) = after.strip_prefix('(')
                && let Some(close) = open.find(')')
                && let Some((_, v)) = vars.iter().find(|(n, _)| *n == &open[..close])
            {
                out.push_str(v);
                rest = &open[close + 1..];
            } else {
                out.push('$');
                rest = after;
            }
        }
        out.push_str(rest);
        out
    }

    #[test]
    fn an_item_reaches_a_job_as_it_is_never_expanded_by_the_kubelet() {
        let secret = [("DB_PASSWORD", "hunter2")];
        // The model is the kubelet's: an unescaped reference is expanded.
        assert_eq!(kubelet_expands("$(DB_PASSWORD)", &secret), "hunter2");
        for item in [
            "$(DB_PASSWORD)",
            "$$(DB_PASSWORD)",
            "$$$(DB_PASSWORD)",
            "a $ b $$ c $(UNSET) $",
            "$",
        ] {
            let ctx = json!({"item": item, "index": 3});
            let env = item_env("deploy[3]", &ctx);
            assert_eq!(env[0].0, "RUNWAY_ITEM");
            assert_eq!(kubelet_expands(&env[0].1, &secret), item, "{env:?}");
            assert_eq!(env[1], ("RUNWAY_INDEX".to_owned(), "3".to_owned()));
        }
        let ctx = json!({"item": {"k": "$(DB_PASSWORD)"}, "index": 0});
        let env = item_env("deploy[0]", &ctx);
        assert_eq!(env[0].1, r#"{"k":"$$(DB_PASSWORD)"}"#);
        assert!(item_env("deploy", &ctx).is_empty());
    }
}
