//! Retrying a failed Run from its failed step: which step records of the Run retried a new Run
//! takes over, and why a retry is refused. The controller reads the retried Run and asks here
//! before the new Run starts; the MCP endpoint asks the same before it creates one.
//!
//! A main step's record is taken over when it succeeded there, every step it depends on is
//! taken over too, and reusing it is safe: its definition in the Workflow as it is now equals
//! the one that ran (a succeeded step that changed refuses the whole retry), and — when the
//! retry's arguments differ — it is no question for people (an answer was about the old
//! arguments) and reads no `args`. Everything else runs again: the failed step, what depends
//! on it, what never started, skipped steps (their `when` is asked again) and `finally`.

use jiff::Timestamp;

use super::branches::dependencies;
use super::effects::Decision;
use super::endings::tool_error_ending;
use super::machine::{Machine, Progress};
use crate::api::{
    Run, RunPhase, Step, StepKind, StepPhase, StepRecord, WorkflowSpec, event_reasons, item_of,
};

/// Why a Run may not be retried as asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RetryRefusal {
    /// The Run named is gone, or is another Run now under that name.
    #[error("run {0} to retry was not found")]
    NotFound(String),
    /// It has not failed (or been cancelled).
    #[error("run {name} has not failed (it is {phase}); only failed or cancelled runs are retried")]
    NotFailed {
        /// The Run.
        name: String,
        /// Its phase.
        phase: &'static str,
    },
    /// Someone else requested it: its answers and outputs were given for them.
    #[error("run {name} was requested by {requester}; only they may retry it")]
    NotYours {
        /// The Run.
        name: String,
        /// Its requester.
        requester: String,
    },
    /// The retry names another Workflow.
    #[error("run {name} is a run of workflow {workflow}")]
    OtherWorkflow {
        /// The Run.
        name: String,
        /// Its Workflow.
        workflow: String,
    },
    /// A step whose output would be reused is defined differently now.
    #[error(
        "step {step} changed since run {name} ran it: reusing its output is not safe; call the tool again"
    )]
    Changed {
        /// The Run.
        name: String,
        /// The step.
        step: String,
    },
}

/// The step records of `original` that `retry` takes over (each marked `reusedFrom`), given
/// the Workflow as it is now, or why it may not.
pub fn plan(
    retry: &Run,
    original: &Run,
    live: &WorkflowSpec,
) -> Result<Vec<StepRecord>, RetryRefusal> {
    let name = original.metadata.name.clone().unwrap_or_default();
    check(retry, original, &name)?;
    let (Some(ran), Some(st)) = (original.workflow_snapshot(), original.status.as_ref()) else {
        // It failed before it started (its arguments, say): there is nothing to take over.
        return Ok(Vec::new());
    };
    let same_args = retry.spec.arguments == original.spec.arguments;
    let succeeded = |step: &str| {
        st.steps
            .iter()
            .any(|r| r.name == step && r.phase == StepPhase::Succeeded)
    };
    let mut reused: Vec<&str> = Vec::new();
    // In dependency order, not list order (`dependsOn` may name a step listed later): passes
    // until one takes over nothing more.
    loop {
        let before = reused.len();
        for (i, step) in live.steps.iter().enumerate() {
            if reused.contains(&step.name.as_str()) || !succeeded(&step.name) {
                continue;
            }
            let after_reused = dependencies(&live.steps, i)
                .iter()
                .all(|d| reused.contains(d));
            if !after_reused || !(same_args || independent_of_arguments(step)) {
                continue;
            }
            if ran.steps.iter().find(|s| s.name == step.name) != Some(step) {
                return Err(RetryRefusal::Changed {
                    name,
                    step: step.name.clone(),
                });
            }
            reused.push(&step.name);
        }
        if reused.len() == before {
            break;
        }
    }
    Ok(st
        .steps
        .iter()
        .filter(|r| !r.finally)
        .filter(|r| reused.contains(&item_of(&r.name).map_or(r.name.as_str(), |(s, _)| s)))
        .map(|r| StepRecord {
            reused_from: Some(r.reused_from.clone().unwrap_or_else(|| name.clone())),
            ..r.clone()
        })
        .collect())
}

fn check(retry: &Run, original: &Run, name: &str) -> Result<(), RetryRefusal> {
    let asked = retry.spec.retry_of.as_ref();
    if asked.is_some_and(|a| a.uid.is_some() && a.uid != original.metadata.uid) {
        return Err(RetryRefusal::NotFound(name.to_owned()));
    }
    let phase = original.phase();
    if !matches!(phase, RunPhase::Failed | RunPhase::Cancelled) {
        return Err(RetryRefusal::NotFailed {
            name: name.to_owned(),
            phase: phase.as_str(),
        });
    }
    if retry.spec.workflow_ref != original.spec.workflow_ref {
        return Err(RetryRefusal::OtherWorkflow {
            name: name.to_owned(),
            workflow: original.spec.workflow_ref.name.clone(),
        });
    }
    let (mine, theirs) = (
        retry.spec.requested_by.as_ref(),
        original.spec.requested_by.as_ref(),
    );
    let same = match (mine, theirs) {
        (Some(a), Some(b)) => {
            a.username == b.username && (a.uid.is_none() || b.uid.is_none() || a.uid == b.uid)
        }
        _ => false,
    };
    if !same {
        return Err(RetryRefusal::NotYours {
            name: name.to_owned(),
            requester: theirs.map_or_else(|| "nobody".into(), |p| p.username.clone()),
        });
    }
    Ok(())
}

/// Whether a step's output cannot depend on the Run's arguments: no question for people (its
/// answer was given about them) and no template of it reads `args`.
fn independent_of_arguments(step: &Step) -> bool {
    !matches!(step.kind(), StepKind::Input(_))
        && !serde_json::to_string(step).is_ok_and(|text| text.contains("args"))
}

/// End `run`, a retry that may not go on, failed and never started, saying why.
pub fn refuse(run: &Run, why: &RetryRefusal, now: Timestamp) -> Decision {
    let message = format!("retry refused: {why}");
    let mut decision = super::concurrency::end(run, tool_error_ending(message.clone()), now);
    decision.events.insert(
        0,
        super::Event {
            reason: event_reasons::RETRY_REFUSED,
            message,
            warning: true,
        },
    );
    decision
}

impl Machine<'_> {
    /// Say which steps a retry took over as it starts.
    pub(super) fn announce_reuse(&mut self) -> Progress {
        let reused: Vec<&str> = self
            .st
            .steps
            .iter()
            .filter(|r| r.reused_from.is_some() && item_of(&r.name).is_none())
            .map(|r| r.name.as_str())
            .collect();
        if let (Some(of), false) = (self.run.spec.retry_of.as_ref(), reused.is_empty()) {
            let message = format!("reused from run {}: {}", of.name, reused.join(", "));
            self.event(event_reasons::STEPS_REUSED, message);
        }
        Progress::Changed
    }
}
