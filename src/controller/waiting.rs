//! The Runs of this controller waiting, not started, under a concurrency limit or for their
//! paused Workflow, by namespace and Workflow: reconciled again whenever a Run of that Workflow
//! ends or goes away, or a Workflow changes.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

use super::queue::Key;
use crate::api::Run;

/// Runs in line, by (namespace, Workflow).
#[derive(Default)]
pub(super) struct Waiting(Mutex<HashMap<(String, String), BTreeSet<Key>>>);

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
            .insert(k.clone());
    }

    /// Take Run `k` out of its line.
    pub(super) fn leave(&self, k: &Key, run: &Run) {
        let line = line_of(&k.namespace, run);
        let mut lines = self.0.lock().expect("waiting lock");
        if let Some(keys) = lines.get_mut(&line) {
            keys.remove(k);
            if keys.is_empty() {
                lines.remove(&line);
            }
        }
    }

    /// Every Run in every line (to wake when a Workflow changes: one that was paused may be
    /// resumed).
    pub(super) fn everyone(&self) -> Vec<Key> {
        let lines = self.0.lock().expect("waiting lock");
        lines.values().flatten().cloned().collect()
    }

    /// The Runs in line behind `run`'s Workflow (to wake when `run` ends or goes away).
    pub(super) fn behind(&self, run: &Run) -> Vec<Key> {
        let namespace = run.metadata.namespace.as_deref().unwrap_or_default();
        self.0
            .lock()
            .expect("waiting lock")
            .get(&line_of(namespace, run))
            .map(|keys| keys.iter().cloned().collect())
            .unwrap_or_default()
    }
}
