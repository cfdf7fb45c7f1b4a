//! The names of the wire protocol (MCP 2026-07-28 and the Tasks extension) that the server, the
//! client, the step executors and the engine share: protocol version, extension ids, `_meta`
//! keys, headers, method names and JSON-RPC codes. A leaf: it imports nothing of the crate.

pub mod codes;

/// Protocol revision served and spoken.
pub const PROTOCOL_VERSION: &str = "2026-07-28";
/// Identifier of the Tasks extension.
pub const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";
/// `_meta` key of the protocol version.
pub const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// `_meta` key of the client capabilities.
pub const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
/// `_meta` key of a listen stream's subscription id.
pub const META_SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";
/// `_meta` key of an idempotent `tools/call`.
pub const META_IDEMPOTENCY_KEY: &str = "dev.runway/idempotencyKey";
/// `_meta` key of a `tasks/get` result: the open input keys the caller may answer.
pub const META_AWAITING_YOU: &str = "dev.runway/awaitingYou";
/// Header carrying a 2025-era client's (sealed) session.
pub const HEADER_SESSION_ID: &str = "mcp-session-id";
/// `_meta` key tying a 2025-11-25 `tasks/result` answer (and its questions) to its task.
pub const META_RELATED_TASK: &str = "io.modelcontextprotocol/related-task";
/// Header naming the JSON-RPC method.
pub const HEADER_METHOD: &str = "mcp-method";
/// Header naming the tool or task.
pub const HEADER_NAME: &str = "mcp-name";
/// Header carrying the protocol version.
pub const HEADER_PROTOCOL_VERSION: &str = "mcp-protocol-version";
/// Prefix of the headers that mirror `x-mcp-header` arguments.
pub const HEADER_PARAM_PREFIX: &str = "mcp-param-";
/// The input request asking a person through the client (form or URL).
pub const METHOD_ELICITATION: &str = "elicitation/create";
/// The input request asking the client's model.
pub const METHOD_SAMPLING: &str = "sampling/createMessage";
/// The method that calls a tool (and so starts a Run).
pub const METHOD_CALL_TOOL: &str = "tools/call";
/// The polling method: one task's state.
pub const METHOD_GET_TASK: &str = "tasks/get";
/// The 2025-era handshake (not a method of 2026-07-28).
pub const METHOD_INITIALIZE: &str = "initialize";
/// 2025 era: liveness check.
pub const METHOD_PING: &str = "ping";
/// 2025 era: the client's log level.
pub const METHOD_SET_LEVEL: &str = "logging/setLevel";
/// The tool list.
pub const METHOD_LIST_TOOLS: &str = "tools/list";
/// Cancel a task.
pub const METHOD_CANCEL_TASK: &str = "tasks/cancel";
/// 2025-11-25: wait for a task's result.
pub const METHOD_TASK_RESULT: &str = "tasks/result";
/// 2025-11-25: list tasks.
pub const METHOD_LIST_TASKS: &str = "tasks/list";
/// 2026-07-28: what the server is and offers (replaces `initialize`).
pub const METHOD_DISCOVER: &str = "server/discover";
/// Tasks extension: answer a task's open questions.
pub const METHOD_UPDATE_TASK: &str = "tasks/update";
/// List resources.
pub const METHOD_LIST_RESOURCES: &str = "resources/list";
/// List resource templates.
pub const METHOD_LIST_RESOURCE_TEMPLATES: &str = "resources/templates/list";
/// Read a resource.
pub const METHOD_READ_RESOURCE: &str = "resources/read";
/// List prompts.
pub const METHOD_LIST_PROMPTS: &str = "prompts/list";
/// Get a prompt.
pub const METHOD_GET_PROMPT: &str = "prompts/get";
/// Notification of progress on a request.
pub const NOTIFICATION_PROGRESS: &str = "notifications/progress";
/// 2025 era: the client cancels one of its requests.
pub const NOTIFICATION_CANCELLED: &str = "notifications/cancelled";
/// 2025-11-25: a task's status changed.
pub const NOTIFICATION_TASK_STATUS: &str = "notifications/tasks/status";
/// The streaming method: follow tasks.
pub const METHOD_LISTEN: &str = "subscriptions/listen";
/// Notification acknowledging a subscription.
pub const NOTIFICATION_ACKNOWLEDGED: &str = "notifications/subscriptions/acknowledged";
/// Notification carrying a task's state.
pub const NOTIFICATION_TASK: &str = "notifications/tasks";
/// Identifier of the MCP Apps extension (interactive views of tool results).
pub const UI_EXTENSION: &str = "io.modelcontextprotocol/ui";
/// MIME type of an MCP Apps view.
pub const UI_MIME_TYPE: &str = "text/html;profile=mcp-app";
/// `_meta` key of a tool's or view resource's MCP Apps settings.
pub const META_UI: &str = "ui";
/// Prefix of Runway's own tool names; no Workflow may offer a tool named with it.
pub const BUILTIN_TOOL_PREFIX: &str = "runway_";
