//! Answers to a Run's questions (`tasks/update`, MRTR retries): checked against each
//! question's schema and approvers, taken one by one.

use std::collections::BTreeMap;

use jiff::Timestamp;
use rmcp::model::ErrorData;
use serde_json::{Value, json};

use super::access::{QuestionRefusal, acts_for_anyone, may_answer_question};
use super::errors::{err, internal, unknown_task};
use super::handler::RunwayMcp;
use super::state::Tenant;
use crate::api::{InputAction, InputResponse, Run};
use crate::engine::budget::{self, BudgetError};
use crate::engine::input::{AnswerSchemaError, answer_schema_error};
use crate::engine::sampling_answer_error;
use crate::protocol::METHOD_SAMPLING;
use crate::protocol::codes;
use crate::store::StoreError;

/// What became of the answers of one `tasks/update`.
#[derive(Debug, Default)]
pub(super) struct Answers {
    /// Keys whose answers were recorded.
    taken: Vec<String>,
    /// Open keys whose answers were refused, with the reason.
    refused: BTreeMap<String, String>,
    /// Keys that are not open (unknown, or answered already).
    ignored: Vec<String>,
}

impl Answers {
    /// `tasks/update` answers with an empty result unless an answer to an open question was
    /// refused; then an error says which and why (and which answers were taken anyway).
    pub(super) fn into_result(self) -> Result<(), ErrorData> {
        if self.refused.is_empty() {
            return Ok(());
        }
        let why = self
            .refused
            .iter()
            .map(|(k, v)| format!("{k}: {v}"))
            .collect::<Vec<_>>()
            .join("; ");
        // The error is the protocol's only way to say why; it leads with what was taken, so a
        // caller does not read it as "nothing happened" and send those answers again.
        let taken = match self.taken.as_slice() {
            [] => "no answer taken".to_owned(),
            keys => format!("answers taken: {}", keys.join(", ")),
        };
        Err(err(
            codes::INVALID_PARAMS,
            format!("{taken}; answer refused, the question stays open: {why}"),
            Some(json!({"taken": self.taken, "refused": self.refused, "ignored": self.ignored})),
        ))
    }
}

/// Why an answer to an open question is refused (the question stays open).
#[derive(Debug, thiserror::Error)]
pub(super) enum AnswerError {
    /// A sampling answer that is not a model's message: what it lacks.
    #[error("{0}")]
    NotAModelMessage(String),
    /// `action` is missing, or none of accept, decline and cancel.
    #[error("action must be accept, decline or cancel")]
    Action(#[source] Option<serde_json::Error>),
    /// `content` is given and is not an object.
    #[error("content must be an object")]
    ContentNotAnObject,
    /// The answer is over the answer budget.
    #[error(transparent)]
    Budget(#[from] BudgetError),
    /// The caller may not answer this question.
    #[error(transparent)]
    Refused(#[from] QuestionRefusal),
    /// An accept's content does not match the form the client was shown.
    #[error(transparent)]
    Schema(#[from] AnswerSchemaError),
}

/// Whether `value` may answer the open request `req`: a known action, an object as content
/// within the answer budget, from someone the request lets answer, and (for `accept`) content
/// that matches the `requestedSchema` the client was shown.
pub(super) fn check_answer(
    key: &str,
    value: &Value,
    req: &crate::api::OpenInputRequest,
    spec: Option<&crate::api::InputRequestSpec>,
    run: &Run,
    me: &crate::api::Principal,
    for_anyone: bool,
) -> Result<(InputAction, Option<Value>), AnswerError> {
    if req.method == METHOD_SAMPLING {
        // A client that could not, or would not, ask its model declines (a 2025-era client's
        // error response is read so): the step fails, saying so, instead of waiting on.
        if value.get("action").and_then(Value::as_str) == Some("decline")
            && value.get("role").is_none()
        {
            may_answer_question(spec, run, me, for_anyone)?;
            return Ok((InputAction::Decline, None));
        }
        // The answer is the model's message itself (a CreateMessageResult).
        if let Some(why) = sampling_answer_error(Some(value)) {
            return Err(AnswerError::NotAModelMessage(why));
        }
        may_answer_question(spec, run, me, for_anyone)?;
        budget::check(
            &format!("inputResponses.{key}"),
            value,
            budget::MAX_ANSWER_BYTES,
        )?;
        return Ok((InputAction::Accept, Some(value.clone())));
    }
    let action = match value.get("action") {
        Some(a) => serde_json::from_value::<InputAction>(a.clone())
            .map_err(|e| AnswerError::Action(Some(e)))?,
        None => return Err(AnswerError::Action(None)),
    };
    // A URL-mode answer has no content: whatever the page collected never passes through here.
    let url_mode = req.params.get("mode").and_then(Value::as_str) == Some("url");
    let content = value
        .get("content")
        .cloned()
        .filter(|c| !c.is_null() && !url_mode);
    if content.as_ref().is_some_and(|c| !c.is_object()) {
        return Err(AnswerError::ContentNotAnObject);
    }
    if let Some(c) = &content {
        budget::check(
            &format!("inputResponses.{key}.content"),
            c,
            budget::MAX_ANSWER_BYTES,
        )?;
    }
    may_answer_question(spec, run, me, for_anyone)?;
    if action == InputAction::Accept
        && let Some(why) = answer_schema_error(req.params.get("requestedSchema"), content.as_ref())
    {
        return Err(why.into());
    }
    Ok((action, content))
}

impl RunwayMcp {
    /// Record answers to open input keys: the first valid answer to a key wins (a question
    /// that needs several approvals takes one from each approver). Entries for keys that are
    /// unknown or already answered (by the caller) are ignored; answers to open keys that are
    /// malformed, do not match the request's `requestedSchema`, or come from someone the
    /// request does not let answer are refused, and their questions stay open.
    pub(super) async fn answer(
        &self,
        t: &Tenant,
        name: &str,
        responses: &BTreeMap<String, Value>,
    ) -> Result<Answers, ErrorData> {
        for _ in 0..crate::store::MAX_CONFLICT_RETRIES {
            let mut run = self.stored_run(t, name).await?;
            let snapshot = run.workflow_snapshot();
            let open = run.status.clone().unwrap_or_default().input_requests;
            let me = &t.identity.principal;
            let for_anyone = acts_for_anyone(&self.state, t, &run).await?;
            let mut outcome = Answers::default();
            for (key, value) in responses {
                let Some(req) = open.get(key) else {
                    outcome.ignored.push(key.clone());
                    continue;
                };
                // The first answer, or another approver's to a question that needs several.
                let Some(slot) = req.answer_key(key, &run.spec.input_responses, &me.username)
                else {
                    outcome.ignored.push(key.clone());
                    continue;
                };
                let spec = snapshot
                    .as_ref()
                    .and_then(|w| w.input_request(&req.step, &req.name));
                match check_answer(key, value, req, spec, &run, me, for_anyone) {
                    Ok((action, content)) => {
                        run.spec.input_responses.insert(
                            slot,
                            InputResponse {
                                action,
                                content,
                                answered_by: Some(me.username.clone()),
                                answered_by_groups: me.groups.clone(),
                                answered_at: Some(Timestamp::now().to_string()),
                            },
                        );
                        outcome.taken.push(key.clone());
                    }
                    Err(why) => {
                        tracing::info!(namespace = %t.namespace, run = name, key, reason = crate::api::event_reasons::INPUT_REJECTED, "answer refused: {why}");
                        outcome.refused.insert(key.clone(), why.to_string());
                    }
                }
            }
            if outcome.taken.is_empty() {
                return Ok(outcome);
            }
            match self.state.store.update(run).await {
                Ok(_) => return Ok(outcome),
                Err(StoreError::Conflict) => continue,
                Err(StoreError::NotFound) => return Err(unknown_task()),
                Err(e) => return Err(internal(e)),
            }
        }
        Err(internal(StoreError::Conflict))
    }
}
