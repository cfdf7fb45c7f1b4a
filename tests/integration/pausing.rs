//! Pausing and resuming Runs and Workflows through Runway's own tools, in both protocol eras,
//! on the embedded store: what runs on, what waits, who may, what is refused, and a pause that
//! outlives a restart.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use axum::http::StatusCode;
use runway::api::{RunPhase, StepPhase};
use serde_json::{Value, json};
use support::mcp::{Client, Mcp, Old, TASK_WORKFLOWS};

const GATE: &str = r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: gate, namespace: NS }
spec:
  tool: { description: Asks and then works. }
  steps:
    - name: ask
      input: { requests: [ { name: go, message: "Go?" } ] }
    - { name: work, delay: { duration: 10ms } }
  result: { content: [ { type: text, text: "done" } ] }
"#;

async fn start(c: &Client, tool: &str) -> String {
    let r = c.call(tool, json!({})).await;
    r.result()["taskId"].as_str().unwrap().to_owned()
}

fn structured(r: &support::mcp::Reply) -> Value {
    r.result()["structuredContent"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_run_finishes_its_step_starts_no_other_and_resumes_from_either_era() {
    let mcp = Mcp::start(&[("wf.yaml", GATE)]).await;
    let alice = mcp.client("alice-token");
    let id = start(&alice, "gate").await;
    alice.await_status(&id, "input_required").await;

    let r = alice
        .call(
            "runway_pause_run",
            json!({"taskId": id, "reason": "freeze"}),
        )
        .await;
    assert_eq!(structured(&r)["changed"], true, "{:?}", r.last());
    mcp.wait(&id, "paused", |r| {
        r.status.as_ref().is_some_and(|s| s.paused.is_some())
    })
    .await;
    let again = alice.call("runway_pause_run", json!({"taskId": id})).await;
    assert_eq!(structured(&again)["changed"], false);

    // The question stays open and its answer is taken; the step it ends is its last.
    alice
        .update(&id, json!({"ask.go": {"action": "accept", "content": {}}}))
        .await;
    let run = mcp
        .wait(&id, "the question answered", |r| {
            r.status
                .as_ref()
                .is_some_and(|s| s.steps.iter().any(|x| x.phase == StepPhase::Succeeded))
        })
        .await;
    let st = run.status.unwrap();
    assert!(st.steps.iter().all(|r| r.name != "work"), "{st:?}");
    assert_eq!(
        run.spec.pause.unwrap().requested_by.as_deref(),
        Some("alice")
    );
    let task = alice.get(&id).await;
    assert_eq!(task.result()["status"], "working");
    assert_eq!(task.result()["statusMessage"], "paused by alice");

    // Bob (who may list every Run) resumes it from a 2025-era session.
    let old = Old::connect(&mcp.url(), "bob-token", json!({})).await;
    let r = old
        .result(
            "tools/call",
            json!({"name": "runway_resume_run", "arguments": {"taskId": id}}),
        )
        .await;
    assert_eq!(r["structuredContent"]["changed"], true, "{r}");
    mcp.wait(&id, "finished", |r| r.phase() == RunPhase::Succeeded)
        .await;
    let said = |seen: &[(String, String)], reason: &str, who: &str| {
        seen.iter().any(|(r, m)| r == reason && m.contains(who))
    };
    let all = |seen: &[(String, String)]| {
        said(seen, "Paused", "alice")
            && said(seen, "Paused", "freeze")
            && said(seen, "Resumed", "bob")
    };
    let seen = support::mcp::events_once(&alice, &id, all).await;
    assert!(all(&seen), "{seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pausing_asks_what_cancelling_asks_and_refuses_with_a_reason() {
    let mcp = Mcp::start(&[("wf.yaml", TASK_WORKFLOWS)]).await;
    let (alice, dave, rita) = (
        mcp.client("alice-token"),
        mcp.client("dave-token"),
        mcp.client("reader-token"),
    );
    let nap = start(&alice, "nap").await;
    // Someone else's Run, or no right to update Runs: as if there were no such task.
    for (who, c) in [("dave", &dave), ("rita", &rita)] {
        let r = c.call("runway_pause_run", json!({"taskId": nap})).await;
        assert_eq!(r.error_code(), -32602, "{who}: {:?}", r.last());
        assert!(
            r.last()["error"]["message"]
                .as_str()
                .unwrap()
                .contains("unknown task"),
            "{who}: {:?}",
            r.last()
        );
    }
    let r = alice
        .call("runway_pause_run", json!({"taskId": nap, "until": "later"}))
        .await;
    assert_eq!(r.error_code(), -32602);
    let r = alice
        .call("runway_resume_run", json!({"taskId": nap}))
        .await;
    assert_eq!(
        structured(&r)["changed"],
        false,
        "not paused: nothing to do"
    );

    let quick = start(&alice, "quick").await;
    alice.await_status(&quick, "completed").await;
    let r = alice
        .call("runway_pause_run", json!({"taskId": quick}))
        .await;
    assert_eq!(r.error_code(), -32602);
    assert!(
        r.last()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("has finished"),
        "{:?}",
        r.last()
    );

    alice.cancel(&nap).await;
    let r = alice.call("runway_pause_run", json!({"taskId": nap})).await;
    assert_eq!(r.error_code(), -32602);
    let why = r.last()["error"]["message"].as_str().unwrap().to_owned();
    assert!(
        why.contains("cancelled") || why.contains("has finished"),
        "{why}"
    );
}

/// An upstream that fails with 503 until it is fixed, counting the calls.
async fn broken_upstream() -> (String, Arc<AtomicBool>, Arc<AtomicUsize>) {
    let fixed = Arc::new(AtomicBool::new(false));
    let calls = Arc::new(AtomicUsize::new(0));
    let (f, c) = (fixed.clone(), calls.clone());
    let app = axum::Router::new().route(
        "/deploy",
        axum::routing::post(move || {
            let (f, c) = (f.clone(), c.clone());
            async move {
                c.fetch_add(1, Ordering::SeqCst);
                if f.load(Ordering::SeqCst) {
                    (StatusCode::OK, "{}")
                } else {
                    (StatusCode::SERVICE_UNAVAILABLE, "down")
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), fixed, calls)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_out_of_retries_holds_the_run_across_a_restart_until_someone_resumes_it() {
    let (url, fixed, calls) = broken_upstream().await;
    let wf = format!(
        r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: {{ name: ship, namespace: NS }}
spec:
  tool: {{ description: Deploys; pauses when the deploy keeps failing. }}
  execution: {{ onRetriesExhausted: Pause }}
  steps:
    - name: deploy
      http: {{ url: "{url}/deploy", method: POST }}
      retry: {{ limit: 1, backoff: 10ms }}
  result: {{ content: [ {{ type: text, text: "shipped" }} ] }}
"#
    );
    let mcp = Mcp::start(&[("wf.yaml", &wf)]).await;
    let alice = mcp.client("alice-token");
    let id = start(&alice, "ship").await;
    let held = mcp
        .wait(&id, "held", |r| {
            r.status
                .as_ref()
                .and_then(|s| s.paused.as_ref())
                .is_some_and(|p| p.step.as_deref() == Some("deploy"))
        })
        .await;
    assert_eq!(held.phase(), RunPhase::Running);
    assert_eq!(
        calls.load(Ordering::SeqCst),
        2,
        "the attempt and its one retry"
    );
    let task = alice.get(&id).await;
    assert_eq!(task.result()["status"], "working");
    assert_eq!(
        task.result()["statusMessage"],
        "paused: step deploy ran out of retries"
    );

    let paused =
        |evs: &[(String, String)]| evs.iter().any(|(r, m)| r == "Paused" && m.contains("503"));
    let seen = support::mcp::events_once(&alice, &id, paused).await;
    assert!(paused(&seen), "{seen:?}");

    // The hold is in the Run: a restart keeps it, and starts nothing.
    let dir = mcp.stop().await;
    let mcp = Mcp::start_in(dir).await;
    let alice = mcp.client("alice-token");
    let task = alice.get(&id).await;
    assert_eq!(task.result()["status"], "working");
    fixed.store(true, Ordering::SeqCst);
    let r = alice.call("runway_resume_run", json!({"taskId": id})).await;
    assert_eq!(structured(&r)["changed"], true, "{:?}", r.last());
    let done = mcp.wait(&id, "finished", |r| r.phase().is_terminal()).await;
    assert_eq!(done.phase(), RunPhase::Succeeded, "{:?}", done.status);
    assert_eq!(calls.load(Ordering::SeqCst), 3, "one more attempt, once");
    assert_eq!(done.status.unwrap().steps[0].attempt, 3);
    let resumed = |evs: &[(String, String)]| evs.iter().any(|(r, _)| r == "Resumed");
    let seen = support::mcp::events_once(&alice, &id, resumed).await;
    assert!(resumed(&seen), "{seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_of_a_paused_workflow_wait_unstarted_until_it_is_resumed() {
    let paused = GATE.replace("spec:\n", "spec:\n  suspend: true\n");
    let mcp = Mcp::start(&[("wf.yaml", &paused)]).await;
    let alice = mcp.client("alice-token");
    let id = start(&alice, "gate").await;
    let run = mcp
        .wait(&id, "waiting for its workflow", |r| {
            r.status
                .as_ref()
                .and_then(|s| s.status_message.as_deref())
                .is_some_and(|m| m.contains("is paused"))
        })
        .await;
    let st = run.status.unwrap();
    assert!(st.started_at.is_none() && st.steps.is_empty(), "{st:?}");
    let task = alice.get(&id).await;
    assert_eq!(task.result()["status"], "working");
    assert_eq!(
        task.result()["statusMessage"],
        "waiting: workflow gate is paused"
    );
    // Resumed by editing the manifest, as kubectl would patch it: the Run starts.
    std::fs::write(
        mcp.dir.path().join("workflows/wf.yaml"),
        GATE.replace("namespace: NS", "namespace: team-a"),
    )
    .unwrap();
    alice.await_status(&id, "input_required").await;
}
