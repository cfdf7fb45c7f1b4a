//! `tool` steps: call a tool on an upstream MCP server (2026-07-28, Streamable HTTP) and follow
//! the upstream task it may create.
//!
//! One attempt is one of:
//! - a fresh `tools/call` (or the MRTR retry carrying answers and the upstream `requestState`):
//!   a result ends the attempt, an `input_required` result surfaces as this Run's input, and a
//!   `CreateTaskResult` is reported as a checkpoint at once, so the upstream task id is in status
//!   before anything else happens;
//! - following a recorded upstream task: forward answers with `tasks/update` first, then poll
//!   `tasks/get` at the upstream's `pollIntervalMs` until it ends or asks for input.
//!
//! The attempt deadline bounds all of it. When the Run is cancelled (or deleted) mid-attempt,
//! an in-flight blocking call is dropped (the upstream sees the request cancelled) and a known
//! upstream task gets a best-effort `tasks/cancel`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use reqwest::header::{HeaderName, HeaderValue as HttpHeaderValue};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, ClientCapabilities, ClientConfig,
    GetTaskParams, Implementation, InputRequiredResult, JsonObject, MetaObject, ProtocolVersion,
    RequestMetaObject, TaskPayload, UpdateTaskParams,
};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt, RoleClient, RunningService};
use rmcp::transport::streamable_http_client::{
    StreamableHttpClientTransportConfig, StreamableHttpError,
};
use rmcp::transport::{DynamicTransportError, StreamableHttpClientTransport};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::Executor;
use crate::api::{ErrorClass, Run, RunError, ToolStep, UpstreamTaskMode};
use crate::engine::{self, Action, Effect, HeaderValue, Outcome};
use crate::protocol::{META_IDEMPOTENCY_KEY, TASKS_EXTENSION, codes};
use crate::store::SecretSource;

/// Polls of an upstream task that may fail transiently in a row before the attempt fails
/// (waiting 0.25, 0.5, 1 and 2 s between them: long enough for an upstream to restart).
const GET_RETRIES: u32 = 4;
/// First wait after a transiently failed poll; it doubles.
const GET_BACKOFF: Duration = Duration::from_millis(250);
/// Time allowed for a cleanup: the upstream's cancel ack and its task reaching an end.
const CLEANUP_TIMEOUT: Duration = Duration::from_secs(60);

/// Whether a failed poll is worth repeating: the connection, a timeout, an overloaded or
/// failing server; not an answer that the task or request is wrong.
fn is_transient(out: &Outcome) -> bool {
    let class = match out {
        Outcome::Failed { class, .. } | Outcome::UpstreamFailed { class, .. } => *class,
        _ => return false,
    };
    matches!(
        class,
        ErrorClass::Timeout
            | ErrorClass::Connection
            | ErrorClass::ServerError
            | ErrorClass::TooManyRequests
    )
}

/// Time allowed for each `tasks/get`, `tasks/update` and `tasks/cancel` request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Time allowed for the best-effort `tasks/cancel` sent when a Run is cancelled mid-attempt.
const CANCEL_TIMEOUT: Duration = Duration::from_secs(5);
/// Poll interval when the upstream suggests none.
const DEFAULT_POLL: Duration = Duration::from_secs(1);
/// Bounds of the poll interval, whatever the upstream suggests.
const MIN_POLL: Duration = Duration::from_millis(50);
const MAX_POLL: Duration = Duration::from_secs(60);
/// Longest upstream text kept in a failure message, in characters.
const MAX_MESSAGE_CHARS: usize = 500;

type Session = RunningService<RoleClient, ClientConfig>;

/// Executes `tool` steps and cancels their upstream tasks.
pub(crate) struct ToolExecutor {
    client: reqwest::Client,
    egress: super::egress::Egress,
    secrets: Arc<dyn SecretSource>,
}

impl ToolExecutor {
    /// A new executor; `valueFrom` headers are read from `secrets`; it connects where
    /// `egress` allows.
    pub fn new(secrets: Arc<dyn SecretSource>, egress: &super::egress::Egress) -> Self {
        Self {
            client: egress.client(),
            egress: egress.clone(),
            secrets,
        }
    }

    /// Resolve the headers of the upstream server of `step`.
    async fn upstream(
        &self,
        run: &Run,
        step: &ToolStep,
        headers: &[HeaderValue],
    ) -> Result<Upstream, Outcome> {
        let url = reqwest::Url::parse(&step.server.url).map_err(|e| {
            Outcome::internal(format!("tool.server.url {:?}: {e}", step.server.url))
        })?;
        self.egress.check_url(&url).map_err(Outcome::internal)?;
        let resolved = super::resolve_headers(&*self.secrets, run, headers)
            .await
            .map_err(|e| Outcome::internal(format!("tool.server.{e}")))?;
        let mut map = HashMap::new();
        for (name, value) in resolved {
            let name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|e| Outcome::internal(format!("tool.server.header {name}: {e}")))?;
            let value = HttpHeaderValue::from_str(&value)
                .map_err(|e| Outcome::internal(format!("tool.server.header {name}: {e}")))?;
            map.insert(name, value);
        }
        Ok(Upstream {
            client: self.client.clone(),
            url: step.server.url.clone(),
            headers: map,
            tasks: step.task == UpstreamTaskMode::Auto,
        })
    }

    async fn cleanup(&self, run: &Run, step: &str, task_id: &str) -> Outcome {
        let (tool, headers) = match engine::upstream_server(run, step) {
            Ok(s) => s,
            Err(e) => return Outcome::internal(e),
        };
        let up = match self.upstream(run, &tool, &headers).await {
            Ok(up) => up,
            Err(o) => return o,
        };
        let cancelled = async {
            up.cancel_task(task_id).await?;
            up.wait_ended(task_id).await
        };
        match tokio::time::timeout(CLEANUP_TIMEOUT, cancelled).await {
            Ok(Ok(())) => {
                Outcome::Succeeded(Value::String(format!("upstream task {task_id} cancelled")))
            }
            Ok(Err(o)) => o,
            Err(_) => Outcome::Failed {
                detail: None,
                class: ErrorClass::Timeout,
                message: format!(
                    "tasks/cancel {task_id} on {}: the task has not ended within {}s",
                    up.url,
                    CLEANUP_TIMEOUT.as_secs()
                ),
            },
        }
    }
}

#[async_trait]
impl Executor for ToolExecutor {
    async fn execute(
        &self,
        run: &Run,
        effect: &Effect,
        cancel: CancellationToken,
    ) -> Option<Outcome> {
        let (step, arguments, headers, upstream_task_id, answers, request_state) =
            match &effect.action {
                Action::Tool {
                    step,
                    arguments,
                    headers,
                    upstream_task_id,
                    answers,
                    request_state,
                } => (
                    step,
                    arguments,
                    headers,
                    upstream_task_id,
                    answers,
                    request_state,
                ),
                Action::Cleanup(c) => {
                    let Some(id) = &c.cancel_upstream_task else {
                        return Some(Outcome::internal("a tool cleanup needs an upstream task"));
                    };
                    return tokio::select! {
                        out = self.cleanup(run, &c.step, id) => Some(out),
                        _ = cancel.cancelled() => None,
                    };
                }
                _ => return Some(Outcome::internal("not a tool step")),
            };
        let up = match self.upstream(run, step, headers).await {
            Ok(up) => up,
            Err(o) => return Some(o),
        };
        let call = Call {
            tool: &step.name,
            arguments,
            upstream_task_id: upstream_task_id.as_deref(),
            answers: answers.as_ref(),
            request_state: request_state.as_deref(),
            // A crash resumes the same attempt, so it repeats this key and an upstream that
            // honours it hands back the same task; a retry is a new call with a new key.
            idempotency_key: format!("{}/{}", effect.idempotency_key, effect.attempt),
        };
        let attempt = super::within_deadline(effect, up.attempt(&call), || Outcome::Failed {
            detail: None,
            class: ErrorClass::Timeout,
            message: match call.upstream_task_id {
                Some(id) => format!("timed out following upstream task {id}"),
                None => format!("tools/call {} on {}: timed out", call.tool, up.url),
            },
        });
        tokio::select! {
            out = attempt => Some(out),
            _ = cancel.cancelled() => {
                // Dropping the attempt aborts a blocking call. A known upstream task is told
                // now too: the Run may have been deleted, and then no cleanup follows.
                if let Some(id) = call.upstream_task_id {
                    match tokio::time::timeout(CANCEL_TIMEOUT, up.cancel_task(id)).await {
                        Ok(Ok(())) => tracing::info!(url = %up.url, task = id, "upstream task cancelled"),
                        Ok(Err(o)) => tracing::warn!(url = %up.url, task = id, outcome = ?o, "cannot cancel upstream task"),
                        Err(_) => tracing::warn!(url = %up.url, task = id, "cancelling upstream task timed out"),
                    }
                }
                None
            }
        }
    }
}

/// The outcome of an upstream task that failed with `error`: the task is over whatever its
/// error says.
fn task_failed(id: &str, error: &Value) -> Outcome {
    let code = error
        .get("code")
        .and_then(Value::as_i64)
        .unwrap_or(codes::INTERNAL_ERROR);
    let message = error
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or("failed");
    let mut out = rpc_failure(
        &format!("upstream task {id} failed"),
        code,
        message,
        error.get("data").cloned(),
    );
    if let Outcome::UpstreamFailed { call_ended, .. } = &mut out {
        *call_ended = true;
    }
    out
}

/// What one attempt asks of the upstream.
struct Call<'a> {
    tool: &'a str,
    arguments: &'a Value,
    upstream_task_id: Option<&'a str>,
    answers: Option<&'a Value>,
    request_state: Option<&'a str>,
    idempotency_key: String,
}

/// An upstream MCP server with its resolved headers.
struct Upstream {
    client: reqwest::Client,
    url: String,
    headers: HashMap<HeaderName, HttpHeaderValue>,
    tasks: bool,
}

impl Upstream {
    async fn connect(&self) -> Result<Session, Outcome> {
        let cfg = StreamableHttpClientTransportConfig::with_uri(self.url.clone())
            .custom_headers(self.headers.clone());
        let transport = StreamableHttpClientTransport::with_client(self.client.clone(), cfg);
        let mut caps = json!({"elicitation": {"form": {}}});
        if self.tasks {
            caps["extensions"] = json!({ TASKS_EXTENSION: {} });
        }
        let caps: ClientCapabilities =
            serde_json::from_value(caps).expect("client capabilities deserialize");
        ClientConfig::new(
            caps,
            Implementation::new("runway", env!("CARGO_PKG_VERSION")),
        )
        .serve_with_lifecycle(
            transport,
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .map_err(|e| {
            let what = format!("connecting to {}", self.url);
            match e {
                rmcp::service::ClientInitializeError::JsonRpcError(err) => {
                    rpc_failure(&what, err.code.0 as i64, &err.message, err.data.clone())
                }
                rmcp::service::ClientInitializeError::TransportError { error, .. } => {
                    transport_failure(&what, &error)
                }
                other => transport_failure(&what, &other),
            }
        })
    }

    async fn attempt(&self, call: &Call<'_>) -> Outcome {
        let session = match self.connect().await {
            Ok(s) => s,
            Err(o) => return o,
        };
        match call.upstream_task_id {
            Some(id) => self.resume(&session, id, call.answers).await,
            None => self.call(&session, call).await,
        }
    }

    /// Follow a recorded upstream task, forwarding answers first.
    async fn resume(&self, session: &Session, id: &str, answers: Option<&Value>) -> Outcome {
        let mut answered = BTreeSet::new();
        if let Some(Value::Object(answers)) = answers {
            answered = answers.keys().cloned().collect();
            let responses = answers.clone().into_iter().collect();
            let update = session.update_task(UpdateTaskParams::new(id.to_owned(), responses));
            match tokio::time::timeout(REQUEST_TIMEOUT, update).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return service_failure(&format!("tasks/update {id}"), e),
                Err(_) => return request_timeout(&format!("tasks/update {id}")),
            }
        }
        self.follow(session, id, &answered).await
    }

    /// A fresh `tools/call`, or the MRTR retry with answers and the upstream `requestState`.
    async fn call(&self, session: &Session, call: &Call<'_>) -> Outcome {
        let arguments: JsonObject = match call.arguments {
            Value::Object(m) => m.clone(),
            other => {
                return Outcome::internal(format!("tool.arguments must be an object, not {other}"));
            }
        };
        let mut params = CallToolRequestParams::new(call.tool.to_owned()).with_arguments(arguments);
        if let Some(Value::Object(answers)) = call.answers {
            params.input_responses = Some(answers.clone().into_iter().collect());
            params.request_state = call.request_state.map(str::to_owned);
        }
        if self.tasks {
            let mut meta = JsonObject::new();
            meta.insert(
                META_IDEMPOTENCY_KEY.to_owned(),
                Value::String(call.idempotency_key.clone()),
            );
            params.meta = Some(RequestMetaObject(MetaObject(meta)));
        }
        let what = format!("tools/call {} on {}", call.tool, self.url);
        match session.call_tool_once(params).await {
            Ok(CallToolResponse::Complete(result)) => {
                result_outcome(&what, serde_json::to_value(result).unwrap_or(Value::Null))
            }
            Ok(CallToolResponse::InputRequired(ir)) => input_required(&what, ir),
            // Recorded before anything else; the next attempt follows it.
            Ok(CallToolResponse::Task(t)) => Outcome::Checkpoint {
                upstream_task_id: Some(t.task.task_id),
                job_name: None,
            },
            Ok(_) => Outcome::Failed {
                detail: None,
                class: ErrorClass::ServerError,
                message: format!("{what}: unexpected response"),
            },
            Err(e) => service_failure(&what, e),
        }
    }

    /// Poll an upstream task until it ends or asks for input that was not answered yet.
    async fn follow(&self, session: &Session, id: &str, answered: &BTreeSet<String>) -> Outcome {
        let what = format!("tasks/get {id} on {}", self.url);
        let mut interval = DEFAULT_POLL;
        // After a transport failure the session may be gone: later polls use a fresh one.
        let mut fresh: Option<Session> = None;
        let mut transient = 0;
        loop {
            let current = fresh.as_ref().unwrap_or(session);
            let got = tokio::time::timeout(
                REQUEST_TIMEOUT,
                current.get_task(GetTaskParams::new(id.to_owned())),
            )
            .await;
            let failure = match got {
                Ok(Ok(t)) => {
                    transient = 0;
                    Ok(t.task)
                }
                Ok(Err(e)) => Err(service_failure(&what, e)),
                Err(_) => Err(request_timeout(&what)),
            };
            let task = match failure {
                Ok(task) => task,
                // The upstream task runs on while its server restarts or a poll is lost: a
                // transient failure of a poll is retried a few times before the attempt fails.
                Err(out) if is_transient(&out) && transient < GET_RETRIES => {
                    transient += 1;
                    tokio::time::sleep(GET_BACKOFF * 2u32.pow(transient - 1)).await;
                    if let Ok(s) = self.connect().await {
                        fresh = Some(s);
                    }
                    continue;
                }
                Err(out) => return out,
            };
            if let Some(ms) = task.task.poll_interval_ms {
                interval = Duration::from_millis(ms).clamp(MIN_POLL, MAX_POLL);
            }
            match task.payload {
                TaskPayload::Completed { result } => {
                    return result_outcome(&format!("upstream task {id}"), Value::Object(result));
                }
                TaskPayload::Failed { error } => return task_failed(id, &Value::Object(error)),
                TaskPayload::Cancelled => {
                    return Outcome::UpstreamFailed {
                        class: ErrorClass::ToolError,
                        message: format!("upstream task {id} was cancelled"),
                        error: None,
                        call_ended: true,
                    };
                }
                TaskPayload::InputRequired { input_requests } => {
                    // Keys are unique over a task's lifetime: the ones just answered may still
                    // show until the upstream has taken the answers.
                    let requests: BTreeMap<String, Value> = input_requests
                        .iter()
                        .filter(|(k, _)| !answered.contains(*k))
                        .map(|(k, r)| (k.clone(), request_value(r)))
                        .collect();
                    if !requests.is_empty() {
                        return Outcome::NeedsInput {
                            requests,
                            request_state: None,
                        };
                    }
                }
                _ => {}
            }
            tokio::time::sleep(interval).await;
        }
    }

    /// `tasks/cancel` on a fresh session.
    async fn cancel_task(&self, id: &str) -> Result<(), Outcome> {
        let session = self.connect().await?;
        session
            .cancel_task(CancelTaskParams::new(id.to_owned()))
            .await
            .map_err(|e| service_failure(&format!("tasks/cancel {id} on {}", self.url), e))
    }

    /// Poll an upstream task whose cancel was acknowledged until it has ended: an ack says the
    /// cancel was received, not that the work stopped. A task the upstream no longer knows
    /// has ended too.
    async fn wait_ended(&self, id: &str) -> Result<(), Outcome> {
        let session = self.connect().await?;
        let what = format!("tasks/get {id} on {}", self.url);
        let mut interval = MIN_POLL;
        loop {
            match session.get_task(GetTaskParams::new(id.to_owned())).await {
                Ok(t) => match t.task.payload {
                    TaskPayload::Completed { .. }
                    | TaskPayload::Failed { .. }
                    | TaskPayload::Cancelled => return Ok(()),
                    _ => {}
                },
                Err(rmcp::ServiceError::McpError(e))
                    if e.code.0 as i64 == codes::INVALID_PARAMS =>
                {
                    return Ok(());
                }
                Err(e) => return Err(service_failure(&what, e)),
            }
            tokio::time::sleep(interval).await;
            interval = (interval * 2).min(GET_BACKOFF * 8);
        }
    }
}

/// A `CallToolResult` as the step's outcome: output `structuredContent` when present, else the
/// content items; `isError` fails the attempt as a tool error.
fn result_outcome(what: &str, result: Value) -> Outcome {
    if result.get("isError").and_then(Value::as_bool) == Some(true) {
        let text: Vec<&str> = result["content"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c.get("text").and_then(Value::as_str))
            .collect();
        let detail = if text.is_empty() {
            "the tool reported an error".to_owned()
        } else {
            text.join("\n")
        };
        return Outcome::UpstreamFailed {
            class: ErrorClass::ToolError,
            message: format!("{what}: {}", clip(&detail)),
            error: None,
            call_ended: true,
        };
    }
    Outcome::Succeeded(match result.get("structuredContent") {
        Some(sc) if !sc.is_null() => sc.clone(),
        _ => result.get("content").cloned().unwrap_or_else(|| json!([])),
    })
}

/// An upstream MRTR `input_required` result as this Run's input requests.
fn input_required(what: &str, ir: InputRequiredResult) -> Outcome {
    let requests: BTreeMap<String, Value> = ir
        .input_requests
        .iter()
        .flatten()
        .map(|(k, r)| (k.clone(), request_value(r)))
        .collect();
    if requests.is_empty() {
        return Outcome::Failed {
            detail: None,
            class: ErrorClass::ServerError,
            message: format!("{what}: input_required without input requests"),
        };
    }
    Outcome::NeedsInput {
        requests,
        request_state: ir.request_state,
    }
}

/// An upstream input request as `{method, params}`.
fn request_value(r: &impl serde::Serialize) -> Value {
    let v = serde_json::to_value(r).unwrap_or(Value::Null);
    json!({
        "method": v.get("method").cloned().unwrap_or_else(|| json!("elicitation/create")),
        "params": v.get("params").cloned().unwrap_or_else(|| json!({})),
    })
}

/// Whether an upstream JSON-RPC error is worth retrying: internal and generic server errors
/// are; request errors (`-32602`, `-32601`, …) are the caller's and are not.
fn rpc_class(code: i64) -> ErrorClass {
    match code {
        codes::INTERNAL_ERROR | -32000 => ErrorClass::ServerError,
        _ => ErrorClass::ClientError,
    }
}

fn rpc_failure(what: &str, code: i64, message: &str, data: Option<Value>) -> Outcome {
    let class = rpc_class(code);
    Outcome::UpstreamFailed {
        class,
        message: format!("{what}: upstream error {code}: {}", clip(message)),
        error: Some(RunError {
            code,
            message: clip(message),
            data,
        }),
        // A request error ends the call (or the task); a server error may pass.
        call_ended: class == ErrorClass::ClientError,
    }
}

fn service_failure(what: &str, e: rmcp::ServiceError) -> Outcome {
    match e {
        rmcp::ServiceError::McpError(err) => {
            rpc_failure(what, err.code.0 as i64, &err.message, err.data)
        }
        rmcp::ServiceError::Timeout { .. } => request_timeout(what),
        rmcp::ServiceError::TransportSend(error) => transport_failure(what, &error),
        other => transport_failure(what, &other),
    }
}

fn request_timeout(what: &str) -> Outcome {
    Outcome::Failed {
        detail: None,
        class: ErrorClass::Timeout,
        message: format!("{what}: timed out"),
    }
}

/// Classify a failure below JSON-RPC: HTTP status, timeout, or connection.
fn transport_failure(what: &str, e: &(dyn std::error::Error + 'static)) -> Outcome {
    let mut class = ErrorClass::Connection;
    // The HTTP client's own error says it best ("error sending request …: Connection refused").
    let mut detail = None;
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(h) = err.downcast_ref::<StreamableHttpError<reqwest::Error>>() {
            match h {
                StreamableHttpError::HttpStatus(s) => {
                    class = status_class(s.status);
                    detail = Some(format!("HTTP {}", s.status));
                    break;
                }
                StreamableHttpError::AuthRequired(_) => {
                    class = ErrorClass::ClientError;
                    detail = Some("authentication required (HTTP 401)".into());
                    break;
                }
                StreamableHttpError::InsufficientScope(_) => {
                    class = ErrorClass::ClientError;
                    detail = Some("insufficient scope (HTTP 403)".into());
                    break;
                }
                StreamableHttpError::Client(r) => {
                    class = reqwest_class(r);
                    detail = Some(error_chain(r));
                    break;
                }
                _ => {}
            }
        }
        if let Some(r) = err.downcast_ref::<reqwest::Error>() {
            class = reqwest_class(r);
            detail = Some(error_chain(r));
            break;
        }
        cur = err.source();
    }
    // Without a better one, the transport's own error, not its wrapper's type name.
    let detail = detail.unwrap_or_else(|| match e.downcast_ref::<DynamicTransportError>() {
        Some(d) => error_chain(d.error.as_ref()),
        None => error_chain(e),
    });
    Outcome::Failed {
        detail: None,
        class,
        message: format!("{what}: {}", clip(&detail)),
    }
}

fn status_class(status: u16) -> ErrorClass {
    match status {
        429 => ErrorClass::TooManyRequests,
        500..=599 => ErrorClass::ServerError,
        _ => ErrorClass::ClientError,
    }
}

fn reqwest_class(e: &reqwest::Error) -> ErrorClass {
    if e.is_timeout() {
        ErrorClass::Timeout
    } else if let Some(s) = e.status() {
        status_class(s.as_u16())
    } else {
        ErrorClass::Connection
    }
}

fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let next = c.to_string();
        if !s.contains(&next) {
            s.push_str(": ");
            s.push_str(&next);
        }
        cur = c.source();
    }
    s
}

fn clip(s: &str) -> String {
    match s.char_indices().nth(MAX_MESSAGE_CHARS) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_result_is_its_structured_content_or_its_content() {
        let out = result_outcome(
            "t",
            json!({"content": [{"type": "text", "text": "x"}], "structuredContent": {"n": 1}}),
        );
        assert_eq!(out, Outcome::Succeeded(json!({"n": 1})));
        let out = result_outcome("t", json!({"content": [{"type": "text", "text": "x"}]}));
        assert_eq!(
            out,
            Outcome::Succeeded(json!([{"type": "text", "text": "x"}]))
        );
    }

    #[test]
    fn is_error_is_a_tool_error_that_ends_the_call() {
        let out = result_outcome(
            "t",
            json!({"content": [{"type": "text", "text": "boom"}], "isError": true}),
        );
        let Outcome::UpstreamFailed {
            class,
            message,
            error,
            call_ended,
        } = out
        else {
            panic!("{out:?}")
        };
        assert_eq!(class, ErrorClass::ToolError);
        assert!(message.contains("boom"));
        assert!(error.is_none() && call_ended);
    }

    #[test]
    fn request_errors_are_not_retryable_and_server_errors_are() {
        assert_eq!(rpc_class(codes::INVALID_PARAMS), ErrorClass::ClientError);
        assert_eq!(rpc_class(codes::METHOD_NOT_FOUND), ErrorClass::ClientError);
        assert_eq!(rpc_class(codes::INTERNAL_ERROR), ErrorClass::ServerError);
        assert_eq!(status_class(503), ErrorClass::ServerError);
        assert_eq!(status_class(429), ErrorClass::TooManyRequests);
        assert_eq!(status_class(404), ErrorClass::ClientError);
        let Outcome::UpstreamFailed {
            error, call_ended, ..
        } = rpc_failure("x", -32602, "bad", None)
        else {
            panic!()
        };
        assert_eq!(error.unwrap().code, -32602);
        assert!(call_ended);
    }
}
