//! A task's answer as last written on this thread, for each of the few Run versions polled
//! here last. Agents poll a task many times between its changes, and every poll of one version
//! wrote the same bytes: the view, the payload and the serializer are most of what a
//! `tasks/get` costs once the request is read. A store hands out one shared `Arc` per version
//! of a Run, so the `Arc`'s address is the key; a slot holds a `Weak` of it, which keeps the
//! allocation (not the Run: a version nobody else holds is freed) so that the address cannot be
//! reused for another Run while the slot lives. Only answers that depend on the version alone
//! are kept (the callers decide which).

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::{Arc, Weak};

use serde::Serialize;

use super::recent::Recent;
use crate::api::Run;

/// Which shape of answer a slot holds: the same version is written differently per era.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Shape {
    /// The 2026-07-28 `GetTaskResult`.
    Task2026,
    /// The 2025-11-25 `tasks/get` result.
    Task2025,
}

/// How many versions each thread keeps: an agent's polls reach a replica's threads in turn,
/// and a handful of tasks polled at once is the common case.
const SLOTS: usize = 8;

/// Answers longer than this are written every time rather than kept.
const KEPT_UP_TO: usize = 16 * 1024;

struct Slot {
    run: Weak<Run>,
    shape: Shape,
    bytes: Rc<[u8]>,
}

/// The JSON text of the result for this version of `run` in `shape`: kept from an earlier poll
/// on this thread, or written now by `write` (and kept when small). The result is built inside
/// `write` so that a kept answer costs no projection of the Run either.
pub(super) fn result_json(
    run: &Arc<Run>,
    shape: Shape,
    write: impl FnOnce() -> serde_json::Result<Vec<u8>>,
) -> serde_json::Result<Rc<[u8]>> {
    thread_local! {
        static KEPT: RefCell<Recent<Slot, SLOTS>> = RefCell::new(Recent::default());
    }
    let found = KEPT.with_borrow(|kept| {
        kept.find(|s| s.shape == shape && std::ptr::eq(s.run.as_ptr(), Arc::as_ptr(run)))
            .map(|s| s.bytes.clone())
    });
    if let Some(bytes) = found {
        return Ok(bytes);
    }
    let bytes: Rc<[u8]> = write()?.into();
    if bytes.len() <= KEPT_UP_TO {
        KEPT.with_borrow_mut(|kept| {
            kept.keep(Slot {
                run: Arc::downgrade(run),
                shape,
                bytes: bytes.clone(),
            })
        });
    }
    Ok(bytes)
}

/// A JSON-RPC response with `id` around the already written `result`, byte for byte what
/// serializing `{"jsonrpc": "2.0", "id": id, "result": result}` gives.
pub(super) fn response_json(id: &impl Serialize, result: &[u8]) -> serde_json::Result<Vec<u8>> {
    const HEAD: &[u8] = br#"{"jsonrpc":"2.0","id":"#;
    const MIDDLE: &[u8] = br#","result":"#;
    let mut body = Vec::with_capacity(HEAD.len() + 24 + MIDDLE.len() + result.len() + 1);
    body.extend_from_slice(HEAD);
    serde_json::to_writer(&mut body, id)?;
    body.extend_from_slice(MIDDLE);
    body.extend_from_slice(result);
    body.push(b'}');
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::cell::Cell;

    /// A result that counts how often it is written.
    struct Counted<'a>(&'a Cell<u32>, &'a str);

    impl Serialize for Counted<'_> {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            self.0.set(self.0.get() + 1);
            json!({ "status": self.1 }).serialize(s)
        }
    }

    fn written(result: &Counted<'_>) -> serde_json::Result<Vec<u8>> {
        serde_json::to_vec(result)
    }

    fn run(name: &str) -> Arc<Run> {
        Arc::new(Run::requested(
            "team",
            name,
            "wf",
            json!({}),
            None,
            jiff::Timestamp::UNIX_EPOCH,
        ))
    }

    #[test]
    fn one_version_is_written_once_per_shape() {
        let writes = Cell::new(0);
        let version = run("a");
        for _ in 0..3 {
            let got = result_json(&version, Shape::Task2026, || {
                written(&Counted(&writes, "working"))
            })
            .unwrap();
            assert_eq!(&*got, br#"{"status":"working"}"#);
        }
        assert_eq!(writes.get(), 1);
        let old = result_json(&version, Shape::Task2025, || {
            written(&Counted(&writes, "old"))
        })
        .unwrap();
        assert_eq!(&*old, br#"{"status":"old"}"#);
        assert_eq!(writes.get(), 2);
    }

    #[test]
    fn a_new_version_of_the_same_run_is_written_anew() {
        let writes = Cell::new(0);
        let first = run("b");
        let same_content = Arc::new((*first).clone());
        result_json(&first, Shape::Task2026, || {
            written(&Counted(&writes, "working"))
        })
        .unwrap();
        let got = result_json(&same_content, Shape::Task2026, || {
            written(&Counted(&writes, "completed"))
        })
        .unwrap();
        assert_eq!(&*got, br#"{"status":"completed"}"#);
        assert_eq!(writes.get(), 2);
    }

    #[test]
    fn a_kept_answer_does_not_keep_its_run() {
        let writes = Cell::new(0);
        let version = run("c");
        result_json(&version, Shape::Task2026, || {
            written(&Counted(&writes, "working"))
        })
        .unwrap();
        let weak = Arc::downgrade(&version);
        drop(version);
        assert!(weak.upgrade().is_none(), "the Run is freed");
        // A Run allocated since cannot be taken for the one kept.
        let next = run("c");
        let got = result_json(&next, Shape::Task2026, || {
            written(&Counted(&writes, "completed"))
        })
        .unwrap();
        assert_eq!(&*got, br#"{"status":"completed"}"#);
        assert_eq!(writes.get(), 2);
    }

    #[test]
    fn the_oldest_slot_makes_way_and_large_answers_are_not_kept() {
        let writes = Cell::new(0);
        let versions: Vec<_> = (0..=SLOTS).map(|i| run(&format!("r{i}"))).collect();
        for v in &versions {
            result_json(v, Shape::Task2026, || written(&Counted(&writes, "x"))).unwrap();
        }
        result_json(&versions[0], Shape::Task2026, || {
            written(&Counted(&writes, "x"))
        })
        .unwrap();
        assert_eq!(
            writes.get(),
            SLOTS as u32 + 2,
            "the first version was evicted"
        );
        result_json(&versions[SLOTS], Shape::Task2026, || {
            written(&Counted(&writes, "x"))
        })
        .unwrap();
        assert_eq!(writes.get(), SLOTS as u32 + 2, "the newest is still kept");

        let large = "y".repeat(KEPT_UP_TO);
        let big = run("big");
        result_json(&big, Shape::Task2026, || written(&Counted(&writes, &large))).unwrap();
        result_json(&big, Shape::Task2026, || written(&Counted(&writes, &large))).unwrap();
        assert_eq!(writes.get(), SLOTS as u32 + 4);
    }

    #[test]
    fn a_response_reads_as_the_serialized_envelope() {
        for id in [json!(7), json!(-3), json!("a\"b\\c"), json!(i64::MAX)] {
            let result = json!({"taskId": "t", "status": "completed", "ttlMs": null});
            let framed = response_json(&id, &serde_json::to_vec(&result).unwrap()).unwrap();
            let whole =
                serde_json::to_vec(&json!({"jsonrpc": "2.0", "id": id, "result": result})).unwrap();
            assert_eq!(
                serde_json::from_slice::<serde_json::Value>(&framed).unwrap(),
                serde_json::from_slice::<serde_json::Value>(&whole).unwrap()
            );
            assert!(framed.starts_with(br#"{"jsonrpc":"2.0","id":"#));
        }
    }
}
