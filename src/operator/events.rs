//! Engine events as Kubernetes Events on the Run, written by a bounded queue so that they never
//! compete with the Runs for the API server, and the Event log the MCP endpoint reads them back
//! from.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Event as CoreEvent, ObjectReference};
use kube::api::ListParams;
use kube::runtime::events::{Event as KubeEvent, EventType, Recorder, Reporter};
use kube::{Api, Client, Resource};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use crate::api::{Run, event_reasons};
use crate::controller::{self, EventSink};
use crate::engine::Event;
use crate::store::events::{EventLog, EventLogError, RecordedEvent};
use crate::store::kube::CONTROLLER_MANAGER;
use crate::telemetry::Metrics;

/// Events waiting to be written at most; past it new ones are dropped and counted, as
/// Kubernetes' own controllers do (client-go keeps 1,000): Events are best effort, the Run's
/// status is the record.
pub(crate) const EVENT_QUEUE: usize = 1024;
/// Events written at once. Every Event is an API write, and a Run's transitions come a few at
/// a time: written as they came (a task each), they took most of a saturated API server from
/// the Runs' own creates and status writes.
pub(crate) const EVENT_WRITERS: usize = 4;

/// Items written by `write` at most `writers` at a time, from a queue of at most `capacity`;
/// an item that finds the queue full is dropped. Dropping the queue ends it once what it
/// holds has been written.
pub(crate) struct WriteQueue<T> {
    tx: mpsc::Sender<T>,
    dropped: AtomicU64,
}

impl<T: Send + 'static> WriteQueue<T> {
    /// A queue whose items `write` writes, on a task of its own.
    pub(crate) fn start<F, Fut>(capacity: usize, writers: usize, write: F) -> Self
    where
        F: Fn(T) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let (tx, rx) = mpsc::channel(capacity);
        tokio::spawn(ReceiverStream::new(rx).for_each_concurrent(writers, write));
        Self {
            tx,
            dropped: AtomicU64::new(0),
        }
    }

    /// Queue `item`; `Err` with how many items this queue has dropped, this one included, when
    /// it is full.
    pub(crate) fn push(&self, item: T) -> Result<(), u64> {
        match self.tx.try_send(item) {
            Ok(()) => Ok(()),
            Err(_) => Err(self.dropped.fetch_add(1, Ordering::Relaxed) + 1),
        }
    }
}

/// Reasons of a step's routine progress, which `status.steps` holds in full: the Events a
/// busy cluster can do without (`--no-step-events`). A step's failure is a warning and
/// always written.
const STEP_PROGRESS: [&str; 5] = [
    event_reasons::STEP_STARTED,
    event_reasons::STEP_SUCCEEDED,
    event_reasons::STEP_SKIPPED,
    event_reasons::STEP_STOPPED,
    event_reasons::STEPS_REUSED,
];

/// Whether `event` is written as a Kubernetes Event when step progress is (`steps`) or is not.
fn written(event: &Event, steps: bool) -> bool {
    steps || event.warning || !STEP_PROGRESS.contains(&event.reason)
}

/// Kubernetes Events for engine transitions, through kube's `Recorder`, from a [`WriteQueue`].
pub(crate) struct KubeEvents {
    queue: WriteQueue<(KubeEvent, ObjectReference)>,
    /// Whether a step's routine progress is written too.
    steps: bool,
    metrics: Metrics,
}

impl KubeEvents {
    /// Events reported as `runway-controller` by `instance`, a step's routine progress only
    /// when `steps`; the ones dropped are counted in `metrics`.
    pub fn new(client: Client, instance: String, steps: bool, metrics: Metrics) -> Self {
        let reporter = Reporter {
            controller: CONTROLLER_MANAGER.into(),
            instance: Some(instance),
        };
        let recorder = Arc::new(Recorder::new(client, reporter));
        let written = metrics.clone();
        let queue = WriteQueue::start(EVENT_QUEUE, EVENT_WRITERS, move |(ev, reference)| {
            let (recorder, written) = (recorder.clone(), written.clone());
            async move {
                if let Err(e) = recorder.publish(&ev, &reference).await {
                    tracing::warn!(error = %e, "cannot record event");
                }
                written.event_left_queue();
            }
        });
        Self {
            queue,
            steps,
            metrics,
        }
    }
}

impl EventSink for KubeEvents {
    fn record(&self, run: &Run, event: &Event) {
        controller::LogEvents.record(run, event);
        if !written(event, self.steps) {
            return;
        }
        let ev = KubeEvent {
            type_: if event.warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: event.reason.into(),
            note: Some(event.message.chars().take(1000).collect()),
            action: event.reason.into(),
            secondary: None,
        };
        // Counted before the push: a writer may take the Event before `push` returns.
        self.metrics.event_queued();
        if let Err(dropped) = self.queue.push((ev, run.object_ref(&()))) {
            self.metrics.event_left_queue();
            self.metrics.event_dropped();
            // Once, then every thousandth: a saturated API server must not also flood the log.
            if dropped == 1 || dropped % 1000 == 0 {
                tracing::warn!(
                    dropped,
                    queue = EVENT_QUEUE,
                    "the API server falls behind: Kubernetes Events are dropped (the Runs' status is complete)"
                );
            }
        }
    }
}

/// A Run's Events read back from the API server (core `v1` Events, which also hold those
/// written through `events.k8s.io`), for the console and the MCP Apps view.
pub(crate) struct KubeEventLog {
    /// Client of the API server.
    pub(crate) client: Client,
}

#[async_trait::async_trait]
impl EventLog for KubeEventLog {
    async fn recent(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
    ) -> Result<Vec<RecordedEvent>, EventLogError> {
        let api: Api<CoreEvent> = Api::namespaced(self.client.clone(), namespace);
        let params = ListParams::default().fields(&format!(
            "involvedObject.kind=Run,involvedObject.name={name},involvedObject.uid={uid}"
        ));
        let list = api
            .list(&params)
            .await
            .map_err(|e| EventLogError(e.to_string()))?;
        let mut events: Vec<RecordedEvent> = list
            .items
            .into_iter()
            .map(|e| RecordedEvent {
                time: e
                    .series
                    .as_ref()
                    .and_then(|s| s.last_observed_time.as_ref().map(|t| t.0.to_string()))
                    .or_else(|| e.last_timestamp.as_ref().map(|t| t.0.to_string()))
                    .or_else(|| e.event_time.as_ref().map(|t| t.0.to_string()))
                    .or_else(|| e.first_timestamp.as_ref().map(|t| t.0.to_string())),
                type_: e.type_.unwrap_or_else(|| "Normal".into()),
                reason: e.reason.unwrap_or_default(),
                message: e.message.unwrap_or_default(),
            })
            .collect();
        oldest_first(&mut events);
        Ok(events)
    }
}

/// Sort `events` by their instant, not their text: times are written with as few fractional
/// digits as they need, so `…:05.12Z` would sort after `…:05.123Z`.
fn oldest_first(events: &mut [RecordedEvent]) {
    events.sort_by_key(|e| {
        e.time
            .as_deref()
            .and_then(|t| t.parse::<jiff::Timestamp>().ok())
    });
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    #[test]
    fn events_are_ordered_by_their_instant_not_their_text() {
        let at = |t: &str| RecordedEvent {
            time: Some(t.to_owned()),
            type_: "Normal".into(),
            reason: t.to_owned(),
            message: String::new(),
        };
        let mut events = vec![
            at("2026-12-07T10:00:05.12Z"),
            at("2026-12-07T10:00:05.123Z"),
            at("2026-12-07T10:00:05Z"),
        ];
        oldest_first(&mut events);
        let order: Vec<_> = events.iter().map(|e| e.reason.as_str()).collect();
        assert_eq!(
            order,
            [
                "2026-12-07T10:00:05Z",
                "2026-12-07T10:00:05.12Z",
                "2026-12-07T10:00:05.123Z"
            ]
        );
    }

    #[tokio::test]
    async fn every_item_is_written_when_the_writers_keep_up() {
        let written = Arc::new(Mutex::new(Vec::new()));
        let (w, (done_tx, mut done_rx)) = (written.clone(), mpsc::unbounded_channel());
        let queue = WriteQueue::start(8, 2, move |i: u32| {
            let (w, done) = (w.clone(), done_tx.clone());
            async move {
                w.lock().unwrap().push(i);
                let _ = done.send(());
            }
        });
        for i in 0..100 {
            while queue.push(i).is_err() {
                tokio::task::yield_now().await;
            }
        }
        for _ in 0..100 {
            done_rx.recv().await.unwrap();
        }
        let mut got = written.lock().unwrap().clone();
        got.sort_unstable();
        assert_eq!(got, (0..100).collect::<Vec<_>>());
    }

    #[tokio::test]
    async fn a_full_queue_drops_and_counts_and_never_writes_more_than_its_writers_at_once() {
        let gate = Arc::new(tokio::sync::Semaphore::new(0));
        let (busy, most) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let (started_tx, mut started) = mpsc::unbounded_channel();
        let (g, b, m) = (gate.clone(), busy.clone(), most.clone());
        let queue = WriteQueue::start(4, 2, move |_: u32| {
            let (g, b, m, started) = (g.clone(), b.clone(), m.clone(), started_tx.clone());
            async move {
                let now = b.fetch_add(1, Ordering::SeqCst) + 1;
                m.fetch_max(now, Ordering::SeqCst);
                let _ = started.send(());
                g.acquire().await.unwrap().forget();
                b.fetch_sub(1, Ordering::SeqCst);
            }
        });
        // Two in the writers' hands (both seen started), four waiting; the rest is dropped.
        queue.push(0).unwrap();
        queue.push(1).unwrap();
        started.recv().await.unwrap();
        started.recv().await.unwrap();
        for i in 2..6 {
            queue.push(i).unwrap();
        }
        assert_eq!(queue.push(6), Err(1));
        assert_eq!(queue.push(7), Err(2));
        // Let everything through: the six accepted are written, two at a time at most.
        gate.add_permits(6);
        for _ in 2..6 {
            started.recv().await.unwrap();
        }
        assert_eq!(most.load(Ordering::SeqCst), 2);
        // Ended: the writers finish, and no dropped item was ever started.
        drop(queue);
        assert!(started.recv().await.is_none(), "a dropped item was written");
    }

    #[tokio::test]
    async fn a_dropped_queue_still_writes_what_it_holds() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let queue = WriteQueue::start(16, 1, move |i: u32| {
            let tx = tx.clone();
            async move {
                let _ = tx.send(i);
            }
        });
        for i in 0..10 {
            queue.push(i).unwrap();
        }
        drop(queue);
        let mut got = Vec::new();
        while let Some(i) = rx.recv().await {
            got.push(i);
        }
        assert_eq!(got, (0..10).collect::<Vec<_>>());
    }

    #[test]
    fn without_step_events_only_a_steps_routine_progress_is_left_out() {
        let ev = |reason: &'static str, warning: bool| Event {
            reason,
            message: String::new(),
            warning,
        };
        for reason in STEP_PROGRESS {
            assert!(
                written(&ev(reason, false), true),
                "{reason} with step events"
            );
            assert!(!written(&ev(reason, false), false), "{reason} without");
            assert!(written(&ev(reason, true), false), "{reason} as a warning");
        }
        for reason in [
            event_reasons::STEP_FAILED,
            event_reasons::FINISHED,
            event_reasons::INPUT_REQUESTED,
            event_reasons::PAUSED,
            event_reasons::SCHEDULED,
        ] {
            let warning = reason == event_reasons::STEP_FAILED;
            assert!(written(&ev(reason, warning), false), "{reason} without");
        }
    }
}
