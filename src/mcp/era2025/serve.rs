//! One 2025-era request: the `initialize` handshake, the session check, then the method —
//! `ping`, `logging/setLevel`, `tools/list`, `tools/call` (held, or as a task), this revision's
//! `tasks/*`, the client's answers to questions asked on a held call, and notifications.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use rmcp::model::ErrorData;
use serde_json::{Value, json};

use super::held;
use super::session::{Question, Session, binding, call_label};
use super::tasks as old_tasks;
use super::wire::{self, accepted, json_response, older, with_session};
use crate::api::{labels, reasons};
use crate::auth::{Identity, Resource, Verb};
use crate::mcp::access::{allowed, is_owner};
use crate::mcp::apps::read as read_view;
use crate::mcp::errors::{err, internal, invalid, rpc_error};
use crate::mcp::handler::RunwayMcp;
use crate::mcp::state::{McpState, Tenant};
use crate::protocol::{
    HEADER_PROTOCOL_VERSION, HEADER_SESSION_ID, METHOD_CALL_TOOL, METHOD_GET_PROMPT,
    METHOD_INITIALIZE, METHOD_LIST_PROMPTS, METHOD_LIST_RESOURCE_TEMPLATES, METHOD_LIST_RESOURCES,
    METHOD_LIST_TOOLS, METHOD_PING, METHOD_READ_RESOURCE, METHOD_SET_LEVEL, NOTIFICATION_CANCELLED,
    codes,
};

/// Log levels of `logging/setLevel` (RFC 5424 names).
const LOG_LEVELS: [&str; 8] = [
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
];

/// How this server introduces itself to 2025-era clients.
const INSTRUCTIONS: &str = "Each tool is a Runway Workflow. Calls run durably as Runs; a held \
     call streams progress and asks its questions as elicitation requests.";

/// Whether a message belongs to the 2025 era: an `initialize`, or anything carrying a session
/// id and no per-request protocol version (which only 2026-07-28 requests have).
pub(crate) fn recognise(headers: &HeaderMap, msg: &Value) -> bool {
    let per_request_version = msg
        .get("params")
        .and_then(|p| p.get("_meta"))
        .and_then(|m| m.get(crate::protocol::META_PROTOCOL_VERSION))
        .is_some();
    if per_request_version {
        return false;
    }
    msg.get("method").and_then(Value::as_str) == Some(METHOD_INITIALIZE)
        || headers.contains_key(HEADER_SESSION_ID)
}

/// Who is asking, where: the caller, the path (sessions are bound to both) and the tenant,
/// when the path or the caller names a namespace.
#[derive(Clone)]
pub(crate) struct Caller {
    /// The authenticated caller.
    pub identity: Arc<Identity>,
    /// The request path.
    pub path: String,
    /// The namespace served.
    pub tenant: Option<Tenant>,
}

/// Serve one 2025-era message.
pub(crate) async fn serve(
    state: Arc<McpState>,
    caller: Caller,
    headers: &HeaderMap,
    msg: Value,
) -> Response {
    let id = msg.get("id").cloned().unwrap_or(Value::Null);
    let method = msg.get("method").and_then(Value::as_str).map(str::to_owned);
    let bound = binding(&caller.identity.principal.username, &caller.path);
    if method.as_deref() == Some(METHOD_INITIALIZE) {
        return initialize(&state, &bound, &id, msg.get("params"));
    }
    let sealed = headers
        .get(HEADER_SESSION_ID)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let session = match open_session(&state, headers, sealed, &bound, &id) {
        Ok(s) => s,
        Err(refused) => return *refused,
    };
    let Some(method) = method else {
        return answer(&state, &caller, &bound, &msg).await;
    };
    if msg.get("id").is_none() {
        if method == NOTIFICATION_CANCELLED
            && let (Some(t), Some(request)) = (
                &caller.tenant,
                msg.get("params").and_then(|p| p.get("requestId")),
            )
        {
            cancel_call(&state, t, &call_label(&state, sealed, request)).await;
        }
        // Other notifications (`initialized`, `progress`, …) need nothing from a server that
        // keeps no session.
        return accepted();
    }
    let Some(tenant) = caller.tenant else {
        return rpc_error(
            StatusCode::BAD_REQUEST,
            id,
            codes::INVALID_REQUEST,
            "no default namespace for this caller: use POST /namespaces/{namespace}/mcp",
        );
    };
    let mcp = RunwayMcp::new(state.clone());
    let params = msg.get("params").cloned().unwrap_or_else(|| json!({}));
    let outcome = match method.as_str() {
        METHOD_PING => Ok(json!({})),
        METHOD_SET_LEVEL => set_level(&params),
        METHOD_LIST_TOOLS => list_tools(&mcp, &tenant, &session).await,
        METHOD_CALL_TOOL => {
            let label = call_label(&state, sealed, &id);
            return held::call(mcp, tenant, session, bound, id, params, label).await;
        }
        METHOD_LIST_RESOURCES => Ok(json!({"resources": []})),
        METHOD_LIST_RESOURCE_TEMPLATES => Ok(json!({"resourceTemplates": []})),
        METHOD_LIST_PROMPTS => Ok(json!({"prompts": []})),
        METHOD_GET_PROMPT => get_prompt(&params),
        METHOD_READ_RESOURCE => read_resource(&params),
        m if m.starts_with("tasks/") && session.has_tasks() => {
            state.config.metrics.request(m, 200);
            let token = crate::mcp::caller::bearer(headers).map(Arc::from);
            return old_tasks::serve(mcp, tenant, session, bound, id, m, params, token).await;
        }
        other => Err(err(
            codes::METHOD_NOT_FOUND,
            format!("method not found: {other}"),
            None,
        )),
    };
    state.config.metrics.request(&method, 200);
    let message = match outcome {
        Ok(result) => wire::result(&id, result),
        Err(e) => wire::error(&id, &e),
    };
    json_response(StatusCode::OK, &message)
}

/// The session a request names, opened for this caller on this path, with the protocol
/// version header (when sent) agreeing with it; otherwise the refusal to answer with.
pub(super) fn open_session(
    state: &McpState,
    headers: &HeaderMap,
    sealed: &str,
    bound: &str,
    id: &Value,
) -> Result<Session, Box<Response>> {
    let Some(session) = Session::open(state, sealed, bound) else {
        // A session this server did not issue to this caller on this path: the client starts
        // a new one, as the transport prescribes for ended sessions.
        return Err(Box::new(rpc_error(
            StatusCode::NOT_FOUND,
            id.clone(),
            codes::INVALID_REQUEST,
            "unknown session: send initialize again",
        )));
    };
    let version = headers
        .get(HEADER_PROTOCOL_VERSION)
        .map(|v| v.to_str().unwrap_or_default().trim());
    if let Some(v) = version
        && v != session.version
    {
        return Err(Box::new(rpc_error(
            StatusCode::BAD_REQUEST,
            id.clone(),
            codes::INVALID_REQUEST,
            &format!(
                "MCP-Protocol-Version {v:?} is not the session's {}",
                session.version
            ),
        )));
    }
    Ok(session)
}

/// `initialize`: negotiate the revision and hand out the sealed session.
fn initialize(state: &McpState, bound: &str, id: &Value, params: Option<&Value>) -> Response {
    let Some(requested) = params
        .and_then(|p| p.get("protocolVersion"))
        .and_then(Value::as_str)
    else {
        let e = invalid("initialize: params.protocolVersion must be a string");
        return json_response(StatusCode::OK, &wire::error(id, &e));
    };
    let capabilities = params
        .and_then(|p| p.get("capabilities"))
        .filter(|c| c.is_object())
        .cloned()
        .unwrap_or_else(|| json!({}));
    let session = Session::negotiate(requested, capabilities);
    let sealed = match session.seal(state, bound) {
        Ok(s) => s,
        Err(e) => return json_response(StatusCode::OK, &wire::error(id, &internal(e))),
    };
    let mut server_caps = json!({
        "tools": {"listChanged": false},
        "logging": {},
        "prompts": {"listChanged": false},
        "resources": {"subscribe": false, "listChanged": false},
    });
    if session.has_tasks() {
        server_caps["tasks"] =
            json!({"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}});
    }
    let result = json!({
        "protocolVersion": session.version,
        "capabilities": server_caps,
        "serverInfo": {"name": "runway", "version": crate::VERSION},
        "instructions": INSTRUCTIONS,
    });
    state.config.metrics.request(METHOD_INITIALIZE, 200);
    with_session(
        json_response(StatusCode::OK, &wire::result(id, result)),
        &sealed,
    )
}

/// `logging/setLevel`: the level must be one of the protocol's. Runway sends no log
/// notifications, so there is nothing to keep.
fn set_level(params: &Value) -> Result<Value, ErrorData> {
    match params.get("level").and_then(Value::as_str) {
        Some(l) if LOG_LEVELS.contains(&l) => Ok(json!({})),
        _ => Err(invalid(format!(
            "level must be one of {}",
            LOG_LEVELS.join(", ")
        ))),
    }
}

/// `prompts/get`: prompts are declared (the capability lets clients list them), none exists.
fn get_prompt(params: &Value) -> Result<Value, ErrorData> {
    let name = params.get("name").and_then(Value::as_str);
    Err(invalid(format!(
        "unknown prompt: {}",
        name.unwrap_or_default()
    )))
}

/// `resources/read`: the run view is the only resource.
fn read_resource(params: &Value) -> Result<Value, ErrorData> {
    let uri = params
        .get("uri")
        .and_then(Value::as_str)
        .unwrap_or_default();
    // Until 2026-07-28 a resource that is not there has a code of its own.
    read_view(uri).map(older).ok_or_else(|| {
        err(
            codes::RESOURCE_NOT_FOUND_2025,
            "resource not found",
            Some(json!({"uri": uri})),
        )
    })
}

/// `tools/list`: the same tools as 2026-07-28 clients see, each with the task support its
/// Workflow's `execution.mode` gives (from 2025-11-25 on).
async fn list_tools(mcp: &RunwayMcp, t: &Tenant, session: &Session) -> Result<Value, ErrorData> {
    let listed = mcp.tools(t, false).await?;
    let mut tools = Vec::with_capacity(listed.tools.len());
    for tool in listed.tools {
        let support = match mcp.tool(t, &tool.name).await {
            Some(wf) => held::task_support(&wf),
            None => "forbidden",
        };
        // A tool that runs only as a task cannot be called by a revision without tasks: it is
        // not offered there, rather than offered and refused at every call.
        if !session.has_tasks() && support == "required" {
            continue;
        }
        let mut tool = serde_json::to_value(tool).map_err(internal)?;
        if session.has_tasks() {
            tool["execution"] = json!({"taskSupport": support});
        }
        tools.push(tool);
    }
    Ok(json!({"tools": tools}))
}

/// `notifications/cancelled` of a held call: its Run is cancelled, as when the client goes
/// away. Only the caller's own call can be named (the label is keyed with its session), and
/// only by a caller who could have made it: the search reads the API server itself, which a
/// caller without rights in the namespace must not make it do.
async fn cancel_call(state: &Arc<McpState>, t: &Tenant, label: &str) {
    if cancel_labelled(state, t, label).await.is_ok() {
        return;
    }
    // A notification is not sent again: while the access review or the store cannot answer,
    // it is tried again for a while, after its 202 — so many at once at most, since an outage
    // is when they pile up.
    let Some(pending) = PendingRetry::take() else {
        tracing::warn!(namespace = %t.namespace, "too many cancel notifications wait to be acted on; this one is dropped");
        return;
    };
    let (state, t, label) = (state.clone(), t.clone(), label.to_owned());
    tokio::spawn(async move {
        let _pending = pending;
        let mut pause = CANCEL_RETRY;
        while pause <= CANCEL_RETRY_MAX {
            tokio::select! {
                () = tokio::time::sleep(pause) => {}
                () = state.shutdown.cancelled() => return,
            }
            if cancel_labelled(&state, &t, &label).await.is_ok() {
                return;
            }
            pause *= 2;
        }
        tracing::warn!(namespace = %t.namespace, "a cancel notification could not be acted on; its call's run goes on");
    });
}

/// Cancel notifications waiting to be tried again, in this process.
static PENDING_RETRIES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
/// Most cancel notifications waiting to be tried again at once.
const MAX_PENDING_RETRIES: usize = 256;

/// One of [`PENDING_RETRIES`], given back when dropped.
struct PendingRetry;

impl PendingRetry {
    fn take() -> Option<Self> {
        use std::sync::atomic::Ordering;
        PENDING_RETRIES
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < MAX_PENDING_RETRIES).then_some(n + 1)
            })
            .ok()
            .map(|_| Self)
    }
}

impl Drop for PendingRetry {
    fn drop(&mut self) {
        PENDING_RETRIES.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

/// First pause before a cancel notification that could not be acted on is tried again, and
/// the longest (doubling: about a minute in all).
const CANCEL_RETRY: std::time::Duration = std::time::Duration::from_secs(1);
const CANCEL_RETRY_MAX: std::time::Duration = std::time::Duration::from_secs(32);

/// Cancel the caller's Runs carrying call label `label`, if the caller may call at all; an
/// error when that could not be found out now.
async fn cancel_labelled(state: &Arc<McpState>, t: &Tenant, label: &str) -> Result<(), ()> {
    if !allowed(state, t, Verb::Create, Resource::Runs)
        .await
        .map_err(|_| ())?
    {
        return Ok(());
    }
    let selector = BTreeMap::from([(labels::CALL.to_owned(), label.to_owned())]);
    // The call may have reached another replica a moment ago: its Run must be found anyway.
    let runs = state
        .store
        .list_now(Some(&t.namespace), &selector)
        .await
        .map_err(|_| ())?;
    let mcp = RunwayMcp::new(state.clone());
    // A label anyone who may edit Runs could copy names only the caller's own Runs.
    for run in runs.iter().filter(|r| is_owner(r, &t.identity.principal)) {
        if let Some(name) = run.metadata.name.as_deref() {
            // A write that failed is tried again with the rest (a cancel recorded is kept).
            mcp.cancel(t, name, reasons::MCP_REQUEST_CANCELLED)
                .await
                .map_err(|_| ())?;
        }
    }
    Ok(())
}

/// A JSON-RPC response of the client: its answer to a question a held call (on any replica)
/// asked. Recorded on the Run under the rules of `tasks/update`; the held call sees the Run
/// change and goes on.
async fn answer(state: &Arc<McpState>, caller: &Caller, bound: &str, msg: &Value) -> Response {
    let refuse = |why: &str| {
        rpc_error(
            StatusCode::BAD_REQUEST,
            Value::Null,
            codes::INVALID_REQUEST,
            why,
        )
    };
    let Some(tenant) = caller.tenant.as_ref() else {
        return refuse("no default namespace for this caller");
    };
    let Some(question) = msg
        .get("id")
        .and_then(Value::as_str)
        .and_then(|id| Question::open(state, id, bound))
    else {
        return refuse("a response to no question this server asked you");
    };
    let answer = match (msg.get("result"), msg.get("error")) {
        (Some(result), None) => result.clone(),
        // A client that could not ask (or whose user dismissed the dialog) declines.
        (None, Some(_)) => json!({"action": "decline"}),
        _ => return refuse("a response carries exactly one of result and error"),
    };
    let responses = BTreeMap::from([(question.key.clone(), answer)]);
    let mcp = RunwayMcp::new(state.clone());
    match mcp.update_task_of(tenant, &question.run, &responses).await {
        Ok(()) => accepted(),
        Err(e) => rpc_error(
            StatusCode::BAD_REQUEST,
            Value::Null,
            e.code.0.into(),
            &e.message,
        ),
    }
}
