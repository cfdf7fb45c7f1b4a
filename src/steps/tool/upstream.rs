//! One attempt against an upstream MCP server: a call, the MRTR retry, or following the
//! upstream task it created.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use reqwest::header::{HeaderName, HeaderValue as HttpHeaderValue};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, GetTaskParams, JsonObject,
    MetaObject, RequestMetaObject, TaskPayload, UpdateTaskParams,
};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::Value;
use tracing::Instrument;

use super::keyed::KeyedClient;
use super::outcomes::*;
use crate::api::ErrorClass;
use crate::dial::{self, Abilities, Session};
use crate::engine::Outcome;
use crate::protocol::{META_IDEMPOTENCY_KEY, codes};
use crate::steps::http::MAX_RESPONSE_BYTES;

/// Polls of an upstream task that may fail transiently in a row before the attempt fails
/// (waiting 0.25, 0.5, 1 and 2 s between them: long enough for an upstream to restart).
pub(super) const GET_RETRIES: u32 = 4;
/// First wait after a transiently failed poll; it doubles.
pub(super) const GET_BACKOFF: Duration = Duration::from_millis(250);

/// Time allowed for each `tasks/get`, `tasks/update` and `tasks/cancel` request.
pub(super) const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Time allowed for the best-effort `tasks/cancel` sent when a Run is cancelled mid-attempt.
pub(super) const CANCEL_TIMEOUT: Duration = Duration::from_secs(5);
/// Poll interval when the upstream suggests none.
pub(super) const DEFAULT_POLL: Duration = Duration::from_secs(1);
/// The shortest poll interval, whatever the upstream suggests.
pub(super) const MIN_POLL: Duration = Duration::from_millis(50);

/// How long to wait between polls of an upstream task that suggested `asked` milliseconds:
/// what it asked (clients should honour it, and polling faster may get the step rate-limited),
/// never below [`MIN_POLL`]; the attempt's deadline still bounds every wait.
pub(super) fn poll_interval(asked: u64) -> Duration {
    Duration::from_millis(asked).max(MIN_POLL)
}

/// What one attempt asks of the upstream.
pub(super) struct Call<'a> {
    pub(super) tool: &'a str,
    pub(super) arguments: &'a Value,
    pub(super) upstream_task_id: Option<&'a str>,
    pub(super) answers: Option<&'a Value>,
    pub(super) request_state: Option<&'a str>,
    pub(super) idempotency_key: String,
    /// Set once the session is open if the upstream declared the Tasks extension (and this
    /// call asks for it): only then may the call be answered with a task it made.
    pub(super) may_make_task: &'a AtomicBool,
}

/// The `Idempotency-Key` header of a call: the attempt's key; for an MRTR retry, which carries
/// answers (another request body under the same attempt), the key of that round, named by its
/// answers and the upstream's `requestState`, so that the retry sent again after a restart
/// carries the same one and no two different bodies ever share a key. The `_meta` key stays the
/// attempt's: a Runway upstream turns every round into the same Run.
fn header_key(call: &Call<'_>) -> String {
    match call.answers {
        None => call.idempotency_key.clone(),
        Some(answers) => {
            let round = format!("{}\n{answers}", call.request_state.unwrap_or_default());
            format!(
                "{}/{:016x}",
                call.idempotency_key,
                crate::engine::stable_hash(round.bytes())
            )
        }
    }
}

/// An upstream MCP server with its resolved headers.
pub(super) struct Upstream {
    pub(super) client: reqwest::Client,
    pub(super) url: String,
    pub(super) headers: HashMap<HeaderName, HttpHeaderValue>,
    pub(super) tasks: bool,
}

impl Upstream {
    /// A session with the upstream.
    pub(super) async fn connect(&self) -> Result<Session, Outcome> {
        self.connect_keyed(None).await
    }

    /// A session whose `tools/call` requests carry `Idempotency-Key: key` (as an `http` step's
    /// do), besides the `_meta` key of the call, so an upstream (or a proxy in front of it) that
    /// deduplicates by either sees a retry as the same call.
    async fn connect_keyed(&self, key: Option<&str>) -> Result<Session, Outcome> {
        let key = key.and_then(|k| HttpHeaderValue::from_str(k).ok());
        let client = KeyedClient::new(self.client.clone(), key);
        // What an `http` step reads at most, not rmcp's 16 MiB: a response is parsed whole, at
        // tens of times its size for some JSON, and a fan-out makes many at once.
        let cfg = StreamableHttpClientTransportConfig::with_uri(self.url.clone())
            .custom_headers(self.headers.clone())
            .max_json_response_size(MAX_RESPONSE_BYTES)
            .max_sse_event_size(MAX_RESPONSE_BYTES);
        let abilities = Abilities {
            urls: false,
            tasks: self.tasks,
        };
        dial::open(client, cfg, abilities).await.map_err(|e| {
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

    pub(super) async fn attempt(&self, call: &Call<'_>) -> Outcome {
        let session = match self.connect_keyed(Some(&header_key(call))).await {
            Ok(s) => s,
            Err(o) => return o,
        };
        match call.upstream_task_id {
            Some(id) => self.resume(&session, id, call.answers).await,
            None => {
                let declared = session
                    .peer_info()
                    .is_some_and(|i| i.capabilities.supports_tasks());
                call.may_make_task
                    .store(self.tasks && declared, Ordering::Release);
                self.call(&session, call).await
            }
        }
    }

    /// Follow a recorded upstream task, forwarding answers first.
    pub(super) async fn resume(
        &self,
        session: &Session,
        id: &str,
        answers: Option<&Value>,
    ) -> Outcome {
        let mut answered = BTreeSet::new();
        if let Some(Value::Object(answers)) = answers {
            answered = answers.keys().cloned().collect();
            let responses = answers.clone().into_iter().collect();
            let update = session.update_task(UpdateTaskParams::new(id.to_owned(), responses));
            match tokio::time::timeout(REQUEST_TIMEOUT, update).await {
                Ok(Ok(())) => {}
                // Sent already by an attempt that did not live to record it (a crash, a shard
                // moving on): the upstream took them then and refuses them now. A task that no
                // longer asks for any of them has them.
                Ok(Err(_)) if self.taken(session, id, &answered).await => {}
                Ok(Err(e)) => {
                    return task_goes_on(service_failure(&format!("tasks/update {id}"), e));
                }
                Err(_) => return request_timeout(&format!("tasks/update {id}")),
            }
        }
        self.follow(session, id, &answered).await
    }

    /// Whether upstream task `id` has the answers to `keys` already: it asks for none of them
    /// (or asks for nothing any more). `false` when that cannot be told now.
    async fn taken(&self, session: &Session, id: &str, keys: &BTreeSet<String>) -> bool {
        let got = tokio::time::timeout(
            REQUEST_TIMEOUT,
            session.get_task(GetTaskParams::new(id.to_owned())),
        )
        .await;
        match got {
            Ok(Ok(t)) => match t.task.payload {
                TaskPayload::InputRequired { input_requests } => {
                    !input_requests.keys().any(|k| keys.contains(k))
                }
                _ => true,
            },
            _ => false,
        }
    }

    /// A fresh `tools/call`, or the MRTR retry with answers and the upstream `requestState`.
    pub(super) async fn call(&self, session: &Session, call: &Call<'_>) -> Outcome {
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
        // Every call carries its key — as a task or blocking, first call or MRTR retry — so a
        // retry after a crash repeats nothing at an upstream that deduplicates.
        let mut meta = JsonObject::new();
        meta.insert(
            META_IDEMPOTENCY_KEY.to_owned(),
            Value::String(call.idempotency_key.clone()),
        );
        let client = crate::telemetry::mcp_client_span(call.tool, &self.url);
        // The upstream's spans join the Run's trace: the MCP convention carries the W3C
        // trace context in `_meta`.
        for (key, value) in client.in_scope(crate::telemetry::current_context) {
            meta.insert(key, Value::String(value));
        }
        params.meta = Some(RequestMetaObject(MetaObject(meta)));
        let what = format!("tools/call {} on {}", call.tool, self.url);
        let outcome = self
            .answer_of_call(session, params, &what)
            .instrument(client.clone())
            .await;
        crate::telemetry::attempt_ended(&client, &outcome);
        outcome
    }

    async fn answer_of_call(
        &self,
        session: &Session,
        params: CallToolRequestParams,
        what: &str,
    ) -> Outcome {
        let what = what.to_owned();
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
    pub(super) async fn follow(
        &self,
        session: &Session,
        id: &str,
        answered: &BTreeSet<String>,
    ) -> Outcome {
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
                interval = poll_interval(ms);
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
    pub(super) async fn cancel_task(&self, id: &str) -> Result<(), Outcome> {
        let session = self.connect().await?;
        session
            .cancel_task(CancelTaskParams::new(id.to_owned()))
            .await
            .map_err(|e| service_failure(&format!("tasks/cancel {id} on {}", self.url), e))
    }

    /// Poll an upstream task whose cancel was acknowledged until it has ended: an ack says the
    /// cancel was received, not that the work stopped. A task the upstream no longer knows
    /// has ended too.
    pub(super) async fn wait_ended(&self, id: &str) -> Result<(), Outcome> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_upstream_poll_interval_is_honoured_above_the_floor() {
        assert_eq!(poll_interval(300_000), Duration::from_secs(300));
        assert_eq!(poll_interval(1_500), Duration::from_millis(1_500));
        assert_eq!(poll_interval(0), MIN_POLL);
    }
}
