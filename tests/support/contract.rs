//! The store contract: what every `RunStore` must do, written once and run against each store.

use std::collections::BTreeMap;

use futures::StreamExt;
use runway::api::{
    CancelRequest, InputAction, InputResponse, Run, RunPhase, RunSpec, RunStatus, WorkflowRef,
};
use runway::store::{RunStore, StoreError, WatchEvent};
use serde_json::json;

pub fn run(ns: &str, name: &str, workflow: &str) -> Run {
    let mut r = Run::new(
        name,
        RunSpec {
            workflow_ref: WorkflowRef {
                name: workflow.into(),
            },
            arguments: Some(json!({"x": 1})),
            requested_by: None,
            cancel: None,
            pause: None,
            retry_of: None,
            priority: None,
            input_responses: BTreeMap::new(),
        },
    );
    r.metadata.namespace = Some(ns.into());
    r.metadata.labels = Some(BTreeMap::from([(
        "runway.dev/workflow".to_string(),
        workflow.to_string(),
    )]));
    r
}

pub async fn create_get_list<S: RunStore>(store: &S) {
    let created = store.create(run("a", "r1", "wf1")).await.unwrap();
    assert!(created.metadata.uid.is_some());
    assert_eq!(created.metadata.generation, Some(1));
    assert!(created.metadata.creation_timestamp.is_some());
    assert!(created.metadata.resource_version.is_some());
    assert_eq!(
        store.create(run("a", "r1", "wf1")).await.unwrap_err(),
        StoreError::AlreadyExists
    );
    store.create(run("a", "r2", "wf2")).await.unwrap();
    store.create(run("b", "r1", "wf1")).await.unwrap();

    let got = store.get("a", "r1").await.unwrap().unwrap();
    assert_eq!(got, created);
    assert!(store.get("a", "missing").await.unwrap().is_none());
    assert!(store.get("c", "r1").await.unwrap().is_none());

    let names = |v: Vec<std::sync::Arc<Run>>| {
        let mut names: Vec<String> = v
            .into_iter()
            .map(|r| r.metadata.name.clone().unwrap())
            .collect();
        names.sort();
        names
    };
    assert_eq!(
        names(store.list(Some("a"), &BTreeMap::new()).await.unwrap()),
        ["r1", "r2"]
    );
    assert_eq!(store.list(None, &BTreeMap::new()).await.unwrap().len(), 3);
    let sel = BTreeMap::from([("runway.dev/workflow".to_string(), "wf2".to_string())]);
    assert_eq!(names(store.list(Some("a"), &sel).await.unwrap()), ["r2"]);
    let counts = store.phase_counts().await.unwrap();
    assert_eq!(counts.values().sum::<i64>(), 3, "{counts:?}");
}

pub async fn conditional_updates<S: RunStore>(store: &S) {
    let created = store.create(run("a", "u1", "wf")).await.unwrap();

    // status update bumps the resourceVersion, keeps spec and generation
    let mut with_status = created.clone();
    with_status.status = Some(RunStatus {
        phase: RunPhase::Running,
        ..Default::default()
    });
    let s1 = store.update_status(with_status.clone()).await.unwrap();
    assert_eq!(s1.status.as_ref().unwrap().phase, RunPhase::Running);
    assert_ne!(
        s1.metadata.resource_version,
        created.metadata.resource_version
    );
    assert_eq!(s1.metadata.generation, Some(1));
    // a stale status write conflicts
    assert_eq!(
        store.update_status(with_status).await.unwrap_err(),
        StoreError::Conflict
    );

    // a spec update with a stale resourceVersion conflicts
    let mut stale = created.clone();
    stale.spec.cancel = Some(CancelRequest {
        reason: Some("x".into()),
        requested_by: None,
        requested_at: None,
    });
    assert_eq!(store.update(stale).await.unwrap_err(), StoreError::Conflict);

    // a spec update on the latest version applies, bumps generation, keeps status
    let mut fresh = (*s1).clone();
    fresh.spec.input_responses.insert(
        "k".into(),
        InputResponse {
            action: InputAction::Accept,
            content: Some(json!({"ok": true})),
            answered_by: Some("bob".into()),
            answered_by_groups: vec![],
            answered_at: None,
        },
    );
    let u = store.update(fresh).await.unwrap();
    assert_eq!(u.metadata.generation, Some(2));
    assert_eq!(u.status, s1.status);
    assert!(u.spec.input_responses.contains_key("k"));

    // status updates never touch spec
    let mut sneaky = u.clone();
    sneaky.spec.input_responses.clear();
    let after = store.update_status(sneaky).await.unwrap();
    assert!(after.spec.input_responses.contains_key("k"));
}

pub async fn spec_transition_rules<S: RunStore>(store: &S) {
    let created = store.create(run("a", "t1", "wf")).await.unwrap();
    let mut changed = created.clone();
    changed.spec.arguments = Some(json!({"x": 2}));
    assert!(
        matches!(store.update(changed).await.unwrap_err(), StoreError::Invalid(m) if m.contains("arguments"))
    );

    let mut answered = created.clone();
    answered.spec.input_responses.insert(
        "k".into(),
        InputResponse {
            action: InputAction::Accept,
            content: None,
            answered_by: Some("bob".into()),
            answered_by_groups: vec![],
            answered_at: None,
        },
    );
    let answered = store.update(answered).await.unwrap();
    let mut rewrite = answered.clone();
    rewrite.spec.input_responses.get_mut("k").unwrap().action = InputAction::Decline;
    assert!(
        matches!(store.update(rewrite).await.unwrap_err(), StoreError::Invalid(m) if m.contains("inputResponses"))
    );
    let stored = store.get("a", "t1").await.unwrap().unwrap();
    assert_eq!(stored.spec.input_responses["k"].action, InputAction::Accept);
}

/// A `null` is a value like any other in arguments and answers: a cancel or a later answer
/// keeps it (a merge patch would read it as "delete this key").
pub async fn nulls_survive_spec_updates<S: RunStore>(store: &S) {
    let mut r = run("a", "n1", "wf");
    r.spec.arguments = Some(json!({"q": "x", "limit": null, "deep": {"v": null}}));
    let created = store.create(r).await.unwrap();
    let mut answered = created.clone();
    answered.spec.input_responses.insert(
        "k".into(),
        InputResponse {
            action: InputAction::Accept,
            content: Some(json!({"note": null, "ok": true})),
            answered_by: Some("bob".into()),
            answered_by_groups: vec![],
            answered_at: None,
        },
    );
    let answered = store.update(answered).await.unwrap();
    let mut cancelled = answered.clone();
    cancelled.spec.cancel = Some(CancelRequest {
        reason: Some("enough".into()),
        requested_by: None,
        requested_at: None,
    });
    store.update(cancelled).await.unwrap();
    let stored = store.get("a", "n1").await.unwrap().unwrap();
    assert!(stored.spec.cancel.is_some());
    assert_eq!(
        stored.spec.arguments,
        Some(json!({"q": "x", "limit": null, "deep": {"v": null}}))
    );
    assert_eq!(
        stored.spec.input_responses["k"].content,
        Some(json!({"note": null, "ok": true}))
    );
}

pub async fn delete<S: RunStore>(store: &S) {
    let first = store.create(run("a", "d1", "wf")).await.unwrap();
    store.delete("a", "d1", None, None).await.unwrap();
    assert!(store.get("a", "d1").await.unwrap().is_none());
    assert_eq!(
        store.delete("a", "d1", None, None).await.unwrap_err(),
        StoreError::NotFound
    );
    // the name can be used again, and a delete meant for the first Run spares the second
    let second = store.create(run("a", "d1", "wf")).await.unwrap();
    assert_eq!(
        store
            .delete("a", "d1", first.metadata.uid.as_deref(), None)
            .await
            .unwrap_err(),
        StoreError::Conflict
    );
    assert!(store.get("a", "d1").await.unwrap().is_some());
    // a delete of the version read spares the Run once it was written since
    let mut labelled = second.clone();
    labelled
        .metadata
        .labels
        .get_or_insert_default()
        .insert("seen".into(), "yes".into());
    let written = store.update(labelled).await.unwrap();
    let (uid, read) = (
        second.metadata.uid.as_deref(),
        second.metadata.resource_version.as_deref(),
    );
    assert_eq!(
        store.delete("a", "d1", uid, read).await.unwrap_err(),
        StoreError::Conflict
    );
    assert!(store.get("a", "d1").await.unwrap().is_some());
    let now = written.metadata.resource_version.as_deref();
    store.delete("a", "d1", uid, now).await.unwrap();
    assert!(store.get("a", "d1").await.unwrap().is_none());
}

pub async fn watch_and_resume<S: RunStore>(store: &S) {
    let start = store.resource_version().await.unwrap();
    let mut live = store.watch(Some(start.clone()));
    let c = store.create(run("w", "w1", "wf")).await.unwrap();
    let mut s = c.clone();
    s.status = Some(RunStatus {
        phase: RunPhase::Succeeded,
        ..Default::default()
    });
    store.update_status(s).await.unwrap();
    store.delete("w", "w1", None, None).await.unwrap();

    let mut seen = Vec::new();
    for _ in 0..3 {
        seen.push(live.next().await.unwrap().unwrap());
    }
    assert!(matches!(&seen[0], WatchEvent::Applied(r) if r.status.is_none()));
    assert!(matches!(&seen[1], WatchEvent::Applied(r) if r.phase() == RunPhase::Succeeded));
    assert!(matches!(&seen[2], WatchEvent::Deleted(r) if r.metadata.name.as_deref() == Some("w1")));

    // resuming from the first event's version replays what came after it, in order
    let first_rv = seen[0].run().metadata.resource_version.clone();
    let mut resumed = store.watch(first_rv);
    let a = resumed.next().await.unwrap().unwrap();
    let b = resumed.next().await.unwrap().unwrap();
    assert_eq!(a, seen[1]);
    assert_eq!(b, seen[2]);
}

pub async fn concurrent_creates_of_one_name<S: RunStore + Clone>(store: &S) {
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let s = store.clone();
        tasks.push(tokio::spawn(async move {
            s.create(run("c", "same", "wf")).await
        }));
    }
    let mut ok = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(_) => ok += 1,
            Err(e) => assert_eq!(e, StoreError::AlreadyExists),
        }
    }
    assert_eq!(ok, 1, "exactly one create wins");
}

pub async fn concurrent_answers_first_wins<S: RunStore + Clone>(store: &S) {
    let created = store.create(run("c", "ans", "wf")).await.unwrap();
    let mut tasks = Vec::new();
    for who in ["bob", "carol", "dave"] {
        let s = store.clone();
        let base = created.clone();
        tasks.push(tokio::spawn(async move {
            let mut r = base;
            r.spec.input_responses.insert(
                "k".into(),
                InputResponse {
                    action: InputAction::Accept,
                    content: None,
                    answered_by: Some(who.into()),
                    answered_by_groups: vec![],
                    answered_at: None,
                },
            );
            s.update(r).await
        }));
    }
    let mut ok = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(_) => ok += 1,
            Err(e) => assert_eq!(e, StoreError::Conflict),
        }
    }
    assert_eq!(ok, 1);
}

/// A create that carries a Run's first status: where the store says it can write both at
/// once, the status and the metadata it was decided from are kept; elsewhere it creates as
/// `create` does. Either way a second create of the name is refused.
pub async fn create_started<S: RunStore>(store: &S) {
    let mut decided = run("a", "started", "wf");
    decided.metadata.uid = Some("6f1c2a52-1d7e-4e0b-9a53-2b6d1c0e9f00".into());
    decided.metadata.generation = Some(1);
    let at: jiff::Timestamp = "2026-01-02T03:04:05Z".parse().unwrap();
    decided.metadata.creation_timestamp = Some(runway::api::kube_time(at));
    decided.status = Some(RunStatus {
        phase: RunPhase::Succeeded,
        ..Default::default()
    });
    let created = store.create_started(decided.clone()).await.unwrap();
    assert!(created.metadata.resource_version.is_some());
    assert_eq!(store.get("a", "started").await.unwrap().unwrap(), created);
    if store.creates_with_status() {
        assert_eq!(created.status, decided.status);
        assert_eq!(created.metadata.uid, decided.metadata.uid);
        assert_eq!(
            created.metadata.creation_timestamp,
            decided.metadata.creation_timestamp
        );
    } else {
        assert_eq!(created.phase(), RunPhase::Pending, "{:?}", created.status);
    }
    assert_eq!(
        store.create_started(decided.clone()).await.unwrap_err(),
        StoreError::AlreadyExists
    );
    if store.creates_with_status() {
        // A time the store would cut to the second is refused, not kept in memory only.
        let mut finer = decided;
        finer.metadata.name = Some("finer".into());
        let at: jiff::Timestamp = "2026-01-02T03:04:05.7Z".parse().unwrap();
        finer.metadata.creation_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at));
        assert!(matches!(
            store.create_started(finer).await.unwrap_err(),
            StoreError::Invalid(_)
        ));
        assert_eq!(store.get("a", "finer").await.unwrap(), None);
    }
}
