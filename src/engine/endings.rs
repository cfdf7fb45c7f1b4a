//! How a Run ends: the endings of each kind of failure and the final status they write.

use serde_json::json;

use jiff::Timestamp;

use super::budget::guard_text;
use super::effects::Event;
use super::undo::cleanup_for;
use super::{MAX_RESULT_BYTES, ts};
use crate::api::{Ending, Run, RunError, RunPhase, RunStatus, conditions, event_reasons, reasons};
use crate::protocol::codes;

/// A protocol-level failure carrying an upstream's JSON-RPC code and message.
pub(super) fn upstream_error_ending(step: &str, upstream: RunError) -> Ending {
    let message = format!("step {step}: upstream error: {}", upstream.message);
    Ending {
        phase: RunPhase::Failed,
        result: None,
        error: Some(Box::new(RunError {
            code: codes::for_run(upstream.code),
            message: message.clone(),
            data: Some(json!({
                "step": step,
                "upstream": upstream,
            })),
        })),
        message: Some(message),
    }
}

pub(super) fn tool_error_ending(message: String) -> Ending {
    Ending {
        phase: RunPhase::Failed,
        result: Some(Box::new(json!({
            "content": [{"type": "text", "text": message}],
            "isError": true,
        }))),
        error: None,
        message: Some(message),
    }
}

pub(super) fn fatal_ending(message: String) -> Ending {
    Ending {
        phase: RunPhase::Failed,
        result: None,
        error: Some(Box::new(RunError {
            code: codes::INTERNAL_ERROR,
            message: message.clone(),
            data: None,
        })),
        message: Some(message),
    }
}

/// Write `ending` as the Run's final status: phase, finish time, result or error, the
/// `Finished` condition and its Event. Open questions and the current step are cleared.
pub(super) fn finalize(st: &mut RunStatus, run: &Run, now: Timestamp, events: &mut Vec<Event>) {
    let ending = st
        .ending
        .get_or_insert_with(|| Box::new(fatal_ending("no ending".into())));
    // The result and error move to `status.result` and `status.error`: a finished Run keeps one
    // copy of its answer, not two (the ending keeps its phase and message).
    let (result, error) = (ending.result.take(), ending.error.take());
    let ending = Ending::clone(ending);
    st.phase = ending.phase;
    st.finished_at = Some(ts(now));
    st.input_requests.clear();
    st.waiting_for = None;
    st.current_step = None;
    st.result = result.map(|r| guard_text(*r, MAX_RESULT_BYTES));
    st.error = error;
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
    st.status_message = Some(outcome_summary(st, ending.phase));
    st.conditions = vec![k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
        type_: conditions::FINISHED.into(),
        status: conditions::TRUE.into(),
        reason: reason.into(),
        message: message.clone(),
        last_transition_time: crate::api::kube_time(now),
        observed_generation: run.metadata.generation,
    }];
    let warning = ending.phase != RunPhase::Succeeded;
    events.push(Event {
        reason: event_reasons::FINISHED,
        message: format!("run {}: {message}", ending.phase.as_str()),
        warning,
    });
}

/// A finished Run's `statusMessage`: its outcome and, for a failure, the first step that
/// failed. It is the task's `statusMessage`, which the protocol lets clients show to a person
/// or a model, so it never carries what a step or an upstream said, an error's text, nor who
/// cancelled the Run and why: those stay in the `Finished` condition, the Run's Events and
/// `spec.cancel`, for those who may read the Run.
pub(super) fn outcome_summary(st: &RunStatus, phase: RunPhase) -> String {
    match phase {
        RunPhase::Succeeded => "run succeeded".into(),
        RunPhase::Cancelled => "cancelled".into(),
        _ => st
            .steps
            .iter()
            .find(|r| !r.finally && r.phase == crate::api::StepPhase::Failed)
            .map_or_else(|| "failed".into(), |r| format!("step {} failed", r.name)),
    }
}

/// End a Run that this process could not handle (a panic while deciding or executing it, a
/// status too large to write): it fails with an internal error naming why, instead of being
/// retried forever. The steps still running end failed with it, so that what their attempts
/// report later (the controller aborts them) is recorded nowhere: a finished Run never starts
/// again. What they left running outside — an upstream task, a Job, a child Run — is queued
/// as a cleanup, which the finished Run still performs (best effort; a panic while performing
/// them gives them up: [`give_up_cleanups`]).
pub fn fail_internal(run: &Run, why: &str, now: Timestamp) -> RunStatus {
    let mut st = run.status.clone().unwrap_or_default();
    if let Some(wf) = run.workflow_snapshot() {
        let running = st.steps.iter().filter(|r| !r.phase.is_terminal());
        let undo: Vec<_> = running.filter_map(|r| cleanup_for(&wf, r)).collect();
        for c in undo {
            if !st.cleanups.contains(&c) {
                st.cleanups.push(c);
            }
        }
    }
    for rec in st.steps.iter_mut().filter(|r| !r.phase.is_terminal()) {
        rec.phase = crate::api::StepPhase::Failed;
        rec.finished_at = Some(ts(now));
        rec.wake_at = None;
        rec.message = Some("ended with the run (internal error)".into());
    }
    st.ending = Some(Box::new(fatal_ending(format!("internal error: {why}"))));
    finalize(&mut st, run, now, &mut Vec::new());
    st.observed_generation = run.metadata.generation;
    st
}

/// A finished Run's status without its pending cleanups, when it has any: performing them
/// failed in a way that would fail again (a panic).
pub fn give_up_cleanups(run: &Run) -> Option<RunStatus> {
    let st = run.status.as_ref()?;
    (st.phase.is_terminal() && !st.cleanups.is_empty()).then(|| RunStatus {
        cleanups: Vec::new(),
        ..st.clone()
    })
}
