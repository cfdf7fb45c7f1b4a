//! The MCP endpoint over real HTTP: transport rules, identity and tenants, blocking calls,
//! progress, MRTR and disconnects.

mod batches;
mod era2025;
mod window;
use crate::support;

use std::time::Duration;

use reqwest::StatusCode;
use runway::api::RunPhase;
use serde_json::{Value, json};
use support::mcp::{Client, Mcp, TASKS};

const WORKFLOWS: &str = r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: echo, namespace: NS }
spec:
  tool:
    description: Echoes a word.
    inputSchema: { type: object, properties: { word: { type: string } }, required: [word], additionalProperties: false }
  execution: { mode: sync }
  result:
    content: [ { type: text, text: "echo {{ args.word }}" } ]
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: steps, namespace: NS }
spec:
  tool:
    description: Three short steps.
    inputSchema: { type: object, properties: {} }
  steps:
    - { name: one, delay: { duration: 20ms } }
    - { name: two, delay: { duration: 20ms } }
    - { name: three, delay: { duration: 20ms } }
  result:
    content: [ { type: text, text: "done" } ]
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: slow, namespace: NS }
spec:
  tool:
    description: Waits a long time.
    inputSchema: { type: object, properties: {} }
  steps:
    - { name: wait, delay: { duration: 1h } }
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: only-task, namespace: NS }
spec:
  tool: { description: Task only. }
  execution: { mode: task }
  steps: []
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: approve, namespace: NS }
spec:
  tool: { description: Needs an approval. }
  steps:
    - name: ask
      input:
        requests:
          - { name: ok, message: "Proceed?", requestedSchema: { type: object, properties: { yes: { type: boolean } } } }
  result:
    content: [ { type: text, text: "approved={{ inputs.ok.yes }}" } ]
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
  result:
    content: [ { type: text, text: "paused" } ]
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: sync-approve, namespace: NS }
spec:
  tool: { description: Answers on the call; needs an approval. }
  execution: { mode: sync }
  steps:
    - name: ask
      input:
        requests:
          - { name: ok, message: "Proceed?", requestedSchema: { type: object, properties: { yes: { type: boolean } } } }
  result:
    content: [ { type: text, text: "approved={{ inputs.ok.yes }}" } ]
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: sync-slow, namespace: NS }
spec:
  tool: { description: Answers on the call; takes an hour. }
  execution: { mode: sync }
  steps:
    - { name: wait, delay: { duration: 1h } }
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: hello, namespace: NS }
spec:
  tool:
    description: Greets; asks for the name when it is missing.
    inputSchema: { type: object, properties: { name: { type: string } } }
  execution: { mode: sync }
  elicit:
    - key: who
      message: Your name?
      requestedSchema: { type: object, properties: { name: { type: string } }, required: [name] }
  result:
    content: [ { type: text, text: "Hello, {{ args.name }}!" } ]
"#;

async fn server() -> Mcp {
    Mcp::start(&[("wf.yaml", WORKFLOWS)]).await
}

/// Start a call of the `slow` tool and return its Run's name once that Run is running.
async fn running_call<T: Send + 'static>(
    s: &Mcp,
    call: impl Future<Output = T> + Send + 'static,
) -> (String, tokio::task::JoinHandle<T>) {
    running_call_of(s, "slow", call).await
}

/// Start a call of `workflow`'s tool and return its Run's name once that Run is running.
async fn running_call_of<T: Send + 'static>(
    s: &Mcp,
    workflow: &str,
    call: impl Future<Output = T> + Send + 'static,
) -> (String, tokio::task::JoinHandle<T>) {
    use futures::StreamExt;
    let rv = runway::store::RunStore::resource_version(s.store())
        .await
        .unwrap();
    let mut created = runway::store::RunStore::watch(s.store(), Some(rv));
    let handle = tokio::spawn(call);
    let name = loop {
        let ev = created.next().await.unwrap().unwrap();
        if ev.run().spec.workflow_ref.name == workflow {
            break ev.run().metadata.name.clone().unwrap();
        }
    };
    s.wait(&name, "running", |r| r.phase() == RunPhase::Running)
        .await;
    (name, handle)
}

fn sync_caps() -> Value {
    json!({})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discover_advertises_tasks_and_cache_hints() {
    let s = server().await;
    let r = s
        .client("alice-token")
        .rpc("server/discover", None, json!({}))
        .await;
    assert_eq!(r.status, StatusCode::OK);
    let res = r.result();
    assert_eq!(res["supportedVersions"], json!(["2026-07-28"]));
    assert!(res["capabilities"]["extensions"][TASKS].is_object());
    // The run view is served, so MCP Apps is declared, with the view's MIME type.
    assert_eq!(
        res["capabilities"]["extensions"]["io.modelcontextprotocol/ui"],
        json!({"mimeTypes": ["text/html;profile=mcp-app"]})
    );
    // The same for every caller and stable until a new release: an hour, shared caches allowed.
    assert_eq!(res["ttlMs"], 3_600_000);
    assert_eq!(res["cacheScope"], "public");
    assert_eq!(res["resultType"], "complete");
    // Which build answers: the version of Cargo.toml (2026-07-28 carries it in `_meta`).
    let info = &res["_meta"]["io.modelcontextprotocol/serverInfo"];
    assert_eq!(info["name"], "runway");
    assert_eq!(info["version"], env!("CARGO_PKG_VERSION"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_list_is_stable_private_and_per_tenant() {
    let s = server().await;
    let alice = s.client("alice-token");
    let r = alice.rpc("tools/list", None, json!({})).await;
    let names: Vec<String> = r.result()["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        names,
        [
            "approve",
            "echo",
            "hello",
            "only-task",
            "pause",
            "runway_list_runs",
            "slow",
            "steps",
            "sync-approve",
            "sync-slow"
        ]
    );
    assert_eq!(r.result()["cacheScope"], "private");
    assert!(r.result()["ttlMs"].is_u64());
    let again = alice.rpc("tools/list", None, json!({})).await;
    assert_eq!(again.result()["tools"], r.result()["tools"]);

    // carol (team-b) cannot list team-a, and her default namespace is team-b
    let carol = s.client("carol-token");
    let denied = carol.rpc("tools/list", None, json!({})).await;
    assert_eq!(denied.error_code(), runway::protocol::codes::FORBIDDEN);
    let own = carol
        .clone()
        .at("/mcp")
        .rpc("tools/list", None, json!({}))
        .await;
    assert_eq!(own.result()["tools"].as_array().unwrap().len(), 10);
    // alice's default namespace is team-a
    let a = alice
        .clone()
        .at("/mcp")
        .rpc("tools/list", None, json!({}))
        .await;
    assert_eq!(a.result()["tools"], r.result()["tools"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authentication_and_authorization_per_method() {
    let s = server().await;
    // unauthenticated: 401 with WWW-Authenticate, for every method
    for (method, name, params) in [
        ("tools/list", None, json!({})),
        (
            "tools/call",
            Some("echo"),
            json!({"name": "echo", "arguments": {"word": "x"}}),
        ),
        ("tasks/get", Some("t"), json!({"taskId": "t"})),
        (
            "tasks/update",
            Some("t"),
            json!({"taskId": "t", "inputResponses": {}}),
        ),
        ("tasks/cancel", Some("t"), json!({"taskId": "t"})),
    ] {
        for token in [None, Some("wrong-token")] {
            let c = Client::new(
                &format!("http://{}", s.addr),
                token,
                "/namespaces/team-a/mcp",
            );
            let r = c.rpc(method, name, params.clone()).await;
            assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{method} {token:?}");
            assert!(
                r.headers
                    .get("www-authenticate")
                    .unwrap()
                    .to_str()
                    .unwrap()
                    .starts_with("Bearer")
            );
        }
    }
    // forbidden: rita may only get runs
    let rita = s.client("reader-token");
    assert_eq!(
        rita.rpc("tools/list", None, json!({})).await.error_code(),
        runway::protocol::codes::FORBIDDEN
    );
    let call = rita.call("echo", json!({"word": "x"})).await;
    assert_eq!(call.error_code(), runway::protocol::codes::FORBIDDEN);
    // a forbidden call looks the same whether or not the tool exists
    let ghost = rita.call("no-such-tool", json!({})).await;
    assert_eq!(
        ghost.last()["error"]["message"],
        call.last()["error"]["message"]
    );
    // allowed
    let ok = s
        .client("alice-token")
        .with_caps(sync_caps())
        .call("echo", json!({"word": "hi"}))
        .await;
    assert_eq!(ok.result()["content"][0]["text"], "echo hi");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_path_that_names_no_namespace_is_not_found() {
    let s = server().await;
    let c = s.client("alice-token");
    let named = c
        .clone()
        .at("/namespaces/team-a/mcp")
        .rpc("tools/list", None, json!({}))
        .await;
    assert_eq!(named.status, StatusCode::OK);
    assert!(
        named.result()["tools"]
            .as_array()
            .is_some_and(|t| !t.is_empty())
    );
    for path in [
        "/namespaces/Team_A/mcp",
        "/namespaces/team-a/x/mcp",
        "/namespaces//mcp",
    ] {
        let r = c.clone().at(path).rpc("tools/list", None, json!({})).await;
        assert_eq!(
            (r.status, r.error_code()),
            (StatusCode::NOT_FOUND, -32600),
            "{path}"
        );
    }
    for path in [
        "/namespaces/team-a/mcp/",
        "/namespaces/team-a",
        "/mcp/x",
        "/elsewhere",
    ] {
        let r = c.clone().at(path).rpc("tools/list", None, json!({})).await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{path}");
        assert!(r.messages.is_empty(), "{path}: {:?}", r.messages);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transport_rules() {
    let s = server().await;
    let c = s.client("alice-token");
    let url = format!("http://{}/namespaces/team-a/mcp", s.addr);
    let body =
        json!({"jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": {"_meta": c.meta()}});

    // GET and DELETE are not allowed
    let http = reqwest::Client::new();
    assert_eq!(
        http.get(&url)
            .bearer_auth("alice-token")
            .send()
            .await
            .unwrap()
            .status(),
        StatusCode::METHOD_NOT_ALLOWED
    );
    assert_eq!(
        http.delete(&url)
            .bearer_auth("alice-token")
            .send()
            .await
            .unwrap()
            .status(),
        StatusCode::METHOD_NOT_ALLOWED
    );

    // header checks
    let no_version = c
        .send(
            http.post(&url)
                .bearer_auth("alice-token")
                .header("content-type", "application/json")
                .header("accept", "application/json, text/event-stream")
                .header("mcp-method", "tools/list")
                .json(&body),
        )
        .await;
    assert_eq!(
        (no_version.status, no_version.error_code()),
        (StatusCode::BAD_REQUEST, -32020)
    );
    let wrong_method = c.send(c.request("tools/call", None).json(&body)).await;
    assert_eq!(
        (wrong_method.status, wrong_method.error_code()),
        (StatusCode::BAD_REQUEST, -32020)
    );
    let unsupported = c
        .send(c.request_at("2099-01-01", "tools/list", None).json(
            &json!({"jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": {"_meta": {
                    "io.modelcontextprotocol/protocolVersion": "2099-01-01",
                    "io.modelcontextprotocol/clientCapabilities": {}}}}),
        ))
        .await;
    assert_eq!(
        (unsupported.status, unsupported.error_code()),
        (StatusCode::BAD_REQUEST, -32022)
    );
    assert!(
        unsupported.last()["error"]["data"]["supported"]
            .as_array()
            .unwrap()
            .contains(&json!("2026-07-28"))
    );
    let missing_meta = c
        .send(
            c.request("tools/list", None)
                .json(&json!({"jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": {}})),
        )
        .await;
    assert_eq!(
        (missing_meta.status, missing_meta.error_code()),
        (StatusCode::BAD_REQUEST, -32602)
    );
    let name_mismatch = c
        .send(
            c.request("tools/call", Some("other"))
                .json(&json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"_meta": c.meta(), "name": "echo", "arguments": {"word": "x"}}})),
        )
        .await;
    assert_eq!(
        (name_mismatch.status, name_mismatch.error_code()),
        (StatusCode::BAD_REQUEST, -32020)
    );
    // a base64-sentinel Mcp-Name is decoded before comparing
    let encoded = c
        .send(c.request("tools/call", Some("=?base64?ZWNobw==?=")).json(&json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"_meta": c.clone().with_caps(json!({})).meta(), "name": "echo", "arguments": {"word": "x"}}})))
        .await;
    assert_eq!(encoded.result()["content"][0]["text"], "echo x");

    // body rules
    let big = "x".repeat(runway::mcp::MAX_BODY_BYTES + 1);
    let too_big = c.send(c.request("tools/list", None).body(big)).await;
    assert_eq!(too_big.status, StatusCode::PAYLOAD_TOO_LARGE);
    let batch = c
        .send(
            c.request("tools/list", None)
                .json(&json!([body.clone(), body.clone()])),
        )
        .await;
    assert_eq!(
        (batch.status, batch.error_code()),
        (StatusCode::BAD_REQUEST, -32600)
    );
    let garbage = c
        .send(c.request("tools/list", None).body("{not json"))
        .await;
    assert_eq!(
        (garbage.status, garbage.error_code()),
        (StatusCode::BAD_REQUEST, -32700)
    );
    // Objects that are not JSON-RPC messages MCP allows: -32600, and nothing is served (in the
    // 2025 era's shape too: an initialize with a null id opens no session).
    let meta = c.meta();
    for bad in [
        json!({"jsonrpc": "2.0", "id": null, "method": "tools/list", "params": {"_meta": meta}}),
        json!({"jsonrpc": "2.0", "id": true, "method": "tools/list", "params": {"_meta": meta}}),
        json!({"jsonrpc": "2.0", "id": 1.5, "method": "tools/list", "params": {"_meta": meta}}),
        json!({"jsonrpc": "2.0", "id": {}, "method": "tools/list", "params": {"_meta": meta}}),
        json!({"jsonrpc": "1.0", "id": 1, "method": "tools/list", "params": {"_meta": meta}}),
        json!({"id": 1, "method": "tools/list", "params": {"_meta": meta}}),
        json!({"jsonrpc": "2.0", "id": 1}),
        json!({"jsonrpc": "2.0", "id": null, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "x", "version": "1"}}}),
    ] {
        let r = c.send(c.request("tools/list", None).json(&bad)).await;
        assert_eq!(
            (r.status, r.error_code()),
            (StatusCode::BAD_REQUEST, -32600),
            "{bad}"
        );
        assert!(r.last()["id"].is_null(), "{:?}", r.last());
    }

    // removed methods
    for m in [
        "initialize",
        "ping",
        "logging/setLevel",
        "tasks/result",
        "tasks/list",
    ] {
        let r = c.rpc(m, None, json!({})).await;
        assert_eq!(
            (r.status, r.error_code()),
            (StatusCode::NOT_FOUND, -32601),
            "{m}"
        );
    }

    // Origin and Host
    let evil = c
        .send(
            c.request("tools/list", None)
                .header("origin", "http://evil.example")
                .json(&body),
        )
        .await;
    assert_eq!(evil.status, StatusCode::FORBIDDEN);
    let local = c
        .send(
            c.request("tools/list", None)
                .header("origin", format!("http://127.0.0.1:{}", s.addr.port()))
                .json(&body),
        )
        .await;
    assert_eq!(local.status, StatusCode::OK);
    let host = c
        .send(
            c.request("tools/list", None)
                .header(reqwest::header::HOST, "evil.example")
                .json(&body),
        )
        .await;
    assert_eq!(host.status, StatusCode::FORBIDDEN);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_call_validates_arguments_and_capabilities() {
    let s = server().await;
    let c = s.client("alice-token").with_caps(sync_caps());
    // Bad arguments are a tool error the model is shown and can correct, and start nothing.
    let before = runway::store::RunStore::list(s.store(), Some("team-a"), &Default::default())
        .await
        .unwrap()
        .len();
    let bad = c.call("echo", json!({"word": 5, "extra": true})).await;
    let result = bad.result();
    assert_eq!(result["isError"], true, "{result}");
    let text = result["content"][0]["text"].as_str().unwrap();
    assert!(text.starts_with("invalid arguments: "), "{text}");
    assert_eq!(text.matches("; ").count(), 1, "both errors named: {text}");
    let after = runway::store::RunStore::list(s.store(), Some("team-a"), &Default::default())
        .await
        .unwrap()
        .len();
    assert_eq!(before, after);
    // A tool that does not exist is the protocol's error.
    assert_eq!(c.call("nope", json!({})).await.error_code(), -32602);
    // task-only tool without the extension
    let r = c.call("only-task", json!({})).await;
    assert_eq!(
        (r.status, r.error_code()),
        (StatusCode::BAD_REQUEST, -32021)
    );
    assert!(r.last()["error"]["data"]["requiredCapabilities"]["extensions"][TASKS].is_object());
    // a workflow that needs input, from a client with neither tasks nor elicitation: refused before any Run
    let before = runway::store::RunStore::list(s.store(), Some("team-a"), &Default::default())
        .await
        .unwrap()
        .len();
    let r = c.call("approve", json!({})).await;
    assert_eq!(r.error_code(), -32021);
    assert!(r.last()["error"]["data"]["requiredCapabilities"]["elicitation"].is_object());
    let after = runway::store::RunStore::list(s.store(), Some("team-a"), &Default::default())
        .await
        .unwrap()
        .len();
    assert_eq!(before, after);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocking_calls_stream_progress_and_return_the_result() {
    let s = server().await;
    let c = s.client("alice-token").with_caps(sync_caps());
    let r = c
        .rpc(
            "tools/call",
            Some("steps"),
            json!({"name": "steps", "arguments": {}, "_meta": {"progressToken": "p-1"}}),
        )
        .await;
    assert!(
        r.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let progress = r.notifications("notifications/progress");
    assert!(progress.len() >= 3, "{progress:?}");
    let values: Vec<f64> = progress
        .iter()
        .map(|p| p["params"]["progress"].as_f64().unwrap())
        .collect();
    assert!(values.windows(2).all(|w| w[0] < w[1]), "{values:?}");
    assert!(
        progress
            .iter()
            .all(|p| p["params"]["progressToken"] == "p-1")
    );
    assert_eq!(r.result()["content"][0]["text"], "done");
    // the Run is the record of the call
    let runs = runway::store::RunStore::list(s.store(), Some("team-a"), &Default::default())
        .await
        .unwrap();
    let run = runs
        .iter()
        .find(|r| r.spec.workflow_ref.name == "steps")
        .unwrap();
    assert_eq!(run.phase(), RunPhase::Succeeded);
    assert_eq!(run.spec.requested_by.as_ref().unwrap().username, "alice");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_state_past_its_lifetime_is_refused() {
    let s = Mcp::start_with(&[("wf.yaml", WORKFLOWS)], |c| {
        c.state_ttl = Duration::from_millis(1)
    })
    .await;
    let c = s
        .client("alice-token")
        .with_caps(json!({"elicitation": {}}));
    let res = c.call("hello", json!({})).await.result().clone();
    let state = res["requestState"].as_str().unwrap().to_owned();
    // The lifetime is a clock, not an event: let it pass.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let answer = json!({"who": {"action": "accept", "content": {"name": "Ada"}}});
    let late = c
        .rpc("tools/call", Some("hello"), json!({"name": "hello", "arguments": {}, "inputResponses": answer, "requestState": state}))
        .await;
    assert_eq!(late.error_code(), -32602, "{:?}", late.messages);
    assert!(
        late.last()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("requestState"),
        "{:?}",
        late.messages
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn argument_elicitation_round_trips_and_refuses_tampered_state() {
    let s = server().await;
    let c = s
        .client("alice-token")
        .with_caps(json!({"elicitation": {}}));
    let r1 = c.call("hello", json!({})).await;
    let res = r1.result().clone();
    assert_eq!(res["resultType"], "input_required");
    assert_eq!(res["inputRequests"]["who"]["method"], "elicitation/create");
    let state = res["requestState"].as_str().unwrap().to_owned();
    let answer = json!({"who": {"action": "accept", "content": {"name": "Ada"}}});
    let r2 = c.rpc("tools/call", Some("hello"), json!({"name": "hello", "arguments": {}, "inputResponses": answer, "requestState": state})).await;
    assert_eq!(r2.result()["content"][0]["text"], "Hello, Ada!");
    let tampered = c
        .rpc("tools/call", Some("hello"), json!({"name": "hello", "arguments": {}, "inputResponses": answer, "requestState": format!("{state}x")}))
        .await;
    assert_eq!(tampered.error_code(), -32602);
    // another principal cannot use alice's state
    let bob = s.client("bob-token").with_caps(json!({"elicitation": {}}));
    let foreign = bob.rpc("tools/call", Some("hello"), json!({"name": "hello", "arguments": {}, "inputResponses": answer, "requestState": state})).await;
    assert_eq!(foreign.error_code(), -32602);
    // without elicitation the missing argument is a capability error
    let none = s
        .client("alice-token")
        .with_caps(json!({}))
        .call("hello", json!({}))
        .await;
    assert_eq!(none.error_code(), -32021);
    // a client that can only open URLs cannot fill in a form; one that names form mode can
    let url_only = s
        .client("alice-token")
        .with_caps(json!({"elicitation": {"url": {}}}))
        .call("hello", json!({}))
        .await;
    assert_eq!(url_only.error_code(), -32021, "{:?}", url_only.messages);
    assert_eq!(
        url_only.last()["error"]["data"]["requiredCapabilities"]["elicitation"],
        json!({"form": {}})
    );
    let forms = s
        .client("alice-token")
        .with_caps(json!({"elicitation": {"form": {}, "url": {}}}))
        .call("hello", json!({}))
        .await;
    assert_eq!(forms.result()["resultType"], "input_required");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocking_run_that_needs_input_answers_input_required_and_resumes() {
    let s = server().await;
    let c = s
        .client("alice-token")
        .with_caps(json!({"elicitation": {}}));
    let r1 = c.call("approve", json!({})).await;
    let res = r1.result().clone();
    assert_eq!(res["resultType"], "input_required");
    assert!(res.get("taskId").is_none());
    let (key, req) = res["inputRequests"]
        .as_object()
        .unwrap()
        .iter()
        .next()
        .unwrap();
    assert_eq!(req["params"]["message"], "Proceed?");
    let r2 = c
        .rpc(
            "tools/call",
            Some("approve"),
            json!({"name": "approve", "arguments": {},
            "inputResponses": {key.clone(): {"action": "accept", "content": {"yes": true}}},
            "requestState": res["requestState"]}),
        )
        .await;
    assert_eq!(r2.result()["content"][0]["text"], "approved=true");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_state_is_one_round_whose_replays_find_its_run() {
    let s = server().await;
    let c = s
        .client("alice-token")
        .with_caps(json!({"elicitation": {}}));
    let runs_of_hello = || async {
        runway::store::RunStore::list(s.store(), Some("team-a"), &Default::default())
            .await
            .unwrap()
            .into_iter()
            .filter(|r| r.spec.workflow_ref.name == "hello")
            .count()
    };
    // Answers without a state fill the arguments they name (the caller could pass them so).
    let ada = json!({"who": {"action": "accept", "content": {"name": "Ada"}}});
    let direct = c
        .rpc(
            "tools/call",
            Some("hello"),
            json!({"name": "hello", "arguments": {}, "inputResponses": ada}),
        )
        .await;
    assert_eq!(direct.result()["content"][0]["text"], "Hello, Ada!");
    assert_eq!(runs_of_hello().await, 1);
    let asked = c.call("hello", json!({})).await;
    assert_eq!(asked.result()["resultType"], "input_required");
    let state = asked.result()["requestState"].as_str().unwrap().to_owned();
    let retry = |answer: Value| {
        c.rpc(
            "tools/call",
            Some("hello"),
            json!({"name": "hello", "arguments": {}, "inputResponses": answer, "requestState": state}),
        )
    };
    assert_eq!(
        retry(ada.clone()).await.result()["content"][0]["text"],
        "Hello, Ada!"
    );
    assert_eq!(runs_of_hello().await, 2);
    // The same round again (a client that lost the answer and retries) is the same Run.
    assert_eq!(
        retry(ada.clone()).await.result()["content"][0]["text"],
        "Hello, Ada!"
    );
    assert_eq!(runs_of_hello().await, 2, "a replay starts nothing new");
    // The round was answered: another answer to it is refused, and starts nothing.
    let other = retry(json!({"who": {"action": "accept", "content": {"name": "Eve"}}})).await;
    assert_eq!(other.error_code(), -32602);
    assert!(
        other.last()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("answered already"),
        "{:?}",
        other.messages
    );
    assert_eq!(runs_of_hello().await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tasks_client_gets_a_task_for_a_sync_run_that_outlives_the_call() {
    let s = Mcp::start_with(&[("wf.yaml", WORKFLOWS)], |c| {
        c.hold_limit = Duration::from_millis(300);
    })
    .await;
    let tasks = s.client("alice-token");
    // A Run that waits for an answer outlives the call: the client that can follow tasks gets
    // one (in input_required), not an input_required result it would have to hold on to.
    let r = tasks.call("sync-approve", json!({})).await;
    let res = r.result().clone();
    assert_eq!(
        (res["resultType"].as_str(), res["status"].as_str()),
        (Some("task"), Some("input_required")),
        "{res}"
    );
    let id = res["taskId"].as_str().unwrap().to_owned();
    let key = tasks.await_status(&id, "input_required").await["inputRequests"]
        .as_object()
        .unwrap()
        .keys()
        .next()
        .unwrap()
        .clone();
    tasks
        .update(
            &id,
            json!({key: {"action": "accept", "content": {"yes": true}}}),
        )
        .await
        .assert_complete();
    let done = tasks.await_status(&id, "completed").await;
    assert_eq!(done["result"]["content"][0]["text"], "approved=true");
    // A Run still running when the hold limit passes: a task too, working, not cancelled.
    let r = tasks.call("sync-slow", json!({})).await;
    let res = r.result().clone();
    assert_eq!(
        (res["resultType"].as_str(), res["status"].as_str()),
        (Some("task"), Some("working")),
        "{res}"
    );
    let slow = res["taskId"].as_str().unwrap();
    assert_eq!(tasks.get(slow).await.result()["status"], "working");
    // Without the extension the call is held and asks on the call, as `sync` says.
    let plain = s
        .client("alice-token")
        .with_caps(json!({"elicitation": {}}));
    let r = plain.call("sync-approve", json!({})).await;
    assert_eq!(r.result()["resultType"], "input_required");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_disconnects_from_a_blocking_call_cancels_its_run() {
    let s = server().await;
    let c = s.client("alice-token").with_caps(sync_caps());
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"_meta": c.meta(), "name": "slow", "arguments": {}}});
    let (name, pending) = running_call(&s, {
        let c = c.clone();
        async move {
            c.request("tools/call", Some("slow"))
                .json(&body)
                .send()
                .await
        }
    })
    .await;
    pending.abort();
    s.cancelled_as_left(&name).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_leaves_while_its_run_is_being_created_cancels_it() {
    // 4 slots: alice may have one request in progress, so her next one shows whether it is.
    let s = Mcp::start_with(&[("wf.yaml", WORKFLOWS)], |c| c.max_concurrent_requests = 4).await;
    let c = s.client("alice-token");
    support::mcp::leave_during_create(&s, &c, "slow", || {
        let c = c.clone();
        async move { c.call("slow", json!({})).await.status }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disconnect_after_the_response_does_not_touch_the_run() {
    let s = server().await;
    let c = s.client("alice-token");
    let r = c.call("slow", json!({})).await;
    let task = r.result()["taskId"].as_str().unwrap().to_owned();
    drop(c);
    // the connection pool is gone; the Run must keep running
    tokio::time::sleep(Duration::from_millis(300)).await;
    let run = runway::store::RunStore::get(s.store(), "team-a", &task)
        .await
        .unwrap()
        .unwrap();
    assert!(run.spec.cancel.is_none());
    assert_eq!(run.phase(), RunPhase::Running);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_shutdown_does_not_cancel_blocking_runs() {
    let s = server().await;
    let c = s.client("alice-token").with_caps(sync_caps());
    let (name, held) = running_call(&s, {
        let c = c.clone();
        async move { c.call("slow", json!({})).await }
    })
    .await;
    let dir = s.stop().await;
    let _ = held.await;
    let store = runway::store::sqlite::SqliteStore::open(&dir.path().join("runs.db")).unwrap();
    let run = runway::store::RunStore::get(&store, "team-a", &name)
        .await
        .unwrap()
        .unwrap();
    assert!(
        run.spec.cancel.is_none(),
        "shutdown must not cancel: {:?}",
        run.spec.cancel
    );
    assert_eq!(run.phase(), RunPhase::Running);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_held_across_a_restart_comes_back_to_its_run_and_runs_no_step_twice() {
    let s = server().await;
    let c = s.client("alice-token").with_caps(sync_caps());
    let (first, held) = running_call_of(&s, "pause", {
        let c = c.clone();
        async move { c.call("pause", json!({})).await }
    })
    .await;
    // The server stops under the held call: the answer is a way back, not an error.
    let dir = s.stop().await;
    let reply = held.await.unwrap();
    let res = reply.result().clone();
    assert_eq!(res["resultType"], "input_required", "{res}");
    assert!(
        res.get("inputRequests").is_none(),
        "no question: retry at once"
    );
    let state = res["requestState"].as_str().unwrap().to_owned();
    // The client retries, as MRTR says, against the restarted server.
    let s = Mcp::start_in(dir).await;
    let c = s.client("alice-token").with_caps(sync_caps());
    let again = c
        .rpc(
            "tools/call",
            Some("pause"),
            json!({"name": "pause", "arguments": {}, "requestState": state}),
        )
        .await;
    assert_eq!(
        again.result()["content"][0]["text"],
        "paused",
        "{:?}",
        again.messages
    );
    // One Run, each step run once.
    let runs: Vec<_> =
        runway::store::RunStore::list(s.store(), Some("team-a"), &Default::default())
            .await
            .unwrap()
            .into_iter()
            .filter(|r| r.spec.workflow_ref.name == "pause")
            .collect();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].metadata.name.as_deref(), Some(first.as_str()));
    let st = runs[0].status.as_ref().unwrap();
    assert_eq!(st.steps.len(), 2);
    for step in &st.steps {
        assert_eq!(
            (step.attempt, step.phase),
            (1, runway::api::StepPhase::Succeeded),
            "{}",
            step.name
        );
    }
}

/// Write raw bytes to the server and read its whole answer (the server closes or answers).
async fn raw(addr: std::net::SocketAddr, request: &[u8]) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    conn.write_all(request).await.unwrap();
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(support::harness::PATIENCE, conn.read(&mut buf))
        .await
        .expect("the server answers")
        .unwrap();
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_body_is_read_only_after_authentication_and_only_for_so_long() {
    let s = Mcp::start_with(&[("wf.yaml", WORKFLOWS)], |c| {
        c.body_read_timeout = Duration::from_millis(300);
    })
    .await;
    // A stranger announces 100 MB and sends none of it: 401 at once, nothing read.
    let head = |token: &str| {
        format!(
            "POST /namespaces/team-a/mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n\
             Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
             MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/list\r\n\
             Authorization: Bearer {token}\r\nContent-Length: 100000000\r\n\r\n{{"
        )
    };
    let answer = raw(s.addr, head("wrong-token").as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    // A known caller who stalls mid-body gets 408 once the read timeout passes.
    let answer = raw(s.addr, head("alice-token").as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    // Too large a body (declared honestly) is 413.
    let c = s.client("alice-token");
    let big = "x".repeat(runway::mcp::MAX_BODY_BYTES + 1);
    let r = c
        .send(
            c.request("tools/list", None)
                .body(format!("{{\"pad\":\"{big}\"}}")),
        )
        .await;
    assert_eq!(r.status, StatusCode::PAYLOAD_TOO_LARGE);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_concurrency_limit_requests_get_503() {
    let s = Mcp::start_with(&[("wf.yaml", WORKFLOWS)], |c| c.max_concurrent_requests = 1).await;
    let blocking = s.client("alice-token").with_caps(sync_caps());
    let (name, held) =
        running_call(&s, async move { blocking.call("slow", json!({})).await }).await;
    let other = s
        .client("bob-token")
        .rpc("tools/list", None, json!({}))
        .await;
    assert_eq!(other.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(other.headers.get("retry-after").unwrap(), "1");
    // Once the held call ends (its Run cancelled behind the server's back: a tasks/cancel
    // would need a slot too), its slot is free again.
    let mut run = runway::store::RunStore::get(s.store(), "team-a", &name)
        .await
        .unwrap()
        .unwrap();
    run.spec.cancel = Some(runway::api::CancelRequest {
        reason: Some("test".into()),
        requested_by: Some("alice".into()),
        requested_at: None,
    });
    runway::store::RunStore::update(s.store(), run)
        .await
        .unwrap();
    let ended = held.await.unwrap();
    assert_eq!(ended.status, StatusCode::OK);
    let list = s
        .client("bob-token")
        .rpc("tools/list", None, json!({}))
        .await;
    assert_eq!(list.status, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listen_gets_the_host_and_origin_checks_of_every_request() {
    let s = server().await;
    let c = s.client("alice-token");
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "subscriptions/listen",
        "params": {"_meta": c.meta(), "notifications": {"taskIds": []}}});
    for (name, value) in [("host", "evil.example"), ("origin", "http://evil.example")] {
        let r = c
            .send(
                c.request("subscriptions/listen", None)
                    .header(name, value)
                    .json(&body),
            )
            .await;
        assert_eq!(r.status, StatusCode::FORBIDDEN, "{name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listen_is_refused_for_its_media_types_and_versions_as_any_request_is() {
    let s = server().await;
    let c = s.client("alice-token");
    let url = format!("http://{}/namespaces/team-a/mcp", s.addr);
    let body = |version: &str| {
        json!({"jsonrpc": "2.0", "id": 1, "method": "subscriptions/listen", "params": {
            "_meta": {"io.modelcontextprotocol/protocolVersion": version,
                      "io.modelcontextprotocol/clientCapabilities": {}},
            "notifications": {"taskIds": []}}})
    };
    let post = |accept: &str, content_type: &str, header: &str, meta: &str| {
        reqwest::Client::new()
            .post(&url)
            .bearer_auth("alice-token")
            .header("accept", accept)
            .header("content-type", content_type)
            .header("mcp-protocol-version", header)
            .header("mcp-method", "subscriptions/listen")
            .body(body(meta).to_string())
    };
    let both = "application/json, text/event-stream";
    let now = "2026-07-28";
    // The media types, as rmcp refuses them on every other request.
    for (accept, content_type, status) in [
        (
            "application/json",
            "application/json",
            StatusCode::NOT_ACCEPTABLE,
        ),
        (
            "text/event-stream",
            "application/json",
            StatusCode::NOT_ACCEPTABLE,
        ),
        (
            "application/json, text/event-stream;q=0",
            "application/json",
            StatusCode::NOT_ACCEPTABLE,
        ),
        (both, "text/plain", StatusCode::UNSUPPORTED_MEDIA_TYPE),
    ] {
        let r = post(accept, content_type, now, now).send().await.unwrap();
        assert_eq!(r.status(), status, "{accept} / {content_type}");
    }
    // A header that disagrees with `_meta` is a mismatch, whichever of the two is supported;
    // an unsupported version on both is unsupported.
    for (header, meta, code) in [
        ("2025-11-25", now, -32020),
        (now, "2025-11-25", -32020),
        ("2099-01-01", "2099-01-01", -32022),
    ] {
        let r = c.send(post(both, "application/json", header, meta)).await;
        assert_eq!(
            (r.status, r.error_code()),
            (StatusCode::BAD_REQUEST, code),
            "{header} / {meta}"
        );
    }
    // Parameters and weights other than zero are fine; the stream is marked unbuffered.
    let r = post(
        "application/json;q=0.9, text/event-stream;q=1",
        "application/json; charset=utf-8",
        now,
        now,
    )
    .send()
    .await
    .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.headers()["x-accel-buffering"], "no");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_finishes_its_headers_is_cut_off() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let s = server().await;
    let mut conn = tokio::net::TcpStream::connect(s.addr).await.unwrap();
    conn.write_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        .await
        .unwrap();
    let mut buf = Vec::new();
    // The server closes the connection (hyper answers 408 first) after its header timeout.
    let closed = tokio::time::timeout(
        runway::endpoint::HEADER_READ_TIMEOUT * 2,
        conn.read_to_end(&mut buf),
    )
    .await;
    assert!(closed.is_ok(), "the connection is still open");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn formats_are_asserted_on_arguments_and_on_answers() {
    let wf = r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: invite, namespace: team-a }
spec:
  tool:
    inputSchema:
      type: object
      properties: { email: { type: string, format: email }, on: { type: string, format: date } }
      required: [email]
  steps:
    - name: confirm
      input:
        requests:
          - name: site
            message: "Which site?"
            requestedSchema:
              type: object
              properties: { url: { type: string, format: uri } }
              required: [url]
  result:
    content: [ { type: text, text: "invited {{ args.email }}" } ]
"#;
    let s = Mcp::start(&[("wf.yaml", wf)]).await;
    let c = s.client("alice-token");
    for bad in [
        json!({"email": "not an address"}),
        json!({"email": "a@example.com", "on": "tomorrow"}),
    ] {
        let r = c.call("invite", bad.clone()).await;
        let text = r.result()["content"][0]["text"].to_string();
        assert_eq!(r.result()["isError"], true, "{bad}");
        assert!(text.contains("is not a"), "{bad}: {text}");
    }
    let task = c
        .call(
            "invite",
            json!({"email": "a@example.com", "on": "2026-12-24"}),
        )
        .await
        .result()["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    c.await_status(&task, "input_required").await;
    let refused = c
        .update(
            &task,
            json!({"confirm.site": {"action": "accept", "content": {"url": "no url here"}}}),
        )
        .await;
    assert_eq!(refused.error_code(), -32602);
    assert_eq!(c.get(&task).await.result()["status"], "input_required");
    c.update(
        &task,
        json!({"confirm.site": {"action": "accept", "content": {"url": "https://example.com/a"}}}),
    )
    .await
    .assert_complete();
    c.await_status(&task, "completed").await;
}
