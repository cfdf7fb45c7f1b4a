//! Runs as a store keeps them in memory: compact, because a store keeps every Run it holds.
//!
//! Every Run records the Workflow spec it started with (`status.workflow`), and thousands of
//! Runs of one Workflow version hold the same snapshot: as parsed JSON it is the largest part of
//! a finished Run. A store passes each Run it keeps through [`Compactor::compact`], which swaps
//! the Run's snapshot for an equal one already held, drops the managed fields and gives back
//! the spare room the JSON parser and the engine left in the status's lists (a one-step Run's
//! list of step records has room for four).

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hasher};
use std::io;
use std::sync::{Arc, Mutex, Weak};

use serde_json::Value;

use crate::api::{Run, RunStatus};

/// Fewest entries kept before dropped snapshots are swept out.
const SWEEP_FLOOR: usize = 64;

/// Shrinks the Runs a store keeps. Holds the snapshots some Run holds, by a hash of their JSON
/// text; weakly, so that a snapshot is freed with its last Run and its entry swept out later.
#[derive(Default)]
pub struct Compactor {
    seen: Mutex<Seen>,
}

#[derive(Default)]
struct Seen {
    by_hash: HashMap<u64, Vec<Weak<Value>>>,
    entries: usize,
    sweep_at: usize,
}

impl Compactor {
    /// Make `run` as small as it can be kept: without managed fields, its snapshot the copy
    /// already held when an equal one is (remembered when not), its status's lists without
    /// spare room.
    pub fn compact(&self, run: &mut Run) {
        // managedFields are kept by the API server for its own merges; a cached Run does not
        // need them, and with a field manager per status write they outweigh the rest.
        run.metadata.managed_fields = None;
        let Some(status) = run.status.as_mut() else {
            return;
        };
        trim(status);
        if let Some(snapshot) = status.workflow.as_mut() {
            self.share(snapshot);
        }
    }

    fn share(&self, snapshot: &mut Arc<Value>) {
        let hash = hash_of(snapshot);
        let mut seen = self.seen.lock().expect("snapshots lock");
        let bucket = seen.by_hash.entry(hash).or_default();
        if let Some(held) = bucket.iter().filter_map(Weak::upgrade).find(|held| {
            // Equal content, including when an earlier share already made them one.
            Arc::ptr_eq(held, snapshot) || **held == **snapshot
        }) {
            *snapshot = held;
            return;
        }
        bucket.push(Arc::downgrade(snapshot));
        seen.entries += 1;
        if seen.entries >= seen.sweep_at.max(SWEEP_FLOOR) {
            seen.sweep();
        }
    }
}

impl Seen {
    /// Drop the entries of snapshots no Run holds; the next sweep waits until the live ones
    /// have doubled, so sweeping costs O(1) per share.
    fn sweep(&mut self) {
        self.by_hash.retain(|_, bucket| {
            bucket.retain(|w| w.strong_count() > 0);
            !bucket.is_empty()
        });
        self.entries = self.by_hash.values().map(Vec::len).sum();
        self.sweep_at = self.entries * 2;
    }
}

/// Give back the spare room of the status's lists; they grow again when the engine appends.
fn trim(status: &mut RunStatus) {
    status.conditions.shrink_to_fit();
    status.notes.shrink_to_fit();
    status.cleanups.shrink_to_fit();
    status.steps.shrink_to_fit();
    for step in &mut status.steps {
        step.attempts.shrink_to_fit();
    }
}

/// A hash of `value`'s JSON text, written straight into the hasher.
fn hash_of(value: &Value) -> u64 {
    let mut w = HashWriter(DefaultHasher::new());
    // Writing into a hasher cannot fail.
    let _ = serde_json::to_writer(&mut w, value);
    w.0.finish()
}

struct HashWriter(DefaultHasher);

impl io::Write for HashWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::api::StepRecord;

    fn run_with(snapshot: Value) -> Run {
        let mut run = Run::requested("ns", "r", "w", json!({}), None, jiff::Timestamp::UNIX_EPOCH);
        run.status = Some(RunStatus {
            workflow: Some(Arc::new(snapshot)),
            ..Default::default()
        });
        run
    }

    fn snapshot(run: &Run) -> &Arc<Value> {
        run.status.as_ref().unwrap().workflow.as_ref().unwrap()
    }

    #[test]
    fn equal_snapshots_become_one_copy_and_different_ones_stay_apart() {
        let s = Compactor::default();
        let mut a = run_with(json!({"steps": [{"name": "s"}]}));
        let mut b = run_with(json!({"steps": [{"name": "s"}]}));
        let mut c = run_with(json!({"steps": [{"name": "t"}]}));
        for r in [&mut a, &mut b, &mut c] {
            s.compact(r);
        }
        assert!(Arc::ptr_eq(snapshot(&a), snapshot(&b)));
        assert!(!Arc::ptr_eq(snapshot(&a), snapshot(&c)));
        assert_eq!(**snapshot(&c), json!({"steps": [{"name": "t"}]}));
    }

    #[test]
    fn managed_fields_are_not_kept() {
        let s = Compactor::default();
        let mut run = run_with(json!({}));
        run.metadata.managed_fields = Some(vec![Default::default()]);
        s.compact(&mut run);
        assert_eq!(run.metadata.managed_fields, None);
    }

    #[test]
    fn the_status_lists_keep_no_spare_room() {
        let s = Compactor::default();
        let mut run = run_with(json!({}));
        let st = run.status.as_mut().unwrap();
        st.steps = Vec::with_capacity(16);
        st.steps.push(
            serde_json::from_value::<StepRecord>(json!({"name": "s", "phase": "Succeeded"}))
                .unwrap(),
        );
        s.compact(&mut run);
        let st = run.status.as_ref().unwrap();
        assert_eq!((st.steps.len(), st.steps.capacity()), (1, 1));
        assert_eq!(st.steps[0].name, "s");
    }

    #[test]
    fn a_run_without_a_snapshot_is_left_alone() {
        let s = Compactor::default();
        let mut run = Run::requested("ns", "r", "w", json!({}), None, jiff::Timestamp::UNIX_EPOCH);
        s.compact(&mut run);
        assert!(run.status.is_none());
    }

    #[test]
    fn snapshots_no_run_holds_are_freed_and_swept_out() {
        let s = Compactor::default();
        for i in 0..(SWEEP_FLOOR * 3) {
            let mut run = run_with(json!({"version": i}));
            s.compact(&mut run);
        }
        let seen = s.seen.lock().unwrap();
        assert!(seen.entries < SWEEP_FLOOR, "{} entries kept", seen.entries);
        assert!(
            seen.by_hash
                .values()
                .flatten()
                .all(|w| w.strong_count() == 0)
        );
    }
}
