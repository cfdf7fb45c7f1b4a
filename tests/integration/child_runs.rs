//! A parent's child Runs while the store falters: a cancel of the child that the store refuses
//! for a moment is asked again within the cleanup's time, and a read of the child that fails
//! for a moment does not fail the parent's step (which would cancel the child and start it
//! over); and a child an earlier parent of the same name left is waited out, not refused.

use crate::support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use runway::api::RunPhase;
use runway::store::changes::RunChanges;
use runway::store::{RunStore, StoreError, WatchEvent};
use serde_json::json;
use support::harness::Harness;
use support::hooked::{Call, Hooked};
use tokio_util::sync::CancellationToken;

const PARENT: &str = r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: parent }
spec:
  steps:
    - { name: child, workflow: { name: ask } }
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: ask }
spec:
  steps:
    - name: q
      input: { requests: [ { name: go, message: "Go?" } ] }
"#;

/// The executors, with child Runs made through the store the controller is given: set once
/// the harness has made that store.
#[derive(Default)]
struct Deferred(OnceLock<runway::steps::Executors>);

#[async_trait::async_trait]
impl runway::steps::Executor for Deferred {
    async fn execute(
        &self,
        run: &runway::api::Run,
        effect: &runway::engine::Effect,
        cancel: CancellationToken,
    ) -> Option<runway::engine::Outcome> {
        let real = self.0.get().expect("executors set with the store");
        real.execute(run, effect, cancel).await
    }
}

/// A harness on the SQLite store with `hook` asked before each call, child Runs included.
fn start(hook: impl Fn(Call<'_>) -> Option<StoreError> + Send + Sync + 'static) -> Harness {
    start_fed(hook, None)
}

/// [`start`], with parents following their children through `feed` instead of a feed that
/// follows the store.
fn start_fed(
    hook: impl Fn(Call<'_>) -> Option<StoreError> + Send + Sync + 'static,
    feed: Option<RunChanges>,
) -> Harness {
    let dir = support::harness::workflows_dir(&[("wf.yaml", PARENT)]);
    let executor = Arc::new(Deferred::default());
    let deferred = Arc::clone(&executor);
    Harness::start_wrapped(dir, executor, 4, move |inner| {
        let store: Arc<dyn RunStore> = Arc::new(Hooked::new(inner, hook));
        let changes =
            feed.unwrap_or_else(|| RunChanges::follow(store.clone(), CancellationToken::new()));
        let children = runway::steps::child::ChildExecutor::new(
            store.clone(),
            changes,
            runway::engine::marks::Marks::new(vec![b"child-runs-test-key".to_vec()]),
        );
        let real = runway::steps::Executors::new(
            Arc::new(runway::steps::StaticSecrets::default()),
            &support::harness::local_egress(),
        )
        .with_children(Arc::new(children));
        let _ = deferred.0.set(real);
        store
    })
}

/// The child Run `parent` started, once it waits for its answer.
async fn waiting_child(h: &Harness, parent: &str) -> String {
    let started = h
        .wait_for(parent, "the child started", |r| {
            r.status
                .as_ref()
                .is_some_and(|s| s.steps.iter().any(|x| x.child_run.is_some()))
        })
        .await;
    let child = started.status.unwrap().steps[0].child_run.clone().unwrap();
    h.wait_for(&child, "waiting", |r| r.phase() == RunPhase::Waiting)
        .await;
    child
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_of_the_child_the_store_refuses_for_a_moment_is_asked_again() {
    let refusals = Arc::new(AtomicUsize::new(2));
    let left = Arc::clone(&refusals);
    let h = start(move |call| match call {
        Call::Update(run) if run.spec.cancel.is_some() => left
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .ok()
            .map(|_| StoreError::Backend("503 Service Unavailable".into())),
        _ => None,
    });
    let parent = h.create("parent", json!({})).await.metadata.name.unwrap();
    let child = waiting_child(&h, &parent).await;
    h.cancel(&parent, "enough").await;
    let ended = h
        .wait_for(&child, "ended", |r| r.phase().is_terminal())
        .await;
    assert_eq!(ended.phase(), RunPhase::Cancelled);
    assert_eq!(refusals.load(Ordering::SeqCst), 0, "both refusals were met");
    let parent = h
        .wait_for(&parent, "ended", |r| r.phase().is_terminal())
        .await;
    assert_eq!(parent.phase(), RunPhase::Cancelled);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_of_the_child_that_fails_for_a_moment_does_not_start_it_over() {
    // Once a child exists, the parent's next two reads of it fail.
    let failures = Arc::new(AtomicUsize::new(2));
    let left = Arc::clone(&failures);
    let created = std::sync::Mutex::new(None::<String>);
    let h = start(move |call| match call {
        Call::Create(run) if run.spec.workflow_ref.name == "ask" => {
            *created.lock().unwrap() = run.metadata.name.clone();
            None
        }
        Call::Get(name) if created.lock().unwrap().as_deref() == Some(name) => left
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .ok()
            .map(|_| StoreError::Backend("connection reset".into())),
        _ => None,
    });
    let parent = h.create("parent", json!({})).await.metadata.name.unwrap();
    let child = waiting_child(&h, &parent).await;
    h.answer(
        &child,
        "q.go",
        runway::api::InputAction::Accept,
        json!({}),
        "alice",
        &[],
    )
    .await;
    let done = h
        .wait_for(&parent, "ended", |r| r.phase().is_terminal())
        .await;
    assert_eq!(done.phase(), RunPhase::Succeeded);
    assert_eq!(failures.load(Ordering::SeqCst), 0, "both failures were met");
    let step = &done.status.unwrap().steps[0];
    assert_eq!(
        (step.attempt, step.child_run.as_deref()),
        (1, Some(&*child))
    );
    let asks = h.store.list(Some("default"), &Default::default()).await;
    let asks = asks
        .unwrap()
        .iter()
        .filter(|r| r.spec.workflow_ref.name == "ask")
        .count();
    assert_eq!(asks, 1, "one child Run");
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_an_earlier_parent_of_the_name_left_is_waited_out() {
    let looked = Arc::new(tokio::sync::Notify::new());
    let armed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (told, watching) = (Arc::clone(&looked), Arc::clone(&armed));
    let h = start(move |call| {
        if let Call::Get("p1-child-1") = call
            && watching.load(Ordering::SeqCst)
        {
            told.notify_one();
        }
        None
    });
    let first = h.create_named("parent", "p1", json!({})).await;
    let earlier = waiting_child(&h, "p1").await;
    assert_eq!(earlier, "p1-child-1");
    let earlier_uid = h
        .store
        .get("default", &earlier)
        .await
        .unwrap()
        .unwrap()
        .metadata
        .uid;
    // The parent is deleted and made again under its name; its child is still there, as
    // until the API server's garbage collector takes it.
    h.store.delete("default", "p1", None, None).await.unwrap();
    armed.store(true, Ordering::SeqCst);
    let second = h.create_named("parent", "p1", json!({})).await;
    assert_ne!(first.metadata.uid, second.metadata.uid);
    looked.notified().await;
    h.store
        .delete("default", &earlier, None, None)
        .await
        .unwrap();
    let child = h
        .wait_for(&earlier, "made again", |r| {
            let parent = r
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get("runway.dev/parent-uid"));
            parent == second.metadata.uid.as_ref() && r.phase() == RunPhase::Waiting
        })
        .await;
    assert_ne!(child.metadata.uid, earlier_uid, "a child of its own");
    let parent = h.store.get("default", "p1").await.unwrap().unwrap();
    assert_eq!(
        parent.phase(),
        RunPhase::Running,
        "the step was not refused"
    );
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_feed_still_brings_of_an_earlier_child_of_the_name_is_passed_over() {
    // A feed behind the store: it brings what the test hands it.
    let feed = RunChanges::default();
    let h = start_fed(|_| None, Some(feed.clone()));
    let parent = h.create("parent", json!({})).await.metadata.name.unwrap();
    let child = waiting_child(&h, &parent).await;
    let now = h.store.get("default", &child).await.unwrap().unwrap();
    // The earlier Run of the name, which ended and was deleted before this one was made: its
    // last changes reach the feed after the parent read this one.
    let mut earlier = now.clone();
    earlier.metadata.uid = Some("uid-of-an-earlier-child".into());
    let version: u64 = now
        .metadata
        .resource_version
        .as_deref()
        .unwrap()
        .parse()
        .unwrap();
    earlier.metadata.resource_version = Some((version - 2).to_string());
    let status = earlier.status.get_or_insert_with(Default::default);
    status.phase = RunPhase::Succeeded;
    status.result = Some(runway::api::JsonText::of(
        &json!({"content": [], "structuredContent": {"from": "the earlier child"}}),
    ));
    feed.publish(&WatchEvent::Applied(Arc::new(earlier.clone())));
    earlier.metadata.resource_version = Some((version - 1).to_string());
    feed.publish(&WatchEvent::Deleted(Arc::new(earlier)));
    h.answer(
        &child,
        "q.go",
        runway::api::InputAction::Accept,
        json!({}),
        "alice",
        &[],
    )
    .await;
    let ended = h
        .wait_for(&child, "ended", |r| r.phase().is_terminal())
        .await;
    assert_eq!(
        ended.phase(),
        RunPhase::Succeeded,
        "the parent waited for it"
    );
    feed.publish(&WatchEvent::Applied(Arc::new(ended)));
    let done = h
        .wait_for(&parent, "ended", |r| r.phase().is_terminal())
        .await;
    assert_eq!(done.phase(), RunPhase::Succeeded, "{:?}", done.status);
    let step = &done.status.unwrap().steps[0];
    assert_ne!(
        step.output.as_ref().and_then(|o| o.get("from")),
        Some(&json!("the earlier child"))
    );
    h.stop().await;
}
