//! A work queue of Run keys: deduplicated, delayed, never handing one key to two workers, and
//! never handing one namespace more than its share of the workers.
//!
//! Every operation costs a few map and ordered-set steps, whatever the number of keys queued:
//! each namespace keeps its own line in due order, and only the lines that may hand out a key
//! now (not at their share) are ranked by their first key. A single queue in due order had to
//! step over every due key of a namespace at its share on each wake-up, so a backlog of
//! thousands of Runs in one namespace made the workers spend their time scanning it.

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
    /// When each key in a line is due.
    when: HashMap<Key, Instant>,
    /// Per namespace, its keys in due order (none of them held by a worker).
    lines: HashMap<String, BTreeSet<(Instant, Key)>>,
    /// The first key's time of every line that may hand out a key (below its share).
    heads: BTreeSet<(Instant, String)>,
    /// Where each namespace stands in `heads`.
    head_of: HashMap<String, Instant>,
    /// Keys held by workers.
    active: HashSet<Key>,
    /// Keys added again while held: they join their line when released.
    again: HashMap<Key, Instant>,
    /// Held keys per namespace.
    busy: HashMap<String, usize>,
}

impl State {
    /// Put `key` in its line at `at` unless it is there at `at` or earlier; whether it moved.
    fn enqueue(&mut self, key: Key, at: Instant, limit: usize) -> bool {
        if let Some(&prev) = self.when.get(&key) {
            if prev <= at {
                return false;
            }
            if let Some(line) = self.lines.get_mut(&key.namespace) {
                line.remove(&(prev, key.clone()));
            }
        }
        self.when.insert(key.clone(), at);
        let ns = key.namespace.clone();
        self.lines.entry(ns.clone()).or_default().insert((at, key));
        self.rank(&ns, limit);
        true
    }

    /// Move namespace `ns` to where its line now stands among the lines that may hand out a
    /// key, or take it out.
    fn rank(&mut self, ns: &str, limit: usize) {
        let first = self.lines.get(ns).and_then(|l| l.first()).map(|(t, _)| *t);
        let open = self.busy.get(ns).copied().unwrap_or(0) < limit;
        let want = first.filter(|_| open);
        if self.head_of.get(ns).copied() == want {
            return;
        }
        if let Some(old) = self.head_of.remove(ns) {
            self.heads.remove(&(old, ns.to_owned()));
        }
        if let Some(t) = want {
            self.heads.insert((t, ns.to_owned()));
            self.head_of.insert(ns.to_owned(), t);
        }
        if first.is_none() {
            self.lines.remove(ns);
        }
    }

    /// Hand out the first due key, if one is due at `now`; otherwise when the next one is.
    fn take(&mut self, now: Instant, limit: usize) -> Result<Key, Option<Instant>> {
        let Some((t, ns)) = self.heads.first().cloned() else {
            return Err(None);
        };
        if t > now {
            return Err(Some(t));
        }
        let (_, key) = self
            .lines
            .get_mut(&ns)
            .and_then(BTreeSet::pop_first)
            .expect("a ranked line has a first key");
        self.when.remove(&key);
        self.active.insert(key.clone());
        *self.busy.entry(ns.clone()).or_default() += 1;
        self.rank(&ns, limit);
        Ok(key)
    }
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
        if s.active.contains(&key) {
            let due = s.again.entry(key).or_insert(at);
            *due = (*due).min(at);
            return;
        }
        let moved = s.enqueue(key, at, self.per_namespace);
        drop(s);
        if moved {
            // One idle worker is enough: it takes the key or, if it is not due yet, sleeps
            // until it is. Any worker that finds nothing simply waits again.
            self.notify.notify_one();
        }
    }

    /// Keys waiting (due now or later), those added again while held included.
    pub fn len(&self) -> usize {
        let s = self.state.lock().expect("queue lock");
        s.when.len() + s.again.len()
    }

    /// Wait for a due key that no other worker holds, and hold it until [`Queue::done`].
    pub async fn pop(&self) -> Key {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let next_wake = {
                let mut s = self.state.lock().expect("queue lock");
                match s.take(Instant::now(), self.per_namespace) {
                    Ok(key) => {
                        let now = Instant::now();
                        let more = s.heads.first().is_some_and(|(t, _)| *t <= now);
                        drop(s);
                        // Pass the turn on: another key is due for another idle worker.
                        if more {
                            self.notify.notify_one();
                        }
                        return key;
                    }
                    Err(next) => next,
                }
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
        s.rank(&key.namespace, self.per_namespace);
        if let Some(at) = s.again.remove(key) {
            s.enqueue(key.clone(), at, self.per_namespace);
        }
        drop(s);
        self.notify.notify_one();
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
    async fn a_namespace_at_its_share_holds_back_only_its_own_line() {
        let q = Queue::with_namespace_limit(2);
        let later = Instant::now() + Duration::from_secs(1);
        for i in 0..1_000 {
            q.add(Key::new("busy", format!("{i:04}")));
        }
        q.add_at(Key::new("quiet", "1"), later);
        let (a, b) = (q.pop().await, q.pop().await);
        assert_eq!((a.name.as_str(), b.name.as_str()), ("0000", "0001"));
        // busy is at its share: the next key is quiet's, once it is due.
        let before = Instant::now();
        assert_eq!(q.pop().await, Key::new("quiet", "1"));
        assert_eq!(Instant::now() - before, Duration::from_secs(1));
        assert_eq!(q.len(), 998);
        // Released, busy hands out its next keys in due order again.
        q.add(a.clone());
        q.done(&a);
        assert_eq!(q.pop().await.name, "0002");
        q.done(&b);
        assert_eq!(q.pop().await.name, "0003");
        assert_eq!(
            q.len(),
            997,
            "the key added again while held is in its line"
        );
    }

    #[tokio::test]
    async fn every_due_key_reaches_an_idle_worker() {
        let q = std::sync::Arc::new(Queue::default());
        let mut workers = tokio::task::JoinSet::new();
        for _ in 0..8 {
            let q = q.clone();
            workers.spawn(async move { q.pop().await });
        }
        tokio::task::yield_now().await;
        for i in 0..8 {
            q.add(k(&i.to_string()));
        }
        let mut got = Vec::new();
        while let Some(key) = workers.join_next().await {
            got.push(key.unwrap().name);
        }
        got.sort();
        assert_eq!(got, ["0", "1", "2", "3", "4", "5", "6", "7"]);
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
