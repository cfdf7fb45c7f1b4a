//! How Runs read in Runway's own tools: a line of the list, the whole Run for whoever may act
//! on all of it, and the narrower view of an approver, who sees what `tasks/get` shows her.

use serde::Serialize;
use serde_json::{Value, json};

use crate::api::{Run, Step, StepKind, WorkflowSpec, labels};
use crate::engine::dependencies;
use crate::protocol::METHOD_ELICITATION;

/// One Run as the list shows it: borrowed from the Run, and made a JSON value in one pass
/// whose objects are allocated at their size (the console reads a page of these every two
/// seconds per viewer).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Summary<'a> {
    task_id: Option<&'a str>,
    workflow: &'a str,
    phase: &'a str,
    status_message: Option<&'a str>,
    requested_by: Option<&'a str>,
    created_at: Option<String>,
    finished_at: Option<&'a str>,
    waiting_for: Vec<&'a str>,
    awaiting_you: &'a [String],
}

/// One Run as the list shows it.
pub(super) fn summary(run: &Run, awaiting: &[String]) -> Value {
    let st = run.status.as_ref();
    let line = Summary {
        task_id: run.metadata.name.as_deref(),
        workflow: &run.spec.workflow_ref.name,
        phase: run.phase().as_str(),
        status_message: st.and_then(|s| s.status_message.as_deref()),
        requested_by: run.spec.requested_by.as_ref().map(|p| p.username.as_str()),
        created_at: run
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0.to_string()),
        finished_at: st.and_then(|s| s.finished_at.as_deref()),
        waiting_for: st.map_or_else(Vec::new, |s| {
            s.input_requests.keys().map(String::as_str).collect()
        }),
        awaiting_you: awaiting,
    };
    // Strings and lists of strings only: serializing them cannot fail.
    serde_json::to_value(line).unwrap_or_default()
}

/// The questions of a Run still open, as a person reads them.
fn open_questions(run: &Run, st: &crate::api::RunStatus, awaiting: &[String]) -> Vec<Value> {
    st.input_requests
        .iter()
        .filter(|(key, req)| !run.spec.input_responses.contains_key(*key) || req.needed() > 1)
        .map(|(key, req)| {
            let form = req.method == METHOD_ELICITATION
                && req
                    .params
                    .get("mode")
                    .and_then(Value::as_str)
                    .unwrap_or("form")
                    == "form";
            json!({
                "key": key,
                "step": req.step,
                "name": req.name,
                "method": req.method,
                "form": form,
                "message": req.params.get("message"),
                "requestedSchema": req.params.get("requestedSchema"),
                "url": req.params.get("url"),
                "askedAt": req.asked_at,
                "approvals": req.needed(),
                "approvedBy": req.approved_by,
                "awaitingYou": awaiting.contains(key),
            })
        })
        .collect()
}

/// One Run in full, for people: what was asked, by whom, what happened step by step.
pub(super) fn full(
    run: &Run,
    live: Option<&WorkflowSpec>,
    awaiting: &[String],
    events: Value,
) -> Value {
    let st = run.status.clone().unwrap_or_default();
    let spec = run.workflow_snapshot().or_else(|| live.cloned());
    let questions = open_questions(run, &st, awaiting);
    let answers: Vec<Value> = run
        .spec
        .input_responses
        .iter()
        .map(|(key, r)| {
            json!({
                "key": key,
                "action": r.action,
                "content": r.content,
                "answeredBy": r.answered_by,
                "answeredAt": r.answered_at,
            })
        })
        .collect();
    json!({
        "taskId": run.metadata.name,
        "namespace": run.metadata.namespace,
        "workflow": run.spec.workflow_ref.name,
        "title": spec.as_ref().and_then(|s| s.tool.title.clone()),
        "description": spec.as_ref().and_then(|s| s.tool.description.clone()),
        "phase": run.phase().as_str(),
        "statusMessage": st.status_message,
        "currentStep": st.current_step,
        "createdAt": run.metadata.creation_timestamp.as_ref().map(|t| t.0.to_string()),
        "startedAt": st.started_at,
        "finishedAt": st.finished_at,
        "deadline": st.deadline,
        "requestedBy": run.spec.requested_by,
        "arguments": run.spec.arguments,
        "steps": st.steps,
        "plannedSteps": spec.as_ref().map(|s| s.steps.iter().map(|x| x.name.clone()).collect::<Vec<_>>()),
        "graph": spec.as_ref().map(graph),
        "parent": parent(run),
        "labels": run.metadata.labels,
        "questions": questions,
        "answers": answers,
        "cancel": run.spec.cancel,
        "paused": st.paused,
        "retryOf": run.spec.retry_of,
        "notes": st.notes,
        "result": st.result,
        "error": st.error,
        "events": events,
    })
}

/// The kind of a step as the graph names it.
fn kind_name(step: &Step) -> &'static str {
    match step.kind() {
        StepKind::Http(_) => "http",
        StepKind::Tool(_) => "tool",
        StepKind::Job(_) => "job",
        StepKind::Input(_) => "input",
        StepKind::Sample(_) => "sample",
        StepKind::Delay(_) => "delay",
        StepKind::Fail(_) => "fail",
        StepKind::Workflow(_) => "workflow",
        StepKind::None => "none",
    }
}

/// The shape of a Workflow's steps, for drawing: each step with its kind, what it waits for
/// (its `dependsOn`, else the step listed before it, as the engine reads it), whether it runs
/// per item or only `when` something holds, and the Workflow a `workflow` step starts.
/// `finally` steps wait, besides their own, for every main step to end.
pub(super) fn graph(spec: &WorkflowSpec) -> Value {
    let nodes = |list: &[Step], finally: bool| -> Vec<Value> {
        (0..list.len())
            .map(|i| {
                let s = &list[i];
                json!({
                    "name": s.name,
                    "kind": kind_name(s),
                    "finally": finally,
                    "dependsOn": dependencies(list, i),
                    "forEach": s.for_each.is_some(),
                    "when": s.when.is_some(),
                    "retries": s.retry.as_ref().and_then(|r| r.limit.clone()),
                    "workflow": match s.kind() {
                        StepKind::Workflow(w) => Some(w.name.clone()),
                        _ => None,
                    },
                })
            })
            .collect()
    };
    let mut all = nodes(&spec.steps, false);
    all.extend(nodes(&spec.finally, true));
    json!({ "steps": all })
}

/// The Run whose `workflow` step started this one, by name (its label).
fn parent(run: &Run) -> Option<Value> {
    let name = run.metadata.labels.as_ref()?.get(labels::PARENT)?;
    Some(json!({ "taskId": name }))
}

/// A page of Run summaries as text: one line each (task id, phase, status message).
pub(super) fn page_text(page: &[Value]) -> String {
    if page.is_empty() {
        return "no runs".to_owned();
    }
    page.iter()
        .map(|s| {
            format!(
                "{} {} {}",
                s["taskId"].as_str().unwrap_or_default(),
                s["phase"].as_str().unwrap_or_default(),
                s["statusMessage"].as_str().unwrap_or_default()
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The fields of [`full`] an approver reads: what `tasks/get` shows her (status, the open
/// questions, the result) and where the Run stands, but not the caller's arguments, the steps'
/// outputs, other people's answers, notes or Events, which are the requester's business.
const APPROVER_FIELDS: [&str; 17] = [
    "taskId",
    "namespace",
    "workflow",
    "title",
    "description",
    "phase",
    "statusMessage",
    "currentStep",
    "createdAt",
    "startedAt",
    "finishedAt",
    "deadline",
    "plannedSteps",
    "graph",
    "questions",
    "result",
    "error",
];

/// What of a step's record an approver sees: which step, how far, since when.
const APPROVER_STEP_FIELDS: [&str; 7] = [
    "name",
    "finally",
    "phase",
    "attempt",
    "startedAt",
    "finishedAt",
    "wakeAt",
];

/// [`full`] narrowed for a caller who reads the Run only as one of its approvers (named by an
/// open question, or having answered one): `username` is hers, so that her own answers stay.
pub(super) fn for_approver(full: &Value, username: &str) -> Value {
    let mut out = serde_json::Map::new();
    for key in APPROVER_FIELDS {
        if let Some(v) = full.get(key) {
            out.insert(key.to_owned(), v.clone());
        }
    }
    let pick = |v: &Value, keys: &[&str]| -> Value {
        keys.iter()
            .filter_map(|k| v.get(*k).map(|x| ((*k).to_owned(), x.clone())))
            .collect::<serde_json::Map<_, _>>()
            .into()
    };
    let steps: Vec<Value> = full["steps"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| pick(s, &APPROVER_STEP_FIELDS))
        .collect();
    out.insert("steps".into(), steps.into());
    let answers: Vec<Value> = full["answers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|a| a["answeredBy"].as_str() == Some(username))
        .cloned()
        .collect();
    out.insert("answers".into(), answers.into());
    out.insert(
        "requestedBy".into(),
        json!({ "username": full["requestedBy"]["username"] }),
    );
    out.into()
}

/// A result carrying `value` as structured content and as text.
pub(super) fn structured(value: Value, text: String) -> rmcp::model::CallToolResponse {
    let mut result =
        rmcp::model::CallToolResult::success(vec![rmcp::model::ContentBlock::text(text)]);
    result.structured_content = Some(value);
    result.into()
}
