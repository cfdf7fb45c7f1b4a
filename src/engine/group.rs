//! The group a Run counts in under its Workflow's concurrency limit: its `concurrency.key`
//! rendered once, from its arguments, when the Run is first decided, and recorded in its
//! status. Deciding a queue then reads each peer's recorded group instead of rendering every
//! peer's key again, and a Run keeps its place in its group whatever later edits do.

use serde_json::json;

use super::template::{self, TemplateError};
use crate::api::{Run, WorkflowSpec};

/// The group `run` counts in: the one recorded in its status, else its `concurrency.key`
/// rendered from its arguments (`Ok(None)`: no key, one group for the whole Workflow). `Err`
/// when the key does not render for these arguments: such a Run cannot be placed in any
/// group, and fails instead of escaping the limit.
pub fn group(spec: &WorkflowSpec, run: &Run) -> Result<Option<String>, TemplateError> {
    if let Some(recorded) = run.status.as_ref().and_then(|s| s.concurrency_key.clone()) {
        return Ok(Some(recorded));
    }
    let Some(key) = spec
        .execution
        .concurrency
        .as_ref()
        .and_then(|c| c.key.as_deref())
    else {
        return Ok(None);
    };
    let ctx = json!({"args": run.spec.arguments.clone().unwrap_or_else(|| json!({}))});
    template::render(key, &ctx).map(Some)
}
