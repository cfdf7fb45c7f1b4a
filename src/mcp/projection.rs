//! Runs as MCP tasks: the projection of a Run onto the task wire shape, and task ids.

use jiff::{SignedDuration, Timestamp};
use rmcp::model::{
    DetailedTask, InputRequest, InputRequests, JsonObject, Task, TaskPayload, TaskStatus,
};
use serde_json::{Value, json};

use crate::api::{JsonText, Run, RunPhase, WorkflowSpec};
use crate::engine::{duration, stamps};

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

fn created(run: &Run) -> Timestamp {
    run.metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0)
        .unwrap_or(Timestamp::UNIX_EPOCH)
}

/// The latest time anything in the Run's status changed: the times the controller writes
/// (a Run's, its steps', its questions'), not what anyone may write into its spec.
fn last_updated(run: &Run) -> Timestamp {
    let created = created(run);
    let Some(st) = &run.status else {
        return created;
    };
    let stamps = [&st.started_at, &st.finished_at]
        .into_iter()
        .flatten()
        .chain(st.steps.iter().flat_map(|s| {
            [&s.started_at, &s.attempt_started_at, &s.finished_at]
                .into_iter()
                .flatten()
        }))
        // A question an upstream asks changes the task (to input_required) with no step
        // starting or ending.
        .chain(
            st.input_requests
                .values()
                .filter_map(|q| q.asked_at.as_ref()),
        )
        .map(String::as_str);
    stamps::latest(stamps).map_or(created, |t| t.max(created))
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

/// A Run as the MCP task it is, borrowed from the Run: every task answer is built from this
/// one view — rmcp's types by copying it ([`TaskView::to_task`]), the hot `tasks/get` and the
/// older era's task by writing it directly.
pub(crate) struct TaskView<'a> {
    /// The Run's name.
    pub task_id: &'a str,
    /// The task status ([`status`]).
    pub status: TaskStatus,
    /// The Run's status message (its current step).
    pub status_message: Option<&'a str>,
    /// When the Run was created.
    pub created_at: Timestamp,
    /// The latest time anything in the Run's status changed: the times the controller writes
    /// (a Run's, its steps', its questions'), not what anyone may write into its spec.
    pub last_updated_at: Timestamp,
    /// Time from creation to garbage collection, once the Run has finished.
    pub ttl_ms: Option<u64>,
    /// How often the Workflow asks clients to poll.
    pub poll_interval_ms: u64,
    /// Whether a cancel was requested: a Run that has one always ends cancelled.
    pub cancel_requested: bool,
    /// Whether the Run failed with a result (a tool error): `completed` here, as 2026-07-28
    /// has it, and `failed` to 2025-11-25 clients, as that revision has it.
    pub tool_error: bool,
}

impl TaskView<'_> {
    /// The view as rmcp's `Task`.
    pub(crate) fn to_task(&self) -> Task {
        let mut t = Task::new(
            self.task_id,
            self.status,
            self.created_at.to_string(),
            self.last_updated_at.to_string(),
        )
        .with_poll_interval_ms(self.poll_interval_ms);
        if let Some(m) = self.status_message {
            t = t.with_status_message(m);
        }
        t.ttl_ms = self.ttl_ms;
        t
    }
}

/// One of the Workflow's two task settings (`pollInterval`, `ttlAfterFinished`): from the
/// Run's snapshot, read in place (a task answer needs two strings of it, not the snapshot), or
/// from `live` while the Run has none.
fn execution_setting<'a>(
    run: &'a Run,
    live: Option<&'a WorkflowSpec>,
    field: &str,
) -> Option<&'a str> {
    match run.status.as_ref().and_then(|s| s.workflow.as_ref()) {
        Some(w) => w.get("execution")?.get(field)?.as_str(),
        None => {
            let e = &live?.execution;
            match field {
                "pollInterval" => e.poll_interval.as_deref(),
                _ => e.ttl_after_finished.as_deref(),
            }
        }
    }
}

/// A value written as its `Display` text (a timestamp, without a `String` in between).
pub(crate) struct Shown<T>(pub T);

impl<T: std::fmt::Display> serde::Serialize for Shown<T> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&self.0)
    }
}

/// The task a Run is. `live` is the Workflow to read settings from while the Run has no
/// snapshot yet (it was just created).
pub(crate) fn view<'a>(run: &'a Run, live: Option<&'a WorkflowSpec>) -> TaskView<'a> {
    let poll = execution_setting(run, live, "pollInterval").and_then(|s| duration::parse(s).ok());
    // Runs a schedule started are kept by its history limits, child Runs as long as their
    // top-level Run, not by a TTL of their own (the controller's rule, `Machine::ttl`).
    let kept_by_others = run.metadata.labels.as_ref().is_some_and(|l| {
        l.contains_key(crate::api::labels::SCHEDULE) || l.contains_key(crate::api::labels::ROOT)
    });
    let ttl_ms = (run.phase().is_terminal() && !kept_by_others)
        .then(|| {
            let ttl = execution_setting(run, live, "ttlAfterFinished")
                .and_then(|s| duration::parse(s).ok())?;
            let finished = run
                .status
                .as_ref()
                .and_then(|s| s.finished_at.as_deref())
                .and_then(|s| s.parse::<Timestamp>().ok())?;
            Some(ms(finished.duration_since(created(run)) + ttl))
        })
        .flatten();
    TaskView {
        task_id: run.metadata.name.as_deref().unwrap_or_default(),
        status: status(run),
        status_message: run
            .status
            .as_ref()
            .and_then(|s| s.status_message.as_deref()),
        created_at: created(run),
        last_updated_at: last_updated(run),
        ttl_ms,
        poll_interval_ms: poll.map(ms).unwrap_or(DEFAULT_POLL_INTERVAL_MS),
        cancel_requested: run.spec.cancel.is_some(),
        tool_error: run.phase() == RunPhase::Failed
            && run.status.as_ref().is_some_and(|s| s.error.is_none()),
    }
}

/// The base task fields of a Run, as rmcp's `Task`.
pub fn task(run: &Run, live: Option<&WorkflowSpec>) -> Task {
    view(run, live).to_task()
}

/// What a task carries beside its base fields, borrowed from the Run where it can be: a status
/// may hold a thousand step records and a large result, and a task needs one field of it.
pub(crate) enum Payload<'a> {
    /// `working`.
    Working,
    /// `input_required`: the open requests.
    InputRequired(InputRequests),
    /// `completed`: the stored result (an object), or none stored.
    Completed(Option<&'a JsonText>),
    /// `completed` with a stored result that is not an object (kept under `value`).
    CompletedOther(&'a JsonText),
    /// `failed`: the protocol-level error.
    Failed(Option<&'a crate::api::RunError>),
    /// `cancelled`.
    Cancelled,
}

/// The payload of `run`, whose task status is `status`.
pub(crate) fn payload<'a>(run: &'a Run, status: &TaskStatus) -> Payload<'a> {
    let st = run.status.as_ref();
    match status {
        TaskStatus::InputRequired => Payload::InputRequired(open_requests(run)),
        TaskStatus::Completed => match st.and_then(|s| s.result.as_ref()) {
            Some(text) if text.is_object() => Payload::Completed(Some(text)),
            Some(other) => Payload::CompletedOther(other),
            None => Payload::Completed(None),
        },
        TaskStatus::Failed => Payload::Failed(st.and_then(|s| s.error.as_deref())),
        TaskStatus::Cancelled => Payload::Cancelled,
        _ => Payload::Working,
    }
}

/// The result a completed task without a stored one carries: no content, an error when the
/// Run failed.
pub(crate) fn empty_result(run: &Run) -> Value {
    json!({"content": [], "isError": run.phase() == RunPhase::Failed})
}

impl Payload<'_> {
    /// The payload as rmcp's type (copied).
    fn to_owned(&self, run: &Run) -> TaskPayload {
        match self {
            Self::Working => TaskPayload::Working,
            Self::InputRequired(r) => TaskPayload::InputRequired {
                input_requests: r.clone(),
            },
            Self::Completed(r) => TaskPayload::Completed {
                result: object(r.map_or_else(|| empty_result(run), JsonText::to_value)),
            },
            Self::CompletedOther(v) => TaskPayload::Completed {
                result: object(v.to_value()),
            },
            Self::Failed(e) => TaskPayload::Failed {
                error: object(
                    e.and_then(|e| serde_json::to_value(e).ok())
                        .unwrap_or(Value::Null),
                ),
            },
            Self::Cancelled => TaskPayload::Cancelled,
        }
    }
}

/// Project a Run onto the MCP task it is.
pub(crate) fn project(run: &Run, live: Option<&WorkflowSpec>) -> DetailedTask {
    let v = view(run, live);
    let payload = payload(run, &v.status).to_owned(run);
    DetailedTask::new(v.to_task(), payload)
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
    fn a_finished_task_says_when_it_goes_and_a_child_says_it_goes_with_its_root() {
        let spec: WorkflowSpec =
            serde_json::from_value(json!({"steps": [], "execution": {"ttlAfterFinished": "1h"}}))
                .unwrap();
        let mut run = run_in(RunPhase::Succeeded, None);
        run.metadata.creation_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                "2026-12-06T10:00:00Z".parse().unwrap(),
            ));
        run.status.as_mut().unwrap().finished_at = Some("2026-12-06T10:00:05Z".into());
        assert_eq!(view(&run, Some(&spec)).ttl_ms, Some(3_605_000));
        // A child Run is deleted with its top-level Run, whatever its own Workflow says: a
        // time of its own would promise a deletion that does not come, or not then.
        for label in [crate::api::labels::ROOT, crate::api::labels::SCHEDULE] {
            let mut kept = run.clone();
            kept.metadata.labels = Some([(label.to_owned(), "x".to_owned())].into());
            assert_eq!(view(&kept, Some(&spec)).ttl_ms, None, "{label}");
        }
    }

    #[test]
    fn a_task_was_last_updated_at_the_latest_stamp_of_any_step() {
        let mut run = run_in(RunPhase::Running, None);
        run.metadata.creation_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                "2026-12-06T10:00:00Z".parse().unwrap(),
            ));
        let step = |name: &str, started: &str, attempt: Option<&str>| crate::api::StepRecord {
            name: name.into(),
            started_at: Some(started.into()),
            attempt_started_at: attempt.map(Into::into),
            ..Default::default()
        };
        let st = run.status.as_mut().unwrap();
        st.started_at = Some("2026-12-06T10:00:00.1Z".into());
        st.steps = (0..500)
            .map(|i| step(&format!("s[{i}]"), "2026-12-06T10:00:01.25Z", None))
            .collect();
        // A retry's attempt, later than every start, with fewer fraction digits than them.
        st.steps[137].attempt_started_at = Some("2026-12-06T10:00:01.3Z".into());
        assert_eq!(task(&run, None).last_updated_at, "2026-12-06T10:00:01.3Z");
        // An upstream's question, asked later, with no step starting or ending.
        run.status.as_mut().unwrap().input_requests.insert(
            "up.approve".into(),
            crate::api::OpenInputRequest {
                asked_at: Some("2026-12-06T10:00:02Z".into()),
                ..Default::default()
            },
        );
        assert_eq!(task(&run, None).last_updated_at, "2026-12-06T10:00:02Z");
        run.status.as_mut().unwrap().input_requests.clear();
        // A stamp nobody can read changes nothing; none at all leaves the creation time.
        run.status.as_mut().unwrap().steps[3].finished_at = Some("soon".into());
        assert_eq!(task(&run, None).last_updated_at, "2026-12-06T10:00:01.3Z");
        run.status.as_mut().unwrap().steps.clear();
        run.status.as_mut().unwrap().started_at = None;
        assert_eq!(task(&run, None).last_updated_at, "2026-12-06T10:00:00Z");
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
