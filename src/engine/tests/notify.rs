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

fn body(next: &Next) -> (Value, String) {
    let Next::Execute(e) = next else {
        panic!("expected a notice, got {next:?}")
    };
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
    let Next::Execute(e) = &first else {
        unreachable!()
    };
    let Action::Notify { request, .. } = &e.action else {
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
    report(&mut run, &first, Outcome::Succeeded(json!({})), at(1));
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
    report(&mut run, &reminder, server_error("HTTP 500"), at(3301));
    let said = &status(&run).input_requests["ask.ok"];
    assert_eq!(said.reminded.as_deref(), Some("failed: HTTP 500"));
    // Neither is owed again: the Run waits for its answers until the timeout.
    assert_eq!(
        settle(&mut run, &w, at(3302)),
        Next::WaitUntil(Some(at(3600)))
    );
}
