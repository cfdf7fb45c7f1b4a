//! Engine events as Kubernetes Events on the Run, and the Event log the MCP endpoint reads
//! them back from.

use k8s_openapi::api::core::v1::Event as CoreEvent;
use kube::api::ListParams;
use kube::runtime::events::{Event as KubeEvent, EventType, Recorder, Reporter};
use kube::{Api, Client, Resource};

use crate::api::Run;
use crate::controller::{self, EventSink};
use crate::engine::Event;
use crate::store::events::{EventLog, EventLogError, RecordedEvent};
use crate::store::kube::CONTROLLER_MANAGER;

/// Kubernetes Events for engine transitions, through kube's `Recorder`.
pub(crate) struct KubeEvents {
    recorder: Recorder,
}

impl KubeEvents {
    /// Events reported as `runway-controller` by `instance`.
    pub fn new(client: Client, instance: String) -> Self {
        let reporter = Reporter {
            controller: CONTROLLER_MANAGER.into(),
            instance: Some(instance),
        };
        Self {
            recorder: Recorder::new(client, reporter),
        }
    }
}

impl EventSink for KubeEvents {
    fn record(&self, run: &Run, event: &Event) {
        controller::LogEvents.record(run, event);
        let recorder = self.recorder.clone();
        let reference = run.object_ref(&());
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
        tokio::spawn(async move {
            if let Err(e) = recorder.publish(&ev, &reference).await {
                tracing::warn!(error = %e, "cannot record event");
            }
        });
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
        events.sort_by(|a, b| a.time.cmp(&b.time));
        Ok(events)
    }
}
