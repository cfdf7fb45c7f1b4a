//! What traces cost: `tasks/get` (16 clients) and `tools/call` → CreateTaskResult (1 client) on
//! two `runway serve` processes side by side, one with traces off and one exporting every span
//! to a local OTLP/HTTP endpoint, measured back to back twice so that both see the same
//! machine.

use std::net::SocketAddr;
use std::path::Path;

use serde::Serialize;
use serde_json::json;

use super::load::{self, Stats, closed_loop};
use super::procs::{self, Proc, free_addr, work_dir};
use super::{Plan, WORKFLOWS, one_run, settle, step};

/// The two processes' figures, each the better of its two windows.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Cost {
    pub get_off: Stats,
    pub get_on: Stats,
    pub call_off: Stats,
    pub call_on: Stats,
    /// Spans the endpoint received (what was exported while measuring).
    pub exported_batches: u64,
}

/// An OTLP/HTTP endpoint that takes every export (an empty protobuf answer is an
/// `ExportTraceServiceResponse`), counting the batches.
async fn endpoint() -> (SocketAddr, std::sync::Arc<std::sync::atomic::AtomicU64>) {
    let batches = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counted = batches.clone();
    let app = axum::Router::new().fallback(move || {
        let counted = counted.clone();
        async move {
            counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            ""
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let addr = listener.local_addr().expect("a bound address");
    tokio::spawn(async move { axum::serve(listener, app).await.expect("it serves") });
    (addr, batches)
}

async fn serve(work: &Path, name: &str, otlp: Option<SocketAddr>) -> Proc {
    let dir = work_dir(work, name);
    std::fs::write(dir.join("workflows/bench.yaml"), WORKFLOWS).expect("workflows written");
    let addr = free_addr();
    let mut cmd = procs::serve(&dir, addr);
    cmd.arg("--no-auth");
    if let Some(otlp) = otlp {
        cmd.env("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{otlp}"));
    }
    let mut p = Proc::spawn("runway serve", cmd, addr, &dir.join("runway.log"));
    p.ready(Some("/healthz")).await;
    p
}

fn better(a: Stats, b: Stats) -> Stats {
    if b.per_sec > a.per_sec { b } else { a }
}

pub async fn bench(work: &Path, plan: Plan) -> Cost {
    let (otlp, batches) = endpoint().await;
    let mut off = serve(work, "traces-off", None).await;
    let mut on = serve(work, "traces-on", Some(otlp)).await;
    let (off_task, _) = one_run(off.addr, "trivial", json!({})).await;
    let (on_task, _) = one_run(on.addr, "trivial", json!({})).await;
    let mut cost = Cost::default();
    for round in 1..=2 {
        step(&format!(
            "traces off and on, round {round}: tasks/get, 16 clients"
        ));
        let get =
            |addr, task: &str| closed_loop(addr, 16, plan.warmup, plan.measure, load::get_op(task));
        cost.get_off = better(cost.get_off.clone(), get(off.addr, &off_task).await);
        cost.get_on = better(cost.get_on.clone(), get(on.addr, &on_task).await);
        step(&format!(
            "traces off and on, round {round}: tools/call, 1 client"
        ));
        let call = |addr| {
            closed_loop(
                addr,
                1,
                plan.warmup,
                plan.measure,
                load::create_op("trivial"),
            )
        };
        cost.call_off = better(cost.call_off.clone(), call(off.addr).await);
        settle(off.addr).await;
        cost.call_on = better(cost.call_on.clone(), call(on.addr).await);
        settle(on.addr).await;
    }
    cost.exported_batches = batches.load(std::sync::atomic::Ordering::Relaxed);
    off.kill();
    on.kill();
    cost
}

/// The cost as a Markdown table.
pub fn table(c: &Cost) -> String {
    let row = |what: &str, off: &Stats, on: &Stats| {
        format!(
            "| {what} | {:.0}/s, p50 {:.2} ms | {:.0}/s, p50 {:.2} ms | {:.2}× |\n",
            off.per_sec,
            off.p50_ms,
            on.per_sec,
            on.p50_ms,
            if off.per_sec == 0.0 {
                0.0
            } else {
                on.per_sec / off.per_sec
            }
        )
    };
    let mut t =
        String::from("| Traces | Off | On (every span exported) | On / off |\n|---|---|---|---|\n");
    t.push_str(&row("tasks/get, 16 clients", &c.get_off, &c.get_on));
    t.push_str(&row("tools/call, 1 client", &c.call_off, &c.call_on));
    t.push_str(&format!(
        "\n{} OTLP batches exported while measuring.\n",
        c.exported_batches
    ));
    t
}
