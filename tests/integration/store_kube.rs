//! The store contract against `KubeStore`, over an in-memory API server; plus the exact
//! requests the kube layer sends.

use crate::support;

use runway::api::{Run, RunPhase, RunStatus};
use runway::store::kube::KubeStore;
use runway::store::{RunStore, StoreError};
use support::contract;
use support::fakeapi::FakeApi;

async fn store() -> (FakeApi, KubeStore) {
    let api = FakeApi::start().await;
    let s = KubeStore::start(api.client()).await.unwrap();
    (api, s)
}

/// Poll `store`'s list (as a client would) until it holds `run`: its cache has seen it, or, when
/// `store` did not write it, everything up to it.
async fn until_listed(store: &KubeStore, run: &Run) {
    let deadline = tokio::time::Instant::now() + support::harness::PATIENCE;
    let no_labels = std::collections::BTreeMap::new();
    while !store
        .list(Some("ns"), &no_labels)
        .await
        .unwrap()
        .iter()
        .any(|r| r.metadata.uid == run.metadata.uid)
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the cache never saw {run:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// `store` lists no Run called `name`.
async fn assert_not_listed(store: &KubeStore, name: &str) {
    let no_labels = std::collections::BTreeMap::new();
    let listed = store.list(Some("ns"), &no_labels).await.unwrap();
    assert!(
        listed
            .iter()
            .all(|r| r.metadata.name.as_deref() != Some(name)),
        "a deleted Run is listed: {listed:?}"
    );
}

/// Create the Run `name` through `store` and write it succeeded.
async fn finished(store: &KubeStore, name: &str) {
    let mut done = store.create(contract::run("ns", name, "wf")).await.unwrap();
    done.status = Some(RunStatus {
        phase: RunPhase::Succeeded,
        ..Default::default()
    });
    store.update_status(done).await.unwrap();
}

#[tokio::test]
async fn create_get_list() {
    let (_a, s) = store().await;
    contract::create_get_list(&s).await;
}

#[tokio::test]
async fn conditional_updates() {
    let (_a, s) = store().await;
    contract::conditional_updates(&s).await;
}

#[tokio::test]
async fn spec_transition_rules() {
    let (_a, s) = store().await;
    contract::spec_transition_rules(&s).await;
}

#[tokio::test]
async fn delete() {
    let (_a, s) = store().await;
    contract::delete(&s).await;
}

#[tokio::test]
async fn watch_and_resume() {
    let (_a, s) = store().await;
    contract::watch_and_resume(&s).await;
}

#[tokio::test]
async fn create_started() {
    let (_a, s) = store().await;
    contract::create_started(&s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_creates_of_one_name() {
    let (_a, s) = store().await;
    contract::concurrent_creates_of_one_name(&s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_answers_first_wins() {
    let (_a, s) = store().await;
    contract::concurrent_answers_first_wins(&s).await;
}

#[tokio::test]
async fn status_replaces_the_version_it_was_decided_from_with_one_field_manager() {
    let (api, s) = store().await;
    let created = s.create(contract::run("ns", "put", "wf")).await.unwrap();
    let mut r = created.clone();
    r.status = Some(RunStatus {
        phase: RunPhase::Running,
        ..Default::default()
    });
    let written = s.update_status(r).await.unwrap();
    assert_eq!(written.status.as_ref().unwrap().phase, RunPhase::Running);
    let puts = api.requests("PUT", "/namespaces/ns/runs/put/status");
    assert_eq!(puts.len(), 1);
    let p = &puts[0];
    assert_eq!(
        p.query.get("fieldManager").map(String::as_str),
        Some("runway-controller")
    );
    assert_eq!(p.body["status"]["phase"], "Running");
    assert_eq!(p.body["kind"], "Run");
    assert_eq!(
        p.body["metadata"]["resourceVersion"],
        created.metadata.resource_version.clone().unwrap()
    );
    assert!(
        api.requests("PATCH", "/namespaces/ns/runs/put/status")
            .is_empty(),
        "a status with its version is not applied"
    );
}

#[tokio::test]
async fn status_without_a_version_is_applied_by_one_field_manager() {
    let (api, s) = store().await;
    s.create(contract::run("ns", "ssa", "wf")).await.unwrap();
    let mut r = contract::run("ns", "ssa", "wf");
    r.metadata.resource_version = None;
    r.status = Some(RunStatus {
        phase: RunPhase::Running,
        ..Default::default()
    });
    let written = s.update_status(r).await.unwrap();
    assert_eq!(written.status.as_ref().unwrap().phase, RunPhase::Running);
    let patches = api.requests("PATCH", "/namespaces/ns/runs/ssa/status");
    assert_eq!(patches.len(), 1);
    let p = &patches[0];
    assert_eq!(
        p.content_type.as_deref(),
        Some("application/apply-patch+yaml")
    );
    assert_eq!(
        p.query.get("fieldManager").map(String::as_str),
        Some("runway-controller")
    );
    assert_eq!(p.query.get("force").map(String::as_str), Some("true"));
    assert_eq!(p.body["status"]["phase"], "Running");
    assert!(p.body["metadata"].get("resourceVersion").is_none());
    assert!(
        api.requests("PUT", "/namespaces/ns/runs/ssa/status")
            .is_empty()
    );
}

#[tokio::test]
async fn answers_are_a_conditional_json_patch_and_a_stale_one_conflicts() {
    let (api, s) = store().await;
    let created = s.create(contract::run("ns", "ans", "wf")).await.unwrap();
    let mut answered = created.clone();
    answered.spec.input_responses.insert(
        "k".into(),
        runway::api::InputResponse {
            action: runway::api::InputAction::Accept,
            content: None,
            answered_by: Some("bob".into()),
            answered_by_groups: vec![],
            answered_at: None,
        },
    );
    s.update(answered.clone()).await.unwrap();
    let p = api
        .requests("PATCH", "/namespaces/ns/runs/ans")
        .pop()
        .unwrap();
    assert_eq!(
        p.content_type.as_deref(),
        Some("application/json-patch+json")
    );
    assert_eq!(
        p.query.get("fieldManager").map(String::as_str),
        Some("runway-mcp")
    );
    let ops = p.body.as_array().unwrap();
    let op = |path: &str| ops.iter().find(|o| o["path"] == path).cloned();
    assert_eq!(
        op("/metadata/resourceVersion").unwrap()["value"],
        created.metadata.resource_version.clone().unwrap()
    );
    assert_eq!(
        op("/spec/inputResponses").unwrap()["value"]["k"]["answeredBy"],
        "bob"
    );
    // the same patch again, from the stale version: 409 → Conflict
    assert_eq!(s.update(answered).await.unwrap_err(), StoreError::Conflict);
}

#[tokio::test]
async fn nulls_in_arguments_and_answers_survive_spec_updates() {
    let (_a, s) = store().await;
    contract::nulls_survive_spec_updates(&s).await;
}

#[tokio::test]
async fn a_get_that_misses_the_cache_asks_the_api_server() {
    let (api, s) = store().await;
    // written behind the reflector's back, and read at once
    api.put(
        "runway.dev/v1alpha1/runs",
        serde_json::json!({"apiVersion": "runway.dev/v1alpha1", "kind": "Run",
            "metadata": {"name": "fresh", "namespace": "ns"}, "spec": {"workflowRef": {"name": "wf"}}}),
    );
    let before = api.requests("GET", "/namespaces/ns/runs/fresh").len();
    let got = s.get("ns", "fresh").await.unwrap();
    assert!(got.is_some());
    // either the reflector had it already, or a direct GET was made; a create never needs one
    let created = s.create(contract::run("ns", "mine", "wf")).await.unwrap();
    let direct_before = api.requests("GET", "/namespaces/ns/runs/mine").len();
    assert_eq!(s.get("ns", "mine").await.unwrap().unwrap(), created);
    assert_eq!(
        api.requests("GET", "/namespaces/ns/runs/mine").len(),
        direct_before,
        "own writes are served locally"
    );
    assert!(api.requests("GET", "/namespaces/ns/runs/fresh").len() >= before);
    // a name nobody created: a direct GET answers 404 → None
    assert!(s.get("ns", "ghost").await.unwrap().is_none());
    assert_eq!(api.requests("GET", "/namespaces/ns/runs/ghost").len(), 1);
}

#[tokio::test]
async fn a_run_another_replica_deleted_is_not_served_from_what_a_watch_delivered() {
    use futures::StreamExt;
    use runway::store::WatchEvent;
    let api = FakeApi::start().await;
    // `serving` answers the caller; `working` runs the Run and collects it when it expires.
    let serving = KubeStore::start(api.client()).await.unwrap();
    let working = KubeStore::start(api.client()).await.unwrap();
    let mut live = serving.watch(Some(serving.resource_version().await.unwrap()));
    finished(&working, "collected").await;
    // The caller follows the Run (as `subscriptions/listen` does) until it finishes, and stops.
    while let Some(event) = live.next().await {
        if matches!(event.unwrap(), WatchEvent::Applied(r) if r.phase() == RunPhase::Succeeded) {
            break;
        }
    }
    drop(live);
    working.delete("ns", "collected", None, None).await.unwrap();
    let later = working
        .create(contract::run("ns", "later", "wf"))
        .await
        .unwrap();
    // The serving replica's cache follows the API server's watch; poll it as a client would
    // until it has the Run created after the delete, and so the delete.
    until_listed(&serving, &later).await;
    assert_eq!(serving.get("ns", "collected").await.unwrap(), None);
    assert_not_listed(&serving, "collected").await;
}

#[tokio::test]
async fn a_version_a_slower_watch_delivers_after_the_delete_is_not_served() {
    use futures::StreamExt;
    use runway::store::WatchEvent;
    let api = FakeApi::start().await;
    let serving = KubeStore::start(api.client()).await.unwrap();
    let working = KubeStore::start(api.client()).await.unwrap();
    // Two callers follow the Runs from the same version; one of them reads its events late.
    let from = serving.resource_version().await.unwrap();
    let mut quick = serving.watch(Some(from.clone()));
    let mut slow = serving.watch(Some(from));
    finished(&working, "collected").await;
    working.delete("ns", "collected", None, None).await.unwrap();
    let later = working
        .create(contract::run("ns", "later", "wf"))
        .await
        .unwrap();
    while let Some(event) = quick.next().await {
        if matches!(event.unwrap(), WatchEvent::Deleted(_)) {
            break;
        }
    }
    // Until the cache has the Run created after the delete, it may still hold the deleted one.
    until_listed(&serving, &later).await;
    assert_eq!(serving.get("ns", "collected").await.unwrap(), None);
    // The slower watch now delivers the finished version, after the delete was seen.
    while let Some(event) = slow.next().await {
        if matches!(event.unwrap(), WatchEvent::Applied(r) if r.phase() == RunPhase::Succeeded) {
            break;
        }
    }
    assert_eq!(
        serving.get("ns", "collected").await.unwrap(),
        None,
        "a deleted Run is served from a version delivered after its delete"
    );
    assert_not_listed(&serving, "collected").await;
}

/// A read after a delete returned does not find the Run, though the reflector has not heard of
/// the delete yet: the collector would otherwise collect it again, a list count it.
#[tokio::test]
async fn a_run_deleted_here_is_gone_before_the_cache_hears_of_it() {
    let api = FakeApi::start().await;
    let serving = KubeStore::start(api.client()).await.unwrap();
    let other = KubeStore::start(api.client()).await.unwrap();
    let created = other
        .create(contract::run("ns", "collected", "wf"))
        .await
        .unwrap();
    // Once the serving replica's cache holds the Run (it wrote nothing of it itself)…
    let no_labels = std::collections::BTreeMap::new();
    until_listed(&serving, &created).await;
    // …its watch falls behind, and it deletes the Run.
    let held = api.hold_watches().await;
    serving.delete("ns", "collected", None, None).await.unwrap();
    assert_eq!(serving.get("ns", "collected").await.unwrap(), None);
    let listed = serving.list(Some("ns"), &no_labels).await.unwrap();
    assert!(listed.is_empty(), "a deleted Run is listed: {listed:?}");
    let counts = serving.phase_counts().await.unwrap();
    assert_eq!(counts.values().sum::<i64>(), 0, "{counts:?}");
    drop(held);
}

/// What a follower lists before it watches comes from the API server in one snapshot: a Run
/// created while the cache lagged is among the keys, or after the version (so in the watch).
#[tokio::test]
async fn keys_to_watch_from_include_what_a_lagging_cache_lacks() {
    let api = FakeApi::start().await;
    let serving = KubeStore::start(api.client()).await.unwrap();
    let other = KubeStore::start(api.client()).await.unwrap();
    let held = api.hold_watches().await;
    let created = other
        .create(contract::run("ns", "unseen", "wf"))
        .await
        .unwrap();
    let (keys, rv) = serving.keys_now().await.unwrap();
    assert!(
        keys.contains(&runway::store::Versioned::of(&created.metadata).unwrap()),
        "{keys:?}"
    );
    let created_at: u64 = created.metadata.resource_version.unwrap().parse().unwrap();
    assert!(rv.parse::<u64>().unwrap() >= created_at);
    // The cache has not seen it (what the list used to come from); the source has.
    let no_labels = std::collections::BTreeMap::new();
    assert!(serving.list(None, &no_labels).await.unwrap().is_empty());
    let now = serving.get_now("ns", "unseen").await.unwrap().unwrap();
    assert_eq!(now.metadata.uid, created.metadata.uid);
    // What was read at the source is what the reads that follow get while the cache lags.
    let got = serving.get("ns", "unseen").await.unwrap();
    assert_eq!(
        got.map(|r| r.metadata.uid),
        Some(created.metadata.uid.clone())
    );
    drop(held);
}

/// A Run changed while the cache lagged: the source's keys carry its new version, and once
/// read at the source the change is what every read gets, before the cache has it.
#[tokio::test]
async fn a_run_read_at_the_source_is_served_while_the_cache_lags() {
    let api = FakeApi::start().await;
    let serving = KubeStore::start(api.client()).await.unwrap();
    let other = KubeStore::start(api.client()).await.unwrap();
    let created = other
        .create(contract::run("ns", "changed", "wf"))
        .await
        .unwrap();
    until_listed(&serving, &created).await;
    let held = api.hold_watches().await;
    let mut cancelled = created.clone();
    cancelled.spec.cancel = Some(runway::api::CancelRequest {
        reason: Some("stop".into()),
        requested_by: None,
        requested_at: None,
    });
    let written = other.update(cancelled).await.unwrap();
    let (keys, _) = serving.keys_now().await.unwrap();
    let now = written.metadata.resource_version.clone().unwrap();
    assert!(
        keys.contains(&runway::store::Versioned::of(&written.metadata).unwrap()),
        "{keys:?}"
    );
    let cached = serving.get("ns", "changed").await.unwrap().unwrap();
    assert!(cached.spec.cancel.is_none(), "the cache lags");
    serving.get_now("ns", "changed").await.unwrap();
    let got = serving.get("ns", "changed").await.unwrap().unwrap();
    assert_eq!(got.metadata.resource_version, Some(now));
    assert!(got.spec.cancel.is_some());
    drop(held);
}

/// After a write conflicts, the next read has the version that won, though the cache has not
/// heard of it yet: a retry made on the cache's copy would conflict again, every time.
#[tokio::test]
async fn after_a_conflict_the_next_read_has_the_version_that_won() {
    let api = FakeApi::start().await;
    let serving = KubeStore::start(api.client()).await.unwrap();
    let other = KubeStore::start(api.client()).await.unwrap();
    let created = other
        .create(contract::run("ns", "contested", "wf"))
        .await
        .unwrap();
    until_listed(&serving, &created).await;
    // Another replica writes the Run while this one's watch lags.
    let held = api.hold_watches().await;
    let labelled = |mut r: Run, k: &str| {
        r.metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert(k.into(), "yes".into());
        r
    };
    let won = other
        .update(labelled(created.clone(), "theirs"))
        .await
        .unwrap();
    let mine = serving.get("ns", "contested").await.unwrap().unwrap();
    assert_eq!(
        mine.metadata.resource_version,
        created.metadata.resource_version
    );
    assert_eq!(
        serving.update(labelled(mine, "mine")).await.unwrap_err(),
        StoreError::Conflict
    );
    let again = serving.get("ns", "contested").await.unwrap().unwrap();
    assert_eq!(
        again.metadata.resource_version,
        won.metadata.resource_version
    );
    let both = serving.update(labelled(again, "mine")).await.unwrap();
    let labels = both.metadata.labels.unwrap();
    assert!(
        labels.contains_key("theirs") && labels.contains_key("mine"),
        "{labels:?}"
    );
    drop(held);
}
