//! A Run's first decision taken before its create on the embedded store: one write for a Run
//! that finishes at once, the same Events and answers as a Run decided after its create, and
//! Runs whose start depends on other Runs left to the controller.

use crate::support;

use futures::StreamExt;
use runway::api::{Run, RunPhase};
use runway::store::{RunStore, WatchEvent};
use serde_json::json;
use support::mcp::{Client, Mcp};

const WORKFLOWS: &str = r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: instant, namespace: NS }
spec:
  tool: { description: Finishes at its first decision. }
  execution: { ttlAfterFinished: 1h }
  steps: [ { name: s, delay: { duration: 0s } } ]
  result: { content: [ { type: text, text: "done {{ run.uid }}" } ] }
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: limited, namespace: NS }
spec:
  tool: { description: One at a time. }
  execution: { concurrency: { limit: 1 } }
  steps: [ { name: s, delay: { duration: 0s } } ]
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: quick, namespace: NS }
spec:
  tool: { description: Finishes after a short delay. }
  steps: [ { name: s, delay: { duration: 10ms } } ]
"#;

/// The first version of Run `id` the store tells of after `since`.
async fn first_version(s: &Mcp, since: &str, id: &str) -> Run {
    let mut changes = s.store().watch(Some(since.to_owned()));
    while let Some(change) = changes.next().await {
        if let WatchEvent::Applied(r) = change.unwrap()
            && r.metadata.name.as_deref() == Some(id)
        {
            return (*r).clone();
        }
    }
    panic!("the watch ended before Run {id} was created");
}

/// Another Run taken through the controller to its end: every Run created before it has had
/// its reconcile queued (the watch tells creates in order).
async fn settle(s: &Mcp, c: &Client) {
    let id = c.call("quick", json!({})).await.task_id();
    s.wait(&id, "finished", |r| r.phase() == RunPhase::Succeeded)
        .await;
}

async fn event_reasons(c: &Client, id: &str) -> Vec<String> {
    c.call("runway_get_run", json!({ "taskId": id }))
        .await
        .event_reasons()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_finishes_at_once_is_created_finished_in_one_write() {
    let s = Mcp::start(&[("wf.yaml", WORKFLOWS)]).await;
    let c = s.client("alice-token");
    let since = s.store().resource_version().await.unwrap();
    let answer = c.call("instant", json!({})).await;
    let id = answer.task_id();
    assert_eq!(
        answer.result()["status"],
        "completed",
        "{:?}",
        answer.last()
    );

    let created = first_version(&s, &since, &id).await;
    assert_eq!(created.phase(), RunPhase::Succeeded, "{:?}", created.status);
    let status = created.status.as_ref().unwrap();
    assert!(status.started_at.is_some() && status.finished_at.is_some());
    // Decided from the identity the Run was stored with.
    let uid = created.metadata.uid.clone().unwrap();
    let done = c.get(&id).await;
    assert_eq!(
        done.result()["result"]["content"][0]["text"],
        format!("done {uid}")
    );

    // The controller takes it from there and has nothing to write; its Events are told once.
    settle(&s, &c).await;
    let now = s.store().get("team-a", &id).await.unwrap().unwrap();
    assert_eq!(now, created);
    assert_eq!(
        event_reasons(&c, &id).await,
        ["StepStarted", "StepSucceeded", "Finished"]
    );

    // A restart reads it as written and writes nothing more.
    let dir = s.stop().await;
    let s = Mcp::start_in(dir).await;
    let c = s.client("alice-token");
    settle(&s, &c).await;
    let reread = s.store().get("team-a", &id).await.unwrap().unwrap();
    assert_eq!(reread.metadata, created.metadata);
    assert_eq!(reread.phase(), RunPhase::Succeeded);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_under_a_concurrency_limit_is_created_bare_for_the_controller() {
    let s = Mcp::start(&[("wf.yaml", WORKFLOWS)]).await;
    let c = s.client("alice-token");
    let since = s.store().resource_version().await.unwrap();
    let id = c.call("limited", json!({})).await.task_id();
    // Its start reads the other Runs of its Workflow, which only the controller does.
    let created = first_version(&s, &since, &id).await;
    assert!(created.status.is_none(), "{:?}", created.status);
    s.wait(&id, "finished", |r| r.phase() == RunPhase::Succeeded)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_each_get_one_run_written_once() {
    let s = Mcp::start(&[("wf.yaml", WORKFLOWS)]).await;
    let c = s.client("alice-token");
    let since = s.store().resource_version().await.unwrap();
    let calls = (0..32).map(|_| {
        let c = c.clone();
        async move { c.call("instant", json!({})).await.task_id() }
    });
    let mut ids = futures::future::join_all(calls).await;
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 32);
    settle(&s, &c).await;
    // One change per Run in the store's history, each already finished.
    let latest = s.store().resource_version().await.unwrap();
    let mut changes = s.store().watch(Some(since));
    let mut written = Vec::new();
    while let Some(Ok(WatchEvent::Applied(r))) = changes.next().await {
        let name = r.metadata.name.clone().unwrap();
        if name.starts_with("instant-") {
            assert_eq!(r.phase(), RunPhase::Succeeded, "{name}");
            written.push(name);
        }
        if r.metadata.resource_version.as_deref() == Some(latest.as_str()) {
            break;
        }
    }
    written.sort();
    assert_eq!(written, ids);
}
