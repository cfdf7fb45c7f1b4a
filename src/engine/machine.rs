//! The step machine: from a Run's status and `now`, the transitions that follow (start,
//! advance, begin and continue steps, input, failure), chained until something must wait.

use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};

use super::budget::guard_output;
use super::duration::{self, DurationError};
use super::effects::{Action, Effect, Event, Next};
use super::endings::{fatal_ending, finalize};
use super::record::fail_step_fatal;
use super::render::{child_run_name, job_name, running_action};
use super::snapshot::Snapshot;
use super::template::{self, TemplateError};
use super::{
    MAX_OUTPUT_BYTES, budget, context, context_for, idempotency_key, parse_ts, result, ts,
};
use crate::api::{
    Ending, Run, RunError, RunPhase, RunStatus, Step, StepKind, StepPhase, StepRecord,
    WorkflowSpec, event_reasons, item_of,
};
use crate::protocol::codes;

/// Time allowed for one cleanup (cancel an upstream task, delete a Job).
pub(super) const CLEANUP_TIMEOUT: SignedDuration = SignedDuration::from_secs(30);

/// Upper bound on pure transitions chained in one decision (a Workflow has at most 128 steps;
/// a `forEach` step starts up to its parallelism of items at once).
pub(super) const MAX_TRANSITIONS: usize = 1024;

/// Why a step's `timeout` gives no deadline.
#[derive(Debug, thiserror::Error)]
pub(super) enum StepTimeoutError {
    /// `timeout` did not render.
    #[error(transparent)]
    Template(#[from] TemplateError),
    /// It rendered to something that is not a duration.
    #[error("timeout: {0}")]
    Duration(#[source] DurationError),
}

pub(super) enum Progress {
    Changed,
    Stop(Next),
}

pub(super) struct Machine<'a> {
    pub(super) run: &'a Run,
    pub(super) st: RunStatus,
    pub(super) now: Timestamp,
    pub(super) events: Vec<Event>,
    /// A decision takes several steps, and each looks at the Workflow.
    pub(super) read: Snapshot,
}

impl Machine<'_> {
    /// End the Run with `ending`.
    pub(super) fn finish_with(&mut self, ending: Ending) {
        self.st.ending = Some(Box::new(ending));
        self.finalize();
    }

    /// Write the recorded ending as the final status.
    pub(super) fn finalize(&mut self) {
        finalize(&mut self.st, self.run, self.now, &mut self.events);
    }

    pub(super) fn event(&mut self, reason: &'static str, message: String) {
        self.events.push(Event {
            reason,
            message,
            warning: false,
        });
    }

    pub(super) fn warn(&mut self, reason: &'static str, message: String) {
        self.events.push(Event {
            reason,
            message,
            warning: true,
        });
    }

    pub(super) fn drive(&mut self, live: Option<&WorkflowSpec>) -> Next {
        let mut next = Next::WaitUntil(Some(self.now));
        for _ in 0..MAX_TRANSITIONS {
            match self.step(live) {
                Progress::Changed => continue,
                Progress::Stop(n) => {
                    next = n;
                    break;
                }
            }
        }
        // Past the bound (a thousand items starting, say) the next pass continues.
        if !self.st.phase.is_terminal()
            && let Some(wf) = self.snapshot()
        {
            self.describe(&wf);
        }
        if !self.st.phase.is_terminal() {
            self.describe_pause();
        }
        next
    }

    /// How long a finished Run is kept. Runs a schedule started are kept by its history limits
    /// instead (the newest of them marks where the schedule stands), and child Runs as long as
    /// their top-level Run, which takes them along (they are the count that bounds its tree).
    pub(super) fn ttl(&self, wf: Option<&WorkflowSpec>) -> Option<SignedDuration> {
        let kept_by_others = self.run.metadata.labels.as_ref().is_some_and(|l| {
            l.contains_key(crate::api::labels::SCHEDULE) || l.contains_key(crate::api::labels::ROOT)
        });
        if kept_by_others {
            return None;
        }
        wf?.execution
            .ttl_after_finished
            .as_deref()
            .and_then(|s| duration::parse(s).ok())
    }

    pub(super) fn step(&mut self, live: Option<&WorkflowSpec>) -> Progress {
        if self.st.phase.is_terminal() {
            if let Some(c) = self.st.cleanups.first().cloned() {
                return Progress::Stop(self.cleanup(c));
            }
            // A Run that ended before it started has no snapshot: its Workflow as it is now
            // says how long it is kept (kept forever, it would pile up under a queue timeout).
            let wf = self.snapshot();
            let delete_at = self
                .ttl(wf.as_deref().or(live))
                .zip(parse_ts(self.st.finished_at.as_deref()))
                .map(|(ttl, at)| at + ttl);
            return Progress::Stop(Next::Finished { delete_at });
        }
        let paused = self.sync_pause();
        let Some(wf) = self.snapshot() else {
            return match live {
                // Cancelled before it started (held back, queued, or not yet looked at): no
                // step has run, so none starts, `finally` included, and it takes no slot.
                _ if self.run.spec.cancel.is_some() => self.cancel_unstarted(),
                Some(w) if paused => self.wait_unstarted(w, "paused".into()),
                Some(w) if w.suspend && self.run.spec.cancel.is_none() => {
                    let name = &self.run.spec.workflow_ref.name;
                    self.wait_unstarted(w, format!("waiting: workflow {name} is paused"))
                }
                _ => self.start(live),
            };
        };
        // Cancel and the deadline stop main steps: before the Run has an ending, or while
        // branches run on after a failure (`failFast: false`).
        let cancelled = self
            .st
            .ending
            .as_ref()
            .is_some_and(|e| e.phase == RunPhase::Cancelled);
        if let Some(cancel) = self.run.spec.cancel.clone()
            && !cancelled
            && self.st.ending.is_some()
            && self.running(false).is_empty()
        {
            // Acknowledged while the task still showed as working: the cancel sticks.
            return self.cancel_decided(cancel);
        }
        if self.st.ending.is_none() || (!cancelled && !self.running(false).is_empty()) {
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

    /// The Run's Workflow snapshot, parsed once per decision.
    pub(super) fn snapshot(&self) -> Option<Arc<WorkflowSpec>> {
        self.read.read(self.st.workflow.as_ref())
    }

    pub(super) fn start(&mut self, live: Option<&WorkflowSpec>) -> Progress {
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
        self.st.workflow = Some(Arc::new(serde_json::to_value(wf).unwrap_or(Value::Null)));
        self.st.phase = RunPhase::Running;
        // Recorded so that the Runs queued behind it read its group instead of rendering it
        // (the limit let it start, so the key rendered).
        self.st.concurrency_key = super::group::group(wf, self.run).ok().flatten();
        self.st.started_at = Some(ts(self.now));
        // tools/call checked these already; a Run created with kubectl gets the same checks.
        if let Some(why) = self.invalid_arguments(wf) {
            self.finish_with(why);
            return Progress::Changed;
        }
        match duration::run_timeout(wf.execution.timeout.as_deref()) {
            Ok(d) => self.st.deadline = Some(ts(created + d)),
            Err(e) => {
                self.finish_with(fatal_ending(format!("execution.timeout: {e}")));
                return Progress::Changed;
            }
        }
        self.announce_reuse()
    }

    /// Why the Run's arguments are refused, as the ending of the Run (`-32602` with the schema
    /// errors), or `None` when they are acceptable.
    pub(super) fn invalid_arguments(&self, wf: &WorkflowSpec) -> Option<Ending> {
        let args = self.run.spec.arguments.clone().unwrap_or_else(|| json!({}));
        let refuse = |message: String, data: Option<Value>| {
            Some(Ending {
                phase: RunPhase::Failed,
                result: None,
                error: Some(Box::new(RunError {
                    code: codes::INVALID_PARAMS,
                    message: message.clone(),
                    data,
                })),
                message: Some(message),
            })
        };
        if args == Value::String(crate::api::UNREADABLE.to_owned()) {
            return refuse(
                format!(
                    "arguments nest too deeply to be read (at most {} levels)",
                    budget::MAX_DEPTH
                ),
                None,
            );
        }
        if let Err(why) = budget::check("arguments", &args, budget::MAX_ARGUMENT_BYTES) {
            return refuse(why.to_string(), None);
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

    /// Perform cleanup `c`, the first of those queued.
    fn cleanup(&self, c: crate::api::Cleanup) -> Next {
        Next::Execute(Box::new(Effect {
            step: c.step.clone(),
            attempt: 0,
            deadline: Some(self.now + CLEANUP_TIMEOUT),
            idempotency_key: idempotency_key(self.run, &c.step),
            action: Action::Cleanup(c),
        }))
    }

    pub(super) fn advance(&mut self, wf: &WorkflowSpec) -> Progress {
        if let Some(c) = self.st.cleanups.first().cloned() {
            return Progress::Stop(self.cleanup(c));
        }
        self.advance_telling(wf)
    }

    /// What the steps do next (the main ones, or `finally`), or how the Run ends.
    pub(super) fn advance_steps(&mut self, wf: &WorkflowSpec) -> Progress {
        let main = self.running(false);
        let failing = self.st.ending.is_some();
        if failing && !main.is_empty() && wf.fail_fast() {
            self.stop_running(wf, &main);
            return Progress::Changed;
        }
        // Without fail fast, what does not depend on a failed step still runs to its end.
        let in_finally = failing
            && main.is_empty()
            && (wf.fail_fast() || self.next_ready(&wf.steps, false).is_none());
        let list = if in_finally { &wf.finally } else { &wf.steps };
        let ready = self.next_ready(list, in_finally);
        if let Some(i) = ready
            && !self.is_paused()
        {
            return self.begin_step(wf, &list[i], in_finally);
        }
        let running = self.running(in_finally);
        if !running.is_empty() {
            return self.continue_all(wf, &running);
        }
        if ready.is_some() {
            return self.wait_paused(in_finally);
        }
        if in_finally || failing {
            self.finalize();
            return Progress::Changed;
        }
        let stuck: Vec<&str> = wf
            .steps
            .iter()
            .filter(|s| !self.st.steps.iter().any(|r| r.name == s.name))
            .map(|s| s.name.as_str())
            .collect();
        let ending = if !stuck.is_empty() {
            fatal_ending(format!(
                "steps {} can never start: their dependencies did not succeed",
                stuck.join(", ")
            ))
        } else {
            let ctx = context(self.run, &self.st);
            let rendered = result::render(wf.result.as_ref(), &self.st, &ctx)
                .map_err(|e| e.to_string())
                .and_then(|r| result::meets_output_schema(wf.tool.output_schema.as_ref(), r));
            match rendered {
                Ok(result) => Ending {
                    phase: RunPhase::Succeeded,
                    result: Some(Box::new(result)),
                    error: None,
                    message: None,
                },
                Err(e) => fatal_ending(format!("result: {e}")),
            }
        };
        self.st.ending = Some(Box::new(ending));
        if wf.finally.is_empty() {
            self.finalize();
        }
        Progress::Changed
    }

    pub(super) fn step_deadline(
        &self,
        rec: &StepRecord,
        step: &Step,
        ctx: &Value,
    ) -> Result<Option<Timestamp>, StepTimeoutError> {
        let run_deadline = if rec.finally {
            None
        } else {
            parse_ts(self.st.deadline.as_deref())
        };
        let step_deadline = match &step.timeout {
            None => None,
            Some(t) => {
                let rendered = template::render(t, ctx)?;
                let d = duration::parse(&rendered).map_err(StepTimeoutError::Duration)?;
                let start = parse_ts(rec.attempt_started_at.as_deref()).unwrap_or(self.now);
                let waited = std::time::Duration::from_millis(rec.attempt_waited_ms.unwrap_or(0));
                Some(start + d + waited)
            }
        };
        Ok(match (run_deadline, step_deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        })
    }

    /// Continue record `i`. `base` is the pass's template context for running items (see
    /// `continue_all`): kept while what runs only reports effects, dropped by anything else.
    pub(super) fn continue_step(
        &mut self,
        wf: &WorkflowSpec,
        i: usize,
        base: &mut Option<Value>,
    ) -> Progress {
        let rec = self.st.steps[i].clone();
        let Some(step) = wf.step(&rec.name) else {
            self.fail_fatal(i, "step vanished from the workflow snapshot".into());
            return Progress::Changed;
        };
        let running = rec.phase == StepPhase::Running
            && !matches!(
                step.kind(),
                StepKind::Delay(_) | StepKind::Input(_) | StepKind::Sample(_)
            );
        if !running {
            *base = None;
        }
        match (step.kind(), rec.phase) {
            (_, StepPhase::Retrying) => self.retry_when_due(i, step, &rec),
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
            (StepKind::Sample(sample), _) => self.continue_sample(i, step, sample),
            (StepKind::Tool(_), StepPhase::Waiting) => self.continue_upstream_input(i, &rec),
            (kind, StepPhase::Running) => {
                let ctx = match item_of(&rec.name) {
                    Some(_) => {
                        let base = base.get_or_insert_with(|| context(self.run, &self.st));
                        super::item_context(base.clone(), &self.st, &rec.name)
                    }
                    None => context_for(self.run, &self.st, &rec.name),
                };
                self.continue_running(i, step, kind, &rec, &ctx)
            }
            _ => self.impossible(i, &rec),
        }
    }

    /// A running attempt: the effect that performs it (a step that cannot render one fails).
    fn continue_running(
        &mut self,
        i: usize,
        step: &Step,
        kind: StepKind<'_>,
        rec: &StepRecord,
        ctx: &Value,
    ) -> Progress {
        match running_action(self.run, kind, rec, ctx) {
            Some(Ok(action)) => self.execute(i, step, ctx, action),
            Some(Err(e)) => {
                self.fail_fatal(i, e.to_string());
                Progress::Changed
            }
            None => self.impossible(i, rec),
        }
    }

    /// A step whose record cannot be continued fails the Run rather than looping.
    fn impossible(&mut self, i: usize, rec: &StepRecord) -> Progress {
        self.fail_fatal(i, format!("step {} is in an impossible state", rec.name));
        Progress::Changed
    }

    /// Start the next attempt of a step once its backoff has passed.
    fn retry_when_due(&mut self, i: usize, step: &Step, rec: &StepRecord) -> Progress {
        let wake = parse_ts(rec.wake_at.as_deref()).unwrap_or(self.now);
        if self.now < wake {
            return Progress::Stop(Next::WaitUntil(Some(self.bounded(wake, rec))));
        }
        if self.is_paused() {
            return self.wait_paused(rec.finally);
        }
        let run_name = self.run.metadata.name.clone().unwrap_or_default();
        let r = &mut self.st.steps[i];
        r.phase = StepPhase::Running;
        r.attempt += 1;
        r.attempt_started_at = Some(ts(self.now));
        r.attempt_waited_ms = None;
        r.wake_at = None;
        match step.kind() {
            // Each attempt is a new Job; the failed one stays for inspection.
            StepKind::Job(_) => r.job_name = Some(job_name(&run_name, &r.name, r.attempt)),
            // And a new child Run, for the same reason.
            StepKind::Workflow(_) => {
                r.child_run = Some(child_run_name(&run_name, &r.name, r.attempt));
            }
            _ => {}
        }
        self.event(
            event_reasons::STEP_STARTED,
            format!("step {} attempt {} started", rec.name, rec.attempt + 1),
        );
        Progress::Changed
    }

    /// A wake time, bounded by the run deadline (main steps only).
    pub(super) fn bounded(&self, wake: Timestamp, rec: &StepRecord) -> Timestamp {
        match parse_ts(self.st.deadline.as_deref()) {
            Some(d) if !rec.finally => wake.min(d),
            _ => wake,
        }
    }

    pub(super) fn execute(
        &mut self,
        i: usize,
        step: &Step,
        ctx: &Value,
        action: Action,
    ) -> Progress {
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
                self.fail_fatal(i, e.to_string());
                Progress::Changed
            }
        }
    }

    /// A `tool` step waits for answers to the input its upstream asked for; once every key is
    /// answered they are forwarded on the next attempt.
    pub(super) fn continue_upstream_input(&mut self, i: usize, rec: &StepRecord) -> Progress {
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
        // The step's timeout is active time: the wait for people does not count against it.
        let asked = rec
            .upstream_input_keys
            .keys()
            .filter_map(|local| self.st.input_requests.get(local))
            .filter_map(|r| parse_ts(r.asked_at.as_deref()))
            .min();
        for local in rec.upstream_input_keys.keys() {
            self.st.input_requests.remove(local);
        }
        let r = &mut self.st.steps[i];
        if let Some(asked) = asked
            && let Ok(waited) = std::time::Duration::try_from(self.now.duration_since(asked))
        {
            let waited = u64::try_from(waited.as_millis()).unwrap_or(u64::MAX);
            r.attempt_waited_ms = Some(r.attempt_waited_ms.unwrap_or(0).saturating_add(waited));
        }
        r.phase = StepPhase::Running;
        r.pending_answers = Some(Value::Object(answers));
        r.upstream_input_keys.clear();
        let name = r.name.clone();
        self.refresh_waiting();
        self.settle_phase();
        self.event(
            event_reasons::INPUT_ANSWERED,
            format!("answers for step {name} forwarded upstream"),
        );
        Progress::Changed
    }

    pub(super) fn succeed(&mut self, i: usize, output: Value) {
        let (output, truncated) = guard_output(output, MAX_OUTPUT_BYTES);
        let rec = &mut self.st.steps[i];
        rec.phase = StepPhase::Succeeded;
        rec.output = Some(output);
        rec.output_truncated = truncated;
        rec.finished_at = Some(ts(self.now));
        rec.wake_at = None;
        let name = rec.name.clone();
        // An item's success shows in its step's; a thousand Events would bury the rest.
        if item_of(&name).is_none() {
            self.event(
                event_reasons::STEP_SUCCEEDED,
                format!("step {name} succeeded"),
            );
        }
    }

    /// Fail a step with a protocol-level error (template and rendering errors).
    pub(super) fn fail_fatal(&mut self, i: usize, message: String) {
        let name = self.st.steps[i].name.clone();
        self.warn(
            event_reasons::STEP_FAILED,
            format!("step {name}: {message}"),
        );
        fail_step_fatal(&mut self.st, i, &name, message, self.now);
    }
}
