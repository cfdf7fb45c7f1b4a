//! The spans a finished Run leaves behind, built from the Run alone: its own span, with the
//! Run's history as events, and a span for each step that ran no effect of its own (input,
//! delay), which no step attempt span covers. Emitting them is the caller's business.

use std::time::SystemTime;

use opentelemetry::trace::{Event, SpanContext, SpanId, SpanKind, Status};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanLinks};
use sha2::{Digest, Sha256};

use crate::api::{Run, RunPhase, RunStatus, StepPhase, StepRecord};

/// An RFC 3339 time as the exporter wants it.
fn time(s: Option<&str>) -> Option<SystemTime> {
    let t: jiff::Timestamp = s?.parse().ok()?;
    Some(SystemTime::from(t))
}

/// One finished span, of the kind every span here is.
struct Span {
    context: SpanContext,
    parent: SpanId,
    name: String,
    start: SystemTime,
    end: SystemTime,
    attributes: Vec<KeyValue>,
    events: Vec<Event>,
    status: Status,
}

impl Span {
    fn data(self, scope: &InstrumentationScope) -> SpanData {
        let mut events = SpanEvents::default();
        events.events = self.events;
        SpanData {
            span_context: self.context,
            parent_span_id: self.parent,
            parent_span_is_remote: true,
            span_kind: SpanKind::Internal,
            name: self.name.into(),
            start_time: self.start,
            end_time: self.end,
            attributes: self.attributes,
            dropped_attributes_count: 0,
            events,
            links: SpanLinks::default(),
            status: self.status,
            instrumentation_scope: scope.clone(),
        }
    }
}

/// The spans `run` leaves now that it has finished, under `own` (the Run's span context) and
/// `parent` (the caller's or the parent Run's); none before it has a status.
pub(super) fn spans(
    run: &Run,
    own: &SpanContext,
    parent: Option<&SpanContext>,
    scope: &InstrumentationScope,
) -> Vec<SpanData> {
    let Some(st) = run.status.as_ref() else {
        return vec![];
    };
    let created = run
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|c| SystemTime::from(c.0))
        .unwrap_or_else(SystemTime::now);
    let ended = time(st.finished_at.as_deref()).unwrap_or_else(SystemTime::now);
    let (attributes, status) = run_attributes(run, st);
    let mut out = vec![
        Span {
            context: own.clone(),
            parent: parent.map(|p| p.span_id()).unwrap_or(SpanId::INVALID),
            name: format!("run {}", run.spec.workflow_ref.name),
            start: created,
            end: ended,
            attributes,
            events: run_events(run, st, created, ended),
            status,
        }
        .data(scope),
    ];
    out.extend(
        st.steps
            .iter()
            .filter_map(|step| step_span(run, step, own))
            .map(|s| s.data(scope)),
    );
    out
}

/// What happened to the Run, in order: created, started, each answer, a cancel, the end.
fn run_events(run: &Run, st: &RunStatus, created: SystemTime, ended: SystemTime) -> Vec<Event> {
    let mut events = vec![Event::new("created", created, vec![], 0)];
    if let Some(at) = time(st.started_at.as_deref()) {
        events.push(Event::new("started", at, vec![], 0));
    }
    for (key, answer) in &run.spec.input_responses {
        if let Some(at) = time(answer.answered_at.as_deref()) {
            let attributes = vec![
                KeyValue::new("runway.input.key", key.clone()),
                KeyValue::new(
                    "runway.input.action",
                    format!("{:?}", answer.action).to_lowercase(),
                ),
                KeyValue::new(
                    "runway.input.answered_by",
                    answer.answered_by.clone().unwrap_or_default(),
                ),
            ];
            events.push(Event::new("input answered", at, attributes, 0));
        }
    }
    if let Some(cancel) = &run.spec.cancel {
        let at = time(cancel.requested_at.as_deref()).unwrap_or(ended);
        let by = cancel.requested_by.clone().unwrap_or_default();
        let attributes = vec![KeyValue::new("runway.cancel.requested_by", by)];
        events.push(Event::new("cancel requested", at, attributes, 0));
    }
    let phase = vec![KeyValue::new("runway.run.phase", st.phase.as_str())];
    events.push(Event::new("finished", ended, phase, 0));
    events.sort_by_key(|e| e.timestamp);
    events
}

/// The Run span's attributes and status: which Run, whose, and how it ended.
fn run_attributes(run: &Run, st: &RunStatus) -> (Vec<KeyValue>, Status) {
    let mut attributes = vec![
        KeyValue::new(
            "runway.run.name",
            run.metadata.name.clone().unwrap_or_default(),
        ),
        KeyValue::new("runway.workflow", run.spec.workflow_ref.name.clone()),
        KeyValue::new(
            "k8s.namespace.name",
            run.metadata.namespace.clone().unwrap_or_default(),
        ),
        KeyValue::new("runway.run.phase", st.phase.as_str()),
    ];
    if let Some(p) = &run.spec.requested_by {
        attributes.push(KeyValue::new("runway.run.requested_by", p.username.clone()));
    }
    let status = match (&st.phase, &st.error) {
        (_, Some(e)) => {
            attributes.push(KeyValue::new(
                "rpc.response.status_code",
                e.code.to_string(),
            ));
            Status::error(e.message.clone())
        }
        (RunPhase::Failed, None) => Status::error(st.status_message.clone().unwrap_or_default()),
        _ => Status::Unset,
    };
    (attributes, status)
}

/// The span of a step that waited (a timer or a question) rather than ran an effect, with
/// who answered; `None` for any other step, or one that has not both started and ended.
fn step_span(run: &Run, step: &StepRecord, own: &SpanContext) -> Option<Span> {
    if step.wake_at.is_none() && step.input_keys.is_empty() {
        return None;
    }
    let start = time(step.started_at.as_deref())?;
    let end = time(step.finished_at.as_deref())?;
    // Derived from the Run's span and the step's name, so every replica names it alike.
    let mut id = [0u8; 8];
    id.copy_from_slice(
        &Sha256::digest(format!("{}\0{}", own.span_id(), step.name).as_bytes())[..8],
    );
    id[0] |= 1;
    let context = SpanContext::new(
        own.trace_id(),
        SpanId::from_bytes(id),
        own.trace_flags(),
        false,
        own.trace_state().clone(),
    );
    let mut attributes = vec![
        KeyValue::new("runway.step.name", step.name.clone()),
        KeyValue::new("runway.step.phase", format!("{:?}", step.phase)),
    ];
    let mut events = vec![];
    for key in step.input_keys.values() {
        let Some(answer) = run.spec.input_responses.get(key) else {
            continue;
        };
        let by = answer.answered_by.clone().unwrap_or_default();
        attributes.push(KeyValue::new(
            format!("runway.input.{key}.answered_by"),
            by.clone(),
        ));
        if let Some(at) = time(answer.answered_at.as_deref()) {
            let attributes = vec![
                KeyValue::new("runway.input.key", key.clone()),
                KeyValue::new("runway.input.answered_by", by),
            ];
            events.push(Event::new("input answered", at, attributes, 0));
        }
    }
    let status = match step.phase {
        StepPhase::Failed => Status::error(step.message.clone().unwrap_or_default()),
        _ => Status::Unset,
    };
    Some(Span {
        context,
        parent: own.span_id(),
        name: format!("step {}", step.name),
        start,
        end,
        attributes,
        events,
        status,
    })
}
