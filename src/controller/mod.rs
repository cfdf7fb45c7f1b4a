//! The controller: watches Runs in any `RunStore`, asks the engine what to do, writes the status
//! it returns before performing the next effect, and runs effects through the executors.
//! It is the only writer of Run status.

mod collecting;
mod config;
mod failing;
mod first;
pub mod history;
mod inflight;
mod performing;
pub mod queue;
mod retiring;
pub mod schedules;
mod starting;
mod waiting;
mod watch;
mod work;

pub use config::{Config, DRAIN, EventSink, LogEvents, Shards};
pub use first::Starter;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt;
use jiff::Timestamp;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::api::Run;
use crate::engine::{self, Effect, Event, Next, Outcome};
use crate::steps::Executor;
use crate::store::{RunStore, StoreError, WorkflowSource};
use crate::telemetry::ErrorKind;
use inflight::Inflight;
use queue::{Key, Queue};
use waiting::Waiting;
use work::{
    Live, VALIDATION_POLL, decide, instant_at, off_worker, panic_message, transitions,
    waited_for_validation, waits_long,
};

/// Pause before retrying after a store failure.
const STORE_RETRY: Duration = Duration::from_secs(1);
/// Longest pause before listing again while the store's watch keeps failing.
const STORE_RETRY_MAX: Duration = Duration::from_secs(30);
/// Most write/effect cycles of one reconcile before the key goes back to the queue.
const MAX_CYCLES: usize = 64;

/// What a status write did (the writer has already applied the error policy).
enum Wrote {
    /// Written: the Run as it now is (shared with the store's cache).
    Run(Arc<Run>),
    /// The Run changed since it was read.
    Conflict,
    /// The Run is gone.
    Gone,
    /// The store refused the status as invalid; the Run was failed instead (or, for a
    /// failure itself, left as it was).
    Refused,
    /// A transient store error; the Run is queued again.
    Later,
}

/// What the writer does with a status the store refuses as invalid.
#[derive(Clone, Copy)]
enum OnRefusal {
    /// Fail the Run with an internal error naming the refusal.
    FailRun,
    /// Nothing more (the refused status was the failure).
    GiveUp,
}

/// What writing the pending outcomes of a Run left to do.
enum Written {
    /// Go on with the Run as it now is, and with what follows when that was decided already.
    Run(Arc<Run>, Option<Next>),
    /// The Run changed meanwhile: read it again.
    Again,
    /// Nothing more now (gone, refused, or retried later).
    Stop,
}

/// Drives Runs to completion.
pub struct Controller {
    store: Arc<dyn RunStore>,
    workflows: Arc<dyn WorkflowSource>,
    executor: Arc<dyn Executor>,
    events: Arc<dyn EventSink>,
    queue: Queue,
    /// Effects in progress.
    inflight: Inflight,
    /// Outcomes of detached effects not yet written, by Run, in the order they came: the
    /// Run's next reconcile writes them together (a hundred items ending at once are a few
    /// writes, not a hundred conflicting ones). Their effects stay in flight until written.
    outcomes: Mutex<HashMap<Key, Vec<(Effect, Outcome)>>>,
    /// Runs of this controller waiting under a concurrency limit, by namespace and Workflow:
    /// reconciled again whenever a Run of that Workflow finishes or goes away.
    waiting: Waiting,
    /// Fires with the token [`Controller::run`] was given (its child, so at that instant):
    /// nothing new starts, what is in progress may still finish and be written.
    stopping: std::sync::OnceLock<CancellationToken>,
    /// Fires when the controller stops for good, ending the detached effects left.
    abandon: CancellationToken,
    /// Runs whose cached copy the last relist found behind the source.
    behind: Mutex<std::collections::HashSet<Key>>,
    /// The detached effects, waited for when the controller stops.
    detached: tokio_util::task::TaskTracker,
    config: Config,
}

impl Controller {
    /// A controller over `store`.
    pub fn new(
        store: Arc<dyn RunStore>,
        workflows: Arc<dyn WorkflowSource>,
        executor: Arc<dyn Executor>,
        events: Arc<dyn EventSink>,
        config: Config,
    ) -> Arc<Self> {
        Arc::new(Self {
            store,
            workflows,
            executor,
            events,
            queue: Queue::with_namespace_limit(match config.workers_per_namespace {
                0 => config.workers.div_ceil(2),
                n => n,
            }),
            inflight: Inflight::default(),
            outcomes: Mutex::new(HashMap::new()),
            waiting: Waiting::default(),
            stopping: std::sync::OnceLock::new(),
            abandon: CancellationToken::new(),
            behind: Mutex::default(),
            detached: tokio_util::task::TaskTracker::new(),
            config,
        })
    }

    /// Run until `shutdown` fires. Then nothing new starts, and the effects in progress get
    /// [`Config::drain`] to finish and be written; what is left is abandoned, not cancelled:
    /// its Runs resume from status on the next start.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let _ = self.stopping.set(shutdown.child_token());
        let mut tasks = tokio::task::JoinSet::new();
        let me = self.clone();
        tasks.spawn(async move { me.watch().await });
        let me = self.clone();
        tasks.spawn(async move { me.wake_on_workflow_changes().await });
        for _ in 0..self.config.workers.max(1) {
            let me = self.clone();
            tasks.spawn(async move {
                loop {
                    let key = me.queue.pop().await;
                    me.config.metrics.set_queue_depth(me.queue.len());
                    // One Run's bug must not take a worker (and with it every tenant's Runs)
                    // down, nor come back at every restart: the Run fails and says why.
                    let reconciled = std::panic::AssertUnwindSafe(me.reconcile(&key))
                        .catch_unwind()
                        .await;
                    if let Err(panic) = reconciled {
                        me.fail_after_panic(&key, panic_message(&*panic)).await;
                    }
                    me.queue.done(&key);
                }
            });
        }
        shutdown.cancelled().await;
        // An attempt that ends now would otherwise be sent again by the next start.
        let drained = self.inflight.until_empty();
        if tokio::time::timeout(self.config.drain, drained)
            .await
            .is_err()
        {
            tracing::info!(within = ?self.config.drain, "effects still in progress at the stop are left to the next start");
        }
        self.abandon.cancel();
        tasks.shutdown().await;
        // Each ends at the stop: none acts for a term that is over once this returns.
        self.detached.close();
        self.detached.wait().await;
    }

    /// Whether the controller was told to stop.
    fn is_stopping(&self) -> bool {
        self.stopping
            .get()
            .is_some_and(CancellationToken::is_cancelled)
    }

    /// The one status writer: write `status` on `run`, record `events` on what was written,
    /// and apply the one error policy — a status the store refuses as invalid fails the Run
    /// (once: a refused failure is logged and left), a transient store error queues the Run
    /// again after [`STORE_RETRY`]. The answer says what happened, so each caller only decides
    /// how its own work goes on.
    async fn write_status(
        &self,
        k: &Key,
        run: &Run,
        status: crate::api::RunStatus,
        events: &[Event],
        refused: OnRefusal,
    ) -> Wrote {
        // The old status is replaced, so it is not copied.
        let next = Run {
            metadata: run.metadata.clone(),
            spec: run.spec.clone(),
            status: Some(status),
        };
        match self.store.update_status(next).await {
            Ok(written) => {
                for e in events {
                    self.events.record(&written, e);
                }
                transitions(&self.config.metrics, run.status.as_ref(), &written);
                Wrote::Run(written)
            }
            Err(StoreError::Conflict) => Wrote::Conflict,
            Err(StoreError::NotFound) => Wrote::Gone,
            Err(StoreError::Invalid(why)) => {
                match refused {
                    // Boxed: failing the Run writes through here again (with `GiveUp`).
                    OnRefusal::FailRun => Box::pin(self.fail_refused(k, &why)).await,
                    OnRefusal::GiveUp => {
                        self.config.metrics.reconcile_error(ErrorKind::Refused);
                        tracing::error!(namespace = %k.namespace, run = %k.name, error = %why, "the store refused even the run's failure; leaving it");
                    }
                }
                Wrote::Refused
            }
            Err(e) => {
                self.retry_later(k, e);
                Wrote::Later
            }
        }
    }

    /// Whether Run `k` must wait under its Workflow's concurrency limit; `Some` is where its
    /// reconcile ends (the queued status written), `None` lets it go on.
    async fn hold(
        &self,
        k: &Key,
        run: &Run,
        live: Option<&crate::api::WorkflowSpec>,
    ) -> Option<()> {
        let spec = live.filter(|s| s.execution.concurrency.is_some())?;
        // In line before the peers are read: a peer that ends after the read must find this Run
        // to wake, or a Run queued behind it would wait for nothing.
        self.waiting.join(k, run);
        let peers = match self.store.list(Some(&k.namespace), &BTreeMap::new()).await {
            Ok(p) => p,
            Err(e) => {
                self.retry_later(k, e);
                return Some(());
            }
        };
        let Some(decision) = engine::concurrency::hold(run, Some(spec), &peers, Timestamp::now())
        else {
            self.waiting.leave(k, run);
            return None;
        };
        // Ended in the queue (cancelled, or past its deadline); otherwise it stays in line.
        if decision
            .status
            .as_ref()
            .is_some_and(|s| s.phase.is_terminal())
        {
            self.waiting.leave(k, run);
        }
        if let Some(status) = decision.status {
            let wrote = self
                .write_status(k, run, status, &decision.events, OnRefusal::FailRun)
                .await;
            // Changed meanwhile (a cancel, say): look again.
            if let Wrote::Conflict = wrote {
                self.queue.add(k.clone());
            }
        }
        if let Next::WaitUntil(Some(t)) = decision.next {
            self.queue.add_at(k.clone(), instant_at(t));
        }
        Some(())
    }

    /// Bring one Run as far as it can go now.
    #[tracing::instrument(name = "reconcile", skip_all, fields(
        namespace = %k.namespace, run = %k.name, uid = tracing::field::Empty,
        trace_id = tracing::field::Empty, span_id = tracing::field::Empty,
    ))]
    pub(crate) async fn reconcile(self: &Arc<Self>, k: &Key) {
        self.catch_up(k).await;
        for _ in 0..MAX_CYCLES {
            let run = match self.store.get_shared(&k.namespace, &k.name).await {
                Ok(Some(run)) => {
                    crate::telemetry::record_run(&run);
                    crate::telemetry::record_run_ids(&tracing::Span::current(), &run);
                    run
                }
                Ok(None) => return self.drop_outcomes(k, |_| true),
                Err(e) => return self.retry_later(k, e),
            };
            let (run, next) = match self.write_outcomes(k, run).await {
                // Told to stop: the outcomes are written, nothing new is decided or started.
                Written::Run(..) if self.is_stopping() => return,
                Written::Run(run, Some(next)) => (run, next),
                Written::Run(run, None) => match self.decide_and_write(k, run).await {
                    Written::Run(run, Some(next)) => (run, next),
                    Written::Again => continue,
                    Written::Run(_, None) | Written::Stop => return,
                },
                Written::Again => continue,
                Written::Stop => return,
            };
            // Decided before the stop: written, left for the next start to perform.
            if self.is_stopping() {
                return;
            }
            // What this write stopped (a step failFast ended, one out of time) is told to stop
            // before the next effect, its cleanup among them, begins: not only when the watch
            // brings the write back.
            self.inflight.abort_undue(k, &run);
            match next {
                Next::Execute(effect) if waits_long(&effect) => {
                    return self.execute_detached(k, &run, *effect);
                }
                Next::Execute(effect) => {
                    if !self.execute(k, &run, &effect).await {
                        return;
                    }
                }
                Next::Branches { effects, wake } => {
                    for effect in effects {
                        self.execute_detached(k, &run, effect);
                    }
                    if let Some(t) = wake {
                        self.queue.add_at(k.clone(), instant_at(t));
                    }
                    return;
                }
                Next::WaitUntil(Some(t)) => return self.queue.add_at(k.clone(), instant_at(t)),
                Next::WaitUntil(None) => return,
                Next::Finished { delete_at: Some(t) } if t <= Timestamp::now() => {
                    return self.collect(k, &run).await;
                }
                Next::Finished { delete_at: Some(t) } => {
                    return self.queue.add_at(k.clone(), instant_at(t));
                }
                Next::Finished { delete_at: None } => return self.collect_orphan(k, &run).await,
            }
        }
        self.queue.add(k.clone());
    }

    /// Decide what follows for `run` (starting it from its Workflow when it has not started)
    /// and write the status that decision gives.
    async fn decide_and_write(self: &Arc<Self>, k: &Key, mut run: Arc<Run>) -> Written {
        let live = match self.live_workflow(k, &run).await {
            Live::Ready(w) => Some(*w),
            Live::Absent => None,
            // Only a Run never decided on gives up on a Workflow that is not validated: one
            // already queued or held back was accepted, and waits while an edit (a resume, a
            // raised limit) is validated, however long it has waited.
            Live::Validating if run.status.is_none() && waited_for_validation(&run) => None,
            Live::Validating => {
                tracing::debug!(workflow = %run.spec.workflow_ref.name, "waiting for the run's workflow to be validated");
                self.queue
                    .add_at(k.clone(), Instant::now() + VALIDATION_POLL);
                return Written::Stop;
            }
        };
        let spec = live.as_ref().map(|w| &w.spec);
        // A finished Run reads its Workflow only for how long it is kept.
        if !run.phase().is_terminal() {
            if self.hold(k, &run, spec).await.is_some() {
                return Written::Stop;
            }
            run = match self.before_start(k, run, live.as_ref()).await {
                Some(run) => run,
                None => return Written::Stop,
            };
        }
        let decision = decide(&run, spec).await;
        let Some(status) = decision.status else {
            return Written::Run(run, Some(decision.next));
        };
        match self
            .write_status(k, &run, status, &decision.events, OnRefusal::FailRun)
            .await
        {
            Wrote::Run(written) => Written::Run(written, Some(decision.next)),
            Wrote::Conflict => Written::Again,
            Wrote::Gone | Wrote::Refused | Wrote::Later => Written::Stop,
        }
    }

    /// The Workflow to start `run` from: read only while the Run has no snapshot of its own
    /// (a Run that ended unstarted reads it for its time to live, and waits for nothing).
    async fn live_workflow(&self, k: &Key, run: &Run) -> Live {
        if run.status.as_ref().is_some_and(|s| s.workflow.is_some()) {
            return Live::Absent;
        }
        match self
            .workflows
            .get(&k.namespace, &run.spec.workflow_ref.name)
            .await
        {
            // A finished Run reads only its time to live, valid or not.
            Some(w) if w.is_ready() || run.phase().is_terminal() => Live::Ready(Box::new(w)),
            Some(w) if !w.is_validated() => Live::Validating,
            _ => Live::Absent,
        }
    }

    /// Perform an effect that may wait a long time (a Job, an upstream task) without holding
    /// a worker: it runs in a task of its own, which records the outcome and queues the Run
    /// again. While it runs, reconciles of the Run start nothing (the in-flight entry stays
    /// until the outcome is recorded, so the same attempt never runs twice).
    ///
    /// `run` is shared, as reconciles read it from the store's cache: a copy per effect cost a
    /// fan-out the number of its items times the size of its Run.
    fn execute_detached(self: &Arc<Self>, k: &Key, run: &Arc<Run>, effect: Effect) {
        let Some(token) = self.inflight.start(k, &effect, run) else {
            return;
        };
        let (me, k, run) = (self.clone(), k.clone(), run.clone());
        self.detached.spawn(async move {
            let work = std::panic::AssertUnwindSafe(async {
                // Another effect of this Run may have recorded this one's end since `run` was
                // read (steps at the same time): do not perform an attempt that is over.
                if let Ok(Some(latest)) = me.store.get_shared(&k.namespace, &k.name).await
                    && !engine::is_due(&latest, &effect)
                {
                    return None;
                }
                me.perform(&k, &run, &effect, token).await
            })
            .catch_unwind();
            let done = tokio::select! {
                biased;
                // The controller stopped: abandoned, as in a crash; the next leader resumes it.
                _ = me.abandon.cancelled() => return,
                done = work => done,
            };
            match done {
                // Written by the Run's next reconcile, which then ends the effect.
                Ok(Some(outcome)) => me
                    .outcomes
                    .lock()
                    .expect("outcomes lock")
                    .entry(k.clone())
                    .or_default()
                    .push((effect, outcome)),
                Ok(None) => me.inflight.end(&k, &effect),
                Err(panic) => {
                    me.inflight.end(&k, &effect);
                    me.fail_after_panic(&k, panic_message(&*panic)).await;
                }
            }
            me.queue.add(k);
        });
    }

    /// Write the outcomes detached effects left for `run`, all in one status write, then end
    /// those effects. On a conflict they stay for the next try.
    async fn write_outcomes(&self, k: &Key, run: Arc<Run>) -> Written {
        self.drop_outcomes(k, |effect| !engine::is_effect_of(&run, effect));
        let pending = self
            .outcomes
            .lock()
            .expect("outcomes lock")
            .remove(k)
            .unwrap_or_default();
        if pending.is_empty() {
            return Written::Run(run, None);
        }
        let end_all = |pending: &[(Effect, Outcome)]| {
            for (effect, _) in pending {
                self.inflight.end(k, effect);
            }
        };
        let (recorded, pending) = {
            let run = run.clone();
            off_worker(move || {
                let recorded = engine::record_and_decide(&run, &pending, Timestamp::now());
                (recorded, pending)
            })
            .await
        };
        let Some(status) = recorded.status else {
            end_all(&pending);
            return Written::Run(run, recorded.next);
        };
        let wrote = self
            .write_status(k, &run, status, &recorded.events, OnRefusal::FailRun)
            .await;
        match wrote {
            Wrote::Run(written) => {
                end_all(&pending);
                Written::Run(written, recorded.next)
            }
            Wrote::Gone | Wrote::Refused => {
                end_all(&pending);
                Written::Stop
            }
            Wrote::Conflict | Wrote::Later => {
                // Kept, before any that arrived meanwhile, for the next try.
                let mut outcomes = self.outcomes.lock().expect("outcomes lock");
                let later = outcomes.entry(k.clone()).or_default();
                let newer = std::mem::replace(later, pending);
                later.extend(newer);
                match wrote {
                    Wrote::Conflict => Written::Again,
                    _ => Written::Stop,
                }
            }
        }
    }

    /// Forget the outcomes left for `k` that `stale` picks, and end their effects: their Run
    /// was deleted, perhaps created again under its name, so they have nowhere to be written —
    /// and kept, they would hold the name's attempts as in flight, or be recorded into the
    /// new Run's steps of the same name.
    pub(super) fn drop_outcomes(&self, k: &Key, stale: impl Fn(&Effect) -> bool) {
        let dropped: Vec<(Effect, Outcome)> = {
            let mut outcomes = self.outcomes.lock().expect("outcomes lock");
            let Some(pending) = outcomes.get_mut(k) else {
                return;
            };
            let (dropped, kept) = std::mem::take(pending)
                .into_iter()
                .partition(|(effect, _)| stale(effect));
            *pending = kept;
            if pending.is_empty() {
                outcomes.remove(k);
            }
            dropped
        };
        for (effect, _) in &dropped {
            self.inflight.end(k, effect);
        }
    }
}
