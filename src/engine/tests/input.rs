//! Input requests: asking, answering, re-asking, URL mode and timeouts.

use super::*;

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
    assert_eq!(
        st.result.as_ref().unwrap().to_value()["content"][0]["text"],
        "x-y"
    );
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
    assert_eq!(asked.params["elicitationId"], "default/wf-abc/sso.login");
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
        st.result.as_ref().unwrap().to_value()["content"][0]["text"]
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
    cont.steps[0].input.as_mut().unwrap().on_timeout = OnTimeout::Continue;
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
        st.result.as_ref().unwrap().to_value()["content"][0]["text"]
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

#[test]
fn a_bare_confirmation_is_asked_as_a_form_without_fields() {
    // `{type: object}` is no form to rmcp or the protocol's schema, which give every form its
    // `properties`: asked as written, clients would never be shown the question.
    let w = wf(json!({"steps": [{"name": "ask", "input": {"requests": [
        {"name": "go", "message": "Go?", "requestedSchema": {"type": "object"}}
    ]}}]}));
    let mut run = new_run(json!({}));
    settle(&mut run, &w, at(0));
    let st = status(&run);
    assert_eq!(
        st.input_requests["ask.go"].params["requestedSchema"],
        json!({"type": "object", "properties": {}})
    );
    let shown = serde_json::from_value::<rmcp::model::ElicitationSchema>(
        st.input_requests["ask.go"].params["requestedSchema"].clone(),
    );
    assert!(shown.is_ok(), "{shown:?}");
}
