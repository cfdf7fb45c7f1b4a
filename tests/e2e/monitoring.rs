//! The chart's alerts and dashboard against what the operator replicas actually expose: every
//! metric a rule or a panel reads is in a real scrape, every expression parses (`promtool
//! check rules`), and the alerts fire — and stay quiet — on series taken from the scrapes
//! (`promtool test rules`). `make e2e` renders the rules and the dashboard beside the chart.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;

use serde_json::{Value, json};

use crate::cluster::{self, Cluster};
use crate::{apply_ok, mcp, task_id, up};

/// One sample of a scrape.
#[derive(Debug, Clone)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// A scrape: its samples, and the metric names its `# TYPE` lines declare (with the suffixes
/// their samples take), so that a family with no sample yet still counts as exposed.
struct Scrape {
    samples: Vec<Sample>,
    declared: BTreeSet<String>,
}

fn parse(text: &str) -> Scrape {
    let mut samples = vec![];
    let mut declared = BTreeSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut parts = rest.split_whitespace();
            let (name, kind) = (parts.next().unwrap(), parts.next().unwrap_or_default());
            let suffixes: &[&str] = match kind {
                "counter" => &["_total"],
                "histogram" => &["_bucket", "_count", "_sum"],
                "info" => &["_info"],
                _ => &[""],
            };
            for s in suffixes {
                declared.insert(format!("{name}{s}"));
            }
            continue;
        }
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let (series, value) = line.rsplit_once(' ').unwrap();
        let (name, labels) = match series.split_once('{') {
            Some((n, rest)) => (n, rest.trim_end_matches('}')),
            None => (series, ""),
        };
        let labels = labels
            .split("\",")
            .filter(|kv| !kv.is_empty())
            .map(|kv| {
                let (k, v) = kv.split_once('=').unwrap();
                (k.to_owned(), v.trim_matches('"').to_owned())
            })
            .collect();
        samples.push(Sample {
            name: name.to_owned(),
            labels,
            value: value.parse().unwrap_or(0.0),
        });
    }
    Scrape { samples, declared }
}

async fn scrape(c: &Cluster, identity: &str) -> Scrape {
    runway::install_crypto_provider();
    let port = c.metrics_port(identity);
    let text = reqwest::get(format!("http://127.0.0.1:{port}/metrics"))
        .await
        .and_then(reqwest::Response::error_for_status)
        .unwrap_or_else(|e| panic!("scraping {identity}: {e}"))
        .text()
        .await
        .unwrap();
    parse(&text)
}

async fn scrape_all(c: &Cluster, replicas: &[String]) -> BTreeMap<String, Scrape> {
    let mut all = BTreeMap::new();
    for r in replicas {
        all.insert(r.clone(), scrape(c, r).await);
    }
    all
}

fn e2e_dir() -> PathBuf {
    cluster::root().join("target/e2e")
}

fn promtool(args: &[&str]) -> String {
    let out = Command::new("promtool")
        .args(args)
        .output()
        .expect("promtool is installed (Debian package prometheus; .ci/run installs it)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool {args:?}:\n{text}");
    text
}

/// Metric names an expression reads.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let bytes = expr.as_bytes();
    let mut i = 0;
    while let Some(at) = expr[i..].find("runway_") {
        let start = i + at;
        let mut end = start;
        while end < bytes.len() && (bytes[end].is_ascii_alphanumeric() || bytes[end] == b'_') {
            end += 1;
        }
        names.insert(expr[start..end].to_owned());
        i = end;
    }
    names
}

/// A promtool series selector of `s`, as replica `instance` of job `runway` would be scraped.
fn selector(s: &Sample, instance: &str) -> String {
    let mut labels: Vec<String> = s
        .labels
        .iter()
        .map(|(k, v)| format!("{k}={}", json!(v)))
        .collect();
    labels.push(format!("instance={}", json!(instance)));
    labels.push("job=\"runway\"".to_owned());
    format!("{}{{{}}}", s.name, labels.join(","))
}

const WORKFLOWS: &str = r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: fine }
spec:
  result:
    content: [ { type: text, text: "fine" } ]
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: broken }
spec:
  steps:
    - name: give-up
      fail: { message: "broken on purpose" }
"#;

/// The series the alerts read.
const ALERTED: [&str; 9] = [
    "runway_runs_finished_total",
    "runway_runs",
    "runway_run_start_delay_seconds_count",
    "runway_reconcile_errors_total",
    "runway_shards",
    "runway_shards_held",
    "runway_build_info",
    "runway_mcp_requests_total",
    "runway_queue_depth",
];

#[tokio::test(flavor = "multi_thread")]
async fn the_charts_alerts_and_dashboard_read_what_the_operator_exposes() {
    let c = up();
    let ns = c.namespace("monitoring");
    apply_ok(c, &ns, WORKFLOWS);
    let replicas = c.replicas();
    let before = scrape_all(c, &replicas).await;
    let alice = mcp(c, 0, "alice", &ns);
    for tool in ["fine", "fine", "broken", "broken"] {
        let id = task_id(&alice.call(tool, json!({})).await);
        alice.await_status(&id, "completed").await;
    }
    // The counts are the leader's, written as it ended each Run: scraped once all are in.
    let deadline = std::time::Instant::now() + cluster::PATIENCE;
    let after: BTreeMap<String, Scrape> = loop {
        let now = scrape_all(c, &replicas).await;
        let ended: f64 = now
            .values()
            .flat_map(|s| &s.samples)
            .filter(|s| s.name == "runway_runs_finished_total" && s.labels["namespace"] == ns)
            .map(|s| s.value)
            .sum();
        if ended >= 4.0 || std::time::Instant::now() > deadline {
            break now;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };

    // Every metric a rule or a panel reads is exposed.
    let rules_file = e2e_dir().join("rules.yaml");
    let rules: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(&rules_file).unwrap()).unwrap();
    let board: Value =
        serde_json::from_str(&std::fs::read_to_string(e2e_dir().join("dashboard.json")).unwrap())
            .unwrap();
    let rule_exprs: Vec<String> = rules["groups"][0]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["expr"].as_str().unwrap().to_owned())
        .collect();
    let panel_exprs: Vec<String> = board["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["targets"].as_array().cloned().unwrap_or_default())
        .map(|t| {
            t["expr"]
                .as_str()
                .unwrap()
                .replace("$__rate_interval", "5m")
        })
        .collect();
    let exposed: BTreeSet<String> = after
        .values()
        .flat_map(|s| {
            s.samples
                .iter()
                .map(|x| x.name.clone())
                .chain(s.declared.iter().cloned())
        })
        .collect();
    for expr in rule_exprs.iter().chain(&panel_exprs) {
        for name in metric_names(expr) {
            assert!(
                exposed.contains(&name),
                "{name} (in {expr}) is not exposed; exposed: {exposed:?}"
            );
        }
    }

    // Every expression parses: the rules as they are, the panels as recording rules.
    promtool(&["check", "rules", rules_file.to_str().unwrap()]);
    let panels_file = e2e_dir().join(format!("dashboard-rules-{ns}.yaml"));
    let recorded: Vec<Value> = panel_exprs
        .iter()
        .enumerate()
        .map(|(i, e)| json!({"record": format!("runway:dashboard_panel_{i}"), "expr": e}))
        .collect();
    std::fs::write(
        &panels_file,
        serde_json::to_string(&json!({"groups": [{"name": "dashboard", "rules": recorded}]}))
            .unwrap(),
    )
    .unwrap();
    promtool(&["check", "rules", panels_file.to_str().unwrap()]);

    // The alerts on the scraped series: each replica's sample before the Runs, then after.
    let mut series = vec![];
    let mut leader_held = None;
    for (replica, scraped) in &after {
        for s in scraped
            .samples
            .iter()
            .filter(|s| ALERTED.contains(&s.name.as_str()))
        {
            // Runs of other tests' namespaces end too: only this test's are in the series.
            if s.name == "runway_runs_finished_total" && s.labels["namespace"] != ns {
                continue;
            }
            let was = before[replica]
                .samples
                .iter()
                .find(|b| b.name == s.name && b.labels == s.labels)
                .map(|b| b.value)
                .unwrap_or(0.0);
            let sel = selector(s, replica);
            if s.name == "runway_shards_held" && s.value == 1.0 {
                leader_held = Some(sel.clone());
            }
            series.push((sel, format!("{was} {}x20", s.value)));
        }
    }
    let leader_held = leader_held.expect("one replica holds the shard");
    let description = format!(
        "100% of the Runs of Workflow broken in {ns} that ended in the last 15 minutes failed. \
         `kubectl get runs -n {ns} -l runway.dev/workflow=broken` lists them."
    );
    let input = |lost_leader: bool| -> Vec<Value> {
        series
            .iter()
            .map(|(sel, values)| {
                // The leader gone: its series stop after two minutes.
                let values = if lost_leader && sel == &leader_held {
                    "1 1 _x20".to_owned()
                } else {
                    values.clone()
                };
                json!({"series": sel, "values": values})
            })
            .collect()
    };
    let tests = json!({
        "rule_files": [rules_file.to_str().unwrap()],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": input(false),
                "alert_rule_test": [
                    {"eval_time": "10m", "alertname": "RunwayRunsFailing", "exp_alerts": [{
                        "exp_labels": {"severity": "warning", "namespace": ns, "workflow": "broken"},
                        "exp_annotations": {
                            "summary": format!("Runs of {ns}/broken are failing."),
                            "description": description,
                        }}]},
                    {"eval_time": "10m", "alertname": "RunwayShardWithoutHolder", "exp_alerts": []},
                    {"eval_time": "10m", "alertname": "RunwayOperatorAbsent", "exp_alerts": []},
                ]
            },
            {
                "interval": "1m",
                "input_series": input(true),
                "alert_rule_test": [
                    {"eval_time": "10m", "alertname": "RunwayShardWithoutHolder", "exp_alerts": [{
                        "exp_labels": {"severity": "critical"},
                        "exp_annotations": {
                            "summary": "Some Runs have no controller driving them.",
                            "description": "1: fewer shards are held than there are; the Runs of a shard without a holder do not move. Check the replicas and their Leases (`kubectl get lease -l runway.dev/lease-group`).",
                        }}]},
                ]
            }
        ]
    });
    let tests_file = e2e_dir().join(format!("alert-tests-{ns}.yaml"));
    std::fs::write(&tests_file, serde_json::to_string_pretty(&tests).unwrap()).unwrap();
    promtool(&["test", "rules", tests_file.to_str().unwrap()]);
}
