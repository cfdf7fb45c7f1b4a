//! The Runs of this controller waiting, not started, under a concurrency limit or for their
//! paused Workflow, by namespace and Workflow: reconciled again whenever a Run of that Workflow
//! ends or goes away, or a Workflow changes.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use super::queue::Key;
use crate::api::Run;

/// The Runs in one line, with their uids.
type Line = BTreeMap<Key, Option<String>>;

/// Runs in line, by (namespace, Workflow).
#[derive(Default)]
pub(super) struct Waiting(Mutex<HashMap<(String, String), Line>>);

/// The line a Run stands in.
fn line_of(namespace: &str, run: &Run) -> (String, String) {
    (namespace.to_owned(), run.spec.workflow_ref.name.clone())
}

impl Waiting {
    /// Put Run `k` in its Workflow's line.
    pub(super) fn join(&self, k: &Key, run: &Run) {
        self.0
            .lock()
            .expect("waiting lock")
            .entry(line_of(&k.namespace, run))
            .or_default()
            .insert(k.clone(), run.metadata.uid.clone());
    }

    /// Take Run `k` out of its line, unless another Run under its name stands there (word of
    /// the old one's delete can come after the new one joined).
    pub(super) fn leave(&self, k: &Key, run: &Run) {
        let line = line_of(&k.namespace, run);
        let mut lines = self.0.lock().expect("waiting lock");
        if let Some(keys) = lines.get_mut(&line) {
            let another = |uid: &Option<String>| {
                uid.as_ref()
                    .zip(run.metadata.uid.as_ref())
                    .is_some_and(|(a, b)| a != b)
            };
            if !keys.get(k).is_some_and(another) {
                keys.remove(k);
            }
            if keys.is_empty() {
                lines.remove(&line);
            }
        }
    }

    /// Every Run in every line (to wake when a Workflow changes: one that was paused may be
    /// resumed).
    pub(super) fn everyone(&self) -> Vec<Key> {
        let lines = self.0.lock().expect("waiting lock");
        lines
            .values()
            .flat_map(|keys| keys.keys())
            .cloned()
            .collect()
    }

    /// The Runs in line behind `run`'s Workflow (to wake when `run` ends or goes away).
    pub(super) fn behind(&self, run: &Run) -> Vec<Key> {
        let namespace = run.metadata.namespace.as_deref().unwrap_or_default();
        self.0
            .lock()
            .expect("waiting lock")
            .get(&line_of(namespace, run))
            .map(|keys| keys.keys().cloned().collect())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use jiff::Timestamp;
    use serde_json::Value;

    use super::*;

    fn run(uid: &str) -> Run {
        let mut r = Run::requested("ns", "r", "w", Value::Null, None, Timestamp::UNIX_EPOCH);
        r.metadata.uid = Some(uid.to_owned());
        r
    }

    #[test]
    fn word_of_an_old_runs_delete_leaves_the_new_one_in_line() {
        let waiting = Waiting::default();
        let k = Key::new("ns", "r");
        waiting.join(&k, &run("uid-new"));
        waiting.leave(&k, &run("uid-old"));
        assert_eq!(waiting.behind(&run("uid-new")), std::slice::from_ref(&k));
        waiting.leave(&k, &run("uid-new"));
        assert!(waiting.everyone().is_empty());
    }
}
