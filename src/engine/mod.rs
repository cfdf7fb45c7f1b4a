//! The pure core: given a Run, the live Workflow (only needed before the Run starts) and `now`,
//! decide what happens next. No I/O, no clock, no store. The controller writes the status this
//! module returns and performs the effects it asks for; executors report back through [`record`].

pub mod budget;
pub mod duration;
pub mod input;
mod result;
pub mod template;
pub mod validate;

use std::collections::BTreeMap;

use jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};

use crate::api::{
    AttemptRecord, Ending, ErrorClass, FailStep, Header, HttpStep, JobStep, Run, RunError,
    RunPhase, RunStatus, Step, StepKind, StepPhase, StepRecord, ToolStep, WorkflowSpec, conditions,
    event_reasons, reasons,
};
use crate::protocol::codes;

/// Largest step output kept in status, in bytes of JSON; larger outputs are truncated.
pub const MAX_OUTPUT_BYTES: usize = 64 * 1024;
/// Largest final result kept in status, in bytes of JSON.
pub const MAX_RESULT_BYTES: usize = 256 * 1024;
/// Backoff of the first retry when a policy gives none.
const DEFAULT_BACKOFF: SignedDuration = SignedDuration::from_secs(1);
/// Cap of the backoff when a policy gives none.
const DEFAULT_MAX_BACKOFF: SignedDuration = SignedDuration::from_mins(5);
/// Time allowed for one cleanup (cancel an upstream task, delete a Job).
const CLEANUP_TIMEOUT: SignedDuration = SignedDuration::from_secs(30);
/// Upper bound on pure transitions chained in one decision (a Workflow has at most 128 steps).
const MAX_TRANSITIONS: usize = 1024;

/// What the controller does after writing [`Decision::status`].
#[derive(Debug, Clone, PartialEq)]
pub enum Next {
    /// Perform this effect, then report its outcome through [`record`].
    Execute(Box<Effect>),
    /// Nothing to do until this time (or until the Run changes). `None`: until the Run changes.
    WaitUntil(Option<Timestamp>),
    /// The Run is terminal. Delete it at this time (`None`: keep it).
    Finished {
        /// Garbage collection time.
        delete_at: Option<Timestamp>,
    },
}

/// The outcome of [`decide`].
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// Status to write first, when it changed.
    pub status: Option<RunStatus>,
    /// Transitions worth an Event, in order.
    pub events: Vec<Event>,
    /// What to do after the write.
    pub next: Next,
}

/// A transition worth telling people about (a Kubernetes Event, a log line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Event reason (`api::event_reasons`).
    pub reason: &'static str,
    /// Human-readable message.
    pub message: String,
    /// Whether it is a warning.
    pub warning: bool,
}

/// An effect for an executor: one attempt of one step.
#[derive(Debug, Clone, PartialEq)]
pub struct Effect {
    /// Step name.
    pub step: String,
    /// Attempt number.
    pub attempt: u32,
    /// The attempt must be abandoned at this time (step timeout or run deadline).
    pub deadline: Option<Timestamp>,
    /// `<run uid>/<step>`: the same on every attempt and after restarts.
    pub idempotency_key: String,
    /// What to do.
    pub action: Action,
}

/// Rendered work for an executor.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// An HTTP request.
    Http(HttpRequest),
    /// A tool call on an upstream MCP server.
    Tool {
        /// The step as declared.
        step: ToolStep,
        /// Rendered arguments.
        arguments: Value,
        /// Headers for every request to the server: rendered values, or Secret references.
        headers: Vec<HeaderValue>,
        /// Upstream task recorded by an earlier attempt, to resume instead of calling again.
        upstream_task_id: Option<String>,
        /// Answers to forward upstream first (upstream key → `{action, content}`).
        answers: Option<Value>,
        /// The upstream MRTR `requestState` to echo with `answers` (no upstream task).
        request_state: Option<String>,
    },
    /// Undo an interrupted step (see `api::Cleanup`).
    Cleanup(crate::api::Cleanup),
    /// A Kubernetes Job.
    Job {
        /// The step as declared.
        step: JobStep,
        /// Deterministic Job name for this attempt.
        job_name: String,
    },
}

/// A rendered HTTP request.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpRequest {
    /// Method.
    pub method: String,
    /// URL.
    pub url: String,
    /// Headers: rendered values, or Secret references the executor resolves.
    pub headers: Vec<HeaderValue>,
    /// Body.
    pub body: Option<Body>,
    /// Success status codes (empty: any 2xx).
    pub success_codes: Vec<u16>,
}

/// A header to send.
#[derive(Debug, Clone, PartialEq)]
pub enum HeaderValue {
    /// A literal value.
    Inline {
        /// Header name.
        name: String,
        /// Rendered value.
        value: String,
    },
    /// A value from a Secret in the Run's namespace.
    Secret {
        /// Header name.
        name: String,
        /// Secret name.
        secret: String,
        /// Key in the Secret.
        key: String,
    },
}

/// A request body.
#[derive(Debug, Clone, PartialEq)]
pub enum Body {
    /// Sent as `text/plain`.
    Text(String),
    /// Sent as `application/json`.
    Json(Value),
}

/// What an executor reports for an attempt.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The step succeeded with this output.
    Succeeded(Value),
    /// The attempt failed; the retry policy decides what follows.
    Failed {
        /// Kind of failure.
        class: ErrorClass,
        /// Why, in words fit for the caller and the task's `statusMessage`.
        message: String,
        /// What only the Run's readers should see (an upstream's response body, say): kept in
        /// the step's record, never in the Run's message or the tool error.
        detail: Option<String>,
    },
    /// A `tool` step's upstream call failed. The retry policy applies as for `Failed`; when the
    /// step fails for good and `error` is set, the Run ends with that protocol-level error.
    UpstreamFailed {
        /// Kind of failure.
        class: ErrorClass,
        /// Why.
        message: String,
        /// The upstream's JSON-RPC error (its code and message), when it answered with one.
        error: Option<RunError>,
        /// The upstream call is over (its task failed, was cancelled or is unknown; it answered
        /// an error or a tool error): a retry calls the tool again instead of following it.
        call_ended: bool,
    },
    /// The attempt failed in a way that ends the Run with a protocol-level error.
    Fatal(RunError),
    /// The attempt is still going and has something to record before it continues (an
    /// upstream task id, a Job name). The step stays running; the next attempt resumes it.
    Checkpoint {
        /// Upstream task created by the call.
        upstream_task_id: Option<String>,
        /// Job created for the attempt.
        job_name: Option<String>,
    },
    /// The upstream server asks for input; it is surfaced as this Run's own input requests.
    NeedsInput {
        /// Upstream key → `{method, params}`.
        requests: BTreeMap<String, Value>,
        /// Upstream MRTR `requestState` to echo with the answers.
        request_state: Option<String>,
    },
}

fn ts(t: Timestamp) -> String {
    t.to_string()
}

fn parse_ts(s: Option<&str>) -> Option<Timestamp> {
    s.and_then(|s| s.parse().ok())
}

/// Idempotency key of a step: the same for every attempt and after restarts.
pub fn idempotency_key(run: &Run, step: &str) -> String {
    format!(
        "{}/{}",
        run.metadata.uid.as_deref().unwrap_or_default(),
        step
    )
}

/// The template context of a Run: `args`, `steps.<name>.output`, `inputs.<name>`, `run`.
pub fn context(run: &Run, status: &RunStatus) -> Value {
    let mut steps = serde_json::Map::new();
    for r in &status.steps {
        steps.insert(
            r.name.clone(),
            json!({
                "output": r.output.clone().unwrap_or(Value::Null),
                "phase": format!("{:?}", r.phase),
                "attempt": r.attempt,
                "message": r.message,
            }),
        );
    }
    let mut inputs = serde_json::Map::new();
    for r in &status.steps {
        if let (Some(Value::Object(out)), false) = (&r.output, r.input_keys.is_empty()) {
            for (name, v) in out {
                inputs.insert(name.clone(), v.clone());
            }
        }
    }
    json!({
        "args": run.spec.arguments.clone().unwrap_or_else(|| json!({})),
        "steps": steps,
        "inputs": inputs,
        "run": {
            "name": run.metadata.name,
            "namespace": run.metadata.namespace,
            "uid": run.metadata.uid,
            "requestedBy": run.spec.requested_by.as_ref().map(|p| p.username.clone()),
        },
    })
}

/// Decide the next action for a Run.
///
/// `workflow` is the live Workflow; it is read only when the Run has no snapshot yet.
pub fn decide(run: &Run, workflow: Option<&WorkflowSpec>, now: Timestamp) -> Decision {
    let original = run.status.clone().unwrap_or_default();
    let mut m = Machine {
        run,
        st: original.clone(),
        now,
        events: Vec::new(),
    };
    let mut next = m.drive(workflow);
    let drove_to = m.st.phase;
    let mut status = within_budget(run, m.st, now);
    if status.phase != drove_to {
        // Failed for its size: decide again once that is written (finally, garbage collection).
        next = Next::WaitUntil(Some(now));
    }
    if status != original {
        status.observed_generation = run.metadata.generation;
    }
    Decision {
        status: (status != original).then_some(status),
        events: m.events,
        next,
    }
}

/// End a Run that this process could not handle (a panic while deciding or executing it): it
/// fails with an internal error naming why, instead of being retried forever. Cleanups recorded
/// as pending are dropped: running them is what failed.
pub fn fail_internal(run: &Run, why: &str, now: Timestamp) -> RunStatus {
    let mut m = Machine {
        run,
        st: run.status.clone().unwrap_or_default(),
        now,
        events: Vec::new(),
    };
    m.st.cleanups.clear();
    m.finish_with(fatal_ending(format!("internal error: {why}")));
    m.st.observed_generation = run.metadata.generation;
    m.st
}

/// Record an executor's outcome for an attempt. Stale reports (another attempt, a step that is
/// no longer running) leave the status unchanged.
pub fn record(run: &Run, effect: &Effect, outcome: Outcome, now: Timestamp) -> RunStatus {
    within_budget(run, record_outcome(run, effect, outcome, now), now)
}

/// A status that fits [`budget::MAX_STATUS_BYTES`]: `st` itself, or, when it would not fit, the
/// Run failed with its step outputs dropped (flagged as truncated), so that the failure can be
/// written instead of a write the store refuses being retried forever.
fn within_budget(run: &Run, st: RunStatus, now: Timestamp) -> RunStatus {
    let size = serde_json::to_vec(&st).map_or(usize::MAX, |b| b.len());
    if size <= budget::MAX_STATUS_BYTES {
        return st;
    }
    let mut st = st;
    for rec in &mut st.steps {
        if rec.output.take().is_some() {
            rec.output_truncated = true;
        }
    }
    st.result = None;
    let mut over = run.clone();
    over.status = Some(st);
    fail_internal(
        &over,
        &format!(
            "the run's status would be {size} bytes; at most {} are kept",
            budget::MAX_STATUS_BYTES
        ),
        now,
    )
}

fn record_outcome(run: &Run, effect: &Effect, outcome: Outcome, now: Timestamp) -> RunStatus {
    let mut st = run.status.clone().unwrap_or_default();
    if let Action::Cleanup(c) = &effect.action {
        // Best effort: whatever happened, the cleanup is done; a failure is noted on the step,
        // and so is what a cleanup reports it did (a string output).
        st.cleanups.retain(|x| x != c);
        let note = match outcome {
            Outcome::Succeeded(Value::String(done)) => Some(done),
            Outcome::Succeeded(_) => None,
            Outcome::Failed { message, .. } | Outcome::UpstreamFailed { message, .. } => {
                Some(format!("cleanup failed: {message}"))
            }
            Outcome::Fatal(e) => Some(format!("cleanup failed: {}", e.message)),
            _ => None,
        };
        if let Some(note) = note
            && let Some(rec) = st.steps.iter_mut().rev().find(|r| r.name == c.step)
        {
            rec.message = Some(match rec.message.take() {
                Some(before) => format!("{before}; {note}"),
                None => note,
            });
        }
        return st;
    }
    let Some(wf) = run.workflow_snapshot() else {
        return st;
    };
    let Some(idx) = st.steps.iter().position(|r| {
        r.name == effect.step && r.attempt == effect.attempt && r.phase == StepPhase::Running
    }) else {
        return st;
    };
    let step = wf
        .steps
        .iter()
        .chain(&wf.finally)
        .find(|s| s.name == effect.step)
        .cloned();
    let rec = &mut st.steps[idx];
    match outcome {
        Outcome::Checkpoint {
            upstream_task_id,
            job_name,
        } => {
            if let Some(id) = upstream_task_id {
                if let Action::Tool { step, .. } = &effect.action {
                    rec.message = Some(format!(
                        "following upstream task {id} on {}",
                        step.server.url
                    ));
                }
                rec.upstream_task_id = Some(id);
                rec.upstream_request_state = None;
            }
            if job_name.is_some() {
                rec.job_name = job_name;
            }
            rec.pending_answers = None;
        }
        Outcome::NeedsInput {
            requests,
            request_state,
        } => {
            let step_name = rec.name.clone();
            rec.phase = StepPhase::Waiting;
            rec.pending_answers = None;
            rec.upstream_request_state = request_state;
            rec.upstream_input_keys.clear();
            for (upstream_key, request) in requests {
                let key = format!("{step_name}.{upstream_key}");
                let fresh = (1..)
                    .map(|n| {
                        if n == 1 {
                            key.clone()
                        } else {
                            format!("{key}.{n}")
                        }
                    })
                    .find(|k| !run.spec.input_responses.contains_key(k))
                    .expect("an unbounded range has an unused key");
                st.input_requests.insert(
                    fresh.clone(),
                    crate::api::OpenInputRequest {
                        step: step_name.clone(),
                        name: upstream_key.clone(),
                        method: request
                            .get("method")
                            .and_then(Value::as_str)
                            .unwrap_or("elicitation/create")
                            .to_owned(),
                        params: request.get("params").cloned().unwrap_or_else(|| json!({})),
                        asked_at: Some(ts(now)),
                    },
                );
                st.steps[idx]
                    .upstream_input_keys
                    .insert(fresh, upstream_key);
            }
            st.phase = RunPhase::Waiting;
            let keys: Vec<_> = st.input_requests.keys().cloned().collect();
            st.waiting_for = (!keys.is_empty()).then(|| keys.join(","));
        }
        Outcome::Succeeded(output) => {
            let (output, truncated) = guard_output(output, MAX_OUTPUT_BYTES);
            rec.pending_answers = None;
            rec.phase = StepPhase::Succeeded;
            rec.output = Some(output);
            rec.output_truncated = truncated;
            rec.finished_at = Some(ts(now));
            rec.message = None;
        }
        Outcome::Failed {
            class,
            message,
            detail,
        } => {
            fail_attempt(run, &mut st, idx, step.as_ref(), class, message, None, now);
            // A tool step that timed out or lost its connection for good may leave an upstream
            // task behind: cancel it as every other failure path does.
            cancel_abandoned_upstream_task(&mut st, idx);
            if let Some(d) = detail {
                let rec = &mut st.steps[idx];
                let full = format!("{}: {d}", rec.message.as_deref().unwrap_or_default());
                if let Some(last) = rec.attempts.last_mut() {
                    last.message = full.clone();
                }
                rec.message = Some(full);
            }
        }
        Outcome::UpstreamFailed {
            class,
            message,
            error,
            call_ended,
        } => {
            if call_ended {
                rec.upstream_task_id = None;
                rec.upstream_request_state = None;
                rec.pending_answers = None;
            }
            fail_attempt(run, &mut st, idx, step.as_ref(), class, message, error, now);
            cancel_abandoned_upstream_task(&mut st, idx);
        }
        Outcome::Fatal(error) => {
            rec.phase = StepPhase::Failed;
            rec.finished_at = Some(ts(now));
            rec.message = Some(error.message.clone());
            if st.ending.is_none()
                || st
                    .ending
                    .as_ref()
                    .is_some_and(|e| e.phase == RunPhase::Succeeded)
            {
                st.ending = Some(Ending {
                    phase: RunPhase::Failed,
                    result: None,
                    message: Some(error.message.clone()),
                    error: Some(error),
                });
            }
            cancel_abandoned_upstream_task(&mut st, idx);
        }
    }
    st
}

/// A failed attempt: retry it when the policy says so, else fail the step (and the Run, with a
/// tool error, or with `error` when the upstream answered a protocol-level one).
#[allow(clippy::too_many_arguments)]
fn fail_attempt(
    run: &Run,
    st: &mut RunStatus,
    idx: usize,
    step: Option<&Step>,
    class: ErrorClass,
    message: String,
    error: Option<RunError>,
    now: Timestamp,
) {
    let ctx = context(run, st);
    let rec = &mut st.steps[idx];
    let policy = step.and_then(|s| s.retry.clone());
    let limit = match policy.as_ref().and_then(|p| p.limit.as_ref()) {
        None => Ok(0),
        Some(v) => retry_limit(v, &ctx),
    };
    let retries_on = policy
        .as_ref()
        .map(|p| p.retry_on.clone())
        .filter(|on| !on.is_empty())
        .unwrap_or_else(|| {
            vec![
                ErrorClass::Timeout,
                ErrorClass::Connection,
                ErrorClass::ServerError,
                ErrorClass::TooManyRequests,
            ]
        });
    rec.attempts.push(AttemptRecord {
        attempt: rec.attempt,
        started_at: rec.attempt_started_at.clone(),
        finished_at: Some(ts(now)),
        message: message.clone(),
    });
    if rec.attempts.len() > budget::MAX_ATTEMPTS_KEPT {
        let drop = rec.attempts.len() - budget::MAX_ATTEMPTS_KEPT;
        rec.attempts.drain(..drop);
    }
    rec.message = Some(message.clone());
    let limit = match limit {
        Ok(l) => l,
        Err(e) => {
            let name = rec.name.clone();
            fail_step_fatal(st, idx, &name, e, now);
            return;
        }
    };
    if retries_on.contains(&class) && rec.attempt <= limit {
        let backoff = backoff(policy.as_ref(), rec.attempt, &ctx);
        rec.phase = StepPhase::Retrying;
        rec.wake_at = Some(ts(now + backoff));
    } else {
        rec.phase = StepPhase::Failed;
        rec.finished_at = Some(ts(now));
        let name = rec.name.clone();
        let is_finally = rec.finally;
        if !is_finally && st.ending.is_none() {
            st.ending = Some(match error {
                Some(e) => upstream_error_ending(&name, e),
                None => tool_error_ending(format!("step {name} failed: {message}")),
            });
        }
    }
}

fn retry_limit(v: &Value, ctx: &Value) -> Result<u32, String> {
    let rendered = match v {
        Value::String(s) => template::render(s, ctx).map_err(|e| e.to_string())?,
        other => other.to_string(),
    };
    let limit = rendered
        .trim()
        .parse::<u32>()
        .map_err(|_| format!("retry.limit {rendered:?} is not a non-negative integer"))?;
    if limit > budget::MAX_RETRY_LIMIT {
        return Err(format!(
            "retry.limit {limit} exceeds the maximum of {}",
            budget::MAX_RETRY_LIMIT
        ));
    }
    Ok(limit)
}

fn backoff(policy: Option<&crate::api::RetryPolicy>, attempt: u32, ctx: &Value) -> SignedDuration {
    let parse = |s: Option<&String>, default| {
        s.and_then(|s| template::render(s, ctx).ok())
            .and_then(|s| duration::parse(&s).ok())
            .unwrap_or(default)
    };
    let base = parse(policy.and_then(|p| p.backoff.as_ref()), DEFAULT_BACKOFF);
    let cap = parse(
        policy.and_then(|p| p.max_backoff.as_ref()),
        DEFAULT_MAX_BACKOFF,
    );
    let base = base.max(budget::MIN_BACKOFF);
    let factor = 2i32.saturating_pow(attempt.saturating_sub(1).min(30));
    base.checked_mul(factor)
        .unwrap_or(cap)
        .min(cap)
        .max(budget::MIN_BACKOFF)
}

/// A `tool` step that failed for good while its upstream task runs on: cancel that task.
fn cancel_abandoned_upstream_task(st: &mut RunStatus, idx: usize) {
    let rec = &st.steps[idx];
    if rec.phase == StepPhase::Failed
        && let Some(id) = rec.upstream_task_id.clone()
    {
        let step = rec.name.clone();
        st.cleanups.push(crate::api::Cleanup {
            step,
            cancel_upstream_task: Some(id),
            delete_job: None,
        });
    }
}

/// A protocol-level failure carrying an upstream's JSON-RPC code and message.
fn upstream_error_ending(step: &str, upstream: RunError) -> Ending {
    let message = format!("step {step}: upstream error: {}", upstream.message);
    Ending {
        phase: RunPhase::Failed,
        result: None,
        error: Some(RunError {
            code: upstream.code,
            message: message.clone(),
            data: Some(json!({
                "step": step,
                "upstream": upstream,
            })),
        }),
        message: Some(message),
    }
}

fn tool_error_ending(message: String) -> Ending {
    Ending {
        phase: RunPhase::Failed,
        result: Some(json!({
            "content": [{"type": "text", "text": message}],
            "isError": true,
        })),
        error: None,
        message: Some(message),
    }
}

fn fatal_ending(message: String) -> Ending {
    Ending {
        phase: RunPhase::Failed,
        result: None,
        error: Some(RunError {
            code: codes::INTERNAL_ERROR,
            message: message.clone(),
            data: None,
        }),
        message: Some(message),
    }
}

fn fail_step_fatal(st: &mut RunStatus, idx: usize, step: &str, message: String, now: Timestamp) {
    let rec = &mut st.steps[idx];
    rec.phase = StepPhase::Failed;
    rec.finished_at = Some(ts(now));
    rec.message = Some(message.clone());
    if st
        .ending
        .as_ref()
        .is_none_or(|e| e.phase == RunPhase::Succeeded)
    {
        st.ending = Some(fatal_ending(format!("step {step}: {message}")));
    }
}

/// Cut an oversized (or too deeply nested) value down to a string prefix of its JSON; the flag
/// says it happened.
pub fn guard_output(v: Value, limit: usize) -> (Value, bool) {
    let text = v.to_string();
    if text.len() <= limit && budget::depth(&v) <= budget::MAX_DEPTH {
        return (v, false);
    }
    if text.len() <= limit {
        return (Value::String(text), true);
    }
    let mut cut = limit;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    (Value::String(text[..cut].to_owned()), true)
}

enum Progress {
    Changed,
    Stop(Next),
}

struct Machine<'a> {
    run: &'a Run,
    st: RunStatus,
    now: Timestamp,
    events: Vec<Event>,
}

impl Machine<'_> {
    fn event(&mut self, reason: &'static str, message: String) {
        self.events.push(Event {
            reason,
            message,
            warning: false,
        });
    }

    fn warn(&mut self, reason: &'static str, message: String) {
        self.events.push(Event {
            reason,
            message,
            warning: true,
        });
    }

    fn drive(&mut self, live: Option<&WorkflowSpec>) -> Next {
        for _ in 0..MAX_TRANSITIONS {
            match self.step(live) {
                Progress::Changed => continue,
                Progress::Stop(next) => return next,
            }
        }
        // A Workflow cannot chain this many transitions; stop and let the next pass continue.
        Next::WaitUntil(Some(self.now))
    }

    fn ttl(&self, wf: Option<&WorkflowSpec>) -> Option<SignedDuration> {
        wf?.execution
            .ttl_after_finished
            .as_deref()
            .and_then(|s| duration::parse(s).ok())
    }

    fn step(&mut self, live: Option<&WorkflowSpec>) -> Progress {
        if self.st.phase.is_terminal() {
            let wf = self.snapshot();
            let delete_at = self
                .ttl(wf.as_ref())
                .zip(parse_ts(self.st.finished_at.as_deref()))
                .map(|(ttl, at)| at + ttl);
            return Progress::Stop(Next::Finished { delete_at });
        }
        let Some(wf) = self.snapshot() else {
            return self.start(live);
        };
        if self.st.ending.is_none() {
            if let Some(cancel) = self.run.spec.cancel.clone() {
                return self.begin_cancel(&wf, cancel);
            }
            if let Some(deadline) = parse_ts(self.st.deadline.as_deref())
                && self.now >= deadline
            {
                return self.expire(&wf);
            }
        }
        self.advance(&wf)
    }

    fn snapshot(&self) -> Option<WorkflowSpec> {
        self.st
            .workflow
            .as_ref()
            .and_then(|w| serde_json::from_value(w.clone()).ok())
    }

    fn start(&mut self, live: Option<&WorkflowSpec>) -> Progress {
        let Some(wf) = live else {
            let message = format!(
                "workflow {} not found or not Ready",
                self.run.spec.workflow_ref.name
            );
            self.finish_with(fatal_ending(message));
            return Progress::Changed;
        };
        let created = self
            .run
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0)
            .unwrap_or(self.now);
        self.st.workflow = Some(serde_json::to_value(wf).unwrap_or(Value::Null));
        self.st.phase = RunPhase::Running;
        self.st.started_at = Some(ts(self.now));
        // tools/call checked these already; a Run created with kubectl gets the same checks.
        if let Some(why) = self.invalid_arguments(wf) {
            self.finish_with(why);
            return Progress::Changed;
        }
        match wf.execution.timeout.as_deref().map(duration::parse) {
            Some(Ok(d)) => self.st.deadline = Some(ts(created + d)),
            Some(Err(e)) => {
                self.finish_with(fatal_ending(format!("execution.timeout: {e}")));
                return Progress::Changed;
            }
            None => {}
        }
        Progress::Changed
    }

    /// Why the Run's arguments are refused, as the ending of the Run (`-32602` with the schema
    /// errors), or `None` when they are acceptable.
    fn invalid_arguments(&self, wf: &WorkflowSpec) -> Option<Ending> {
        let args = self.run.spec.arguments.clone().unwrap_or_else(|| json!({}));
        let refuse = |message: String, data: Option<Value>| {
            Some(Ending {
                phase: RunPhase::Failed,
                result: None,
                error: Some(RunError {
                    code: codes::INVALID_PARAMS,
                    message: message.clone(),
                    data,
                }),
                message: Some(message),
            })
        };
        if let Err(why) = budget::check("arguments", &args, budget::MAX_ARGUMENT_BYTES) {
            return refuse(why, None);
        }
        if !args.is_object() {
            return refuse("arguments must be an object".into(), None);
        }
        let schema = wf.tool.input_schema.as_ref()?;
        match budget::schema_errors(schema, &args) {
            Ok(errors) if errors.is_empty() => None,
            Ok(errors) => {
                let summary = errors
                    .iter()
                    .filter_map(|e| e["message"].as_str())
                    .collect::<Vec<_>>()
                    .join("; ");
                refuse(
                    format!("invalid arguments: {summary}"),
                    Some(json!({ "errors": errors })),
                )
            }
            Err(e) => refuse(format!("tool.inputSchema: {e}"), None),
        }
    }

    /// The record of the step in progress, if any, by index.
    fn active(&self) -> Option<usize> {
        self.st.steps.iter().position(|r| !r.phase.is_terminal())
    }

    fn begin_cancel(&mut self, wf: &WorkflowSpec, cancel: crate::api::CancelRequest) -> Progress {
        let who = cancel
            .requested_by
            .clone()
            .unwrap_or_else(|| "unknown".into());
        let why = cancel
            .reason
            .clone()
            .unwrap_or_else(|| "no reason given".into());
        self.event(
            event_reasons::CANCEL_REQUESTED,
            format!("cancel requested by {who}: {why}"),
        );
        if let Some(i) = self.active() {
            self.interrupt(wf, i);
            let rec = &mut self.st.steps[i];
            rec.phase = StepPhase::Cancelled;
            rec.finished_at = Some(ts(self.now));
            rec.wake_at = None;
        }
        self.st.input_requests.clear();
        self.st.waiting_for = None;
        self.st.ending = Some(Ending {
            phase: RunPhase::Cancelled,
            result: None,
            error: None,
            message: Some(format!("cancelled by {who}: {why}")),
        });
        self.st.phase = RunPhase::Cancelling;
        if wf.finally.is_empty() && self.st.cleanups.is_empty() {
            self.finalize();
        }
        Progress::Changed
    }

    /// Queue the cleanup of an interrupted step: its upstream task or its Job.
    fn interrupt(&mut self, wf: &WorkflowSpec, i: usize) {
        let rec = &self.st.steps[i];
        let kind = wf
            .steps
            .iter()
            .chain(&wf.finally)
            .find(|s| s.name == rec.name)
            .map(|s| s.kind());
        let cleanup = match kind {
            Some(StepKind::Tool(_)) if rec.upstream_task_id.is_some() => {
                Some(crate::api::Cleanup {
                    step: rec.name.clone(),
                    cancel_upstream_task: rec.upstream_task_id.clone(),
                    delete_job: None,
                })
            }
            Some(StepKind::Job(_)) if rec.job_name.is_some() && rec.phase == StepPhase::Running => {
                Some(crate::api::Cleanup {
                    step: rec.name.clone(),
                    cancel_upstream_task: None,
                    delete_job: rec.job_name.clone(),
                })
            }
            _ => None,
        };
        let keys: Vec<String> = rec.upstream_input_keys.keys().cloned().collect();
        for k in keys {
            self.st.input_requests.remove(&k);
        }
        if let Some(c) = cleanup {
            self.st.cleanups.push(c);
        }
    }

    fn expire(&mut self, wf: &WorkflowSpec) -> Progress {
        if let Some(i) = self.active() {
            self.interrupt(wf, i);
            let rec = &mut self.st.steps[i];
            rec.phase = StepPhase::Failed;
            rec.finished_at = Some(ts(self.now));
            rec.message = Some("run deadline exceeded".into());
            rec.wake_at = None;
        }
        self.st.input_requests.clear();
        self.st.waiting_for = None;
        let timeout = wf.execution.timeout.clone().unwrap_or_default();
        self.st.ending = Some(tool_error_ending(format!(
            "run deadline exceeded (execution.timeout {timeout})"
        )));
        self.st.phase = RunPhase::Running;
        Progress::Changed
    }

    fn advance(&mut self, wf: &WorkflowSpec) -> Progress {
        if let Some(c) = self.st.cleanups.first().cloned() {
            return Progress::Stop(Next::Execute(Box::new(Effect {
                step: c.step.clone(),
                attempt: 0,
                deadline: Some(self.now + CLEANUP_TIMEOUT),
                idempotency_key: idempotency_key(self.run, &c.step),
                action: Action::Cleanup(c),
            })));
        }
        let in_finally = self.st.ending.is_some();
        if let Some(i) = self.active() {
            return self.continue_step(wf, i);
        }
        let list = if in_finally { &wf.finally } else { &wf.steps };
        let next = list
            .iter()
            .enumerate()
            .find(|(_, s)| !self.st.steps.iter().any(|r| r.name == s.name));
        match next {
            Some((i, step)) => self.begin_step(wf, step, i, list.len(), in_finally),
            None if in_finally => {
                self.finalize();
                Progress::Changed
            }
            None => {
                let ctx = context(self.run, &self.st);
                let ending = match result::render(wf.result.as_ref(), &self.st, &ctx) {
                    Ok(result) => Ending {
                        phase: RunPhase::Succeeded,
                        result: Some(result),
                        error: None,
                        message: None,
                    },
                    Err(e) => fatal_ending(format!("result: {e}")),
                };
                self.st.ending = Some(ending);
                if wf.finally.is_empty() {
                    self.finalize();
                }
                Progress::Changed
            }
        }
    }

    fn step_deadline(
        &self,
        rec: &StepRecord,
        step: &Step,
        ctx: &Value,
    ) -> Result<Option<Timestamp>, String> {
        let run_deadline = if rec.finally {
            None
        } else {
            parse_ts(self.st.deadline.as_deref())
        };
        let step_deadline = match &step.timeout {
            None => None,
            Some(t) => {
                let rendered = template::render(t, ctx).map_err(|e| e.to_string())?;
                let d = duration::parse(&rendered).map_err(|e| format!("timeout: {e}"))?;
                let start = parse_ts(rec.attempt_started_at.as_deref()).unwrap_or(self.now);
                Some(start + d)
            }
        };
        Ok(match (run_deadline, step_deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        })
    }

    fn continue_step(&mut self, wf: &WorkflowSpec, i: usize) -> Progress {
        let rec = self.st.steps[i].clone();
        let Some(step) = wf
            .steps
            .iter()
            .chain(&wf.finally)
            .find(|s| s.name == rec.name)
        else {
            self.fail_fatal(i, "step vanished from the workflow snapshot".into());
            return Progress::Changed;
        };
        let ctx = context(self.run, &self.st);
        match (step.kind(), rec.phase) {
            (_, StepPhase::Retrying) => {
                let wake = parse_ts(rec.wake_at.as_deref()).unwrap_or(self.now);
                if self.now >= wake {
                    let run_name = self.run.metadata.name.clone().unwrap_or_default();
                    let r = &mut self.st.steps[i];
                    r.phase = StepPhase::Running;
                    r.attempt += 1;
                    r.attempt_started_at = Some(ts(self.now));
                    r.wake_at = None;
                    if matches!(step.kind(), StepKind::Job(_)) {
                        // Each attempt is a new Job; the failed one stays for inspection.
                        r.job_name = Some(job_name(&run_name, &r.name, r.attempt));
                    }
                    self.event(
                        event_reasons::STEP_STARTED,
                        format!("step {} attempt {} started", rec.name, rec.attempt + 1),
                    );
                    Progress::Changed
                } else {
                    Progress::Stop(Next::WaitUntil(Some(self.bounded(wake, &rec))))
                }
            }
            (StepKind::Delay(_), _) => {
                let wake = parse_ts(rec.wake_at.as_deref()).unwrap_or(self.now);
                if self.now >= wake {
                    self.succeed(i, Value::Null);
                    Progress::Changed
                } else {
                    Progress::Stop(Next::WaitUntil(Some(self.bounded(wake, &rec))))
                }
            }
            (StepKind::Input(input), _) => self.continue_input(i, step, input),
            (StepKind::Http(http), StepPhase::Running) => match self.render_http(http, &ctx) {
                Ok(req) => self.execute(i, step, &ctx, Action::Http(req)),
                Err(e) => {
                    self.fail_fatal(i, e);
                    Progress::Changed
                }
            },
            (StepKind::Tool(_), StepPhase::Waiting) => self.continue_upstream_input(i, &rec),
            (StepKind::Tool(tool), StepPhase::Running) => match render_tool(tool, &ctx) {
                Ok((arguments, headers)) => {
                    let action = Action::Tool {
                        step: tool.clone(),
                        arguments,
                        headers,
                        upstream_task_id: rec.upstream_task_id.clone(),
                        answers: rec.pending_answers.clone(),
                        request_state: rec.upstream_request_state.clone(),
                    };
                    self.execute(i, step, &ctx, action)
                }
                Err(e) => {
                    self.fail_fatal(i, e);
                    Progress::Changed
                }
            },
            (StepKind::Job(job), StepPhase::Running) => {
                let job_name = rec.job_name.clone().unwrap_or_else(|| {
                    job_name(
                        self.run.metadata.name.as_deref().unwrap_or("run"),
                        &rec.name,
                        rec.attempt,
                    )
                });
                self.execute(
                    i,
                    step,
                    &ctx,
                    Action::Job {
                        step: job.clone(),
                        job_name,
                    },
                )
            }
            _ => {
                self.fail_fatal(i, format!("step {} is in an impossible state", rec.name));
                Progress::Changed
            }
        }
    }

    /// A wake time, bounded by the run deadline (main steps only).
    fn bounded(&self, wake: Timestamp, rec: &StepRecord) -> Timestamp {
        match parse_ts(self.st.deadline.as_deref()) {
            Some(d) if !rec.finally => wake.min(d),
            _ => wake,
        }
    }

    fn execute(&mut self, i: usize, step: &Step, ctx: &Value, action: Action) -> Progress {
        let rec = self.st.steps[i].clone();
        match self.step_deadline(&rec, step, ctx) {
            Ok(deadline) => Progress::Stop(Next::Execute(Box::new(Effect {
                step: rec.name.clone(),
                attempt: rec.attempt,
                deadline,
                idempotency_key: idempotency_key(self.run, &rec.name),
                action,
            }))),
            Err(e) => {
                self.fail_fatal(i, e);
                Progress::Changed
            }
        }
    }

    /// A `tool` step waits for answers to the input its upstream asked for; once every key is
    /// answered they are forwarded on the next attempt.
    fn continue_upstream_input(&mut self, i: usize, rec: &StepRecord) -> Progress {
        let mut answers = serde_json::Map::new();
        for (local, upstream) in &rec.upstream_input_keys {
            match self.run.spec.input_responses.get(local) {
                Some(r) => {
                    let mut a = json!({"action": r.action});
                    if let Some(c) = &r.content {
                        a["content"] = c.clone();
                    }
                    answers.insert(upstream.clone(), a);
                }
                None => {
                    let until = if rec.finally {
                        None
                    } else {
                        parse_ts(self.st.deadline.as_deref())
                    };
                    return Progress::Stop(Next::WaitUntil(until));
                }
            }
        }
        for local in rec.upstream_input_keys.keys() {
            self.st.input_requests.remove(local);
        }
        let r = &mut self.st.steps[i];
        r.phase = StepPhase::Running;
        r.pending_answers = Some(Value::Object(answers));
        r.upstream_input_keys.clear();
        let keys: Vec<_> = self.st.input_requests.keys().cloned().collect();
        self.st.waiting_for = (!keys.is_empty()).then(|| keys.join(","));
        if self.st.phase == RunPhase::Waiting {
            self.st.phase = RunPhase::Running;
        }
        let name = r.name.clone();
        self.event(
            event_reasons::INPUT_ANSWERED,
            format!("answers for step {name} forwarded upstream"),
        );
        Progress::Changed
    }

    fn render_http(&self, http: &HttpStep, ctx: &Value) -> Result<HttpRequest, String> {
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

    fn begin_step(
        &mut self,
        wf: &WorkflowSpec,
        step: &Step,
        index: usize,
        total: usize,
        finally: bool,
    ) -> Progress {
        let ctx = context(self.run, &self.st);
        let label = if finally { "finally" } else { "step" };
        self.st.current_step = Some(step.name.clone());
        self.st.status_message = Some(format!("{label} {}/{}: {}", index + 1, total, step.name));
        let mut rec = StepRecord {
            name: step.name.clone(),
            finally,
            phase: StepPhase::Running,
            attempt: 1,
            started_at: Some(ts(self.now)),
            attempt_started_at: Some(ts(self.now)),
            ..Default::default()
        };
        if let Some(when) = &step.when {
            match template::truthy(when, &ctx) {
                Ok(true) => {}
                Ok(false) => {
                    rec.phase = StepPhase::Skipped;
                    rec.finished_at = Some(ts(self.now));
                    self.st.steps.push(rec);
                    self.event(
                        event_reasons::STEP_SKIPPED,
                        format!("step {} skipped", step.name),
                    );
                    return Progress::Changed;
                }
                Err(e) => {
                    self.st.steps.push(rec);
                    let i = self.st.steps.len() - 1;
                    self.fail_fatal(i, format!("when: {e}"));
                    return Progress::Changed;
                }
            }
        }
        match step.kind() {
            StepKind::Delay(d) => {
                let wake = template::render(&d.duration, &ctx)
                    .map_err(|e| e.to_string())
                    .and_then(|s| duration::parse(&s));
                self.st.steps.push(rec);
                let i = self.st.steps.len() - 1;
                match wake {
                    Ok(d) => self.st.steps[i].wake_at = Some(ts(self.now + d)),
                    Err(e) => {
                        self.fail_fatal(i, format!("delay.duration: {e}"));
                        return Progress::Changed;
                    }
                }
            }
            StepKind::Input(input) => {
                rec.phase = StepPhase::Waiting;
                self.st.steps.push(rec);
                let i = self.st.steps.len() - 1;
                if let Err(e) = self.open_input(i, step, input, &ctx) {
                    self.fail_fatal(i, e);
                    return Progress::Changed;
                }
            }
            StepKind::Fail(fail) => {
                rec.phase = StepPhase::Failed;
                rec.finished_at = Some(ts(self.now));
                self.st.steps.push(rec);
                let i = self.st.steps.len() - 1;
                self.apply_fail(i, fail, &ctx, wf);
                return Progress::Changed;
            }
            StepKind::Job(_) => {
                rec.job_name = Some(job_name(
                    self.run.metadata.name.as_deref().unwrap_or("run"),
                    &step.name,
                    1,
                ));
                self.st.steps.push(rec);
            }
            StepKind::Http(_) | StepKind::Tool(_) => self.st.steps.push(rec),
            StepKind::None => {
                self.st.steps.push(rec);
                let i = self.st.steps.len() - 1;
                self.fail_fatal(i, "step has no kind".into());
                return Progress::Changed;
            }
        }
        self.event(
            event_reasons::STEP_STARTED,
            format!("step {} started", step.name),
        );
        Progress::Changed
    }

    fn apply_fail(&mut self, i: usize, fail: &FailStep, ctx: &Value, _wf: &WorkflowSpec) {
        let name = self.st.steps[i].name.clone();
        let rendered = |t: &str| template::render(t, ctx).map_err(|e| e.to_string());
        let ending = match (&fail.error, &fail.message) {
            (Some(err), _) => match rendered(&err.message) {
                Ok(message) => Ending {
                    phase: RunPhase::Failed,
                    result: None,
                    error: Some(RunError {
                        code: err.code,
                        message: message.clone(),
                        data: None,
                    }),
                    message: Some(message),
                },
                Err(e) => fatal_ending(format!("step {name}: error.message: {e}")),
            },
            (None, message) => match rendered(message.as_deref().unwrap_or("failed")) {
                Ok(message) => tool_error_ending(message),
                Err(e) => fatal_ending(format!("step {name}: message: {e}")),
            },
        };
        self.st.steps[i].message = ending.message.clone();
        self.warn(
            event_reasons::STEP_FAILED,
            format!(
                "step {name} failed: {}",
                ending.message.clone().unwrap_or_default()
            ),
        );
        if self.st.ending.is_none() {
            self.st.ending = Some(ending);
        }
    }

    fn succeed(&mut self, i: usize, output: Value) {
        let (output, truncated) = guard_output(output, MAX_OUTPUT_BYTES);
        let rec = &mut self.st.steps[i];
        rec.phase = StepPhase::Succeeded;
        rec.output = Some(output);
        rec.output_truncated = truncated;
        rec.finished_at = Some(ts(self.now));
        rec.wake_at = None;
        let name = rec.name.clone();
        self.event(
            event_reasons::STEP_SUCCEEDED,
            format!("step {name} succeeded"),
        );
    }

    /// Fail a step with a protocol-level error (template and rendering errors).
    fn fail_fatal(&mut self, i: usize, message: String) {
        let name = self.st.steps[i].name.clone();
        self.warn(
            event_reasons::STEP_FAILED,
            format!("step {name}: {message}"),
        );
        fail_step_fatal(&mut self.st, i, &name, message, self.now);
    }

    fn finish_with(&mut self, ending: Ending) {
        self.st.ending = Some(ending);
        self.finalize();
    }

    fn finalize(&mut self) {
        let ending = self
            .st
            .ending
            .clone()
            .unwrap_or_else(|| fatal_ending("no ending".into()));
        self.st.phase = ending.phase;
        self.st.finished_at = Some(ts(self.now));
        self.st.input_requests.clear();
        self.st.waiting_for = None;
        self.st.current_step = None;
        self.st.result = ending.result.map(|r| guard_output(r, MAX_RESULT_BYTES).0);
        self.st.error = ending.error;
        let (reason, message) = match ending.phase {
            RunPhase::Succeeded => (reasons::SUCCEEDED, "run succeeded".to_string()),
            RunPhase::Cancelled => (
                reasons::CANCELLED,
                ending.message.clone().unwrap_or_else(|| "cancelled".into()),
            ),
            _ => (
                reasons::FAILED,
                ending.message.clone().unwrap_or_else(|| "failed".into()),
            ),
        };
        self.st.status_message = Some(message.clone());
        self.st.conditions = vec![k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
            type_: conditions::FINISHED.into(),
            status: "True".into(),
            reason: reason.into(),
            message: message.clone(),
            last_transition_time: crate::api::kube_time(self.now),
            observed_generation: self.run.metadata.generation,
        }];
        let warning = ending.phase != RunPhase::Succeeded;
        self.events.push(Event {
            reason: event_reasons::FINISHED,
            message: format!("run {}: {message}", ending.phase.as_str()),
            warning,
        });
    }
}

fn render_header(h: &Header, ctx: &Value) -> Result<HeaderValue, String> {
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
fn render_tool(tool: &ToolStep, ctx: &Value) -> Result<(Value, Vec<HeaderValue>), String> {
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

fn tool_headers(tool: &ToolStep, ctx: &Value) -> Result<Vec<HeaderValue>, String> {
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
    let Some(StepKind::Tool(tool)) = wf
        .steps
        .iter()
        .chain(&wf.finally)
        .find(|s| s.name == step)
        .map(Step::kind)
    else {
        return Err(format!("step {step} is not a tool step"));
    };
    let status = run.status.clone().unwrap_or_default();
    let ctx = context(run, &status);
    Ok((tool.clone(), tool_headers(tool, &ctx)?))
}

/// Deterministic Job name for a run, step and attempt (at most 63 characters).
pub fn job_name(run: &str, step: &str, attempt: u32) -> String {
    let suffix = format!("-{step}-{attempt}");
    let keep = 63usize.saturating_sub(suffix.len()).min(run.len());
    format!("{}{suffix}", &run[..keep]).to_lowercase()
}

#[cfg(test)]
mod tests;
