//! `tool` steps between two real servers: server A runs Workflows whose `tool` step calls a
//! Workflow on server B over HTTP, with B's token from A's auth-file secrets.

use crate::support;

use runway::api::{Run, RunPhase, StepPhase};
use runway::store::RunStore;
use serde_json::json;
use support::harness::TempDir;
use support::mcp::{Client, Mcp};
use support::process::{Process, free_port};
use support::upstream::{Proxy, auth_with_secrets, server_dir, write_server_dir};

/// Server B's Workflows (in team-a and team-b).
const UPSTREAM: &str = r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: echo, namespace: NS }
spec:
  tool:
    description: Echoes at once, never as a task.
    inputSchema: { type: object, properties: { msg: { type: string } } }
  execution: { mode: sync }
  steps: []
  result:
    content: [ { type: text, text: "echo {{ args.msg }}" } ]
    structuredContent: { echo: "{{ args.msg }}" }
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: slow, namespace: NS }
spec:
  tool: { description: Takes a moment. }
  execution: { mode: task, pollInterval: 100ms }
  steps:
    - { name: nap, delay: { duration: 300ms } }
  result:
    structuredContent: { slept: "{{ args.msg }}" }
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: nap, namespace: NS }
spec:
  tool: { description: Takes two seconds. }
  execution: { mode: task, pollInterval: 100ms }
  steps:
    - { name: nap, delay: { duration: 2s } }
  result:
    structuredContent: { napped: "{{ args.msg }}" }
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: forever, namespace: NS }
spec:
  tool: { description: Takes an hour. }
  execution: { mode: task, pollInterval: 100ms }
  steps:
    - { name: nap, delay: { duration: 1h } }
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: hang, namespace: NS }
spec:
  tool: { description: "Takes an hour, blocking unless asked for a task." }
  steps:
    - { name: nap, delay: { duration: 1h } }
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: approve, namespace: NS }
spec:
  tool: { description: Asks for an approval. }
  execution: { pollInterval: 100ms }
  steps:
    - name: approval
      input:
        requests:
          - name: decision
            message: "Approve {{ args.msg }}?"
            requestedSchema: { type: object, properties: { ok: { type: boolean } }, required: [ok] }
  result:
    structuredContent: { approved: "{{ inputs.decision.ok }}", msg: "{{ args.msg }}" }
"#;

/// Server A's auth file: B's token as a secret.
fn auth_a() -> String {
    auth_with_secrets("  team-a/upstream-b: { authorization: Bearer alice-token }")
}

/// A `tool` step's `server`: the one at `url`, called with B's token from A's secrets.
fn b_server(url: &str) -> String {
    format!(
        "{{ url: {url}, headers: [ {{ name: Authorization, valueFrom: {{ secretKeyRef: \
         {{ name: upstream-b, key: authorization }} }} }} ] }}"
    )
}

/// A Workflow of server A that relays to `tool` on the server at `url`.
fn relay(name: &str, tool: &str, url: &str, step_extra: &str, tool_extra: &str) -> String {
    let server = b_server(url);
    format!(
        r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: {{ name: {name}, namespace: team-a }}
spec:
  tool:
    description: Relays to {tool} upstream.
    inputSchema: {{ type: object, properties: {{ msg: {{ type: string }} }}, required: [msg] }}
  execution: {{ pollInterval: 100ms }}
  steps:
    - name: call
      {step_extra}
      tool:
        server: {server}
        name: {tool}
        arguments: {{ msg: "{{{{ args.msg }}}}" }}
        {tool_extra}
  result:
    structuredContent: {{ upstream: "{{{{ steps.call.output }}}}" }}
"#
    )
}

fn endpoint(addr: impl std::fmt::Display) -> String {
    format!("http://{addr}/namespaces/team-a/mcp")
}

/// Server B, and server A with one relay Workflow per entry (name, B tool, step extra, tool
/// extra), calling B at `b_url` (B itself when `None`).
async fn servers(relays: &[(&str, &str, &str, &str)], b_url: Option<&str>) -> (Mcp, Mcp) {
    let b = Mcp::start(&[("upstream.yaml", UPSTREAM)]).await;
    let url = b_url.map(str::to_owned).unwrap_or_else(|| endpoint(b.addr));
    let manifests: Vec<(String, String)> = relays
        .iter()
        .map(|(name, tool, step, extra)| {
            (format!("{name}.yaml"), relay(name, tool, &url, step, extra))
        })
        .collect();
    let refs: Vec<(&str, &str)> = manifests
        .iter()
        .map(|(f, y)| (f.as_str(), y.as_str()))
        .collect();
    let a = Mcp::start_in(server_dir(&refs, &auth_a())).await;
    (a, b)
}

/// Server B, a recording proxy in front of it, and server A with one relay Workflow `name`
/// calling B's `tool` through the proxy.
async fn through_proxy(name: &str, tool: &str) -> (Mcp, Proxy, Mcp) {
    let b = Mcp::start(&[("upstream.yaml", UPSTREAM)]).await;
    let proxy = Proxy::start(&format!("http://{}", b.addr)).await;
    let relayed = relay(name, tool, &endpoint(proxy.addr), "", "");
    let a = Mcp::start_in(server_dir(&[("relay.yaml", &relayed)], &auth_a())).await;
    (a, proxy, b)
}

fn upstream_task(run: &Run) -> Option<String> {
    run.status.as_ref()?.steps.first()?.upstream_task_id.clone()
}

async fn b_runs(b: &Mcp, workflow: &str) -> Vec<Run> {
    b.store()
        .list(Some("team-a"), &Default::default())
        .await
        .unwrap()
        .into_iter()
        .map(|r| (*r).clone())
        .filter(|r| r.spec.workflow_ref.name == workflow)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_upstream_result_is_the_step_output() {
    let (a, b) = servers(&[("relay-echo", "echo", "", "")], None).await;
    let c = a.client("alice-token");
    let id = c.call("relay-echo", json!({"msg": "hi"})).await.task_id();
    let t = c.await_status(&id, "completed").await;
    assert_eq!(
        t["result"]["structuredContent"],
        json!({"upstream": {"echo": "hi"}})
    );
    let run = a.wait(&id, "finished", |r| r.phase().is_terminal()).await;
    assert_eq!(upstream_task(&run), None, "a plain result has no task");
    // B's Run was requested by the token A took from its secrets
    let runs = b_runs(&b, "echo").await;
    assert_eq!(runs.len(), 1);
    assert_eq!(
        runs[0].spec.requested_by.as_ref().unwrap().username,
        "alice"
    );
    assert_eq!(runs[0].phase(), RunPhase::Succeeded);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_task_is_recorded_then_followed_to_its_result() {
    let (a, b) = servers(&[("relay-slow", "slow", "", "")], None).await;
    let c = a.client("alice-token");
    let id = c.call("relay-slow", json!({"msg": "zz"})).await.task_id();
    let t = c.await_status(&id, "completed").await;
    assert_eq!(
        t["result"]["structuredContent"],
        json!({"upstream": {"slept": "zz"}})
    );
    let run = a.wait(&id, "finished", |r| r.phase().is_terminal()).await;
    let upstream = upstream_task(&run).expect("the upstream task id is in status");
    let runs = b_runs(&b, "slow").await;
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].metadata.name.as_deref(), Some(upstream.as_str()));
    assert_eq!(runs[0].phase(), RunPhase::Succeeded);
    assert_eq!(run.status.unwrap().steps[0].attempt, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_input_is_answered_through_this_servers_tasks_update() {
    let (a, b) = servers(&[("relay-approve", "approve", "", "")], None).await;
    let c = a.client("alice-token");
    let id = c
        .call("relay-approve", json!({"msg": "deploy"}))
        .await
        .task_id();
    let t = c.await_status(&id, "input_required").await;
    let request = &t["inputRequests"]["call.approval.decision"];
    assert_eq!(request["method"], "elicitation/create");
    assert_eq!(request["params"]["message"], "Approve deploy?");
    let upstream = upstream_task(
        &a.wait(&id, "following", |r| upstream_task(r).is_some())
            .await,
    )
    .unwrap();
    c.update(
        &id,
        json!({"call.approval.decision": {"action": "accept", "content": {"ok": true}}}),
    )
    .await;
    let t = c.await_status(&id, "completed").await;
    assert_eq!(
        t["result"]["structuredContent"],
        json!({"upstream": {"approved": true, "msg": "deploy"}})
    );
    // B's task is completed too, answered once, by the principal A calls B as
    let on_b = b.client("alice-token").get(&upstream).await;
    assert_eq!(on_b.result()["status"], "completed");
    let runs = b_runs(&b, "approve").await;
    assert_eq!(runs.len(), 1);
    let answer = &runs[0].spec.input_responses["approval.decision"];
    assert_eq!(answer.content, Some(json!({"ok": true})));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_input_of_a_blocking_call_is_forwarded_with_its_request_state() {
    let (a, b) = servers(&[("relay-mrtr", "approve", "", "task: never")], None).await;
    let c = a.client("alice-token");
    let id = c.call("relay-mrtr", json!({"msg": "ship"})).await.task_id();
    let t = c.await_status(&id, "input_required").await;
    assert!(t["inputRequests"]["call.approval.decision"].is_object());
    let waiting = a
        .wait(&id, "waiting", |r| r.phase() == RunPhase::Waiting)
        .await;
    let rec = &waiting.status.as_ref().unwrap().steps[0];
    assert!(rec.upstream_request_state.is_some());
    assert_eq!(rec.upstream_task_id, None);
    c.update(
        &id,
        json!({"call.approval.decision": {"action": "accept", "content": {"ok": false}}}),
    )
    .await;
    let t = c.await_status(&id, "completed").await;
    assert_eq!(
        t["result"]["structuredContent"],
        json!({"upstream": {"approved": false, "msg": "ship"}})
    );
    let runs = b_runs(&b, "approve").await;
    assert_eq!(runs.len(), 1, "the retry continued the same upstream Run");
    assert_eq!(runs[0].phase(), RunPhase::Succeeded);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_the_run_cancels_the_upstream_task() {
    let (a, b) = servers(&[("relay-forever", "forever", "", "")], None).await;
    let c = a.client("alice-token");
    let id = c.call("relay-forever", json!({"msg": "x"})).await.task_id();
    let run = a
        .wait(&id, "following its upstream task", |r| {
            upstream_task(r).is_some()
        })
        .await;
    let upstream = upstream_task(&run).unwrap();
    c.cancel(&id).await;
    c.await_status(&id, "cancelled").await;
    let on_b = b
        .wait(&upstream, "cancelled", |r| r.phase() == RunPhase::Cancelled)
        .await;
    assert!(on_b.spec.cancel.is_some());
    let run = a.wait(&id, "cancelled", |r| r.phase().is_terminal()).await;
    let rec = &run.status.unwrap().steps[0];
    assert_eq!(rec.phase, StepPhase::Cancelled);
    let message = rec.message.as_deref().unwrap_or_default();
    assert!(
        message.contains(&format!("upstream task {upstream} cancelled")),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_while_the_upstream_makes_its_task_cancels_that_task() {
    let (a, proxy, b) = through_proxy("relay-forever", "forever").await;
    // B makes the task, and its answer naming it is held on the way back to A.
    proxy.hold_next("tools/call", 1);
    let c = a.client("alice-token");
    let id = c.call("relay-forever", json!({"msg": "x"})).await.task_id();
    proxy.wait_for("tools/call held", 1).await;
    let made = b_runs(&b, "forever").await;
    let [upstream] = made.as_slice() else {
        panic!("one task made upstream: {made:?}")
    };
    let upstream = upstream.metadata.name.clone().unwrap();
    // The Run is cancelled while its call is still waiting for that answer: nothing recorded
    // names the task, so no cleanup will follow.
    c.cancel(&id).await;
    let run = a.wait(&id, "cancelled", |r| r.phase().is_terminal()).await;
    assert_eq!(run.phase(), RunPhase::Cancelled);
    assert_eq!(upstream_task(&run), None);
    proxy.release();
    let on_b = b
        .wait(&upstream, "cancelled", |r| r.phase() == RunPhase::Cancelled)
        .await;
    assert!(on_b.spec.cancel.is_some());
    // Through A's call: the proxy counts it once B's answer is back.
    proxy.wait_for("tasks/cancel", 1).await;
}

/// A's Workflow: a blocking call to B's `hang` beside a step that fails once answered, and a
/// `finally` step that keeps the Run going after that.
fn stop_both(url: &str) -> String {
    let server = b_server(url);
    format!(
        r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: {{ name: stop-both, namespace: team-a }}
spec:
  tool: {{ description: Calls B beside a step that fails on request. }}
  execution: {{ pollInterval: 100ms }}
  steps:
    - name: call
      dependsOn: []
      tool:
        server: {server}
        name: hang
        task: never
    - name: go
      dependsOn: []
      input: {{ requests: [ {{ name: now, message: "Fail now?" }} ] }}
    - {{ name: boom, dependsOn: [go], fail: {{ message: "stopped on request" }} }}
  finally:
    - {{ name: linger, delay: {{ duration: 1h }} }}
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_stopped_by_fail_fast_has_its_call_aborted_while_finally_runs() {
    let b = Mcp::start(&[("upstream.yaml", UPSTREAM)]).await;
    let a = Mcp::start_in(server_dir(
        &[("stop-both.yaml", &stop_both(&endpoint(b.addr)))],
        &auth_a(),
    ))
    .await;
    let c = a.client("alice-token");
    let id = c.call("stop-both", json!({})).await.task_id();
    let upstream = support::harness::wait_for_any(b.store(), "team-a", "B's Run", |r| {
        r.spec.workflow_ref.name == "hang"
    })
    .await;
    let upstream = upstream.metadata.name.unwrap();
    c.update(&id, json!({"go.now": {"action": "accept", "content": {}}}))
        .await;
    // boom fails, fail-fast stops the call; the Run goes on with its `finally` step, and the
    // call stopped is no longer held open: B sees its caller leave and cancels its Run.
    let on_b = b
        .wait(&upstream, "cancelled", |r| r.phase() == RunPhase::Cancelled)
        .await;
    assert!(on_b.spec.cancel.is_some());
    let lingering = |r: &Run| {
        r.status.as_ref().is_some_and(|st| {
            st.steps
                .iter()
                .any(|s| s.name == "linger" && s.phase == StepPhase::Running)
        })
    };
    let run = a.wait(&id, "in its finally step", lingering).await;
    assert!(!run.phase().is_terminal(), "{:?}", run.phase());
    let steps = run.status.unwrap().steps;
    let call = steps.iter().find(|r| r.name == "call").unwrap();
    assert_eq!(call.phase, StepPhase::Cancelled);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_upstream_is_retried_then_fails_clearly() {
    let down = format!("http://127.0.0.1:{}/namespaces/team-a/mcp", free_port());
    let (a, _b) = servers(
        &[(
            "relay-down",
            "echo",
            "retry: { limit: 2, backoff: 50ms }",
            "",
        )],
        Some(&down),
    )
    .await;
    let c = a.client("alice-token");
    let id = c.call("relay-down", json!({"msg": "x"})).await.task_id();
    let t = c.await_status(&id, "completed").await;
    assert_eq!(t["result"]["isError"], true);
    let text = t["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("step call failed"), "{text}");
    assert!(text.contains(&down), "{text}");
    let run = a.wait(&id, "failed", |r| r.phase().is_terminal()).await;
    let rec = &run.status.unwrap().steps[0];
    assert_eq!(rec.attempt, 3);
    assert_eq!(rec.attempts.len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_answering_5xx_is_retried_as_a_server_error() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let unavailable = axum::Router::new()
        .fallback(|| async { (http::StatusCode::SERVICE_UNAVAILABLE, "try later") });
    let server = tokio::spawn(async move { axum::serve(listener, unavailable).await.unwrap() });
    let (a, _b) = servers(
        &[(
            "relay-503",
            "echo",
            "retry: { limit: 1, backoff: 50ms }",
            "",
        )],
        Some(&endpoint(addr)),
    )
    .await;
    let c = a.client("alice-token");
    let id = c.call("relay-503", json!({"msg": "x"})).await.task_id();
    let t = c.await_status(&id, "completed").await;
    assert_eq!(t["result"]["isError"], true);
    let text = t["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("503"), "{text}");
    let run = a.wait(&id, "failed", |r| r.phase().is_terminal()).await;
    assert_eq!(
        run.status.unwrap().steps[0].attempts.len(),
        2,
        "retried once"
    );
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_jsonrpc_error_fails_the_run_with_the_upstream_code() {
    let (a, _b) = servers(
        &[("relay-missing", "no-such-tool", "retry: { limit: 2 }", "")],
        None,
    )
    .await;
    let c = a.client("alice-token");
    let id = c.call("relay-missing", json!({"msg": "x"})).await.task_id();
    let t = c.await_status(&id, "failed").await;
    assert_eq!(t["error"]["code"], -32602);
    let message = t["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("step call") && message.contains("no-such-tool"),
        "{message}"
    );
    let run = a.wait(&id, "failed", |r| r.phase().is_terminal()).await;
    assert_eq!(run.status.unwrap().steps[0].attempt, 1, "not retried");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_kill_9_the_server_resumes_the_same_upstream_task() {
    let b = Mcp::start(&[("upstream.yaml", UPSTREAM)]).await;
    let proxy = Proxy::start(&format!("http://{}", b.addr)).await;
    let dir = TempDir::new();
    write_server_dir(
        dir.path(),
        &[(
            "relay.yaml",
            &relay("relay-nap", "nap", &endpoint(proxy.addr), "", ""),
        )],
        &auth_a(),
    );
    let p = Process::start(dir.path(), 0).await;
    let port = p.port;
    let c = Client::new(&p.base(), Some("alice-token"), "/namespaces/team-a/mcp");
    let id = c.call("relay-nap", json!({"msg": "zz"})).await.task_id();
    // A polls only after the upstream task id is in its status
    proxy.wait_for("tasks/get", 1).await;
    p.kill9().await;
    let polls_before = proxy.count("tasks/get");

    let p = Process::start(dir.path(), port).await;
    let c = Client::new(&p.base(), Some("alice-token"), "/namespaces/team-a/mcp");
    let t = c.await_status(&id, "completed").await;
    assert_eq!(
        t["result"]["structuredContent"],
        json!({"upstream": {"napped": "zz"}})
    );
    assert!(proxy.count("tasks/get") > polls_before, "polling resumed");
    assert_eq!(proxy.count("tools/call"), 1, "the tool was called once");
    let runs = b_runs(&b, "nap").await;
    assert_eq!(runs.len(), 1, "B shows exactly one Run");
    p.kill9().await;
    let store = runway::store::sqlite::SqliteStore::open(&dir.path().join("runs.db")).unwrap();
    let run = store.get("team-a", &id).await.unwrap().unwrap();
    let rec = &run.status.unwrap().steps[0];
    assert_eq!(rec.attempt, 1);
    assert_eq!(rec.upstream_task_id, runs[0].metadata.name);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_polls_of_an_upstream_task_are_retried_without_failing_the_step() {
    let (a, proxy, _b) = through_proxy("relay-nap", "nap").await;
    let c = a.client("alice-token");
    let id = c.call("relay-nap", json!({"msg": "zz"})).await.task_id();
    proxy.wait_for("tasks/get", 1).await;
    // The upstream stumbles: three polls in a row answer 503. The step has no retry policy.
    proxy.fail_next("tasks/get", 3, 503);
    let t = c.await_status(&id, "completed").await;
    assert_eq!(
        t["result"]["structuredContent"],
        json!({"upstream": {"napped": "zz"}})
    );
    assert_eq!(proxy.count("tasks/get failed"), 3);
    assert_eq!(proxy.count("tools/call"), 1, "the tool was called once");
    let run = a.wait(&id, "finished", |r| r.phase().is_terminal()).await;
    assert_eq!(run.status.unwrap().steps[0].attempt, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_answer_past_what_a_step_reads_fails_the_step_not_the_server() {
    let (a, proxy, _b) = through_proxy("relay-echo", "echo").await;
    let c = a.client("alice-token");
    // 2 MiB parsed whole, many times over in a fan-out, would take the server's memory.
    proxy.oversize_next("tools/call", 1, 2 * 1024 * 1024);
    let id = c.call("relay-echo", json!({"msg": "big"})).await.task_id();
    let run = a.wait(&id, "finished", |r| r.phase().is_terminal()).await;
    assert_eq!(proxy.count("tools/call oversized"), 1);
    let st = run.status.unwrap();
    assert_eq!(st.phase, RunPhase::Failed, "{st:?}");
    let message = st.steps[0].message.clone().unwrap_or_default();
    assert!(message.contains("1048576"), "{message}");
    // The next call, answered as usual, goes through.
    let id = c
        .call("relay-echo", json!({"msg": "small"}))
        .await
        .task_id();
    c.await_status(&id, "completed").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_the_upstream_refuses_fails_the_step_and_cancels_the_upstream_task() {
    let (a, proxy, b) = through_proxy("relay-approve", "approve").await;
    let c = a.client("alice-token");
    let id = c
        .call("relay-approve", json!({"msg": "deploy"}))
        .await
        .task_id();
    c.await_status(&id, "input_required").await;
    let upstream = upstream_task(
        &a.wait(&id, "following", |r| upstream_task(r).is_some())
            .await,
    )
    .unwrap();
    // The upstream refuses the answer: its task is still there, waiting for one.
    proxy.refuse_next("tasks/update", 1, -32602);
    c.update(
        &id,
        json!({"call.approval.decision": {"action": "accept", "content": {"ok": true}}}),
    )
    .await;
    let t = c.await_status(&id, "failed").await;
    assert_eq!(t["error"]["code"], -32602, "{t}");
    assert_eq!(proxy.count("tasks/update refused"), 1);
    // Nobody follows that task any more: it is cancelled, not left waiting for a week.
    let on_b = b
        .wait(&upstream, "cancelled", |r| r.phase().is_terminal())
        .await;
    assert_eq!(on_b.phase(), RunPhase::Cancelled, "{:?}", on_b.status);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_the_upstream_took_before_a_stop_are_not_taken_for_refused_after_it() {
    let (a, proxy, b) = through_proxy("relay-approve", "approve").await;
    let c = a.client("alice-token");
    let id = c
        .call("relay-approve", json!({"msg": "deploy"}))
        .await
        .task_id();
    c.await_status(&id, "input_required").await;
    // The upstream takes the answer; its reply is held, and the server stops before it comes.
    proxy.hold_next("tasks/update", 1);
    c.update(
        &id,
        json!({"call.approval.decision": {"action": "accept", "content": {"ok": true}}}),
    )
    .await;
    proxy.wait_for("tasks/update held", 1).await;
    let dir = a.stop().await;
    // The next start sends the answer again, and this upstream refuses an answer it has.
    proxy.refuse_next("tasks/update", 1, -32602);
    let a = Mcp::start_in(dir).await;
    proxy.release();
    let c = a.client("alice-token");
    let t = c.await_status(&id, "completed").await;
    assert_eq!(proxy.count("tasks/update refused"), 1, "sent again");
    assert_eq!(t["result"]["isError"], false, "{t}");
    assert_eq!(
        t["result"]["structuredContent"]["upstream"]["approved"],
        true
    );
    let upstream = b_runs(&b, "approve").await;
    assert_eq!(upstream.len(), 1);
    assert_eq!(upstream[0].phase(), RunPhase::Succeeded, "not cancelled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_step_that_times_out_cancels_its_upstream_task_and_waits_for_its_end() {
    let (a, b) = servers(&[("relay-forever", "forever", "timeout: 1s", "")], None).await;
    let c = a.client("alice-token");
    let id = c.call("relay-forever", json!({"msg": "x"})).await.task_id();
    let run = a
        .wait(&id, "following its upstream task", |r| {
            upstream_task(r).is_some()
        })
        .await;
    let upstream = upstream_task(&run).unwrap();
    let run = a.wait(&id, "failed", |r| r.phase().is_terminal()).await;
    assert_eq!(run.phase(), RunPhase::Failed);
    // By the time the Run has ended, the upstream task has been cancelled and has ended.
    let on_b = RunStore::get(b.store(), "team-a", &upstream)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(on_b.phase(), RunPhase::Cancelled, "{:?}", on_b.status);
    assert!(run.status.unwrap().cleanups.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_upstream_call_carries_its_idempotency_key_blocking_calls_and_retries_too() {
    let b = Mcp::start(&[("upstream.yaml", UPSTREAM)]).await;
    let proxy = Proxy::start(&format!("http://{}", b.addr)).await;
    let url = endpoint(proxy.addr);
    let a = Mcp::start_in(server_dir(
        &[
            (
                "blocking.yaml",
                &relay("relay-block", "echo", &url, "", "task: never"),
            ),
            (
                "mrtr.yaml",
                &relay("relay-ask", "approve", &url, "", "task: never"),
            ),
        ],
        &auth_a(),
    ))
    .await;
    let c = a.client("alice-token");
    // A blocking call (task: never) that the upstream answers at once.
    let id = c.call("relay-block", json!({"msg": "hi"})).await.task_id();
    c.await_status(&id, "completed").await;
    // A blocking call whose answer is an MRTR round: the first call and its retry.
    let asked = c.call("relay-ask", json!({"msg": "ship"})).await.task_id();
    c.await_status(&asked, "input_required").await;
    c.update(
        &asked,
        json!({"call.approval.decision": {"action": "accept", "content": {"ok": true}}}),
    )
    .await
    .assert_complete();
    c.await_status(&asked, "completed").await;
    let keys = proxy.call_keys();
    assert_eq!(keys.len(), 3, "{keys:?}");
    for (header, meta) in &keys {
        assert!(
            header.is_some(),
            "every call sends Idempotency-Key: {keys:?}"
        );
        assert!(meta.is_some(), "every call sends its _meta key: {keys:?}");
    }
    // First calls: the header and _meta name the attempt.
    assert_eq!(keys[0].0, keys[0].1);
    assert_eq!(keys[1].0, keys[1].1);
    assert_ne!(keys[0], keys[1]);
    // The MRTR retry is the same attempt as its first call (the same _meta key), but another
    // request body: its header names the round, so no two bodies share a header key.
    assert_eq!(keys[1].1, keys[2].1);
    let round = keys[2].0.as_deref().unwrap();
    let attempt = keys[1].0.as_deref().unwrap();
    assert!(
        round.starts_with(&format!("{attempt}/")) && round.len() == attempt.len() + 17,
        "{round} is a round of {attempt}"
    );
    // And only the calls carry it: a proxy that deduplicates by the header must not answer a
    // session's discovery with a call's cached answer.
    assert!(proxy.count("server/discover") > 0);
    assert_eq!(proxy.keyed_others(), Vec::<String>::new());
}
