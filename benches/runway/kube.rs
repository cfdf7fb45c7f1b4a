//! `make bench-kube`: the same load generator against `runway operator` replicas on a real
//! control plane (etcd, kube-apiserver, kube-controller-manager; the e2e tier's `cluster.rs`),
//! installed as the chart installs it — CRDs, RBAC, the admission policy, the operator as the
//! chart's ServiceAccount, tenants as static-token users — with release builds. Baselines are
//! measured in the same run: what the API server does for bare Run creates and status writes,
//! and the embedded store serving the same `tasks/get`.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use kube::api::{Api, Patch, PatchParams, PostParams};
use runway::api::Run;
use serde::Serialize;
use serde_json::{Value, json};

use crate::cluster::{self, Cluster, token};
use crate::load::{self, Stats, Target, closed_loop, closed_loop_over};
use crate::procs::{self, Proc, free_addr};
use crate::usage;
use crate::{Listen, POLL, WORKFLOWS, listen_latency, one_run, step};

/// Client counts of the API server's create + status-write baseline.
const BASELINE_CLIENTS: [usize; 2] = [16, 64];

/// The Runs' shards when the work is split (divisible by 1, 2 and 3 replicas).
const SCALE_SHARDS: u32 = 6;
/// Workers per replica in the scaling scenario (half of them may work on one namespace).
const SCALE_WORKERS: usize = 4;
/// Callers in the scaling scenario.
const SCALE_CALLERS: usize = 16;
/// How long the scaling scenario's upstream takes to answer.
const UPSTREAM_DELAY: Duration = Duration::from_millis(50);
/// Rounds of the `tasks/get` comparison: a window on the replica, then one on `runway serve`.
const GET_ROUNDS: usize = 3;
/// Upper bound of any wait for the cluster.
const PATIENCE: Duration = Duration::from_secs(180);

/// Sizes and windows of one kube benchmark run.
#[derive(Clone, Copy, Serialize)]
pub struct KubePlan {
    warmup: Duration,
    measure: Duration,
    e2e: Duration,
    /// Window of each scaling measurement.
    scale: Duration,
    /// Run counts at which the cache's memory is measured.
    memory_runs: [usize; 2],
    /// Only the API server's baseline and the end-to-end windows (`--e2e-only`).
    pub only_e2e: bool,
    /// After the end-to-end windows, keep the cluster running until the benchmark is killed,
    /// to profile it by hand (`--hold`).
    pub hold: bool,
    /// Only the scaling scenario (`--scale-only`).
    pub only_scale: bool,
    /// Only the `tasks/get` comparison of the cache and the embedded store (`--get-only`): the
    /// row an A/B of two builds (`RUNWAY_BENCH_BIN`) on one control plane reads in minutes.
    pub only_get: bool,
}

impl KubePlan {
    /// Every scenario at full size.
    pub fn full() -> Self {
        Self {
            warmup: Duration::from_millis(500),
            measure: Duration::from_secs(4),
            e2e: Duration::from_secs(5),
            scale: Duration::from_secs(8),
            memory_runs: [10_000, 100_000],
            only_e2e: false,
            hold: false,
            only_scale: false,
            only_get: false,
        }
    }

    /// Short windows, small counts (a smoke run).
    pub fn quick() -> Self {
        Self {
            warmup: Duration::from_millis(200),
            measure: Duration::from_secs(1),
            e2e: Duration::from_secs(2),
            scale: Duration::from_secs(4),
            memory_runs: [1_000, 5_000],
            only_e2e: false,
            hold: false,
            only_scale: false,
            only_get: false,
        }
    }
}

/// Everything measured.
#[derive(Default, Serialize)]
struct KubeReport {
    /// Bare `create runs` by a tenant (kubectl's request), per client count.
    bare_create: Vec<Stats>,
    /// `tools/call` → `CreateTaskResult` on a replica, per client count.
    tools_create: Vec<Stats>,
    /// Create + one status write per op, by the operator's ServiceAccount, at 16 and 64
    /// clients, before any replica runs.
    api_create_and_status: Vec<Stats>,
    /// What the machine and the API server did during those windows.
    api_usage: Vec<usage::Usage>,
    /// The same at 64 clients with the status written by server-side apply.
    api_create_and_apply: Stats,
    /// End-to-end trivial runs through the replicas (create, poll to completed).
    e2e: Vec<Stats>,
    /// What the machine and the API server did during those windows.
    e2e_usage: Vec<usage::Usage>,
    /// `tasks/get` from a replica's cache, 64 clients, one window per round.
    get: Vec<Stats>,
    /// The same `tasks/get` on `runway serve` (embedded store, same auth shape), 64 clients,
    /// each window right after the replica's of the same round.
    get_embedded: Vec<Stats>,
    /// What the machine did during each of those windows (per round, the replica's then the
    /// embedded server's): where the CPU of a `tasks/get` goes, and what else was busy.
    get_usage: Vec<usage::Usage>,
    listen: Listen,
    failover: Failover,
    /// End-to-end runs/s of `slow` at SCALE_CALLERS callers with 1, 2 and 3 replicas sharing
    /// SCALE_SHARDS shards, SCALE_WORKERS workers each.
    scaling: Vec<Scale>,
    memory: Vec<CacheMemory>,
}

#[derive(Default, Serialize)]
struct Failover {
    lease_duration_s: f64,
    /// SIGTERM of the leader until the standby holds the Lease.
    graceful_handover_s: f64,
    /// SIGTERM of the leader until a Run created at that moment has succeeded.
    graceful_run_done_s: f64,
    /// `kill -9` of the leader until the standby holds the Lease.
    crash_handover_s: f64,
    /// `kill -9` of the leader until a Run created at that moment has succeeded.
    crash_run_done_s: f64,
}

#[derive(Default, Serialize)]
struct Scale {
    replicas: usize,
    shards: u32,
    e2e: Stats,
    /// What the machine and the API server did during the window.
    usage: usage::Usage,
}

#[derive(Default, Serialize)]
struct CacheMemory {
    runs: usize,
    idle_rss_mib: f64,
    rss_mib: f64,
    bytes_per_run: f64,
}

/// A kube client as `user` (a static user, or `operator`, the chart's ServiceAccount).
async fn client(c: &Cluster, user: &str) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(c.kubeconfig(user)).expect("a kubeconfig");
    let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .expect("a kube config");
    kube::Client::try_from(cfg).expect("a kube client")
}

/// A bare Run of `workflow` requested by alice, as kubectl would create it.
fn bare_run(workflow: &str) -> Run {
    serde_json::from_value(json!({
        "apiVersion": "runway.dev/v1alpha1", "kind": "Run",
        "metadata": {"generateName": format!("{workflow}-")},
        "spec": {"workflowRef": {"name": workflow},
                 "requestedBy": {"username": "alice", "uid": "alice-uid", "groups": ["devs"]}}
    }))
    .expect("a Run")
}

/// A closed loop of `clients` workers calling `op` back to back (the API-side twin of
/// `load::closed_loop`).
async fn api_loop(
    clients: usize,
    warmup: Duration,
    measure: Duration,
    op: Arc<dyn Fn() -> BoxFuture<'static, Result<(), String>> + Send + Sync>,
) -> Stats {
    let counted_from = Instant::now() + warmup;
    let until = counted_from + measure;
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..clients {
        let op = op.clone();
        workers.spawn(async move {
            let mut lat = Vec::new();
            let mut errors = 0u64;
            while Instant::now() < until {
                let t = Instant::now();
                let res = op().await;
                let done = Instant::now();
                match res {
                    Ok(()) if load::in_window(done, counted_from, until) => {
                        lat.push((done - t).as_micros() as u64)
                    }
                    Ok(()) => {}
                    Err(e) => {
                        eprintln!("bench: {e}");
                        errors += 1;
                        break;
                    }
                }
            }
            (lat, errors)
        });
    }
    let (mut all, mut errors) = (Vec::new(), 0);
    while let Some(r) = workers.join_next().await {
        let (lat, e) = r.expect("an API worker panicked");
        all.extend(lat);
        errors += e;
    }
    Stats::of(clients, all, measure, errors, 0)
}

/// Wait until `ok` holds, checking every 10 ms; how long it took.
async fn until(what: &str, mut ok: impl FnMut() -> BoxFuture<'static, bool>) -> Duration {
    let start = Instant::now();
    while !ok().await {
        assert!(start.elapsed() < PATIENCE, "bench: {what} never happened");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    start.elapsed()
}

/// Whether Run `name` has succeeded.
fn succeeded(api: &Api<Run>, name: &str) -> BoxFuture<'static, bool> {
    let (api, name) = (api.clone(), name.to_owned());
    Box::pin(async move {
        api.get_opt(&name).await.ok().flatten().is_some_and(|r| {
            r.status
                .is_some_and(|s| s.phase == runway::api::RunPhase::Succeeded)
        })
    })
}

/// The holder of Lease `name` in the chart's namespace is `who`.
fn holds(
    leases: &Api<k8s_openapi::api::coordination::v1::Lease>,
    name: &str,
    who: &str,
) -> BoxFuture<'static, bool> {
    let (leases, name, who) = (leases.clone(), name.to_owned(), who.to_owned());
    Box::pin(async move {
        leases
            .get_opt(&name)
            .await
            .ok()
            .flatten()
            .and_then(|l| l.spec?.holder_identity)
            .is_some_and(|h| h == who)
    })
}

/// Run the kube benchmark and return its report (also written by the caller).
pub async fn bench(plan: KubePlan) -> Value {
    let started = Instant::now();
    step("kube: starting the control plane and installing Runway");
    // It lives as long as the benchmark (its processes die with it), so that replicas can be
    // stopped from other threads while this one watches the Lease.
    let c: &'static Cluster =
        tokio::task::spawn_blocking(|| &*Box::leak(Box::new(Cluster::start(0, 1, &[]))))
            .await
            .expect("the control plane starts");
    let ns = c.namespace("bench");
    assert!(c.apply("admin", &ns, WORKFLOWS).status.success());
    let upstream = slow_upstream().await;
    let slow = format!(
        "apiVersion: runway.dev/v1alpha1\nkind: Workflow\nmetadata: {{ name: slow }}\nspec:\n  \
         tool: {{ description: One call to an upstream that answers after {UPSTREAM_DELAY:?}. }}\n  \
         steps: [ {{ name: call, http: {{ method: POST, url: \"http://{upstream}/\" }} }} ]\n"
    );
    assert!(c.apply("admin", &ns, &slow).status.success());
    let alice = client(c, "alice").await;
    let operator = client(c, "operator").await;
    let admin = client(c, "admin").await;
    let runs_as_alice: Api<Run> = Api::namespaced(alice, &ns);
    let runs_as_operator: Api<Run> = Api::namespaced(operator.clone(), &ns);
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(operator, cluster::SYSTEM_NS);
    let target = |port: u16| Target {
        addr: SocketAddr::from(([127, 0, 0, 1], port)),
        path: format!("/namespaces/{ns}/mcp"),
        token: Some(token("alice")),
    };
    let mut out = KubeReport::default();

    // The API server alone, before any replica runs: a replica would reconcile the baseline's
    // Runs (and write their Events) while they are measured.
    let finished = finished_status_once(c, &ns, &runs_as_alice).await;
    let baselines = !plan.only_scale && !plan.only_get;
    for n in BASELINE_CLIENTS.into_iter().filter(|_| baselines) {
        step(&format!(
            "kube: the API server's create + status write, {n} clients, no replica running"
        ));
        let before = usage::sample(&c.processes(), &admin).await;
        out.api_create_and_status
            .push(create_and_status_loop(&runs_as_operator, &finished, n, plan, false).await);
        out.api_usage.push(usage::window(
            &before,
            &usage::sample(&c.processes(), &admin).await,
        ));
    }
    if baselines {
        step("kube: the API server's create + status apply, 64 clients, no replica running");
        out.api_create_and_apply =
            create_and_status_loop(&runs_as_operator, &finished, 64, plan, true).await;
        delete_baseline_runs(&Api::namespaced(admin.clone(), &ns)).await;
    }

    // The chart's default: two replicas, one shard (one leader drives every Run).
    c.start_operator("r-0");
    c.start_operator("r-1");
    let leader = c.leader();
    c.wait_ready(&ns, &["trivial", "probe", "park", "slow"]);
    let replicas: Vec<Target> = c.mcp_ports().into_iter().map(target).collect();
    // Runs are counted in r-0's cache; Events are queued by whichever replica leads.
    let watcher = [c.metrics_port("r-0"), c.metrics_port("r-1")];
    if plan.only_scale {
        c.stop("r-0");
        c.stop("r-1");
        out.scaling = scaling(c, &replicas_target(&ns), &admin, plan).await;
        return finish(c, plan, out, started);
    }

    if !plan.only_e2e && !plan.only_get {
        for n in [1, 16, 64] {
            step(&format!("kube: bare create vs tools/call, {n} clients"));
            let api = runs_as_alice.clone();
            out.bare_create.push(
                api_loop(
                    n,
                    plan.warmup,
                    plan.measure,
                    Arc::new(move || {
                        let api = api.clone();
                        Box::pin(async move {
                            api.create(&PostParams::default(), &bare_run("trivial"))
                                .await
                                .map(|_| ())
                                .map_err(|e| e.to_string())
                        })
                    }),
                )
                .await,
            );
            out.tools_create.push(
                closed_loop_over(
                    &replicas,
                    n,
                    plan.warmup,
                    plan.measure,
                    load::create_op("trivial"),
                )
                .await,
            );
            settle(&watcher).await;
        }
    }

    for n in [16, 64].into_iter().filter(|_| !plan.only_get) {
        step(&format!("kube: end to end, {n} callers"));
        let before = usage::sample(&c.processes(), &admin).await;
        out.e2e.push(
            closed_loop_over(
                &replicas,
                n,
                plan.warmup,
                plan.e2e,
                load::run_op("trivial", POLL),
            )
            .await,
        );
        out.e2e_usage.push(usage::window(
            &before,
            &usage::sample(&c.processes(), &admin).await,
        ));
        settle(&watcher).await;
    }
    if plan.hold {
        eprintln!(
            "bench: holding the cluster for profiling (kill the benchmark to end): {}, namespace {ns}, \
             replicas {:?}",
            c.dir.display(),
            c.processes()
        );
        std::future::pending::<()>().await;
    }
    if plan.only_e2e {
        return finish(c, plan, out, started);
    }

    step("kube: tasks/get from the cache vs the embedded store, 64 clients, alternated");
    let mut embedded = start_embedded(&c.dir).await;
    // Manifests without a namespace are in `default`, alice's namespace in the auth file.
    let local = Target {
        addr: embedded.addr,
        path: "/mcp".into(),
        token: Some(token("alice")),
    };
    let (cached_task, _) = one_run(replicas[0].clone(), "trivial", json!({})).await;
    let (local_task, _) = one_run(local.clone(), "trivial", json!({})).await;
    let mut processes = c.processes();
    processes.push((embedded.what.clone(), embedded.pid()));
    // Alternated, so that what the machine does meanwhile (the API server's compaction, the
    // garbage collector, another tenant of the host) weighs on both sides alike.
    for _ in 0..GET_ROUNDS {
        for (to, task, into) in [
            (&replicas[0], &cached_task, &mut out.get),
            (&local, &local_task, &mut out.get_embedded),
        ] {
            let before = usage::sample(&processes, &admin).await;
            into.push(
                closed_loop(
                    to.clone(),
                    64,
                    plan.warmup,
                    plan.measure,
                    load::get_op(task),
                )
                .await,
            );
            out.get_usage.push(usage::window(
                &before,
                &usage::sample(&processes, &admin).await,
            ));
        }
    }
    embedded.kill();
    if plan.only_get {
        return finish(c, plan, out, started);
    }

    step("kube: listen");
    out.listen = listen_latency(replicas[0].clone(), 16, plan.warmup + plan.e2e).await;
    settle(&watcher).await;

    out.failover = failover(c, &leader, &runs_as_alice, &leases).await;
    out.scaling = scaling(c, &replicas_target(&ns), &admin, plan).await;
    out.memory = memory(c, &finished, &runs_as_operator, &leases, plan).await;
    finish(c, plan, out, started)
}

/// The report of what was measured, printed as tables.
fn finish(c: &Cluster, plan: KubePlan, out: KubeReport, started: Instant) -> Value {
    let report = json!({
        "machine": crate::machine(),
        "versions": versions(c),
        "plan": plan,
        "kube": out,
        "seconds": started.elapsed().as_secs_f64(),
    });
    println!("{}", render(&report));
    report
}

/// An upstream that answers every POST after UPSTREAM_DELAY: the slow service behind the
/// scaling scenario's `http` step, holding a controller worker as a real one would.
async fn slow_upstream() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let addr = listener.local_addr().expect("an address");
    let app = axum::Router::new().route(
        "/",
        axum::routing::post(|| async {
            tokio::time::sleep(UPSTREAM_DELAY).await;
            "ok"
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

/// How a replica's MCP endpoint is addressed for the tenant namespace.
fn replicas_target(ns: &str) -> impl Fn(u16) -> Target + '_ {
    move |port| Target {
        addr: SocketAddr::from(([127, 0, 0, 1], port)),
        path: format!("/namespaces/{ns}/mcp"),
        token: Some(token("alice")),
    }
}

/// The status of a finished `trivial` Run, to give baseline and memory Runs a realistic size,
/// from a replica started for that one Run and stopped again.
async fn finished_status_once(c: &Cluster, ns: &str, api: &Api<Run>) -> Value {
    c.start_operator("status-0");
    c.wait_ready(ns, &["trivial"]);
    let status = finished_status(api).await;
    c.stop("status-0");
    status
}

/// The API server's create + status-write pairs by the operator's ServiceAccount, `clients` at
/// once, each Run labelled as the baseline's.
async fn create_and_status_loop(
    api: &Api<Run>,
    status: &Value,
    clients: usize,
    plan: KubePlan,
    apply: bool,
) -> Stats {
    let (status, api) = (status.clone(), api.clone());
    api_loop(
        clients,
        plan.warmup,
        plan.measure,
        Arc::new(move || {
            let (api, status) = (api.clone(), status.clone());
            Box::pin(async move {
                let mut run = bare_run("trivial");
                run.spec.requested_by = None;
                run.metadata.labels =
                    Some([BASELINE_LABEL].map(|(k, v)| (k.into(), v.into())).into());
                if apply {
                    create_with_applied_status(&api, run, &status).await
                } else {
                    create_with_status(&api, run, &status).await
                }
            })
        }),
    )
    .await
}

/// The label of the baseline's Runs.
const BASELINE_LABEL: (&str, &str) = ("bench", "baseline");

/// Delete the baseline's Runs, so that the replicas start with a cache of the usual size.
async fn delete_baseline_runs(api: &Api<Run>) {
    let selector = format!("{}={}", BASELINE_LABEL.0, BASELINE_LABEL.1);
    api.delete_collection(
        &kube::api::DeleteParams::default(),
        &kube::api::ListParams::default().labels(&selector),
    )
    .await
    .expect("the baseline's Runs are deleted");
    until("the baseline's Runs to be gone", || {
        let (api, selector) = (api.clone(), selector.clone());
        Box::pin(async move {
            api.list_metadata(&kube::api::ListParams::default().labels(&selector))
                .await
                .is_ok_and(|l| l.items.is_empty())
        })
    })
    .await;
}

/// The status of a finished `trivial` Run.
async fn finished_status(api: &Api<Run>) -> Value {
    let created = api
        .create(&PostParams::default(), &bare_run("trivial"))
        .await
        .expect("a bare Run");
    let name = created.metadata.name.unwrap_or_default();
    until("a trivial Run to succeed", || succeeded(api, &name)).await;
    let run = api.get(&name).await.expect("the Run");
    serde_json::to_value(run.status).expect("a status")
}

/// `runway serve` with the same Workflows and an auth file that signs alice in, for the
/// embedded side of the `tasks/get` comparison.
async fn start_embedded(dir: &Path) -> Proc {
    let work = procs::work_dir(dir, "embedded");
    std::fs::write(work.join("workflows/bench.yaml"), WORKFLOWS).expect("workflows written");
    std::fs::write(
        work.join("auth.yaml"),
        format!(
            "tokens:\n  - {{ token: {}, user: alice, groups: [devs], namespace: default }}\nrules:\n  - {{ groups: [devs], namespaces: [\"*\"], resources: [\"*\"], verbs: [\"*\"] }}\n",
            token("alice")
        ),
    )
    .expect("auth file written");
    let addr = free_addr();
    let mut cmd = procs::serve(&work, addr);
    cmd.arg("--auth-file").arg(work.join("auth.yaml"));
    let mut p = Proc::spawn("runway serve", cmd, addr, &work.join("runway.log"));
    p.ready(Some("/healthz")).await;
    p
}

/// Create a bare `trivial` Run; its name.
async fn create_trivial(runs: &Api<Run>) -> String {
    let created = runs
        .create(&PostParams::default(), &bare_run("trivial"))
        .await
        .expect("a Run");
    created.metadata.name.unwrap_or_default()
}

/// Graceful stop and `kill -9` of the leader (two replicas, one shard, default lease timings).
async fn failover(
    c: &'static Cluster,
    leader: &str,
    runs: &Api<Run>,
    leases: &Api<k8s_openapi::api::coordination::v1::Lease>,
) -> Failover {
    let mut f = Failover {
        lease_duration_s: runway::operator::lease::LEASE_DURATION.as_secs_f64(),
        ..Default::default()
    };
    step("kube: failover, graceful stop of the leader");
    let standby = c
        .replicas()
        .into_iter()
        .find(|r| r != leader)
        .expect("a standby");
    let t0 = Instant::now();
    let stopping = {
        let leader = leader.to_owned();
        tokio::task::spawn_blocking(move || c.stop(&leader))
    };
    let run = create_trivial(runs).await;
    until("the standby to hold the Lease", || {
        holds(leases, cluster::LEASE, &standby)
    })
    .await;
    f.graceful_handover_s = t0.elapsed().as_secs_f64();
    until("the Run to succeed", || succeeded(runs, &run)).await;
    f.graceful_run_done_s = t0.elapsed().as_secs_f64();
    stopping.await.expect("the leader stopped");

    step("kube: failover, kill -9 of the leader");
    c.start_operator("r-2");
    let t0 = Instant::now();
    c.kill(&standby);
    let run = create_trivial(runs).await;
    until("r-2 to hold the Lease", || {
        holds(leases, cluster::LEASE, "r-2")
    })
    .await;
    f.crash_handover_s = t0.elapsed().as_secs_f64();
    until("the Run to succeed", || succeeded(runs, &run)).await;
    f.crash_run_done_s = t0.elapsed().as_secs_f64();
    c.stop("r-2");
    f
}

/// End-to-end throughput with 1, 2 and 3 replicas sharing SCALE_SHARDS shards.
async fn scaling(
    c: &Cluster,
    target: &impl Fn(u16) -> Target,
    admin: &kube::Client,
    plan: KubePlan,
) -> Vec<Scale> {
    let mut out = Vec::new();
    for n in 1..=3usize {
        step(&format!(
            "kube: scaling, {n} replicas, {SCALE_SHARDS} shards"
        ));
        let names: Vec<String> = (0..n).map(|i| format!("scale{n}-{i}")).collect();
        let workers = format!("--workers={SCALE_WORKERS}");
        for name in &names {
            c.start_operator_with(name, true, SCALE_SHARDS, &[&workers]);
        }
        let want: std::collections::BTreeSet<&String> = names.iter().collect();
        let start = Instant::now();
        loop {
            let holders = c.holders_of(SCALE_SHARDS);
            let got: std::collections::BTreeSet<&String> = holders.iter().collect();
            let even = names
                .iter()
                .all(|r| holders.iter().filter(|h| *h == r).count() == SCALE_SHARDS as usize / n);
            if got == want && even {
                break;
            }
            assert!(
                start.elapsed() < PATIENCE,
                "the shards were never shared: {holders:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let ports: Vec<u16> = names.iter().map(|r| c.metrics_port(r)).collect();
        settle(&ports).await;
        let targets: Vec<Target> = names.iter().map(|r| target(c.mcp_port(r))).collect();
        let op = load::run_op("slow", POLL);
        let warmup = Duration::from_secs(1);
        let before = usage::sample(&c.processes(), admin).await;
        let e2e = closed_loop_over(&targets, SCALE_CALLERS, warmup, plan.scale, op).await;
        let usage = usage::window(&before, &usage::sample(&c.processes(), admin).await);
        settle(&ports).await;
        out.push(Scale {
            replicas: n,
            shards: SCALE_SHARDS,
            e2e,
            usage,
        });
        for name in &names {
            c.stop(name);
        }
    }
    out
}

/// Resident memory of a replica whose cache holds many Runs: a standby (the Lease is held by
/// this benchmark, so no replica drives them), with Runs as a finished `trivial` Run is.
async fn memory(
    c: &Cluster,
    status: &Value,
    operator: &Api<Run>,
    leases: &Api<k8s_openapi::api::coordination::v1::Lease>,
    plan: KubePlan,
) -> Vec<CacheMemory> {
    step("kube: resident memory of the Run cache");
    let squat = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": cluster::LEASE},
        "spec": {"holderIdentity": "bench", "leaseDurationSeconds": 3600,
                 "renewTime": k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(jiff::Timestamp::now())}});
    leases
        .patch(
            cluster::LEASE,
            &PatchParams::apply("bench").force(),
            &Patch::Apply(&squat),
        )
        .await
        .expect("the Lease is held by the benchmark");
    c.start_operator("mem-0");
    let pid = c.pid("mem-0");
    let metrics = c.metrics_port("mem-0");
    let existing = cached_runs(metrics).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle = rss(pid);
    let mut out = Vec::new();
    let mut made = 0usize;
    for &n in &plan.memory_runs {
        step(&format!("kube: {n} Runs in the cache"));
        create_finished(operator, status, n - made).await;
        made = n;
        let want = existing + n;
        until("the replica to cache every Run", || {
            Box::pin(async move { cached_runs(metrics).await >= want })
        })
        .await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let now = rss(pid);
        out.push(CacheMemory {
            runs: want,
            idle_rss_mib: idle as f64 / 1048576.0,
            rss_mib: now as f64 / 1048576.0,
            bytes_per_run: (now.saturating_sub(idle)) as f64 / n as f64,
        });
    }
    out
}

/// Create `run`, then write `status` to it: what the API server does for a Run at least.
async fn create_with_status(api: &Api<Run>, run: Run, status: &Value) -> Result<(), String> {
    let created = api
        .create(&PostParams::default(), &run)
        .await
        .map_err(|e| e.to_string())?;
    let name = created.metadata.name.unwrap_or_default();
    let patch = Patch::Merge(json!({"status": status}));
    api.patch_status(&name, &PatchParams::default(), &patch)
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// [`create_with_status`] with the status written by server-side apply, conditional on the
/// created version (what the controller sent until this round).
async fn create_with_applied_status(
    api: &Api<Run>,
    run: Run,
    status: &Value,
) -> Result<(), String> {
    let created = api
        .create(&PostParams::default(), &run)
        .await
        .map_err(|e| e.to_string())?;
    let name = created.metadata.name.unwrap_or_default();
    let patch = json!({"apiVersion": "runway.dev/v1alpha1", "kind": "Run",
        "metadata": {"name": name, "resourceVersion": created.metadata.resource_version},
        "status": status});
    api.patch_status(
        &name,
        &PatchParams::apply("runway-controller").force(),
        &Patch::Apply(&patch),
    )
    .await
    .map(|_| ())
    .map_err(|e| e.to_string())
}

/// Create `n` Runs with `status`, 64 at a time (as the operator: it may write status).
async fn create_finished(api: &Api<Run>, status: &Value, n: usize) {
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..64 {
        let (api, status, next) = (api.clone(), status.clone(), next.clone());
        workers.spawn(async move {
            while next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < n {
                let mut run = bare_run("trivial");
                run.spec.requested_by = None;
                create_with_status(&api, run, &status)
                    .await
                    .expect("a Run is created with its status");
            }
        });
    }
    while let Some(r) = workers.join_next().await {
        r.expect("a create worker panicked");
    }
}

/// Wait until no Run is left to drive (none Pending, Running, Waiting or Cancelling in the
/// cache of the replica with the first of these metrics ports) and no replica has Events left
/// to write, so that one scenario's backlog does not slow the next: Events are written after
/// the status that caused them, and a backlog of them keeps the API server busy for seconds.
async fn settle(metrics_ports: &[u16]) {
    let ports = metrics_ports.to_vec();
    until(
        "the Runs and Events of the last scenario to be written",
        move || {
            let ports = ports.clone();
            Box::pin(async move {
                let mut left = 0.0;
                for (i, port) in ports.iter().enumerate() {
                    let Some(text) = scrape(*port).await else {
                        return false;
                    };
                    if i == 0 {
                        left += gauge_sum(&text, "runway_runs", |labels| {
                            ["Pending", "Running", "Waiting", "Cancelling"]
                                .iter()
                                .any(|p| labels == format!("phase=\"{p}\""))
                        });
                    }
                    left += gauge_sum(&text, "runway_events_queued", |_| true);
                }
                left == 0.0
            })
        },
    )
    .await;
}

async fn scrape(metrics_port: u16) -> Option<String> {
    let mut conn = load::Conn::open(SocketAddr::from(([127, 0, 0, 1], metrics_port)))
        .await
        .ok()?;
    conn.text("/metrics").await.ok()
}

/// The sum of the samples of gauge `name` whose labels (the text between the braces, empty
/// without any) `labels` accepts.
fn gauge_sum(text: &str, name: &str, labels: impl Fn(&str) -> bool) -> f64 {
    text.lines()
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let rest = series.strip_prefix(name)?;
            let inner = match rest.strip_prefix('{') {
                Some(r) => r.strip_suffix('}')?,
                None if rest.is_empty() => "",
                None => return None,
            };
            labels(inner).then(|| value.parse::<f64>().ok()).flatten()
        })
        .sum()
}

/// Runs in a replica's cache, from its `/metrics` (counted in place at each scrape).
async fn cached_runs(metrics_port: u16) -> usize {
    let text = scrape(metrics_port).await.unwrap_or_default();
    gauge_sum(&text, "runway_runs", |labels| !labels.is_empty()) as usize
}

fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .unwrap_or(0)
        * 1024
}

/// Versions of what was measured.
fn versions(c: &Cluster) -> Value {
    let server = c.admin(&["version", "-o", "json"]);
    let server: Value = serde_json::from_str(&server).unwrap_or_default();
    json!({
        "runway": env!("CARGO_PKG_VERSION"),
        "kubernetes": server["serverVersion"]["gitVersion"],
    })
}

/// The report as Markdown tables.
fn render(r: &Value) -> String {
    let k = &r["kube"];
    let f = |v: &Value| v.as_f64().unwrap_or(0.0);
    let mut t =
        String::from("| Scenario | Clients | Rate | p50 ms | p99 ms |\n|---|---|---|---|---|\n");
    for (bare, tools) in k["bare_create"]
        .as_array()
        .into_iter()
        .flatten()
        .zip(k["tools_create"].as_array().into_iter().flatten())
    {
        t += &row("bare Run create (tenant, API server)", bare);
        t += &row("tools/call → CreateTaskResult", tools);
    }
    for s in k["api_create_and_status"].as_array().into_iter().flatten() {
        t += &row("API server alone: create + status write", s);
    }
    t += &row(
        "API server alone: create + status apply",
        &k["api_create_and_apply"],
    );
    for s in k["e2e"].as_array().into_iter().flatten() {
        t += &row("end-to-end trivial runs (poll)", s);
    }
    let rounds = get_rounds(k);
    if rounds.is_empty() {
        return t + &scaling_rows(k) + &usage_tables(k);
    }
    for (i, (cached, local)) in rounds.iter().enumerate() {
        t += &row(
            &format!("tasks/get from the cache, round {}", i + 1),
            cached,
        );
        t += &row(
            &format!("tasks/get, embedded store, round {}", i + 1),
            local,
        );
    }
    t += &format!(
        "| listen: status write → notification | {} | {} samples | {:.2} | {:.2} |\n",
        k["listen"]["clients"],
        k["listen"]["samples"],
        f(&k["listen"]["p50_ms"]),
        f(&k["listen"]["p99_ms"])
    );
    t += &scaling_rows(k);
    let fo = &k["failover"];
    t += &format!(
        "\nFailover (two replicas, one shard, lease duration {} s): graceful stop → standby holds the Lease {:.2} s, a Run created then succeeded {:.2} s; kill -9 → {:.2} s, {:.2} s.\n",
        f(&fo["lease_duration_s"]),
        f(&fo["graceful_handover_s"]),
        f(&fo["graceful_run_done_s"]),
        f(&fo["crash_handover_s"]),
        f(&fo["crash_run_done_s"])
    );
    t += &get_cpu(k);
    for m in k["memory"].as_array().into_iter().flatten() {
        t += &format!(
            "Memory: {} Runs cached → {:.1} MiB resident (idle {:.1} MiB), {:.1} KiB per Run.\n",
            m["runs"],
            f(&m["rss_mib"]),
            f(&m["idle_rss_mib"]),
            f(&m["bytes_per_run"]) / 1024.0
        );
    }
    let get_ratios: Vec<f64> = rounds
        .iter()
        .map(|(cached, local)| f(&cached["per_sec"]) / f(&local["per_sec"]).max(1.0))
        .collect();
    let get_worst = get_ratios.iter().copied().fold(f64::INFINITY, f64::min);
    let at = |list: &Value, n: u64| {
        list.as_array()
            .and_then(|a| a.iter().find(|s| s["clients"] == n))
            .map(|s| f(&s["per_sec"]))
            .unwrap_or(0.0)
    };
    let (e2e16, e2e64) = (at(&k["e2e"], 16), at(&k["e2e"], 64));
    let pairs64 = at(&k["api_create_and_status"], 64);
    let scale: Vec<f64> = k["scaling"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| f(&s["e2e"]["per_sec"]))
        .collect();
    let per_run_kib = k["memory"]
        .as_array()
        .and_then(|m| m.last())
        .map(|m| f(&m["bytes_per_run"]) / 1024.0)
        .unwrap_or(f64::INFINITY);
    let lease = f(&fo["lease_duration_s"]);
    let targets = [
        (
            "end to end at 64 callers ≥ 0.9× at 16".to_owned(),
            format!("{:.2}× ({e2e64:.0}/s against {e2e16:.0}/s)", e2e64 / e2e16.max(1.0)),
            e2e64 >= 0.9 * e2e16,
        ),
        (
            "end to end at 64 callers ≥ 0.8× the API server's create + status-write pairs (64 clients, no replica)".to_owned(),
            format!("{:.2}× ({pairs64:.0} pairs/s)", e2e64 / pairs64.max(1.0)),
            e2e64 >= 0.8 * pairs64,
        ),
        (
            "tasks/get from the cache ≥ 0.9× the embedded store in every window (64 clients, alternated)"
                .to_owned(),
            get_ratios
                .iter()
                // Three places: a 0.899× must not read as the 0.90× it rounds to.
                .map(|r| format!("{r:.3}×"))
                .collect::<Vec<_>>()
                .join(", "),
            get_worst >= 0.9,
        ),
        (
            "graceful stop of the leader: the standby holds the Lease within 1 s".to_owned(),
            format!("{:.2} s", f(&fo["graceful_handover_s"])),
            f(&fo["graceful_handover_s"]) <= 1.0,
        ),
        (
            format!("kill -9 of the leader: a Run created then succeeds within {lease} s + 2 s"),
            format!("{:.2} s", f(&fo["crash_run_done_s"])),
            f(&fo["crash_run_done_s"]) <= lease + 2.0,
        ),
        (
            "3 replicas ≥ 2.4× the end-to-end throughput of one".to_owned(),
            scale
                .iter()
                .map(|r| format!("{r:.0}/s"))
                .collect::<Vec<_>>()
                .join(" → "),
            scale.len() == 3 && scale[2] >= 2.4 * scale[0],
        ),
        (
            "≤ 8 KiB per cached Run (the larger count)".to_owned(),
            format!("{per_run_kib:.1} KiB"),
            per_run_kib <= 8.0,
        ),
    ];
    t += "\n| Target | Measured | Met |\n|---|---|---|\n";
    for (name, measured, met) in targets {
        t += &format!(
            "| {name} | {measured} | {} |\n",
            if met { "yes" } else { "**no**" }
        );
    }
    t + &usage_tables(k)
}

/// One scenario's row of the results table.
fn row(name: &str, s: &Value) -> String {
    let f = |v: &Value| v.as_f64().unwrap_or(0.0);
    format!(
        "| {name} | {} | {}/s | {:.2} | {:.2} |\n",
        s["clients"],
        crate::rate(f(&s["per_sec"])),
        f(&s["p50_ms"]),
        f(&s["p99_ms"])
    )
}

/// The scaling scenario's rows of the results table.
fn scaling_rows(k: &Value) -> String {
    let mut t = String::new();
    for s in k["scaling"].as_array().into_iter().flatten() {
        t += &row(
            &format!(
                "end to end, `slow` ({} ms upstream), {} replicas × {SCALE_WORKERS} workers, {} shards",
                UPSTREAM_DELAY.as_millis(),
                s["replicas"],
                s["shards"]
            ),
            &s["e2e"],
        );
    }
    t
}

/// The `tasks/get` rounds: the replica's window and `runway serve`'s that followed it.
fn get_rounds(k: &Value) -> Vec<(&Value, &Value)> {
    k["get"]
        .as_array()
        .into_iter()
        .flatten()
        .zip(k["get_embedded"].as_array().into_iter().flatten())
        .collect()
}

/// Each round's CPU per request of the serving process (the replica polled, then
/// `runway serve`) and how many cores the rest of the machine kept busy meanwhile: the two
/// parts of a gap between the rates.
fn get_cpu(k: &Value) -> String {
    let windows: Vec<usage::Usage> = k["get_usage"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|u| serde_json::from_value(u.clone()).ok())
        .collect();
    let f = |v: &Value| v.as_f64().unwrap_or(0.0);
    // The windows take in the warm-up, at the same load as the measured seconds.
    let part = |u: &usage::Usage, server: &str, rate: f64| {
        let serving = u.cores.get(server).copied().unwrap_or(0.0);
        let others: f64 = u
            .cores
            .iter()
            .filter(|(p, _)| p.as_str() != server && p.as_str() != "load generator")
            .map(|(_, c)| c)
            .sum();
        (serving / rate.max(1.0) * 1e6, others)
    };
    let mut t = String::new();
    for (i, ((cached, local), pair)) in get_rounds(k)
        .into_iter()
        .zip(windows.chunks_exact(2))
        .enumerate()
    {
        let (cache_us, cache_others) = part(&pair[0], "r-0", f(&cached["per_sec"]));
        let (emb_us, emb_others) = part(&pair[1], "runway serve", f(&local["per_sec"]));
        t += &format!(
            "tasks/get round {}, server CPU per request: the replica {cache_us:.1} µs, runway serve {emb_us:.1} µs \
             ({:.2}×); the cluster's other processes kept {cache_others:.2} and {emb_others:.2} cores busy meanwhile.\n",
            i + 1,
            cache_us / emb_us.max(f64::MIN_POSITIVE)
        );
    }
    t
}

/// Where the CPU went and what the API server did in the baseline, end-to-end, `tasks/get`
/// and scaling windows.
fn usage_tables(k: &Value) -> String {
    let mut t = String::new();
    let windows = [
        (
            "api_usage",
            "api_create_and_status",
            "API server alone, create + status write",
        ),
        ("e2e_usage", "e2e", "End to end"),
    ];
    for (usage, stats, name) in windows {
        let pairs = k[usage]
            .as_array()
            .into_iter()
            .flatten()
            .zip(k[stats].as_array().into_iter().flatten());
        for (u, s) in pairs {
            let Ok(u) = serde_json::from_value::<usage::Usage>(u.clone()) else {
                continue;
            };
            t += &usage::table(&format!("{name}, {} clients", s["clients"]), &u);
        }
    }
    let gets = get_rounds(k)
        .into_iter()
        .enumerate()
        .flat_map(|(i, (cached, local))| {
            [
                (cached, format!("tasks/get from the cache, round {}", i + 1)),
                (local, format!("tasks/get, embedded store, round {}", i + 1)),
            ]
        });
    for ((stats, name), u) in gets.zip(k["get_usage"].as_array().into_iter().flatten()) {
        let Ok(u) = serde_json::from_value::<usage::Usage>(u.clone()) else {
            continue;
        };
        t += &usage::table(&format!("{name}, {} clients", stats["clients"]), &u);
    }
    for s in k["scaling"].as_array().into_iter().flatten() {
        let Ok(u) = serde_json::from_value::<usage::Usage>(s["usage"].clone()) else {
            continue;
        };
        let name = format!(
            "Scaling, {} replicas, {SCALE_CALLERS} callers",
            s["replicas"]
        );
        t += &usage::table(&name, &u);
    }
    t
}
