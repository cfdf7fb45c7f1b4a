//! The e2e tier's failover tests, in a binary (and so a control plane) of their own because they
//! kill and stop operator replicas: `kill -9` of the leader, a restart of the only replica, and
//! shards handed over on a graceful stop; and a replica started with other flags
//! (`--no-step-events`), which must drive every Run alone. The replicas here split the Runs into
//! two shards.

mod cluster;
#[path = "../support/mod.rs"]
mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use cluster::{sharded_cluster, token};
use serde_json::json;
use support::mcp::Client;
use support::sink::Sink;

/// Shards of this binary's replicas.
const SHARDS: u32 = 2;

/// The tests here kill replicas: one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const NAP: &str = r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: nap }
spec:
  steps:
    - name: first
      delay: { duration: "{{ args.wait }}" }
    - name: second
      delay: { duration: "{{ args.wait }}" }
  result:
    content: [ { type: text, text: "done" } ]
"#;

#[tokio::test(flavor = "multi_thread")]
async fn the_other_replica_takes_over_when_the_leader_dies_and_a_restarted_one_resumes() {
    let _one_at_a_time = SERIAL.lock().await;
    let c = sharded_cluster(2, SHARDS);
    let ns = c.namespace("failover");
    assert!(c.apply("admin", &ns, NAP).status.success());
    c.wait_ready(&ns, &["nap"]);
    let leader = c.leader();
    let survivor = c
        .replicas()
        .into_iter()
        .find(|r| *r != leader)
        .expect("two replicas");
    let client = |replica: &str| {
        Client::new(
            &c.base_of(replica),
            Some(&token("alice")),
            &format!("/namespaces/{ns}/mcp"),
        )
    };
    let call = |replica: &str| {
        let cl = client(replica);
        async move {
            let r = cl.call("nap", json!({"wait": "2s"})).await;
            r.result()["taskId"].as_str().unwrap().to_owned()
        }
    };
    let in_flight = call(&survivor).await;
    c.wait_jsonpath(
        &ns,
        &format!("run/{in_flight}"),
        "{.status.currentStep}",
        "first",
    );
    c.kill(&leader);
    let new = call(&survivor).await;
    let alice = client(&survivor);
    for id in [&in_flight, &new] {
        c.wait_jsonpath(&ns, &format!("run/{id}"), "{.status.phase}", "Succeeded");
        let done = alice.get(id).await;
        assert_eq!(done.result()["status"], "completed");
    }
    assert_ne!(c.leader(), leader);

    // Now the only replica restarts mid-run (a crash, then a new process).
    let only = c.leader();
    for other in c.replicas().into_iter().filter(|r| *r != only) {
        c.kill(&other);
    }
    let mid = call(&only).await;
    c.wait_jsonpath(&ns, &format!("run/{mid}"), "{.status.currentStep}", "first");
    c.kill(&only);
    c.start_operator(&format!("{only}-restarted"));
    c.wait_jsonpath(&ns, &format!("run/{mid}"), "{.status.phase}", "Succeeded");
    let steps = c.admin(&[
        "get",
        "run",
        &mid,
        "-n",
        &ns,
        "-o",
        "jsonpath={.status.steps[*].attempt}",
    ]);
    assert_eq!(steps.trim(), "1 1", "each step ran once");
}

#[tokio::test(flavor = "multi_thread")]
async fn retried_idempotent_calls_across_replicas_and_a_leader_kill_make_one_run_each() {
    let _one_at_a_time = SERIAL.lock().await;
    let c = sharded_cluster(2, SHARDS);
    let ns = c.namespace("idem");
    let sink = Sink::start().await;
    let url = &sink.url;
    let wf = format!(
        r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: {{ name: hooks }}
spec:
  steps:
    - name: first
      http: {{ method: POST, url: "{url}" }}
    - name: pause
      delay: {{ duration: 150ms }}
    - name: second
      http: {{ method: POST, url: "{url}" }}
"#
    );
    assert!(c.apply("admin", &ns, &wf).status.success());
    c.wait_ready(&ns, &["hooks"]);
    // A replica started by hand without the key file reads the chart's Secret: all agree.
    c.start_operator_keyed("replica-by-hand", false);
    let clients: Vec<Client> = (0..c.mcp_ports().len())
        .map(|i| {
            Client::new(
                &c.base(i),
                Some(&token("alice")),
                &format!("/namespaces/{ns}/mcp"),
            )
        })
        .collect();

    let mut answers: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    // Every key is sent to every replica: the answers must all name one Run.
    for i in 0..6 {
        let key = format!("key-{i}");
        for cl in &clients {
            let id = cl
                .idempotent_call("hooks", json!({}), &key, Duration::from_secs(20))
                .await
                .expect("a live replica answers");
            answers.entry(key.clone()).or_default().insert(id);
        }
    }
    // Kill the leader while a batch is in flight on it; re-send what got no answer.
    let leader = c.leader();
    let leader_client = Client::new(
        &c.base_of(&leader),
        Some(&token("alice")),
        &format!("/namespaces/{ns}/mcp"),
    );
    let batch: Vec<String> = (6..14).map(|i| format!("key-{i}")).collect();
    let in_flight = {
        let cl = leader_client.clone();
        let batch = batch.clone();
        tokio::spawn(async move {
            let mut got = Vec::new();
            for k in batch {
                let id = cl
                    .idempotent_call("hooks", json!({}), &k, Duration::from_secs(20))
                    .await;
                got.push((k.clone(), id));
            }
            got
        })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    c.kill(&leader);
    let mut unanswered = Vec::new();
    for (k, got) in in_flight.await.unwrap() {
        match got {
            Some(id) => {
                answers.entry(k).or_default().insert(id);
            }
            None => unanswered.push(k),
        }
    }
    let survivor = Client::new(
        &c.base_of(&c.replicas()[0]),
        Some(&token("alice")),
        &format!("/namespaces/{ns}/mcp"),
    );
    for k in batch {
        // Every key again on a survivor: the ones answered before must come back the same.
        let id = survivor
            .idempotent_call("hooks", json!({}), &k, Duration::from_secs(20))
            .await
            .expect("the survivor answers");
        answers.entry(k).or_default().insert(id);
    }
    for (key, ids) in &answers {
        assert_eq!(ids.len(), 1, "{key} named {ids:?}");
    }
    for id in answers.values().flatten() {
        c.wait_jsonpath(&ns, &format!("run/{id}"), "{.status.phase}", "Succeeded");
    }
    let runs: serde_json::Value =
        serde_json::from_str(&c.admin(&["get", "runs", "-n", &ns, "-o", "json"])).unwrap();
    let runs = runs["items"].as_array().unwrap();
    assert_eq!(runs.len(), answers.len(), "one Run per idempotency key");
    let mut expected = BTreeSet::new();
    for r in runs {
        let uid = r["metadata"]["uid"].as_str().unwrap();
        expected.insert(format!("{uid}/first"));
        expected.insert(format!("{uid}/second"));
    }
    let seen: BTreeSet<String> = sink.deliveries().keys().cloned().collect();
    assert_eq!(
        seen, expected,
        "each step delivered under its one Run's key"
    );
    println!(
        "operator crash test: {} keys, {} unanswered when the leader died, {} deliveries",
        answers.len(),
        unanswered.len(),
        sink.deliveries().values().sum::<usize>()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn shards_are_shared_handed_over_on_a_graceful_stop_and_shared_again() {
    let _one_at_a_time = SERIAL.lock().await;
    let c = sharded_cluster(2, SHARDS);
    let (a, b, d) = ("share-a", "share-b", "share-d");
    c.start_operator(a);
    c.start_operator(b);
    // Whatever the other tests left running stops the way Kubernetes stops a pod.
    for other in c.replicas().into_iter().filter(|r| r != a && r != b) {
        c.stop(&other);
    }
    let pair = |x: &str, y: &str| {
        let mut want = vec![x.to_owned(), y.to_owned()];
        want.sort();
        move |h: &[String]| {
            let mut h = h.to_vec();
            h.sort();
            h == want
        }
    };
    c.wait_holders("a and b to drive one shard each", pair(a, b));

    let ns = c.namespace("shards");
    assert!(c.apply("admin", &ns, NAP).status.success());
    c.wait_ready(&ns, &["nap"]);
    let runs_on = |replica: &str| {
        let cl = Client::new(
            &c.base_of(replica),
            Some(&token("alice")),
            &format!("/namespaces/{ns}/mcp"),
        );
        let ns = ns.clone();
        async move {
            let mut ids = vec![];
            for _ in 0..6 {
                let r = cl.call("nap", json!({"wait": "100ms"})).await;
                ids.push(r.result()["taskId"].as_str().unwrap().to_owned());
            }
            for id in &ids {
                c.wait_jsonpath(&ns, &format!("run/{id}"), "{.status.phase}", "Succeeded");
            }
        }
    };
    runs_on(a).await;

    // A graceful stop hands both of a's shards to b, and takes a's member Lease away.
    c.stop(a);
    c.wait_holders("b to drive both shards", |h| h.iter().all(|x| x == b));
    let member = c.admin(&[
        "get",
        "leases",
        "-n",
        cluster::SYSTEM_NS,
        "-o",
        "jsonpath={.items[*].metadata.name}",
    ]);
    assert!(!member.contains(&format!("member-{a}")), "{member}");
    runs_on(b).await;

    // A new replica gets its share.
    c.start_operator(d);
    c.wait_holders("b and d to drive one shard each", pair(b, d));
    runs_on(d).await;
}

const REFUSES: &str = r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: refuses }
spec:
  steps:
    - name: look
      delay: { duration: 0s }
    - name: refuse
      fail: { message: "not today" }
"#;

#[tokio::test(flavor = "multi_thread")]
async fn without_step_events_kubectl_shows_a_runs_own_events_and_its_warnings() {
    let _one_at_a_time = SERIAL.lock().await;
    let c = sharded_cluster(2, SHARDS);
    let quiet = "quiet";
    c.start_operator_with(quiet, true, SHARDS, &["--no-step-events"]);
    for other in c.replicas().into_iter().filter(|r| r != quiet) {
        c.stop(&other);
    }
    c.wait_holders("the quiet replica to drive every shard", |h| {
        h.iter().all(|x| x == quiet)
    });
    let ns = c.namespace("quiet");
    assert!(c.apply("admin", &ns, REFUSES).status.success());
    c.wait_ready(&ns, &["refuses"]);
    let alice = Client::new(
        &c.base_of(quiet),
        Some(&token("alice")),
        &format!("/namespaces/{ns}/mcp"),
    );
    let run = alice.call("refuses", json!({})).await.result()["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    c.wait_jsonpath(&ns, &format!("run/{run}"), "{.status.phase}", "Failed");
    // Events leave a queue after the status that caused them: wait until none is left.
    let metrics = format!("http://127.0.0.1:{}/metrics", c.metrics_port(quiet));
    let deadline = std::time::Instant::now() + support::harness::PATIENCE;
    loop {
        let text = reqwest::get(&metrics).await.unwrap().text().await.unwrap();
        if text.lines().any(|l| l == "runway_events_queued 0") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{text}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let listed = c.admin(&[
        "get",
        "events",
        "-n",
        &ns,
        "--field-selector",
        &format!("involvedObject.kind=Run,involvedObject.name={run}"),
        "-o",
        "jsonpath={.items[*].reason}",
    ]);
    let reasons: BTreeSet<&str> = listed.split_whitespace().collect();
    assert_eq!(
        reasons,
        BTreeSet::from(["Finished", "StepFailed"]),
        "{listed}"
    );
    let steps = c.admin(&[
        "get",
        "run",
        "-n",
        &ns,
        &run,
        "-o",
        "jsonpath={.status.steps[*].phase}",
    ]);
    assert_eq!(steps, "Succeeded Failed", "status.steps keeps every step");
    // The other tests expect two replicas with the usual flags.
    let (a, b) = ("after-quiet-a", "after-quiet-b");
    c.start_operator(a);
    c.start_operator(b);
    c.stop(quiet);
    c.wait_holders("two usual replicas to drive the shards again", |h| {
        h.iter().all(|x| x == a || x == b)
    });
}

const TRACED: &str = r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: traced }
spec:
  steps:
    - name: notify
      http: { method: POST, url: "SINK" }
    - name: approve
      input:
        requests:
          - name: ok
            message: "Ship?"
            requestedSchema: { type: object, properties: {} }
    - name: again
      http: { method: POST, url: "SINK" }
  result:
    content: [ { type: text, text: "shipped" } ]
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_runs_trace_goes_on_from_the_replica_that_takes_over() {
    let _one_at_a_time = SERIAL.lock().await;
    let c = sharded_cluster(2, SHARDS);
    let receiver = support::otlp::Receiver::start().await;
    let sink = Sink::start().await;
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url.as_str()),
        ("OTEL_BSP_SCHEDULE_DELAY", "50"),
    ];
    let (a, b) = ("traced-a", "traced-b");
    for replica in [a, b] {
        c.start_operator_env(replica, true, SHARDS, &[], &env);
    }
    for other in c.replicas().into_iter().filter(|r| r != a && r != b) {
        c.stop(&other);
    }
    c.wait_holders("both traced replicas holding a shard", |h| {
        h.iter().filter(|x| *x == a || *x == b).count() == SHARDS as usize
    });
    let ns = c.namespace("traced");
    assert!(
        c.apply("admin", &ns, &TRACED.replace("SINK", &sink.url))
            .status
            .success()
    );
    c.wait_ready(&ns, &["traced"]);
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let caller = "00f067aa0ba902b7";
    let alice = Client::new(
        &c.base_of(a),
        Some(&token("alice")),
        &format!("/namespaces/{ns}/mcp"),
    );
    let reply = alice
        .rpc(
            "tools/call",
            Some("traced"),
            json!({"name": "traced", "arguments": {},
                "_meta": {"traceparent": format!("00-{trace}-{caller}-01")}}),
        )
        .await;
    let task = reply.result()["taskId"].as_str().unwrap().to_owned();
    alice.await_status(&task, "input_required").await;
    // The replica that drove the first step dies; the other takes its shard over.
    let spans = receiver
        .wait_for("the first step", |s| {
            s.iter().any(|x| x.name == "step notify")
        })
        .await;
    let first = spans
        .iter()
        .find(|x| x.name == "step notify")
        .unwrap()
        .clone();
    let driver = first.resource["service.instance.id"].clone();
    let survivor = if driver == a { b } else { a };
    c.kill(&driver);
    let alice = Client::new(
        &c.base_of(survivor),
        Some(&token("alice")),
        &format!("/namespaces/{ns}/mcp"),
    );
    alice
        .update(
            &task,
            json!({"approve.ok": {"action": "accept", "content": {}}}),
        )
        .await
        .assert_complete();
    alice.await_status(&task, "completed").await;
    let spans = receiver
        .wait_for("the Run's span", |s| {
            s.iter().any(|x| x.name == "run traced")
        })
        .await;
    let run = spans.iter().find(|x| x.name == "run traced").unwrap();
    let second = spans.iter().find(|x| x.name == "step again").unwrap();
    assert_eq!(run.trace_id, trace);
    assert_eq!(run.resource["service.instance.id"], survivor);
    // One trace across both replicas: the first step (from the dead one) and the last (from
    // the survivor) hang under the same Run span, which hangs under the call's request.
    for step in [&first, second] {
        assert_eq!(step.trace_id, trace);
        assert_eq!(step.parent_span_id, run.span_id);
    }
    assert_eq!(second.resource["service.instance.id"], survivor);
    let request = spans
        .iter()
        .find(|x| x.name == "tools/call traced" && x.trace_id == trace)
        .expect("the request span");
    assert_eq!(request.parent_span_id, caller);
    assert_eq!(run.parent_span_id, request.span_id);
    // The http steps told their receiver the trace (a traceparent per delivery).
    let sent = sink.traceparent.lock().unwrap().clone();
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert!(sent.iter().all(|t| t.starts_with(&format!("00-{trace}-"))));
}
