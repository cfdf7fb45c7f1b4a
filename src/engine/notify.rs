//! Telling approvers, as the step machine does it: a question for people that opens on a
//! Workflow with `notify` is told once through its webhook, and reminded once before its input
//! timeout when `remindBefore` asks for it. What is due is read from the Run's status alone, so
//! a restart tells what was not told yet and nothing twice.

use super::effects::{Effect, Event, Next};
use super::machine::{Machine, Progress};
use super::told::{self, NOTIFY_TIMEOUT};
use super::{idempotency_key, render::render_header};
use crate::api::{StepKind, WorkflowSpec, event_reasons};
use crate::protocol::METHOD_ELICITATION;

impl Machine<'_> {
    /// What the steps do next, with the message owed to approvers (if any) performed beside
    /// it, never before it: a slow webhook holds nothing up.
    pub(super) fn advance_telling(&mut self, wf: &WorkflowSpec) -> Progress {
        let told = match self.due_notice(wf) {
            None => return self.advance_steps(wf),
            Some(Progress::Stop(Next::Execute(told))) => *told,
            Some(noted) => return noted,
        };
        beside(told, self.advance_steps(wf))
    }

    /// The next message owed to the approvers of an open question, if any: its effect (as
    /// `Next::Execute`, which the machine performs beside the steps' own), or the status
    /// saying it cannot be sent (`Changed`).
    pub(super) fn due_notice(&mut self, wf: &WorkflowSpec) -> Option<Progress> {
        let notify = wf.notify.as_ref()?;
        let ctx = super::context(self.run, &self.st);
        let headers: Result<Vec<_>, _> = notify
            .headers
            .iter()
            .map(|h| render_header(h, &ctx))
            .collect();
        for (key, req) in &self.st.input_requests {
            let for_people = req.method == METHOD_ELICITATION
                && wf
                    .step(&req.step)
                    .is_some_and(|s| matches!(s.kind(), StepKind::Input(_)));
            if !for_people {
                continue;
            }
            let due = told::input_deadline(&self.st, req);
            let reminder = match (&req.notified, told::reminder_at(notify, req, due)) {
                (None, _) => false,
                (Some(_), Some(at)) if self.now >= at => true,
                _ => continue,
            };
            let headers = match &headers {
                Ok(h) => h.clone(),
                Err(e) => {
                    // A header that does not render is the Workflow's fault: say so, once.
                    let why = e.to_string();
                    let (key, req) = (key.clone(), req.clone());
                    self.events.push(Event {
                        reason: event_reasons::NOTIFY_FAILED,
                        message: format!("approvers of {key} not told: notify.{why}"),
                        warning: true,
                    });
                    let mut failed = req;
                    failed.notified = Some(format!("failed: notify.{why}"));
                    failed.reminded = failed.reminded.or(Some("failed: not told".into()));
                    self.st.input_requests.insert(key, failed);
                    return Some(Progress::Changed);
                }
            };
            let kind = if reminder { "reminder" } else { "asked" };
            return Some(Progress::Stop(Next::Execute(Box::new(Effect {
                step: format!("notify {key}"),
                // The first message and the reminder are two effects, each performed once.
                attempt: u32::from(reminder),
                deadline: Some(self.now + NOTIFY_TIMEOUT),
                idempotency_key: format!("{}/{key}/{kind}", idempotency_key(self.run, "notify")),
                action: told::message(self.run, wf, notify, (key, req), reminder, due, headers),
            }))));
        }
        None
    }

    /// When step `i`, waiting for answers until `wake`, owes its approvers a reminder.
    pub(super) fn reminder_wake(
        &self,
        i: usize,
        wake: Option<jiff::Timestamp>,
    ) -> Option<jiff::Timestamp> {
        let name = &self.st.steps[i].name;
        let owed = self
            .st
            .input_requests
            .values()
            .any(|r| &r.step == name && r.notified.is_some() && r.reminded.is_none());
        if !owed {
            return None;
        }
        let wf = self.snapshot()?;
        let notify = wf.notify.as_ref()?;
        self.st
            .input_requests
            .values()
            .filter(|r| &r.step == name)
            .filter_map(|r| told::reminder_at(notify, r, wake))
            .min()
    }
}

/// `told` (a message to approvers) performed beside what `rest` asks for. A change is decided
/// again first (the message is still due then); a finished Run owes no message.
fn beside(told: Effect, rest: Progress) -> Progress {
    let next = match rest {
        Progress::Changed => return Progress::Changed,
        Progress::Stop(Next::Execute(e)) => Next::Branches {
            effects: vec![told, *e],
            wake: None,
        },
        Progress::Stop(Next::Branches { mut effects, wake }) => {
            effects.insert(0, told);
            Next::Branches { effects, wake }
        }
        Progress::Stop(Next::WaitUntil(wake)) => Next::Branches {
            effects: vec![told],
            wake,
        },
        Progress::Stop(finished @ Next::Finished { .. }) => finished,
    };
    Progress::Stop(next)
}
