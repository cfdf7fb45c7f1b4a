//! Helpers of the reconcile: which effects run detached, engine work off the async workers,
//! what a status write tells, a Run's Workflow before its snapshot, and the clock of the work
//! queue.

use std::panic::AssertUnwindSafe;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use jiff::Timestamp;
use tokio::time::Instant;

use crate::api::Run;
use crate::engine::{self, Effect};

/// Effects that wait on something outside (a Job, an upstream task, a webhook) for as long as
/// it takes, and so run without holding a worker.
pub(super) fn waits_long(effect: &Effect) -> bool {
    matches!(
        effect.action,
        engine::Action::Job { .. }
            | engine::Action::Tool { .. }
            | engine::Action::Child { .. }
            | engine::Action::Notify { .. }
    )
}

/// Which of a Run's effects this is: steps running at the same time have one each.
pub(super) fn effect_id(effect: &Effect) -> String {
    format!("{}#{}", effect.step, effect.attempt)
}

/// Fewest engine threads: a few Runs with heavy templates must not hold up every other Run's
/// decisions on a small machine.
const MIN_ENGINE_THREADS: usize = 4;

/// The threads engine work runs on: a fixed few, one per core. Tokio's blocking pool would
/// start up to hundreds of short-lived threads under load, and every Run status decided on one
/// of them is allocated in that thread's own heap, which leaves many partly used pages behind
/// when the threads end; a few long-lived threads keep the cached Runs dense.
static ENGINE_THREADS: LazyLock<rayon::ThreadPool> = LazyLock::new(|| {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    rayon::ThreadPoolBuilder::new()
        .num_threads(cores.max(MIN_ENGINE_THREADS))
        .thread_name(|i| format!("runway-engine-{i}"))
        .build()
        .expect("the engine threads start")
});

/// Run pure but possibly heavy engine work (template rendering, schema validation) on the
/// engine threads, so that one Run's templates cannot stall the async workers. A panic there
/// continues here, where the worker catches it and fails the Run.
pub(super) async fn off_worker<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = tokio::sync::oneshot::channel();
    ENGINE_THREADS.spawn(move || {
        // The waiting worker may be gone (its reconcile dropped); then so is the answer.
        let _ = tx.send(std::panic::catch_unwind(AssertUnwindSafe(work)));
    });
    match rx.await {
        Ok(Ok(v)) => v,
        Ok(Err(panic)) => std::panic::resume_unwind(panic),
        Err(_) => panic!("engine work did not finish"),
    }
}

/// Most steps a Workflow may have for a Run's first decision to be taken on the async worker.
const FIRST_DECISION_HERE_STEPS: usize = 8;

/// Whether deciding on `run` costs less than the trip to the engine threads and back (two
/// wake-ups, and a copy of the Workflow): a finished Run renders no template, and the first
/// decision of a short Workflow without a fan-out renders those of a few steps. At one client
/// the trip was a tenth of a `tools/call` (`docs/performance.md`).
fn decides_here(run: &Run, live: Option<&crate::api::WorkflowSpec>) -> bool {
    run.phase().is_terminal()
        || (run.status.is_none()
            && live.is_some_and(|w| {
                w.steps.len() <= FIRST_DECISION_HERE_STEPS
                    && w.steps.iter().all(|s| s.for_each.is_none())
            }))
}

/// The engine's decision on `run`: here when it is cheap, on the engine threads otherwise.
pub(super) async fn decide(
    run: &Arc<Run>,
    live: Option<&crate::api::WorkflowSpec>,
) -> engine::Decision {
    if decides_here(run, live) {
        return engine::decide(run, live, Timestamp::now());
    }
    let (run, live) = (Arc::clone(run), live.cloned());
    off_worker(move || engine::decide(&run, live.as_ref(), Timestamp::now())).await
}

/// What a status write that starts or ends a Run tells (it is made once: a conflict writes
/// nothing): its span, the finished count, how long it waited to start.
/// `before` is the status replaced (none for a Run created with its first status).
pub(super) fn transitions(
    metrics: &crate::telemetry::Metrics,
    before: Option<&crate::api::RunStatus>,
    after: &Run,
) {
    let was_terminal = before.is_some_and(|s| s.phase.is_terminal());
    let is = after.phase();
    if is.is_terminal() && !was_terminal {
        crate::telemetry::finish_run(after);
        metrics.run_finished(
            after.metadata.namespace.as_deref().unwrap_or_default(),
            &after.spec.workflow_ref.name,
            is.as_str(),
        );
    }
    fn started(s: Option<&crate::api::RunStatus>) -> Option<&str> {
        s.and_then(|s| s.started_at.as_deref())
    }
    if let (None, Some(at)) = (started(before), started(after.status.as_ref()))
        && let Some(waited) = engine::waited_to_start(after, at)
    {
        metrics.run_started(waited);
    }
}

/// What a Run that has not started finds of its Workflow.
pub(super) enum Live {
    /// Validated and Ready at its current generation: the Run starts from it.
    Ready(Box<crate::api::Workflow>),
    /// Not validated yet at its current generation (applied a moment ago, together with the
    /// Run, or the operator only just started): the Run waits for the verdict.
    Validating,
    /// Missing, or found not Ready: the Run fails.
    Absent,
}

/// How often a Run looks again at a Workflow that is being validated.
pub(super) const VALIDATION_POLL: Duration = Duration::from_secs(1);
/// How long after its creation a Run waits for its Workflow's validation before it fails as
/// for a Workflow that is not Ready (the validator runs in every operator; minutes mean it
/// is not coming).
const VALIDATION_GRACE: jiff::SignedDuration = jiff::SignedDuration::from_mins(2);

/// Whether `run` has waited long enough for its Workflow to be validated.
pub(super) fn waited_for_validation(run: &Run) -> bool {
    run.metadata
        .creation_timestamp
        .as_ref()
        .is_none_or(|t| Timestamp::now().duration_since(t.0) > VALIDATION_GRACE)
}

pub(super) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "panic".to_owned())
}

pub(super) fn instant_at(t: Timestamp) -> Instant {
    let left = t.duration_since(Timestamp::now());
    Instant::now() + Duration::try_from(left).unwrap_or(Duration::ZERO)
}

/// What a relist found, weighing the cache's Runs (`cached`) against the source's keys and
/// versions.
#[derive(Debug, Default)]
pub(super) struct Behind {
    /// Runs the cache lacks.
    pub(super) missing: Vec<super::queue::Key>,
    /// Runs the cache holds at another version (changed during the gap, which a watch
    /// started after it will not deliver), or another Run under their name.
    pub(super) stale: Vec<super::queue::Key>,
    /// Runs the source no longer has (deleted during the gap, perhaps created again under
    /// their name), as the cache last held them.
    pub(super) gone: Vec<Arc<Run>>,
}

/// [`Behind`] of `cached` (by key) against the `source`'s Runs.
pub(super) fn behind(
    mut cached: std::collections::HashMap<super::queue::Key, Arc<Run>>,
    source: Vec<crate::store::Versioned>,
) -> Behind {
    let mut found = Behind::default();
    for now in source {
        match cached.remove(&now.key) {
            None => found.missing.push(now.key),
            Some(r) if r.metadata.uid.is_some() && r.metadata.uid != now.uid => {
                found.gone.push(r);
                found.stale.push(now.key);
            }
            Some(r) if r.metadata.resource_version.as_deref() != Some(now.version.as_str()) => {
                found.stale.push(now.key)
            }
            Some(_) => {}
        }
    }
    found.gone.extend(cached.into_values());
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn engine_work_answers_even_when_more_is_asked_than_there_are_threads() {
        let works = (0..MIN_ENGINE_THREADS * 8).map(|i| off_worker(move || i * 2));
        let answers = futures::future::join_all(works).await;
        assert_eq!(
            answers,
            (0..MIN_ENGINE_THREADS * 8)
                .map(|i| i * 2)
                .collect::<Vec<_>>()
        );
    }

    fn spec(steps: serde_json::Value) -> crate::api::WorkflowSpec {
        serde_json::from_value(serde_json::json!({ "steps": steps })).unwrap()
    }

    #[test]
    fn only_decisions_cheaper_than_the_trip_stay_on_the_async_worker() {
        let step = |i: usize| serde_json::json!({ "name": format!("s{i}"), "delay": { "duration": "0s" } });
        let short = spec(serde_json::json!([step(0)]));
        let long = spec((0..=FIRST_DECISION_HERE_STEPS).map(step).collect());
        let fan_out = spec(serde_json::json!([
            { "name": "s", "forEach": { "items": [1, 2] }, "delay": { "duration": "0s" } }
        ]));
        let new = Run::requested(
            "ns",
            "r",
            "wf",
            serde_json::json!({}),
            None,
            Timestamp::UNIX_EPOCH,
        );
        let with_phase = |phase| {
            let mut r = new.clone();
            r.status = Some(crate::api::RunStatus {
                phase,
                ..Default::default()
            });
            r
        };
        assert!(decides_here(&new, Some(&short)));
        assert!(!decides_here(&new, Some(&long)));
        assert!(!decides_here(&new, Some(&fan_out)));
        assert!(
            !decides_here(&new, None),
            "a Run whose Workflow is gone goes to the engine threads"
        );
        let running = with_phase(crate::api::RunPhase::Running);
        assert!(!decides_here(&running, Some(&short)));
        assert!(decides_here(
            &with_phase(crate::api::RunPhase::Succeeded),
            None
        ));
    }

    #[tokio::test]
    async fn a_panic_in_engine_work_continues_in_the_caller_and_the_threads_go_on() {
        let failed = tokio::spawn(off_worker(|| -> u8 { panic!("a template blew up") }))
            .await
            .unwrap_err();
        assert_eq!(panic_message(&*failed.into_panic()), "a template blew up");
        assert_eq!(off_worker(|| 7).await, 7);
    }

    #[test]
    fn a_relist_names_the_runs_the_cache_lacks_holds_at_another_version_or_still_holds() {
        let key = |n: &str| super::super::queue::Key::new("ns", n);
        let run = |n: &str, v: &str| {
            let mut r = Run::requested(
                "ns",
                n,
                "w",
                serde_json::Value::Null,
                None,
                Timestamp::UNIX_EPOCH,
            );
            r.metadata.resource_version = Some(v.to_owned());
            r.metadata.uid = Some(format!("uid-{n}"));
            (key(n), Arc::new(r))
        };
        let now = |n: &str, v: &str, uid: &str| crate::store::Versioned {
            key: key(n),
            version: v.to_owned(),
            uid: Some(uid.to_owned()),
        };
        let cached = std::collections::HashMap::from([
            run("same", "5"),
            run("changed", "5"),
            run("deleted", "3"),
            run("replaced", "4"),
        ]);
        let source = vec![
            now("same", "5", "uid-same"),
            now("changed", "7", "uid-changed"),
            now("new", "8", "uid-new"),
            now("replaced", "9", "uid-other"),
        ];
        let found = behind(cached, source);
        assert_eq!(found.missing, [key("new")]);
        assert_eq!(found.stale, [key("changed"), key("replaced")]);
        let mut gone: Vec<_> = found
            .gone
            .iter()
            .map(|r| r.metadata.uid.clone().unwrap())
            .collect();
        gone.sort();
        assert_eq!(gone, ["uid-deleted", "uid-replaced"]);
    }
}
