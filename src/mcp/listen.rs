//! `subscriptions/listen` with `notifications.taskIds`, served in front of rmcp (which cannot
//! carry task ids): an SSE stream that acknowledges the readable tasks, then sends the full task
//! on every change of each, driven by the store's watch.

use std::convert::Infallible;
use std::sync::Arc;

use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use rmcp::model::ErrorData;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use super::access::{allowed, may_read, readable_run, still_signed_in};
use super::caller::bearer;
use super::caps::declares_tasks_in;
use super::errors::{forbidden, rpc_error, signed_out};
use super::handler::RunwayMcp;
use super::headers::{media_refusal, no_proxy_buffering};
use super::projection;
use super::state::{McpState, Tenant};
use super::tasks::live_spec;
use crate::auth::{Resource, Verb};
use crate::protocol::{
    HEADER_METHOD, HEADER_PROTOCOL_VERSION, META_CLIENT_CAPABILITIES, META_PROTOCOL_VERSION,
    META_SUBSCRIPTION_ID, METHOD_LISTEN, NOTIFICATION_ACKNOWLEDGED, NOTIFICATION_TASK,
    PROTOCOL_VERSION, TASKS_EXTENSION, codes,
};
use crate::store::Change;
use crate::store::changes::{ends, stale};
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
}

fn error_data(status: StatusCode, id: Value, code: i64, message: &str, data: Value) -> Response {
    let body = json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message, "data": data}});
    (
        status,
        [(http::header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// Validate the request like any other, then stream.
pub async fn serve(
    state: Arc<McpState>,
    tenant: Tenant,
    headers: &HeaderMap,
    msg: Value,
) -> Response {
    if let Some(refusal) = media_refusal(headers) {
        return refusal.into_response();
    }
    let id = msg.get("id").cloned().unwrap_or(Value::Null);
    let params = msg.get("params").cloned().unwrap_or_else(|| json!({}));
    if let Some(refused) = version_refusal(headers, &params, &id) {
        return refused;
    }
    let requested = params
        .get("notifications")
        .cloned()
        .unwrap_or_else(|| json!({}));
    let task_ids = match requested_tasks(&params, &requested) {
        Ok(ids) => ids,
        Err(why) => return rpc_error(StatusCode::OK, id, codes::INVALID_PARAMS, why),
    };
    if !task_ids.is_empty() && !declares_tasks_in(Some(&params)) {
        return error_data(
            StatusCode::BAD_REQUEST,
            id,
            codes::MISSING_CAPABILITY,
            "taskIds need the io.modelcontextprotocol/tasks extension",
            json!({"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}}),
        );
    }
    // Following tasks is watching Runs: `watch runs` in the namespace, as DESIGN's table says.
    // Each task then needs what `tasks/get` needs (`get runs` and the owner rule), so a stream
    // shows no task its caller could not read.
    match allowed(&state, &tenant, Verb::Watch, Resource::Runs).await {
        Ok(true) => {}
        Ok(false) => {
            let e = forbidden(&tenant, Verb::Watch, Resource::Runs);
            return rpc_error(StatusCode::OK, id, e.code.0.into(), &e.message);
        }
        Err(_) => {
            return rpc_error(
                StatusCode::SERVICE_UNAVAILABLE,
                id,
                codes::INTERNAL_ERROR,
                "authorization is unavailable; retry later",
            );
        }
    }
    // The stream's slot before any per-task work: a caller at its limit costs no reads.
    let Some(slot) = StreamSlot::take(&state, &tenant.identity.principal.username) else {
        return rpc_error(
            StatusCode::TOO_MANY_REQUESTS,
            id,
            codes::INVALID_REQUEST,
            "too many open subscriptions/listen streams for this caller; close one first",
        );
    };
    let Ok(readable) = readable_tasks(&state, &tenant, task_ids).await else {
        return rpc_error(
            StatusCode::SERVICE_UNAVAILABLE,
            id,
            codes::INTERNAL_ERROR,
            "the store or authorization is unavailable; retry later",
        );
    };
    // A subscription to tasks alone, none of which the caller may read, follows nothing: it
    // ends after its acknowledgement instead of holding a connection open.
    let follows_nothing = readable.is_empty()
        && requested
            .as_object()
            .is_some_and(|o| o.keys().all(|k| k == "taskIds"))
        && requested
            .get("taskIds")
            .is_some_and(|t| t.as_array().is_some_and(|a| !a.is_empty()));
    let reader = Reader::new(state, tenant, bearer(headers));
    stream(reader, id, readable, follows_nothing, slot)
}

/// Whom a stream shows tasks to, and the bearer token it was opened with.
#[derive(Clone)]
struct Reader {
    state: Arc<McpState>,
    tenant: Tenant,
    token: Option<Arc<str>>,
    /// Cancelled once the token no longer signs the caller in: the stream ends with that
    /// error, not as if its tasks had ended.
    signed_out: CancellationToken,
}

impl Reader {
    /// The reader of a stream `tenant` opened with bearer `token`.
    fn new(state: Arc<McpState>, tenant: Tenant, token: Option<&str>) -> Self {
        Self {
            state,
            tenant,
            token: token.map(Arc::from),
            signed_out: CancellationToken::new(),
        }
    }

    /// Whether the caller may still be shown `run`: still signed in with the stream's token,
    /// and still allowed to read it.
    async fn may_read(&self, run: &crate::api::Run) -> bool {
        if !still_signed_in(&self.state, &self.tenant, self.token.as_deref()).await {
            self.signed_out.cancel();
            return false;
        }
        may_read(&self.state, &self.tenant, run).await
    }
}

/// Of `task_ids`, once each, those the caller may read; an error when one cannot be looked
/// at now (left out, it would look unknown to the caller, and it is not).
async fn readable_tasks(
    state: &McpState,
    tenant: &Tenant,
    task_ids: Vec<String>,
) -> Result<Vec<String>, ErrorData> {
    let mut seen = std::collections::HashSet::new();
    let mut readable = Vec::new();
    for t in task_ids {
        if seen.insert(t.clone()) && readable_run(state, tenant, &t).await?.is_some() {
            readable.push(t);
        }
    }
    Ok(readable)
}

/// Most tasks one subscription follows: each is an access check and a read before the
/// acknowledgement, and a follower after it.
pub(crate) const MAX_TASK_IDS: usize = 256;

/// The task ids a subscription asks to follow (`params.notifications.taskIds`), or why the
/// request is malformed.
fn requested_tasks(params: &Value, requested: &Value) -> Result<Vec<String>, &'static str> {
    if params.get("taskIds").is_some() {
        return Err("taskIds belongs under notifications: params.notifications.taskIds");
    }
    match requested.get("taskIds") {
        None | Some(Value::Null) => Ok(vec![]),
        Some(Value::Array(ids)) if ids.len() > MAX_TASK_IDS => {
            Err("notifications.taskIds lists at most 256 tasks: subscribe again for more")
        }
        Some(Value::Array(ids)) if ids.iter().all(Value::is_string) => Ok(ids
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect()),
        Some(_) => Err("notifications.taskIds must be a list of strings"),
    }
}

/// The refusal of a request whose protocol version (header and `_meta`) or `Mcp-Method` header
/// is missing or wrong; `None` when both are right.
fn version_refusal(headers: &HeaderMap, params: &Value, id: &Value) -> Option<Response> {
    let id = id.clone();
    let meta = params.get("_meta");
    let meta_version = meta
        .and_then(|m| m.get(META_PROTOCOL_VERSION))
        .and_then(Value::as_str);
    let Some(version) = header(headers, HEADER_PROTOCOL_VERSION) else {
        return Some(rpc_error(
            StatusCode::BAD_REQUEST,
            id,
            codes::HEADER_MISMATCH,
            "missing MCP-Protocol-Version header",
        ));
    };
    // A header that disagrees with the body is a mismatch before it is an unsupported version:
    // "unsupported, use 2026-07-28" would send the client back with what its body already says.
    if meta_version.is_some_and(|m| m != version) {
        return Some(rpc_error(
            StatusCode::BAD_REQUEST,
            id,
            codes::HEADER_MISMATCH,
            "MCP-Protocol-Version header does not match _meta",
        ));
    }
    if version != PROTOCOL_VERSION {
        return Some(error_data(
            StatusCode::BAD_REQUEST,
            id,
            codes::UNSUPPORTED_VERSION,
            "unsupported protocol version",
            json!({"requested": version, "supported": [PROTOCOL_VERSION]}),
        ));
    }
    if header(headers, HEADER_METHOD) != Some(METHOD_LISTEN) {
        return Some(rpc_error(
            StatusCode::BAD_REQUEST,
            id,
            codes::HEADER_MISMATCH,
            "Mcp-Method header does not match the method",
        ));
    }
    let caps = meta.and_then(|m| m.get(META_CLIENT_CAPABILITIES));
    if meta_version.is_none() || caps.is_none() {
        return Some(rpc_error(
            StatusCode::BAD_REQUEST,
            id,
            codes::INVALID_PARAMS,
            "request _meta is missing protocolVersion or clientCapabilities",
        ));
    }
    None
}

/// One of a principal's `subscriptions/listen` streams; counted while it lives.
struct StreamSlot {
    streams: Arc<std::sync::Mutex<std::collections::HashMap<String, usize>>>,
    who: String,
}

impl StreamSlot {
    fn take(state: &McpState, who: &str) -> Option<Self> {
        let mut open = state.streams.lock().expect("streams lock");
        let n = open.entry(who.to_owned()).or_default();
        if *n >= state.config.max_streams_per_principal {
            return None;
        }
        *n += 1;
        Some(Self {
            streams: state.streams.clone(),
            who: who.to_owned(),
        })
    }
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let mut open = self.streams.lock().expect("streams lock");
        if let Some(n) = open.get_mut(&self.who) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.who);
            }
        }
    }
}

fn frame(v: Value) -> Result<Event, Infallible> {
    Ok(Event::default().data(v.to_string()))
}

/// Send the task view of `current`, then of every change of it that the caller would see
/// differently, until the Run ends, goes, the caller may no longer read it, or the stream
/// closes.
async fn follow(
    reader: Reader,
    current: Arc<crate::api::Run>,
    live: Option<crate::api::WorkflowSpec>,
    mut rx: tokio::sync::broadcast::Receiver<Change>,
    out: mpsc::Sender<Value>,
) {
    let mut last = projection::project(&current, live.as_ref());
    let _ = out
        .send(serde_json::to_value(&last).unwrap_or(Value::Null))
        .await;
    if current.phase().is_terminal() {
        return;
    }
    let mut seen = current;
    loop {
        let run = match rx.recv().await {
            Ok(Change::Updated(run)) if stale(&run, &seen) => continue,
            Ok(Change::Updated(run)) => run,
            Ok(Change::Deleted(d)) if ends(&d, &seen) => return,
            Ok(Change::Deleted(_)) | Err(RecvError::Lagged(_)) => continue,
            // After a gap the feed could not vouch for the Run: read it at the source (whether
            // the caller may still see it is asked below, as for any change).
            Err(RecvError::Closed) => {
                let name = seen.metadata.name.clone().unwrap_or_default();
                rx = reader
                    .state
                    .events
                    .subscribe(&reader.tenant.namespace, &name);
                let mcp = RunwayMcp::new(reader.state.clone());
                match mcp.stored_run_now(&reader.tenant, &name).await {
                    Ok(run) if !stale(&run, &seen) => Arc::new(run),
                    Ok(_) => continue,
                    // Gone, or not to be read for a while: nothing more to show.
                    Err(_) => return,
                }
            }
        };
        seen = Arc::clone(&run);
        if !reader.may_read(&run).await {
            return;
        }
        let next = projection::project(&run, live.as_ref());
        if next != last {
            last = next;
            if out
                .send(serde_json::to_value(&last).unwrap_or(Value::Null))
                .await
                .is_err()
            {
                return;
            }
        }
        if run.phase().is_terminal() {
            return;
        }
    }
}

/// A follower per task of `tasks` the caller may still read, sending its changes to `changes`.
async fn follow_all(
    reader: &Reader,
    tasks: &[String],
    changes: mpsc::Sender<Value>,
) -> tokio::task::JoinSet<()> {
    let (state, tenant) = (&reader.state, &reader.tenant);
    let mut followers = tokio::task::JoinSet::new();
    for t in tasks {
        let rx = state.events.subscribe(&tenant.namespace, t);
        // Read again after subscribing, so that no change falls between; readable a moment
        // ago at the acknowledgement, a task that cannot be read now is left out.
        let Ok(Some(current)) = readable_run(state, tenant, t).await else {
            continue;
        };
        let live = live_spec(state, &current).await;
        followers.spawn(follow(reader.clone(), current, live, rx, changes.clone()));
    }
    followers
}

fn stream(
    reader: Reader,
    id: Value,
    tasks: Vec<String>,
    end_at_once: bool,
    slot: StreamSlot,
) -> Response {
    let (tx, rx) = mpsc::channel::<Result<Event, Infallible>>(64);
    let sub_meta = json!({ META_SUBSCRIPTION_ID: id });
    let ack = json!({
        "jsonrpc": "2.0",
        "method": NOTIFICATION_ACKNOWLEDGED,
        "params": {"notifications": {"taskIds": tasks}, "_meta": sub_meta},
    });
    let keep_alive = reader.state.config.keep_alive;
    tokio::spawn(async move {
        let state = &reader.state;
        // Counted until the stream ends (released before the last frame, so a client that has
        // read the whole stream may open the next one at once).
        let slot = slot;
        if tx.send(frame(ack)).await.is_err() {
            return;
        }
        let (changes_tx, mut changes) = mpsc::channel::<Value>(256);
        // Dropped with this task: the followers end with the stream.
        let _followers = follow_all(&reader, &tasks, changes_tx).await;
        let open = !tasks.is_empty();
        loop {
            if end_at_once {
                break;
            }
            // Biased: a follower that ended because the caller was signed out must not be taken
            // for every task having ended.
            tokio::select! {
                biased;
                _ = tx.closed() => return,
                () = reader.signed_out.cancelled() => {
                    drop(slot);
                    let refused = json!({"jsonrpc": "2.0", "id": id, "error": signed_out()});
                    let _ = tx.send(frame(refused)).await;
                    return;
                }
                _ = state.shutdown.cancelled() => break,
                msg = changes.recv(), if open => match msg {
                    Some(mut task) => {
                        task["_meta"] = sub_meta.clone();
                        let n = json!({"jsonrpc": "2.0", "method": NOTIFICATION_TASK, "params": task});
                        if tx.send(frame(n)).await.is_err() {
                            return;
                        }
                    }
                    // Every followed task reached a terminal state: end the subscription.
                    None => break,
                },
            }
        }
        let done = json!({"jsonrpc": "2.0", "id": id, "result": {"resultType": "complete", "_meta": sub_meta}});
        drop(slot);
        let _ = tx.send(frame(done)).await;
    });
    let mut resp = Sse::new(ReceiverStream::new(rx))
        .keep_alive(KeepAlive::new().interval(keep_alive))
        .into_response();
    no_proxy_buffering(&mut resp);
    resp
}
