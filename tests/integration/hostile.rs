//! A hostile tenant against the embedded server: Run bombs (Workflows that call themselves,
//! trees past their bounds), and markers anyone could forge (a pre-created child Run, a Run
//! dressed as a schedule's). Each of these once worked.

use crate::support;

use std::collections::BTreeMap;

use futures::StreamExt;
use runway::api::{Principal, Run, RunPhase, RunSpec, RunStatus, WorkflowRef, annotations, labels};
use runway::store::{RunStore, WatchEvent};
use serde_json::json;
use support::harness::PATIENCE;
use support::mcp::Mcp;

const WORKFLOWS: &str = r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: bomb, namespace: NS }
spec:
  tool: { description: Calls itself twice. }
  steps:
    - { name: again, forEach: { items: [1, 2] }, workflow: { name: bomb } }
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: ping, namespace: NS }
spec:
  tool: { description: Calls pong. }
  steps: [ { name: p, workflow: { name: pong } } ]
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: pong, namespace: NS }
spec:
  tool: { description: Calls ping. }
  steps: [ { name: p, workflow: { name: ping } } ]
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: wide, namespace: NS }
spec:
  tool: { description: "Ten branches of ten of ten leaves: 1,110 Runs below it." }
  steps:
    - { name: branch, forEach: { items: "{{ range(10) | list }}", parallelism: 10 }, workflow: { name: mid } }
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: mid, namespace: NS }
spec:
  tool: { description: Ten of ten leaves. }
  steps:
    - { name: branch, forEach: { items: "{{ range(10) | list }}", parallelism: 10 }, workflow: { name: sub } }
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: sub, namespace: NS }
spec:
  tool: { description: Ten leaves. }
  steps:
    - { name: leaves, forEach: { items: "{{ range(10) | list }}", parallelism: 10 }, workflow: { name: leaf } }
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: many, namespace: NS }
spec:
  tool: { description: Five hundred and ten leaves. }
  steps:
    - { name: leaves, forEach: { items: "{{ range(510) | list }}", parallelism: 100 }, workflow: { name: leaf } }
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: leaf, namespace: NS }
spec:
  tool: { description: Nothing. }
  execution: { ttlAfterFinished: 0s }
  result: { content: [ { type: text, text: "leaf" } ], structuredContent: { honest: true } }
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: parent, namespace: NS }
spec:
  tool: { description: "Waits a second, then starts a leaf." }
  execution: { ttlAfterFinished: 1s }
  steps:
    - { name: wait, delay: { duration: 1s } }
    - { name: child, workflow: { name: leaf } }
  result: { content: [ { type: text, text: "{{ steps.child.output }}" } ] }
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: mirrored, namespace: NS }
spec:
  tool:
    description: Its argument is mirrored in a header.
    inputSchema:
      type: object
      properties: { secretish: { type: string, x-mcp-header: Target } }
      required: [secretish]
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: nap, namespace: NS }
spec:
  tool: { description: An hour. }
  steps: [ { name: sleep, delay: { duration: 1h } } ]
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: kept, namespace: NS }
spec:
  tool: { description: Nothing; its Runs are kept. }
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: tick, namespace: NS }
spec:
  tool: { description: Every second. }
  schedules:
    - { name: every-second, cron: "* * * * * *", successfulRunsHistoryLimit: 1 }
"#;

async fn server() -> Mcp {
    Mcp::start(&[("wf.yaml", WORKFLOWS)]).await
}

fn ready(mcp: &Mcp, name: &str) -> (String, String) {
    let wf = mcp
        .server
        .as_ref()
        .unwrap()
        .workflows
        .snapshot()
        .into_iter()
        .find(|w| {
            w.metadata.name.as_deref() == Some(name)
                && w.metadata.namespace.as_deref() == Some("team-a")
        })
        .unwrap();
    let c = &wf.status.unwrap().conditions[0];
    (c.status.clone(), format!("{}: {}", c.reason, c.message))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workflows_that_call_themselves_are_refused() {
    let mcp = server().await;
    for name in ["bomb", "ping", "pong"] {
        let (status, why) = ready(&mcp, name);
        assert_eq!(status, "False", "{name}: {why}");
        assert!(why.starts_with("WorkflowCycle: "), "{name}: {why}");
    }
    assert!(ready(&mcp, "ping").1.contains("ping -> pong -> ping"));
    assert_eq!(ready(&mcp, "wide").0, "True");
    let alice = mcp.client("alice-token");
    assert_eq!(alice.call("bomb", json!({})).await.error_code(), -32602);
}

/// The Runs of team-a that are not a schedule's.
async fn tree(mcp: &Mcp) -> Vec<std::sync::Arc<Run>> {
    let all = mcp
        .store()
        .list(Some("team-a"), &BTreeMap::new())
        .await
        .unwrap();
    all.into_iter()
        .filter(|r| r.spec.workflow_ref.name != "tick")
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_tree_stops_at_its_bound_and_the_run_says_why() {
    let mcp = server().await;
    let alice = mcp.client("alice-token");
    let id = alice.call("wide", json!({})).await.result()["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let done = mcp.wait(&id, "finished", |r| r.phase().is_terminal()).await;
    assert_eq!(done.phase(), RunPhase::Failed);
    let t = alice.get(&id).await.result().clone();
    assert_eq!(t["status"], "failed", "{t}");
    assert!(
        t["error"]["message"]
            .as_str()
            .unwrap()
            .contains("run limit: this run's top-level run has 1000 runs below it"),
        "{t}"
    );
    let below = tree(&mcp)
        .await
        .into_iter()
        .filter(|r| r.metadata.name.as_deref() != Some(id.as_str()))
        .count();
    assert_eq!(
        below,
        runway::engine::budget::MAX_DESCENDANTS,
        "the tree stops at its bound"
    );
    // Children are kept while their top-level Run is (the leaves' ttl of 0s does not apply):
    // they are the count, and a restart cannot reset it.
    let dir = mcp.stop().await;
    let mcp = Mcp::start_in(dir).await;
    assert_eq!(
        tree(&mcp).await.len(),
        runway::engine::budget::MAX_DESCENDANTS + 1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_run_starts_a_bounded_number_of_children() {
    let mcp = server().await;
    let alice = mcp.client("alice-token");
    let id = alice.call("many", json!({})).await.result()["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let done = mcp.wait(&id, "finished", |r| r.phase().is_terminal()).await;
    assert_eq!(done.phase(), RunPhase::Failed);
    let t = alice.get(&id).await.result().clone();
    assert_eq!(t["error"]["data"]["reason"], "RunLimitExceeded", "{t}");
    let message = t["error"]["message"].as_str().unwrap();
    assert!(message.contains("this run started 500 child runs"), "{t}");
    assert_eq!(
        tree(&mcp).await.len(),
        runway::engine::budget::MAX_CHILDREN + 1
    );
}

/// A Run of `workflow` as someone with `create runs` writes it with kubectl, finished with
/// `result`.
async fn forged(
    mcp: &Mcp,
    name: &str,
    workflow: &str,
    labels: &[(&str, &str)],
    annotations: &[(&str, &str)],
    result: serde_json::Value,
) {
    let mut run = Run::new(
        name,
        RunSpec {
            workflow_ref: WorkflowRef {
                name: workflow.into(),
            },
            arguments: Some(json!({})),
            requested_by: Some(Principal {
                username: "mallory".into(),
                uid: None,
                groups: vec![],
            }),
            cancel: None,
            pause: None,
            retry_of: None,
            priority: None,
            input_responses: BTreeMap::new(),
        },
    );
    run.metadata.namespace = Some("team-a".into());
    run.metadata.labels = Some(
        labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    );
    run.metadata.annotations = Some(
        annotations
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    );
    mcp.store().create(run).await.unwrap();
    // The controller may write the Run's status first: write this one over it.
    loop {
        let mut run = mcp.store().get("team-a", name).await.unwrap().unwrap();
        run.status = Some(RunStatus {
            phase: RunPhase::Succeeded,
            finished_at: Some(jiff::Timestamp::now().to_string()),
            result: Some(result.clone().into()),
            ..Default::default()
        });
        match mcp.store().update_status(run).await {
            Ok(_) => return,
            Err(runway::store::StoreError::Conflict) => continue,
            Err(e) => panic!("{e}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pre_created_child_run_is_never_adopted() {
    let mcp = server().await;
    let alice = mcp.client("alice-token");
    let id = alice.call("parent", json!({})).await.result()["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let parent = mcp.wait(&id, "started", |r| r.metadata.uid.is_some()).await;
    let uid = parent.metadata.uid.clone().unwrap();
    // Mallory knows the child's name and the parent's uid, and gets there first.
    let child = runway::engine::child_run_name(&id, "child", 1);
    forged(
        &mcp,
        &child,
        "leaf",
        &[(labels::PARENT, &id), (labels::ROOT, &uid)],
        &[(annotations::PARENT_UID, &uid), (annotations::DEPTH, "1")],
        json!({"content": [], "structuredContent": {"stolen": true}}),
    )
    .await;
    let done = mcp.wait(&id, "finished", |r| r.phase().is_terminal()).await;
    assert_eq!(done.phase(), RunPhase::Failed);
    let step = &done.status.as_ref().unwrap().steps[1];
    assert!(
        step.message
            .as_deref()
            .unwrap_or_default()
            .contains("is not this step's child"),
        "{step:?}"
    );
    assert!(
        step.output.is_none(),
        "the forged result never reaches the parent"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_run_lives_as_long_as_its_top_level_run() {
    let mcp = server().await;
    let alice = mcp.client("alice-token");
    let rv = mcp.store().resource_version().await.unwrap();
    let mut watch = mcp.store().watch(Some(rv));
    let id = alice.call("parent", json!({})).await.result()["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let done = mcp.wait(&id, "finished", |r| r.phase().is_terminal()).await;
    assert_eq!(done.phase(), RunPhase::Succeeded, "{:?}", done.status);
    let child = done.status.as_ref().unwrap().steps[1]
        .child_run
        .clone()
        .unwrap();
    // The leaf's own ttl (0s) does not delete it; the parent's collection (1s) does.
    let deleted = tokio::time::timeout(PATIENCE, async {
        let mut deleted = Vec::new();
        while let Some(ev) = watch.next().await {
            // (The schedule of `tick` prunes its own Runs meanwhile.)
            if let WatchEvent::Deleted(r) = ev.unwrap()
                && r.spec.workflow_ref.name != "tick"
            {
                deleted.push(r.metadata.name.clone().unwrap());
                if deleted.len() == 2 {
                    return deleted;
                }
            }
        }
        deleted
    })
    .await
    .expect("both Runs collected");
    // The child first: a collection cut short between the two is found again through the
    // parent, which still stands.
    assert_eq!(deleted, vec![child, id], "the child first, then its parent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_dressed_as_a_schedules_neither_stops_it_nor_is_pruned_by_it() {
    let mcp = server().await;
    // A finished Run with the schedule's label, dated 2999: a schedule that believed it would
    // wait for the year 2999, and its history limit would delete the Run.
    forged(
        &mcp,
        "tick-forged",
        "tick",
        &[
            (labels::WORKFLOW, "tick"),
            (labels::SCHEDULE, "every-second"),
        ],
        &[(annotations::SCHEDULED_FOR, "2999-01-01T00:00:00Z")],
        json!({"content": []}),
    )
    .await;
    let rv = mcp.store().resource_version().await.unwrap();
    let mut watch = mcp.store().watch(Some(rv));
    let started = tokio::time::timeout(PATIENCE, async {
        let mut started = 0;
        while let Some(ev) = watch.next().await {
            if let WatchEvent::Applied(r) = ev.unwrap()
                && r.status.is_none()
                && r.spec.workflow_ref.name == "tick"
            {
                started += 1;
                if started == 3 {
                    return;
                }
            }
        }
    })
    .await;
    assert!(started.is_ok(), "the schedule goes on");
    let kept = mcp.store().get("team-a", "tick-forged").await.unwrap();
    assert!(
        kept.is_some(),
        "a Run the schedule did not start is not the schedule's to prune"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_steps_ignore_the_proxy_variables_of_the_environment() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    // The receiver the step posts to, and a proxy that would take the request instead.
    let hits = Arc::new(AtomicUsize::new(0));
    let h = hits.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move || {
            h.fetch_add(1, Ordering::SeqCst);
            async { axum::Json(json!({"ok": true})) }
        }),
    );
    let target = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let target_addr = target.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(target, app).await.unwrap() });
    let proxy = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy_url = format!("http://{}", proxy.local_addr().unwrap());
    let proxied = Arc::new(AtomicUsize::new(0));
    let p = proxied.clone();
    tokio::spawn(async move {
        while proxy.accept().await.is_ok() {
            p.fetch_add(1, Ordering::SeqCst);
        }
    });

    let dir = support::harness::TempDir::new();
    std::fs::create_dir_all(dir.path().join("workflows")).unwrap();
    std::fs::write(
        dir.path().join("workflows/hook.yaml"),
        format!(
            "apiVersion: runway.dev/v1alpha1\nkind: Workflow\nmetadata: {{ name: hook, namespace: team-a }}\nspec:\n  tool: {{ description: Posts a hook. }}\n  steps: [ {{ name: post, http: {{ method: POST, url: \"http://{target_addr}/hook\" }} }} ]\n"
        ),
    )
    .unwrap();
    std::fs::write(dir.path().join("auth.yaml"), support::mcp::AUTH).unwrap();
    let vars = [
        ("HTTP_PROXY", proxy_url.as_str()),
        ("http_proxy", proxy_url.as_str()),
        ("ALL_PROXY", proxy_url.as_str()),
        ("NO_PROXY", ""),
    ];
    let p = support::process::Process::start_env(dir.path(), 0, None, &vars).await;
    let alice = support::mcp::Client::new(&p.base(), Some("alice-token"), "/namespaces/team-a/mcp");
    let id = alice.call("hook", json!({})).await.result()["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let done = alice.await_status(&id, "completed").await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(
        hits.load(Ordering::SeqCst),
        1,
        "the step reached its URL directly"
    );
    assert_eq!(
        proxied.load(Ordering::SeqCst),
        0,
        "and not through the proxy"
    );
}

/// `levels` arrays, one inside the other.
fn nested(levels: usize) -> serde_json::Value {
    (0..levels).fold(json!(1), |v, _| json!([v]))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_nested_too_deeply_fails_alone_and_keeps_no_one_from_starting() {
    let mcp = server().await;
    // Written past MCP (as kubectl would on a cluster): arguments 200 levels deep, deeper than
    // a JSON parser reads by default, and an answer 40 deep.
    let mut deep = Run::new(
        "deep",
        RunSpec {
            workflow_ref: WorkflowRef {
                name: "kept".into(),
            },
            arguments: Some(json!({"x": nested(200)})),
            requested_by: Some(Principal {
                username: "mallory".into(),
                uid: None,
                groups: vec![],
            }),
            cancel: None,
            pause: None,
            retry_of: None,
            priority: None,
            input_responses: BTreeMap::new(),
        },
    );
    deep.metadata.namespace = Some("team-a".into());
    mcp.store().create(deep).await.unwrap();
    let failed = mcp
        .wait("deep", "failed", |r| r.phase().is_terminal())
        .await;
    assert_eq!(failed.phase(), RunPhase::Failed);
    let why = &failed.status.as_ref().unwrap().conditions[0].message;
    assert!(why.contains("nests deeper than 32 levels"), "{why}");
    // The server starts again with that Run stored, and reads it as unreadable.
    let dir = mcp.stop().await;
    let mcp = Mcp::start_in(dir).await;
    let again = mcp.store().get("team-a", "deep").await.unwrap().unwrap();
    assert_eq!(again.spec.arguments, Some(json!(runway::api::UNREADABLE)));
    assert_eq!(again.phase(), RunPhase::Failed);
    // Everyone else's calls go on (a Workflow whose Runs are kept: a leaf's is collected the
    // moment it ends, which may be before anyone follows it).
    let alice = mcp.client("alice-token");
    let id = alice.call("kept", json!({})).await.result()["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        alice.await_status(&id, "completed").await["status"],
        "completed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rendered_items_and_child_arguments_meet_the_depth_budget() {
    let mcp = Mcp::start(&[(
        "deep.yaml",
        r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: deep-items, namespace: NS }
spec:
  tool: { description: Items forty levels deep. }
  steps:
    - { name: each, forEach: { items: "{{ [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]] }}" }, delay: { duration: 1ms } }
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: deep-child, namespace: NS }
spec:
  tool: { description: A child with arguments forty levels deep. }
  steps:
    - { name: call, workflow: { name: plain, arguments: { x: "{{ [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]] }}" } } }
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: plain, namespace: NS }
spec:
  tool: { description: Nothing. }
"#,
    )])
    .await;
    let alice = mcp.client("alice-token");
    for (tool, what) in [
        ("deep-items", "forEach item"),
        ("deep-child", "workflow.arguments"),
    ] {
        let id = alice.call(tool, json!({})).await.result()["taskId"]
            .as_str()
            .unwrap()
            .to_owned();
        let done = mcp.wait(&id, "failed", |r| r.phase().is_terminal()).await;
        assert_eq!(done.phase(), RunPhase::Failed, "{tool}");
        let step = &done.status.as_ref().unwrap().steps[0];
        let message = step.message.clone().unwrap_or_default();
        assert!(
            message.contains(what) && message.contains("deeper than 32"),
            "{tool}: {message}"
        );
    }
    let children = mcp
        .store()
        .list(Some("team-a"), &BTreeMap::new())
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.spec.workflow_ref.name == "plain")
        .count();
    assert_eq!(children, 0, "no child Run was created");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_caller_cannot_hold_every_request_slot() {
    // 8 slots: 2 per principal, 4 per namespace.
    let mcp = Mcp::start_with(&[("wf.yaml", WORKFLOWS)], |c| c.max_concurrent_requests = 8).await;
    let alice = support::mcp::Old::connect(&mcp.url(), "alice-token", json!({})).await;
    // Two calls held on their streams (Runs of an hour), as many as alice's share.
    let mut held = Vec::new();
    for i in 0..2 {
        held.push(
            alice
                .open(
                    "tools/call",
                    json!({"name": "nap", "arguments": {}, "_meta": {"progressToken": i}}),
                )
                .await,
        );
    }
    let third = alice
        .post(&json!({"jsonrpc": "2.0", "id": 3, "method": "ping"}))
        .send()
        .await
        .unwrap();
    assert_eq!(third.status(), reqwest::StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(third.headers()["retry-after"], "1");
    let why = third.text().await.unwrap();
    assert!(why.contains("too many requests of this caller"), "{why}");
    // Another caller is served meanwhile.
    let bob = mcp.client("bob-token");
    assert_eq!(
        bob.rpc("tools/list", None, json!({})).await.status,
        reqwest::StatusCode::OK
    );
    // Once a held call ends, its share is back.
    drop(held.pop());
    let again = tokio::time::timeout(PATIENCE, async {
        loop {
            let r = alice
                .post(&json!({"jsonrpc": "2.0", "id": 4, "method": "ping"}))
                .send()
                .await
                .unwrap();
            if r.status() == reqwest::StatusCode::OK {
                return;
            }
            // The server notices the closed stream when it next writes to it (keep-alive).
            tokio::task::yield_now().await;
        }
    })
    .await;
    assert!(again.is_ok(), "alice's share came back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_without_rights_in_a_namespace_does_not_use_up_its_share() {
    // 4 slots: 1 per principal, 2 per namespace.
    let mcp = Mcp::start_with(&[("wf.yaml", WORKFLOWS)], |c| c.max_concurrent_requests = 4).await;
    // carol, who has no rights in team-a, sends a request there and never its body.
    let mut trickle = tokio::net::TcpStream::connect(mcp.addr).await.unwrap();
    let head = format!(
        "POST /namespaces/team-a/mcp HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer carol-token\r\n\
         Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
         Content-Length: 100\r\n\r\n",
        mcp.addr
    );
    tokio::io::AsyncWriteExt::write_all(&mut trickle, head.as_bytes())
        .await
        .unwrap();
    // Her request holds her share once her own next request is turned away.
    let carol = mcp.client("carol-token").at("/namespaces/team-b/mcp");
    let held = tokio::time::timeout(PATIENCE, async {
        while carol.rpc("tools/list", None, json!({})).await.status
            != reqwest::StatusCode::TOO_MANY_REQUESTS
        {
            tokio::task::yield_now().await;
        }
    })
    .await;
    assert!(held.is_ok(), "carol's trickled request holds her share");
    // One held call of team-a's own and team-a is still served: carol's request is not counted.
    let alice = support::mcp::Old::connect(&mcp.url(), "alice-token", json!({})).await;
    let _nap = alice
        .open(
            "tools/call",
            json!({"name": "nap", "arguments": {}, "_meta": {"progressToken": 1}}),
        )
        .await;
    let bob = mcp.client("bob-token");
    assert_eq!(
        bob.rpc("tools/list", None, json!({})).await.status,
        reqwest::StatusCode::OK
    );
    // Two held calls of team-a fill its share.
    let dave = support::mcp::Old::connect(&mcp.url(), "dave-token", json!({})).await;
    let _other = dave
        .open(
            "tools/call",
            json!({"name": "nap", "arguments": {}, "_meta": {"progressToken": 2}}),
        )
        .await;
    let r = bob.rpc("tools/list", None, json!({})).await;
    assert_eq!(r.status, reqwest::StatusCode::TOO_MANY_REQUESTS);
    assert!(
        r.last()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("caller or namespace")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_address_that_keeps_failing_to_authenticate_is_turned_away() {
    let mcp = server().await;
    let alice = mcp.client("alice-token");
    let namespaces = |token: String| {
        reqwest::Client::new()
            .get(format!("http://{}/ui/api/namespaces", mcp.addr))
            .bearer_auth(token)
            .send()
    };
    // The console's endpoint counts failures as the MCP endpoint does.
    for i in 0..50 {
        let status = if i % 2 == 0 {
            let guess = mcp.client(&format!("guess-{i}"));
            guess.rpc("tools/list", None, json!({})).await.status
        } else {
            namespaces(format!("guess-{i}")).await.unwrap().status()
        };
        assert_eq!(status, reqwest::StatusCode::UNAUTHORIZED);
    }
    // From the same address, even a good token waits for the window to pass, on both.
    let r = alice.rpc("tools/list", None, json!({})).await;
    assert_eq!(r.status, reqwest::StatusCode::TOO_MANY_REQUESTS);
    assert!(
        r.last()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("failed authentications")
    );
    let r = namespaces("alice-token".into()).await.unwrap();
    assert_eq!(r.status(), reqwest::StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(r.headers()["retry-after"], "1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_reason_is_kept_to_its_documented_length() {
    let mcp = server().await;
    let alice = mcp.client("alice-token");
    let id = alice.call("nap", json!({})).await.result()["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let reason = "é".repeat(300_000);
    let r = alice
        .call("runway_cancel_run", json!({"taskId": id, "reason": reason}))
        .await;
    assert!(r.last().get("error").is_none(), "{:?}", r.messages);
    let run = mcp
        .wait(&id, "cancel recorded", |r| r.spec.cancel.is_some())
        .await;
    let kept = run.spec.cancel.unwrap().reason.unwrap();
    assert_eq!(kept.chars().count(), 1024);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_without_rights_learns_no_argument_names_from_header_checks() {
    let mcp = server().await;
    let args = json!({"secretish": "x"});
    // carol has no rights in team-a; rita may only read runs.
    for token in ["carol-token", "reader-token"] {
        let r = mcp.client(token).call("mirrored", args.clone()).await;
        let error = r.last()["error"].clone();
        assert_ne!(error["code"], -32020, "{token}: {error}");
        let text = error.to_string();
        assert!(
            !text.contains("Target") && !text.contains("secretish"),
            "{token}: {text}"
        );
    }
    // Who may call the tool is told what is missing.
    let r = mcp.client("alice-token").call("mirrored", args).await;
    assert_eq!(r.error_code(), -32020, "{:?}", r.messages);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotent_replay_finds_only_the_callers_own_run() {
    // Two principals of one name, told apart by their uids (a user deleted and made again).
    let dir = Mcp::prepare(&[("wf.yaml", WORKFLOWS)]);
    let auth = support::mcp::AUTH.replace(
        "tokens:\n",
        "tokens:\n  - { token: old-ada, user: ada, uid: u-1, groups: [dev], namespace: team-a }\n  - { token: new-ada, user: ada, uid: u-2, groups: [dev], namespace: team-a }\n",
    );
    std::fs::write(dir.path().join("auth.yaml"), auth).unwrap();
    let mcp = Mcp::start_in(dir).await;
    let key = json!({"dev.runway/idempotencyKey": "deploy-7"});
    let call = |token: &str| {
        let c = mcp.client(token);
        let key = key.clone();
        async move {
            c.rpc(
                "tools/call",
                Some("nap"),
                json!({"name": "nap", "arguments": {}, "_meta": key}),
            )
            .await
        }
    };
    let first = call("old-ada").await;
    let id = first.result()["taskId"].as_str().unwrap().to_owned();
    // The same caller's retry finds her Run.
    assert_eq!(call("old-ada").await.result()["taskId"], id.as_str());
    // The namesake gets a refusal that says nothing of it.
    let other = call("new-ada").await;
    assert_eq!(other.error_code(), -32602, "{:?}", other.messages);
    let text = other.last()["error"].to_string();
    assert!(!text.contains(&id), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answering_on_an_mrtr_retry_needs_the_right_to_answer() {
    // Tess may call tools and read Runs; she may update them until her rights change between
    // a round and its retry: then she may not answer, by any road.
    let dir = Mcp::prepare(&[(
        "wf.yaml",
        r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: confirm, namespace: NS }
spec:
  tool: { description: Asks before it goes on. }
  execution: { mode: sync }
  steps:
    - name: ask
      input:
        requests:
          - { name: ok, message: "Go?", requestedSchema: { type: object, properties: { yes: { type: boolean } } } }
"#,
    )]);
    let auth = |verbs: &str| {
        support::mcp::AUTH
            .replace(
                "tokens:\n",
                "tokens:\n  - { token: tess-token, user: tess, groups: [callers], namespace: team-a }\n",
            )
            .replace(
                "rules:\n",
                &format!("rules:\n  - {{ groups: [callers], namespaces: [team-a], resources: [runs], verbs: [{verbs}] }}\n  - {{ groups: [callers], namespaces: [team-a], resources: [workflows], verbs: [get, list] }}\n"),
            )
    };
    std::fs::write(dir.path().join("auth.yaml"), auth("get, create, update")).unwrap();
    let mcp = Mcp::start_in(dir).await;
    let tess = mcp
        .client("tess-token")
        .with_caps(json!({"elicitation": {}}));
    let round = tess.call("confirm", json!({})).await;
    let res = round.result().clone();
    assert_eq!(res["resultType"], "input_required", "{res}");
    let key = res["inputRequests"]
        .as_object()
        .unwrap()
        .keys()
        .next()
        .unwrap()
        .clone();
    // Her right to update Runs is taken away before she answers.
    let dir = mcp.stop().await;
    std::fs::write(dir.path().join("auth.yaml"), auth("get, create")).unwrap();
    let mcp = Mcp::start_in(dir).await;
    let tess = mcp
        .client("tess-token")
        .with_caps(json!({"elicitation": {}}));
    let retry = tess
        .rpc(
            "tools/call",
            Some("confirm"),
            json!({"name": "confirm", "arguments": {},
                "inputResponses": {key.clone(): {"action": "accept", "content": {"yes": true}}},
                "requestState": res["requestState"]}),
        )
        .await;
    assert_eq!(retry.error_code(), -32003, "{:?}", retry.messages);
    let runs = mcp
        .store()
        .list(Some("team-a"), &BTreeMap::new())
        .await
        .unwrap();
    let run = runs
        .iter()
        .find(|r| r.spec.workflow_ref.name == "confirm")
        .unwrap();
    assert!(run.spec.input_responses.is_empty(), "no answer recorded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_consoles_namespace_list_counts_against_the_callers_share() {
    // Four slots: a quarter of them, one request, is a principal's share.
    let mcp = Mcp::start_with(&[("wf.yaml", WORKFLOWS)], |c| c.max_concurrent_requests = 4).await;
    let namespaces = |token: &str| {
        reqwest::Client::new()
            .get(format!("http://{}/ui/api/namespaces", mcp.addr))
            .bearer_auth(token)
            .send()
    };
    assert_eq!(namespaces("alice-token").await.unwrap().status(), 200);
    // A held call of alice's holds her share: her next request of the list waits its turn.
    let alice = support::mcp::Old::connect(&mcp.url(), "alice-token", json!({})).await;
    let _nap = alice
        .open(
            "tools/call",
            json!({"name": "nap", "arguments": {}, "_meta": {"progressToken": 1}}),
        )
        .await;
    let refused = namespaces("alice-token").await.unwrap();
    assert_eq!(refused.status(), reqwest::StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(refused.headers()["retry-after"], "1");
    // Another caller's share is hers to use.
    assert_eq!(namespaces("bob-token").await.unwrap().status(), 200);
}
