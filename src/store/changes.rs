//! "Tell me when this Run changes": one watch of the store per process, fanned out by Run key
//! to whoever waits on a Run (a blocking call, a listen stream, a held 2025-era call, a parent
//! waiting for its child). Only Runs someone waits on are copied.
//!
//! A subscriber that falls behind by more than `PER_RUN_BUFFER` changes gets
//! `RecvError::Lagged` and reads the Run again; a Run that is deleted gives [`Change::Deleted`];
//! after a gap in the watch (the store restarted, the resume point expired) every watched Run's
//! current state is sent again. Subscribers subscribe first and read the Run second, so that no
//! change falls between the two.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use super::{RunStore, WatchEvent};
use crate::api::{ObjectKey, Run};

/// Changes buffered per Run for a slow subscriber; past that it reads the Run again.
const PER_RUN_BUFFER: usize = 64;
/// Pause before watching again after the store failed.
const RETRY: Duration = Duration::from_secs(1);

/// What a subscriber receives.
#[derive(Debug, Clone)]
pub enum Change {
    /// The Run's new state.
    Updated(Arc<Run>),
    /// The Run is gone.
    Deleted,
}

/// Per-Run change feeds, cheap to clone: every clone shares the subscribers.
#[derive(Clone, Default)]
pub struct RunChanges {
    subs: Arc<Mutex<HashMap<ObjectKey, broadcast::Sender<Change>>>>,
}

impl std::fmt::Debug for RunChanges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunChanges").finish_non_exhaustive()
    }
}

impl RunChanges {
    /// A feed that follows `store` until `shutdown`.
    pub fn follow(store: Arc<dyn RunStore>, shutdown: CancellationToken) -> Self {
        let me = Self::default();
        let feed = me.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = shutdown.cancelled() => {}
                _ = feed.watch(store) => {}
            }
        });
        me
    }

    /// Changes of one Run from now on. Read the Run after subscribing to miss nothing.
    pub fn subscribe(&self, namespace: &str, name: &str) -> broadcast::Receiver<Change> {
        self.subs
            .lock()
            .expect("subs lock")
            .entry(ObjectKey::new(namespace, name))
            .or_insert_with(|| broadcast::channel(PER_RUN_BUFFER).0)
            .subscribe()
    }

    /// Hand one watch event to the subscribers of its Run.
    pub fn publish(&self, event: &WatchEvent) {
        let Some(key) = ObjectKey::of(&event.run().metadata) else {
            return;
        };
        let change = match event {
            WatchEvent::Applied(r) => Change::Updated(r.clone()),
            WatchEvent::Deleted(_) => Change::Deleted,
        };
        self.send(&key, change);
    }

    /// Send `change` to the subscribers of `key`, forgetting the feed once nobody listens.
    fn send(&self, key: &ObjectKey, change: Change) {
        let mut subs = self.subs.lock().expect("subs lock");
        if let Some(tx) = subs.get(key)
            && tx.send(change).is_err()
        {
            subs.remove(key);
        }
    }

    /// Follow the store's watch from now on, starting again after every gap.
    async fn watch(&self, store: Arc<dyn RunStore>) {
        loop {
            let rv = match store.resource_version().await {
                Ok(rv) => rv,
                Err(_) => {
                    tokio::time::sleep(RETRY).await;
                    continue;
                }
            };
            // Subscribers read after subscribing, so starting from "now" loses nothing of
            // theirs; what changed during the gap is sent again.
            self.resync(&*store).await;
            let mut watch = store.watch(Some(rv));
            while let Some(Ok(event)) = watch.next().await {
                self.publish(&event);
            }
        }
    }

    /// After a watch gap, send every watched Run's current state.
    async fn resync(&self, store: &dyn RunStore) {
        let keys: Vec<ObjectKey> = self
            .subs
            .lock()
            .expect("subs lock")
            .keys()
            .cloned()
            .collect();
        for key in keys {
            let change = match store.get_shared(&key.namespace, &key.name).await {
                Ok(Some(r)) => Change::Updated(r),
                Ok(None) => Change::Deleted,
                Err(_) => continue,
            };
            self.send(&key, change);
        }
    }
}
