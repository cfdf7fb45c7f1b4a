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

use crate::auth::connection::LastToken;
use crate::store::RunStore;
use crate::telemetry::Metrics;

/// How long a client may take to send a request's headers.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Idle time before the first TCP keepalive probe.
pub(crate) const TCP_KEEPALIVE: Duration = Duration::from_secs(30);
/// Time between unanswered keepalive probes.
pub(crate) const TCP_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
/// Unanswered probes after which an idle peer counts as gone (so within about a minute).
pub(crate) const TCP_KEEPALIVE_PROBES: u32 = 3;
/// How long sent data may stay unacknowledged before the connection is dropped. Keepalive probes
/// only run on idle connections; a held call writing SSE keep-alive comments to a vanished peer
/// is never idle, and would otherwise retransmit for a quarter of an hour before noticing.
pub(crate) const TCP_USER_TIMEOUT: Duration = Duration::from_secs(60);

/// `/healthz`, `/readyz` and `/metrics` (the Run gauge is counted at scrape time, in place in
/// the store's cache).
pub(crate) fn health_and_metrics(store: Arc<dyn RunStore>, metrics: Metrics) -> Router {
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

/// Socket options of an accepted connection: no Nagle delay, and a peer that vanished without
/// a word (a crashed client, a dropped route) is noticed within about a minute, idle or not.
fn tune(stream: &tokio::net::TcpStream) {
    let _ = stream.set_nodelay(true);
    let sock = socket2::SockRef::from(stream);
    let keepalive = socket2::TcpKeepalive::new()
        .with_time(TCP_KEEPALIVE)
        .with_interval(TCP_KEEPALIVE_INTERVAL)
        .with_retries(TCP_KEEPALIVE_PROBES);
    let _ = sock.set_tcp_keepalive(&keepalive);
    let _ = sock.set_tcp_user_timeout(Some(TCP_USER_TIMEOUT));
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
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let (stream, peer) = stream;
        tune(&stream);
        // The client's address, for the limits kept per address (failed authentications), and
        // the token the connection last signed in with.
        let last_token = Arc::new(LastToken::default());
        let service =
            TowerToHyperService::new(app.clone().map_request(move |r: http::Request<Incoming>| {
                let mut r = r.map(Body::new);
                let extensions = r.extensions_mut();
                extensions.insert(axum::extract::ConnectInfo(peer));
                extensions.insert(Arc::clone(&last_token));
                r
            }));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn accepted_connections_notice_vanished_peers() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let _client = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (accepted, _) = listener.accept().await.unwrap();
        tune(&accepted);
        let sock = socket2::SockRef::from(&accepted);
        assert!(sock.keepalive().unwrap());
        assert_eq!(sock.tcp_keepalive_time().unwrap(), TCP_KEEPALIVE);
        assert_eq!(
            sock.tcp_keepalive_interval().unwrap(),
            TCP_KEEPALIVE_INTERVAL
        );
        assert_eq!(sock.tcp_keepalive_retries().unwrap(), TCP_KEEPALIVE_PROBES);
        assert_eq!(sock.tcp_user_timeout().unwrap(), Some(TCP_USER_TIMEOUT));
        assert!(accepted.nodelay().unwrap());
    }
}
