//! Recording an executor's outcome: success, retry with backoff, failure for good, and the
//! status budget every write must fit.

use std::collections::BTreeMap;

use jiff::Timestamp;
use serde_json::{Value, json};

use super::backoff::{backoff, retry_limit};
use super::budget::guard_output;
use super::effects::{Action, Effect, Event, Outcome};
use super::endings::{fail_internal, tool_error_ending, upstream_error_ending};
use super::{MAX_OUTPUT_BYTES, budget, context_for, ts};
use crate::api::{
    AttemptRecord, Ending, ErrorClass, Run, RunError, RunPhase, RunStatus, Step, StepPhase,
    StepRecord, WorkflowSpec, event_reasons, item_of,
};
use crate::protocol::codes;

/// Record an executor's outcome for an attempt. Stale reports (another attempt, a step that is
/// no longer running) leave the status unchanged.
pub fn record(run: &Run, effect: &Effect, outcome: Outcome, now: Timestamp) -> RunStatus {
    let mut st = run.status.clone().unwrap_or_default();
    let wf = run.workflow_snapshot();
    apply_outcome(run, wf.as_ref(), &mut st, effect, outcome, now);
    within_budget(run, st, now)
}

/// The Events of what recording outcomes changed between `before` and `after`: a step (not an
/// item of a `forEach` step, whose own step tells) that succeeded or failed for good.
pub fn recorded_events(before: Option<&RunStatus>, after: &RunStatus) -> Vec<Event> {
    let was = |name: &str| {
        before
            .and_then(|b| b.steps.iter().find(|r| r.name == name))
            .map(|r| r.phase)
    };
    after
        .steps
        .iter()
        .filter(|r| item_of(&r.name).is_none() && was(&r.name) != Some(r.phase))
        .filter_map(|r| match r.phase {
            StepPhase::Succeeded => Some(Event {
                reason: event_reasons::STEP_SUCCEEDED,
                message: format!("step {} succeeded", r.name),
                warning: false,
            }),
            StepPhase::Failed => Some(Event {
                reason: event_reasons::STEP_FAILED,
                message: match r
                    .message
                    .as_deref()
                    .and_then(|m| m.split(DETAIL_MARK).next())
                {
                    Some(m) => format!("step {}: {m}", r.name),
                    None => format!("step {} failed", r.name),
                },
                warning: true,
            }),
            _ => None,
        })
        .chain(super::held::event(before, after))
        .chain(super::told::events(before, after))
        .collect()
}

/// Record several outcomes at once (steps running at the same time), in order, as [`record`]
/// would one after another; the status budget is checked once, on the result.
pub fn record_all(run: &Run, outcomes: &[(Effect, Outcome)], now: Timestamp) -> RunStatus {
    within_budget(run, record_unchecked(run, outcomes, now), now)
}

/// [`record_all`] without the budget check, for a caller that decides on the result and
/// checks once, at the end.
pub(super) fn record_unchecked(
    run: &Run,
    outcomes: &[(Effect, Outcome)],
    now: Timestamp,
) -> RunStatus {
    // One copy of the status for all of them: a copy per outcome made recording a batch cost
    // the number of outcomes times the number of records (a fan-out's hundreds of items).
    let mut st = run.status.clone().unwrap_or_default();
    let wf = run.workflow_snapshot();
    for (effect, outcome) in outcomes {
        apply_outcome(run, wf.as_ref(), &mut st, effect, outcome.clone(), now);
    }
    st
}

/// A status that fits [`budget::MAX_STATUS_BYTES`]: `st` itself, or, when it would not fit, the
/// Run failed with its step outputs dropped (flagged as truncated), so that the failure can be
/// written instead of a write the store refuses being retried forever. A Run that had finished
/// (a late cleanup note outgrew it) keeps its outcome: only what it carries besides is cut.
pub(super) fn within_budget(run: &Run, st: RunStatus, now: Timestamp) -> RunStatus {
    let size = budget::encoded_len(&st);
    if size <= budget::MAX_STATUS_BYTES {
        return st;
    }
    let mut st = st;
    for rec in &mut st.steps {
        if rec.output.take().is_some() {
            rec.output_truncated = true;
        }
    }
    if run.phase().is_terminal() {
        return budget::fit_finished(st);
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

/// Record one outcome into `st`, the status being built for `run` (whose own status is not
/// read: `st` may already hold other outcomes); `wf` is the Run's Workflow snapshot.
fn apply_outcome(
    run: &Run,
    wf: Option<&WorkflowSpec>,
    st: &mut RunStatus,
    effect: &Effect,
    outcome: Outcome,
    now: Timestamp,
) {
    if let Action::Cleanup(c) = &effect.action {
        return record_cleanup(st, c, outcome);
    }
    if orphaned(st, effect, &outcome) {
        return;
    }
    // A finished Run is final, whatever an attempt that outlived it reports (only the
    // cleanups of the steps it ended are still noted).
    if st.phase.is_terminal() {
        return;
    }
    if let Action::Notify { key, reminder, .. } = &effect.action {
        return super::told::record_notice(st, key, *reminder, outcome, now);
    }
    let Some(wf) = wf else {
        return;
    };
    let Some(idx) = st.steps.iter().position(|r| {
        r.name == effect.step && r.attempt == effect.attempt && r.phase == StepPhase::Running
    }) else {
        return;
    };
    let step = wf.step(&effect.step).cloned();
    let rec = &mut st.steps[idx];
    match outcome {
        Outcome::Checkpoint {
            upstream_task_id,
            job_name,
        } => checkpoint(rec, effect, upstream_task_id, job_name),
        Outcome::NeedsInput {
            requests,
            request_state,
        } => upstream_asks(run, st, idx, requests, request_state, now),
        Outcome::Succeeded(output) => succeeded(rec, output, now),
        Outcome::Failed {
            class,
            message,
            detail,
        } => {
            fail_attempt(run, st, idx, step.as_ref(), class, message, None, now);
            // A tool step that timed out or lost its connection for good may leave an upstream
            // task behind: cancel it as every other failure path does.
            cancel_abandoned_upstream_task(st, idx);
            abandon_child(st, effect, class);
            if let Some(d) = detail {
                add_detail(&mut st.steps[idx], &d);
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
            fail_attempt(run, st, idx, step.as_ref(), class, message, error, now);
            cancel_abandoned_upstream_task(st, idx);
        }
        Outcome::Fatal(error) => {
            fail_step(st, idx, error.message.clone(), error, now);
            cancel_abandoned_upstream_task(st, idx);
        }
    }
}

/// Whether the attempt of `effect` is still its step's, which follows what it started.
fn followed(st: &RunStatus, effect: &Effect) -> bool {
    !st.phase.is_terminal()
        && st
            .steps
            .iter()
            .any(|r| r.name == effect.step && r.attempt == effect.attempt && !r.phase.is_terminal())
}

/// Whether `outcome` reports what an attempt started (an upstream task, a Job) after its step
/// stopped (failFast, a cancel, the Run's end): nobody follows that, so its cleanup is queued,
/// once, as the step's own would have been.
fn orphaned(st: &mut RunStatus, effect: &Effect, outcome: &Outcome) -> bool {
    let Outcome::Checkpoint {
        upstream_task_id,
        job_name,
    } = outcome
    else {
        return false;
    };
    if followed(st, effect) {
        return false;
    }
    let (task, job) = (upstream_task_id.as_deref(), job_name.as_deref());
    let queued = st.cleanups.iter().any(|c| {
        (task.is_some() && c.cancel_upstream_task.as_deref() == task)
            || (job.is_some() && c.delete_job.as_deref() == job)
    });
    if !queued && (task.is_some() || job.is_some()) {
        st.cleanups.push(crate::api::Cleanup {
            step: effect.step.clone(),
            cancel_upstream_task: task.map(str::to_owned),
            delete_job: job.map(str::to_owned),
            cancel_run: None,
        });
    }
    true
}

/// Why a `finally` step's upstream cannot be answered: no deadline bounds the steps that run
/// after the Run's own, and a cancel closes every question, so a wait could last forever.
const UNATTENDED: &str = "the upstream asked for input in a finally step, which runs unattended";

/// Why upstream questions cannot be kept on the Run: one nests deeper, or is larger, than an
/// argument may be (a question becomes part of the stored Run and of what its readers load).
fn too_deep(requests: &BTreeMap<String, Value>) -> Option<String> {
    requests.iter().find_map(|(key, request)| {
        budget::check(
            &format!("upstream question {key}"),
            request,
            budget::MAX_ARGUMENT_BYTES,
        )
        .err()
        .map(|e| e.to_string())
    })
}

/// An attempt's success: its output (bounded) kept, answers it carried spent.
fn succeeded(rec: &mut StepRecord, output: Value, now: Timestamp) {
    let (output, truncated) = guard_output(output, MAX_OUTPUT_BYTES);
    rec.pending_answers = None;
    rec.phase = StepPhase::Succeeded;
    rec.output = Some(output);
    rec.output_truncated = truncated;
    rec.finished_at = Some(ts(now));
    rec.message = None;
}

/// A child Run or a Job that a step stopped waiting for (its attempt timed out, the watch on
/// it was lost, or, for a Job, reading it or its pods was refused) runs on unless stopped:
/// the child is cancelled, the Job deleted, before a retry starts another (under a name of
/// its own). One that ended (the failure reported) needs nothing.
fn abandon_child(st: &mut RunStatus, effect: &Effect, class: ErrorClass) {
    let job = matches!(effect.action, Action::Job { .. });
    let unseen = match class {
        ErrorClass::Timeout | ErrorClass::Connection => true,
        ErrorClass::ClientError => job,
        _ => false,
    };
    if !unseen {
        return;
    }
    let (cancel_run, delete_job) = match &effect.action {
        Action::Child { run_name, .. } => (Some(run_name.clone()), None),
        Action::Job { job_name, .. } => (None, Some(job_name.clone())),
        _ => return,
    };
    st.cleanups.push(crate::api::Cleanup {
        step: effect.step.clone(),
        cancel_upstream_task: None,
        delete_job,
        cancel_run,
    });
}

/// What separates a failure's message from the executor's detail (an upstream's answer) in a
/// step's record; an Event shows only what comes before it.
const DETAIL_MARK: &str = "; response body: ";

/// The executor's detail of a failure, appended to the step's and the attempt's message. The
/// detail is what an upstream answered, for those who may read the Run: never in an Event
/// ([`recorded_events`]), which reach whoever may read Events and the operator's log.
fn add_detail(rec: &mut StepRecord, detail: &str) {
    let full = format!(
        "{}{DETAIL_MARK}{detail}",
        rec.message.as_deref().unwrap_or_default()
    );
    if let Some(last) = rec.attempts.last_mut() {
        last.message = full.clone();
    }
    rec.message = Some(full);
}

/// What an attempt that is still under way has started: an upstream task, a Job.
fn checkpoint(
    rec: &mut StepRecord,
    effect: &Effect,
    upstream_task_id: Option<String>,
    job_name: Option<String>,
) {
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

/// A step fails for good with a protocol-level `error`: the Run ends with it, unless it is
/// already ending with another failure. `message` is what the step's record says.
fn fail_step(st: &mut RunStatus, idx: usize, message: String, error: RunError, now: Timestamp) {
    let rec = &mut st.steps[idx];
    rec.phase = StepPhase::Failed;
    rec.finished_at = Some(ts(now));
    rec.message = Some(message);
    if st
        .ending
        .as_ref()
        .is_none_or(|e| e.phase == RunPhase::Succeeded)
    {
        st.ending = Some(Box::new(Ending {
            phase: RunPhase::Failed,
            result: None,
            message: Some(error.message.clone()),
            error: Some(Box::new(error)),
        }));
    }
}

/// A cleanup's outcome. Best effort: whatever happened, the cleanup is done; a failure is noted
/// on its step, and so is what a cleanup reports it did (a string output).
fn record_cleanup(st: &mut RunStatus, c: &crate::api::Cleanup, outcome: Outcome) {
    if !st.cleanups.contains(c) {
        return;
    }
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
}

/// An upstream tool asks for input: its questions become this Run's, under fresh keys — unless
/// the Run cannot pass them on, which fails the step (and cancels the upstream task).
fn upstream_asks(
    run: &Run,
    st: &mut RunStatus,
    idx: usize,
    requests: BTreeMap<String, Value>,
    request_state: Option<String>,
    now: Timestamp,
) {
    let unattended = st.steps[idx].finally.then(|| UNATTENDED.to_owned());
    if let Some(why) = super::forms::unanswerable(&requests)
        .or_else(|| too_deep(&requests))
        .or(unattended)
    {
        let name = st.steps[idx].name.clone();
        fail_step_fatal(st, idx, &name, why, now);
        return cancel_abandoned_upstream_task(st, idx);
    }
    let rec = &mut st.steps[idx];
    let step_name = rec.name.clone();
    rec.phase = StepPhase::Waiting;
    rec.pending_answers = None;
    rec.upstream_request_state = request_state;
    rec.upstream_input_keys.clear();
    for (upstream_key, request) in requests {
        let fresh = fresh_key(run, st, &format!("{step_name}.{upstream_key}"));
        st.input_requests.insert(
            fresh.clone(),
            crate::api::OpenInputRequest {
                step: step_name.clone(),
                name: upstream_key.clone(),
                method: request
                    .get("method")
                    .and_then(Value::as_str)
                    .unwrap_or(crate::protocol::METHOD_ELICITATION)
                    .to_owned(),
                params: request.get("params").cloned().unwrap_or_else(|| json!({})),
                asked_at: Some(ts(now)),
                ..Default::default()
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

/// A failed attempt: retry it when the policy says so, else fail the step (and the Run, with a
/// tool error, or with `error` when the upstream answered a protocol-level one).
#[allow(clippy::too_many_arguments)]
pub(super) fn fail_attempt(
    run: &Run,
    st: &mut RunStatus,
    idx: usize,
    step: Option<&Step>,
    class: ErrorClass,
    message: String,
    error: Option<RunError>,
    now: Timestamp,
) {
    let ctx = context_for(run, st, &st.steps[idx].name);
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
            fail_step_fatal(st, idx, &name, e.to_string(), now);
            return;
        }
    };
    if retries_on.contains(&class) && rec.attempt <= limit {
        match backoff(policy.as_ref(), rec.attempt, &ctx) {
            Ok(wait) => {
                rec.phase = StepPhase::Retrying;
                rec.wake_at = Some(ts(now + wait));
            }
            Err(e) => {
                let name = rec.name.clone();
                fail_step_fatal(st, idx, &name, e.to_string(), now);
            }
        }
    } else if !rec.finally
        && st.ending.is_none()
        && run
            .workflow_snapshot()
            .is_some_and(|wf| super::held::holds_on_exhaustion(run, &wf))
    {
        super::held::hold(st, idx, &message, now);
    } else {
        rec.phase = StepPhase::Failed;
        rec.finished_at = Some(ts(now));
        let name = rec.name.clone();
        let is_finally = rec.finally;
        if !is_finally && st.ending.is_none() {
            st.ending = Some(Box::new(match error {
                Some(e) => upstream_error_ending(&name, e),
                None => tool_error_ending(format!("step {name} failed: {message}")),
            }));
        }
    }
}

/// A `tool` step that failed for good while its upstream task runs on: cancel that task.
pub(super) fn cancel_abandoned_upstream_task(st: &mut RunStatus, idx: usize) {
    let rec = &st.steps[idx];
    if rec.phase == StepPhase::Failed
        && let Some(id) = rec.upstream_task_id.clone()
    {
        let step = rec.name.clone();
        st.cleanups.push(crate::api::Cleanup {
            step,
            cancel_upstream_task: Some(id),
            delete_job: None,
            cancel_run: None,
        });
    }
}

pub(super) fn fail_step_fatal(
    st: &mut RunStatus,
    idx: usize,
    step: &str,
    message: String,
    now: Timestamp,
) {
    let error = RunError {
        code: codes::INTERNAL_ERROR,
        message: format!("step {step}: {message}"),
        data: None,
    };
    fail_step(st, idx, message, error, now);
}

/// The key to ask a question under: `base` (`<step>.<request>`) when no answer, open question
/// or step has used it yet, else the first unused `base.N` (N ≥ 2). The one rule for questions
/// of input steps, questions asked again and questions an upstream tool asks, so an answer
/// written before its question (with kubectl, say) never answers it.
pub(super) fn fresh_key(run: &Run, st: &RunStatus, base: &str) -> String {
    let unused = |k: &str| {
        !run.spec.input_responses.contains_key(k)
            && !st.input_requests.contains_key(k)
            && !st.steps.iter().any(|r| {
                r.input_keys.values().any(|v| v == k) || r.upstream_input_keys.contains_key(k)
            })
    };
    std::iter::once(base.to_owned())
        .chain((2..).map(|n| format!("{base}.{n}")))
        .find(|k| unused(k))
        .expect("an unbounded range has an unused key")
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;
    use crate::api::{RunPhase, StepPhase, StepRecord};

    #[test]
    fn a_finished_run_that_outgrows_its_budget_keeps_how_it_ended() {
        let now = Timestamp::UNIX_EPOCH;
        let mut run = Run::requested("ns", "r", "w", Value::Null, None, now);
        let ended = RunStatus {
            phase: RunPhase::Cancelled,
            steps: vec![StepRecord {
                name: "deploy".into(),
                phase: StepPhase::Failed,
                output: Some(serde_json::json!({"log": "x".repeat(600 * 1024)})),
                ..Default::default()
            }],
            ..Default::default()
        };
        run.status = Some(ended.clone());
        // A late cleanup note, and the status no longer fits.
        let mut grown = ended;
        grown.steps[0].message = Some(format!("cleanup failed: {}", "y".repeat(600 * 1024)));
        let kept = within_budget(&run, grown, now);
        assert_eq!(kept.phase, RunPhase::Cancelled);
        assert!(kept.error.is_none(), "{:?}", kept.error);
        assert!(kept.steps[0].output_truncated);
        assert!(budget::encoded_len(&kept) <= budget::MAX_STATUS_BYTES);
        // A Run that had not finished still fails with the reason.
        run.status.as_mut().unwrap().phase = RunPhase::Running;
        let mut grown = run.status.clone().unwrap();
        grown.steps[0].message = Some("z".repeat(600 * 1024));
        let failed = within_budget(&run, grown, now);
        assert_eq!(failed.phase, RunPhase::Failed);
    }
}
