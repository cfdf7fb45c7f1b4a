//! Pausing: the request a person writes in a Run's spec, what the controller records of it in
//! status, and what a Workflow does when a step runs out of retries.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A request to pause (`paused: true`) or resume (`paused: false`) a Run, written by whoever
/// asks. Every new request is a new value (it names who and when), so the controller tells a
/// fresh resume from the one it already acted on.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct PauseRequest {
    /// Pause (`true`, the default) or resume (`false`).
    #[serde(default = "yes")]
    pub paused: bool,
    /// Why (free text; recorded in an Event, never in the task's status message).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub reason: Option<String>,
    /// Who asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub requested_by: Option<String>,
    /// When (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_at: Option<String>,
}

fn yes() -> bool {
    true
}

/// Why and since when a Run is paused (in status while it is).
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct PausedState {
    /// When the pause took effect (RFC 3339).
    pub since: String,
    /// Who paused it; absent when Runway held it (`step` says which step ran out of retries).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// The reason given with the pause, or why the held step failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The step that ran out of retries under `execution.onRetriesExhausted: Pause`; it starts
    /// one more attempt when the Run is resumed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
}

/// What happens when a step's last attempt fails.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RetriesExhausted {
    /// The step fails, and with it the Run (after `finally`).
    #[default]
    Fail,
    /// The Run pauses with the step waiting for one more attempt, so that someone can fix the
    /// cause and resume it.
    Pause,
}
