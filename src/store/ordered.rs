//! Runs held in memory twice over: by key, and per namespace in creation order, so that a
//! page of the newest (or oldest) Runs costs the page, not the number of Runs kept.

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;
use std::sync::Arc;

use super::{Place, place};
use crate::api::ObjectKey as Key;
use crate::api::Run;

/// A Run's position in the order: its namespace, then [`place`].
type Slot = (Arc<str>, jiff::Timestamp, Arc<str>);

/// Runs by key and in creation order.
#[derive(Default)]
pub(super) struct OrderedRuns {
    by_key: HashMap<Key, Arc<Run>>,
    in_order: BTreeMap<Slot, Arc<Run>>,
}

fn slot(namespace: &str, (created, name): Place<'_>) -> Slot {
    (Arc::from(namespace), created, Arc::from(name))
}

impl OrderedRuns {
    /// The Run named `key`.
    pub(super) fn get(&self, key: &Key) -> Option<&Arc<Run>> {
        self.by_key.get(key)
    }

    /// Keep `run` as `key` (replacing what was kept under it).
    pub(super) fn insert(&mut self, key: Key, run: Arc<Run>) {
        if let Some(old) = self.by_key.get(&key) {
            // A Run's creation time never changes; a position is dropped only if it did.
            if place(old) != place(&run) {
                self.in_order.remove(&slot(&key.namespace, place(old)));
            }
        }
        self.in_order
            .insert(slot(&key.namespace, place(&run)), Arc::clone(&run));
        self.by_key.insert(key, run);
    }

    /// Forget the Run named `key`.
    pub(super) fn remove(&mut self, key: &Key) {
        if let Some(old) = self.by_key.remove(key) {
            self.in_order.remove(&slot(&key.namespace, place(&old)));
        }
    }

    /// Every Run with its key, in no particular order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (&Key, &Arc<Run>)> {
        self.by_key.iter()
    }

    /// The Runs of `namespace` strictly past `after` in creation order (backwards when
    /// `newest`): a range of the ordered map, read lazily.
    pub(super) fn page<'a>(
        &'a self,
        namespace: &str,
        newest: bool,
        after: Option<Place<'_>>,
    ) -> Box<dyn Iterator<Item = &'a Arc<Run>> + 'a> {
        let ns: Arc<str> = Arc::from(namespace);
        let first = (Arc::clone(&ns), jiff::Timestamp::MIN, Arc::from(""));
        // No Run is created at the last instant there is; its slot bounds the namespace.
        let last = (ns, jiff::Timestamp::MAX, Arc::from(""));
        let cut = after.map(|p| slot(namespace, p));
        // A cursor comes from the client: one past either bound has nothing beyond it (and a
        // range whose start is past its end is a panic, not an empty range).
        let beyond = cut.as_ref().is_some_and(|c| match newest {
            true => *c <= first,
            false => *c >= last,
        });
        if beyond {
            return Box::new(std::iter::empty());
        }
        let range = match (newest, cut) {
            (true, Some(c)) => self
                .in_order
                .range((Bound::Included(first), Bound::Excluded(c))),
            (true, None) => self
                .in_order
                .range((Bound::Included(first), Bound::Included(last))),
            (false, Some(c)) => self
                .in_order
                .range((Bound::Excluded(c), Bound::Included(last))),
            (false, None) => self
                .in_order
                .range((Bound::Included(first), Bound::Included(last))),
        };
        if newest {
            Box::new(range.rev().map(|(_, r)| r))
        } else {
            Box::new(range.map(|(_, r)| r))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(ns: &str, name: &str, created: &str) -> (Key, Arc<Run>) {
        let spec = crate::api::RunSpec {
            workflow_ref: crate::api::WorkflowRef { name: "w".into() },
            arguments: None,
            requested_by: None,
            cancel: None,
            pause: None,
            retry_of: None,
            priority: None,
            input_responses: Default::default(),
        };
        let mut r = Run::new(name, spec);
        r.metadata.namespace = Some(ns.into());
        r.metadata.name = Some(name.into());
        r.metadata.creation_timestamp = Some(crate::api::kube_time(created.parse().unwrap()));
        (Key::new(ns, name), Arc::new(r))
    }

    fn names<'a>(it: impl Iterator<Item = &'a Arc<Run>>) -> Vec<String> {
        it.map(|r| r.metadata.name.clone().unwrap()).collect()
    }

    #[test]
    fn pages_read_one_namespace_in_order_from_a_cursor_and_follow_removals() {
        let mut runs = OrderedRuns::default();
        for (ns, name, at) in [
            ("a", "r2", "2026-12-01T10:00:02Z"),
            ("a", "r1", "2026-12-01T10:00:01Z"),
            ("b", "x", "2026-12-01T10:00:01Z"),
            ("a", "r3b", "2026-12-01T10:00:03Z"),
            ("a", "r3a", "2026-12-01T10:00:03Z"),
            ("ab", "y", "2026-12-01T10:00:00Z"),
        ] {
            let (k, r) = run(ns, name, at);
            runs.insert(k, r);
        }
        assert_eq!(
            names(runs.page("a", true, None)),
            ["r3b", "r3a", "r2", "r1"]
        );
        assert_eq!(
            names(runs.page("a", false, None)),
            ["r1", "r2", "r3a", "r3b"]
        );
        let (_, r3a) = run("a", "r3a", "2026-12-01T10:00:03Z");
        assert_eq!(names(runs.page("a", true, Some(place(&r3a)))), ["r2", "r1"]);
        assert_eq!(names(runs.page("a", false, Some(place(&r3a)))), ["r3b"]);
        assert_eq!(names(runs.page("zz", true, None)), Vec::<String>::new());
        // Places past either bound of time (cursors come from clients) have nothing beyond.
        let none = Vec::<String>::new();
        let end = Some((jiff::Timestamp::MAX, "x"));
        assert_eq!(names(runs.page("a", false, end)), none);
        assert_eq!(names(runs.page("a", true, end)), ["r3b", "r3a", "r2", "r1"]);
        let start = Some((jiff::Timestamp::MIN, "x"));
        assert_eq!(names(runs.page("a", true, start)), none);
        assert_eq!(
            names(runs.page("a", true, Some((jiff::Timestamp::MIN, "")))),
            none
        );
        assert_eq!(
            names(runs.page("a", false, start)),
            ["r1", "r2", "r3a", "r3b"]
        );
        // A new version of a Run keeps one place; a removed Run leaves none.
        let (k, r) = run("a", "r2", "2026-12-01T10:00:02Z");
        runs.insert(k, r);
        runs.remove(&Key::new("a", "r1"));
        assert_eq!(names(runs.page("a", true, None)), ["r3b", "r3a", "r2"]);
        assert_eq!(runs.iter().count(), 5);
    }
}
