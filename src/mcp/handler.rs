//! The rmcp `ServerHandler`: Workflows as tools, Runs as tasks, per-method authorization.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use rmcp::model::{
    CacheScope, CallToolRequestParams, CallToolResponse, CancelTaskParams, CustomRequest,
    CustomResult, DiscoverResult, ErrorData, GetTaskParams, GetTaskResult, Implementation,
    ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult, ListToolsResult,
    PaginatedRequestParams, ProtocolVersion, ServerCapabilities, ServerConfig, UpdateTaskParams,
};
use rmcp::service::RequestContext;
use rmcp::{RoleServer, ServerHandler};
use serde_json::{Value, json};

use super::apps::{read as read_view, view_resource};
use super::caller::tenant;
use super::caps::declares_ui;
use super::errors::{err, invalid};
use super::state::McpState;
use crate::protocol::{
    METHOD_CALL_TOOL, METHOD_CANCEL_TASK, METHOD_GET_TASK, METHOD_LIST_TOOLS, METHOD_UPDATE_TASK,
    UI_EXTENSION, UI_MIME_TYPE, codes,
};

/// How long clients may cache `server/discover` (and the empty prompt and resource lists): an
/// hour, as the specification's example does. What it says — versions, capabilities,
/// instructions — changes only with a new release, and is the same for every caller (public).
pub(super) const DISCOVER_TTL_MS: u64 = 3_600_000;

/// One request's handler (rmcp builds one per POST).
pub(crate) struct RunwayMcp {
    pub(super) state: Arc<McpState>,
}

impl RunwayMcp {
    pub(super) fn new(state: Arc<McpState>) -> Self {
        Self { state }
    }
}

impl ServerHandler for RunwayMcp {
    fn get_info(&self) -> ServerConfig {
        let mut capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_prompts()
            .enable_resources()
            .enable_tasks()
            .build();
        // The run view (`ui://runway/run`) is always served, so MCP Apps is declared with it.
        capabilities.extensions.get_or_insert_default().insert(
            UI_EXTENSION.to_owned(),
            json!({ "mimeTypes": [UI_MIME_TYPE] })
                .as_object()
                .cloned()
                .unwrap_or_default(),
        );
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new("runway", crate::VERSION))
            .with_instructions(
                "Each tool is a Runway Workflow. Calls run durably as Runs; with the Tasks extension a call \
                 returns a task whose taskId is the Run's name.",
            )
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(&[ProtocolVersion::V_2026_07_28])
    }

    async fn discover(
        &self,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<DiscoverResult, ErrorData> {
        Ok(DiscoverResult::from_server_info(
            self.supported_protocol_versions().to_vec(),
            self.get_info(),
        )
        .with_ttl_ms(DISCOVER_TTL_MS)
        .with_cache_scope(CacheScope::Public))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        ctx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        self.tools(&tenant(&ctx)?, declares_ui(&ctx)).await
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        Ok(ListPromptsResult::with_all_items(vec![])
            .with_ttl_ms(DISCOVER_TTL_MS)
            .with_cache_scope(CacheScope::Public))
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        Ok(ListResourcesResult::with_all_items(vec![view_resource()])
            .with_ttl_ms(DISCOVER_TTL_MS)
            .with_cache_scope(CacheScope::Public))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Ok(ListResourceTemplatesResult::with_all_items(vec![])
            .with_ttl_ms(DISCOVER_TTL_MS)
            .with_cache_scope(CacheScope::Public))
    }

    async fn read_resource(
        &self,
        request: rmcp::model::ReadResourceRequestParams,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::ReadResourceResponse, ErrorData> {
        if let Some(view) = read_view(&request.uri) {
            return Ok(view.into());
        }
        Err(err(
            codes::INVALID_PARAMS,
            "resource not found",
            Some(json!({"uri": request.uri})),
        ))
    }

    async fn get_prompt(
        &self,
        request: rmcp::model::GetPromptRequestParams,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::GetPromptResponse, ErrorData> {
        Err(invalid(format!("unknown prompt: {}", request.name)))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.call(request, ctx).await
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        self.get(request, ctx).await
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let responses: BTreeMap<String, Value> = request.input_responses.into_iter().collect();
        self.update_task_of(&tenant(&ctx)?, &request.task_id, &responses)
            .await
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.cancel_task_of(
            &tenant(&ctx)?,
            &request.task_id,
            "requested via tasks/cancel",
        )
        .await
        .map(|_| ())
    }

    async fn on_custom_request(
        &self,
        request: CustomRequest,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        // Known methods land here when their params do not deserialize.
        match request.method.as_str() {
            METHOD_CALL_TOOL | METHOD_GET_TASK | METHOD_UPDATE_TASK | METHOD_CANCEL_TASK
            | METHOD_LIST_TOOLS => Err(invalid(format!("invalid params for {}", request.method))),
            other => Err(err(
                codes::METHOD_NOT_FOUND,
                format!("method not found: {other}"),
                None,
            )),
        }
    }
}
