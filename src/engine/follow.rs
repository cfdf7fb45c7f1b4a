//! Outcomes recorded and what follows from them decided, as one status to write.

use jiff::Timestamp;

use super::effects::{Effect, Event, Outcome};
use super::machine::decide;
use super::record::{record_all, recorded_events};
use crate::api::{Run, RunStatus};

/// Record the outcomes of effects and decide what follows from them, for one status write
/// where recording and deciding apart made two (each a copy of every step record: a fan-out's
/// items ending a hundred at a time wrote its thousand records twice per batch). The status to
/// write (unchanged when nothing changed) and the Events of both. A Run without a snapshot
/// has nothing to decide from and gets its outcomes recorded only.
pub fn record_and_decide(
    run: &Run,
    outcomes: &[(Effect, Outcome)],
    now: Timestamp,
) -> (RunStatus, Vec<Event>) {
    let recorded = record_all(run, outcomes, now);
    let mut events = recorded_events(run.status.as_ref(), &recorded);
    if recorded.workflow.is_none() {
        return (recorded, events);
    }
    let mut next = Run {
        metadata: run.metadata.clone(),
        spec: run.spec.clone(),
        status: Some(recorded),
    };
    let decision = decide(&next, None, now);
    events.extend(decision.events);
    let status = decision
        .status
        .unwrap_or_else(|| next.status.take().unwrap_or_default());
    (status, events)
}
