//! The rmcp `ServerHandler`: Workflows as tools, Runs as tasks, per-method authorization.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use hmac::{KeyInit, Mac};
use jiff::Timestamp;
use rmcp::model::{
    CacheScope, CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams,
    CreateTaskResult, CustomRequest, CustomResult, DiscoverResult, ErrorCode, ErrorData,
    GetTaskParams, GetTaskResult, Implementation, InputRequest, InputRequests, InputRequiredResult,
    ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult, ListToolsResult,
    PaginatedRequestParams, ProgressNotificationParam, ProtocolVersion, SealOptions,
    ServerCapabilities, ServerConfig, Tool, UpdateTaskParams,
};
use rmcp::service::RequestContext;
use rmcp::{RoleServer, ServerHandler};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use sha2::Sha256;

use super::events::Change;
use super::{McpState, TaskAccess, Tenant, task};
use crate::api::{
    CancelRequest, ExecutionMode, InputAction, InputResponse, Run, RunPhase, RunSpec, Workflow,
    WorkflowRef, labels, reasons,
};
use crate::auth::{Resource, Verb};
use crate::engine::budget;
use crate::engine::input::{answer_schema_error, is_named_approver, may_answer};
use crate::protocol::{
    META_AWAITING_YOU, META_CLIENT_CAPABILITIES, META_IDEMPOTENCY_KEY, TASKS_EXTENSION, codes,
};
use crate::store::StoreError;

/// How long clients may cache `server/discover` and `tools/list`.
const DISCOVER_TTL_MS: u64 = 60_000;
const LIST_TTL_MS: u64 = 5_000;
/// Message of every "no such task" answer, whatever the real reason.
const UNKNOWN_TASK: &str = "unknown task";

/// One request's handler (rmcp builds one per POST).
pub struct RunwayMcp {
    state: Arc<McpState>,
}

impl RunwayMcp {
    pub(super) fn new(state: Arc<McpState>) -> Self {
        Self { state }
    }
}

fn err(code: i64, message: impl Into<Cow<'static, str>>, data: Option<Value>) -> ErrorData {
    ErrorData::new(ErrorCode(code as i32), message, data)
}

fn invalid(message: impl Into<Cow<'static, str>>) -> ErrorData {
    err(codes::INVALID_PARAMS, message, None)
}

fn unknown_task() -> ErrorData {
    invalid(UNKNOWN_TASK)
}

/// A failure of this server's own: logged here, and answered without its text, which may carry
/// what a backend said about objects the caller may not see.
fn internal(e: impl std::fmt::Display) -> ErrorData {
    tracing::warn!(error = %e, "request failed");
    err(codes::INTERNAL_ERROR, "internal error; retry later", None)
}

fn missing_capability(what: &str, caps: Value) -> ErrorData {
    err(
        codes::MISSING_CAPABILITY,
        format!("this tool needs the client capability {what}"),
        Some(json!({ "requiredCapabilities": caps })),
    )
}

fn tenant(ctx: &RequestContext<RoleServer>) -> Result<Tenant, ErrorData> {
    ctx.extensions
        .get::<axum::http::request::Parts>()
        .and_then(|p| p.extensions.get::<Tenant>())
        .cloned()
        .ok_or_else(|| err(codes::UNAUTHENTICATED, "unauthenticated", None))
}

pub(super) async fn allowed(
    state: &McpState,
    t: &Tenant,
    verb: Verb,
    resource: Resource,
) -> Result<bool, ErrorData> {
    state
        .authz
        .allowed(&t.identity, verb, resource, &t.namespace)
        .await
        .map_err(internal)
}

pub(super) fn forbidden(t: &Tenant, verb: Verb, resource: Resource) -> ErrorData {
    err(
        codes::FORBIDDEN,
        format!(
            "forbidden: {} may not {} {} in namespace {}",
            t.identity.principal.username,
            verb.as_str(),
            resource.as_str(),
            t.namespace
        ),
        None,
    )
}

/// The Workflow spec of a Run that has no snapshot yet (only just created).
pub(super) async fn live_spec(state: &McpState, run: &Run) -> Option<crate::api::WorkflowSpec> {
    if run.status.as_ref().is_some_and(|s| s.workflow.is_some()) {
        return None;
    }
    let ns = run.metadata.namespace.as_deref().unwrap_or_default();
    state
        .workflows
        .get(ns, &run.spec.workflow_ref.name)
        .await
        .map(|w| w.spec)
}

/// What a caller wants to do with a task; each needs its RBAC verb and the owner rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Access {
    /// `tasks/get`, `subscriptions/listen`: `get runs`.
    Read,
    /// `tasks/update`: `update runs`.
    Answer,
    /// `tasks/cancel`: `update runs`.
    Cancel,
}

impl Access {
    fn verb(self) -> Verb {
        match self {
            Self::Read => Verb::Get,
            Self::Answer | Self::Cancel => Verb::Update,
        }
    }
}

/// Whether an open input request of `run` names `me` among its approvers.
fn awaits_answer_from(run: &Run, me: &crate::api::Principal) -> bool {
    let Some(snapshot) = run.workflow_snapshot() else {
        return false;
    };
    let open = run.status.as_ref().map(|s| &s.input_requests);
    open.into_iter().flatten().any(|(_, req)| {
        request_spec(&snapshot, &req.step, &req.name).is_some_and(|spec| {
            is_named_approver(
                &spec,
                run.spec.requested_by.as_ref(),
                &me.username,
                &me.groups,
            )
        })
    })
}

/// The open input keys of `run` the caller may answer (RBAC `update runs` and the approver
/// rule), so that a person sees which questions wait for them; `None` when nothing is asked.
async fn awaiting_answer_from(state: &McpState, t: &Tenant, run: &Run) -> Option<Vec<String>> {
    let open = run
        .status
        .as_ref()
        .map(|s| &s.input_requests)
        .filter(|o| !o.is_empty() && !run.phase().is_terminal())?;
    if !allowed(state, t, Verb::Update, Resource::Runs)
        .await
        .unwrap_or(false)
    {
        return Some(vec![]);
    }
    let snapshot = run.workflow_snapshot();
    let me = &t.identity.principal;
    open.iter()
        .filter(|(key, req)| {
            !run.spec.input_responses.contains_key(*key)
                && snapshot
                    .as_ref()
                    .and_then(|w| request_spec(w, &req.step, &req.name))
                    .is_none_or(|spec| {
                        may_answer(
                            &spec,
                            run.spec.requested_by.as_ref(),
                            &me.username,
                            &me.groups,
                        )
                        .is_ok()
                    })
        })
        .map(|(key, _)| key.clone())
        .collect::<Vec<_>>()
        .into()
}

/// The manifest of input request `name` of step `step`.
fn request_spec(
    wf: &crate::api::WorkflowSpec,
    step: &str,
    name: &str,
) -> Option<crate::api::InputRequestSpec> {
    wf.steps
        .iter()
        .chain(&wf.finally)
        .find(|s| s.name == step)
        .and_then(|s| s.input.as_ref())
        .and_then(|i| i.requests.iter().find(|r| r.name == name))
        .cloned()
}

/// Whether the caller may act on `run`: RBAC plus the owner rule, under which the requester,
/// whoever may list runs, and — to read and answer, not to cancel — the approvers an open
/// question names may act.
async fn may_act(state: &McpState, t: &Tenant, run: &Run, access: Access) -> bool {
    if !allowed(state, t, access.verb(), Resource::Runs)
        .await
        .unwrap_or(false)
    {
        return false;
    }
    if state.config.task_access == TaskAccess::Namespace {
        return true;
    }
    let me = &t.identity.principal;
    let owner = run.spec.requested_by.as_ref().is_some_and(|p| {
        p.username == me.username && (p.uid.is_none() || me.uid.is_none() || p.uid == me.uid)
    });
    owner
        || (access != Access::Cancel && awaits_answer_from(run, me))
        || allowed(state, t, Verb::List, Resource::Runs)
            .await
            .unwrap_or(false)
}

/// The Run behind a task id if the caller may act on it; `None` for every kind of "no". The
/// id's shape and the caller's namespace rights are checked before the store is asked, so a
/// caller without rights learns nothing, and no id reaches an API path unless it is a name.
pub(super) async fn task_run(
    state: &McpState,
    t: &Tenant,
    task_id: &str,
    access: Access,
) -> Result<Option<Run>, ErrorData> {
    if !crate::api::is_dns_subdomain(task_id)
        || !allowed(state, t, access.verb(), Resource::Runs)
            .await
            .unwrap_or(false)
    {
        return Ok(None);
    }
    let Some(run) = state
        .store
        .get(&t.namespace, task_id)
        .await
        .map_err(internal)?
    else {
        return Ok(None);
    };
    Ok(may_act(state, t, &run, access).await.then_some(run))
}

/// The Run behind a task id if the caller may read it; `None` for every kind of "no".
pub(super) async fn readable_run(state: &McpState, t: &Tenant, task_id: &str) -> Option<Run> {
    task_run(state, t, task_id, Access::Read)
        .await
        .ok()
        .flatten()
}

fn raw_caps(ctx: &RequestContext<RoleServer>) -> Value {
    ctx.meta
        .get(META_CLIENT_CAPABILITIES)
        .cloned()
        .unwrap_or_else(|| json!({}))
}

fn declares_tasks(ctx: &RequestContext<RoleServer>) -> bool {
    raw_caps(ctx)
        .get("extensions")
        .and_then(|e| e.get(TASKS_EXTENSION))
        .is_some()
}

/// Whether the client can show forms: `elicitation: {form: {}}`, or an empty `elicitation: {}`
/// (which means form mode alone). A client that declares only `url` mode cannot.
fn declares_forms(ctx: &RequestContext<RoleServer>) -> bool {
    match raw_caps(ctx).get("elicitation") {
        Some(Value::Object(modes)) => modes.is_empty() || modes.contains_key("form"),
        _ => false,
    }
}

/// Whether the client can send a person to a URL (`elicitation: {url: {}}`).
fn declares_urls(ctx: &RequestContext<RoleServer>) -> bool {
    raw_caps(ctx)
        .get("elicitation")
        .and_then(|e| e.get("url"))
        .is_some_and(|v| !v.is_null())
}

/// Capabilities in `required` that `caps` lacks (objects nest, e.g. `extensions`).
fn missing_caps(required: &Value, caps: &Value) -> Option<Value> {
    let req = required.as_object()?;
    let mut missing = Map::new();
    for (k, v) in req {
        match caps.get(k) {
            None | Some(Value::Null) => {
                missing.insert(k.clone(), v.clone());
            }
            Some(have) if k == "extensions" => {
                if let Some(m) = missing_caps(v, have) {
                    missing.insert(k.clone(), m);
                }
            }
            Some(_) => {}
        }
    }
    (!missing.is_empty()).then_some(Value::Object(missing))
}

/// What a `requestState` lets a retry resume.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
enum Resume {
    /// Arguments collected so far, before any Run exists.
    Args { tool: String, args: Value },
    /// A blocking Run that waits for input.
    Run { run: String },
}

fn has_input_steps(wf: &Workflow) -> bool {
    wf.spec
        .steps
        .iter()
        .chain(&wf.spec.finally)
        .any(|s| s.input.is_some())
}

fn run_result(run: &Run) -> Result<CallToolResponse, ErrorData> {
    let st = run.status.clone().unwrap_or_default();
    if let Some(e) = st.error {
        return Err(err(e.code, e.message, e.data));
    }
    if st.phase == RunPhase::Cancelled {
        let msg = st.status_message.unwrap_or_else(|| "cancelled".into());
        return Ok(CallToolResult::error(vec![rmcp::model::ContentBlock::text(msg)]).into());
    }
    let result = st.result.unwrap_or_else(|| json!({"content": []}));
    let mut parsed: CallToolResult = serde_json::from_value(result).map_err(internal)?;
    parsed.result_type = Some(rmcp::model::ResultType::COMPLETE);
    Ok(parsed.into())
}

impl RunwayMcp {
    fn seal(&self, t: &Tenant, resume: &Resume) -> Result<String, ErrorData> {
        let ad = format!("{}\0{}", t.namespace, t.identity.principal.username);
        let opts = SealOptions::new()
            .associated_data(ad.as_bytes())
            .ttl(self.state.config.state_ttl);
        self.state.codecs[0]
            .seal_json_with(resume, &opts)
            .map_err(internal)
    }

    fn open(&self, t: &Tenant, sealed: &str) -> Result<Resume, ErrorData> {
        let ad = format!("{}\0{}", t.namespace, t.identity.principal.username);
        let mut expired = false;
        for codec in &self.state.codecs {
            match codec.open_json_with(sealed, ad.as_bytes()) {
                Ok(resume) => return Ok(resume),
                Err(rmcp::model::RequestStateError::Expired) => expired = true,
                Err(_) => {}
            }
        }
        Err(invalid(if expired {
            "requestState expired: call the tool again without it to be asked again"
        } else {
            "invalid requestState"
        }))
    }

    async fn tool(&self, t: &Tenant, name: &str) -> Option<Workflow> {
        self.state
            .workflows
            .list(&t.namespace)
            .await
            .into_iter()
            .find(|w| w.is_ready() && w.tool_name() == name)
    }

    /// The Run names an idempotency key maps to, one per state key, newest key first.
    fn idempotent_names(&self, t: &Tenant, wf: &Workflow, key: &str) -> Vec<String> {
        self.state
            .config
            .state_keys
            .iter()
            .map(|k| idempotent_name(k, t, wf, key))
            .collect()
    }

    /// Fill arguments through MRTR elicitation before a Run exists. `Ok(Err(resp))` is an
    /// answer to send now (`input_required`, or a declined-tool result).
    fn elicit(
        &self,
        t: &Tenant,
        wf: &Workflow,
        ctx: &RequestContext<RoleServer>,
        mut args: Map<String, Value>,
        responses: &BTreeMap<String, Value>,
    ) -> Result<Result<Map<String, Value>, CallToolResponse>, ErrorData> {
        for q in &wf.spec.elicit {
            if let Some(resp) = responses.get(&q.key) {
                let resp = resp.as_object().ok_or_else(|| {
                    invalid(format!("inputResponses.{}: must be an object", q.key))
                })?;
                match resp.get("action").and_then(Value::as_str) {
                    Some("accept") => {
                        let content = resp.get("content").filter(|c| !c.is_null());
                        if content.is_some_and(|c| !c.is_object()) {
                            return Err(invalid(format!(
                                "inputResponses.{}.content must be an object",
                                q.key
                            )));
                        }
                        if let Some(why) = answer_schema_error(Some(&q.requested_schema), content) {
                            return Err(invalid(format!("inputResponses.{}: {why}", q.key)));
                        }
                        if let Some(Value::Object(c)) = content {
                            args.extend(c.clone());
                        }
                    }
                    Some("decline") => {
                        let text = format!("{} declined", q.key);
                        return Ok(Err(CallToolResult::error(vec![
                            rmcp::model::ContentBlock::text(text),
                        ])
                        .into()));
                    }
                    Some("cancel") => {}
                    _ => {
                        return Err(invalid(format!(
                            "inputResponses.{}.action must be accept, decline or cancel",
                            q.key
                        )));
                    }
                }
            }
        }
        let open = wf.spec.elicit.iter().find(|q| {
            q.requested_schema
                .get("properties")
                .and_then(Value::as_object)
                .is_some_and(|props| props.keys().any(|p| !args.contains_key(p)))
        });
        let Some(q) = open else { return Ok(Ok(args)) };
        if !declares_forms(ctx) {
            return Err(missing_capability(
                "form elicitation",
                json!({"elicitation": {"form": {}}}),
            ));
        }
        let request: InputRequest = serde_json::from_value(json!({
            "method": "elicitation/create",
            "params": {"mode": "form", "message": q.message, "requestedSchema": q.requested_schema},
        }))
        .map_err(internal)?;
        let mut reqs = InputRequests::new();
        reqs.insert(q.key.clone(), request);
        let state = self.seal(
            t,
            &Resume::Args {
                tool: wf.tool_name().to_owned(),
                args: Value::Object(args),
            },
        )?;
        Ok(Err(InputRequiredResult::new(Some(reqs), Some(state)).into()))
    }

    async fn create_run(
        &self,
        t: &Tenant,
        wf: &Workflow,
        args: Map<String, Value>,
        idem: Option<&str>,
    ) -> Result<Run, ErrorData> {
        let wf_name = wf.metadata.name.clone().unwrap_or_default();
        let name = match idem {
            Some(k) => {
                let names = self.idempotent_names(t, wf, k);
                // A Run named under a previous state key (before a rotation) is the same call.
                for older in &names[1..] {
                    if let Some(e) = self
                        .state
                        .store
                        .get(&t.namespace, older)
                        .await
                        .map_err(internal)?
                    {
                        return same_call(e, wf, &args);
                    }
                }
                names[0].clone()
            }
            None => task::new_task_id(&wf_name),
        };
        let mut run = Run::new(
            &name,
            RunSpec {
                workflow_ref: WorkflowRef {
                    name: wf_name.clone(),
                },
                arguments: Some(Value::Object(args)),
                requested_by: Some(t.identity.principal.clone()),
                cancel: None,
                input_responses: BTreeMap::new(),
            },
        );
        run.metadata.namespace = Some(t.namespace.clone());
        run.metadata.labels = Some(BTreeMap::from([(labels::WORKFLOW.to_owned(), wf_name)]));
        match self.state.store.create(run.clone()).await {
            Ok(r) => Ok(r),
            Err(StoreError::AlreadyExists) if idem.is_some() => {
                let existing = self
                    .state
                    .store
                    .get(&t.namespace, &name)
                    .await
                    .map_err(internal)?;
                match existing {
                    Some(e) => same_call(
                        e,
                        wf,
                        run.spec
                            .arguments
                            .as_ref()
                            .and_then(Value::as_object)
                            .unwrap_or(&Map::new()),
                    ),
                    None => Err(internal("idempotent run vanished; retry")),
                }
            }
            Err(e) => Err(internal(e)),
        }
    }

    /// Hold a blocking call until its Run finishes, or needs input the client can give.
    async fn await_run(
        &self,
        t: &Tenant,
        name: &str,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let mut changes = self.state.events.subscribe(&t.namespace, name);
        let progress = ctx.meta.get_progress_token();
        let (forms, urls) = (declares_forms(ctx), declares_urls(ctx));
        let mut sent: Option<(f64, String)> = None;
        let mut run = self
            .state
            .store
            .get(&t.namespace, name)
            .await
            .map_err(internal)?
            .ok_or_else(unknown_task)?;
        loop {
            if let Some(token) = &progress {
                let (done, total) = step_progress(&run);
                let msg = run
                    .status
                    .as_ref()
                    .and_then(|s| s.status_message.clone())
                    .unwrap_or_else(|| "queued".into());
                if sent.as_ref() != Some(&(done, msg.clone()))
                    && sent.as_ref().is_none_or(|(d, _)| *d <= done)
                {
                    let p = ProgressNotificationParam::new(token.clone(), done)
                        .with_total(total)
                        .with_message(msg.clone());
                    let _ = ctx.peer.notify_progress(p).await;
                    sent = Some((done, msg));
                }
            }
            if run.phase().is_terminal() {
                return run_result(&run);
            }
            if run.phase() == RunPhase::Waiting && (forms || urls) {
                // Only the requests this client can show; others wait for someone else.
                let mut open = task::open_requests(&run);
                let asked = run.status.as_ref().map(|s| &s.input_requests);
                open.retain(|key, _| {
                    let url_mode = asked.and_then(|a| a.get(key)).is_some_and(|r| {
                        r.params.get("mode").and_then(Value::as_str) == Some("url")
                    });
                    if url_mode { urls } else { forms }
                });
                if !open.is_empty() {
                    let state = self.seal(
                        t,
                        &Resume::Run {
                            run: name.to_owned(),
                        },
                    )?;
                    return Ok(InputRequiredResult::new(Some(open), Some(state)).into());
                }
            }
            tokio::select! {
                change = changes.recv() => match change {
                    Ok(Change::Updated(r)) => run = *r,
                    Ok(Change::Deleted) => return Err(unknown_task()),
                    Err(_) => {
                        changes = self.state.events.subscribe(&t.namespace, name);
                        run = self.state.store.get(&t.namespace, name).await.map_err(internal)?.ok_or_else(unknown_task)?;
                    }
                },
                _ = ctx.ct.cancelled() => {
                    if !self.state.shutdown.is_cancelled() {
                        // Logged inside; the client is gone and cannot be told.
                        let _ = self.cancel(t, name, reasons::MCP_REQUEST_CANCELLED).await;
                    }
                    return Err(err(codes::INTERNAL_ERROR, "request cancelled", None));
                }
            }
        }
    }

    /// Record the cancel intent in `spec.cancel` (once). `Ok` only when it is durable (or the
    /// Run is gone, finished or already cancelled).
    async fn cancel(&self, t: &Tenant, name: &str, reason: &str) -> Result<(), StoreError> {
        loop {
            let Some(mut run) = self.state.store.get(&t.namespace, name).await? else {
                return Ok(());
            };
            if run.spec.cancel.is_some() || run.phase().is_terminal() {
                return Ok(());
            }
            run.spec.cancel = Some(CancelRequest {
                reason: Some(reason.into()),
                requested_by: Some(t.identity.principal.username.clone()),
                requested_at: Some(Timestamp::now().to_string()),
            });
            match self.state.store.update(run).await {
                Err(StoreError::Conflict) => continue,
                Err(StoreError::NotFound) => return Ok(()),
                Err(e) => {
                    tracing::error!(run = name, error = %e, "cannot record cancellation");
                    return Err(e);
                }
                Ok(_) => {
                    tracing::info!(namespace = %t.namespace, run = name, by = %t.identity.principal.username, reason, "cancel requested");
                    return Ok(());
                }
            }
        }
    }

    /// Record answers to open input keys: the first valid answer to a key wins. Entries for
    /// keys that are unknown or already answered are ignored; answers to open keys that are
    /// malformed, do not match the request's `requestedSchema`, or come from someone the
    /// request does not let answer are refused, and their questions stay open.
    async fn answer(
        &self,
        t: &Tenant,
        name: &str,
        responses: &BTreeMap<String, Value>,
    ) -> Result<Answers, ErrorData> {
        loop {
            let mut run = self
                .state
                .store
                .get(&t.namespace, name)
                .await
                .map_err(internal)?
                .ok_or_else(unknown_task)?;
            let snapshot = run.workflow_snapshot();
            let open = run.status.clone().unwrap_or_default().input_requests;
            let me = &t.identity.principal;
            let mut outcome = Answers::default();
            for (key, value) in responses {
                let Some(req) = open.get(key) else {
                    outcome.ignored.push(key.clone());
                    continue;
                };
                if run.spec.input_responses.contains_key(key) {
                    outcome.ignored.push(key.clone());
                    continue;
                }
                let spec = snapshot
                    .as_ref()
                    .and_then(|w| request_spec(w, &req.step, &req.name));
                match check_answer(key, value, req, spec.as_ref(), &run, me) {
                    Ok((action, content)) => {
                        run.spec.input_responses.insert(
                            key.clone(),
                            InputResponse {
                                action,
                                content,
                                answered_by: Some(me.username.clone()),
                                answered_by_groups: me.groups.clone(),
                                answered_at: Some(Timestamp::now().to_string()),
                            },
                        );
                        outcome.taken.push(key.clone());
                    }
                    Err(why) => {
                        tracing::info!(namespace = %t.namespace, run = name, key, reason = crate::api::event_reasons::INPUT_REJECTED, "answer refused: {why}");
                        outcome.refused.insert(key.clone(), why);
                    }
                }
            }
            if outcome.taken.is_empty() {
                return Ok(outcome);
            }
            match self.state.store.update(run).await {
                Ok(_) => return Ok(outcome),
                Err(StoreError::Conflict) => continue,
                Err(StoreError::NotFound) => return Err(unknown_task()),
                Err(e) => return Err(internal(e)),
            }
        }
    }
}

/// What became of the answers of one `tasks/update`.
#[derive(Debug, Default)]
struct Answers {
    /// Keys whose answers were recorded.
    taken: Vec<String>,
    /// Open keys whose answers were refused, with the reason.
    refused: BTreeMap<String, String>,
    /// Keys that are not open (unknown, or answered already).
    ignored: Vec<String>,
}

impl Answers {
    /// `tasks/update` answers with an empty result unless an answer to an open question was
    /// refused; then an error says which and why (and which answers were taken anyway).
    fn into_result(self) -> Result<(), ErrorData> {
        if self.refused.is_empty() {
            return Ok(());
        }
        let why = self
            .refused
            .iter()
            .map(|(k, v)| format!("{k}: {v}"))
            .collect::<Vec<_>>()
            .join("; ");
        Err(err(
            codes::INVALID_PARAMS,
            format!("answer refused, the question stays open: {why}"),
            Some(json!({"taken": self.taken, "refused": self.refused, "ignored": self.ignored})),
        ))
    }
}

/// Whether `value` may answer the open request `req`: a known action, an object as content
/// within the answer budget, from someone the request lets answer, and (for `accept`) content
/// that matches the `requestedSchema` the client was shown.
fn check_answer(
    key: &str,
    value: &Value,
    req: &crate::api::OpenInputRequest,
    spec: Option<&crate::api::InputRequestSpec>,
    run: &Run,
    me: &crate::api::Principal,
) -> Result<(InputAction, Option<Value>), String> {
    let action = value
        .get("action")
        .cloned()
        .and_then(|a| serde_json::from_value::<InputAction>(a).ok())
        .ok_or_else(|| "action must be accept, decline or cancel".to_owned())?;
    // A URL-mode answer has no content: whatever the page collected never passes through here.
    let url_mode = req.params.get("mode").and_then(Value::as_str) == Some("url");
    let content = value
        .get("content")
        .cloned()
        .filter(|c| !c.is_null() && !url_mode);
    if content.as_ref().is_some_and(|c| !c.is_object()) {
        return Err("content must be an object".into());
    }
    if let Some(c) = &content {
        budget::check(
            &format!("inputResponses.{key}.content"),
            c,
            budget::MAX_ANSWER_BYTES,
        )?;
    }
    if let Some(spec) = spec {
        may_answer(
            spec,
            run.spec.requested_by.as_ref(),
            &me.username,
            &me.groups,
        )?;
    }
    if action == InputAction::Accept
        && let Some(why) = answer_schema_error(req.params.get("requestedSchema"), content.as_ref())
    {
        return Err(why);
    }
    Ok((action, content))
}

/// (finished main steps, total main steps) of a Run; finished Runs are complete.
fn step_progress(run: &Run) -> (f64, f64) {
    let Some(wf) = run.workflow_snapshot() else {
        return (0.0, 1.0);
    };
    let total = wf.steps.len().max(1) as f64;
    if run.phase().is_terminal() {
        return (total, total);
    }
    let done = run
        .status
        .as_ref()
        .map(|s| {
            s.steps
                .iter()
                .filter(|r| !r.finally && r.phase.is_terminal())
                .count()
        })
        .unwrap_or(0) as f64;
    (done, total)
}

fn tool_of(wf: &Workflow) -> Tool {
    let schema = match &wf.spec.tool.input_schema {
        Some(Value::Object(m)) => m.clone(),
        _ => json!({"type": "object", "properties": {}})
            .as_object()
            .cloned()
            .unwrap_or_default(),
    };
    let mut tool = Tool::new(
        wf.tool_name().to_owned(),
        wf.spec.tool.description.clone().unwrap_or_default(),
        Arc::new(schema),
    );
    if let Some(title) = &wf.spec.tool.title {
        tool = tool.with_title(title.clone());
    }
    if let Some(Value::Object(out)) = &wf.spec.tool.output_schema {
        tool = tool.with_raw_output_schema(Arc::new(out.clone()));
    }
    if let Some(a) = &wf.spec.tool.annotations
        && let Ok(a) = serde_json::from_value(a.clone())
    {
        tool = tool.with_annotations(a);
    }
    tool
}

fn validate_args(wf: &Workflow, args: &Map<String, Value>) -> Result<(), ErrorData> {
    let instance = Value::Object(args.clone());
    budget::check("arguments", &instance, budget::MAX_ARGUMENT_BYTES).map_err(invalid)?;
    let Some(schema) = &wf.spec.tool.input_schema else {
        return Ok(());
    };
    let errors = budget::schema_errors(schema, &instance).map_err(internal)?;
    if errors.is_empty() {
        return Ok(());
    }
    let summary = errors
        .iter()
        .filter_map(|e| e["message"].as_str())
        .collect::<Vec<_>>()
        .join("; ");
    Err(err(
        codes::INVALID_PARAMS,
        format!("invalid arguments: {summary}"),
        Some(json!({"errors": errors})),
    ))
}

impl ServerHandler for RunwayMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_prompts()
                .enable_resources()
                .enable_tasks()
                .build(),
        )
            .with_server_info(Implementation::new("runway", env!("CARGO_PKG_VERSION")))
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
        let t = tenant(&ctx)?;
        if !allowed(&self.state, &t, Verb::List, Resource::Workflows).await? {
            return Err(forbidden(&t, Verb::List, Resource::Workflows));
        }
        let mut tools: Vec<Tool> = self
            .state
            .workflows
            .list(&t.namespace)
            .await
            .iter()
            .filter(|w| w.is_ready())
            .map(tool_of)
            .collect();
        tools.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(ListToolsResult::with_all_items(tools)
            .with_ttl_ms(LIST_TTL_MS)
            .with_cache_scope(CacheScope::Private))
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
        Ok(ListResourcesResult::with_all_items(vec![])
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
        let t = tenant(&ctx)?;
        if !allowed(&self.state, &t, Verb::Create, Resource::Runs).await? {
            return Err(forbidden(&t, Verb::Create, Resource::Runs));
        }
        let responses: BTreeMap<String, Value> = request
            .input_responses
            .clone()
            .unwrap_or_default()
            .into_iter()
            .collect();
        let resume = match &request.request_state {
            Some(s) => Some(self.open(&t, s)?),
            None => None,
        };
        if let Some(Resume::Run { run }) = &resume {
            // An MRTR retry of a blocking call: record the answers, keep waiting.
            let current = readable_run(&self.state, &t, run)
                .await
                .ok_or_else(|| invalid("invalid requestState"))?;
            if current.spec.workflow_ref.name.is_empty() {
                return Err(unknown_task());
            }
            self.answer(&t, run, &responses).await?;
            return self.await_run(&t, run, &ctx).await;
        }
        let wf = self
            .tool(&t, &request.name)
            .await
            .ok_or_else(|| invalid(format!("unknown tool: {}", request.name)))?;
        if let Some(req) = &wf.spec.execution.required_client_capabilities
            && let Some(missing) = missing_caps(req, &raw_caps(&ctx))
        {
            let names = missing
                .as_object()
                .map(|m| m.keys().cloned().collect::<Vec<_>>().join(", "))
                .unwrap_or_default();
            return Err(missing_capability(&names, missing));
        }
        let tasks = declares_tasks(&ctx);
        let mode = wf.spec.execution.mode;
        if mode == ExecutionMode::Task && !tasks {
            return Err(missing_capability(
                TASKS_EXTENSION,
                json!({"extensions": {TASKS_EXTENSION: {}}}),
            ));
        }
        let as_task = tasks && mode != ExecutionMode::Sync;
        if !as_task && has_input_steps(&wf) && !declares_forms(&ctx) {
            let caps = if mode == ExecutionMode::Sync {
                json!({"elicitation": {"form": {}}})
            } else {
                json!({"elicitation": {"form": {}}, "extensions": {TASKS_EXTENSION: {}}})
            };
            return Err(missing_capability(
                "form elicitation or io.modelcontextprotocol/tasks",
                caps,
            ));
        }
        let mut args = request.arguments.clone().unwrap_or_default();
        if let Some(Resume::Args { tool, args: saved }) = resume {
            if tool != wf.tool_name() {
                return Err(invalid("invalid requestState"));
            }
            if let Value::Object(saved) = saved {
                for (k, v) in saved {
                    args.entry(k).or_insert(v);
                }
            }
        }
        let args = match self.elicit(&t, &wf, &ctx, args, &responses)? {
            Ok(args) => args,
            Err(answer) => return Ok(answer),
        };
        validate_args(&wf, &args)?;
        let idem = ctx
            .meta
            .get(META_IDEMPOTENCY_KEY)
            .and_then(Value::as_str)
            .map(str::to_owned);
        if ctx
            .meta
            .get(META_IDEMPOTENCY_KEY)
            .is_some_and(|v| !v.is_string())
        {
            return Err(invalid(format!(
                "_meta.{META_IDEMPOTENCY_KEY} must be a string"
            )));
        }
        let run = self.create_run(&t, &wf, args, idem.as_deref()).await?;
        let name = run.metadata.name.clone().unwrap_or_default();
        tracing::info!(namespace = %t.namespace, run = %name, tool = %wf.tool_name(), by = %t.identity.principal.username, task = as_task, "run created");
        if as_task {
            return Ok(CreateTaskResult::new(task::task(&run, Some(&wf.spec))).into());
        }
        self.await_run(&t, &name, &ctx).await
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        let t = tenant(&ctx)?;
        let run = readable_run(&self.state, &t, &request.task_id)
            .await
            .ok_or_else(unknown_task)?;
        let live = live_spec(&self.state, &run).await;
        let mut result = GetTaskResult::new(task::project(&run, live.as_ref()));
        // Present (possibly empty) whenever questions are open, so a client can tell "none of
        // them is yours" from a server that does not say.
        if let Some(awaiting) = awaiting_answer_from(&self.state, &t, &run).await {
            let mut meta = rmcp::model::MetaObject::default();
            meta.0.insert(META_AWAITING_YOU.into(), json!(awaiting));
            result.meta = Some(meta);
        }
        Ok(result)
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let t = tenant(&ctx)?;
        let run = task_run(&self.state, &t, &request.task_id, Access::Answer)
            .await?
            .ok_or_else(unknown_task)?;
        if run.phase().is_terminal() {
            return Ok(());
        }
        let responses: BTreeMap<String, Value> = request.input_responses.into_iter().collect();
        self.answer(&t, &request.task_id, &responses)
            .await?
            .into_result()
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let t = tenant(&ctx)?;
        task_run(&self.state, &t, &request.task_id, Access::Cancel)
            .await?
            .ok_or_else(unknown_task)?;
        // Acknowledged only once the intent is durable; a store failure is an error, not an ack.
        self.cancel(&t, &request.task_id, "requested via tasks/cancel")
            .await
            .map_err(internal)
    }

    async fn on_custom_request(
        &self,
        request: CustomRequest,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        // Known methods land here when their params do not deserialize.
        match request.method.as_str() {
            "tools/call" | "tasks/get" | "tasks/update" | "tasks/cancel" | "tools/list" => {
                Err(invalid(format!("invalid params for {}", request.method)))
            }
            other => Err(err(
                codes::METHOD_NOT_FOUND,
                format!("method not found: {other}"),
                None,
            )),
        }
    }
}

/// The Run an idempotency key named earlier, if it is the same call (same Workflow and
/// arguments); the same key with other arguments is refused.
fn same_call(existing: Run, wf: &Workflow, args: &Map<String, Value>) -> Result<Run, ErrorData> {
    let same = existing.spec.workflow_ref.name == wf.metadata.name.clone().unwrap_or_default()
        && existing.spec.arguments.as_ref().and_then(Value::as_object) == Some(args);
    if same {
        Ok(existing)
    } else {
        Err(invalid("idempotency key reused with different arguments"))
    }
}

/// The Run name `key` maps to under one state key: an HMAC of (namespace, principal, tool, key),
/// so the same retry always names the same Run and nobody can name another caller's.
fn idempotent_name(state_key: &[u8], t: &Tenant, wf: &Workflow, key: &str) -> String {
    let mut mac = hmac::Hmac::<Sha256>::new_from_slice(state_key).expect("HMAC takes any key");
    for part in [
        t.namespace.as_str(),
        t.identity.principal.username.as_str(),
        wf.tool_name(),
        key,
    ] {
        mac.update(part.as_bytes());
        mac.update(&[0]);
    }
    let digest = mac.finalize().into_bytes();
    let mut b = [0u8; 16];
    b.copy_from_slice(&digest[..16]);
    task::task_id_from(wf.metadata.name.as_deref().unwrap_or("run"), &b)
}
