//! Telling approvers: a Workflow's webhook gets a Slack-compatible message when a question for
//! people opens and a reminder before its timeout, once each, across a restart; a webhook that
//! is down is noted and holds nothing up.

use crate::support;

use runway::api::RunPhase;
use serde_json::json;
use support::mcp::Mcp;
use support::sink::Sink;

fn gated(url: &str) -> String {
    format!(
        r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: {{ name: gated, namespace: NS }}
spec:
  tool:
    description: Asks ops.
    inputSchema: {{ type: object, properties: {{ service: {{ type: string }} }} }}
  notify:
    url: "{url}"
    headers: [ {{ name: Authorization, value: "Bearer hook-token" }} ]
    consoleUrl: https://runway.example.com/ui/
    remindBefore: 2s
  steps:
    - name: ask
      input:
        timeout: 3s
        requests:
          - {{ name: ok, message: "Release {{{{ args.service }}}}?", approvers: {{ groups: [ops] }} }}
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvers_are_told_once_and_reminded_once_across_a_restart() {
    let sink = Sink::start().await;
    let mcp = Mcp::start(&[("wf.yaml", &gated(&sink.url))]).await;
    let alice = mcp.client("alice-token");
    let r = alice.call("gated", json!({"service": "api"})).await;
    let id = r.result()["taskId"].as_str().unwrap().to_owned();
    let first = sink.await_bodies(1).await.remove(0);
    let text = first["text"].as_str().unwrap();
    assert_eq!(
        text.split(" (answer by ").next().unwrap(),
        format!("Question: alice's run {id} (gated) asks group ops: Release api?")
    );
    assert!(
        text.ends_with(&format!(
            " https://runway.example.com/ui/#/ns/team-a/run/{id}"
        )),
        "{text}"
    );
    assert_eq!(first["runway"]["kind"], "asked");
    assert_eq!(first["runway"]["key"], "ask.ok");
    assert_eq!(first["runway"]["approvers"]["groups"], json!(["ops"]));
    assert_eq!(sink.authorization.lock().unwrap()[0], "Bearer hook-token");
    let told = mcp
        .wait(&id, "told", |r| {
            r.status
                .as_ref()
                .and_then(|s| s.input_requests.get("ask.ok"))
                .is_some_and(|q| q.notified.is_some())
        })
        .await;
    let uid = told.metadata.uid.clone().unwrap();

    // A restart tells nobody again; the reminder still comes before the timeout.
    let dir = mcp.stop().await;
    let mcp = Mcp::start_in(dir).await;
    let bodies = sink.await_bodies(2).await;
    assert_eq!(bodies[1]["runway"]["kind"], "reminder");
    assert!(
        bodies[1]["text"]
            .as_str()
            .unwrap()
            .starts_with("Reminder: ")
    );
    let done = mcp
        .wait(&id, "timed out", |r| r.phase().is_terminal())
        .await;
    assert_eq!(done.phase(), RunPhase::Failed, "nobody answered");
    let deliveries = sink.deliveries();
    assert_eq!(
        deliveries,
        [
            (format!("{uid}/notify/ask.ok/asked"), 1),
            (format!("{uid}/notify/ask.ok/reminder"), 1)
        ]
        .into_iter()
        .collect()
    );
    // Nothing of an answer or an argument but the question itself ever left.
    assert!(
        bodies
            .iter()
            .all(|b| b["runway"].get("arguments").is_none())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_that_is_down_is_noted_and_holds_nothing_up() {
    let mcp = Mcp::start(&[("wf.yaml", &gated("http://127.0.0.1:9/hook"))]).await;
    let alice = mcp.client("alice-token");
    let bob = mcp.client("bob-token");
    let r = alice.call("gated", json!({"service": "api"})).await;
    let id = r.result()["taskId"].as_str().unwrap().to_owned();
    let run = mcp
        .wait(&id, "not told", |r| {
            r.status
                .as_ref()
                .and_then(|s| s.input_requests.get("ask.ok"))
                .and_then(|q| q.notified.as_deref())
                .is_some_and(|n| n.starts_with("failed: "))
        })
        .await;
    assert_eq!(run.phase(), RunPhase::Waiting);
    // The question is answered all the same.
    bob.update(&id, json!({"ask.ok": {"action": "accept", "content": {}}}))
        .await
        .assert_complete();
    let done = mcp.wait(&id, "answered", |r| r.phase().is_terminal()).await;
    assert_eq!(done.phase(), RunPhase::Succeeded);
    let view = alice.call("runway_get_run", json!({"taskId": id})).await;
    assert!(view.event_reasons().contains(&"NotifyFailed".to_owned()));
}
