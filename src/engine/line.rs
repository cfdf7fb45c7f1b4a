//! The order of a concurrency queue: started Runs hold their slots; the others line up by
//! priority (higher first), then by fair share (so that one requester's burst does not starve
//! another's Runs), then in request order.

use std::borrow::Borrow;
use std::cmp::Reverse;
use std::collections::HashMap;

use jiff::Timestamp;

use super::group::group;
use crate::api::annotations::REQUESTED_AT;
use crate::api::{Run, WorkflowSpec};

/// Where an unstarted Run stands in line: smaller goes first.
type Key<'a> = (Reverse<i32>, usize, (Timestamp, Option<Timestamp>, &'a str));

/// Where a Run stands in its group's line: when it was created, then requested, then its name.
pub(crate) fn place(run: &Run) -> (Timestamp, Option<Timestamp>, &str) {
    let created = run
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0)
        .unwrap_or(Timestamp::UNIX_EPOCH);
    let requested = run
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(REQUESTED_AT))
        .and_then(|t| t.parse().ok());
    (
        created,
        requested,
        run.metadata.name.as_deref().unwrap_or_default(),
    )
}

/// A Run's priority: its own, else its Workflow's, else 0.
pub(crate) fn priority(spec: &WorkflowSpec, run: &Run) -> i32 {
    run.spec.priority.unwrap_or_else(|| {
        spec.execution
            .concurrency
            .as_ref()
            .and_then(|c| c.priority)
            .unwrap_or(0)
    })
}

fn requester(run: &Run) -> &str {
    run.spec
        .requested_by
        .as_ref()
        .map_or("", |p| p.username.as_str())
}

/// How many Runs of `run`'s group (`mine`) come before it: every started, unfinished one,
/// and the unstarted ones whose [`Key`] is smaller. A Run's fair share is how many Runs its
/// requester had started since the oldest waiting Run was requested, plus how many of theirs
/// wait before it: each requester's next Run goes before anyone's second, round after round.
pub(crate) fn ahead<P: Borrow<Run>>(
    run: &Run,
    spec: &WorkflowSpec,
    peers: &[P],
    mine: &Option<String>,
) -> usize {
    let group: Vec<&Run> = peers
        .iter()
        .map(Borrow::borrow)
        .filter(|p| {
            p.metadata.name != run.metadata.name
                && p.metadata.namespace == run.metadata.namespace
                && p.spec.workflow_ref.name == run.spec.workflow_ref.name
                && group(spec, p).is_ok_and(|g| g == *mine)
        })
        .collect();
    let holding = group
        .iter()
        .filter(|p| started(p) && !p.phase().is_terminal())
        .count();
    let mut waiting: Vec<&Run> = group
        .iter()
        .copied()
        .filter(|p| !started(p) && !p.phase().is_terminal())
        .chain(std::iter::once(run))
        .collect();
    waiting.sort_by(|a, b| place(a).cmp(&place(b)));
    let since = waiting
        .iter()
        .map(|r| requested(r))
        .min()
        .unwrap_or(Timestamp::MAX);
    let mut share: HashMap<&str, usize> = HashMap::new();
    for p in &group {
        let began = p.status.as_ref().and_then(|s| s.started_at.as_deref());
        if began
            .and_then(|t| t.parse::<Timestamp>().ok())
            .is_some_and(|t| t >= since)
        {
            *share.entry(requester(p)).or_insert(0) += 1;
        }
    }
    let keyed: Vec<(&Run, Key<'_>)> = waiting
        .iter()
        .map(|r| {
            let n = share.entry(requester(r)).or_insert(0);
            let key = (Reverse(priority(spec, r)), *n, place(r));
            *n += 1;
            (*r, key)
        })
        .collect();
    let me = keyed
        .iter()
        .find(|(r, _)| std::ptr::eq(*r, run))
        .map(|(_, k)| *k)
        .expect("the run waits among the others");
    holding + keyed.iter().filter(|(_, key)| *key < me).count()
}

/// When a Run was requested (else created).
fn requested(run: &Run) -> Timestamp {
    let (created, requested, _) = place(run);
    requested.unwrap_or(created)
}

/// Whether a Run has started (taken its Workflow snapshot): it holds a slot until it ends.
fn started(run: &Run) -> bool {
    run.status.as_ref().is_some_and(|s| s.workflow.is_some())
}
