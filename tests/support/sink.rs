//! A local HTTP endpoint that webhook steps post to: it answers `{"ok": true}` and counts the
//! deliveries per `Idempotency-Key` and the `Authorization` and `traceparent` headers it saw.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde_json::json;

pub struct Sink {
    /// `http://127.0.0.1:<port>/hook`.
    pub url: String,
    /// Deliveries per `Idempotency-Key` (`<none>` for requests without one).
    pub by_key: Arc<Mutex<BTreeMap<String, usize>>>,
    /// Every `Authorization` header received, in order.
    pub authorization: Arc<Mutex<Vec<String>>>,
    /// Every `traceparent` header received, in order.
    pub traceparent: Arc<Mutex<Vec<String>>>,
}

impl Sink {
    pub async fn start() -> Self {
        let by_key: Arc<Mutex<BTreeMap<String, usize>>> = Arc::default();
        let authorization: Arc<Mutex<Vec<String>>> = Arc::default();
        let traceparent: Arc<Mutex<Vec<String>>> = Arc::default();
        let (k, a, t) = (by_key.clone(), authorization.clone(), traceparent.clone());
        let app = axum::Router::new().route(
            "/hook",
            axum::routing::post(move |headers: http::HeaderMap| {
                let (k, a, t) = (k.clone(), a.clone(), t.clone());
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
        }
    }

    /// A copy of the deliveries per key.
    pub fn deliveries(&self) -> BTreeMap<String, usize> {
        self.by_key.lock().unwrap().clone()
    }
}
