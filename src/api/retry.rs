//! Retrying a Run from its failed step: the link from the new Run to the one it retries.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The failed or cancelled Run a Run retries: the new Run reuses the outputs of the steps that
/// succeeded there and runs again from the step that failed.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct RetryOf {
    /// Name of the Run retried (its taskId), in the same namespace.
    #[schemars(length(max = 253))]
    pub name: String,
    /// Its uid, so that a Run made again under that name is not taken for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 128))]
    pub uid: Option<String>,
}
