//! Concurrency limits: whether a Run that has not started may start, given the other Runs of
//! its Workflow. A Run may start when fewer than `limit` unfinished Runs of its group come
//! before it in line (`engine::line`: the started ones, then by priority, fair share and
//! request order); the others wait, `Queued`, and fail, unstarted, after `queueTimeout`. A
//! stale cache can hold a Run back longer; one that has not yet seen a peer start can let a
//! Run of higher priority or fairer share pass it, which the one controller of an embedded
//! server or of one shard never does (it reads its own writes). Two Runs requested through
//! different replicas within a watch round trip, before either replica has seen the other,
//! can both be admitted (docs/design.md, "Concurrency limits across replicas").

use std::borrow::Borrow;

use jiff::Timestamp;

use super::endings::tool_error_ending;
use super::group::group;
pub(crate) use super::line::place;
use super::machine::Machine;
use super::{Decision, Next, duration};
use crate::api::{Ending, Run, RunPhase, RunStatus, WorkflowSpec};

/// How often a queued Run is looked at again. A peer's end wakes the Runs behind it at once;
/// this bounds how long one stays held back when that wake-up met a cache that had not caught up
/// with the end yet (the verdict is then "wait", and no later event of the group may come).
pub const RECHECK: jiff::SignedDuration = jiff::SignedDuration::from_secs(5);

/// Whether `run` must wait for a slot, and the status that says so; `None` when it may go on
/// (no limit, started already, finished, or a slot is free). A queued Run that is cancelled or
/// reaches its deadline ends here, never started: no step, no `finally`, no slot taken. `peers`
/// are the Runs of the same Workflow and namespace (`run` itself may be among them).
pub fn hold<P: Borrow<Run>>(
    run: &Run,
    live: Option<&WorkflowSpec>,
    peers: &[P],
    now: Timestamp,
) -> Option<Decision> {
    let spec = live?;
    let limit = spec.execution.concurrency.as_ref()?.limit;
    let status = run.status.clone().unwrap_or_default();
    if status.workflow.is_some() || status.phase.is_terminal() {
        return None;
    }
    let queued = status.phase == RunPhase::Queued;
    if run.spec.cancel.is_some() && !queued {
        return None;
    }
    let (deadline, queue_deadline) = deadlines(spec, run);
    if queued && let Some(ending) = ended_in_queue(spec, run, now, deadline, queue_deadline) {
        return Some(end(run, ending, now));
    }
    let mine = match group(spec, run) {
        Ok(g) => g,
        Err(e) => {
            let message = format!(
                "concurrency.key does not render for this run's arguments: {}",
                e.message
            );
            return Some(end(run, tool_error_ending(message), now));
        }
    };
    let ahead = super::line::ahead(run, spec, peers, &mine);
    if ahead < limit as usize {
        return None;
    }
    let priority = super::line::priority(spec, run);
    let shown = if priority == 0 {
        String::new()
    } else {
        format!(" at priority {priority}")
    };
    let message = match &mine {
        Some(key) => {
            format!("queued behind {ahead} run(s){shown}: at most {limit} at once for {key}")
        }
        None => format!("queued behind {ahead} run(s){shown}: at most {limit} at once"),
    };
    let queued = RunStatus {
        phase: RunPhase::Queued,
        status_message: Some(message),
        concurrency_key: mine,
        priority: Some(priority),
        observed_generation: run.metadata.generation,
        ..status.clone()
    };
    // Woken by a peer finishing (the controller watches for that), by the deadline, or by the
    // recheck.
    let recheck = now + RECHECK;
    let wake = [deadline, queue_deadline]
        .into_iter()
        .flatten()
        .fold(recheck, Timestamp::min);
    let next = Next::WaitUntil(Some(wake));
    Some(Decision {
        status: (queued != status).then_some(queued),
        events: Vec::new(),
        next,
    })
}

/// The Run's deadline (from its creation) and the end of its queue timeout (from its request,
/// but never before its creation: a schedule requests a Run for the time it was due, which may
/// be long before it could be created, and a Run cannot have waited in line before it existed).
fn deadlines(spec: &WorkflowSpec, run: &Run) -> (Option<Timestamp>, Option<Timestamp>) {
    let (created, requested, _) = place(run);
    let deadline = duration::run_timeout(spec.execution.timeout.as_deref())
        .ok()
        .map(|d| created + d);
    let queue_timeout = spec
        .execution
        .concurrency
        .as_ref()
        .and_then(|c| c.queue_timeout.as_deref())
        .and_then(|d| duration::parse(d).ok());
    let since = requested.map_or(created, |r| r.max(created));
    (deadline, queue_timeout.map(|d| since + d))
}

/// How a queued Run ends without starting, if it does now: cancelled, past its deadline, or
/// past its queue timeout.
fn ended_in_queue(
    spec: &WorkflowSpec,
    run: &Run,
    now: Timestamp,
    deadline: Option<Timestamp>,
    queue_deadline: Option<Timestamp>,
) -> Option<Ending> {
    if let Some(cancel) = &run.spec.cancel {
        let who = cancel.requested_by.as_deref().unwrap_or("unknown");
        let why = cancel.reason.as_deref().unwrap_or("no reason given");
        return Some(cancelled(format!("cancelled by {who} while queued: {why}")));
    }
    if deadline.is_some_and(|d| now >= d) {
        let timeout = spec.execution.timeout.as_deref();
        return Some(tool_error_ending(format!(
            "run deadline exceeded while queued (execution.timeout {})",
            timeout.unwrap_or(duration::DEFAULT_RUN_TIMEOUT_TEXT)
        )));
    }
    let timeout = spec
        .execution
        .concurrency
        .as_ref()?
        .queue_timeout
        .as_deref()?;
    queue_deadline.filter(|d| now >= *d).map(|_| {
        tool_error_ending(format!(
            "no slot within the queue timeout (concurrency.queueTimeout {timeout})"
        ))
    })
}

fn cancelled(message: String) -> Ending {
    Ending {
        phase: RunPhase::Cancelled,
        result: None,
        error: None,
        message: Some(message),
    }
}

/// End a Run that never started.
pub(super) fn end(run: &Run, ending: Ending, now: Timestamp) -> Decision {
    let mut m = Machine {
        run,
        st: run.status.clone().unwrap_or_default(),
        now,
        events: Vec::new(),
        read: Default::default(),
    };
    m.finish_with(ending);
    let mut status = m.st;
    status.observed_generation = run.metadata.generation;
    Decision {
        status: Some(status),
        events: m.events,
        next: Next::WaitUntil(Some(now)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::annotations::REQUESTED_AT;
    use crate::api::{CancelRequest, RunSpec, WorkflowRef};
    use serde_json::json;
    use std::collections::BTreeMap;
    use std::sync::Arc;

    fn spec(limit: u32, key: Option<&str>, timeout: Option<&str>) -> WorkflowSpec {
        serde_json::from_value(json!({
            "tool": {},
            "execution": {"concurrency": {"limit": limit, "key": key}, "timeout": timeout},
            "steps": [{"name": "s", "delay": {"duration": "1s"}}],
        }))
        .unwrap()
    }

    fn run(name: &str, second: i64, env: &str) -> Run {
        let mut r = Run::new(
            name,
            RunSpec {
                workflow_ref: WorkflowRef {
                    name: "deploy".into(),
                },
                arguments: Some(json!({"env": env})),
                requested_by: None,
                cancel: None,
                pause: None,
                retry_of: None,
                priority: None,
                input_responses: BTreeMap::new(),
            },
        );
        r.metadata.namespace = Some("ns".into());
        r.metadata.creation_timestamp = Some(crate::api::kube_time(
            Timestamp::from_second(1_800_000_000 + second).unwrap(),
        ));
        r
    }

    fn with_phase(mut r: Run, phase: RunPhase) -> Run {
        r.status = Some(RunStatus {
            phase,
            workflow: (phase != RunPhase::Pending && phase != RunPhase::Queued)
                .then(|| Arc::new(json!({}))),
            ..Default::default()
        });
        r
    }

    fn now() -> Timestamp {
        Timestamp::from_second(1_800_000_100).unwrap()
    }

    #[test]
    fn the_first_runs_up_to_the_limit_go_and_the_rest_wait_in_request_order() {
        let s = spec(2, None, None);
        let peers = vec![
            with_phase(run("a", 1, "x"), RunPhase::Running),
            run("b", 2, "x"),
            run("c", 3, "x"),
            run("d", 4, "x"),
        ];
        assert!(
            hold(&peers[1], Some(&s), &peers, now()).is_none(),
            "b: one ahead"
        );
        let c = hold(&peers[2], Some(&s), &peers, now()).expect("c waits");
        let st = c.status.unwrap();
        assert_eq!(st.phase, RunPhase::Queued);
        assert_eq!(
            st.status_message.as_deref(),
            Some("queued behind 2 run(s): at most 2 at once")
        );
        assert_eq!(c.next, Next::WaitUntil(Some(now() + RECHECK)));
        // Finished Runs free their slot; c is now second in line.
        let mut peers = peers;
        peers[0] = with_phase(run("a", 1, "x"), RunPhase::Succeeded);
        assert!(hold(&peers[2], Some(&s), &peers, now()).is_none());
        assert!(hold(&peers[3], Some(&s), &peers, now()).is_some());
    }

    #[test]
    fn the_limit_holds_per_key() {
        let s = spec(1, Some("{{ args.env }}"), None);
        let peers = vec![
            with_phase(run("a", 1, "prod"), RunPhase::Waiting),
            run("b", 2, "staging"),
            run("c", 3, "prod"),
        ];
        assert!(hold(&peers[1], Some(&s), &peers, now()).is_none());
        let c = hold(&peers[2], Some(&s), &peers, now()).unwrap();
        assert_eq!(
            c.status.as_ref().unwrap().status_message.as_deref(),
            Some("queued behind 1 run(s): at most 1 at once for prod")
        );
        assert_eq!(group(&s, &peers[1]).unwrap().as_deref(), Some("staging"));
        // The queued Run records its group: deciding again reads it instead of rendering.
        let mut queued = peers[2].clone();
        queued.status = c.status.clone();
        assert_eq!(
            queued.status.as_ref().unwrap().concurrency_key.as_deref(),
            Some("prod")
        );
        queued.spec.arguments = Some(json!({"env": "staging"}));
        assert_eq!(group(&s, &queued).unwrap().as_deref(), Some("prod"));
    }

    #[test]
    fn a_key_that_does_not_render_fails_the_run_instead_of_freeing_it() {
        let s = spec(1, Some("{{ args.env.name }}"), None);
        let peers = vec![
            with_phase(run("a", 1, "prod"), RunPhase::Running),
            run("b", 2, "prod"),
        ];
        let ended = hold(&peers[1], Some(&s), &peers, now()).unwrap();
        let st = ended.status.unwrap();
        assert_eq!(st.phase, RunPhase::Failed);
        assert!(st.workflow.is_none(), "never started");
        assert!(
            st.conditions[0]
                .message
                .starts_with("concurrency.key does not render"),
            "{}",
            st.conditions[0].message
        );
    }

    #[test]
    fn within_a_second_the_request_instant_orders_then_the_name() {
        let s = spec(1, None, None);
        let mut late = run("a-late", 5, "x");
        let mut early = run("z-early", 5, "x");
        late.metadata.annotations = Some(BTreeMap::from([(
            REQUESTED_AT.to_owned(),
            "2027-01-15T08:00:05.900Z".to_owned(),
        )]));
        early.metadata.annotations = Some(BTreeMap::from([(
            REQUESTED_AT.to_owned(),
            "2027-01-15T08:00:05.100Z".to_owned(),
        )]));
        let peers = vec![late.clone(), early.clone()];
        assert!(hold(&early, Some(&s), &peers, now()).is_none());
        assert!(hold(&late, Some(&s), &peers, now()).is_some());
        // Without the annotation, the name decides.
        let (x, y) = (run("x", 5, "x"), run("y", 5, "x"));
        let peers = vec![y.clone(), x.clone()];
        assert!(hold(&x, Some(&s), &peers, now()).is_none());
        assert!(hold(&y, Some(&s), &peers, now()).is_some());
    }

    #[test]
    fn started_cancelled_expired_and_unlimited_runs_are_not_held() {
        let s = spec(1, None, Some("60s"));
        let first = with_phase(run("a", 1, "x"), RunPhase::Running);
        let peers = vec![first.clone(), run("b", 2, "x")];
        // Started already (its status has the snapshot): the limit is not its concern.
        assert!(hold(&first, Some(&s), &peers, now()).is_none());
        // Queued until its deadline (created + 60 s), which wakes it and ends it, unstarted;
        // looked at again every RECHECK meanwhile, and at the deadline itself when it is nearer.
        let created = Timestamp::from_second(1_800_000_002).unwrap();
        let waiting = hold(&peers[1], Some(&s), &peers, created).unwrap();
        assert_eq!(waiting.next, Next::WaitUntil(Some(created + RECHECK)));
        let deadline = created + jiff::SignedDuration::from_secs(60);
        let near = hold(&peers[1], Some(&s), &peers, deadline - RECHECK / 2).unwrap();
        assert_eq!(near.next, Next::WaitUntil(Some(deadline)));
        let mut queued = peers[1].clone();
        queued.status = waiting.status;
        let expired = hold(&queued, Some(&s), &peers, now())
            .unwrap()
            .status
            .unwrap();
        assert_eq!(expired.phase, RunPhase::Failed);
        assert!(expired.workflow.is_none() && expired.steps.is_empty());
        assert_eq!(expired.status_message.as_deref(), Some("failed"));
        assert_eq!(
            expired.conditions[0].message,
            "run deadline exceeded while queued (execution.timeout 60s)"
        );
        assert_eq!(expired.result.unwrap().to_value()["isError"], true);
        // Cancelled while queued: it ends Cancelled, never started. A Run cancelled before it
        // was ever queued goes to the engine, which handles cancels of unstarted Runs.
        let mut cancelled = queued.clone();
        cancelled.spec.cancel = Some(CancelRequest {
            reason: Some("not now".into()),
            requested_by: Some("alice".into()),
            requested_at: None,
        });
        let ended = hold(&cancelled, Some(&s), &peers, created).unwrap();
        let st = ended.status.unwrap();
        assert_eq!(st.phase, RunPhase::Cancelled);
        assert!(st.workflow.is_none());
        assert_eq!(st.status_message.as_deref(), Some("cancelled"));
        assert_eq!(
            st.conditions[0].message,
            "cancelled by alice while queued: not now"
        );
        assert_eq!(ended.events[0].reason, crate::api::event_reasons::FINISHED);
        let mut fresh = run("b", 2, "x");
        fresh.spec.cancel = cancelled.spec.cancel.clone();
        assert!(hold(&fresh, Some(&s), &peers, created).is_none());
        let unlimited: WorkflowSpec = serde_json::from_value(
            json!({"tool": {}, "steps": [{"name": "s", "delay": {"duration": "1s"}}]}),
        )
        .unwrap();
        assert!(hold(&peers[1], Some(&unlimited), &peers, now()).is_none());
        assert!(hold(&peers[1], None, &peers, now()).is_none());
    }

    fn by(mut r: Run, who: &str, priority: Option<i32>) -> Run {
        r.spec.requested_by = Some(crate::api::Principal {
            username: who.into(),
            uid: None,
            groups: vec![],
        });
        r.spec.priority = priority;
        r
    }

    #[test]
    fn a_higher_priority_passes_the_queued_runs_but_never_a_started_one() {
        let s = spec(1, None, None);
        let peers = vec![
            with_phase(by(run("a", 1, "x"), "alice", None), RunPhase::Running),
            by(run("b", 2, "x"), "alice", None),
            by(run("urgent", 3, "x"), "alice", Some(10)),
        ];
        let urgent = hold(&peers[2], Some(&s), &peers, now()).expect("a holds the slot");
        let st = urgent.status.unwrap();
        assert_eq!(st.priority, Some(10));
        assert_eq!(
            st.status_message.as_deref(),
            Some("queued behind 1 run(s) at priority 10: at most 1 at once")
        );
        // Once a finishes, the urgent Run goes first and b waits behind it.
        let mut peers = peers;
        peers[0] = with_phase(by(run("a", 1, "x"), "alice", None), RunPhase::Succeeded);
        assert!(hold(&peers[2], Some(&s), &peers, now()).is_none());
        assert!(hold(&peers[1], Some(&s), &peers, now()).is_some());
        // The Workflow's priority is the default of its Runs.
        let mut s = s;
        s.execution.concurrency.as_mut().unwrap().priority = Some(20);
        assert!(
            hold(&peers[1], Some(&s), &peers, now()).is_none(),
            "b at 20 passes 10"
        );
    }

    #[test]
    fn one_requesters_burst_does_not_starve_another() {
        let s = spec(1, None, None);
        let mut peers: Vec<Run> = (1..=5)
            .map(|i| by(run(&format!("a{i}"), i, "x"), "alice", None))
            .collect();
        peers[0] = with_phase(peers[0].clone(), RunPhase::Running);
        peers.push(by(run("b1", 9, "x"), "bob", None));
        // While a1 runs, bob's first Run waits for it and alice's next, not for her other three.
        let b1 = hold(&peers[5], Some(&s), &peers, now()).unwrap();
        assert_eq!(
            b1.status.unwrap().status_message.as_deref(),
            Some("queued behind 2 run(s): at most 1 at once")
        );
        // a1 ends: alice's next and bob's first are both first of theirs; hers was earlier.
        peers[0] = with_phase(peers[0].clone(), RunPhase::Succeeded);
        assert!(hold(&peers[1], Some(&s), &peers, now()).is_none());
        assert!(hold(&peers[5], Some(&s), &peers, now()).is_some());
        // a2 starts (after bob's Run was requested) and ends: bob goes before alice's third.
        let mut a2 = with_phase(peers[1].clone(), RunPhase::Succeeded);
        a2.status.as_mut().unwrap().started_at = Some(now().to_string());
        peers[1] = a2;
        assert!(
            hold(&peers[5], Some(&s), &peers, now()).is_none(),
            "bob's turn"
        );
        assert!(hold(&peers[2], Some(&s), &peers, now()).is_some());
    }

    #[test]
    fn a_queued_run_fails_unstarted_after_its_queue_timeout() {
        let mut s = spec(1, None, None);
        s.execution.concurrency.as_mut().unwrap().queue_timeout = Some("30s".into());
        let peers = vec![
            with_phase(run("a", 1, "x"), RunPhase::Running),
            run("b", 2, "x"),
        ];
        let first = hold(&peers[1], Some(&s), &peers, now()).unwrap();
        let mut b = peers[1].clone();
        b.status = first.status;
        // It is woken at the end of its queue timeout (counted from its creation here).
        let created = Timestamp::from_second(1_800_000_002).unwrap();
        let at = created + jiff::SignedDuration::from_secs(30);
        assert!(
            hold(
                &b,
                Some(&s),
                &peers,
                at - jiff::SignedDuration::from_secs(1)
            )
            .is_some()
        );
        let ended = hold(&b, Some(&s), &peers, at).unwrap().status.unwrap();
        assert_eq!(ended.phase, RunPhase::Failed);
        assert!(ended.workflow.is_none() && ended.steps.is_empty());
        let text = ended.result.unwrap().to_value()["content"][0]["text"].clone();
        assert!(
            text.as_str().unwrap().contains("queueTimeout 30s"),
            "{text}"
        );
    }

    #[test]
    fn a_scheduled_run_created_late_waits_its_queue_timeout_from_its_creation() {
        let mut s = spec(1, None, None);
        s.execution.concurrency.as_mut().unwrap().queue_timeout = Some("30s".into());
        let mut late = run("b", 2, "x");
        // Requested for a time long past (a schedule's due time, created once a slot of its
        // own schedule freed up).
        late.metadata.annotations =
            Some([(REQUESTED_AT.to_owned(), "2027-01-15T07:00:00Z".to_owned())].into());
        let peers = vec![with_phase(run("a", 1, "x"), RunPhase::Running), late];
        let created = Timestamp::from_second(1_800_000_002).unwrap();
        let held = hold(&peers[1], Some(&s), &peers, created).unwrap();
        let status = held.status.unwrap();
        assert_eq!(status.phase, RunPhase::Queued, "it waits in line");
        let mut b = peers[1].clone();
        b.status = Some(status);
        let at = created + jiff::SignedDuration::from_secs(30);
        let before = hold(
            &b,
            Some(&s),
            &peers,
            at - jiff::SignedDuration::from_secs(1),
        );
        assert!(before.unwrap().status.is_none(), "still waiting");
        let ended = hold(&b, Some(&s), &peers, at).unwrap().status.unwrap();
        assert_eq!(ended.phase, RunPhase::Failed);
    }

    #[test]
    fn a_queued_run_already_saying_so_writes_nothing() {
        let s = spec(1, None, None);
        let peers = vec![
            with_phase(run("a", 1, "x"), RunPhase::Running),
            run("b", 2, "x"),
        ];
        let first = hold(&peers[1], Some(&s), &peers, now()).unwrap();
        let mut b = peers[1].clone();
        b.status = first.status;
        let again = hold(&b, Some(&s), &peers, now()).unwrap();
        assert_eq!(again.status, None);
    }
}
