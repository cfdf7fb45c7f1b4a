//! How the controller meets its store's watch: a watch that fails as soon as it starts (an API
//! server refusing watches under load, or a role without `watch`) is listed again after a pause
//! that grows, by the controller and the change feed, instead of every Run being read again in
//! a tight loop, and Runs still finish; and a new term reads its unfinished Runs at the source.

use crate::support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use runway::api::RunPhase;
use runway::store::sqlite::SqliteStore;
use runway::store::{RunStore, StoreError};
use serde_json::json;
use support::harness::{Harness, PATIENCE};
use support::hooked::{Call, Hooked};

/// What the store was asked: each watch started (with its instant) and each Run read at the
/// source.
#[derive(Default)]
struct Notes {
    watched: Mutex<Vec<Instant>>,
    read: Mutex<Vec<String>>,
    told: tokio::sync::Notify,
}

impl Notes {
    /// The SQLite store `inner`, noting here; with `broken`, every watch fails at once.
    fn store(self: &Arc<Self>, inner: SqliteStore, broken: bool) -> Arc<dyn RunStore> {
        let notes = Arc::clone(self);
        Arc::new(Hooked::new(inner, move |call| {
            let refused = match call {
                Call::Watch => {
                    notes.watched.lock().unwrap().push(Instant::now());
                    broken.then(|| StoreError::Backend("429 Too Many Requests".into()))
                }
                Call::GetNow(name) => {
                    notes.read.lock().unwrap().push(name.to_owned());
                    None
                }
                _ => return None,
            };
            notes.told.notify_waiters();
            refused
        }))
    }

    /// Wait until `enough` says yes to what was noted; what it said yes to.
    async fn until<T>(&self, what: &str, enough: impl Fn(&Self) -> Option<T>) -> T {
        let waited = tokio::time::timeout(PATIENCE, async {
            loop {
                let told = self.told.notified();
                if let Some(v) = enough(self) {
                    return v;
                }
                told.await;
            }
        })
        .await;
        waited.unwrap_or_else(|_| panic!("never {what}"))
    }

    /// Wait until `n` watches were started; their instants.
    async fn watched(&self, n: usize) -> Vec<Instant> {
        self.until(&format!("watched {n} times"), |s| {
            let watched = s.watched.lock().unwrap().clone();
            (watched.len() >= n).then_some(watched)
        })
        .await
    }
}

/// The gaps between successive instants.
fn apart(at: &[Instant]) -> Vec<Duration> {
    at.windows(2).map(|w| w[1] - w[0]).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_that_keeps_failing_is_started_again_after_a_growing_pause() {
    let dir = support::harness::TempDir::new();
    std::fs::create_dir_all(dir.path().join("workflows")).unwrap();
    std::fs::write(
        dir.path().join("workflows/wf.yaml"),
        "apiVersion: runway.dev/v1alpha1\nkind: Workflow\nmetadata: { name: quick }\nspec:\n  steps: []\n",
    )
    .unwrap();
    let executor = Arc::new(runway::steps::Executors::new(
        Arc::new(runway::steps::StaticSecrets::default()),
        &support::harness::local_egress(),
    ));
    let notes = Arc::new(Notes::default());
    let noting = Arc::clone(&notes);
    let h = Harness::start_wrapped(dir, executor, 1, move |inner| noting.store(inner, true));
    // A Run created meanwhile is still found by a list and finished.
    let run = h.create("quick", json!({})).await.metadata.name.unwrap();
    let done = h
        .wait_for(&run, "finished", |r| r.phase().is_terminal())
        .await;
    assert_eq!(done.phase(), RunPhase::Succeeded);
    let gaps = apart(&notes.watched(3).await[..3]);
    assert!(
        gaps[0] >= Duration::from_secs(1) && gaps[1] >= Duration::from_secs(2),
        "watches {gaps:?} apart"
    );
    h.stop().await;

    // The change feed of the MCP endpoint, on its own.
    let dir = support::harness::TempDir::new();
    let feed_notes = Arc::new(Notes::default());
    let feed_store = feed_notes.store(
        SqliteStore::open(&dir.path().join("runs.db")).unwrap(),
        true,
    );
    let shutdown = tokio_util::sync::CancellationToken::new();
    let _changes = runway::store::changes::RunChanges::follow(feed_store, shutdown.clone());
    let gaps = apart(&feed_notes.watched(3).await[..3]);
    assert!(
        gaps[0] >= Duration::from_secs(1) && gaps[1] >= Duration::from_secs(2),
        "watches {gaps:?} apart"
    );
    shutdown.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_term_reads_its_unfinished_runs_at_the_source_first() {
    let dir = support::harness::TempDir::new();
    std::fs::create_dir_all(dir.path().join("workflows")).unwrap();
    std::fs::write(
        dir.path().join("workflows/wf.yaml"),
        "apiVersion: runway.dev/v1alpha1\nkind: Workflow\nmetadata: { name: ask }\nspec:\n  steps:\n    - { name: q, input: { requests: [ { name: go, message: Go? } ] } }\n",
    )
    .unwrap();
    let executor = Arc::new(runway::steps::Executors::new(
        Arc::new(runway::steps::StaticSecrets::default()),
        &support::harness::local_egress(),
    ));
    // A previous term left one Run waiting for an answer and one finished.
    let h = Harness::start_with(dir, executor.clone(), 1);
    let waiting = h.create("ask", json!({})).await.metadata.name.unwrap();
    h.wait_for(&waiting, "waiting", |r| r.phase() == RunPhase::Waiting)
        .await;
    let done = h.create("ask", json!({})).await.metadata.name.unwrap();
    h.wait_for(&done, "waiting", |r| r.phase() == RunPhase::Waiting)
        .await;
    h.answer(
        &done,
        "q.go",
        runway::api::InputAction::Accept,
        json!({}),
        "alice",
        &[],
    )
    .await;
    h.wait_for(&done, "finished", |r| r.phase().is_terminal())
        .await;
    let dir = h.stop().await;
    let notes = Arc::new(Notes::default());
    let noting = Arc::clone(&notes);
    let h = Harness::start_wrapped(dir, executor, 1, move |inner| noting.store(inner, false));
    let read = notes
        .until("read a Run at the source", |s| {
            let read = s.read.lock().unwrap().clone();
            (!read.is_empty()).then_some(read)
        })
        .await;
    assert_eq!(read, [waiting], "only the unfinished Run");
    h.stop().await;
}

/// After a gap in its watch the change feed reads every followed Run again; one it cannot read
/// then has its feed closed, so that its followers read it themselves, and the feed goes on
/// for the others instead of waiting for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_the_feed_cannot_read_after_a_gap_is_handed_back_to_its_followers() {
    let dir = support::harness::TempDir::new();
    let inner = SqliteStore::open(&dir.path().join("runs.db")).unwrap();
    for name in ["unreadable", "readable"] {
        inner
            .create(support::contract::run("ns", name, "wf"))
            .await
            .unwrap();
    }
    let watches = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = Arc::clone(&watches);
    let store: Arc<dyn RunStore> = Arc::new(Hooked::new(inner, move |call| match call {
        // The first watch fails at once: a gap, after which the feed reads its Runs again.
        Call::Watch if counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 => {
            Some(StoreError::Backend("connection reset".into()))
        }
        Call::GetNow("unreadable") => Some(StoreError::Backend("503 Service Unavailable".into())),
        _ => None,
    }));
    let shutdown = tokio_util::sync::CancellationToken::new();
    let changes = runway::store::changes::RunChanges::follow(store.clone(), shutdown.clone());
    let mut lost = changes.subscribe("ns", "unreadable");
    let mut kept = changes.subscribe("ns", "readable");
    let closed = tokio::time::timeout(PATIENCE, lost.recv()).await.unwrap();
    assert_eq!(
        closed.unwrap_err(),
        tokio::sync::broadcast::error::RecvError::Closed
    );
    // The other Run's followers are told of its changes once the watch runs again.
    let readable = store.get("ns", "readable").await.unwrap().unwrap();
    let mut changed = readable.clone();
    changed.metadata.labels = Some([("seen".to_owned(), "yes".to_owned())].into());
    let written = store.update(changed).await.unwrap();
    let told = tokio::time::timeout(PATIENCE, async {
        loop {
            match kept.recv().await.unwrap() {
                runway::store::Change::Updated(r)
                    if r.metadata.resource_version == written.metadata.resource_version =>
                {
                    return r;
                }
                _ => {}
            }
        }
    })
    .await
    .expect("the change of the readable Run");
    assert_eq!(told.metadata.labels, written.metadata.labels);
    shutdown.cancel();
}
