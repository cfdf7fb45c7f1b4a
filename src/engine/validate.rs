//! Validation of a Workflow beyond its schema: the CRD's CEL rules, JSON Schemas, templates,
//! durations and what the current store supports. Used wherever Workflows are loaded.

use serde_json::Value;

use super::{duration, result::CONTENT_TYPES, template};
use crate::api::{Step, StepKind, Workflow, WorkflowSpec, reasons};
use crate::protocol::BUILTIN_TOOL_PREFIX;

/// Why a Workflow is not Ready.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}: {message}")]
pub struct Invalid {
    /// Condition reason (`api::reasons`).
    pub reason: &'static str,
    /// What is wrong, naming the field.
    pub message: String,
}

fn invalid(reason: &'static str, message: impl Into<String>) -> Invalid {
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
    let age = |w: &Workflow| {
        (
            w.metadata.creation_timestamp.as_ref().map(|t| t.0),
            w.metadata.name.clone(),
        )
    };
    let mine = age(wf);
    let holder = namespace
        .into_iter()
        .filter(|o| {
            o.metadata.namespace == wf.metadata.namespace
                && o.metadata.name != wf.metadata.name
                && o.tool_name() == wf.tool_name()
                && age(o) < mine
                && workflow(o, caps).is_ok()
        })
        .min_by_key(|o| age(o));
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

/// Validate a Workflow spec (no CEL: for callers that already ran it).
pub fn spec(spec: &WorkflowSpec, caps: Capabilities) -> Result<(), Invalid> {
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
    }
    for e in &spec.elicit {
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
    schedules(spec)?;
    if let Some(c) = &spec.execution.concurrency {
        if !(1..=10_000).contains(&c.limit) {
            return Err(invalid(
                reasons::INVALID_SPEC,
                "execution.concurrency.limit: must be 1 to 10000".to_owned(),
            ));
        }
        if let Some(key) = &c.key {
            text("execution.concurrency.key", key)?;
        }
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
    graph("steps", &spec.steps)?;
    graph("finally", &spec.finally)?;
    if let Some(result) = &spec.result {
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
    }
    Ok(())
}

fn json_schema(field: &str, schema: &Value) -> Result<(), Invalid> {
    jsonschema::draft202012::new(schema)
        .map(|_| ())
        .map_err(|e| invalid(reasons::INVALID_SCHEMA, format!("{field}: {e}")))
}

fn tmpl(field: &str, v: &Value) -> Result<(), Invalid> {
    template::check_value(v)
        .map_err(|e| invalid(reasons::INVALID_TEMPLATE, format!("{field}: {e}")))
}

fn text(field: &str, s: &str) -> Result<(), Invalid> {
    template::check(s).map_err(|e| invalid(reasons::INVALID_TEMPLATE, format!("{field}: {e}")))
}

/// A duration field: a template, or else a literal that must parse now.
fn dur(field: &str, s: &str) -> Result<(), Invalid> {
    if s.contains("{{") {
        text(field, s)
    } else {
        duration::parse(s)
            .map(|_| ())
            .map_err(|e| invalid(reasons::INVALID_DURATION, format!("{field}: {e}")))
    }
}

/// `dependsOn` of a list: names of other steps of the same list, each once, and no cycle
/// (a cycle would leave its steps waiting for ever).
fn graph(list_name: &str, list: &[Step]) -> Result<(), Invalid> {
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
            super::branches::dependencies(list, i)
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
fn for_each(
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

fn step(step: &Step, caps: Capabilities) -> Result<(), Invalid> {
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
        StepKind::Fail(fl) => {
            if let Some(m) = &fl.message {
                text(&f("fail.message"), m)?;
            }
            if let Some(e) = &fl.error {
                text(&f("fail.error.message"), &e.message)?;
            }
            Ok(())
        }
        StepKind::None => Err(invalid(
            reasons::INVALID_SPEC,
            format!("{}: no kind", f("step")),
        )),
    }
}

/// A step's retry policy: durations, and a limit that is an integer within the cap (or a
/// template that renders one).
fn retry(f: &dyn Fn(&str) -> String, retry: &crate::api::RetryPolicy) -> Result<(), Invalid> {
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
    if let Some(n) = literal.filter(|n| *n > u64::from(super::budget::MAX_RETRY_LIMIT)) {
        return Err(invalid(
            reasons::INVALID_SPEC,
            format!(
                "{}: {n} exceeds the maximum of {}",
                f("retry.limit"),
                super::budget::MAX_RETRY_LIMIT
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

fn http_step(f: &dyn Fn(&str) -> String, h: &crate::api::HttpStep) -> Result<(), Invalid> {
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

fn tool_step(f: &dyn Fn(&str) -> String, t: &crate::api::ToolStep) -> Result<(), Invalid> {
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

fn job_step(
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
fn input_step(f: &dyn Fn(&str) -> String, i: &crate::api::InputStep) -> Result<(), Invalid> {
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
            if let Some(secret) = secret_field(s) {
                return Err(invalid(
                    reasons::INVALID_SPEC,
                    format!(
                        "{}: field {secret} asks for a secret; forms must not collect \
                         passwords, tokens, API keys or card data: use url mode (url:) \
                         to send the person to a page that takes it",
                        field("requestedSchema")
                    ),
                ));
            }
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
    }
    if let Some(t) = &i.timeout {
        dur(&f("input.timeout"), t)?;
    }
    Ok(())
}

/// A step name: the CRD's pattern, for stores without an API server to apply it. No dots, so
/// that `<step>.<request>` input keys of different steps never collide.
/// Every schedule: a unique lowercase name, a cron expression and time zone that read, a
/// deadline that parses, and arguments the tool's input schema accepts.
fn schedules(spec: &WorkflowSpec) -> Result<(), Invalid> {
    let bad = |name: &str, why: String| {
        invalid(
            reasons::INVALID_SCHEDULE,
            format!("schedules[{name}]: {why}"),
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
        super::schedule::timetable(s).map_err(|e| bad(&s.name, e))?;
        if let Some(d) = &s.starting_deadline {
            duration::parse(d).map_err(|e| bad(&s.name, format!("startingDeadline: {e}")))?;
        }
        let args = s.arguments.clone().unwrap_or_else(|| serde_json::json!({}));
        if !args.is_object() {
            return Err(bad(&s.name, "arguments must be an object".into()));
        }
        if let Some(schema) = &spec.tool.input_schema {
            let errors = super::budget::schema_errors(schema, &args)
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

fn step_name(s: &str) -> Result<(), Invalid> {
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
fn tool_name(field: &str, s: &str) -> Result<(), Invalid> {
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

/// Words in a form field's name, title or format that mean a secret a form must not collect.
const SECRET_WORDS: [&str; 12] = [
    "password",
    "passwd",
    "passphrase",
    "secret",
    "token",
    "apikey",
    "api_key",
    "api-key",
    "cardnumber",
    "card_number",
    "cvv",
    "cvc",
];

/// The first property of an elicitation schema that asks for a secret, by name, title or
/// `format: password`.
fn secret_field(schema: &Value) -> Option<String> {
    let props = schema.get("properties")?.as_object()?;
    props.iter().find_map(|(name, p)| {
        let title = p.get("title").and_then(Value::as_str).unwrap_or_default();
        let hay = format!("{name} {title}").to_ascii_lowercase();
        let secret = SECRET_WORDS.iter().any(|w| hay.contains(w))
            || p.get("format").and_then(Value::as_str) == Some("password");
        secret.then(|| name.clone())
    })
}

fn url(field: &str, s: &str) -> Result<(), Invalid> {
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
