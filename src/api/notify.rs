//! Telling approvers: the webhook a Workflow posts to when one of its questions opens, and
//! before the question's input timeout.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Header;

/// A webhook told when a question for people opens (and, with `remindBefore`, again before
/// its input timeout), with a Slack-compatible payload: `text`, plus the same in `runway` for
/// other receivers. It carries the question and a console link, never an answer.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NotifySpec {
    /// Where to `POST` (http or https; a Slack incoming webhook takes the payload as it is).
    #[schemars(length(max = 2048))]
    pub url: String,
    /// Headers, inline or from a Secret of the namespace (an `Authorization`, say).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<Header>,
    /// The console's address, for the link to the Run in each message
    /// (`https://runway.example.com/ui/`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2048))]
    pub console_url: Option<String>,
    /// Remind the approvers this long before a question's input timeout (only for questions
    /// with a `timeout`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remind_before: Option<String>,
}
