//! `sample` steps: asking the caller's model, taking its message, refusing what is not one.

use super::*;

fn sample_wf() -> WorkflowSpec {
    wf(json!({
        "steps": [
            {"name": "draft", "sample": {
                "prompt": "Summarize {{ args.topic }}",
                "systemPrompt": "Be brief.",
                "maxTokens": 50,
                "timeout": "10m"}},
            {"name": "post", "http": {"url": "http://x/{{ steps.draft.output.text }}"}}
        ]
    }))
}

fn message(text: &str) -> Value {
    json!({"role": "assistant", "content": {"type": "text", "text": text},
           "model": "m-1", "stopReason": "endTurn"})
}

#[test]
fn a_sample_step_asks_the_callers_model_and_its_message_is_the_output() {
    let w = sample_wf();
    let mut run = new_run(json!({"topic": "rust"}));
    assert_eq!(settle(&mut run, &w, at(0)), Next::WaitUntil(Some(at(600))));
    let st = status(&run);
    assert_eq!(st.phase, RunPhase::Waiting);
    let asked = &st.input_requests["draft.sample"];
    assert_eq!(asked.method, "sampling/createMessage");
    assert_eq!(
        asked.params,
        json!({"messages": [{"role": "user", "content": {"type": "text", "text": "Summarize rust"}}],
               "maxTokens": 50, "systemPrompt": "Be brief."})
    );
    assert_eq!(st.waiting_for.as_deref(), Some("draft.sample"));

    answer(
        &mut run,
        "draft.sample",
        InputAction::Accept,
        message("short"),
        "alice",
        &[],
    );
    let Next::Execute(e) = settle(&mut run, &w, at(1)) else {
        panic!("{:?}", status(&run))
    };
    let Action::Http(req) = &e.action else {
        panic!("{e:?}")
    };
    assert_eq!(req.url, "http://x/short");
    let st = status(&run);
    assert!(st.input_requests.is_empty());
    assert_eq!(st.steps[0].phase, StepPhase::Succeeded);
    assert_eq!(st.steps[0].output.as_ref().unwrap()["model"], "m-1");
    assert_eq!(
        st.steps[0].output.as_ref().unwrap()["stopReason"],
        "endTurn"
    );
}

#[test]
fn an_answer_that_is_no_model_message_is_noted_and_the_model_asked_again() {
    let w = sample_wf();
    let mut run = new_run(json!({"topic": "rust"}));
    settle(&mut run, &w, at(0));
    // Written with kubectl: an elicitation-style answer, not a CreateMessageResult.
    answer(
        &mut run,
        "draft.sample",
        InputAction::Accept,
        json!({"text": "hi"}),
        "alice",
        &[],
    );
    settle(&mut run, &w, at(1));
    let st = status(&run);
    assert_eq!(st.phase, RunPhase::Waiting);
    assert_eq!(
        st.input_requests.keys().collect::<Vec<_>>(),
        ["draft.sample.2"]
    );
    assert!(
        st.notes[0].message.contains("role \"assistant\""),
        "{:?}",
        st.notes
    );
    // The deadline of the first question still holds.
    assert_eq!(
        decide(&run, Some(&w), at(2)).next,
        Next::WaitUntil(Some(at(600)))
    );
    answer(
        &mut run,
        "draft.sample.2",
        InputAction::Accept,
        message("ok"),
        "alice",
        &[],
    );
    assert!(matches!(settle(&mut run, &w, at(3)), Next::Execute(_)));
}

#[test]
fn a_declined_or_unanswered_sample_fails_the_step() {
    let w = sample_wf();
    let mut run = new_run(json!({"topic": "rust"}));
    settle(&mut run, &w, at(0));
    answer(
        &mut run,
        "draft.sample",
        InputAction::Decline,
        json!({}),
        "alice",
        &[],
    );
    settle(&mut run, &w, at(1));
    let st = status(&run);
    assert_eq!(st.phase, RunPhase::Failed);
    assert!(st.input_requests.is_empty());
    assert!(
        st.steps[0]
            .message
            .as_deref()
            .unwrap()
            .contains("declined by alice")
    );

    let mut run = new_run(json!({"topic": "rust"}));
    settle(&mut run, &w, at(0));
    settle(&mut run, &w, at(600));
    let st = status(&run);
    assert_eq!(st.phase, RunPhase::Failed);
    assert_eq!(
        st.steps[0].message.as_deref(),
        Some("timed out waiting for the model")
    );
}

#[test]
fn cancelling_closes_the_models_question() {
    let w = sample_wf();
    let mut run = new_run(json!({"topic": "rust"}));
    settle(&mut run, &w, at(0));
    run.spec.cancel = Some(CancelRequest {
        reason: None,
        requested_by: Some("alice".into()),
        requested_at: None,
    });
    settle(&mut run, &w, at(1));
    let st = status(&run);
    assert_eq!(st.phase, RunPhase::Cancelled);
    assert!(st.input_requests.is_empty());
}

#[test]
fn sampling_answers_are_checked_for_the_shape_of_a_model_message() {
    assert_eq!(sampling_answer_error(Some(&message("x"))), None);
    let blocks = json!({"role": "assistant", "model": "m",
                        "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]});
    assert_eq!(sampling_answer_error(Some(&blocks)), None);
    for bad in [
        json!("text"),
        json!({"role": "user", "content": {"type": "text", "text": "x"}, "model": "m"}),
        json!({"role": "assistant", "content": {"type": "text", "text": "x"}}),
        json!({"role": "assistant", "content": {"text": "x"}, "model": "m"}),
        json!({"role": "assistant", "content": [], "model": "m"}),
    ] {
        assert!(sampling_answer_error(Some(&bad)).is_some(), "{bad}");
    }
}
