//! The embedded server's Events: logged, and the latest of each Run kept in memory so that a
//! person looking at the Run can read them back.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use jiff::Timestamp;

use super::{EventSink, LogEvents};
use crate::api::{ObjectKey, Run};
use crate::engine::Event;
use crate::store::events::{EventLog, EventLogError, RecordedEvent};

/// Events kept per Run by [`MemoryEvents`] (the newest win).
pub const EVENTS_PER_RUN: usize = 50;
/// Runs whose Events [`MemoryEvents`] keeps (the Runs with the oldest first Event go first).
pub const RUNS_WITH_EVENTS: usize = 10_000;

/// Events in memory, bounded, and in the log: the embedded server's sink and log. Like
/// Kubernetes Events they are a convenience that may be lost (here, on restart); the Run's
/// status is the record.
#[derive(Default)]
pub struct MemoryEvents {
    inner: Mutex<Kept>,
}

#[derive(Default)]
struct Kept {
    /// By Run: its uid and its Events (a Run made again under a name starts afresh).
    by_run: HashMap<Arc<ObjectKey>, Held>,
    /// Runs in the order of their first Event, for eviction.
    order: VecDeque<Arc<ObjectKey>>,
}

/// One Run's Events as kept: up to ten thousand Runs' worth stay in memory, so an Event is
/// kept in its smallest form and made a [`RecordedEvent`] only when read.
#[derive(Default)]
struct Held {
    uid: Box<str>,
    events: VecDeque<HeldEvent>,
}

struct HeldEvent {
    time: Timestamp,
    warning: bool,
    reason: &'static str,
    message: Box<str>,
}

impl From<&HeldEvent> for RecordedEvent {
    fn from(e: &HeldEvent) -> Self {
        RecordedEvent {
            time: Some(e.time.to_string()),
            type_: if e.warning { "Warning" } else { "Normal" }.into(),
            reason: e.reason.into(),
            message: e.message.to_string(),
        }
    }
}

impl EventSink for MemoryEvents {
    fn record(&self, run: &Run, event: &Event) {
        LogEvents.record(run, event);
        let Some(key) = ObjectKey::of(&run.metadata) else {
            return;
        };
        let held = HeldEvent {
            time: Timestamp::now(),
            warning: event.warning,
            reason: event.reason,
            message: event.message.as_str().into(),
        };
        let mut kept = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let key = match kept.by_run.get_key_value(&key) {
            Some((k, _)) => Arc::clone(k),
            None => {
                if kept.order.len() >= RUNS_WITH_EVENTS
                    && let Some(oldest) = kept.order.pop_front()
                {
                    kept.by_run.remove(&oldest);
                }
                let key = Arc::new(key);
                kept.order.push_back(Arc::clone(&key));
                key
            }
        };
        let uid = run.metadata.uid.as_deref().unwrap_or_default();
        let of = kept.by_run.entry(key).or_default();
        if *of.uid != *uid {
            of.uid = uid.into();
            of.events.clear();
        }
        if of.events.len() >= EVENTS_PER_RUN {
            of.events.pop_front();
        }
        of.events.push_back(held);
    }
}

#[async_trait]
impl EventLog for MemoryEvents {
    async fn recent(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
    ) -> Result<Vec<RecordedEvent>, EventLogError> {
        let key = ObjectKey::new(namespace, name);
        let kept = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        Ok(kept
            .by_run
            .get(&key)
            .filter(|held| &*held.uid == uid)
            .map(|held| held.events.iter().map(RecordedEvent::from).collect())
            .unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(name: &str) -> Run {
        let mut r = Run::new(
            name,
            crate::api::RunSpec {
                workflow_ref: crate::api::WorkflowRef { name: "w".into() },
                arguments: None,
                requested_by: None,
                cancel: None,
                pause: None,
                retry_of: None,
                priority: None,
                input_responses: Default::default(),
            },
        );
        r.metadata.namespace = Some("ns".into());
        r
    }

    fn event(message: &str) -> Event {
        Event {
            reason: crate::api::event_reasons::STEP_STARTED,
            message: message.into(),
            warning: false,
        }
    }

    #[tokio::test]
    async fn keeps_the_newest_events_of_each_run_in_order() {
        let log = MemoryEvents::default();
        for i in 0..EVENTS_PER_RUN + 2 {
            log.record(&run("a"), &event(&format!("a{i}")));
        }
        log.record(&run("b"), &event("b0"));
        let a = log.recent("ns", "a", "").await.unwrap();
        assert_eq!(a.len(), EVENTS_PER_RUN);
        assert_eq!(a[0].message, "a2");
        assert_eq!(
            a.last().unwrap().message,
            format!("a{}", EVENTS_PER_RUN + 1)
        );
        assert_eq!(
            log.recent("ns", "b", "").await.unwrap()[0].reason,
            "StepStarted"
        );
        assert!(log.recent("other", "a", "").await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_run_made_again_under_a_name_does_not_show_the_first_ones_events() {
        let log = MemoryEvents::default();
        let mut first = run("a");
        first.metadata.uid = Some("uid-1".into());
        log.record(&first, &event("of the first"));
        let mut second = run("a");
        second.metadata.uid = Some("uid-2".into());
        assert!(log.recent("ns", "a", "uid-2").await.unwrap().is_empty());
        log.record(&second, &event("of the second"));
        let shown = log.recent("ns", "a", "uid-2").await.unwrap();
        assert_eq!(shown.len(), 1);
        assert_eq!(shown[0].message, "of the second");
        assert!(log.recent("ns", "a", "uid-1").await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn forgets_the_runs_recorded_first_past_the_bound() {
        let log = MemoryEvents::default();
        for i in 0..=RUNS_WITH_EVENTS {
            log.record(&run(&format!("r{i}")), &event("x"));
        }
        assert!(log.recent("ns", "r0", "").await.unwrap().is_empty());
        assert_eq!(log.recent("ns", "r1", "").await.unwrap().len(), 1);
        assert_eq!(
            log.recent("ns", &format!("r{RUNS_WITH_EVENTS}"), "")
                .await
                .unwrap()
                .len(),
            1
        );
    }
}
