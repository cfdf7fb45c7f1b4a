//! Holding a Run whose step ran out of retries (`execution.onRetriesExhausted: Pause`), and
//! what a paused Run's task says: helpers of recording outcomes and of the step machine.

use jiff::Timestamp;

use super::effects::Event;
use super::ts;
use crate::api::{PausedState, RetriesExhausted, Run, RunStatus, WorkflowSpec, event_reasons};

/// The task's status message while a Run is paused: who (or which step) and nothing of the
/// reason, which is free text.
pub(super) fn paused_message(p: &PausedState) -> String {
    match (&p.by, &p.step) {
        (_, Some(step)) => format!("paused: step {step} ran out of retries"),
        (Some(by), None) => format!("paused by {by}"),
        (None, None) => "paused".into(),
    }
}

/// Whether a step of `run` whose last attempt failed holds the Run instead of failing it.
pub(super) fn holds_on_exhaustion(run: &Run, wf: &WorkflowSpec) -> bool {
    run.spec.cancel.is_none() && wf.execution.on_retries_exhausted == Some(RetriesExhausted::Pause)
}

/// Hold record `idx`, whose last attempt failed with `message`: it waits for one more attempt,
/// due at once, and the Run is paused until someone resumes it.
pub(super) fn hold(st: &mut RunStatus, idx: usize, message: &str, now: Timestamp) {
    let rec = &mut st.steps[idx];
    rec.phase = crate::api::StepPhase::Retrying;
    rec.wake_at = Some(ts(now));
    let reason = format!(
        "step {} failed after {} attempts: {message}",
        rec.name, rec.attempt
    );
    let paused = PausedState {
        since: ts(now),
        by: None,
        reason: Some(reason),
        step: Some(rec.name.clone()),
    };
    st.status_message = Some(paused_message(&paused));
    st.paused = Some(Box::new(paused));
}

/// The Event of a Run held because a step ran out of retries, when that is what changed.
pub(super) fn event(before: Option<&RunStatus>, after: &RunStatus) -> Option<Event> {
    let p = after.paused.as_ref().filter(|p| p.step.is_some())?;
    if before.and_then(|b| b.paused.as_ref()) == Some(p) {
        return None;
    }
    Some(Event {
        reason: event_reasons::PAUSED,
        message: format!(
            "paused: {}; resume to try it again",
            p.reason.as_deref().unwrap_or_default()
        ),
        warning: true,
    })
}
