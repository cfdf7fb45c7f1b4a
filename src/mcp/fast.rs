//! `tasks/get`, `tools/call` answered with a task, and calls of Runway's own tools (the
//! console's list), in front of rmcp. Agents poll the first more than anything else and wait on
//! the second before their work starts, consoles poll the third, and rmcp's
//! stateless mode builds a service, spawns a task and parses the message a second time for
//! every POST. Only a request that every one of rmcp's checks would accept is answered here —
//! anything unusual (a missing or extra header, a weighted `Accept`, a Base64 `Mcp-Name`, a
//! float id, an unknown field, a call that would block or ask a question) goes on to rmcp,
//! which gives the protocol's answer. The answer itself comes from the same functions rmcp's
//! handler calls, as the same rmcp types; a task is written in rmcp's wire shape from borrowed
//! parts rather than through rmcp's serializer, which copies it first.

use std::borrow::Cow;

use axum::http::{HeaderMap, HeaderName, StatusCode, header};
use axum::response::{IntoResponse, Response};
use std::rc::Rc;
use std::sync::Arc;

use rmcp::model::{
    ClientCapabilities, CreateTaskResult, ErrorData, JsonRpcError, JsonRpcMessage, JsonRpcResponse,
    JsonRpcVersion2_0, MetaObject, RequestId, ResultType, ServerJsonRpcMessage, ServerResult,
};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use super::access::allowed;
use super::calls::{answer_mode, check_args};
use super::caps::{raw_declares_tasks, typed_declares_tasks};
use super::delivery::{Delivery, Guard};
use super::handler::RunwayMcp;
use super::headers::{check_param_headers, only};
use super::own_tools::is_builtin;
use super::projection::{Payload, Shown, TaskView};
use super::rendered::{self, Shape};
use super::state::{McpState, Tenant};
use super::{projection, tasks};
use crate::api::Run;
use crate::auth::{Resource, Verb};
use crate::protocol::{
    HEADER_METHOD, HEADER_NAME, HEADER_PROTOCOL_VERSION, META_CLIENT_CAPABILITIES,
    META_IDEMPOTENCY_KEY, META_PROTOCOL_VERSION, METHOD_CALL_TOOL, METHOD_GET_TASK,
    PROTOCOL_VERSION,
};

const JSON: &str = "application/json";
const EVENT_STREAM: &str = "text/event-stream";
static PROTOCOL_VERSION_HEADER: HeaderName = HeaderName::from_static(HEADER_PROTOCOL_VERSION);
static METHOD_HEADER: HeaderName = HeaderName::from_static(HEADER_METHOD);
static NAME_HEADER: HeaderName = HeaderName::from_static(HEADER_NAME);

/// A JSON-RPC request with exactly these fields (serde refuses unknown and repeated ones), its
/// `params` as shaped by the method: what makes it safe to answer without rmcp (in either era).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Envelope<'a, P> {
    #[serde(borrow)]
    pub(super) jsonrpc: Cow<'a, str>,
    #[serde(borrow)]
    pub(super) id: &'a RawValue,
    #[serde(borrow)]
    pub(super) method: Cow<'a, str>,
    pub(super) params: P,
}

/// The params of a `tasks/get` exactly as the protocol shapes them.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GetParams<'a> {
    #[serde(rename = "taskId", borrow)]
    task_id: Cow<'a, str>,
    #[serde(rename = "_meta", borrow)]
    meta: GetMeta<'a>,
}

/// The `_meta` fields rmcp requires; others may come along, and are read as the general path
/// reads them (a value it would refuse — a lone surrogate, a number past `f64`, nesting past
/// the parser's limit — makes the request the general path's), not skipped unread.
struct GetMeta<'a> {
    protocol_version: Cow<'a, str>,
    /// As sent: read as rmcp's type only when this thread has not just read the same text.
    client_capabilities: &'a RawValue,
}

impl<'de: 'a, 'a> Deserialize<'de> for GetMeta<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Fields<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for Fields<'a> {
            type Value = GetMeta<'a>;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a _meta object")
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<GetMeta<'a>, A::Error> {
                use serde::de::Error;
                let (mut version, mut caps) = (None, None);
                while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                    match &*key {
                        META_PROTOCOL_VERSION if version.is_none() => {
                            version = Some(map.next_value::<Cow<'de, str>>()?);
                        }
                        META_CLIENT_CAPABILITIES if caps.is_none() => {
                            caps = Some(map.next_value::<&'de RawValue>()?);
                        }
                        META_PROTOCOL_VERSION | META_CLIENT_CAPABILITIES => {
                            return Err(A::Error::custom(format!("duplicate field {key}")));
                        }
                        _ => {
                            map.next_value::<Value>()?;
                        }
                    }
                }
                Ok(GetMeta {
                    protocol_version: version
                        .ok_or_else(|| A::Error::missing_field(META_PROTOCOL_VERSION))?,
                    client_capabilities: caps
                        .ok_or_else(|| A::Error::missing_field(META_CLIENT_CAPABILITIES))?,
                })
            }
        }
        d.deserialize_map(Fields(std::marker::PhantomData))
    }
}

/// A `tasks/get` this path answers.
pub(super) struct FastGet {
    id: RequestId,
    task_id: String,
}

impl FastGet {
    /// The request as the general path would read it, for its span.
    pub(super) fn as_message(&self) -> Value {
        serde_json::json!({"method": METHOD_GET_TASK, "id": self.id, "params": {"taskId": self.task_id}})
    }
}

/// The `tasks/get` in `body`, if this path may answer it; `None` sends the request on to the
/// general path (and so to rmcp).
pub(super) fn eligible(headers: &HeaderMap, body: &[u8]) -> Option<FastGet> {
    if only(headers, &METHOD_HEADER) != Some(METHOD_GET_TASK) {
        return None;
    }
    let get: Envelope<GetParams> = serde_json::from_slice(body).ok()?;
    let id = request_id(get.id)?;
    let task_id = get.params.task_id;
    let meta = get.params.meta;
    let declares_tasks = raw_declares_tasks(meta.client_capabilities.get())?;
    // A task id is a DNS subdomain; anything else (a Base64 sentinel among them) is rmcp's.
    let ok = get.jsonrpc == "2.0"
        && get.method == METHOD_GET_TASK
        && meta.protocol_version == PROTOCOL_VERSION
        && declares_tasks
        && crate::api::is_dns_subdomain(&task_id)
        && standard_headers(headers, &task_id);
    ok.then(|| FastGet {
        id,
        task_id: task_id.into_owned(),
    })
}

/// A JSON-RPC id as rmcp reads it: a string or an integer.
fn request_id(raw: &RawValue) -> Option<RequestId> {
    Some(match raw.get().as_bytes().first()? {
        b'"' => RequestId::String(serde_json::from_str::<String>(raw.get()).ok()?.into()),
        _ => RequestId::Number(serde_json::from_str::<i64>(raw.get()).ok()?),
    })
}

/// The headers every request answered here carries, exactly: this revision's protocol
/// version, `Mcp-Name` in plain text, a JSON body, and an `Accept` of both answer forms.
fn standard_headers(headers: &HeaderMap, name: &str) -> bool {
    only(headers, &PROTOCOL_VERSION_HEADER) == Some(PROTOCOL_VERSION)
        && only(headers, &NAME_HEADER) == Some(name)
        && only(headers, &header::CONTENT_TYPE)
            .is_some_and(|v| essence(v).eq_ignore_ascii_case(JSON))
        && accepts_json_and_sse(headers)
}

/// A media type without its parameters.
fn essence(media: &str) -> &str {
    media.split(';').next().unwrap_or_default().trim()
}

/// `Accept` lists both media types, unweighted (weights are left to rmcp to judge).
fn accepts_json_and_sse(headers: &HeaderMap) -> bool {
    let (mut json, mut sse) = (false, false);
    for value in headers.get_all(header::ACCEPT) {
        let Ok(value) = value.to_str() else {
            return false;
        };
        for media in value.split(',') {
            if media.contains(';') || media.contains('"') {
                return false;
            }
            json |= media.trim().eq_ignore_ascii_case(JSON);
            sse |= media.trim().eq_ignore_ascii_case(EVENT_STREAM);
        }
    }
    json && sse
}

/// Answer an eligible `tasks/get`.
pub(super) async fn get_task(state: &McpState, tenant: &Tenant, get: FastGet) -> Response {
    let FastGet { id, task_id } = get;
    match tasks::find_task(state, tenant, &task_id).await {
        Ok(found) => {
            let live = found.live.as_ref();
            let meta = found.meta.as_ref();
            let write = || {
                let view = projection::view(&found.run, live);
                let payload = projection::payload(&found.run, &view.status);
                let result = TaskWire {
                    view: &view,
                    payload: &payload,
                    meta,
                    run: &found.run,
                };
                serde_json::to_vec(&result)
            };
            // The answer depends on this version of the Run alone unless the Workflow is read
            // live or the caller is told which questions are theirs.
            let result = if live.is_some() || meta.is_some() {
                write().map(Rc::from)
            } else {
                rendered::result_json(&found.run, Shape::Task2026, write)
            };
            json_body(result.and_then(|result| rendered::response_json(&id, &result)))
        }
        // Every error `tasks/get` gives (unknown task, forbidden, internal) is an in-band
        // JSON-RPC error, HTTP 200, as rmcp answers them.
        Err(e) => reply(id, Err(e), ServerResult::GetTaskResult),
    }
}

/// `GetTaskResult` in rmcp's wire shape, written from the Run's borrowed parts: rmcp's types
/// own copies of the task's strings and result, and rmcp serializes a `DetailedTask` by cloning
/// it into its wire shape first — which showed in profiles of this, the hottest answer.
/// `tests/integration/mcp_tasks.rs` compares it with rmcp's answer for every task status.
struct TaskWire<'a> {
    view: &'a TaskView<'a>,
    payload: &'a Payload<'a>,
    meta: Option<&'a MetaObject>,
    run: &'a Run,
}

impl Serialize for TaskWire<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let v = self.view;
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("resultType", &ResultType::COMPLETE)?;
        if let Some(meta) = self.meta {
            m.serialize_entry("_meta", meta)?;
        }
        m.serialize_entry("taskId", v.task_id)?;
        m.serialize_entry("status", &v.status)?;
        if let Some(message) = v.status_message {
            m.serialize_entry("statusMessage", message)?;
        }
        m.serialize_entry("createdAt", &Shown(v.created_at))?;
        m.serialize_entry("lastUpdatedAt", &Shown(v.last_updated_at))?;
        m.serialize_entry("ttlMs", &v.ttl_ms)?;
        m.serialize_entry("pollIntervalMs", &v.poll_interval_ms)?;
        match self.payload {
            Payload::Working | Payload::Cancelled => {}
            Payload::InputRequired(requests) => m.serialize_entry("inputRequests", requests)?,
            Payload::Completed(Some(result)) => m.serialize_entry("result", result)?,
            Payload::Completed(None) => {
                m.serialize_entry("result", &projection::empty_result(self.run))?
            }
            Payload::CompletedOther(value) => {
                m.serialize_entry("result", &serde_json::json!({ "value": value }))?
            }
            Payload::Failed(Some(error)) => m.serialize_entry("error", error)?,
            Payload::Failed(None) => {
                m.serialize_entry("error", &serde_json::json!({ "value": null }))?
            }
        }
        m.end()
    }
}

/// A JSON-RPC message as the HTTP answer rmcp would give it: 200, one JSON body.
fn answer(message: &impl Serialize) -> Response {
    json_body(serde_json::to_vec(message))
}

/// A written JSON-RPC message as the HTTP answer rmcp would give it.
fn json_body(written: serde_json::Result<Vec<u8>>) -> Response {
    match written {
        Ok(body) => (StatusCode::OK, [(header::CONTENT_TYPE, JSON)], body).into_response(),
        Err(e) => super::errors::rpc_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            Value::Null,
            crate::protocol::codes::INTERNAL_ERROR,
            &format!("cannot serialize the answer: {e}"),
        ),
    }
}

fn reply<T>(id: RequestId, result: Result<T, ErrorData>, wrap: fn(T) -> ServerResult) -> Response {
    let message: ServerJsonRpcMessage = match result {
        Ok(result) => JsonRpcMessage::Response(JsonRpcResponse {
            jsonrpc: JsonRpcVersion2_0,
            id,
            result: wrap(result),
        }),
        Err(error) => JsonRpcMessage::Error(JsonRpcError::new(Some(id), error)),
    };
    answer(&message)
}

/// The params of a `tools/call` as the protocol shapes them, with nothing that would make it
/// more than "start this tool's Run": no `inputResponses`, no `requestState`, no other field.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CallParams<'a> {
    #[serde(borrow)]
    name: Cow<'a, str>,
    #[serde(default)]
    arguments: Option<Map<String, Value>>,
    #[serde(rename = "_meta")]
    meta: Map<String, Value>,
}

/// A `tools/call` this path may answer, if its tool turns out to run as a task.
pub(super) struct FastCall {
    id: RequestId,
    name: String,
    arguments: Map<String, Value>,
    meta: Map<String, Value>,
}

impl FastCall {
    /// The request as the general path would read it, for its span.
    pub(super) fn as_message(&self) -> Value {
        serde_json::json!({"method": METHOD_CALL_TOOL, "id": self.id,
            "params": {"name": self.name, "_meta": self.meta}})
    }
}

/// The `tools/call` in `body`, if it has the shape this path answers; `None` sends it on to the
/// general path.
pub(super) fn eligible_call(headers: &HeaderMap, body: &[u8]) -> Option<FastCall> {
    if only(headers, &METHOD_HEADER) != Some(METHOD_CALL_TOOL) {
        return None;
    }
    let call: Envelope<CallParams> = serde_json::from_slice(body).ok()?;
    let id = request_id(call.id)?;
    let meta = call.params.meta;
    // rmcp reads the capabilities as this type; a value it would refuse is left to it.
    let caps = meta.get(META_CLIENT_CAPABILITIES)?;
    let typed = ClientCapabilities::deserialize(caps).ok()?;
    let declares_tasks = typed_declares_tasks(&typed);
    // Runway's own tools answer at once whatever the client declares; a Workflow's tool is
    // started here only as a task.
    let ok = call.jsonrpc == "2.0"
        && call.method == METHOD_CALL_TOOL
        && meta.get(META_PROTOCOL_VERSION).and_then(Value::as_str) == Some(PROTOCOL_VERSION)
        && (declares_tasks || is_builtin(&call.params.name))
        && standard_headers(headers, &call.params.name);
    ok.then(|| FastCall {
        id,
        name: call.params.name.into_owned(),
        arguments: call.params.arguments.unwrap_or_default(),
        meta,
    })
}

/// Answer a call of one of Runway's own tools, or start the Run of an eligible `tools/call` and
/// answer with its task; `None` (before anything is written) when the call is for rmcp: an
/// unknown or switched-off tool, one that asks for arguments first or would block,
/// `Mcp-Param-*` headers that disagree, a caller who may not create Runs (each of which rmcp
/// answers with the protocol's error), arguments the tool refuses (a tool error there).
pub(super) async fn call_tool(
    state: &Arc<McpState>,
    tenant: &Tenant,
    headers: &HeaderMap,
    call: FastCall,
) -> Option<Response> {
    let FastCall {
        id,
        name,
        arguments,
        meta,
    } = call;
    if is_builtin(&name) {
        // The console asks for a page of Runs every few seconds per viewer.
        let mcp = RunwayMcp::new(state.clone());
        let answer = mcp.builtin(tenant, &name, arguments).await?;
        return Some(reply(id, answer, ServerResult::from));
    }
    let wf = state.workflows.tool(&tenant.namespace, &name).await?;
    if !wf.spec.elicit.is_empty() {
        return None;
    }
    if let Some(schema) = &wf.spec.tool.input_schema
        && check_param_headers(schema, &arguments, headers).is_err()
    {
        return None;
    }
    let caps = meta.get(META_CLIENT_CAPABILITIES)?;
    if answer_mode(&wf, caps) != Ok(true) {
        return None;
    }
    // Bad arguments are answered with a tool error, which the general path writes.
    if check_args(&wf, &arguments).is_err() {
        return None;
    }
    if !allowed(state, tenant, Verb::Create, Resource::Runs)
        .await
        .ok()?
    {
        return None;
    }
    let delivery = Delivery::default();
    let guard = Guard::new(delivery.clone(), state.clone());
    let mcp = RunwayMcp::new(state.clone());
    let started = mcp
        .start(
            tenant,
            &wf,
            arguments,
            meta.get(META_IDEMPOTENCY_KEY),
            Some(&delivery),
            true,
            &Default::default(),
        )
        .await
        .map(|run| CreateTaskResult::new(projection::task(&run, Some(&wf.spec))));
    Some(reply(id, started, ServerResult::CreateTaskResult).map(|body| guard.watch(body, false)))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::protocol::TASKS_EXTENSION;
    use crate::protocol::{META_CLIENT_CAPABILITIES, META_PROTOCOL_VERSION};

    fn eligible(h: &HeaderMap, body: &Value) -> Option<(RequestId, String)> {
        super::eligible(h, &serde_json::to_vec(body).unwrap()).map(|g| (g.id, g.task_id))
    }

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    const STANDARD: &[(&str, &str)] = &[
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
        ("mcp-protocol-version", PROTOCOL_VERSION),
        ("mcp-method", "tasks/get"),
        ("mcp-name", "quick-abc"),
    ];

    fn body() -> Value {
        json!({"jsonrpc": "2.0", "id": 3, "method": "tasks/get", "params": {
        "taskId": "quick-abc",
        "_meta": {
            META_PROTOCOL_VERSION: PROTOCOL_VERSION,
            META_CLIENT_CAPABILITIES: {"extensions": {TASKS_EXTENSION: {}}},
        }}})
    }

    #[test]
    fn a_standard_request_is_answered_here() {
        let b = body();
        let (id, task) = eligible(&headers(STANDARD), &b).unwrap();
        assert_eq!((id, task.as_str()), (RequestId::Number(3), "quick-abc"));
        let mut b = b.clone();
        b["id"] = json!("seven");
        let h = headers(&[STANDARD, &[("accept", "text/plain")]].concat());
        assert_eq!(
            eligible(&h, &b).unwrap().0,
            RequestId::String("seven".into())
        );
    }

    #[test]
    fn anything_unusual_is_left_to_rmcp() {
        let header_changes: &[(&str, Option<&str>)] = &[
            ("content-type", None),
            ("content-type", Some("text/plain")),
            ("accept", None),
            ("accept", Some("application/json")),
            ("accept", Some("application/json;q=0, text/event-stream")),
            ("mcp-protocol-version", None),
            ("mcp-protocol-version", Some("2025-11-25")),
            ("mcp-method", None),
            ("mcp-method", Some("tasks/cancel")),
            ("mcp-name", None),
            ("mcp-name", Some("quick-other")),
            ("mcp-name", Some("=?base64?cXVpY2stYWJj?=")),
        ];
        for (name, value) in header_changes {
            let mut h: Vec<(&str, &str)> = STANDARD
                .iter()
                .filter(|(k, _)| k != name)
                .copied()
                .collect();
            h.extend(value.map(|v| (*name, v)));
            assert!(
                eligible(&headers(&h), &body()).is_none(),
                "{name}: {value:?}"
            );
        }
        let twice = [STANDARD, &[("mcp-name", "quick-abc")]].concat();
        assert!(eligible(&headers(&twice), &body()).is_none());

        let body_changes: &[(&str, Value)] = &[
            ("/id", json!(1.5)),
            ("/id", json!(null)),
            ("/jsonrpc", json!("1.0")),
            ("/params/taskId", json!(7)),
            ("/params/taskId", json!("Not A Name")),
            (
                "/params/_meta/io.modelcontextprotocol~1protocolVersion",
                json!("2025-11-25"),
            ),
            (
                "/params/_meta/io.modelcontextprotocol~1clientCapabilities",
                json!({"extensions": 5}),
            ),
            (
                "/params/_meta/io.modelcontextprotocol~1clientCapabilities",
                json!({}),
            ),
        ];
        for (path, value) in body_changes {
            let mut b = body();
            *b.pointer_mut(path).unwrap() = value.clone();
            assert!(
                eligible(&headers(STANDARD), &b).is_none(),
                "{path}: {value}"
            );
        }
        let mut extra = body();
        extra["params"]["cursor"] = json!("x");
        assert!(eligible(&headers(STANDARD), &extra).is_none());
        let mut extra = body();
        extra["extra"] = json!(1);
        assert!(eligible(&headers(STANDARD), &extra).is_none());
        // A repeated field is not guessed at either.
        let text = serde_json::to_string(&body()).unwrap();
        let twice = text.replacen("\"id\":3", "\"id\":3,\"id\":4", 1);
        assert!(super::eligible(&headers(STANDARD), twice.as_bytes()).is_none());
        // Other _meta entries come along.
        let mut more = body();
        more["params"]["_meta"]["progressToken"] = json!(1);
        assert!(eligible(&headers(STANDARD), &more).is_some());
    }

    fn call_body() -> Value {
        json!({"jsonrpc": "2.0", "id": "c-1", "method": "tools/call", "params": {
        "name": "deploy",
        "arguments": {"env": "prod"},
        "_meta": {
            META_PROTOCOL_VERSION: PROTOCOL_VERSION,
            META_CLIENT_CAPABILITIES: {"extensions": {TASKS_EXTENSION: {}}},
            "dev.runway/idempotencyKey": "k",
        }}})
    }

    fn call_headers(name: &str) -> HeaderMap {
        let mut h: Vec<(&str, &str)> = STANDARD
            .iter()
            .filter(|(k, _)| !matches!(*k, "mcp-method" | "mcp-name"))
            .copied()
            .collect();
        h.extend([("mcp-method", "tools/call"), ("mcp-name", name)]);
        headers(&h)
    }

    fn call_eligible(h: &HeaderMap, body: &Value) -> bool {
        eligible_call(h, &serde_json::to_vec(body).unwrap()).is_some()
    }

    #[test]
    fn a_plain_call_that_declares_tasks_may_start_here() {
        let call = eligible_call(
            &call_headers("deploy"),
            &serde_json::to_vec(&call_body()).unwrap(),
        )
        .unwrap();
        assert_eq!(call.id, RequestId::String("c-1".into()));
        assert_eq!(call.name, "deploy");
        assert_eq!(call.arguments["env"], "prod");
        assert_eq!(call.meta["dev.runway/idempotencyKey"], "k");
        let mut no_args = call_body();
        no_args["params"]
            .as_object_mut()
            .unwrap()
            .remove("arguments");
        assert!(call_eligible(&call_headers("deploy"), &no_args));
        // Runway's own tools, even from a client that does not declare tasks.
        let mut own = call_body();
        own["params"]["name"] = json!("runway_list_runs");
        own["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] = json!({});
        assert!(call_eligible(&call_headers("runway_list_runs"), &own));
    }

    #[test]
    fn calls_that_are_more_than_a_start_are_left_to_rmcp() {
        let body_changes: &[(&str, Value)] = &[
            ("/params/requestState", json!("opaque")),
            ("/params/inputResponses", json!({})),
            ("/params/task", json!({})),
            ("/params/arguments", json!([1])),
            ("/params/name", json!(7)),
            ("/method", json!("tools/list")),
            (
                "/params/_meta/io.modelcontextprotocol~1clientCapabilities",
                json!({}),
            ),
            (
                "/params/_meta/io.modelcontextprotocol~1protocolVersion",
                json!("2025-11-25"),
            ),
        ];
        for (path, value) in body_changes {
            let mut b = call_body();
            let (parent, field) = path.rsplit_once('/').unwrap();
            b.pointer_mut(parent).unwrap()[field.replace("~1", "/")] = value.clone();
            assert!(
                !call_eligible(&call_headers("deploy"), &b),
                "{path}: {value}"
            );
        }
        // A name the header does not repeat, or repeats in Base64.
        assert!(!call_eligible(&call_headers("other"), &call_body()));
        assert!(!call_eligible(
            &call_headers("=?base64?ZGVwbG95?="),
            &call_body()
        ));
        let get = headers(STANDARD);
        assert!(!call_eligible(&get, &call_body()));
    }
}
