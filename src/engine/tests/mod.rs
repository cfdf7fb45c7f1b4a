//! Table-driven tests of the engine: every phase against every event, no runtime and no clock.
//! Shared builders live here; the cases are grouped by what they exercise.

mod approvals;
mod branches;
mod cancel;
mod input;
mod notify;
mod pause;
mod retry;
mod sample;
mod steps;
mod tool;

use jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};

use super::*;
use crate::api::*;
use crate::protocol::codes;

fn t0() -> Timestamp {
    "2026-01-01T00:00:00Z".parse().unwrap()
}

fn at(secs: i64) -> Timestamp {
    t0() + SignedDuration::from_secs(secs)
}

fn wf(spec: Value) -> WorkflowSpec {
    serde_json::from_value(spec).unwrap()
}

fn new_run(args: Value) -> Run {
    let mut run = Run::new(
        "wf-abc",
        RunSpec {
            workflow_ref: WorkflowRef { name: "wf".into() },
            arguments: Some(args),
            requested_by: Some(Principal {
                username: "alice".into(),
                uid: None,
                groups: vec!["dev".into()],
            }),
            cancel: None,
            pause: None,
            retry_of: None,
            priority: None,
            input_responses: Default::default(),
        },
    );
    run.metadata.namespace = Some("default".into());
    run.metadata.uid = Some("uid-1".into());
    run.metadata.generation = Some(1);
    run.metadata.creation_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(t0()));
    run
}

/// Apply one decision (all pure transitions it chains) and return what comes next.
fn settle(run: &mut Run, wf: &WorkflowSpec, now: Timestamp) -> Next {
    let d = decide(run, Some(wf), now);
    if let Some(st) = d.status {
        run.status = Some(st);
    }
    // A decision must be stable: deciding again at the same instant writes nothing new.
    let again = decide(run, Some(wf), now);
    assert!(
        again.status.is_none(),
        "decide is not idempotent: {:?}",
        again.status
    );
    d.next
}

fn report(run: &mut Run, next: &Next, outcome: Outcome, now: Timestamp) {
    let Next::Execute(effect) = next else {
        panic!("expected an effect, got {next:?}")
    };
    run.status = Some(record(run, effect, outcome, now));
}

/// An attempt that failed with a server error (retried where the step allows it).
fn server_error(message: &str) -> Outcome {
    Outcome::Failed {
        class: ErrorClass::ServerError,
        message: message.into(),
        detail: None,
    }
}

fn status(run: &Run) -> &RunStatus {
    run.status.as_ref().unwrap()
}

fn answer(
    run: &mut Run,
    key: &str,
    action: InputAction,
    content: Value,
    who: &str,
    groups: &[&str],
) {
    run.spec.input_responses.insert(
        key.into(),
        InputResponse {
            action,
            content: Some(content),
            answered_by: Some(who.into()),
            answered_by_groups: groups.iter().map(|g| g.to_string()).collect(),
            answered_at: Some(t0().to_string()),
        },
    );
}

fn http_wf() -> WorkflowSpec {
    wf(json!({
        "steps": [{"name": "call", "http": {"url": "http://svc/{{ args.id }}"},
                   "retry": {"limit": 2, "backoff": "1s"}}],
        "result": {"content": [{"type": "text", "text": "got {{ steps.call.output.status }}"}]}
    }))
}

fn approval_wf() -> WorkflowSpec {
    wf(json!({
        "execution": {"timeout": "1h"},
        "steps": [{"name": "ask", "input": {"timeout": "10m", "requests": [
            {"name": "a", "message": "A for {{ args.x }}?"},
            {"name": "b", "message": "B?", "approvers": {"groups": ["ops"]}, "distinctFromRequester": true}
        ]}}],
        "finally": [{"name": "cleanup", "delay": {"duration": "0s"}}],
        "result": {"content": [{"type": "text", "text": "{{ inputs.a.v }}-{{ inputs.b.v }}"}]}
    }))
}
