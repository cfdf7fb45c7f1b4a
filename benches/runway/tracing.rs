//! What traces cost: `tasks/get` (16 clients) and `tools/call` → CreateTaskResult (1 client) on
//! `runway serve` processes side by side — one with traces off, one exporting every span to a
//! local OTLP/HTTP endpoint and, with `RUNWAY_BENCH_BASE_BIN`, a build without traces at all —
//! measured back to back twice so that all see the same machine.

use std::ffi::OsStr;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;
use serde_json::json;

use super::load::{self, Stats, closed_loop};
use super::procs::{self, Proc, free_addr, work_dir};
use super::{Plan, WORKFLOWS, one_run, settle, step};

/// The processes' figures, each the better of its two windows.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Cost {
    pub get_off: Stats,
    pub get_on: Stats,
    pub call_off: Stats,
    pub call_on: Stats,
    /// The build without traces (`RUNWAY_BENCH_BASE_BIN`), when given.
    pub get_base: Option<Stats>,
    pub call_base: Option<Stats>,
    /// OTLP exports the endpoint received while measuring.
    pub exported_batches: u64,
}

/// An OTLP/HTTP endpoint that takes every export (an empty protobuf answer is an
/// `ExportTraceServiceResponse`), counting them.
async fn endpoint() -> (SocketAddr, Arc<AtomicU64>) {
    let batches = Arc::new(AtomicU64::new(0));
    let counted = batches.clone();
    let app = axum::Router::new().fallback(move || {
        let counted = counted.clone();
        async move {
            counted.fetch_add(1, Ordering::Relaxed);
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

/// A `runway serve` (of `bin`, else this build) exporting to `otlp` when given, with a
/// finished task to read.
async fn serve(
    work: &Path,
    name: &str,
    otlp: Option<SocketAddr>,
    bin: Option<&OsStr>,
) -> (Proc, String) {
    let dir = work_dir(work, name);
    std::fs::write(dir.join("workflows/bench.yaml"), WORKFLOWS).expect("workflows written");
    let addr = free_addr();
    let mut cmd = procs::serve(&dir, addr);
    if let Some(bin) = bin {
        let mut other = std::process::Command::new(bin);
        other.args(cmd.get_args());
        cmd = other;
    }
    cmd.arg("--no-auth");
    if let Some(otlp) = otlp {
        cmd.env("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{otlp}"));
    }
    let mut p = Proc::spawn("runway serve", cmd, addr, &dir.join("runway.log"));
    p.ready(Some("/healthz")).await;
    let (task, _) = one_run(addr, "trivial", json!({})).await;
    (p, task)
}

fn better(a: Option<Stats>, b: Stats) -> Stats {
    match a {
        Some(a) if a.per_sec >= b.per_sec => a,
        _ => b,
    }
}

/// One window of `tasks/get` at 16 clients and one of `tools/call` at 1 client on `p`.
async fn windows(p: &Proc, task: &str, plan: Plan) -> (Stats, Stats) {
    let get = closed_loop(p.addr, 16, plan.warmup, plan.measure, load::get_op(task)).await;
    let call = closed_loop(
        p.addr,
        1,
        plan.warmup,
        plan.measure,
        load::create_op("trivial"),
    )
    .await;
    settle(p.addr).await;
    (get, call)
}

pub async fn bench(work: &Path, plan: Plan) -> Cost {
    let (otlp, batches) = endpoint().await;
    let base_bin = std::env::var_os("RUNWAY_BENCH_BASE_BIN");
    let mut servers = vec![
        ("off", serve(work, "traces-off", None, None).await),
        ("on", serve(work, "traces-on", Some(otlp), None).await),
    ];
    if let Some(bin) = &base_bin {
        servers.push(("base", serve(work, "traces-base", None, Some(bin)).await));
    }
    let mut best: [(Option<Stats>, Option<Stats>); 3] = Default::default();
    for round in 1..=2 {
        for (i, (which, (p, task))) in servers.iter().enumerate() {
            step(&format!("traces, round {round}: {which}"));
            let (get, call) = windows(p, task, plan).await;
            best[i] = (
                Some(better(best[i].0.take(), get)),
                Some(better(best[i].1.take(), call)),
            );
        }
    }
    for (_, (p, _)) in servers.iter_mut() {
        p.kill();
    }
    let [off, on, base] = best;
    Cost {
        get_off: off.0.unwrap_or_default(),
        call_off: off.1.unwrap_or_default(),
        get_on: on.0.unwrap_or_default(),
        call_on: on.1.unwrap_or_default(),
        get_base: base.0,
        call_base: base.1,
        exported_batches: batches.load(Ordering::Relaxed),
    }
}

/// The cost as Markdown tables.
pub fn table(c: &Cost) -> String {
    let row = |what: &str, a: &Stats, b: &Stats| {
        format!(
            "| {what} | {:.0}/s, p50 {:.2} ms | {:.0}/s, p50 {:.2} ms | {:.2}× |\n",
            a.per_sec,
            a.p50_ms,
            b.per_sec,
            b.p50_ms,
            if a.per_sec == 0.0 {
                0.0
            } else {
                b.per_sec / a.per_sec
            }
        )
    };
    let mut t =
        String::from("| Traces | Off | On (every span exported) | On / off |\n|---|---|---|---|\n");
    t.push_str(&row("tasks/get, 16 clients", &c.get_off, &c.get_on));
    t.push_str(&row("tools/call, 1 client", &c.call_off, &c.call_on));
    if let (Some(get), Some(call)) = (&c.get_base, &c.call_base) {
        t.push_str(
            "\n| Traces off | A build without traces | This build | This / that |\n|---|---|---|---|\n",
        );
        t.push_str(&row("tasks/get, 16 clients", get, &c.get_off));
        t.push_str(&row("tools/call, 1 client", call, &c.call_off));
    }
    t.push_str(&format!(
        "\n{} OTLP exports received while measuring.\n",
        c.exported_batches
    ));
    t
}
