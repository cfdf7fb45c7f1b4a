//! `sample` steps: one `sampling/createMessage` question to the calling agent's model, asked and
//! answered like an input request; the model's message becomes the step's output.

use serde_json::{Map, Value, json};

use super::duration::{self, RenderedDurationError};
use super::machine::{Machine, Progress};
use super::record::fresh_key;
use super::template::{self, TemplateError};
use super::{Next, ts};
use crate::api::{InputAction, Note, OpenInputRequest, SampleStep, Step, event_reasons};
use crate::protocol::METHOD_SAMPLING;

/// The name of a sample step's one question (its key is `<step>.sample`).
const NAME: &str = "sample";
/// `maxTokens` when the step sets none.
const DEFAULT_MAX_TOKENS: u32 = 1000;

/// Why `content` is not a model's message (`CreateMessageResult`: `role` assistant, `content`
/// with a `type`, `model`), or `None` when it is.
pub fn sampling_answer_error(content: Option<&Value>) -> Option<String> {
    let Some(Value::Object(m)) = content else {
        return Some("a sampling answer is the model's message (CreateMessageResult)".into());
    };
    if m.get("role").and_then(Value::as_str) != Some("assistant") {
        return Some("a sampling answer needs role \"assistant\"".into());
    }
    if !m.get("model").is_some_and(Value::is_string) {
        return Some("a sampling answer needs the model's name (model)".into());
    }
    let typed = |c: &Value| c.get("type").is_some_and(Value::is_string);
    let content_ok = match m.get("content") {
        Some(Value::Array(blocks)) => !blocks.is_empty() && blocks.iter().all(typed),
        Some(c @ Value::Object(_)) => typed(c),
        _ => false,
    };
    (!content_ok).then(|| "a sampling answer needs content with a type".into())
}

/// Why a `sample` step's question cannot be asked: a template of the step did not render.
#[derive(Debug, thiserror::Error)]
pub(super) enum SampleError {
    /// `sample.prompt` did not render.
    #[error("sample.prompt: {0}")]
    Prompt(#[source] TemplateError),
    /// `sample.systemPrompt` did not render.
    #[error("sample.systemPrompt: {0}")]
    SystemPrompt(#[source] TemplateError),
    /// `sample.timeout` gives no duration.
    #[error("sample.timeout: {0}")]
    Timeout(#[source] RenderedDurationError),
}

/// The step's output from the model's message: its text (text blocks joined), `model`,
/// `stopReason` and the `content` as sent.
fn output(message: &Value) -> Map<String, Value> {
    let blocks = match &message["content"] {
        Value::Array(b) => b.clone(),
        one => vec![one.clone()],
    };
    let text: Vec<&str> = blocks
        .iter()
        .filter(|b| b["type"] == "text")
        .filter_map(|b| b["text"].as_str())
        .collect();
    let mut out = Map::new();
    out.insert("text".into(), json!(text.join("\n")));
    out.insert("model".into(), message["model"].clone());
    out.insert(
        "stopReason".into(),
        message.get("stopReason").cloned().unwrap_or(Value::Null),
    );
    out.insert("content".into(), message["content"].clone());
    out
}

impl Machine<'_> {
    /// Ask the caller's model: render the prompts and open the question.
    pub(super) fn open_sample(
        &mut self,
        i: usize,
        step: &Step,
        sample: &SampleStep,
        ctx: &Value,
    ) -> Result<(), SampleError> {
        let prompt = template::render(&sample.prompt, ctx).map_err(SampleError::Prompt)?;
        let mut params = json!({
            "messages": [{"role": "user", "content": {"type": "text", "text": prompt}}],
            "maxTokens": sample.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
        });
        if let Some(system) = &sample.system_prompt {
            params["systemPrompt"] =
                json!(template::render(system, ctx).map_err(SampleError::SystemPrompt)?);
        }
        let key = fresh_key(self.run, &self.st, &format!("{}.{NAME}", step.name));
        self.st.input_requests.insert(
            key.clone(),
            OpenInputRequest {
                step: step.name.clone(),
                name: NAME.into(),
                method: METHOD_SAMPLING.into(),
                params,
                asked_at: Some(ts(self.now)),
                ..Default::default()
            },
        );
        let rec = &mut self.st.steps[i];
        rec.upstream_input_keys.clear();
        rec.upstream_input_keys.insert(key.clone(), NAME.into());
        if rec.wake_at.is_none()
            && let Some(t) = &sample.timeout
        {
            let d = duration::render(t, ctx).map_err(SampleError::Timeout)?;
            rec.wake_at = Some(ts(self.now + d));
        }
        self.st.phase = crate::api::RunPhase::Waiting;
        self.refresh_waiting();
        self.event(
            event_reasons::INPUT_REQUESTED,
            format!("step {} asks the caller's model: {key}", step.name),
        );
        Ok(())
    }

    /// Take the model's answer if it came: the step succeeds with it, or, for an answer that is
    /// not a model's message, the question is noted and asked again.
    pub(super) fn continue_sample(
        &mut self,
        i: usize,
        step: &Step,
        sample: &SampleStep,
    ) -> Progress {
        let rec = self.st.steps[i].clone();
        let key = rec.upstream_input_keys.keys().next().cloned();
        let answer = key
            .as_ref()
            .and_then(|k| self.run.spec.input_responses.get(k).map(|r| (k, r.clone())));
        if let Some((key, resp)) = answer {
            let who = resp.answered_by.clone().unwrap_or_else(|| "unknown".into());
            let refused = match resp.action {
                InputAction::Accept => sampling_answer_error(resp.content.as_ref()),
                InputAction::Decline => {
                    self.fail_input(i, format!("the model's answer was declined by {who}"));
                    return Progress::Changed;
                }
                InputAction::Cancel => Some("dismissed; asking again".into()),
            };
            if let Some(why) = refused {
                self.st.notes.push(Note {
                    key: key.clone(),
                    answered_by: Some(who),
                    message: why.clone(),
                });
                self.warn(
                    event_reasons::INPUT_REJECTED,
                    format!("answer to {key} ignored: {why}"),
                );
                self.st.input_requests.remove(key);
                let ctx = super::context(self.run, &self.st);
                if let Err(e) = self.open_sample(i, step, sample, &ctx) {
                    self.fail_fatal(i, e.to_string());
                }
                return Progress::Changed;
            }
            let message = resp.content.unwrap_or_default();
            self.event(
                event_reasons::INPUT_ANSWERED,
                format!(
                    "{who} answered {key} with {}",
                    message["model"].as_str().unwrap_or("a model")
                ),
            );
            self.close_input(i, output(&message));
            return Progress::Changed;
        }
        let wake = super::parse_ts(rec.wake_at.as_deref());
        if let Some(w) = wake
            && self.now >= w
        {
            self.fail_input(i, "timed out waiting for the model".into());
            return Progress::Changed;
        }
        let until = match wake {
            Some(w) => Some(self.bounded(w, &rec)),
            None if rec.finally => None,
            None => super::parse_ts(self.st.deadline.as_deref()),
        };
        Progress::Stop(Next::WaitUntil(until))
    }
}
