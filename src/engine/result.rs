//! Rendering the final `CallToolResult` of a Run.

use serde_json::{Value, json};

use super::template::{self, TemplateError};
use crate::api::{ResultSpec, RunStatus, StepPhase};

/// Content item types a result may hold.
pub(crate) const CONTENT_TYPES: [&str; 5] = ["text", "image", "audio", "resource", "resource_link"];

/// Render the result; without a spec, the last successful step's output becomes a text item.
pub fn render(
    spec: Option<&ResultSpec>,
    st: &RunStatus,
    ctx: &Value,
) -> Result<Value, TemplateError> {
    let Some(spec) = spec.filter(|s| !s.content.is_empty() || s.structured_content.is_some())
    else {
        let text = st
            .steps
            .iter()
            .rev()
            .filter(|r| !r.finally && r.phase == StepPhase::Succeeded)
            .find_map(|r| r.output.clone().filter(|o| !o.is_null()))
            .map(|o| match o {
                Value::String(s) => s,
                other => other.to_string(),
            })
            .unwrap_or_else(|| "done".into());
        return Ok(json!({"content": [{"type": "text", "text": text}], "isError": false}));
    };
    let content = spec
        .content
        .iter()
        .map(|item| template::render_value(item, ctx))
        .collect::<Result<Vec<_>, _>>()?;
    let mut result = json!({"content": content, "isError": false});
    if let Some(sc) = &spec.structured_content {
        result["structuredContent"] = template::render_value(sc, ctx)?;
    }
    Ok(result)
}
