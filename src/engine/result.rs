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

/// `result`, when it meets the tool's `outputSchema` (MCP: a tool that declares one must give
/// `structuredContent` that conforms to it); otherwise why not, which fails the Run rather than
/// hand clients a result their SDK refuses.
pub fn meets_output_schema(schema: Option<&Value>, result: Value) -> Result<Value, String> {
    let Some(schema) = schema else {
        return Ok(result);
    };
    let Some(structured) = result.get("structuredContent") else {
        return Err("tool.outputSchema is declared, but result.structuredContent is not".into());
    };
    let errors = super::budget::schema_errors(schema, structured)
        .map_err(|e| format!("tool.outputSchema: {e}"))?;
    match errors.first() {
        None => Ok(result),
        Some(e) => Err(format!(
            "structuredContent does not match tool.outputSchema at {}: {}",
            e["path"].as_str().unwrap_or_default(),
            e["message"].as_str().unwrap_or_default()
        )),
    }
}
