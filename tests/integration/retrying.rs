//! Retrying a failed Run from its failed step through `runway_retry_run`, in both protocol
//! eras, and Runs written with a `retryOf` directly (as kubectl would), on the embedded store.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use axum::http::{HeaderMap, StatusCode};
use runway::api::{PauseRequest, Principal, RetryOf, RunPhase};
use runway::store::RunStore;
use serde_json::{Value, json};
use support::mcp::{Client, Mcp, Old};

/// An upstream whose `/build` always answers and whose `/deploy` fails until it is fixed,
/// counting both and keeping the deploys' idempotency keys.
struct Upstream {
    url: String,
    fixed: Arc<AtomicBool>,
    builds: Arc<AtomicUsize>,
    deploy_keys: Arc<std::sync::Mutex<Vec<String>>>,
}

async fn upstream() -> Upstream {
    let fixed = Arc::new(AtomicBool::new(false));
    let builds = Arc::new(AtomicUsize::new(0));
    let keys = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (f, b, k) = (fixed.clone(), builds.clone(), keys.clone());
    let app = axum::Router::new()
        .route(
            "/build",
            axum::routing::post(move || {
                let b = b.clone();
                async move {
                    b.fetch_add(1, Ordering::SeqCst);
                    (StatusCode::OK, r#"{"image": "v7"}"#)
                }
            }),
        )
        .route(
            "/deploy",
            axum::routing::post(move |headers: HeaderMap| {
                let (f, k) = (f.clone(), k.clone());
                async move {
                    let key = headers
                        .get("idempotency-key")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default()
                        .to_owned();
                    k.lock().unwrap().push(key);
                    if f.load(Ordering::SeqCst) {
                        (StatusCode::OK, "{}")
                    } else {
                        (StatusCode::BAD_REQUEST, "quota exceeded")
                    }
                }
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    Upstream {
        url: format!("http://{addr}"),
        fixed,
        builds,
        deploy_keys: keys,
    }
}

fn pipeline(url: &str) -> String {
    format!(
        r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: {{ name: pipeline, namespace: NS }}
spec:
  tool:
    description: Builds, then deploys.
    inputSchema:
      type: object
      properties: {{ env: {{ type: string, enum: [staging, prod] }} }}
  steps:
    - name: build
      http: {{ url: "{url}/build", method: POST }}
    - name: deploy
      http: {{ url: "{url}/deploy", method: POST, body: {{ env: "{{{{ args.env }}}}" }} }}
  result: {{ content: [ {{ type: text, text: "deployed {{{{ steps.build.output.body.image }}}}" }} ] }}
"#
    )
}

async fn failed_run(mcp: &Mcp, c: &Client) -> String {
    let r = c.call("pipeline", json!({"env": "staging"})).await;
    let id = r.result()["taskId"].as_str().unwrap().to_owned();
    let run = mcp.wait(&id, "finished", |r| r.phase().is_terminal()).await;
    assert_eq!(run.phase(), RunPhase::Failed, "{:?}", run.status);
    id
}

fn structured(r: &support::mcp::Reply) -> Value {
    r.result()["structuredContent"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_run_is_retried_from_its_failed_step_in_either_era() {
    let up = upstream().await;
    let mcp = Mcp::start(&[("wf.yaml", &pipeline(&up.url))]).await;
    let alice = mcp.client("alice-token");
    let first = failed_run(&mcp, &alice).await;
    assert_eq!(up.builds.load(Ordering::SeqCst), 1);

    up.fixed.store(true, Ordering::SeqCst);
    let r = alice
        .call("runway_retry_run", json!({"taskId": first}))
        .await;
    let answer = structured(&r);
    assert_eq!(answer["retryOf"], first.as_str(), "{:?}", r.last());
    assert_eq!(answer["reused"], json!(["build"]));
    let retry = answer["taskId"].as_str().unwrap().to_owned();
    assert_ne!(retry, first, "a retry is a task of its own");
    let task = alice.await_status(&retry, "completed").await;
    assert_eq!(task["status"], "completed");
    let done = alice.get(&retry).await;
    assert_eq!(
        done.result()["result"]["content"][0]["text"],
        "deployed v7",
        "the reused step's output is read as if it had run: {:?}",
        done.last()
    );
    assert_eq!(
        up.builds.load(Ordering::SeqCst),
        1,
        "build was not sent again"
    );
    let run = mcp.store().get("team-a", &retry).await.unwrap().unwrap();
    let st = run.status.as_ref().unwrap();
    assert_eq!(st.steps[0].reused_from.as_deref(), Some(first.as_str()));
    assert_eq!(run.spec.retry_of.as_ref().unwrap().name, first);
    let keys = up.deploy_keys.lock().unwrap().clone();
    let uid = |r: &runway::api::Run| r.metadata.uid.clone().unwrap();
    let original = mcp.store().get("team-a", &first).await.unwrap().unwrap();
    assert_eq!(
        keys,
        [
            format!("{}/deploy", uid(&original)),
            format!("{}/deploy", uid(&run))
        ]
    );
    let view = alice.call("runway_get_run", json!({"taskId": retry})).await;
    assert_eq!(structured(&view)["retryOf"]["name"], first.as_str());
    assert!(view.event_reasons().contains(&"StepsReused".to_owned()));
    // Retries are found by their label.
    let listed = alice
        .call(
            "runway_list_runs",
            json!({"labels": format!("runway.dev/retry-of={first}")}),
        )
        .await
        .listed();
    assert_eq!(listed, std::slice::from_ref(&retry));

    // A 2025-era session retries with an argument changed: the deploy reads it, the build
    // does not, so the build is still reused.
    up.fixed.store(false, Ordering::SeqCst);
    let second = failed_run(&mcp, &alice).await;
    up.fixed.store(true, Ordering::SeqCst);
    let old = Old::connect(&mcp.url(), "alice-token", json!({})).await;
    let r = old
        .result(
            "tools/call",
            json!({"name": "runway_retry_run", "arguments": {"taskId": second, "arguments": {"env": "prod"}}}),
        )
        .await;
    assert_eq!(r["structuredContent"]["reused"], json!(["build"]), "{r}");
    let again = r["structuredContent"]["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let run = mcp
        .wait(&again, "finished", |r| r.phase().is_terminal())
        .await;
    assert_eq!(run.phase(), RunPhase::Succeeded);
    assert_eq!(run.spec.arguments, Some(json!({"env": "prod"})));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_is_refused_with_a_reason() {
    let up = upstream().await;
    let mcp = Mcp::start(&[("wf.yaml", &pipeline(&up.url))]).await;
    let (alice, olga) = (mcp.client("alice-token"), mcp.client("olga-token"));
    let first = failed_run(&mcp, &alice).await;
    let refused = |r: &support::mcp::Reply, why: &str| {
        assert_eq!(r.error_code(), -32602, "{:?}", r.last());
        let message = r.last()["error"]["message"].as_str().unwrap().to_owned();
        assert!(message.contains(why), "{message}");
    };
    // olga may see every Run, but the answers and outputs were given for alice; arguments
    // that do not validate get her the same refusal, not a message quoting alice's arguments.
    let r = olga
        .call("runway_retry_run", json!({"taskId": first}))
        .await;
    refused(&r, "requested by alice");
    let r = olga
        .call(
            "runway_retry_run",
            json!({"taskId": first, "arguments": {"env": "moon"}}),
        )
        .await;
    refused(&r, "requested by alice");
    let r = alice
        .call("runway_retry_run", json!({"taskId": "no-such-run"}))
        .await;
    refused(&r, "unknown task");
    let r = alice
        .call(
            "runway_retry_run",
            json!({"taskId": first, "arguments": {"env": "moon"}}),
        )
        .await;
    refused(&r, "is not one of");
    // A Run still running is not retried.
    up.fixed.store(true, Ordering::SeqCst);
    let r = alice
        .call("runway_retry_run", json!({"taskId": first}))
        .await;
    let retry = structured(&r)["taskId"].as_str().unwrap().to_owned();
    let r = alice
        .call("runway_retry_run", json!({"taskId": retry}))
        .await;
    refused(&r, "has not failed");

    // The build step changes: its output may no longer be what the Workflow makes.
    up.fixed.store(false, Ordering::SeqCst);
    let second = failed_run(&mcp, &alice).await;
    let changed = pipeline(&up.url)
        .replace("/build\", method: POST", "/build?v=2\", method: POST")
        .replace("namespace: NS", "namespace: team-a");
    std::fs::write(mcp.dir.path().join("workflows/wf.yaml"), changed).unwrap();
    assert!(mcp.server.as_ref().unwrap().workflows.reload());
    let r = alice
        .call("runway_retry_run", json!({"taskId": second}))
        .await;
    refused(&r, "step build changed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_written_directly_is_checked_by_the_controller() {
    let up = upstream().await;
    let mcp = Mcp::start(&[("wf.yaml", &pipeline(&up.url))]).await;
    let alice = mcp.client("alice-token");
    let first = failed_run(&mcp, &alice).await;
    let original = mcp.store().get("team-a", &first).await.unwrap().unwrap();
    let write = |name: &str, who: &str, of: &str| {
        let mut r = support::contract::run("team-a", name, "pipeline");
        r.spec.arguments = original.spec.arguments.clone();
        r.spec.requested_by = Some(Principal {
            username: who.into(),
            uid: None,
            groups: vec![],
        });
        r.spec.retry_of = Some(RetryOf {
            name: of.into(),
            uid: None,
        });
        r
    };
    up.fixed.store(true, Ordering::SeqCst);
    // Written paused, it waits unstarted; a restart in between changes nothing.
    let mut paused = write("by-hand", "alice", &first);
    paused.spec.pause = Some(PauseRequest {
        paused: true,
        reason: None,
        requested_by: Some("alice".into()),
        requested_at: Some("2026-01-01T00:00:00Z".into()),
    });
    mcp.store().create(paused).await.unwrap();
    mcp.wait("by-hand", "waiting paused", |r| {
        r.status.as_ref().is_some_and(|s| s.paused.is_some())
    })
    .await;
    let dir = mcp.stop().await;
    let mcp = Mcp::start_in(dir).await;
    let mut resumed = mcp.store().get("team-a", "by-hand").await.unwrap().unwrap();
    resumed.spec.pause = Some(PauseRequest {
        paused: false,
        reason: None,
        requested_by: Some("alice".into()),
        requested_at: Some("2026-01-01T00:01:00Z".into()),
    });
    // Unconditional: the controller may write the Run's status meanwhile, never its spec.
    resumed.metadata.resource_version = None;
    mcp.store().update(resumed).await.unwrap();
    let done = mcp
        .wait("by-hand", "finished", |r| r.phase().is_terminal())
        .await;
    assert_eq!(done.phase(), RunPhase::Succeeded, "{:?}", done.status);
    assert_eq!(up.builds.load(Ordering::SeqCst), 1);

    for (name, who, of, why) in [
        ("not-hers", "bob", first.as_str(), "requested by alice"),
        ("of-nothing", "alice", "gone-run", "was not found"),
    ] {
        mcp.store().create(write(name, who, of)).await.unwrap();
        let run = mcp
            .wait(name, "finished", |r| r.phase().is_terminal())
            .await;
        let st = run.status.unwrap();
        assert_eq!(st.phase, RunPhase::Failed);
        assert!(st.steps.is_empty() && st.started_at.is_none(), "{st:?}");
        let text = st.result.unwrap().to_value()["content"][0]["text"].clone();
        assert!(text.as_str().unwrap().contains(why), "{text}");
    }
}
