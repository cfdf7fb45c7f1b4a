//! Validation of steps: each kind's fields, `retry`, `forEach`, and the `dependsOn` graph of a
//! list of steps.

use serde_json::Value;

use super::fields::*;
use crate::api::{Step, StepKind, reasons};
use crate::engine::template;
use crate::protocol::codes;

/// `dependsOn` of a list: names of other steps of the same list, each once, and no cycle
/// (a cycle would leave its steps waiting for ever).
pub(super) fn graph(list_name: &str, list: &[Step]) -> Result<(), Invalid> {
    let bad = |m: String| invalid(reasons::INVALID_SPEC, m);
    let index = |n: &str| list.iter().position(|s| s.name == n);
    for s in list {
        let deps = s.depends_on.as_deref().unwrap_or_default();
        let mut seen = std::collections::BTreeSet::new();
        for d in deps {
            if d == &s.name {
                return Err(bad(format!("step {}: dependsOn names itself", s.name)));
            }
            if index(d).is_none() {
                return Err(bad(format!(
                    "step {}: dependsOn {d:?} is not a step of {list_name}",
                    s.name
                )));
            }
            if !seen.insert(d) {
                return Err(bad(format!("step {}: dependsOn names {d:?} twice", s.name)));
            }
        }
    }
    // Kahn's algorithm: whatever never reaches zero unmet dependencies is on a cycle.
    let deps: Vec<Vec<usize>> = (0..list.len())
        .map(|i| {
            crate::engine::branches::dependencies(list, i)
                .into_iter()
                .filter_map(index)
                .collect()
        })
        .collect();
    let mut done = vec![false; list.len()];
    let mut progress = true;
    while progress {
        progress = false;
        for i in 0..list.len() {
            if !done[i] && deps[i].iter().all(|&d| done[d]) {
                done[i] = true;
                progress = true;
            }
        }
    }
    let cycle: Vec<&str> = (0..list.len())
        .filter(|&i| !done[i])
        .map(|i| list[i].name.as_str())
        .collect();
    if cycle.is_empty() {
        Ok(())
    } else {
        Err(bad(format!(
            "{list_name}: dependsOn forms a cycle through {}",
            cycle.join(", ")
        )))
    }
}

/// A `forEach`: items that are a list or one expression, a parallelism within bounds, and a
/// kind whose items can run side by side (questions and failures belong to the whole step).
pub(super) fn for_each(
    f: &dyn Fn(&str) -> String,
    step: &Step,
    each: &crate::api::ForEach,
) -> Result<(), Invalid> {
    match &each.items {
        Value::Array(_) => tmpl(&f("forEach.items"), &each.items)?,
        Value::String(s) if template::is_lone_expression(s) => {
            template::check(s).map_err(|e| {
                invalid(
                    reasons::INVALID_TEMPLATE,
                    format!("{}: {e}", f("forEach.items")),
                )
            })?;
        }
        _ => {
            return Err(invalid(
                reasons::INVALID_SPEC,
                format!(
                    "{}: must be a list or one {{{{ expression }}}} rendering a list",
                    f("forEach.items")
                ),
            ));
        }
    }
    if let Some(p) = each.parallelism
        && !(1..=1000).contains(&p)
    {
        return Err(invalid(
            reasons::INVALID_SPEC,
            format!(
                "{}: {p} is not between 1 and 1000",
                f("forEach.parallelism")
            ),
        ));
    }
    match step.kind() {
        StepKind::Input(_) | StepKind::Sample(_) | StepKind::Fail(_) => Err(invalid(
            reasons::INVALID_SPEC,
            format!(
                "{}: input, sample and fail steps cannot run per item",
                f("forEach")
            ),
        )),
        _ => Ok(()),
    }
}

pub(super) fn step(step: &Step, caps: Capabilities) -> Result<(), Invalid> {
    let name = &step.name;
    let f = |field: &str| format!("step {name}: {field}");
    if let Some(each) = &step.for_each {
        for_each(&f, step, each)?;
    }
    if let Some(when) = &step.when {
        template::check_condition(when)
            .map_err(|e| invalid(reasons::INVALID_TEMPLATE, format!("{}: {e}", f("when"))))?;
    }
    if let Some(t) = &step.timeout {
        dur(&f("timeout"), t)?;
    }
    if let Some(r) = &step.retry {
        retry(&f, r)?;
    }
    match step.kind() {
        StepKind::Http(h) => http_step(&f, h),
        StepKind::Tool(t) => tool_step(&f, t),
        StepKind::Job(j) => job_step(&f, j, caps),
        StepKind::Input(i) => input_step(&f, i),
        StepKind::Sample(sm) => {
            text(&f("sample.prompt"), &sm.prompt)?;
            if let Some(s) = &sm.system_prompt {
                text(&f("sample.systemPrompt"), s)?;
            }
            if let Some(t) = &sm.timeout {
                dur(&f("sample.timeout"), t)?;
            }
            match sm.max_tokens {
                Some(n) if !(1..=100_000).contains(&n) => Err(invalid(
                    reasons::INVALID_SPEC,
                    format!("{}: {n} is not between 1 and 100000", f("sample.maxTokens")),
                )),
                _ => Ok(()),
            }
        }
        StepKind::Delay(d) => dur(&f("delay.duration"), &d.duration),
        StepKind::Workflow(w) => {
            if !crate::api::is_dns_subdomain(&w.name) {
                return Err(invalid(
                    reasons::INVALID_SPEC,
                    format!(
                        "{}: {:?} is not a Workflow name",
                        f("workflow.name"),
                        w.name
                    ),
                ));
            }
            match &w.arguments {
                Some(a) if !a.is_object() => Err(invalid(
                    reasons::INVALID_SPEC,
                    format!("{}: must be an object", f("workflow.arguments")),
                )),
                Some(a) => tmpl(&f("workflow.arguments"), a),
                None => Ok(()),
            }
        }
        StepKind::Fail(fl) => fail_step(&f, fl),
        StepKind::None => Err(invalid(
            reasons::INVALID_SPEC,
            format!("{}: no kind", f("step")),
        )),
    }
}

/// A step's retry policy: durations, and a limit that is an integer within the cap (or a
/// template that renders one).
pub(super) fn retry(
    f: &dyn Fn(&str) -> String,
    retry: &crate::api::RetryPolicy,
) -> Result<(), Invalid> {
    for (field, d) in [
        ("retry.backoff", &retry.backoff),
        ("retry.maxBackoff", &retry.max_backoff),
    ] {
        if let Some(d) = d {
            dur(&f(field), d)?;
        }
    }
    let literal = match &retry.limit {
        Some(Value::Number(n)) => n.as_u64(),
        Some(Value::String(s)) => s.trim().parse::<u64>().ok(),
        _ => None,
    };
    if let Some(n) = literal.filter(|n| *n > u64::from(crate::engine::budget::MAX_RETRY_LIMIT)) {
        return Err(invalid(
            reasons::INVALID_SPEC,
            format!(
                "{}: {n} exceeds the maximum of {}",
                f("retry.limit"),
                crate::engine::budget::MAX_RETRY_LIMIT
            ),
        ));
    }
    match &retry.limit {
        None => {}
        Some(Value::Number(n)) if n.as_u64().is_some() => {}
        Some(Value::String(s)) if s.contains("{{") => text(&f("retry.limit"), s)?,
        Some(Value::String(s)) if s.trim().parse::<u32>().is_ok() => {}
        Some(other) => {
            return Err(invalid(
                reasons::INVALID_SPEC,
                format!(
                    "{}: {other} is not a non-negative integer",
                    f("retry.limit")
                ),
            ));
        }
    }
    Ok(())
}

pub(super) fn http_step(
    f: &dyn Fn(&str) -> String,
    h: &crate::api::HttpStep,
) -> Result<(), Invalid> {
    text(&f("http.url"), &h.url)?;
    if !h.url.contains("{{") {
        url(&f("http.url"), &h.url)?;
    }
    for hd in &h.headers {
        if let Some(v) = &hd.value {
            text(&f(&format!("http.headers[{}]", hd.name)), v)?;
        }
    }
    if let Some(b) = &h.body {
        tmpl(&f("http.body"), b)?;
    }
    Ok(())
}

pub(super) fn tool_step(
    f: &dyn Fn(&str) -> String,
    t: &crate::api::ToolStep,
) -> Result<(), Invalid> {
    url(&f("tool.server.url"), &t.server.url)?;
    tool_name(&f("tool.name"), &t.name)?;
    for hd in &t.server.headers {
        let field = f(&format!("tool.server.headers[{}]", hd.name));
        if http::HeaderName::from_bytes(hd.name.as_bytes()).is_err() {
            return Err(invalid(
                reasons::INVALID_SPEC,
                format!("{field}: not a valid header name"),
            ));
        }
        match (&hd.value, &hd.value_from) {
            (Some(v), None) => text(&field, v)?,
            (None, Some(_)) => {}
            _ => {
                return Err(invalid(
                    reasons::INVALID_SPEC,
                    format!("{field}: set exactly one of value, valueFrom"),
                ));
            }
        }
    }
    if let Some(a) = &t.arguments {
        if !a.is_object() {
            return Err(invalid(
                reasons::INVALID_SPEC,
                format!("{}: must be an object", f("tool.arguments")),
            ));
        }
        tmpl(&f("tool.arguments"), a)?;
    }
    Ok(())
}

pub(super) fn job_step(
    f: &dyn Fn(&str) -> String,
    j: &crate::api::JobStep,
    caps: Capabilities,
) -> Result<(), Invalid> {
    if !caps.jobs {
        return Err(invalid(
            reasons::UNSUPPORTED_STEP,
            format!(
                "{}: job steps need the Kubernetes store (runway operator)",
                f("job")
            ),
        ));
    }
    if !j.template.get("spec").is_some_and(Value::is_object) {
        return Err(invalid(
            reasons::INVALID_SPEC,
            format!("{}: needs spec", f("job.template")),
        ));
    }
    Ok(())
}

/// An input step: unique request names, templates that compile, schemas that are JSON Schema
/// and ask for no secret, URL mode without a schema.
/// `approvals`: 1 to 10, and above 1 only for a form that names its approvers.
fn approvals(field: &str, r: &crate::api::InputRequestSpec) -> Result<(), Invalid> {
    let Some(n) = r.approvals else {
        return Ok(());
    };
    let why = if !(1..=10).contains(&n) {
        "must be 1 to 10"
    } else if n > 1 && r.approvers.is_none() {
        "more than one approval needs approvers (users or groups)"
    } else if n > 1 && r.url.is_some() {
        "url mode takes one answer"
    } else {
        return Ok(());
    };
    Err(invalid(reasons::INVALID_SPEC, format!("{field}: {why}")))
}

/// A `fail` step: its texts are templates, and a protocol error's code is the application's.
fn fail_step(f: &dyn Fn(&str) -> String, fl: &crate::api::FailStep) -> Result<(), Invalid> {
    if let Some(m) = &fl.message {
        text(&f("fail.message"), m)?;
    }
    let Some(e) = &fl.error else {
        return Ok(());
    };
    text(&f("fail.error.message"), &e.message)?;
    if codes::reserved_for_protocol(e.code) {
        return Err(invalid(
            reasons::INVALID_SPEC,
            format!(
                "{}: {} is reserved for the protocol (-32768 to -32000, but for -32602 and \
                 -32603): use an application code",
                f("fail.error.code"),
                e.code
            ),
        ));
    }
    Ok(())
}

pub(super) fn input_step(
    f: &dyn Fn(&str) -> String,
    i: &crate::api::InputStep,
) -> Result<(), Invalid> {
    let mut names = std::collections::BTreeSet::new();
    for r in &i.requests {
        if !names.insert(&r.name) {
            return Err(invalid(
                reasons::INVALID_SPEC,
                format!("{}: duplicate request {}", f("input"), r.name),
            ));
        }
        text(
            &f(&format!("input.requests[{}].message", r.name)),
            &r.message,
        )?;
        let field = |x: &str| f(&format!("input.requests[{}].{x}", r.name));
        if let Some(s) = &r.requested_schema {
            json_schema(&field("requestedSchema"), s)?;
            form(&field("requestedSchema"), s)?;
        }
        if let Some(u) = &r.url {
            if r.requested_schema.is_some() {
                return Err(invalid(
                    reasons::INVALID_SPEC,
                    format!("{}: url mode takes no requestedSchema", field("url")),
                ));
            }
            text(&field("url"), u)?;
            if !u.contains("{{") {
                url(&field("url"), u)?;
            }
        }
        approvals(&field("approvals"), r)?;
    }
    if let Some(t) = &i.timeout {
        dur(&f("input.timeout"), t)?;
    }
    Ok(())
}
