//! For tests of `tool` steps: a recording HTTP proxy in front of an upstream MCP server (it
//! counts requests by `Mcp-Method`, so tests can wait for "the first tasks/get" instead of
//! sleeping, and prove that a tool was called once), and the directory of a server whose auth
//! file carries secrets.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::Value;
use tokio::sync::watch;

use super::harness::{PATIENCE, TempDir};
use super::mcp::AUTH;

/// Requests seen, by `Mcp-Method`.
#[derive(Default)]
struct Seen {
    by_method: Mutex<BTreeMap<String, usize>>,
    /// Requests of a method to answer with an HTTP status instead of forwarding them.
    failing: Mutex<BTreeMap<String, (usize, u16)>>,
    /// Requests of a method to answer with a JSON-RPC error of this code instead.
    refusing: Mutex<BTreeMap<String, (usize, i64)>>,
    /// Requests of a method whose upstream answer is held until [`Proxy::release`].
    holding: Mutex<BTreeMap<String, usize>>,
    /// Requests of a method to answer with a result of this many bytes instead.
    oversizing: Mutex<BTreeMap<String, (usize, usize)>>,
    /// One permit per held answer let go.
    released: Released,
    /// The idempotency keys of each `tools/call` forwarded: its `Idempotency-Key` header and
    /// its `_meta` key.
    call_keys: Mutex<Vec<(Option<String>, Option<String>)>>,
    /// The `_meta.traceparent` of each `tools/call` forwarded.
    call_traces: Mutex<Vec<Option<String>>>,
    /// The `Mcp-Method` of each request other than `tools/call` that carried an
    /// `Idempotency-Key`.
    keyed_others: Mutex<Vec<String>>,
}

/// Permits to let held answers go, none at first.
struct Released(tokio::sync::Semaphore);

impl Default for Released {
    fn default() -> Self {
        Self(tokio::sync::Semaphore::new(0))
    }
}

/// A proxy that forwards every request to `target` and counts them.
pub struct Proxy {
    pub addr: SocketAddr,
    seen: Arc<Seen>,
    changes: watch::Receiver<u64>,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Clone)]
struct ProxyState {
    target: String,
    http: reqwest::Client,
    seen: Arc<Seen>,
    changes: Arc<watch::Sender<u64>>,
}

/// The value of the next of `n` requests of `method` to be answered by the proxy itself, if any
/// are left (counted down).
fn next_of<T: Copy>(m: &Mutex<BTreeMap<String, (usize, T)>>, method: &str) -> Option<T> {
    match m.lock().unwrap().get_mut(method) {
        Some((n, value)) if *n > 0 => {
            *n -= 1;
            Some(*value)
        }
        _ => None,
    }
}

impl ProxyState {
    /// Count one more `what` (a method, or a method and what the proxy did to it).
    fn count(&self, what: &str) {
        *self
            .seen
            .by_method
            .lock()
            .unwrap()
            .entry(what.to_owned())
            .or_default() += 1;
        self.changes.send_modify(|n| *n += 1);
    }

    /// Answer the request in `body` itself, with `kind` (`result` or `error`) `value`,
    /// counted as `"<method> <done>"`.
    fn answer(&self, method: &str, done: &str, body: &[u8], kind: &str, value: Value) -> Response {
        let id = serde_json::from_slice::<Value>(body)
            .map(|v| v["id"].clone())
            .unwrap_or_default();
        self.count(&format!("{method} {done}"));
        let mut message = serde_json::json!({"jsonrpc": "2.0", "id": id});
        message[kind] = value;
        Response::builder()
            .status(StatusCode::OK)
            .header("content-type", "application/json")
            .body(Body::from(message.to_string()))
            .unwrap()
    }
}

async fn forward(State(s): State<ProxyState>, req: Request) -> Response {
    let method = req
        .headers()
        .get("mcp-method")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("-")
        .to_owned();
    let path = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_default();
    let mut out = s
        .http
        .request(req.method().clone(), format!("{}{path}", s.target));
    for (k, v) in req.headers() {
        if k != "host" && k != "content-length" {
            out = out.header(k, v);
        }
    }
    let header_key = req
        .headers()
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let body = axum::body::to_bytes(req.into_body(), 16 * 1024 * 1024)
        .await
        .unwrap_or_default();
    if method != "tools/call" && header_key.is_some() {
        s.seen.keyed_others.lock().unwrap().push(method.clone());
    }
    if method == "tools/call" {
        let parsed = serde_json::from_slice::<Value>(&body).ok();
        let meta = |key: &str| {
            parsed
                .as_ref()
                .and_then(|v| v["params"]["_meta"][key].as_str().map(str::to_owned))
        };
        let meta_key = meta("dev.runway/idempotencyKey");
        s.seen.call_traces.lock().unwrap().push(meta("traceparent"));
        s.seen
            .call_keys
            .lock()
            .unwrap()
            .push((header_key, meta_key));
    }
    let injected = next_of(&s.seen.failing, &method);
    let refused = next_of(&s.seen.refusing, &method);
    let oversized = next_of(&s.seen.oversizing, &method);
    if let Some(bytes) = oversized {
        let result = serde_json::json!({"content": [{"type": "text", "text": "x".repeat(bytes)}]});
        return s.answer(&method, "oversized", &body, "result", result);
    }
    if let Some(code) = refused {
        let error = serde_json::json!({"code": code, "message": "refused by the proxy"});
        return s.answer(&method, "refused", &body, "error", error);
    }
    if let Some(status) = injected {
        s.count(&format!("{method} failed"));
        return Response::builder()
            .status(status)
            .body(Body::empty())
            .unwrap();
    }
    let resp = out.body(body).send().await;
    let held = {
        let mut holding = s.seen.holding.lock().unwrap();
        match holding.get_mut(&method) {
            Some(n) if *n > 0 => {
                *n -= 1;
                true
            }
            _ => false,
        }
    };
    if held {
        // The upstream has answered (a task it made exists); the caller waits for the answer.
        s.count(&format!("{method} held"));
        s.seen.released.0.acquire().await.unwrap().forget();
    }
    s.count(&method);
    match resp {
        Ok(r) => {
            let mut b = Response::builder().status(r.status().as_u16());
            for (k, v) in r.headers() {
                if k != "content-length" && k != "transfer-encoding" {
                    b = b.header(k, v);
                }
            }
            b.body(Body::from_stream(r.bytes_stream())).unwrap()
        }
        Err(_) => Response::builder()
            .status(StatusCode::BAD_GATEWAY)
            .body(Body::empty())
            .unwrap(),
    }
}

impl Proxy {
    /// Forward to `target` (`http://host:port`).
    pub async fn start(target: &str) -> Self {
        runway::install_crypto_provider();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Seen::default());
        let (tx, changes) = watch::channel(0);
        let state = ProxyState {
            target: target.trim_end_matches('/').to_owned(),
            http: reqwest::Client::new(),
            seen: seen.clone(),
            changes: Arc::new(tx),
        };
        let app = axum::Router::new().fallback(forward).with_state(state);
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Self {
            addr,
            seen,
            changes,
            task,
        }
    }

    /// Answer the next `n` requests with this `Mcp-Method` with HTTP `status` instead of
    /// forwarding them (counted as `"<method> failed"`).
    pub fn fail_next(&self, method: &str, n: usize, status: u16) {
        self.seen
            .failing
            .lock()
            .unwrap()
            .insert(method.to_owned(), (n, status));
    }

    /// Answer the next `n` requests with this `Mcp-Method` with a JSON-RPC error of `code`
    /// instead of forwarding them (counted as `"<method> refused"`).
    pub fn refuse_next(&self, method: &str, n: usize, code: i64) {
        self.seen
            .refusing
            .lock()
            .unwrap()
            .insert(method.to_owned(), (n, code));
    }

    /// Answer the next `n` requests with this `Mcp-Method` with a result of about `bytes`
    /// bytes instead of forwarding them (counted as `"<method> oversized"`).
    pub fn oversize_next(&self, method: &str, n: usize, bytes: usize) {
        self.seen
            .oversizing
            .lock()
            .unwrap()
            .insert(method.into(), (n, bytes));
    }

    /// Forward the next `n` requests with this `Mcp-Method` but hold each upstream answer
    /// until [`Proxy::release`] (counted as `"<method> held"` once the upstream answered).
    pub fn hold_next(&self, method: &str, n: usize) {
        self.seen
            .holding
            .lock()
            .unwrap()
            .insert(method.to_owned(), n);
    }

    /// Let one held answer go on to its caller.
    pub fn release(&self) {
        self.seen.released.0.add_permits(1);
    }

    /// The idempotency keys (header, `_meta`) of every `tools/call` seen, in order.
    pub fn call_keys(&self) -> Vec<(Option<String>, Option<String>)> {
        self.seen.call_keys.lock().unwrap().clone()
    }

    /// The methods of the requests other than `tools/call` that carried an `Idempotency-Key`.
    pub fn keyed_others(&self) -> Vec<String> {
        self.seen.keyed_others.lock().unwrap().clone()
    }

    /// The `_meta.traceparent` of every `tools/call` seen, in order.
    pub fn call_traces(&self) -> Vec<Option<String>> {
        self.seen.call_traces.lock().unwrap().clone()
    }

    /// Requests with this `Mcp-Method` forwarded so far.
    pub fn count(&self, method: &str) -> usize {
        self.seen
            .by_method
            .lock()
            .unwrap()
            .get(method)
            .copied()
            .unwrap_or(0)
    }

    /// Wait until at least `n` requests with this `Mcp-Method` were forwarded.
    pub async fn wait_for(&self, method: &str, n: usize) {
        let mut changes = self.changes.clone();
        let reached = tokio::time::timeout(PATIENCE, async {
            loop {
                if self.count(method) >= n {
                    return;
                }
                changes.changed().await.unwrap();
            }
        })
        .await;
        assert!(
            reached.is_ok(),
            "never saw {n} {method} requests (saw {})",
            self.count(method)
        );
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The standard auth file plus a `secrets:` section.
pub fn auth_with_secrets(secrets: &str) -> String {
    format!("{AUTH}\nsecrets:\n{secrets}\n")
}

/// A server directory: `workflows/` with these manifests, and `auth.yaml`.
pub fn server_dir(manifests: &[(&str, &str)], auth: &str) -> TempDir {
    let dir = TempDir::new();
    write_server_dir(dir.path(), manifests, auth);
    dir
}

pub fn write_server_dir(dir: &Path, manifests: &[(&str, &str)], auth: &str) {
    let wf = dir.join("workflows");
    std::fs::create_dir_all(&wf).unwrap();
    for (name, yaml) in manifests {
        std::fs::write(wf.join(name), yaml).unwrap();
    }
    std::fs::write(dir.join("auth.yaml"), auth).unwrap();
}
