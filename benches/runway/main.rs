//! `make bench`: Runway measured against the HTTP limit, the storage limit and an in-memory
//! rmcp peer, all in one run on one machine, so the ratios hold even where absolute numbers
//! drift. Every server is a separate process on loopback; the load generator is in this one.
//!
//! `cargo bench --bench runway` runs every scenario, prints a table and writes
//! `target/bench/report.json`; `-- --quick` shortens every window for a smoke run. The
//! subcommands `http-limit ADDR BODY_FILE` and `rmcp-peer ADDR` serve the baselines, and
//! `drive ADDR get|create|e2e CLIENTS SECONDS` loads a server started by hand (for profiling);
//! `fan-out` runs the fan-out scenarios alone, `traces` the cost of traces alone.

mod baselines;
#[path = "../../tests/e2e/cluster.rs"]
mod cluster;
mod fanout;
mod kube;
mod load;
mod procs;
mod tracing;
mod usage;

use std::collections::{HashSet, VecDeque};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http_body_util::BodyExt;
use serde::Serialize;
use serde_json::{Value, json};

use load::{Conn, Stats, Target, closed_loop};
use procs::{Proc, free_addr, work_dir};

/// Workflows every Runway server under test loads.
const WORKFLOWS: &str = r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: trivial }
spec:
  tool: { description: One step that finishes at once. }
  execution: { ttlAfterFinished: 24h }
  steps: [ { name: s, delay: { duration: 0s } } ]
  result: { content: [ { type: text, text: done } ] }
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: probe }
spec:
  tool: { description: Finishes after a short durable delay (listen latency). }
  execution: { ttlAfterFinished: 24h }
  steps: [ { name: s, delay: { duration: 200ms } } ]
  result: { content: [ { type: text, text: done } ] }
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: park }
spec:
  tool:
    description: Parks in a durable delay of ms milliseconds.
    inputSchema: { type: object, properties: { ms: { type: integer, minimum: 0 } }, required: [ms] }
  execution: { ttlAfterFinished: 24h }
  steps: [ { name: s, delay: { duration: "{{ args.ms }}ms" } } ]
  result: { content: [ { type: text, text: done } ] }
"#;

/// Rounds of the 64-client `tasks/get` windows (both eras and the HTTP limit, back to back):
/// one 4-second window of each moves by more than the targets' margins from run to run.
const GET_ROUNDS: usize = 3;
/// Poll interval of the end-to-end callers (the same for Runway and the rmcp peer).
const POLL: Duration = Duration::from_millis(5);
/// Runs parked in a delay for the restart-recovery scenario.
const RECOVERY_RUNS: usize = 1_000;
/// Their delay: long enough that all are parked before the crash.
const RECOVERY_PARK_MS: u64 = 4_000;
/// Runway's list tool, and the page it is asked for next to the memory scenario's Runs (the
/// console's first page).
const LIST_TOOL: &str = "runway_list_runs";
const LIST_PAGE: u64 = 20;
/// Finished and active Runs in the memory scenario.
const MEMORY_FINISHED: usize = 10_000;
const MEMORY_ACTIVE: usize = 1_000;
/// Runs stored when `runway_list_runs` is measured a second time: a page must not cost more
/// with nine times the Runs.
const LIST_LARGE: usize = 100_000;
/// Upper bound of any wait for Runs to reach a state.
const PATIENCE: Duration = Duration::from_secs(120);

/// Lengths of the measuring windows.
#[derive(Clone, Copy)]
struct Plan {
    warmup: Duration,
    measure: Duration,
    e2e: Duration,
    storage: Duration,
    recovery_runs: usize,
    memory_finished: usize,
    memory_active: usize,
    list_large: usize,
    quick: bool,
}

impl Plan {
    fn full() -> Self {
        Self {
            warmup: Duration::from_millis(500),
            measure: Duration::from_secs(4),
            e2e: Duration::from_secs(5),
            storage: Duration::from_secs(3),
            recovery_runs: RECOVERY_RUNS,
            memory_finished: MEMORY_FINISHED,
            memory_active: MEMORY_ACTIVE,
            list_large: LIST_LARGE,
            quick: false,
        }
    }

    fn quick() -> Self {
        Self {
            warmup: Duration::from_millis(200),
            measure: Duration::from_millis(800),
            e2e: Duration::from_secs(1),
            storage: Duration::from_secs(1),
            recovery_runs: 100,
            memory_finished: 1_000,
            memory_active: 100,
            list_large: 10_000,
            quick: true,
        }
    }
}

fn main() {
    let all: Vec<String> = std::env::args().skip(1).collect();
    // `cargo bench` passes `--bench`; `cargo test --all-targets` (CI) runs this binary without
    // it, and must not start a ten-minute benchmark.
    let benching = all.iter().any(|a| a == "--bench");
    let args: Vec<String> = all.into_iter().filter(|a| a != "--bench").collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let addr = |i: usize| -> SocketAddr {
        args.get(i)
            .and_then(|a| a.parse().ok())
            .expect("an ADDR argument")
    };
    match args.first().map(String::as_str) {
        Some("http-limit") => {
            let body = std::fs::read(args.get(2).expect("a BODY_FILE argument"))
                .expect("the body file is readable");
            rt.block_on(baselines::serve_http_limit(addr(1), body.into()));
        }
        Some("rmcp-peer") => rt.block_on(baselines::serve_rmcp_peer(addr(1))),
        Some("drive") => {
            let what = args.get(2).map(String::as_str).unwrap_or("get");
            let clients = args.get(3).and_then(|a| a.parse().ok()).unwrap_or(16);
            let secs = args.get(4).and_then(|a| a.parse().ok()).unwrap_or(10);
            rt.block_on(drive(addr(1), what, clients, Duration::from_secs(secs)));
        }
        Some("kube") if benching => {
            let mut plan = if args.iter().any(|a| a == "--quick") {
                kube::KubePlan::quick()
            } else {
                kube::KubePlan::full()
            };
            plan.only_e2e = args.iter().any(|a| a == "--e2e-only");
            plan.hold = args.iter().any(|a| a == "--hold");
            plan.only_scale = args.iter().any(|a| a == "--scale-only");
            plan.only_get = args.iter().any(|a| a == "--get-only");
            runway::install_crypto_provider();
            let report = rt.block_on(kube::bench(plan));
            let out = bench_dir().join("kube-report.json");
            std::fs::create_dir_all(bench_dir()).expect("target/bench is writable");
            std::fs::write(
                &out,
                serde_json::to_string_pretty(&report).expect("the report serializes"),
            )
            .expect("target/bench is writable");
            eprintln!("bench: wrote {}", out.display());
        }
        Some("fan-out") if benching => {
            let plan = if args.iter().any(|a| a == "--quick") {
                Plan::quick()
            } else {
                Plan::full()
            };
            runway::install_crypto_provider();
            let work = bench_dir().join("work");
            std::fs::create_dir_all(&work).expect("target/bench is writable");
            let cases = rt.block_on(fanout::bench(&work, plan));
            println!("{}", fanout::table(&cases));
        }
        Some("traces") if benching => {
            let plan = if args.iter().any(|a| a == "--quick") {
                Plan::quick()
            } else {
                Plan::full()
            };
            runway::install_crypto_provider();
            let work = bench_dir().join("work");
            std::fs::create_dir_all(&work).expect("target/bench is writable");
            let cost = rt.block_on(tracing::bench(&work, plan));
            println!("{}", tracing::table(&cost));
        }
        _ if !benching => {
            eprintln!("runway benchmark: run it with `make bench` (cargo bench --bench runway)");
        }
        _ => {
            let plan = if args.iter().any(|a| a == "--quick") {
                Plan::quick()
            } else {
                Plan::full()
            };
            runway::install_crypto_provider();
            rt.block_on(bench(plan));
        }
    }
}

/// Load an already running server (one with the benchmark's `trivial` workflow, or the rmcp
/// peer) with one scenario, for profiling it: `drive ADDR get|get2025|create|e2e|post CLIENTS
/// SECONDS` (`get2025` polls as a 2025-era client in one session; `post` sends a `tasks/get` of no task and reads whatever comes back: the HTTP limit's load).
/// `RUNWAY_BENCH_PATH` and `RUNWAY_BENCH_TOKEN` address a replica of the Kubernetes benchmark
/// held with `--hold`.
async fn drive(addr: SocketAddr, what: &str, clients: usize, measure: Duration) {
    // A replica of the Kubernetes benchmark: its tenant path and a tenant's token.
    let to = Target {
        addr,
        path: std::env::var("RUNWAY_BENCH_PATH").unwrap_or_else(|_| "/mcp".into()),
        token: std::env::var("RUNWAY_BENCH_TOKEN").ok(),
    };
    let op = match what {
        "get" => load::get_op(&one_run(to.clone(), "trivial", json!({})).await.0),
        "create" => load::create_op("trivial"),
        "e2e" => load::run_op("trivial", POLL),
        "post" => load::post_op(load::get("any")),
        "get2025" => {
            let task = one_run(to.clone(), "trivial", json!({})).await.0;
            let mut c = Conn::open(to.clone()).await.expect("a connection");
            let session = load::initialize(&mut c).await.expect("initialize");
            load::checked_op(load::get_2025(&session, &task), |b| {
                match load::status_of(b) {
                    Some("completed") => Ok(()),
                    _ => Err(format!("unexpected answer: {}", String::from_utf8_lossy(b))),
                }
            })
        }
        other => panic!("drive: unknown scenario {other} (get, get2025, create, e2e, post)"),
    };
    let stats = closed_loop(to, clients, Duration::ZERO, measure, op).await;
    println!(
        "{what}: {clients} clients, {}/s, p50 {:.2} ms, p99 {:.2} ms, {} errors",
        rate(stats.per_sec),
        stats.p50_ms,
        stats.p99_ms,
        stats.errors
    );
}

/// Where reports and scratch files go: `target/bench` of the workspace.
fn bench_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/bench")
}

fn step(what: &str) {
    eprintln!("bench: {what}");
}

/// Results of the scenarios on the main Runway server.
#[derive(Default, Serialize)]
struct RunwayMain {
    get: Vec<Stats>,
    create: Vec<Stats>,
    /// `tasks/get` of a 2025-era client (2025-11-25 tasks, sealed session), 64 clients: the
    /// round of `get_rounds` with the median ratio to its HTTP limit.
    get_2025: Stats,
    /// The 64-client `tasks/get` windows of both eras and the HTTP limit, round by round;
    /// `get` and `http` at 64 clients are the round with the median 2026 ratio.
    get_rounds: Vec<GetRound>,
    /// Task-augmented `tools/call` of a 2025-era client, 1 client.
    create_2025: Stats,
    e2e: Vec<Stats>,
    listen: Listen,
    /// Status and spec writes per Run (creation included), from the database.
    writes_per_run: f64,
    /// Size of one completed `tasks/get` answer, bytes.
    get_answer_bytes: usize,
}

/// One round of the 64-client `tasks/get` comparison.
#[derive(Default, Serialize, Clone)]
struct GetRound {
    /// A 2026-07-28 client.
    runway: Stats,
    /// A 2025-era client in one session.
    runway_2025: Stats,
    /// The HTTP limit, serving the same answer's bytes.
    http: Stats,
}

impl GetRound {
    fn ratio_2026(&self) -> f64 {
        ratio(self.runway.per_sec, self.http.per_sec)
    }

    fn ratio_2025(&self) -> f64 {
        ratio(self.runway_2025.per_sec, self.http.per_sec)
    }
}

/// The round whose `key` is the median of all rounds' (the lower of the middle two for an even
/// number).
fn median_round(rounds: &[GetRound], key: fn(&GetRound) -> f64) -> GetRound {
    let mut sorted: Vec<&GetRound> = rounds.iter().collect();
    sorted.sort_by(|a, b| key(a).total_cmp(&key(b)));
    sorted
        .get(sorted.len().saturating_sub(1) / 2)
        .map(|r| (*r).clone())
        .unwrap_or_default()
}

/// Listen notification latency.
#[derive(Default, Serialize, Clone)]
struct Listen {
    clients: usize,
    samples: usize,
    /// Samples dropped because the task finished before the stream was open.
    skipped: usize,
    p50_ms: f64,
    p99_ms: f64,
    mean_ms: f64,
}

#[derive(Default, Serialize)]
struct Peer {
    get: Vec<Stats>,
    /// Each from a fresh peer: `TaskManager` keeps finished tasks for their TTL (5 minutes by
    /// default) and sweeps all of them on every call, so it slows down as it fills.
    e2e: Vec<Stats>,
    /// 64 callers again, on the peer still holding the tasks of the previous window.
    e2e_filled: Stats,
    /// Tasks it held at the start of that window, at least.
    e2e_filled_tasks: u64,
}

#[derive(Default, Serialize)]
struct Recovery {
    runs: usize,
    /// Process start until the endpoint answers.
    startup_s: f64,
    /// Process start until every Run is `Succeeded`.
    all_succeeded_s: f64,
}

#[derive(Default, Serialize)]
struct Memory {
    finished: usize,
    active: usize,
    idle_rss_mib: f64,
    rss_mib: f64,
    peak_rss_mib: f64,
    /// (rss − idle) / Runs.
    bytes_per_run: f64,
    db_mib: f64,
    /// `runway_list_runs` for a page of the newest, one client, with every Run above stored.
    list: Stats,
    /// Runs stored for the second measurement.
    large: usize,
    /// Resident memory with `large` Runs stored, and (rss − idle) / `large`: the cost of a
    /// Run once what the server holds whatever the number of Runs (the watch history, the
    /// allocator's free pages) is spread over many.
    large_rss_mib: f64,
    large_bytes_per_run: f64,
    /// The same with `large` Runs stored.
    list_large: Stats,
}

async fn bench(plan: Plan) {
    let root = bench_dir();
    let work = root.join("work");
    std::fs::create_dir_all(&work).expect("target/bench is writable");
    let started = Instant::now();

    step("tasks/get, tools/call, end to end, listen: runway and the baselines, interleaved");
    let Compared {
        runway: runway_main,
        http,
        peer,
        storage: samples,
    } = compare(&work, plan).await;
    let storage = baselines::Storage::mean(&samples);

    step("runway: restart recovery");
    let recovery = recovery(&work, plan).await;

    step("runway: resident memory");
    let memory = memory(&work, plan).await;

    step("runway: fan-out (forEach items) against one-step Runs");
    let fan_out = fanout::bench(&work, plan).await;

    step("runway: traces off and on");
    let traces = tracing::bench(&work, plan).await;

    let report = Report {
        storage,
        storage_samples: samples.clone(),
        http,
        peer,
        runway: runway_main,
        recovery,
        memory,
        fan_out,
        traces,
        seconds: started.elapsed().as_secs_f64(),
    };
    let (table, targets) = report.render();
    println!("{table}");
    let json = json!({
        "machine": machine(),
        "plan": {"warmupS": plan.warmup.as_secs_f64(), "measureS": plan.measure.as_secs_f64(),
                 "e2eS": plan.e2e.as_secs_f64(), "pollMs": POLL.as_millis() as u64},
        "baselines": {"httpLimit": report.http, "rmcpPeer": report.peer,
                      "storageLimit": report.storage, "storageLimitSamples": samples},
        "runway": report.runway,
        "recovery": report.recovery,
        "memory": report.memory,
        "fanOut": report.fan_out,
        "traces": report.traces,
        "targets": targets,
        "seconds": report.seconds,
    });
    let out = root.join("report.json");
    std::fs::write(
        &out,
        serde_json::to_string_pretty(&json).expect("the report serializes"),
    )
    .expect("target/bench is writable");
    eprintln!("bench: wrote {}", out.display());
}

fn machine() -> Value {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|v| v.trim_start_matches([' ', '\t', ':']).to_owned())
        })
        .unwrap_or_default();
    json!({
        "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "cpu": cpu,
        "os": std::env::consts::OS,
    })
}

/// Start `runway serve` in a fresh `work/name` and wait for it.
async fn start_runway(work: &Path, name: &str) -> (Proc, PathBuf) {
    let dir = work_dir(work, name);
    std::fs::write(dir.join("workflows/bench.yaml"), WORKFLOWS).expect("workflows written");
    let addr = free_addr();
    let mut p = procs::runway(&dir, addr, "runway.log");
    p.ready(Some("/healthz")).await;
    (p, dir)
}

/// Create a task and poll it to `completed`; the task id and the final answer.
async fn one_run(to: impl Into<Target>, tool: &str, args: Value) -> (String, bytes::Bytes) {
    let mut c = Conn::open(to).await.expect("a connection");
    let id = load::task_id(
        &c.send(&load::call(tool, args))
            .await
            .expect("tools/call answers"),
    )
    .expect("a task");
    let get = load::get(&id);
    let start = Instant::now();
    loop {
        let b = c.send(&get).await.expect("tasks/get answers");
        if load::status_of(&b).is_some_and(load::terminal) {
            assert_eq!(load::status_of(&b), Some("completed"), "{id} completed");
            return (id, b);
        }
        assert!(start.elapsed() < PATIENCE, "{id} never completed");
        tokio::time::sleep(POLL).await;
    }
}

/// Let a server finish the work queued by the previous scenario: one more run, then a pause.
async fn settle(addr: SocketAddr) {
    one_run(addr, "trivial", json!({})).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
}

/// The storage limit, measured next to the Runway scenarios that write (commit latency on a
/// shared virtual disk moves several-fold with other I/O on the machine).
async fn storage_limit(work: &Path, plan: Plan) -> baselines::Storage {
    let dir = work.to_owned();
    let measure = plan.storage;
    tokio::task::spawn_blocking(move || baselines::sqlite_commits(&dir, 2048, measure))
        .await
        .expect("the storage baseline ran")
}

/// What the interleaved comparison measured.
struct Compared {
    runway: RunwayMain,
    http: Vec<Stats>,
    peer: Peer,
    storage: Vec<baselines::Storage>,
}

/// Runway, the HTTP limit and the rmcp peer run side by side (an idle server costs nothing),
/// and each scenario is measured on each of them back to back, so a change in what else the
/// machine is doing moves both sides of a ratio. The storage limit is sampled before the first
/// and after the last scenario that writes (commit latency on a shared virtual disk moves
/// several-fold with other I/O).
async fn compare(work: &Path, plan: Plan) -> Compared {
    let (mut rw, dir) = start_runway(work, "runway").await;
    let (rw_task, body) = one_run(rw.addr, "trivial", json!({})).await;
    let body_file = work.join("get-answer.json");
    std::fs::write(&body_file, &body).expect("the body file is writable");
    let mut http = procs::baseline(
        "http-limit",
        free_addr(),
        work,
        &[body_file.to_str().expect("a UTF-8 path")],
    );
    http.ready(None).await;
    let mut peer = start_peer(work).await;
    let (peer_task, _) = one_run(peer.addr, "trivial", json!({})).await;

    let mut out = Compared {
        runway: RunwayMain {
            get_answer_bytes: body.len(),
            ..Default::default()
        },
        http: Vec::new(),
        peer: Peer::default(),
        storage: Vec::new(),
    };
    for n in [1, 16] {
        step(&format!("tasks/get, {n} clients"));
        out.runway.get.push(
            closed_loop(
                rw.addr,
                n,
                plan.warmup,
                plan.measure,
                load::get_op(&rw_task),
            )
            .await,
        );
        out.http.push(
            closed_loop(
                http.addr,
                n,
                plan.warmup,
                plan.measure,
                load::post_op(load::get("any")),
            )
            .await,
        );
        out.peer.get.push(
            closed_loop(
                peer.addr,
                n,
                plan.warmup,
                plan.measure,
                load::get_op(&peer_task),
            )
            .await,
        );
    }
    let session = {
        let mut c = Conn::open(rw.addr).await.expect("a connection");
        load::initialize(&mut c).await.expect("initialize")
    };
    out.runway.get_rounds = get_rounds(rw.addr, http.addr, &session, &rw_task, plan).await;
    http.kill();
    let middle = median_round(&out.runway.get_rounds, GetRound::ratio_2026);
    out.runway.get.push(middle.runway);
    out.http.push(middle.http);
    out.runway.get_2025 = median_round(&out.runway.get_rounds, GetRound::ratio_2025).runway_2025;
    step("tasks/get, 64 clients, rmcp-peer");
    out.peer.get.push(
        closed_loop(
            peer.addr,
            64,
            plan.warmup,
            plan.measure,
            load::get_op(&peer_task),
        )
        .await,
    );
    out.storage.push(storage_limit(work, plan).await);
    for n in [1, 16] {
        step(&format!("tools/call, {n} clients"));
        let op = load::create_op("trivial");
        out.runway
            .create
            .push(closed_loop(rw.addr, n, plan.warmup, plan.measure, op).await);
        settle(rw.addr).await;
    }
    step("tools/call of a 2025-era client, 1 client");
    out.runway.create_2025 = closed_loop(
        rw.addr,
        1,
        plan.warmup,
        plan.measure,
        load::checked_op(load::call_2025(&session, "trivial"), |b| {
            load::task_id_2025(b).map(|_| ())
        }),
    )
    .await;
    settle(rw.addr).await;
    for n in [16, 64] {
        step(&format!("end to end, {n} callers"));
        out.runway.e2e.push(
            closed_loop(
                rw.addr,
                n,
                plan.warmup,
                plan.e2e,
                load::run_op("trivial", POLL),
            )
            .await,
        );
        settle(rw.addr).await;
        peer.kill();
        peer = start_peer(work).await;
        out.peer.e2e.push(
            closed_loop(
                peer.addr,
                n,
                plan.warmup,
                plan.e2e,
                load::run_op("trivial", POLL),
            )
            .await,
        );
    }
    step("end to end, 64 callers, on the filled rmcp peer");
    // A lower bound: the runs of that window's warmup are held too.
    out.peer.e2e_filled_tasks = at(&out.peer.e2e, 64).ops;
    out.peer.e2e_filled = closed_loop(
        peer.addr,
        64,
        plan.warmup,
        plan.e2e,
        load::run_op("trivial", POLL),
    )
    .await;
    peer.kill();
    step("listen");
    out.runway.listen = listen_latency(rw.addr, 16, plan.warmup + plan.e2e).await;
    out.storage.push(storage_limit(work, plan).await);
    rw.kill();
    out.runway.writes_per_run = writes_per_run(&dir.join("runs.db"));
    out
}

/// The 64-client `tasks/get` windows in [`GET_ROUNDS`] rounds: a 2026-07-28 client, a
/// 2025-era client in `session` and the HTTP limit, each round starting with the next of the
/// three, so that none always follows the same window.
async fn get_rounds(
    runway: SocketAddr,
    http: SocketAddr,
    session: &Arc<str>,
    task: &str,
    plan: Plan,
) -> Vec<GetRound> {
    let completed = |b: &[u8]| match load::status_of(b) {
        Some("completed") => Ok(()),
        _ => Err(format!("unexpected answer: {}", String::from_utf8_lossy(b))),
    };
    let window = |addr, op| closed_loop(addr, 64, plan.warmup, plan.measure, op);
    let mut rounds = Vec::new();
    for round in 0..GET_ROUNDS {
        step(&format!("tasks/get, 64 clients, round {}", round + 1));
        let mut r = GetRound::default();
        for k in 0..3 {
            match (round + k) % 3 {
                0 => r.runway = window(runway, load::get_op(task)).await,
                1 => {
                    let op = load::checked_op(load::get_2025(session, task), completed);
                    r.runway_2025 = window(runway, op).await;
                }
                _ => r.http = window(http, load::post_op(load::get("any"))).await,
            }
        }
        rounds.push(r);
    }
    rounds
}

/// A fresh rmcp peer.
async fn start_peer(work: &Path) -> Proc {
    let mut peer = procs::baseline("rmcp-peer", free_addr(), work, &[]);
    peer.ready(None).await;
    peer
}

/// Resource versions handed out per Run still in the database (every Run is kept: TTL 24 h).
fn writes_per_run(db: &Path) -> f64 {
    let Ok(conn) = rusqlite::Connection::open(db) else {
        return 0.0;
    };
    let rv: i64 = conn
        .query_row("SELECT v FROM kv WHERE k = 'rv'", [], |r| r.get(0))
        .unwrap_or(0);
    let runs: i64 = conn
        .query_row("SELECT count(*) FROM runs", [], |r| r.get(0))
        .unwrap_or(0);
    if runs == 0 {
        0.0
    } else {
        rv as f64 / runs as f64
    }
}

/// `clients` loops of: create a `probe` task (200 ms delay), follow it on
/// `subscriptions/listen`, and take the time from the Run's last status change
/// (`lastUpdatedAt`, written by the controller just before it commits) to the moment the
/// `completed` notification arrives. Both clocks are this machine's wall clock.
async fn listen_latency(to: impl Into<Target>, clients: usize, window: Duration) -> Listen {
    let to: Target = to.into();
    let until = Instant::now() + window;
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..clients {
        let to = to.clone();
        workers.spawn(async move {
            let mut lat = Vec::new();
            let mut skipped = 0;
            let mut calls = Conn::open(to.clone()).await.expect("a connection");
            let mut stream = Conn::open(to).await.expect("a connection");
            let create = load::call("probe", json!({}));
            while Instant::now() < until {
                let id =
                    load::task_id(&calls.send(&create).await.expect("tools/call")).expect("a task");
                let resp = stream
                    .start(&load::listen(std::slice::from_ref(&id)))
                    .await
                    .expect("listen answers");
                let mut body = resp.into_body();
                let mut text = String::new();
                let mut first = true;
                let deadline = Instant::now() + PATIENCE;
                while let Ok(Some(frame)) =
                    tokio::time::timeout_at(deadline.into(), body.frame()).await
                {
                    let Ok(frame) = frame else { break };
                    let Some(chunk) = frame.data_ref() else {
                        continue;
                    };
                    let received = jiff::Timestamp::now();
                    text.push_str(&String::from_utf8_lossy(chunk));
                    while let Some(end) = text.find("\n\n") {
                        let event: String = text.drain(..end + 2).collect();
                        for m in load::sse_messages(&event) {
                            if m["method"] != "notifications/tasks" {
                                continue;
                            }
                            let t = &m["params"];
                            if t["status"] == "completed" {
                                if first {
                                    skipped += 1;
                                } else if let Some(at) = t["lastUpdatedAt"]
                                    .as_str()
                                    .and_then(|s| s.parse::<jiff::Timestamp>().ok())
                                {
                                    let d = received.duration_since(at);
                                    lat.push(d.as_micros().max(0) as u64);
                                }
                            }
                            first = false;
                        }
                    }
                }
            }
            (lat, skipped)
        });
    }
    let mut all = Vec::new();
    let mut skipped = 0;
    while let Some(r) = workers.join_next().await {
        let (lat, s) = r.expect("a listen worker panicked");
        all.extend(lat);
        skipped += s;
    }
    let samples = all.len();
    let (p50_ms, p99_ms, mean_ms) = load::percentiles(all);
    Listen {
        clients,
        samples,
        skipped,
        p50_ms,
        p99_ms,
        mean_ms,
    }
}

/// Create `n` tasks of `tool` over `clients` connections; their ids.
async fn create_many(
    addr: SocketAddr,
    tool: &'static str,
    args: Value,
    n: usize,
    clients: usize,
) -> Vec<String> {
    let next = Arc::new(AtomicUsize::new(0));
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..clients {
        let next = next.clone();
        let rpc = load::call(tool, args.clone());
        workers.spawn(async move {
            let mut c = Conn::open(addr).await.expect("a connection");
            let mut ids = Vec::new();
            while next.fetch_add(1, Ordering::Relaxed) < n {
                let b = c.send(&rpc).await.expect("tools/call answers");
                ids.push(load::task_id(&b).expect("a task"));
            }
            ids
        });
    }
    let mut all = Vec::with_capacity(n);
    while let Some(r) = workers.join_next().await {
        all.extend(r.expect("a create worker panicked"));
    }
    all
}

/// Poll every task over `clients` connections until `ok` holds for its `tasks/get` answer.
async fn await_all(addr: SocketAddr, ids: &[String], clients: usize, ok: fn(&[u8]) -> bool) {
    let queue = Arc::new(Mutex::new(ids.iter().cloned().collect::<VecDeque<_>>()));
    let deadline = Instant::now() + PATIENCE;
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..clients {
        let queue = queue.clone();
        workers.spawn(async move {
            let mut c = Conn::open(addr).await.expect("a connection");
            loop {
                let Some(id) = queue.lock().expect("queue lock").pop_front() else {
                    return;
                };
                let b = c.send(&load::get(&id)).await.expect("tasks/get answers");
                if !ok(&b) {
                    assert!(Instant::now() < deadline, "{id} never got there");
                    queue.lock().expect("queue lock").push_back(id);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        });
    }
    while let Some(r) = workers.join_next().await {
        r.expect("a poll worker panicked");
    }
}

fn completed(b: &[u8]) -> bool {
    load::status_of(b) == Some("completed")
}

/// A parked Run has started its delay step: the step's wake time is in its status.
fn parked(b: &[u8]) -> bool {
    load::status_of(b) == Some("working") && b.windows(15).any(|w| w == b"\"statusMessage\"")
}

/// Most task ids one `subscriptions/listen` follows (docs/mcp.md).
const LISTEN_TASK_IDS: usize = 256;

/// The tasks of `ids` that one `subscriptions/listen` saw complete within [`PATIENCE`].
async fn completions(addr: SocketAddr, ids: Vec<String>) -> HashSet<String> {
    let mut c = Conn::open(addr).await.expect("a connection");
    let resp = c.start(&load::listen(&ids)).await.expect("listen answers");
    let mut body = resp.into_body();
    let mut done: HashSet<String> = HashSet::new();
    let mut text = String::new();
    let deadline = Instant::now() + PATIENCE;
    while done.len() < ids.len() {
        let Ok(Some(Ok(frame))) = tokio::time::timeout_at(deadline.into(), body.frame()).await
        else {
            break;
        };
        let Some(chunk) = frame.data_ref() else {
            continue;
        };
        text.push_str(&String::from_utf8_lossy(chunk));
        while let Some(end) = text.find("\n\n") {
            let event: String = text.drain(..end + 2).collect();
            for m in load::sse_messages(&event) {
                if m["method"] == "notifications/tasks" && m["params"]["status"] == "completed" {
                    done.insert(
                        m["params"]["taskId"]
                            .as_str()
                            .unwrap_or_default()
                            .to_owned(),
                    );
                }
            }
        }
    }
    done
}

async fn recovery(work: &Path, plan: Plan) -> Recovery {
    let (mut p, dir) = start_runway(work, "recovery").await;
    let addr = p.addr;
    let n = plan.recovery_runs;
    let ids = create_many(addr, "park", json!({"ms": RECOVERY_PARK_MS}), n, 16).await;
    await_all(addr, &ids, 16, parked).await;
    // Every wake time is now fixed and at most RECOVERY_PARK_MS away.
    let all_due = Instant::now() + Duration::from_millis(RECOVERY_PARK_MS + 250);
    p.kill();
    tokio::time::sleep_until(all_due.into()).await;

    // Restart on the same database with every wake time in the past.
    let addr = free_addr();
    let t0 = Instant::now();
    let mut p = procs::runway(&dir, addr, "runway-restarted.log");
    let startup = p.ready(Some("/healthz")).await;
    // One stream per LISTEN_TASK_IDS tasks (the most one `subscriptions/listen` follows).
    let mut streams = tokio::task::JoinSet::new();
    for chunk in ids.chunks(LISTEN_TASK_IDS) {
        streams.spawn(completions(addr, chunk.to_vec()));
    }
    let mut done: HashSet<String> = HashSet::new();
    while let Some(r) = streams.join_next().await {
        done.extend(r.expect("a listen stream panicked"));
    }
    let all = t0.elapsed();
    assert_eq!(
        done.len(),
        ids.len(),
        "every parked Run completed after the restart"
    );
    p.kill();
    Recovery {
        runs: n,
        startup_s: startup.as_secs_f64(),
        all_succeeded_s: all.as_secs_f64(),
    }
}

async fn memory(work: &Path, plan: Plan) -> Memory {
    let (mut p, dir) = start_runway(work, "memory").await;
    let addr = p.addr;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (idle, _) = p.memory();
    let finished = create_many(addr, "trivial", json!({}), plan.memory_finished, 64).await;
    await_all(addr, &finished, 16, completed).await;
    let active = create_many(
        addr,
        "park",
        json!({"ms": 3_600_000}),
        plan.memory_active,
        16,
    )
    .await;
    await_all(addr, &active, 16, parked).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (rss, peak) = p.memory();
    let page = load::call(LIST_TOOL, json!({"limit": LIST_PAGE}));
    let op = load::listing_op(page, "runs", LIST_PAGE as usize);
    let list = closed_loop(addr, 1, plan.warmup, plan.measure, op.clone()).await;
    let stored = finished.len() + active.len();
    let more = create_many(
        addr,
        "trivial",
        json!({}),
        plan.list_large.saturating_sub(stored),
        64,
    )
    .await;
    await_all(addr, &more, 16, completed).await;
    // The same pause as before the page at 11,000 Runs: both pages are read from a server
    // at rest, not from one still settling after the burst that stored the Runs.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (large_rss, _) = p.memory();
    let list_large = closed_loop(addr, 1, plan.warmup, plan.measure, op).await;
    p.kill();
    let db: u64 = ["runs.db", "runs.db-wal"]
        .iter()
        .filter_map(|f| std::fs::metadata(dir.join(f)).ok())
        .map(|m| m.len())
        .sum();
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    let runs = (finished.len() + active.len()) as f64;
    let large = stored + more.len();
    Memory {
        finished: finished.len(),
        active: active.len(),
        idle_rss_mib: mib(idle),
        rss_mib: mib(rss),
        peak_rss_mib: mib(peak),
        bytes_per_run: rss.saturating_sub(idle) as f64 / runs,
        db_mib: mib(db),
        list,
        large,
        large_rss_mib: mib(large_rss),
        large_bytes_per_run: large_rss.saturating_sub(idle) as f64 / large as f64,
        list_large,
    }
}

struct Report {
    storage: baselines::Storage,
    storage_samples: Vec<baselines::Storage>,
    http: Vec<Stats>,
    peer: Peer,
    runway: RunwayMain,
    recovery: Recovery,
    memory: Memory,
    fan_out: Vec<fanout::Case>,
    traces: tracing::Cost,
    seconds: f64,
}

fn rate(v: f64) -> String {
    let v = v.round() as u64;
    let s = v.to_string();
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

fn at(stats: &[Stats], clients: usize) -> Stats {
    stats
        .iter()
        .find(|s| s.clients == clients)
        .cloned()
        .unwrap_or_default()
}

fn ratio(a: f64, b: f64) -> f64 {
    if b == 0.0 { 0.0 } else { a / b }
}

impl Report {
    /// The table (Markdown, so it pastes into docs/performance.md) and the targets.
    fn render(&self) -> (String, Value) {
        let mut rows: Vec<[String; 6]> = Vec::new();
        let mut row = |s: &str, c: String, v: String, p50: String, p99: String, vs: String| {
            rows.push([s.to_owned(), c, v, p50, p99, vs]);
        };
        let ms = |v: f64| format!("{v:.2}");
        for n in [1, 16, 64] {
            let r = at(&self.runway.get, n);
            let h = at(&self.http, n);
            let p = at(&self.peer.get, n);
            row(
                "tasks/get",
                n.to_string(),
                format!("{}/s", rate(r.per_sec)),
                ms(r.p50_ms),
                ms(r.p99_ms),
                format!(
                    "{:.2}× http-limit ({}/s), {:.2}× rmcp-peer ({}/s)",
                    ratio(r.per_sec, h.per_sec),
                    rate(h.per_sec),
                    ratio(r.per_sec, p.per_sec),
                    rate(p.per_sec)
                ),
            );
        }
        for n in [1, 16] {
            let r = at(&self.runway.create, n);
            row(
                "tools/call → CreateTaskResult",
                n.to_string(),
                format!("{}/s", rate(r.per_sec)),
                ms(r.p50_ms),
                ms(r.p99_ms),
                format!(
                    "p50 {:.2}× one SQLite commit ({} ms), {:.2}× commit + one tasks/get ({} ms); {:.2}× SQLite commits/s",
                    ratio(r.p50_ms, self.storage.p50_ms),
                    ms(self.storage.p50_ms),
                    ratio(
                        r.p50_ms,
                        self.storage.p50_ms + at(&self.runway.get, 1).p50_ms
                    ),
                    ms(self.storage.p50_ms + at(&self.runway.get, 1).p50_ms),
                    ratio(r.per_sec, self.storage.commits_per_sec)
                ),
            );
        }
        let middle = median_round(&self.runway.get_rounds, GetRound::ratio_2025);
        let r = &middle.runway_2025;
        row(
            "tasks/get, 2025-11-25 client",
            "64".into(),
            format!("{}/s", rate(r.per_sec)),
            ms(r.p50_ms),
            ms(r.p99_ms),
            format!(
                "{:.2}× the 2026 tasks/get, {:.2}× http-limit ({}/s) of its round",
                ratio(r.per_sec, middle.runway.per_sec),
                middle.ratio_2025(),
                rate(middle.http.per_sec)
            ),
        );
        let r = &self.runway.create_2025;
        let c = at(&self.runway.create, 1);
        row(
            "tools/call → task, 2025-11-25 client",
            "1".into(),
            format!("{}/s", rate(r.per_sec)),
            ms(r.p50_ms),
            ms(r.p99_ms),
            format!(
                "p50 {:.2}× the 2026 tools/call ({} ms)",
                ratio(r.p50_ms, c.p50_ms),
                ms(c.p50_ms)
            ),
        );
        for n in [16, 64] {
            let r = at(&self.runway.e2e, n);
            let p = at(&self.peer.e2e, n);
            let filled = if n == 64 {
                format!(
                    "; {:.2}× the rmcp-peer holding over {} finished tasks ({} runs/s)",
                    ratio(r.per_sec, self.peer.e2e_filled.per_sec),
                    rate(self.peer.e2e_filled_tasks as f64),
                    rate(self.peer.e2e_filled.per_sec)
                )
            } else {
                String::new()
            };
            row(
                "end-to-end trivial runs (poll)",
                n.to_string(),
                format!("{} runs/s", rate(r.per_sec)),
                ms(r.p50_ms),
                ms(r.p99_ms),
                format!(
                    "{:.2}× fresh rmcp-peer ({} runs/s){filled}; {:.2}× SQLite commits/s",
                    ratio(r.per_sec, p.per_sec),
                    rate(p.per_sec),
                    ratio(r.per_sec, self.storage.commits_per_sec)
                ),
            );
        }
        let l = &self.runway.listen;
        row(
            "listen: status write → notification",
            l.clients.to_string(),
            format!("{} samples", l.samples),
            ms(l.p50_ms),
            ms(l.p99_ms),
            format!(
                "p50 {:.2}× one SQLite commit",
                ratio(l.p50_ms, self.storage.p50_ms)
            ),
        );
        row(
            "restart recovery (kill -9)",
            "—".into(),
            format!("{:.2} s", self.recovery.all_succeeded_s),
            "—".into(),
            "—".into(),
            format!(
                "{} parked Runs; endpoint up after {:.2} s",
                self.recovery.runs, self.recovery.startup_s
            ),
        );
        let m = &self.memory;
        row(
            "resident memory",
            "—".into(),
            format!("{:.1} MiB", m.rss_mib),
            "—".into(),
            "—".into(),
            format!(
                "{} finished + {} active Runs; idle {:.1} MiB; {:.1} KiB/Run; db {:.1} MiB",
                m.finished,
                m.active,
                m.idle_rss_mib,
                m.bytes_per_run / 1024.0,
                m.db_mib
            ),
        );
        row(
            "resident memory",
            "—".into(),
            format!("{:.1} MiB", m.large_rss_mib),
            "—".into(),
            "—".into(),
            format!(
                "{} Runs stored; {:.1} KiB/Run",
                m.large,
                m.large_bytes_per_run / 1024.0
            ),
        );
        row(
            "runway_list_runs, newest 20",
            "1".into(),
            format!("{}/s", rate(m.list.per_sec)),
            ms(m.list.p50_ms),
            ms(m.list.p99_ms),
            format!("{} Runs stored", rate((m.finished + m.active) as f64)),
        );
        row(
            "runway_list_runs, newest 20",
            "1".into(),
            format!("{}/s", rate(m.list_large.per_sec)),
            ms(m.list_large.p50_ms),
            ms(m.list_large.p99_ms),
            format!(
                "{} Runs stored; p50 {:.2}× that with {}",
                rate(m.large as f64),
                ratio(m.list_large.p50_ms, m.list.p50_ms),
                rate((m.finished + m.active) as f64)
            ),
        );
        let mut t = String::new();
        t.push_str("| Scenario | Clients | Runway | p50 ms | p99 ms | Baseline ratio |\n");
        t.push_str("|---|---|---|---|---|---|\n");
        for r in &rows {
            t.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} |\n",
                r[0], r[1], r[2], r[3], r[4], r[5]
            ));
        }
        t.push_str(&format!(
            "\nBaselines: SQLite {} commits/s (mean of {}; p50 {} ms, p99 {} ms, {} B rows, WAL + synchronous=FULL); \
             Runway writes {:.2} resource versions per trivial Run; a tasks/get answer is {} B.\n",
            rate(self.storage.commits_per_sec),
            self.storage_samples
                .iter()
                .map(|s| format!("{}/s", rate(s.commits_per_sec)))
                .collect::<Vec<_>>()
                .join(" and "),
            ms(self.storage.p50_ms),
            ms(self.storage.p99_ms),
            self.storage.row_bytes,
            self.runway.writes_per_run,
            self.runway.get_answer_bytes,
        ));
        t.push_str("\n| tasks/get, 64 clients | 2026-07-28 | 2025-11-25 client | HTTP limit |\n");
        t.push_str("|---|---|---|---|\n");
        for (i, r) in self.runway.get_rounds.iter().enumerate() {
            t.push_str(&format!(
                "| round {} | {}/s ({:.2}×) | {}/s ({:.2}×) | {}/s |\n",
                i + 1,
                rate(r.runway.per_sec),
                r.ratio_2026(),
                rate(r.runway_2025.per_sec),
                r.ratio_2025(),
                rate(r.http.per_sec)
            ));
        }
        // The 64-client windows of `get` and `http` are copies of a round's.
        let single = |s: &&Stats| s.clients != 64;
        let errors: u64 = self
            .runway
            .get
            .iter()
            .filter(single)
            .chain(self.http.iter().filter(single))
            .chain(
                self.runway
                    .get_rounds
                    .iter()
                    .flat_map(|r| [&r.runway, &r.runway_2025, &r.http]),
            )
            .chain(&self.runway.create)
            .chain(&self.runway.e2e)
            .chain(&self.peer.get)
            .chain(&self.peer.e2e)
            .chain([&self.peer.e2e_filled])
            .map(|s| s.errors)
            .sum();
        if errors > 0 {
            t.push_str(&format!(
                "WARNING: {errors} load clients stopped on an error (see stderr).\n"
            ));
        }

        t.push('\n');
        t.push_str(&fanout::table(&self.fan_out));
        t.push('\n');
        t.push_str(&tracing::table(&self.traces));

        let get64 = at(&self.runway.get, 64);
        let e2e_best = self
            .runway
            .e2e
            .iter()
            .map(|s| s.per_sec)
            .fold(0.0, f64::max);
        let median = |key: fn(&GetRound) -> f64| key(&median_round(&self.runway.get_rounds, key));
        // The floor of a durable create at one client: one synced commit, one round trip.
        let create_floor = self.storage.p50_ms + at(&self.runway.get, 1).p50_ms;
        let fan_rate = |items: usize, parallelism: usize| {
            self.fan_out
                .iter()
                .find(|c| {
                    c.items == items && c.parallelism == parallelism && c.name.starts_with("1 Run")
                })
                .map_or(0.0, |c| c.items_per_sec)
        };
        let targets = vec![
            target(
                "tasks/get at 64 clients ≥ 1.5× rmcp peer",
                ratio(get64.per_sec, at(&self.peer.get, 64).per_sec),
                |v| v >= 1.5,
                "×",
            ),
            target(
                "tasks/get at 64 clients ≥ 0.75× HTTP limit (2026-07-28; median of the rounds)",
                median(GetRound::ratio_2026),
                |v| v >= 0.75,
                "×",
            ),
            target(
                "tasks/get at 64 clients ≥ 0.75× HTTP limit (2025-11-25 client; median of the rounds)",
                median(GetRound::ratio_2025),
                |v| v >= 0.75,
                "×",
            ),
            target(
                "tools/call → CreateTaskResult p50 ≤ 1.5× (one SQLite commit + one tasks/get), 1 client",
                ratio(at(&self.runway.create, 1).p50_ms, create_floor),
                |v| v <= 1.5,
                "×",
            ),
            target(
                "end-to-end trivial runs ≥ 1.0× SQLite commits/s (best of 16, 64 callers)",
                ratio(e2e_best, self.storage.commits_per_sec),
                |v| v >= 1.0,
                "×",
            ),
            target(
                "restart recovery of 1,000 Runs ≤ 10 s",
                self.recovery.all_succeeded_s,
                |v| v <= 10.0 && self.recovery.runs >= RECOVERY_RUNS,
                " s",
            ),
            target(
                "resident memory ≤ 8 KiB per Run",
                self.memory.bytes_per_run / 1024.0,
                |v| v <= 8.0 && v > 0.0,
                " KiB",
            ),
            target(
                "fan-out: 1,000 items ≥ 0.8× the per-item rate of 100 (100 at once)",
                ratio(fan_rate(1000, 100), fan_rate(100, 100)),
                |v| v >= 0.8,
                "×",
            ),
            target(
                "tools/call with traces exported ≥ 0.9× the throughput without (1 client)",
                ratio(self.traces.call_on.per_sec, self.traces.call_off.per_sec),
                |v| v >= 0.9,
                "×",
            ),
            target(
                "runway_list_runs newest 20 p50 ≤ 0.5 ms at 11,000 and at 100,000 Runs",
                self.memory.list.p50_ms.max(self.memory.list_large.p50_ms),
                |v| v <= 0.5 && self.memory.list.ops > 0 && self.memory.list_large.ops > 0,
                " ms",
            ),
            target(
                "listen notification p99 ≤ 50 ms",
                self.runway.listen.p99_ms,
                |v| v <= 50.0 && self.runway.listen.samples > 0,
                " ms",
            ),
        ];
        t.push_str("\n| Target | Measured | Met |\n|---|---|---|\n");
        for x in &targets {
            t.push_str(&format!(
                "| {} | {} | {} |\n",
                x["target"].as_str().unwrap_or_default(),
                x["display"].as_str().unwrap_or_default(),
                if x["met"] == true { "yes" } else { "**no**" }
            ));
        }
        t.push_str(&format!("\nTotal time {:.0} s.\n", self.seconds));
        (t, Value::Array(targets))
    }
}

fn target(name: &str, value: f64, ok: impl Fn(f64) -> bool, unit: &str) -> Value {
    json!({
        "target": name,
        "value": value,
        "display": format!("{value:.2}{unit}"),
        "met": ok(value),
    })
}
