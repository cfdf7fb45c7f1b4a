//! Input steps: opening requests, taking answers, approver rules, re-asking and timeouts.

use serde_json::{Map, Value, json};

use super::duration::{self, RenderedDurationError};
use super::endings::tool_error_ending;
use super::forms::with_properties;
use super::machine::{Machine, Progress};
use super::record::fresh_key;
use super::template::{self, TemplateError};
use super::{Next, ts};
use crate::api::{
    InputAction, InputRequestSpec, InputResponse, InputStep, Note, OnTimeout, OpenInputRequest,
    Principal, Run, RunPhase, Step, StepPhase, event_reasons,
};
use crate::protocol::METHOD_ELICITATION;

/// Why someone may not answer an input request.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AnswerRefusal {
    /// The request wants someone other than the Run's requester (`distinctFromRequester`).
    #[error("{username} requested this run and may not answer {request}")]
    Requester {
        /// Who tried to answer.
        username: String,
        /// The request's name.
        request: String,
    },
    /// The request names its approvers, and they are not among them.
    #[error("{username} is not an approver of {request}")]
    NotAnApprover {
        /// Who tried to answer.
        username: String,
        /// The request's name.
        request: String,
    },
}

/// Whether `username` (in `groups`) may answer `request` of a Run requested by `requester`.
/// `Err` says why not.
pub(crate) fn may_answer(
    request: &InputRequestSpec,
    requester: Option<&Principal>,
    username: &str,
    groups: &[String],
) -> Result<(), AnswerRefusal> {
    if request.distinct_from_requester && requester.is_some_and(|p| p.username == username) {
        return Err(AnswerRefusal::Requester {
            username: username.to_owned(),
            request: request.name.clone(),
        });
    }
    if let Some(approvers) = &request.approvers
        && !(approvers.users.is_empty() && approvers.groups.is_empty())
    {
        let allowed = approvers.users.iter().any(|u| u == username)
            || approvers.groups.iter().any(|g| groups.contains(g));
        if !allowed {
            return Err(AnswerRefusal::NotAnApprover {
                username: username.to_owned(),
                request: request.name.clone(),
            });
        }
    }
    Ok(())
}

/// Whether `request` names its approvers and `username` (in `groups`) is one of them who may
/// answer: such a person may read and answer the Run while the request is open, although the
/// owner rule would not show them someone else's Run. Requests anyone may answer give no one
/// extra access.
pub(crate) fn is_named_approver(
    request: &InputRequestSpec,
    requester: Option<&Principal>,
    username: &str,
    groups: &[String],
) -> bool {
    request
        .approvers
        .as_ref()
        .is_some_and(|a| !(a.users.is_empty() && a.groups.is_empty()))
        && may_answer(request, requester, username, groups).is_ok()
}

/// Why an answer is not one a request's `requestedSchema` accepts.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AnswerSchemaError {
    /// The schema itself does not compile.
    #[error("requestedSchema cannot be compiled: {0}")]
    Schema(#[source] jsonschema::ValidationError<'static>),
    /// The answer breaks the schema: its errors, as `{path, message}`.
    #[error("the answer does not match requestedSchema: {}", schema_detail(.0))]
    Mismatch(Vec<Value>),
    /// The answer nests deeper, or is larger, than an answer may be (whoever wrote it: an
    /// answer written with kubectl meets the same bound as one through MCP).
    #[error(transparent)]
    Budget(#[from] super::budget::BudgetError),
}

/// Schema errors (`{path, message}`) as one line: `path: message; …`.
fn schema_detail(errors: &[Value]) -> String {
    errors
        .iter()
        .map(|e| {
            let path = e["path"].as_str().unwrap_or_default();
            let message = e["message"].as_str().unwrap_or_default();
            if path.is_empty() {
                message.to_owned()
            } else {
                format!("{path}: {message}")
            }
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Why `content` is not an answer `requested_schema` accepts (`None` when it is). An accept
/// without content is checked as the empty object, so required fields are enforced.
pub(crate) fn answer_schema_error(
    requested_schema: Option<&Value>,
    content: Option<&Value>,
) -> Option<AnswerSchemaError> {
    if let Some(c) = content
        && let Err(e) = super::budget::check("the answer", c, super::budget::MAX_ANSWER_BYTES)
    {
        return Some(e.into());
    }
    let schema = requested_schema?;
    let empty = json!({});
    match super::budget::schema_errors(schema, content.unwrap_or(&empty)) {
        Ok(errors) if errors.is_empty() => None,
        Ok(errors) => Some(AnswerSchemaError::Mismatch(errors)),
        Err(e) => Some(AnswerSchemaError::Schema(e)),
    }
}

/// Why an input step's questions cannot be asked: a template of the step did not render.
#[derive(Debug, thiserror::Error)]
pub(super) enum InputError {
    /// `input.timeout` gives no duration.
    #[error("input.timeout: {0}")]
    Timeout(#[source] RenderedDurationError),
    /// A request's `message` did not render.
    #[error("input {request}: message: {source}")]
    Message {
        /// The request's name.
        request: String,
        /// The template's error.
        #[source]
        source: TemplateError,
    },
    /// A request's `url` did not render.
    #[error("input {request}: url: {source}")]
    Url {
        /// The request's name.
        request: String,
        /// The template's error.
        #[source]
        source: TemplateError,
    },
}

/// What one answer did to an input step.
pub(super) enum Taken {
    /// No answer, or already taken.
    Nothing,
    /// Taken, or refused and asked again.
    Changed,
    /// The step failed (a decline it does not allow).
    Failed,
}

/// Why an answer from `who` to `req` cannot be taken: not someone who may answer it, or an
/// accept whose content does not match the form.
pub(super) fn refusal(
    req: &InputRequestSpec,
    run: &Run,
    resp: &InputResponse,
    who: &str,
) -> Option<String> {
    may_answer(
        req,
        run.spec.requested_by.as_ref(),
        who,
        &resp.answered_by_groups,
    )
    .err()
    .map(|e| e.to_string())
    .or_else(|| {
        (resp.action == InputAction::Accept)
            .then(|| answer_schema_error(req.requested_schema.as_ref(), resp.content.as_ref()))
            .flatten()
            .map(|e| e.to_string())
    })
}

impl Machine<'_> {
    pub(super) fn open_input(
        &mut self,
        i: usize,
        step: &Step,
        input: &InputStep,
        ctx: &Value,
    ) -> Result<(), InputError> {
        for req in &input.requests {
            // An answer written before the question was asked (with kubectl, say) must not
            // answer it: such a key is taken, and the question gets a fresh one.
            let key = fresh_key(self.run, &self.st, &format!("{}.{}", step.name, req.name));
            self.ask(i, step, req, key, ctx)?;
        }
        if let Some(t) = &input.timeout {
            let d = duration::render(t, ctx).map_err(InputError::Timeout)?;
            self.st.steps[i].wake_at = Some(ts(self.now + d));
        }
        self.st.phase = RunPhase::Waiting;
        self.refresh_waiting();
        let keys = self.st.steps[i]
            .input_keys
            .values()
            .cloned()
            .collect::<Vec<_>>();
        self.event(
            event_reasons::INPUT_REQUESTED,
            format!("step {} waits for input: {}", step.name, keys.join(", ")),
        );
        Ok(())
    }

    fn ask(
        &mut self,
        i: usize,
        step: &Step,
        req: &InputRequestSpec,
        key: String,
        ctx: &Value,
    ) -> Result<(), InputError> {
        let message =
            template::render(&req.message, ctx).map_err(|source| InputError::Message {
                request: req.name.clone(),
                source,
            })?;
        let params = match &req.url {
            Some(url) => {
                let url = template::render_url(url, ctx).map_err(|source| InputError::Url {
                    request: req.name.clone(),
                    source,
                })?;
                // Unique on the server, as the protocol asks: every Run of the Workflow asks
                // under the same key.
                let meta = &self.run.metadata;
                let id = format!(
                    "{}/{}/{key}",
                    meta.namespace.as_deref().unwrap_or_default(),
                    meta.name.as_deref().unwrap_or_default()
                );
                json!({"mode": "url", "message": message, "url": url, "elicitationId": id})
            }
            None => {
                let schema = req.requested_schema.clone().map_or_else(
                    || json!({"type": "object", "properties": {}}),
                    with_properties,
                );
                json!({"mode": "form", "message": message, "requestedSchema": schema})
            }
        };
        self.st.input_requests.insert(
            key.clone(),
            OpenInputRequest {
                step: step.name.clone(),
                name: req.name.clone(),
                method: METHOD_ELICITATION.into(),
                params,
                asked_at: Some(ts(self.now)),
                approvals: req.approvals.filter(|n| *n > 1),
                ..Default::default()
            },
        );
        self.st.steps[i].input_keys.insert(req.name.clone(), key);
        Ok(())
    }

    /// Close every question step `i` has open: its own, and those it asks for someone else
    /// (an upstream tool, the caller's model).
    pub(super) fn close_requests(&mut self, i: usize) {
        let rec = &self.st.steps[i];
        let keys: Vec<String> = rec
            .input_keys
            .values()
            .chain(rec.upstream_input_keys.keys())
            .cloned()
            .collect();
        for k in keys {
            self.st.input_requests.remove(&k);
        }
        self.refresh_waiting();
    }

    /// The Run's phase from what it waits for: `Waiting` while any question is open (another
    /// branch may run meanwhile), `Cancelling` once cancelled, else `Running`.
    pub(super) fn settle_phase(&mut self) {
        self.st.phase = if self
            .st
            .ending
            .as_ref()
            .is_some_and(|e| e.phase == RunPhase::Cancelled)
        {
            RunPhase::Cancelling
        } else if !self.st.input_requests.is_empty() {
            RunPhase::Waiting
        } else {
            RunPhase::Running
        };
    }

    pub(super) fn refresh_waiting(&mut self) {
        let keys: Vec<_> = self.st.input_requests.keys().cloned().collect();
        self.st.waiting_for = (!keys.is_empty()).then(|| keys.join(","));
    }

    pub(super) fn continue_input(&mut self, i: usize, step: &Step, input: &InputStep) -> Progress {
        let rec = self.st.steps[i].clone();
        let mut outputs = match &rec.output {
            Some(Value::Object(m)) => m.clone(),
            _ => Map::new(),
        };
        let mut changed = false;
        let ctx = super::context(self.run, &self.st);
        for req in &input.requests {
            match self.take_answer(i, step, input, req, &ctx, &mut outputs) {
                Taken::Nothing => {}
                Taken::Changed => changed = true,
                Taken::Failed => return Progress::Changed,
            }
        }
        if changed {
            self.st.steps[i].output = Some(Value::Object(outputs.clone()));
        }
        if input.requests.iter().all(|r| outputs.contains_key(&r.name)) {
            self.close_input(i, outputs);
            return Progress::Changed;
        }
        let wake = super::parse_ts(self.st.steps[i].wake_at.as_deref());
        if let Some(w) = wake
            && self.now >= w
        {
            match input.on_timeout {
                OnTimeout::Fail => self.fail_input(i, "timed out waiting for input".into()),
                OnTimeout::Continue => {
                    for r in &input.requests {
                        outputs.entry(r.name.clone()).or_insert(Value::Null);
                    }
                    self.close_input(i, outputs);
                }
            }
            return Progress::Changed;
        }
        if changed {
            self.refresh_waiting();
            return Progress::Changed;
        }
        let rec = &self.st.steps[i];
        let until = match wake {
            Some(w) => Some(self.bounded(w, rec)),
            None if rec.finally => None,
            None => super::parse_ts(self.st.deadline.as_deref()),
        };
        let until = match (until, self.reminder_wake(i, wake)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        Progress::Stop(Next::WaitUntil(until))
    }

    /// Take the answer to `req`, if one came: refuse it (noted, asked again), or record what it
    /// says in `outputs`.
    fn take_answer(
        &mut self,
        i: usize,
        step: &Step,
        input: &InputStep,
        req: &InputRequestSpec,
        ctx: &Value,
        outputs: &mut Map<String, Value>,
    ) -> Taken {
        let rec = &self.st.steps[i];
        if outputs.contains_key(&req.name) {
            return Taken::Nothing;
        }
        let Some(key) = rec.input_keys.get(&req.name).cloned() else {
            return Taken::Nothing;
        };
        if req.approvals.is_some_and(|n| n > 1) {
            return self.take_approvals(i, req, &key, input.allow_decline, outputs);
        }
        let Some(resp) = self.run.spec.input_responses.get(&key).cloned() else {
            return Taken::Nothing;
        };
        let who = resp.answered_by.clone().unwrap_or_else(|| "unknown".into());
        let refused = refusal(req, self.run, &resp, &who);
        if let Some(why) = refused {
            self.st.notes.push(Note {
                key: key.clone(),
                answered_by: Some(who.clone()),
                message: why.clone(),
            });
            self.warn(
                event_reasons::INPUT_REJECTED,
                format!("answer to {key} ignored: {why}"),
            );
            self.reask(i, step, req, &key, ctx);
            return Taken::Changed;
        }
        self.st.input_requests.remove(&key);
        let at = resp.answered_at.clone().unwrap_or_else(|| ts(self.now));
        match resp.action {
            InputAction::Accept => {
                // A URL-mode accept carries no content: the page did the work.
                let content = match &req.url {
                    Some(_) => json!({}),
                    None => resp.content.clone().unwrap_or(json!({})),
                };
                outputs.insert(req.name.clone(), content);
                self.event(
                    event_reasons::INPUT_ANSWERED,
                    format!("{who} accepted {key} at {at}"),
                );
            }
            InputAction::Decline if input.allow_decline => {
                outputs.insert(req.name.clone(), Value::Null);
                self.event(
                    event_reasons::INPUT_ANSWERED,
                    format!("{who} declined {key} at {at}"),
                );
            }
            InputAction::Decline => {
                self.event(
                    event_reasons::INPUT_ANSWERED,
                    format!("{who} declined {key} at {at}"),
                );
                self.fail_input(i, format!("{} declined by {who}", req.name));
                return Taken::Failed;
            }
            InputAction::Cancel => {
                self.event(
                    event_reasons::INPUT_ANSWERED,
                    format!("{who} dismissed {key} at {at}; asking again"),
                );
                self.reask(i, step, req, &key, ctx);
            }
        }
        Taken::Changed
    }

    fn reask(&mut self, i: usize, step: &Step, req: &InputRequestSpec, old: &str, ctx: &Value) {
        self.st.input_requests.remove(old);
        let key = fresh_key(self.run, &self.st, &format!("{}.{}", step.name, req.name));
        if let Err(e) = self.ask(i, step, req, key, ctx) {
            self.fail_fatal(i, e.to_string());
        }
        self.refresh_waiting();
    }

    pub(super) fn close_input(&mut self, i: usize, outputs: Map<String, Value>) {
        self.close_requests(i);
        self.settle_phase();
        self.succeed(i, Value::Object(outputs));
    }

    pub(super) fn fail_input(&mut self, i: usize, message: String) {
        self.close_requests(i);
        let rec = &mut self.st.steps[i];
        rec.phase = StepPhase::Failed;
        rec.finished_at = Some(ts(self.now));
        rec.message = Some(message.clone());
        rec.wake_at = None;
        let name = rec.name.clone();
        let finally = rec.finally;
        self.warn(
            event_reasons::STEP_FAILED,
            format!("step {name} failed: {message}"),
        );
        self.settle_phase();
        if !finally && self.st.ending.is_none() {
            self.st.ending = Some(Box::new(tool_error_ending(format!(
                "step {name} failed: {message}"
            ))));
        }
    }
}
