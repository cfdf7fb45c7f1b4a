//! Runway's own tools, beside the Workflows: `runway_list_runs` finds a caller's Runs again (the
//! Tasks extension has no `tasks/list`), and the app tools the console and the MCP Apps view
//! use to read one Run in full, answer it and cancel it. Every one asks what the matching
//! `tasks/*` method asks (RBAC verb and owner rule) and answers nothing more than it may.

use std::collections::BTreeMap;
use std::sync::Arc;

use rmcp::model::{CallToolResponse, CallToolResult, ContentBlock, ErrorData, Tool};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::access::{Access, acts_for_anyone, allowed, awaiting_keys, is_owner, task_run};
use super::config::TaskAccess;
use super::errors::{forbidden, internal, invalid, unknown_task};
use super::handler::RunwayMcp;
use super::state::{McpState, Tenant};
use super::tasks::live_spec;
use super::views::{for_approver, full, page_text, summary};
use crate::api::{Run, RunPhase};
use crate::auth::{Resource, Verb};
use crate::protocol::BUILTIN_TOOL_PREFIX;

/// Lists the caller's Runs of the namespace (a model and app tool).
pub(crate) const LIST_RUNS: &str = "runway_list_runs";
/// One Run in full: steps, questions, answers, Events (an app tool).
pub(crate) const GET_RUN: &str = "runway_get_run";
/// Answers a Run's open questions, as `tasks/update` does (an app tool).
pub(crate) const ANSWER_RUN: &str = "runway_answer_run";
/// Cancels a Run, as `tasks/cancel` does (an app tool).
pub(crate) const CANCEL_RUN: &str = "runway_cancel_run";

/// Page size of `runway_list_runs` when the call names none.
const DEFAULT_LIMIT: usize = 20;
/// Largest page of `runway_list_runs`.
const MAX_LIMIT: usize = 100;

/// Whether `name` is one of Runway's own tools.
pub(crate) fn is_builtin(name: &str) -> bool {
    name.starts_with(BUILTIN_TOOL_PREFIX)
}

/// Whether the list tool is on for `namespace`.
pub(crate) fn list_tool_on(state: &McpState, namespace: &str) -> bool {
    state.config.list_tool && !state.config.list_tool_off_in.contains(namespace)
}

fn schema(v: Value) -> Arc<Map<String, Value>> {
    Arc::new(v.as_object().cloned().unwrap_or_default())
}

fn task_id_schema() -> Value {
    json!({"type": "string", "description": "The Run's name (the MCP taskId)", "maxLength": 253})
}

/// The list tool's definition.
pub(crate) fn list_tool() -> Tool {
    let phases: Vec<&str> = RunPhase::ALL.iter().map(|p| p.as_str()).collect();
    Tool::new(
        LIST_RUNS,
        "List Runs (tasks) of this namespace that you may see, newest first: the ones you \
         requested, asked you or you answered, or all of them if you may list runs. \
         Use it to find a taskId again; then use tasks/get.",
        schema(json!({
            "type": "object",
            "properties": {
                "workflow": {"type": "string", "description": "Only Runs of this Workflow (its name)"},
                "phase": {"type": "string", "enum": phases},
                "waitingForMe": {"type": "boolean", "description": "Only Runs with a question you may answer"},
                "requestedByMe": {"type": "boolean", "description": "Only Runs you requested"},
                "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT},
                "cursor": {"type": "string", "description": "nextCursor of the previous page"}
            },
            "additionalProperties": false
        })),
    )
    .with_title("List Runs")
    .with_annotations(
        rmcp::model::ToolAnnotations::new()
            .read_only(true)
            .destructive(false)
            .idempotent(true)
            .open_world(false),
    )
}

/// The app tools' definitions (listed for clients that declare MCP Apps).
pub(crate) fn app_tools() -> Vec<Tool> {
    vec![
        Tool::new(
            GET_RUN,
            "One Run in full: arguments, steps and attempts, questions and answers, Events.",
            schema(json!({
                "type": "object",
                "properties": {"taskId": task_id_schema()},
                "required": ["taskId"],
                "additionalProperties": false
            })),
        )
        .with_title("Show a Run"),
        Tool::new(
            ANSWER_RUN,
            "Answer a Run's open questions (as tasks/update).",
            schema(json!({
                "type": "object",
                "properties": {
                    "taskId": task_id_schema(),
                    "inputResponses": {"type": "object", "description": "Answers by question key: {action, content}"}
                },
                "required": ["taskId", "inputResponses"],
                "additionalProperties": false
            })),
        )
        .with_title("Answer a Run"),
        Tool::new(
            CANCEL_RUN,
            "Cancel a Run (as tasks/cancel).",
            schema(json!({
                "type": "object",
                "properties": {
                    "taskId": task_id_schema(),
                    "reason": {"type": "string", "maxLength": 1024}
                },
                "required": ["taskId"],
                "additionalProperties": false
            })),
        )
        .with_title("Cancel a Run"),
    ]
}

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
    limit: Option<usize>,
    cursor: Option<String>,
}

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

fn parse<T: for<'de> Deserialize<'de>>(
    tool: &str,
    args: Map<String, Value>,
) -> Result<T, ErrorData> {
    serde_json::from_value(Value::Object(args))
        .map_err(|e| invalid(format!("invalid arguments for {tool}: {e}")))
}

/// Where a page starts: after the Run created at `created` named `name` (newest first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Position {
    created: jiff::Timestamp,
    name: String,
}

/// A Run's place in the list, borrowed: newest first means the greatest of these first.
pub(super) fn place(run: &Run) -> (jiff::Timestamp, &str) {
    let created = run.metadata.creation_timestamp.as_ref().map(|t| t.0);
    (
        created.unwrap_or(jiff::Timestamp::UNIX_EPOCH),
        run.metadata.name.as_deref().unwrap_or_default(),
    )
}

impl Position {
    pub(super) fn of(run: &Run) -> Self {
        let (created, name) = place(run);
        Self {
            created,
            name: name.to_owned(),
        }
    }

    pub(super) fn place(&self) -> (jiff::Timestamp, &str) {
        (self.created, &self.name)
    }

    pub(super) fn encode(&self) -> String {
        data_encoding::BASE64URL_NOPAD.encode(format!("{}\n{}", self.created, self.name).as_bytes())
    }

    pub(super) fn decode(cursor: &str) -> Option<Self> {
        let bytes = data_encoding::BASE64URL_NOPAD
            .decode(cursor.as_bytes())
            .ok()?;
        let text = String::from_utf8(bytes).ok()?;
        let (created, name) = text.split_once('\n')?;
        let created = created.parse::<jiff::Timestamp>().ok()?;
        crate::api::is_dns_subdomain(name).then(|| Self {
            created,
            name: name.into(),
        })
    }
}

/// A result carrying `value` as structured content and as text.
fn structured(value: Value, text: String) -> CallToolResponse {
    let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
    result.structured_content = Some(value);
    result.into()
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
            GET_RUN => match parse::<RunArgs>(name, args) {
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
                    self.cancel_task_of(t, &a.task_id, reason).await.map(|()| {
                        structured(json!({"taskId": a.task_id}), "cancel requested".into())
                    })
                }
                Err(e) => Err(e),
            },
            _ => return None,
        })
    }

    async fn list_runs(&self, t: &Tenant, a: ListArgs) -> Result<CallToolResponse, ErrorData> {
        if !allowed(&self.state, t, Verb::Get, Resource::Runs).await? {
            return Err(forbidden(t, Verb::Get, Resource::Runs));
        }
        let limit = match a.limit {
            None => DEFAULT_LIMIT,
            Some(n @ 1..=MAX_LIMIT) => n,
            Some(_) => {
                return Err(invalid(format!(
                    "invalid arguments for {LIST_RUNS}: limit must be 1 to {MAX_LIMIT}"
                )));
            }
        };
        let after = match a.cursor.as_deref().map(Position::decode) {
            None => None,
            Some(Some(p)) => Some(p),
            Some(None) => return Err(invalid("invalid cursor")),
        };
        let sees_all = allowed(&self.state, t, Verb::List, Resource::Runs).await?;
        let lax = self.state.config.task_access == TaskAccess::Namespace;
        let may_answer = allowed(&self.state, t, Verb::Update, Resource::Runs).await?;
        // By the Run's Workflow, not its label: Runs created with kubectl may carry none.
        let runs = self
            .state
            .store
            .list(Some(&t.namespace), &BTreeMap::new())
            .await
            .map_err(internal)?;
        let me = &t.identity.principal;
        // Filter and order on borrowed fields; only the page's Runs are summarized.
        let mut found: Vec<(&Run, Vec<String>)> = runs
            .iter()
            .map(|r| &**r)
            .filter(|r| {
                a.workflow
                    .as_ref()
                    .is_none_or(|w| &r.spec.workflow_ref.name == w)
            })
            .filter(|r| a.phase.is_none_or(|p| r.phase() == p))
            .filter(|r| after.as_ref().is_none_or(|p| place(r) < p.place()))
            .filter_map(|r| {
                let mine = is_owner(r, me);
                let for_anyone = sees_all || mine || lax;
                let waiting = awaiting_keys(r, me, may_answer, for_anyone).unwrap_or_default();
                let visible = sees_all
                    || mine
                    || super::access::awaits_answer_from(r, me)
                    || super::access::answered(r, me);
                let wanted =
                    (!a.requested_by_me || mine) && (!a.waiting_for_me || !waiting.is_empty());
                (visible && wanted).then_some((r, waiting))
            })
            .collect();
        let more = found.len() > limit;
        if more {
            found.select_nth_unstable_by(limit - 1, |x, y| place(y.0).cmp(&place(x.0)));
            found.truncate(limit);
        }
        found.sort_by(|x, y| place(y.0).cmp(&place(x.0)));
        let next = more
            .then(|| found.last().map(|(r, _)| Position::of(r).encode()))
            .flatten();
        let page: Vec<Value> = found.iter().map(|(r, w)| summary(r, w)).collect();
        let text = page_text(&page);
        let mut value = json!({ "runs": page });
        if let Some(n) = next {
            value["nextCursor"] = json!(n);
        }
        Ok(structured(value, text))
    }

    async fn run_in_full(&self, t: &Tenant, task_id: &str) -> Result<CallToolResponse, ErrorData> {
        let run = task_run(&self.state, t, task_id, Access::Read)
            .await?
            .ok_or_else(unknown_task)?;
        let may_answer = allowed(&self.state, t, Verb::Update, Resource::Runs).await?;
        let for_anyone = acts_for_anyone(&self.state, t, &run).await;
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
    fn cursors_round_trip_and_refuse_anything_else() {
        let p = Position {
            created: "2026-12-01T10:00:00Z".parse().unwrap(),
            name: "deploy-abc".into(),
        };
        assert_eq!(Position::decode(&p.encode()), Some(p));
        for bad in [
            "",
            "!!",
            "bm90IGEgY3Vyc29y",
            &data_encoding::BASE64URL_NOPAD.encode(b"yesterday\nx"),
        ] {
            assert_eq!(Position::decode(bad), None, "{bad}");
        }
        let upper = data_encoding::BASE64URL_NOPAD.encode(b"2026-12-01T10:00:00Z\nNot_A_Name");
        assert_eq!(Position::decode(&upper), None);
    }

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
}
