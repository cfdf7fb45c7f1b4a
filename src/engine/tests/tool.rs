//! `tool` steps: upstream tasks, their input, retries and cleanup.

use super::*;

fn tool_wf() -> WorkflowSpec {
    wf(json!({
        "steps": [{"name": "up", "tool": {"server": {"url": "http://b/mcp"}, "name": "t", "arguments": {"x": "{{ args.x }}"}}}],
        "finally": [{"name": "cleanup", "delay": {"duration": "0s"}}]
    }))
}

/// The upstream answered the call with task `id`.
fn task_started(id: &str) -> Outcome {
    Outcome::Checkpoint {
        upstream_task_id: Some(id.into()),
        job_name: None,
    }
}

/// The upstream asks a form question under `key`.
fn asks(key: &str, message: &str, request_state: Option<&str>) -> Outcome {
    let req = json!({"method": "elicitation/create",
        "params": {"message": message, "requestedSchema": {"type": "object"}}});
    Outcome::NeedsInput {
        requests: [(key.to_string(), req)].into(),
        request_state: request_state.map(str::to_owned),
    }
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
    report(&mut run, &next, task_started("up-1"), at(1));
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
    report(&mut run, &next, task_started("up-1"), at(0));
    let next = settle(&mut run, &w, at(0));
    report(&mut run, &next, asks("approve", "ok?", None), at(1));
    let st = status(&run);
    assert_eq!(st.phase, RunPhase::Waiting);
    assert_eq!(st.input_requests["up.approve"].params["message"], "ok?");
    // Waiting for the answer, until the Run's deadline at the latest.
    assert_eq!(
        settle(&mut run, &w, at(2)),
        Next::WaitUntil(Some(at(0) + duration::DEFAULT_RUN_TIMEOUT))
    );
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

#[test]
fn the_wait_for_people_does_not_count_against_a_tool_steps_timeout() {
    let w = wf(json!({"steps": [{"name": "up", "timeout": "10s",
        "tool": {"server": {"url": "http://b/mcp"}, "name": "t"}}]}));
    let mut run = new_run(json!({}));
    let next = settle(&mut run, &w, at(0));
    let Next::Execute(first) = &next else {
        panic!("{next:?}")
    };
    assert_eq!(first.deadline, Some(at(10)));
    // Asked 4 s into the attempt, answered 100 s later.
    report(&mut run, &next, asks("approve", "ok?", Some("s1")), at(4));
    answer(
        &mut run,
        "up.approve",
        InputAction::Accept,
        json!({}),
        "bob",
        &[],
    );
    let Next::Execute(resumed) = settle(&mut run, &w, at(104)) else {
        panic!()
    };
    assert_eq!(resumed.attempt, 1);
    assert_eq!(resumed.deadline, Some(at(110)), "6 s of the 10 are left");
    assert_eq!(status(&run).steps[0].attempt_waited_ms, Some(100_000));
}

#[test]
fn an_upstream_question_in_a_finally_step_fails_it_and_cancels_the_task() {
    let w = wf(
        json!({"steps": [{"name": "work", "delay": {"duration": "0s"}}],
        "finally": [{"name": "tidy",
            "tool": {"server": {"url": "http://b/mcp"}, "name": "t"}}]}),
    );
    let mut run = new_run(json!({}));
    let mut next = settle(&mut run, &w, at(0));
    while !matches!(&next, Next::Execute(e) if e.step == "tidy") {
        next = settle(&mut run, &w, at(1));
    }
    report(&mut run, &next, task_started("up-9"), at(1));
    let next = settle(&mut run, &w, at(1));
    report(&mut run, &next, asks("sure", "sure?", None), at(2));
    let st = status(&run);
    assert!(st.input_requests.is_empty(), "no question is opened");
    assert_eq!(st.steps[1].phase, StepPhase::Failed);
    assert!(
        st.steps[1]
            .message
            .as_deref()
            .unwrap()
            .contains("finally step, which runs unattended"),
        "{:?}",
        st.steps[1].message
    );
    cleanup_cancels_upstream(&mut run, &w, 2, "up-9");
    settle(&mut run, &w, at(4));
    assert_eq!(status(&run).phase, RunPhase::Failed);
}

/// The cleanup `next` performs (the test fails when it is anything else).
fn cleanup_of(next: &Next) -> &Cleanup {
    match next {
        Next::Execute(e) => match &e.action {
            Action::Cleanup(c) => c,
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    }
}

/// The next action is the cleanup that cancels `upstream`; report it done at `t + 1`.
fn cleanup_cancels_upstream(run: &mut Run, w: &WorkflowSpec, t: i64, upstream: &str) {
    let next = settle(run, w, at(t));
    let c = cleanup_of(&next);
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
    report(&mut run, &next, task_started("up-1"), at(0));
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
    report(&mut run, &next, task_started("up-1"), at(0));
    run.spec.cancel = Some(CancelRequest {
        reason: None,
        requested_by: None,
        requested_at: None,
    });
    let next = settle(&mut run, &w, at(1));
    let c = cleanup_of(&next);
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
fn an_upstream_code_the_protocol_keeps_ends_the_run_as_an_internal_error() {
    // `-32601` passed on would tell this Run's caller "tools/call is not implemented" (HTTP
    // 404 on a blocking call); the upstream's own code stays in the error's data.
    for (code, ends_as) in [
        (-32601, -32603),
        (-32021, -32603),
        (-32602, -32602),
        (42, 42),
    ] {
        let w = upstream_wf(json!({}));
        let mut run = new_run(json!({"x": 1}));
        let next = settle(&mut run, &w, at(0));
        let upstream = RunError {
            code,
            message: "no".into(),
            data: None,
        };
        report(
            &mut run,
            &next,
            upstream_failed(ErrorClass::ClientError, Some(upstream), true),
            at(1),
        );
        settle(&mut run, &w, at(1));
        let err = status(&run).error.clone().unwrap();
        assert_eq!(err.code, ends_as, "{code}");
        assert_eq!(err.data.unwrap()["upstream"]["code"], code);
    }
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
    assert_eq!(st.result.as_ref().unwrap().to_value()["isError"], true);
}

#[test]
fn a_retry_after_an_ended_upstream_task_calls_again_and_after_a_lost_connection_resumes() {
    let w = upstream_wf(json!({"limit": 3, "retryOn": ["connection", "toolError"]}));
    let mut run = new_run(json!({"x": 1}));
    let next = settle(&mut run, &w, at(0));
    report(&mut run, &next, task_started("up-1"), at(0));
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
    report(&mut run, &next, task_started("up-1"), at(0));
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
fn workflows_may_not_offer_a_tool_under_runways_own_prefix() {
    use super::validate::{Capabilities, spec};
    let caps = Capabilities { jobs: false };
    let named = |name: &str| {
        spec(
            &wf(
                json!({"tool": {"name": name}, "steps": [{"name": "s", "delay": {"duration": "1s"}}]}),
            ),
            caps,
        )
    };
    assert!(named("runway-list_runs").is_ok());
    assert!(named("list_runs").is_ok());
    let err = named("runway_list_runs").unwrap_err();
    assert_eq!(err.reason, reasons::INVALID_SPEC);
    assert!(err.message.contains("Runway's own tools"), "{err}");
}

#[test]
fn an_upstream_question_a_run_cannot_pass_on_fails_the_step_and_cancels_the_task() {
    let w = tool_wf();
    for (what, req) in [
        (
            "secret",
            json!({"method": "elicitation/create", "params": {"message": "PIN?",
                "requestedSchema": {"type": "object", "properties": {"pin": {"type": "string"}}}}}),
        ),
        ("roots", json!({"method": "roots/list", "params": {}})),
    ] {
        let mut run = new_run(json!({"x": 1}));
        let next = settle(&mut run, &w, at(0));
        report(&mut run, &next, task_started("up-1"), at(0));
        let next = settle(&mut run, &w, at(0));
        report(
            &mut run,
            &next,
            Outcome::NeedsInput {
                requests: [("ask".to_string(), req)].into(),
                request_state: None,
            },
            at(1),
        );
        let st = status(&run);
        assert!(
            st.input_requests.is_empty(),
            "{what}: never put to the caller"
        );
        assert_eq!(st.steps[0].phase, StepPhase::Failed, "{what}");
        let message = st.steps[0].message.as_deref().unwrap();
        assert!(
            message.contains("the upstream server asked"),
            "{what}: {message}"
        );
        assert_eq!(
            st.cleanups[0].cancel_upstream_task.as_deref(),
            Some("up-1"),
            "{what}: the upstream task is not left waiting"
        );
    }
}

#[test]
fn a_run_failed_internally_still_cancels_its_upstream_task_and_deletes_its_job() {
    let w = wf(json!({"steps": [
        {"name": "up", "dependsOn": [], "tool": {"server": {"url": "http://b/mcp"}, "name": "t"}},
        {"name": "build", "dependsOn": [], "job": {"template": {"spec": {}}}},
    ], "finally": [{"name": "tidy", "delay": {"duration": "0s"}}]}));
    let mut run = new_run(json!({}));
    let Next::Branches { effects, .. } = settle(&mut run, &w, at(0)) else {
        panic!("both steps start at once")
    };
    let (tool, job) = (effects[0].clone(), effects[1].clone());
    report(
        &mut run,
        &Next::Execute(Box::new(tool.clone())),
        task_started("up-7"),
        at(1),
    );
    report(
        &mut run,
        &Next::Execute(Box::new(job)),
        Outcome::Checkpoint {
            upstream_task_id: None,
            job_name: Some("wf-abc-build-1".into()),
        },
        at(1),
    );
    // The process cannot go on with the Run (a panic, a status refused).
    run.status = Some(fail_internal(&run, "boom", at(2)));
    let st = status(&run);
    assert_eq!(st.phase, RunPhase::Failed);
    assert_eq!(st.cleanups.len(), 2, "{:?}", st.cleanups);
    // Finished, it undoes what its steps left running, and runs no `finally`.
    let next = settle(&mut run, &w, at(3));
    let c = cleanup_of(&next);
    assert_eq!(c.cancel_upstream_task.as_deref(), Some("up-7"));
    report(
        &mut run,
        &next,
        Outcome::Succeeded(json!("cancelled")),
        at(4),
    );
    let next = settle(&mut run, &w, at(4));
    let c = cleanup_of(&next);
    assert_eq!(c.delete_job.as_deref(), Some("wf-abc-build-1"));
    // What else the steps report is not recorded; the cleanup's end is.
    let before = run.status.clone().unwrap();
    let late = Outcome::Succeeded(json!("late"));
    assert_eq!(record(&run, &tool, late, at(5)), before);
    report(&mut run, &next, Outcome::Succeeded(Value::Null), at(5));
    assert!(matches!(settle(&mut run, &w, at(6)), Next::Finished { .. }));
    let st = status(&run);
    assert_eq!(st.phase, RunPhase::Failed);
    assert!(st.cleanups.is_empty());
    assert!(st.steps.iter().all(|r| r.name != "tidy"));
    // A panic while cleaning up gives the rest up.
    let mut again = run.clone();
    again.status.as_mut().unwrap().cleanups = before.cleanups.clone();
    let given_up = give_up_cleanups(&again).expect("a finished Run with cleanups");
    assert!(given_up.cleanups.is_empty());
    assert_eq!(give_up_cleanups(&run), None);
}

#[test]
fn a_job_whose_watch_was_lost_is_deleted_before_the_retry_starts_another() {
    let w = wf(
        json!({"steps": [{"name": "build", "retry": {"limit": 1, "backoff": "1s"},
        "job": {"template": {"spec": {}}}}]}),
    );
    let mut run = new_run(json!({}));
    let first = settle(&mut run, &w, at(0));
    report(
        &mut run,
        &first,
        Outcome::Checkpoint {
            upstream_task_id: None,
            job_name: Some("wf-abc-build-1".into()),
        },
        at(0),
    );
    let next = settle(&mut run, &w, at(1));
    report(
        &mut run,
        &next,
        Outcome::Failed {
            detail: None,
            class: ErrorClass::Connection,
            message: "watch ended".into(),
        },
        at(2),
    );
    let Next::Execute(e) = settle(&mut run, &w, at(2)) else {
        panic!("the Job is cleaned up first")
    };
    let Action::Cleanup(c) = &e.action else {
        panic!("{:?}", e.action)
    };
    assert_eq!(c.delete_job.as_deref(), Some("wf-abc-build-1"));
    report(
        &mut run,
        &Next::Execute(e),
        Outcome::Succeeded(Value::Null),
        at(2),
    );
    let mut next = settle(&mut run, &w, at(2));
    for t in 3..10 {
        if matches!(next, Next::Execute(_)) {
            break;
        }
        next = settle(&mut run, &w, at(t));
    }
    let Next::Execute(e) = next else {
        panic!("{next:?}")
    };
    let Action::Job { job_name, .. } = &e.action else {
        panic!("{:?}", e.action)
    };
    assert_eq!(job_name, "wf-abc-build-2");
}

#[test]
fn a_job_that_could_no_longer_be_read_is_deleted_when_its_step_fails() {
    let w = wf(json!({"steps": [{"name": "build", "job": {"template": {"spec": {}}}}]}));
    let mut run = new_run(json!({}));
    let first = settle(&mut run, &w, at(0));
    let refused = Outcome::Failed {
        detail: None,
        class: ErrorClass::ClientError,
        message: "reading job wf-abc-build-1: 403 Forbidden".into(),
    };
    report(&mut run, &first, refused, at(1));
    let Next::Execute(e) = settle(&mut run, &w, at(1)) else {
        panic!("the Job is cleaned up")
    };
    let Action::Cleanup(c) = &e.action else {
        panic!("{:?}", e.action)
    };
    assert_eq!(c.delete_job.as_deref(), Some("wf-abc-build-1"));
    report(
        &mut run,
        &Next::Execute(e),
        Outcome::Succeeded(Value::Null),
        at(2),
    );
    assert!(matches!(settle(&mut run, &w, at(2)), Next::Finished { .. }));
    assert_eq!(status(&run).phase, RunPhase::Failed);
}

#[test]
fn a_job_reported_made_after_its_step_was_cancelled_is_deleted_again() {
    let w = wf(json!({"steps": [{"name": "build", "job": {"template": {"spec": {}}}}]}));
    let mut run = new_run(json!({}));
    let first = settle(&mut run, &w, at(0));
    run.spec.cancel = Some(CancelRequest {
        reason: None,
        requested_by: Some("alice".into()),
        requested_at: None,
    });
    // The cancel's cleanup finds no Job yet: it is being made.
    let Next::Execute(e) = settle(&mut run, &w, at(1)) else {
        panic!("the Job is cleaned up")
    };
    report(
        &mut run,
        &Next::Execute(e),
        Outcome::Succeeded(Value::Null),
        at(1),
    );
    assert!(status(&run).cleanups.is_empty());
    // Then the stopped attempt says it made its Job: it is deleted after all.
    let made = Outcome::Checkpoint {
        upstream_task_id: None,
        job_name: Some("wf-abc-build-1".into()),
    };
    report(&mut run, &first, made, at(2));
    let Next::Execute(e) = settle(&mut run, &w, at(2)) else {
        panic!("the Job made late is cleaned up")
    };
    let Action::Cleanup(c) = &e.action else {
        panic!("{:?}", e.action)
    };
    assert_eq!(c.delete_job.as_deref(), Some("wf-abc-build-1"));
}
