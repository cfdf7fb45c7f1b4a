//! Questions that need several approvers.

use super::*;

fn two_of_ops() -> WorkflowSpec {
    wf(json!({
        "steps": [{"name": "ask", "input": {"requests": [
            {"name": "ok", "message": "Release?", "approvers": {"groups": ["ops"]},
             "distinctFromRequester": true, "approvals": 2}
        ]}}],
        "result": {"content": [{"type": "text", "text": "{{ inputs.ok.window }}"}]}
    }))
}

fn approve(run: &mut Run, key: &str, who: &str, groups: &[&str], at: i64, content: Value) {
    run.spec.input_responses.insert(
        key.into(),
        InputResponse {
            action: InputAction::Accept,
            content: Some(content),
            answered_by: Some(who.into()),
            answered_by_groups: groups.iter().map(|g| g.to_string()).collect(),
            answered_at: Some(super::at(at).to_string()),
        },
    );
}

#[test]
fn two_different_approvers_take_the_question_and_the_first_answer_is_its_content() {
    let w = two_of_ops();
    let mut run = new_run(json!({}));
    settle(&mut run, &w, at(0));
    let open = &status(&run).input_requests["ask.ok"];
    assert_eq!(open.approvals, Some(2));
    approve(
        &mut run,
        "ask.ok",
        "bob",
        &["ops"],
        1,
        json!({"window": "tonight"}),
    );
    let d = decide(&run, Some(&w), at(1));
    assert!(
        d.events
            .iter()
            .any(|e| e.message.contains("1 of 2 approvals")),
        "{:?}",
        d.events
    );
    run.status = d.status;
    assert_eq!(status(&run).phase, RunPhase::Waiting);
    assert_eq!(status(&run).input_requests["ask.ok"].approved_by, ["bob"]);
    // The same approver twice, the requester, and someone outside ops count for nothing.
    approve(&mut run, "ask.ok/bob", "bob", &["ops"], 2, json!({}));
    approve(&mut run, "ask.ok/alice", "alice", &["ops"], 3, json!({}));
    approve(
        &mut run,
        "ask.ok/mallory",
        "mallory",
        &["dev"],
        4,
        json!({}),
    );
    settle(&mut run, &w, at(4));
    let st = status(&run);
    assert_eq!(st.phase, RunPhase::Waiting);
    assert_eq!(st.notes.len(), 2, "{:?}", st.notes);
    approve(
        &mut run,
        "ask.ok/carol",
        "carol",
        &["ops"],
        5,
        json!({"window": "now"}),
    );
    let d = decide(&run, Some(&w), at(5));
    assert!(
        d.events
            .iter()
            .any(|e| e.message.contains("approved by bob, carol (2 of 2)")),
        "{:?}",
        d.events
    );
    run.status = d.status;
    settle(&mut run, &w, at(5));
    let st = status(&run);
    assert_eq!(st.phase, RunPhase::Succeeded);
    assert_eq!(
        st.result.as_ref().unwrap().to_value()["content"][0]["text"],
        "tonight"
    );
}

#[test]
fn one_eligible_decline_declines_a_question_that_needs_several() {
    let w = two_of_ops();
    let mut run = new_run(json!({}));
    settle(&mut run, &w, at(0));
    approve(&mut run, "ask.ok", "bob", &["ops"], 1, json!({}));
    run.spec.input_responses.insert(
        "ask.ok/carol".into(),
        InputResponse {
            action: InputAction::Decline,
            content: None,
            answered_by: Some("carol".into()),
            answered_by_groups: vec!["ops".into()],
            answered_at: Some(at(2).to_string()),
        },
    );
    settle(&mut run, &w, at(2));
    assert_eq!(status(&run).phase, RunPhase::Failed);
}

#[test]
fn several_approvals_need_approvers_and_a_form() {
    let bad = |req: Value| {
        let w = wf(json!({"steps": [{"name": "ask", "input": {"requests": [req]}}]}));
        validate::spec(&w, validate::Capabilities { jobs: false })
            .unwrap_err()
            .to_string()
    };
    assert!(bad(json!({"name": "ok", "message": "?", "approvals": 2})).contains("needs approvers"));
    assert!(
        bad(
            json!({"name": "ok", "message": "?", "approvals": 11, "approvers": {"groups": ["ops"]}})
        )
        .contains("1 to 10")
    );
    assert!(
        bad(
            json!({"name": "ok", "message": "?", "approvals": 2, "approvers": {"users": ["a"]},
                   "url": "https://x.example/sign"})
        )
        .contains("url mode")
    );
}
