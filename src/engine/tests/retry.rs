//! Retrying from the failed step: what a retry takes over, what runs again, and the refusals.

use super::*;
use crate::engine::retry::{RetryRefusal, plan};

fn three() -> WorkflowSpec {
    wf(json!({
        "steps": [{"name": "build", "http": {"url": "http://x/build"}},
                  {"name": "test", "http": {"url": "http://x/test"}},
                  {"name": "ship", "http": {"url": "http://x/ship"}}],
        "finally": [{"name": "tidy", "http": {"url": "http://x/tidy"}}]
    }))
}

/// A Run of `w` whose first step succeeded and whose second failed.
fn failed_at_test(w: &WorkflowSpec, args: Value) -> Run {
    let mut run = new_run(args);
    let build = settle(&mut run, w, at(0));
    report(
        &mut run,
        &build,
        Outcome::Succeeded(json!({"image": "v1"})),
        at(1),
    );
    let test = settle(&mut run, w, at(1));
    report(&mut run, &test, server_error("flaky"), at(2));
    let tidy = settle(&mut run, w, at(2));
    report(&mut run, &tidy, Outcome::Succeeded(json!(null)), at(3));
    settle(&mut run, w, at(3));
    assert_eq!(status(&run).phase, RunPhase::Failed);
    run
}

fn retry_of(original: &Run, args: Value) -> Run {
    let mut r = new_run(args);
    r.metadata.name = Some("wf-retry".into());
    r.metadata.uid = Some("uid-2".into());
    r.spec.retry_of = Some(RetryOf {
        name: original.metadata.name.clone().unwrap(),
        uid: original.metadata.uid.clone(),
    });
    r
}

#[test]
fn a_retry_takes_over_what_succeeded_and_starts_at_the_failed_step() {
    let w = three();
    let original = failed_at_test(&w, json!({}));
    let mut retry = retry_of(&original, json!({}));
    let records = plan(&retry, &original, &w).unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].name, "build");
    assert_eq!(records[0].reused_from.as_deref(), Some("wf-abc"));
    retry.status = Some(RunStatus {
        steps: records,
        ..Default::default()
    });
    let d = decide(&retry, Some(&w), at(10));
    assert!(
        d.events
            .iter()
            .any(|e| e.reason == event_reasons::STEPS_REUSED && e.message.contains("build")),
        "{:?}",
        d.events
    );
    let Next::Execute(e) = &d.next else {
        panic!("{:?}", d.next)
    };
    assert_eq!(e.step, "test");
    // A new Run: its own idempotency key for the step it runs again.
    assert_eq!(e.idempotency_key, "uid-2/test");
    retry.status = d.status;
    let ctx = context(&retry, status(&retry));
    assert_eq!(ctx["steps"]["build"]["output"]["image"], "v1");
    let next = Next::Execute(e.clone());
    report(&mut retry, &next, Outcome::Succeeded(json!(1)), at(11));
    let ship = settle(&mut retry, &w, at(11));
    report(&mut retry, &ship, Outcome::Succeeded(json!(2)), at(12));
    let tidy = settle(&mut retry, &w, at(12));
    report(&mut retry, &tidy, Outcome::Succeeded(json!(null)), at(13));
    settle(&mut retry, &w, at(13));
    assert_eq!(status(&retry).phase, RunPhase::Succeeded);
}

#[test]
fn a_changed_step_that_would_be_reused_refuses_the_retry_and_a_changed_failed_one_does_not() {
    let w = three();
    let original = failed_at_test(&w, json!({}));
    let retry = retry_of(&original, json!({}));
    let mut changed = w.clone();
    changed.steps[0].http.as_mut().unwrap().url = "http://x/build2".into();
    assert_eq!(
        plan(&retry, &original, &changed),
        Err(RetryRefusal::Changed {
            name: "wf-abc".into(),
            step: "build".into()
        })
    );
    // The step that failed may change: that is what fixing it means.
    let mut fixed = w.clone();
    fixed.steps[1].http.as_mut().unwrap().url = "http://x/test-fixed".into();
    assert_eq!(plan(&retry, &original, &fixed).unwrap().len(), 1);
}

#[test]
fn only_a_failed_run_of_the_same_requester_and_workflow_is_retried() {
    let w = three();
    let original = failed_at_test(&w, json!({}));
    let mut bobs = retry_of(&original, json!({}));
    bobs.spec.requested_by.as_mut().unwrap().username = "bob".into();
    assert!(matches!(
        plan(&bobs, &original, &w),
        Err(RetryRefusal::NotYours { requester, .. }) if requester == "alice"
    ));
    let mut other = retry_of(&original, json!({}));
    other.spec.workflow_ref.name = "other".into();
    assert!(matches!(
        plan(&other, &original, &w),
        Err(RetryRefusal::OtherWorkflow { .. })
    ));
    let mut stale = retry_of(&original, json!({}));
    stale.spec.retry_of.as_mut().unwrap().uid = Some("uid-old".into());
    assert_eq!(
        plan(&stale, &original, &w),
        Err(RetryRefusal::NotFound("wf-abc".into()))
    );
    let mut running = new_run(json!({}));
    settle(&mut running, &w, at(0));
    let retry = retry_of(&running, json!({}));
    assert!(matches!(
        plan(&retry, &running, &w),
        Err(RetryRefusal::NotFailed {
            phase: "Running",
            ..
        })
    ));
}

#[test]
fn with_other_arguments_questions_and_steps_that_read_them_run_again() {
    let w = wf(json!({
        "steps": [{"name": "fetch", "http": {"url": "http://x/fetch"}},
                  {"name": "ask", "dependsOn": [], "input": {"requests": [{"name": "ok", "message": "ok?"}]}},
                  {"name": "build", "dependsOn": [], "http": {"url": "http://x/{{ args.service }}"}},
                  {"name": "ship", "dependsOn": ["fetch"], "http": {"url": "http://x/ship"}}]
    }));
    let mut original = new_run(json!({"service": "api"}));
    let Next::Branches { effects, .. } = settle(&mut original, &w, at(0)) else {
        panic!("three steps start at once")
    };
    for e in &effects {
        let outcome = Outcome::Succeeded(json!(e.step));
        report(
            &mut original,
            &Next::Execute(Box::new(e.clone())),
            outcome,
            at(1),
        );
    }
    answer(
        &mut original,
        "ask.ok",
        InputAction::Accept,
        json!({}),
        "alice",
        &["dev"],
    );
    let Next::Execute(ship) = settle(&mut original, &w, at(2)) else {
        panic!("ship should start")
    };
    report(
        &mut original,
        &Next::Execute(ship),
        server_error("down"),
        at(3),
    );
    settle(&mut original, &w, at(3));
    assert_eq!(status(&original).phase, RunPhase::Failed);

    let reused = |args: Value| -> Vec<String> {
        let retry = retry_of(&original, args);
        let mut names: Vec<String> = plan(&retry, &original, &w)
            .unwrap()
            .into_iter()
            .map(|r| r.name)
            .collect();
        names.sort();
        names
    };
    assert_eq!(reused(json!({"service": "api"})), ["ask", "build", "fetch"]);
    assert_eq!(reused(json!({"service": "web"})), ["fetch"]);
}

#[test]
fn a_retry_takes_over_a_step_that_depends_on_one_listed_after_it() {
    let w = wf(json!({"steps": [
        {"name": "announce", "dependsOn": ["build"], "http": {"url": "http://x/announce"}},
        {"name": "build", "dependsOn": [], "http": {"url": "http://x/build"}},
        {"name": "deploy", "dependsOn": ["announce"], "http": {"url": "http://x/deploy"}},
    ]}));
    let mut run = new_run(json!({}));
    for t in 0..10 {
        let next = settle(&mut run, &w, at(t));
        let effects = match &next {
            Next::Execute(e) => vec![(**e).clone()],
            Next::Branches { effects, .. } => effects.clone(),
            _ => break,
        };
        for e in effects {
            let outcome = if e.step == "deploy" {
                server_error("down")
            } else {
                Outcome::Succeeded(json!(e.step))
            };
            report(&mut run, &Next::Execute(Box::new(e)), outcome, at(t));
        }
    }
    assert_eq!(status(&run).phase, RunPhase::Failed);
    let records = plan(&retry_of(&run, json!({})), &run, &w).unwrap();
    let mut names: Vec<_> = records.iter().map(|r| r.name.as_str()).collect();
    names.sort_unstable();
    assert_eq!(names, ["announce", "build"]);
}
