//! What undoes a step interrupted while it ran: the cleanup a cancel, a deadline or an
//! internal failure queues for it.

use crate::api::{Cleanup, StepKind, StepPhase, StepRecord, WorkflowSpec};

/// What undoes step record `rec`, interrupted while it ran: its upstream task cancelled, its
/// Job deleted, its child Run cancelled; `None` when it left nothing running.
pub(super) fn cleanup_for(wf: &WorkflowSpec, rec: &StepRecord) -> Option<Cleanup> {
    let nothing = Cleanup {
        step: rec.name.clone(),
        cancel_upstream_task: None,
        delete_job: None,
        cancel_run: None,
    };
    match wf.step(&rec.name).map(|s| s.kind()) {
        Some(StepKind::Tool(_)) if rec.upstream_task_id.is_some() => Some(Cleanup {
            cancel_upstream_task: rec.upstream_task_id.clone(),
            ..nothing
        }),
        Some(StepKind::Job(_)) if rec.job_name.is_some() && rec.phase == StepPhase::Running => {
            Some(Cleanup {
                delete_job: rec.job_name.clone(),
                ..nothing
            })
        }
        // A child that is between attempts has ended; one that runs is cancelled.
        Some(StepKind::Workflow(_))
            if rec.child_run.is_some() && rec.phase == StepPhase::Running =>
        {
            Some(Cleanup {
                cancel_run: rec.child_run.clone(),
                ..nothing
            })
        }
        _ => None,
    }
}
