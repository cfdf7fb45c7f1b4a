//! Finding and showing Runs: the `runway_list_runs` tool, the app tools behind the console and
//! the MCP Apps view, the view resource, and the console's own routes, over real HTTP.

use crate::support;

use std::collections::BTreeSet;

use runway::api::RunPhase;
use serde_json::{Value, json};
use support::mcp::{Client, Mcp, TASK_WORKFLOWS as WORKFLOWS, TASKS};

const UI: &str = "io.modelcontextprotocol/ui";
const VIEW: &str = "ui://runway/run";

async fn server() -> Mcp {
    Mcp::start(&[("wf.yaml", WORKFLOWS)]).await
}

fn ui_caps() -> Value {
    json!({"extensions": {TASKS: {}, UI: {"mimeTypes": ["text/html;profile=mcp-app"]}}})
}

async fn start(c: &Client, tool: &str) -> String {
    let r = c.call(tool, json!({})).await;
    r.result()["taskId"].as_str().unwrap().to_owned()
}

/// The task ids a list call answered, in order.
async fn listed(c: &Client, args: Value) -> Vec<String> {
    c.call("runway_list_runs", args).await.listed()
}

/// Every Run the list shows `c`, `limit` at a time from the first page to the last, and how
/// many pages that took.
async fn page_through(c: &Client, limit: u64) -> (Vec<Value>, usize) {
    let mut seen: Vec<Value> = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let mut args = json!({"limit": limit});
        if let Some(c) = &cursor {
            args["cursor"] = json!(c);
        }
        let r = c.call("runway_list_runs", args).await;
        let sc = r.result()["structuredContent"].clone();
        seen.extend(sc["runs"].as_array().unwrap().iter().cloned());
        pages += 1;
        match sc["nextCursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return (seen, pages),
        }
    }
}

/// Workflow tools of the fixtures, and Runway's own tools with and without MCP Apps.
const WORKFLOW_TOOLS: usize = 9;

fn set(ids: &[&String]) -> BTreeSet<String> {
    ids.iter().map(|s| (*s).clone()).collect()
}

#[tokio::test]
async fn the_list_shows_each_caller_what_the_owner_rule_lets_them_see() {
    let mcp = server().await;
    let (alice, dave, bob, rita) = (
        mcp.client("alice-token"),
        mcp.client("dave-token"),
        mcp.client("bob-token"),
        mcp.client("reader-token"),
    );
    let a1 = start(&alice, "quick").await;
    let a2 = start(&alice, "nap").await;
    let d1 = start(&dave, "nap").await;
    mcp.wait(&a1, "quick done", |r| r.phase() == RunPhase::Succeeded)
        .await;

    let mine = listed(&alice, json!({})).await;
    assert_eq!(set(&mine.iter().collect::<Vec<_>>()), set(&[&a1, &a2]));
    // bob may list runs: all of them.
    assert_eq!(
        set(&listed(&bob, json!({})).await.iter().collect::<Vec<_>>()),
        set(&[&a1, &a2, &d1])
    );
    assert!(listed(&rita, json!({})).await.is_empty());
    assert_eq!(
        listed(&bob, json!({"requestedByMe": true})).await,
        Vec::<String>::new()
    );
    // A Run written without the Workflow label (as kubectl may) is still found by Workflow.
    let mut bare = support::contract::run("team-a", "nap-by-hand", "nap");
    bare.metadata.labels = None;
    runway::store::RunStore::create(mcp.store(), bare)
        .await
        .unwrap();
    let by_hand = "nap-by-hand".to_owned();
    assert_eq!(
        set(&listed(&bob, json!({"workflow": "nap"}))
            .await
            .iter()
            .collect::<Vec<_>>()),
        set(&[&a2, &d1, &by_hand])
    );
    assert_eq!(
        listed(&bob, json!({"phase": "Succeeded"})).await,
        vec![a1.clone()]
    );

    // Entries carry what a person scanning the list needs, and the text says the same.
    let r = alice
        .call("runway_list_runs", json!({"phase": "Succeeded"}))
        .await;
    let entry = &r.result()["structuredContent"]["runs"][0];
    assert_eq!(entry["workflow"], "quick");
    assert_eq!(entry["requestedBy"], "alice");
    assert!(entry["createdAt"].is_string() && entry["finishedAt"].is_string());
    let text = r.result()["content"][0]["text"].as_str().unwrap();
    assert!(text.contains(&a1) && text.contains("Succeeded"), "{text}");

    // Without `get runs` there is nothing to list: carol has no rights in team-a.
    let carol = mcp.client("carol-token").at("/namespaces/team-a/mcp");
    let r = carol.call("runway_list_runs", json!({})).await;
    assert_eq!(r.error_code(), -32003);
}

#[tokio::test]
async fn the_list_pages_newest_first_and_refuses_bad_arguments() {
    let mcp = server().await;
    let alice = mcp.client("alice-token");
    let mut made = Vec::new();
    for _ in 0..5 {
        made.push(start(&alice, "nap").await);
    }
    let (seen, pages) = page_through(&alice, 2).await;
    assert_eq!(pages, 3);
    let ids: Vec<String> = seen
        .iter()
        .map(|r| r["taskId"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        ids.iter().collect::<BTreeSet<_>>(),
        made.iter().collect::<BTreeSet<_>>(),
        "every Run once"
    );
    let order: Vec<(String, String)> = seen
        .iter()
        .map(|r| {
            (
                r["createdAt"].as_str().unwrap().to_owned(),
                r["taskId"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let mut newest_first = order.clone();
    newest_first.sort_by(|a, b| b.cmp(a));
    assert_eq!(order, newest_first);

    // Paging while Runs are created concurrently: no Run twice, none of those that were
    // there all along missed, and still newest first (a Run created meanwhile in the same
    // second as the cursor may show up, as on Kubernetes, whose times have seconds).
    let creating = futures::future::join_all((0..4).map(|_| start(&alice, "nap")));
    let ((seen, _), _) = futures::join!(page_through(&alice, 2), creating);
    let again: Vec<String> = seen
        .iter()
        .map(|r| r["taskId"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        again.iter().collect::<BTreeSet<_>>().len(),
        again.len(),
        "no Run twice: {again:?}"
    );
    assert!(made.iter().all(|m| again.contains(m)), "{again:?}");
    let order: Vec<(String, String)> = seen
        .iter()
        .map(|r| {
            let at = r["createdAt"].as_str().unwrap().to_owned();
            (at, r["taskId"].as_str().unwrap().to_owned())
        })
        .collect();
    assert!(order.windows(2).all(|w| w[0].0 >= w[1].0), "{order:?}");

    for (args, says) in [
        (json!({"limit": 0}), "limit: must be 1 to 100"),
        (json!({"limit": 101}), "limit: must be 1 to 100"),
        (json!({"cursor": "not-a-cursor"}), "invalid cursor"),
        (json!({"phase": "Asleep"}), "unknown variant"),
        (json!({"owner": "me"}), "unknown field"),
        (json!({"waitingForMe": "yes"}), "invalid type"),
    ] {
        let r = alice.call("runway_list_runs", args.clone()).await;
        assert_eq!(r.error_code(), -32602, "{args}");
        let message = r.last()["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{args}: {message}");
    }

    // A cursor is the client's to send: one at either edge of time has nothing past it.
    let edge = |at: &str| data_encoding::BASE64URL_NOPAD.encode(format!("{at}\nx").as_bytes());
    for (order, at) in [
        ("oldest", "9999-12-30T22:00:00.999999999Z"),
        ("newest", "-009999-01-02T01:59:59Z"),
    ] {
        let args = json!({"order": order, "cursor": edge(at)});
        let r = alice.call("runway_list_runs", args.clone()).await;
        assert_eq!(r.result()["structuredContent"]["runs"], json!([]), "{args}");
    }
    // One Run further in, the page goes on from there.
    let args = json!({"order": "oldest", "cursor": edge("-009999-01-02T01:59:59Z")});
    assert!(!listed(&alice, args).await.is_empty());
}

#[tokio::test]
async fn an_approver_finds_what_waits_for_her_answers_it_and_still_sees_how_it_ends() {
    let mcp = server().await;
    let (alice, paula) = (mcp.client("alice-token"), mcp.client("paula-token"));
    let task = start(&alice, "signoff").await;
    mcp.wait(&task, "the question", |r| r.phase() == RunPhase::Waiting)
        .await;
    let r = paula
        .call("runway_list_runs", json!({"waitingForMe": true}))
        .await;
    let entry = &r.result()["structuredContent"]["runs"][0];
    assert_eq!(entry["taskId"], task.as_str());
    assert_eq!(entry["awaitingYou"], json!(["ask.release"]));
    // The requester sees it waiting for her too, for the other question.
    let r = alice
        .call("runway_list_runs", json!({"waitingForMe": true}))
        .await;
    assert_eq!(
        r.result()["structuredContent"]["runs"][0]["awaitingYou"],
        json!(["ask.note"])
    );
    // Someone else in the namespace is asked nothing.
    assert!(
        listed(&mcp.client("dave-token"), json!({"waitingForMe": true}))
            .await
            .is_empty()
    );

    // An approver may not cancel what she did not request.
    let r = paula
        .call("runway_cancel_run", json!({"taskId": task}))
        .await;
    assert_eq!(r.error_code(), -32602);
    let full = paula.call("runway_get_run", json!({"taskId": task})).await;
    assert_eq!(full.result()["structuredContent"]["youMayCancel"], false);
    let questions = full.result()["structuredContent"]["questions"].clone();
    let mine: Vec<&Value> = questions
        .as_array()
        .unwrap()
        .iter()
        .filter(|q| q["awaitingYou"] == true)
        .collect();
    assert_eq!(mine.len(), 1);
    assert_eq!(mine[0]["key"], "ask.release");
    assert_eq!(mine[0]["form"], true);
    assert_eq!(mine[0]["requestedSchema"]["required"], json!(["approve"]));

    // Her question, not the one that names no approvers.
    let r = paula
        .call(
            "runway_answer_run",
            json!({"taskId": task, "inputResponses": {"ask.note": {"action": "accept", "content": {}}}}),
        )
        .await;
    assert!(
        r.last()["error"]["data"]["refused"]["ask.note"]
            .as_str()
            .unwrap()
            .contains("names no approvers")
    );
    // A wrong answer is refused and the question stays open.
    let r = paula
        .call(
            "runway_answer_run",
            json!({"taskId": task, "inputResponses": {"ask.release": {"action": "accept", "content": {}}}}),
        )
        .await;
    assert_eq!(r.error_code(), -32602);
    let r = paula
        .call(
            "runway_answer_run",
            json!({"taskId": task, "inputResponses": {"ask.release": {"action": "accept", "content": {"approve": true, "channel": "beta"}}}}),
        )
        .await;
    r.result();
    // The other question names no approvers: it is alice's.
    alice
        .call(
            "runway_answer_run",
            json!({"taskId": task, "inputResponses": {"ask.note": {"action": "accept", "content": {}}}}),
        )
        .await
        .result();
    mcp.wait(&task, "signed", |r| r.phase() == RunPhase::Succeeded)
        .await;
    // Having answered, she still reads it (list, tasks/get, the full view).
    assert_eq!(listed(&paula, json!({})).await, vec![task.clone()]);
    assert_eq!(paula.get(&task).await.result()["status"], "completed");
    let full = paula.call("runway_get_run", json!({"taskId": task})).await;
    let sc = &full.result()["structuredContent"];
    // She reads what `tasks/get` shows her and her own answer, not alice's business: not
    // alice's answer, the step outputs that carry it, the arguments, notes or Events.
    assert_eq!(sc["answers"].as_array().unwrap().len(), 1, "{sc}");
    assert_eq!(sc["answers"][0]["key"], "ask.release");
    assert_eq!(sc["answers"][0]["answeredBy"], "paula");
    assert_eq!(sc["answers"][0]["action"], "accept");
    assert_eq!(sc["result"]["content"][0]["text"], "beta");
    assert_eq!(sc["steps"][0]["name"], "ask");
    assert_eq!(sc["steps"][0]["phase"], "Succeeded");
    assert!(sc["steps"][0].get("output").is_none(), "{sc}");
    for hidden in ["arguments", "notes", "events", "cancel"] {
        assert!(sc.get(hidden).is_none(), "{hidden}: {sc}");
    }
    assert_eq!(sc["requestedBy"], json!({"username": "alice"}));
    // The requester reads it all: both answers, by key, and the step's output.
    let own = alice.call("runway_get_run", json!({"taskId": task})).await;
    let sc = &own.result()["structuredContent"];
    assert_eq!(sc["answers"][0]["answeredBy"], "alice");
    assert_eq!(sc["answers"][1]["answeredBy"], "paula");
    assert!(sc["steps"][0]["output"].is_object(), "{sc}");
    assert!(sc["events"].is_array(), "{sc}");
    // The one who asked nothing and answered nothing still sees nothing.
    let dave = mcp.client("dave-token");
    assert_eq!(dave.get(&task).await.error_code(), -32602);
    assert!(listed(&dave, json!({})).await.is_empty());
}

#[tokio::test]
async fn a_run_in_full_has_its_steps_answers_events_and_cancel_and_strangers_get_nothing() {
    let mcp = server().await;
    let alice = mcp.client("alice-token");
    let task = start(&alice, "nap").await;
    mcp.wait(&task, "asleep", |r| r.phase() == RunPhase::Running)
        .await;
    let r = alice
        .call(
            "runway_cancel_run",
            json!({"taskId": task, "reason": "not today"}),
        )
        .await;
    assert_eq!(r.result()["structuredContent"]["taskId"], task.as_str());
    mcp.wait(&task, "cancelled", |r| r.phase() == RunPhase::Cancelled)
        .await;
    let full = alice.call("runway_get_run", json!({"taskId": task})).await;
    let sc = &full.result()["structuredContent"];
    assert_eq!(sc["phase"], "Cancelled");
    assert_eq!(sc["requestedBy"]["username"], "alice");
    assert_eq!(sc["cancel"]["requestedBy"], "alice");
    assert_eq!(sc["cancel"]["reason"], "not today");
    assert_eq!(sc["steps"][0]["name"], "sleep");
    assert_eq!(sc["plannedSteps"], json!(["sleep"]));
    assert_eq!(sc["youMayCancel"], false, "nothing left to cancel");
    let reasons = full.event_reasons();
    // Events are recorded after the status write they describe: the last ones may still be
    // on their way; these were written before the Run was cancelled.
    assert_eq!(reasons.first().map(String::as_str), Some("StepStarted"));
    assert!(
        reasons.iter().any(|r| r == "CancelRequested"),
        "{reasons:?}"
    );

    for (who, path) in [
        ("reader-token", "/namespaces/team-a/mcp"),
        ("dave-token", "/namespaces/team-a/mcp"),
        ("carol-token", "/namespaces/team-a/mcp"),
    ] {
        let c = mcp.client(who).at(path);
        let r = c.call("runway_get_run", json!({"taskId": task})).await;
        assert_eq!(r.error_code(), -32602, "{who}");
        assert_eq!(r.last()["error"]["message"], "unknown task");
    }
    for args in [
        json!({}),
        json!({"taskId": 7}),
        json!({"taskId": "Not/A/Name"}),
    ] {
        let r = alice.call("runway_get_run", args.clone()).await;
        assert_eq!(r.error_code(), -32602, "{args}");
    }
    let r = alice
        .call("runway_answer_run", json!({"taskId": task}))
        .await;
    assert_eq!(r.error_code(), -32602);
    let r = alice.call("runway_nothing", json!({})).await;
    assert_eq!(r.error_code(), -32602);
    assert!(
        r.last()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unknown tool")
    );
}

#[tokio::test]
async fn runs_are_listed_and_shown_again_after_a_restart() {
    let mcp = server().await;
    let alice = mcp.client("alice-token");
    let done = start(&alice, "quick").await;
    let asleep = start(&alice, "nap").await;
    mcp.wait(&done, "done", |r| r.phase() == RunPhase::Succeeded)
        .await;
    let before = listed(&alice, json!({})).await;
    let dir = mcp.stop().await;

    let mcp = Mcp::start_in(dir).await;
    let alice = mcp.client("alice-token");
    assert_eq!(listed(&alice, json!({})).await, before);
    assert_eq!(before.len(), 2);
    let full = alice.call("runway_get_run", json!({"taskId": done})).await;
    let sc = &full.result()["structuredContent"];
    assert_eq!(sc["steps"][0]["phase"], "Succeeded");
    // Events are kept in memory by the embedded server; the Run's record is what lasts.
    assert_eq!(sc["events"], json!([]));
    let full = alice
        .call("runway_get_run", json!({"taskId": asleep}))
        .await;
    assert_eq!(full.result()["structuredContent"]["youMayCancel"], true);
}

#[tokio::test]
async fn the_list_tool_can_be_turned_off_in_a_namespace_or_everywhere() {
    let tools = |r: &support::mcp::Reply| -> Vec<String> {
        r.result()["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let mcp = Mcp::start_with(&[("wf.yaml", WORKFLOWS)], |c| {
        c.list_tool_off_in = ["team-a".to_owned()].into();
    })
    .await;
    let alice = mcp.client("alice-token");
    let carol = mcp.client("carol-token").at("/namespaces/team-b/mcp");
    assert!(
        !tools(&alice.rpc("tools/list", None, json!({})).await)
            .contains(&"runway_list_runs".into())
    );
    let r = alice.call("runway_list_runs", json!({})).await;
    assert_eq!(r.error_code(), -32602);
    assert!(
        tools(&carol.rpc("tools/list", None, json!({})).await).contains(&"runway_list_runs".into())
    );
    carol.call("runway_list_runs", json!({})).await.result();
    mcp.stop().await;

    let mcp = Mcp::start_with(&[("wf.yaml", WORKFLOWS)], |c| c.list_tool = false).await;
    let carol = mcp.client("carol-token").at("/namespaces/team-b/mcp");
    assert!(
        !tools(&carol.rpc("tools/list", None, json!({})).await)
            .contains(&"runway_list_runs".into())
    );
    assert_eq!(
        carol.call("runway_list_runs", json!({})).await.error_code(),
        -32602
    );
}

#[tokio::test]
async fn mcp_apps_clients_get_the_view_and_the_app_tools_others_plain_tools() {
    let mcp = server().await;
    let alice = mcp.client("alice-token");
    let with_ui = alice.clone().with_caps(ui_caps());
    let r = with_ui.rpc("tools/list", None, json!({})).await;
    let tools = r.result()["tools"].as_array().unwrap().clone();
    for t in &tools {
        assert_eq!(t["_meta"]["ui"]["resourceUri"], VIEW, "{t}");
        let app_only = t["_meta"]["ui"]["visibility"] == json!(["app"]);
        let name = t["name"].as_str().unwrap();
        assert_eq!(
            app_only,
            [
                "runway_get_run",
                "runway_answer_run",
                "runway_cancel_run",
                "runway_pause_run",
                "runway_resume_run",
                "runway_retry_run",
                "runway_list_workflows"
            ]
            .contains(&name),
            "{name}"
        );
    }
    assert_eq!(tools.len(), WORKFLOW_TOOLS + 1 + 7);

    let plain = alice.rpc("tools/list", None, json!({})).await;
    let plain = plain.result()["tools"].as_array().unwrap().clone();
    assert!(plain.iter().all(|t| t.get("_meta").is_none()), "{plain:?}");
    assert_eq!(plain.len(), WORKFLOW_TOOLS + 1);
    // A client whose MCP Apps support names other content types only gets plain tools too.
    let other = alice
        .clone()
        .with_caps(json!({"extensions": {UI: {"mimeTypes": ["text/uri-list"]}}}));
    let r = other.rpc("tools/list", None, json!({})).await;
    assert!(
        r.result()["tools"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t.get("_meta").is_none())
    );

    let r = with_ui
        .rpc("resources/read", Some(VIEW), json!({"uri": VIEW}))
        .await;
    let content = &r.result()["contents"][0];
    assert_eq!(content["mimeType"], "text/html;profile=mcp-app");
    assert_eq!(content["_meta"]["ui"]["csp"]["connectDomains"], json!([]));
    let html = content["text"].as_str().unwrap();
    assert!(html.starts_with("<!DOCTYPE html>") && html.contains(r#"data-runway="view""#));
    assert!(html.contains("ui/initialize") && !html.contains("/*SCRIPT*/"));
    let r = with_ui.rpc("resources/list", None, json!({})).await;
    assert_eq!(r.result()["resources"][0]["uri"], VIEW);
    let r = with_ui
        .rpc(
            "resources/read",
            Some("ui://runway/other"),
            json!({"uri": "ui://runway/other"}),
        )
        .await;
    assert_eq!(r.error_code(), -32602);
}

fn http() -> reqwest::Client {
    reqwest::Client::new()
}

#[tokio::test]
async fn the_console_is_served_under_a_strict_policy_and_offers_the_callers_namespaces() {
    let mcp = server().await;
    let base = format!("http://{}", mcp.addr);
    let page = http().get(format!("{base}/ui/")).send().await.unwrap();
    assert_eq!(page.status(), 200);
    let csp = page.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        csp.contains("script-src 'self'") && csp.contains("frame-ancestors 'none'"),
        "{csp}"
    );
    assert!(
        page.text()
            .await
            .unwrap()
            .contains(r#"<script src="/ui/runway.js">"#)
    );
    let js = http()
        .get(format!("{base}/ui/runway.js"))
        .send()
        .await
        .unwrap();
    assert!(
        js.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/javascript")
    );
    let moved = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .get(format!("{base}/ui"))
        .send()
        .await
        .unwrap();
    assert_eq!(moved.headers()["location"], "/ui/");

    let namespaces = |token: Option<&'static str>| {
        let mut req = http().get(format!("{base}/ui/api/namespaces"));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        async move { req.send().await.unwrap() }
    };
    assert_eq!(namespaces(None).await.status(), 401);
    assert_eq!(namespaces(Some("wrong")).await.status(), 401);
    for (token, user, expected) in [
        ("alice-token", "alice", json!(["team-a"])),
        ("carol-token", "carol", json!(["team-b"])),
        ("olga-token", "olga", json!(["team-a"])),
    ] {
        let r = namespaces(Some(token)).await;
        assert_eq!(r.headers()["cache-control"], "no-store");
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["user"], user);
        assert_eq!(body["namespaces"], expected, "{token}");
    }
    mcp.stop().await;

    let mcp = Mcp::start_with(&[("wf.yaml", WORKFLOWS)], |c| c.console = false).await;
    let r = http()
        .get(format!("http://{}/ui/", mcp.addr))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
}

#[tokio::test]
async fn a_page_of_the_server_itself_may_post_and_a_foreign_page_may_not() {
    let mcp = Mcp::start_with(&[("wf.yaml", WORKFLOWS)], |c| {
        c.allowed_hosts = vec!["runway.example".into()];
    })
    .await;
    let port = mcp.addr.port();
    let alice = mcp.client("alice-token");
    let post = |origin: &str| {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
            "name": "runway_list_runs", "arguments": {}, "_meta": alice.meta()}});
        alice
            .request("tools/call", Some("runway_list_runs"))
            .header("host", format!("runway.example:{port}"))
            .header("origin", origin)
            .json(&body)
    };
    let same = alice
        .send(post(&format!("http://runway.example:{port}")))
        .await;
    assert_eq!(same.status, 200, "{:?}", same.messages);
    same.result();
    for foreign in [
        "http://evil.example".to_owned(),
        format!("http://evil.example:{port}"),
        format!("http://runway.example:{}", port.wrapping_add(1)),
        format!("https://runway.example:{port}.evil.example"),
    ] {
        let r = alice.send(post(&foreign)).await;
        assert_eq!(r.status, 403, "{foreign}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_steps_tell_their_end_as_events_like_every_other_step() {
    let sink = support::sink::Sink::start().await;
    let missing = sink.url.replace("/hook", "/missing");
    let wf = format!(
        r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: {{ name: posts, namespace: team-a }}
spec:
  steps:
    - name: deliver
      http: {{ method: POST, url: "{}" }}
    - name: lost
      http: {{ method: POST, url: "{missing}" }}
"#,
        sink.url
    );
    let mcp = Mcp::start(&[("wf.yaml", &wf)]).await;
    let alice = mcp.client("alice-token");
    let task = start(&alice, "posts").await;
    mcp.wait(&task, "failed", |r| r.phase() == RunPhase::Failed)
        .await;
    // Events are recorded after the status write they describe: follow them to the last.
    let reasons: Vec<String> = support::mcp::events_once(&alice, &task, |evs| {
        evs.iter().any(|(r, _)| r == "Finished")
    })
    .await
    .iter()
    .map(|(r, m)| format!("{r} {m}"))
    .collect();
    assert!(
        reasons
            .iter()
            .any(|m| m == "StepSucceeded step deliver succeeded"),
        "{reasons:?}"
    );
    assert!(
        reasons
            .iter()
            .any(|m| m.starts_with("StepFailed step lost: HTTP 404")),
        "{reasons:?}"
    );
}
