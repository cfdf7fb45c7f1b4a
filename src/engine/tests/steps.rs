//! Starting, rendering, retrying and finishing steps; outputs and results.

use super::*;

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
    assert_eq!(
        st.result.as_ref().unwrap().to_value()["content"][0]["text"],
        "got 200"
    );
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
    let result = st.result.as_ref().unwrap().to_value();
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
fn a_bad_templated_retry_setting_fails_the_step_naming_the_field() {
    // Each retry setting that does not render to what it must be ends the Run the same way:
    // a protocol error naming the step and the field (none falls back to a default).
    for (retry, field) in [
        (json!({"limit": "{{ args.n }}"}), "retry.limit"),
        (
            json!({"limit": 3, "backoff": "{{ args.n }}"}),
            "retry.backoff",
        ),
        (
            json!({"limit": 3, "backoff": "{{ args.missing }}"}),
            "retry.backoff",
        ),
        (
            json!({"limit": 3, "maxBackoff": "soon"}),
            "retry.maxBackoff",
        ),
    ] {
        let w =
            wf(json!({"steps": [{"name": "call", "http": {"url": "http://x"}, "retry": retry}]}));
        let mut run = new_run(json!({"n": "many"}));
        let next = settle(&mut run, &w, at(0));
        report(
            &mut run,
            &next,
            Outcome::Failed {
                detail: None,
                class: ErrorClass::ServerError,
                message: "HTTP 503".into(),
            },
            at(0),
        );
        settle(&mut run, &w, at(0));
        let st = status(&run);
        assert_eq!(st.phase, RunPhase::Failed, "{field}");
        let error = st
            .error
            .as_ref()
            .unwrap_or_else(|| panic!("{field}: {st:?}"));
        assert!(
            error.message.contains("step call") && error.message.contains(field),
            "{field}: {}",
            error.message
        );
    }
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
    let before = run.status.clone();
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
    // The task's statusMessage names the step, never what the server answered.
    assert_eq!(st.status_message.as_deref(), Some("step call failed"));
    let result = st.result.as_ref().unwrap().to_value();
    let text = result["content"][0]["text"].as_str().unwrap();
    assert!(!text.contains("sk-live"), "{text}");
    assert!(!st.conditions[0].message.contains("sk-live"));
    // Nor does its Event (it reaches whoever may read Events, and the operator's log).
    let events = recorded_events(before.as_ref(), st);
    let failed = events
        .iter()
        .find(|e| e.reason == event_reasons::STEP_FAILED)
        .expect("a StepFailed event");
    assert_eq!(failed.message, "step call: HTTP 401");
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
    assert_eq!(
        st.result.as_ref().unwrap().to_value()["content"][0]["text"],
        "no luck"
    );
    assert_eq!(st.result.as_ref().unwrap().to_value()["isError"], true);
    assert!(st.error.is_none());

    let proto = wf(
        json!({"steps": [{"name": "f", "fail": {"error": {"code": -31050, "message": "bad"}}}]}),
    );
    let mut run = new_run(json!({}));
    settle(&mut run, &proto, at(0));
    let st = status(&run);
    assert_eq!(st.error.as_ref().unwrap().code, -31050);
    assert!(st.result.is_none());
}

#[test]
fn a_fail_step_may_not_claim_a_code_the_protocol_keeps() {
    let with_code = |code: i64| {
        let w: WorkflowSpec = serde_json::from_value(
            json!({"steps": [{"name": "f", "fail": {"error": {"code": code, "message": "x"}}}]}),
        )
        .unwrap();
        validate::spec(&w, validate::Capabilities { jobs: false })
    };
    for code in [
        -32768, -32700, -32601, -32600, -32099, -32022, -32020, -32003, -32000,
    ] {
        let e = with_code(code).unwrap_err();
        assert_eq!(e.reason, "InvalidSpec", "{code}");
        assert!(
            e.message
                .contains(&format!("fail.error.code: {code} is reserved")),
            "{}",
            e.message
        );
    }
    for code in [-32769, -32602, -32603, -31999, -1, 0, 1503] {
        assert!(with_code(code).is_ok(), "{code}");
    }
    // A Run of a Workflow validated before (its snapshot taken) ends as an internal error.
    let old =
        wf(json!({"steps": [{"name": "f", "fail": {"error": {"code": -32601, "message": "x"}}}]}));
    let mut run = new_run(json!({}));
    settle(&mut run, &old, at(0));
    let error = status(&run).error.clone().unwrap();
    assert_eq!(
        (error.code, error.data),
        (-32603, Some(json!({"code": -32601})))
    );
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
    assert_eq!(
        st.result.as_ref().unwrap().to_value()["structuredContent"]["n"],
        3
    );
}

#[test]
fn a_result_that_does_not_meet_the_tools_output_schema_fails_the_run_saying_why() {
    let schema = json!({"type": "object", "required": ["n"],
        "properties": {"n": {"type": "integer"}}});
    let finish = |result: Value, n: Value| {
        let w = wf(json!({
            "tool": {"outputSchema": schema},
            "steps": [{"name": "call", "http": {"url": "http://x"}}],
            "result": result,
        }));
        let mut run = new_run(json!({"n": n}));
        let next = settle(&mut run, &w, at(0));
        report(&mut run, &next, Outcome::Succeeded(json!("ok")), at(1));
        settle(&mut run, &w, at(1));
        status(&run).clone()
    };
    let ok = finish(
        json!({"structuredContent": {"n": "{{ args.n }}"}}),
        json!(3),
    );
    assert_eq!(ok.phase, RunPhase::Succeeded);
    let wrong = finish(
        json!({"structuredContent": {"n": "{{ args.n }}"}}),
        json!("three"),
    );
    assert_eq!(wrong.phase, RunPhase::Failed);
    let message = &wrong.error.as_ref().unwrap().message;
    assert!(
        message.contains("does not match tool.outputSchema at /n"),
        "{message}"
    );
    let none = finish(
        json!({"content": [{"type": "text", "text": "done"}]}),
        json!(3),
    );
    assert_eq!(none.phase, RunPhase::Failed);
    let message = &none.error.as_ref().unwrap().message;
    assert!(
        message.contains("result.structuredContent is not"),
        "{message}"
    );
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
