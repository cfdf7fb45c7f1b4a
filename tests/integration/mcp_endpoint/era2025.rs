//! Clients of the 2025 era (they open with `initialize`) on the same endpoint: the sealed
//! session, tools, held calls with progress and questions answered in separate POSTs (also
//! to a restarted server), the hold limit, and the 2025-11-25 tasks on the same Runs.

use std::time::Duration;

use reqwest::StatusCode;
use runway::api::RunPhase;
use serde_json::{Value, json};

use super::support::mcp::{Mcp, Old, TASK_WORKFLOWS, initialize};

/// Workflows of the 2025-era tests (for namespace `NS`): `steps`, `ask-name`, `pause`,
/// `only-task`, `pick`, `slow-cleanup`, and two that declare `outputSchema`.
pub(super) const WORKFLOWS: &str = r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: steps, namespace: NS }
spec:
  tool: { description: Three short steps., inputSchema: { type: object, properties: {} } }
  execution: { mode: sync }
  steps:
    - { name: one, delay: { duration: 20ms } }
    - { name: two, delay: { duration: 20ms } }
    - { name: three, delay: { duration: 20ms } }
  result: { content: [ { type: text, text: "done" } ] }
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: ask-name, namespace: NS }
spec:
  tool: { description: Asks for a name. }
  steps:
    - name: ask
      input:
        requests:
          - { name: who, message: "Your name?", requestedSchema: { type: object, properties: { name: { type: string } }, required: [name] } }
  result: { content: [ { type: text, text: "hello {{ inputs.who.name }}" } ] }
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: pause, namespace: NS }
spec:
  tool: { description: Two pauses of a second. }
  execution: { mode: sync }
  steps:
    - { name: one, delay: { duration: 1s } }
    - { name: two, delay: { duration: 1s } }
  result: { content: [ { type: text, text: "paused" } ] }
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: only-task, namespace: NS }
spec:
  tool: { description: Task only. }
  execution: { mode: task }
  steps: [ { name: w, delay: { duration: 10ms } } ]
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: pick, namespace: NS }
spec:
  tool:
    description: Asks for a choice with titles.
    inputSchema: { type: object, properties: { n: { type: integer } } }
  steps:
    - name: ask
      input:
        requests:
          - name: env
            message: "Where?"
            requestedSchema:
              type: object
              properties:
                env: { type: string, oneOf: [ { const: prod, title: Production }, { const: dev, title: Development } ] }
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: slow-cleanup, namespace: NS }
spec:
  tool: { description: Naps; its cleanup takes an hour. }
  execution: { mode: task, pollInterval: 100ms }
  steps: [ { name: nap, delay: { duration: 1h } } ]
  finally: [ { name: tidy, delay: { duration: 1h } } ]
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: typed-nap, namespace: NS }
spec:
  tool:
    description: Naps, then answers with a typed result.
    outputSchema: { type: object, properties: { slept: { type: boolean } }, required: [slept] }
  steps: [ { name: sleep, delay: { duration: 1h } } ]
  result: { content: [ { type: text, text: "slept" } ], structuredContent: { slept: true } }
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: typed-ask, namespace: NS }
spec:
  tool:
    description: Asks for a name, then answers with a typed result.
    outputSchema: { type: object, properties: { name: { type: string } }, required: [name] }
  steps:
    - name: ask
      input:
        requests:
          - { name: who, message: "Your name?", requestedSchema: { type: object, properties: { name: { type: string } }, required: [name] } }
  result: { content: [ { type: text, text: "hello" } ], structuredContent: { name: "{{ inputs.who.name }}" } }
"#;

async fn server() -> Mcp {
    Mcp::start(&[("era.yaml", WORKFLOWS), ("tasks.yaml", TASK_WORKFLOWS)]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn initialize_negotiates_a_revision_and_seals_the_session() {
    let s = server().await;
    for (asked, got, tasks) in [
        ("2025-11-25", "2025-11-25", true),
        ("2025-06-18", "2025-06-18", false),
        ("2025-03-26", "2025-03-26", false),
        ("2024-11-05", "2025-11-25", true),
        ("1999-01-01", "2025-11-25", true),
    ] {
        let (resp, body) = initialize(&s.url(), "alice-token", asked, json!({})).await;
        let result = &body["result"];
        assert_eq!(result["protocolVersion"], got, "{asked}: {body}");
        assert_eq!(result["serverInfo"]["name"], "runway");
        assert_eq!(result["serverInfo"]["version"], env!("CARGO_PKG_VERSION"));
        assert!(result["capabilities"]["tools"].is_object());
        assert_eq!(
            result["capabilities"]["tasks"].is_object(),
            tasks,
            "{asked}"
        );
        assert!(
            result.get("resultType").is_none(),
            "no 2026 fields: {result}"
        );
        let id = resp.headers()["mcp-session-id"].to_str().unwrap();
        assert!(id.bytes().all(|b| (0x21..=0x7e).contains(&b)), "{id}");
    }
    let (_, body) = initialize(&s.url(), "alice-token", "", json!({})).await;
    assert!(body["result"]["protocolVersion"].is_string());
    let resp = reqwest::Client::new()
        .post(format!("http://{}/namespaces/team-a/mcp", s.addr))
        .header("content-type", "application/json")
        .bearer_auth("alice-token")
        .json(&json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}}))
        .send()
        .await
        .unwrap();
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], -32602, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_foreign_or_misplaced_session_is_refused() {
    let s = server().await;
    let alice = Old::connect(&s.url(), "alice-token", json!({})).await;
    assert_eq!(alice.result("ping", json!({})).await, json!({}));

    let mut forged = Old::connect(&s.url(), "alice-token", json!({})).await;
    forged.session.push('x');
    assert_eq!(forged.rpc("ping", json!({})).await.0, StatusCode::NOT_FOUND);

    // Bob presents alice's session: it was not issued to him.
    let mut stolen = Old::connect(&s.url(), "bob-token", json!({})).await;
    stolen.session = alice.session.clone();
    assert_eq!(stolen.rpc("ping", json!({})).await.0, StatusCode::NOT_FOUND);

    // The same session on another path.
    let mut moved = Old::connect(&s.url(), "alice-token", json!({})).await;
    moved.url = moved.url.replace("/namespaces/team-a/mcp", "/mcp");
    assert_eq!(moved.rpc("ping", json!({})).await.0, StatusCode::NOT_FOUND);

    // No session at all: a 2026-07-28 request without its _meta, 400 as 2025-11-25 asks.
    for version in [Some("2025-11-25"), None] {
        let mut request = reqwest::Client::new()
            .post(s.url())
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .bearer_auth("alice-token");
        if let Some(v) = version {
            request = request.header("mcp-protocol-version", v);
        }
        let resp = request
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::BAD_REQUEST, "{version:?}");
    }

    // A version header that is not the session's.
    let mut other = Old::connect(&s.url(), "alice-token", json!({})).await;
    other.version = "2025-06-18".into();
    assert_eq!(
        other.rpc("ping", json!({})).await.0,
        StatusCode::BAD_REQUEST
    );

    // The token is checked on every request, session or not.
    let mut anonymous = Old::connect(&s.url(), "alice-token", json!({})).await;
    anonymous.token = "nobody".into();
    assert_eq!(
        anonymous.rpc("ping", json!({})).await.0,
        StatusCode::UNAUTHORIZED
    );

    // The session outlives the server that issued it.
    let s2 = Mcp::start_in(s.stop().await).await;
    let mut again = Old::connect(&s2.url(), "alice-token", json!({})).await;
    again.session = alice.session.clone();
    assert_eq!(again.result("ping", json!({})).await, json!({}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_list_ping_logging_and_notifications() {
    let s = server().await;
    let c = Old::connect(&s.url(), "alice-token", json!({})).await;
    let tools = c.result("tools/list", json!({})).await;
    assert!(tools.get("resultType").is_none() && tools.get("ttlMs").is_none());
    let support = |name: &str| {
        tools["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .unwrap_or_else(|| panic!("{name} in {tools}"))["execution"]["taskSupport"]
            .clone()
    };
    assert_eq!(support("steps"), "forbidden");
    assert_eq!(support("ask-name"), "optional");
    assert_eq!(support("only-task"), "required");
    assert_eq!(support("runway_list_runs"), "forbidden");

    assert_eq!(
        c.result("logging/setLevel", json!({"level": "debug"}))
            .await,
        json!({})
    );
    assert_eq!(
        c.error("logging/setLevel", json!({"level": "loud"})).await["code"],
        -32602
    );
    assert_eq!(
        c.error("completion/complete", json!({})).await["code"],
        -32601
    );
    // Prompts and resources are declared: what is not there is said in this era's codes.
    assert_eq!(
        c.result("prompts/list", json!({})).await["prompts"],
        json!([])
    );
    let e = c.error("prompts/get", json!({"name": "x"})).await;
    assert_eq!(e["code"], -32602, "{e}");
    let e = c
        .error("resources/read", json!({"uri": "file:///etc/passwd"}))
        .await;
    assert_eq!(e["code"], -32002, "{e}");
    let view = c
        .result("resources/read", json!({"uri": "ui://runway/run"}))
        .await;
    assert_eq!(view["contents"][0]["uri"], "ui://runway/run");
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert_eq!(
        c.post(&note).send().await.unwrap().status(),
        StatusCode::ACCEPTED
    );

    // Older revisions get no task support field.
    let (resp, _) = initialize(&s.url(), "alice-token", "2025-06-18", json!({})).await;
    let mut old = Old::connect(&s.url(), "alice-token", json!({})).await;
    old.session = resp.headers()["mcp-session-id"].to_str().unwrap().into();
    old.version = "2025-06-18".into();
    let tools = old.result("tools/list", json!({})).await;
    assert!(tools["tools"][0].get("execution").is_none(), "{tools}");
    // ... nor the tools that run only as tasks, which that revision cannot ask for.
    let names: Vec<&str> = tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(
        names.contains(&"steps") && !names.contains(&"only-task"),
        "{names:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_call_streams_progress_and_the_result() {
    let s = server().await;
    let c = Old::connect(&s.url(), "alice-token", json!({})).await;
    let (status, messages) = c
        .rpc(
            "tools/call",
            json!({"name": "steps", "arguments": {}, "_meta": {"progressToken": "p-1"}}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let progress: Vec<f64> = messages
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .inspect(|m| assert_eq!(m["params"]["progressToken"], "p-1"))
        .map(|m| m["params"]["progress"].as_f64().unwrap())
        .collect();
    assert!(progress.len() >= 3, "{messages:?}");
    assert!(progress.windows(2).all(|w| w[0] < w[1]), "{progress:?}");
    let result = &messages.last().unwrap()["result"];
    assert_eq!(result["content"][0]["text"], "done");
    assert!(result.get("resultType").is_none());
    // A task-only tool cannot be held.
    let e = c
        .error("tools/call", json!({"name": "only-task", "arguments": {}}))
        .await;
    assert_eq!(e["code"], -32601, "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_is_asked_on_the_stream_and_answered_after_a_restart() {
    let s = server().await;
    let c = Old::connect(&s.url(), "alice-token", json!({"elicitation": {}})).await;
    let mut events = c
        .open("tools/call", json!({"name": "ask-name", "arguments": {}}))
        .await;
    let ask = events.next().await.unwrap();
    assert_eq!(ask["method"], "elicitation/create", "{ask}");
    assert_eq!(ask["params"]["message"], "Your name?");
    assert!(ask["params"]["requestedSchema"]["properties"]["name"].is_object());
    let id = ask["id"].clone();
    assert!(id.is_string());

    // Another caller cannot answer alice's question with her question's id.
    let bob = Old::connect(&s.url(), "bob-token", json!({"elicitation": {}})).await;
    assert_eq!(
        bob.answer(
            &id,
            json!({"action": "accept", "content": {"name": "mallory"}})
        )
        .await,
        StatusCode::BAD_REQUEST
    );
    // An answer that does not fit the form is refused; the question stays open.
    assert_eq!(
        c.answer(&id, json!({"action": "accept", "content": {"name": 5}}))
            .await,
        StatusCode::BAD_REQUEST
    );

    // The server goes away (a shutdown does not cancel the Run); the answer reaches the next.
    let name = {
        let runs = runway::store::RunStore::list(s.store(), Some("team-a"), &Default::default())
            .await
            .unwrap();
        runs[0].metadata.name.clone().unwrap()
    };
    let dir = s.stop().await;
    drop(events);
    let s2 = Mcp::start_in(dir).await;
    let mut c2 = Old::connect(&s2.url(), "alice-token", json!({"elicitation": {}})).await;
    c2.session = c.session.clone();
    assert_eq!(
        c2.answer(&id, json!({"action": "accept", "content": {"name": "Ada"}}))
            .await,
        StatusCode::ACCEPTED
    );
    let run = s2
        .wait(&name, "finished", |r| r.phase().is_terminal())
        .await;
    assert_eq!(run.phase(), RunPhase::Succeeded);
    let answer = &run.spec.input_responses.values().next().unwrap();
    assert_eq!(answer.answered_by.as_deref(), Some("alice"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_arguments_are_a_tool_error_held_and_a_protocol_error_for_a_task() {
    let s = server().await;
    let c = Old::connect(&s.url(), "alice-token", json!({"elicitation": {}})).await;
    let result = c
        .result(
            "tools/call",
            json!({"name": "pick", "arguments": {"n": "x"}}),
        )
        .await;
    assert_eq!(result["isError"], true, "{result}");
    let text = result["content"][0]["text"].as_str().unwrap();
    assert!(text.starts_with("invalid arguments: "), "{text}");
    // Asked for a task, the call is answered with one or with an error.
    let e = c
        .error(
            "tools/call",
            json!({"name": "pick", "arguments": {"n": "x"}, "task": {}}),
        )
        .await;
    assert_eq!(e["code"], -32602, "{e}");
    assert_eq!(e["data"]["errors"][0]["path"], "/n", "{e}");
    let runs = runway::store::RunStore::list(s.store(), Some("team-a"), &Default::default())
        .await
        .unwrap();
    assert!(runs.is_empty(), "no Run for bad arguments");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_form_an_older_revision_cannot_show_is_not_put_to_its_clients() {
    let s = server().await;
    // Titled choices came with 2025-11-25: a 2025-06-18 client would refuse the request, and
    // its refusal would read as a decline.
    let old = Old::connect_at(
        &s.url(),
        "alice-token",
        json!({"elicitation": {}}),
        "2025-06-18",
    )
    .await;
    let (_, messages) = old
        .rpc("tools/call", json!({"name": "pick", "arguments": {}}))
        .await;
    assert!(
        messages.iter().all(|m| m["method"] != "elicitation/create"),
        "{messages:?}"
    );
    let result = &messages.last().unwrap()["result"];
    assert_eq!(result["isError"], true, "{result}");
    let task = result["structuredContent"]["taskId"].as_str().unwrap();
    let run = s
        .wait(task, "waiting", |r| r.phase() == RunPhase::Waiting)
        .await;
    assert!(
        run.spec.input_responses.is_empty(),
        "nothing taken for an answer"
    );
    // A client of 2025-11-25 is asked.
    let new = Old::connect(&s.url(), "alice-token", json!({"elicitation": {}})).await;
    let mut events = new
        .open("tools/call", json!({"name": "pick", "arguments": {}}))
        .await;
    let asked = events.next().await.expect("a question");
    assert_eq!(asked["method"], "elicitation/create", "{asked}");
    assert_eq!(
        asked["params"]["requestedSchema"]["properties"]["env"]["oneOf"][0]["title"],
        "Production"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_call_goes_on_once_its_answer_arrives() {
    let s = server().await;
    let c = Old::connect(&s.url(), "alice-token", json!({"elicitation": {}})).await;
    let mut events = c
        .open("tools/call", json!({"name": "ask-name", "arguments": {}}))
        .await;
    let ask = events.next().await.unwrap();
    assert_eq!(
        c.answer(
            &ask["id"],
            json!({"action": "accept", "content": {"name": "Ada"}})
        )
        .await,
        StatusCode::ACCEPTED
    );
    let last = events.next().await.unwrap();
    assert_eq!(last["id"], "held");
    assert_eq!(last["result"]["content"][0]["text"], "hello Ada", "{last}");
    // Answering again changes nothing and is no error.
    assert_eq!(
        c.answer(
            &ask["id"],
            json!({"action": "accept", "content": {"name": "Bo"}})
        )
        .await,
        StatusCode::ACCEPTED
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_cannot_answer_is_told_where_to_and_the_run_waits() {
    let s = server().await;
    let c = Old::connect(&s.url(), "alice-token", json!({})).await;
    let (_, messages) = c
        .rpc("tools/call", json!({"name": "ask-name", "arguments": {}}))
        .await;
    let result = &messages.last().unwrap()["result"];
    assert_eq!(result["isError"], true, "{result}");
    let task = result["structuredContent"]["taskId"].as_str().unwrap();
    assert!(
        result["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains(task)
    );
    let run = s
        .wait(task, "waiting", |r| r.phase() == RunPhase::Waiting)
        .await;
    assert!(run.spec.cancel.is_none());

    // A tool with an `outputSchema`: the same, in the text alone.
    let (_, messages) = c
        .rpc("tools/call", json!({"name": "typed-ask", "arguments": {}}))
        .await;
    let result = &messages.last().unwrap()["result"];
    assert_eq!(result["isError"], true, "{result}");
    assert!(result.get("structuredContent").is_none(), "{result}");
    let text = result["content"][0]["text"].as_str().unwrap();
    let typed = text
        .split_whitespace()
        .find(|w| w.starts_with("typed-ask-"))
        .unwrap_or_else(|| panic!("the Run is named: {text}"));
    s.wait(typed, "waiting", |r| r.phase() == RunPhase::Waiting)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_held_call_cancels_its_run_and_one_past_the_hold_limit_does_not() {
    let s = Mcp::start_with(
        &[("era.yaml", WORKFLOWS), ("tasks.yaml", TASK_WORKFLOWS)],
        |c| c.hold_limit = Duration::from_millis(300),
    )
    .await;
    let c = Old::connect(&s.url(), "alice-token", json!({})).await;
    // With a progress token the call is held as long as the Run runs.
    let mut events = c
        .open(
            "tools/call",
            json!({"name": "nap", "arguments": {}, "_meta": {"progressToken": 1}}),
        )
        .await;
    let first = events.next().await.unwrap();
    assert_eq!(first["method"], "notifications/progress");
    let runs = runway::store::RunStore::list(s.store(), Some("team-a"), &Default::default())
        .await
        .unwrap();
    let held = runs[0].metadata.name.clone().unwrap();
    drop(events);
    s.cancelled_as_left(&held).await;

    // Without one, the answer names the Run after the hold limit, and the Run goes on.
    let result = c
        .result("tools/call", json!({"name": "nap", "arguments": {}}))
        .await;
    assert!(result.get("isError").is_none_or(|e| e == false), "{result}");
    let task = result["structuredContent"]["taskId"].as_str().unwrap();
    assert_eq!(result["structuredContent"]["status"], "working");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let run = runway::store::RunStore::get(s.store(), "team-a", task)
        .await
        .unwrap()
        .unwrap();
    assert!(run.spec.cancel.is_none());
    assert!(!run.phase().is_terminal());

    // A tool with an `outputSchema` gets no made-up `structuredContent` (it would not meet the
    // schema): the answer is a tool error whose text names the Run, which goes on.
    let result = c
        .result("tools/call", json!({"name": "typed-nap", "arguments": {}}))
        .await;
    assert_eq!(result["isError"], true, "{result}");
    assert!(result.get("structuredContent").is_none(), "{result}");
    let text = result["content"][0]["text"].as_str().unwrap();
    let typed = text
        .split_whitespace()
        .find(|w| w.starts_with("typed-nap-"))
        .unwrap_or_else(|| panic!("the Run is named: {text}"));
    let run = s
        .wait(typed, "running", |r| r.phase() == RunPhase::Running)
        .await;
    assert!(run.spec.cancel.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_held_when_the_server_stops_is_told_its_run_goes_on_and_finds_it_again() {
    let s = server().await;
    let c = Old::connect(&s.url(), "alice-token", json!({})).await;
    let call = json!({
        "name": "pause",
        "arguments": {},
        "_meta": {"progressToken": 1, "dev.runway/idempotencyKey": "deploy-42"},
    });
    let mut events = c.open("tools/call", call.clone()).await;
    let first = events.next().await.unwrap();
    assert_eq!(first["method"], "notifications/progress", "{first}");
    let name = {
        let runs = runway::store::RunStore::list(s.store(), Some("team-a"), &Default::default())
            .await
            .unwrap();
        runs[0].metadata.name.clone().unwrap()
    };
    // The server stops under the held call: the stream ends with a result naming the Run.
    let stopping = tokio::spawn(s.stop());
    let mut last = first;
    while let Some(m) = events.next().await {
        last = m;
    }
    let dir = stopping.await.unwrap();
    let result = &last["result"];
    assert_eq!(
        result["structuredContent"]["taskId"],
        name.as_str(),
        "{last}"
    );
    assert_eq!(result["structuredContent"]["status"], "working");
    assert!(result.get("isError").is_none_or(|e| e == false), "{result}");
    let text = result["content"][0]["text"].as_str().unwrap();
    assert!(
        text.contains(&name) && text.contains("idempotencyKey"),
        "{text}"
    );

    // The same call with the same key, on the restarted server, waits on that Run.
    let s = Mcp::start_in(dir).await;
    let c = Old::connect(&s.url(), "alice-token", json!({})).await;
    let (_, messages) = c.rpc("tools/call", call).await;
    let result = &messages.last().unwrap()["result"];
    assert_eq!(result["content"][0]["text"], "paused", "{messages:?}");
    let runs = runway::store::RunStore::list(s.store(), Some("team-a"), &Default::default())
        .await
        .unwrap();
    assert_eq!(runs.len(), 1, "one Run, not two");
    let st = runs[0].status.as_ref().unwrap();
    assert!(runs[0].spec.cancel.is_none());
    for step in &st.steps {
        assert_eq!(step.attempt, 1, "{} ran once", step.name);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_result_of_a_task_shown_cancelled_answers_while_its_cleanup_runs() {
    let s = server().await;
    let alice = Old::connect(&s.url(), "alice-token", json!({"tasks": {}})).await;
    let created = alice
        .result(
            "tools/call",
            json!({"name": "slow-cleanup", "arguments": {}, "task": {}}),
        )
        .await;
    let task = created["task"]["taskId"].as_str().unwrap().to_owned();
    let cancelled = alice.result("tasks/cancel", json!({"taskId": task})).await;
    assert_eq!(cancelled["status"], "cancelled");
    // `cancelled` is terminal: the result comes now, not after the hour of `finally`.
    let result = tokio::time::timeout(
        super::support::harness::PATIENCE,
        alice.result("tasks/result", json!({"taskId": task})),
    )
    .await
    .expect("tasks/result answers while the cleanup runs");
    assert_eq!(result["isError"], true, "{result}");
    let text = result["content"][0]["text"].as_str().unwrap();
    assert!(text.starts_with("cancelled by alice"), "{text}");
    assert_eq!(
        result["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        task.as_str()
    );
    let runs = runway::store::RunStore::list(s.store(), Some("team-a"), &Default::default())
        .await
        .unwrap();
    let run = runs
        .iter()
        .find(|r| r.spec.workflow_ref.name == "slow-cleanup")
        .unwrap();
    assert_eq!(
        run.phase(),
        RunPhase::Cancelling,
        "its finally step still runs"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_of_2025_11_25_on_the_same_runs() {
    let s = server().await;
    let alice = Old::connect(
        &s.url(),
        "alice-token",
        json!({"tasks": {}, "elicitation": {}}),
    )
    .await;
    let created = alice
        .result(
            "tools/call",
            json!({"name": "quick", "arguments": {}, "task": {"ttl": 60000}}),
        )
        .await;
    let task = created["task"]["taskId"].as_str().unwrap().to_owned();
    assert_eq!(created["task"]["status"], "working");
    assert!(created["task"]["ttl"].is_null());
    assert_eq!(created["task"]["pollInterval"], 250);
    assert!(created["task"]["createdAt"].is_string());

    let result = alice.result("tasks/result", json!({"taskId": task})).await;
    assert_eq!(result["content"][0]["text"], "quick done");
    assert_eq!(
        result["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        task.as_str()
    );
    let got = alice.result("tasks/get", json!({"taskId": task})).await;
    assert_eq!(got["status"], "completed");
    assert!(got["ttl"].as_u64().is_some(), "ttl once finished: {got}");
    // A finished task cannot be cancelled.
    assert_eq!(
        alice.error("tasks/cancel", json!({"taskId": task})).await["code"],
        -32602
    );

    // A protocol error is the task's result too.
    let created = alice
        .result(
            "tools/call",
            json!({"name": "proto-error", "arguments": {}, "task": {}}),
        )
        .await;
    let failing = created["task"]["taskId"].as_str().unwrap().to_owned();
    let e = alice
        .error("tasks/result", json!({"taskId": failing}))
        .await;
    assert_eq!(e["code"], -31042, "{e}");
    assert_eq!(
        alice.result("tasks/get", json!({"taskId": failing})).await["status"],
        "failed"
    );

    // A tool error is `failed` in this revision, and its result is the tool's answer.
    let created = alice
        .result(
            "tools/call",
            json!({"name": "tool-error", "arguments": {}, "task": {}}),
        )
        .await;
    assert_eq!(created["task"]["status"], "working");
    let erring = created["task"]["taskId"].as_str().unwrap().to_owned();
    let result = alice
        .result("tasks/result", json!({"taskId": erring}))
        .await;
    assert_eq!(result["isError"], true, "{result}");
    assert_eq!(result["content"][0]["text"], "nope", "{result}");
    assert_eq!(
        alice.result("tasks/get", json!({"taskId": erring})).await["status"],
        "failed"
    );

    // Cancel a running one.
    let created = alice
        .result(
            "tools/call",
            json!({"name": "nap", "arguments": {}, "task": {}}),
        )
        .await;
    let napping = created["task"]["taskId"].as_str().unwrap().to_owned();
    let cancelled = alice
        .result("tasks/cancel", json!({"taskId": napping}))
        .await;
    assert_eq!(cancelled["taskId"], napping.as_str());
    // This revision has the task cancelled before the answer, and it stays so while `nap`'s
    // finally step runs.
    assert_eq!(cancelled["status"], "cancelled", "{cancelled}");
    assert_eq!(
        alice.result("tasks/get", json!({"taskId": napping})).await["status"],
        "cancelled"
    );
    // Cancelled is terminal: cancelling again is refused as for any finished task.
    assert_eq!(
        alice
            .error("tasks/cancel", json!({"taskId": napping}))
            .await["code"],
        -32602
    );
    let run = s
        .wait(&napping, "cancelled", |r| r.phase().is_terminal())
        .await;
    assert_eq!(run.phase(), RunPhase::Cancelled);

    // Listing: alice sees her four; dave (same group, no list right) sees none of them;
    // bob (may list runs) sees all.
    let listed = alice.result("tasks/list", json!({})).await;
    let ids: Vec<&str> = listed["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["taskId"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 4, "{listed}");
    for mine in [&task, &failing, &erring, &napping] {
        assert!(ids.contains(&mine.as_str()), "{mine} in {listed}");
    }
    let dave = Old::connect(&s.url(), "dave-token", json!({"tasks": {}})).await;
    assert_eq!(
        dave.result("tasks/list", json!({})).await["tasks"],
        json!([])
    );
    let bob = Old::connect(&s.url(), "bob-token", json!({"tasks": {}})).await;
    assert_eq!(
        bob.result("tasks/list", json!({})).await["tasks"]
            .as_array()
            .unwrap()
            .len(),
        4
    );
    assert_eq!(
        dave.error("tasks/list", json!({"cursor": "garbage"})).await["code"],
        -32602
    );

    // Someone else's task and no task at all look the same.
    let foreign = dave.error("tasks/get", json!({"taskId": task})).await;
    let unknown = dave
        .error("tasks/get", json!({"taskId": "quick-nothing"}))
        .await;
    assert_eq!(foreign, unknown);
    assert_eq!(foreign["code"], -32602);
    assert_eq!(
        dave.error("tasks/cancel", json!({"taskId": task})).await,
        unknown
    );
    assert_eq!(
        dave.error("tasks/result", json!({"taskId": task})).await,
        unknown
    );

    // An idempotency key names the same task again (and refuses other arguments).
    let key = json!({"dev.runway/idempotencyKey": "order-17"});
    let once = alice
        .result(
            "tools/call",
            json!({"name": "quick", "arguments": {}, "task": {}, "_meta": key}),
        )
        .await;
    let first = once["task"]["taskId"].as_str().unwrap();
    s.wait(first, "done", |r| r.phase() == RunPhase::Succeeded)
        .await;
    let again = alice
        .result(
            "tools/call",
            json!({"name": "quick", "arguments": {}, "task": {}, "_meta": key}),
        )
        .await;
    assert_eq!(once["task"]["taskId"], again["task"]["taskId"]);
    // Every task of this revision begins `working`, even one found already done; `tasks/get`
    // tells where it is.
    assert_eq!(again["task"]["status"], "working", "{again}");
    assert!(again["task"]["ttl"].is_null(), "{again}");
    assert!(again["task"].get("statusMessage").is_none(), "{again}");
    assert_eq!(
        alice.result("tasks/get", json!({"taskId": first})).await["status"],
        "completed"
    );
    let other = alice
        .error(
            "tools/call",
            json!({"name": "quick", "arguments": {"x": 1}, "task": {}, "_meta": key}),
        )
        .await;
    assert_eq!(other["code"], -32602, "{other}");

    // A task-only tool as a task.
    let created = alice
        .result(
            "tools/call",
            json!({"name": "only-task", "arguments": {}, "task": {}}),
        )
        .await;
    assert!(created["task"]["taskId"].is_string());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_result_asks_the_tasks_questions_on_its_stream() {
    let s = server().await;
    let c = Old::connect(
        &s.url(),
        "alice-token",
        json!({"tasks": {}, "elicitation": {}}),
    )
    .await;
    let created = c
        .result(
            "tools/call",
            json!({"name": "ask-name", "arguments": {}, "task": {}}),
        )
        .await;
    let task = created["task"]["taskId"].as_str().unwrap().to_owned();
    s.wait(&task, "waiting", |r| r.phase() == RunPhase::Waiting)
        .await;
    assert_eq!(
        c.result("tasks/get", json!({"taskId": task})).await["status"],
        "input_required"
    );
    let mut events = c.open("tasks/result", json!({"taskId": task})).await;
    let status = events.next().await.unwrap();
    assert_eq!(status["method"], "notifications/tasks/status", "{status}");
    assert_eq!(status["params"]["taskId"], task.as_str());
    assert_eq!(status["params"]["status"], "input_required");
    let ask = events.next().await.unwrap();
    assert_eq!(ask["method"], "elicitation/create");
    assert_eq!(
        ask["params"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        task.as_str()
    );
    // Going away from tasks/result does not cancel the task (it is not the call).
    drop(events);
    assert_eq!(
        c.answer(
            &ask["id"],
            json!({"action": "accept", "content": {"name": "Ada"}})
        )
        .await,
        StatusCode::ACCEPTED
    );
    let result = c.result("tasks/result", json!({"taskId": task})).await;
    assert_eq!(result["content"][0]["text"], "hello Ada");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_result_of_a_client_that_cannot_answer_waits_for_the_task_to_end() {
    let s = server().await;
    // Tasks, but no elicitation: the question is answered elsewhere.
    let c = Old::connect(&s.url(), "alice-token", json!({"tasks": {}})).await;
    let created = c
        .result(
            "tools/call",
            json!({"name": "ask-name", "arguments": {}, "task": {}}),
        )
        .await;
    let task = created["task"]["taskId"].as_str().unwrap().to_owned();
    s.wait(&task, "waiting", |r| r.phase() == RunPhase::Waiting)
        .await;
    let mut events = c.open("tasks/result", json!({"taskId": task})).await;
    let status = events.next().await.unwrap();
    assert_eq!(status["params"]["status"], "input_required", "{status}");
    let key = runway::store::RunStore::get(s.store(), "team-a", &task)
        .await
        .unwrap()
        .unwrap()
        .status
        .unwrap()
        .input_requests
        .into_keys()
        .next()
        .unwrap();
    let answered = s
        .client("alice-token")
        .update(
            &task,
            json!({ key: {"action": "accept", "content": {"name": "Ada"}} }),
        )
        .await;
    answered.assert_complete();
    let mut answer = None;
    while let Some(m) = events.next().await {
        if m["id"] == "held" {
            answer = Some(m);
        }
    }
    let answer = answer.expect("an answer once the task ended");
    assert_eq!(
        answer["result"]["content"][0]["text"], "hello Ada",
        "{answer}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_result_ends_once_its_caller_may_no_longer_read_the_task() {
    let s = server().await;
    let alice = s.client("alice-token");
    let id = alice.call("signoff", json!({})).await.task_id();
    s.wait(&id, "waiting", |r| r.phase() == RunPhase::Waiting)
        .await;
    // paula may read the Run while its question names her group: she is asked on the stream.
    let paula = Old::connect(
        &s.url(),
        "paula-token",
        json!({"tasks": {}, "elicitation": {}}),
    )
    .await;
    // What tasks/get shows her, tasks/list lists.
    let listed = paula.result("tasks/list", json!({})).await;
    assert!(
        listed["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["taskId"] == id.as_str()),
        "{listed}"
    );
    let mut events = paula.open("tasks/result", json!({"taskId": id})).await;
    let mut seen = Vec::new();
    while let Some(m) = events.next().await {
        let asked = m["method"] == "elicitation/create";
        seen.push(m);
        if asked {
            break;
        }
    }
    // alice cancels: the question closes unanswered and the task is unknown to paula again.
    assert!(alice.cancel(&id).await.last().get("error").is_none());
    while let Some(m) = events.next().await {
        seen.push(m);
    }
    // She may be told of the cancel while her question is still open, but not of the end:
    // the answer is the unknown task's.
    let answer = seen.iter().find(|m| m["id"] == "held").expect("an answer");
    assert_eq!(answer["error"]["code"], -32602, "{seen:?}");
    let listed = paula.result("tasks/list", json!({})).await;
    assert_eq!(listed["tasks"], json!([]), "{listed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_call_whose_client_leaves_while_its_run_is_created_cancels_it() {
    // 4 slots: alice may have one request in progress, so her next one shows whether it is.
    let s = Mcp::start_with(&[("tasks.yaml", TASK_WORKFLOWS)], |c| {
        c.max_concurrent_requests = 4
    })
    .await;
    let old = Old::connect(&s.url(), "alice-token", json!({})).await;
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "nap", "arguments": {}}});
    super::support::mcp::leave_during_create(&s, &s.client("alice-token"), "nap", || {
        let sent = old.post(&body).send();
        async move { sent.await.unwrap().status() }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notifications_cancelled_cancels_only_the_callers_own_held_call() {
    let s = server().await;
    let c = Old::connect(&s.url(), "alice-token", json!({})).await;
    let mut events = c
        .open(
            "tools/call",
            json!({"name": "nap", "arguments": {}, "_meta": {"progressToken": 1}}),
        )
        .await;
    events.next().await.unwrap();
    let runs = runway::store::RunStore::list(s.store(), Some("team-a"), &Default::default())
        .await
        .unwrap();
    let name = runs[0].metadata.name.clone().unwrap();
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": "held", "reason": "user pressed stop"}});
    // Another session of the same caller names the same request id: not its call.
    let other = Old::connect(&s.url(), "alice-token", json!({})).await;
    assert_eq!(
        other.post(&cancel).send().await.unwrap().status(),
        StatusCode::ACCEPTED
    );
    // The notification is handled before its 202, so the Run would show it by now.
    let run = runway::store::RunStore::get(s.store(), "team-a", &name)
        .await
        .unwrap()
        .unwrap();
    assert!(run.spec.cancel.is_none(), "{:?}", run.spec.cancel);
    assert_eq!(
        c.post(&cancel).send().await.unwrap().status(),
        StatusCode::ACCEPTED
    );
    let run = s
        .wait(&name, "cancelled", |r| r.phase().is_terminal())
        .await;
    assert_eq!(run.phase(), RunPhase::Cancelled);
    let by = run.spec.cancel.unwrap();
    assert_eq!(by.reason.as_deref(), Some("mcp-request-cancelled"));
    assert_eq!(by.requested_by.as_deref(), Some("alice"));
    // The held call ends with the Run, answered (a retry of it may wait on the same Run).
    let answer = tokio::time::timeout(super::support::harness::PATIENCE, async {
        while let Some(m) = events.next().await {
            if m.get("id").is_some() {
                return Some(m);
            }
        }
        None
    })
    .await
    .expect("the stream ends")
    .expect("the held call is answered");
    assert_eq!(answer["id"], "held");
    assert_eq!(answer["result"]["isError"], true, "{answer}");
}

/// A 2025-era `tasks/get` twice: in the plain shape the fast path answers, and with an empty
/// `_meta` beside the task id, which only the general path takes.
async fn get_both_ways(c: &Old, id: Value, task: &str) -> [(StatusCode, Value); 2] {
    let mut out = vec![];
    for params in [
        json!({"taskId": task}),
        json!({"taskId": task, "_meta": {}}),
    ] {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tasks/get", "params": params});
        let resp = c.post(&body).send().await.unwrap();
        let status = resp.status();
        assert_eq!(resp.headers()["content-type"], "application/json", "{task}");
        out.push((status, resp.json::<Value>().await.unwrap()));
    }
    out.try_into().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_get_answers_alike_on_the_fast_path_and_the_general_one() {
    let s = server().await;
    let alice = Old::connect(&s.url(), "alice-token", json!({"tasks": {}})).await;
    let dave = Old::connect(&s.url(), "dave-token", json!({"tasks": {}})).await;
    let start = |tool: &'static str| {
        let alice = &alice;
        async move {
            let created = alice
                .result(
                    "tools/call",
                    json!({"name": tool, "arguments": {}, "task": {}}),
                )
                .await;
            created["task"]["taskId"].as_str().unwrap().to_owned()
        }
    };
    let done = start("quick").await;
    let failed = start("proto-error").await;
    let erring = start("tool-error").await;
    let working = start("nap").await;
    let waiting = start("form").await;
    let cancelled = start("nap").await;
    alice
        .result("tasks/cancel", json!({"taskId": cancelled}))
        .await;
    for (task, phase) in [
        (&done, RunPhase::Succeeded),
        (&failed, RunPhase::Failed),
        (&erring, RunPhase::Failed),
        (&waiting, RunPhase::Waiting),
        (&cancelled, RunPhase::Cancelled),
    ] {
        s.wait(task, "its phase", |r| r.phase() == phase).await;
    }
    let cases = [
        (&alice, json!(7), done.as_str(), "completed"),
        (&alice, json!("a string id"), done.as_str(), "completed"),
        (&alice, json!(8), failed.as_str(), "failed"),
        (&alice, json!(14), erring.as_str(), "failed"),
        (&alice, json!(9), working.as_str(), "working"),
        (&alice, json!(10), waiting.as_str(), "input_required"),
        (&alice, json!(11), cancelled.as_str(), "cancelled"),
        // Someone else's task and no task at all: the same error either way.
        (&dave, json!(12), done.as_str(), "error"),
        (&alice, json!(13), "quick-no-such-task", "error"),
    ];
    for (who, id, task, want) in cases {
        let [fast, general] = get_both_ways(who, id.clone(), task).await;
        assert_eq!(fast, general, "{task}");
        assert_eq!(fast.0, StatusCode::OK);
        assert_eq!(fast.1["id"], id);
        match want {
            "error" => assert_eq!(fast.1["error"]["code"], -32602, "{}", fast.1),
            status => assert_eq!(fast.1["result"]["status"], status, "{}", fast.1),
        }
    }
    // The session is checked before anything is read: a forged one is refused either way.
    let forged = Old {
        session: format!("{}x", alice.session),
        ..alice
    };
    let [fast, general] = get_both_ways(&forged, json!(14), &done).await;
    assert_eq!(fast, general);
    assert_eq!(fast.0, StatusCode::NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_racing_cancels_of_a_task_one_is_taken_and_the_rest_told_it_ended() {
    let s = server().await;
    let alice = Old::connect(&s.url(), "alice-token", json!({"tasks": {}})).await;
    let created = alice
        .result(
            "tools/call",
            json!({"name": "nap", "arguments": {}, "task": {}}),
        )
        .await;
    let id = created["task"]["taskId"].as_str().unwrap().to_owned();
    let cancel = || alice.rpc("tasks/cancel", json!({"taskId": id}));
    let answers = futures::future::join_all((0..8).map(|_| cancel())).await;
    let last: Vec<&Value> = answers.iter().map(|(_, m)| m.last().unwrap()).collect();
    let taken = last.iter().filter(|m| m.get("error").is_none()).count();
    assert_eq!(taken, 1, "{last:?}");
    for m in last.iter().filter_map(|m| m.get("error")) {
        assert_eq!(m["code"], -32602, "{m}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_result_tells_the_status_as_it_changes_only_to_who_may_watch_runs() {
    // Every reader of the namespace may read every task; rita may `get runs`, not `watch` them.
    let s = Mcp::start_with(&[("tasks.yaml", TASK_WORKFLOWS)], |c| {
        c.task_access = runway::mcp::TaskAccess::Namespace;
    })
    .await;
    let tasks = json!({"tasks": {"requests": {"tools": {"call": {}}}}});
    let olga = Old::connect(&s.url(), "olga-token", tasks.clone()).await;
    let rita = Old::connect(&s.url(), "reader-token", tasks).await;
    let task = olga
        .result(
            "tools/call",
            json!({"name": "nap", "arguments": {}, "task": {}}),
        )
        .await["task"]["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    // Both hold for the result; the task is cancelled meanwhile (its status changes).
    let mut watching = olga.open("tasks/result", json!({"taskId": task})).await;
    let mut reading = rita.open("tasks/result", json!({"taskId": task})).await;
    olga.result("tasks/cancel", json!({"taskId": task})).await;
    let (told, answer) = tokio::time::timeout(
        super::support::harness::PATIENCE,
        until_answer(&mut watching),
    )
    .await
    .unwrap();
    assert!(
        told.iter().any(|m| m == "notifications/tasks/status"),
        "{told:?}"
    );
    assert_eq!(
        answer["result"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        task.as_str()
    );
    let (told, answer) = tokio::time::timeout(
        super::support::harness::PATIENCE,
        until_answer(&mut reading),
    )
    .await
    .unwrap();
    assert!(
        !told.iter().any(|m| m == "notifications/tasks/status"),
        "no status without watch: {told:?}"
    );
    assert_eq!(
        answer["result"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        task.as_str(),
        "the answer all the same: {answer}"
    );
}

/// The notifications of a held request's stream (their methods), until its answer; and the
/// answer.
async fn until_answer(events: &mut super::support::mcp::Events) -> (Vec<String>, Value) {
    let mut told = vec![];
    loop {
        let m = events.next().await.expect("an answer before the end");
        if m.get("id").is_some() {
            return (told, m);
        }
        told.push(m["method"].as_str().unwrap_or_default().to_owned());
    }
}
