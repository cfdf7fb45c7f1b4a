//! `runway tasks pause|resume|retry`: through Runway's own tools, since neither protocol era
//! has a method for them.

use rmcp::model::CallToolRequestParams;
use serde_json::{Map, json};

use crate::protocol::codes::INVALID_PARAMS;

use super::errors::ClientError;
use super::exit;
use super::output::shown;
use super::target::{Target, connect};

const PAUSE_TOOL: &str = "runway_pause_run";
const RESUME_TOOL: &str = "runway_resume_run";

/// `runway tasks pause` (`pause`) or `runway tasks resume`: ask, then say what it did.
pub async fn pause(
    target: &Target,
    id: &str,
    pause: bool,
    reason: Option<&str>,
) -> Result<u8, ClientError> {
    let session = connect(target, true).await?;
    let mut args = Map::new();
    args.insert("taskId".into(), json!(id));
    if let Some(r) = reason {
        args.insert("reason".into(), json!(r));
    }
    let tool = if pause { PAUSE_TOOL } else { RESUME_TOOL };
    let result = match session
        .call_tool(CallToolRequestParams::new(tool).with_arguments(args))
        .await
        .map_err(ClientError::from)
    {
        Ok(r) => r,
        Err(ClientError::Rpc { code, message }) if code == INVALID_PARAMS => {
            eprintln!("not taken: {}", shown(&message));
            return Ok(exit::NOT_TAKEN);
        }
        Err(e) => return Err(e),
    };
    let changed = result
        .structured_content
        .as_ref()
        .is_some_and(|v| v["changed"] == true);
    let said = match (pause, changed) {
        (true, true) => format!(
            "pause of task {id} requested: steps that run finish, no new step starts until `runway tasks resume {id}`"
        ),
        (true, false) => format!("task {id} is paused already"),
        (false, true) => format!("resume of task {id} requested"),
        (false, false) => format!("task {id} is not paused; nothing to resume"),
    };
    eprintln!("{said}");
    Ok(if changed { exit::OK } else { exit::NOT_TAKEN })
}

const RETRY_TOOL: &str = "runway_retry_run";

/// `runway tasks retry`: a new task from the failed step of task `id`, with these arguments
/// changed; prints the new task id.
pub async fn retry(
    target: &Target,
    id: &str,
    changed: Map<String, serde_json::Value>,
) -> Result<u8, ClientError> {
    let session = connect(target, true).await?;
    let mut args = Map::new();
    args.insert("taskId".into(), json!(id));
    if !changed.is_empty() {
        args.insert("arguments".into(), serde_json::Value::Object(changed));
    }
    let result = match session
        .call_tool(CallToolRequestParams::new(RETRY_TOOL).with_arguments(args))
        .await
        .map_err(ClientError::from)
    {
        Ok(r) => r,
        Err(ClientError::Rpc { code, message }) if code == INVALID_PARAMS => {
            eprintln!("not retried: {}", shown(&message));
            return Ok(exit::NOT_TAKEN);
        }
        Err(e) => return Err(e),
    };
    let answer = result.structured_content.unwrap_or_default();
    let new = answer["taskId"].as_str().unwrap_or_default();
    let reused: Vec<&str> = answer["reused"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str())
        .collect();
    super::output::out(new);
    eprintln!(
        "task {id} retried as {new}; reused: {}; `runway tasks watch {new}` follows it",
        if reused.is_empty() {
            "nothing".to_owned()
        } else {
            reused.join(", ")
        }
    );
    Ok(exit::OK)
}
