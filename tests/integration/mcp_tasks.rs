//! MCP Tasks backed by Runs, over real HTTP.

use crate::support;

use futures::StreamExt;
use reqwest::StatusCode;
use runway::api::{RunPhase, StepPhase};
use serde_json::{Value, json};
use support::mcp::{Client, Mcp, TASK_WORKFLOWS as WORKFLOWS, TASKS};

async fn server() -> Mcp {
    Mcp::start(&[("wf.yaml", WORKFLOWS)]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_then_get_until_completed() {
    let s = server().await;
    let c = s.client("alice-token");
    let r = c.call("quick", json!({})).await;
    let res = r.result().clone();
    let id = r.task_id();
    assert!(
        id.starts_with("quick-") && id.len() == "quick-".len() + 26,
        "{id}"
    );
    assert_eq!(res["status"], "working");
    assert!(res["ttlMs"].is_null());
    assert_eq!(res["pollIntervalMs"], 250);
    for k in ["result", "error", "inputRequests", "requestState"] {
        assert!(res.get(k).is_none(), "CreateTaskResult carries no {k}");
    }
    // the create committed before the answer: an immediate get resolves
    let first = c.get(&id).await;
    assert_eq!(first.result()["taskId"], id.as_str());
    s.wait(&id, "finished", |r| r.phase().is_terminal()).await;
    let done = c.get(&id).await;
    let t = done.result();
    assert_eq!(t["status"], "completed");
    assert_eq!(t["result"]["content"][0]["text"], "quick done");
    assert!(t["ttlMs"].as_u64().unwrap() >= 3_600_000);
    // the sync-only tool never becomes a task, even when the client could take one
    let sync = c.call("sync-only", json!({})).await;
    assert_eq!(sync.result()["content"][0]["text"], "sync");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_get_never_writes() {
    let s = server().await;
    let c = s.client("alice-token");
    let id = c.call("nap", json!({})).await.task_id();
    let running = s
        .wait(&id, "running", |r| r.phase() == RunPhase::Running)
        .await;
    for _ in 0..3 {
        assert_eq!(c.get(&id).await.result()["status"], "working");
    }
    let after = runway::store::RunStore::get(s.store(), "team-a", &id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        after.metadata.resource_version,
        running.metadata.resource_version
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn input_is_answered_one_key_at_a_time_and_concurrent_answers_record_once() {
    let s = server().await;
    let alice = s.client("alice-token");
    let bob = s.client("bob-token");
    let id = alice.call("form", json!({})).await.task_id();
    s.wait(&id, "waiting", |r| r.phase() == RunPhase::Waiting)
        .await;
    let t = alice.get(&id).await.result().clone();
    assert_eq!(t["status"], "input_required");
    let keys: Vec<String> = t["inputRequests"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    assert_eq!(keys.len(), 2);
    assert_eq!(t["inputRequests"][&keys[0]]["method"], "elicitation/create");

    // unknown keys are acknowledged and ignored
    let ack = alice
        .update(&id, json!({"unknown-key": {"ignored": true}}))
        .await;
    assert_eq!(ack.result(), &json!({"resultType": "complete"}));

    // two clients answer the same key at once: exactly one answer is recorded
    let a1 = alice.update(
        &id,
        json!({ keys[0].clone(): {"action": "accept", "content": {"v": "x"}} }),
    );
    let a2 = bob.update(
        &id,
        json!({ keys[0].clone(): {"action": "accept", "content": {"v": "y"}} }),
    );
    let (r1, r2) = tokio::join!(a1, a2);
    r1.assert_complete();
    r2.assert_complete();
    let run = runway::store::RunStore::get(s.store(), "team-a", &id)
        .await
        .unwrap()
        .unwrap();
    let recorded = &run.spec.input_responses[&keys[0]];
    let who = recorded.answered_by.clone().unwrap();
    let v = recorded.content.as_ref().unwrap()["v"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        (who == "alice" && v == "x") || (who == "bob" && v == "y"),
        "{who} {v}"
    );

    // right after the answer, only the other key is open
    let t = alice.get(&id).await.result().clone();
    assert_eq!(t["status"], "input_required");
    assert_eq!(
        t["inputRequests"]
            .as_object()
            .unwrap()
            .keys()
            .collect::<Vec<_>>(),
        vec![&keys[1]]
    );

    alice
        .update(
            &id,
            json!({ keys[1].clone(): {"action": "accept", "content": {"v": "z"}} }),
        )
        .await;
    s.wait(&id, "finished", |r| r.phase().is_terminal()).await;
    let t = alice.get(&id).await.result().clone();
    assert_eq!(t["status"], "completed");
    assert_eq!(t["result"]["content"][0]["text"], format!("{v}z"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ineligible_answers_are_refused_with_the_reason_and_the_question_stays_open() {
    let s = server().await;
    let alice = s.client("alice-token");
    let id = alice.call("gated", json!({})).await.task_id();
    s.wait(&id, "waiting", |r| r.phase() == RunPhase::Waiting)
        .await;
    let key = "ask.ok";
    // alice requested it; she is not an ops approver either
    let refused = alice
        .update(&id, json!({ key: {"action": "accept", "content": {}} }))
        .await;
    assert_eq!(refused.error_code(), -32602, "{:?}", refused.messages);
    let error = &refused.last()["error"];
    assert!(
        error["data"]["refused"][key]
            .as_str()
            .unwrap()
            .contains("requested this run"),
        "{error}"
    );
    assert_eq!(error["data"]["taken"], json!([]));
    let run = runway::store::RunStore::get(s.store(), "team-a", &id)
        .await
        .unwrap()
        .unwrap();
    assert!(run.spec.input_responses.is_empty());
    assert!(alice.get(&id).await.result()["inputRequests"][key].is_object());
    // bob is in ops
    let taken = s
        .client("bob-token")
        .update(&id, json!({ key: {"action": "accept", "content": {}} }))
        .await;
    taken.assert_complete();
    let done = s.wait(&id, "finished", |r| r.phase().is_terminal()).await;
    assert_eq!(done.phase(), RunPhase::Succeeded);
    assert_eq!(
        done.spec.input_responses[key].answered_by.as_deref(),
        Some("bob")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_must_match_the_requested_schema_and_good_ones_are_kept() {
    let s = server().await;
    let alice = s.client("alice-token");
    let paula = s.client("paula-token");
    let id = alice.call("signoff", json!({})).await.task_id();
    s.wait(&id, "waiting", |r| r.phase() == RunPhase::Waiting)
        .await;
    for (bad, why) in [
        (json!({"channel": "stable"}), "approve"),
        (json!({"approve": true, "channel": "nightly"}), "nightly"),
        (json!({"approve": "yes"}), "boolean"),
    ] {
        let reply = paula
            .update(
                &id,
                json!({"ask.release": {"action": "accept", "content": bad}}),
            )
            .await;
        assert_eq!(reply.error_code(), -32602, "{:?}", reply.messages);
        let message = reply.last()["error"]["message"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(
            message.contains("ask.release") && message.contains(why),
            "{message}"
        );
    }
    // A valid answer, an invalid one and entries for unknown keys in one update: the valid
    // answer is taken, the invalid one refused, the unknown ignored.
    let mixed = alice
        .update(
            &id,
            json!({
                "ask.note": {"action": "accept", "content": {}},
                "ask.release": {"action": "maybe"},
                "no-such-key": 42,
            }),
        )
        .await;
    let data = &mixed.last()["error"]["data"];
    assert_eq!(data["taken"], json!(["ask.note"]), "{:?}", mixed.messages);
    assert!(
        data["refused"]["ask.release"]
            .as_str()
            .unwrap()
            .contains("action")
    );
    assert_eq!(data["ignored"], json!(["no-such-key"]));
    // Answering a closed key again is ignored, not an error.
    let again = alice
        .update(
            &id,
            json!({"ask.note": {"action": "accept", "content": {}}}),
        )
        .await;
    again.assert_complete();
    let open = alice.get(&id).await.result()["inputRequests"].clone();
    assert_eq!(
        open.as_object().unwrap().keys().collect::<Vec<_>>(),
        ["ask.release"]
    );

    let ok = paula
        .update(
            &id,
            json!({"ask.release": {"action": "accept", "content": {"approve": true, "channel": "beta"}}}),
        )
        .await;
    ok.assert_complete();
    let done = s.wait(&id, "finished", |r| r.phase().is_terminal()).await;
    assert_eq!(done.phase(), RunPhase::Succeeded);
    assert_eq!(
        alice.get(&id).await.result()["result"]["content"][0]["text"],
        "beta"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn named_approvers_read_and_answer_without_list_runs_but_cannot_cancel() {
    let s = server().await;
    let alice = s.client("alice-token");
    let paula = s.client("paula-token");
    let dave = s.client("dave-token");
    let id = alice.call("signoff", json!({})).await.task_id();
    s.wait(&id, "waiting", |r| r.phase() == RunPhase::Waiting)
        .await;
    // dave has the same rights as paula but is not an approver: the owner rule hides the Run.
    assert_eq!(dave.get(&id).await.error_code(), -32602);
    // paula may not list runs, but the open question names her group.
    let seen = paula.get(&id).await;
    assert_eq!(
        seen.result()["status"],
        "input_required",
        "{:?}",
        seen.messages
    );
    assert!(seen.result()["inputRequests"]["ask.release"].is_object());
    // Each reader is told which of the open questions wait for them: not `note`, which names
    // no approvers and so is the requester's.
    assert_eq!(
        seen.result()["_meta"]["dev.runway/awaitingYou"],
        json!(["ask.release"])
    );
    assert_eq!(
        alice.get(&id).await.result()["_meta"]["dev.runway/awaitingYou"],
        json!(["ask.note"])
    );
    let (status, mut frames) = listen(&paula, &[&id]).await;
    assert_eq!(status, StatusCode::OK);
    let ack = frames.next().await.unwrap();
    assert_eq!(
        ack["params"]["notifications"]["taskIds"],
        json!([id.clone()])
    );
    drop(frames);
    // Reading and answering, yes; cancelling someone else's Run, no.
    assert_eq!(paula.cancel(&id).await.error_code(), -32602);
    // Her question, yes; the one that names no approvers (alice's to answer), no.
    let refused = paula
        .update(
            &id,
            json!({"ask.note": {"action": "accept", "content": {}}}),
        )
        .await;
    assert_eq!(refused.error_code(), -32602);
    assert!(
        refused.last()["error"]["data"]["refused"]["ask.note"]
            .as_str()
            .unwrap()
            .contains("names no approvers"),
        "{:?}",
        refused.messages
    );
    let reply = paula
        .update(
            &id,
            json!({"ask.release": {"action": "accept", "content": {"approve": true}}}),
        )
        .await;
    reply.assert_complete();
    // Her question answered, she may still follow the Run to its end, but act on it no more:
    // the other question (`note`) is not hers, and cancelling stays alice's.
    s.wait(&id, "release answered", |r| {
        r.status
            .as_ref()
            .is_some_and(|st| !st.input_requests.contains_key("ask.release"))
    })
    .await;
    let seen = paula.get(&id).await;
    assert_eq!(seen.result()["status"], "input_required");
    assert_eq!(seen.result()["_meta"]["dev.runway/awaitingYou"], json!([]));
    assert_eq!(
        paula
            .update(
                &id,
                json!({"ask.note": {"action": "accept", "content": {}}})
            )
            .await
            .error_code(),
        -32602
    );
    assert_eq!(paula.cancel(&id).await.error_code(), -32602);
    assert_eq!(alice.get(&id).await.result()["status"], "input_required");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_during_a_delay_and_during_an_input_wait_runs_cleanup() {
    let s = server().await;
    let c = s.client("alice-token");
    for (tool, phase) in [("nap", RunPhase::Running), ("form", RunPhase::Waiting)] {
        let id = c.call(tool, json!({})).await.task_id();
        s.wait(&id, "started", |r| r.phase() == phase).await;
        let ack = c.cancel(&id).await;
        assert_eq!(ack.result(), &json!({"resultType": "complete"}));
        let done = s.wait(&id, "cancelled", |r| r.phase().is_terminal()).await;
        assert_eq!(done.phase(), RunPhase::Cancelled);
        let st = done.status.clone().unwrap();
        let cleanup = st
            .steps
            .iter()
            .find(|s| s.name == "cleanup")
            .expect("cleanup ran");
        assert_eq!(cleanup.phase, StepPhase::Succeeded);
        assert_eq!(
            done.spec.cancel.as_ref().unwrap().requested_by.as_deref(),
            Some("alice")
        );
        assert_eq!(c.get(&id).await.result()["status"], "cancelled");
        // cancelling a terminal task is an ack that changes nothing
        let again = c.cancel(&id).await;
        again.assert_complete();
        let after = runway::store::RunStore::get(s.store(), "team-a", &id)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            after.metadata.resource_version,
            done.metadata.resource_version
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_errors_complete_and_protocol_errors_fail() {
    let s = server().await;
    let c = s.client("alice-token");
    let id = c.call("tool-error", json!({})).await.task_id();
    s.wait(&id, "finished", |r| r.phase().is_terminal()).await;
    let t = c.get(&id).await.result().clone();
    assert_eq!(t["status"], "completed");
    assert_eq!(t["result"]["isError"], true);
    assert!(t.get("error").is_none());

    let id = c.call("proto-error", json!({})).await.task_id();
    s.wait(&id, "finished", |r| r.phase().is_terminal()).await;
    let t = c.get(&id).await.result().clone();
    assert_eq!(t["status"], "failed");
    assert_eq!(t["error"]["code"], -31042);
    assert_eq!(t["error"]["message"], "broken");
    assert!(t.get("result").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_principals_get_the_same_answer_as_for_unknown_tasks() {
    let s = server().await;
    let alice = s.client("alice-token");
    let id = alice.call("form", json!({})).await.task_id();
    s.wait(&id, "waiting", |r| r.phase() == RunPhase::Waiting)
        .await;
    // dave is a plain team-a developer, like alice
    let bob = s.client("dave-token");
    let carol_in_a = s.client("carol-token");
    let carol_home = s.client("carol-token").at("/mcp");
    let unknown = alice.get("form-aaaaaaaaaaaaaaaaaaaaaaaaaa").await;
    let reference = unknown.last()["error"].clone();
    assert_eq!(reference["code"], -32602);
    for (who, c) in [
        ("dave", &bob),
        ("carol in team-a", &carol_in_a),
        ("carol at home", &carol_home),
    ] {
        for r in [
            c.get(&id).await,
            c.update(
                &id,
                json!({"ask.a": {"action": "accept", "content": {"v": "x"}}}),
            )
            .await,
            c.cancel(&id).await,
        ] {
            assert_eq!(r.last()["error"], reference, "{who}");
        }
    }
    let run = runway::store::RunStore::get(s.store(), "team-a", &id)
        .await
        .unwrap()
        .unwrap();
    assert!(run.spec.input_responses.is_empty() && run.spec.cancel.is_none());
    // an operator who may list runs can act on anyone's task
    assert_eq!(
        s.client("olga-token").get(&id).await.result()["taskId"],
        id.as_str()
    );
    // a purged task is indistinguishable too
    runway::store::RunStore::delete(s.store(), "team-a", &id, None, None)
        .await
        .unwrap();
    assert_eq!(alice.get(&id).await.last()["error"], reference);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_from_callers_are_checked_before_any_lookup() {
    let s = server().await;
    let alice = s.client("alice-token");
    let reference = alice.get("form-aaaaaaaaaaaaaaaaaaaaaaaaaa").await.last()["error"].clone();
    // Ids that are no Run name (they would change an API URL) get the unknown-task answer.
    for hostile in [
        "?labelSelector=runway.dev%2Fworkflow%3Dform",
        "../runs",
        "form-AAAA",
        "a/b",
        "",
        &"a".repeat(254),
    ] {
        for r in [
            alice.get(hostile).await,
            alice.cancel(hostile).await,
            alice
                .update(
                    hostile,
                    json!({"ask.a": {"action": "accept", "content": {}}}),
                )
                .await,
        ] {
            assert_eq!(r.last()["error"], reference, "{hostile:?}");
        }
    }
    // A path namespace that is no namespace name is refused before anything else.
    for ns in ["Team-A", "team_a", "a%2Fb", "-a"] {
        let r = alice
            .clone()
            .at(&format!("/namespaces/{ns}/mcp"))
            .rpc("tools/list", None, json!({}))
            .await;
        assert_eq!(r.status, StatusCode::NOT_FOUND, "{ns}");
        assert_eq!(r.error_code(), -32600, "{ns}");
    }
    // Someone without `get runs` in the namespace learns nothing either.
    let rita_elsewhere = s.client("carol-token").at("/namespaces/team-a/mcp");
    let id = alice.call("form", json!({})).await.task_id();
    assert_eq!(rita_elsewhere.get(&id).await.last()["error"], reference);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capability_is_checked_before_lookup_and_headers_before_auth() {
    let s = server().await;
    let no_tasks = s.client("alice-token").with_caps(json!({}));
    let r = no_tasks.get("anything").await;
    assert_eq!(
        (r.status, r.error_code()),
        (StatusCode::BAD_REQUEST, -32021)
    );
    assert!(r.last()["error"]["data"]["requiredCapabilities"]["extensions"][TASKS].is_object());
    // without credentials nothing but the headers is read: authentication comes first
    let anon = Client::new(
        &format!("http://{}", s.addr),
        None,
        "/namespaces/team-a/mcp",
    )
    .with_caps(json!({}));
    assert_eq!(anon.get("anything").await.status, StatusCode::UNAUTHORIZED);
    // Mcp-Name must equal taskId
    let c = s.client("alice-token");
    let mismatch = c
        .send(
            c.request("tasks/get", Some("other"))
                .json(&json!({"jsonrpc": "2.0", "id": 3, "method": "tasks/get",
            "params": {"_meta": c.meta(), "taskId": "mine"}})),
        )
        .await;
    assert_eq!(
        (mismatch.status, mismatch.error_code()),
        (StatusCode::BAD_REQUEST, -32020)
    );
    // with the capability and matching headers, authentication applies
    let anon_tasks = Client::new(
        &format!("http://{}", s.addr),
        None,
        "/namespaces/team-a/mcp",
    );
    assert_eq!(
        anon_tasks.get("anything").await.status,
        StatusCode::UNAUTHORIZED
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotency_keys_return_the_same_task() {
    let s = server().await;
    let c = s.client("alice-token");
    let call = |args: Value, key: &str| {
        c.rpc(
            "tools/call",
            Some("nap"),
            json!({"name": "nap", "arguments": args, "_meta": {"dev.runway/idempotencyKey": key}}),
        )
    };
    let a = call(json!({}), "order-1").await.task_id();
    let b = call(json!({}), "order-1").await.task_id();
    assert_eq!(a, b);
    assert_eq!(a.len(), "nap-".len() + 26);
    let other = call(json!({}), "order-2").await.task_id();
    assert_ne!(a, other);
    let reused = call(json!({"x": 1}), "order-1").await;
    assert_eq!(reused.error_code(), -32602);
    // another principal with the same key gets their own task
    let bob = s.client("bob-token");
    let r = bob
        .rpc("tools/call", Some("nap"), json!({"name": "nap", "arguments": {}, "_meta": {"dev.runway/idempotencyKey": "order-1"}}))
        .await;
    assert_ne!(r.task_id(), a);
}

/// Read SSE frames from a listen response as they arrive.
async fn listen(
    c: &Client,
    ids: &[&str],
) -> (StatusCode, futures::stream::BoxStream<'static, Value>) {
    let body = json!({"jsonrpc": "2.0", "id": 99, "method": "subscriptions/listen",
        "params": {"_meta": c.meta(), "notifications": {"taskIds": ids}}});
    let resp = c
        .request("subscriptions/listen", None)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = resp.status();
    let mut buf = String::new();
    let frames = resp
        .bytes_stream()
        .map(move |chunk| {
            buf.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
            let mut out = Vec::new();
            while let Some(end) = buf.find("\n\n") {
                let event: String = buf.drain(..end + 2).collect();
                for line in event.lines() {
                    if let Some(d) = line.strip_prefix("data:") {
                        out.push(serde_json::from_str::<Value>(d.trim()).unwrap());
                    }
                }
            }
            futures::stream::iter(out)
        })
        .flatten()
        .boxed();
    (status, frames)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listen_streams_every_transition_of_readable_tasks_in_order() {
    let s = server().await;
    let alice = s.client("alice-token");
    let t1 = alice.call("form", json!({})).await.task_id();
    let t2 = alice.call("nap", json!({})).await.task_id();
    let bobs = s
        .client("dave-token")
        .call("nap", json!({}))
        .await
        .task_id();
    s.wait(&t1, "waiting", |r| r.phase() == RunPhase::Waiting)
        .await;

    let (status, mut frames) = listen(
        &alice,
        &[&t1, &t2, &bobs, "ghost-aaaaaaaaaaaaaaaaaaaaaaaaaa"],
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let ack = frames.next().await.unwrap();
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
    assert_eq!(
        ack["params"]["notifications"]["taskIds"],
        json!([t1, t2]),
        "unreadable ids are left out"
    );
    assert_eq!(
        ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        99
    );

    alice
        .update(
            &t1,
            json!({"ask.a": {"action": "accept", "content": {"v": "1"}}}),
        )
        .await;
    alice
        .update(
            &t1,
            json!({"ask.b": {"action": "accept", "content": {"v": "2"}}}),
        )
        .await;
    s.wait(&t1, "finished", |r| r.phase().is_terminal()).await;
    alice.cancel(&t2).await;

    let mut seen: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    let mut last = None;
    while let Some(f) = frames.next().await {
        if f.get("id").is_some() {
            last = Some(f);
            break;
        }
        assert_eq!(f["method"], "notifications/tasks");
        assert_eq!(
            f["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
            99
        );
        seen.entry(f["params"]["taskId"].as_str().unwrap().to_owned())
            .or_default()
            .push(f["params"]["status"].as_str().unwrap().to_owned());
    }
    let s1 = &seen[&t1];
    assert_eq!(s1.first().map(String::as_str), Some("input_required"));
    assert_eq!(s1.last().map(String::as_str), Some("completed"));
    assert!(
        s1.iter().filter(|x| *x == "input_required").count() >= 2,
        "each answer is a transition: {s1:?}"
    );
    let s2 = &seen[&t2];
    assert_eq!(s2.first().map(String::as_str), Some("working"));
    assert_eq!(s2.last().map(String::as_str), Some("cancelled"));
    assert!(!seen.contains_key(&bobs));
    // every followed task ended: the stream closes with a final response
    assert_eq!(last.unwrap()["result"]["resultType"], "complete");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_principal_holds_a_bounded_number_of_listen_streams() {
    let s = Mcp::start_with(&[("wf.yaml", WORKFLOWS)], |c| {
        c.max_streams_per_principal = 1
    })
    .await;
    let alice = s.client("alice-token");
    let id = alice.call("form", json!({})).await.task_id();
    let (status, mut first) = listen(&alice, &[&id]).await;
    assert_eq!(status, StatusCode::OK);
    // the first frame proves the stream is open and counted
    first.next().await.unwrap();
    let (status, _) = listen(&alice, &[&id]).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    // the limit is per principal
    let olga = s.client("olga-token");
    let (status, mut other) = listen(&olga, &[&id]).await;
    assert_eq!(status, StatusCode::OK);
    other.next().await.unwrap();
    // a subscription to tasks the caller cannot read ends at once, freeing its slot
    let dave = s.client("dave-token");
    let body = json!({"jsonrpc": "2.0", "id": 5, "method": "subscriptions/listen",
        "params": {"_meta": dave.meta(), "notifications": {"taskIds": [id]}}});
    let r = dave
        .send(dave.request("subscriptions/listen", None).json(&body))
        .await;
    assert_eq!(
        r.last()["result"]["resultType"],
        "complete",
        "{:?}",
        r.messages
    );
    let r = dave
        .send(dave.request("subscriptions/listen", None).json(&body))
        .await;
    assert_eq!(r.status, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listen_refuses_task_ids_in_the_wrong_place_instead_of_following_nothing() {
    let s = server().await;
    let alice = s.client("alice-token");
    let id = alice.call("nap", json!({})).await.task_id();
    let reply = alice
        .rpc("subscriptions/listen", None, json!({"taskIds": [id]}))
        .await;
    assert_eq!(reply.error_code(), -32602, "{:?}", reply.messages);
    assert!(
        reply.last()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("params.notifications.taskIds")
    );
    // More tasks than one subscription follows: refused before any is looked at.
    let many: Vec<String> = (0..=256).map(|i| format!("{id}-{i}")).collect();
    let reply = alice
        .rpc(
            "subscriptions/listen",
            None,
            json!({"notifications": {"taskIds": many}}),
        )
        .await;
    assert_eq!(reply.error_code(), -32602, "{:?}", reply.messages);
    assert!(
        reply.last()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("at most 256")
    );
    // The most it takes, the same task many times among them: followed once.
    let mut most = vec![id.clone(); 255];
    most.push("not-a-task".into());
    let ids: Vec<&str> = most.iter().map(String::as_str).collect();
    let (status, mut frames) = listen(&alice, &ids).await;
    assert_eq!(status, StatusCode::OK);
    let ack = frames.next().await.unwrap();
    assert_eq!(
        ack["params"]["notifications"]["taskIds"],
        json!([id]),
        "{ack}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn url_mode_questions_are_shown_as_links_and_accepted_without_content() {
    let s = server().await;
    let alice = s.client("alice-token");
    let id = alice.call("sso", json!({})).await.task_id();
    s.wait(&id, "waiting", |r| r.phase() == RunPhase::Waiting)
        .await;
    let t = alice.get(&id).await.result().clone();
    let req = &t["inputRequests"]["ask.login"];
    assert_eq!(req["method"], "elicitation/create");
    assert_eq!(req["params"]["mode"], "url");
    // Unique on the server: the Run's namespace and name, then the key.
    assert_eq!(
        req["params"]["elicitationId"],
        format!("team-a/{id}/ask.login")
    );
    assert_eq!(
        req["params"]["url"],
        format!("https://sso.example.com/start?task={id}")
    );
    // Content sent with a URL-mode accept is not recorded: the page collected what it needed.
    let reply = alice
        .update(
            &id,
            json!({"ask.login": {"action": "accept", "content": {"password": "hunter2"}}}),
        )
        .await;
    reply.assert_complete();
    let done = s.wait(&id, "finished", |r| r.phase().is_terminal()).await;
    assert_eq!(done.phase(), RunPhase::Succeeded);
    assert!(done.spec.input_responses["ask.login"].content.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn following_tasks_needs_watch_runs_as_well_as_reading_them() {
    let s = server().await;
    let olga = s.client("olga-token");
    let id = olga.call("nap", json!({})).await.task_id();
    // rita may `get runs` but not `watch` them
    let rita = s.client("reader-token");
    let body = json!({"jsonrpc": "2.0", "id": 5, "method": "subscriptions/listen",
        "params": {"_meta": rita.meta(), "notifications": {"taskIds": [id]}}});
    let r = rita
        .send(rita.request("subscriptions/listen", None).json(&body))
        .await;
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.error_code(), -32003, "{:?}", r.messages);
    assert_eq!(
        r.last()["error"]["message"],
        "forbidden: rita may not watch runs in namespace team-a"
    );
    // with `watch runs`, the same request is acknowledged
    let (status, mut frames) = listen(&olga, &[&id]).await;
    assert_eq!(status, StatusCode::OK);
    let ack = frames.next().await.unwrap();
    assert_eq!(ack["params"]["notifications"]["taskIds"], json!([id]));
}

const SAMPLE: &str = r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: muse, namespace: NS }
spec:
  tool:
    description: Asks the caller's model for a greeting.
    inputSchema: { type: object, properties: { who: { type: string } } }
  steps:
    - name: greet
      sample: { prompt: "Say hi to {{ args.who }}", maxTokens: 20 }
  result:
    content: [ { type: text, text: "{{ args.who }}: {{ steps.greet.output.text }}" } ]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sample_step_is_answered_by_the_callers_model_and_survives_a_restart() {
    let s = Mcp::start(&[("wf.yaml", SAMPLE)]).await;
    // Only the caller's model can answer: a client that cannot sample is told so up front.
    let plain = s.client("alice-token");
    let refused = plain.call("muse", json!({"who": "Ada"})).await;
    assert_eq!(refused.error_code(), -32021, "{:?}", refused.messages);
    assert_eq!(
        refused.last()["error"]["data"]["requiredCapabilities"],
        json!({"sampling": {}})
    );
    let alice = s
        .client("alice-token")
        .with_caps(json!({"extensions": {TASKS: {}}, "sampling": {}}));
    let id = alice.call("muse", json!({"who": "Ada"})).await.task_id();
    let task = alice.await_status(&id, "input_required").await;
    let asked = &task["inputRequests"]["greet.sample"];
    assert_eq!(asked["method"], "sampling/createMessage");
    assert_eq!(
        asked["params"]["messages"][0]["content"]["text"],
        "Say hi to Ada"
    );

    // The question is durable: a restart between asking and answering loses nothing.
    let s = Mcp::start_in(s.stop().await).await;
    let alice = s
        .client("alice-token")
        .with_caps(json!({"extensions": {TASKS: {}}, "sampling": {}}));
    // An answer that is not a model's message is refused, naming why; the question stays.
    let wrong = alice
        .update(
            &id,
            json!({"greet.sample": {"action": "accept", "content": {"text": "hi"}}}),
        )
        .await;
    assert_eq!(wrong.error_code(), -32602, "{:?}", wrong.messages);
    assert!(
        wrong.last()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("assistant"),
        "{:?}",
        wrong.messages
    );
    alice
        .update(
            &id,
            json!({"greet.sample": {"role": "assistant", "model": "m-1",
                "content": {"type": "text", "text": "hello"}}}),
        )
        .await
        .assert_complete();
    let done = alice.await_status(&id, "completed").await;
    assert_eq!(done["result"]["content"][0]["text"], "Ada: hello");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_the_caller_would_not_ask_fails_the_sample_step_in_either_era() {
    let s = Mcp::start(&[("wf.yaml", SAMPLE)]).await;
    // 2025-11-25: the client answers the held call's sampling/createMessage with an error.
    let old = support::mcp::Old::connect(&s.url(), "alice-token", json!({"sampling": {}})).await;
    let mut held = old
        .open(
            "tools/call",
            json!({"name": "muse", "arguments": {"who": "Ada"}}),
        )
        .await;
    let asked = loop {
        let m = held.next().await.expect("the model is asked");
        if m["method"] == "sampling/createMessage" {
            break m;
        }
    };
    let refusal = json!({"jsonrpc": "2.0", "id": asked["id"],
        "error": {"code": -1, "message": "the user would not"}});
    let status = old.post(&refusal).send().await.unwrap().status();
    assert_eq!(status, StatusCode::ACCEPTED);
    let ended = tokio::time::timeout(support::harness::PATIENCE, async {
        loop {
            let m = held.next().await.expect("the call ends");
            if m.get("result").is_some() || m.get("error").is_some() {
                return m;
            }
        }
    });
    let last = ended
        .await
        .expect("the call ends once the model is declined");
    assert_eq!(last["result"]["isError"], true, "{last}");
    // 2026-07-28: declining through tasks/update does the same.
    let alice = s
        .client("alice-token")
        .with_caps(json!({"extensions": {TASKS: {}}, "sampling": {}}));
    let id = alice.call("muse", json!({"who": "Bo"})).await.task_id();
    alice.await_status(&id, "input_required").await;
    alice
        .update(&id, json!({"greet.sample": {"action": "decline"}}))
        .await
        .assert_complete();
    let run = s.wait(&id, "ended", |r| r.phase().is_terminal()).await;
    let message = run.status.unwrap().steps[0]
        .message
        .clone()
        .unwrap_or_default();
    assert!(message.contains("declined by alice"), "{message}");
}

/// One `tasks/get` as the caller `c` sends it, and the same request with its `Mcp-Name` in the
/// header encoding's Base64 form — which the server's fast path leaves to rmcp.
async fn get_both_ways(c: &Client, task: &str) -> [(StatusCode, Value); 2] {
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tasks/get",
        "params": {"taskId": task, "_meta": c.meta()}});
    let encoded = format!(
        "=?base64?{}?=",
        data_encoding::BASE64.encode(task.as_bytes())
    );
    let mut out = vec![];
    for b in [
        c.request("tasks/get", Some(task)),
        c.request("tasks/get", Some(&encoded)),
    ] {
        let resp = b.json(&body).send().await.unwrap();
        let status = resp.status();
        assert_eq!(resp.headers()["content-type"], "application/json", "{task}");
        out.push((status, resp.json::<Value>().await.unwrap()));
    }
    out.try_into().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_get_answers_alike_on_the_fast_path_and_through_rmcp() {
    let s = server().await;
    let (alice, paula, dave, rita) = (
        s.client("alice-token"),
        s.client("paula-token"),
        s.client("dave-token"),
        s.client("reader-token"),
    );
    let done = alice.call("quick", json!({})).await.task_id();
    alice.await_status(&done, "completed").await;
    let waiting = alice.call("signoff", json!({})).await.task_id();
    s.wait(&waiting, "waiting", |r| r.phase() == RunPhase::Waiting)
        .await;
    let working = alice.call("nap", json!({})).await.task_id();
    let failed = alice.call("proto-error", json!({})).await.task_id();
    alice.await_status(&failed, "failed").await;
    let cancelled = alice.call("nap", json!({})).await.task_id();
    alice.cancel(&cancelled).await;
    alice.await_status(&cancelled, "cancelled").await;
    let cases = [
        (&alice, done.as_str(), "completed"),
        (&alice, waiting.as_str(), "input_required"),
        (&alice, working.as_str(), "working"),
        (&alice, failed.as_str(), "failed"),
        (&alice, cancelled.as_str(), "cancelled"),
        // Read through the approver rule, with the questions that wait for her.
        (&paula, waiting.as_str(), "input_required"),
        // The owner rule's "no" and a missing task are the same answer.
        (&dave, done.as_str(), "error"),
        (&alice, "quick-no-such-task", "error"),
        // rita may read Runs but not list them, and asked for none: unknown.
        (&rita, done.as_str(), "error"),
    ];
    for (who, task, want) in cases {
        let [fast, slow] = get_both_ways(who, task).await;
        assert_eq!(fast, slow, "{task}");
        assert_eq!(fast.0, StatusCode::OK);
        match want {
            "error" => assert_eq!(fast.1["error"]["code"], -32602, "{}", fast.1),
            status => assert_eq!(fast.1["result"]["status"], status, "{}", fast.1),
        }
    }
    let [fast, _] = get_both_ways(&paula, &waiting).await;
    assert_eq!(
        fast.1["result"]["_meta"]["dev.runway/awaitingYou"],
        json!(["ask.release"])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tasks_get_with_an_unreadable_meta_value_is_refused_on_both_paths() {
    let s = server().await;
    let alice = s.client("alice-token");
    let task = alice.call("quick", json!({})).await.task_id();
    alice.await_status(&task, "completed").await;
    let encoded = format!(
        "=?base64?{}?=",
        data_encoding::BASE64.encode(task.as_bytes())
    );
    // Values no JSON parser that checks them reads: a lone surrogate, a number past f64.
    for bad in [r#""\ud800""#, "1e400"] {
        let mut beside = alice.meta();
        beside["x"] = json!("BAD");
        let mut inside = alice.meta();
        inside["io.modelcontextprotocol/clientCapabilities"]["roots"] = json!({"x": "BAD"});
        for meta in [beside, inside] {
            let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tasks/get",
                "params": {"taskId": task, "_meta": meta}})
            .to_string()
            .replace(r#""BAD""#, bad);
            let mut answers = vec![];
            for name in [task.as_str(), encoded.as_str()] {
                let resp = alice
                    .request("tasks/get", Some(name))
                    .body(body.clone())
                    .send()
                    .await
                    .unwrap();
                answers.push((resp.status(), resp.text().await.unwrap()));
            }
            assert_eq!(answers[0], answers[1], "{body}");
            assert_eq!(answers[0].0, StatusCode::BAD_REQUEST, "{body}");
            let error: Value = serde_json::from_str(&answers[0].1).unwrap();
            assert_eq!(error["error"]["code"], -32700, "{body}: {error}");
        }
    }
}

/// A Workflow whose argument is mirrored in a header (`x-mcp-header`) and that runs for an hour.
const DEPLOY: &str = r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: deploy, namespace: NS }
spec:
  tool:
    description: Deploys to the environment it is given.
    inputSchema:
      type: object
      properties: { env: { type: string, enum: [staging, prod], x-mcp-header: Env } }
      required: [env]
  steps: [ { name: work, delay: { duration: 1h } } ]
"#;

/// One `tools/call` as the caller `c` sends it, with `meta` added to its `_meta` and `headers`
/// added, then the same request with its `Mcp-Name` in the Base64 form — which the server's
/// fast path leaves to rmcp.
async fn call_both_ways(
    c: &Client,
    tool: &str,
    args: Value,
    meta: Value,
    headers: &[(&str, &str)],
) -> [(StatusCode, Value); 2] {
    let mut all_meta = c.meta();
    all_meta
        .as_object_mut()
        .unwrap()
        .extend(meta.as_object().unwrap().clone());
    let body = json!({"jsonrpc": "2.0", "id": "call-1", "method": "tools/call",
        "params": {"name": tool, "arguments": args, "_meta": all_meta}});
    let encoded = format!(
        "=?base64?{}?=",
        data_encoding::BASE64.encode(tool.as_bytes())
    );
    let mut out = vec![];
    for name in [tool, encoded.as_str()] {
        let mut b = c.request("tools/call", Some(name));
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        let resp = b.json(&body).send().await.unwrap();
        let status = resp.status();
        out.push((status, resp.json::<Value>().await.unwrap()));
    }
    out.try_into().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runways_own_tools_answer_alike_on_the_fast_path_and_through_rmcp() {
    let s = server().await;
    let (alice, rita) = (s.client("alice-token"), s.client("reader-token"));
    let none = || json!({});
    // Before any Run, then with two, one page at a time.
    let [fast, slow] = call_both_ways(&alice, "runway_list_runs", none(), none(), &[]).await;
    assert_eq!(fast, slow);
    assert_eq!(fast.1["result"]["structuredContent"]["runs"], json!([]));
    let done = alice.call("quick", json!({})).await.task_id();
    alice.await_status(&done, "completed").await;
    alice.call("nap", json!({})).await.task_id();
    let page = json!({"limit": 1});
    let [fast, slow] = call_both_ways(&alice, "runway_list_runs", page, none(), &[]).await;
    assert_eq!(fast, slow);
    assert!(fast.1["result"]["structuredContent"]["nextCursor"].is_string());
    let cases = [
        (&alice, "runway_get_run", json!({"taskId": done})),
        (&alice, "runway_list_workflows", none()),
        // Refused alike: a bad argument, an unknown task, a caller who may not list Workflows.
        (&alice, "runway_list_runs", json!({"limit": 0})),
        (
            &alice,
            "runway_get_run",
            json!({"taskId": "quick-no-such-task"}),
        ),
        (&rita, "runway_list_workflows", none()),
    ];
    for (who, tool, args) in cases {
        let [fast, slow] = call_both_ways(who, tool, args.clone(), none(), &[]).await;
        assert_eq!(fast, slow, "{tool} {args}");
        assert_eq!(fast.0, StatusCode::OK);
    }
    // A client that does not declare tasks reads them too.
    let mut plain = alice.clone();
    plain.caps = json!({});
    let [fast, slow] = call_both_ways(
        &plain,
        "runway_get_run",
        json!({"taskId": done}),
        none(),
        &[],
    )
    .await;
    assert_eq!(fast, slow);
    assert_eq!(
        fast.1["result"]["structuredContent"]["phase"], "Succeeded",
        "{}",
        fast.1
    );
}

/// A task handle without what differs between two answers naming one Run at two moments, or
/// two Runs: their names and times, and the step the Run has reached.
fn handle_shape(answer: &Value, same_run: bool) -> Value {
    let mut r = answer["result"].clone();
    let o = r.as_object_mut().unwrap();
    for k in ["lastUpdatedAt", "statusMessage"] {
        o.remove(k);
    }
    if !same_run {
        for k in ["taskId", "createdAt"] {
            o.remove(k);
        }
    }
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_call_answers_alike_on_the_fast_path_and_through_rmcp() {
    let s = Mcp::start(&[("wf.yaml", WORKFLOWS), ("deploy.yaml", DEPLOY)]).await;
    let (alice, rita) = (s.client("alice-token"), s.client("reader-token"));
    let runs = || async {
        runway::store::RunStore::list(s.store(), Some("team-a"), &Default::default())
            .await
            .unwrap()
            .len()
    };
    let key = |k: &str| json!({"dev.runway/idempotencyKey": k});

    // One Run, started on the fast path and found again through rmcp by its key.
    let [fast, slow] = call_both_ways(&alice, "nap", json!({}), key("nap-1"), &[]).await;
    assert_eq!((fast.0, slow.0), (StatusCode::OK, StatusCode::OK));
    assert_eq!(fast.1["result"]["resultType"], "task", "{}", fast.1);
    assert_eq!(fast.1["id"], "call-1");
    assert_eq!(handle_shape(&fast.1, true), handle_shape(&slow.1, true));
    assert_eq!(runs().await, 1);
    // With its argument mirrored in the header the schema asks for.
    let [fast, slow] = call_both_ways(
        &alice,
        "deploy",
        json!({"env": "prod"}),
        key("deploy-1"),
        &[("mcp-param-env", "prod")],
    )
    .await;
    assert_eq!(fast.1["result"]["status"], "working", "{}", fast.1);
    assert_eq!(handle_shape(&fast.1, true), handle_shape(&slow.1, true));
    assert_eq!(runs().await, 2);
    // Without a key, two Runs, answered alike.
    let [fast, slow] = call_both_ways(&alice, "nap", json!({}), json!({}), &[]).await;
    assert_ne!(fast.1["result"]["taskId"], slow.1["result"]["taskId"]);
    assert_eq!(handle_shape(&fast.1, false), handle_shape(&slow.1, false));
    assert_eq!(runs().await, 4);
    // A call that blocks (the Workflow never runs as a task) is rmcp's either way.
    let [fast, slow] = call_both_ways(&alice, "sync-only", json!({}), json!({}), &[]).await;
    assert_eq!(fast, slow);
    assert_eq!(fast.1["result"]["content"][0]["text"], "sync", "{}", fast.1);
    let after_good_calls = runs().await;

    // Arguments against the schema: the same tool error both ways, and no Run.
    let [fast, slow] = call_both_ways(
        &alice,
        "deploy",
        json!({"env": "qa"}),
        json!({}),
        &[("mcp-param-env", "qa")],
    )
    .await;
    assert_eq!(fast, slow);
    assert_eq!(fast.1["result"]["isError"], true, "{}", fast.1);
    // Every refusal is the same answer both ways, and starts nothing.
    let refused = [
        // An argument the schema mirrors, without its header.
        (
            &alice,
            "deploy",
            json!({"env": "prod"}),
            json!({}),
            vec![],
            runway::protocol::codes::HEADER_MISMATCH,
        ),
        // Its header twice, saying two things (an intermediary may have routed on either).
        (
            &alice,
            "deploy",
            json!({"env": "prod"}),
            json!({}),
            vec![("mcp-param-env", "prod"), ("mcp-param-env", "staging")],
            runway::protocol::codes::HEADER_MISMATCH,
        ),
        // An idempotency key that is not a string.
        (
            &alice,
            "nap",
            json!({}),
            json!({"dev.runway/idempotencyKey": 5}),
            vec![],
            -32602,
        ),
        // A caller who may read Runs but not create them.
        (
            &rita,
            "nap",
            json!({}),
            json!({}),
            vec![],
            runway::protocol::codes::FORBIDDEN,
        ),
        // No such tool.
        (&alice, "no-such-tool", json!({}), json!({}), vec![], -32602),
    ];
    for (who, tool, args, meta, headers, code) in refused {
        let [fast, slow] = call_both_ways(who, tool, args.clone(), meta, &headers).await;
        assert_eq!(fast, slow, "{tool} {args}");
        assert_eq!(fast.1["error"]["code"], code, "{tool} {args}: {}", fast.1);
    }
    assert_eq!(
        runs().await,
        after_good_calls,
        "no refused call started a Run"
    );
}

const TWO_APPROVERS: &str = r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: two-of, namespace: NS }
spec:
  tool: { description: Needs two approvers other than the requester. }
  steps:
    - name: ask
      input:
        requests:
          - name: ok
            message: "Release?"
            approvers: { groups: [ops, approvers] }
            distinctFromRequester: true
            approvals: 2
  result: { content: [ { type: text, text: "released" } ] }
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_that_needs_two_approvers_takes_one_answer_from_each_in_either_era() {
    let mcp = Mcp::start(&[("wf.yaml", TWO_APPROVERS)]).await;
    let (alice, bob) = (mcp.client("alice-token"), mcp.client("bob-token"));
    let r = alice.call("two-of", json!({})).await;
    let id = r.result()["taskId"].as_str().unwrap().to_owned();
    alice.await_status(&id, "input_required").await;
    let yes = json!({"ask.ok": {"action": "accept", "content": {}}});
    bob.update(&id, yes.clone()).await.assert_complete();
    let run = mcp
        .wait(&id, "one approval", |r| {
            r.status
                .as_ref()
                .and_then(|s| s.input_requests.get("ask.ok"))
                .is_some_and(|q| q.approved_by == ["bob"])
        })
        .await;
    assert_eq!(run.phase(), RunPhase::Waiting);
    // Still a question, for everyone but bob.
    assert_eq!(alice.get(&id).await.result()["status"], "input_required");
    let view = bob.call("runway_get_run", json!({"taskId": id})).await;
    let q = &view.result()["structuredContent"]["questions"][0];
    assert_eq!(
        (q["approvals"].clone(), q["approvedBy"].clone()),
        (json!(2), json!(["bob"]))
    );
    assert_eq!(q["awaitingYou"], false, "bob has answered");
    // Bob once more changes nothing.
    bob.update(&id, yes.clone()).await.assert_complete();
    // Paula, from a 2025-era session, gives the second approval.
    let old = support::mcp::Old::connect(&mcp.url(), "paula-token", json!({})).await;
    let r = old
        .result(
            "tools/call",
            json!({"name": "runway_answer_run", "arguments": {"taskId": id, "inputResponses": yes}}),
        )
        .await;
    assert!(r.get("isError").is_none_or(|e| e == false), "{r}");
    let done = mcp.wait(&id, "finished", |r| r.phase().is_terminal()).await;
    assert_eq!(done.phase(), RunPhase::Succeeded);
    let answered: Vec<(String, String)> = done
        .spec
        .input_responses
        .iter()
        .map(|(k, r)| (k.clone(), r.answered_by.clone().unwrap()))
        .collect();
    assert_eq!(
        answered,
        [
            ("ask.ok".to_owned(), "bob".to_owned()),
            ("ask.ok/paula".to_owned(), "paula".to_owned())
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocking_call_asks_its_caller_only_the_questions_its_caller_may_answer() {
    let mcp = Mcp::start(&[("wf.yaml", TWO_APPROVERS)]).await;
    let yes = json!({"ask.ok": {"action": "accept", "content": {}}});
    // 2025-11-25: a held call of the requester, who may not approve, is told where its
    // question can be answered instead of being asked it.
    let old =
        support::mcp::Old::connect(&mcp.url(), "alice-token", json!({"elicitation": {}})).await;
    let r = old
        .result("tools/call", json!({"name": "two-of", "arguments": {}}))
        .await;
    assert_eq!(r["isError"], true, "{r}");
    assert_eq!(r["structuredContent"]["status"], "input_required", "{r}");
    let first = r["structuredContent"]["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    // 2026-07-28: the blocking call holds on while the approvers answer elsewhere.
    let alice = mcp
        .client("alice-token")
        .with_caps(json!({"elicitation": {}}));
    let held = tokio::spawn(async move { alice.call("two-of", json!({})).await });
    let second = mcp
        .wait_any("a second run waiting", |r| {
            r.metadata.name.as_deref() != Some(&*first) && r.phase() == RunPhase::Waiting
        })
        .await;
    let second = second.metadata.name.unwrap();
    let (bob, paula) = (mcp.client("bob-token"), mcp.client("paula-token"));
    bob.update(&second, yes.clone()).await.assert_complete();
    paula.update(&second, yes).await.assert_complete();
    let r = tokio::time::timeout(support::harness::PATIENCE, held)
        .await
        .expect("the held call ends once answered")
        .unwrap();
    assert_eq!(
        r.result()["content"][0]["text"],
        "released",
        "{:?}",
        r.messages
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_stops_showing_a_task_its_caller_may_no_longer_read() {
    let s = server().await;
    let alice = s.client("alice-token");
    let paula = s.client("paula-token");
    let id = alice.call("signoff", json!({})).await.task_id();
    s.wait(&id, "waiting", |r| r.phase() == RunPhase::Waiting)
        .await;
    // paula reads the Run while its question names her group.
    let (status, mut frames) = listen(&paula, &[&id]).await;
    assert_eq!(status, StatusCode::OK);
    frames.next().await.unwrap();
    let first = frames.next().await.unwrap();
    assert_eq!(first["params"]["status"], "input_required", "{first}");
    // alice cancels: the question closes unanswered, and paula may read the Run no more.
    assert!(alice.cancel(&id).await.last().get("error").is_none());
    let rest: Vec<Value> = tokio::time::timeout(support::harness::PATIENCE, frames.collect())
        .await
        .expect("the stream ends");
    assert!(
        rest.iter().all(|m| m["params"]["status"] != "cancelled"),
        "{rest:?}"
    );
    assert_eq!(rest.last().unwrap()["result"]["resultType"], "complete");
    assert_eq!(paula.get(&id).await.error_code(), -32602);
    assert_eq!(alice.get(&id).await.result()["status"], "cancelled");
}
