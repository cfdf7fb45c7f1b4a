//! Cancellation, deadlines, step timeouts and garbage collection.

use super::*;

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
    run.spec.cancel = Some(CancelRequest {
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
    // Who cancelled and why are for those who read the Run, not in the task's statusMessage.
    assert_eq!(st.status_message.as_deref(), Some("cancelled"));
    assert!(
        st.conditions[0].message.contains("alice") && st.conditions[0].message.contains("stop")
    );
}

#[test]
fn a_cancel_after_the_steps_ended_sticks_and_lets_finally_finish() {
    let w = wf(json!({
        "steps": [{"name": "call", "http": {"url": "http://x/call"}}],
        "finally": [{"name": "cleanup", "http": {"url": "http://x/cleanup"}}]
    }));
    let mut run = new_run(json!({}));
    let first = settle(&mut run, &w, at(0));
    report(
        &mut run,
        &first,
        Outcome::Succeeded(json!({"ok": true})),
        at(1),
    );
    let Next::Execute(cleanup) = settle(&mut run, &w, at(1)) else {
        panic!("finally should run")
    };
    assert_eq!(cleanup.step, "cleanup");
    // The task still shows as working while finally runs; a cancel now is acknowledged...
    run.spec.cancel = Some(CancelRequest {
        reason: Some("too late?".into()),
        requested_by: Some("alice".into()),
        requested_at: None,
    });
    let d = decide(&run, Some(&w), at(2));
    assert!(
        d.events
            .iter()
            .any(|e| e.reason == event_reasons::CANCEL_REQUESTED && e.message.contains("after"))
    );
    run.status = d.status;
    assert_eq!(status(&run).phase, RunPhase::Cancelling);
    // ...the finally step is not interrupted...
    report(
        &mut run,
        &Next::Execute(cleanup),
        Outcome::Succeeded(json!(null)),
        at(3),
    );
    settle(&mut run, &w, at(3));
    // ...and the Run ends as the caller was told: cancelled.
    let st = status(&run);
    assert_eq!(st.phase, RunPhase::Cancelled);
    assert_eq!(st.steps[0].phase, StepPhase::Succeeded);
    assert_eq!(st.steps[1].phase, StepPhase::Succeeded);
    assert_eq!(st.status_message.as_deref(), Some("cancelled"));
}

#[test]
fn cancelling_a_waiting_run_closes_its_requests() {
    let w = approval_wf();
    let mut run = new_run(json!({"x": 1}));
    settle(&mut run, &w, at(0));
    run.spec.cancel = Some(CancelRequest {
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
        status(&run).result.as_ref().unwrap().to_value()["content"][0]["text"],
        "done"
    );
}

#[test]
fn cancel_after_finish_changes_nothing() {
    let w = wf(json!({"steps": []}));
    let mut run = new_run(json!({}));
    settle(&mut run, &w, at(0));
    run.spec.cancel = Some(CancelRequest {
        reason: None,
        requested_by: None,
        requested_at: None,
    });
    assert!(decide(&run, Some(&w), at(1)).status.is_none());
}

#[test]
fn a_run_without_a_timeout_still_has_a_deadline_a_week_out() {
    // An input nobody answers would otherwise hold the Run forever.
    let w = wf(json!({"steps": [{"name": "ask", "input": {"requests": [
        {"name": "go", "message": "go?", "requestedSchema": {"type": "object", "properties": {}}}
    ]}}]}));
    let mut run = new_run(json!({}));
    settle(&mut run, &w, at(0));
    assert_eq!(status(&run).phase, RunPhase::Waiting);
    let week = 7 * 24 * 3600;
    let Next::WaitUntil(Some(wake)) = settle(&mut run, &w, at(week - 1)) else {
        panic!("the wait is bounded by the deadline")
    };
    assert!(wake <= at(week), "{wake}");
    settle(&mut run, &w, at(week));
    let st = status(&run);
    assert_eq!(st.phase, RunPhase::Failed);
    assert!(
        st.conditions[0].message.contains("deadline"),
        "{:?}",
        st.conditions
    );
}

#[test]
fn a_cancel_closes_the_question_of_a_finally_step_and_the_run_ends() {
    let w = wf(json!({
        "steps": [{"name": "call", "http": {"url": "http://x/call"}}],
        "finally": [
            {"name": "confirm", "input": {"requests": [{"name": "ok", "message": "Rolled back?"}]}},
            {"name": "tidy", "delay": {"duration": "0s"}}
        ]
    }));
    let mut run = new_run(json!({}));
    let first = settle(&mut run, &w, at(0));
    report(&mut run, &first, Outcome::Succeeded(json!(1)), at(1));
    settle(&mut run, &w, at(1));
    assert!(status(&run).input_requests.contains_key("confirm.ok"));
    run.spec.cancel = Some(CancelRequest {
        reason: Some("enough".into()),
        requested_by: Some("alice".into()),
        requested_at: None,
    });
    settle(&mut run, &w, at(2));
    let next = settle(&mut run, &w, at(3));
    let st = status(&run);
    assert!(st.input_requests.is_empty());
    let confirm = st.steps.iter().find(|r| r.name == "confirm").unwrap();
    assert_eq!(confirm.phase, StepPhase::Cancelled);
    assert!(
        confirm
            .message
            .as_deref()
            .unwrap()
            .contains("closed by the cancel")
    );
    // `finally` goes on without it, and the Run ends.
    assert_eq!(st.phase, RunPhase::Cancelled, "{next:?}");
    assert!(
        st.steps
            .iter()
            .any(|r| r.name == "tidy" && r.phase == StepPhase::Succeeded)
    );
}

#[test]
fn a_run_cancelled_before_it_started_runs_nothing_not_even_finally() {
    let w = wf(json!({
        "execution": {"ttlAfterFinished": "1h"},
        "steps": [{"name": "deploy", "http": {"url": "http://x/deploy"}}],
        "finally": [{"name": "release", "http": {"url": "http://x/release"}}]
    }));
    let mut run = new_run(json!({}));
    run.spec.cancel = Some(CancelRequest {
        reason: Some("never mind".into()),
        requested_by: Some("alice".into()),
        requested_at: None,
    });
    let next = settle(&mut run, &w, at(0));
    assert!(!matches!(next, Next::Execute(_)), "{next:?}");
    let st = status(&run);
    assert_eq!(st.phase, RunPhase::Cancelled);
    assert!(st.steps.is_empty(), "{:?}", st.steps);
    assert!(st.workflow.is_none(), "it took no snapshot, so no slot");
    // Its Workflow's time to live still applies.
    assert_eq!(
        settle(&mut run, &w, at(5)),
        Next::Finished {
            delete_at: Some(at(3600))
        }
    );
}
