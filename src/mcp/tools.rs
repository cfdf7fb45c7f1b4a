//! `tools/list` and `tools/call`: Workflows as tools, capability checks, argument questions
//! before a Run exists, creating the Run and waiting on blocking calls.

use std::collections::BTreeMap;
use std::sync::Arc;

use rmcp::RoleServer;
use rmcp::model::{
    CacheScope, CallToolRequestParams, CallToolResponse, CallToolResult, CreateTaskResult,
    ErrorData, InputRequest, InputRequests, InputRequiredResult, ListToolsResult,
    ProgressNotificationParam, Tool,
};
use rmcp::service::RequestContext;
use serde_json::{Map, Value, json};

use super::access::{Access, allowed, awaiting_answer_from, is_owner, readable_run, task_run};
use super::apps::with_view;
use super::caller::tenant;
use super::caps::{declares_forms, declares_sampling, declares_tasks, declares_urls, raw_caps};
use super::delivery::Delivery;
use super::errors::{err, forbidden, internal, invalid, missing_capability, unknown_task};
use super::handler::RunwayMcp;
use super::own_tools::{app_tools, is_builtin, list_tool, list_tool_on};
use super::projection;
use super::sealing::{Resume, fresh_round, round_key, same_call};
use super::state::Tenant;
use super::tasks::progress_due;
use crate::api::{Run, RunPhase, Workflow, reasons};
use crate::auth::{Resource, Verb};
use crate::engine::input::answer_schema_error;
use crate::protocol::{META_IDEMPOTENCY_KEY, METHOD_ELICITATION, METHOD_SAMPLING, codes};
use crate::store::Change;
use crate::store::StoreError;
use crate::store::changes::{ends, stale};
use tokio::sync::broadcast::error::RecvError;

use super::calls::{answer_mode, check_args, idempotency_key, run_result, tool_of};

/// Why a call's create gave it no Run.
enum NotCreated {
    /// Nothing was written: the answer says why.
    Refused(ErrorData),
    /// The store's answer did not come back: the Run may be written all the same.
    Unknown(ErrorData),
}

impl From<ErrorData> for NotCreated {
    fn from(e: ErrorData) -> Self {
        Self::Refused(e)
    }
}

/// How long a caller may cache `tools/list`: Workflows change with `kubectl apply`, and the
/// list depends on the caller's rights (private).
const LIST_TTL_MS: u64 = 5_000;

impl RunwayMcp {
    /// `tools/list`: the namespace's Ready Workflows, the list tool where it is on, and the
    /// app tools for hosts that declared MCP Apps (`ui`), in name order.
    pub(super) async fn tools(&self, t: &Tenant, ui: bool) -> Result<ListToolsResult, ErrorData> {
        if !allowed(&self.state, t, Verb::List, Resource::Workflows).await? {
            return Err(forbidden(t, Verb::List, Resource::Workflows));
        }
        let view = |tool: Tool, app_only: bool| if ui { with_view(tool, app_only) } else { tool };
        let mut tools: Vec<Tool> = self
            .state
            .workflows
            .list(&t.namespace)
            .await
            .iter()
            .filter(|w| w.is_ready())
            .map(|w| view(tool_of(w), false))
            .collect();
        if list_tool_on(&self.state, &t.namespace) {
            tools.push(view(list_tool(), false));
        }
        // App tools only for hosts that keep them from the model (MCP Apps' `visibility`).
        if ui {
            tools.extend(app_tools().into_iter().map(|tool| view(tool, true)));
        }
        tools.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(ListToolsResult::with_all_items(tools)
            .with_ttl_ms(LIST_TTL_MS)
            .with_cache_scope(CacheScope::Private))
    }

    pub(super) async fn tool(&self, t: &Tenant, name: &str) -> Option<Arc<Workflow>> {
        self.state.workflows.tool(&t.namespace, name).await
    }

    /// Fill arguments through MRTR elicitation before a Run exists. `Ok(Err(resp))` is an
    /// answer to send now (`input_required`, or a declined-tool result).
    pub(super) fn elicit(
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
        if !declares_forms(&raw_caps(ctx)) {
            return Err(missing_capability(
                "form elicitation",
                json!({"elicitation": {"form": {}}}),
            ));
        }
        let request: InputRequest = serde_json::from_value(json!({
            "method": METHOD_ELICITATION,
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
                round: fresh_round(),
                asked: q.key.clone(),
            },
        )?;
        Ok(Err(InputRequiredResult::new(Some(reqs), Some(state)).into()))
    }

    /// Create the Run of a call: under the name its idempotency key gives (or find the Run
    /// already there), else as `fresh`.
    async fn create_run(
        &self,
        t: &Tenant,
        wf: &Workflow,
        args: Map<String, Value>,
        idem: Option<&str>,
        fresh: String,
        labels: &BTreeMap<String, String>,
    ) -> Result<Run, NotCreated> {
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
                        return Ok(same_call(owned(e, t)?, wf, &args, k)?);
                    }
                }
                names[0].clone()
            }
            None => fresh,
        };
        let run = Run::requested(
            &t.namespace,
            &name,
            &wf_name,
            Value::Object(args),
            Some(t.identity.principal.clone()),
            jiff::Timestamp::now(),
        )
        .with_labels(labels.iter().map(|(k, v)| (k.as_str(), v.clone())))
        .with_annotations(crate::telemetry::run_annotation());
        let created = match &self.state.config.starter {
            Some(starter) => starter.start(run.clone(), wf).await,
            None => self.state.store.create(run.clone()).await,
        };
        match created {
            Ok(r) => {
                crate::telemetry::record_run(&r);
                Ok(r)
            }
            Err(StoreError::AlreadyExists) if idem.is_some() => {
                let existing = self
                    .state
                    .store
                    .get(&t.namespace, &name)
                    .await
                    .map_err(internal)?;
                let Some(e) = existing else {
                    return Err(internal("idempotent run vanished; retry").into());
                };
                let empty = Map::new();
                let args = run.spec.arguments.as_ref().and_then(Value::as_object);
                let args = args.unwrap_or(&empty);
                Ok(same_call(owned(e, t)?, wf, args, idem.unwrap_or_default())?)
            }
            // The API server's answer was lost (a proxy's timeout, a dropped connection) or
            // the client library sent the create again after one that landed: the name is
            // this call's own, so the Run it finds is this call's.
            Err(e @ (StoreError::Backend(_) | StoreError::AlreadyExists)) => {
                Err(NotCreated::Unknown(internal(e)))
            }
            Err(e) => Err(internal(e).into()),
        }
    }

    /// The end of every `tools/call` that starts a Run, on either path and in both protocol
    /// eras, once its caller checked the arguments ([`check_args`]: each era answers bad ones
    /// its own way): check the idempotency key, create the Run (or find the one the
    /// key names) carrying `labels` besides its Workflow's, and hand it to the request's
    /// `delivery` watch when nothing else will tell the client about it.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn start(
        &self,
        t: &Tenant,
        wf: &Workflow,
        args: Map<String, Value>,
        idem: Option<&Value>,
        delivery: Option<&Delivery>,
        as_task: bool,
        labels: &BTreeMap<String, String>,
    ) -> Result<Run, ErrorData> {
        let idem = idempotency_key(idem)?;
        let fresh = projection::new_task_id(wf.metadata.name.as_deref().unwrap_or_default());
        // Until the answer naming it is delivered, the Run belongs to this request (a retry
        // with the same idempotency key finds it, so only calls without one give it up). It is
        // announced before it is created: a client that leaves while the create is under way
        // drops this future, and the create may land all the same.
        if idem.is_none()
            && let Some(delivery) = delivery
        {
            delivery.announce(t, &fresh);
        }
        let run = match self
            .create_run(t, wf, args, idem.as_deref(), fresh, labels)
            .await
        {
            Ok(run) => run,
            Err(NotCreated::Refused(e)) => {
                // Nothing was created: a client that leaves now has no Run to give up.
                if let Some(d) = delivery {
                    d.withdraw();
                }
                return Err(e);
            }
            Err(NotCreated::Unknown(e)) => {
                // The client hears that its call failed, so a Run that lands all the same
                // must not go on beside the one its retry makes.
                if let Some(d) = delivery {
                    d.give_up(&self.state);
                }
                return Err(e);
            }
        };
        let name = run.metadata.name.as_deref().unwrap_or_default();
        tracing::info!(namespace = %t.namespace, run = %name, tool = %wf.tool_name(), by = %t.identity.principal.username, task = as_task, "run created");
        Ok(run)
    }

    /// Hold a blocking call until its Run finishes, or needs input the client can give.
    pub(super) async fn await_run(
        &self,
        t: &Tenant,
        name: &str,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let mut changes = self.state.events.subscribe(&t.namespace, name);
        let progress = ctx.meta.get_progress_token();
        let caps = raw_caps(ctx);
        let (forms, urls, sampling) = (
            declares_forms(&caps),
            declares_urls(&caps),
            declares_sampling(&caps),
        );
        // A client that declared the Tasks extension gets a task for a Run that outlives the
        // call: one that waits for answers, or runs past the hold limit.
        let tasks = declares_tasks(&caps);
        let limit = tokio::time::sleep(self.state.config.hold_limit);
        tokio::pin!(limit);
        let mut sent: Option<(f64, String)> = None;
        let mut run = self.stored_run(t, name).await?;
        loop {
            if let Some(token) = &progress
                && let Some((done, total, msg)) = progress_due(&run, &mut sent)
            {
                let p = ProgressNotificationParam::new(token.clone(), done)
                    .with_total(total)
                    .with_message(msg);
                let _ = ctx.peer.notify_progress(p).await;
            }
            if run.phase().is_terminal() {
                return run_result(&run);
            }
            if tasks
                && run.phase() == RunPhase::Waiting
                && !projection::open_requests(&run).is_empty()
            {
                return Ok(CreateTaskResult::new(projection::task(&run, None)).into());
            }
            if run.phase() == RunPhase::Waiting
                && let Some(ask) = self.ask_on_call(t, &run, (forms, urls, sampling)).await?
            {
                return Ok(ask);
            }
            tokio::select! {
                biased;
                change = changes.recv() => match change {
                    Ok(Change::Updated(r)) if stale(&r, &run) => {}
                    Ok(Change::Updated(r)) => run = Arc::unwrap_or_clone(r),
                    Ok(Change::Deleted(d)) if ends(&d, &run) => {
                        return Err(unknown_task());
                    }
                    Ok(Change::Deleted(_)) => {}
                    Err(RecvError::Lagged(_)) => {
                        changes = self.state.events.subscribe(&t.namespace, name);
                        run = self.stored_run(t, name).await?;
                    }
                    // After a gap the feed could not vouch for the Run: read at the source.
                    Err(RecvError::Closed) => {
                        changes = self.state.events.subscribe(&t.namespace, name);
                        run = self.stored_run_now(t, name).await?;
                    }
                },
                _ = &mut limit, if tasks => {
                    return Ok(CreateTaskResult::new(projection::task(&run, None)).into());
                }
                _ = self.state.shutdown.cancelled() => return self.way_back(t, &run, tasks),
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

    /// What a held call answers when the server stops under it (the Run carries on): a way
    /// back to the same Run that needs nothing but the protocol. A client of the Tasks
    /// extension gets the task; any other gets an MRTR round without questions, whose state
    /// names the Run, so that its retry — on another replica, or after the restart — waits on
    /// that Run instead of starting the work again.
    fn way_back(&self, t: &Tenant, run: &Run, tasks: bool) -> Result<CallToolResponse, ErrorData> {
        if tasks {
            return Ok(CreateTaskResult::new(projection::task(run, None)).into());
        }
        let state = self.seal(
            t,
            &Resume::Run {
                run: run.metadata.name.clone().unwrap_or_default(),
                uid: run.metadata.uid.clone().unwrap_or_default(),
                asked: Some(vec![]),
            },
        )?;
        Ok(InputRequiredResult::new(None, Some(state)).into())
    }

    /// The `input_required` answer of a held call whose Run waits: the open questions this
    /// client can answer (`can` = forms, URLs, its model) and its caller may (`update runs`,
    /// the approver rules: a question for someone else, asked here, would only be refused),
    /// with a state naming the Run and them; `None` when there are none (they wait for
    /// someone else).
    async fn ask_on_call(
        &self,
        t: &Tenant,
        run: &Run,
        can: (bool, bool, bool),
    ) -> Result<Option<CallToolResponse>, ErrorData> {
        let (forms, urls, sampling) = can;
        let mut open = projection::open_requests(run);
        let mine = awaiting_answer_from(&self.state, t, run)
            .await
            .unwrap_or_default();
        let asked = run.status.as_ref().map(|s| &s.input_requests);
        open.retain(|key, _| mine.contains(key));
        open.retain(|key, _| match asked.and_then(|a| a.get(key)) {
            Some(r) if r.method == METHOD_SAMPLING => sampling,
            Some(r) if r.params.get("mode").and_then(Value::as_str) == Some("url") => urls,
            _ => forms,
        });
        if open.is_empty() {
            return Ok(None);
        }
        let state = self.seal(
            t,
            &Resume::Run {
                run: run.metadata.name.clone().unwrap_or_default(),
                uid: run.metadata.uid.clone().unwrap_or_default(),
                asked: Some(open.keys().cloned().collect()),
            },
        )?;
        Ok(Some(
            InputRequiredResult::new(Some(open), Some(state)).into(),
        ))
    }

    /// An MRTR retry of a blocking call: record the answers on the Run the state names (the
    /// same Run: its uid must match), and keep waiting.
    async fn resume_run(
        &self,
        t: &Tenant,
        run: &str,
        uid: &str,
        responses: &BTreeMap<String, Value>,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let current = readable_run(&self.state, t, run)
            .await?
            .ok_or_else(|| invalid("invalid requestState"))?;
        if current.spec.workflow_ref.name.is_empty() {
            return Err(unknown_task());
        }
        if !uid.is_empty() && current.metadata.uid.as_deref() != Some(uid) {
            return Err(invalid("invalid requestState: its run is gone"));
        }
        // Answering on the retry is `tasks/update` by another road: the same rights.
        if !responses.is_empty()
            && task_run(&self.state, t, run, Access::Answer)
                .await?
                .is_none()
        {
            return Err(forbidden(t, Verb::Update, Resource::Runs));
        }
        // The retry holds the Run now: its answer must reach the client, as the first one's did.
        if let Some(delivery) = ctx
            .extensions
            .get::<http::request::Parts>()
            .and_then(|p| p.extensions.get::<Delivery>())
        {
            delivery.announce(t, run);
        }
        self.answer(t, run, responses).await?;
        self.await_run(t, run, ctx).await
    }

    /// `tools/call`: resume or start a call, create its Run, and answer with a task or wait.
    pub(super) async fn call(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let t = tenant(&ctx)?;
        if is_builtin(&request.name) {
            let args = request.arguments.clone().unwrap_or_default();
            return match self.builtin(&t, &request.name, args).await {
                Some(answer) => answer,
                None => Err(invalid(format!("unknown tool: {}", request.name))),
            };
        }
        if !allowed(&self.state, &t, Verb::Create, Resource::Runs).await? {
            return Err(forbidden(&t, Verb::Create, Resource::Runs));
        }
        let resume = match &request.request_state {
            Some(s) => Some(self.open(&t, s)?),
            None => None,
        };
        let given = request.input_responses.clone().unwrap_or_default();
        let responses = Resume::answers(resume.as_ref(), given.into_iter().collect());
        if let Some(Resume::Run { run, uid, .. }) = &resume {
            return self.resume_run(&t, run, uid, &responses, &ctx).await;
        }
        let wf = self
            .tool(&t, &request.name)
            .await
            .ok_or_else(|| invalid(format!("unknown tool: {}", request.name)))?;
        let as_task = answer_mode(&wf, &raw_caps(&ctx))?;
        let mut args = request.arguments.clone().unwrap_or_default();
        let mut round = None;
        if let Some(Resume::Args {
            tool,
            args: saved,
            round: id,
            ..
        }) = resume
        {
            if tool != wf.tool_name() {
                return Err(invalid("invalid requestState"));
            }
            if let Value::Object(saved) = saved {
                for (k, v) in saved {
                    args.entry(k).or_insert(v);
                }
            }
            round = (!id.is_empty()).then(|| Value::String(round_key(&id)));
        }
        let args = match self.elicit(&t, &wf, &ctx, args, &responses)? {
            Ok(args) => args,
            Err(answer) => return Ok(answer),
        };
        let delivery = ctx
            .extensions
            .get::<http::request::Parts>()
            .and_then(|p| p.extensions.get::<Delivery>());
        if let Err(bad) = check_args(&wf, &args) {
            return bad.result().map(Into::into);
        }
        // A completed round names its Run (unless the caller named it): a replay of the
        // state finds that Run instead of starting another.
        let idem = ctx.meta.get(META_IDEMPOTENCY_KEY).or(round.as_ref());
        let run = self
            .start(&t, &wf, args, idem, delivery, as_task, &BTreeMap::new())
            .await?;
        if as_task {
            return Ok(CreateTaskResult::new(projection::task(&run, Some(&wf.spec))).into());
        }
        let name = run.metadata.name.clone().unwrap_or_default();
        self.await_run(&t, &name, &ctx).await
    }
}

/// The Run an idempotency key named, if the caller requested it. The name is keyed by the
/// caller, so another principal's Run under it is one someone created by that name (with
/// kubectl, say) or one of a namesake with another uid: refused as a reused key, which says
/// nothing of the Run.
fn owned(run: Run, t: &Tenant) -> Result<Run, ErrorData> {
    if is_owner(&run, &t.identity.principal) {
        Ok(run)
    } else {
        Err(invalid("idempotency key reused with different arguments"))
    }
}
