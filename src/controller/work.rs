//! Helpers of the reconcile: which effects run detached, engine work off the async workers,
//! a Run's Workflow before its snapshot, and the clock of the work queue.

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

pub(super) async fn decide_off_worker(
    run: &Arc<Run>,
    live: Option<&crate::api::WorkflowSpec>,
) -> engine::Decision {
    let (run, live) = (Arc::clone(run), live.cloned());
    off_worker(move || engine::decide(&run, live.as_ref(), Timestamp::now())).await
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

    #[tokio::test]
    async fn a_panic_in_engine_work_continues_in_the_caller_and_the_threads_go_on() {
        let failed = tokio::spawn(off_worker(|| -> u8 { panic!("a template blew up") }))
            .await
            .unwrap_err();
        assert_eq!(panic_message(&*failed.into_panic()), "a template blew up");
        assert_eq!(off_worker(|| 7).await, 7);
    }
}
