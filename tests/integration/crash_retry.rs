//! Retrying clients against a crashing server: batches of `tools/call` with idempotency keys
//! while `runway serve` is killed with SIGKILL at seeded random instants; after every restart
//! each call that got no answer is sent again with the same key. A local HTTP sink counts the
//! deliveries of the Workflow's two webhook steps per `Idempotency-Key`.
//!
//! Asserted: no Run lost, none duplicated (one Run per idempotency key, and every key answered
//! with the same task each time), every step delivered under exactly one Run's key, every task
//! finished. `RUNWAY_CRASH_KILLS` (default 3) and `RUNWAY_CRASH_SEED` set the length and the
//! instants; `make crash-soak` runs a long version.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde_json::json;
use support::harness::TempDir;
use support::mcp::{AUTH, Client};
use support::process::Process;
use support::sink::Sink;

/// Calls sent in each round, besides the re-sends.
const BATCH: usize = 12;

/// A small deterministic generator (xorshift64*), so a seed replays the same kill instants.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn workflow(url: &str) -> String {
    format!(
        r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: {{ name: hooks, namespace: team-a }}
spec:
  tool:
    inputSchema: {{ type: object, properties: {{ n: {{ type: integer }} }} }}
  steps:
    - name: first
      http: {{ method: POST, url: "{url}", body: {{ n: "{{{{ args.n }}}}" }} }}
      retry: {{ limit: 20, backoff: 50ms, maxBackoff: 500ms }}
    - name: pause
      delay: {{ duration: 150ms }}
    - name: second
      http: {{ method: POST, url: "{url}", body: {{ n: "{{{{ args.n }}}}" }} }}
      retry: {{ limit: 20, backoff: 50ms, maxBackoff: 500ms }}
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retried_idempotent_calls_survive_kill_9_without_duplicates() {
    let kills = env_u64("RUNWAY_CRASH_KILLS", 3);
    let seed = env_u64("RUNWAY_CRASH_SEED", 0x5eed_2026);
    let mut rng = Rng(seed | 1);
    let sink = Sink::start().await;
    let dir = TempDir::new();
    std::fs::create_dir_all(dir.path().join("workflows")).unwrap();
    std::fs::write(dir.path().join("workflows/wf.yaml"), workflow(&sink.url)).unwrap();
    std::fs::write(dir.path().join("auth.yaml"), AUTH).unwrap();

    // Every key ever sent, and each answer it got (all must be the same task).
    let mut answers: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut unanswered: Vec<(String, usize)> = Vec::new();
    let mut sent = 0usize;
    let mut lost_answers = 0usize;
    for round in 0..=kills {
        // The server keeps its state key in its database: no key file.
        let mut p = Some(Process::start_keyed(dir.path(), 0, None).await);
        let base = p.as_ref().unwrap().base();
        let c = Client::new(&base, Some("alice-token"), "/namespaces/team-a/mcp");
        let mut batch = std::mem::take(&mut unanswered);
        for i in 0..BATCH {
            let n = round as usize * BATCH + i;
            batch.push((format!("key-{n}"), n));
        }
        let last = round == kills;
        // A round that is not cut short has every call answered: it waits as long as any test
        // waits, as a freshly started server resumes the earlier Runs beside the batch.
        let patience = if last {
            support::harness::PATIENCE
        } else {
            Duration::from_secs(10)
        };
        let calls = batch.clone().into_iter().map(|(key, n)| {
            let c = c.clone();
            async move {
                let got = c
                    .idempotent_call("hooks", json!({"n": n}), &key, patience)
                    .await;
                (key.clone(), n, got)
            }
        });
        let all = futures::future::join_all(calls);
        let results = if last {
            all.await
        } else {
            // Kill at a seeded instant while the batch is in flight (or its Runs are running).
            let at = Duration::from_millis(rng.below(250));
            let handle = tokio::spawn(all);
            tokio::time::sleep(at).await;
            p.take().unwrap().kill9().await;
            handle.await.unwrap()
        };
        for (key, n, got) in results {
            sent += 1;
            match got {
                Some(id) => {
                    answers.entry(key).or_default().insert(id);
                }
                None => {
                    lost_answers += 1;
                    answers.entry(key.clone()).or_default();
                    unanswered.push((key, n));
                }
            }
        }
        if last {
            assert!(unanswered.is_empty(), "the last round runs without a kill");
            // Every task finishes.
            let ids: BTreeSet<&String> = answers.values().flatten().collect();
            for id in &ids {
                let t = c
                    .await_task(id, "finished", |t| {
                        matches!(
                            t["status"].as_str(),
                            Some("completed" | "failed" | "cancelled")
                        )
                    })
                    .await;
                assert_eq!(t["status"], "completed", "{t}");
            }
            p.take().unwrap().kill9().await;
        }
    }

    // One task per idempotency key, ever.
    for (key, ids) in &answers {
        assert_eq!(ids.len(), 1, "{key} was answered with {ids:?}");
    }
    let store = runway::store::sqlite::SqliteStore::open(&dir.path().join("runs.db")).unwrap();
    let runs = runway::store::RunStore::list(&store, Some("team-a"), &Default::default())
        .await
        .unwrap();
    assert_eq!(runs.len(), answers.len(), "one Run per idempotency key");
    let names: BTreeSet<String> = runs
        .iter()
        .filter_map(|r| r.metadata.name.clone())
        .collect();
    let answered: BTreeSet<String> = answers.values().flatten().cloned().collect();
    assert_eq!(
        names, answered,
        "every Run is a task some call was answered with"
    );
    // Every step reached the sink under exactly one key: its own Run's.
    let uids: BTreeSet<String> = runs.iter().filter_map(|r| r.metadata.uid.clone()).collect();
    let deliveries = sink.deliveries();
    let mut expected = BTreeSet::new();
    for uid in &uids {
        for step in ["first", "second"] {
            expected.insert(format!("{uid}/{step}"));
        }
    }
    let keys: BTreeSet<String> = deliveries.keys().cloned().collect();
    assert_eq!(
        keys, expected,
        "deliveries under keys of no Run, or steps never delivered"
    );
    let repeats: usize = deliveries.values().map(|n| n - 1).sum();
    for r in &runs {
        let phase = r.phase();
        assert_eq!(phase, runway::api::RunPhase::Succeeded, "{r:?}");
    }
    println!(
        "crash test: seed {seed:#x}, {kills} kills, {sent} calls sent ({lost_answers} without an \
         answer, re-sent), {} Runs, {} deliveries, {repeats} repeated under the same key, 0 duplicates",
        runs.len(),
        deliveries.values().sum::<usize>()
    );
}
