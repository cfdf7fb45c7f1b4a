//! The baselines Runway is measured against, each in its own process (this binary re-executed
//! with a subcommand) except the storage limit, which is a plain loop over SQLite:
//!
//! - `http-limit`: a minimal axum endpoint answering a fixed JSON-RPC body;
//! - `rmcp-peer`: what a Rust developer would build instead — rmcp 3.11's in-memory
//!   `TaskManager` behind the same stateless 2026-07-28 `StreamableHttpService` Runway uses,
//!   with the same trivial tool;
//! - the storage limit: SQLite commits per second with Runway's journal and sync settings.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::routing::post;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, CreateTaskResult,
    ErrorData, GetTaskParams, GetTaskResult, ProtocolVersion, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::task_manager::{TaskManager, TaskOptions};
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{RoleServer, ServerHandler};
use serde::Serialize;

use crate::load::percentiles;

/// Serve the HTTP limit: every POST /mcp gets `body` (read from a file) as JSON.
pub async fn serve_http_limit(addr: SocketAddr, body: Bytes) {
    let app = Router::new().route(
        "/mcp",
        post(move |_req: Bytes| {
            let body = body.clone();
            async move { ([("content-type", "application/json")], body) }
        }),
    );
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .expect("the http-limit port is free");
    axum::serve(listener, app).await.expect("http-limit serves");
}

/// The rmcp peer's handler: one trivial tool, run as a task in `TaskManager`.
#[derive(Clone)]
struct Peer {
    tasks: TaskManager,
}

impl ServerHandler for Peer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tasks()
                .build(),
        )
    }

    fn supported_protocol_versions(&self) -> std::borrow::Cow<'static, [ProtocolVersion]> {
        std::borrow::Cow::Borrowed(&[ProtocolVersion::V_2026_07_28])
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if request.name != "trivial" {
            return Err(ErrorData::invalid_params("unknown tool", None));
        }
        let result = || CallToolResult::success(vec![ContentBlock::text("done")]);
        if !ctx
            .client_capabilities()
            .is_some_and(|c| c.supports_tasks())
        {
            return Ok(result().into());
        }
        let task = self.tasks.spawn(TaskOptions::new(), move |_ctx| {
            Box::pin(async move {
                // The same one-step work as Runway's trivial workflow: a zero-length wait.
                tokio::time::sleep(Duration::ZERO).await;
                Ok(result())
            })
        });
        Ok(CallToolResponse::Task(CreateTaskResult::new(task)))
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        Ok(GetTaskResult::new(self.tasks.get_task(&request.task_id)?))
    }
}

/// Serve the rmcp peer, configured as Runway configures rmcp.
pub async fn serve_rmcp_peer(addr: SocketAddr) {
    let peer = Peer {
        tasks: TaskManager::new(),
    };
    let cfg = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_stateless_protocol_metadata_required(true)
        .with_allowed_hosts(["localhost", "127.0.0.1"]);
    let service = StreamableHttpService::new(
        move || Ok(peer.clone()),
        Arc::new(NeverSessionManager::default()),
        cfg,
    );
    let app = Router::new().route_service("/mcp", service);
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .expect("the rmcp-peer port is free");
    axum::serve(listener, app).await.expect("rmcp-peer serves");
}

/// The storage limit.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Storage {
    /// Commits per second, one row per transaction, one writer.
    pub commits_per_sec: f64,
    /// Median commit latency, milliseconds.
    pub p50_ms: f64,
    /// 99th percentile commit latency, milliseconds.
    pub p99_ms: f64,
    /// Size of each row's body, bytes.
    pub row_bytes: usize,
}

impl Storage {
    /// The mean of several samples.
    pub fn mean(samples: &[Storage]) -> Storage {
        let n = samples.len().max(1) as f64;
        let sum = |f: fn(&Storage) -> f64| samples.iter().map(f).sum::<f64>() / n;
        Storage {
            commits_per_sec: sum(|s| s.commits_per_sec),
            p50_ms: sum(|s| s.p50_ms),
            p99_ms: sum(|s| s.p99_ms),
            row_bytes: samples.first().map(|s| s.row_bytes).unwrap_or(0),
        }
    }
}

/// Upsert one `row_bytes` row per transaction into Runway's table shape, with Runway's
/// `journal_mode` and `synchronous`, for `measure`.
pub fn sqlite_commits(dir: &Path, row_bytes: usize, measure: Duration) -> Storage {
    use runway::store::sqlite::{JOURNAL_MODE, SYNCHRONOUS};
    let path = dir.join("storage-limit.db");
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    let mut conn = rusqlite::Connection::open(&path).expect("the storage-limit database opens");
    conn.pragma_update(None, "journal_mode", JOURNAL_MODE)
        .expect("journal_mode");
    conn.pragma_update(None, "synchronous", SYNCHRONOUS)
        .expect("synchronous");
    conn.execute_batch(
        "CREATE TABLE runs (namespace TEXT NOT NULL, name TEXT NOT NULL, body TEXT NOT NULL,
                            PRIMARY KEY (namespace, name));",
    )
    .expect("the table is created");
    // Each row differs from the one it replaces: SQLite leaves a page clean when an update
    // writes the bytes already there, and a transaction with no changed page commits without
    // touching the disk.
    let filler = "x".repeat(row_bytes);
    let mut lat = Vec::new();
    let start = Instant::now();
    let mut i = 0u64;
    while start.elapsed() < measure {
        let mut body = format!("{i:020}");
        body.push_str(&filler[body.len().min(row_bytes)..]);
        let t = Instant::now();
        let tx = conn.transaction().expect("BEGIN");
        tx.execute(
            "INSERT INTO runs (namespace, name, body) VALUES (?1, ?2, ?3)
             ON CONFLICT(namespace, name) DO UPDATE SET body = excluded.body",
            rusqlite::params!["default", format!("run-{}", i % 4096), body],
        )
        .expect("INSERT");
        tx.commit().expect("COMMIT");
        lat.push(t.elapsed().as_micros() as u64);
        i += 1;
    }
    let secs = start.elapsed().as_secs_f64();
    let n = lat.len();
    let (p50_ms, p99_ms, _) = percentiles(lat);
    Storage {
        commits_per_sec: n as f64 / secs,
        p50_ms,
        p99_ms,
        row_bytes,
    }
}
