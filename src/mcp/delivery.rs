//! A `tools/call` owns its Run from before its create until its answer has left: when the
//! answer that names a new Run (a `CreateTaskResult`, an `input_required` result, a held call's
//! result) cannot be delivered — the client went away while the call was served, even while
//! the create was under way (it may land all the same), before the connection took the
//! response — the Run is cancelled, so that a retry without an idempotency key does not leave a
//! task running that nobody holds. So is a Run whose create had no answer (a proxy's timeout,
//! a dropped connection) and may have landed all the same: the client is told its call
//! failed. With an idempotency key the Run stays: the retry finds it.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use axum::body::Body;
use bytes::Bytes;
use hyper::body::{Frame, SizeHint};

use super::handler::RunwayMcp;
use super::state::{McpState, Tenant};
use crate::api::reasons;

/// The Run a `tools/call` created, announced by the handler, watched by the gate.
#[derive(Clone, Default)]
pub(super) struct Delivery(Arc<Mutex<Option<(Tenant, String)>>>);

/// How long after a client left a Run it was creating may still land in the store: the API
/// server gives up on a request after a minute, the embedded store's writer commits what was
/// queued within seconds.
const LANDING: std::time::Duration = std::time::Duration::from_secs(90);

impl Delivery {
    /// This request creates (or created) Run `name` and nothing else will tell the client
    /// about it.
    pub(super) fn announce(&self, tenant: &Tenant, name: &str) {
        *self.0.lock().expect("delivery lock") = Some((tenant.clone(), name.to_owned()));
    }

    /// The Run announced was not created after all.
    pub(super) fn withdraw(&self) {
        self.take();
    }

    /// The create's answer was lost and the call fails: the announced Run, should it land all
    /// the same, is cancelled.
    pub(super) fn give_up(&self, state: &Arc<McpState>) {
        if let Some((tenant, name)) = self.take() {
            give_up(state, tenant, name);
        }
    }

    fn take(&self) -> Option<(Tenant, String)> {
        self.0.lock().expect("delivery lock").take()
    }
}

/// Cancels the announced Run when dropped before [`Guard::delivered`].
pub(super) struct Guard {
    delivery: Delivery,
    state: Arc<McpState>,
}

impl Guard {
    /// Watch `delivery` for the request being served.
    pub(super) fn new(delivery: Delivery, state: Arc<McpState>) -> Self {
        Self { delivery, state }
    }

    /// The answer left: keep the Run.
    fn delivered(&self) {
        self.delivery.take();
    }

    /// `body`, which marks the answer delivered once the connection has taken the frame that
    /// carries it: the first frame of a JSON answer; on an SSE stream (`sse`), the event that
    /// holds the JSON-RPC response, not the progress notifications before it.
    pub(super) fn watch(self, body: Body, sse: bool) -> Body {
        Body::new(Watched {
            inner: body,
            guard: Some(self),
            sse,
        })
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let Some((tenant, name)) = self.delivery.take() else {
            return;
        };
        // A server that shuts down drops its calls; their Runs carry on after the restart.
        if self.state.shutdown.is_cancelled() {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        tracing::warn!(namespace = %tenant.namespace, run = %name, "the answer naming this run was not delivered; cancelling it");
        rt.spawn(cancel_when_stored(self.state.clone(), tenant, name));
    }
}

/// Run `name`, whose create had no answer, is cancelled should it land all the same: the
/// request that made it fails, and its retry must not find two.
pub(super) fn give_up(state: &Arc<McpState>, tenant: Tenant, name: String) {
    tracing::warn!(namespace = %tenant.namespace, run = %name, "the create of this run had no answer; cancelling it if it landed");
    tokio::spawn(cancel_when_stored(state.clone(), tenant, name));
}

/// Cancel Run `name`, waiting up to [`LANDING`] for it to be stored: the client may have left
/// while its create was under way.
async fn cancel_when_stored(state: Arc<McpState>, tenant: Tenant, name: String) {
    use tokio::sync::broadcast::error::RecvError;
    let mut changes = state.events.subscribe(&tenant.namespace, &name);
    let until = tokio::time::Instant::now() + LANDING;
    // A change of the name says the Run is stored, even before a cache that follows another
    // watch has it; a read that fails is tried again at the next change.
    match state.store.get(&tenant.namespace, &name).await {
        Ok(Some(_)) => {}
        Ok(None) | Err(_) => loop {
            match tokio::time::timeout_at(until, changes.recv()).await {
                Ok(Ok(crate::store::Change::Updated(_))) => break,
                Ok(Ok(_) | Err(RecvError::Lagged(_))) => {}
                // After a gap the feed could not vouch for the name (the create had not landed,
                // or could not be read): subscribed again, and asked at the source.
                Ok(Err(RecvError::Closed)) => {
                    changes = state.events.subscribe(&tenant.namespace, &name);
                    if let Ok(Some(_)) = state.store.get_now(&tenant.namespace, &name).await {
                        break;
                    }
                }
                // Never created within the time a create may take to land.
                Err(_) => return,
            }
        },
    }
    let _ = RunwayMcp::new(state)
        .cancel(&tenant, &name, reasons::MCP_REQUEST_CANCELLED)
        .await;
}

/// A response body that reports when the frame carrying the answer has been handed to the
/// connection.
struct Watched {
    inner: Body,
    guard: Option<Guard>,
    sse: bool,
}

/// Whether an SSE frame carries the JSON-RPC response (a `result` or `error` member; a
/// notification has neither, and a key inside a string would be escaped).
fn is_response(data: &[u8]) -> bool {
    let has = |key: &[u8]| data.windows(key.len()).any(|w| w == key);
    has(b"\"result\":") || has(b"\"error\":")
}

impl hyper::body::Body for Watched {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        // A JSON answer is one frame; on SSE it is the event with the response. Once the
        // connection has taken it, it has left. (Clients
        // need not read a body to its end: one that parsed the answer may close at once. A held
        // call streaming progress is cancelled by its own handler when the client goes away.)
        let handed_over = match &polled {
            Poll::Ready(None) => true,
            Poll::Ready(Some(Ok(frame))) => {
                !self.sse || frame.data_ref().is_some_and(|d| is_response(d))
            }
            _ => false,
        };
        if handed_over && let Some(guard) = self.guard.take() {
            guard.delivered();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use futures::StreamExt;
    use http_body_util::BodyExt;

    use super::*;
    use crate::api::{Principal, Run, RunSpec, WorkflowRef};
    use crate::auth::Identity;
    use crate::store::{RunStore, WatchEvent};

    fn run(name: &str) -> Run {
        let mut r = Run::new(
            name,
            RunSpec {
                workflow_ref: WorkflowRef { name: "wf".into() },
                arguments: None,
                requested_by: None,
                cancel: None,
                pause: None,
                retry_of: None,
                priority: None,
                input_responses: BTreeMap::new(),
            },
        );
        r.metadata.namespace = Some("default".into());
        r
    }

    #[tokio::test]
    async fn an_answer_that_never_left_gives_up_its_run_and_one_handed_over_keeps_it() {
        let scratch = crate::mcp::state::Scratch::new();
        let (state, store) = (scratch.state.clone(), scratch.store.clone());
        let tenant = Tenant {
            namespace: "default".into(),
            identity: Arc::new(Identity {
                principal: Principal {
                    username: "alice".into(),
                    uid: None,
                    groups: vec![],
                },
                namespace: None,
                extra: BTreeMap::new(),
            }),
        };
        store.create(run("kept")).await.unwrap();
        store.create(run("lost")).await.unwrap();
        let mut changes = store.watch(Some(store.resource_version().await.unwrap()));

        let delivered = Delivery::default();
        delivered.announce(&tenant, "kept");
        let mut body = Guard::new(delivered, state.clone()).watch(Body::from("the task"), false);
        let first = body.frame().await.unwrap().unwrap();
        assert_eq!(first.into_data().unwrap(), "the task");
        drop(body);

        let lost = Delivery::default();
        lost.announce(&tenant, "lost");
        drop(Guard::new(lost, state.clone()).watch(Body::from("the task"), false));

        let Some(Ok(WatchEvent::Applied(changed))) = changes.next().await else {
            panic!("no change")
        };
        assert_eq!(changed.metadata.name.as_deref(), Some("lost"));
        let cancel = changed.spec.cancel.clone().unwrap();
        assert_eq!(
            cancel.reason.as_deref(),
            Some(reasons::MCP_REQUEST_CANCELLED)
        );
        assert_eq!(cancel.requested_by.as_deref(), Some("alice"));
        let kept = store.get("default", "kept").await.unwrap().unwrap();
        assert!(kept.spec.cancel.is_none());

        // On an SSE answer, the progress before the response does not count as delivery.
        let sse = |events: &[&'static str]| {
            let frames: Vec<Result<Bytes, std::io::Error>> =
                events.iter().map(|e| Ok(Bytes::from(*e))).collect();
            Body::from_stream(futures::stream::iter(frames))
        };
        let progress = "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progress\":1}}\n\n";
        let answer = "data: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"resultType\":\"input_required\"}}\n\n";
        store.create(run("streamed")).await.unwrap();
        store.create(run("cut-off")).await.unwrap();
        let mut changes = store.watch(Some(store.resource_version().await.unwrap()));
        let streamed = Delivery::default();
        streamed.announce(&tenant, "streamed");
        let mut body = Guard::new(streamed, state.clone()).watch(sse(&[progress, answer]), true);
        body.frame().await.unwrap().unwrap();
        body.frame().await.unwrap().unwrap();
        drop(body);
        let cut_off = Delivery::default();
        cut_off.announce(&tenant, "cut-off");
        let mut body = Guard::new(cut_off, state.clone()).watch(sse(&[progress, answer]), true);
        body.frame().await.unwrap().unwrap();
        drop(body);
        let Some(Ok(WatchEvent::Applied(changed))) = changes.next().await else {
            panic!("no change")
        };
        assert_eq!(changed.metadata.name.as_deref(), Some("cut-off"));
        assert!(changed.spec.cancel.is_some());
        let streamed = store.get("default", "streamed").await.unwrap().unwrap();
        assert!(streamed.spec.cancel.is_none());
    }
}
