//! A local HTTP endpoint that webhook steps post to: it answers `{"ok": true}` and counts the
//! deliveries per `Idempotency-Key`, the `Authorization`, `traceparent` and `Content-Type`
//! headers it saw and the bodies.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde_json::json;

/// One request as sent: its `Content-Type` headers (all of them) and its body as text.
pub type Raw = (Vec<String>, String);

pub struct Sink {
    /// `http://127.0.0.1:<port>/hook`.
    pub url: String,
    /// Deliveries per `Idempotency-Key` (`<none>` for requests without one).
    pub by_key: Arc<Mutex<BTreeMap<String, usize>>>,
    /// Every `Authorization` header received, in order.
    pub authorization: Arc<Mutex<Vec<String>>>,
    /// Every `traceparent` header received, in order.
    pub traceparent: Arc<Mutex<Vec<String>>>,
    /// Every JSON body received, in order (`null` for others).
    pub bodies: Arc<Mutex<Vec<serde_json::Value>>>,
    /// Every request's `Content-Type` headers (all of them) and its body as text, in order.
    pub raw: Arc<Mutex<Vec<Raw>>>,
    /// Told of every delivery.
    pub arrived: Arc<tokio::sync::Notify>,
}

impl Sink {
    pub async fn start() -> Self {
        let by_key: Arc<Mutex<BTreeMap<String, usize>>> = Arc::default();
        let authorization: Arc<Mutex<Vec<String>>> = Arc::default();
        let traceparent: Arc<Mutex<Vec<String>>> = Arc::default();
        let bodies: Arc<Mutex<Vec<serde_json::Value>>> = Arc::default();
        let raw: Arc<Mutex<Vec<Raw>>> = Arc::default();
        let arrived: Arc<tokio::sync::Notify> = Arc::default();
        let (k, a, t) = (by_key.clone(), authorization.clone(), traceparent.clone());
        let (b, r, n) = (bodies.clone(), raw.clone(), arrived.clone());
        let app = axum::Router::new().route(
            "/hook",
            axum::routing::post(move |headers: http::HeaderMap, body: String| {
                let (k, a, t) = (k.clone(), a.clone(), t.clone());
                let (b, r, n) = (b.clone(), r.clone(), n.clone());
                async move {
                    let header = |name: &str, default: &str| {
                        headers
                            .get(name)
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or(default)
                            .to_owned()
                    };
                    *k.lock()
                        .unwrap()
                        .entry(header("idempotency-key", "<none>"))
                        .or_default() += 1;
                    a.lock().unwrap().push(header("authorization", ""));
                    if headers.contains_key("traceparent") {
                        t.lock().unwrap().push(header("traceparent", ""));
                    }
                    let types = headers
                        .get_all("content-type")
                        .iter()
                        .filter_map(|v| v.to_str().ok().map(str::to_owned))
                        .collect();
                    r.lock().unwrap().push((types, body.clone()));
                    let parsed = serde_json::from_str(&body).unwrap_or(serde_json::Value::Null);
                    b.lock().unwrap().push(parsed);
                    n.notify_waiters();
                    axum::Json(json!({"ok": true}))
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self {
            url: format!("http://{addr}/hook"),
            by_key,
            authorization,
            traceparent,
            bodies,
            raw,
            arrived,
        }
    }

    /// Wait until `n` bodies have arrived; a copy of them.
    pub async fn await_bodies(&self, n: usize) -> Vec<serde_json::Value> {
        tokio::time::timeout(super::harness::PATIENCE, async {
            loop {
                let told = self.arrived.notified();
                let now = self.bodies.lock().unwrap().clone();
                if now.len() >= n {
                    return now;
                }
                told.await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("{n} deliveries never arrived"))
    }

    /// A copy of the deliveries per key.
    pub fn deliveries(&self) -> BTreeMap<String, usize> {
        self.by_key.lock().unwrap().clone()
    }
}
