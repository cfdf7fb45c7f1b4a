//! Cancellation and deadlines: closing open questions, interrupting the running steps,
//! cleanups, and the Run-wide deadline.

use super::endings::tool_error_ending;
use super::machine::{Machine, Progress};
use super::ts;
use super::undo::cleanup_for;
use crate::api::{Ending, RunPhase, StepPhase, WorkflowSpec, event_reasons};

impl Machine<'_> {
    pub(super) fn begin_cancel(
        &mut self,
        wf: &WorkflowSpec,
        cancel: crate::api::CancelRequest,
    ) -> Progress {
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
        for i in self.running(false) {
            self.interrupt(wf, i);
            let rec = &mut self.st.steps[i];
            rec.phase = StepPhase::Cancelled;
            rec.finished_at = Some(ts(self.now));
            rec.wake_at = None;
        }
        self.st.input_requests.clear();
        self.st.waiting_for = None;
        self.st.ending = Some(Box::new(Ending {
            phase: RunPhase::Cancelled,
            result: None,
            error: None,
            message: Some(format!("cancelled by {who}: {why}")),
        }));
        self.st.phase = RunPhase::Cancelling;
        if wf.finally.is_empty() && self.st.cleanups.is_empty() {
            self.finalize();
        }
        Progress::Changed
    }

    /// A cancel that came after the main steps ended, while `finally` steps or cleanups still
    /// ran (the task still showed as working): the Run ends cancelled all the same, since the
    /// caller was told its cancel was taken; what runs on is left to finish.
    pub(super) fn cancel_decided(&mut self, cancel: crate::api::CancelRequest) -> Progress {
        let who = cancel.requested_by.unwrap_or_else(|| "unknown".into());
        let why = cancel.reason.unwrap_or_else(|| "no reason given".into());
        self.event(
            event_reasons::CANCEL_REQUESTED,
            format!("cancel requested by {who} after the steps ended: {why}"),
        );
        self.st.ending = Some(Box::new(Ending {
            phase: RunPhase::Cancelled,
            result: None,
            error: None,
            message: Some(format!("cancelled by {who} after its steps ended: {why}")),
        }));
        // The cancel closes every question, those of `finally` steps too: a step waiting for
        // an answer that can no longer be given ends, and `finally` goes on without it.
        for rec in self
            .st
            .steps
            .iter_mut()
            .filter(|r| r.finally && r.phase == StepPhase::Waiting)
        {
            rec.phase = StepPhase::Cancelled;
            rec.finished_at = Some(ts(self.now));
            rec.wake_at = None;
            rec.message = Some(format!("its question was closed by the cancel of {who}"));
        }
        self.st.input_requests.clear();
        self.st.waiting_for = None;
        self.st.phase = RunPhase::Cancelling;
        Progress::Changed
    }

    /// Queue the cleanup of an interrupted step: its upstream task or its Job.
    pub(super) fn interrupt(&mut self, wf: &WorkflowSpec, i: usize) {
        let rec = &self.st.steps[i];
        let cleanup = cleanup_for(wf, rec);
        let keys: Vec<String> = rec.upstream_input_keys.keys().cloned().collect();
        for k in keys {
            self.st.input_requests.remove(&k);
        }
        if let Some(c) = cleanup {
            self.st.cleanups.push(c);
        }
    }

    pub(super) fn expire(&mut self, wf: &WorkflowSpec) -> Progress {
        for i in self.running(false) {
            self.interrupt(wf, i);
            let rec = &mut self.st.steps[i];
            rec.phase = StepPhase::Failed;
            rec.finished_at = Some(ts(self.now));
            rec.message = Some("run deadline exceeded".into());
            rec.wake_at = None;
        }
        self.st.input_requests.clear();
        self.st.waiting_for = None;
        let timeout = wf
            .execution
            .timeout
            .clone()
            .unwrap_or_else(|| super::duration::DEFAULT_RUN_TIMEOUT_TEXT.into());
        self.st.ending = Some(Box::new(tool_error_ending(format!(
            "run deadline exceeded (execution.timeout {timeout})"
        ))));
        self.st.phase = RunPhase::Running;
        Progress::Changed
    }
}
