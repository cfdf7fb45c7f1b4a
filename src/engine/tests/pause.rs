//! Pause and resume: what a paused Run starts and what it lets finish, its clocks, holding a
//! Run whose step ran out of retries, and Workflows that are paused.

use super::*;

fn pause(run: &mut Run, paused: bool, who: &str, at_secs: i64) {
    run.spec.pause = Some(PauseRequest {
        paused,
        reason: paused.then(|| "look at the logs first".into()),
        requested_by: Some(who.into()),
        requested_at: Some(at(at_secs).to_string()),
    });
}

fn two_steps() -> WorkflowSpec {
    wf(json!({
        "execution": {"timeout": "1h"},
        "steps": [{"name": "one", "http": {"url": "http://x/1"}},
                  {"name": "two", "http": {"url": "http://x/2"}}],
        "finally": [{"name": "tidy", "http": {"url": "http://x/tidy"}}]
    }))
}

#[test]
fn a_paused_run_lets_its_running_step_finish_and_starts_no_other_until_resumed() {
    let w = two_steps();
    let mut run = new_run(json!({}));
    let first = settle(&mut run, &w, at(0));
    pause(&mut run, true, "bob", 1);
    let d = decide(&run, Some(&w), at(1));
    assert!(
        d.events
            .iter()
            .any(|e| e.reason == event_reasons::PAUSED && e.message.contains("bob")),
        "{:?}",
        d.events
    );
    run.status = d.status;
    let st = status(&run);
    assert_eq!(st.phase, RunPhase::Running);
    assert_eq!(st.status_message.as_deref(), Some("paused by bob"));
    assert_eq!(st.paused.as_ref().unwrap().by.as_deref(), Some("bob"));
    // The step that ran finishes and is recorded; the next one does not start.
    report(&mut run, &first, Outcome::Succeeded(json!(1)), at(2));
    let next = settle(&mut run, &w, at(2));
    assert_eq!(
        next,
        Next::WaitUntil(Some(at(3600))),
        "only the deadline wakes it"
    );
    let st = status(&run);
    assert_eq!(st.steps.len(), 1);
    assert_eq!(st.steps[0].phase, StepPhase::Succeeded);
    assert_eq!(st.status_message.as_deref(), Some("paused by bob"));
    // Resumed: step two starts, and who resumed is told.
    pause(&mut run, false, "carol", 3);
    let d = decide(&run, Some(&w), at(3));
    assert!(
        d.events
            .iter()
            .any(|e| e.reason == event_reasons::RESUMED && e.message.contains("carol"))
    );
    let Next::Execute(e) = &d.next else {
        panic!("{:?}", d.next)
    };
    assert_eq!(e.step, "two");
    run.status = d.status;
    assert!(status(&run).paused.is_none());
    assert_eq!(
        status(&run).status_message.as_deref(),
        Some("step 2/2: two")
    );
}

#[test]
fn the_deadline_keeps_running_while_paused() {
    let w = two_steps();
    let mut run = new_run(json!({}));
    let first = settle(&mut run, &w, at(0));
    report(&mut run, &first, Outcome::Succeeded(json!(1)), at(1));
    pause(&mut run, true, "bob", 1);
    // Paused between the two steps: nothing runs, and at the deadline the Run fails.
    let d = decide(&run, Some(&w), at(1));
    run.status = d.status;
    assert!(status(&run).steps.iter().all(|r| r.name != "two"));
    settle(&mut run, &w, at(3600));
    let st = status(&run);
    assert!(
        st.ending.as_ref().is_some_and(|e| e
            .message
            .as_deref()
            .unwrap_or_default()
            .contains("deadline")),
        "{st:?}"
    );
}

#[test]
fn a_cancel_ends_the_pause_and_runs_finally() {
    let w = two_steps();
    let mut run = new_run(json!({}));
    let first = settle(&mut run, &w, at(0));
    report(&mut run, &first, Outcome::Succeeded(json!(1)), at(1));
    pause(&mut run, true, "bob", 1);
    settle(&mut run, &w, at(1));
    run.spec.cancel = Some(CancelRequest {
        reason: Some("no longer needed".into()),
        requested_by: Some("alice".into()),
        requested_at: None,
    });
    let Next::Execute(e) = settle(&mut run, &w, at(2)) else {
        panic!("finally should start")
    };
    assert_eq!(e.step, "tidy");
    assert!(status(&run).paused.is_none());
}

#[test]
fn a_repeated_request_is_acted_on_once_and_a_resume_of_a_running_run_changes_nothing() {
    let w = two_steps();
    let mut run = new_run(json!({}));
    settle(&mut run, &w, at(0));
    pause(&mut run, false, "carol", 1);
    let d = decide(&run, Some(&w), at(1));
    assert!(d.events.is_empty(), "{:?}", d.events);
    run.status = d.status;
    pause(&mut run, true, "bob", 2);
    let d = decide(&run, Some(&w), at(2));
    assert_eq!(d.events.len(), 1);
    run.status = d.status;
    // The same request read again (a later reconcile) is no new pause.
    assert!(decide(&run, Some(&w), at(9)).events.is_empty());
}

#[test]
fn a_run_paused_before_it_starts_waits_unstarted_until_resumed_or_its_deadline() {
    let w = two_steps();
    let mut run = new_run(json!({}));
    pause(&mut run, true, "alice", 0);
    let next = settle(&mut run, &w, at(0));
    assert_eq!(next, Next::WaitUntil(Some(at(3600))));
    let st = status(&run);
    assert_eq!(st.phase, RunPhase::Pending);
    assert!(st.workflow.is_none() && st.started_at.is_none());
    assert_eq!(st.status_message.as_deref(), Some("paused by alice"));
    let mut cancelled = run.clone();
    cancelled.spec.cancel = Some(CancelRequest {
        reason: None,
        requested_by: Some("alice".into()),
        requested_at: None,
    });
    settle(&mut cancelled, &w, at(1));
    let st = status(&cancelled);
    assert_eq!(st.phase, RunPhase::Cancelled);
    assert!(st.steps.is_empty() && st.paused.is_none(), "{st:?}");
    let mut late = run.clone();
    settle(&mut late, &w, at(3600));
    assert_eq!(status(&late).phase, RunPhase::Failed);
    pause(&mut run, false, "alice", 5);
    let Next::Execute(e) = settle(&mut run, &w, at(5)) else {
        panic!("the run should start")
    };
    assert_eq!(e.step, "one");
}

#[test]
fn runs_of_a_paused_workflow_wait_and_start_once_it_is_resumed() {
    let mut w = two_steps();
    w.suspend = true;
    let mut run = new_run(json!({}));
    let d = decide(&run, Some(&w), at(0));
    assert!(
        d.events
            .iter()
            .any(|e| e.reason == event_reasons::WORKFLOW_PAUSED)
    );
    run.status = d.status;
    let st = status(&run);
    assert_eq!(st.phase, RunPhase::Pending);
    assert_eq!(
        st.status_message.as_deref(),
        Some("waiting: workflow wf is paused")
    );
    // A cancel of a waiting Run is not held back by the Workflow's pause.
    let mut cancelled = run.clone();
    cancelled.spec.cancel = Some(CancelRequest {
        reason: None,
        requested_by: Some("alice".into()),
        requested_at: None,
    });
    settle(&mut cancelled, &w, at(1));
    let st = status(&cancelled);
    assert_eq!(st.phase, RunPhase::Cancelled);
    assert!(st.steps.is_empty() && st.started_at.is_none(), "{st:?}");
    w.suspend = false;
    let Next::Execute(e) = settle(&mut run, &w, at(2)) else {
        panic!("the run should start")
    };
    assert_eq!(e.step, "one");
}

#[test]
fn a_step_out_of_retries_holds_the_run_and_resuming_tries_it_once_more() {
    let w = wf(json!({
        "execution": {"onRetriesExhausted": "Pause"},
        "steps": [{"name": "deploy", "http": {"url": "http://x"}, "retry": {"limit": 1, "backoff": "1s"}}]
    }));
    let mut run = new_run(json!({}));
    let first = settle(&mut run, &w, at(0));
    report(&mut run, &first, server_error("503"), at(1));
    let retry = settle(&mut run, &w, at(2));
    let before = run.status.clone();
    report(&mut run, &retry, server_error("503 again"), at(3));
    let events = recorded_events(before.as_ref(), status(&run));
    assert!(
        events
            .iter()
            .any(|e| e.reason == event_reasons::PAUSED && e.message.contains("503 again")),
        "{events:?}"
    );
    let next = settle(&mut run, &w, at(3));
    let st = status(&run);
    assert_eq!(st.phase, RunPhase::Running, "{st:?}");
    assert!(st.ending.is_none());
    assert_eq!(st.steps[0].phase, StepPhase::Retrying);
    assert_eq!(
        st.status_message.as_deref(),
        Some("paused: step deploy ran out of retries")
    );
    assert!(matches!(next, Next::WaitUntil(_)));
    // Nothing starts however long it waits.
    assert!(matches!(settle(&mut run, &w, at(600)), Next::WaitUntil(_)));
    pause(&mut run, false, "bob", 700);
    let Next::Execute(e) = settle(&mut run, &w, at(700)) else {
        panic!("the step should run again")
    };
    assert_eq!((e.step.as_str(), e.attempt), ("deploy", 3));
    report(
        &mut run,
        &Next::Execute(e),
        Outcome::Succeeded(json!(1)),
        at(701),
    );
    settle(&mut run, &w, at(701));
    assert_eq!(status(&run).phase, RunPhase::Succeeded);
}

#[test]
fn without_the_pause_policy_a_step_out_of_retries_fails_the_run() {
    let w = wf(json!({"steps": [{"name": "deploy", "http": {"url": "http://x"}}]}));
    let mut run = new_run(json!({}));
    let first = settle(&mut run, &w, at(0));
    report(&mut run, &first, server_error("503"), at(1));
    settle(&mut run, &w, at(1));
    assert_eq!(status(&run).phase, RunPhase::Failed);
    assert!(status(&run).paused.is_none());
}

#[test]
fn a_paused_for_each_step_starts_no_more_items() {
    let w = wf(json!({
        "steps": [{"name": "each", "forEach": {"items": "{{ args.xs }}", "parallelism": 1},
                   "http": {"url": "http://x/{{ item }}"}}]
    }));
    let mut run = new_run(json!({"xs": [1, 2, 3]}));
    let Next::Branches { effects, .. } = settle(&mut run, &w, at(0)) else {
        panic!("the first item should start")
    };
    pause(&mut run, true, "bob", 1);
    settle(&mut run, &w, at(1));
    let first = Next::Execute(Box::new(effects[0].clone()));
    report(&mut run, &first, Outcome::Succeeded(json!(1)), at(2));
    settle(&mut run, &w, at(2));
    let started = status(&run)
        .steps
        .iter()
        .filter(|r| r.name.starts_with("each["))
        .count();
    assert_eq!(started, 1);
    pause(&mut run, false, "bob", 3);
    let Next::Branches { effects, .. } = settle(&mut run, &w, at(3)) else {
        panic!("the next item should start")
    };
    assert_eq!(effects[0].step, "each[1]");
}
