//! Traces, as an OTLP/HTTP receiver gets them (`support::otlp`, decoding with the official
//! protobuf definitions): a Run that crosses a `kill -9` of `runway serve`, calls an http
//! step and a tool step on another traced server, and waits for an answer, is one trace under
//! the caller's span, with every span where it belongs.

use crate::support;

use std::collections::BTreeSet;

use serde_json::json;
use support::harness::TempDir;
use support::mcp::Client;
use support::otlp::{Receiver, Span};
use support::process::Process;
use support::sink::Sink;
use support::upstream::{Proxy, auth_with_secrets, write_server_dir};

const UPSTREAM: &str = r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: echo, namespace: team-a }
spec:
  tool:
    inputSchema: { type: object, properties: { msg: { type: string } } }
  execution: { mode: sync }
  result:
    content: [ { type: text, text: "echo {{ args.msg }}" } ]
"#;

fn traced(sink: &str, upstream: &str) -> String {
    format!(
        r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: {{ name: traced, namespace: team-a }}
spec:
  tool:
    inputSchema: {{ type: object, properties: {{ msg: {{ type: string }} }}, required: [msg] }}
  execution: {{ pollInterval: 100ms }}
  steps:
    - name: notify
      http: {{ method: POST, url: "{sink}", body: {{ msg: "{{{{ args.msg }}}}" }} }}
    - name: relay
      tool:
        server:
          url: {upstream}
          headers:
            - name: Authorization
              valueFrom: {{ secretKeyRef: {{ name: upstream, key: authorization }} }}
        name: echo
        arguments: {{ msg: "{{{{ args.msg }}}}" }}
    - name: approve
      input:
        requests:
          - name: ok
            message: "Ship {{{{ args.msg }}}}?"
            requestedSchema: {{ type: object, properties: {{ ship: {{ type: boolean }} }}, required: [ship] }}
  result:
    content: [ {{ type: text, text: "shipped {{{{ args.msg }}}}" }} ]
"#
    )
}

/// What a traced server gets: the receiver's endpoint, and batches sent without delay.
fn otel_env(receiver: &Receiver) -> Vec<(&'static str, String)> {
    vec![
        ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url.clone()),
        ("OTEL_BSP_SCHEDULE_DELAY", "50".to_owned()),
    ]
}

async fn start(dir: &TempDir, port: u16, env: &[(&'static str, String)]) -> Process {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    Process::start_env(dir.path(), port, Some(&dir.path().join("state.key")), &env).await
}

fn named<'a>(spans: &'a [Span], name: &str) -> Vec<&'a Span> {
    spans.iter().filter(|s| s.name == name).collect()
}

fn one<'a>(spans: &'a [Span], name: &str) -> &'a Span {
    let found = named(spans, name);
    assert_eq!(found.len(), 1, "one {name} span: {found:#?}");
    found[0]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_across_a_restart_is_one_trace_under_the_callers_span() {
    let receiver = Receiver::start().await;
    let env = otel_env(&receiver);
    let sink = Sink::start().await;
    // B, the upstream of the tool step, exports to the same receiver.
    let b_dir = TempDir::new();
    write_server_dir(
        b_dir.path(),
        &[("upstream.yaml", UPSTREAM)],
        support::mcp::AUTH,
    );
    std::fs::write(
        b_dir.path().join("state.key"),
        "b-state-key-of-at-least-thirty-two-bytes",
    )
    .unwrap();
    let b = start(&b_dir, 0, &env).await;
    let proxy = Proxy::start(&b.base()).await;
    let a_dir = TempDir::new();
    write_server_dir(
        a_dir.path(),
        &[(
            "traced.yaml",
            &traced(
                &sink.url,
                &format!("http://{}/namespaces/team-a/mcp", proxy.addr),
            ),
        )],
        &auth_with_secrets("  team-a/upstream: { authorization: Bearer alice-token }"),
    );
    std::fs::write(
        a_dir.path().join("state.key"),
        "a-state-key-of-at-least-thirty-two-bytes",
    )
    .unwrap();
    let a = start(&a_dir, 0, &env).await;
    let port = a.port;
    let alice = Client::new(&a.base(), Some("alice-token"), "/namespaces/team-a/mcp");

    // The caller's own span, as an agent framework would send it.
    let trace = data_encoding::HEXLOWER.encode(&rand_bytes::<16>());
    let caller = data_encoding::HEXLOWER.encode(&rand_bytes::<8>());
    let reply = alice
        .rpc(
            "tools/call",
            Some("traced"),
            json!({"name": "traced", "arguments": {"msg": "v2"},
                "_meta": {"traceparent": format!("00-{trace}-{caller}-01")}}),
        )
        .await;
    let task = reply.result()["taskId"].as_str().unwrap().to_owned();
    alice.await_status(&task, "input_required").await;
    // The step spans of the first process are out before it dies.
    let first_pid = a.child.id().unwrap().to_string();
    receiver
        .wait_for("the first process's step spans", |s| {
            named(s, "step relay").len() == 1 && named(s, "step notify").len() == 1
        })
        .await;
    a.kill9().await;
    let a = start(&a_dir, port, &env).await;
    let second_pid = a.child.id().unwrap().to_string();
    let alice = Client::new(&a.base(), Some("alice-token"), "/namespaces/team-a/mcp");
    alice
        .update(
            &task,
            json!({"approve.ok": {"action": "accept", "content": {"ship": true}}}),
        )
        .await
        .assert_complete();
    alice.await_status(&task, "completed").await;
    let spans = receiver
        .wait_for("the Run's span", |s| !named(s, "run traced").is_empty())
        .await;

    // Everything of this call is in the caller's trace.
    let ours: Vec<Span> = spans
        .iter()
        .filter(|s| s.trace_id == trace)
        .cloned()
        .collect();
    let request = ours
        .iter()
        .find(|s| s.name == "tools/call traced")
        .expect("the request span");
    assert_eq!(request.parent_span_id, caller);
    assert_eq!(request.kind, 2, "a server span");
    assert_eq!(request.attr("mcp.method.name"), Some("tools/call"));
    assert_eq!(request.attr("gen_ai.tool.name"), Some("traced"));
    assert_eq!(request.attr("run"), Some(task.as_str()));

    let run = one(&ours, "run traced");
    assert_eq!(
        run.parent_span_id, request.span_id,
        "the Run hangs under its request"
    );
    assert_eq!(run.attr("runway.run.name"), Some(task.as_str()));
    assert_eq!(run.attr("runway.run.phase"), Some("Succeeded"));
    let answered = run
        .events
        .iter()
        .find(|(name, _)| name == "input answered")
        .expect("the answer, as an event of the Run");
    assert_eq!(answered.1["runway.input.answered_by"], "alice");
    assert_eq!(answered.1["runway.input.key"], "approve.ok");
    assert!(run.events.iter().any(|(n, _)| n == "finished"));
    assert_eq!(
        run.resource["process.pid"], second_pid,
        "emitted where the Run ended"
    );

    // The step attempts, before the restart, hang under the Run span the second process
    // emitted: both derive it from the Run.
    let notify = one(&ours, "step notify");
    let relay = one(&ours, "step relay");
    for step in [notify, relay] {
        assert_eq!(step.parent_span_id, run.span_id);
        assert_eq!(step.resource["process.pid"], first_pid);
    }
    assert_eq!(notify.attr("kind"), Some("http"));
    let approve = one(&ours, "step approve");
    assert_eq!(approve.parent_span_id, run.span_id);
    assert_eq!(
        approve.attr("runway.input.approve.ok.answered_by"),
        Some("alice")
    );

    // The http step's request: a client span, its context sent to the receiver.
    let post = one(&ours, "POST");
    assert_eq!(post.parent_span_id, notify.span_id);
    assert_eq!(post.kind, 3, "a client span");
    assert_eq!(post.attr("http.response.status_code"), Some("200"));
    assert_eq!(
        sink.traceparent.lock().unwrap().as_slice(),
        [format!("00-{trace}-{}-01", post.span_id)]
    );

    // The tool step's call: a client span, its context in `_meta`, and B's own server span
    // for it in the same trace.
    let call = ours
        .iter()
        .find(|s| s.name == "tools/call echo" && s.kind == 3)
        .expect("the tool step's client span");
    assert_eq!(call.parent_span_id, relay.span_id);
    assert_eq!(
        proxy.call_traces(),
        vec![Some(format!("00-{trace}-{}-01", call.span_id))]
    );
    let upstream = ours
        .iter()
        .find(|s| s.name == "tools/call echo" && s.kind == 2)
        .expect("B's span of the call");
    assert_eq!(upstream.parent_span_id, call.span_id);

    // The later requests on the task (the answer, the polls), sent without a trace context,
    // are traces of their own, each linked to the Run's span; nothing else left the trace.
    let elsewhere: Vec<&Span> = spans
        .iter()
        .filter(|s| s.trace_id != trace && s.attr("run") == Some(task.as_str()))
        .collect();
    let methods: BTreeSet<&str> = elsewhere
        .iter()
        .map(|s| s.attr("mcp.method.name").unwrap_or(&s.name))
        .collect();
    assert!(methods.contains("tasks/update"), "{methods:?}");
    for s in &elsewhere {
        assert_eq!(s.kind, 2, "{s:?}");
        assert!(
            s.links.contains(&(trace.clone(), run.span_id.clone())),
            "{} is not linked to the Run: {s:?}",
            s.name
        );
    }
    // Log lines about the Run name its trace.
    let logs = a.logs.lock().unwrap().join("\n");
    assert!(
        logs.contains(&trace),
        "no log line names trace {trace}:\n{logs}"
    );
}

fn rand_bytes<const N: usize>() -> [u8; N] {
    let mut b = [0u8; N];
    getrandom::fill(&mut b).unwrap();
    b[0] |= 1;
    b
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_without_a_caller_trace_starts_its_own_a_child_joins_it_and_traces_off_send_nothing()
{
    let receiver = Receiver::start().await;
    let sink = Sink::start().await;
    let wf = format!(
        r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: {{ name: ping, namespace: team-a }}
spec:
  steps:
    - name: notify
      http: {{ method: POST, url: "{}" }}
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: {{ name: parent, namespace: team-a }}
spec:
  steps:
    - name: child
      workflow: {{ name: ping }}
"#,
        sink.url
    );
    let dir = TempDir::new();
    write_server_dir(dir.path(), &[("ping.yaml", &wf)], support::mcp::AUTH);
    std::fs::write(
        dir.path().join("state.key"),
        "a-state-key-of-at-least-thirty-two-bytes",
    )
    .unwrap();
    // Off: the receiver's endpoint is named but OTEL_SDK_DISABLED wins.
    let mut env = otel_env(&receiver);
    env.push(("OTEL_SDK_DISABLED", "true".to_owned()));
    let off = start(&dir, 0, &env).await;
    let alice = Client::new(&off.base(), Some("alice-token"), "/namespaces/team-a/mcp");
    let task = alice.call("ping", json!({})).await.result()["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    alice.await_status(&task, "completed").await;
    off.kill9().await;
    assert!(sink.traceparent.lock().unwrap().is_empty());
    // On, without a caller trace: the Run's trace is its own, rooted at the Run span.
    let on = start(&dir, 0, &otel_env(&receiver)).await;
    let alice = Client::new(&on.base(), Some("alice-token"), "/namespaces/team-a/mcp");
    let task = alice.call("ping", json!({})).await.result()["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    alice.await_status(&task, "completed").await;
    let spans = receiver
        .wait_for("the Run's span", |s| !named(s, "run ping").is_empty())
        .await;
    let run = one(&spans, "run ping");
    let request = spans
        .iter()
        .find(|s| s.name == "tools/call ping")
        .expect("the request span");
    assert_eq!(
        request.parent_span_id, "",
        "no caller: the request is a root"
    );
    assert_eq!(run.trace_id, request.trace_id);
    assert_eq!(run.parent_span_id, request.span_id);
    let step = one(&spans, "step notify");
    assert_eq!(step.parent_span_id, run.span_id);
    // Nothing was exported while traces were off.
    assert_eq!(named(&spans, "run ping").len(), 1);

    // A child Run's trace is its parent's: under the step that started it.
    let task = alice.call("parent", json!({})).await.result()["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    alice.await_status(&task, "completed").await;
    let spans = receiver
        .wait_for("the parent Run's span", |s| {
            !named(s, "run parent").is_empty() && named(s, "run ping").len() == 2
        })
        .await;
    let parent = one(&spans, "run parent");
    let step = one(&spans, "step child");
    assert_eq!(step.parent_span_id, parent.span_id);
    let child = named(&spans, "run ping")
        .into_iter()
        .find(|s| s.trace_id == parent.trace_id)
        .expect("the child Run in its parent's trace");
    assert_eq!(child.parent_span_id, step.span_id);
    on.kill9().await;
}
