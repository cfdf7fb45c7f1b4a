//! An OTLP/HTTP trace receiver for the trace tests: `POST /v1/traces` with a protobuf
//! `ExportTraceServiceRequest`, decoded with the official OpenTelemetry protobuf definitions
//! (`opentelemetry-proto`), every span kept with its resource, in order of arrival.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use prost::Message;
use tokio::sync::watch;

use super::harness::PATIENCE;

/// One received span, its ids in lowercase hex (the parent empty for a root span).
#[derive(Debug, Clone)]
pub struct Span {
    pub trace_id: String,
    pub span_id: String,
    pub parent_span_id: String,
    pub name: String,
    /// `SpanKind` of the protocol: 1 internal, 2 server, 3 client.
    pub kind: i32,
    pub attributes: BTreeMap<String, String>,
    /// Events: name and attributes.
    pub events: Vec<(String, BTreeMap<String, String>)>,
    /// Links: (trace id, span id).
    pub links: Vec<(String, String)>,
    /// `Status.code`: 0 unset, 1 ok, 2 error.
    pub status: i32,
    pub start_ns: u64,
    pub end_ns: u64,
    /// The resource's attributes (service name, instance, process id).
    pub resource: BTreeMap<String, String>,
}

impl Span {
    pub fn attr(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }
}

fn shown(v: &Option<AnyValue>) -> String {
    match v.as_ref().and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

fn map(kvs: &[KeyValue]) -> BTreeMap<String, String> {
    kvs.iter()
        .map(|kv| (kv.key.clone(), shown(&kv.value)))
        .collect()
}

/// The receiver; it stops when dropped.
pub struct Receiver {
    /// Its base URL, for `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub url: String,
    spans: Arc<Mutex<Vec<Span>>>,
    changes: watch::Receiver<u64>,
    task: tokio::task::JoinHandle<()>,
}

impl Receiver {
    pub async fn start() -> Self {
        let spans: Arc<Mutex<Vec<Span>>> = Arc::default();
        let (tx, changes) = watch::channel(0u64);
        let tx = Arc::new(tx);
        let kept = spans.clone();
        let app = axum::Router::new().route(
            "/v1/traces",
            axum::routing::post(move |body: axum::body::Bytes| {
                let (kept, tx) = (kept.clone(), tx.clone());
                async move {
                    let Ok(req) = ExportTraceServiceRequest::decode(body) else {
                        return (http::StatusCode::BAD_REQUEST, Vec::new());
                    };
                    let mut got = vec![];
                    for rs in req.resource_spans {
                        let resource = rs
                            .resource
                            .as_ref()
                            .map(|r| map(&r.attributes))
                            .unwrap_or_default();
                        for ss in rs.scope_spans {
                            for s in ss.spans {
                                got.push(Span {
                                    trace_id: data_encoding::HEXLOWER.encode(&s.trace_id),
                                    span_id: data_encoding::HEXLOWER.encode(&s.span_id),
                                    parent_span_id: data_encoding::HEXLOWER
                                        .encode(&s.parent_span_id),
                                    name: s.name.clone(),
                                    kind: s.kind,
                                    attributes: map(&s.attributes),
                                    events: s
                                        .events
                                        .iter()
                                        .map(|e| (e.name.clone(), map(&e.attributes)))
                                        .collect(),
                                    links: s
                                        .links
                                        .iter()
                                        .map(|l| {
                                            (
                                                data_encoding::HEXLOWER.encode(&l.trace_id),
                                                data_encoding::HEXLOWER.encode(&l.span_id),
                                            )
                                        })
                                        .collect(),
                                    status: s.status.as_ref().map(|st| st.code).unwrap_or(0),
                                    start_ns: s.start_time_unix_nano,
                                    end_ns: s.end_time_unix_nano,
                                    resource: resource.clone(),
                                });
                            }
                        }
                    }
                    kept.lock().unwrap().extend(got);
                    tx.send_modify(|n| *n += 1);
                    (
                        http::StatusCode::OK,
                        ExportTraceServiceResponse::default().encode_to_vec(),
                    )
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self {
            url: format!("http://{addr}"),
            spans,
            changes,
            task,
        }
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<Span> {
        self.spans.lock().unwrap().clone()
    }

    /// Wait, on each export, until `ok` holds for the spans received; they are returned.
    pub async fn wait_for(&self, what: &str, ok: impl Fn(&[Span]) -> bool) -> Vec<Span> {
        let mut changes = self.changes.clone();
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            let spans = self.spans();
            if ok(&spans) {
                return spans;
            }
            let next = tokio::time::timeout_at(deadline, changes.changed()).await;
            assert!(
                matches!(next, Ok(Ok(()))),
                "timed out waiting for {what}; received: {:#?}",
                self.spans()
                    .iter()
                    .map(|s| (&s.name, &s.trace_id, &s.span_id, &s.parent_span_id))
                    .collect::<Vec<_>>()
            );
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}
