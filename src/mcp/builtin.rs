//! Runway's own tools, beside the Workflows: `runway_list_runs` finds a caller's Runs again (the
//! Tasks extension has no `tasks/list`), and the app tools the console and the MCP Apps view
//! use to read one Run in full, answer, cancel, pause, resume and retry it. Every one asks what the
//! matching `tasks/*` method asks (RBAC verb and owner rule; pausing as cancelling) and answers
//! nothing more than it may.

use std::collections::BTreeMap;
use std::sync::Arc;

use kube::core::SelectorExt;
use rmcp::model::{CallToolResponse, ErrorData};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::access::{Access, acts_for_anyone, allowed, awaiting_keys, is_owner, task_run};
use super::catalog;
use super::config::TaskAccess;
use super::cursor::{Position, place};
use super::errors::{forbidden, internal, invalid, unknown_task};
use super::filters::{instant, selector};
use super::handler::RunwayMcp;
use super::own_tools::{
    ANSWER_RUN, CANCEL_RUN, DEFAULT_LIMIT, GET_RUN, LIST_RUNS, LIST_WORKFLOWS, MAX_LIMIT,
    PAUSE_RUN, RESUME_RUN, RETRY_RUN, list_tool_on,
};
use super::pausing::Paused;
use super::state::Tenant;
use super::tasks::live_spec;
use super::views::{for_approver, full, page_text, structured, summary};
use crate::api::{Run, RunPhase};
use crate::auth::{Resource, Verb};
use crate::engine::marks::Marks;
use crate::store::Place;
use crate::store::archive::Entry;

/// Arguments of `runway_list_runs`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ListArgs {
    workflow: Option<String>,
    phase: Option<RunPhase>,
    #[serde(default)]
    waiting_for_me: bool,
    #[serde(default)]
    requested_by_me: bool,
    requested_by: Option<String>,
    since: Option<String>,
    until: Option<String>,
    labels: Option<String>,
    #[serde(default)]
    order: Order,
    limit: Option<usize>,
    cursor: Option<String>,
    #[serde(default)]
    archived: bool,
}

/// Which end of the list comes first.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Order {
    #[default]
    Newest,
    Oldest,
}

/// What `runway_list_runs` keeps of a namespace's Runs, read from its arguments: the filters
/// that need only the Run (the caller's own come after).
struct Query {
    workflow: Option<String>,
    phase: Option<RunPhase>,
    requested_by: Option<String>,
    since: Option<jiff::Timestamp>,
    until: Option<jiff::Timestamp>,
    labels: Option<kube::core::Selector>,
    order: Order,
    after: Option<Position>,
    limit: usize,
}

impl Query {
    /// The query `a` asks for, or what is wrong with it.
    fn of(a: &ListArgs) -> Result<Self, ErrorData> {
        let bad = |field: &str, why: String| {
            invalid(format!("invalid arguments for {LIST_RUNS}: {field}: {why}"))
        };
        let limit = match a.limit {
            None => DEFAULT_LIMIT,
            Some(n @ 1..=MAX_LIMIT) => n,
            Some(_) => return Err(bad("limit", format!("must be 1 to {MAX_LIMIT}"))),
        };
        let after = match a.cursor.as_deref().map(Position::decode) {
            None => None,
            Some(Some(p)) => Some(p),
            Some(None) => return Err(invalid("invalid cursor")),
        };
        let time = |field: &str, v: &Option<String>| {
            v.as_deref()
                .map(|t| instant(t).map_err(|e| bad(field, e)))
                .transpose()
        };
        Ok(Self {
            workflow: a.workflow.clone(),
            phase: a.phase,
            requested_by: a.requested_by.clone(),
            since: time("since", &a.since)?,
            until: time("until", &a.until)?,
            labels: a
                .labels
                .as_deref()
                .map(|l| selector(l).map_err(|e| bad("labels", e)))
                .transpose()?,
            order: a.order,
            after,
            limit,
        })
    }

    /// Whether `r` passes the filters and lies past the cursor. The Workflow is the one the Run
    /// names, not its label: Runs created with kubectl may carry none.
    fn admits(&self, r: &Run) -> bool {
        let (created, _) = place(r);
        let past = |p: &Position| match self.order {
            Order::Newest => place(r) < p.place(),
            Order::Oldest => place(r) > p.place(),
        };
        let no_labels = BTreeMap::new();
        self.workflow
            .as_ref()
            .is_none_or(|w| &r.spec.workflow_ref.name == w)
            && self.phase.is_none_or(|p| r.phase() == p)
            && self.requested_by.as_ref().is_none_or(|u| {
                r.spec
                    .requested_by
                    .as_ref()
                    .is_some_and(|p| &p.username == u)
            })
            && self.since.is_none_or(|t| created >= t)
            && self.until.is_none_or(|t| created < t)
            && self
                .labels
                .as_ref()
                .is_none_or(|s| s.matches(r.metadata.labels.as_ref().unwrap_or(&no_labels)))
            && self.after.as_ref().is_none_or(past)
    }

    /// Where the scan starts: past the cursor, or past the end of the time range it would
    /// meet first (`until` newest first, `since` oldest first), whichever comes later.
    fn start(&self) -> Option<Place<'_>> {
        // No Run has an empty name: (t, "") lies between the Runs created before t and those
        // created at t, which `until` excludes and `since` includes.
        let bound = match self.order {
            Order::Newest => self.until.map(|t| (t, "")),
            Order::Oldest => self.since.map(|t| (t, "")),
        };
        let cursor = self.after.as_ref().map(Position::place);
        match (cursor, bound) {
            (Some(c), Some(b)) => Some(match self.order {
                Order::Newest => c.min(b),
                Order::Oldest => c.max(b),
            }),
            (c, b) => c.or(b),
        }
    }

    /// Whether the scan, in the order asked for, has left the time range at `r`.
    fn past_end(&self, r: &Run) -> bool {
        let (created, _) = place(r);
        match self.order {
            Order::Newest => self.since.is_some_and(|t| created < t),
            Order::Oldest => self.until.is_some_and(|t| created >= t),
        }
    }
}

/// Arguments of a tool that takes none.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NoArgs {}

/// Arguments naming one Run.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RunArgs {
    task_id: String,
    #[serde(default)]
    input_responses: Option<BTreeMap<String, Value>>,
    #[serde(default)]
    reason: Option<String>,
}

/// Arguments of `runway_get_run`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct GetArgs {
    task_id: String,
    #[serde(default)]
    archived: bool,
}

/// Arguments of `runway_retry_run`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RetryArgs {
    task_id: String,
    #[serde(default)]
    arguments: Option<Map<String, Value>>,
}

/// Arguments of `runway_pause_run` and `runway_resume_run`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PauseArgs {
    task_id: String,
    #[serde(default)]
    reason: Option<String>,
}

fn parse<T: for<'de> Deserialize<'de>>(
    tool: &str,
    args: Map<String, Value>,
) -> Result<T, ErrorData> {
    serde_json::from_value(Value::Object(args))
        .map_err(|e| invalid(format!("invalid arguments for {tool}: {e}")))
}

impl RunwayMcp {
    /// Answer a call of one of Runway's own tools; `None` when `name` is not one.
    pub(super) async fn builtin(
        &self,
        t: &Tenant,
        name: &str,
        args: Map<String, Value>,
    ) -> Option<Result<CallToolResponse, ErrorData>> {
        Some(match name {
            LIST_RUNS if list_tool_on(&self.state, &t.namespace) => match parse(name, args) {
                Ok(a) => self.list_runs(t, a).await,
                Err(e) => Err(e),
            },
            LIST_WORKFLOWS => match parse::<NoArgs>(name, args) {
                Ok(NoArgs {}) => self.list_workflows(t).await,
                Err(e) => Err(e),
            },
            GET_RUN => match parse::<GetArgs>(name, args) {
                Ok(a) if a.archived => self.archived_in_full(t, &a.task_id).await,
                Ok(a) => self.run_in_full(t, &a.task_id).await,
                Err(e) => Err(e),
            },
            ANSWER_RUN => match parse::<RunArgs>(name, args) {
                Ok(RunArgs {
                    task_id,
                    input_responses: Some(responses),
                    ..
                }) => self
                    .update_task_of(t, &task_id, &responses)
                    .await
                    .map(|()| structured(json!({"taskId": task_id}), "answer recorded".into())),
                Ok(_) => Err(invalid(format!(
                    "invalid arguments for {name}: missing field `inputResponses`"
                ))),
                Err(e) => Err(e),
            },
            CANCEL_RUN => match parse::<RunArgs>(name, args) {
                Ok(a) => {
                    let reason = a.reason.as_deref().unwrap_or("requested in the console");
                    self.cancel_task_of(t, &a.task_id, reason).await.map(|_| {
                        structured(json!({"taskId": a.task_id}), "cancel requested".into())
                    })
                }
                Err(e) => Err(e),
            },
            PAUSE_RUN | RESUME_RUN => match parse::<PauseArgs>(name, args) {
                Ok(a) => self.pause_run(t, name == PAUSE_RUN, a).await,
                Err(e) => Err(e),
            },
            RETRY_RUN => match parse::<RetryArgs>(name, args) {
                Ok(a) => self
                    .retry_task_of(t, &a.task_id, a.arguments)
                    .await
                    .map(|r| {
                        let text = format!(
                            "retrying {} as {}; reused: {}",
                            a.task_id,
                            r.task_id,
                            if r.reused.is_empty() {
                                "nothing".into()
                            } else {
                                r.reused.join(", ")
                            }
                        );
                        structured(
                            json!({"taskId": r.task_id, "retryOf": a.task_id, "reused": r.reused}),
                            text,
                        )
                    }),
                Err(e) => Err(e),
            },
            _ => return None,
        })
    }

    async fn pause_run(
        &self,
        t: &Tenant,
        pause: bool,
        a: PauseArgs,
    ) -> Result<CallToolResponse, ErrorData> {
        let outcome = self
            .pause_task_of(t, &a.task_id, pause, a.reason.as_deref())
            .await?;
        let text = match (pause, outcome) {
            (true, Paused::Requested) => "pause requested",
            (true, Paused::Already) => "already paused",
            (false, Paused::Requested) => "resume requested",
            (false, Paused::Already) => "not paused",
        };
        Ok(structured(
            json!({"taskId": a.task_id, "paused": pause, "changed": outcome == Paused::Requested}),
            text.into(),
        ))
    }

    async fn list_runs(&self, t: &Tenant, a: ListArgs) -> Result<CallToolResponse, ErrorData> {
        if !allowed(&self.state, t, Verb::Get, Resource::Runs).await? {
            return Err(forbidden(t, Verb::Get, Resource::Runs));
        }
        let q = Query::of(&a)?;
        let sees_all = allowed(&self.state, t, Verb::List, Resource::Runs).await?;
        let lax = self.state.config.task_access == TaskAccess::Namespace;
        let may_answer = allowed(&self.state, t, Verb::Update, Resource::Runs).await?;
        let me = &t.identity.principal;
        // Read in the order asked for, from the cursor on, until one Run past the page shows
        // there is another page: with the store's ordered index a page costs about the page.
        let mut found: Vec<(Arc<Run>, Vec<String>)> = Vec::with_capacity(q.limit);
        let mut more = false;
        let mut visit = |r: &Arc<Run>| {
            if q.past_end(r) {
                return false;
            }
            if !q.admits(r) {
                return true;
            }
            let mine = is_owner(r, me);
            let visible = sees_all
                || mine
                || super::access::awaits_answer_from(r, me)
                || super::access::answered(r, me);
            // The cheap tests first: a scan may pass many Runs the caller does not see.
            if !visible || (a.requested_by_me && !mine) {
                return true;
            }
            let for_anyone = sees_all || mine || lax;
            let waiting = awaiting_keys(r, me, may_answer, for_anyone).unwrap_or_default();
            if a.waiting_for_me && waiting.is_empty() {
                return true;
            }
            if found.len() == q.limit {
                more = true;
                return false;
            }
            found.push((Arc::clone(r), waiting));
            true
        };
        let newest = q.order == Order::Newest;
        if a.archived {
            let archive = self.archive()?;
            let mut each = |e: &Entry| visit(&Arc::new(e.run.clone()));
            crate::store::archive::scan(&**archive, &t.namespace, newest, q.start(), &mut each)
                .await
                .map_err(internal)?;
        } else {
            self.state
                .store
                .scan(&t.namespace, newest, q.start(), &mut visit)
                .await
                .map_err(internal)?;
        }
        let next = more
            .then(|| found.last().map(|(r, _)| Position::of(r).encode()))
            .flatten();
        let mut page: Vec<Value> = found.iter().map(|(r, w)| summary(r, w)).collect();
        if a.archived {
            for s in &mut page {
                s["archived"] = json!(true);
            }
        }
        let text = page_text(&page);
        let mut value = json!({ "runs": page });
        if let Some(n) = next {
            value["nextCursor"] = json!(n);
        }
        Ok(structured(value, text))
    }

    /// The namespace's Workflows for whoever may list them (as `tools/list` asks), with
    /// their Runs' counts and schedules' Runs only for whoever may also list Runs.
    async fn list_workflows(&self, t: &Tenant) -> Result<CallToolResponse, ErrorData> {
        if !allowed(&self.state, t, Verb::List, Resource::Workflows).await? {
            return Err(forbidden(t, Verb::List, Resource::Workflows));
        }
        let runs = if allowed(&self.state, t, Verb::List, Resource::Runs).await? {
            let every = BTreeMap::new();
            let all = self.state.store.list(Some(&t.namespace), &every);
            Some(all.await.map_err(internal)?)
        } else {
            None
        };
        let marks = Marks::new(self.state.config.state_keys.clone());
        let now = jiff::Timestamp::now();
        let mut workflows = self.state.workflows.list(&t.namespace).await;
        workflows.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        let entries: Vec<Value> = workflows
            .iter()
            .map(|wf| {
                let name = wf.metadata.name.as_deref().unwrap_or_default();
                let of_wf: Option<Vec<&Run>> = runs.as_ref().map(|rs| {
                    rs.iter()
                        .map(|r| &**r)
                        .filter(|r| r.spec.workflow_ref.name == name)
                        .collect()
                });
                catalog::workflow(wf, of_wf.as_deref(), &marks, now)
            })
            .collect();
        let text = entries
            .iter()
            .map(|w| {
                let ready = w["ready"]["status"].as_str().unwrap_or("Unknown");
                format!(
                    "{} (tool {}) Ready={ready}",
                    w["name"].as_str().unwrap_or_default(),
                    w["tool"].as_str().unwrap_or_default()
                )
            })
            .collect::<Vec<_>>()
            .join("\n");
        Ok(structured(json!({ "workflows": entries }), text))
    }

    async fn run_in_full(&self, t: &Tenant, task_id: &str) -> Result<CallToolResponse, ErrorData> {
        let run = task_run(&self.state, t, task_id, Access::Read)
            .await?
            .ok_or_else(unknown_task)?;
        let may_answer = allowed(&self.state, t, Verb::Update, Resource::Runs).await?;
        let for_anyone = acts_for_anyone(&self.state, t, &run).await?;
        let awaiting =
            awaiting_keys(&run, &t.identity.principal, may_answer, for_anyone).unwrap_or_default();
        let uid = run.metadata.uid.as_deref().unwrap_or_default();
        let events = match self
            .state
            .event_log
            .recent(&t.namespace, task_id, uid)
            .await
        {
            Ok(e) => serde_json::to_value(e).map_err(internal)?,
            Err(e) => {
                tracing::warn!(error = %e, "events not read");
                Value::Null
            }
        };
        // Cancelling is for whoever may act on the whole Run (approvers may not).
        let may_cancel = may_answer && for_anyone;
        let live = live_spec(&self.state, &run).await;
        let whole = full(&run, live.as_ref(), &awaiting, events);
        let mut detail = if for_anyone {
            whole
        } else {
            for_approver(&whole, &t.identity.principal.username)
        };
        detail["youMayCancel"] = json!(may_cancel && !run.phase().is_terminal());
        // A retry reuses answers given to the requester's Run: theirs alone to ask for.
        let failed = matches!(run.phase(), RunPhase::Failed | RunPhase::Cancelled);
        detail["youMayRetry"] = json!(failed && is_owner(&run, &t.identity.principal));
        let text = format!(
            "{} {} {}",
            task_id,
            run.phase().as_str(),
            detail["statusMessage"].as_str().unwrap_or_default()
        );
        Ok(structured(detail, text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_arguments_are_checked_by_name_and_type() {
        let ok: ListArgs = parse(
            LIST_RUNS,
            json!({"phase": "Waiting", "limit": 5})
                .as_object()
                .cloned()
                .unwrap(),
        )
        .unwrap();
        assert_eq!(ok.phase, Some(RunPhase::Waiting));
        for bad in [
            json!({"phase": "Sleeping"}),
            json!({"limit": "5"}),
            json!({"owner": "me"}),
        ] {
            let e = parse::<ListArgs>(LIST_RUNS, bad.as_object().cloned().unwrap()).unwrap_err();
            assert_eq!(e.code.0, -32602, "{bad}");
        }
    }

    #[test]
    fn only_the_read_tools_take_archived() {
        let obj = |v: Value| v.as_object().cloned().unwrap();
        let get = parse::<GetArgs>(GET_RUN, obj(json!({"taskId": "a", "archived": true})));
        assert!(get.unwrap().archived);
        let list = parse::<ListArgs>(LIST_RUNS, obj(json!({"archived": true})));
        assert!(list.unwrap().archived);
        for bad in [
            json!({"taskId": "a", "archived": "yes"}),
            json!({"taskId": "a", "inputResponses": {}}),
        ] {
            let e = parse::<GetArgs>(GET_RUN, obj(bad.clone())).unwrap_err();
            assert_eq!(e.code.0, -32602, "{bad}");
        }
        let answer = parse::<RunArgs>(ANSWER_RUN, obj(json!({"taskId": "a", "archived": true})));
        assert_eq!(answer.unwrap_err().code.0, -32602);
    }
}
