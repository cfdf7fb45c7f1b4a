//! Pausing: acting on a new `spec.pause`, holding a Run whose step ran out of retries, and
//! what a paused Run still does. While paused no step, item, retry or `finally` step starts;
//! what runs goes on to its end, answers are taken, and every clock (the Run's deadline, step
//! timeouts, input timeouts, delays) keeps running.

use super::effects::Next;
use super::endings::tool_error_ending;
use super::held::paused_message;
use super::machine::{Machine, Progress};
use super::{duration, parse_ts, ts};
use crate::api::{PausedState, WorkflowSpec, event_reasons};

impl Machine<'_> {
    /// Act on a `spec.pause` not acted on yet; whether the Run is paused now. A cancel ends
    /// any pause: what it stops and its `finally` steps must run.
    pub(super) fn sync_pause(&mut self) -> bool {
        if self.run.spec.cancel.is_some() {
            self.st.paused = None;
            return false;
        }
        let request = self.run.spec.pause.as_ref();
        if request == self.st.pause_request.as_deref() {
            return self.st.paused.is_some();
        }
        self.st.pause_request = request.cloned().map(Box::new);
        let who = request
            .and_then(|r| r.requested_by.clone())
            .unwrap_or_else(|| "unknown".into());
        match request {
            Some(r) if r.paused => {
                let why = r.reason.as_deref().unwrap_or("no reason given");
                self.event(event_reasons::PAUSED, format!("paused by {who}: {why}"));
                self.st.paused = Some(Box::new(PausedState {
                    since: ts(self.now),
                    by: Some(who),
                    reason: r.reason.clone(),
                    step: None,
                }));
            }
            _ => {
                if self.st.paused.take().is_some() {
                    self.event(event_reasons::RESUMED, format!("resumed by {who}"));
                }
            }
        }
        self.st.paused.is_some()
    }

    /// Whether the Run is paused (as last synced).
    pub(super) fn is_paused(&self) -> bool {
        self.st.paused.is_some()
    }

    /// What a paused Run waits for: a change to it, or the deadline of its main steps.
    pub(super) fn wait_paused(&self, finally: bool) -> Progress {
        let until = if finally {
            None
        } else {
            parse_ts(self.st.deadline.as_deref())
        };
        Progress::Stop(Next::WaitUntil(until))
    }

    /// A Run that has not started and may not start yet: it is paused, or its Workflow is.
    /// It waits, taking no slot, until its deadline (counted from its creation, as always).
    pub(super) fn wait_unstarted(&mut self, wf: &WorkflowSpec, why: String) -> Progress {
        let created = self
            .run
            .metadata
            .creation_timestamp
            .as_ref()
            .map_or(self.now, |t| t.0);
        let timeout = wf.execution.timeout.as_deref();
        let deadline = duration::run_timeout(timeout).ok().map(|d| created + d);
        if deadline.is_some_and(|d| self.now >= d) {
            let text = timeout.unwrap_or(duration::DEFAULT_RUN_TIMEOUT_TEXT);
            self.finish_with(tool_error_ending(format!(
                "run deadline exceeded before it started (execution.timeout {text})"
            )));
            return Progress::Changed;
        }
        if self.st.status_message.as_deref() != Some(&why) {
            if wf.suspend && !self.is_paused() {
                self.event(event_reasons::WORKFLOW_PAUSED, why.clone());
            }
            self.st.status_message = Some(why);
        }
        Progress::Stop(Next::WaitUntil(deadline))
    }

    /// A cancel of a Run held back before it started: it ends cancelled, never started (no
    /// step, no `finally`), as a cancelled queued Run does.
    pub(super) fn cancel_unstarted(&mut self) -> Progress {
        let cancel = self
            .run
            .spec
            .cancel
            .clone()
            .unwrap_or(crate::api::CancelRequest {
                reason: None,
                requested_by: None,
                requested_at: None,
            });
        let who = cancel.requested_by.as_deref().unwrap_or("unknown");
        let why = cancel.reason.as_deref().unwrap_or("no reason given");
        let message = format!("cancelled by {who} before it started: {why}");
        self.event(event_reasons::CANCEL_REQUESTED, message.clone());
        self.st.paused = None;
        self.finish_with(crate::api::Ending {
            phase: crate::api::RunPhase::Cancelled,
            result: None,
            error: None,
            message: Some(message),
        });
        Progress::Changed
    }

    /// Say that the Run is paused, over whatever its running steps say.
    pub(super) fn describe_pause(&mut self) {
        if let Some(p) = &self.st.paused {
            self.st.status_message = Some(paused_message(p));
        }
    }
}
