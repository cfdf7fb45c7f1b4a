//! Telling approvers through a Workflow's webhook: once when a question opens, once before its
//! timeout, read from status alone.

use super::*;

fn notified() -> WorkflowSpec {
    wf(json!({
        "notify": {"url": "https://hooks.example.com/x", "consoleUrl": "https://rw.example.com/ui/",
                   "remindBefore": "5m", "headers": [{"name": "X-Team", "value": "ops-{{ args.env }}"}]},
        "steps": [{"name": "ask", "input": {"timeout": "1h", "requests": [
            {"name": "ok", "message": "Ship {{ args.env }}?", "approvers": {"groups": ["ops"]}}
        ]}}]
    }))
}

/// The message to approvers among what `next` performs.
fn notice(next: &Next) -> &Effect {
    let found = match next {
        Next::Execute(e) => Some(&**e),
        Next::Branches { effects, .. } => effects
            .iter()
            .find(|e| matches!(e.action, Action::Notify { .. })),
        _ => None,
    };
    found.unwrap_or_else(|| panic!("expected a notice, got {next:?}"))
}

/// Record `outcome` of the notice `next` performs.
fn told(run: &mut Run, next: &Next, outcome: Outcome, now: Timestamp) {
    run.status = Some(record(run, notice(next), outcome, now));
}

fn body(next: &Next) -> (Value, String) {
    let e = notice(next);
    let Action::Notify {
        request: HttpRequest {
            body: Some(Body::Json(b)),
            ..
        },
        ..
    } = &e.action
    else {
        panic!("not a notice: {e:?}")
    };
    (b.clone(), e.idempotency_key.clone())
}

#[test]
fn a_question_is_told_once_then_reminded_once_before_its_timeout() {
    let w = notified();
    let mut run = new_run(json!({"env": "prod"}));
    let first = settle(&mut run, &w, at(0));
    // The message goes out beside the wait for the answers (the question's timeout).
    assert!(
        matches!(&first, Next::Branches { effects, wake: Some(t) } if effects.len() == 1 && *t == at(3600)),
        "{first:?}"
    );
    let (b, key) = body(&first);
    assert_eq!(key, "uid-1/notify/ask.ok/asked");
    assert_eq!(b["runway"]["kind"], "asked");
    assert_eq!(b["runway"]["message"], "Ship prod?");
    assert_eq!(
        b["runway"]["console"],
        "https://rw.example.com/ui/#/ns/default/run/wf-abc"
    );
    assert!(
        b["text"]
            .as_str()
            .unwrap()
            .contains("asks group ops: Ship prod?")
    );
    let Action::Notify { request, .. } = &notice(&first).action else {
        unreachable!()
    };
    assert_eq!(
        request.headers,
        [HeaderValue::Inline {
            name: "X-Team".into(),
            value: "ops-prod".into()
        }]
    );
    let before = run.status.clone();
    told(&mut run, &first, Outcome::Succeeded(json!({})), at(1));
    let events = recorded_events(before.as_ref(), status(&run));
    assert!(
        events
            .iter()
            .any(|e| e.reason == event_reasons::APPROVERS_NOTIFIED)
    );
    // Told: now it waits for answers, and wakes for the reminder five minutes before the hour.
    let next = settle(&mut run, &w, at(1));
    assert_eq!(next, Next::WaitUntil(Some(at(3300))));
    let reminder = settle(&mut run, &w, at(3300));
    let (b, key) = body(&reminder);
    assert_eq!(key, "uid-1/notify/ask.ok/reminder");
    assert_eq!(b["runway"]["kind"], "reminder");
    told(&mut run, &reminder, server_error("HTTP 500"), at(3301));
    let said = &status(&run).input_requests["ask.ok"];
    assert_eq!(said.reminded.as_deref(), Some("failed: HTTP 500"));
    // Neither is owed again: the Run waits for its answers until the timeout.
    assert_eq!(
        settle(&mut run, &w, at(3302)),
        Next::WaitUntil(Some(at(3600)))
    );
}

#[test]
fn a_message_to_approvers_holds_up_no_step_running_beside_the_question() {
    let w = wf(json!({
        "notify": {"url": "https://hooks.example.com/x"},
        "steps": [
            {"name": "ask", "dependsOn": [], "input": {"requests": [
                {"name": "ok", "message": "Ship?", "approvers": {"groups": ["ops"]}}
            ]}},
            {"name": "build", "dependsOn": [], "http": {"url": "http://ci/build"}}
        ]
    }));
    let mut run = new_run(json!({}));
    let next = settle(&mut run, &w, at(0));
    let Next::Branches { effects, .. } = &next else {
        panic!("{next:?}")
    };
    let kinds: Vec<&str> = effects
        .iter()
        .map(|e| match &e.action {
            Action::Notify { .. } => "notify",
            Action::Http(_) => "http",
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(kinds, ["notify", "http"]);
    // While the message is on its way (a slow webhook), the build's end is decided on.
    let build = effects.iter().find(|e| e.step == "build").unwrap();
    run.status = Some(record(&run, build, Outcome::Succeeded(json!({})), at(1)));
    settle(&mut run, &w, at(1));
    let build = status(&run).steps.iter().find(|r| r.name == "build");
    assert_eq!(build.unwrap().phase, StepPhase::Succeeded);
    // The message is still owed, once, under the same effect.
    assert_eq!(
        notice(&settle(&mut run, &w, at(2))).idempotency_key,
        notice(&next).idempotency_key
    );
}
