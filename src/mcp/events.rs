//! Fan-out of Run changes to the requests waiting on them (blocking calls, listen streams):
//! one store watch per server, delivered per Run key.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use crate::api::Run;
use crate::store::{RunStore, WatchEvent};

/// Changes buffered per Run for a slow listener; past that it re-reads the Run.
const PER_RUN_BUFFER: usize = 64;

use crate::api::ObjectKey as Key;

/// What a waiter receives.
#[derive(Debug, Clone)]
pub enum Change {
    /// The Run's new state.
    Updated(Box<Run>),
    /// The Run is gone.
    Deleted,
}

/// Per-Run change feeds.
#[derive(Default)]
pub struct RunEvents {
    subs: Mutex<HashMap<Key, broadcast::Sender<Change>>>,
}

impl RunEvents {
    /// Start following `store` until `shutdown`.
    pub fn start(store: Arc<dyn RunStore>, shutdown: CancellationToken) -> Arc<Self> {
        let me = Arc::new(Self::default());
        let feed = me.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = shutdown.cancelled() => {}
                _ = feed.follow(store) => {}
            }
        });
        me
    }

    async fn follow(&self, store: Arc<dyn RunStore>) {
        loop {
            let rv = match store.resource_version().await {
                Ok(rv) => rv,
                Err(_) => {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            };
            // Waiters re-read after subscribing, so starting from "now" loses nothing.
            self.resync(&*store).await;
            let mut watch = store.watch(Some(rv));
            while let Some(Ok(ev)) = watch.next().await {
                let Some(key) = Key::of(&ev.run().metadata) else {
                    continue;
                };
                let mut subs = self.subs.lock().expect("subs lock");
                // Copied only for a Run someone waits on.
                let Some(tx) = subs.get(&key) else { continue };
                let change = match ev {
                    WatchEvent::Applied(r) => Change::Updated(Box::new((*r).clone())),
                    WatchEvent::Deleted(_) => Change::Deleted,
                };
                if tx.send(change).is_err() {
                    subs.remove(&key);
                }
            }
        }
    }

    /// After a watch gap, push every watched Run's current state.
    async fn resync(&self, store: &dyn RunStore) {
        let keys: Vec<Key> = self
            .subs
            .lock()
            .expect("subs lock")
            .keys()
            .cloned()
            .collect();
        for key in keys {
            let change = match store.get(&key.namespace, &key.name).await {
                Ok(Some(r)) => Change::Updated(Box::new(r)),
                Ok(None) => Change::Deleted,
                Err(_) => continue,
            };
            if let Some(tx) = self.subs.lock().expect("subs lock").get(&key) {
                let _ = tx.send(change);
            }
        }
    }

    /// Changes of one Run from now on. Read the Run after subscribing to miss nothing.
    pub fn subscribe(&self, namespace: &str, name: &str) -> broadcast::Receiver<Change> {
        let mut subs = self.subs.lock().expect("subs lock");
        subs.entry(Key::new(namespace, name))
            .or_insert_with(|| broadcast::channel(PER_RUN_BUFFER).0)
            .subscribe()
    }
}
