//! Where a Run stands in its Run tree, read from the markers its parent sealed on it: what the
//! child executor counts and bounds a tree by, and what tells a child Runway started from one
//! that only looks like one.

use crate::api::{Run, annotations, labels};
use crate::engine::budget;
use crate::engine::marks::{Marks, Sealed};

/// Where a Run stands in its Run tree: the root's uid, its depth (0 for a top-level Run) and
/// the Workflows from the root down to it, itself included.
pub(super) struct Lineage {
    pub(super) root: String,
    pub(super) depth: u32,
    pub(super) workflows: Vec<String>,
}

/// The parts a child Run's seal covers: its identity and every marker Runway reads from it.
pub(super) fn child_parts(run: &Run) -> [&str; 6] {
    let ann = |k: &str| {
        run.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(k))
            .map(String::as_str)
            .unwrap_or_default()
    };
    [
        run.metadata.namespace.as_deref().unwrap_or_default(),
        run.metadata.name.as_deref().unwrap_or_default(),
        ann(annotations::PARENT_UID),
        run.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(labels::ROOT))
            .map(String::as_str)
            .unwrap_or_default(),
        ann(annotations::DEPTH),
        ann(annotations::LINEAGE),
    ]
}

/// Whether `run` is a child Run Runway started (its seal holds), not one that only looks so.
pub(crate) fn sealed_child(marks: &Marks, run: &Run) -> bool {
    let mark = run
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(annotations::MARK));
    marks.verify(Sealed::Child, &child_parts(run), mark.map(String::as_str))
}

/// `run`'s place in its tree: from its own sealed markers, else as a top-level Run.
pub(super) fn lineage(marks: &Marks, run: &Run) -> Lineage {
    let own = run.spec.workflow_ref.name.clone();
    if sealed_child(marks, run) {
        let [_, _, _, root, depth, above] = child_parts(run);
        let mut workflows: Vec<String> = above.split(',').map(str::to_owned).collect();
        workflows.push(own);
        return Lineage {
            root: root.to_owned(),
            depth: depth.parse().unwrap_or(budget::MAX_CHILD_DEPTH),
            workflows,
        };
    }
    Lineage {
        root: run.metadata.uid.clone().unwrap_or_default(),
        depth: 0,
        workflows: vec![own],
    }
}
