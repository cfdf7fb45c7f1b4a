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
    assert!(st.status_message.as_deref().unwrap().contains("stop"));
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
        status(&run).result.as_ref().unwrap()["content"][0]["text"],
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
