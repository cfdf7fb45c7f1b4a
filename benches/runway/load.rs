//! The load generator: keep-alive HTTP/1.1 connections (one per client, hyper's bare client so
//! the generator costs as little CPU as possible on the cores it shares with the server), MCP
//! request bodies, and closed-loop runs that report throughput and latency percentiles.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::future::BoxFuture;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde::Serialize;
use serde_json::{Value, json};

/// Protocol revision spoken.
pub const VERSION: &str = "2026-07-28";
/// The revision of clients that open with `initialize` (their own tasks, no `_meta`).
pub const VERSION_2025: &str = "2025-11-25";
/// The Tasks extension.
pub const TASKS: &str = "io.modelcontextprotocol/tasks";

/// What went wrong with one request.
pub type Error = String;

/// Where MCP requests go: a server, its endpoint path, and the caller's bearer token.
#[derive(Clone, Debug)]
pub struct Target {
    /// The server.
    pub addr: SocketAddr,
    /// `/mcp`, or `/namespaces/{namespace}/mcp`.
    pub path: String,
    /// Sent as `Authorization: Bearer …` when set.
    pub token: Option<String>,
}

impl From<SocketAddr> for Target {
    fn from(addr: SocketAddr) -> Self {
        Self {
            addr,
            path: "/mcp".into(),
            token: None,
        }
    }
}

/// One keep-alive connection to a server.
pub struct Conn {
    host: String,
    path: String,
    auth: Option<String>,
    sender: SendRequest<Full<Bytes>>,
}

impl Conn {
    /// Open a connection.
    pub async fn open(to: impl Into<Target>) -> Result<Self, Error> {
        let to: Target = to.into();
        let addr = to.addr;
        let tcp = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| format!("connect {addr}: {e}"))?;
        tcp.set_nodelay(true).map_err(|e| e.to_string())?;
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
            .await
            .map_err(|e| format!("handshake {addr}: {e}"))?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(Self {
            host: addr.to_string(),
            path: to.path,
            auth: to.token.map(|t| format!("Bearer {t}")),
            sender,
        })
    }

    /// Send an MCP POST and return the response head with its body still streaming.
    pub async fn start(&mut self, rpc: &Rpc) -> Result<Response<Incoming>, Error> {
        let mut b = Request::post(self.path.as_str())
            .header("host", &self.host)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-method", rpc.method);
        b = match &rpc.session {
            Some(s) => b
                .header("mcp-protocol-version", VERSION_2025)
                .header("mcp-session-id", &**s),
            None if rpc.method == "initialize" => b,
            None => b.header("mcp-protocol-version", VERSION),
        };
        if let Some(n) = &rpc.name {
            b = b.header("mcp-name", n.as_str());
        }
        if let Some(a) = &self.auth {
            b = b.header("authorization", a.as_str());
        }
        let req = b
            .body(Full::new(rpc.body.clone()))
            .map_err(|e| e.to_string())?;
        self.sender.ready().await.map_err(|e| e.to_string())?;
        self.sender
            .send_request(req)
            .await
            .map_err(|e| format!("{}: {e}", rpc.method))
    }

    /// Send an MCP POST and read the whole answer.
    pub async fn send(&mut self, rpc: &Rpc) -> Result<Bytes, Error> {
        let resp = self.start(rpc).await?;
        let status = resp.status();
        let body = read_all(resp).await?;
        if status != StatusCode::OK {
            return Err(format!(
                "{} answered {status}: {}",
                rpc.method,
                String::from_utf8_lossy(&body)
            ));
        }
        Ok(body)
    }

    /// `GET path`: the status code and the body.
    async fn get_body(&mut self, path: &str) -> Result<(StatusCode, Bytes), Error> {
        let req = Request::get(path)
            .header("host", &self.host)
            .body(Full::new(Bytes::new()))
            .map_err(|e| e.to_string())?;
        self.sender.ready().await.map_err(|e| e.to_string())?;
        let resp = self
            .sender
            .send_request(req)
            .await
            .map_err(|e| e.to_string())?;
        let status = resp.status();
        Ok((status, read_all(resp).await?))
    }

    /// `GET path`: the body as text (empty unless the answer is a success).
    pub async fn text(&mut self, path: &str) -> Result<String, Error> {
        let (status, body) = self.get_body(path).await?;
        Ok(match status.is_success() {
            true => String::from_utf8_lossy(&body).into_owned(),
            false => String::new(),
        })
    }

    /// `GET path`, for health checks; the status code.
    pub async fn get(&mut self, path: &str) -> Result<StatusCode, Error> {
        Ok(self.get_body(path).await?.0)
    }
}

/// The whole body of an answer.
async fn read_all(resp: Response<Incoming>) -> Result<Bytes, Error> {
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?;
    Ok(body.to_bytes())
}

/// A prepared JSON-RPC request: method and name headers plus the serialized body.
#[derive(Clone)]
pub struct Rpc {
    method: &'static str,
    name: Option<String>,
    body: Bytes,
    /// The `Mcp-Session-Id` of a 2025-era client (none: a 2026-07-28 request).
    session: Option<Arc<str>>,
}

fn meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": VERSION,
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS: {}}},
    })
}

fn rpc(method: &'static str, name: Option<&str>, mut params: Value) -> Rpc {
    params["_meta"] = meta();
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    Rpc {
        method,
        name: name.map(str::to_owned),
        body: Bytes::from(body.to_string()),
        session: None,
    }
}

/// A request of a 2025-era client in `session`: no `_meta`, the session header instead.
fn rpc_2025(session: &Arc<str>, method: &'static str, params: Value) -> Rpc {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    Rpc {
        method,
        name: None,
        body: Bytes::from(body.to_string()),
        session: Some(session.clone()),
    }
}

/// The 2025-era handshake: `initialize` declaring the revision's tasks; the session id.
pub async fn initialize(c: &mut Conn) -> Result<Arc<str>, Error> {
    let body = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": VERSION_2025, "capabilities": {"tasks": {}},
        "clientInfo": {"name": "runway-bench", "version": "1"}}});
    let rpc = Rpc {
        method: "initialize",
        name: None,
        body: Bytes::from(body.to_string()),
        session: None,
    };
    let resp = c.start(&rpc).await?;
    let session = resp
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(Arc::from)
        .ok_or("initialize gave no session")?;
    read_all(resp).await?;
    Ok(session)
}

/// 2025-11-25 `tasks/get` of `task`.
pub fn get_2025(session: &Arc<str>, task: &str) -> Rpc {
    rpc_2025(session, "tasks/get", json!({"taskId": task}))
}

/// 2025-11-25 task-augmented `tools/call` of `tool`.
pub fn call_2025(session: &Arc<str>, tool: &str) -> Rpc {
    rpc_2025(
        session,
        "tools/call",
        json!({"name": tool, "arguments": {}, "task": {"ttl": 60000}}),
    )
}

/// The `taskId` of a 2025-11-25 `CreateTaskResult` (`{task: {taskId, …}}`).
pub fn task_id_2025(body: &[u8]) -> Result<String, Error> {
    let v: Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    v["result"]["task"]["taskId"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| format!("no task in {v}"))
}

/// `tools/call` of `tool` with `args`, declaring the Tasks extension.
pub fn call(tool: &str, args: Value) -> Rpc {
    rpc(
        "tools/call",
        Some(tool),
        json!({"name": tool, "arguments": args}),
    )
}

/// `tasks/get` of `task`.
pub fn get(task: &str) -> Rpc {
    rpc("tasks/get", Some(task), json!({"taskId": task}))
}

/// `subscriptions/listen` for `tasks`.
pub fn listen(tasks: &[String]) -> Rpc {
    rpc(
        "subscriptions/listen",
        None,
        json!({"notifications": {"taskIds": tasks}}),
    )
}

/// The `taskId` of a `CreateTaskResult`.
pub fn task_id(body: &[u8]) -> Result<String, Error> {
    let v: Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    v["result"]["taskId"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| format!("no taskId in {v}"))
}

/// A task's status in a `tasks/get` answer, found without parsing the whole answer (both
/// servers write compact JSON, and the status precedes any nested result).
pub fn status_of(body: &[u8]) -> Option<&str> {
    const KEY: &[u8] = b"\"status\":\"";
    let at = body.windows(KEY.len()).position(|w| w == KEY)? + KEY.len();
    let len = body[at..].iter().position(|&b| b == b'"')?;
    std::str::from_utf8(&body[at..at + len]).ok()
}

/// Whether a status is terminal.
pub fn terminal(status: &str) -> bool {
    matches!(status, "completed" | "failed" | "cancelled")
}

/// JSON-RPC messages of an SSE chunk (`data:` lines).
pub fn sse_messages(text: &str) -> Vec<Value> {
    text.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str(d.trim()).ok())
        .collect()
}

/// Latency and throughput of one measured scenario.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Stats {
    /// Concurrent clients.
    pub clients: usize,
    /// Operations finished inside the measuring window.
    pub ops: u64,
    /// Measuring window, seconds.
    pub seconds: f64,
    /// Operations per second.
    pub per_sec: f64,
    /// Median latency, milliseconds.
    pub p50_ms: f64,
    /// 99th percentile latency, milliseconds.
    pub p99_ms: f64,
    /// Mean latency, milliseconds.
    pub mean_ms: f64,
    /// Failed operations (any failure ends that client).
    pub errors: u64,
    /// Extra requests per operation (tasks/get polls per run), averaged.
    pub extra_per_op: f64,
}

impl Stats {
    /// The statistics of one window: latency samples in microseconds of the operations that
    /// finished inside it, the failures, and the extra requests they made in all.
    pub fn of(clients: usize, lat: Vec<u64>, measure: Duration, errors: u64, extra: u64) -> Self {
        let ops = lat.len() as u64;
        let (p50_ms, p99_ms, mean_ms) = percentiles(lat);
        let seconds = measure.as_secs_f64();
        Self {
            clients,
            ops,
            seconds,
            per_sec: ops as f64 / seconds,
            p50_ms,
            p99_ms,
            mean_ms,
            errors,
            extra_per_op: if ops == 0 {
                0.0
            } else {
                extra as f64 / ops as f64
            },
        }
    }
}

/// Percentiles of microsecond samples.
pub fn percentiles(mut us: Vec<u64>) -> (f64, f64, f64) {
    if us.is_empty() {
        return (0.0, 0.0, 0.0);
    }
    us.sort_unstable();
    let at = |q: f64| us[((us.len() as f64 * q).ceil() as usize).clamp(1, us.len()) - 1];
    let mean = us.iter().sum::<u64>() as f64 / us.len() as f64;
    (
        at(0.50) as f64 / 1000.0,
        at(0.99) as f64 / 1000.0,
        mean / 1000.0,
    )
}

/// One closed-loop operation: takes the connection and returns it with the number of extra
/// requests it made, or an error.
pub type Op = Arc<dyn Fn(Conn) -> BoxFuture<'static, (Conn, Result<u64, Error>)> + Send + Sync>;

/// Whether an operation that finished at `done` is one of the window's: a rate is the
/// operations *finished* in the window, whenever they started. Also asking that they started
/// in it drops, at each edge and per client, the operation under way there, which a long
/// operation is likelier to be: the rate then reads low by about the mean of latency² ÷ mean
/// latency ÷ the window (percents for end-to-end callers on the control plane, whose Runs take
/// a tenth of a second and more; nothing measurable for a `tasks/get`), and its latencies lose
/// their long tail.
pub fn in_window(done: Instant, counted_from: Instant, until: Instant) -> bool {
    done > counted_from && done <= until
}

/// A closed loop: `clients` connections, each running `op` back to back for `warmup` (not
/// counted) and then `measure` (the operations finished in it counted). Bounded by time; a
/// client stops at its first error.
pub async fn closed_loop(
    to: impl Into<Target>,
    clients: usize,
    warmup: Duration,
    measure: Duration,
    op: Op,
) -> Stats {
    closed_loop_over(&[to.into()], clients, warmup, measure, op).await
}

/// [`closed_loop`] with the clients spread over `targets` (client `i` uses target
/// `i % targets.len()`), e.g. the replicas of one cluster.
pub async fn closed_loop_over(
    targets: &[Target],
    clients: usize,
    warmup: Duration,
    measure: Duration,
    op: Op,
) -> Stats {
    let start = Instant::now();
    let counted_from = start + warmup;
    let until = counted_from + measure;
    let mut workers = tokio::task::JoinSet::new();
    for i in 0..clients {
        let op = op.clone();
        let to = targets[i % targets.len()].clone();
        workers.spawn(async move {
            let mut lat: Vec<u64> = Vec::with_capacity(16 * 1024);
            let mut extra = 0u64;
            let mut errors = 0u64;
            let mut conn = match Conn::open(to).await {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("bench: {e}");
                    return (lat, extra, 1);
                }
            };
            loop {
                let t = Instant::now();
                if t >= until {
                    break;
                }
                let (back, res) = op(conn).await;
                conn = back;
                let done = Instant::now();
                match res {
                    Ok(n) if in_window(done, counted_from, until) => {
                        lat.push((done - t).as_micros() as u64);
                        extra += n;
                    }
                    Ok(_) => {}
                    Err(e) => {
                        eprintln!("bench: {e}");
                        errors += 1;
                        break;
                    }
                }
            }
            (lat, extra, errors)
        });
    }
    let mut all = Vec::new();
    let mut extra = 0;
    let mut errors = 0;
    while let Some(r) = workers.join_next().await {
        let (lat, x, e) = r.expect("a load worker panicked");
        all.extend(lat);
        extra += x;
        errors += e;
    }
    Stats::of(clients, all, measure, errors, extra)
}

/// `tasks/get` of one fixed task, checked for a `completed` status.
pub fn get_op(task: &str) -> Op {
    let rpc = get(task);
    Arc::new(move |mut c: Conn| {
        let rpc = rpc.clone();
        Box::pin(async move {
            let res = match c.send(&rpc).await {
                Ok(b) if status_of(&b) == Some("completed") => Ok(0),
                Ok(b) => Err(format!(
                    "unexpected tasks/get answer: {}",
                    String::from_utf8_lossy(&b)
                )),
                Err(e) => Err(e),
            };
            (c, res)
        })
    })
}

/// `tools/call` of a tool answered at once with `structuredContent`, checked for `n` entries
/// under `field`.
pub fn listing_op(rpc: Rpc, field: &'static str, n: usize) -> Op {
    Arc::new(move |mut c: Conn| {
        let rpc = rpc.clone();
        Box::pin(async move {
            let res = match c.send(&rpc).await {
                Ok(b) => {
                    let v: Value = serde_json::from_slice(&b).unwrap_or_default();
                    match v["result"]["structuredContent"][field].as_array() {
                        Some(items) if items.len() == n => Ok(0),
                        _ => Err(format!("unexpected answer: {v}")),
                    }
                }
                Err(e) => Err(e),
            };
            (c, res)
        })
    })
}

/// A plain POST of a fixed request, for the HTTP baseline (any 200 answer counts).
pub fn post_op(rpc: Rpc) -> Op {
    Arc::new(move |mut c: Conn| {
        let rpc = rpc.clone();
        Box::pin(async move {
            let res = c.send(&rpc).await.map(|_| 0);
            (c, res)
        })
    })
}

/// A fixed request of a 2025-era client, its answer checked by `ok`.
pub fn checked_op(rpc: Rpc, ok: fn(&[u8]) -> Result<(), Error>) -> Op {
    Arc::new(move |mut c: Conn| {
        let rpc = rpc.clone();
        Box::pin(async move {
            let res = match c.send(&rpc).await {
                Ok(b) => ok(&b).map(|()| 0),
                Err(e) => Err(e),
            };
            (c, res)
        })
    })
}

/// `tools/call` → `CreateTaskResult`.
pub fn create_op(tool: &'static str) -> Op {
    let rpc = call(tool, json!({}));
    Arc::new(move |mut c: Conn| {
        let rpc = rpc.clone();
        Box::pin(async move {
            let res = match c.send(&rpc).await {
                Ok(b) => task_id(&b).map(|_| 0),
                Err(e) => Err(e),
            };
            (c, res)
        })
    })
}

/// End to end: create a task, then poll `tasks/get` every `poll` until it is `completed`.
/// Returns the number of polls.
pub fn run_op(tool: &'static str, poll: Duration) -> Op {
    let create = call(tool, json!({}));
    Arc::new(move |mut c: Conn| {
        let create = create.clone();
        Box::pin(async move {
            let res = async {
                let id = task_id(&c.send(&create).await?)?;
                let get = get(&id);
                // Bounded: a run that takes longer than this fails the client.
                for polls in 1..=10_000u64 {
                    let b = c.send(&get).await?;
                    match status_of(&b) {
                        Some("completed") => return Ok(polls),
                        Some(s) if terminal(s) => return Err(format!("run {id} ended {s}")),
                        Some(_) => tokio::time::sleep(poll).await,
                        None => {
                            return Err(format!("no status in {}", String::from_utf8_lossy(&b)));
                        }
                    }
                }
                Err(format!("run {id} did not complete"))
            }
            .await;
            (c, res)
        })
    })
}
