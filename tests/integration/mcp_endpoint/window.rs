//! The response window over real sockets: a proxy cuts the client's connection at an exact
//! point of the server's answer. Until the frame carrying the answer has left, the call owns
//! its Run (a cut cancels it, a progress frame before it does not count); once it has left,
//! no cut touches the Run. The same holds for an MRTR retry's own answer.

use runway::api::RunPhase;
use serde_json::{Value, json};

use super::support::cut::Cut;
use super::support::mcp::{Client, Mcp};

const WORKFLOWS: &str = r#"
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
metadata: { name: approve, namespace: NS }
spec:
  tool: { description: Answers on the call; needs an approval. }
  execution: { mode: sync }
  steps:
    - name: ask
      input:
        requests:
          - { name: ok, message: "Proceed?", requestedSchema: { type: object, properties: { yes: { type: boolean } } } }
  result: { content: [ { type: text, text: "approved={{ inputs.ok.yes }}" } ] }
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: ask-then-wait, namespace: NS }
spec:
  tool: { description: "One question, then an hour." }
  execution: { mode: sync }
  steps:
    - name: ask
      input:
        requests:
          - { name: ok, message: "Proceed?", requestedSchema: { type: object, properties: { yes: { type: boolean } } } }
    - { name: wait, delay: { duration: 1h } }
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: two-asks, namespace: NS }
spec:
  tool: { description: "Two questions, one after the other." }
  execution: { mode: sync }
  steps:
    - name: first
      input:
        requests:
          - { name: ok, message: "First?", requestedSchema: { type: object, properties: { yes: { type: boolean } } } }
    - name: second
      input:
        requests:
          - { name: ok, message: "Second?", requestedSchema: { type: object, properties: { yes: { type: boolean } } } }
"#;

/// What the answer frame of an `input_required` result holds, as the server writes it.
const INPUT_REQUIRED: &str = r#""resultType":"input_required""#;
const PROGRESS: &str = "notifications/progress";

/// A blocking, form-answering client of team-a, through `addr`.
fn client(addr: std::net::SocketAddr) -> Client {
    Client::new(
        &format!("http://{addr}"),
        Some("alice-token"),
        "/namespaces/team-a/mcp",
    )
    .with_caps(json!({"elicitation": {}}))
}

/// Send `tools/call` with `params` through a proxy that cuts at `marker`; what the proxy
/// relayed before the cut.
async fn cut_call(s: &Mcp, marker: &str, params: Value) -> String {
    let cut = Cut::at(s.addr, marker).await;
    let c = client(cut.addr);
    let mut params = params;
    let extra = params["_meta"].take();
    params["_meta"] = c.meta();
    if let Value::Object(extra) = extra {
        for (k, v) in extra {
            params["_meta"][k] = v;
        }
    }
    let name = params["name"].as_str().unwrap().to_owned();
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params});
    let call = tokio::spawn(async move {
        // The connection is cut under the response; what reqwest makes of that is not the point.
        let _ = c
            .request("tools/call", Some(&name))
            .json(&body)
            .send()
            .await;
    });
    let relayed = cut.done.await.unwrap();
    let _ = call.await;
    assert!(relayed.contains(marker), "cut before {marker}: {relayed}");
    relayed
}

/// The one Run of `workflow` in team-a.
async fn only_run(s: &Mcp, workflow: &str) -> runway::api::Run {
    let mut runs: Vec<_> =
        runway::store::RunStore::list(s.store(), Some("team-a"), &Default::default())
            .await
            .unwrap()
            .into_iter()
            .filter(|r| r.spec.workflow_ref.name == workflow)
            .collect();
    assert_eq!(runs.len(), 1);
    std::sync::Arc::unwrap_or_clone(runs.remove(0))
}

/// Answer the open question of `name` as alice, through the Tasks API.
async fn answer(s: &Mcp, name: &str) {
    let run = s
        .wait(name, "waiting", |r| r.phase() == RunPhase::Waiting)
        .await;
    let key = run
        .status
        .unwrap()
        .input_requests
        .keys()
        .next()
        .unwrap()
        .clone();
    let tasks = s.client("alice-token");
    tasks
        .update(
            name,
            json!({key: {"action": "accept", "content": {"yes": true}}}),
        )
        .await
        .assert_complete();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_after_progress_but_before_the_answer_cancels_the_run() {
    let s = Mcp::start(&[("wf.yaml", WORKFLOWS)]).await;
    cut_call(
        &s,
        PROGRESS,
        json!({"name": "pause", "arguments": {}, "_meta": {"progressToken": "p"}}),
    )
    .await;
    let name = only_run(&s, "pause").await.metadata.name.unwrap();
    s.cancelled_as_left(&name).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_right_after_the_answer_frame_leaves_the_run_alone() {
    let s = Mcp::start(&[("wf.yaml", WORKFLOWS)]).await;
    // On an SSE answer (a progress token makes it one) and on a JSON answer alike.
    for meta in [json!({"progressToken": "p"}), json!({})] {
        cut_call(
            &s,
            INPUT_REQUIRED,
            json!({"name": "approve", "arguments": {}, "_meta": meta}),
        )
        .await;
        let name = only_run(&s, "approve").await.metadata.name.unwrap();
        answer(&s, &name).await;
        let run = s.wait(&name, "finished", |r| r.phase().is_terminal()).await;
        assert_eq!(run.phase(), RunPhase::Succeeded, "{meta}");
        assert!(run.spec.cancel.is_none());
        runway::store::RunStore::delete(s.store(), "team-a", &name, None, None)
            .await
            .unwrap();
    }
}

/// The first round of `workflow`, straight to the server: its `input_required` answer.
async fn first_round(s: &Mcp, workflow: &str) -> Value {
    let r = client(s.addr).call(workflow, json!({})).await;
    let res = r.result().clone();
    assert_eq!(res["resultType"], "input_required", "{res}");
    res
}

/// The retry of an MRTR round: `ok` answered, the state echoed, a progress token.
fn retry(workflow: &str, round: &Value) -> Value {
    let key = round["inputRequests"]
        .as_object()
        .unwrap()
        .keys()
        .next()
        .unwrap()
        .clone();
    json!({
        "name": workflow,
        "arguments": {},
        "inputResponses": {key: {"action": "accept", "content": {"yes": true}}},
        "requestState": round["requestState"],
        "_meta": {"progressToken": "p"},
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mrtr_retry_owns_its_run_until_its_own_answer_has_left() {
    let s = Mcp::start(&[("wf.yaml", WORKFLOWS)]).await;
    // Cut while the retry is held (after its progress, before any answer): cancelled.
    let round = first_round(&s, "ask-then-wait").await;
    cut_call(&s, PROGRESS, retry("ask-then-wait", &round)).await;
    let name = only_run(&s, "ask-then-wait").await.metadata.name.unwrap();
    s.cancelled_as_left(&name).await;

    // Cut right after the retry's own answer (the next question): the Run goes on.
    let round = first_round(&s, "two-asks").await;
    cut_call(&s, INPUT_REQUIRED, retry("two-asks", &round)).await;
    let name = only_run(&s, "two-asks").await.metadata.name.unwrap();
    let run = s
        .wait(&name, "the second question", |r| {
            r.phase() == RunPhase::Waiting
                && r.status
                    .as_ref()
                    .is_some_and(|st| st.input_requests.values().any(|q| q.step == "second"))
        })
        .await;
    assert!(run.spec.cancel.is_none());
    answer(&s, &name).await;
    let run = s.wait(&name, "finished", |r| r.phase().is_terminal()).await;
    assert_eq!(run.phase(), RunPhase::Succeeded);
    assert!(run.spec.cancel.is_none());
}
