//! The scheduler's passes driven at chosen instants, on the embedded store: a Workflow deleted
//! and applied again owes nothing from before it was made, a `Replace` whose cancel fails
//! starts nothing beside the Run it replaces, and a suspended Workflow's schedules make no
//! Runs until it is resumed.

use crate::support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use jiff::Timestamp;
use runway::api::{Run, Workflow, WorkflowSpec, WorkflowStatus, annotations};
use runway::controller::LogEvents;
use runway::controller::schedules::Scheduler;
use runway::store::sqlite::SqliteStore;
use runway::store::{RunStore, StoreError, WorkflowSource};
use serde_json::json;
use support::harness::TempDir;
use support::hooked::{Call, Hooked};

/// Workflows a test sets by hand.
struct Fixed {
    workflows: Mutex<Vec<Workflow>>,
    changes: tokio::sync::watch::Sender<u64>,
}

impl Fixed {
    fn new(wf: Workflow) -> Arc<Self> {
        Arc::new(Self {
            workflows: Mutex::new(vec![wf]),
            changes: tokio::sync::watch::channel(0).0,
        })
    }

    fn set(&self, wf: Workflow) {
        *self.workflows.lock().unwrap() = vec![wf];
        self.changes.send_modify(|n| *n += 1);
    }
}

#[async_trait::async_trait]
impl WorkflowSource for Fixed {
    async fn get(&self, namespace: &str, name: &str) -> Option<Workflow> {
        let all = self.workflows.lock().unwrap();
        all.iter()
            .find(|w| {
                w.metadata.namespace.as_deref() == Some(namespace)
                    && w.metadata.name.as_deref() == Some(name)
            })
            .cloned()
    }
    async fn list(&self, namespace: &str) -> Vec<Workflow> {
        let all = self.workflows.lock().unwrap();
        all.iter()
            .filter(|w| w.metadata.namespace.as_deref() == Some(namespace))
            .cloned()
            .collect()
    }
    async fn namespaces(&self) -> Vec<String> {
        vec!["team-a".into()]
    }
    async fn tool(&self, namespace: &str, name: &str) -> Option<Arc<Workflow>> {
        self.get(namespace, name).await.map(Arc::new)
    }
    fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.subscribe()
    }
}

fn at(s: &str) -> Timestamp {
    s.parse().unwrap()
}

/// Workflow `name` of team-a with `spec`, made at `created`, validated.
fn workflow(name: &str, spec: serde_json::Value, created: &str) -> Workflow {
    let spec: WorkflowSpec = serde_json::from_value(spec).unwrap();
    let mut wf = Workflow::new(name, spec);
    wf.metadata.namespace = Some("team-a".into());
    wf.metadata.generation = Some(1);
    wf.metadata.uid = Some(runway::store::new_uid());
    wf.metadata.creation_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        at(created),
    ));
    wf.status = Some(WorkflowStatus::ready(
        &wf,
        None,
        true,
        "Valid",
        "ok".into(),
        at(created),
    ));
    wf
}

fn scheduler(store: Arc<dyn RunStore>, workflows: Arc<Fixed>) -> Arc<Scheduler> {
    let marks = runway::engine::marks::Marks::new(vec![b"scheduler-test-key".to_vec()]);
    Scheduler::new(
        store,
        workflows,
        Arc::new(LogEvents),
        b"scheduler-test-name-key".to_vec(),
        marks,
    )
}

/// The times the Runs in `store` were scheduled for, oldest first.
async fn scheduled(store: &dyn RunStore) -> Vec<String> {
    let runs = store.list(Some("team-a"), &BTreeMap::new()).await.unwrap();
    let mut times: Vec<String> = runs
        .iter()
        .filter_map(|r| {
            r.metadata
                .annotations
                .as_ref()?
                .get(annotations::SCHEDULED_FOR)
                .cloned()
        })
        .collect();
    times.sort();
    times
}

fn nightly() -> serde_json::Value {
    json!({"steps": [], "schedules": [{"name": "nightly", "cron": "0 2 * * *"}]})
}

#[tokio::test]
async fn a_workflow_applied_again_owes_nothing_from_before_it_was_made() {
    let dir = TempDir::new();
    let store: Arc<dyn RunStore> =
        Arc::new(SqliteStore::open(&dir.path().join("runs.db")).unwrap());
    let workflows = Fixed::new(workflow("daily", nightly(), "2027-03-01T00:00:00Z"));
    let s = scheduler(store.clone(), workflows.clone());
    s.pass(at("2027-03-01T02:00:30Z")).await;
    assert_eq!(scheduled(&*store).await, ["2027-03-01T02:00:00Z"]);
    // Deleted on Monday, applied again on Thursday afternoon: its Runs outlived it.
    workflows.set(workflow("daily", nightly(), "2027-03-04T15:00:00Z"));
    s.pass(at("2027-03-04T15:00:10Z")).await;
    assert_eq!(scheduled(&*store).await, ["2027-03-01T02:00:00Z"]);
    s.pass(at("2027-03-05T02:00:30Z")).await;
    assert_eq!(
        scheduled(&*store).await,
        ["2027-03-01T02:00:00Z", "2027-03-05T02:00:00Z"]
    );
}

#[tokio::test]
async fn replace_starts_nothing_beside_a_run_it_could_not_cancel() {
    let dir = TempDir::new();
    let refusals = Arc::new(AtomicUsize::new(0));
    let left = Arc::clone(&refusals);
    let inner = SqliteStore::open(&dir.path().join("runs.db")).unwrap();
    let store: Arc<dyn RunStore> = Arc::new(Hooked::new(inner, move |call| match call {
        Call::Update(run) if run.spec.cancel.is_some() => left
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .ok()
            .map(|_| StoreError::Backend("503 Service Unavailable".into())),
        _ => None,
    }));
    let spec = json!({"steps": [{"name": "work", "delay": {"duration": "1h"}}],
        "schedules": [{"name": "replace", "cron": "* * * * *", "concurrencyPolicy": "Replace"}]});
    let workflows = Fixed::new(workflow("long", spec, "2027-03-01T09:00:00Z"));
    let s = scheduler(store.clone(), workflows);
    s.pass(at("2027-03-01T10:00:30Z")).await;
    assert_eq!(scheduled(&*store).await, ["2027-03-01T10:00:00Z"]);
    // The next time's cancel of the Run ahead fails: nothing starts beside it.
    refusals.store(1, Ordering::SeqCst);
    let next = s.pass(at("2027-03-01T10:01:30Z")).await.unwrap();
    assert_eq!(scheduled(&*store).await, ["2027-03-01T10:00:00Z"]);
    assert!(
        next < at("2027-03-01T10:02:00Z"),
        "tried again before the next time: {next}"
    );
    s.pass(at("2027-03-01T10:01:40Z")).await;
    assert_eq!(
        scheduled(&*store).await,
        ["2027-03-01T10:00:00Z", "2027-03-01T10:01:00Z"]
    );
    let runs = store.list(Some("team-a"), &BTreeMap::new()).await.unwrap();
    let replaced: Vec<&Run> = runs
        .iter()
        .map(|r| &**r)
        .filter(|r| r.spec.cancel.is_some())
        .collect();
    assert_eq!(replaced.len(), 1);
    assert_eq!(
        replaced[0].metadata.annotations.as_ref().unwrap()[annotations::SCHEDULED_FOR],
        "2027-03-01T10:00:00Z"
    );
}

#[tokio::test]
async fn a_suspended_workflow_makes_no_scheduled_runs_and_starts_the_latest_time_once_resumed() {
    let dir = TempDir::new();
    let store: Arc<dyn RunStore> =
        Arc::new(SqliteStore::open(&dir.path().join("runs.db")).unwrap());
    let mut spec = json!({"steps": [], "schedules": [{"name": "often", "cron": "*/15 * * * *"}]});
    let workflows = Fixed::new(workflow("report", spec.clone(), "2027-03-05T17:00:00Z"));
    let s = scheduler(store.clone(), workflows.clone());
    s.pass(at("2027-03-05T18:00:10Z")).await;
    assert_eq!(scheduled(&*store).await, ["2027-03-05T18:00:00Z"]);
    // Suspended over the weekend.
    spec["suspend"] = json!(true);
    workflows.set(workflow("report", spec.clone(), "2027-03-05T17:00:00Z"));
    for t in [
        "2027-03-05T18:15:10Z",
        "2027-03-06T12:00:10Z",
        "2027-03-08T08:45:10Z",
    ] {
        s.pass(at(t)).await;
    }
    assert_eq!(scheduled(&*store).await, ["2027-03-05T18:00:00Z"]);
    spec["suspend"] = json!(false);
    workflows.set(workflow("report", spec, "2027-03-05T17:00:00Z"));
    s.pass(at("2027-03-08T09:05:00Z")).await;
    assert_eq!(
        scheduled(&*store).await,
        ["2027-03-05T18:00:00Z", "2027-03-08T09:00:00Z"]
    );
}
