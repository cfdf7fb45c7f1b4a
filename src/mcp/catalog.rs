//! How Workflows read in the console's Workflows page: each with its tool, its `Ready`
//! condition, the form that starts a Run of it, what a caller must be able to do to start it,
//! and its schedules with their next and last time and the Runs they started.

use jiff::Timestamp;
use serde_json::{Map, Value, json};

use super::calls::{has_sample_steps, tool_of};
use crate::api::{Run, ScheduleSpec, Workflow, conditions};
use crate::engine::marks::Marks;
use crate::engine::schedule;

/// Runs of a schedule listed with it, newest first (the history limits keep few anyway).
const RUNS_PER_SCHEDULE: usize = 10;

/// One Workflow as the Workflows page shows it. `runs` are the namespace's Runs of it, or
/// `None` when the caller may not list Runs: then neither schedules' Runs nor counts are told.
pub(super) fn workflow(
    wf: &Workflow,
    runs: Option<&[&Run]>,
    marks: &Marks,
    now: Timestamp,
) -> Value {
    let name = wf.metadata.name.as_deref().unwrap_or_default();
    let ready = wf.status.as_ref().and_then(|s| {
        s.conditions
            .iter()
            .find(|c| c.type_ == conditions::READY)
            .map(|c| json!({"status": c.status, "reason": c.reason, "message": c.message}))
    });
    let schedules: Vec<Value> = wf
        .spec
        .schedules
        .iter()
        .map(|s| schedule_entry(name, s, runs, marks, now))
        .collect();
    let counts = runs.map(|rs| {
        let active = rs.iter().filter(|r| !r.phase().is_terminal()).count();
        let last = rs.iter().max_by_key(|r| super::cursor::place(r));
        json!({
            "total": rs.len(),
            "active": active,
            "last": last.map(|r| json!({"taskId": r.metadata.name, "phase": r.phase().as_str()})),
        })
    });
    json!({
        "name": name,
        "tool": wf.tool_name(),
        "title": wf.spec.tool.title,
        "description": wf.spec.tool.description,
        "mode": wf.spec.execution.mode,
        "ready": ready,
        "paused": wf.spec.suspend,
        "validated": wf.is_validated(),
        "startForm": start_form(wf),
        "requires": requires(wf),
        "steps": wf.spec.steps.len() + wf.spec.finally.len(),
        "schedules": schedules,
        "runs": counts,
    })
}

/// The form that starts a Run: the tool's `inputSchema` with the properties of the Workflow's
/// argument questions (`elicit`) beside its own, so that a person fills in everything at once
/// and no question is left to ask before the Run exists.
pub(super) fn start_form(wf: &Workflow) -> Value {
    let mut schema = Value::Object((*tool_of(wf).input_schema).clone());
    for q in &wf.spec.elicit {
        let props = q
            .requested_schema
            .get("properties")
            .and_then(Value::as_object);
        let required = q.requested_schema.get("required").and_then(Value::as_array);
        let own = schema
            .as_object_mut()
            .expect("an input schema is an object");
        let all = own
            .entry("properties")
            .or_insert_with(|| Value::Object(Map::new()));
        if let (Some(all), Some(props)) = (all.as_object_mut(), props) {
            for (k, v) in props {
                all.entry(k.clone()).or_insert_with(|| v.clone());
            }
        }
        if let Some(required) = required {
            let list = own.entry("required").or_insert_with(|| json!([]));
            if let Some(list) = list.as_array_mut() {
                list.extend(
                    required
                        .iter()
                        .filter(|r| !list.contains(r))
                        .cloned()
                        .collect::<Vec<_>>(),
                );
            }
        }
    }
    schema
}

/// What a caller must declare, besides the Tasks extension, to start the Workflow: the
/// capabilities its manifest requires and sampling for `sample` steps (only the caller's own
/// model answers those).
fn requires(wf: &Workflow) -> Vec<String> {
    let mut out: Vec<String> = wf
        .spec
        .execution
        .required_client_capabilities
        .as_ref()
        .and_then(Value::as_object)
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    if has_sample_steps(wf) && !out.iter().any(|c| c == "sampling") {
        out.push("sampling".into());
    }
    out
}

/// One schedule: its spec, the next time it is due (none while suspended), and, for a caller
/// who may list Runs, the last time it started a Run and the Runs it started (by their seal:
/// a Run merely labelled with the schedule is not one of them).
fn schedule_entry(
    workflow: &str,
    spec: &ScheduleSpec,
    runs: Option<&[&Run]>,
    marks: &Marks,
    now: Timestamp,
) -> Value {
    let (next, error) = match schedule::timetable(spec) {
        Ok(tt) if !spec.suspend => (tt.next_after(now), None),
        Ok(_) => (None, None),
        Err(e) => (None, Some(e.to_string())),
    };
    let mut entry = json!({
        "name": spec.name,
        "cron": spec.cron,
        "timeZone": spec.time_zone,
        "suspend": spec.suspend,
        "concurrencyPolicy": spec.concurrency_policy,
        "arguments": spec.arguments,
        "nextAt": next.map(|t| t.to_string()),
        "error": error,
    });
    if let Some(runs) = runs {
        let mut mine: Vec<(&Run, Timestamp)> = runs
            .iter()
            .filter(|r| schedule::started_by(marks, r, workflow, &spec.name))
            .filter_map(|r| Some((*r, schedule::scheduled_for(r)?)))
            .collect();
        mine.sort_by_key(|(_, t)| std::cmp::Reverse(*t));
        entry["lastAt"] = json!(mine.first().map(|(_, t)| t.to_string()));
        entry["active"] = json!(
            mine.iter()
                .filter(|(r, _)| !r.phase().is_terminal())
                .count()
        );
        entry["runs"] = mine
            .iter()
            .take(RUNS_PER_SCHEDULE)
            .map(|(r, t)| {
                json!({"taskId": r.metadata.name, "phase": r.phase().as_str(), "scheduledFor": t.to_string()})
            })
            .collect();
    }
    entry
}
