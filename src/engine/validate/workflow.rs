//! Validation of a Workflow beyond its schema: the CRD's CEL rules, JSON Schemas, templates,
//! durations and what the current store supports. Used wherever Workflows are loaded.

use serde_json::Value;

use crate::api::{ResultSpec, StepKind, Workflow, WorkflowSpec, reasons};
use crate::engine::duration;
use crate::engine::render::dns_part;
use crate::engine::result::CONTENT_TYPES;
use crate::protocol::BUILTIN_TOOL_PREFIX;

use super::fields::*;
use super::steps::{graph, step};

/// Validate a Workflow as the API server and Runway together would.
pub fn workflow(wf: &Workflow, caps: Capabilities) -> Result<(), Invalid> {
    wf.validate_cel()
        .map_err(|e| invalid(reasons::INVALID_SPEC, e.to_string()))?;
    spec(&wf.spec, caps)
}

/// The `Ready` verdict of `wf` among the Workflows of its namespace (`namespace` may include
/// `wf` itself): its own validity, then the tool-name rule. Of the valid Workflows offering one
/// tool name, the oldest (by creation time, then name) keeps it, so applying a new Workflow can
/// never take a tool away from the one that serves it. Both stores decide readiness here.
pub(crate) fn readiness<'a>(
    wf: &Workflow,
    namespace: impl IntoIterator<Item = &'a Workflow>,
    caps: Capabilities,
) -> Result<(), Invalid> {
    workflow(wf, caps)?;
    let namespace: Vec<&Workflow> = namespace
        .into_iter()
        .filter(|o| o.metadata.namespace == wf.metadata.namespace)
        .collect();
    if let Some(path) = cycle(wf, &namespace) {
        return Err(invalid(
            reasons::WORKFLOW_CYCLE,
            format!(
                "workflow steps lead back to this workflow ({}): a workflow may not call itself, \
                 directly or through others",
                path.join(" -> ")
            ),
        ));
    }
    let mine = wf.seniority();
    let holder = namespace
        .into_iter()
        .filter(|o| {
            o.metadata.name != wf.metadata.name
                && o.tool_name() == wf.tool_name()
                && o.seniority() < mine
                && workflow(o, caps).is_ok()
        })
        .min_by_key(|o| o.seniority());
    match holder {
        Some(o) => Err(invalid(
            reasons::DUPLICATE_TOOL,
            format!(
                "tool name {} is already offered by workflow {}, which is older",
                wf.tool_name(),
                o.metadata.name.as_deref().unwrap_or_default()
            ),
        )),
        None => Ok(()),
    }
}

/// The Workflows a Workflow's `workflow` steps start, by name.
fn calls(spec: &WorkflowSpec) -> impl Iterator<Item = &str> {
    spec.all_steps()
        .filter_map(|s| s.workflow.as_ref().map(|w| w.name.as_str()))
}

/// A path of `workflow` steps from `wf` back to itself through the Workflows of its
/// namespace, if there is one (`[a, b, a]`). Depth-first, each Workflow visited once.
fn cycle(wf: &Workflow, namespace: &[&Workflow]) -> Option<Vec<String>> {
    let me = wf.metadata.name.clone().unwrap_or_default();
    let spec_of = |name: &str| {
        if name == me {
            return Some(&wf.spec);
        }
        namespace
            .iter()
            .find(|o| o.metadata.name.as_deref() == Some(name))
            .map(|o| &o.spec)
    };
    let mut seen = std::collections::BTreeSet::new();
    let mut stack: Vec<Vec<String>> = vec![vec![me.clone()]];
    while let Some(path) = stack.pop() {
        let last = path.last().expect("paths are never empty");
        let Some(spec) = spec_of(last) else { continue };
        for next in calls(spec) {
            let mut longer = path.clone();
            longer.push(next.to_owned());
            if next == me {
                return Some(longer);
            }
            if seen.insert(next.to_owned()) {
                stack.push(longer);
            }
        }
    }
    None
}

/// Validate a Workflow spec (no CEL: for callers that already ran it).
pub fn spec(spec: &WorkflowSpec, caps: Capabilities) -> Result<(), Invalid> {
    tool_and_execution(spec)?;
    schedules(spec)?;
    let mut names = std::collections::BTreeSet::new();
    for step in spec.all_steps() {
        step_name(&step.name)?;
        if !names.insert(step.name.as_str()) {
            return Err(invalid(
                reasons::INVALID_SPEC,
                format!(
                    "step names must be unique across steps and finally: {:?}",
                    step.name
                ),
            ));
        }
        self::step(step, caps)?;
    }
    distinct_attempt_names(spec)?;
    graph("steps", &spec.steps)?;
    graph("finally", &spec.finally)?;
    match &spec.result {
        Some(r) => result(r),
        None => Ok(()),
    }
}

/// The Jobs and child Runs of two steps are named apart: the names are made of the step's name
/// as a DNS label part (lowercase, `_` as `-`) and an item's index (`deploy[2]` as `deploy-2`),
/// so `Build` and `build`, `run_tests` and `run-tests`, or a `forEach` step `deploy` and a step
/// `deploy-2` would share them — and the second to start would take the first one's Job or
/// child as its own. (A Job and a child Run never meet: they are different kinds.)
fn distinct_attempt_names(spec: &WorkflowSpec) -> Result<(), Invalid> {
    let named: Vec<(&crate::api::Step, bool, String)> = spec
        .all_steps()
        .filter_map(|s| match s.kind() {
            StepKind::Job(_) => Some((s, true, dns_part(&s.name))),
            StepKind::Workflow(_) => Some((s, false, dns_part(&s.name))),
            _ => None,
        })
        .collect();
    // Whether `each`'s items are named like the step `other` (`deploy` and `deploy-2`): only a
    // step that is not itself a `forEach` is named by its own name.
    let item_named_as = |each: &(&crate::api::Step, bool, String), other: &(_, _, String)| {
        let (step, _, part) = each;
        let (other_step, _, other_part): &(&crate::api::Step, bool, String) = other;
        step.for_each.is_some()
            && other_step.for_each.is_none()
            && other_part
                .strip_prefix(part.as_str())
                .and_then(|rest| rest.strip_prefix('-'))
                .is_some_and(|n| n.parse::<usize>().is_ok_and(|i| i.to_string() == n))
    };
    for (i, a) in named.iter().enumerate() {
        for b in named[i + 1..].iter().filter(|b| b.1 == a.1) {
            if a.2 == b.2 || item_named_as(a, b) || item_named_as(b, a) {
                return Err(invalid(
                    reasons::INVALID_SPEC,
                    format!(
                        "steps {:?} and {:?} would give their Jobs or child Runs the same names",
                        a.0.name, b.0.name
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// The tool's schemas and name, the pre-run elicitation forms, and `execution`.
fn tool_and_execution(spec: &WorkflowSpec) -> Result<(), Invalid> {
    if let Some(schema) = &spec.tool.input_schema {
        json_schema("tool.inputSchema", schema)?;
        if schema.get("type").and_then(Value::as_str) != Some("object") {
            return Err(invalid(
                reasons::INVALID_SCHEMA,
                "tool.inputSchema must have type: object",
            ));
        }
    }
    if let Some(schema) = &spec.tool.output_schema {
        json_schema("tool.outputSchema", schema)?;
        // MCP: a tool with an output schema answers with structured content that meets it.
        // Without one, every Run would do its work and then fail on its result.
        if spec
            .result
            .as_ref()
            .is_none_or(|r| r.structured_content.is_none())
        {
            return Err(invalid(
                reasons::INVALID_SPEC,
                "tool.outputSchema needs result.structuredContent (the structured result it describes)",
            ));
        }
    }
    for e in &spec.elicit {
        json_schema(
            &format!("elicit {}: requestedSchema", e.key),
            &e.requested_schema,
        )?;
        form(
            &format!("elicit {}: requestedSchema", e.key),
            &e.requested_schema,
        )?;
        if !e
            .requested_schema
            .get("properties")
            .is_some_and(Value::is_object)
        {
            return Err(invalid(
                reasons::INVALID_SCHEMA,
                format!("elicit {}: requestedSchema needs properties", e.key),
            ));
        }
    }
    for (field, d) in [
        ("execution.timeout", &spec.execution.timeout),
        (
            "execution.ttlAfterFinished",
            &spec.execution.ttl_after_finished,
        ),
        ("execution.pollInterval", &spec.execution.poll_interval),
    ] {
        if let Some(d) = d {
            duration::parse(d)
                .map_err(|e| invalid(reasons::INVALID_DURATION, format!("{field}: {e}")))?;
        }
    }
    if let Some(c) = &spec.execution.concurrency {
        concurrency(c)?;
    }
    if let Some(n) = &spec.notify {
        notify(n)?;
    }
    if let Some(name) = &spec.tool.name {
        tool_name("tool.name", name)?;
        if name.starts_with(BUILTIN_TOOL_PREFIX) {
            return Err(invalid(
                reasons::INVALID_SPEC,
                format!(
                    "tool.name: {name:?}: names starting with {BUILTIN_TOOL_PREFIX} are Runway's own tools"
                ),
            ));
        }
    }
    Ok(())
}

/// The result templates: known content types, templates that parse.
/// `execution.concurrency`: its limit and priority in range, its key a template, its queue
/// timeout a duration.
fn concurrency(c: &crate::api::ConcurrencySpec) -> Result<(), Invalid> {
    if !(1..=10_000).contains(&c.limit) {
        return Err(invalid(
            reasons::INVALID_SPEC,
            "execution.concurrency.limit: must be 1 to 10000".to_owned(),
        ));
    }
    if let Some(key) = &c.key {
        text("execution.concurrency.key", key)?;
    }
    if c.priority.is_some_and(|p| !(-1000..=1000).contains(&p)) {
        return Err(invalid(
            reasons::INVALID_SPEC,
            "execution.concurrency.priority: must be -1000 to 1000".to_owned(),
        ));
    }
    if let Some(d) = &c.queue_timeout {
        duration::parse(d).map_err(|e| {
            invalid(
                reasons::INVALID_DURATION,
                format!("execution.concurrency.queueTimeout: {e}"),
            )
        })?;
    }
    Ok(())
}

/// `notify`: web addresses, header templates and a duration.
fn notify(n: &crate::api::NotifySpec) -> Result<(), Invalid> {
    url("notify.url", &n.url)?;
    if let Some(c) = &n.console_url {
        url("notify.consoleUrl", c)?;
    }
    for h in &n.headers {
        if let Some(v) = &h.value {
            text(&format!("notify.headers[{}]", h.name), v)?;
        }
    }
    if let Some(d) = &n.remind_before {
        duration::parse(d).map_err(|e| {
            invalid(
                reasons::INVALID_DURATION,
                format!("notify.remindBefore: {e}"),
            )
        })?;
    }
    Ok(())
}

fn result(result: &ResultSpec) -> Result<(), Invalid> {
    for (i, item) in result.content.iter().enumerate() {
        let ty = item.get("type").and_then(Value::as_str).unwrap_or_default();
        if !CONTENT_TYPES.contains(&ty) {
            return Err(invalid(
                reasons::INVALID_SPEC,
                format!("result.content[{i}].type {ty:?} is not one of {CONTENT_TYPES:?}"),
            ));
        }
        tmpl(&format!("result.content[{i}]"), item)?;
    }
    if let Some(sc) = &result.structured_content {
        tmpl("result.structuredContent", sc)?;
    }
    Ok(())
}

/// A step name: the CRD's pattern, for stores without an API server to apply it. No dots, so
/// that `<step>.<request>` input keys of different steps never collide.
/// Every schedule: a unique lowercase name, a cron expression and time zone that read, a
/// deadline that parses, and arguments the tool's input schema accepts.
fn schedules(spec: &WorkflowSpec) -> Result<(), Invalid> {
    // One line, whatever the cron library says: a condition message is read in a column.
    let bad = |name: &str, why: String| {
        let why: Vec<&str> = why
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        invalid(
            reasons::INVALID_SCHEDULE,
            format!("schedules[{name}]: {}", why.join(" ")),
        )
    };
    let mut names = std::collections::BTreeSet::new();
    for s in &spec.schedules {
        if !crate::api::is_dns_label(&s.name) || s.name.len() > 40 {
            return Err(bad(
                &s.name,
                "name must be a DNS label of at most 40 characters".into(),
            ));
        }
        if !names.insert(s.name.as_str()) {
            return Err(bad(&s.name, "name is used twice".into()));
        }
        crate::engine::schedule::timetable(s).map_err(|e| bad(&s.name, e.to_string()))?;
        if let Some(d) = &s.starting_deadline {
            duration::parse(d).map_err(|e| bad(&s.name, format!("startingDeadline: {e}")))?;
        }
        let args = s.arguments.clone().unwrap_or_else(|| serde_json::json!({}));
        if !args.is_object() {
            return Err(bad(&s.name, "arguments must be an object".into()));
        }
        if let Some(schema) = &spec.tool.input_schema {
            let errors = crate::engine::budget::schema_errors(schema, &args)
                .map_err(|e| bad(&s.name, format!("inputSchema: {e}")))?;
            if let Some(first) = errors.first() {
                return Err(bad(
                    &s.name,
                    format!(
                        "arguments do not match tool.inputSchema: {}",
                        first["message"].as_str().unwrap_or_default()
                    ),
                ));
            }
        }
    }
    Ok(())
}
