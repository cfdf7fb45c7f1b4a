//! Schedules on the embedded store: Runs started on a timetable, their history limits, the
//! `Replace` policy, and a schedule that goes on from its Runs after a restart.

use crate::support;

use std::collections::BTreeSet;

use futures::StreamExt;
use runway::api::{Run, RunPhase, annotations, labels};
use runway::store::{RunStore, WatchEvent};
use serde_json::json;
use support::harness::PATIENCE;
use support::mcp::Mcp;

const WORKFLOWS: &str = r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: tick, namespace: NS }
spec:
  tool:
    description: Works for a while.
    inputSchema:
      type: object
      properties: { hold: { type: string } }
      required: [hold]
  steps: [ { name: work, delay: { duration: "{{ args.hold }}" } } ]
  schedules:
    - name: every-second
      cron: "* * * * * *"
      arguments: { hold: 10ms }
      successfulRunsHistoryLimit: 1
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: long, namespace: NS }
spec:
  tool: { description: Works for an hour; a newer Run replaces it. }
  steps: [ { name: work, delay: { duration: 1h } } ]
  schedules:
    - { name: replace, cron: "* * * * * *", concurrencyPolicy: Replace, failedRunsHistoryLimit: 5 }
"#;

fn of_schedule(run: &Run, schedule: &str) -> bool {
    run.metadata.namespace.as_deref() == Some("team-a")
        && run
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(labels::SCHEDULE))
            .is_some_and(|s| s == schedule)
}

/// Follow the store until `done` holds for the events of schedule `schedule` seen so far.
async fn follow(
    mcp: &Mcp,
    schedule: &str,
    what: &str,
    done: impl Fn(&[WatchEvent]) -> bool,
) -> Vec<WatchEvent> {
    let store = mcp.store();
    let rv = store.resource_version().await.unwrap();
    let mut watch = store.watch(Some(rv));
    let mut seen = Vec::new();
    let run = async {
        while let Some(ev) = watch.next().await {
            let ev = ev.unwrap();
            if of_schedule(ev.run(), schedule) {
                seen.push(ev);
                if done(&seen) {
                    return;
                }
            }
        }
    };
    tokio::time::timeout(PATIENCE, run)
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"));
    seen
}

fn scheduled_for(run: &Run) -> String {
    run.metadata.annotations.as_ref().unwrap()[annotations::SCHEDULED_FOR].clone()
}

fn created(evs: &[WatchEvent]) -> BTreeSet<String> {
    evs.iter()
        .filter_map(|e| match e {
            WatchEvent::Applied(r) if r.status.is_none() => r.metadata.name.clone(),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_starts_runs_on_its_times_and_keeps_its_history() {
    let mcp = Mcp::start(&[("wf.yaml", WORKFLOWS)]).await;
    let seen = follow(&mcp, "every-second", "three runs and a pruned one", |evs| {
        created(evs).len() >= 3 && evs.iter().any(|e| matches!(e, WatchEvent::Deleted(_)))
    })
    .await;
    let mut times = BTreeSet::new();
    for ev in &seen {
        let run = ev.run();
        let at: jiff::Timestamp = scheduled_for(run).parse().unwrap();
        assert_eq!(at.subsec_nanosecond(), 0, "on the second");
        // A taskId like any other: nothing in it says when it runs.
        let name = run.metadata.name.as_deref().unwrap();
        let (prefix, bits) = name.rsplit_once('-').unwrap();
        assert_eq!((prefix, bits.len()), ("tick", 26), "{name}");
        assert!(!name.contains(&at.as_second().to_string()), "{name}");
        assert_eq!(
            run.spec.requested_by.as_ref().unwrap().username,
            "runway:schedule:tick/every-second"
        );
        assert_eq!(run.spec.arguments, Some(json!({"hold": "10ms"})));
        times.insert(scheduled_for(run));
    }
    assert_eq!(times.len(), created(&seen).len(), "one Run per time");
    // The history limit keeps one succeeded Run (and the newest, which may be running).
    let left: Vec<Run> = mcp
        .store()
        .list(Some("team-a"), &Default::default())
        .await
        .unwrap()
        .into_iter()
        .map(|r| (*r).clone())
        .filter(|r| of_schedule(r, "every-second") && r.phase() == RunPhase::Succeeded)
        .collect();
    assert!(left.len() <= 2, "{} succeeded runs kept", left.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replace_cancels_the_unfinished_run_for_the_next() {
    let mcp = Mcp::start(&[("wf.yaml", WORKFLOWS)]).await;
    // Replace cancels the unfinished Run before it creates the next: follow until both.
    let seen = follow(&mcp, "replace", "a replaced run and its successor", |evs| {
        let cancelled = evs
            .iter()
            .map(WatchEvent::run)
            .find(|r| r.phase() == RunPhase::Cancelled);
        cancelled.is_some_and(|c| {
            evs.iter()
                .map(WatchEvent::run)
                .any(|r| scheduled_for(r) > scheduled_for(c))
        })
    })
    .await;
    let cancelled = seen
        .iter()
        .map(WatchEvent::run)
        .find(|r| r.phase() == RunPhase::Cancelled)
        .unwrap();
    let reason = cancelled
        .spec
        .cancel
        .as_ref()
        .unwrap()
        .reason
        .clone()
        .unwrap();
    assert!(
        reason.starts_with("replaced by schedule replace for "),
        "{reason}"
    );
    // The Run that replaced it is newer and runs.
    let newer: Vec<&Run> = seen
        .iter()
        .map(WatchEvent::run)
        .filter(|r| scheduled_for(r) > scheduled_for(cancelled))
        .collect();
    assert!(!newer.is_empty());

    // Someone who may list runs reads the replaced Run in full (the failed-and-cancelled
    // history keeps five): who started it, and the Event saying so.
    let bob = mcp.client("bob-token");
    let name = cancelled.metadata.name.clone().unwrap();
    let full = bob.call("runway_get_run", json!({"taskId": name})).await;
    let sc = &full.result()["structuredContent"];
    assert_eq!(
        sc["requestedBy"]["username"],
        "runway:schedule:long/replace"
    );
    let reasons = full.event_reasons();
    assert!(reasons.iter().any(|r| r == "Scheduled"), "{reasons:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_restart_a_schedule_goes_on_from_its_runs_without_starting_one_twice() {
    let mcp = Mcp::start(&[("wf.yaml", WORKFLOWS)]).await;
    let before = follow(&mcp, "every-second", "a first run", |evs| {
        !created(evs).is_empty()
    })
    .await;
    let first = created(&before).into_iter().next().unwrap();
    let dir = mcp.stop().await;

    let mcp = Mcp::start_in(dir).await;
    let after = follow(&mcp, "every-second", "two runs after the restart", |evs| {
        created(evs).len() >= 2
    })
    .await;
    let names = created(&after);
    assert!(
        !names.contains(&first),
        "the Run started before is not started again"
    );
    let all: Vec<Run> = mcp
        .store()
        .list(Some("team-a"), &Default::default())
        .await
        .unwrap()
        .into_iter()
        .map(|r| (*r).clone())
        .filter(|r| of_schedule(r, "every-second"))
        .collect();
    let times: BTreeSet<String> = all.iter().map(scheduled_for).collect();
    assert_eq!(times.len(), all.len(), "one Run per time");
}

const FORBIDDEN: &str = r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: guarded, namespace: team-a }
spec:
  tool: { description: Works a while; never two at once. }
  steps: [ { name: work, delay: { duration: 1500ms } } ]
  schedules:
    - { name: forbid, cron: "*/6 * * * * *", concurrencyPolicy: Forbid }
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_forbid_a_time_missed_while_down_starts_once_the_run_ahead_is_done() {
    let mcp = Mcp::start(&[("wf.yaml", FORBIDDEN)]).await;
    let seen = follow(&mcp, "forbid", "a working run", |evs| {
        evs.iter().any(|e| e.run().phase() == RunPhase::Running)
    })
    .await;
    let first = seen
        .iter()
        .map(WatchEvent::run)
        .find(|r| r.phase() == RunPhase::Running)
        .unwrap()
        .clone();
    let at: jiff::Timestamp = scheduled_for(&first).parse().unwrap();
    // Down while it works, until past its end (1.5 s) and past the schedule's next time.
    let dir = mcp.stop().await;
    // Six seconds apart: the restarted scheduler finds the Run ahead still Running and looks
    // again a second later, which must be before the time after `next` on a loaded machine too
    // (or that later time is the one it rightly starts).
    let next = at + jiff::SignedDuration::from_secs(6);
    let back = next + jiff::SignedDuration::from_millis(300);
    let wait = back.duration_since(jiff::Timestamp::now());
    tokio::time::sleep(std::time::Duration::try_from(wait).unwrap_or_default()).await;
    let mcp = Mcp::start_in(dir).await;
    // The Run ahead is still Running in the store until the controller looks at it: the time
    // it held back waits for that, and starts — it is not skipped for the next one.
    let store = mcp.store();
    let mut watch = store.watch(Some(store.resource_version().await.unwrap()));
    let want = next.to_string();
    let already = store
        .list(Some("team-a"), &Default::default())
        .await
        .unwrap()
        .iter()
        .any(|r| of_schedule(r, "forbid") && scheduled_for(r) == want);
    if !already {
        tokio::time::timeout(PATIENCE, async {
            while let Some(ev) = watch.next().await {
                let r = ev.unwrap().run().clone();
                if of_schedule(&r, "forbid") && scheduled_for(&r) == want {
                    return;
                }
            }
        })
        .await
        .unwrap_or_else(|_| panic!("the time {want} missed behind the working run never started"));
    }
    let ahead = store
        .get("team-a", first.metadata.name.as_deref().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        ahead.phase(),
        RunPhase::Succeeded,
        "it started after the run ahead ended"
    );
}

const NESTED: &str = r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: leaf, namespace: NS }
spec:
  tool: { description: Done at once. }
  steps: [ { name: work, delay: { duration: 1ms } } ]
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: nest, namespace: NS }
spec:
  tool: { description: Runs a child. }
  steps: [ { name: child, workflow: { name: leaf } } ]
  schedules:
    - { name: nested, cron: "* * * * * *", successfulRunsHistoryLimit: 1 }
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_the_history_limit_removes_takes_its_child_runs_with_it() {
    let mcp = Mcp::start(&[("wf.yaml", NESTED)]).await;
    let seen = follow(&mcp, "nested", "a pruned run", |evs| {
        evs.iter().any(|e| matches!(e, WatchEvent::Deleted(_)))
    })
    .await;
    let pruned = seen
        .iter()
        .find_map(|e| match e {
            WatchEvent::Deleted(r) => Some(r),
            _ => None,
        })
        .unwrap();
    let status = pruned.status.as_ref().expect("a finished run was pruned");
    let child = status.steps[0].child_run.clone().expect("it ran a child");
    let uid = pruned.metadata.uid.clone().unwrap();
    let below = std::collections::BTreeMap::from([(labels::ROOT.to_owned(), uid)]);
    let left = mcp.store().list(Some("team-a"), &below).await.unwrap();
    assert!(left.is_empty(), "{child} and its like are gone: {left:?}");
    assert!(mcp.store().get("team-a", &child).await.unwrap().is_none());
}

const ROTATING: &str = r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: rotate, namespace: NS }
spec:
  tool: { description: "Ends at once; kept a second once finished, unless a schedule keeps it." }
  execution: { ttlAfterFinished: 1s }
  steps: [ { name: work, delay: { duration: 10ms } } ]
  schedules:
    - { name: old-name, cron: "* * * * * *", successfulRunsHistoryLimit: 10 }
"#;

/// Succeeded Runs of schedule `schedule` in the store now.
async fn succeeded_of(mcp: &Mcp, schedule: &str) -> Vec<Run> {
    mcp.store()
        .list(Some("team-a"), &Default::default())
        .await
        .unwrap()
        .into_iter()
        .map(|r| (*r).clone())
        .filter(|r| of_schedule(r, schedule) && r.phase() == RunPhase::Succeeded)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_of_a_schedule_that_is_gone_are_kept_by_their_time_to_live() {
    let mcp = Mcp::start(&[("wf.yaml", ROTATING)]).await;
    // While the schedule stands, its history limit keeps its Runs, not their time to live:
    // the first one outlives its second by far.
    let first = follow(&mcp, "old-name", "a run finished", |evs| {
        evs.iter().any(|e| e.run().phase() == RunPhase::Succeeded)
    })
    .await;
    let first = first
        .iter()
        .find(|e| e.run().phase() == RunPhase::Succeeded)
        .and_then(|e| e.run().metadata.name.clone())
        .unwrap();
    follow(&mcp, "old-name", "three more runs", |evs| {
        created(evs).len() >= 3
    })
    .await;
    assert!(mcp.store().get("team-a", &first).await.unwrap().is_some());
    // The schedule is renamed: nothing keeps the old name's Runs but their time to live.
    let renamed = ROTATING
        .replace("namespace: NS", "namespace: team-a")
        .replace("old-name", "new-name");
    std::fs::write(mcp.dir.path().join("workflows/wf.yaml"), renamed).unwrap();
    assert!(mcp.server.as_ref().unwrap().workflows.reload());
    let store = mcp.store();
    let mut watch = store.watch(None);
    tokio::time::timeout(PATIENCE, async {
        while !succeeded_of(&mcp, "old-name").await.is_empty() {
            watch.next().await;
        }
    })
    .await
    .expect("the old schedule's finished Runs are deleted");
    // The new name's Runs are kept by its history limit as before.
    follow(&mcp, "new-name", "a run of the new name", |evs| {
        evs.iter().any(|e| e.run().phase() == RunPhase::Succeeded)
    })
    .await;
}
