//! The pure core: given a Run, the live Workflow (only needed before the Run starts) and `now`,
//! decide what happens next. No I/O, no clock, no store. The controller writes the status this
//! module returns and performs the effects it asks for; executors report back through [`record`].

mod backoff;
pub mod budget;
pub mod concurrency;
pub mod duration;
pub mod forms;
pub mod group;
pub mod input;
pub mod marks;
mod result;
pub mod schedule;
pub mod stamps;
pub mod template;
pub mod validate;

mod approvals;
mod begin;
mod branches;
mod cancel;
mod effects;
mod endings;
mod follow;
mod held;
mod line;
mod machine;
mod notify;
mod pause;
mod record;
mod render;
pub mod retry;
mod sample;
mod snapshot;
mod told;
mod undo;

pub use branches::DEFAULT_PARALLELISM;
pub(crate) use branches::dependencies;
pub use budget::guard_output;
pub use effects::{
    Action, Body, Decision, Effect, Event, HeaderValue, HttpRequest, Next, Outcome, Recorded,
};
pub use endings::{fail_internal, give_up_cleanups};
pub use follow::decide;
pub use follow::record_and_decide;
pub use record::{record, record_all, recorded_events};
pub use render::{HeaderError, RenderError, child_run_name, job_name, upstream_server};
pub use sample::sampling_answer_error;

use jiff::Timestamp;
use serde_json::{Value, json};

use crate::api::{Run, RunStatus, item_of};

/// Largest step output kept in status, in bytes of JSON; larger outputs are truncated.
pub(crate) const MAX_OUTPUT_BYTES: usize = 64 * 1024;
/// Largest final result kept in status, in bytes of JSON.
pub(crate) const MAX_RESULT_BYTES: usize = 256 * 1024;

fn ts(t: Timestamp) -> String {
    t.to_string()
}

fn parse_ts(s: Option<&str>) -> Option<Timestamp> {
    s.and_then(|s| s.parse().ok())
}

/// FNV-1a of `bytes`: a hash that is the same in every process, version and machine, for names
/// and shards that replicas and restarts must agree on (not for anything an attacker picks
/// against).
pub fn stable_hash(bytes: impl IntoIterator<Item = u8>) -> u64 {
    bytes.into_iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Idempotency key of a step: the same for every attempt and after restarts.
pub fn idempotency_key(run: &Run, step: &str) -> String {
    format!(
        "{}/{}",
        run.metadata.uid.as_deref().unwrap_or_default(),
        step
    )
}

/// Whether `effect` was decided for this Run and not for an earlier one of the same name (a Run
/// deleted and created again): every effect's idempotency key starts with its Run's uid.
pub fn is_effect_of(run: &Run, effect: &Effect) -> bool {
    let uid = run.metadata.uid.as_deref().unwrap_or_default();
    effect
        .idempotency_key
        .strip_prefix(uid)
        .is_some_and(|rest| rest.starts_with('/'))
}

/// The template context of a Run: `args`, `steps.<name>.output`, `inputs.<name>`, `run`.
pub fn context(run: &Run, status: &RunStatus) -> Value {
    let mut steps = serde_json::Map::new();
    // Items show as their step's output list, not one by one.
    for r in status.steps.iter().filter(|r| item_of(&r.name).is_none()) {
        steps.insert(
            r.name.clone(),
            json!({
                "output": r.output.clone().unwrap_or(Value::Null),
                "phase": format!("{:?}", r.phase),
                "attempt": r.attempt,
                "message": r.message,
            }),
        );
    }
    let mut inputs = serde_json::Map::new();
    for r in &status.steps {
        if let (Some(Value::Object(out)), false) = (&r.output, r.input_keys.is_empty()) {
            for (name, v) in out {
                inputs.insert(name.clone(), v.clone());
            }
        }
    }
    json!({
        "args": run.spec.arguments.clone().unwrap_or_else(|| json!({})),
        "steps": steps,
        "inputs": inputs,
        "run": {
            "name": run.metadata.name,
            "namespace": run.metadata.namespace,
            "uid": run.metadata.uid,
            "requestedBy": run.spec.requested_by.as_ref().map(|p| p.username.clone()),
        },
    })
}

/// How long `run` waited between its request (the requested-at annotation, else its creation)
/// and `started_at`, its start; `None` when either cannot be read.
pub fn waited_to_start(run: &Run, started_at: &str) -> Option<std::time::Duration> {
    let (created, requested, _) = concurrency::place(run);
    let requested = requested.unwrap_or(created);
    let started: Timestamp = started_at.parse().ok()?;
    std::time::Duration::try_from(started.duration_since(requested)).ok()
}

/// The steps (and items) of `run` running, with the attempt each runs.
pub fn running_attempts(run: &Run) -> impl Iterator<Item = (&str, u32)> {
    run.status.iter().flat_map(|st| {
        st.steps
            .iter()
            .filter(|r| r.phase == crate::api::StepPhase::Running)
            .map(|r| (r.name.as_str(), r.attempt))
    })
}

/// [`is_due`], with `running` the Run's [`running_attempts`] read once for many effects.
pub fn is_due_among(
    run: &Run,
    effect: &Effect,
    running: &std::collections::HashSet<(&str, u32)>,
) -> bool {
    match &effect.action {
        Action::Cleanup(_) | Action::Notify { .. } => is_due(run, effect),
        _ => running.contains(&(effect.step.as_str(), effect.attempt)),
    }
}

/// Whether `effect` is still to be performed for `run`: its cleanup is pending, or its step's
/// record runs that very attempt.
pub fn is_due(run: &Run, effect: &Effect) -> bool {
    let Some(st) = run.status.as_ref() else {
        return false;
    };
    match &effect.action {
        Action::Cleanup(c) => st.cleanups.contains(c),
        Action::Notify { key, reminder, .. } => st.input_requests.get(key).is_some_and(|r| {
            if *reminder {
                r.reminded.is_none()
            } else {
                r.notified.is_none()
            }
        }),
        _ => st.steps.iter().any(|r| {
            r.name == effect.step
                && r.attempt == effect.attempt
                && r.phase == crate::api::StepPhase::Running
        }),
    }
}

/// Whether cancelling `run` must leave `effect` to finish rather than abort it: a cancel stops
/// the main steps, while `finally` steps and cleanups run on (aborted, an attempt would be sent
/// again by the next reconcile); and once the Run is cancelled, whatever starts is part of
/// its ending.
pub fn survives_cancel(run: &Run, effect: &Effect) -> bool {
    if run.spec.cancel.is_some() || matches!(effect.action, Action::Cleanup(_)) {
        return true;
    }
    run.status
        .as_ref()
        .is_some_and(|st| st.steps.iter().any(|r| r.name == effect.step && r.finally))
}

/// The template context of one step's record: [`context`], plus `item` and `index` for an
/// item of a `forEach` step.
pub fn context_for(run: &Run, status: &RunStatus, record: &str) -> Value {
    item_context(context(run, status), status, record)
}

/// `base` (a [`context`] of the Run) with `item` and `index` added when `record` is an item of
/// a `forEach` step: items are not part of the base, so one base serves every item.
pub fn item_context(mut ctx: Value, status: &RunStatus, record: &str) -> Value {
    if let Some((step, index)) = item_of(record) {
        let item = status
            .steps
            .iter()
            .find(|r| r.name == step)
            .and_then(|r| r.items.as_ref())
            .and_then(|items| items.get(index))
            .cloned()
            .unwrap_or(Value::Null);
        ctx["item"] = item;
        ctx["index"] = json!(index);
    }
    ctx
}

#[cfg(test)]
mod tests;
