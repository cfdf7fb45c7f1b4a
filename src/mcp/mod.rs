//! The MCP endpoint (protocol 2026-07-28, stateless Streamable HTTP). rmcp does the protocol;
//! this module routes tenants, authenticates in front of it, and maps Workflows to tools and
//! Runs to tasks. rmcp types do not leave this module.

mod access;
mod answers;
mod apps;
mod builtin;
mod console;
mod delivery;
pub mod events;
mod fast;
mod handler;
pub mod listen;
mod sealing;
pub mod task;
mod tasks;
mod tools;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use crate::auth::{AuthError, Authenticator, Authorizer, Identity};
use crate::protocol::{
    HEADER_NAME, HEADER_PARAM_PREFIX, HEADER_PROTOCOL_VERSION, META_CLIENT_CAPABILITIES,
    METHOD_CALL_TOOL, METHOD_GET_TASK, METHOD_LISTEN, TASKS_EXTENSION, codes,
};
use crate::store::events::EventLog;
use crate::store::{RunStore, WorkflowSource};
use events::RunEvents;
use handler::RunwayMcp;

/// Largest request body accepted.
pub const MAX_BODY_BYTES: usize = 4 * 1024 * 1024;
/// Default of [`Config::body_read_timeout`].
pub(crate) const BODY_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Default of [`Config::max_streams_per_principal`].
pub(crate) const MAX_STREAMS_PER_PRINCIPAL: usize = 16;
/// Default of [`Config::max_concurrent_requests`].
pub(crate) const MAX_CONCURRENT_REQUESTS: usize = 1024;

/// Who may act on a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TaskAccess {
    /// Only the principal that requested the Run, or who may `list runs` in the namespace.
    Owner,
    /// Anyone the namespace's RBAC allows.
    Namespace,
}

/// Settings of the endpoint.
#[derive(Debug, Clone)]
pub struct Config {
    /// Host names accepted in `Host` (loopback is always accepted).
    pub allowed_hosts: Vec<String>,
    /// Origins accepted when a request carries `Origin` (none: only requests without Origin,
    /// or with a loopback Origin).
    pub allowed_origins: Vec<String>,
    /// Owner rule.
    pub task_access: TaskAccess,
    /// Keys (each ≥ 32 bytes) of `requestState` and idempotent task ids, newest first: the
    /// first signs and names new Runs; the others still verify and find the Runs they named,
    /// so a key can be rotated with an overlap period.
    pub state_keys: Vec<Vec<u8>>,
    /// SSE keep-alive period; a vanished client is noticed within about this time.
    pub keep_alive: Duration,
    /// How long a `requestState` stays valid.
    pub state_ttl: Duration,
    /// Where request counts are recorded.
    pub metrics: crate::telemetry::Metrics,
    /// How long a client may take to send its request body once its headers were accepted
    /// (408 after that).
    pub body_read_timeout: Duration,
    /// Requests processed at once (a request holds its slot until its response starts; the
    /// stream that may follow does not). Past it: 503 with `Retry-After`.
    pub max_concurrent_requests: usize,
    /// Open `subscriptions/listen` streams one principal may hold (per server). Past it: 429.
    pub max_streams_per_principal: usize,
    /// Whether `runway_list_runs` is offered.
    pub list_tool: bool,
    /// Namespaces where `runway_list_runs` is not offered even so.
    pub list_tool_off_in: std::collections::BTreeSet<String>,
    /// Whether the web console (`/ui/`) is served.
    pub console: bool,
}

impl Config {
    /// Defaults with a fresh random state key.
    pub fn new() -> Self {
        let key = crate::store::new_state_key();
        Self {
            allowed_hosts: vec![],
            allowed_origins: vec![],
            task_access: TaskAccess::Owner,
            state_keys: vec![key],
            keep_alive: Duration::from_secs(1),
            state_ttl: Duration::from_secs(3600),
            metrics: Default::default(),
            body_read_timeout: BODY_READ_TIMEOUT,
            max_concurrent_requests: MAX_CONCURRENT_REQUESTS,
            max_streams_per_principal: MAX_STREAMS_PER_PRINCIPAL,
            list_tool: true,
            list_tool_off_in: Default::default(),
            console: true,
        }
    }
}

/// Shortest state key accepted.
pub(crate) const MIN_STATE_KEY_BYTES: usize = 32;

/// State keys as a key file or Secret holds them: one per line, newest first; blank lines and
/// surrounding whitespace are ignored.
pub fn parse_state_keys(text: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    let keys: Vec<Vec<u8>> = text
        .split(|b| *b == b'\n')
        .map(|l| l.trim_ascii().to_vec())
        .filter(|l| !l.is_empty())
        .collect();
    if keys.is_empty() {
        return Err("no state key".into());
    }
    if let Some(i) = keys.iter().position(|k| k.len() < MIN_STATE_KEY_BYTES) {
        return Err(format!(
            "state key {} is shorter than {MIN_STATE_KEY_BYTES} bytes",
            i + 1
        ));
    }
    Ok(keys)
}

impl Default for Config {
    fn default() -> Self {
        Self::new()
    }
}

/// Everything a request needs.
pub struct McpState {
    /// Runs.
    pub store: Arc<dyn RunStore>,
    /// Workflows.
    pub workflows: Arc<dyn WorkflowSource>,
    /// Authentication.
    pub authn: Arc<dyn Authenticator>,
    /// Authorization.
    pub authz: Arc<dyn Authorizer>,
    /// Where a Run's Events are read back.
    pub event_log: Arc<dyn EventLog>,
    /// Settings.
    pub config: Config,
    /// Per-Run change feeds.
    pub events: Arc<RunEvents>,
    /// Fires on server shutdown (which must not cancel blocking runs).
    pub shutdown: CancellationToken,
    /// One codec per state key, newest first.
    codecs: Vec<rmcp::model::RequestStateCodec>,
    /// Slots of requests in process (`Config::max_concurrent_requests`).
    requests: Arc<tokio::sync::Semaphore>,
    hosts: Vec<AllowedHost>,
    origins: Vec<String>,
    /// Open listen streams per principal.
    streams: Arc<std::sync::Mutex<std::collections::HashMap<String, usize>>>,
}

impl McpState {
    /// Assemble the state; starts the Run change feed.
    pub fn new(
        store: Arc<dyn RunStore>,
        workflows: Arc<dyn WorkflowSource>,
        authn: Arc<dyn Authenticator>,
        authz: Arc<dyn Authorizer>,
        event_log: Arc<dyn EventLog>,
        config: Config,
        shutdown: CancellationToken,
    ) -> Result<Arc<Self>, String> {
        if config.state_keys.is_empty() {
            return Err("no state key".into());
        }
        let codecs = config
            .state_keys
            .iter()
            .map(|k| rmcp::model::RequestStateCodec::try_new(k.clone()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("state key: {e}"))?;
        let events = RunEvents::start(store.clone(), shutdown.clone());
        let hosts = config.hosts().iter().map(|h| AllowedHost::new(h)).collect();
        let origins = config.origins();
        Ok(Arc::new(Self {
            requests: Arc::new(tokio::sync::Semaphore::new(config.max_concurrent_requests)),
            hosts,
            origins,
            streams: Arc::default(),
            store,
            workflows,
            authn,
            authz,
            event_log,
            config,
            events,
            shutdown,
            codecs,
        }))
    }
}

/// The tenant a request acts in, attached by the gate.
#[derive(Debug, Clone)]
pub struct Tenant {
    /// Namespace.
    pub namespace: String,
    /// Caller.
    pub identity: Arc<Identity>,
}

impl Config {
    /// Host names (`host` for any port, `host:port` for one) requests may carry.
    fn hosts(&self) -> Vec<String> {
        let mut hosts: Vec<String> = vec![
            "localhost".into(),
            "127.0.0.1".into(),
            "::1".into(),
            "[::1]".into(),
        ];
        hosts.extend(self.allowed_hosts.iter().cloned());
        hosts
    }

    /// Origins (`scheme://host:port`, `:*` for any port) requests carrying `Origin` may have.
    fn origins(&self) -> Vec<String> {
        let mut origins: Vec<String> = vec![
            "http://localhost:*".into(),
            "http://127.0.0.1:*".into(),
            "http://[::1]:*".into(),
        ];
        origins.extend(self.allowed_origins.iter().cloned());
        origins
    }
}

/// An entry of the allowed hosts: a name, for any port or for one.
struct AllowedHost {
    name: String,
    port: Option<u16>,
}

impl AllowedHost {
    fn new(allowed: &str) -> Self {
        let allowed = allowed.to_ascii_lowercase();
        match allowed.parse::<http::uri::Authority>() {
            Ok(a) => Self {
                name: a.host().to_owned(),
                port: a.port_u16(),
            },
            Err(_) => Self {
                name: allowed,
                port: None,
            },
        }
    }
}

/// Whether `Host` and `Origin` are allowed (the DNS-rebinding and cross-origin checks). The
/// gate applies them to every request, also those it answers itself (`subscriptions/listen`).
fn host_and_origin_allowed(headers: &HeaderMap, hosts: &[AllowedHost], origins: &[String]) -> bool {
    let Some(host) = headers.get(header::HOST).and_then(|h| h.to_str().ok()) else {
        return false;
    };
    let Ok(host_authority) = host.parse::<http::uri::Authority>() else {
        return false;
    };
    let port = host_authority.port_u16();
    let host_ok = hosts.iter().any(|allowed| {
        host_authority.host().eq_ignore_ascii_case(&allowed.name)
            && (allowed.port.is_none() || allowed.port == port)
    });
    if !host_ok {
        return false;
    }
    let Some(origin) = headers.get(header::ORIGIN) else {
        return true;
    };
    let Some(origin) = origin
        .to_str()
        .ok()
        .and_then(|o| o.parse::<http::Uri>().ok())
    else {
        return false;
    };
    let (Some(scheme), Some(authority)) = (origin.scheme_str(), origin.authority()) else {
        return false;
    };
    let default_port = if scheme == "https" { 443 } else { 80 };
    let o_host = authority.host().to_ascii_lowercase();
    let o_port = authority.port_u16().unwrap_or(default_port);
    // The server's own pages (the console): the Origin names the very Host the request was
    // sent to, which is an allowed one, so neither a foreign page nor a rebound name gets in.
    let own_port = host_authority.port_u16().unwrap_or(default_port);
    if host_authority.host().eq_ignore_ascii_case(&o_host) && own_port == o_port {
        return true;
    }
    origins.iter().any(|allowed| {
        let allowed = allowed.to_ascii_lowercase();
        let (base, any_port) = match allowed.strip_suffix(":*") {
            Some(b) => (b.to_owned(), true),
            None => (allowed.clone(), false),
        };
        let Ok(uri) = base.parse::<http::Uri>() else {
            return false;
        };
        let (Some(s), Some(a)) = (uri.scheme_str(), uri.authority()) else {
            return false;
        };
        let port = a.port_u16().unwrap_or(if s == "https" { 443 } else { 80 });
        s == scheme && a.host() == o_host && (any_port || port == o_port)
    })
}

/// rmcp's Streamable HTTP service, as the gate hands requests on to it.
type Rmcp = StreamableHttpService<RunwayMcp, NeverSessionManager>;

/// The gate's state: the endpoint's, and rmcp behind it.
struct Gate {
    state: Arc<McpState>,
    rmcp: Rmcp,
}

impl Gate {
    /// Hand a request on to rmcp.
    async fn rmcp(&self, req: Request) -> Response {
        match self.rmcp.clone().oneshot(req).await {
            Ok(resp) => resp.into_response(),
            Err(never) => match never {},
        }
    }
}

/// The MCP routes: `POST /mcp` and `POST /namespaces/{namespace}/mcp`. Every request meets the
/// gate first; rmcp is called only for what the gate does not answer itself, so the requests it
/// answers (`subscriptions/listen`, the fast `tasks/get`) cost nothing of rmcp's.
pub(crate) fn router(state: Arc<McpState>) -> Router {
    let hosts = state.config.hosts();
    let origins = state.config.origins();
    let cfg = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_stateless_protocol_metadata_required(true)
        .with_sse_keep_alive(Some(state.config.keep_alive))
        .with_allowed_hosts(hosts)
        .with_allowed_origins(origins)
        .with_max_request_body_bytes(MAX_BODY_BYTES)
        .with_cancellation_token(state.shutdown.child_token());
    let s = state.clone();
    let rmcp = StreamableHttpService::new(
        move || Ok(RunwayMcp::new(s.clone())),
        Arc::new(NeverSessionManager::default()),
        cfg,
    );
    let console = state.config.console.then(|| console::router(state.clone()));
    let gate = Arc::new(Gate { state, rmcp });
    let mcp = Router::new()
        .route("/mcp", axum::routing::any(gate_handler))
        .route(
            "/namespaces/{namespace}/mcp",
            axum::routing::any(gate_handler),
        )
        .with_state(gate);
    match console {
        Some(console) => mcp.merge(console),
        None => mcp,
    }
}

fn rpc_error(status: StatusCode, id: Value, code: i64, message: &str) -> Response {
    let body = json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}});
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn path_namespace(path: &str) -> Option<&str> {
    path.strip_prefix("/namespaces/")?.strip_suffix("/mcp")
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    let v = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = v.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// Decode a header value, honouring the `=?base64?…?=` sentinel.
fn decode_header_value(v: &str) -> Result<String, String> {
    match v
        .strip_prefix("=?base64?")
        .and_then(|r| r.strip_suffix("?="))
    {
        Some(b64) => {
            let bytes = data_encoding::BASE64
                .decode(b64.as_bytes())
                .map_err(|e| format!("invalid base64 header value: {e}"))?;
            String::from_utf8(bytes).map_err(|_| "base64 header value is not UTF-8".to_string())
        }
        None => Ok(v.to_owned()),
    }
}

/// Arguments marked `x-mcp-header` must be mirrored, exactly, in `Mcp-Param-<name>` headers.
fn check_param_headers(
    schema: &Value,
    args: &serde_json::Map<String, Value>,
    headers: &HeaderMap,
) -> Result<(), String> {
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        return Ok(());
    };
    for (prop, def) in props {
        let Some(suffix) = def.get("x-mcp-header").and_then(Value::as_str) else {
            continue;
        };
        let header_name = format!("{HEADER_PARAM_PREFIX}{}", suffix.to_ascii_lowercase());
        let header = headers.get(&header_name).map(|v| v.to_str().map(str::trim));
        let body = args.get(prop).filter(|v| !v.is_null()).map(|v| match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        });
        match (body, header) {
            (None, None) => {}
            (_, Some(Err(_))) => return Err(format!("Mcp-Param-{suffix} is not valid text")),
            (Some(_), None) => {
                return Err(format!(
                    "missing header Mcp-Param-{suffix} for argument {prop}"
                ));
            }
            (None, Some(Ok(_))) => {
                return Err(format!(
                    "header Mcp-Param-{suffix} given without argument {prop}"
                ));
            }
            (Some(b), Some(Ok(h))) => {
                if decode_header_value(h)? != b {
                    return Err(format!(
                        "header Mcp-Param-{suffix} does not match argument {prop}"
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Whether the request `_meta` declares the Tasks extension.
pub(crate) fn declares_tasks(params: Option<&Value>) -> bool {
    params
        .and_then(|p| p.get("_meta"))
        .and_then(|m| m.get(META_CLIENT_CAPABILITIES))
        .and_then(|c| c.get("extensions"))
        .and_then(|e| e.get(TASKS_EXTENSION))
        .is_some()
}

/// Check Host/Origin and the path, authenticate from the headers, then read the body (bounded
/// in size and time), resolve the tenant and hand the request to rmcp or the listen handler.
///
/// `tasks/*` requests that did not declare the extension, or whose `Mcp-Name` does not match
/// their `taskId`, go to rmcp without a tenant: it refuses them (`-32021`, `-32020`) before any
/// lookup, which is the order the protocol prescribes.
async fn gate_handler(State(gate): State<Arc<Gate>>, req: Request) -> Response {
    if req.method() != Method::POST {
        return gate.rmcp(req).await;
    }
    let state = gate.state.clone();
    let Ok(_slot) = state.requests.clone().try_acquire_owned() else {
        return busy();
    };
    let (mut parts, body) = req.into_parts();
    // Nothing but headers is read before the caller is known.
    let (path_ns, identity) = match caller(&state, &parts.headers, parts.uri.path()).await {
        Ok(c) => c,
        Err(refused) => return refused,
    };
    // Host and Origin passed the gate's check, which also knows the server's own pages; rmcp's
    // copy of the check (for what reaches it directly) would not.
    parts.headers.remove(header::ORIGIN);
    let bytes = match read_body(&state, body).await {
        Ok(b) => b,
        Err(refused) => return refused,
    };
    // Without a namespace the general path gives the error (after the ones that come first).
    let tenant = path_ns
        .or_else(|| identity.namespace.clone())
        .map(|namespace| Tenant {
            namespace,
            identity,
        });
    if let Some(tenant) = &tenant {
        if let Some(get) = fast::eligible(&parts.headers, &bytes) {
            let resp = fast::get_task(&state, tenant, get).await;
            state
                .config
                .metrics
                .request(METHOD_GET_TASK, resp.status().as_u16());
            return resp;
        }
        if let Some(call) = fast::eligible_call(&parts.headers, &bytes)
            && let Some(resp) = fast::call_tool(&state, tenant, &parts.headers, call).await
        {
            state
                .config
                .metrics
                .request(METHOD_CALL_TOOL, resp.status().as_u16());
            return resp;
        }
    }
    let msg = match parse_message(&bytes) {
        Ok(m) => m,
        Err((code, why)) => {
            return rpc_error(StatusCode::BAD_REQUEST, Value::Null, code, &why);
        }
    };
    let id = msg.get("id").cloned().unwrap_or(Value::Null);
    let method = msg
        .get("method")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let params = msg.get("params");
    if let Err(why) = protocol_headers(&parts.headers) {
        return rpc_error(StatusCode::BAD_REQUEST, id, codes::HEADER_MISMATCH, why);
    }
    if method.starts_with("tasks/") && !task_headers_agree(&parts.headers, params) {
        // rmcp answers these malformed requests with the protocol's own errors.
        return gate
            .rmcp(Request::from_parts(parts, Body::from(bytes)))
            .await;
    }
    let Some(tenant) = tenant else {
        return rpc_error(
            StatusCode::BAD_REQUEST,
            id,
            codes::INVALID_REQUEST,
            "no default namespace for this caller: use POST /namespaces/{namespace}/mcp",
        );
    };
    if method == METHOD_CALL_TOOL
        && let Err(why) = tool_param_headers(&state, &tenant, params, &parts.headers).await
    {
        return rpc_error(StatusCode::BAD_REQUEST, id, codes::HEADER_MISMATCH, &why);
    }
    let metrics = state.config.metrics.clone();
    let resp = if method == METHOD_LISTEN {
        listen::serve(state, tenant, &parts.headers, msg).await
    } else if method == METHOD_CALL_TOOL {
        // Dropped with this future (the client went away) or with an unread body: either way
        // the Run the call created was never handed over.
        let delivery = delivery::Delivery::default();
        let guard = delivery::Guard::new(delivery.clone(), state);
        parts.extensions.insert(tenant);
        parts.extensions.insert(delivery);
        let resp = gate
            .rmcp(Request::from_parts(parts, Body::from(bytes)))
            .await;
        resp.map(|body| guard.watch(body))
    } else {
        parts.extensions.insert(tenant);
        gate.rmcp(Request::from_parts(parts, Body::from(bytes)))
            .await
    };
    metrics.request(&method, resp.status().as_u16());
    resp
}

/// The answer past the concurrency limit.
fn busy() -> Response {
    let mut resp = rpc_error(
        StatusCode::SERVICE_UNAVAILABLE,
        Value::Null,
        codes::INTERNAL_ERROR,
        "server busy; retry later",
    );
    resp.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    resp
}

/// Who is calling, and which namespace the path names, from headers and path alone: Host and
/// Origin allowed, the path's namespace a DNS label, the bearer token accepted.
async fn caller(
    state: &McpState,
    headers: &HeaderMap,
    path: &str,
) -> Result<(Option<String>, Arc<Identity>), Response> {
    if !host_and_origin_allowed(headers, &state.hosts, &state.origins) {
        return Err(rpc_error(
            StatusCode::FORBIDDEN,
            Value::Null,
            codes::INVALID_REQUEST,
            "Forbidden: Host or Origin header is not allowed",
        ));
    }
    let path_ns = match path_namespace(path) {
        Some(ns) if crate::api::is_dns_label(ns) => Some(ns.to_owned()),
        Some(_) => {
            return Err(rpc_error(
                StatusCode::NOT_FOUND,
                Value::Null,
                codes::INVALID_REQUEST,
                "the path's namespace is not a valid namespace name",
            ));
        }
        None => None,
    };
    match state.authn.authenticate(bearer(headers)).await {
        Ok(identity) => Ok((path_ns, identity)),
        Err(AuthError::Unauthenticated(why)) => {
            let mut resp = rpc_error(
                StatusCode::UNAUTHORIZED,
                Value::Null,
                codes::UNAUTHENTICATED,
                &format!("unauthenticated: {why}"),
            );
            resp.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"runway\""),
            );
            Err(resp)
        }
        Err(e) => {
            tracing::warn!(error = %e, "authentication failed");
            Err(rpc_error(
                StatusCode::SERVICE_UNAVAILABLE,
                Value::Null,
                codes::INTERNAL_ERROR,
                "authentication is unavailable; retry later",
            ))
        }
    }
}

/// The request body, within the size limit and the read timeout.
async fn read_body(state: &McpState, body: Body) -> Result<bytes::Bytes, Response> {
    let refuse =
        |status, message: &str| rpc_error(status, Value::Null, codes::INVALID_REQUEST, message);
    let collect = http_body_util::Limited::new(body, MAX_BODY_BYTES).collect();
    match tokio::time::timeout(state.config.body_read_timeout, collect).await {
        Ok(Ok(c)) => Ok(c.to_bytes()),
        Ok(Err(_)) => Err(refuse(
            StatusCode::PAYLOAD_TOO_LARGE,
            "request body too large",
        )),
        Err(_) => Err(refuse(
            StatusCode::REQUEST_TIMEOUT,
            "request body not received in time",
        )),
    }
}

/// The request body as one JSON-RPC object, or the JSON-RPC code and message refusing it.
fn parse_message(bytes: &[u8]) -> Result<Value, (i64, String)> {
    match serde_json::from_slice::<Value>(bytes) {
        Ok(msg) if msg.is_object() => Ok(msg),
        Ok(_) => Err((
            codes::INVALID_REQUEST,
            "one JSON-RPC object per request (batches are not supported)".into(),
        )),
        Err(e) => Err((codes::PARSE_ERROR, format!("parse error: {e}"))),
    }
}

/// An `MCP-Protocol-Version` header, when sent, is not empty.
fn protocol_headers(headers: &HeaderMap) -> Result<(), &'static str> {
    let version = headers
        .get(HEADER_PROTOCOL_VERSION)
        .map(|v| v.to_str().unwrap_or_default().trim());
    match version {
        Some("") => Err("empty MCP-Protocol-Version header"),
        _ => Ok(()),
    }
}

/// Whether a `tasks/*` request declares the Tasks extension and its `Mcp-Name` header (when
/// sent) names the task of the body.
fn task_headers_agree(headers: &HeaderMap, params: Option<&Value>) -> bool {
    let task_id = params.and_then(|p| p.get("taskId")).and_then(Value::as_str);
    // The header may carry the name in its Base64 form (`=?base64?…?=`).
    let header_name = headers
        .get(HEADER_NAME)
        .and_then(|v| v.to_str().ok())
        .map(|v| decode_header_value(v.trim()));
    let names_agree = match (task_id, header_name) {
        (Some(id), Some(Ok(name))) => id == name,
        (_, Some(Err(_))) => false,
        _ => true,
    };
    declares_tasks(params) && names_agree
}

/// The `Mcp-Param-*` headers of a `tools/call` agree with the arguments its tool's schema marks
/// with `x-mcp-header`. Calls of unknown tools pass: the handler answers those.
async fn tool_param_headers(
    state: &McpState,
    tenant: &Tenant,
    params: Option<&Value>,
    headers: &HeaderMap,
) -> Result<(), String> {
    let Some(name) = params.and_then(|p| p.get("name")).and_then(Value::as_str) else {
        return Ok(());
    };
    let Some(wf) = state.workflows.tool(&tenant.namespace, name).await else {
        return Ok(());
    };
    let Some(schema) = wf.spec.tool.input_schema.as_ref() else {
        return Ok(());
    };
    // Arguments that are not an object are refused by rmcp, after this check.
    let none = serde_json::Map::new();
    let args = params
        .and_then(|p| p.get("arguments"))
        .and_then(Value::as_object)
        .unwrap_or(&none);
    check_param_headers(schema, args, headers)
}
