//! Steps at the same time, `forEach` items and child Runs on the embedded server, over MCP:
//! the bound on items in progress, outputs in order, one request per item and key, two
//! questions open at once, a cancel reaching every branch and child, the nesting bound, and
//! a restart in the middle of a fan-out.

use crate::support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::extract::{Path, State};
use axum::http::HeaderMap;
use runway::api::{Run, RunPhase, StepPhase, annotations, labels};
use runway::store::RunStore;
use serde_json::{Value, json};
use support::harness::PATIENCE;
use support::mcp::Mcp;
use tokio::sync::{Semaphore, watch};

/// An upstream whose `/work/{item}` requests wait for a permit: the test decides when each
/// ends, and reads how many were in progress at once and the keys they carried.
#[derive(Clone)]
struct Upstream {
    permits: Arc<Semaphore>,
    state: Arc<Mutex<Seen>>,
    changed: Arc<watch::Sender<u64>>,
}

#[derive(Default)]
struct Seen {
    in_progress: usize,
    most_at_once: usize,
    keys: BTreeMap<String, Vec<String>>,
}

impl Upstream {
    async fn start() -> (String, Upstream) {
        let up = Upstream {
            permits: Arc::new(Semaphore::new(0)),
            state: Arc::default(),
            changed: Arc::new(watch::channel(0).0),
        };
        let app = axum::Router::new()
            .route("/work/{item}", axum::routing::post(work))
            .with_state(up.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        (format!("http://{addr}"), up)
    }

    fn seen<T>(&self, f: impl FnOnce(&Seen) -> T) -> T {
        f(&self.state.lock().unwrap())
    }

    /// Wait until `pred` holds of what the upstream has seen.
    async fn until(&self, what: &str, pred: impl Fn(&Seen) -> bool) {
        let mut rx = self.changed.subscribe();
        tokio::time::timeout(PATIENCE, async {
            while !self.seen(&pred) {
                rx.changed().await.unwrap();
            }
        })
        .await
        .unwrap_or_else(|_| panic!("upstream never saw: {what}"));
    }

    fn release(&self, n: usize) {
        self.permits.add_permits(n);
    }
}

async fn work(
    State(up): State<Upstream>,
    Path(item): Path<String>,
    headers: HeaderMap,
) -> axum::Json<Value> {
    let key = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    {
        let mut s = up.state.lock().unwrap();
        s.in_progress += 1;
        s.most_at_once = s.most_at_once.max(s.in_progress);
        s.keys.entry(item.clone()).or_default().push(key);
    }
    up.changed.send_modify(|n| *n += 1);
    // Ends when released, or when the caller goes away (the guard counts it out).
    struct Leave(Upstream);
    impl Drop for Leave {
        fn drop(&mut self) {
            self.0.state.lock().unwrap().in_progress -= 1;
            self.0.changed.send_modify(|n| *n += 1);
        }
    }
    let _leave = Leave(up.clone());
    up.permits.acquire().await.unwrap().forget();
    axum::Json(json!({"done": item}))
}

fn workflows(url: &str) -> String {
    format!(
        r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: {{ name: regions, namespace: NS }}
spec:
  tool: {{ description: "Deploy to each region, two at a time." }}
  steps:
    - name: deploy
      forEach: {{ items: "{{{{ args.regions }}}}", parallelism: 2 }}
      http: {{ method: POST, url: "{url}/work/{{{{ item }}}}" }}
  result:
    content: [ {{ type: text, text: "{{{{ steps.deploy.output | length }}}} regions" }} ]
    structuredContent: {{ done: "{{{{ steps.deploy.output }}}}" }}
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: {{ name: release, namespace: NS }}
spec:
  tool: {{ description: Two sign-offs and a build at once. }}
  steps:
    - name: security
      dependsOn: []
      input: {{ requests: [ {{ name: ok, message: "Security sign-off?" }} ] }}
    - name: finance
      dependsOn: []
      input: {{ requests: [ {{ name: ok, message: "Finance sign-off?" }} ] }}
    - name: build
      dependsOn: []
      http: {{ method: POST, url: "{url}/work/build" }}
    - name: ship
      dependsOn: [security, finance, build]
      workflow: {{ name: ship, arguments: {{ version: "{{{{ args.version }}}}" }} }}
  result:
    content: [ {{ type: text, text: "shipped {{{{ steps.ship.output.shipped }}}}" }} ]
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: {{ name: ship, namespace: NS }}
spec:
  tool: {{ description: Ship one version. }}
  steps:
    - name: push
      http: {{ method: POST, url: "{url}/work/ship-{{{{ args.version }}}}" }}
  result:
    content: [ {{ type: text, text: "shipped" }} ]
    structuredContent: {{ shipped: "{{{{ args.version }}}}" }}
"#
    ) + &nesting()
}

/// `nest-0` calls `nest-1`, which calls `nest-2`, … down to `nest-9`: one level more than
/// child Runs may nest.
fn nesting() -> String {
    (0..10)
        .map(|i| {
            let step = if i < 9 {
                format!("  steps: [ {{ name: deeper, workflow: {{ name: nest-{} }} }} ]\n", i + 1)
            } else {
                String::new()
            };
            format!(
                "---\napiVersion: runway.dev/v1alpha1\nkind: Workflow\nmetadata: {{ name: nest-{i}, namespace: NS }}\nspec:\n  tool: {{ description: \"Level {i}.\" }}\n{step}"
            )
        })
        .collect()
}

async fn server(url: &str) -> Mcp {
    Mcp::start(&[("wf.yaml", &workflows(url))]).await
}

async fn run(mcp: &Mcp, name: &str) -> Run {
    mcp.store().get("team-a", name).await.unwrap().unwrap()
}

/// A `release` whose build is under way and whose two sign-offs are given.
async fn signed_release(alice: &support::mcp::Client, up: &Upstream, version: &str) -> String {
    let id = alice
        .call("release", json!({"version": version}))
        .await
        .task_id();
    up.until("the build runs", |s| s.in_progress == 1).await;
    alice
        .update(
            &id,
            json!({"finance.ok": {"action": "accept", "content": {}},
                   "security.ok": {"action": "accept", "content": {}}}),
        )
        .await
        .assert_complete();
    id
}

fn step_phase(run: &Run, step: &str) -> Option<StepPhase> {
    run.status
        .as_ref()?
        .steps
        .iter()
        .find(|r| r.name == step)
        .map(|r| r.phase)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn for_each_keeps_its_bound_and_returns_outputs_in_order() {
    let (url, up) = Upstream::start().await;
    let mcp = server(&url).await;
    let alice = mcp.client("alice-token");
    let regions = ["eu", "us", "ap", "sa", "af", "me"];
    let id = alice
        .call("regions", json!({"regions": regions}))
        .await
        .task_id();
    up.until("two items at once", |s| s.in_progress == 2).await;
    let waiting = mcp
        .wait(&id, "progress shown", |r| {
            r.status.as_ref().and_then(|s| s.status_message.as_deref())
                == Some("step 1/1: deploy (0/6 items done)")
        })
        .await;
    assert_eq!(waiting.phase(), RunPhase::Running);
    // All may end now, in whatever order: the bound still holds and the order of the
    // outputs is the order of the items.
    up.release(regions.len());
    mcp.wait(&id, "finished", |r| r.phase().is_terminal()).await;
    let t = alice.get(&id).await.result().clone();
    assert_eq!(t["status"], "completed", "{t}");
    assert_eq!(t["result"]["content"][0]["text"], "6 regions");
    let expected: Vec<Value> = regions.iter().map(|r| json!({"done": r})).collect();
    let outputs: Vec<Value> = t["result"]["structuredContent"]["done"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["body"].clone())
        .collect();
    assert_eq!(outputs, expected);
    assert_eq!(up.seen(|s| s.most_at_once), 2);
    // One request per item, each under the item's own key.
    let uid = run(&mcp, &id).await.metadata.uid.unwrap();
    up.seen(|s| {
        for (i, r) in regions.iter().enumerate() {
            assert_eq!(s.keys[*r], [format!("{uid}/deploy[{i}]")], "{r}");
        }
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_sign_offs_at_once_then_a_child_run_as_the_same_requester() {
    let (url, up) = Upstream::start().await;
    let mcp = server(&url).await;
    let alice = mcp.client("alice-token");
    let id = alice
        .call("release", json!({"version": "1.2"}))
        .await
        .task_id();
    mcp.wait(&id, "both ask", |r| {
        r.status
            .as_ref()
            .is_some_and(|s| s.input_requests.len() == 2)
    })
    .await;
    let t = alice.get(&id).await.result().clone();
    assert_eq!(t["status"], "input_required");
    let mut keys: Vec<&str> = t["inputRequests"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort();
    assert_eq!(keys, ["finance.ok", "security.ok"]);
    up.until("the build runs meanwhile", |s| s.in_progress == 1)
        .await;

    alice
        .update(
            &id,
            json!({"finance.ok": {"action": "accept", "content": {}}}),
        )
        .await
        .assert_complete();
    mcp.wait(&id, "finance done", |r| {
        step_phase(r, "finance") == Some(StepPhase::Succeeded)
    })
    .await;
    let t = alice.get(&id).await.result().clone();
    assert_eq!(t["status"], "input_required", "security still asks");
    assert_eq!(
        t["inputRequests"]
            .as_object()
            .unwrap()
            .keys()
            .collect::<Vec<_>>(),
        ["security.ok"]
    );
    alice
        .update(
            &id,
            json!({"security.ok": {"action": "accept", "content": {}}}),
        )
        .await
        .assert_complete();
    up.release(1);
    let parent = mcp
        .wait(&id, "the child started", |r| {
            r.status
                .as_ref()
                .is_some_and(|s| s.steps.iter().any(|x| x.child_run.is_some()))
        })
        .await;
    let child_name = format!("{id}-ship-1");
    let child = mcp
        .wait(&child_name, "the child runs", |r| {
            r.phase() == RunPhase::Running
        })
        .await;
    assert_eq!(child.spec.requested_by, parent.spec.requested_by);
    assert_eq!(child.spec.arguments, Some(json!({"version": "1.2"})));
    let l = child.metadata.labels.clone().unwrap();
    assert_eq!(l[labels::PARENT], id);
    let a = child.metadata.annotations.clone().unwrap();
    assert_eq!(
        a[annotations::PARENT_UID],
        parent.metadata.uid.clone().unwrap()
    );
    assert_eq!(a[annotations::DEPTH], "1");
    // The requester sees the child as their own task.
    assert_eq!(alice.get(&child_name).await.result()["status"], "working");
    up.release(1);
    mcp.wait(&id, "finished", |r| r.phase().is_terminal()).await;
    let t = alice.get(&id).await.result().clone();
    assert_eq!(t["status"], "completed", "{t}");
    assert_eq!(t["result"]["content"][0]["text"], "shipped 1.2");
    // Someone else sees neither.
    let dave = mcp.client("dave-token");
    assert!(dave.get(&child_name).await.last().get("error").is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_reaches_every_branch_and_the_child() {
    let (url, up) = Upstream::start().await;
    let mcp = server(&url).await;
    let alice = mcp.client("alice-token");
    let id = signed_release(&alice, &up, "2.0").await;
    mcp.wait(&id, "both signed", |r| {
        step_phase(r, "security") == Some(StepPhase::Succeeded)
            && step_phase(r, "finance") == Some(StepPhase::Succeeded)
    })
    .await;
    // The build is in flight: cancel now.
    alice.cancel(&id).await.assert_complete();
    let done = mcp
        .wait(&id, "cancelled", |r| r.phase().is_terminal())
        .await;
    assert_eq!(done.phase(), RunPhase::Cancelled);
    assert_eq!(step_phase(&done, "build"), Some(StepPhase::Cancelled));
    assert_eq!(step_phase(&done, "ship"), None);
    up.until("the build request was abandoned", |s| s.in_progress == 0)
        .await;

    // A parent cancelled while its child runs cancels the child.
    let id = signed_release(&alice, &up, "3.0").await;
    up.release(1);
    mcp.wait(&id, "ship starts", |r| {
        step_phase(r, "ship") == Some(StepPhase::Running)
    })
    .await;
    let child_name = format!("{id}-ship-1");
    mcp.wait(&child_name, "the child pushes", |r| {
        step_phase(r, "push") == Some(StepPhase::Running)
    })
    .await;
    up.until("the push runs", |s| s.keys.contains_key("ship-3.0"))
        .await;
    alice.cancel(&id).await.assert_complete();
    let child = mcp
        .wait(&child_name, "the child ends", |r| r.phase().is_terminal())
        .await;
    assert_eq!(child.phase(), RunPhase::Cancelled);
    let why = child.spec.cancel.clone().unwrap();
    assert_eq!(why.requested_by.as_deref(), Some("alice"));
    assert!(why.reason.unwrap().contains(&id));
    let parent = mcp
        .wait(&id, "cancelled", |r| r.phase().is_terminal())
        .await;
    assert_eq!(parent.phase(), RunPhase::Cancelled);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn children_nest_eight_deep_at_most() {
    let (url, _up) = Upstream::start().await;
    let mcp = server(&url).await;
    let alice = mcp.client("alice-token");
    let id = alice.call("nest-0", json!({})).await.task_id();
    let done = mcp.wait(&id, "failed", |r| r.phase().is_terminal()).await;
    assert_eq!(done.phase(), RunPhase::Failed);
    let all = mcp
        .store()
        .list(Some("team-a"), &BTreeMap::new())
        .await
        .unwrap();
    let nested: Vec<&Run> = all
        .iter()
        .map(|r| &**r)
        .filter(|r| r.spec.workflow_ref.name.starts_with("nest-"))
        .collect();
    assert_eq!(nested.len(), 9, "the top Run and eight children");
    let deepest = nested
        .iter()
        .find(|r| {
            r.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(annotations::DEPTH))
                == Some(&"8".to_owned())
        })
        .unwrap();
    let message = deepest.status.as_ref().unwrap().conditions[0]
        .message
        .clone();
    assert!(message.contains("nest deeper than 8"), "{message}");
    // A limit of the Run tree is the server's, not the tool's: the task fails.
    let t = alice.get(&id).await.result().clone();
    assert_eq!(t["status"], "failed", "{t}");
    assert!(
        t["error"]["message"]
            .as_str()
            .unwrap()
            .contains("run limit"),
        "{t}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_in_the_middle_of_a_fan_out_redoes_nothing_that_ended() {
    let (url, up) = Upstream::start().await;
    let mcp = server(&url).await;
    let alice = mcp.client("alice-token");
    let id = alice
        .call("regions", json!({"regions": ["eu", "us", "ap", "sa"]}))
        .await
        .task_id();
    up.until("two items at once", |s| s.in_progress == 2).await;
    up.release(1);
    mcp.wait(&id, "one item done", |r| {
        r.status.as_ref().is_some_and(|s| {
            s.steps
                .iter()
                .any(|x| x.name.starts_with("deploy[") && x.phase == StepPhase::Succeeded)
        })
    })
    .await;
    up.until("the third item started", |s| s.keys.len() == 3)
        .await;
    let before = run(&mcp, &id).await;
    let ended: Vec<String> = before
        .status
        .as_ref()
        .unwrap()
        .steps
        .iter()
        .filter(|x| x.phase == StepPhase::Succeeded)
        .map(|x| x.name.clone())
        .collect();
    assert_eq!(ended.len(), 1);
    let dir = mcp.stop().await;
    up.until("the stopped server's requests are gone", |s| {
        s.in_progress == 0
    })
    .await;
    let mcp = Mcp::start_in(dir).await;
    up.release(10);
    let done = mcp.wait(&id, "finished", |r| r.phase().is_terminal()).await;
    assert_eq!(done.phase(), RunPhase::Succeeded);
    let deploy = done
        .status
        .as_ref()
        .unwrap()
        .steps
        .iter()
        .find(|x| x.name == "deploy")
        .unwrap()
        .clone();
    let items: Vec<Value> = deploy
        .output
        .unwrap()
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["body"]["done"].clone())
        .collect();
    assert_eq!(items, [json!("eu"), json!("us"), json!("ap"), json!("sa")]);
    let uid = done.metadata.uid.unwrap();
    up.seen(|s| {
        for (i, r) in ["eu", "us", "ap", "sa"].iter().enumerate() {
            let keys = &s.keys[*r];
            let item = format!("deploy[{i}]");
            // Every request of an item carries the same key; what had ended is not asked again.
            assert!(
                keys.iter().all(|k| *k == format!("{uid}/{item}")),
                "{r}: {keys:?}"
            );
            if ended.contains(&item) {
                assert_eq!(keys.len(), 1, "{r} had ended before the restart");
            }
        }
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_while_a_child_runs_finds_the_same_child() {
    let (url, up) = Upstream::start().await;
    let mcp = server(&url).await;
    let alice = mcp.client("alice-token");
    let id = signed_release(&alice, &up, "4.0").await;
    up.release(1);
    let child = format!("{id}-ship-1");
    up.until("the child pushes", |s| s.keys.contains_key("ship-4.0"))
        .await;
    let dir = mcp.stop().await;
    up.until("the stopped server's requests are gone", |s| {
        s.in_progress == 0
    })
    .await;
    let mcp = Mcp::start_in(dir).await;
    up.release(1);
    let done = mcp.wait(&id, "finished", |r| r.phase().is_terminal()).await;
    assert_eq!(done.phase(), RunPhase::Succeeded);
    let children: Vec<Run> = mcp
        .store()
        .list(Some("team-a"), &BTreeMap::new())
        .await
        .unwrap()
        .into_iter()
        .map(|r| (*r).clone())
        .filter(|r| r.spec.workflow_ref.name == "ship")
        .collect();
    assert_eq!(
        children.len(),
        1,
        "one child, found again after the restart"
    );
    assert_eq!(children[0].metadata.name.as_deref(), Some(child.as_str()));
    let uid = children[0].metadata.uid.clone().unwrap();
    // The child's step ran again under its own key, the same both times.
    up.seen(|s| {
        let keys = &s.keys["ship-4.0"];
        assert!(keys.iter().all(|k| *k == format!("{uid}/push")), "{keys:?}");
    });
}

const KEPT: &str = r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: parent, namespace: NS }
spec:
  tool: { description: Runs a child; kept a second once finished. }
  execution: { ttlAfterFinished: 1s }
  steps: [ { name: sub, workflow: { name: child } } ]
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: child, namespace: NS }
spec:
  tool: { description: Waits long; cleans up for two seconds. }
  steps: [ { name: wait, delay: { duration: 1h } } ]
  finally: [ { name: tidy, delay: { duration: 2s } } ]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_run_is_deleted_only_after_its_children_have_finished() {
    let mcp = Mcp::start(&[("kept.yaml", KEPT)]).await;
    let alice = mcp.client("alice-token");
    let id = alice.call("parent", json!({})).await.task_id();
    let child = format!("{id}-sub-1");
    mcp.wait(&child, "the child waits", |r| {
        step_phase(r, "wait") == Some(StepPhase::Running)
    })
    .await;
    alice.cancel(&id).await.assert_complete();
    // The child's `finally` outlasts the parent's time to live: the child is not deleted
    // (nor archived) in the middle of it, and ends as it would have.
    let ended = mcp
        .wait(&child, "the child ends", |r| r.phase().is_terminal())
        .await;
    assert_eq!(ended.phase(), RunPhase::Cancelled);
    assert_eq!(step_phase(&ended, "tidy"), Some(StepPhase::Succeeded));
    // Then both go.
    let mut changes = mcp.store().watch(None);
    let gone = async {
        loop {
            let left = [&id, &child].map(|n| mcp.store().get("team-a", n));
            let [a, b] = futures::future::join_all(left).await.try_into().unwrap();
            if a.unwrap().is_none() && b.unwrap().is_none() {
                return;
            }
            futures::StreamExt::next(&mut changes).await;
        }
    };
    tokio::time::timeout(PATIENCE, gone)
        .await
        .expect("the parent and its child are deleted once both have finished");
}
