//! Deciding: from a Run's status, and from outcomes just recorded into it, the status to write
//! and what follows.

use jiff::Timestamp;

use super::effects::{Decision, Effect, Next, Outcome, Recorded};
use super::machine::Machine;
use super::record::{record_unchecked, recorded_events, within_budget};
use crate::api::{Run, RunStatus, WorkflowSpec};

/// Decide the next action for a Run.
///
/// `workflow` is the live Workflow; it is read only when the Run has no snapshot yet.
pub fn decide(run: &Run, workflow: Option<&WorkflowSpec>, now: Timestamp) -> Decision {
    let empty = RunStatus::default();
    let original = run.status.as_ref().unwrap_or(&empty);
    decide_from(run, original.clone(), original, workflow, now)
}

/// Decide from `st`, which may already hold more than the Run's own status (outcomes recorded
/// into it); the status to write is `None` when it equals `original`. A status left as it was
/// is not measured against the budget again: it was written, and measuring it serializes
/// every step record (a fan-out's thousand, on every pass).
fn decide_from(
    run: &Run,
    st: RunStatus,
    original: &RunStatus,
    workflow: Option<&WorkflowSpec>,
    now: Timestamp,
) -> Decision {
    let mut m = Machine {
        run,
        st,
        now,
        events: Vec::new(),
        read: Default::default(),
    };
    let mut next = m.drive(workflow);
    if m.st == *original {
        return Decision {
            status: None,
            events: m.events,
            next,
        };
    }
    let drove_to = m.st.phase;
    let mut status = within_budget(run, m.st, now);
    if status.phase != drove_to {
        // Failed for its size: decide again once that is written (its time to live).
        next = Next::WaitUntil(Some(now));
    }
    status.observed_generation = run.metadata.generation;
    Decision {
        status: Some(status),
        events: m.events,
        next,
    }
}

/// Record the outcomes of effects and decide what follows from them, for one status write
/// where recording and deciding apart made two (each a copy of every step record: a fan-out's
/// items ending a hundred at a time wrote its thousand records twice per batch), and with what
/// follows the write decided already, where deciding again after it copied them once more. A
/// Run without a snapshot has nothing to decide from and gets its outcomes recorded only.
///
/// The outcomes are recorded into one copy of the status, which the decision goes on from:
/// a decision reads the Run's own status only for what recording never changes (whether it
/// was paused before it started), and the budget is checked once, on what is written.
pub fn record_and_decide(run: &Run, outcomes: &[(Effect, Outcome)], now: Timestamp) -> Recorded {
    let empty = RunStatus::default();
    let original = run.status.as_ref().unwrap_or(&empty);
    let recorded = record_unchecked(run, outcomes, now);
    let mut events = recorded_events(run.status.as_ref(), &recorded);
    if recorded.workflow.is_none() {
        let status = within_budget(run, recorded, now);
        return Recorded {
            status: (status != *original).then_some(status),
            events,
            next: None,
        };
    }
    let decision = decide_from(run, recorded, original, None, now);
    events.extend(decision.events);
    Recorded {
        status: decision.status,
        events,
        next: Some(decision.next),
    }
}
