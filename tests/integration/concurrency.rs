//! Concurrency limits on the embedded store, over MCP: Runs past a Workflow's limit wait in
//! phase `Queued` and start in request order as others finish or the limit rises, per key,
//! across a restart.

use crate::support;

use runway::api::{Run, RunPhase};
use serde_json::json;
use support::mcp::{Client, Mcp};

const WORKFLOWS: &str = r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: deploy, namespace: NS }
spec:
  tool: { description: One deploy per environment at a time. }
  execution: { concurrency: { limit: 1, key: "{{ args.env }}" } }
  steps:
    - name: hold
      input:
        requests:
          - { name: go, message: "Deploy to {{ args.env }}?" }
  result: { content: [ { type: text, text: "deployed {{ args.env }}" } ] }
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: brief, namespace: NS }
spec:
  tool: { description: "One at a time, for one second at most, then a long cleanup." }
  execution: { timeout: 1s, concurrency: { limit: 1 } }
  steps: [ { name: sleep, delay: { duration: 1h } } ]
  finally: [ { name: cleanup, delay: { duration: 5s } } ]
"#;

async fn server() -> Mcp {
    Mcp::start(&[("wf.yaml", WORKFLOWS)]).await
}

async fn deploy(c: &Client, env: &str) -> String {
    let r = c.call("deploy", json!({"env": env})).await;
    r.result()["taskId"].as_str().unwrap().to_owned()
}

/// Why a finished Run ended, for those who read the Run (its task's statusMessage says only how).
fn finished_message(run: &Run) -> String {
    run.status
        .as_ref()
        .and_then(|s| s.conditions.first())
        .map(|c| c.message.clone())
        .unwrap_or_default()
}

fn message(run: &Run) -> String {
    run.status
        .as_ref()
        .and_then(|s| s.status_message.clone())
        .unwrap_or_default()
}

fn queued_behind(n: usize) -> impl Fn(&Run) -> bool {
    move |r: &Run| {
        r.phase() == RunPhase::Queued
            && message(r).starts_with(&format!("queued behind {n} run(s)"))
    }
}

async fn phase(mcp: &Mcp, task: &str) -> RunPhase {
    runway::store::RunStore::get(mcp.store(), "team-a", task)
        .await
        .unwrap()
        .unwrap()
        .phase()
}

async fn go(c: &Client, task: &str) {
    c.update(
        task,
        json!({"hold.go": {"action": "accept", "content": {}}}),
    )
    .await
    .assert_complete();
}

/// A prod deploy waiting for its answer, holding the one prod slot.
async fn holding_prod(mcp: &Mcp, alice: &Client) -> String {
    let first = deploy(alice, "prod").await;
    mcp.wait(&first, "first asks", |r| r.phase() == RunPhase::Waiting)
        .await;
    first
}

/// A prod deploy holding the slot and a second one queued behind it.
async fn prod_line(mcp: &Mcp, alice: &Client) -> (String, String) {
    let first = holding_prod(mcp, alice).await;
    let second = deploy(alice, "prod").await;
    mcp.wait(&second, "second queued", queued_behind(1)).await;
    (first, second)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_past_the_limit_queue_and_start_in_request_order() {
    let mcp = server().await;
    let alice = mcp.client("alice-token");
    let first = holding_prod(&mcp, &alice).await;
    let second = deploy(&alice, "prod").await;
    let third = deploy(&alice, "prod").await;
    let q2 = mcp.wait(&second, "second queued", queued_behind(1)).await;
    assert_eq!(
        message(&q2),
        "queued behind 1 run(s): at most 1 at once for prod"
    );
    mcp.wait(&third, "third queued", queued_behind(2)).await;
    // Over MCP a queued Run is a working task that says why it waits; no step has run.
    let t = alice.get(&second).await;
    assert_eq!(t.result()["status"], "working");
    assert!(
        t.result()["statusMessage"]
            .as_str()
            .unwrap()
            .starts_with("queued behind 1")
    );
    assert!(q2.status.as_ref().unwrap().steps.is_empty());
    // Another environment is not held up.
    let staging = deploy(&alice, "staging").await;
    mcp.wait(&staging, "staging asks", |r| r.phase() == RunPhase::Waiting)
        .await;

    go(&alice, &first).await;
    mcp.wait(&first, "first done", |r| r.phase() == RunPhase::Succeeded)
        .await;
    mcp.wait(&second, "second starts", |r| r.phase() == RunPhase::Waiting)
        .await;
    mcp.wait(&third, "third moves up", queued_behind(1)).await;

    // Cancelling a queued Run ends it, never started; the Run ahead of it is not disturbed.
    alice.cancel(&third).await.assert_complete();
    let cancelled = mcp
        .wait(&third, "third cancelled", |r| {
            r.phase() == RunPhase::Cancelled
        })
        .await;
    let st = cancelled.status.as_ref().unwrap();
    assert!(st.steps.is_empty() && st.workflow.is_none(), "{st:?}");
    assert_eq!(message(&cancelled), "cancelled");
    assert!(finished_message(&cancelled).starts_with("cancelled by alice while queued"));
    assert_eq!(phase(&mcp, &second).await, RunPhase::Waiting);
    go(&alice, &second).await;
    mcp.wait(&second, "second done", |r| r.phase() == RunPhase::Succeeded)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_raised_limit_starts_queued_runs_though_no_run_ends() {
    let mcp = server().await;
    let alice = mcp.client("alice-token");
    let (first, second) = prod_line(&mcp, &alice).await;
    // From here no Run of the group ends, so no end wakes the queued one: it starts because it
    // is looked at again while it waits.
    let raised = WORKFLOWS
        .replace("limit: 1, key", "limit: 2, key")
        .replace("namespace: NS", "namespace: team-a");
    std::fs::write(mcp.dir.path().join("workflows/wf.yaml"), raised).unwrap();
    mcp.wait(&second, "second starts under the raised limit", |r| {
        r.phase() == RunPhase::Waiting
    })
    .await;
    assert_eq!(phase(&mcp, &first).await, RunPhase::Waiting);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_survives_a_restart() {
    let mcp = server().await;
    let alice = mcp.client("alice-token");
    let (first, second) = prod_line(&mcp, &alice).await;
    let dir = mcp.stop().await;

    let mcp = Mcp::start_in(dir).await;
    let alice = mcp.client("alice-token");
    let third = deploy(&alice, "prod").await;
    mcp.wait(&third, "third queued behind both", queued_behind(2))
        .await;
    assert_eq!(phase(&mcp, &second).await, RunPhase::Queued);
    go(&alice, &first).await;
    mcp.wait(&second, "second starts after the restart", |r| {
        r.phase() == RunPhase::Waiting
    })
    .await;
    mcp.wait(&third, "third moves up", queued_behind(1)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_queued_past_its_deadline_fails_without_running() {
    let mcp = server().await;
    let alice = mcp.client("alice-token");
    let mut ids = Vec::new();
    for _ in 0..2 {
        let r = alice.call("brief", json!({})).await;
        ids.push(r.result()["taskId"].as_str().unwrap().to_owned());
    }
    mcp.wait(&ids[1], "second queued", queued_behind(1)).await;
    // The first holds its slot past both deadlines (its `finally` step runs after its own);
    // the second's deadline passes while it waits.
    let ended = mcp
        .wait(&ids[1], "second expired", |r| r.phase() == RunPhase::Failed)
        .await;
    let st = ended.status.as_ref().unwrap();
    assert!(st.steps.is_empty(), "no step ran: {:?}", st.steps);
    assert_eq!(
        finished_message(&ended),
        "run deadline exceeded while queued (execution.timeout 1s)"
    );
    let first = runway::store::RunStore::get(mcp.store(), "team-a", &ids[0])
        .await
        .unwrap()
        .unwrap();
    assert!(!first.phase().is_terminal(), "{:?}", first.status);
}

const QUEUE: &str = r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: release, namespace: NS }
spec:
  tool: { description: One release at a time; nobody waits more than a second. }
  # Kept 5 s once ended: long enough to be read as a task however loaded the machine is.
  execution: { concurrency: { limit: 1, queueTimeout: 1s }, ttlAfterFinished: 5s }
  steps:
    - name: hold
      input:
        requests:
          - { name: go, message: "Release?" }
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_higher_priority_goes_first_another_requester_is_not_starved_and_waits_end() {
    let mcp = Mcp::start(&[("wf.yaml", WORKFLOWS)]).await;
    let (alice, dave) = (mcp.client("alice-token"), mcp.client("dave-token"));
    let (first, second) = prod_line(&mcp, &alice).await;
    let third = deploy(&alice, "prod").await;
    mcp.wait(&third, "third queued", queued_behind(2)).await;
    // Dave's first deploy waits for the running one and alice's next, not her third.
    let daves = deploy(&dave, "prod").await;
    mcp.wait(&daves, "dave queued", queued_behind(2)).await;
    // A Run an operator writes with a priority (kubectl, GitOps) passes every queued one.
    let mut urgent = support::contract::run("team-a", "urgent-fix", "deploy");
    urgent.spec.arguments = Some(json!({"env": "prod"}));
    urgent.spec.priority = Some(100);
    urgent.spec.requested_by = Some(runway::api::Principal {
        username: "olga".into(),
        uid: None,
        groups: vec![],
    });
    runway::store::RunStore::create(mcp.store(), urgent)
        .await
        .unwrap();
    let queued = mcp
        .wait("urgent-fix", "urgent queued", queued_behind(1))
        .await;
    assert_eq!(
        message(&queued),
        "queued behind 1 run(s) at priority 100: at most 1 at once for prod"
    );
    assert_eq!(queued.status.unwrap().priority, Some(100));
    go(&alice, &first).await;
    mcp.wait("urgent-fix", "urgent starts", |r| {
        r.phase() == RunPhase::Waiting
    })
    .await;
    assert_eq!(phase(&mcp, &second).await, RunPhase::Queued);
    go(&mcp.client("olga-token"), "urgent-fix").await;
    mcp.wait(&second, "second starts", |r| r.phase() == RunPhase::Waiting)
        .await;
    // Alice's third waits behind dave's first: each requester's next Run in turn.
    mcp.wait(&daves, "dave next", queued_behind(1)).await;
    mcp.wait(&third, "third after dave", queued_behind(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_run_fails_unstarted_when_its_queue_timeout_ends() {
    let mcp = Mcp::start(&[("wf.yaml", QUEUE)]).await;
    let alice = mcp.client("alice-token");
    let start = |c: Client| async move {
        let r = c.call("release", json!({})).await;
        r.result()["taskId"].as_str().unwrap().to_owned()
    };
    let first = start(alice.clone()).await;
    mcp.wait(&first, "first asks", |r| r.phase() == RunPhase::Waiting)
        .await;
    let second = start(alice.clone()).await;
    let ended = mcp
        .wait(&second, "second gives up", |r| r.phase().is_terminal())
        .await;
    assert_eq!(ended.phase(), RunPhase::Failed);
    let st = ended.status.as_ref().unwrap();
    assert!(st.steps.is_empty() && st.started_at.is_none(), "{st:?}");
    assert!(
        finished_message(&ended).contains("queueTimeout 1s"),
        "{}",
        finished_message(&ended)
    );
    let t = alice.get(&second).await;
    assert_eq!(t.result()["status"], "completed");
    assert_eq!(t.result()["result"]["isError"], true);
    // The one holding the slot is untouched.
    assert_eq!(phase(&mcp, &first).await, RunPhase::Waiting);
    // Ended unstarted, it is kept as its Workflow says, and no longer.
    deleted(&mcp, &second).await;
    assert_eq!(phase(&mcp, &first).await, RunPhase::Waiting);
}

/// Wait until Run `task` is deleted (its time to live over).
async fn deleted(mcp: &Mcp, task: &str) {
    let store = mcp.store();
    let mut changes = runway::store::RunStore::watch(store, None);
    let gone = async {
        while runway::store::RunStore::get(store, "team-a", task)
            .await
            .unwrap()
            .is_some()
        {
            futures::StreamExt::next(&mut changes).await;
        }
    };
    tokio::time::timeout(support::harness::PATIENCE, gone)
        .await
        .unwrap_or_else(|_| panic!("{task} is deleted after its time to live"));
}

const GUARDED: &str = r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: guarded, namespace: NS }
spec:
  tool: { description: "One at a time, kept a second once finished." }
  execution: { concurrency: { limit: 1 }, ttlAfterFinished: 1s }
  steps:
    - name: hold
      input:
        requests:
          - { name: go, message: "Go?" }
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_run_whose_workflow_turns_invalid_fails_and_is_still_collected() {
    let mcp = Mcp::start(&[("guarded.yaml", GUARDED)]).await;
    let alice = mcp.client("alice-token");
    let start = |c: Client| async move {
        let r = c.call("guarded", json!({})).await;
        r.result()["taskId"].as_str().unwrap().to_owned()
    };
    let first = start(alice.clone()).await;
    mcp.wait(&first, "first asks", |r| r.phase() == RunPhase::Waiting)
        .await;
    let second = start(alice.clone()).await;
    mcp.wait(&second, "second queued", queued_behind(1)).await;
    // An edit the validator refuses (two steps of one name): the Workflow is no longer Ready.
    let broken = GUARDED
        .replace("namespace: NS", "namespace: team-a")
        .replace(
            "  steps:\n",
            "  steps:\n    - { name: hold, delay: { duration: 1s } }\n",
        );
    std::fs::write(mcp.dir.path().join("workflows/guarded.yaml"), broken).unwrap();
    let workflows = &mcp.server.as_ref().unwrap().workflows;
    assert!(workflows.reload());
    let now = runway::store::WorkflowSource::get(workflows, "team-a", "guarded").await;
    assert!(!now.unwrap().is_ready());
    // The queued Run cannot start from it and fails unstarted; its time to live still comes
    // from that Workflow, so it does not stay forever.
    let ended = mcp
        .wait(&second, "second fails", |r| r.phase().is_terminal())
        .await;
    assert_eq!(ended.phase(), RunPhase::Failed);
    assert!(ended.status.as_ref().unwrap().steps.is_empty());
    deleted(&mcp, &second).await;
    // The started one runs on from its own snapshot.
    assert_eq!(phase(&mcp, &first).await, RunPhase::Waiting);
}
