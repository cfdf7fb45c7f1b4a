//! Real Runs driven by the controller on the SQLite store.

use crate::support;

use std::sync::{Arc, Mutex};

use axum::http::{HeaderMap, StatusCode};
use runway::api::{InputAction, RunPhase, StepPhase};
use runway::store::{RunStore, StoreError};
use serde_json::json;
use support::harness::Harness;

/// A local HTTP server that answers 503 twice, then 200, and records every Idempotency-Key.
async fn flaky_server() -> (String, Arc<Mutex<Vec<String>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    let app = axum::Router::new().route(
        "/deploy",
        axum::routing::post(move |headers: HeaderMap, body: String| {
            let s = s.clone();
            async move {
                let key = headers
                    .get("idempotency-key")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_string();
                let n = {
                    let mut v = s.lock().unwrap();
                    v.push(key);
                    v.len()
                };
                if n <= 2 {
                    (StatusCode::SERVICE_UNAVAILABLE, "busy".to_string())
                } else {
                    (
                        StatusCode::OK,
                        json!({"deployed": true, "echo": body}).to_string(),
                    )
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), seen)
}

fn pipeline(url: &str) -> String {
    format!(
        r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata:
  name: pipeline
spec:
  steps:
    - name: deploy
      http:
        url: "{url}/deploy"
        body: {{ "service": "{{{{ args.service }}}}" }}
      retry: {{ limit: 3, backoff: 50ms }}
    - name: settle
      delay: {{ duration: 100ms }}
    - name: approve
      input:
        requests:
          - name: lead
            message: "Approve {{{{ args.service }}}}?"
          - name: security
            message: "Security sign-off?"
    - name: check
      when: "not inputs.lead.ok"
      fail: {{ message: "lead said no" }}
  result:
    content:
      - type: text
        text: "deployed={{{{ steps.deploy.output.body.deployed }}}} lead={{{{ inputs.lead.ok }}}}"
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_step_run_retries_waits_and_takes_answers_one_key_at_a_time() {
    let (url, seen) = flaky_server().await;
    let h = Harness::start(&[("pipeline.yaml", &pipeline(&url))]);
    let run = h.create("pipeline", json!({"service": "api"})).await;
    let name = run.metadata.name.clone().unwrap();

    let waiting = h
        .wait_for(&name, "waiting for input", |r| {
            r.phase() == RunPhase::Waiting
        })
        .await;
    let st = waiting.status.unwrap();
    assert_eq!(st.input_requests.len(), 2, "both keys open at once");
    assert_eq!(st.steps[0].attempt, 3);
    assert_eq!(st.steps[0].attempts.len(), 2);
    let keys = seen.lock().unwrap().clone();
    let uid = run.metadata.uid.clone().unwrap();
    assert_eq!(
        keys,
        vec![format!("{uid}/deploy"); 3],
        "the same Idempotency-Key on every attempt"
    );
    assert_eq!(
        st.input_requests["approve.lead"].params["message"],
        "Approve api?"
    );

    h.answer(
        &name,
        "approve.lead",
        InputAction::Accept,
        json!({"ok": true}),
        "bob",
        &[],
    )
    .await;
    let one = h
        .wait_for(&name, "one key answered", |r| {
            r.status
                .as_ref()
                .is_some_and(|s| s.input_requests.len() == 1)
        })
        .await;
    assert_eq!(one.phase(), RunPhase::Waiting);
    assert!(
        one.status
            .unwrap()
            .input_requests
            .contains_key("approve.security")
    );

    h.answer(
        &name,
        "approve.security",
        InputAction::Accept,
        json!({}),
        "carol",
        &[],
    )
    .await;
    let done = h
        .wait_for(&name, "finished", |r| r.phase().is_terminal())
        .await;
    let st = done.status.unwrap();
    assert_eq!(done.metadata.name.as_deref(), Some(name.as_str()));
    assert_eq!(st.phase, RunPhase::Succeeded, "{:?}", st.result);
    assert_eq!(
        st.result.unwrap().to_value()["content"][0]["text"],
        "deployed=true lead=true"
    );
    assert_eq!(
        st.steps.iter().find(|s| s.name == "check").unwrap().phase,
        StepPhase::Skipped
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fail_step_ends_the_run_as_a_tool_error() {
    let (url, _) = flaky_server().await;
    let h = Harness::start(&[("pipeline.yaml", &pipeline(&url))]);
    let name = h
        .create("pipeline", json!({"service": "api"}))
        .await
        .metadata
        .name
        .unwrap();
    h.wait_for(&name, "waiting", |r| r.phase() == RunPhase::Waiting)
        .await;
    h.answer(
        &name,
        "approve.lead",
        InputAction::Accept,
        json!({"ok": false}),
        "bob",
        &[],
    )
    .await;
    h.answer(
        &name,
        "approve.security",
        InputAction::Accept,
        json!({}),
        "carol",
        &[],
    )
    .await;
    let done = h
        .wait_for(&name, "finished", |r| r.phase().is_terminal())
        .await;
    let st = done.status.unwrap();
    assert_eq!(st.phase, RunPhase::Failed);
    assert_eq!(
        st.result.unwrap().to_value()["content"][0]["text"],
        "lead said no"
    );
    assert!(st.error.is_none());
}

const CANCELLABLE: &str = r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: long }
spec:
  steps:
    - name: nap
      delay: { duration: 1h }
  finally:
    - name: cleanup
      delay: { duration: 10ms }
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancellation_runs_finally_then_ends_cancelled() {
    let h = Harness::start(&[("long.yaml", CANCELLABLE)]);
    let name = h.create("long", json!({})).await.metadata.name.unwrap();
    h.wait_for(&name, "napping", |r| {
        r.status.as_ref().is_some_and(|s| !s.steps.is_empty())
    })
    .await;
    h.cancel(&name, "changed my mind").await;
    let done = h
        .wait_for(&name, "finished", |r| r.phase().is_terminal())
        .await;
    let st = done.status.unwrap();
    assert_eq!(st.phase, RunPhase::Cancelled);
    assert_eq!(st.steps[0].phase, StepPhase::Cancelled);
    assert_eq!(st.steps[1].name, "cleanup");
    assert_eq!(st.steps[1].phase, StepPhase::Succeeded);
    assert_eq!(st.status_message.as_deref(), Some("cancelled"));
    assert!(st.conditions[0].message.contains("changed my mind"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancellation_aborts_an_http_call_in_flight() {
    let app = axum::Router::new().route(
        "/hang",
        axum::routing::get(|| async { futures::future::pending::<&'static str>().await }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let wf = format!(
        "apiVersion: runway.dev/v1alpha1\nkind: Workflow\nmetadata: {{ name: hang }}\nspec:\n  steps:\n    - name: call\n      http: {{ url: \"http://{addr}/hang\" }}\n"
    );
    let h = Harness::start(&[("hang.yaml", &wf)]);
    let name = h.create("hang", json!({})).await.metadata.name.unwrap();
    h.wait_for(&name, "calling", |r| {
        r.status.as_ref().is_some_and(|s| !s.steps.is_empty())
    })
    .await;
    h.cancel(&name, "stop").await;
    let done = h
        .wait_for(&name, "finished", |r| r.phase().is_terminal())
        .await;
    assert_eq!(done.phase(), RunPhase::Cancelled);
}

/// A local HTTP server whose every request waits until `open` says true: each request's path
/// is sent on `arrived` as it comes, and counted by path.
struct GatedServer {
    url: String,
    arrived: tokio::sync::mpsc::UnboundedReceiver<String>,
    counts: Arc<Mutex<std::collections::HashMap<String, usize>>>,
    open: tokio::sync::watch::Sender<bool>,
}

async fn gated_server() -> GatedServer {
    let (tx, arrived) = tokio::sync::mpsc::unbounded_channel();
    let (open, gate) = tokio::sync::watch::channel(false);
    let counts = Arc::new(Mutex::new(std::collections::HashMap::new()));
    let seen = counts.clone();
    let app = axum::Router::new().fallback(move |uri: http::Uri| {
        let (tx, mut gate, seen) = (tx.clone(), gate.clone(), seen.clone());
        async move {
            *seen
                .lock()
                .unwrap()
                .entry(uri.path().to_owned())
                .or_insert(0) += 1;
            let _ = tx.send(uri.path().to_owned());
            let _ = gate.wait_for(|open| *open).await;
            "{}"
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    GatedServer {
        url: format!("http://{addr}"),
        arrived,
        counts,
        open,
    }
}

const QUICK: &str = r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: quick }
spec:
  steps:
    - name: nap
      delay: { duration: 1ms }
"#;

/// A main step and a `finally` step, both calling `url`.
fn tidy_after(url: &str, main: &str) -> String {
    format!(
        "apiVersion: runway.dev/v1alpha1\nkind: Workflow\nmetadata: {{ name: tidy }}\nspec:\n  steps:\n    - {main}\n  finally:\n    - name: tidy\n      http: {{ url: \"{url}/tidy\" }}\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_while_finally_runs_leaves_its_call_to_finish_once() {
    let mut server = gated_server().await;
    let wf = tidy_after(&server.url, "{ name: work, delay: { duration: 1ms } }");
    let h = Harness::start(&[("tidy.yaml", &wf), ("quick.yaml", QUICK)]);
    let name = h.create("tidy", json!({})).await.metadata.name.unwrap();
    assert_eq!(server.arrived.recv().await.as_deref(), Some("/tidy"));
    h.cancel(&name, "enough").await;
    // The controller follows changes in order: once a Run created after the cancel has
    // finished, the cancel has been seen (and, had it aborted the call, the call sent again).
    let later = h.create("quick", json!({})).await.metadata.name.unwrap();
    h.wait_for(&later, "finished", |r| r.phase().is_terminal())
        .await;
    server.open.send_replace(true);
    let done = h
        .wait_for(&name, "finished", |r| r.phase().is_terminal())
        .await;
    let st = done.status.unwrap();
    assert_eq!(st.phase, RunPhase::Cancelled);
    assert_eq!(st.steps[1].name, "tidy");
    assert_eq!(st.steps[1].phase, StepPhase::Succeeded);
    assert_eq!(st.steps[1].attempt, 1);
    assert_eq!(
        server.counts.lock().unwrap().get("/tidy"),
        Some(&1),
        "the finally step's request was sent once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_deleted_while_its_finally_step_runs_leaves_nothing_to_its_successor() {
    let mut server = gated_server().await;
    let main = format!("{{ name: work, http: {{ url: \"{}/work\" }} }}", server.url);
    let h = Harness::start(&[("tidy.yaml", &tidy_after(&server.url, &main))]);
    let first = h.create_named("tidy", "again", json!({})).await;
    assert_eq!(server.arrived.recv().await.as_deref(), Some("/work"));
    // Cancelled first, so that the finally step starts in a cancelled Run.
    h.cancel("again", "enough").await;
    assert_eq!(server.arrived.recv().await.as_deref(), Some("/tidy"));
    h.store
        .delete("default", "again", None, None)
        .await
        .unwrap();
    server.open.send_replace(true);

    let second = h.create_named("tidy", "again", json!({})).await;
    assert_ne!(first.metadata.uid, second.metadata.uid);
    let done = h
        .wait_for("again", "the new Run finished", |r| {
            r.metadata.uid == second.metadata.uid && r.phase().is_terminal()
        })
        .await;
    let st = done.status.unwrap();
    assert_eq!(st.phase, RunPhase::Succeeded, "{:?}", st.status_message);
    assert_eq!(
        st.steps
            .iter()
            .map(|s| (s.name.as_str(), s.phase))
            .collect::<Vec<_>>(),
        [
            ("work", StepPhase::Succeeded),
            ("tidy", StepPhase::Succeeded)
        ]
    );
}

const DEADLINE: &str = r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: hurry }
spec:
  execution: { timeout: 300ms }
  steps:
    - name: ask
      input:
        timeout: 1h
        requests: [ { name: ok, message: "ok?" } ]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deadline_expires_while_waiting_for_input() {
    let h = Harness::start(&[("hurry.yaml", DEADLINE)]);
    let name = h.create("hurry", json!({})).await.metadata.name.unwrap();
    let done = h
        .wait_for(&name, "finished", |r| r.phase().is_terminal())
        .await;
    let st = done.status.unwrap();
    assert_eq!(st.phase, RunPhase::Failed);
    assert!(st.input_requests.is_empty());
    assert!(
        st.result.unwrap().to_value()["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("deadline")
    );
}

const TEMPLATE_ERROR: &str = r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: typo }
spec:
  steps:
    - name: greet
      delay: { duration: "{{ args.secnds }}s" }
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_template_error_fails_with_a_protocol_error_naming_the_step() {
    let h = Harness::start(&[("typo.yaml", TEMPLATE_ERROR)]);
    let name = h
        .create("typo", json!({"seconds": 1}))
        .await
        .metadata
        .name
        .unwrap();
    let done = h
        .wait_for(&name, "finished", |r| r.phase().is_terminal())
        .await;
    let err = done.status.unwrap().error.expect("a protocol-level error");
    assert_eq!(err.code, runway::protocol::codes::INTERNAL_ERROR);
    assert!(
        err.message.contains("greet") && err.message.contains("args.secnds"),
        "{}",
        err.message
    );
}

const RESTARTABLE: &str = r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: nap }
spec:
  steps:
    - name: nap
      delay: { duration: 1500ms }
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: ask }
spec:
  steps:
    - name: ask
      input: { requests: [ { name: go, message: "go?" } ] }
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_finish_after_a_controller_restart_and_timers_keep_their_wake_time() {
    let h = Harness::start(&[("both.yaml", RESTARTABLE)]);
    let nap = h.create("nap", json!({})).await.metadata.name.unwrap();
    let ask = h.create("ask", json!({})).await.metadata.name.unwrap();
    let napping = h
        .wait_for(&nap, "napping", |r| {
            r.status.as_ref().is_some_and(|s| !s.steps.is_empty())
        })
        .await;
    let wake = napping.status.unwrap().steps[0].wake_at.clone().unwrap();
    h.wait_for(&ask, "waiting", |r| r.phase() == RunPhase::Waiting)
        .await;

    let dir = h.stop().await;
    let h = Harness::start_in(dir);
    h.answer(&ask, "ask.go", InputAction::Accept, json!({}), "bob", &[])
        .await;
    let a = h
        .wait_for(&ask, "finished", |r| r.phase().is_terminal())
        .await;
    assert_eq!(a.phase(), RunPhase::Succeeded);
    let n = h
        .wait_for(&nap, "finished", |r| r.phase().is_terminal())
        .await;
    let st = n.status.unwrap();
    assert_eq!(st.phase, RunPhase::Succeeded);
    assert_eq!(st.steps[0].wake_at, None);
    let finished: jiff::Timestamp = st.steps[0].finished_at.clone().unwrap().parse().unwrap();
    let wake: jiff::Timestamp = wake.parse().unwrap();
    assert!(
        finished >= wake,
        "the delay ended at {finished}, before its wake time {wake}"
    );
    assert_eq!(st.steps.len(), 1);
}

const TTL: &str = r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: brief }
spec:
  execution: { ttlAfterFinished: 200ms }
  steps: []
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finished_runs_are_deleted_after_their_ttl() {
    let h = Harness::start(&[("brief.yaml", TTL)]);
    let plain = h.create("brief", json!({})).await.metadata.name.unwrap();
    // The labels by which a schedule's history limits or a Run tree keep a Run, copied onto
    // one Runway did not start so (no seal holds): its own time to live applies all the same.
    let copied = runway::api::Run::requested(
        "default",
        "copied",
        "brief",
        json!({}),
        None,
        jiff::Timestamp::now(),
    )
    .with_labels([
        (runway::api::labels::SCHEDULE, "nightly".to_owned()),
        (runway::api::labels::ROOT, "a-root-uid".to_owned()),
    ]);
    h.store.create(copied).await.unwrap();
    for name in [plain.as_str(), "copied"] {
        until_deleted(&h, name).await;
    }
}

/// Wait until Run `name` has finished and been deleted.
async fn until_deleted(h: &Harness, name: &str) {
    use futures::StreamExt;
    let rv = RunStore::resource_version(&h.store).await.unwrap();
    let mut w = RunStore::watch(&h.store, Some(rv));
    if RunStore::get(&h.store, "default", name)
        .await
        .unwrap()
        .is_some()
    {
        let deleted = tokio::time::timeout(support::harness::PATIENCE, async {
            loop {
                if let runway::store::WatchEvent::Deleted(r) = w.next().await.unwrap().unwrap()
                    && r.metadata.name.as_deref() == Some(name)
                {
                    return r;
                }
            }
        })
        .await
        .unwrap_or_else(|_| panic!("{name} deleted after its ttl"));
        assert_eq!(deleted.phase(), RunPhase::Succeeded);
    }
}

const CALLER_DELAY: &str = r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: nap }
spec:
  steps:
    - name: nap
      delay: { duration: "{{ args.wait }}" }
"#;

#[tokio::test]
async fn a_caller_chosen_duration_past_the_cap_fails_that_run_only() {
    let h = Harness::start(&[("nap.yaml", CALLER_DELAY)]);
    let huge = h.create("nap", json!({"wait": "99999999h"})).await;
    let huge = huge.metadata.name.unwrap();
    let done = h
        .wait_for(&huge, "finished", |r| r.phase().is_terminal())
        .await;
    assert_eq!(done.phase(), RunPhase::Failed);
    let err = done.status.unwrap().error.expect("a protocol-level error");
    assert!(
        err.message.contains("nap") && err.message.contains("maximum"),
        "{}",
        err.message
    );
    let small = h.create("nap", json!({"wait": "10ms"})).await;
    let small = small.metadata.name.unwrap();
    let done = h
        .wait_for(&small, "finished", |r| r.phase().is_terminal())
        .await;
    assert_eq!(done.phase(), RunPhase::Succeeded);
}

/// The real executors, except that a Run whose arguments say `explode` panics mid-effect.
struct Explosive(runway::steps::Executors);

#[async_trait::async_trait]
impl runway::steps::Executor for Explosive {
    async fn execute(
        &self,
        run: &runway::api::Run,
        effect: &runway::engine::Effect,
        cancel: tokio_util::sync::CancellationToken,
    ) -> Option<runway::engine::Outcome> {
        if run.spec.arguments.as_ref().and_then(|a| a.get("explode")) == Some(&json!(true)) {
            panic!("executor bug");
        }
        self.0.execute(run, effect, cancel).await
    }
}

#[tokio::test]
async fn a_panic_while_executing_fails_that_run_and_the_worker_goes_on() {
    let (url, _seen) = flaky_server().await;
    let wf = format!(
        r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: {{ name: call }}
spec:
  steps:
    - name: call
      http: {{ url: "{url}/deploy", method: POST }}
      retry: {{ limit: 5, backoff: 10ms }}
"#
    );
    let dir = support::harness::TempDir::new();
    std::fs::create_dir_all(dir.path().join("workflows")).unwrap();
    std::fs::write(dir.path().join("workflows/call.yaml"), wf).unwrap();
    let real = runway::steps::Executors::new(
        Arc::new(runway::steps::StaticSecrets::default()),
        &support::harness::local_egress(),
    );
    // One worker: if the panic took it, nothing else would ever run.
    let h = Harness::start_with(dir, Arc::new(Explosive(real)), 1);
    let bad = h.create("call", json!({"explode": true})).await;
    let bad = bad.metadata.name.unwrap();
    let done = h
        .wait_for(&bad, "finished", |r| r.phase().is_terminal())
        .await;
    assert_eq!(done.phase(), RunPhase::Failed);
    let st = done.status.unwrap();
    assert!(
        st.error.as_ref().unwrap().message.contains("executor bug"),
        "{:?}",
        st.error
    );
    assert_eq!(st.conditions[0].reason, "Failed");
    let good = h.create("call", json!({})).await;
    let good = good.metadata.name.unwrap();
    let done = h
        .wait_for(&good, "finished", |r| r.phase().is_terminal())
        .await;
    assert_eq!(done.phase(), RunPhase::Succeeded);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_failed_internally_cancels_the_child_run_its_other_branch_started() {
    // Items whose answers, once let through, are too large together for one Run's status;
    // the last item never answers, so the items' outputs stay on their own records.
    let (open, gate) = tokio::sync::watch::channel(false);
    let pad = json!({ "pad": "x".repeat(60 * 1024) }).to_string();
    let app = axum::Router::new().fallback(move |uri: http::Uri| {
        let (mut gate, pad) = (gate.clone(), pad.clone());
        async move {
            if uri.path() == "/item/39" {
                std::future::pending::<()>().await;
            }
            let _ = gate.wait_for(|open| *open).await;
            pad
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let parent = format!(
        r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: {{ name: parent, namespace: NS }}
spec:
  steps:
    - {{ name: child, dependsOn: [], workflow: {{ name: nap }} }}
    - name: fan
      dependsOn: []
      forEach: {{ items: "{{{{ range(40) | list }}}}", parallelism: 40 }}
      http: {{ url: "{url}/item/{{{{ item }}}}" }}
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: {{ name: nap, namespace: NS }}
spec:
  steps: [ {{ name: sleep, delay: {{ duration: 1h }} }} ]
"#
    );
    let mcp = support::mcp::Mcp::start(&[("wf.yaml", &parent)]).await;
    let task = mcp
        .client("alice-token")
        .call("parent", json!({}))
        .await
        .task_id();
    let started = mcp
        .wait(&task, "the child started", |r| {
            r.status
                .as_ref()
                .is_some_and(|s| s.steps.iter().any(|x| x.child_run.is_some()))
        })
        .await;
    let child = started.status.unwrap().steps[0].child_run.clone().unwrap();
    mcp.wait(&child, "the child running", |r| {
        r.phase() == RunPhase::Running
    })
    .await;
    open.send(true).unwrap();
    let done = mcp.wait(&task, "failed", |r| r.phase().is_terminal()).await;
    assert_eq!(done.phase(), RunPhase::Failed);
    let error = done.status.as_ref().unwrap().error.clone().unwrap();
    assert!(error.message.contains("status would be"), "{error:?}");
    // The child it started is not left running until the parent's time to live.
    let child = mcp
        .wait(&child, "cancelled", |r| r.phase().is_terminal())
        .await;
    assert_eq!(child.phase(), RunPhase::Cancelled);
    let done = mcp
        .wait(&task, "cleaned up", |r| {
            r.status.as_ref().is_some_and(|s| s.cleanups.is_empty())
        })
        .await;
    assert_eq!(done.phase(), RunPhase::Failed);
}

/// A local endpoint that always answers `status` with a body of `size` bytes.
async fn fixed_server(status: StatusCode, size: usize) -> String {
    let body = json!({ "pad": "x".repeat(size) }).to_string();
    let app = axum::Router::new().route(
        "/",
        axum::routing::any(move || {
            let body = body.clone();
            async move { (status, body) }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}/")
}

const TYPED: &str = r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: typed }
spec:
  tool:
    inputSchema:
      type: object
      properties: { count: { type: integer, maximum: 10 } }
      required: [count]
  steps:
    - name: nap
      delay: { duration: 10ms }
"#;

#[tokio::test]
async fn runs_created_behind_the_endpoints_back_get_the_argument_checks() {
    let h = Harness::start(&[("typed.yaml", TYPED)]);
    let bad = h.create("typed", json!({"count": "lots"})).await;
    let done = h
        .wait_for(bad.metadata.name.as_deref().unwrap(), "finished", |r| {
            r.phase().is_terminal()
        })
        .await;
    let err = done.status.unwrap().error.expect("a protocol-level error");
    assert_eq!(err.code, runway::protocol::codes::INVALID_PARAMS);
    assert!(err.message.contains("invalid arguments"), "{}", err.message);
    assert!(err.data.unwrap()["errors"][0]["path"] == "/count");
    let deep = (0..40).fold(json!(1), |v, _| json!([v]));
    let bad = h.create("typed", json!({"count": 1, "deep": deep})).await;
    let done = h
        .wait_for(bad.metadata.name.as_deref().unwrap(), "finished", |r| {
            r.phase().is_terminal()
        })
        .await;
    assert!(
        done.status
            .unwrap()
            .error
            .unwrap()
            .message
            .contains("deeper"),
        "arguments nested too deep are refused"
    );
    let good = h.create("typed", json!({"count": 3})).await;
    let done = h
        .wait_for(good.metadata.name.as_deref().unwrap(), "finished", |r| {
            r.phase().is_terminal()
        })
        .await;
    assert_eq!(done.phase(), RunPhase::Succeeded);
}

#[tokio::test]
async fn a_run_whose_status_would_outgrow_its_budget_fails_cleanly() {
    // 20 steps × 60 KiB of output each is more than one Run may keep.
    let url = fixed_server(StatusCode::OK, 60 * 1024).await;
    let steps: String = (0..20)
        .map(|i| format!("    - {{ name: s{i}, http: {{ url: \"{url}\" }} }}\n"))
        .collect();
    let wf = format!(
        "apiVersion: runway.dev/v1alpha1\nkind: Workflow\nmetadata: {{ name: big }}\nspec:\n  steps:\n{steps}"
    );
    let h = Harness::start(&[("big.yaml", &wf)]);
    let run = h.create("big", json!({})).await;
    let done = h
        .wait_for(run.metadata.name.as_deref().unwrap(), "finished", |r| {
            r.phase().is_terminal()
        })
        .await;
    assert_eq!(done.phase(), RunPhase::Failed);
    let st = done.status.unwrap();
    assert!(
        st.error
            .as_ref()
            .unwrap()
            .message
            .contains("status would be"),
        "{:?}",
        st.error
    );
    assert!(st.steps.iter().all(|s| s.output.is_none()));
    assert!(serde_json::to_vec(&st).unwrap().len() < runway::engine::budget::MAX_STATUS_BYTES);
}

#[tokio::test]
async fn retries_are_capped_and_only_the_newest_attempts_are_kept() {
    let url = fixed_server(StatusCode::SERVICE_UNAVAILABLE, 10).await;
    let wf = format!(
        r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: {{ name: flaky }}
spec:
  steps:
    - name: call
      http: {{ url: "{url}" }}
      retry: {{ limit: "{{{{ args.limit }}}}", backoff: 1ms, maxBackoff: 1ms }}
"#
    );
    let h = Harness::start(&[("flaky.yaml", &wf)]);
    let too_many = h.create("flaky", json!({"limit": 1000})).await;
    let done = h
        .wait_for(
            too_many.metadata.name.as_deref().unwrap(),
            "finished",
            |r| r.phase().is_terminal(),
        )
        .await;
    let message = done.status.unwrap().error.unwrap().message;
    assert!(message.contains("exceeds the maximum of 100"), "{message}");
    let run = h.create("flaky", json!({"limit": 14})).await;
    let done = h
        .wait_for(run.metadata.name.as_deref().unwrap(), "finished", |r| {
            r.phase().is_terminal()
        })
        .await;
    let step = &done.status.unwrap().steps[0];
    assert_eq!(step.attempt, 15);
    assert_eq!(
        step.attempts.len(),
        runway::engine::budget::MAX_ATTEMPTS_KEPT
    );
    assert_eq!(step.attempts.last().unwrap().attempt, 15);
    // Backoffs are at least the minimum, whatever the Workflow says.
    let started: Vec<jiff::Timestamp> = step
        .attempts
        .iter()
        .filter_map(|a| a.started_at.as_deref()?.parse().ok())
        .collect();
    for pair in started.windows(2) {
        assert!(pair[1].duration_since(pair[0]) >= runway::engine::budget::MIN_BACKOFF);
    }
}

#[tokio::test]
async fn an_answer_too_large_to_keep_is_not_retried_unless_its_status_says_so() {
    let big = 1024 * 1024 + 1;
    let ok = fixed_server(StatusCode::OK, big).await;
    let unavailable = fixed_server(StatusCode::SERVICE_UNAVAILABLE, big).await;
    let flow = |name: &str, url: &str| {
        format!(
            "---\napiVersion: runway.dev/v1alpha1\nkind: Workflow\nmetadata: {{ name: {name} }}\nspec:\n  steps:\n    - name: call\n      http: {{ url: \"{url}\" }}\n      retry: {{ limit: 2, backoff: 1ms }}\n"
        )
    };
    let wf = flow("large", &ok) + &flow("down", &unavailable);
    let h = Harness::start(&[("wf.yaml", &wf)]);
    for (workflow, attempts, says) in [
        (
            "large",
            1,
            "HTTP 200: response body larger than 1048576 bytes",
        ),
        ("down", 3, "HTTP 503"),
    ] {
        let name = h.create(workflow, json!({})).await.metadata.name.unwrap();
        let done = h
            .wait_for(&name, "finished", |r| r.phase().is_terminal())
            .await;
        let st = done.status.unwrap();
        assert_eq!(st.phase, RunPhase::Failed, "{workflow}");
        assert_eq!(st.steps[0].attempt, attempts, "{workflow}");
        let message = st.steps[0].message.clone().unwrap_or_default();
        assert!(message.contains(says), "{workflow}: {message}");
    }
}

#[tokio::test]
async fn steps_cannot_reach_metadata_or_link_local_addresses() {
    let wf = r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: peek }
spec:
  steps:
    - name: peek
      http: { url: "http://169.254.169.254/latest/meta-data/" }
"#;
    let h = Harness::start(&[("peek.yaml", wf)]);
    let run = h.create("peek", json!({})).await;
    let done = h
        .wait_for(run.metadata.name.as_deref().unwrap(), "finished", |r| {
            r.phase().is_terminal()
        })
        .await;
    assert_eq!(done.phase(), RunPhase::Failed);
    let message = done.status.unwrap().error.unwrap().message;
    assert!(
        message.contains("egress to 169.254.169.254 is not allowed"),
        "{message}"
    );
}

/// The real executors of the tests (loopback allowed).
fn real_executors() -> runway::steps::Executors {
    runway::steps::Executors::new(
        Arc::new(runway::steps::StaticSecrets::default()),
        &support::harness::local_egress(),
    )
}

/// The real executors, except that `tool` steps wait until the test releases them; each such
/// call is counted, and told on `entered`.
struct SlowUpstream {
    real: runway::steps::Executors,
    release: tokio_util::sync::CancellationToken,
    calls: std::sync::atomic::AtomicUsize,
    entered: tokio::sync::Notify,
}

impl SlowUpstream {
    fn new(release: &tokio_util::sync::CancellationToken) -> Self {
        Self {
            real: real_executors(),
            release: release.clone(),
            calls: Default::default(),
            entered: Default::default(),
        }
    }
}

#[async_trait::async_trait]
impl runway::steps::Executor for SlowUpstream {
    async fn execute(
        &self,
        run: &runway::api::Run,
        effect: &runway::engine::Effect,
        cancel: tokio_util::sync::CancellationToken,
    ) -> Option<runway::engine::Outcome> {
        if matches!(effect.action, runway::engine::Action::Tool { .. }) {
            self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            self.entered.notify_one();
            self.release.cancelled().await;
            return Some(runway::engine::Outcome::Succeeded(json!("upstream done")));
        }
        self.real.execute(run, effect, cancel).await
    }
}

#[tokio::test]
async fn runs_waiting_on_an_upstream_task_do_not_hold_the_workers() {
    let wf = r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: upstream }
spec:
  steps:
    - name: call
      tool: { server: { url: "http://upstream.example/mcp" }, name: work }
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: quick }
spec:
  steps:
    - { name: nap, delay: { duration: 10ms } }
"#;
    let dir = support::harness::workflows_dir(&[("wf.yaml", wf)]);
    let release = tokio_util::sync::CancellationToken::new();
    let exec = SlowUpstream::new(&release);
    // One worker, and two Runs waiting on their upstream tasks.
    let h = Harness::start_with(dir, Arc::new(exec), 1);
    let waiting: Vec<String> =
        futures::future::join_all((0..2).map(|_| h.create("upstream", json!({}))))
            .await
            .into_iter()
            .map(|r| r.metadata.name.unwrap())
            .collect();
    for name in &waiting {
        h.wait_for(name, "calling upstream", |r| r.phase() == RunPhase::Running)
            .await;
    }
    let quick = h.create("quick", json!({})).await.metadata.name.unwrap();
    let done = h
        .wait_for(&quick, "finished", |r| r.phase().is_terminal())
        .await;
    assert_eq!(done.phase(), RunPhase::Succeeded, "the worker was free");
    release.cancel();
    for name in &waiting {
        let done = h
            .wait_for(name, "finished", |r| r.phase().is_terminal())
            .await;
        assert_eq!(done.phase(), RunPhase::Succeeded);
    }
}

/// The SQLite store, except that it refuses as invalid every status in `phase` (as an API
/// server refuses an object its schema does not admit).
fn refusing(inner: runway::store::sqlite::SqliteStore, phase: RunPhase) -> Arc<dyn RunStore> {
    Arc::new(support::hooked::Hooked::new(
        inner,
        move |call| match call {
            support::hooked::Call::UpdateStatus(run) if run.phase() == phase => {
                Some(StoreError::Invalid(format!("{phase:?} is not admitted")))
            }
            _ => None,
        },
    ))
}

#[tokio::test]
async fn a_status_the_store_refuses_fails_the_run_wherever_it_is_written() {
    // The queued status (written where a concurrency limit holds a Run back) and a waiting
    // status (written where a step asks its question) are refused: either way the Run fails, once, with
    // the refusal named, instead of the write being tried again forever.
    let wf = r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: one-at-a-time }
spec:
  execution: { concurrency: { limit: 1 } }
  steps:
    - name: hold
      input: { requests: [ { name: go, message: "Go?" } ] }
"#;
    for (phase, second_only) in [(RunPhase::Queued, true), (RunPhase::Waiting, false)] {
        let dir = support::harness::TempDir::new();
        std::fs::create_dir_all(dir.path().join("workflows")).unwrap();
        std::fs::write(dir.path().join("workflows/wf.yaml"), wf).unwrap();
        let executor = Arc::new(runway::steps::Executors::new(
            Arc::new(runway::steps::StaticSecrets::default()),
            &support::harness::local_egress(),
        ));
        let h = Harness::start_wrapped(dir, executor, 2, |inner| refusing(inner, phase));
        let first = h.create("one-at-a-time", json!({})).await;
        let first = first.metadata.name.unwrap();
        if second_only {
            h.wait_for(&first, "waiting", |r| r.phase() == RunPhase::Waiting)
                .await;
        }
        let name = match second_only {
            true => h
                .create("one-at-a-time", json!({}))
                .await
                .metadata
                .name
                .unwrap(),
            false => first,
        };
        let done = h
            .wait_for(&name, "failed", |r| r.phase().is_terminal())
            .await;
        assert_eq!(done.phase(), RunPhase::Failed, "{phase:?}");
        let error = done.status.unwrap().error.unwrap();
        assert!(
            error.message.contains("the store refused the run's status"),
            "{phase:?}: {error:?}"
        );
        h.stop().await;
    }
}

/// Two `http` steps one after the other, both calling `url`.
fn two_calls(url: &str) -> String {
    format!(
        "apiVersion: runway.dev/v1alpha1\nkind: Workflow\nmetadata: {{ name: two }}\nspec:\n  steps:\n    - name: first\n      http: {{ url: \"{url}/first\" }}\n    - name: second\n      http: {{ url: \"{url}/second\" }}\n"
    )
}

/// Run `name` as the database in `dir` holds it (no controller running).
async fn stored(dir: &support::harness::TempDir, name: &str) -> runway::api::Run {
    let store = runway::store::sqlite::SqliteStore::open(&dir.path().join("runs.db")).unwrap();
    store.get("default", name).await.unwrap().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_writes_the_call_that_ends_meanwhile_and_starts_nothing_new() {
    let mut server = gated_server().await;
    let dir = support::harness::workflows_dir(&[("two.yaml", &two_calls(&server.url))]);
    let drain = support::harness::PATIENCE;
    let h = Harness::start_draining(dir, Arc::new(real_executors()), drain);
    let name = h.create("two", json!({})).await.metadata.name.unwrap();
    assert_eq!(server.arrived.recv().await.as_deref(), Some("/first"));
    // Told to stop while the first call is on its way; its answer comes after.
    h.begin_stop();
    server.open.send_replace(true);
    let dir = h.stop().await;
    let steps = stored(&dir, &name).await.status.unwrap().steps;
    assert_eq!(steps[0].name, "first");
    assert_eq!(
        steps[0].phase,
        StepPhase::Succeeded,
        "written before the stop"
    );
    assert_eq!(server.counts.lock().unwrap().get("/second"), None);

    let h = Harness::start_in(dir);
    let done = h
        .wait_for(&name, "finished", |r| r.phase().is_terminal())
        .await;
    assert_eq!(done.phase(), RunPhase::Succeeded);
    let counts = server.counts.lock().unwrap().clone();
    assert_eq!(
        counts.get("/first"),
        Some(&1),
        "the first call was not sent again"
    );
    assert_eq!(counts.get("/second"), Some(&1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_writes_the_detached_outcome_that_comes_meanwhile() {
    let wf = r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: upstream }
spec:
  steps:
    - name: call
      tool: { server: { url: "http://upstream.example/mcp" }, name: work }
    - name: again
      tool: { server: { url: "http://upstream.example/mcp" }, name: work }
"#;
    let release = tokio_util::sync::CancellationToken::new();
    let exec = Arc::new(SlowUpstream::new(&release));
    let dir = support::harness::workflows_dir(&[("wf.yaml", wf)]);
    let drain = support::harness::PATIENCE;
    let h = Harness::start_draining(dir, exec.clone(), drain);
    let name = h.create("upstream", json!({})).await.metadata.name.unwrap();
    exec.entered.notified().await;
    h.begin_stop();
    release.cancel();
    let dir = h.stop().await;
    let steps = stored(&dir, &name).await.status.unwrap().steps;
    assert_eq!(steps[0].name, "call");
    assert_eq!(
        steps[0].phase,
        StepPhase::Succeeded,
        "written before the stop"
    );
    assert_eq!(exec.calls.load(std::sync::atomic::Ordering::SeqCst), 1);

    let h = Harness::start_with(dir, exec.clone(), 2);
    let done = h
        .wait_for(&name, "finished", |r| r.phase().is_terminal())
        .await;
    assert_eq!(done.phase(), RunPhase::Succeeded);
    let calls = exec.calls.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(
        calls, 2,
        "the first call was not made again, the second once"
    );
}
