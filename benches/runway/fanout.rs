//! What a fan-out costs: one Run whose `forEach` step calls a local HTTP upstream once per item,
//! end to end (from `tools/call` to `completed` on `tasks/get`), against the same number of
//! one-step Runs created at once.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::json;

use super::procs::{self, work_dir};
use super::{Plan, WORKFLOWS, await_all, completed, create_many, one_run};

/// One fan-out shape, measured `runs` times one after another.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Case {
    /// What ran.
    pub name: String,
    /// Items per Run (or Runs, for the baseline).
    pub items: usize,
    /// Items in progress at once.
    pub parallelism: usize,
    /// Repetitions.
    pub runs: usize,
    /// Median time from `tools/call` to `completed`.
    pub p50_ms: f64,
    /// Slowest repetition.
    pub max_ms: f64,
    /// Items finished per second at the median.
    pub items_per_sec: f64,
}

/// An upstream that answers every request at once.
async fn upstream() -> SocketAddr {
    let app = axum::Router::new().fallback(|| async { axum::Json(json!({"ok": true})) });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let addr = listener.local_addr().expect("a bound address");
    tokio::spawn(async move {
        axum::serve(listener, app)
            .await
            .expect("the upstream serves")
    });
    addr
}

fn workflows(upstream: SocketAddr) -> String {
    let fan = |name: &str, parallelism: usize| {
        format!(
            r#"
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: {{ name: {name} }}
spec:
  tool:
    description: One call per item.
    inputSchema: {{ type: object, properties: {{ count: {{ type: integer }} }}, required: [count] }}
  execution: {{ ttlAfterFinished: 24h }}
  steps:
    - name: each
      forEach: {{ items: "{{{{ range(args.count) | list }}}}", parallelism: {parallelism} }}
      http: {{ method: POST, url: "http://{upstream}/item/{{{{ item }}}}" }}
  result: {{ content: [ {{ type: text, text: "{{{{ steps.each.output | length }}}} items" }} ] }}
"#
        )
    };
    format!(
        r#"{}
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: {{ name: one-call }}
spec:
  tool: {{ description: One call. }}
  execution: {{ ttlAfterFinished: 24h }}
  steps: [ {{ name: call, http: {{ method: POST, url: "http://{upstream}/item/0" }} }} ]
  result: {{ content: [ {{ type: text, text: done }} ] }}
"#,
        [fan("fan-p100", 100), fan("fan-p10", 10)].concat()
    )
}

fn summarize(name: &str, items: usize, parallelism: usize, mut took: Vec<Duration>) -> Case {
    took.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let p50 = took[took.len() / 2];
    Case {
        name: name.to_owned(),
        items,
        parallelism,
        runs: took.len(),
        p50_ms: ms(p50),
        max_ms: took.last().map(|d| ms(*d)).unwrap_or_default(),
        items_per_sec: items as f64 / p50.as_secs_f64().max(1e-9),
    }
}

/// Every case, on one fresh `runway serve`.
pub async fn bench(work: &Path, plan: Plan) -> Vec<Case> {
    let up = upstream().await;
    let dir = work_dir(work, "fan-out");
    std::fs::write(dir.join("workflows/bench.yaml"), WORKFLOWS).expect("workflows written");
    std::fs::write(dir.join("workflows/fan.yaml"), workflows(up)).expect("workflows written");
    let mut p = procs::runway(&dir, super::free_addr(), "runway.log");
    p.ready(Some("/healthz")).await;
    let addr = p.addr;
    let reps = if plan.quick { 2 } else { 5 };
    let mut cases = Vec::new();
    for (tool, items, parallelism, reps) in [
        ("fan-p100", 100, 100, reps),
        ("fan-p10", 100, 10, reps),
        ("fan-p100", 1000, 100, reps.min(3)),
    ] {
        // One untimed Run first: the Workflow's first use warms nothing it should not.
        one_run(addr, tool, json!({"count": 1})).await;
        let mut took = Vec::new();
        for _ in 0..reps {
            let start = Instant::now();
            one_run(addr, tool, json!({"count": items})).await;
            took.push(start.elapsed());
        }
        let name = format!("1 Run × {items} items, {parallelism} at once");
        cases.push(summarize(&name, items, parallelism, took));
    }
    let mut took = Vec::new();
    for _ in 0..reps {
        let start = Instant::now();
        let ids = create_many(addr, "one-call", json!({}), 100, 100).await;
        await_all(addr, &ids, 100, completed).await;
        took.push(start.elapsed());
    }
    cases.push(summarize(
        "100 one-call Runs at once (baseline)",
        100,
        100,
        took,
    ));
    p.kill();
    cases
}

/// The fan-out table (Markdown), as the report prints it.
pub fn table(cases: &[Case]) -> String {
    let mut t = String::from(
        "| Fan-out (HTTP upstream on loopback) | Runs | p50 | max | items/s |\n|---|---|---|---|---|\n",
    );
    for c in cases {
        t.push_str(&format!(
            "| {} | {} | {:.0} ms | {:.0} ms | {} |\n",
            c.name,
            c.runs,
            c.p50_ms,
            c.max_ms,
            super::rate(c.items_per_sec)
        ));
    }
    t
}
