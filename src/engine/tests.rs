//! Table-driven tests of the engine: every phase against every event, no runtime and no clock.

use jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};

use super::*;
use crate::api::{InputResponse, Principal, Run, RunSpec, WorkflowRef};

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

use crate::api::InputAction;

fn http_wf() -> WorkflowSpec {
    wf(json!({
        "steps": [{"name": "call", "http": {"url": "http://svc/{{ args.id }}"},
                   "retry": {"limit": 2, "backoff": "1s"}}],
        "result": {"content": [{"type": "text", "text": "got {{ steps.call.output.status }}"}]}
    }))
}

#[test]
fn a_new_run_takes_a_snapshot_and_starts_its_first_step() {
    let w = http_wf();
    let mut run = new_run(json!({"id": 7}));
    let next = settle(&mut run, &w, at(0));
    let st = status(&run);
    assert_eq!(st.phase, RunPhase::Running);
    assert_eq!(st.workflow_snapshot_name(), Some("call"));
    assert_eq!(st.status_message.as_deref(), Some("step 1/1: call"));
    let Next::Execute(effect) = next else {
        panic!()
    };
    assert_eq!(effect.idempotency_key, "uid-1/call");
    assert_eq!(effect.attempt, 1);
    let Action::Http(req) = effect.action else {
        panic!()
    };
    assert_eq!(
        (req.method.as_str(), req.url.as_str()),
        ("GET", "http://svc/7")
    );
}

trait SnapshotName {
    fn workflow_snapshot_name(&self) -> Option<&str>;
}
impl SnapshotName for RunStatus {
    fn workflow_snapshot_name(&self) -> Option<&str> {
        self.workflow
            .as_ref()?
            .get("steps")?
            .get(0)?
            .get("name")?
            .as_str()
    }
}

#[test]
fn a_missing_workflow_fails_the_run_as_a_protocol_error() {
    let mut run = new_run(json!({}));
    let d = decide(&run, None, at(0));
    run.status = d.status;
    let st = status(&run);
    assert_eq!(st.phase, RunPhase::Failed);
    assert!(
        st.error
            .as_ref()
            .unwrap()
            .message
            .contains("workflow wf not found")
    );
    assert!(matches!(
        decide(&run, None, at(1)).next,
        Next::Finished { .. }
    ));
}

#[test]
fn a_successful_http_step_renders_the_result() {
    let w = http_wf();
    let mut run = new_run(json!({"id": 1}));
    let next = settle(&mut run, &w, at(0));
    report(
        &mut run,
        &next,
        Outcome::Succeeded(json!({"status": 200})),
        at(1),
    );
    let next = settle(&mut run, &w, at(1));
    assert_eq!(next, Next::Finished { delete_at: None });
    let st = status(&run);
    assert_eq!(st.phase, RunPhase::Succeeded);
    assert_eq!(st.result.as_ref().unwrap()["content"][0]["text"], "got 200");
    assert_eq!(st.conditions[0].type_, "Finished");
    assert_eq!(st.conditions[0].reason, "Succeeded");
}

#[test]
fn retries_back_off_exponentially_then_fail_as_a_tool_error() {
    let w = http_wf();
    let mut run = new_run(json!({"id": 1}));
    let fail = || Outcome::Failed {
        detail: None,
        class: ErrorClass::ServerError,
        message: "HTTP 503".into(),
    };
    let next = settle(&mut run, &w, at(0));
    report(&mut run, &next, fail(), at(0));
    assert_eq!(settle(&mut run, &w, at(0)), Next::WaitUntil(Some(at(1))));
    let next = settle(&mut run, &w, at(1));
    let Next::Execute(e) = &next else {
        panic!("{next:?}")
    };
    assert_eq!((e.attempt, e.idempotency_key.as_str()), (2, "uid-1/call"));
    report(&mut run, &next, fail(), at(1));
    // second retry waits 2s (doubling)
    assert_eq!(settle(&mut run, &w, at(1)), Next::WaitUntil(Some(at(3))));
    let next = settle(&mut run, &w, at(3));
    report(&mut run, &next, fail(), at(3));
    settle(&mut run, &w, at(3));
    let st = status(&run);
    assert_eq!(st.phase, RunPhase::Failed);
    assert_eq!(st.steps[0].attempts.len(), 3);
    let result = st.result.as_ref().unwrap();
    assert_eq!(result["isError"], true);
    assert!(
        result["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("HTTP 503")
    );
    assert!(st.error.is_none());
}

#[test]
fn failures_outside_retry_on_do_not_retry() {
    let w = wf(
        json!({"steps": [{"name": "call", "http": {"url": "http://x"},
        "retry": {"limit": 5, "retryOn": ["timeout"]}}]}),
    );
    let mut run = new_run(json!({}));
    let next = settle(&mut run, &w, at(0));
    report(
        &mut run,
        &next,
        Outcome::Failed {
            detail: None,
            class: ErrorClass::ClientError,
            message: "HTTP 404".into(),
        },
        at(0),
    );
    settle(&mut run, &w, at(0));
    assert_eq!(status(&run).phase, RunPhase::Failed);
    assert_eq!(status(&run).steps[0].attempt, 1);
}

#[test]
fn an_upstream_body_stays_in_the_step_record_not_in_the_task_message() {
    let w = wf(json!({"steps": [{"name": "call", "http": {"url": "http://x"}}]}));
    let mut run = new_run(json!({}));
    let next = settle(&mut run, &w, at(0));
    report(
        &mut run,
        &next,
        Outcome::Failed {
            class: ErrorClass::ClientError,
            message: "HTTP 401".into(),
            detail: Some("{\"error\": \"bad key sk-live-123\"}".into()),
        },
        at(0),
    );
    settle(&mut run, &w, at(0));
    let st = status(&run);
    assert_eq!(st.phase, RunPhase::Failed);
    let step = st.steps[0].message.as_deref().unwrap();
    assert!(
        step.contains("HTTP 401") && step.contains("sk-live-123"),
        "{step}"
    );
    assert!(st.steps[0].attempts[0].message.contains("sk-live-123"));
    let public = st.status_message.as_deref().unwrap();
    assert!(
        public.contains("HTTP 401") && !public.contains("sk-live"),
        "{public}"
    );
    let text = st.result.as_ref().unwrap()["content"][0]["text"]
        .as_str()
        .unwrap();
    assert!(!text.contains("sk-live"), "{text}");
    assert!(!st.conditions[0].message.contains("sk-live"));
}

#[test]
fn stale_reports_are_ignored() {
    let w = http_wf();
    let mut run = new_run(json!({"id": 1}));
    let next = settle(&mut run, &w, at(0));
    let Next::Execute(mut effect) = next else {
        panic!()
    };
    effect.attempt = 9;
    let before = run.status.clone().unwrap();
    assert_eq!(
        record(&run, &effect, Outcome::Succeeded(json!(1)), at(1)),
        before
    );
}

#[test]
fn a_delay_keeps_its_wake_time() {
    let w = wf(json!({"steps": [{"name": "nap", "delay": {"duration": "{{ args.secs }}s"}}]}));
    let mut run = new_run(json!({"secs": 30}));
    assert_eq!(settle(&mut run, &w, at(0)), Next::WaitUntil(Some(at(30))));
    // a later pass (e.g. after a restart) waits for the same time
    assert_eq!(settle(&mut run, &w, at(10)), Next::WaitUntil(Some(at(30))));
    settle(&mut run, &w, at(30));
    assert_eq!(status(&run).phase, RunPhase::Succeeded);
}

#[test]
fn when_false_skips_and_template_errors_fail_naming_the_step() {
    let w = wf(json!({"steps": [
        {"name": "maybe", "when": "args.go", "delay": {"duration": "1s"}},
        {"name": "bad", "fail": {"message": "{{ args.nope }}"}}
    ]}));
    let mut run = new_run(json!({"go": false}));
    settle(&mut run, &w, at(0));
    let st = status(&run);
    assert_eq!(st.steps[0].phase, StepPhase::Skipped);
    assert_eq!(st.phase, RunPhase::Failed);
    let err = st.error.as_ref().expect("a protocol-level error");
    assert_eq!(err.code, codes::INTERNAL_ERROR);
    assert!(err.message.contains("bad"), "{}", err.message);
    assert!(err.message.contains("args.nope"), "{}", err.message);
}

#[test]
fn a_bad_rendered_duration_fails_naming_the_step() {
    let w = wf(json!({"steps": [{"name": "nap", "delay": {"duration": "{{ args.d }}"}}]}));
    let mut run = new_run(json!({"d": "soon"}));
    settle(&mut run, &w, at(0));
    let err = status(&run).error.clone().unwrap();
    assert!(
        err.message.contains("step nap") && err.message.contains("soon"),
        "{}",
        err.message
    );
}

#[test]
fn fail_steps_end_as_tool_error_or_protocol_error() {
    let tool = wf(json!({"steps": [{"name": "f", "fail": {"message": "no {{ args.x }}"}}]}));
    let mut run = new_run(json!({"x": "luck"}));
    settle(&mut run, &tool, at(0));
    let st = status(&run);
    assert_eq!(st.phase, RunPhase::Failed);
    assert_eq!(st.result.as_ref().unwrap()["content"][0]["text"], "no luck");
    assert_eq!(st.result.as_ref().unwrap()["isError"], true);
    assert!(st.error.is_none());

    let proto = wf(
        json!({"steps": [{"name": "f", "fail": {"error": {"code": -32050, "message": "bad"}}}]}),
    );
    let mut run = new_run(json!({}));
    settle(&mut run, &proto, at(0));
    let st = status(&run);
    assert_eq!(st.error.as_ref().unwrap().code, -32050);
    assert!(st.result.is_none());
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

#[test]
fn multi_key_input_is_answered_one_key_at_a_time() {
    let w = approval_wf();
    let mut run = new_run(json!({"x": 1}));
    assert_eq!(settle(&mut run, &w, at(0)), Next::WaitUntil(Some(at(600))));
    let st = status(&run);
    assert_eq!(st.phase, RunPhase::Waiting);
    assert_eq!(
        st.input_requests.keys().collect::<Vec<_>>(),
        ["ask.a", "ask.b"]
    );
    assert_eq!(st.input_requests["ask.a"].params["message"], "A for 1?");
    assert_eq!(st.waiting_for.as_deref(), Some("ask.a,ask.b"));

    answer(
        &mut run,
        "ask.a",
        InputAction::Accept,
        json!({"v": "x"}),
        "bob",
        &[],
    );
    settle(&mut run, &w, at(1));
    let st = status(&run);
    assert_eq!(st.phase, RunPhase::Waiting);
    assert_eq!(st.input_requests.keys().collect::<Vec<_>>(), ["ask.b"]);

    answer(
        &mut run,
        "ask.b",
        InputAction::Accept,
        json!({"v": "y"}),
        "carol",
        &["ops"],
    );
    settle(&mut run, &w, at(2));
    let st = status(&run);
    assert_eq!(st.phase, RunPhase::Succeeded, "{st:#?}");
    assert_eq!(st.result.as_ref().unwrap()["content"][0]["text"], "x-y");
    assert!(st.input_requests.is_empty());
    assert_eq!(st.steps[1].name, "cleanup");
}

#[test]
fn ineligible_answers_are_noted_and_the_request_is_asked_again() {
    let w = approval_wf();
    let mut run = new_run(json!({"x": 1}));
    settle(&mut run, &w, at(0));
    // the requester may not answer b, and is not in ops anyway
    answer(
        &mut run,
        "ask.b",
        InputAction::Accept,
        json!({"v": "y"}),
        "alice",
        &["ops"],
    );
    settle(&mut run, &w, at(1));
    let st = status(&run);
    assert_eq!(st.notes.len(), 1);
    assert!(st.notes[0].message.contains("requested this run"));
    assert!(st.input_requests.contains_key("ask.b.2"));
    assert!(!st.input_requests.contains_key("ask.b"));
    // not an approver
    answer(
        &mut run,
        "ask.b.2",
        InputAction::Accept,
        json!({"v": "y"}),
        "dave",
        &["dev"],
    );
    settle(&mut run, &w, at(2));
    assert!(status(&run).notes[1].message.contains("not an approver"));
    assert!(status(&run).input_requests.contains_key("ask.b.3"));
}

#[test]
fn answers_that_do_not_match_the_requested_schema_are_noted_and_asked_again() {
    let w = wf(json!({
        "steps": [{"name": "ask", "input": {"requests": [
            {"name": "size", "message": "How many?", "requestedSchema": {
                "type": "object",
                "properties": {"n": {"type": "integer", "minimum": 1}},
                "required": ["n"]}}
        ]}}],
        "result": {"content": [{"type": "text", "text": "{{ inputs.size.n }}"}]}
    }));
    let mut run = new_run(json!({}));
    settle(&mut run, &w, at(0));
    // written with kubectl, past the endpoint's check
    answer(
        &mut run,
        "ask.size",
        InputAction::Accept,
        json!({"n": "three"}),
        "bob",
        &[],
    );
    settle(&mut run, &w, at(1));
    let st = status(&run);
    assert_eq!(st.phase, RunPhase::Waiting);
    assert!(
        st.notes[0].message.contains("requestedSchema"),
        "{:?}",
        st.notes
    );
    assert!(st.input_requests.contains_key("ask.size.2"));
    answer(
        &mut run,
        "ask.size.2",
        InputAction::Accept,
        json!({"n": 3}),
        "bob",
        &[],
    );
    settle(&mut run, &w, at(2));
    assert_eq!(status(&run).phase, RunPhase::Succeeded);
}

#[test]
fn url_mode_requests_send_the_person_to_a_page_and_accept_means_agreed() {
    let w = wf(json!({
        "steps": [
            {"name": "sso", "input": {"requests": [
                {"name": "login", "message": "Sign in to {{ args.org }}",
                 "url": "https://sso.example.com/start?org={{ args.org }}&run={{ run.name }}"}
            ]}}
        ],
        "result": {"content": [{"type": "text", "text": "signed in"}]}
    }));
    let mut run = new_run(json!({"org": "a&b"}));
    settle(&mut run, &w, at(0));
    let st = status(&run);
    let asked = &st.input_requests["sso.login"];
    assert_eq!(asked.params["mode"], "url");
    assert_eq!(asked.params["elicitationId"], "sso.login");
    assert_eq!(asked.params["message"], "Sign in to a&b");
    let url = asked.params["url"].as_str().unwrap();
    assert!(
        url.starts_with("https://sso.example.com/start?org=a%26b&run="),
        "{url}"
    );
    assert!(asked.params.get("requestedSchema").is_none());
    answer(
        &mut run,
        "sso.login",
        InputAction::Accept,
        json!(null),
        "bob",
        &[],
    );
    settle(&mut run, &w, at(1));
    let st = status(&run);
    assert_eq!(st.phase, RunPhase::Succeeded, "{:?}", st.notes);
    assert_eq!(st.steps[0].output, Some(json!({"login": {}})));
}

#[test]
fn cancel_action_reasks_and_decline_fails_unless_allowed() {
    let w = approval_wf();
    let mut run = new_run(json!({"x": 1}));
    settle(&mut run, &w, at(0));
    answer(
        &mut run,
        "ask.a",
        InputAction::Cancel,
        json!({}),
        "bob",
        &[],
    );
    settle(&mut run, &w, at(1));
    assert!(status(&run).input_requests.contains_key("ask.a.2"));
    answer(
        &mut run,
        "ask.a.2",
        InputAction::Decline,
        json!({}),
        "bob",
        &[],
    );
    settle(&mut run, &w, at(2));
    let st = status(&run);
    assert_eq!(st.phase, RunPhase::Failed);
    assert!(
        st.result.as_ref().unwrap()["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("declined by bob")
    );
    // finally still ran
    assert_eq!(st.steps.last().unwrap().name, "cleanup");

    let mut lenient = approval_wf();
    lenient.steps[0].input.as_mut().unwrap().allow_decline = true;
    lenient.result = None;
    let mut run = new_run(json!({"x": 1}));
    settle(&mut run, &lenient, at(0));
    answer(
        &mut run,
        "ask.a",
        InputAction::Decline,
        json!({}),
        "bob",
        &[],
    );
    answer(
        &mut run,
        "ask.b",
        InputAction::Accept,
        json!({"v": 1}),
        "carol",
        &["ops"],
    );
    settle(&mut run, &lenient, at(1));
    assert_eq!(status(&run).phase, RunPhase::Succeeded);
}

#[test]
fn input_timeout_fails_or_continues() {
    let w = approval_wf();
    let mut run = new_run(json!({"x": 1}));
    settle(&mut run, &w, at(0));
    settle(&mut run, &w, at(600));
    let st = status(&run);
    assert_eq!(st.phase, RunPhase::Failed);
    assert!(
        st.steps[0]
            .message
            .as_deref()
            .unwrap()
            .contains("timed out")
    );

    let mut cont = approval_wf();
    cont.steps[0].input.as_mut().unwrap().on_timeout = crate::api::OnTimeout::Continue;
    cont.result = None;
    let mut run = new_run(json!({"x": 1}));
    settle(&mut run, &cont, at(0));
    settle(&mut run, &cont, at(600));
    assert_eq!(status(&run).phase, RunPhase::Succeeded);
    assert_eq!(
        status(&run).steps[0].output,
        Some(json!({"a": null, "b": null}))
    );
}

#[test]
fn the_run_deadline_expires_while_waiting_for_input() {
    let mut w = approval_wf();
    w.execution.timeout = Some("5m".into());
    let mut run = new_run(json!({"x": 1}));
    // waiting is bounded by the deadline, not the 10m input timeout
    assert_eq!(settle(&mut run, &w, at(0)), Next::WaitUntil(Some(at(300))));
    settle(&mut run, &w, at(300));
    let st = status(&run);
    assert_eq!(st.phase, RunPhase::Failed);
    assert!(st.input_requests.is_empty());
    assert!(
        st.result.as_ref().unwrap()["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("deadline")
    );
    assert_eq!(
        st.steps.last().unwrap().name,
        "cleanup",
        "finally runs after the deadline"
    );
}

#[test]
fn effects_are_bounded_by_step_timeout_and_deadline() {
    let w = wf(json!({"execution": {"timeout": "1m"},
        "steps": [{"name": "call", "timeout": "10s", "http": {"url": "http://x"}}]}));
    let mut run = new_run(json!({}));
    let Next::Execute(e) = settle(&mut run, &w, at(0)) else {
        panic!()
    };
    assert_eq!(e.deadline, Some(at(10)));
    let w = wf(json!({"execution": {"timeout": "5s"},
        "steps": [{"name": "call", "timeout": "10s", "http": {"url": "http://x"}}]}));
    let mut run = new_run(json!({}));
    let Next::Execute(e) = settle(&mut run, &w, at(0)) else {
        panic!()
    };
    assert_eq!(e.deadline, Some(at(5)));
}

#[test]
fn cancellation_runs_finally_then_ends_cancelled() {
    let w = wf(json!({
        "steps": [{"name": "nap", "delay": {"duration": "1h"}}],
        "finally": [{"name": "cleanup", "http": {"url": "http://x/cleanup"}}]
    }));
    let mut run = new_run(json!({}));
    settle(&mut run, &w, at(0));
    run.spec.cancel = Some(crate::api::CancelRequest {
        reason: Some("stop".into()),
        requested_by: Some("alice".into()),
        requested_at: None,
    });
    let d = decide(&run, Some(&w), at(5));
    assert!(
        d.events
            .iter()
            .any(|e| e.reason == event_reasons::CANCEL_REQUESTED && e.message.contains("alice"))
    );
    run.status = d.status;
    assert_eq!(status(&run).phase, RunPhase::Cancelling);
    assert_eq!(status(&run).steps[0].phase, StepPhase::Cancelled);
    let Next::Execute(e) = d.next else {
        panic!("{:?}", d.next)
    };
    assert_eq!(e.step, "cleanup");
    report(
        &mut run,
        &Next::Execute(e),
        Outcome::Succeeded(json!(null)),
        at(6),
    );
    settle(&mut run, &w, at(6));
    let st = status(&run);
    assert_eq!(st.phase, RunPhase::Cancelled);
    assert!(st.status_message.as_deref().unwrap().contains("stop"));
}

#[test]
fn cancelling_a_waiting_run_closes_its_requests() {
    let w = approval_wf();
    let mut run = new_run(json!({"x": 1}));
    settle(&mut run, &w, at(0));
    run.spec.cancel = Some(crate::api::CancelRequest {
        reason: None,
        requested_by: None,
        requested_at: None,
    });
    settle(&mut run, &w, at(1));
    let st = status(&run);
    assert_eq!(st.phase, RunPhase::Cancelled);
    assert!(st.input_requests.is_empty());
    assert_eq!(st.steps[0].phase, StepPhase::Cancelled);
    assert_eq!(st.steps[1].name, "cleanup");
}

#[test]
fn terminal_runs_are_collected_after_their_ttl() {
    let w = wf(json!({"execution": {"ttlAfterFinished": "1h"}, "steps": []}));
    let mut run = new_run(json!({}));
    let next = settle(&mut run, &w, at(0));
    assert_eq!(
        next,
        Next::Finished {
            delete_at: Some(at(3600))
        }
    );
    assert_eq!(
        status(&run).result.as_ref().unwrap()["content"][0]["text"],
        "done"
    );
}

#[test]
fn cancel_after_finish_changes_nothing() {
    let w = wf(json!({"steps": []}));
    let mut run = new_run(json!({}));
    settle(&mut run, &w, at(0));
    run.spec.cancel = Some(crate::api::CancelRequest {
        reason: None,
        requested_by: None,
        requested_at: None,
    });
    assert!(decide(&run, Some(&w), at(1)).status.is_none());
}

#[test]
fn structured_content_keeps_json_types_and_large_outputs_are_truncated() {
    let w = wf(json!({
        "steps": [{"name": "call", "http": {"url": "http://x"}}],
        "result": {"structuredContent": {"n": "{{ args.n }}", "body": "{{ steps.call.output }}"}}
    }));
    let mut run = new_run(json!({"n": 3}));
    let next = settle(&mut run, &w, at(0));
    let big = "x".repeat(MAX_OUTPUT_BYTES + 10);
    report(
        &mut run,
        &next,
        Outcome::Succeeded(json!({"big": big})),
        at(1),
    );
    settle(&mut run, &w, at(1));
    let st = status(&run);
    assert!(st.steps[0].output_truncated);
    assert!(st.steps[0].output.as_ref().unwrap().as_str().unwrap().len() <= MAX_OUTPUT_BYTES);
    assert_eq!(st.result.as_ref().unwrap()["structuredContent"]["n"], 3);
}

#[test]
fn a_fatal_executor_outcome_is_a_protocol_error() {
    let w = http_wf();
    let mut run = new_run(json!({"id": 1}));
    let next = settle(&mut run, &w, at(0));
    report(
        &mut run,
        &next,
        Outcome::Fatal(RunError {
            code: -32000,
            message: "upstream said no".into(),
            data: None,
        }),
        at(1),
    );
    settle(&mut run, &w, at(1));
    assert_eq!(status(&run).error.as_ref().unwrap().code, -32000);
}

#[test]
fn job_names_are_deterministic_and_short() {
    assert_eq!(job_name("deploy-abc", "build", 2), "deploy-abc-build-2");
    assert!(job_name(&"r".repeat(80), "step", 1).len() <= 63);
}

fn tool_wf() -> WorkflowSpec {
    wf(json!({
        "steps": [{"name": "up", "tool": {"server": {"url": "http://b/mcp"}, "name": "t", "arguments": {"x": "{{ args.x }}"}}}],
        "finally": [{"name": "cleanup", "delay": {"duration": "0s"}}]
    }))
}

#[test]
fn a_checkpoint_records_the_upstream_task_and_the_next_attempt_resumes_it() {
    let w = tool_wf();
    let mut run = new_run(json!({"x": 5}));
    let next = settle(&mut run, &w, at(0));
    let Next::Execute(e) = &next else { panic!() };
    let Action::Tool {
        arguments,
        upstream_task_id,
        ..
    } = &e.action
    else {
        panic!()
    };
    assert_eq!((arguments, upstream_task_id), (&json!({"x": 5}), &None));
    report(
        &mut run,
        &next,
        Outcome::Checkpoint {
            upstream_task_id: Some("up-1".into()),
            job_name: None,
        },
        at(1),
    );
    assert_eq!(
        status(&run).steps[0].upstream_task_id.as_deref(),
        Some("up-1")
    );
    assert_eq!(status(&run).steps[0].phase, StepPhase::Running);
    let Next::Execute(e) = settle(&mut run, &w, at(1)) else {
        panic!()
    };
    let Action::Tool {
        upstream_task_id, ..
    } = &e.action
    else {
        panic!()
    };
    assert_eq!(upstream_task_id.as_deref(), Some("up-1"));
    assert_eq!(e.attempt, 1, "resuming is the same attempt");
}

#[test]
fn upstream_input_becomes_this_runs_input_and_answers_are_forwarded() {
    let w = tool_wf();
    let mut run = new_run(json!({"x": 1}));
    let next = settle(&mut run, &w, at(0));
    report(
        &mut run,
        &next,
        Outcome::Checkpoint {
            upstream_task_id: Some("up-1".into()),
            job_name: None,
        },
        at(0),
    );
    let next = settle(&mut run, &w, at(0));
    let req = json!({"method": "elicitation/create", "params": {"message": "ok?", "requestedSchema": {"type": "object"}}});
    report(
        &mut run,
        &next,
        Outcome::NeedsInput {
            requests: [("approve".to_string(), req)].into(),
            request_state: None,
        },
        at(1),
    );
    let st = status(&run);
    assert_eq!(st.phase, RunPhase::Waiting);
    assert_eq!(st.input_requests["up.approve"].params["message"], "ok?");
    assert_eq!(settle(&mut run, &w, at(2)), Next::WaitUntil(None));
    answer(
        &mut run,
        "up.approve",
        InputAction::Accept,
        json!({"ok": true}),
        "bob",
        &[],
    );
    let Next::Execute(e) = settle(&mut run, &w, at(3)) else {
        panic!()
    };
    let Action::Tool {
        answers,
        upstream_task_id,
        ..
    } = &e.action
    else {
        panic!()
    };
    assert_eq!(
        answers,
        &Some(json!({"approve": {"action": "accept", "content": {"ok": true}}}))
    );
    assert_eq!(upstream_task_id.as_deref(), Some("up-1"));
    assert_eq!(status(&run).phase, RunPhase::Running);
    assert!(status(&run).input_requests.is_empty());
    report(
        &mut run,
        &Next::Execute(e),
        Outcome::Succeeded(json!({"done": true})),
        at(4),
    );
    settle(&mut run, &w, at(4));
    assert_eq!(status(&run).phase, RunPhase::Succeeded);
}

/// The next action is the cleanup that cancels `upstream`; report it done at `t + 1`.
fn cleanup_cancels_upstream(run: &mut Run, w: &WorkflowSpec, t: i64, upstream: &str) {
    let next = settle(run, w, at(t));
    let Next::Execute(e) = &next else {
        panic!("{next:?}")
    };
    let Action::Cleanup(c) = &e.action else {
        panic!("{:?}", e.action)
    };
    assert_eq!(c.cancel_upstream_task.as_deref(), Some(upstream));
    report(
        run,
        &next,
        Outcome::Succeeded(json!(format!("upstream task {upstream} cancelled"))),
        at(t + 1),
    );
}

#[test]
fn a_tool_step_that_times_out_for_good_cancels_its_upstream_task() {
    let w = tool_wf();
    let mut run = new_run(json!({"x": 1}));
    let next = settle(&mut run, &w, at(0));
    report(
        &mut run,
        &next,
        Outcome::Checkpoint {
            upstream_task_id: Some("up-1".into()),
            job_name: None,
        },
        at(0),
    );
    let next = settle(&mut run, &w, at(1));
    report(
        &mut run,
        &next,
        Outcome::Failed {
            detail: None,
            class: ErrorClass::Timeout,
            message: "step timed out".into(),
        },
        at(2),
    );
    cleanup_cancels_upstream(&mut run, &w, 2, "up-1");
    settle(&mut run, &w, at(3));
    let st = status(&run);
    assert_eq!(st.phase, RunPhase::Failed);
    assert!(st.cleanups.is_empty());
}

#[test]
fn cancelling_cleans_up_the_upstream_task_before_finally() {
    let w = tool_wf();
    let mut run = new_run(json!({"x": 1}));
    let next = settle(&mut run, &w, at(0));
    report(
        &mut run,
        &next,
        Outcome::Checkpoint {
            upstream_task_id: Some("up-1".into()),
            job_name: None,
        },
        at(0),
    );
    run.spec.cancel = Some(crate::api::CancelRequest {
        reason: None,
        requested_by: None,
        requested_at: None,
    });
    let next = settle(&mut run, &w, at(1));
    let Next::Execute(e) = &next else {
        panic!("{next:?}")
    };
    let Action::Cleanup(c) = &e.action else {
        panic!("{:?}", e.action)
    };
    assert_eq!(c.cancel_upstream_task.as_deref(), Some("up-1"));
    assert_eq!(status(&run).phase, RunPhase::Cancelling);
    // a failed cleanup is noted, and the run goes on to finally
    report(
        &mut run,
        &next,
        Outcome::Failed {
            detail: None,
            class: ErrorClass::Connection,
            message: "down".into(),
        },
        at(2),
    );
    assert!(status(&run).cleanups.is_empty());
    assert!(
        status(&run).steps[0]
            .message
            .as_deref()
            .unwrap()
            .contains("cleanup failed")
    );
    settle(&mut run, &w, at(2));
    let st = status(&run);
    assert_eq!(st.phase, RunPhase::Cancelled);
    assert_eq!(st.steps[1].name, "cleanup");
    assert_eq!(st.steps[1].phase, StepPhase::Succeeded);
}

#[test]
fn the_deadline_deletes_a_running_job() {
    let w = wf(
        json!({"execution": {"timeout": "1m"}, "steps": [{"name": "build", "job": {"template": {"spec": {}}}}]}),
    );
    let mut run = new_run(json!({}));
    let Next::Execute(e) = settle(&mut run, &w, at(0)) else {
        panic!()
    };
    let Action::Job { job_name, .. } = &e.action else {
        panic!()
    };
    assert_eq!(job_name, "wf-abc-build-1");
    let Next::Execute(e) = settle(&mut run, &w, at(60)) else {
        panic!()
    };
    let Action::Cleanup(c) = &e.action else {
        panic!()
    };
    assert_eq!(c.delete_job.as_deref(), Some("wf-abc-build-1"));
    report(
        &mut run,
        &Next::Execute(e),
        Outcome::Succeeded(Value::Null),
        at(61),
    );
    settle(&mut run, &w, at(61));
    assert_eq!(status(&run).phase, RunPhase::Failed);
}

fn upstream_wf(retry: Value) -> WorkflowSpec {
    wf(json!({
        "steps": [{"name": "up", "retry": retry, "tool": {
            "server": {"url": "http://b/mcp", "headers": [
                {"name": "X-Run", "value": "{{ run.name }}"},
                {"name": "Authorization", "valueFrom": {"secretKeyRef": {"name": "b", "key": "token"}}}
            ]},
            "name": "t", "arguments": {"x": "{{ args.x }}"}}}]
    }))
}

fn upstream_failed(class: ErrorClass, error: Option<RunError>, call_ended: bool) -> Outcome {
    Outcome::UpstreamFailed {
        class,
        message: "upstream said no".into(),
        error,
        call_ended,
    }
}

#[test]
fn tool_server_headers_are_rendered_and_secrets_left_to_the_executor() {
    let w = upstream_wf(json!({}));
    let mut run = new_run(json!({"x": 1}));
    let Next::Execute(e) = settle(&mut run, &w, at(0)) else {
        panic!()
    };
    let Action::Tool { headers, .. } = &e.action else {
        panic!()
    };
    let expected = vec![
        HeaderValue::Inline {
            name: "X-Run".into(),
            value: "wf-abc".into(),
        },
        HeaderValue::Secret {
            name: "Authorization".into(),
            secret: "b".into(),
            key: "token".into(),
        },
    ];
    assert_eq!(headers, &expected);
    // the cleanup of an upstream task reaches the same server with the same headers
    let (tool, cleanup_headers) = upstream_server(&run, "up").unwrap();
    assert_eq!(tool.server.url, "http://b/mcp");
    assert_eq!(cleanup_headers, expected);
    assert!(upstream_server(&run, "nope").is_err());
}

#[test]
fn tool_arguments_that_do_not_render_to_an_object_fail_the_run() {
    let w = wf(json!({
        "steps": [{"name": "up", "tool": {"server": {"url": "http://b/mcp"}, "name": "t",
                   "arguments": {"x": "{{ args.missing.deeper }}"}}}]
    }));
    let mut run = new_run(json!({}));
    settle(&mut run, &w, at(0));
    let st = status(&run);
    assert_eq!(st.phase, RunPhase::Failed);
    assert!(
        st.error
            .as_ref()
            .unwrap()
            .message
            .contains("tool.arguments")
    );
}

#[test]
fn an_upstream_jsonrpc_error_is_retried_then_fails_the_run_with_the_upstream_code() {
    let w = upstream_wf(json!({"limit": 1, "backoff": "1s"}));
    let mut run = new_run(json!({"x": 1}));
    let next = settle(&mut run, &w, at(0));
    let upstream = RunError {
        code: -32603,
        message: "database down".into(),
        data: None,
    };
    report(
        &mut run,
        &next,
        upstream_failed(ErrorClass::ServerError, Some(upstream.clone()), false),
        at(1),
    );
    assert_eq!(status(&run).steps[0].phase, StepPhase::Retrying);
    let next = settle(&mut run, &w, at(2));
    report(
        &mut run,
        &next,
        upstream_failed(ErrorClass::ServerError, Some(upstream), false),
        at(3),
    );
    settle(&mut run, &w, at(3));
    let st = status(&run);
    assert_eq!(st.phase, RunPhase::Failed);
    assert!(
        st.result.is_none(),
        "a protocol-level failure, not a tool error"
    );
    let err = st.error.as_ref().unwrap();
    assert_eq!(err.code, -32603);
    assert!(err.message.contains("step up") && err.message.contains("database down"));
    assert_eq!(err.data.as_ref().unwrap()["upstream"]["code"], -32603);
}

#[test]
fn an_upstream_request_error_is_not_retried_by_default() {
    let w = upstream_wf(json!({"limit": 3}));
    let mut run = new_run(json!({"x": 1}));
    let next = settle(&mut run, &w, at(0));
    let upstream = RunError {
        code: -32602,
        message: "unknown tool".into(),
        data: None,
    };
    report(
        &mut run,
        &next,
        upstream_failed(ErrorClass::ClientError, Some(upstream), true),
        at(1),
    );
    settle(&mut run, &w, at(1));
    let st = status(&run);
    assert_eq!(st.phase, RunPhase::Failed);
    assert_eq!(st.steps[0].attempt, 1);
    assert_eq!(st.error.as_ref().unwrap().code, -32602);
}

#[test]
fn an_upstream_tool_error_ends_the_run_as_a_tool_error() {
    let w = upstream_wf(json!({}));
    let mut run = new_run(json!({"x": 1}));
    let next = settle(&mut run, &w, at(0));
    report(
        &mut run,
        &next,
        upstream_failed(ErrorClass::ToolError, None, true),
        at(1),
    );
    settle(&mut run, &w, at(1));
    let st = status(&run);
    assert_eq!(st.phase, RunPhase::Failed);
    assert!(st.error.is_none());
    assert_eq!(st.result.as_ref().unwrap()["isError"], true);
}

#[test]
fn a_retry_after_an_ended_upstream_task_calls_again_and_after_a_lost_connection_resumes() {
    let w = upstream_wf(json!({"limit": 3, "retryOn": ["connection", "toolError"]}));
    let mut run = new_run(json!({"x": 1}));
    let next = settle(&mut run, &w, at(0));
    report(
        &mut run,
        &next,
        Outcome::Checkpoint {
            upstream_task_id: Some("up-1".into()),
            job_name: None,
        },
        at(0),
    );
    let rec = &status(&run).steps[0];
    assert!(rec.message.as_deref().unwrap().contains("up-1"));
    assert!(rec.message.as_deref().unwrap().contains("http://b/mcp"));
    // the upstream cannot be reached: the retry follows the same task
    let next = settle(&mut run, &w, at(0));
    report(
        &mut run,
        &next,
        Outcome::Failed {
            detail: None,
            class: ErrorClass::Connection,
            message: "refused".into(),
        },
        at(1),
    );
    let Next::Execute(e) = settle(&mut run, &w, at(3)) else {
        panic!()
    };
    let Action::Tool {
        upstream_task_id, ..
    } = &e.action
    else {
        panic!()
    };
    assert_eq!((upstream_task_id.as_deref(), e.attempt), (Some("up-1"), 2));
    // the task ended with a tool error: the retry calls the tool again
    report(
        &mut run,
        &Next::Execute(e),
        upstream_failed(ErrorClass::ToolError, None, true),
        at(4),
    );
    assert!(status(&run).cleanups.is_empty(), "nothing left to cancel");
    let Next::Execute(e) = settle(&mut run, &w, at(10)) else {
        panic!()
    };
    let Action::Tool {
        upstream_task_id, ..
    } = &e.action
    else {
        panic!()
    };
    assert_eq!((upstream_task_id, e.attempt), (&None, 3));
}

#[test]
fn a_step_that_times_out_for_good_cancels_its_upstream_task() {
    let w = upstream_wf(json!({}));
    let mut run = new_run(json!({"x": 1}));
    let next = settle(&mut run, &w, at(0));
    report(
        &mut run,
        &next,
        Outcome::Checkpoint {
            upstream_task_id: Some("up-1".into()),
            job_name: None,
        },
        at(0),
    );
    let next = settle(&mut run, &w, at(0));
    report(
        &mut run,
        &next,
        upstream_failed(ErrorClass::Timeout, None, false),
        at(5),
    );
    cleanup_cancels_upstream(&mut run, &w, 5, "up-1");
    settle(&mut run, &w, at(6));
    let st = status(&run);
    assert_eq!(st.phase, RunPhase::Failed);
    let message = st.steps[0].message.as_deref().unwrap();
    assert!(message.contains("upstream said no") && message.contains("up-1 cancelled"));
}

#[test]
fn mrtr_answers_are_forwarded_with_the_upstream_request_state() {
    let w = upstream_wf(json!({}));
    let mut run = new_run(json!({"x": 1}));
    let next = settle(&mut run, &w, at(0));
    let req = json!({"method": "elicitation/create", "params": {"message": "ok?"}});
    report(
        &mut run,
        &next,
        Outcome::NeedsInput {
            requests: [("go".to_string(), req)].into(),
            request_state: Some("sealed".into()),
        },
        at(1),
    );
    answer(
        &mut run,
        "up.go",
        InputAction::Accept,
        json!({}),
        "bob",
        &[],
    );
    let Next::Execute(e) = settle(&mut run, &w, at(2)) else {
        panic!()
    };
    let Action::Tool {
        answers,
        request_state,
        upstream_task_id,
        ..
    } = &e.action
    else {
        panic!()
    };
    assert_eq!(request_state.as_deref(), Some("sealed"));
    assert_eq!(upstream_task_id, &None);
    assert_eq!(answers.as_ref().unwrap()["go"]["action"], "accept");
}

#[test]
fn tool_steps_are_validated_at_load() {
    use super::validate::{Capabilities, spec};
    let caps = Capabilities { jobs: false };
    let with = |tool: Value| spec(&wf(json!({"steps": [{"name": "up", "tool": tool}]})), caps);
    assert!(with(json!({"server": {"url": "http://b/mcp"}, "name": "t"})).is_ok());
    for (tool, needle) in [
        (
            json!({"server": {"url": "not a url"}, "name": "t"}),
            "tool.server.url",
        ),
        (json!({"server": {"url": "ftp://b"}, "name": "t"}), "scheme"),
        (
            json!({"server": {"url": "http://b"}, "name": "a b"}),
            "tool.name",
        ),
        (
            json!({"server": {"url": "http://b", "headers": [{"name": "X", "value": "{{ oops"}]}, "name": "t"}),
            "tool.server.headers[X]",
        ),
        (
            json!({"server": {"url": "http://b", "headers": [{"name": "bad header", "value": "v"}]}, "name": "t"}),
            "header name",
        ),
        (
            json!({"server": {"url": "http://b"}, "name": "t", "arguments": {"x": "{{ a b }}"}}),
            "tool.arguments",
        ),
    ] {
        let err = with(tool.clone()).unwrap_err();
        assert!(err.message.contains(needle), "{tool}: {err}");
    }
}

#[test]
fn an_answer_written_before_the_question_does_not_answer_it() {
    let w = approval_wf();
    let mut run = new_run(json!({"x": 1}));
    // Written with the Run (kubectl), before anything was asked.
    answer(
        &mut run,
        "ask.a",
        InputAction::Accept,
        json!({"v": "pre"}),
        "alice",
        &[],
    );
    settle(&mut run, &w, at(0));
    let st = status(&run);
    assert_eq!(st.phase, RunPhase::Waiting);
    assert_eq!(
        st.input_requests.keys().collect::<Vec<_>>(),
        ["ask.a.2", "ask.b"],
        "the question went out under a key nobody had answered"
    );
    assert!(st.steps[0].output.is_none());
}
