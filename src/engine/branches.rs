//! Steps that run at the same time: which steps are ready (`dependsOn`, else the step listed
//! before), driving every running step in one pass, stopping the others when one fails
//! (`execution.failFast`), and `forEach` steps, whose items run as records of their own.

use jiff::Timestamp;
use serde_json::Value;

use super::budget::guard_output;
use super::effects::Next;
use super::machine::{Machine, Progress};
use super::template::{self, TemplateError};
use super::{MAX_RESULT_BYTES, budget, ts};
use crate::api::{
    ForEach, Step, StepPhase, StepRecord, WorkflowSpec, event_reasons, item_name, item_of,
};

/// Items of a `forEach` step in progress at once when it does not say.
pub const DEFAULT_PARALLELISM: u32 = 10;

/// Why `forEach.items` gives no items.
#[derive(Debug, thiserror::Error)]
enum ItemsError {
    /// The template did not render.
    #[error("forEach.items: {0}")]
    Template(#[source] TemplateError),
    /// More items than [`budget::MAX_ITEMS`].
    #[error("forEach.items: {0} items; at most {max}", max = budget::MAX_ITEMS)]
    TooMany(usize),
    /// Something else than a list.
    #[error("forEach.items must render to a list, not {0}")]
    NotAList(Value),
    /// Items nested deeper, or larger, than a Run may keep.
    #[error(transparent)]
    Budget(#[from] budget::BudgetError),
}

/// The steps that step `index` of `list` waits for: its `dependsOn`, else the step listed
/// before it (none for the first).
pub(crate) fn dependencies(list: &[Step], index: usize) -> Vec<&str> {
    match &list[index].depends_on {
        Some(d) => d.iter().map(String::as_str).collect(),
        None if index == 0 => Vec::new(),
        None => vec![list[index - 1].name.as_str()],
    }
}

fn earliest(a: Option<Timestamp>, b: Option<Timestamp>) -> Option<Timestamp> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Progress of one `forEach` step, read from its items' records.
struct Items {
    /// Items started so far (they start in index order, so also the next index).
    started: usize,
    /// Items started and not finished.
    running: usize,
    /// The first failed item and why.
    failed: Option<(usize, String)>,
}

impl Machine<'_> {
    /// Records not finished, of the main steps (`finally == false`) or the `finally` steps.
    pub(super) fn running(&self, finally: bool) -> Vec<usize> {
        self.st
            .steps
            .iter()
            .enumerate()
            .filter(|(_, r)| r.finally == finally && !r.phase.is_terminal())
            .map(|(i, _)| i)
            .collect()
    }

    fn record_of(&self, name: &str) -> Option<&StepRecord> {
        self.st.steps.iter().find(|r| r.name == name)
    }

    /// The first step of `list` not started whose dependencies allow it: a main step waits for
    /// its dependencies to succeed (or be skipped), a `finally` step only for them to end.
    pub(super) fn next_ready(&self, list: &[Step], finally: bool) -> Option<usize> {
        (0..list.len()).find(|&i| {
            self.record_of(&list[i].name).is_none()
                && dependencies(list, i)
                    .iter()
                    .all(|d| match self.record_of(d) {
                        Some(r) if finally => r.phase.is_terminal(),
                        Some(r) => matches!(r.phase, StepPhase::Succeeded | StepPhase::Skipped),
                        None => false,
                    })
        })
    }

    /// Drive every running record: the first that changes something ends the pass; when none
    /// does, what they wait for together.
    pub(super) fn continue_all(&mut self, wf: &WorkflowSpec, running: &[usize]) -> Progress {
        let mut effects = Vec::new();
        let mut wake = None;
        // One template context for the running items of the pass: items are not part of it,
        // and a running attempt changes nothing until it reports a change, which ends the
        // pass. Anything else may change what the context holds and drops it. (Built per item,
        // a fan-out paid its items times its records on every pass.)
        let mut base: Option<Value> = None;
        for &i in running {
            let progress = if self.st.steps[i].items.is_some() {
                base = None;
                self.continue_items(wf, i)
            } else {
                self.continue_step(wf, i, &mut base)
            };
            match progress {
                Progress::Changed => return Progress::Changed,
                Progress::Stop(Next::Execute(e)) => effects.push(*e),
                Progress::Stop(Next::Branches {
                    effects: more,
                    wake: w,
                }) => {
                    effects.extend(more);
                    wake = earliest(wake, w);
                }
                Progress::Stop(Next::WaitUntil(w)) => wake = earliest(wake, w),
                Progress::Stop(Next::Finished { .. }) => {}
            }
        }
        // A lone step's effect may hold the Run while it runs; one among others must not keep
        // them (an answer to a question beside it, an item ending) waiting.
        Progress::Stop(match (effects.len(), wake, running.len()) {
            (0, wake, _) => Next::WaitUntil(wake),
            (1, None, 1) => Next::Execute(Box::new(effects.remove(0))),
            _ => Next::Branches { effects, wake },
        })
    }

    /// A step failed and `failFast` holds: stop every other running main step (their upstream
    /// tasks, Jobs and child Runs are cleaned up, their questions closed). A `forEach` step
    /// whose item failed fails; everything else is cancelled.
    pub(super) fn stop_running(&mut self, wf: &WorkflowSpec, running: &[usize]) {
        let cause = self
            .st
            .steps
            .iter()
            .find(|r| r.phase == StepPhase::Failed && !r.finally)
            .map(|r| r.name.clone())
            .unwrap_or_else(|| "another step".into());
        for &i in running {
            self.interrupt(wf, i);
            self.close_requests(i);
            let parent_failed = self.st.steps[i].items.is_some()
                && self.items(&self.st.steps[i].name).failed.is_some();
            let rec = &mut self.st.steps[i];
            rec.finished_at = Some(ts(self.now));
            rec.wake_at = None;
            let name = rec.name.clone();
            if parent_failed {
                rec.phase = StepPhase::Failed;
                self.warn(
                    event_reasons::STEP_FAILED,
                    format!("step {name} failed: an item failed"),
                );
            } else {
                rec.phase = StepPhase::Cancelled;
                rec.message = Some(format!("stopped: step {cause} failed"));
                if item_of(&name).is_none() {
                    self.event(
                        event_reasons::STEP_STOPPED,
                        format!("step {name} stopped: step {cause} failed"),
                    );
                }
            }
        }
        self.refresh_waiting();
        self.settle_phase();
    }

    /// Start a `forEach` step: render its items and keep them on its record; the items start
    /// as it is driven.
    pub(super) fn begin_items(
        &mut self,
        step: &Step,
        each: &ForEach,
        rec: StepRecord,
        ctx: &Value,
    ) -> Progress {
        let items = template::render_value(&each.items, ctx)
            .map_err(ItemsError::Template)
            .and_then(|v| match v {
                Value::Array(a) if a.len() <= budget::MAX_ITEMS => {
                    // Kept on the record, in the Run's status: each within the budgets of
                    // arguments.
                    for item in &a {
                        budget::check("forEach item", item, budget::MAX_ARGUMENT_BYTES)?;
                    }
                    Ok(a)
                }
                Value::Array(a) => Err(ItemsError::TooMany(a.len())),
                other => Err(ItemsError::NotAList(other)),
            });
        self.st.steps.push(rec);
        let i = self.st.steps.len() - 1;
        match items {
            Ok(items) => {
                self.event(
                    event_reasons::STEP_STARTED,
                    format!("step {} started: {} items", step.name, items.len()),
                );
                self.st.steps[i].items = Some(items);
            }
            Err(e) => self.fail_fatal(i, e.to_string()),
        }
        Progress::Changed
    }

    fn items(&self, parent: &str) -> Items {
        let mut p = Items {
            started: 0,
            running: 0,
            failed: None,
        };
        for r in &self.st.steps {
            let Some((step, k)) = item_of(&r.name) else {
                continue;
            };
            if step != parent {
                continue;
            }
            p.started += 1;
            if !r.phase.is_terminal() {
                p.running += 1;
            }
            if r.phase == StepPhase::Failed && p.failed.is_none() {
                p.failed = Some((k, r.message.clone().unwrap_or_default()));
            }
        }
        p
    }

    /// Drive a `forEach` step: start items while fewer than its parallelism run; once all have
    /// ended it succeeds with their outputs in order, or fails with the first failed item.
    pub(super) fn continue_items(&mut self, wf: &WorkflowSpec, i: usize) -> Progress {
        let name = self.st.steps[i].name.clone();
        let Some(step) = wf.step(&name) else {
            self.fail_fatal(i, "step vanished from the workflow snapshot".into());
            return Progress::Changed;
        };
        let total = self.st.steps[i].items.as_ref().map_or(0, Vec::len);
        let parallelism = step
            .for_each
            .as_ref()
            .and_then(|f| f.parallelism)
            .unwrap_or(DEFAULT_PARALLELISM)
            .max(1) as usize;
        let p = self.items(&name);
        let may_start = p.failed.is_none() || !wf.fail_fast();
        if may_start && p.started < total && p.running < parallelism {
            if self.is_paused() {
                return self.wait_paused(self.st.steps[i].finally);
            }
            // Every item that may start now, in one pass, on one template context: a pass per
            // item read every record again (and built the context anew) for each, so a
            // fan-out's cost grew with the square of its items. An item that ends as it starts
            // (fails) ends the batch; the next pass decides what follows from it.
            let base = super::context(self.run, &self.st);
            let room = (parallelism - p.running).min(total - p.started);
            for k in p.started..p.started + room {
                self.begin_item(wf, step, i, k, &base);
                if self.st.steps.last().is_none_or(|r| r.phase.is_terminal()) {
                    break;
                }
            }
            return Progress::Changed;
        }
        if p.running > 0 || (may_start && p.started < total) {
            return Progress::Stop(Next::WaitUntil(None));
        }
        match p.failed {
            Some((k, why)) => {
                let rec = &mut self.st.steps[i];
                rec.phase = StepPhase::Failed;
                rec.finished_at = Some(ts(self.now));
                rec.message = Some(format!("item {k} failed: {why}"));
                self.warn(
                    event_reasons::STEP_FAILED,
                    format!("step {name} failed: item {k} failed: {why}"),
                );
            }
            None => {
                let prefix = format!("{name}[");
                let mut outputs = Vec::with_capacity(total);
                // Each item's output moves into the step's list: kept once, not twice.
                for r in self.st.steps.iter_mut() {
                    if r.name.starts_with(&prefix) {
                        outputs.push(r.output.take().unwrap_or(Value::Null));
                    }
                }
                let (output, truncated) = guard_output(Value::Array(outputs), MAX_RESULT_BYTES);
                let rec = &mut self.st.steps[i];
                rec.phase = StepPhase::Succeeded;
                rec.output = Some(output);
                rec.output_truncated = truncated;
                rec.finished_at = Some(ts(self.now));
                self.event(
                    event_reasons::STEP_SUCCEEDED,
                    format!("step {name} succeeded: {total} items"),
                );
            }
        }
        Progress::Changed
    }

    /// Start item `k` of the `forEach` step whose record is `parent`, as a record of its own
    /// (`<step>[k]`): its own attempts, timeout, retries and idempotency key.
    fn begin_item(
        &mut self,
        wf: &WorkflowSpec,
        step: &Step,
        parent: usize,
        k: usize,
        base: &Value,
    ) {
        let rec = StepRecord {
            name: item_name(&step.name, k),
            finally: self.st.steps[parent].finally,
            phase: StepPhase::Running,
            attempt: 1,
            started_at: Some(ts(self.now)),
            attempt_started_at: Some(ts(self.now)),
            ..Default::default()
        };
        let ctx = super::item_context(base.clone(), &self.st, &rec.name);
        // Whatever it changed, the caller's pass reports as a change.
        let _ = self.start_kind(wf, step, rec, &ctx);
    }

    /// Say what runs: `step 2/5: deploy`, `step 2/5: deploy (3/10 items done)`, `step 2/5:
    /// ship (child run R)`, or the names of the steps running at the same time.
    pub(super) fn describe(&mut self, wf: &WorkflowSpec) {
        let finally = self.st.ending.is_some() && self.running(false).is_empty();
        let list = if finally { &wf.finally } else { &wf.steps };
        let running: Vec<&StepRecord> = self
            .st
            .steps
            .iter()
            .filter(|r| {
                r.finally == finally && !r.phase.is_terminal() && item_of(&r.name).is_none()
            })
            .collect();
        let message = match running.as_slice() {
            [] => return,
            [one] => {
                let label = if finally { "finally" } else { "step" };
                let index = list.iter().position(|s| s.name == one.name).unwrap_or(0);
                let mut m = format!("{label} {}/{}: {}", index + 1, list.len(), one.name);
                if let Some(items) = &one.items {
                    let done = self
                        .st
                        .steps
                        .iter()
                        .filter(|r| {
                            item_of(&r.name).is_some_and(|(s, _)| s == one.name)
                                && r.phase.is_terminal()
                        })
                        .count();
                    m.push_str(&format!(" ({done}/{} items done)", items.len()));
                }
                if let Some(child) = &one.child_run {
                    m.push_str(&format!(" (child run {child})"));
                }
                m
            }
            many => format!(
                "{} steps running: {}",
                many.len(),
                many.iter()
                    .map(|r| r.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        let current = running
            .iter()
            .map(|r| r.name.as_str())
            .collect::<Vec<_>>()
            .join(",");
        self.st.current_step = Some(current);
        self.st.status_message = Some(message);
    }
}
