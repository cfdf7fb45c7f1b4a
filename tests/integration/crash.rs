//! Process-level crashes: `kill -9` of `runway serve` mid-run, then a restart on the same
//! database. Every Run finishes, exactly once.

use crate::support;

use std::collections::BTreeMap;

use serde_json::{Value, json};
use support::harness::{PATIENCE, TempDir};
use support::mcp::{AUTH, Client};
use support::process::Process;

const WORKFLOWS: &str = r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: nap, namespace: team-a }
spec:
  tool: { description: "Sleeps, durably." }
  steps:
    - { name: sleep, delay: { duration: "{{ args.ms }}ms" } }
  result: { content: [ { type: text, text: "slept {{ args.ms }}" } ] }
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: ask, namespace: team-a }
spec:
  tool: { description: Waits for an answer. }
  steps:
    - name: q
      input: { requests: [ { name: go, message: "go?" } ] }
  result: { content: [ { type: text, text: "answered" } ] }
"#;

fn setup() -> TempDir {
    let dir = TempDir::new();
    std::fs::create_dir_all(dir.path().join("workflows")).unwrap();
    std::fs::write(dir.path().join("workflows/wf.yaml"), WORKFLOWS).unwrap();
    std::fs::write(dir.path().join("auth.yaml"), AUTH).unwrap();
    dir
}

fn client(p: &Process) -> Client {
    Client::new(&p.base(), Some("alice-token"), "/namespaces/team-a/mcp")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_survive_kill_9_and_finish_exactly_once() {
    let dir = setup();
    let p = Process::start(dir.path(), 0).await;
    let port = p.port;
    let c = client(&p);
    let mut naps = Vec::new();
    for i in 0..5 {
        naps.push(c.call("nap", json!({"ms": 1500 + i * 100})).await.task_id());
    }
    let ask = c.call("ask", json!({})).await.task_id();
    // every Run has started before the crash
    for id in naps.iter().chain([&ask]) {
        c.await_task(id, "started", |t| t.get("statusMessage").is_some())
            .await;
    }
    let before: BTreeMap<String, Value> = {
        let mut m = BTreeMap::new();
        for id in &naps {
            m.insert(id.clone(), c.get(id).await.result().clone());
        }
        m
    };
    p.kill9().await;

    let p = Process::start(dir.path(), port).await;
    let c = client(&p);
    // the task is still readable after the crash
    let t = c.get(&ask).await;
    assert_eq!(t.result()["status"], "input_required");
    c.update(&ask, json!({"q.go": {"action": "accept", "content": {}}}))
        .await;

    // follow all tasks to the end on one listen stream
    let ids: Vec<&String> = naps.iter().chain([&ask]).collect();
    let body = json!({"jsonrpc": "2.0", "id": 2, "method": "subscriptions/listen",
        "params": {"_meta": c.meta(), "notifications": {"taskIds": ids}}});
    let resp = c
        .request("subscriptions/listen", None)
        .json(&body)
        .send()
        .await
        .unwrap();
    let text = tokio::time::timeout(PATIENCE, resp.text())
        .await
        .expect("all tasks finish")
        .unwrap();
    let frames: Vec<Value> = support::mcp::parse_body("text/event-stream", &text);
    let mut completed: BTreeMap<String, usize> = BTreeMap::new();
    for f in &frames {
        if f["method"] == "notifications/tasks" && f["params"]["status"] == "completed" {
            *completed
                .entry(f["params"]["taskId"].as_str().unwrap().to_owned())
                .or_default() += 1;
        }
    }
    for id in &ids {
        assert_eq!(completed.get(*id), Some(&1), "{id} completed exactly once");
    }
    // the same Runs, each with one attempt of its step; nothing was duplicated
    for (id, old) in &before {
        let t = c.get(id).await.result().clone();
        assert_eq!(t["createdAt"], old["createdAt"]);
        assert!(
            t["result"]["content"][0]["text"]
                .as_str()
                .unwrap()
                .starts_with("slept")
        );
    }
    let list = c.rpc("tools/list", None, json!({})).await;
    let workflows = list.result()["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| !t["name"].as_str().unwrap().starts_with("runway_"))
        .count();
    assert_eq!(workflows, 2);
    p.kill9().await;
    let runs = runway::store::sqlite::SqliteStore::open(&dir.path().join("runs.db")).unwrap();
    let all = runway::store::RunStore::list(&runs, Some("team-a"), &Default::default())
        .await
        .unwrap();
    assert_eq!(all.len(), 6, "no Run lost or duplicated");
    for r in all {
        let st = r.status.as_ref().unwrap();
        assert_eq!(st.steps.len(), 1);
        assert_eq!(st.steps[0].attempt, 1);
    }
}

const HELLO: &str = r#"
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: hello, namespace: team-a }
spec:
  tool: { inputSchema: { type: object, properties: { name: { type: string } } } }
  execution: { mode: sync }
  elicit:
    - key: who
      message: Your name?
      requestedSchema: { type: object, properties: { name: { type: string } }, required: [name] }
  result:
    content: [ { type: text, text: "Hello, {{ args.name }}!" } ]
"#;

/// `tools/call` of `nap` under an idempotency key; the task id.
async fn idempotent_nap(c: &Client, key: &str) -> String {
    let r = c
        .rpc(
            "tools/call",
            Some("nap"),
            json!({"name": "nap", "arguments": {"ms": 10}, "_meta": {"dev.runway/idempotencyKey": key}}),
        )
        .await;
    r.task_id()
}

/// The `requestState` of an argument question.
async fn question(c: &Client) -> String {
    let r = c.call("hello", json!({})).await;
    r.result()["requestState"].as_str().unwrap().to_owned()
}

async fn answer(c: &Client, state: &str) -> support::mcp::Reply {
    c.rpc(
        "tools/call",
        Some("hello"),
        json!({"name": "hello", "arguments": {},
            "inputResponses": {"who": {"action": "accept", "content": {"name": "Ada"}}},
            "requestState": state}),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_state_key_survives_restarts_and_rotates_with_an_overlap() {
    let dir = setup();
    std::fs::write(dir.path().join("workflows/hello.yaml"), HELLO).unwrap();
    let caps = json!({"extensions": {support::mcp::TASKS: {}}, "elicitation": {}});

    // No key file: the key lives in the database, so a restart changes nothing.
    let p = Process::start_keyed(dir.path(), 0, None).await;
    let port = p.port;
    let c = client(&p).with_caps(caps.clone());
    let first = idempotent_nap(&c, "k1").await;
    let open = question(&c).await;
    p.kill9().await;
    let p = Process::start_keyed(dir.path(), port, None).await;
    let c = client(&p).with_caps(caps.clone());
    assert_eq!(idempotent_nap(&c, "k1").await, first, "same key, same Run");
    assert_eq!(
        answer(&c, &open).await.result()["content"][0]["text"],
        "Hello, Ada!",
        "a requestState from before the restart still opens"
    );
    p.kill9().await;

    // Rotation: a new key first, the old one kept for the overlap.
    let old = "the-old-state-key-of-at-least-32-bytes";
    let new = "the-new-state-key-of-at-least-32-bytes";
    let keys = dir.path().join("keys");
    std::fs::write(&keys, format!("{old}\n")).unwrap();
    let p = Process::start_keyed(dir.path(), port, Some(&keys)).await;
    let c = client(&p).with_caps(caps.clone());
    let before = idempotent_nap(&c, "k2").await;
    let sealed_old = question(&c).await;
    p.kill9().await;
    std::fs::write(&keys, format!("{new}\n{old}\n")).unwrap();
    let p = Process::start_keyed(dir.path(), port, Some(&keys)).await;
    let c = client(&p).with_caps(caps.clone());
    assert_eq!(
        idempotent_nap(&c, "k2").await,
        before,
        "found under the old key"
    );
    assert_eq!(
        answer(&c, &sealed_old).await.result()["content"][0]["text"],
        "Hello, Ada!"
    );
    let sealed_new = question(&c).await;
    p.kill9().await;
    // The overlap ends: the old key is gone.
    std::fs::write(&keys, format!("{new}\n")).unwrap();
    let p = Process::start_keyed(dir.path(), port, Some(&keys)).await;
    let c = client(&p).with_caps(caps);
    assert_eq!(answer(&c, &sealed_old).await.error_code(), -32602);
    assert_eq!(
        answer(&c, &sealed_new).await.result()["content"][0]["text"],
        "Hello, Ada!"
    );
    p.kill9().await;

    // A key that is too short is refused at start.
    std::fs::write(&keys, "short\n").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_runway"))
        .args(["serve", "--workflows"])
        .arg(dir.path().join("workflows"))
        .arg("--db")
        .arg(dir.path().join("runs.db"))
        .arg("--no-auth")
        .arg("--state-key-file")
        .arg(&keys)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("shorter than 32 bytes"));
}
