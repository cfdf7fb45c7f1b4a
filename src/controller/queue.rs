//! A work queue of Run keys: deduplicated, delayed, never handing one key to two workers, and
//! never handing one namespace more than its share of the workers.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Mutex;

use tokio::sync::Notify;
use tokio::time::Instant;

/// `(namespace, name)` of a Run.
pub use crate::api::ObjectKey as Key;

/// The queue.
pub(crate) struct Queue {
    state: Mutex<State>,
    notify: Notify,
    /// Most keys of one namespace held by workers at once.
    per_namespace: usize,
}

impl Default for Queue {
    fn default() -> Self {
        Self::with_namespace_limit(usize::MAX)
    }
}

#[derive(Default)]
struct State {
    due: BTreeSet<(Instant, Key)>,
    when: HashMap<Key, Instant>,
    active: HashSet<Key>,
    /// Held keys per namespace.
    busy: HashMap<String, usize>,
}

impl Queue {
    /// A queue that hands out at most `n` keys of one namespace at a time, so that one tenant's
    /// Runs cannot occupy every worker.
    pub(crate) fn with_namespace_limit(n: usize) -> Self {
        Self {
            state: Mutex::default(),
            notify: Notify::new(),
            per_namespace: n.max(1),
        }
    }

    /// Process `key` now.
    pub fn add(&self, key: Key) {
        self.add_at(key, Instant::now());
    }

    /// Process `key` at `at`, or earlier if it is already due earlier.
    pub(crate) fn add_at(&self, key: Key, at: Instant) {
        let mut s = self.state.lock().expect("queue lock");
        if let Some(&prev) = s.when.get(&key) {
            if prev <= at {
                return;
            }
            s.due.remove(&(prev, key.clone()));
        }
        s.when.insert(key.clone(), at);
        s.due.insert((at, key));
        drop(s);
        self.notify.notify_waiters();
    }

    /// Keys waiting (due now or later).
    pub fn len(&self) -> usize {
        self.state.lock().expect("queue lock").due.len()
    }

    /// Wait for a due key that no other worker holds, and hold it until [`Queue::done`].
    pub async fn pop(&self) -> Key {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let next_wake = {
                let mut s = self.state.lock().expect("queue lock");
                let now = Instant::now();
                let limit = self.per_namespace;
                let found = s
                    .due
                    .iter()
                    .take_while(|(t, _)| *t <= now)
                    .find(|(_, k)| {
                        !s.active.contains(k)
                            && s.busy.get(&k.namespace).copied().unwrap_or(0) < limit
                    })
                    .cloned();
                if let Some((t, k)) = found {
                    s.due.remove(&(t, k.clone()));
                    s.when.remove(&k);
                    s.active.insert(k.clone());
                    *s.busy.entry(k.namespace.clone()).or_default() += 1;
                    return k;
                }
                s.due
                    .iter()
                    .find(|(t, k)| *t > now && !s.active.contains(k))
                    .map(|(t, _)| *t)
            };
            match next_wake {
                Some(t) => {
                    tokio::select! {
                        _ = &mut notified => {}
                        _ = tokio::time::sleep_until(t) => {}
                    }
                }
                None => notified.await,
            }
        }
    }

    /// Release `key`; if it was added again meanwhile, another worker may take it now.
    pub fn done(&self, key: &Key) {
        let mut s = self.state.lock().expect("queue lock");
        if s.active.remove(key)
            && let Some(n) = s.busy.get_mut(&key.namespace)
        {
            *n -= 1;
            if *n == 0 {
                s.busy.remove(&key.namespace);
            }
        }
        drop(s);
        self.notify.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn one_namespace_gets_at_most_its_share() {
        let q = Queue::with_namespace_limit(1);
        let key = Key::new;
        q.add(key("busy", "1"));
        q.add(key("busy", "2"));
        q.add(key("quiet", "1"));
        let first = q.pop().await;
        assert_eq!(first, key("busy", "1"));
        assert_eq!(q.pop().await, key("quiet", "1"), "busy/2 waits for busy/1");
        let waiting = tokio::time::timeout(Duration::from_millis(50), q.pop()).await;
        assert!(waiting.is_err(), "busy is at its limit");
        q.done(&first);
        assert_eq!(q.pop().await, key("busy", "2"));
    }

    fn k(n: &str) -> Key {
        Key::new("ns", n)
    }

    #[tokio::test(start_paused = true)]
    async fn deduplicates_and_orders_by_time() {
        let q = Queue::default();
        q.add_at(k("b"), Instant::now() + Duration::from_secs(5));
        q.add(k("a"));
        q.add(k("a"));
        assert_eq!(q.len(), 2);
        assert_eq!(q.pop().await, k("a"));
        q.done(&k("a"));
        let before = Instant::now();
        assert_eq!(q.pop().await, k("b"));
        assert!(Instant::now() - before >= Duration::from_secs(5));
    }

    #[tokio::test(start_paused = true)]
    async fn an_earlier_time_replaces_a_later_one() {
        let q = Queue::default();
        q.add_at(k("a"), Instant::now() + Duration::from_secs(60));
        q.add_at(k("a"), Instant::now() + Duration::from_secs(1));
        q.add_at(k("a"), Instant::now() + Duration::from_secs(30));
        let before = Instant::now();
        q.pop().await;
        assert_eq!(Instant::now() - before, Duration::from_secs(1));
    }

    #[tokio::test(start_paused = true)]
    async fn a_held_key_is_not_given_to_a_second_worker() {
        let q = std::sync::Arc::new(Queue::default());
        q.add(k("a"));
        assert_eq!(q.pop().await, k("a"));
        q.add(k("a"));
        let q2 = q.clone();
        let second = tokio::spawn(async move { q2.pop().await });
        tokio::task::yield_now().await;
        assert!(!second.is_finished());
        q.done(&k("a"));
        assert_eq!(second.await.unwrap(), k("a"));
    }
}
