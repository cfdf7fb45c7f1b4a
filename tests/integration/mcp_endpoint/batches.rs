//! JSON-RPC batches: sessions of revision 2025-03-26 may send them (that revision has servers
//! accept them); every other session, and 2026-07-28 requests, are refused with nothing served.

use reqwest::StatusCode;
use serde_json::{Value, json};

use super::era2025::WORKFLOWS;
use super::support::mcp::{Mcp, Old, TASK_WORKFLOWS, parse_body};

async fn server() -> Mcp {
    Mcp::start(&[("era.yaml", WORKFLOWS), ("tasks.yaml", TASK_WORKFLOWS)]).await
}

/// POST `body`: the status, the content type and every message of the answer (a JSON array's
/// members one by one).
async fn post(c: &Old, body: Value) -> (StatusCode, String, Vec<Value>) {
    let (status, ct, text) = c.exchange(&body).await;
    let messages = match serde_json::from_str::<Value>(&text) {
        Ok(Value::Array(all)) => all,
        _ => parse_body(&ct, &text),
    };
    (status, ct, messages)
}

fn by_id<'a>(messages: &'a [Value], id: &Value) -> &'a Value {
    messages
        .iter()
        .find(|m| &m["id"] == id)
        .unwrap_or_else(|| panic!("an answer to {id} in {messages:?}"))
}

fn ping(id: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "ping"})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2025_03_26_session_sends_batches_and_gets_every_answer() {
    let s = server().await;
    let c = Old::connect_at(&s.url(), "alice-token", json!({}), "2025-03-26").await;

    // Requests and a notification: one JSON array, an answer per request.
    let (status, ct, answers) = post(
        &c,
        json!([
            ping(json!(1)),
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "id": "two", "method": "tools/list"},
        ]),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert!(ct.starts_with("application/json"), "{ct}");
    assert_eq!(answers.len(), 2, "{answers:?}");
    assert_eq!(by_id(&answers, &json!(1))["result"], json!({}));
    let tools = by_id(&answers, &json!("two"))["result"]["tools"]
        .as_array()
        .unwrap();
    assert!(tools.iter().any(|t| t["name"] == "steps"), "{tools:?}");

    // A held call among them: one stream with the answers ready at once, the call's
    // progress, and its result last.
    let (status, ct, messages) = post(
        &c,
        json!([
            {"jsonrpc": "2.0", "id": "held", "method": "tools/call",
             "params": {"name": "steps", "arguments": {}, "_meta": {"progressToken": "p"}}},
            ping(json!(3)),
        ]),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert!(ct.starts_with("text/event-stream"), "{ct}");
    assert_eq!(by_id(&messages, &json!(3))["result"], json!({}));
    assert!(
        messages
            .iter()
            .any(|m| m["method"] == "notifications/progress"),
        "{messages:?}"
    );
    let last = messages.last().unwrap();
    assert_eq!(last["id"], "held", "{messages:?}");
    assert_eq!(last["result"]["content"][0]["text"], "done");

    // Only notifications: nothing to answer.
    let (status, _, answers) = post(
        &c,
        json!([{"jsonrpc": "2.0", "method": "notifications/initialized"}]),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    assert!(answers.is_empty(), "{answers:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_bad_member_of_a_batch_gets_its_own_error_and_the_rest_are_served() {
    let s = server().await;
    let c = Old::connect_at(&s.url(), "alice-token", json!({}), "2025-03-26").await;
    let initialize = json!({"jsonrpc": "2.0", "id": 8, "method": "initialize", "params": {
        "protocolVersion": "2025-03-26", "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"}}});
    let (status, _, answers) = post(
        &c,
        json!([
            ping(json!(5)),
            {"jsonrpc": "1.0", "id": 6, "method": "ping"},
            42,
            {"jsonrpc": "2.0", "id": null, "method": "ping"},
            initialize,
            {"jsonrpc": "2.0", "id": 9, "method": "no/such"},
        ]),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(answers.len(), 6, "{answers:?}");
    assert_eq!(by_id(&answers, &json!(5))["result"], json!({}));
    for id in [json!(6), json!(8)] {
        assert_eq!(by_id(&answers, &id)["error"]["code"], -32600, "{answers:?}");
    }
    let anonymous: Vec<_> = answers.iter().filter(|a| a["id"].is_null()).collect();
    assert_eq!(anonymous.len(), 2, "{answers:?}");
    for a in anonymous {
        assert_eq!(a["error"]["code"], -32600, "{a}");
    }
    assert_eq!(by_id(&answers, &json!(9))["error"]["code"], -32601);

    // An empty batch is one invalid request, and so is one of more than 16 messages (a batch
    // takes one of the caller's request shares): nothing of it is served.
    let (status, _, answers) = post(&c, json!([])).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(answers[0]["error"]["code"], -32600, "{answers:?}");
    let calls: Vec<Value> = (0..17)
        .map(|i| {
            json!({"jsonrpc": "2.0", "id": i, "method": "tools/call",
                        "params": {"name": "steps", "arguments": {}}})
        })
        .collect();
    let (status, _, answers) = post(&c, Value::Array(calls)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(answers[0]["error"]["code"], -32600, "{answers:?}");
    let runs = runway::store::RunStore::list(s.store(), None, &Default::default())
        .await
        .unwrap();
    assert!(runs.is_empty(), "nothing was started: {runs:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_2025_03_26_sessions_may_batch_and_nothing_else_is_served() {
    let s = server().await;
    let call = json!([{"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                       "params": {"name": "quick", "arguments": {}}}]);
    let newer = Old::connect(&s.url(), "alice-token", json!({})).await;
    let (status, _, answers) = post(&newer, call.clone()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(answers[0]["error"]["code"], -32600, "{answers:?}");
    assert!(
        answers[0]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("2025-03-26"),
        "{answers:?}"
    );
    // Without a session (2026-07-28, or before `initialize`) a batch is refused the same way.
    let resp = reqwest::Client::new()
        .post(s.url())
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .bearer_auth("alice-token")
        .json(&call)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], -32600, "{body}");
    // A session that is not this caller's is unknown, batch or not.
    let older = Old::connect_at(&s.url(), "alice-token", json!({}), "2025-03-26").await;
    let forged = Old {
        token: "bob-token".into(),
        ..older
    };
    let (status, _, _) = post(&forged, call).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let runs = runway::store::RunStore::list(s.store(), None, &Default::default())
        .await
        .unwrap();
    assert!(runs.is_empty(), "nothing was started: {runs:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_leaves_a_batch_with_a_held_call_cancels_that_run() {
    let s = server().await;
    let c = Old::connect_at(&s.url(), "alice-token", json!({}), "2025-03-26").await;
    let mut events = c
        .open_body(&json!([
            ping(json!(1)),
            {"jsonrpc": "2.0", "id": "held", "method": "tools/call",
             "params": {"name": "nap", "arguments": {}, "_meta": {"progressToken": 1}}},
        ]))
        .await;
    let mut seen = Vec::new();
    while seen.len() < 2 {
        seen.push(events.next().await.unwrap());
    }
    assert_eq!(by_id(&seen, &json!(1))["result"], json!({}));
    assert!(
        seen.iter().any(|m| m["method"] == "notifications/progress"),
        "{seen:?}"
    );
    let runs = runway::store::RunStore::list(s.store(), Some("team-a"), &Default::default())
        .await
        .unwrap();
    let held = runs[0].metadata.name.clone().unwrap();
    drop(events);
    s.cancelled_as_left(&held).await;
}
