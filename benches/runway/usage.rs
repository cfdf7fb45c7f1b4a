//! What a window of the Kubernetes benchmark cost, and whom: the CPU each process of the
//! cluster (etcd, the API server, the controller manager, every replica, the load generator)
//! used, how busy the machine was, and what the API server was asked to do, from its own
//! `/metrics` (requests by verb and resource, their mean latency, the time API Priority and
//! Fairness kept them queued, and those it rejected). Two samples make a window.

use std::collections::BTreeMap;
use std::time::Instant;

use serde::{Deserialize, Serialize};

/// Clock ticks per second of `/proc` times (Linux's USER_HZ on every architecture it runs
/// this benchmark on).
const TICKS: f64 = 100.0;

/// Counters at one instant.
pub struct Sample {
    at: Instant,
    /// CPU seconds used so far, by process name.
    cpu: BTreeMap<String, f64>,
    /// Busy and total CPU seconds of the whole machine so far.
    machine: (f64, f64),
    /// The API server's counters (name and the labels kept) and their values.
    api: BTreeMap<String, f64>,
}

/// What happened between two samples.
#[derive(Debug, Default, Serialize, Deserialize, Clone)]
pub struct Usage {
    /// Length of the window.
    pub seconds: f64,
    /// Cores each process kept busy on average.
    pub cores: BTreeMap<String, f64>,
    /// Share of the machine's CPU time that was busy.
    pub machine_busy: f64,
    /// API requests per second by `VERB resource[/subresource] code`.
    pub requests_per_sec: BTreeMap<String, f64>,
    /// Mean latency in ms by `VERB resource[/subresource]`, as the API server measured it.
    pub mean_latency_ms: BTreeMap<String, f64>,
    /// Mean time requests waited in API Priority and Fairness queues, ms, by priority level.
    pub fairness_wait_ms: BTreeMap<String, f64>,
    /// Requests API Priority and Fairness rejected (HTTP 429), by priority level.
    pub fairness_rejected: BTreeMap<String, f64>,
}

/// The counters now: `processes` by name and id, and the API server's metrics through
/// `admin` (a cluster admin's client).
pub async fn sample(processes: &[(String, u32)], admin: &kube::Client) -> Sample {
    let mut cpu: BTreeMap<String, f64> = processes
        .iter()
        .map(|(name, pid)| (name.clone(), cpu_seconds(&format!("/proc/{pid}/stat"))))
        .collect();
    cpu.insert("load generator".into(), cpu_seconds("/proc/self/stat"));
    let text = admin
        .request_text(
            http::Request::get("/metrics")
                .body(Vec::new())
                .expect("a request"),
        )
        .await
        .unwrap_or_default();
    Sample {
        at: Instant::now(),
        cpu,
        machine: machine_seconds(),
        api: api_counters(&text),
    }
}

/// What happened between `a` and `b`.
pub fn window(a: &Sample, b: &Sample) -> Usage {
    let seconds = b.at.duration_since(a.at).as_secs_f64().max(1e-9);
    let delta =
        |k: &str| b.api.get(k).copied().unwrap_or(0.0) - a.api.get(k).copied().unwrap_or(0.0);
    let mut u = Usage {
        seconds,
        ..Default::default()
    };
    for (name, now) in &b.cpu {
        if let Some(then) = a.cpu.get(name) {
            u.cores.insert(name.clone(), (now - then) / seconds);
        }
    }
    let (busy, total) = (b.machine.0 - a.machine.0, b.machine.1 - a.machine.1);
    u.machine_busy = busy / total.max(1e-9);
    for key in b.api.keys() {
        let d = delta(key);
        if d <= 0.0 {
            continue;
        }
        if let Some(what) = key.strip_prefix("requests ") {
            u.requests_per_sec.insert(what.to_owned(), d / seconds);
        } else if let Some(what) = key.strip_prefix("latency_sum ") {
            let n = delta(&format!("latency_count {what}"));
            if n > 0.0 {
                u.mean_latency_ms.insert(what.to_owned(), d / n * 1000.0);
            }
        } else if let Some(level) = key.strip_prefix("wait_sum ") {
            let n = delta(&format!("wait_count {level}"));
            if n > 0.0 {
                u.fairness_wait_ms.insert(level.to_owned(), d / n * 1000.0);
            }
        } else if let Some(level) = key.strip_prefix("rejected ") {
            u.fairness_rejected.insert(level.to_owned(), d);
        }
    }
    u
}

/// User and system CPU seconds of the process whose `stat` file this is (0 when it is gone).
fn cpu_seconds(stat: &str) -> f64 {
    let text = std::fs::read_to_string(stat).unwrap_or_default();
    // The command name may hold spaces: the fields counted from 1 start after its ')'.
    let fields: Vec<&str> = text
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    // utime and stime are fields 14 and 15 of the file, 12 and 13 after the name.
    let tick = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (tick(11) + tick(12)) / TICKS
}

/// Busy and total CPU seconds of the machine since it started (`/proc/stat`).
fn machine_seconds() -> (f64, f64) {
    let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let Some(line) = text.lines().find(|l| l.starts_with("cpu ")) else {
        return (0.0, 0.0);
    };
    let v: Vec<f64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    let total: f64 = v.iter().take(8).sum();
    // idle and iowait are the 4th and 5th.
    let idle = v.get(3).copied().unwrap_or(0.0) + v.get(4).copied().unwrap_or(0.0);
    ((total - idle) / TICKS, total / TICKS)
}

/// The counters of the API server's metrics text that a window reports, keyed by what they
/// count: `requests VERB resource code`, `latency_sum|latency_count VERB resource`,
/// `wait_sum|wait_count level`, `rejected level`. Requests that last (WATCH, CONNECT) are
/// left out of the latencies.
fn api_counters(text: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(value) = value.parse::<f64>() else {
            continue;
        };
        let (name, labels) = series.split_once('{').unwrap_or((series, ""));
        let label = |k: &str| -> String {
            let pat = format!("{k}=\"");
            labels
                .split(pat.as_str())
                .nth(1)
                .and_then(|r| r.split('"').next())
                .unwrap_or_default()
                .to_owned()
        };
        let what = || {
            let (res, sub) = (label("resource"), label("subresource"));
            let res = if sub.is_empty() {
                res
            } else {
                format!("{res}/{sub}")
            };
            format!("{} {res}", label("verb"))
        };
        let key = match name {
            "apiserver_request_total" => format!("requests {} {}", what(), label("code")),
            "apiserver_request_duration_seconds_sum" if !lasting(&label("verb")) => {
                format!("latency_sum {}", what())
            }
            "apiserver_request_duration_seconds_count" if !lasting(&label("verb")) => {
                format!("latency_count {}", what())
            }
            "apiserver_flowcontrol_request_wait_duration_seconds_sum" => {
                format!("wait_sum {}", label("priority_level"))
            }
            "apiserver_flowcontrol_request_wait_duration_seconds_count" => {
                format!("wait_count {}", label("priority_level"))
            }
            "apiserver_flowcontrol_rejected_requests_total" => {
                format!("rejected {}", label("priority_level"))
            }
            _ => continue,
        };
        *out.entry(key).or_default() += value;
    }
    out
}

/// Verbs whose requests stay open (their latency is their lifetime, not their cost).
fn lasting(verb: &str) -> bool {
    matches!(verb, "WATCH" | "WATCHLIST" | "CONNECT")
}

/// The window as a few lines of Markdown: cores by process, then what the API server was
/// asked, busiest first.
pub fn table(name: &str, u: &Usage) -> String {
    let mut t = format!(
        "\n{name} ({:.1} s, machine {:.0} % busy)\n\n| Process | Cores |\n|---|---|\n",
        u.seconds,
        u.machine_busy * 100.0
    );
    let mut cores: Vec<_> = u.cores.iter().collect();
    cores.sort_by(|a, b| b.1.total_cmp(a.1));
    for (p, c) in cores.into_iter().filter(|(_, c)| **c >= 0.005) {
        t += &format!("| {p} | {c:.2} |\n");
    }
    let mut reqs: Vec<_> = u
        .requests_per_sec
        .iter()
        .filter(|(_, r)| **r >= 0.5)
        .collect();
    reqs.sort_by(|a, b| b.1.total_cmp(a.1));
    if !reqs.is_empty() {
        t += "\n| API request | Per second | Mean ms |\n|---|---|---|\n";
    }
    for (what, rate) in reqs {
        let verb_res = what.rsplit_once(' ').map_or(what.as_str(), |(v, _)| v);
        let mean = u
            .mean_latency_ms
            .get(verb_res)
            .map_or("—".to_owned(), |m| format!("{m:.1}"));
        t += &format!("| {what} | {rate:.1} | {mean} |\n");
    }
    for (level, ms) in &u.fairness_wait_ms {
        t += &format!("\nAPI Priority and Fairness, {level}: waited {ms:.2} ms on average");
        if let Some(r) = u.fairness_rejected.get(level) {
            t += &format!(", {r:.0} rejected");
        }
    }
    t.push('\n');
    t
}
