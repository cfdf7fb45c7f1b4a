//! A 2025-era `tools/call`: as this revision's task when the client asks for one, else held on
//! the POST's SSE stream until the Run ends — with `notifications/progress` when the client
//! sent a progress token, and the Run's questions sent as `elicitation/create` and
//! `sampling/createMessage` requests the client answers in a separate POST (to any replica).
//!
//! Until the final answer is written, the Run belongs to the request: a client that goes away
//! cancels it. A client that sent neither a task nor a progress token is not held past the
//! endpoint's hold limit (most clients give up after 60 s, and their disconnect would cancel
//! the Run): it gets a result naming the Run, which goes on.

use std::collections::{BTreeMap, BTreeSet};
use std::convert::Infallible;
use std::sync::Arc;

use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use rmcp::model::{CallToolResult, ContentBlock, ErrorData, ServerResult};
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use super::session::{Question, Session};
use super::wire::{self, created, json_response, meta, older, task};
use crate::api::{ExecutionMode, Run, RunPhase, Workflow, labels, reasons};
use crate::auth::{Resource, Verb};
use crate::mcp::access::{allowed, awaiting_answer_from, may_read, still_signed_in};
use crate::mcp::calls::{cancel_taken_result, check_args, run_result};
use crate::mcp::caps::missing_caps;
use crate::mcp::delivery::{Delivery, Guard};
use crate::mcp::errors::{err, forbidden, invalid, missing_capability, signed_out, unknown_task};
use crate::mcp::handler::RunwayMcp;
use crate::mcp::headers::no_proxy_buffering;
use crate::mcp::own_tools::is_builtin;
use crate::mcp::projection;
use crate::mcp::state::Tenant;
use crate::mcp::tasks::progress_due;
use crate::protocol::{
    META_IDEMPOTENCY_KEY, META_RELATED_TASK, METHOD_CALL_TOOL, METHOD_SAMPLING,
    NOTIFICATION_PROGRESS, NOTIFICATION_TASK_STATUS, codes,
};
use crate::store::Change;
use crate::store::changes::{ends, stale};
use tokio::sync::broadcast::error::RecvError;

/// `execution.taskSupport` of a Workflow's tool.
pub(crate) fn task_support(wf: &Workflow) -> &'static str {
    match wf.spec.execution.mode {
        ExecutionMode::Sync => "forbidden",
        ExecutionMode::Auto => "optional",
        ExecutionMode::Task => "required",
    }
}

/// What the call asks for, once checked.
enum Answer {
    /// A whole JSON-RPC message, now.
    Now(Value),
    /// A task of this revision for the Run.
    Task(Run),
    /// Hold the request until the Run ends; whether answers Runway makes up may carry
    /// `structuredContent` ([`Held::structured`]).
    Hold(Run, bool),
}

/// `tools/call` of a 2025-era client.
pub(crate) async fn call(
    mcp: RunwayMcp,
    t: Tenant,
    session: Session,
    bound: String,
    id: Value,
    params: Value,
    call_label: String,
) -> Response {
    let progress = meta(&params).and_then(|m| m.get("progressToken")).cloned();
    let delivery = Delivery::default();
    let guard = Guard::new(delivery.clone(), mcp.state.clone());
    let outcome = start(&mcp, &t, &session, &params, &delivery, call_label).await;
    mcp.state.config.metrics.request(METHOD_CALL_TOOL, 200);
    match outcome {
        Err(e) => json_response(StatusCode::OK, &wire::error(&id, &e)),
        Ok(Answer::Now(result)) => json_response(StatusCode::OK, &wire::result(&id, result)),
        Ok(Answer::Task(run)) => {
            let live = crate::mcp::tasks::live_spec(&mcp.state, &run).await;
            let body = wire::result(&id, created(&run, live.as_ref()));
            json_response(StatusCode::OK, &body).map(|b| guard.watch(b, false))
        }
        Ok(Answer::Hold(run, structured)) => {
            // The stream owns the Run from here: its end, not its first frame, is the delivery.
            // Until now the guard did (a client that left during the create).
            delivery.withdraw();
            let name = run.metadata.name.clone().unwrap_or_default();
            let limit = progress.is_none().then_some(mcp.state.config.hold_limit);
            let (tx, rx) = mpsc::channel(16);
            let held = Held {
                mcp,
                t,
                session,
                bound,
                name,
                progress,
                owns: true,
                structured,
                limit,
                token: None,
                task_updates: false,
                tx,
            };
            held.spawn(id, None, rx)
        }
    }
}

/// Check the call and start its Run.
async fn start(
    mcp: &RunwayMcp,
    t: &Tenant,
    session: &Session,
    params: &Value,
    delivery: &Delivery,
    call_label: String,
) -> Result<Answer, ErrorData> {
    let name = params
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| invalid("tools/call: params.name must be a string"))?;
    let args: Map<String, Value> = match params.get("arguments") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => m.clone(),
        Some(_) => return Err(invalid("tools/call: params.arguments must be an object")),
    };
    if is_builtin(name) {
        return match mcp.builtin(t, name, args).await {
            Some(answer) => answer.map(|r| Answer::Now(older(ServerResult::from(r)))),
            None => Err(invalid(format!("unknown tool: {name}"))),
        };
    }
    if !allowed(&mcp.state, t, Verb::Create, Resource::Runs).await? {
        return Err(forbidden(t, Verb::Create, Resource::Runs));
    }
    let wf = mcp
        .tool(t, name)
        .await
        .ok_or_else(|| invalid(format!("unknown tool: {name}")))?;
    if let Some(req) = &wf.spec.execution.required_client_capabilities
        && let Some(missing) = missing_caps(req, &session.capabilities)
    {
        let names = missing
            .as_object()
            .map(|m| m.keys().cloned().collect::<Vec<_>>().join(", "))
            .unwrap_or_default();
        return Err(missing_capability(&names, missing));
    }
    if wf.spec.all_steps().any(|s| s.sample.is_some()) && !session.samples() {
        return Err(missing_capability("sampling", json!({"sampling": {}})));
    }
    let mode = wf.spec.execution.mode;
    // `params.task` asks for a task; a tool that never runs as one answers in full instead.
    let as_task =
        session.has_tasks() && params.get("task").is_some() && mode != ExecutionMode::Sync;
    if mode == ExecutionMode::Task && !as_task {
        return Err(err(
            codes::METHOD_NOT_FOUND,
            format!("tool {name} runs only as a task: call it with params.task"),
            None,
        ));
    }
    // A call that asked for a task is answered with one or with an error; a call held for its
    // result gets a tool error, which the model is shown.
    if let Err(bad) = check_args(&wf, &args) {
        return match as_task {
            true => Err(bad.error()),
            false => bad
                .result()
                .map(|r| Answer::Now(older(ServerResult::from(r)))),
        };
    }
    let idem = meta(params).and_then(|m| m.get(META_IDEMPOTENCY_KEY));
    let labels = match as_task {
        true => BTreeMap::new(),
        false => BTreeMap::from([(labels::CALL.to_owned(), call_label)]),
    };
    let run = mcp
        .start(t, &wf, args, idem, Some(delivery), as_task, &labels)
        .await?;
    Ok(if as_task {
        Answer::Task(run)
    } else {
        Answer::Hold(run, wf.spec.tool.output_schema.is_none())
    })
}

/// Who asked a `tasks/result`, as far as its stream goes on showing them the task.
pub(crate) struct Asker {
    /// The bearer token it was asked with, which must go on signing its caller in.
    pub(crate) token: Option<Arc<str>>,
    /// Whether the caller may watch Runs: only then does the stream tell the task's status as
    /// it changes (following it, as `subscriptions/listen` does); the questions it may answer
    /// and the answer come either way.
    pub(crate) watches: bool,
}

/// A held request: a call waiting for its Run, or a `tasks/result` waiting for its task.
pub(crate) struct Held {
    mcp: RunwayMcp,
    t: Tenant,
    session: Session,
    bound: String,
    name: String,
    progress: Option<Value>,
    /// Whether the Run belongs to this request (a call), so that the client's going away
    /// cancels it; a `tasks/result` only watches.
    owns: bool,
    /// Whether the answers Runway makes up for a call (it goes on, it waits for someone
    /// else) may carry `structuredContent`: not for a tool that declares `outputSchema`, which
    /// that content would not meet, so those answers are tool errors with text only.
    structured: bool,
    /// How long to hold at most.
    limit: Option<std::time::Duration>,
    /// The bearer token a `tasks/result` was asked with, which must go on signing its caller
    /// in for the stream to go on.
    token: Option<Arc<str>>,
    /// Whether to send `notifications/tasks/status` as the task changes (a `tasks/result` of a
    /// caller who may watch Runs).
    task_updates: bool,
    tx: mpsc::Sender<Result<Event, Infallible>>,
}

impl Held {
    /// `tasks/result` of this revision: held until the task ends, its questions asked on the
    /// stream; the answer is the call's own, tagged with the task it belongs to.
    pub(crate) fn result(
        mcp: RunwayMcp,
        t: Tenant,
        session: Session,
        bound: String,
        id: Value,
        name: String,
        asker: Asker,
    ) -> Response {
        let (tx, rx) = mpsc::channel(16);
        let related = json!({ META_RELATED_TASK: { "taskId": name } });
        let held = Held {
            mcp,
            t,
            session,
            bound,
            name,
            progress: None,
            owns: false,
            structured: true,
            limit: None,
            token: asker.token,
            task_updates: asker.watches,
            tx,
        };
        held.spawn(id, Some(related), rx)
    }

    /// Why the caller of a `tasks/result` may no longer be shown `run`, if so: the token it
    /// asked with no longer signs it in (to be asked again with a fresh one), or it may no
    /// longer read the task.
    async fn refused(&self, run: &Run) -> Option<ErrorData> {
        let state = &self.mcp.state;
        if !still_signed_in(state, &self.t, self.token.as_deref()).await {
            return Some(signed_out());
        }
        (!may_read(state, &self.t, run).await).then(unknown_task)
    }

    /// The Run read again after its feed missed changes: from the cache when it fell behind,
    /// at the source after a gap the feed could not vouch for (closed).
    async fn read_again(&self, missed: RecvError) -> Result<Run, ErrorData> {
        match missed {
            RecvError::Closed => self.mcp.stored_run_now(&self.t, &self.name).await,
            RecvError::Lagged(_) => self.mcp.stored_run(&self.t, &self.name).await,
        }
    }

    /// Run the held request on its own task and answer with its stream.
    fn spawn(
        self,
        id: Value,
        meta: Option<Value>,
        rx: mpsc::Receiver<Result<Event, Infallible>>,
    ) -> Response {
        let keep_alive = self.mcp.state.config.keep_alive;
        tokio::spawn(async move {
            let shutdown = self.mcp.state.shutdown.clone();
            let last = tokio::select! {
                last = self.follow() => last,
                () = self.tx.closed() => None,
                // A server going down leaves the Runs alone; a call it held is told which Run
                // goes on, so that the client need not start the work again.
                () = shutdown.cancelled() => self.owns.then(|| Ok(stopped_under(&self.name, self.structured))),
            };
            match last {
                Some(outcome) => {
                    let message = match outcome {
                        Ok(mut result) => {
                            if let (Some(meta), Value::Object(r)) = (&meta, &mut result) {
                                r.insert("_meta".into(), meta.clone());
                            }
                            wire::result(&id, result)
                        }
                        Err(e) => wire::error(&id, &e),
                    };
                    let _ = self.tx.send(Ok(wire::event(&message))).await;
                }
                None if self.owns && !self.mcp.state.shutdown.is_cancelled() => {
                    // The client went away before its answer: the Run was never handed over.
                    let _ = self
                        .mcp
                        .cancel(&self.t, &self.name, reasons::MCP_REQUEST_CANCELLED)
                        .await;
                }
                None => {}
            }
        });
        let mut resp = Sse::new(ReceiverStream::new(rx))
            .keep_alive(KeepAlive::new().interval(keep_alive))
            .into_response();
        no_proxy_buffering(&mut resp);
        resp
    }
    /// Send one message on the stream; `false` when the client is gone.
    async fn send(&self, message: &Value) -> bool {
        self.tx.send(Ok(wire::event(message))).await.is_ok()
    }

    /// Follow the Run to the call's answer; `None` when the client went away.
    async fn follow(&self) -> Option<Result<Value, ErrorData>> {
        let state = &self.mcp.state;
        let mut changes = state.events.subscribe(&self.t.namespace, &self.name);
        let deadline = self.limit.map(|l| tokio::time::Instant::now() + l);
        let mut sent: Option<(f64, String)> = None;
        let mut asked: BTreeSet<String> = BTreeSet::new();
        let mut told: Option<Value> = None;
        let mut run = match self.mcp.stored_run(&self.t, &self.name).await {
            Ok(r) => r,
            Err(e) => return Some(Err(e)),
        };
        loop {
            // A `tasks/result` shows what `tasks/get` would: once the caller may no longer read
            // the Run (its question answered by someone else, its rights removed), the task is
            // unknown to it. A call's own Run needs only the `create runs` it was made with.
            if !self.owns
                && let Some(refused) = self.refused(&run).await
            {
                return Some(Err(refused));
            }
            if let Some(token) = &self.progress
                && let Some((done, total, msg)) = progress_due(&run, &mut sent)
            {
                let params = json!({"progressToken": token, "progress": done, "total": total, "message": msg});
                if !self
                    .send(&wire::notification(NOTIFICATION_PROGRESS, params))
                    .await
                {
                    return None;
                }
            }
            if self.task_updates && !self.tell_status(&run, &mut told).await {
                return None;
            }
            if let Some(answer) = self.answer_now(&run) {
                return Some(answer);
            }
            if run.phase() == RunPhase::Waiting {
                match self.ask(&run, &mut asked).await {
                    Asked::Gone => return None,
                    // A call answers at once that its client cannot answer; `tasks/result`
                    // blocks until the task ends (someone else may answer), as 2025-11-25 says.
                    Asked::NobodyHere if self.owns => {
                        return Some(Ok(cannot_answer(&run, self.structured)));
                    }
                    Asked::NobodyHere | Asked::Waiting => {}
                }
            }
            let timeout = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                change = changes.recv() => match change {
                    Ok(Change::Updated(r)) if stale(&r, &run) => {}
                    Ok(Change::Updated(r)) => run = Arc::unwrap_or_clone(r),
                    Ok(Change::Deleted(d)) if ends(&d, &run) => {
                        return Some(Err(unknown_task()));
                    }
                    Ok(Change::Deleted(_)) => {}
                    Err(missed) => {
                        changes = state.events.subscribe(&self.t.namespace, &self.name);
                        run = match self.read_again(missed).await {
                            Ok(r) => r,
                            Err(e) => return Some(Err(e)),
                        };
                    }
                },
                () = timeout => return Some(Ok(still_running(&run, self.structured))),
            }
        }
    }

    /// The call's answer when it is due: the Run ended, or (for `tasks/result`) its cancel was
    /// taken, which 2025-11-25 shows as the end it is.
    fn answer_now(&self, run: &Run) -> Option<Result<Value, ErrorData>> {
        if run.phase().is_terminal() {
            return Some(run_result(run).map(|r| older(ServerResult::from(r))));
        }
        let cancelled = cancel_taken_result(run).filter(|_| !self.owns)?;
        Some(Ok(older(ServerResult::from(cancelled))))
    }

    /// Send `notifications/tasks/status` when the task's status or message changed since
    /// `told`; `false` when the client is gone.
    async fn tell_status(&self, run: &Run, told: &mut Option<Value>) -> bool {
        let now = task(run, None);
        let seen = |t: &Value| (t["status"].clone(), t["statusMessage"].clone());
        if told.as_ref().map(seen) == Some(seen(&now)) {
            return true;
        }
        let sent = self
            .send(&wire::notification(NOTIFICATION_TASK_STATUS, now.clone()))
            .await;
        *told = Some(now);
        sent
    }

    /// Ask the client the Run's open questions it can answer, its caller may answer
    /// (`update runs`, the approver rules), and it has not been asked yet.
    async fn ask(&self, run: &Run, asked: &mut BTreeSet<String>) -> Asked {
        let open = projection::open_requests(run);
        if open.is_empty() {
            // Every question has its answer; the Run goes on shortly.
            return Asked::Waiting;
        }
        let mine = awaiting_answer_from(&self.mcp.state, &self.t, run)
            .await
            .unwrap_or_default();
        let requests = run.status.as_ref().map(|s| &s.input_requests);
        let mut answerable = 0;
        for (key, req) in open.into_iter().filter(|(key, _)| mine.contains(key)) {
            let stored = requests.and_then(|r| r.get(&key));
            let can = match stored {
                Some(r) if r.method == METHOD_SAMPLING => self.session.samples(),
                Some(r) if r.params.get("mode").and_then(Value::as_str) == Some("url") => {
                    self.session.elicits_urls()
                }
                Some(r) if !self.session.has_tasks() => {
                    self.session.elicits_forms() && wire::older_form(&r.params["requestedSchema"])
                }
                _ => self.session.elicits_forms(),
            };
            if !can {
                continue;
            }
            answerable += 1;
            if !asked.insert(key.clone()) {
                continue;
            }
            let question = Question {
                run: self.name.clone(),
                key: key.clone(),
            };
            let Ok(id) = question.seal(&self.mcp.state, &self.bound) else {
                continue;
            };
            let wire_req = serde_json::to_value(&req).unwrap_or_else(|_| json!({}));
            let method = wire_req["method"].as_str().unwrap_or_default().to_owned();
            let mut params = wire_req.get("params").cloned().unwrap_or_else(|| json!({}));
            if let Value::Object(p) = &mut params {
                if !self.session.has_tasks() {
                    // `mode` came with 2025-11-25; older clients know forms only.
                    p.remove("mode");
                }
                // Asked on a `tasks/result` stream, a question says which task it is of.
                if !self.owns
                    && let Value::Object(m) = p.entry("_meta").or_insert_with(|| json!({}))
                {
                    m.insert(
                        META_RELATED_TASK.into(),
                        json!({ "taskId": self.name.clone() }),
                    );
                }
            }
            if !self.send(&wire::request(&id, &method, params)).await {
                return Asked::Gone;
            }
        }
        if answerable == 0 {
            Asked::NobodyHere
        } else {
            Asked::Waiting
        }
    }
}

/// What asking came to.
enum Asked {
    /// The client went away.
    Gone,
    /// Nothing open is for this client to answer.
    NobodyHere,
    /// Questions are with the client; wait for its answers.
    Waiting,
}

/// The result of a call whose Run waits for answers this client cannot give: a tool error
/// that says where they can be given. The Run goes on.
fn cannot_answer(run: &Run, structured: bool) -> Value {
    let name = run.metadata.name.clone().unwrap_or_default();
    let text = format!(
        "Run {name} waits for input that this client cannot give. Answer it in the Runway \
         console (/ui/), with `runway tasks answer {name}`, or with the runway_answer_run tool; \
         follow it with runway_get_run."
    );
    let mut result = CallToolResult::error(vec![ContentBlock::text(text)]);
    if structured {
        result.structured_content = Some(json!({"taskId": name, "status": "input_required"}));
    }
    older(result)
}

/// The result of a call held as long as the endpoint holds calls without progress: the Run
/// goes on; the result names it.
fn still_running(run: &Run, structured: bool) -> Value {
    let name = run.metadata.name.clone().unwrap_or_default();
    goes_on(&name, format!("Run {name} is still running."), structured)
}

/// The result of a call held when the server stops: the Run goes on (any replica, or this one
/// after its restart, drives it), and the result names it. The 2025 revisions have no way to
/// resume a blocking call, so this is the way back: the Run's name, where to follow it, and
/// the idempotency key that makes a repeated call find it instead of starting the work again.
fn stopped_under(name: &str, structured: bool) -> Value {
    goes_on(
        name,
        format!(
            "The server stopped while this call waited; run {name} goes on. A call repeated \
             with the same `{META_IDEMPOTENCY_KEY}` finds it again."
        ),
        structured,
    )
}

/// A result saying Run `name` goes on (`lead`) and where to follow it: a success naming the
/// task in `structuredContent`, or, where that content is not the tool's to give
/// (`structured` false: the tool declares `outputSchema`), a tool error with the text alone —
/// a success must meet the schema.
fn goes_on(name: &str, lead: String, structured: bool) -> Value {
    let text = format!(
        "{lead} Follow it with the runway_get_run tool, in the Runway console (/ui/), or with \
         `runway tasks get {name}`."
    );
    let content = vec![ContentBlock::text(text)];
    if !structured {
        return older(CallToolResult::error(content));
    }
    let mut result = CallToolResult::success(content);
    result.structured_content = Some(json!({"taskId": name, "status": "working"}));
    older(result)
}
