//! Runs as MCP tasks: the projection of a Run onto the task wire shape, and task ids.

use jiff::{SignedDuration, Timestamp};
use rmcp::model::{
    DetailedTask, InputRequest, InputRequests, JsonObject, Task, TaskPayload, TaskStatus,
};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::api::{ExecutionSpec, Run, RunPhase, WorkflowSpec};
use crate::engine::duration;

/// `pollIntervalMs` when a Workflow gives none.
pub(crate) const DEFAULT_POLL_INTERVAL_MS: u64 = 1000;
/// A fresh task id: `<workflow prefix>-<26 lowercase base32 chars of 128 random bits>`.
pub(crate) fn new_task_id(workflow: &str) -> String {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).expect("the OS random source works");
    crate::api::task_id_from(workflow, &b)
}

fn ms(d: SignedDuration) -> u64 {
    d.as_millis().max(0) as u64
}

/// Poll interval of a Workflow's execution settings in milliseconds.
pub(crate) fn poll_interval_ms(execution: Option<&ExecutionSpec>) -> u64 {
    execution
        .and_then(|e| e.poll_interval.as_deref())
        .and_then(|s| duration::parse(s).ok())
        .map(ms)
        .unwrap_or(DEFAULT_POLL_INTERVAL_MS)
}

fn created(run: &Run) -> Timestamp {
    run.metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0)
        .unwrap_or(Timestamp::UNIX_EPOCH)
}

/// The latest time anything in the Run's status changed.
fn last_updated(run: &Run) -> Timestamp {
    let mut latest = created(run);
    if let Some(st) = &run.status {
        let stamps = [&st.started_at, &st.finished_at]
            .into_iter()
            .flatten()
            .chain(st.steps.iter().flat_map(|s| {
                [&s.started_at, &s.attempt_started_at, &s.finished_at]
                    .into_iter()
                    .flatten()
            }));
        for s in stamps {
            if let Ok(t) = s.parse::<Timestamp>() {
                latest = latest.max(t);
            }
        }
    }
    latest
}

/// Open input requests a client still has to answer: asked, and not answered in the spec yet
/// (or, for one that needs several approvers, not by all of them).
pub(crate) fn open_requests(run: &Run) -> InputRequests {
    let mut out = InputRequests::new();
    if let Some(st) = &run.status {
        for (key, req) in &st.input_requests {
            // A question that needs several approvers stays open until they have all answered.
            if run.spec.input_responses.contains_key(key) && req.needed() <= 1 {
                continue;
            }
            let wire = json!({"method": req.method, "params": req.params});
            if let Ok(r) = serde_json::from_value::<InputRequest>(wire) {
                out.insert(key.clone(), r);
            }
        }
    }
    out
}

fn object(v: Value) -> JsonObject {
    match v {
        Value::Object(m) => m,
        other => {
            let mut m = JsonObject::new();
            m.insert("value".into(), other);
            m
        }
    }
}

/// The one mapping of a Run's phase onto a task status. A Run that waits only for questions
/// nobody can be shown yet is `working`; a Run that failed with a tool error (a result with
/// `isError`) is `completed`, one that failed with a protocol error is `failed`.
pub(crate) fn status(run: &Run) -> TaskStatus {
    match run.phase() {
        RunPhase::Waiting if !open_requests(run).is_empty() => TaskStatus::InputRequired,
        RunPhase::Pending
        | RunPhase::Queued
        | RunPhase::Running
        | RunPhase::Cancelling
        | RunPhase::Waiting => TaskStatus::Working,
        RunPhase::Succeeded => TaskStatus::Completed,
        RunPhase::Failed if run.status.as_ref().is_some_and(|s| s.error.is_some()) => {
            TaskStatus::Failed
        }
        RunPhase::Failed => TaskStatus::Completed,
        RunPhase::Cancelled => TaskStatus::Cancelled,
    }
}

/// The base task fields of a Run. `live` is the Workflow to read settings from while the Run
/// has no snapshot yet (it was just created).
pub fn task(run: &Run, live: Option<&WorkflowSpec>) -> Task {
    // Only two settings are needed: read `execution` alone, not the whole snapshot.
    let execution: Option<ExecutionSpec> = run
        .status
        .as_ref()
        .and_then(|s| s.workflow.as_ref())
        .and_then(|w| w.get("execution"))
        .and_then(|e| ExecutionSpec::deserialize(e).ok())
        .or_else(|| live.map(|w| w.execution.clone()));
    let mut t = Task::new(
        run.metadata.name.clone().unwrap_or_default(),
        status(run),
        created(run).to_string(),
        last_updated(run).to_string(),
    )
    .with_poll_interval_ms(poll_interval_ms(execution.as_ref()));
    if let Some(m) = run.status.as_ref().and_then(|s| s.status_message.clone()) {
        t = t.with_status_message(m);
    }
    // Runs a schedule started are kept by its history limits, not by a TTL.
    let scheduled = run
        .metadata
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key(crate::api::labels::SCHEDULE));
    if run.phase().is_terminal() && !scheduled {
        let ttl = execution
            .as_ref()
            .and_then(|e| e.ttl_after_finished.as_deref())
            .and_then(|s| duration::parse(s).ok());
        let finished = run
            .status
            .as_ref()
            .and_then(|s| s.finished_at.as_deref())
            .and_then(|s| s.parse::<Timestamp>().ok());
        if let (Some(ttl), Some(finished)) = (ttl, finished) {
            t = t.with_ttl_ms(ms(finished.duration_since(created(run)) + ttl));
        }
    }
    t
}

/// Project a Run onto the MCP task it is.
pub(crate) fn project(run: &Run, live: Option<&WorkflowSpec>) -> DetailedTask {
    let base = task(run, live);
    // Borrowed: a status may hold a thousand step records, and a task needs two fields of it.
    let st = run.status.as_ref();
    let payload = match base.status {
        TaskStatus::InputRequired => TaskPayload::InputRequired {
            input_requests: open_requests(run),
        },
        TaskStatus::Completed => TaskPayload::Completed {
            result: object(st.and_then(|s| s.result.clone()).unwrap_or_else(
                || json!({"content": [], "isError": run.phase() == RunPhase::Failed}),
            )),
        },
        TaskStatus::Failed => TaskPayload::Failed {
            error: object(
                st.and_then(|s| s.error.as_ref())
                    .and_then(|e| serde_json::to_value(e).ok())
                    .unwrap_or(Value::Null),
            ),
        },
        TaskStatus::Cancelled => TaskPayload::Cancelled,
        _ => TaskPayload::Working,
    };
    DetailedTask::new(base, payload)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_ids_have_the_documented_shape() {
        let id = new_task_id("Deploy_Service");
        let (prefix, suffix) = id.rsplit_once('-').unwrap();
        assert_eq!(prefix, "deploy-service");
        assert_eq!(suffix.len(), 26);
        assert!(
            suffix
                .chars()
                .all(|c| c.is_ascii_lowercase() || ('2'..='7').contains(&c))
        );
        assert_ne!(new_task_id("x"), new_task_id("x"));
        assert!(new_task_id(&"w".repeat(100)).len() <= 63);
    }

    fn run_in(phase: RunPhase, error: Option<crate::api::RunError>) -> Run {
        let mut run = Run::new(
            "deploy-abc",
            serde_json::from_value(json!({"workflowRef": {"name": "deploy"}})).unwrap(),
        );
        run.status = Some(crate::api::RunStatus {
            phase,
            error: error.map(Box::new),
            ..Default::default()
        });
        run
    }

    #[test]
    fn the_task_handle_and_the_full_task_say_the_same_status() {
        let protocol_error = crate::api::RunError {
            code: -32603,
            message: "template failed".into(),
            data: None,
        };
        let cases = [
            (run_in(RunPhase::Pending, None), TaskStatus::Working),
            (run_in(RunPhase::Waiting, None), TaskStatus::Working),
            (run_in(RunPhase::Succeeded, None), TaskStatus::Completed),
            (run_in(RunPhase::Failed, None), TaskStatus::Completed),
            (
                run_in(RunPhase::Failed, Some(protocol_error)),
                TaskStatus::Failed,
            ),
            (run_in(RunPhase::Cancelled, None), TaskStatus::Cancelled),
        ];
        for (run, want) in cases {
            assert_eq!(task(&run, None).status, want, "{:?}", run.phase());
            assert_eq!(project(&run, None).task.status, want, "{:?}", run.phase());
        }
    }
}
