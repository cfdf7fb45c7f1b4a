//! `runway tasks get --archived`: a finished task as the archive kept it, through
//! `runway_get_run` (a deleted Run has no task for `tasks/get` to read).

use rmcp::model::CallToolRequestParams;
use serde_json::{Map, json};

use super::errors::ClientError;
use super::exit;
use super::output::out;
use super::target::{Target, connect};

const GET_TOOL: &str = "runway_get_run";

/// Print the archived Run `id` in full as JSON: arguments, steps, answers with who and when,
/// result, Events.
pub async fn get_archived(target: &Target, id: &str) -> Result<u8, ClientError> {
    let session = connect(target, true).await?;
    let mut args = Map::new();
    args.insert("taskId".into(), json!(id));
    args.insert("archived".into(), json!(true));
    let result = session
        .call_tool(CallToolRequestParams::new(GET_TOOL).with_arguments(args))
        .await?;
    let entry = result.structured_content.unwrap_or_default();
    out(&serde_json::to_string_pretty(&entry).unwrap_or_default());
    Ok(exit::OK)
}
