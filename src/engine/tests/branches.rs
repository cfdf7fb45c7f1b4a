//! Steps at the same time (`dependsOn`), fail fast or wait for all, `forEach` items and child
//! Runs (`workflow` steps).

use super::*;

/// The effects a decision asks for, by step (one or several).
fn effects(next: &Next) -> Vec<Effect> {
    match next {
        Next::Execute(e) => vec![(**e).clone()],
        Next::Branches { effects, .. } => effects.clone(),
        other => panic!("expected effects, got {other:?}"),
    }
}

fn effect_of(next: &Next, step: &str) -> Effect {
    effects(next)
        .into_iter()
        .find(|e| e.step == step)
        .unwrap_or_else(|| panic!("no effect for {step} in {next:?}"))
}

/// Report the outcome of `step`'s effect in `next`.
fn report_step(run: &mut Run, next: &Next, step: &str, outcome: Outcome, now: Timestamp) {
    let effect = effect_of(next, step);
    run.status = Some(record(run, &effect, outcome, now));
}

fn steps_of(next: &Next) -> Vec<String> {
    let mut s: Vec<String> = effects(next).into_iter().map(|e| e.step).collect();
    s.sort();
    s
}

fn rec<'a>(run: &'a Run, name: &str) -> Option<&'a StepRecord> {
    status(run).steps.iter().find(|r| r.name == name)
}

fn ok(v: Value) -> Outcome {
    Outcome::Succeeded(v)
}

fn refused() -> Outcome {
    Outcome::Failed {
        class: ErrorClass::ClientError,
        message: "HTTP 400".into(),
        detail: None,
    }
}

fn fan_in() -> WorkflowSpec {
    wf(json!({
        "steps": [
            {"name": "a", "dependsOn": [], "http": {"url": "http://svc/a"}},
            {"name": "b", "dependsOn": [], "http": {"url": "http://svc/b"}},
            {"name": "join", "dependsOn": ["a", "b"], "delay": {"duration": "0s"}},
            {"name": "after", "http": {"url": "http://svc/after/{{ steps.a.output }}/{{ steps.b.output }}"}}
        ]
    }))
}

#[test]
fn independent_steps_start_together_and_a_join_waits_for_all_of_them() {
    let w = fan_in();
    let mut run = new_run(json!({}));
    let next = settle(&mut run, &w, at(0));
    assert_eq!(steps_of(&next), ["a", "b"]);
    let keys: Vec<String> = effects(&next)
        .into_iter()
        .map(|e| e.idempotency_key)
        .collect();
    assert!(keys.contains(&"uid-1/a".to_owned()) && keys.contains(&"uid-1/b".to_owned()));
    assert_eq!(
        status(&run).status_message.as_deref(),
        Some("2 steps running: a, b")
    );
    assert_eq!(status(&run).current_step.as_deref(), Some("a,b"));

    // b ends first; a is still asked for (the controller runs each once), the join waits.
    report_step(&mut run, &next, "b", ok(json!("B")), at(1));
    let next = settle(&mut run, &w, at(1));
    assert_eq!(steps_of(&next), ["a"]);
    assert!(rec(&run, "join").is_none());
    assert_eq!(status(&run).status_message.as_deref(), Some("step 1/4: a"));

    report_step(&mut run, &next, "a", ok(json!("A")), at(2));
    let next = settle(&mut run, &w, at(2));
    assert_eq!(rec(&run, "join").unwrap().phase, StepPhase::Succeeded);
    // `after` has no dependsOn: it follows the step listed before it, the join.
    let after = effect_of(&next, "after");
    let Action::Http(req) = &after.action else {
        panic!()
    };
    assert_eq!(req.url, "http://svc/after/A/B");
    report_step(&mut run, &next, "after", ok(json!("done")), at(3));
    settle(&mut run, &w, at(3));
    assert_eq!(status(&run).phase, RunPhase::Succeeded);
}

#[test]
fn a_restart_asks_for_the_same_effects_under_the_same_keys() {
    let w = fan_in();
    let mut run = new_run(json!({}));
    let first = settle(&mut run, &w, at(0));
    // A new process reads the same status and decides again later.
    let again = decide(&run, Some(&w), at(30));
    assert!(again.status.is_none());
    assert_eq!(effects(&again.next), effects(&first));
}

#[test]
fn with_fail_fast_a_failure_stops_the_other_branches_cleans_up_and_runs_finally() {
    let w = wf(json!({
        "steps": [
            {"name": "a", "dependsOn": [], "http": {"url": "http://svc/a"}},
            {"name": "b", "dependsOn": [], "tool": {"server": {"url": "http://up/mcp"}, "name": "slow"}},
            {"name": "join", "dependsOn": ["a", "b"], "delay": {"duration": "0s"}}
        ],
        "finally": [{"name": "tidy", "delay": {"duration": "0s"}}]
    }));
    let mut run = new_run(json!({}));
    let next = settle(&mut run, &w, at(0));
    report_step(
        &mut run,
        &next,
        "b",
        Outcome::Checkpoint {
            upstream_task_id: Some("up-1".into()),
            job_name: None,
        },
        at(1),
    );
    report_step(&mut run, &next, "a", refused(), at(2));
    let d = decide(&run, Some(&w), at(2));
    assert!(
        d.events
            .iter()
            .any(|e| e.reason == event_reasons::STEP_STOPPED
                && e.message == "step b stopped: step a failed")
    );
    run.status = d.status;
    let b = rec(&run, "b").unwrap();
    assert_eq!(b.phase, StepPhase::Cancelled);
    assert_eq!(b.message.as_deref(), Some("stopped: step a failed"));
    // b's upstream task is cancelled before finally runs.
    let Next::Execute(cleanup) = &d.next else {
        panic!("{:?}", d.next)
    };
    let Action::Cleanup(c) = &cleanup.action else {
        panic!()
    };
    assert_eq!(c.cancel_upstream_task.as_deref(), Some("up-1"));
    report(&mut run, &d.next, ok(json!(null)), at(3));
    settle(&mut run, &w, at(3));
    let st = status(&run);
    assert!(rec(&run, "join").is_none());
    assert_eq!(rec(&run, "tidy").unwrap().phase, StepPhase::Succeeded);
    assert_eq!(st.phase, RunPhase::Failed);
    assert!(
        st.status_message
            .as_deref()
            .unwrap()
            .contains("step a failed")
    );
}

#[test]
fn an_upstream_task_that_starts_after_its_step_was_stopped_is_cancelled() {
    let w = wf(json!({
        "steps": [
            {"name": "a", "dependsOn": [], "http": {"url": "http://svc/a"}},
            {"name": "b", "dependsOn": [], "tool": {"server": {"url": "http://up/mcp"}, "name": "slow"}}
        ]
    }));
    let mut run = new_run(json!({}));
    let next = settle(&mut run, &w, at(0));
    // a fails while b's call is still on its way: b is stopped with nothing to clean up yet.
    report_step(&mut run, &next, "a", refused(), at(1));
    settle(&mut run, &w, at(1));
    assert_eq!(rec(&run, "b").unwrap().phase, StepPhase::Cancelled);
    // Then b's call comes back with a task: nobody follows it, so it is cancelled.
    let started = Outcome::Checkpoint {
        upstream_task_id: Some("up-2".into()),
        job_name: None,
    };
    report_step(&mut run, &next, "b", started.clone(), at(2));
    report_step(&mut run, &next, "b", started, at(2));
    let st = status(&run);
    assert_eq!(st.cleanups.len(), 1, "{:?}", st.cleanups);
    assert_eq!(st.cleanups[0].cancel_upstream_task.as_deref(), Some("up-2"));
    let d = decide(&run, Some(&w), at(3));
    let Next::Execute(cleanup) = &d.next else {
        panic!("{:?}", d.next)
    };
    let Action::Cleanup(c) = &cleanup.action else {
        panic!()
    };
    assert_eq!(c.cancel_upstream_task.as_deref(), Some("up-2"));
}

#[test]
fn without_fail_fast_what_does_not_depend_on_the_failure_runs_to_its_end() {
    let w = wf(json!({
        "execution": {"failFast": false},
        "steps": [
            {"name": "a", "dependsOn": [], "http": {"url": "http://svc/a"}},
            {"name": "b", "dependsOn": [], "http": {"url": "http://svc/b"}},
            {"name": "after-a", "dependsOn": ["a"], "http": {"url": "http://svc/c"}},
            {"name": "after-b", "dependsOn": ["b"], "http": {"url": "http://svc/d"}}
        ],
        "finally": [{"name": "tidy", "delay": {"duration": "0s"}}]
    }));
    let mut run = new_run(json!({}));
    let next = settle(&mut run, &w, at(0));
    report_step(&mut run, &next, "a", refused(), at(1));
    let next = settle(&mut run, &w, at(1));
    // The failure is decided, b runs on and finally waits.
    assert_eq!(steps_of(&next), ["b"]);
    assert!(rec(&run, "tidy").is_none());
    assert_eq!(status(&run).phase, RunPhase::Running);
    report_step(&mut run, &next, "b", ok(json!("B")), at(2));
    let next = settle(&mut run, &w, at(2));
    assert_eq!(steps_of(&next), ["after-b"]);
    report_step(&mut run, &next, "after-b", ok(json!("D")), at(3));
    settle(&mut run, &w, at(3));
    let st = status(&run);
    assert!(rec(&run, "after-a").is_none(), "depends on the failed step");
    assert_eq!(rec(&run, "after-b").unwrap().phase, StepPhase::Succeeded);
    assert_eq!(rec(&run, "tidy").unwrap().phase, StepPhase::Succeeded);
    assert_eq!(st.phase, RunPhase::Failed);
    assert!(
        st.status_message
            .as_deref()
            .unwrap()
            .contains("step a failed")
    );
}

fn two_approvers() -> WorkflowSpec {
    wf(json!({
        "steps": [
            {"name": "security", "dependsOn": [], "input": {"requests": [{"name": "ok", "message": "Security?"}]}},
            {"name": "finance", "dependsOn": [], "input": {"requests": [{"name": "ok", "message": "Finance?"}]}},
            {"name": "build", "dependsOn": [], "http": {"url": "http://svc/build"}},
            {"name": "ship", "dependsOn": ["security", "finance", "build"], "delay": {"duration": "0s"}}
        ],
        "finally": [{"name": "tidy", "delay": {"duration": "0s"}}]
    }))
}

#[test]
fn two_questions_at_once_keep_the_run_waiting_until_both_are_answered() {
    let w = two_approvers();
    let mut run = new_run(json!({}));
    let next = settle(&mut run, &w, at(0));
    assert_eq!(steps_of(&next), ["build"]);
    let st = status(&run);
    assert_eq!(st.phase, RunPhase::Waiting);
    assert_eq!(
        st.input_requests.keys().collect::<Vec<_>>(),
        ["finance.ok", "security.ok"]
    );
    answer(
        &mut run,
        "finance.ok",
        InputAction::Accept,
        json!({}),
        "bob",
        &[],
    );
    let next = settle(&mut run, &w, at(1));
    assert_eq!(rec(&run, "finance").unwrap().phase, StepPhase::Succeeded);
    assert_eq!(status(&run).phase, RunPhase::Waiting, "security still asks");
    assert_eq!(status(&run).waiting_for.as_deref(), Some("security.ok"));
    report_step(&mut run, &next, "build", ok(json!(1)), at(2));
    answer(
        &mut run,
        "security.ok",
        InputAction::Accept,
        json!({}),
        "carol",
        &[],
    );
    settle(&mut run, &w, at(3));
    let st = status(&run);
    assert_eq!(rec(&run, "ship").unwrap().phase, StepPhase::Succeeded);
    assert_eq!(st.phase, RunPhase::Succeeded);
}

#[test]
fn cancel_reaches_every_running_branch() {
    let w = two_approvers();
    let mut run = new_run(json!({}));
    settle(&mut run, &w, at(0));
    run.spec.cancel = Some(CancelRequest {
        reason: Some("changed my mind".into()),
        requested_by: Some("alice".into()),
        requested_at: None,
    });
    settle(&mut run, &w, at(1));
    let st = status(&run);
    for step in ["security", "finance", "build"] {
        assert_eq!(
            rec(&run, step).unwrap().phase,
            StepPhase::Cancelled,
            "{step}"
        );
    }
    assert!(st.input_requests.is_empty());
    assert!(rec(&run, "ship").is_none());
    assert_eq!(rec(&run, "tidy").unwrap().phase, StepPhase::Succeeded);
    assert_eq!(st.phase, RunPhase::Cancelled);
}

#[test]
fn the_deadline_fails_every_running_branch() {
    let mut w = two_approvers();
    w.execution.timeout = Some("1m".into());
    let mut run = new_run(json!({}));
    settle(&mut run, &w, at(0));
    settle(&mut run, &w, at(61));
    for step in ["security", "finance", "build"] {
        assert_eq!(rec(&run, step).unwrap().phase, StepPhase::Failed, "{step}");
    }
    assert_eq!(status(&run).phase, RunPhase::Failed);
    assert!(status(&run).input_requests.is_empty());
}

fn regions() -> WorkflowSpec {
    wf(json!({
        "steps": [
            {"name": "deploy",
             "forEach": {"items": "{{ args.regions }}", "parallelism": 2},
             "retry": {"limit": 1, "backoff": "10s"},
             "http": {"url": "http://svc/deploy/{{ item }}?n={{ index }}"}},
            {"name": "report", "http": {"url": "http://svc/report",
                                        "body": {"all": "{{ steps.deploy.output }}"}}}
        ]
    }))
}

#[test]
fn for_each_runs_at_most_its_parallelism_and_collects_outputs_in_order() {
    let w = regions();
    let mut run = new_run(json!({"regions": ["eu", "us", "ap", "sa"]}));
    let next = settle(&mut run, &w, at(0));
    assert_eq!(steps_of(&next), ["deploy[0]", "deploy[1]"]);
    let e = effect_of(&next, "deploy[1]");
    assert_eq!(e.idempotency_key, "uid-1/deploy[1]");
    let Action::Http(req) = &e.action else {
        panic!()
    };
    assert_eq!(req.url, "http://svc/deploy/us?n=1");
    assert_eq!(
        rec(&run, "deploy").unwrap().items.as_deref(),
        Some(&[json!("eu"), json!("us"), json!("ap"), json!("sa")][..])
    );
    assert_eq!(
        status(&run).status_message.as_deref(),
        Some("step 1/2: deploy (0/4 items done)")
    );

    // Item 1 ends first: item 2 takes its place, never more than two at once.
    report_step(&mut run, &next, "deploy[1]", ok(json!("US")), at(1));
    let next = settle(&mut run, &w, at(1));
    assert_eq!(steps_of(&next), ["deploy[0]", "deploy[2]"]);
    // Item 2 fails once and retries on its own; item 3 does not start meanwhile.
    report_step(
        &mut run,
        &next,
        "deploy[2]",
        Outcome::Failed {
            class: ErrorClass::ServerError,
            message: "HTTP 503".into(),
            detail: None,
        },
        at(2),
    );
    let next = settle(&mut run, &w, at(2));
    let Next::Branches { wake, .. } = &next else {
        panic!("{next:?}")
    };
    assert_eq!(*wake, Some(at(12)));
    assert_eq!(steps_of(&next), ["deploy[0]"]);
    report_step(&mut run, &next, "deploy[0]", ok(json!("EU")), at(3));
    let next = settle(&mut run, &w, at(3));
    assert_eq!(steps_of(&next), ["deploy[3]"]);
    report_step(&mut run, &next, "deploy[3]", ok(json!("SA")), at(4));
    let next = settle(&mut run, &w, at(12));
    let retry = effect_of(&next, "deploy[2]");
    assert_eq!(
        (retry.attempt, retry.idempotency_key.as_str()),
        (2, "uid-1/deploy[2]")
    );
    report_step(&mut run, &next, "deploy[2]", ok(json!("AP")), at(13));
    let next = settle(&mut run, &w, at(13));

    let deploy = rec(&run, "deploy").unwrap();
    assert_eq!(deploy.phase, StepPhase::Succeeded);
    assert_eq!(deploy.output, Some(json!(["EU", "US", "AP", "SA"])));
    assert!(
        rec(&run, "deploy[0]").unwrap().output.is_none(),
        "kept once"
    );
    let Action::Http(req) = &effect_of(&next, "report").action else {
        panic!()
    };
    assert_eq!(
        req.body,
        Some(Body::Json(json!({"all": ["EU", "US", "AP", "SA"]})))
    );
}

#[test]
fn a_failed_item_fails_its_step_and_stops_the_others() {
    let w = regions();
    let mut run = new_run(json!({"regions": ["eu", "us", "ap"]}));
    let next = settle(&mut run, &w, at(0));
    report_step(&mut run, &next, "deploy[0]", refused(), at(1));
    settle(&mut run, &w, at(1));
    let st = status(&run);
    assert_eq!(rec(&run, "deploy[1]").unwrap().phase, StepPhase::Cancelled);
    assert!(
        rec(&run, "deploy[2]").is_none(),
        "nothing starts after the failure"
    );
    assert_eq!(rec(&run, "deploy").unwrap().phase, StepPhase::Failed);
    assert!(rec(&run, "report").is_none());
    assert_eq!(st.phase, RunPhase::Failed);
    assert_eq!(st.status_message.as_deref(), Some("step deploy failed"));
    assert!(
        st.conditions[0].message.contains("deploy[0]"),
        "{:?}",
        st.conditions
    );
}

#[test]
fn without_fail_fast_every_item_runs_and_the_step_fails_after() {
    let mut w = regions();
    w.execution.fail_fast = Some(false);
    let mut run = new_run(json!({"regions": ["eu", "us", "ap"]}));
    let next = settle(&mut run, &w, at(0));
    report_step(&mut run, &next, "deploy[0]", refused(), at(1));
    let next = settle(&mut run, &w, at(1));
    assert_eq!(steps_of(&next), ["deploy[1]", "deploy[2]"]);
    report_step(&mut run, &next, "deploy[1]", ok(json!(1)), at(2));
    report_step(&mut run, &next, "deploy[2]", ok(json!(2)), at(2));
    settle(&mut run, &w, at(2));
    let deploy = rec(&run, "deploy").unwrap();
    assert_eq!(deploy.phase, StepPhase::Failed);
    assert!(
        deploy
            .message
            .as_deref()
            .unwrap()
            .starts_with("item 0 failed")
    );
    assert_eq!(status(&run).phase, RunPhase::Failed);
}

#[test]
fn items_that_are_no_list_or_too_many_fail_the_step() {
    let w = regions();
    let mut run = new_run(json!({"regions": {"eu": 1}}));
    settle(&mut run, &w, at(0));
    assert_eq!(status(&run).phase, RunPhase::Failed);
    assert!(
        status(&run)
            .error
            .as_ref()
            .unwrap()
            .message
            .contains("must render to a list"),
        "{:?}",
        status(&run).error
    );
    let many: Vec<u32> = (0..=budget::MAX_ITEMS as u32).collect();
    let mut run = new_run(json!({"regions": many}));
    settle(&mut run, &w, at(0));
    assert!(
        status(&run)
            .error
            .as_ref()
            .unwrap()
            .message
            .contains("at most 1000")
    );
    // No items: the step succeeds with an empty list.
    let mut run = new_run(json!({"regions": []}));
    let next = settle(&mut run, &w, at(0));
    assert_eq!(rec(&run, "deploy").unwrap().output, Some(json!([])));
    assert_eq!(steps_of(&next), ["report"]);
}

fn parent() -> WorkflowSpec {
    wf(json!({
        "steps": [{"name": "child", "timeout": "1m", "retry": {"limit": 1, "retryOn": ["timeout"]},
                   "workflow": {"name": "deploy", "arguments": {"env": "{{ args.env }}", "n": 1}}}],
        "result": {"content": [{"type": "text", "text": "{{ steps.child.output.url }}"}]}
    }))
}

/// At `at(secs)` the next effect is the cleanup that cancels the first child; it succeeds.
fn cancels_first_child(run: &mut Run, w: &WorkflowSpec, secs: i64) {
    let next = settle(run, w, at(secs));
    let Action::Cleanup(c) = &effect_of(&next, "child").action else {
        panic!("{next:?}")
    };
    assert_eq!(c.cancel_run.as_deref(), Some("wf-abc-child-1"));
    report(
        run,
        &next,
        ok(json!("cancelled child run wf-abc-child-1")),
        at(secs + 1),
    );
    settle(run, w, at(secs + 1));
}

#[test]
fn a_workflow_step_starts_one_named_child_per_attempt_and_takes_its_result() {
    let w = parent();
    let mut run = new_run(json!({"env": "prod"}));
    let next = settle(&mut run, &w, at(0));
    let e = effect_of(&next, "child");
    assert_eq!(
        e.action,
        Action::Child {
            workflow: "deploy".into(),
            arguments: json!({"env": "prod", "n": 1}),
            run_name: "wf-abc-child-1".into(),
        }
    );
    assert_eq!(e.deadline, Some(at(60)));
    assert_eq!(
        rec(&run, "child").unwrap().child_run.as_deref(),
        Some("wf-abc-child-1")
    );
    assert_eq!(
        status(&run).status_message.as_deref(),
        Some("step 1/1: child (child run wf-abc-child-1)")
    );
    // The wait timed out: the child is cancelled, and the retry starts a new one.
    report_step(
        &mut run,
        &next,
        "child",
        Outcome::Failed {
            class: ErrorClass::Timeout,
            message: "child run wf-abc-child-1 did not finish in time".into(),
            detail: None,
        },
        at(60),
    );
    cancels_first_child(&mut run, &w, 60);
    let next = settle(&mut run, &w, at(62));
    let Action::Child { run_name, .. } = &effect_of(&next, "child").action else {
        panic!("{next:?}")
    };
    assert_eq!(run_name, "wf-abc-child-2");
    report_step(
        &mut run,
        &next,
        "child",
        ok(json!({"url": "https://x"})),
        at(70),
    );
    settle(&mut run, &w, at(70));
    assert_eq!(status(&run).phase, RunPhase::Succeeded);
    assert_eq!(
        status(&run).result.as_ref().unwrap().to_value()["content"][0]["text"],
        "https://x"
    );
}

#[test]
fn cancelling_the_parent_cancels_its_running_child() {
    let w = parent();
    let mut run = new_run(json!({"env": "prod"}));
    settle(&mut run, &w, at(0));
    run.spec.cancel = Some(CancelRequest {
        reason: None,
        requested_by: Some("alice".into()),
        requested_at: None,
    });
    cancels_first_child(&mut run, &w, 1);
    assert_eq!(status(&run).phase, RunPhase::Cancelled);
}

#[test]
fn the_stable_hash_is_fnv_1a() {
    // The published FNV-1a 64 test vectors: shards and child names must never move.
    assert_eq!(stable_hash(*b""), 0xcbf2_9ce4_8422_2325);
    assert_eq!(stable_hash(*b"a"), 0xaf63_dc4c_8601_ec8c);
    assert_eq!(stable_hash(*b"foobar"), 0x8594_4171_f739_67e8);
}

#[test]
fn child_run_names_stay_valid_labels() {
    assert_eq!(child_run_name("p", "deploy[3]", 2), "p-deploy-3-2");
    let long = "r".repeat(60);
    let a = child_run_name(&long, "step_a", 1);
    let b = child_run_name(&long, "step_b", 1);
    assert!(a.len() <= 63 && b.len() <= 63 && a != b, "{a} {b}");
    assert!(is_dns_label(&a), "{a}");
    assert_eq!(job_name("run", "deploy[12]", 1), "run-deploy-12-1");
}

#[test]
fn long_run_names_keep_their_jobs_apart() {
    let prefix = "a-workflow-with-a-rather-long-name-x";
    let a = job_name(&format!("{prefix}-0001"), "build-the-release-artifacts", 1);
    let b = job_name(&format!("{prefix}-0002"), "build-the-release-artifacts", 1);
    assert!(a.len() <= 63 && b.len() <= 63 && a != b, "{a} {b}");
    assert!(is_dns_label(&a), "{a}");
}

#[test]
fn steps_whose_jobs_or_children_would_share_names_are_refused() {
    let child = json!({"name": "other"});
    let m = invalid(json!({"steps": [
        {"name": "Build", "workflow": child}, {"name": "build", "workflow": child}
    ]}));
    assert_eq!(
        m,
        "steps \"Build\" and \"build\" would give their Jobs or child Runs the same names"
    );
    let m = invalid(json!({"steps": [{"name": "run_tests", "workflow": child}],
        "finally": [{"name": "run-tests", "workflow": child}]}));
    assert!(m.contains("\"run_tests\" and \"run-tests\""), "{m}");
    let m = invalid(json!({"steps": [
        {"name": "deploy-2", "workflow": child},
        {"name": "deploy", "forEach": {"items": [1, 2, 3]}, "workflow": child}
    ]}));
    assert!(m.contains("\"deploy-2\" and \"deploy\""), "{m}");
    // Steps that start neither may be named so; a step that is not a forEach has no items, a
    // forEach step is named by its items alone, an index has no leading zero, and a Job and a
    // child Run never meet.
    let http = json!({"url": "http://x"});
    let job = json!({"template": {"spec": {"containers": [{"name": "c", "image": "busybox"}],
        "restartPolicy": "Never"}}});
    let ok: WorkflowSpec = serde_json::from_value(json!({"steps": [
        {"name": "Build", "http": http}, {"name": "build", "workflow": child},
        {"name": "build-2", "workflow": child},
        {"name": "fan", "forEach": {"items": [1]}, "workflow": child},
        {"name": "fan-1", "forEach": {"items": [1]}, "workflow": child},
        {"name": "fan-01", "workflow": child},
        {"name": "Fan", "job": job}
    ]}))
    .unwrap();
    validate::spec(&ok, validate::Capabilities { jobs: true }).unwrap();
}

fn invalid(spec: Value) -> String {
    let w: WorkflowSpec = serde_json::from_value(spec).unwrap();
    validate::spec(&w, validate::Capabilities { jobs: true })
        .unwrap_err()
        .message
}

#[test]
fn graphs_and_items_are_validated() {
    let http = json!({"url": "http://x"});
    let m = invalid(json!({"steps": [
        {"name": "a", "dependsOn": ["c"], "http": http},
        {"name": "b", "dependsOn": ["a"], "http": http},
        {"name": "c", "dependsOn": ["b"], "http": http},
        {"name": "d", "dependsOn": [], "http": http}
    ]}));
    assert_eq!(m, "steps: dependsOn forms a cycle through a, b, c");
    let m = invalid(json!({"steps": [{"name": "a", "dependsOn": ["a"], "http": http}]}));
    assert_eq!(m, "step a: dependsOn names itself");
    let m = invalid(json!({"steps": [{"name": "a", "http": http}],
        "finally": [{"name": "f", "dependsOn": ["a"], "http": http}]}));
    assert_eq!(m, "step f: dependsOn \"a\" is not a step of finally");
    let m = invalid(json!({"steps": [{"name": "a", "http": http},
        {"name": "b", "dependsOn": ["a", "a"], "http": http}]}));
    assert_eq!(m, "step b: dependsOn names \"a\" twice");
    let m = invalid(
        json!({"steps": [{"name": "a", "forEach": {"items": "x {{ args.l }}"}, "http": http}]}),
    );
    assert!(m.contains("must be a list or one"), "{m}");
    let m = invalid(
        json!({"steps": [{"name": "a", "forEach": {"items": [1], "parallelism": 0}, "http": http}]}),
    );
    assert!(m.contains("0 is not between 1 and 1000"), "{m}");
    let m = invalid(json!({"steps": [{"name": "a", "forEach": {"items": [1]},
        "input": {"requests": [{"name": "q", "message": "?"}]}}]}));
    assert!(m.contains("cannot run per item"), "{m}");
    let m = invalid(json!({"steps": [{"name": "a", "workflow": {"name": "Not_A_Name"}}]}));
    assert!(m.contains("is not a Workflow name"), "{m}");
    // A fine graph and fan-out are accepted.
    let w: WorkflowSpec = serde_json::from_value(json!({"steps": [
        {"name": "a", "dependsOn": [], "forEach": {"items": "{{ args.l }}", "parallelism": 5}, "http": http},
        {"name": "b", "dependsOn": [], "workflow": {"name": "other", "arguments": {"x": "{{ item }}"}}},
        {"name": "c", "dependsOn": ["a", "b"], "http": http}
    ]}))
    .unwrap();
    validate::spec(&w, validate::Capabilities { jobs: false }).unwrap();
}

#[test]
fn a_job_per_item_gets_the_item_in_its_environment() {
    let w = wf(
        json!({"steps": [{"name": "build", "forEach": {"items": ["arm", {"cpu": 2}]},
        "job": {"template": {"spec": {"containers": [{"name": "main", "image": "busybox"}]}}}}]}),
    );
    let mut run = new_run(json!({}));
    let next = settle(&mut run, &w, at(0));
    let env = |step: &str| match effect_of(&next, step).action {
        Action::Job { env, job_name, .. } => (job_name, env),
        other => panic!("{other:?}"),
    };
    let pair = |k: &str, v: &str| (k.to_owned(), v.to_owned());
    assert_eq!(
        env("build[0]"),
        (
            "wf-abc-build-0-1".to_owned(),
            vec![pair("RUNWAY_ITEM", "arm"), pair("RUNWAY_INDEX", "0")]
        )
    );
    assert_eq!(
        env("build[1]").1,
        vec![
            pair("RUNWAY_ITEM", r#"{"cpu":2}"#),
            pair("RUNWAY_INDEX", "1")
        ]
    );
}

mod graphs {
    //! Random graphs of steps, random outcomes, random order of completion: whatever happens,
    //! a step starts only after its dependencies succeeded, `failFast` decides what else runs,
    //! `finally` runs once after every main step ended, and the Run ends as its steps did.

    use proptest::prelude::*;

    use super::*;

    /// Per step: its `dependsOn` (`None`: the step before), whether its attempt succeeds.
    type Graph = Vec<(Option<Vec<usize>>, bool)>;

    fn graph() -> impl Strategy<Value = Graph> {
        (1usize..=7).prop_flat_map(|n| {
            (0..n)
                .map(|i| {
                    (
                        prop::option::of(prop::collection::vec(any::<bool>(), i)).prop_map(
                            |mask| {
                                mask.map(|m| {
                                    m.iter()
                                        .enumerate()
                                        .filter(|(_, on)| **on)
                                        .map(|(d, _)| d)
                                        .collect()
                                })
                            },
                        ),
                        prop::bool::weighted(0.8),
                    )
                })
                .collect::<Vec<_>>()
        })
    }

    fn deps(g: &Graph, i: usize) -> Vec<usize> {
        match &g[i].0 {
            Some(d) => d.clone(),
            None if i == 0 => vec![],
            None => vec![i - 1],
        }
    }

    fn spec(g: &Graph, fail_fast: bool) -> WorkflowSpec {
        let steps: Vec<Value> = g
            .iter()
            .enumerate()
            .map(|(i, (d, _))| {
                let mut s =
                    json!({"name": format!("s{i}"), "http": {"url": format!("http://svc/{i}")}});
                if let Some(d) = d {
                    s["dependsOn"] = json!(d.iter().map(|d| format!("s{d}")).collect::<Vec<_>>());
                }
                s
            })
            .collect();
        wf(json!({"execution": {"failFast": fail_fast}, "steps": steps,
                  "finally": [{"name": "tidy", "http": {"url": "http://svc/tidy"}}]}))
    }

    proptest! {
        #[test]
        fn any_graph_runs_as_its_dependencies_and_failures_say(
            g in graph(),
            fail_fast in any::<bool>(),
            picks in prop::collection::vec(any::<usize>(), 64),
        ) {
            let w = spec(&g, fail_fast);
            let mut run = new_run(json!({}));
            let mut first_failure: Option<i64> = None;
            for (t, pick) in (0i64..).zip(picks.iter().cycle().take(200)) {
                let next = settle(&mut run, &w, at(t));
                if status(&run).phase.is_terminal() {
                    break;
                }
                let all = effects(&next);
                let e = &all[pick % all.len()];
                if let Some(i) = e.step.strip_prefix('s').and_then(|n| n.parse::<usize>().ok()) {
                    for d in deps(&g, i) {
                        prop_assert_eq!(rec(&run, &format!("s{d}")).map(|r| r.phase), Some(StepPhase::Succeeded));
                    }
                    if fail_fast {
                        prop_assert!(first_failure.is_none(), "s{} runs after a failure", i);
                    }
                    let outcome = if g[i].1 { ok(json!(i)) } else { refused() };
                    if !g[i].1 && first_failure.is_none() {
                        first_failure = Some(t);
                    }
                    run.status = Some(record(&run, e, outcome, at(t)));
                } else {
                    // finally: every main step has ended.
                    prop_assert!(status(&run).steps.iter().filter(|r| !r.finally).all(|r| r.phase.is_terminal()));
                    run.status = Some(record(&run, e, ok(json!(null)), at(t)));
                }
            }
            let st = status(&run);
            prop_assert!(st.phase.is_terminal(), "{:?}", st.status_message);
            prop_assert_eq!(rec(&run, "tidy").map(|r| r.phase), Some(StepPhase::Succeeded));
            // Which steps could run: those whose dependencies all could and succeeded.
            let mut reachable = vec![false; g.len()];
            for i in 0..g.len() {
                reachable[i] = deps(&g, i).iter().all(|&d| reachable[d] && g[d].1);
            }
            let any_failed = (0..g.len()).any(|i| reachable[i] && !g[i].1);
            for (i, &could) in reachable.iter().enumerate() {
                let phase = rec(&run, &format!("s{i}")).map(|r| r.phase);
                if !could {
                    prop_assert_eq!(phase, None, "s{} waits on a failure", i);
                } else if !fail_fast {
                    let want = if g[i].1 { StepPhase::Succeeded } else { StepPhase::Failed };
                    prop_assert_eq!(phase, Some(want), "s{}", i);
                } else {
                    prop_assert!(phase.is_none() || phase.is_some_and(|p| p.is_terminal()));
                }
            }
            let want = if any_failed && (first_failure.is_some() || !fail_fast) { RunPhase::Failed } else { RunPhase::Succeeded };
            prop_assert_eq!(st.phase, want);
        }
    }
}

#[test]
fn one_decision_starts_every_item_it_may_and_an_item_failing_as_it_starts_ends_the_batch() {
    let w = wf(json!({
        "steps": [{"name": "wait",
                   "forEach": {"items": "{{ args.waits }}", "parallelism": 3},
                   "delay": {"duration": "{{ item }}"}}]
    }));
    let mut run = new_run(json!({"waits": ["5s", "10s", "20s", "30s"]}));
    let d = decide(&run, Some(&w), at(0));
    run.status = d.status;
    let started: Vec<_> = status(&run)
        .steps
        .iter()
        .map(|r| (r.name.as_str(), r.wake_at.clone()))
        .collect();
    assert_eq!(
        started,
        [
            ("wait", None),
            ("wait[0]", Some(at(5).to_string())),
            ("wait[1]", Some(at(10).to_string())),
            ("wait[2]", Some(at(20).to_string())),
        ],
        "the parallelism, in one decision, not one more"
    );

    let mut run = new_run(json!({"waits": ["5s", "soon", "20s"]}));
    settle(&mut run, &w, at(0));
    assert_eq!(rec(&run, "wait[1]").unwrap().phase, StepPhase::Failed);
    assert!(
        rec(&run, "wait[2]").is_none(),
        "nothing starts after the item that failed as it started"
    );
    assert_eq!(status(&run).phase, RunPhase::Failed);
}

#[test]
fn recording_and_deciding_together_gives_what_recording_then_deciding_gives() {
    let w = regions();
    let mut run = new_run(json!({"regions": ["eu", "us"]}));
    let next = settle(&mut run, &w, at(0));
    let done: Vec<(Effect, Outcome)> = effects(&next)
        .into_iter()
        .map(|e| {
            let out = ok(json!(e.step.clone()));
            (e, out)
        })
        .collect();
    let Recorded {
        status: together,
        events,
        next,
    } = record_and_decide(&run, &done, at(1));

    let mut apart = run.clone();
    apart.status = Some(record_all(&apart, &done, at(1)));
    let recorded = recorded_events(run.status.as_ref(), status(&apart));
    let decided = decide(&apart, None, at(1));
    assert_eq!(together, decided.status);
    assert_eq!(events, [recorded, decided.events].concat());
    // What follows the write is decided with it: the next step's effect.
    assert_eq!(next, Some(decided.next));
    let together = together.expect("the outcomes changed the status");
    // The items' outputs are collected and the next step has started, in one status.
    assert_eq!(
        together
            .steps
            .iter()
            .find(|r| r.name == "deploy")
            .unwrap()
            .output,
        Some(json!(["deploy[0]", "deploy[1]"]))
    );
    assert!(together.steps.iter().any(|r| r.name == "report"));
}

#[test]
fn recording_outcomes_that_change_nothing_asks_for_no_write() {
    let w = regions();
    let mut run = new_run(json!({"regions": ["eu", "us"]}));
    let next = settle(&mut run, &w, at(0));
    // A report of an attempt that is not the one running: stale, recorded as nothing.
    let mut e = effect_of(&next, "deploy[0]");
    e.attempt = 9;
    let stale = record_and_decide(&run, &[(e, ok(json!("eu")))], at(1));
    assert_eq!(stale.status, None);
    assert!(stale.events.is_empty(), "{:?}", stale.events);
    // What follows is what deciding on the Run as it is gives: both items still run.
    assert_eq!(stale.next, Some(decide(&run, None, at(1)).next));
}

#[test]
fn a_run_failed_for_its_size_with_items_under_way_stays_failed_whatever_they_report() {
    let items: Vec<u32> = (0..40).collect();
    let w = wf(json!({"steps": [{"name": "fan",
        "forEach": {"items": items, "parallelism": 10}, "http": {"url": "http://svc/"}}]}));
    let mut run = new_run(json!({}));
    let mut next = settle(&mut run, &w, at(0));
    let big = "x".repeat(60 * 1024);
    let first = effects(&next)[0].clone();
    let mut i = 0;
    while status(&run).phase != RunPhase::Failed {
        let done = effects(&next)[0].clone();
        let recorded = record_and_decide(&run, &[(done, ok(json!(big)))], at(i));
        run.status = recorded.status;
        next = recorded.next.expect("decided on");
        i += 1;
        assert!(i < 40, "the budget ends the Run before its items do");
    }
    let st = status(&run);
    let unfinished: Vec<_> = st.steps.iter().filter(|r| !r.phase.is_terminal()).collect();
    assert!(unfinished.is_empty(), "{unfinished:?}");
    let ended = st
        .steps
        .iter()
        .find(|r| r.message.as_deref() == Some("ended with the run (internal error)"))
        .expect("items that were running end failed with the Run");
    // An item still under way when the Run failed reports, late, that it needs input.
    let mut late = first.clone();
    late.step = ended.name.clone();
    late.attempt = ended.attempt;
    let asked = Outcome::NeedsInput {
        requests: [("q".to_owned(), json!({"method": "elicitation/create"}))].into(),
        request_state: None,
    };
    let before = run.status.clone();
    assert_eq!(record(&run, &late, asked, at(30)), before.unwrap());
    let recorded = record_and_decide(&run, &[(late, ok(json!("late")))], at(31));
    assert_eq!(recorded.status, None, "a finished Run records nothing");
}

#[test]
fn outcomes_recorded_and_decided_past_the_status_budget_fail_the_run_without_outputs() {
    let steps: Vec<Value> = (0..20)
        .map(|i| json!({"name": format!("s{i}"), "http": {"url": "http://svc/"}}))
        .collect();
    let w = wf(json!({ "steps": steps }));
    let mut run = new_run(json!({}));
    let mut next = settle(&mut run, &w, at(0));
    // Each output just under the cap of one output; twenty are more than a status may keep.
    let big = "x".repeat(60 * 1024);
    let mut last = 0;
    for i in 1..=20 {
        let Next::Execute(e) = next else {
            break;
        };
        let recorded = record_and_decide(&run, &[(*e, ok(json!(big)))], at(i));
        run.status = Some(recorded.status.expect("every outcome changes the status"));
        next = recorded.next.expect("a started Run is decided on");
        last = i;
    }
    assert!(last < 20, "the budget ends the Run before its last step");
    let st = status(&run);
    assert_eq!(st.phase, RunPhase::Failed);
    let error = st.error.as_ref().expect("an error");
    assert!(error.message.contains("status would be"), "{error:?}");
    assert!(st.steps.iter().all(|r| r.output.is_none()));
    assert!(budget::encoded_len(st) <= budget::MAX_STATUS_BYTES);
    // Failed for its size, the Run is decided on again at once (then kept as finished).
    assert_eq!(next, Next::WaitUntil(Some(at(last))));
}
