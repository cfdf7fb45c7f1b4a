//! What the console reads beyond one Run: the list's filters (requester, time range, labels,
//! order), the Workflows page (Ready, start form, schedules and the Runs they started) and a
//! Run's step graph with its parent and child Runs, over real HTTP on the embedded store.

use crate::support;

use runway::api::{Principal, RunPhase, StepPhase, annotations, labels};
use runway::store::RunStore;
use serde_json::{Value, json};
use support::mcp::{Client, Mcp, TASK_WORKFLOWS};

async fn start(c: &Client, tool: &str) -> String {
    let r = c.call(tool, json!({})).await;
    r.result()["taskId"].as_str().unwrap().to_owned()
}

async fn listed(c: &Client, args: Value) -> Vec<String> {
    c.call("runway_list_runs", args).await.listed()
}

fn created_at(run: &runway::api::Run) -> jiff::Timestamp {
    run.metadata.creation_timestamp.as_ref().unwrap().0
}

#[tokio::test]
async fn the_list_filters_by_requester_time_range_and_labels_in_either_order() {
    let mcp = Mcp::start(&[("wf.yaml", TASK_WORKFLOWS)]).await;
    let (alice, dave, bob) = (
        mcp.client("alice-token"),
        mcp.client("dave-token"),
        mcp.client("bob-token"),
    );
    let a1 = start(&alice, "nap").await;
    let a2 = start(&alice, "quick").await;
    let d1 = start(&dave, "nap").await;
    // A Run applied with kubectl, labelled by its team.
    let mut labelled = support::contract::run("team-a", "nap-payments", "nap");
    labelled
        .metadata
        .labels
        .get_or_insert_default()
        .insert("team".into(), "payments".into());
    labelled.spec.requested_by = Some(Principal {
        username: "dave".into(),
        uid: None,
        groups: vec![],
    });
    let labelled = mcp.store().create(labelled).await.unwrap();
    let p1 = "nap-payments".to_owned();

    assert_eq!(listed(&bob, json!({"requestedBy": "dave"})).await.len(), 2);
    assert!(
        listed(&bob, json!({"requestedBy": "dave"}))
            .await
            .iter()
            .all(|t| *t == d1 || *t == p1)
    );
    assert_eq!(
        listed(&bob, json!({"requestedBy": "nobody"})).await,
        Vec::<String>::new()
    );
    // The requester filter narrows what a caller sees; it never widens it.
    assert_eq!(
        listed(&alice, json!({"requestedBy": "dave"})).await,
        Vec::<String>::new()
    );

    assert_eq!(
        listed(&bob, json!({"labels": "team=payments"})).await,
        vec![p1.clone()]
    );
    let naps = listed(&bob, json!({"labels": "runway.dev/workflow=nap,!team"})).await;
    assert_eq!(naps.len(), 2);
    assert!(naps.contains(&a1) && naps.contains(&d1));
    assert_eq!(
        listed(&bob, json!({"labels": "team!=payments"}))
            .await
            .len(),
        3
    );

    // Oldest first is newest first reversed, page by page too.
    let newest = listed(&bob, json!({})).await;
    let mut oldest = listed(&bob, json!({"order": "oldest"})).await;
    assert_eq!(newest.len(), 4);
    oldest.reverse();
    assert_eq!(oldest, newest);
    let mut paged = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut args = json!({"order": "oldest", "limit": 1});
        if let Some(c) = &cursor {
            args["cursor"] = json!(c);
        }
        let r = bob.call("runway_list_runs", args).await;
        paged.extend(r.listed());
        cursor = r.result()["structuredContent"]["nextCursor"]
            .as_str()
            .map(str::to_owned);
        if cursor.is_none() {
            break;
        }
    }
    oldest.reverse();
    assert_eq!(paged, oldest);

    // `since` is inclusive and `until` exclusive, on the Run's creation time.
    let at = created_at(&labelled);
    let since = listed(&bob, json!({"since": at.to_string()})).await;
    assert!(since.contains(&p1));
    assert!(
        !listed(&bob, json!({"until": at.to_string()}))
            .await
            .contains(&p1)
    );
    let after = (at + jiff::SignedDuration::from_secs(1)).to_string();
    assert!(listed(&bob, json!({"until": after})).await.contains(&p1));
    let hour = jiff::SignedDuration::from_hours(1);
    let later = (jiff::Timestamp::now() + hour).to_string();
    let earlier = (created_at(&mcp.wait(&a1, "created", |_| true).await) - hour).to_string();
    assert_eq!(
        listed(&bob, json!({"since": later})).await,
        Vec::<String>::new()
    );
    assert_eq!(
        listed(&bob, json!({"until": earlier})).await,
        Vec::<String>::new()
    );
    assert_eq!(
        listed(&alice, json!({"since": "2026-01-01T00:00:00+01:00"}))
            .await
            .len(),
        2,
        "offsets are read; {a2} is alice's too"
    );

    for (args, names) in [
        (json!({"since": "yesterday"}), "since"),
        (json!({"until": "2026-13-01T00:00:00Z"}), "until"),
        (json!({"labels": "team=pay ments"}), "labels"),
        (json!({"order": "sideways"}), "order"),
        (json!({"requestedBy": 7}), "requestedBy"),
    ] {
        let r = bob.call("runway_list_runs", args.clone()).await;
        assert_eq!(r.error_code(), -32602, "{args}");
        let msg = r.last()["error"]["message"].as_str().unwrap();
        assert!(
            msg.contains(names) || msg.contains("sideways") || msg.contains("string"),
            "{args}: {msg}"
        );
    }
}

const SCHEDULED: &str = r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: tick, namespace: NS }
spec:
  tool:
    title: Tick
    description: Works for a moment.
    inputSchema:
      type: object
      properties: { hold: { type: string, default: 10ms } }
  elicit:
    - key: why
      message: Why?
      requestedSchema: { type: object, properties: { reason: { type: string } }, required: [reason] }
  steps: [ { name: work, delay: { duration: "{{ args.hold }}" } } ]
  schedules:
    - name: every-second
      cron: "* * * * * *"
      arguments: { hold: 10ms, reason: scheduled }
      # Kept, so that the first Run is still among the page's newest ten however slowly the
      # page is asked for.
      successfulRunsHistoryLimit: 100
    - { name: paused, cron: "0 3 * * *", timeZone: Europe/Berlin, suspend: true }
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: broken, namespace: NS }
spec:
  tool:
    description: Its form cannot be met.
    inputSchema: { type: object, properties: { v: { type: string, enum: [x, 7] } } }
  steps: [ { name: work, delay: { duration: 10ms } } ]
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: ask-model, namespace: NS }
spec:
  tool: { description: Asks the caller's model. }
  steps: [ { name: greet, sample: { prompt: "hi", maxTokens: 5 } } ]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_workflows_page_shows_ready_start_forms_and_what_each_schedule_started() {
    let mcp = Mcp::start(&[("wf.yaml", SCHEDULED)]).await;
    let bob = mcp.client("bob-token");
    // Wait for the scheduler's first Run, then plant a Run that only looks scheduled.
    let first = support::harness::wait_for_any(mcp.store(), "team-a", "a scheduled run", |r| {
        r.metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.get(labels::SCHEDULE).is_some_and(|s| s == "every-second"))
    })
    .await;
    let mut fake = support::contract::run("team-a", "tick-forged", "tick");
    let l = fake.metadata.labels.get_or_insert_default();
    l.insert(labels::SCHEDULE.into(), "every-second".into());
    fake.metadata.annotations = Some(
        [(
            annotations::SCHEDULED_FOR.to_owned(),
            "2099-01-01T00:00:00Z".to_owned(),
        )]
        .into(),
    );
    mcp.store().create(fake).await.unwrap();

    let r = bob.call("runway_list_workflows", json!({})).await;
    let page = r.result()["structuredContent"]["workflows"].clone();
    let by = |n: &str| {
        page.as_array()
            .unwrap()
            .iter()
            .find(|w| w["name"] == n)
            .cloned()
            .unwrap()
    };
    let names: Vec<&str> = page
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["ask-model", "broken", "tick"], "in name order");

    let tick = by("tick");
    assert_eq!(tick["ready"]["status"], "True");
    assert_eq!(tick["title"], "Tick");
    // The start form asks the argument questions up front, required as they are.
    assert_eq!(tick["startForm"]["properties"]["hold"]["default"], "10ms");
    assert_eq!(tick["startForm"]["properties"]["reason"]["type"], "string");
    assert_eq!(tick["startForm"]["required"], json!(["reason"]));
    let every = &tick["schedules"][0];
    assert_eq!(every["name"], "every-second");
    let next: jiff::Timestamp = every["nextAt"].as_str().unwrap().parse().unwrap();
    assert!(next > jiff::Timestamp::now() - jiff::SignedDuration::from_secs(2));
    let runs: Vec<&str> = every["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["taskId"].as_str().unwrap())
        .collect();
    assert!(
        runs.contains(&first.metadata.name.as_deref().unwrap()),
        "{runs:?}"
    );
    assert!(
        !runs.contains(&"tick-forged"),
        "a label is no seal: {runs:?}"
    );
    let last: jiff::Timestamp = every["lastAt"].as_str().unwrap().parse().unwrap();
    assert!(last < "2099-01-01T00:00:00Z".parse().unwrap());
    let paused = &tick["schedules"][1];
    assert_eq!(paused["suspend"], true);
    assert!(
        paused["nextAt"].is_null(),
        "a suspended schedule is due never"
    );
    assert_eq!(paused["timeZone"], "Europe/Berlin");
    assert!(tick["runs"]["total"].as_u64().unwrap() >= 2);

    let broken = by("broken");
    assert_eq!(broken["ready"]["status"], "False");
    assert_eq!(broken["ready"]["reason"], "InvalidSchema");
    assert_eq!(by("ask-model")["requires"], json!(["sampling"]));

    // alice lists Workflows but not Runs: no counts, no schedules' Runs.
    let alice = mcp.client("alice-token");
    let r = alice.call("runway_list_workflows", json!({})).await;
    let tick = r.result()["structuredContent"]["workflows"][2].clone();
    assert!(tick["runs"].is_null());
    assert!(tick["schedules"][0].get("runs").is_none());
    assert!(tick["schedules"][0]["nextAt"].is_string());
    // rita may read Runs but not list Workflows; unknown arguments are refused.
    let rita = mcp.client("reader-token");
    assert_eq!(
        rita.call("runway_list_workflows", json!({}))
            .await
            .error_code(),
        -32003
    );
    assert_eq!(
        bob.call("runway_list_workflows", json!({"all": true}))
            .await
            .error_code(),
        -32602
    );
}

const TREE: &str = r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: leaf, namespace: NS }
spec:
  tool: { description: A child that waits. }
  steps: [ { name: rest, delay: { duration: 1h } } ]
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: tree, namespace: NS }
spec:
  tool: { description: "Branches, items and a child." }
  steps:
    - { name: plan, delay: { duration: 10ms } }
    - { name: left, dependsOn: [plan], delay: { duration: 10ms }, retry: { limit: 2 } }
    - { name: right, dependsOn: [plan], forEach: { items: [1, 2] }, delay: { duration: 10ms } }
    - { name: child, dependsOn: [left, right], workflow: { name: leaf } }
    - { name: after, delay: { duration: 10ms } }
  finally: [ { name: tidy, delay: { duration: 10ms } } ]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_in_full_has_its_step_graph_and_links_parent_and_child_both_ways() {
    let mcp = Mcp::start(&[("wf.yaml", TREE)]).await;
    let alice = mcp.client("alice-token");
    let id = start(&alice, "tree").await;
    let run = mcp
        .wait(&id, "the child step running", |r| {
            r.status.as_ref().is_some_and(|s| {
                s.steps.iter().any(|st| {
                    st.name == "child" && st.child_run.is_some() && st.phase == StepPhase::Running
                })
            })
        })
        .await;
    let child = run
        .status
        .unwrap()
        .steps
        .iter()
        .find(|s| s.name == "child")
        .unwrap()
        .child_run
        .clone()
        .unwrap();

    let r = alice.call("runway_get_run", json!({"taskId": id})).await;
    let full = r.result()["structuredContent"].clone();
    let nodes = full["graph"]["steps"].as_array().unwrap();
    let node = |n: &str| nodes.iter().find(|x| x["name"] == n).unwrap().clone();
    assert_eq!(nodes.len(), 6);
    assert_eq!(node("plan")["dependsOn"], json!([]));
    assert_eq!(node("left")["dependsOn"], json!(["plan"]));
    assert_eq!(node("left")["retries"], 2);
    assert_eq!(node("right")["forEach"], true);
    assert_eq!(node("child")["dependsOn"], json!(["left", "right"]));
    assert_eq!(node("child")["kind"], "workflow");
    assert_eq!(node("child")["workflow"], "leaf");
    // Without `dependsOn` a step waits for the one listed before it.
    assert_eq!(node("after")["dependsOn"], json!(["child"]));
    assert_eq!(node("tidy")["finally"], true);
    let items: Vec<&str> = full["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["name"].as_str())
        .filter(|n| n.starts_with("right["))
        .collect();
    assert_eq!(items, ["right[0]", "right[1]"]);
    assert!(full["parent"].is_null());

    // The parent names its child in its status before the child is created.
    mcp.wait(&child, "the child created", |_| true).await;
    let r = alice.call("runway_get_run", json!({"taskId": child})).await;
    let c = r.result()["structuredContent"].clone();
    assert_eq!(c["parent"]["taskId"], id.as_str());
    assert_eq!(c["workflow"], "leaf");

    // Cancelling the parent stops the child; both views still read.
    alice
        .call(
            "runway_cancel_run",
            json!({"taskId": id, "reason": "enough"}),
        )
        .await
        .result();
    mcp.wait(&child, "child cancelled", |r| {
        r.phase() == RunPhase::Cancelled
    })
    .await;
    let r = alice.call("runway_get_run", json!({"taskId": id})).await;
    assert_eq!(
        r.result()["structuredContent"]["cancel"]["reason"],
        "enough"
    );
}
