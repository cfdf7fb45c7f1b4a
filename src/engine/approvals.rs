//! Questions that need several approvers (`approvals: N`): the first answer is recorded under
//! the question's key, each further approver's under `<key>/<user>`. The question is taken once
//! N different eligible approvers accepted (its answer is the first accepted content); one
//! eligible decline declines it; an ineligible answer is noted and counts for nothing.

use serde_json::{Map, Value, json};

use super::input::{Taken, refusal};
use super::machine::Machine;
use crate::api::{InputAction, InputRequestSpec, InputResponse, Note, event_reasons};

impl Machine<'_> {
    /// Take the answers to `req` (open under `key`) that step `i` has so far.
    pub(super) fn take_approvals(
        &mut self,
        i: usize,
        req: &InputRequestSpec,
        key: &str,
        allow_decline: bool,
        outputs: &mut Map<String, Value>,
    ) -> Taken {
        let needed = req.approvals.unwrap_or(1).max(1) as usize;
        let prefix = format!("{key}/");
        let mut answers: Vec<(String, InputResponse)> = self
            .run
            .spec
            .input_responses
            .iter()
            .filter(|(k, _)| *k == key || k.starts_with(&prefix))
            .map(|(k, r)| (k.clone(), r.clone()))
            .collect();
        answers.sort_by(|(ka, a), (kb, b)| (&a.answered_at, ka).cmp(&(&b.answered_at, kb)));
        let mut approved: Vec<String> = Vec::new();
        let mut content = None;
        let mut noted = false;
        for (k, resp) in &answers {
            let who = resp.answered_by.clone().unwrap_or_else(|| "unknown".into());
            if let Some(why) = refusal(req, self.run, resp, &who) {
                noted |= self.note_once(k, &who, why);
                continue;
            }
            match resp.action {
                InputAction::Accept if !approved.contains(&who) => {
                    approved.push(who);
                    content.get_or_insert_with(|| resp.content.clone().unwrap_or(json!({})));
                }
                InputAction::Accept | InputAction::Cancel => {}
                InputAction::Decline => {
                    return self.declined(i, req, (key, &who), allow_decline, outputs);
                }
            }
        }
        if approved.len() >= needed {
            self.st.input_requests.remove(key);
            outputs.insert(req.name.clone(), content.unwrap_or(json!({})));
            self.event(
                event_reasons::INPUT_ANSWERED,
                format!(
                    "{key} approved by {} ({needed} of {needed})",
                    approved.join(", ")
                ),
            );
            return Taken::Changed;
        }
        let open = self.st.input_requests.get_mut(key);
        match open {
            Some(o) if o.approved_by != approved => {
                let so_far = approved.len();
                o.approved_by = approved;
                self.event(
                    event_reasons::INPUT_ANSWERED,
                    format!("{key}: {so_far} of {needed} approvals"),
                );
                Taken::Changed
            }
            _ if noted => Taken::Changed,
            _ => Taken::Nothing,
        }
    }

    /// Note, once, an answer that does not count.
    fn note_once(&mut self, key: &str, who: &str, why: String) -> bool {
        let seen = self
            .st
            .notes
            .iter()
            .any(|n| n.key == key && n.answered_by.as_deref() == Some(who));
        if seen {
            return false;
        }
        self.warn(
            event_reasons::INPUT_REJECTED,
            format!("answer to {key} ignored: {why}"),
        );
        self.st.notes.push(Note {
            key: key.to_owned(),
            answered_by: Some(who.to_owned()),
            message: why,
        });
        true
    }

    /// An eligible approver declined: the question is answered "no" where the step allows a
    /// decline, and the step fails where it does not.
    fn declined(
        &mut self,
        i: usize,
        req: &InputRequestSpec,
        (key, who): (&str, &str),
        allowed: bool,
        outputs: &mut Map<String, Value>,
    ) -> Taken {
        self.event(
            event_reasons::INPUT_ANSWERED,
            format!("{who} declined {key}"),
        );
        self.st.input_requests.remove(key);
        if allowed {
            outputs.insert(req.name.clone(), Value::Null);
            return Taken::Changed;
        }
        self.fail_input(i, format!("{} declined by {who}", req.name));
        Taken::Failed
    }
}
