//! Every Workflow of `examples/`, run the way its header says, on `runway serve` — with the
//! example's placeholder hosts pointed at a local receiver, and `upstream.yaml`'s at a second
//! server serving the same examples. What a new user copies first must work.

use crate::support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use support::harness::TempDir;
use support::mcp::Client;
use support::process::{Process, free_port};
use tokio::sync::watch;

/// One request a receiver got.
#[derive(Debug, Clone)]
struct Received {
    path: String,
    headers: BTreeMap<String, String>,
    body: Value,
}

/// A receiver for every path: it answers `{"ok": true}` and keeps what it got.
struct Receiver {
    base: String,
    got: Arc<Mutex<Vec<Received>>>,
    changes: watch::Receiver<usize>,
}

impl Receiver {
    async fn start() -> Self {
        let got: Arc<Mutex<Vec<Received>>> = Arc::default();
        let (tx, changes) = watch::channel(0usize);
        let tx = Arc::new(tx);
        let kept = got.clone();
        let app = axum::Router::new().fallback(
            move |uri: http::Uri, headers: http::HeaderMap, body: axum::body::Bytes| {
                let (kept, tx) = (kept.clone(), tx.clone());
                async move {
                    let headers = headers
                        .iter()
                        .filter_map(|(k, v)| Some((k.to_string(), v.to_str().ok()?.to_owned())))
                        .collect();
                    kept.lock().unwrap().push(Received {
                        path: uri.path().to_owned(),
                        headers,
                        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
                    });
                    tx.send_modify(|n| *n += 1);
                    axum::Json(json!({"ok": true}))
                }
            },
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self {
            base: format!("http://{addr}"),
            got,
            changes,
        }
    }

    /// Wait (on each request) until one to `path` came; it is returned.
    async fn wait_for(&self, path: &str) -> Received {
        let mut changes = self.changes.clone();
        tokio::time::timeout(support::harness::PATIENCE, async {
            loop {
                if let Some(r) = self.got.lock().unwrap().iter().find(|r| r.path == path) {
                    return r.clone();
                }
                changes.changed().await.unwrap();
            }
        })
        .await
        .unwrap_or_else(|_| panic!("nothing came to {path}: {:?}", self.got.lock().unwrap()))
    }
}

/// The auth file of the example headers, together: requesters, approvers in each group the
/// examples name, and the Secrets they read.
const AUTH: &str = r#"
tokens:
  - { token: dev-token, user: dana, groups: [dev], namespace: default }
  - { token: ops-token, user: olga, groups: [ops], namespace: default }
  - { token: sec-token, user: sam, groups: [security], namespace: default }
  - { token: fin-token, user: fay, groups: [finance], namespace: default }
rules:
  - { groups: [dev, ops, security, finance], namespaces: [default], resources: ["*"], verbs: ["*"] }
secrets:
  default/webhook: { token: "Bearer s3cret" }
  default/upstream: { token: "Bearer dev-token" }
"#;

/// A server directory with every example, its placeholder hosts pointed at `receiver` and its
/// upstream at `upstream`.
fn examples(receiver: &str, upstream: &str) -> TempDir {
    let dir = TempDir::new();
    let wf = dir.path().join("workflows");
    std::fs::create_dir_all(&wf).unwrap();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    for entry in std::fs::read_dir(&root).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path)
            .unwrap()
            .replace("https://hooks.example.com", &format!("{receiver}/hooks"))
            .replace("https://ci.example", &format!("{receiver}/ci"))
            .replace("https://chat.example", &format!("{receiver}/chat"))
            .replace("https://deploy.example", &format!("{receiver}/deploy"))
            .replace("http://127.0.0.1:8081/mcp", upstream);
        std::fs::write(wf.join(path.file_name().unwrap()), text).unwrap();
    }
    std::fs::write(dir.path().join("auth.yaml"), AUTH).unwrap();
    std::fs::write(
        dir.path().join("state.key"),
        "an-examples-state-key-of-32-bytes-or-more",
    )
    .unwrap();
    dir
}

fn as_user(p: &Process, token: &str) -> Client {
    Client::new(&p.base(), Some(token), "/mcp")
}

fn task(r: &support::mcp::Reply) -> String {
    r.result()["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("not a task: {:?}", r.messages))
        .to_owned()
}

fn text(done: &Value) -> &str {
    done["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_example_runs_as_its_header_says() {
    let receiver = Receiver::start().await;
    let upstream_port = free_port();
    let upstream_url = format!("http://127.0.0.1:{upstream_port}/mcp");
    let upstream_dir = examples(&receiver.base, &upstream_url);
    let _upstream = Process::start(upstream_dir.path(), upstream_port).await;
    let dir = examples(&receiver.base, &upstream_url);
    let p = Process::start(dir.path(), 0).await;
    let (dana, olga, sam, fay) = (
        as_user(&p, "dev-token"),
        as_user(&p, "ops-token"),
        as_user(&p, "sec-token"),
        as_user(&p, "fin-token"),
    );

    // Every example but the cluster-only one is a tool here.
    let tools: Vec<String> = dana.rpc("tools/list", None, json!({})).await.result()["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect();
    for tool in [
        "approve-deploy",
        "long-job",
        "wait",
        "check-quota",
        "notify",
        "release-notes",
        "nightly-report",
        "rollout",
        "release",
        "ship",
        "triage",
        "upstream-release",
    ] {
        assert!(tools.contains(&tool.to_owned()), "{tool} not in {tools:?}");
    }
    assert!(
        !tools.iter().any(|t| t == "deploy-pipeline"),
        "job steps need a cluster"
    );

    // approval.yaml: olga (ops) approves dana's deployment.
    let id = task(&dana.call("approve-deploy", json!({"service": "api"})).await);
    olga.await_status(&id, "input_required").await;
    olga.update(
        &id,
        json!({"approval.decision": {"action": "accept", "content": {"approve": true}}}),
    )
    .await
    .assert_complete();
    let done = dana.await_status(&id, "completed").await;
    assert!(text(&done).contains("api"), "{done}");

    // http.yaml: the caller picks a channel, the Workflow the host; the Secret's header goes
    // there and nowhere else.
    let id = task(
        &dana
            .call("notify", json!({"channel": "releases", "text": "hi"}))
            .await,
    );
    let done = dana.await_status(&id, "completed").await;
    assert_eq!(text(&done), "Delivered: HTTP 200");
    let hook = receiver.wait_for("/hooks/runway/releases").await;
    assert_eq!(hook.headers["authorization"], "Bearer s3cret");
    assert_eq!(hook.body["text"], "hi");
    let hostile = dana
        .call("notify", json!({"channel": "../../elsewhere", "text": "x"}))
        .await;
    // A tool error the model is shown: the channel is one path segment.
    let refused = hostile.result();
    assert_eq!(refused["isError"], true, "{refused}");
    assert!(
        refused["content"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with("invalid arguments"),
        "{refused}"
    );

    // failure.yaml: a tool error, then a protocol error.
    let id = task(&dana.call("check-quota", json!({"team": "payments"})).await);
    let done = dana.await_status(&id, "completed").await;
    assert_eq!(done["result"]["isError"], true);
    let id = task(
        &dana
            .call("check-quota", json!({"team": "payments", "hard": true}))
            .await,
    );
    let failed = dana.await_status(&id, "failed").await;
    assert_eq!(failed["error"]["code"], -31050);

    // delay.yaml, nightly-report.yaml (an ordinary tool too).
    let id = task(&dana.call("wait", json!({"seconds": 1})).await);
    assert_eq!(
        text(&dana.await_status(&id, "completed").await),
        "Waited 1 seconds."
    );
    let id = task(
        &dana
            .call("nightly-report", json!({"team": "platform"}))
            .await,
    );
    assert_eq!(
        text(&dana.await_status(&id, "completed").await),
        "Report for platform gathered."
    );

    // multi-input.yaml: two questions at once, answered separately.
    let id = task(&dana.call("release-notes", json!({"version": "1.2"})).await);
    dana.await_status(&id, "input_required").await;
    dana.update(
        &id,
        json!({"form.summary": {"action": "accept", "content": {"text": "faster"}}}),
    )
    .await
    .assert_complete();
    dana.update(
        &id,
        json!({"form.risk": {"action": "accept", "content": {"level": "low"}}}),
    )
    .await
    .assert_complete();
    assert_eq!(
        text(&dana.await_status(&id, "completed").await),
        "1.2: faster (risk low)"
    );

    // cancellable.yaml: cancelled, after its finally step.
    let id = task(&dana.call("long-job", json!({})).await);
    dana.cancel(&id).await;
    dana.await_status(&id, "cancelled").await;

    // one-deploy-per-env.yaml: a second prod rollout waits behind the first; staging does not.
    let first = task(
        &dana
            .call("rollout", json!({"environment": "prod", "version": "1.4"}))
            .await,
    );
    let second = task(
        &dana
            .call("rollout", json!({"environment": "prod", "version": "1.5"}))
            .await,
    );
    let staging = task(
        &dana
            .call(
                "rollout",
                json!({"environment": "staging", "version": "1.5"}),
            )
            .await,
    );
    // A Run under a limit is created bare and queued by the controller: awaited, not polled
    // once.
    let queued = dana
        .await_task(&second, "its place in the queue", |t| {
            t["statusMessage"]
                .as_str()
                .is_some_and(|m| m.contains("queued"))
        })
        .await;
    assert_eq!(queued["status"], "working", "{queued}");
    for id in [&first, &second, &staging] {
        dana.cancel(id).await;
        dana.await_status(id, "cancelled").await;
    }

    // parallel-release.yaml: both sign-offs (other people than dana), the build, then a child
    // Run shipping to every region.
    let id = task(
        &dana
            .call(
                "release",
                json!({"version": "2.1", "regions": ["eu", "us", "ap", "sa"]}),
            )
            .await,
    );
    sam.await_status(&id, "input_required").await;
    sam.update(
        &id,
        json!({"security.ok": {"action": "accept", "content": {}}}),
    )
    .await
    .assert_complete();
    fay.update(
        &id,
        json!({"finance.ok": {"action": "accept", "content": {}}}),
    )
    .await
    .assert_complete();
    let done = dana.await_status(&id, "completed").await;
    assert_eq!(text(&done), "2.1 shipped to 4 regions");
    receiver.wait_for("/ci/builds").await;
    for region in ["eu", "us", "ap", "sa"] {
        receiver
            .wait_for(&format!("/deploy/regions/{region}"))
            .await;
    }
    receiver.wait_for("/chat/hooks/releases").await;

    // triage.yaml: the caller's model rates it, a person confirms.
    let agent = as_user(&p, "dev-token")
        .with_caps(json!({"extensions": {"io.modelcontextprotocol/tasks": {}}, "sampling": {}}));
    let id = task(&agent.call("triage", json!({"report": "db down"})).await);
    agent.await_status(&id, "input_required").await;
    agent
        .update(
            &id,
            json!({"classify.sample": {"role": "assistant", "model": "m-1",
                "content": {"type": "text", "text": "sev1"}}}),
        )
        .await
        .assert_complete();
    agent
        .await_task(&id, "the confirmation", |t| {
            t["inputRequests"].get("confirm.page").is_some()
        })
        .await;
    agent
        .update(
            &id,
            json!({"confirm.page": {"action": "accept", "content": {"page": true}}}),
        )
        .await
        .assert_complete();
    assert_eq!(
        text(&agent.await_status(&id, "completed").await),
        "Rated sev1 by m-1; page: true."
    );

    // upstream.yaml: an upstream task followed to its end, then the upstream's questions
    // asked here and forwarded.
    let id = task(
        &dana
            .call("upstream-release", json!({"version": "1.3", "seconds": 1}))
            .await,
    );
    let asked = dana
        .await_task(&id, "the upstream's questions", |t| {
            t["inputRequests"].as_object().is_some_and(|q| q.len() == 2)
        })
        .await;
    let keys: Vec<String> = asked["inputRequests"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    let summary = keys.iter().find(|k| k.contains("summary")).unwrap();
    let risk = keys.iter().find(|k| k.contains("risk")).unwrap();
    dana.update(
        &id,
        json!({summary: {"action": "accept", "content": {"text": "notes"}},
            risk: {"action": "accept", "content": {"level": "medium"}}}),
    )
    .await
    .assert_complete();
    assert_eq!(
        text(&dana.await_status(&id, "completed").await),
        "1.3: notes (risk medium)"
    );
}
