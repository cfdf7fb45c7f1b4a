//! Beginning a step: its `when` condition, its first attempt by kind, and `fail` steps.

use serde_json::{Value, json};

use super::endings::{fatal_ending, tool_error_ending};
use super::render::{child_run_name, job_name};
use super::{context, duration, template, ts};
use crate::api::{
    Ending, FailStep, RunError, RunPhase, Step, StepKind, StepPhase, StepRecord, WorkflowSpec,
    event_reasons,
};

use super::machine::{Machine, Progress};
use crate::protocol::codes;

impl Machine<'_> {
    pub(super) fn begin_step(&mut self, wf: &WorkflowSpec, step: &Step, finally: bool) -> Progress {
        let ctx = context(self.run, &self.st);
        let rec = StepRecord {
            name: step.name.clone(),
            finally,
            phase: StepPhase::Running,
            attempt: 1,
            started_at: Some(ts(self.now)),
            attempt_started_at: Some(ts(self.now)),
            ..Default::default()
        };
        if let Some(when) = &step.when
            && let Some(done) = self.skip_or_fail_by_when(step, when, &ctx, rec.clone())
        {
            return done;
        }
        if let Some(each) = &step.for_each {
            return self.begin_items(step, each, rec, &ctx);
        }
        if let Some(done) = self.start_kind(wf, step, rec, &ctx) {
            return done;
        }
        self.event(
            event_reasons::STEP_STARTED,
            format!("step {} started", step.name),
        );
        Progress::Changed
    }

    /// Push the step's record and do what its kind does first. `Some` when that already
    /// decided the step (a failure, a `fail` step); `None` when it has started.
    pub(super) fn start_kind(
        &mut self,
        wf: &WorkflowSpec,
        step: &Step,
        mut rec: StepRecord,
        ctx: &Value,
    ) -> Option<Progress> {
        match step.kind() {
            StepKind::Delay(d) => {
                let wake = duration::render(&d.duration, ctx);
                self.st.steps.push(rec);
                let i = self.st.steps.len() - 1;
                match wake {
                    Ok(d) => self.st.steps[i].wake_at = Some(ts(self.now + d)),
                    Err(e) => {
                        self.fail_fatal(i, format!("delay.duration: {e}"));
                        return Some(Progress::Changed);
                    }
                }
            }
            StepKind::Sample(sample) => {
                rec.phase = StepPhase::Waiting;
                self.st.steps.push(rec);
                let i = self.st.steps.len() - 1;
                if let Err(e) = self.open_sample(i, step, sample, ctx) {
                    self.fail_fatal(i, e.to_string());
                    return Some(Progress::Changed);
                }
            }
            StepKind::Input(input) => {
                rec.phase = StepPhase::Waiting;
                self.st.steps.push(rec);
                let i = self.st.steps.len() - 1;
                if let Err(e) = self.open_input(i, step, input, ctx) {
                    self.fail_fatal(i, e.to_string());
                    return Some(Progress::Changed);
                }
            }
            StepKind::Fail(fail) => {
                rec.phase = StepPhase::Failed;
                rec.finished_at = Some(ts(self.now));
                self.st.steps.push(rec);
                let i = self.st.steps.len() - 1;
                self.apply_fail(i, fail, ctx, wf);
                return Some(Progress::Changed);
            }
            StepKind::Job(_) => {
                rec.job_name = Some(job_name(
                    self.run.metadata.name.as_deref().unwrap_or("run"),
                    &rec.name,
                    1,
                ));
                self.st.steps.push(rec);
            }
            StepKind::Workflow(_) => {
                rec.child_run = Some(child_run_name(
                    self.run.metadata.name.as_deref().unwrap_or("run"),
                    &rec.name,
                    1,
                ));
                self.st.steps.push(rec);
            }
            StepKind::Http(_) | StepKind::Tool(_) => self.st.steps.push(rec),
            StepKind::None => {
                self.st.steps.push(rec);
                let i = self.st.steps.len() - 1;
                self.fail_fatal(i, "step has no kind".into());
                return Some(Progress::Changed);
            }
        }
        None
    }

    /// A step whose `when` is false is skipped; one whose `when` does not render fails.
    /// `None`: the step runs.
    fn skip_or_fail_by_when(
        &mut self,
        step: &Step,
        when: &str,
        ctx: &Value,
        mut rec: StepRecord,
    ) -> Option<Progress> {
        match template::truthy(when, ctx) {
            Ok(true) => None,
            Ok(false) => {
                rec.phase = StepPhase::Skipped;
                rec.finished_at = Some(ts(self.now));
                self.st.steps.push(rec);
                self.event(
                    event_reasons::STEP_SKIPPED,
                    format!("step {} skipped", step.name),
                );
                Some(Progress::Changed)
            }
            Err(e) => {
                self.st.steps.push(rec);
                let i = self.st.steps.len() - 1;
                self.fail_fatal(i, format!("when: {e}"));
                Some(Progress::Changed)
            }
        }
    }

    pub(super) fn apply_fail(
        &mut self,
        i: usize,
        fail: &FailStep,
        ctx: &Value,
        _wf: &WorkflowSpec,
    ) {
        let name = self.st.steps[i].name.clone();
        let rendered = |t: &str| template::render(t, ctx);
        let ending = match (&fail.error, &fail.message) {
            (Some(err), _) => match rendered(&err.message) {
                Ok(message) => Ending {
                    phase: RunPhase::Failed,
                    result: None,
                    // A Workflow validated before reserved codes were refused may still name
                    // one: the Run ends as an internal error, the code kept beside it.
                    error: Some(Box::new(RunError {
                        code: codes::for_run(err.code),
                        message: message.clone(),
                        data: codes::reserved_for_protocol(err.code)
                            .then(|| json!({"code": err.code})),
                    })),
                    message: Some(message),
                },
                Err(e) => fatal_ending(format!("step {name}: error.message: {e}")),
            },
            (None, message) => match rendered(message.as_deref().unwrap_or("failed")) {
                Ok(message) => tool_error_ending(message),
                Err(e) => fatal_ending(format!("step {name}: message: {e}")),
            },
        };
        self.st.steps[i].message = ending.message.clone();
        self.warn(
            event_reasons::STEP_FAILED,
            format!(
                "step {name} failed: {}",
                ending.message.clone().unwrap_or_default()
            ),
        );
        if self.st.ending.is_none() {
            self.st.ending = Some(Box::new(ending));
        }
    }
}
