//! Serving axum routers on HTTP/1.1 connections with the limits a public endpoint needs: a
//! client must finish its request headers within [`HEADER_READ_TIMEOUT`] (slow-header clients
//! cannot hold connections forever), and TCP keepalive notices peers that vanished silently.
//! Both the MCP and the metrics ports of `runway serve` and `runway operator` use it, with the
//! health and metrics routes defined here once.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use crate::store::RunStore;
use crate::telemetry::Metrics;

/// How long a client may take to send a request's headers.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Idle time before the first TCP keepalive probe.
pub const TCP_KEEPALIVE: Duration = Duration::from_secs(30);

/// `/healthz`, `/readyz` and `/metrics` (the Run gauge is counted at scrape time, in place in
/// the store's cache).
pub fn health_and_metrics(store: Arc<dyn RunStore>, metrics: Metrics) -> Router {
    Router::new()
        .route("/healthz", axum::routing::get(|| async { "ok" }))
        .route("/readyz", axum::routing::get(|| async { "ok" }))
        .route(
            "/metrics",
            axum::routing::get(move || {
                let (store, metrics) = (store.clone(), metrics.clone());
                async move {
                    count_runs(&*store, &metrics).await;
                    metrics.encode()
                }
            }),
        )
}

/// Update the per-phase Run gauge from the store's cache (counted in place, no Run copied).
async fn count_runs(store: &dyn RunStore, metrics: &Metrics) {
    let Ok(counts) = store.phase_counts().await else {
        return;
    };
    let all: Vec<(&str, i64)> = crate::api::RunPhase::ALL
        .iter()
        .map(|p| (p.as_str(), counts.get(p).copied().unwrap_or(0)))
        .collect();
    metrics.set_runs(&all);
}

/// Serve `app` on `listener` until `shutdown`; then stop accepting, let every connection finish
/// its current request, and return.
pub async fn serve(listener: TcpListener, app: Router, shutdown: CancellationToken) {
    let mut conns = tokio::task::JoinSet::new();
    loop {
        let stream = tokio::select! {
            _ = shutdown.cancelled() => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => continue,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let sock = socket2::SockRef::from(&stream);
        let _ = sock.set_tcp_keepalive(&socket2::TcpKeepalive::new().with_time(TCP_KEEPALIVE));
        let service = TowerToHyperService::new(
            app.clone()
                .map_request(|r: http::Request<Incoming>| r.map(Body::new)),
        );
        let token = shutdown.clone();
        conns.spawn(async move {
            let conn = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service)
                .with_upgrades();
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                _ = token.cancelled() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
        });
    }
    while conns.join_next().await.is_some() {}
}
