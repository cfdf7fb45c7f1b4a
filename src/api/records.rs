//! What a Run records of each step: its phase, its attempts, its output, what it waits for.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::schema::{any_object, any_value};

/// Phase of a step.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StepPhase {
    /// An attempt is in progress (or a timer runs).
    #[default]
    Running,
    /// Waiting for input.
    Waiting,
    /// Waiting for the next attempt.
    Retrying,
    /// Done.
    Succeeded,
    /// Failed for good.
    Failed,
    /// Skipped by `when`.
    Skipped,
    /// Stopped by cancellation.
    Cancelled,
}

impl StepPhase {
    /// Whether the step is done.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            Self::Succeeded | Self::Failed | Self::Skipped | Self::Cancelled
        )
    }
}

/// What happened to one step.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct StepRecord {
    /// Step name.
    pub name: String,
    /// Whether the step is a `finally` step.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub finally: bool,
    /// Phase.
    pub phase: StepPhase,
    /// Attempt number, from 1.
    #[serde(default)]
    #[schemars(extend("format" = "int32"))]
    pub attempt: u32,
    /// When the step started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    /// When the current attempt started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt_started_at: Option<String>,
    /// Milliseconds the current attempt has waited for people to answer what its upstream
    /// asked: not counted against the step's `timeout`, which is active time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt_waited_ms: Option<u64>,
    /// When the step finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    /// Timer wake time (`delay`), next attempt (`Retrying`) or input deadline (`Waiting`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wake_at: Option<String>,
    /// Output, when the step succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_value")]
    pub output: Option<Value>,
    /// The output was larger than the limit and was cut.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub output_truncated: bool,
    /// Why the last attempt failed, or other detail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Failed attempts before the current one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attempts: Vec<AttemptRecord>,
    /// Upstream task of a `tool` step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream_task_id: Option<String>,
    /// Job of a `job` step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_name: Option<String>,
    /// Input keys an `input` step opened, by request name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub input_keys: BTreeMap<String, String>,
    /// Upstream input requests a `tool` step surfaced: this Run's key → the upstream key.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub upstream_input_keys: BTreeMap<String, String>,
    /// The upstream `requestState` of an MRTR `input_required` answer, echoed on the retry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream_request_state: Option<String>,
    /// Answers to forward upstream on the next attempt (upstream key → response).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_object")]
    pub pending_answers: Option<Value>,
    /// The items of a `forEach` step, as rendered when it started; each runs as a record of
    /// its own named `<step>[<index>]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::schema::any_list")]
    pub items: Option<Vec<Value>>,
    /// The child Run of a `workflow` step's current attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub child_run: Option<String>,
    /// The Run whose record this is, taken over by a retry from the failed step (the step did
    /// not run here).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reused_from: Option<String>,
}

/// A failed attempt.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AttemptRecord {
    /// Attempt number.
    #[schemars(extend("format" = "int32"))]
    pub attempt: u32,
    /// When it started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    /// When it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    /// Why.
    pub message: String,
}

/// An open input request.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct OpenInputRequest {
    /// Step that asked.
    pub step: String,
    /// Request name within the step.
    pub name: String,
    /// MCP method of the request (`elicitation/create`).
    pub method: String,
    /// Request params (`message`, `requestedSchema`), rendered.
    #[schemars(schema_with = "any_object")]
    pub params: Value,
    /// When it was opened.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub asked_at: Option<String>,
    /// How many different approvers must accept it (set when more than one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "int32"))]
    pub approvals: Option<u32>,
    /// Who accepted it so far, in order, while more approvals are needed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approved_by: Vec<String>,
    /// Whether its approvers were told through the Workflow's webhook: when (RFC 3339), or
    /// `failed: <why>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notified: Option<String>,
    /// Whether they were reminded before its timeout, the same way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reminded: Option<String>,
}

impl OpenInputRequest {
    /// How many different approvers must accept it.
    pub fn needed(&self) -> u32 {
        self.approvals.unwrap_or(1).max(1)
    }

    /// Where `who`'s answer to open request `key` is recorded in `spec.inputResponses`: the key
    /// itself for the first answer, `<key>/<who>` for each further approver of a request that
    /// needs several; `None` when `who` has answered already or no answer is taken.
    pub fn answer_key(
        &self,
        key: &str,
        responses: &BTreeMap<String, super::InputResponse>,
        who: &str,
    ) -> Option<String> {
        let Some(first) = responses.get(key) else {
            return Some(key.to_owned());
        };
        let mine = format!("{key}/{who}");
        let answered = first.answered_by.as_deref() == Some(who) || responses.contains_key(&mine);
        (self.needed() > 1 && !answered).then_some(mine)
    }
}
