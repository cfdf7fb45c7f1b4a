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
