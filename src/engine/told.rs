//! What telling approvers is made of: the message a webhook gets for an open question, when a
//! reminder is due, and what its delivery records on the question. Helpers of the step
//! machine and of recording outcomes.

use jiff::{SignedDuration, Timestamp};
use serde_json::json;

use super::effects::{Action, Body, Event, HttpRequest, Outcome};
use super::{duration, parse_ts, ts};
use crate::api::{NotifySpec, OpenInputRequest, Run, RunStatus, WorkflowSpec, event_reasons};

/// How long a webhook may take to answer.
pub(super) const NOTIFY_TIMEOUT: SignedDuration = SignedDuration::from_secs(10);

/// When the approvers of open question `req` are to be reminded: `remindBefore` before the
/// input timeout of its step (`wake`), once they were told and not reminded yet.
pub(super) fn reminder_at(
    notify: &NotifySpec,
    req: &OpenInputRequest,
    wake: Option<Timestamp>,
) -> Option<Timestamp> {
    if req.notified.is_none() || req.reminded.is_some() {
        return None;
    }
    let before = duration::parse(notify.remind_before.as_deref()?).ok()?;
    Some(wake? - before)
}

/// The webhook request that tells the approvers of `key` about it (`reminder`: again, before
/// its timeout at `due`). It names the Run, the Workflow, the requester, the approvers, the
/// question and a console link; never an answer or an argument.
pub(super) fn message(
    run: &Run,
    wf: &WorkflowSpec,
    notify: &NotifySpec,
    (key, req): (&str, &OpenInputRequest),
    reminder: bool,
    due: Option<Timestamp>,
    headers: Vec<super::HeaderValue>,
) -> Action {
    let namespace = run.metadata.namespace.as_deref().unwrap_or_default();
    let task = run.metadata.name.as_deref().unwrap_or_default();
    let workflow = &run.spec.workflow_ref.name;
    let requester = run
        .spec
        .requested_by
        .as_ref()
        .map_or("someone", |p| p.username.as_str());
    let asked = req.params["message"].as_str().unwrap_or_default();
    let approvers = wf
        .input_request(&req.step, &req.name)
        .and_then(|r| r.approvers.clone())
        .unwrap_or_default();
    let who: Vec<String> = approvers
        .users
        .iter()
        .cloned()
        .chain(approvers.groups.iter().map(|g| format!("group {g}")))
        .collect();
    let link = notify
        .console_url
        .as_ref()
        .map(|base| format!("{}#/ns/{namespace}/run/{task}", base.trim_end_matches('#')));
    let lead = if reminder { "Reminder" } else { "Question" };
    let mut text = format!("{lead}: {requester}'s run {task} ({workflow}) asks");
    if !who.is_empty() {
        text.push_str(&format!(" {}", who.join(", ")));
    }
    text.push_str(&format!(": {asked}"));
    if let Some(d) = due {
        text.push_str(&format!(" (answer by {d})"));
    }
    if let Some(l) = &link {
        text.push_str(&format!(" {l}"));
    }
    let body = json!({
        "text": text,
        "runway": {
            "kind": if reminder { "reminder" } else { "asked" },
            "namespace": namespace,
            "taskId": task,
            "workflow": workflow,
            "key": key,
            "message": asked,
            "requestedBy": requester,
            "approvers": {"users": approvers.users, "groups": approvers.groups},
            "answerBy": due.map(ts),
            "console": link,
        },
    });
    Action::Notify {
        key: key.to_owned(),
        reminder,
        request: HttpRequest {
            method: "POST".into(),
            url: notify.url.clone(),
            headers,
            body: Some(Body::Json(body)),
            success_codes: Vec::new(),
        },
    }
}

/// Record how telling the approvers of `key` went: when, or why not. Either way it is not
/// tried again (a webhook that is down must not hold the Run; the Event says it failed).
pub(super) fn record_notice(
    st: &mut RunStatus,
    key: &str,
    reminder: bool,
    outcome: Outcome,
    now: Timestamp,
) {
    let Some(req) = st.input_requests.get_mut(key) else {
        return;
    };
    let said = match outcome {
        Outcome::Succeeded(_) => ts(now),
        Outcome::Failed { message, .. } | Outcome::UpstreamFailed { message, .. } => {
            format!("failed: {message}")
        }
        Outcome::Fatal(e) => format!("failed: {}", e.message),
        _ => "failed: the webhook gave no answer Runway understands".into(),
    };
    if reminder {
        req.reminded = Some(said);
    } else {
        req.notified = Some(said);
    }
}

/// Whether a question's record says its message was delivered (`Some(false)`: it failed).
pub(super) fn delivered(said: Option<&str>) -> Option<bool> {
    said.map(|s| !s.starts_with("failed: "))
}

/// The input timeout of the step that asked `req`, if it has one.
pub(super) fn input_deadline(st: &RunStatus, req: &OpenInputRequest) -> Option<Timestamp> {
    st.steps
        .iter()
        .find(|r| r.name == req.step)
        .and_then(|r| parse_ts(r.wake_at.as_deref()))
}

/// The Events of questions whose approvers were just told or reminded, or could not be.
pub(super) fn events(before: Option<&RunStatus>, after: &RunStatus) -> Vec<Event> {
    let mut events = Vec::new();
    for (key, req) in &after.input_requests {
        let was = before.and_then(|b| b.input_requests.get(key));
        for (what, now, then) in [
            ("told", &req.notified, was.and_then(|w| w.notified.as_ref())),
            (
                "reminded",
                &req.reminded,
                was.and_then(|w| w.reminded.as_ref()),
            ),
        ] {
            let Some(said) = now.as_deref().filter(|_| then.is_none()) else {
                continue;
            };
            events.push(match delivered(Some(said)) {
                Some(true) => Event {
                    reason: event_reasons::APPROVERS_NOTIFIED,
                    message: format!("approvers of {key} {what}"),
                    warning: false,
                },
                _ => Event {
                    reason: event_reasons::NOTIFY_FAILED,
                    message: format!("approvers of {key} not {what}: {said}"),
                    warning: true,
                },
            });
        }
    }
    events
}
