//! "Tell me when this Run changes": one watch of the store per process, fanned out by Run key
//! to whoever waits on a Run (a blocking call, a listen stream, a held 2025-era call, a parent
//! waiting for its child). Only Runs someone waits on are copied.
//!
//! A subscriber that falls behind by more than `PER_RUN_BUFFER` changes gets
//! `RecvError::Lagged` and reads the Run again; a Run that is deleted gives [`Change::Deleted`];
//! after a gap in the watch (the store restarted, the resume point expired) every watched Run's
//! current state is sent again, and a Run that is gone or cannot be read then has its feed
//! closed (`RecvError::Closed`): its subscribers subscribe and read it again. Subscribers subscribe first and read the Run second, so that no
//! change falls between the two.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use super::recent::rv_num;
use super::{RunStore, StoreError, WatchEvent};
use crate::api::{ObjectKey, Run};

/// Changes buffered per Run for a slow subscriber; past that it reads the Run again.
const PER_RUN_BUFFER: usize = 64;
/// Pause before watching again after the store failed, at first and at most (doubling while
/// the watch fails before it delivers anything).
const RETRY: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(30);

/// What a subscriber receives.
#[derive(Debug, Clone)]
pub enum Change {
    /// The Run's new state.
    Updated(Arc<Run>),
    /// A Run of the name is gone: its last state. See [`ends`] for whether it is the Run a
    /// subscriber holds.
    Deleted(Arc<Run>),
}

/// Whether `next`, a version of a Run a subscriber was told, is no newer than `seen`, the
/// version it holds (read after it subscribed, that read may be ahead of the feed): a follower
/// that took it would show the Run going back. Versions count every write of the store, so
/// this holds across Runs of one name too: a late change of the Run the name held before is
/// older than any version of the Run it holds now.
pub fn stale(next: &Run, seen: &Run) -> bool {
    let version = |r: &Run| r.metadata.resource_version.as_deref()?.parse::<u64>().ok();
    version(next)
        .zip(version(seen))
        .is_some_and(|(next, seen)| next <= seen)
}

/// Whether a delete the feed sent ends `seen`, the Run a subscriber holds: the delete of that
/// Run (a delete carries the version it was made at) or of a Run that came after it; not the
/// late delete of the Run the name held before.
pub fn ends(deleted: &Run, seen: &Run) -> bool {
    deleted.metadata.uid == seen.metadata.uid || !stale(deleted, seen)
}

/// Per-Run change feeds, cheap to clone: every clone shares the subscribers.
#[derive(Clone, Default)]
pub struct RunChanges {
    subs: Arc<Mutex<HashMap<ObjectKey, Feed>>>,
}

/// One Run's subscribers and the newest version sent to them.
struct Feed {
    tx: broadcast::Sender<Change>,
    /// After a gap the Run is read again and the watch replays from before that read: what is
    /// no newer than this was sent already, and sending it would take the Run back in time.
    sent: Option<u64>,
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
            .or_insert_with(|| Feed {
                tx: broadcast::channel(PER_RUN_BUFFER).0,
                sent: None,
            })
            .tx
            .subscribe()
    }

    /// Hand one watch event to the subscribers of its Run.
    pub fn publish(&self, event: &WatchEvent) {
        let Some(key) = ObjectKey::of(&event.run().metadata) else {
            return;
        };
        let change = match event {
            WatchEvent::Applied(r) => Change::Updated(r.clone()),
            WatchEvent::Deleted(r) => Change::Deleted(Arc::clone(r)),
        };
        self.send(&key, change, rv_num(event.run()));
    }

    /// Send `change` (at `version`, when known) to the subscribers of `key`, forgetting the
    /// feed once nobody listens. A change no newer than what was sent is a replay from before
    /// a gap, the delete of a Run created again under the name as well as an update.
    fn send(&self, key: &ObjectKey, change: Change, version: Option<u64>) {
        let mut subs = self.subs.lock().expect("subs lock");
        let Some(feed) = subs.get_mut(key) else {
            return;
        };
        if version.zip(feed.sent).is_some_and(|(v, sent)| v <= sent) {
            return;
        }
        if version.is_some() {
            feed.sent = version;
        }
        if feed.tx.send(change).is_err() {
            subs.remove(key);
        }
    }

    /// Follow the store's watch from now on, starting again after every gap.
    async fn watch(&self, store: Arc<dyn RunStore>) {
        let mut pause = RETRY;
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
            let since = tokio::time::Instant::now();
            loop {
                match watch.next().await {
                    Some(Ok(event)) => {
                        self.publish(&event);
                        pause = RETRY;
                    }
                    // The resume point expired: read again at once.
                    Some(Err(StoreError::Gone)) => break,
                    // A watch refused as soon as it starts (overload, rights) would otherwise
                    // have every watched Run read again in a tight loop.
                    Some(Err(_)) | None => {
                        // One that ran longer than the pause was not failing over and over
                        // (a quiet one delivers nothing to reset it).
                        if since.elapsed() > pause {
                            pause = RETRY;
                        }
                        tokio::time::sleep(pause).await;
                        pause = (pause * 2).min(RETRY_MAX);
                        break;
                    }
                }
            }
        }
    }

    /// After a watch gap, send every watched Run's current state. A Run found gone, or that
    /// cannot be read now, has its feed closed instead: its subscribers read it again
    /// themselves (as after falling behind), and what the watch replays of it from before the
    /// gap cannot bring it back or hold the feed up for the others.
    async fn resync(&self, store: &dyn RunStore) {
        let keys: Vec<ObjectKey> = self
            .subs
            .lock()
            .expect("subs lock")
            .keys()
            .cloned()
            .collect();
        for key in keys {
            // The source, not a cache that may lag the version the watch resumes from.
            match store.get_now(&key.namespace, &key.name).await {
                Ok(Some(r)) => self.send(&key, Change::Updated(Arc::clone(&r)), rv_num(&r)),
                Ok(None) | Err(_) => {
                    self.subs.lock().expect("subs lock").remove(&key);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use jiff::Timestamp;
    use serde_json::Value;

    use super::*;

    fn version(rv: u64) -> WatchEvent {
        let mut r = Run::requested("ns", "r", "w", Value::Null, None, Timestamp::UNIX_EPOCH);
        r.metadata.resource_version = Some(rv.to_string());
        WatchEvent::Applied(Arc::new(r))
    }

    fn received(rx: &mut broadcast::Receiver<Change>) -> Vec<Option<u64>> {
        std::iter::from_fn(|| rx.try_recv().ok())
            .map(|c| match c {
                Change::Updated(r) => rv_num(&r),
                Change::Deleted(_) => None,
            })
            .collect()
    }

    fn at(rv: &str, uid: &str) -> Run {
        let mut r = Run::requested("ns", "r", "w", Value::Null, None, Timestamp::UNIX_EPOCH);
        r.metadata.resource_version = Some(rv.into());
        r.metadata.uid = Some(uid.into());
        r
    }

    #[test]
    fn a_version_no_newer_than_the_one_held_is_stale_whichever_run_it_is_of() {
        assert!(stale(&at("6", "a"), &at("7", "a")));
        assert!(stale(&at("7", "a"), &at("7", "a")));
        assert!(!stale(&at("8", "a"), &at("7", "a")));
        assert!(
            stale(&at("6", "b"), &at("7", "a")),
            "a late change of the Run the name held before"
        );
        assert!(!stale(&at("8", "b"), &at("7", "a")), "a Run after it");
        assert!(
            !stale(&at("x", "a"), &at("7", "a")),
            "a version that is not a number"
        );
    }

    #[test]
    fn only_a_delete_of_the_run_held_or_of_a_later_one_ends_it() {
        let held = at("7", "b");
        assert!(ends(&at("8", "b"), &held), "its own delete");
        assert!(ends(&at("9", "c"), &held), "a Run after it");
        assert!(
            !ends(&at("5", "a"), &held),
            "the late delete of the Run before it"
        );
    }

    #[tokio::test]
    async fn a_run_found_gone_after_a_gap_is_not_brought_back_by_the_replay() {
        let dir = std::env::temp_dir().join(format!("runway-changes-{}", crate::store::new_uid()));
        std::fs::create_dir_all(&dir).unwrap();
        let store = crate::store::sqlite::SqliteStore::open(&dir.join("runs.db")).unwrap();
        let created = store.create(at("0", "a")).await.unwrap();
        store.delete("ns", "r", None, None).await.unwrap();
        let changes = RunChanges::default();
        let mut rx = changes.subscribe("ns", "r");
        // The watch resumes from before the Run's last write: the read after the gap finds it
        // gone, and closes its feed; the watch's replay of its last state goes to nobody.
        changes.resync(&store).await;
        changes.publish(&WatchEvent::Applied(Arc::new(created)));
        assert_eq!(
            rx.try_recv().unwrap_err(),
            broadcast::error::TryRecvError::Closed
        );
        // Subscribed again, a subscriber gets what comes next.
        let mut again = changes.subscribe("ns", "r");
        changes.publish(&version(40));
        assert_eq!(received(&mut again), [Some(40)]);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_replay_after_a_gap_does_not_take_a_run_back_in_time() {
        let changes = RunChanges::default();
        let mut rx = changes.subscribe("ns", "r");
        changes.publish(&version(3));
        // The gap: the Run read again at 7, then the watch replays from 4.
        changes.publish(&version(7));
        for rv in 4..=8 {
            changes.publish(&version(rv));
        }
        assert_eq!(received(&mut rx), [Some(3), Some(7), Some(8)]);
        // A delete always goes through, and a Run made again under the name follows it.
        let mut gone = Run::requested("ns", "r", "w", Value::Null, None, Timestamp::UNIX_EPOCH);
        gone.metadata.resource_version = Some("9".into());
        changes.publish(&WatchEvent::Deleted(Arc::new(gone.clone())));
        changes.publish(&version(10));
        assert_eq!(received(&mut rx), [None, Some(10)]);
        // After another gap the Run made again is read at 12, and the watch replays the first
        // Run's delete (9) from before: the Run read stands.
        changes.publish(&version(12));
        changes.publish(&WatchEvent::Deleted(Arc::new(gone)));
        assert_eq!(received(&mut rx), [Some(12)]);
    }
}
