//! The scheduler: starts the Runs Workflows' `schedules` owe, cancels what `Replace` replaces,
//! and deletes what the history limits let go. What is owed is decided by
//! `engine::schedule` from the Runs each schedule already started (their
//! `runway.dev/scheduled-for` annotations), so the scheduler keeps nothing that matters in
//! memory: after a restart or a failover it picks up where the Runs say it was, and a Run
//! started twice for one time (two passes, a restart in between) is one Run, by its name.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::Timestamp;
use tokio_util::sync::CancellationToken;

use super::EventSink;
use super::retiring::{RetireError, retire_tree};
use crate::api::{
    CancelRequest, Principal, Run, RunPhase, ScheduleSpec, Workflow, annotations, event_reasons,
    labels,
};
use crate::engine::marks::{Marks, Sealed};
use crate::engine::schedule::{self, Admit, Finished};
use crate::engine::{Event, schedule::Timetable};
use crate::store::archive::keeper::Archiver;
use crate::store::{RunStore, StoreError, WorkflowSource};

/// Longest sleep between passes: a schedule added or changed is also noticed through the
/// Workflows' change feed, this bounds what a missed notification costs.
const MAX_SLEEP: Duration = Duration::from_secs(60);

/// Where a schedule lives: namespace, Workflow, schedule name.
type ScheduleKey = (String, String, String);

/// Each Workflow (namespace, name), as one sweep has read it.
type Known = HashMap<(String, String), Option<Workflow>>;

/// Starts scheduled Runs.
pub struct Scheduler {
    store: Arc<dyn RunStore>,
    workflows: Arc<dyn WorkflowSource>,
    events: Arc<dyn EventSink>,
    /// From when each schedule that has no Run yet owes times ([`schedule::first_owed`]: a
    /// little before this process first saw it, never before its Workflow).
    first_seen: Mutex<HashMap<ScheduleKey, Timestamp>>,
    /// The latest time each schedule acted on (started, or given up past `startingDeadline`),
    /// so that such a time is not started later; Runs carry the rest of the state.
    handled: Mutex<HashMap<ScheduleKey, Timestamp>>,
    /// When to look next for finished Runs of schedules that are gone ([`Self::sweep`]):
    /// at once after a Workflow changed, then when the first of them is due, at the latest
    /// after [`SWEEP_EVERY`].
    sweep_at: Mutex<Option<Timestamp>>,
    /// When the last sweep was: Workflow changes bring the next one forward, to no sooner than
    /// [`SWEEP_GAP`] after it.
    swept_at: Mutex<Option<Timestamp>>,
    /// Where the Runs the history limits let go are archived first.
    archive: Option<Arc<Archiver>>,
    /// Counts a Run kept because the archive failed, as the controller's collection does.
    metrics: Option<crate::telemetry::Metrics>,
    /// The key of scheduled Run names.
    name_key: Vec<u8>,
    /// The seals on scheduled Runs: a Run is this schedule's only when its seal holds, so a
    /// Run that merely carries the schedule's label and a time (anyone who may create Runs can
    /// write those) moves no schedule and is never cancelled or pruned by it.
    marks: Marks,
}

/// How soon a schedule looks again at a Run its history limit let go that the archive could
/// not take.
const ARCHIVE_RETRY: jiff::SignedDuration = jiff::SignedDuration::from_secs(10);

/// How often finished Runs of schedules that are gone are looked for, at the longest.
const SWEEP_EVERY: jiff::SignedDuration = jiff::SignedDuration::from_mins(10);

/// The shortest time between two sweeps, however often Workflows change (status writes
/// included): each sweep reads every Run in the store.
const SWEEP_GAP: jiff::SignedDuration = jiff::SignedDuration::from_secs(5);

/// How soon a schedule whose time waits behind an unfinished Run (`Forbid`) looks again.
const FORBID_RECHECK: jiff::SignedDuration = jiff::SignedDuration::from_secs(1);

impl Scheduler {
    /// A scheduler over `store` and `workflows`; the names of the Runs it starts are keyed by
    /// `name_key` (the server's state key).
    pub fn new(
        store: Arc<dyn RunStore>,
        workflows: Arc<dyn WorkflowSource>,
        events: Arc<dyn EventSink>,
        name_key: Vec<u8>,
        marks: Marks,
    ) -> Arc<Self> {
        Arc::new(Self {
            store,
            workflows,
            events,
            name_key,
            marks,
            first_seen: Mutex::new(HashMap::new()),
            handled: Mutex::new(HashMap::new()),
            sweep_at: Mutex::new(None),
            swept_at: Mutex::new(None),
            archive: None,
            metrics: None,
        })
    }

    /// This scheduler, archiving the Runs its history limits let go before it deletes them.
    pub fn with_archive(
        mut self: Arc<Self>,
        archive: Option<Arc<Archiver>>,
        metrics: crate::telemetry::Metrics,
    ) -> Arc<Self> {
        let me =
            Arc::get_mut(&mut self).expect("with_archive is called before the scheduler is shared");
        me.archive = archive;
        me.metrics = Some(metrics);
        self
    }

    /// Whether `run` is one this scheduler started for `workflow`'s schedule `schedule`.
    fn started(&self, run: &Run, workflow: &str, schedule: &str) -> bool {
        schedule::started_by(&self.marks, run, workflow, schedule)
    }

    /// Run until `shutdown`: a pass over every schedule, then sleep until the next time due,
    /// a Workflow changes, or a minute.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        let mut changes = self.workflows.changes();
        loop {
            let next = self.pass(Timestamp::now()).await;
            let sleep = next
                .map(|t| Duration::try_from(t.duration_since(Timestamp::now())).unwrap_or_default())
                .unwrap_or(MAX_SLEEP)
                .min(MAX_SLEEP);
            tokio::select! {
                _ = shutdown.cancelled() => return,
                // A schedule removed or renamed, or a Workflow deleted, leaves Runs that no
                // history limit keeps: look for them now.
                _ = changes.changed() => self.sweep_soon(),
                _ = tokio::time::sleep(sleep) => {}
            }
        }
    }

    /// Act on every schedule of every Ready Workflow; the earliest next time of any.
    pub async fn pass(&self, now: Timestamp) -> Option<Timestamp> {
        let mut next = Some(self.sweep(now).await);
        for ns in self.workflows.namespaces().await {
            for wf in self.workflows.list(&ns).await {
                if wf.spec.schedules.is_empty() || !wf.is_ready() {
                    continue;
                }
                let name = wf.metadata.name.clone().unwrap_or_default();
                let selector = BTreeMap::from([(labels::WORKFLOW.to_owned(), name.clone())]);
                let runs = match self.store.list(Some(&ns), &selector).await {
                    Ok(r) => r,
                    Err(e) => {
                        tracing::warn!(namespace = %ns, workflow = %name, error = %e, "schedules: cannot list runs");
                        continue;
                    }
                };
                for spec in &wf.spec.schedules {
                    let Ok(tt) = schedule::timetable(spec) else {
                        continue;
                    };
                    // A suspended Workflow suspends its schedules: Runs it would only hold
                    // back unstarted are not made; once resumed, the latest missed time starts.
                    let suspended;
                    let spec = if wf.spec.suspend && !spec.suspend {
                        suspended = ScheduleSpec {
                            suspend: true,
                            ..spec.clone()
                        };
                        &suspended
                    } else {
                        spec
                    };
                    let key = (ns.clone(), name.clone(), spec.name.clone());
                    let mine: Vec<&Run> = runs
                        .iter()
                        .map(|r| &**r)
                        .filter(|r| {
                            r.metadata
                                .labels
                                .as_ref()
                                .and_then(|l| l.get(labels::SCHEDULE))
                                == Some(&spec.name)
                                && self.started(r, &name, &spec.name)
                        })
                        .collect();
                    let wake = self.one(&wf, spec, &tt, &key, &mine, now).await;
                    next = match (next, wake) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    };
                }
            }
        }
        next
    }

    /// Where schedule `key` stands: the latest of the time its newest Run was for (never before
    /// its Workflow was made: Runs of an earlier Workflow of the name, deleted and applied
    /// again, outlive it), the last time handled here, and, without Runs, where it was first met.
    fn since(&self, wf: &Workflow, key: &ScheduleKey, mine: &[&Run], now: Timestamp) -> Timestamp {
        let created = wf.metadata.creation_timestamp.as_ref().map(|t| t.0);
        let last = mine.iter().filter_map(|r| schedule::scheduled_for(r)).max();
        let last = last.map(|l| created.filter(|c| *c <= now).map_or(l, |c| l.max(c)));
        let handled = self.handled.lock().expect("handled lock").get(key).copied();
        let seen = *self
            .first_seen
            .lock()
            .expect("first_seen lock")
            .entry(key.clone())
            .or_insert_with(|| schedule::first_owed(now, created));
        last.unwrap_or(seen).max(handled.unwrap_or(Timestamp::MIN))
    }

    /// Act on one schedule; its next time.
    async fn one(
        &self,
        wf: &Workflow,
        spec: &ScheduleSpec,
        tt: &Timetable,
        key: &ScheduleKey,
        mine: &[&Run],
        now: Timestamp,
    ) -> Option<Timestamp> {
        let since = self.since(wf, key, mine, now);
        let plan = schedule::plan(tt, spec, since, now);
        if let Some(at) = plan.too_late {
            tracing::warn!(namespace = %key.0, workflow = %key.1, schedule = %key.2, at = %at, "schedule: missed time past its startingDeadline, not made up for");
            self.handled
                .lock()
                .expect("handled lock")
                .insert(key.clone(), at);
        }
        let mut recheck = None;
        if let Some(at) = plan.due {
            if plan.missed > 0 {
                tracing::warn!(namespace = %key.0, workflow = %key.1, schedule = %key.2, missed = plan.missed, "schedule: times missed while not running; starting the latest");
            }
            let active: Vec<&Run> = mine
                .iter()
                .copied()
                .filter(|r| !r.phase().is_terminal())
                .collect();
            let started = match schedule::admit(spec, active.len()) {
                Admit::Start => self.start(wf, spec, key, at).await,
                Admit::Skip => {
                    // As a CronJob does: the time stays owed, and starts once the Run ahead has
                    // finished (within `startingDeadline`) — the Run ahead may only be one the
                    // controller has not looked at since a restart — unless a newer time comes
                    // first.
                    tracing::info!(namespace = %key.0, workflow = %key.1, schedule = %key.2, at = %at, "schedule: previous run unfinished (Forbid); waiting for it");
                    let again = Timestamp::now() + FORBID_RECHECK;
                    recheck = Some(again);
                    false
                }
                Admit::Replace => {
                    let mut replaced = true;
                    for r in &active {
                        let why = format!("replaced by schedule {} for {at}", spec.name);
                        replaced &= self.cancel(r, &why).await;
                    }
                    if replaced {
                        self.start(wf, spec, key, at).await
                    } else {
                        // Started now, the new Run would run beside the one it replaces until
                        // the next time: the time stays owed, and the cancel is tried again.
                        recheck = Some(Timestamp::now() + FORBID_RECHECK);
                        false
                    }
                }
            };
            if started {
                self.handled
                    .lock()
                    .expect("handled lock")
                    .insert(key.clone(), at);
            }
        }
        if self.prune(spec, mine).await {
            // A Run the archive could not take is tried again soon, as the controller tries
            // one whose time to live is over.
            recheck = Some(recheck.map_or(now + ARCHIVE_RETRY, |r| r.min(now + ARCHIVE_RETRY)));
        }
        match (plan.next, recheck) {
            (Some(n), Some(r)) => Some(n.min(r)),
            (n, r) => n.or(r),
        }
    }

    /// Create the Run for `at`; whether it exists now (created here or before).
    async fn start(
        &self,
        wf: &Workflow,
        spec: &ScheduleSpec,
        key: &ScheduleKey,
        at: Timestamp,
    ) -> bool {
        let name = schedule::run_name(&self.name_key, &key.0, &key.1, &spec.name, at);
        let arguments = spec
            .arguments
            .clone()
            .unwrap_or_else(|| serde_json::json!({}));
        let requester = Principal {
            username: schedule::requester(&key.1, &spec.name),
            uid: None,
            groups: vec![],
        };
        let run = Run::requested(&key.0, &name, &key.1, arguments, Some(requester), at)
            .with_labels([(labels::SCHEDULE, spec.name.clone())])
            .with_annotations([(annotations::SCHEDULED_FOR, at.to_string())]);
        let mark = self.marks.seal(
            Sealed::Scheduled,
            &schedule::sealed_parts(&run, &key.1, &spec.name),
        );
        let run = run.with_annotations([(annotations::MARK, mark)]);
        match self.store.create(run).await {
            Ok(created) => {
                let zone = spec.time_zone.as_deref().unwrap_or("UTC");
                let local =
                    at.to_zoned(jiff::tz::TimeZone::get(zone).unwrap_or(jiff::tz::TimeZone::UTC));
                self.events.record(
                    &created,
                    &Event {
                        reason: event_reasons::SCHEDULED,
                        message: format!(
                            "started by schedule {} ({}) for {}",
                            spec.name,
                            spec.cron,
                            local.strftime("%Y-%m-%d %H:%M:%S %Z")
                        ),
                        warning: false,
                    },
                );
                tracing::info!(namespace = %key.0, workflow = %key.1, schedule = %key.2, run = %name, "scheduled run created");
                true
            }
            Err(StoreError::AlreadyExists) => true,
            Err(e) => {
                tracing::warn!(namespace = %key.0, workflow = %wf.metadata.name.as_deref().unwrap_or_default(), schedule = %key.2, error = %e, "schedule: cannot create run; next pass retries");
                false
            }
        }
    }

    /// Ask `run` to stop for a Run that replaces it; whether it was asked (or no longer
    /// runs), so that the replacing Run starts only then.
    async fn cancel(&self, run: &Run, reason: &str) -> bool {
        let (ns, name) = (
            run.metadata.namespace.clone().unwrap_or_default(),
            run.metadata.name.clone().unwrap_or_default(),
        );
        for _ in 0..crate::store::MAX_CONFLICT_RETRIES {
            let mut latest = match self.store.get(&ns, &name).await {
                Ok(Some(latest)) => latest,
                Ok(None) => return true,
                Err(e) => {
                    tracing::warn!(namespace = %ns, run = %name, error = %e, "schedule: cannot read the run to replace");
                    return false;
                }
            };
            if latest.spec.cancel.is_some() || latest.phase().is_terminal() {
                return true;
            }
            latest.spec.cancel = Some(CancelRequest {
                reason: Some(reason.to_owned()),
                requested_by: latest
                    .spec
                    .requested_by
                    .as_ref()
                    .map(|p| p.username.clone()),
                requested_at: Some(Timestamp::now().to_string()),
            });
            match self.store.update(latest).await {
                Err(StoreError::Conflict) => continue,
                Err(e) => {
                    tracing::warn!(namespace = %ns, run = %name, error = %e, "schedule: cannot cancel replaced run");
                    return false;
                }
                Ok(_) => return true,
            }
        }
        tracing::warn!(namespace = %ns, run = %name, "schedule: the replaced run kept changing; the next pass cancels it");
        false
    }

    /// Delete (archived first, with their children) the finished Runs of schedules that are
    /// gone whose time to live is over, when a look is due; when to look next.
    async fn sweep(&self, now: Timestamp) -> Timestamp {
        let due = *self.sweep_at.lock().expect("sweep lock");
        if let Some(at) = due
            && at > now
        {
            return at;
        }
        let mut next = now + SWEEP_EVERY;
        let mut known = Known::new();
        let runs = match self.store.list(None, &BTreeMap::new()).await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "schedules: cannot list runs to find those of schedules that are gone");
                return next;
            }
        };
        for run in &runs {
            let Some(l) = run.metadata.labels.as_ref() else {
                continue;
            };
            let (Some(workflow), Some(name)) = (l.get(labels::WORKFLOW), l.get(labels::SCHEDULE))
            else {
                continue;
            };
            let Some(at) = schedule::orphan_delete_at(run) else {
                continue;
            };
            if !self.started(run, workflow, name)
                || self.still_has(&mut known, run, workflow, name).await
            {
                continue;
            }
            if at > now {
                next = next.min(at);
                continue;
            }
            if self.let_go(run, "time to live, its schedule gone").await {
                next = next.min(now + ARCHIVE_RETRY);
            }
        }
        *self.sweep_at.lock().expect("sweep lock") = Some(next);
        *self.swept_at.lock().expect("sweep lock") = Some(now);
        next
    }

    /// Archive and delete `run` with the child Runs below it (`why` says what let it go);
    /// whether it was kept to be tried again soon: the archive could not take it (reported as
    /// the controller's collection reports it), or it was written while it was archived. Kept
    /// otherwise (children still running, the store failing), it is tried again on a later
    /// pass.
    async fn let_go(&self, run: &Run, why: &str) -> bool {
        let (ns, name) = (&run.metadata.namespace, &run.metadata.name);
        match retire_tree(&*self.store, self.archive.as_deref(), &self.marks, run).await {
            Ok(()) => {
                tracing::info!(namespace = ?ns, run = ?name, why, "scheduled run removed");
                false
            }
            Err(RetireError::Archive { run, name, source }) => {
                tracing::error!(namespace = ?ns, run = %name, error = %source, "schedule: an old run is kept until it can be archived");
                if let Some(m) = &self.metrics {
                    m.reconcile_error(crate::telemetry::ErrorKind::Archive);
                }
                let event = Event {
                    reason: event_reasons::ARCHIVE_FAILED,
                    message: format!("not deleted yet: {source}"),
                    warning: true,
                };
                self.events.record(&run, &event);
                true
            }
            Err(e @ RetireError::Changed(_)) => {
                tracing::debug!(namespace = ?ns, run = ?name, reason = %e, "schedule: an old run is read again before it is deleted");
                true
            }
            Err(e @ RetireError::Unfinished(_)) => {
                tracing::debug!(namespace = ?ns, run = ?name, reason = %e, "schedule: an old run is kept until its children have finished");
                false
            }
            Err(e) => {
                tracing::warn!(namespace = ?ns, run = ?name, error = %e, "schedule: cannot delete old run");
                false
            }
        }
    }

    /// Bring the next sweep forward (a Workflow changed: a schedule may be gone), to no sooner
    /// than [`SWEEP_GAP`] after the last.
    fn sweep_soon(&self) {
        let earliest = self
            .swept_at
            .lock()
            .expect("sweep lock")
            .map(|t| t + SWEEP_GAP);
        let mut at = self.sweep_at.lock().expect("sweep lock");
        *at = match (*at, earliest) {
            (Some(due), Some(e)) => Some(due.min(e)),
            (_, e) => e,
        };
    }

    /// Whether `workflow` (of `run`'s namespace) still keeps the history of schedule `name`
    /// ([`schedule::keeps_history`]). Each Workflow is read once per sweep, into `known`.
    async fn still_has(&self, known: &mut Known, run: &Run, workflow: &str, name: &str) -> bool {
        let ns = run.metadata.namespace.as_deref().unwrap_or_default();
        let key = (ns.to_owned(), workflow.to_owned());
        if !known.contains_key(&key) {
            let wf = self.workflows.get(ns, workflow).await;
            known.insert(key.clone(), wf);
        }
        schedule::keeps_history(known[&key].as_ref(), name)
    }

    /// Let the oldest finished Runs go past the history limits; whether one was kept because
    /// the archive could not take it.
    async fn prune(&self, spec: &ScheduleSpec, mine: &[&Run]) -> bool {
        let newest = mine.iter().filter_map(|r| schedule::scheduled_for(r)).max();
        // A finished Run still undoing what its steps started (its cleanups) is kept until it
        // has: deleted, it would never cancel an upstream task it left running.
        let finished: Vec<Finished> = mine
            .iter()
            .filter(|r| r.phase().is_terminal())
            .filter(|r| r.status.as_ref().is_none_or(|s| s.cleanups.is_empty()))
            .filter_map(|r| {
                Some(Finished {
                    name: r.metadata.name.clone()?,
                    scheduled_for: schedule::scheduled_for(r)?,
                    succeeded: r.phase() == RunPhase::Succeeded,
                })
            })
            .collect();
        let mut kept = false;
        for name in schedule::prune(spec, newest, &finished) {
            let ns = mine
                .first()
                .and_then(|r| r.metadata.namespace.clone())
                .unwrap_or_default();
            let Some(run) = mine
                .iter()
                .find(|r| r.metadata.name.as_ref() == Some(&name))
            else {
                continue;
            };
            kept |= self.let_go(run, "history limit").await;
            tracing::debug!(namespace = %ns, run = %name, schedule = %spec.name, "scheduled run let go by the history limit");
        }
        kept
    }
}
