//! Metrics (Prometheus text format) and their names, in one place. `Metrics` is cheap to clone;
//! every component records into the same registry, which `/metrics` encodes.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::protocol;

/// Prefix of every metric name.
pub(crate) const PREFIX: &str = "runway";

/// Label set of per-phase metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct PhaseLabels {
    /// Run phase.
    pub phase: String,
}

/// Label set of step metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct StepLabels {
    /// Step kind (`http`, `tool`, `job`, `cleanup`).
    pub kind: String,
}

/// Label set of MCP request metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct RequestLabels {
    /// JSON-RPC method.
    pub method: String,
    /// HTTP status of the answer.
    pub status: String,
}

/// Why a reconcile went wrong: the label of `runway_reconcile_errors_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// The store failed (unreachable, timed out…); the Run is queued again.
    Store,
    /// The store refused a status as invalid; the Run was failed.
    Refused,
    /// Deciding or executing panicked; the Run was failed.
    Panic,
    /// The archive did not take a finished Run; it is kept in the store and tried again.
    Archive,
}

impl ErrorKind {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Store => "store",
            Self::Refused => "refused",
            Self::Panic => "panic",
            Self::Archive => "archive",
        }
    }
}

/// Label set of reconcile errors.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ErrorLabels {
    /// An [`ErrorKind`].
    pub kind: &'static str,
}

/// Label set of the MCP request latency.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct MethodLabels {
    /// JSON-RPC method (a known one, or `other`).
    pub method: &'static str,
}

/// Label set of finished Runs.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct FinishedLabels {
    /// Namespace of the Run.
    pub namespace: String,
    /// Its Workflow.
    pub workflow: String,
    /// How it ended: `Succeeded`, `Failed` or `Cancelled`.
    pub phase: &'static str,
}

/// Label set of auth cache metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct CacheLabels {
    /// `token` or `access`.
    pub cache: String,
    /// `hit` or `miss`.
    pub result: String,
}

struct Inner {
    registry: Mutex<Registry>,
    runs: Family<PhaseLabels, Gauge>,
    steps: Family<StepLabels, Histogram>,
    requests: Family<RequestLabels, Counter>,
    /// The `status="200"` counter of each known method, once it exists: the common case
    /// without building labels (two strings and a hash) on every request.
    ok_requests: Vec<std::sync::OnceLock<Counter>>,
    reconcile_errors: Family<ErrorLabels, Counter>,
    queue_depth: Gauge,
    auth_cache: Family<CacheLabels, Counter>,
    /// The four auth cache counters once they exist ((token, access) × (hit, miss)), so that a
    /// lookup, made several times per request, builds no labels.
    auth_cache_counters: [std::sync::OnceLock<Counter>; 4],
    request_seconds: Family<MethodLabels, Histogram>,
    /// The latency histogram of each known method, then of `other`, once it exists.
    request_seconds_of: Vec<std::sync::OnceLock<Histogram>>,
    finished: Family<FinishedLabels, Counter>,
    queue_wait: Histogram,
    replica: Replica,
}

/// What only an operator replica reports: its shards and its Kubernetes Events.
struct Replica {
    shards: Gauge,
    shards_held: Gauge,
    events_dropped: Counter,
    events_queued: Gauge,
}

impl Replica {
    /// The replica's metrics, registered in `r`.
    fn new(r: &mut Registry) -> Self {
        Self {
            shards: registered(
                r,
                "shards",
                "Shards the Runs are split into (one Lease each)",
                Gauge::default(),
            ),
            events_dropped: registered(
                r,
                "events_dropped",
                "Kubernetes Events not written because the API server fell behind (their queue was full)",
                Counter::default(),
            ),
            events_queued: registered(
                r,
                "events_queued",
                "Kubernetes Events waiting to be written (or being written)",
                Gauge::default(),
            ),
            shards_held: registered(
                r,
                "shards_held",
                "Shards whose Runs this replica drives now (the Leases it holds)",
                Gauge::default(),
            ),
        }
    }
}

impl Inner {
    /// Counters and histograms of known labels exist from the start, at zero, so that a rate
    /// over them is defined before the first error or attempt.
    fn preset(&self) {
        for kind in [
            ErrorKind::Store,
            ErrorKind::Refused,
            ErrorKind::Panic,
            ErrorKind::Archive,
        ] {
            let _ = self.reconcile_errors.get_or_create(&ErrorLabels {
                kind: kind.as_str(),
            });
        }
        for kind in STEP_KINDS {
            let _ = self.steps.get_or_create(&StepLabels {
                kind: (*kind).to_owned(),
            });
        }
    }
}

/// Buckets of step attempt durations: 5 ms to about 3 minutes.
fn step_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.005, 2.0, 16))
}

/// Buckets of request latencies: 0.5 ms to about 65 s.
fn request_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.0005, 2.0, 18))
}

/// What `runway_build_info` is.
const BUILD_HELP: &str = "The version and git commit of this build (always 1)";

/// The build's version and commit, as an info metric.
fn build_info() -> prometheus_client::metrics::info::Info<[(&'static str, &'static str); 2]> {
    prometheus_client::metrics::info::Info::new([
        ("version", crate::VERSION),
        ("commit", crate::COMMIT),
    ])
}

/// Register `metric` in `r` and keep a handle to it.
fn registered<M>(r: &mut Registry, name: &str, help: &str, metric: M) -> M
where
    M: prometheus_client::registry::Metric + Clone,
{
    r.register(name, help, metric.clone());
    metric
}

tokio::task_local! {
    /// When the request being served arrived: [`Metrics::request`] observes its latency.
    static REQUEST_STARTED: Instant;
}

/// Serve one request inside `fut`: the latency [`Metrics::request`] records is from now.
pub(crate) fn timed<F: Future>(fut: F) -> impl Future<Output = F::Output> {
    REQUEST_STARTED.scope(Instant::now(), fut)
}

/// The process's metrics.
#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

/// The kinds of step attempt `runway_step_duration_seconds` is labelled with.
const STEP_KINDS: &[&str] = &["http", "tool", "job", "workflow", "cleanup"];

/// The MCP methods counted by name; every other method is counted as `other`.
pub(crate) const KNOWN_METHODS: &[&str] = &[
    protocol::METHOD_DISCOVER,
    protocol::METHOD_LIST_TOOLS,
    protocol::METHOD_CALL_TOOL,
    protocol::METHOD_GET_TASK,
    protocol::METHOD_UPDATE_TASK,
    protocol::METHOD_CANCEL_TASK,
    protocol::METHOD_LISTEN,
    protocol::METHOD_LIST_RESOURCES,
    protocol::METHOD_READ_RESOURCE,
    protocol::METHOD_LIST_PROMPTS,
    protocol::METHOD_GET_PROMPT,
    protocol::METHOD_PING,
    protocol::METHOD_INITIALIZE,
    protocol::METHOD_SET_LEVEL,
    protocol::METHOD_TASK_RESULT,
    protocol::METHOD_LIST_TASKS,
];

impl Metrics {
    /// A fresh registry with every Runway metric.
    pub fn new() -> Self {
        let mut r = Registry::with_prefix(PREFIX);
        r.register("build", BUILD_HELP, build_info());
        let inner = Inner {
            runs: registered(&mut r, "runs", "Runs by phase", Family::default()),
            steps: registered(
                &mut r,
                "step_duration_seconds",
                "Duration of step attempts by kind",
                Family::new_with_constructor(step_histogram),
            ),
            requests: registered(
                &mut r,
                "mcp_requests",
                "MCP requests by method and HTTP status",
                Family::default(),
            ),
            ok_requests: KNOWN_METHODS.iter().map(|_| Default::default()).collect(),
            reconcile_errors: registered(
                &mut r,
                "reconcile_errors",
                "Errors while reconciling Runs, by kind (store, refused, panic)",
                Family::default(),
            ),
            queue_depth: registered(
                &mut r,
                "queue_depth",
                "Run keys waiting in the controller queue",
                Gauge::default(),
            ),
            auth_cache: registered(
                &mut r,
                "auth_cache_requests",
                "Authentication and authorization cache lookups",
                Family::default(),
            ),
            auth_cache_counters: Default::default(),
            request_seconds: registered(
                &mut r,
                "mcp_request_duration_seconds",
                "Time from an MCP request's arrival to its response's headers (a held call: to its end), by method",
                Family::new_with_constructor(request_histogram),
            ),
            request_seconds_of: (0..=KNOWN_METHODS.len())
                .map(|_| Default::default())
                .collect(),
            finished: registered(
                &mut r,
                "runs_finished",
                "Runs that ended, by namespace, Workflow and how they ended",
                Family::default(),
            ),
            queue_wait: registered(
                &mut r,
                "run_start_delay_seconds",
                "Time from a Run's request to its start (queued behind a concurrency limit, or waiting for a worker)",
                Histogram::new(exponential_buckets(0.01, 2.0, 20)),
            ),
            replica: Replica::new(&mut r),
            // Last: every field above registers in it.
            registry: Mutex::new(r),
        };
        inner.preset();
        Self {
            inner: Arc::new(inner),
        }
    }

    /// Set the number of Runs per phase (all phases given are replaced).
    pub(crate) fn set_runs(&self, counts: &[(&str, i64)]) {
        for (phase, n) in counts {
            self.inner
                .runs
                .get_or_create(&PhaseLabels {
                    phase: (*phase).to_owned(),
                })
                .set(*n);
        }
    }

    /// Record one step attempt.
    pub fn step(&self, kind: &str, started: Instant) {
        self.inner
            .steps
            .get_or_create(&StepLabels {
                kind: kind.to_owned(),
            })
            .observe(started.elapsed().as_secs_f64());
    }

    /// Count one MCP request, and observe its latency when it is served inside the request timer.
    pub fn request(&self, method: &str, status: u16) {
        // Label values come from callers: only known methods and real status codes, so that no
        // caller can grow the metric without bound.
        let known = KNOWN_METHODS.iter().position(|m| *m == method);
        if let Ok(seconds) = REQUEST_STARTED.try_with(|at| at.elapsed().as_secs_f64()) {
            let slot = known.unwrap_or(KNOWN_METHODS.len());
            self.inner.request_seconds_of[slot]
                .get_or_init(|| {
                    self.inner
                        .request_seconds
                        .get_or_create(&MethodLabels {
                            method: known.map(|i| KNOWN_METHODS[i]).unwrap_or("other"),
                        })
                        .clone()
                })
                .observe(seconds);
        }
        if let (Some(i), 200) = (known, status) {
            self.inner.ok_requests[i]
                .get_or_init(|| self.counter(KNOWN_METHODS[i], 200))
                .inc();
            return;
        }
        let method = known.map(|i| KNOWN_METHODS[i]).unwrap_or("other");
        let status = if (100..600).contains(&status) {
            status
        } else {
            0
        };
        self.counter(method, status).inc();
    }

    fn counter(&self, method: &str, status: u16) -> Counter {
        self.inner
            .requests
            .get_or_create(&RequestLabels {
                method: method.to_owned(),
                status: status.to_string(),
            })
            .clone()
    }

    /// Count one reconcile error.
    pub(crate) fn reconcile_error(&self, kind: ErrorKind) {
        self.inner
            .reconcile_errors
            .get_or_create(&ErrorLabels {
                kind: kind.as_str(),
            })
            .inc();
    }

    /// Count a Run that ended (`phase` is terminal).
    pub(crate) fn run_finished(&self, namespace: &str, workflow: &str, phase: &'static str) {
        self.inner
            .finished
            .get_or_create(&FinishedLabels {
                namespace: namespace.to_owned(),
                workflow: workflow.to_owned(),
                phase,
            })
            .inc();
    }

    /// Observe how long a Run that starts now waited since it was requested.
    pub(crate) fn run_started(&self, waited: std::time::Duration) {
        self.inner.queue_wait.observe(waited.as_secs_f64());
    }

    /// Set how many shards there are and how many this replica drives.
    pub(crate) fn set_shards(&self, total: u32, held: usize) {
        self.inner.replica.shards.set(i64::from(total));
        self.inner.replica.shards_held.set(held as i64);
    }

    /// Count one Kubernetes Event dropped because its queue was full.
    pub(crate) fn event_dropped(&self) {
        self.inner.replica.events_dropped.inc();
    }

    /// Count one Kubernetes Event queued to be written.
    pub(crate) fn event_queued(&self) {
        self.inner.replica.events_queued.inc();
    }

    /// Count one Kubernetes Event out of the queue: written, refused by the API server, or
    /// dropped because the queue was full.
    pub(crate) fn event_left_queue(&self) {
        self.inner.replica.events_queued.dec();
    }

    /// Set the controller queue depth.
    pub(crate) fn set_queue_depth(&self, n: usize) {
        self.inner.queue_depth.set(n as i64);
    }

    /// Count one auth cache lookup.
    pub(crate) fn auth_cache(&self, cache: &str, hit: bool) {
        let result = if hit { "hit" } else { "miss" };
        let counter = || {
            self.inner
                .auth_cache
                .get_or_create(&CacheLabels {
                    cache: cache.to_owned(),
                    result: result.to_owned(),
                })
                .clone()
        };
        let slot = match cache {
            "token" => 0,
            "access" => 2,
            _ => {
                counter().inc();
                return;
            }
        } + usize::from(!hit);
        self.inner.auth_cache_counters[slot]
            .get_or_init(counter)
            .inc();
    }

    /// The Prometheus text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        let registry = self.inner.registry.lock().expect("registry lock");
        prometheus_client::encoding::text::encode(&mut out, &registry)
            .expect("encoding to a String cannot fail");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_every_family_with_the_prefix() {
        let m = Metrics::new();
        m.request("tools/call", 200);
        m.auth_cache("token", true);
        m.set_runs(&[("Running", 3)]);
        m.reconcile_error(ErrorKind::Refused);
        m.step("http", Instant::now());
        m.run_finished("team-a", "deploy", "Failed");
        m.run_started(std::time::Duration::from_millis(20));
        m.set_shards(4, 2);
        m.event_queued();
        m.event_queued();
        m.event_left_queue();
        m.event_dropped();
        // Latency is observed for requests served inside `timed`, and only there.
        m.request("tasks/get", 200);
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(timed(async { m.request("tasks/get", 200) }));
        let text = m.encode();
        for needle in [
            "runway_runs_finished_total{namespace=\"team-a\",workflow=\"deploy\",phase=\"Failed\"} 1",
            "runway_run_start_delay_seconds_count 1",
            "runway_shards 4",
            "runway_shards_held 2",
            "runway_events_queued 1",
            "runway_events_dropped_total 1",
            "runway_mcp_request_duration_seconds_count{method=\"tasks/get\"} 1",
            "runway_build_info{version=",
            "runway_mcp_requests_total{method=\"tools/call\",status=\"200\"} 1",
            "runway_auth_cache_requests_total{cache=\"token\",result=\"hit\"} 1",
            "runway_runs{phase=\"Running\"} 3",
            "runway_reconcile_errors_total{kind=\"refused\"} 1",
            "runway_reconcile_errors_total{kind=\"archive\"} 0",
            "runway_step_duration_seconds_count{kind=\"http\"} 1",
            "runway_queue_depth 0",
        ] {
            assert!(text.contains(needle), "missing {needle} in\n{text}");
        }
    }

    #[test]
    fn callers_cannot_invent_label_values() {
        let m = Metrics::new();
        for i in 0..1000 {
            m.request(&format!("made/up/{i}"), 200);
        }
        m.request("tools/list", 9999);
        let text = m.encode();
        assert!(text.contains("runway_mcp_requests_total{method=\"other\",status=\"200\"} 1000"));
        assert!(text.contains("runway_mcp_requests_total{method=\"tools/list\",status=\"0\"} 1"));
        assert!(!text.contains("made/up"));
    }
}
