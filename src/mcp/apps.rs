//! MCP Apps (`io.modelcontextprotocol/ui`): for clients that declare the extension, tools name
//! the run view (`ui://runway/run`), which `resources/read` serves as one self-contained HTML
//! document; the console's code drives it through the host's bridge. Clients without the
//! extension see plain tools and text results.

use rmcp::model::{MetaObject, ReadResourceResult, Resource, ResourceContents, Tool};
use serde_json::json;

use super::console;
use crate::protocol::{META_UI, UI_MIME_TYPE};

/// The run view's resource.
pub(crate) const VIEW_URI: &str = "ui://runway/run";

/// `tool` showing its results in the run view; app tools are hidden from the model.
pub(super) fn with_view(mut tool: Tool, app_only: bool) -> Tool {
    let mut ui = json!({"resourceUri": VIEW_URI});
    if app_only {
        ui["visibility"] = json!(["app"]);
    }
    let mut meta = tool.meta.take().unwrap_or_default();
    meta.0.insert(META_UI.into(), ui);
    tool.meta = Some(meta);
    tool
}

/// The view's security settings: no domain of any kind (the host's restrictive default), and
/// a border.
fn view_meta() -> MetaObject {
    let mut meta = MetaObject::default();
    meta.0.insert(
        META_UI.into(),
        json!({
            "csp": {"connectDomains": [], "resourceDomains": [], "frameDomains": [], "baseUriDomains": []},
            "prefersBorder": true,
        }),
    );
    meta
}

/// The run view as `resources/list` shows it.
pub(super) fn view_resource() -> Resource {
    Resource::new(VIEW_URI, "runway_run_view")
        .with_title("Runway run view")
        .with_description("A Run's progress, its open questions as forms, and a cancel button.")
        .with_mime_type(UI_MIME_TYPE)
        .with_meta(view_meta())
}

/// `resources/read` of `uri`, when it is the run view.
pub(super) fn read(uri: &str) -> Option<ReadResourceResult> {
    (uri == VIEW_URI).then(|| {
        ReadResourceResult::new(vec![ResourceContents::TextResourceContents {
            uri: VIEW_URI.into(),
            mime_type: Some(UI_MIME_TYPE.into()),
            text: console::view_html().to_owned(),
            meta: Some(view_meta()),
        }])
    })
}
