//! The archive of finished Runs: both backends (SQLite, and a real PostgreSQL server) against
//! one contract, and the embedded server archiving each Run before its time to live deletes
//! it, read back through `runway_list_runs` / `runway_get_run` under the owner rule, and a
//! Run kept in the store while the archive refuses it.

use crate::support;

use futures::StreamExt;
use jiff::{SignedDuration, Timestamp};
use runway::api::{Run, RunPhase};
use runway::store::RunStore;
use runway::store::archive::keeper::Settings;
use runway::store::archive::postgres::PostgresArchive;
use runway::store::archive::sqlite::SqliteArchive;
use runway::store::archive::{Archive, Entry, Retention};
use runway::store::events::RecordedEvent;
use serde_json::{Value, json};
use support::harness::{PATIENCE, TempDir};
use support::mcp::Mcp;

fn at(s: &str) -> Timestamp {
    s.parse().unwrap()
}

fn entry(ns: &str, name: &str, uid: &str, created: &str, finished: &str) -> Entry {
    let mut run: Run = serde_json::from_value(json!({
        "apiVersion": "runway.dev/v1alpha1", "kind": "Run",
        "metadata": {"name": name, "namespace": ns, "uid": uid, "creationTimestamp": created},
        "spec": {"workflowRef": {"name": "deploy"}, "arguments": {"env": "prod"},
                 "requestedBy": {"username": "alice"}},
    }))
    .unwrap();
    run.status = Some(
        serde_json::from_value(json!({"phase": "Succeeded", "finishedAt": finished})).unwrap(),
    );
    Entry {
        run,
        events: vec![RecordedEvent {
            time: Some(finished.into()),
            type_: "Normal".into(),
            reason: "Succeeded".into(),
            message: "done".into(),
        }],
        archived_at: at(finished),
    }
}

fn names(page: &[Entry]) -> Vec<&str> {
    page.iter()
        .map(|e| e.run.metadata.name.as_deref().unwrap())
        .collect()
}

/// What every archive does: one entry per uid, the newest Run of a name, pages in creation
/// order from a cursor, retention by age and by count per namespace.
async fn contract(a: &dyn Archive) {
    let one = entry(
        "team-a",
        "r1",
        "u1",
        "2026-12-01T10:00:00Z",
        "2026-12-01T10:05:00Z",
    );
    let two = entry(
        "team-a",
        "r2",
        "u2",
        "2026-12-01T11:00:00Z",
        "2026-12-01T11:05:00Z",
    );
    let other = entry(
        "team-b",
        "r1",
        "u9",
        "2026-12-01T12:00:00Z",
        "2026-12-01T12:05:00Z",
    );
    for e in [&one, &two, &other] {
        a.put(e).await.unwrap();
    }
    // Written again (a crash between archiving and deleting): replaced, not added.
    let mut again = one.clone();
    again.events.push(RecordedEvent {
        time: None,
        type_: "Normal".into(),
        reason: "Later".into(),
        message: "a second write".into(),
    });
    a.put(&again).await.unwrap();
    let all = a.page("team-a", true, None, 10).await.unwrap();
    assert_eq!(names(&all), ["r2", "r1"]);
    assert_eq!(all[1], again, "the second write replaced the first, whole");
    assert_eq!(a.get("team-a", "r1").await.unwrap(), Some(again.clone()));
    assert_eq!(a.get("team-a", "nope").await.unwrap(), None);
    assert_eq!(a.get("team-c", "r1").await.unwrap(), None);

    // A Run made again under a name is another entry; the name reads the newest.
    let remade = entry(
        "team-a",
        "r1",
        "u3",
        "2026-12-02T09:00:00Z",
        "2026-12-02T09:01:00Z",
    );
    a.put(&remade).await.unwrap();
    assert_eq!(a.get("team-a", "r1").await.unwrap(), Some(remade.clone()));
    let newest = a.page("team-a", true, None, 2).await.unwrap();
    assert_eq!(names(&newest), ["r1", "r2"]);
    let rest = a
        .page(
            "team-a",
            true,
            Some((newest[1].created_us(), "r2".into())),
            2,
        )
        .await
        .unwrap();
    assert_eq!(names(&rest), ["r1"]);
    assert_eq!(rest[0].run.metadata.uid.as_deref(), Some("u1"));
    let oldest = a.page("team-a", false, None, 10).await.unwrap();
    let uids: Vec<_> = oldest.iter().map(|e| e.uid().unwrap()).collect();
    assert_eq!(uids, ["u1", "u2", "u3"]);

    // The scan a list reads pages through, and stops where its visitor says.
    let mut seen = Vec::new();
    runway::store::archive::scan(a, "team-a", true, None, &mut |e: &Entry| {
        seen.push(e.uid().unwrap().to_owned());
        seen.len() < 2
    })
    .await
    .unwrap();
    assert_eq!(seen, ["u3", "u2"]);

    // Retention: by count per namespace (the newest stay), then by age.
    let kept_two = Retention {
        max_age: None,
        max_per_namespace: Some(2),
    };
    let now = at("2026-12-03T00:00:00Z");
    assert_eq!(a.prune(now, kept_two).await.unwrap(), 1);
    let left = a.page("team-a", false, None, 10).await.unwrap();
    assert_eq!(
        left.iter().map(|e| e.uid().unwrap()).collect::<Vec<_>>(),
        ["u2", "u3"]
    );
    assert_eq!(a.page("team-b", false, None, 10).await.unwrap().len(), 1);
    let a_day = Retention {
        max_age: Some(SignedDuration::from_hours(24)),
        max_per_namespace: None,
    };
    // u2 and u9 finished on Dec 1, more than a day before; u3 on Dec 2, less.
    assert_eq!(a.prune(now, a_day).await.unwrap(), 2);
    assert_eq!(
        names(&a.page("team-a", true, None, 10).await.unwrap()),
        ["r1"]
    );
    assert!(a.page("team-b", true, None, 10).await.unwrap().is_empty());
    assert_eq!(a.prune(now, a_day).await.unwrap(), 0);
}

#[tokio::test]
async fn the_sqlite_archive_keeps_the_contract_and_survives_a_reopen() {
    let dir = TempDir::new();
    let file = dir.path().join("archive.db");
    contract(&SqliteArchive::open(&file).unwrap()).await;
    let reopened = SqliteArchive::open(&file).unwrap();
    let left = reopened.page("team-a", true, None, 10).await.unwrap();
    assert_eq!(
        left.iter().map(|e| e.uid().unwrap()).collect::<Vec<_>>(),
        ["u3"]
    );
}

/// A prune of more entries than one transaction deletes (500) deletes them all, the newest
/// kept, and those past both limits counted once.
#[tokio::test]
async fn a_large_prune_deletes_in_chunks_and_keeps_the_newest() {
    let dir = TempDir::new();
    let a = SqliteArchive::open(&dir.path().join("archive.db")).unwrap();
    let base = at("2026-11-01T00:00:00Z");
    for i in 0..1203 {
        let finished = (base + SignedDuration::from_mins(i)).to_string();
        let e = entry(
            "team-a",
            &format!("r{i}"),
            &format!("u{i}"),
            &finished,
            &finished,
        );
        a.put(&e).await.unwrap();
    }
    let both = Retention {
        // The first 200 minutes are past the age limit; of the rest the newest 100 stay.
        max_age: Some(SignedDuration::from_hours(24)),
        max_per_namespace: Some(100),
    };
    let now = base + SignedDuration::from_mins(200) + SignedDuration::from_hours(24);
    assert_eq!(a.prune(now, both).await.unwrap(), 1103);
    let left = a.page("team-a", true, None, 200).await.unwrap();
    assert_eq!(left.len(), 100);
    assert_eq!(names(&left)[0], "r1202");
    assert_eq!(names(&left)[99], "r1103");
}

#[tokio::test]
async fn the_postgres_archive_keeps_the_contract_and_reconnects() {
    let url = support::postgres::database();
    let a = PostgresArchive::open(&url).await.unwrap();
    contract(&a).await;
    // Entries are jsonb, so that they can be queried with SQL too.
    let pg = support::postgres::server();
    let db = url.rsplit('/').next().unwrap();
    let phase = pg.psql(
        db,
        "SELECT entry->'run'->'status'->>'phase' FROM archived_runs",
    );
    assert_eq!(phase.trim(), "Succeeded");
    // The server ends the connection; the next call opens another.
    pg.psql(
        "postgres",
        &format!("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{db}'"),
    );
    let mut tries = 0;
    let got = loop {
        match a.get("team-a", "r1").await {
            Ok(e) => break e,
            // The first call may still meet the connection the server is closing.
            Err(e) if tries == 0 => {
                tries += 1;
                eprintln!("first call after the termination: {e}");
            }
            Err(e) => panic!("not reconnected: {e}"),
        }
    };
    assert_eq!(got.unwrap().uid().unwrap(), "u3");
}

#[tokio::test]
async fn an_archive_address_that_is_neither_sqlite_nor_postgres_is_refused_without_its_password() {
    for bad in ["mysql://root:hunter2@db/runs", "sqlite:", "runs.db"] {
        let e = runway::store::archive::keeper::open(bad)
            .await
            .err()
            .unwrap();
        let said = e.to_string();
        assert!(
            said.contains("expected sqlite:PATH or postgres://"),
            "{said}"
        );
        assert!(!said.contains("hunter2"), "{said}");
    }
    // A URL that does not parse stops the start; a server that cannot be reached now does
    // not: each write says why it failed, and the Runs wait in the store.
    let e = runway::store::archive::keeper::open("postgres://x:secret@127.0.0.1:notaport/db")
        .await
        .err()
        .unwrap();
    assert!(
        e.to_string().contains("PostgreSQL") && !e.to_string().contains("secret"),
        "{e}"
    );
    let unreachable = format!(
        "postgres://x:secret@127.0.0.1:{}/db",
        support::process::free_port()
    );
    let a = runway::store::archive::keeper::open(&unreachable)
        .await
        .unwrap();
    let e = a
        .put(&entry(
            "team-a",
            "r",
            "u",
            "2026-12-01T10:00:00Z",
            "2026-12-01T10:00:01Z",
        ))
        .await;
    let said = e.unwrap_err().to_string();
    assert!(
        said.contains("PostgreSQL") && !said.contains("secret"),
        "{said}"
    );
}

const SHORT_LIVED: &str = r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: short, namespace: NS }
spec:
  tool: { description: "Asks, then is deleted a moment after it ends." }
  execution: { ttlAfterFinished: 1s }
  steps:
    - name: ask
      input: { requests: [ { name: go, message: "Go?", requestedSchema: { type: object, properties: { note: { type: string } } } } ] }
  result: { content: [ { type: text, text: "went: {{ inputs.go.note }}" } ] }
"#;

/// Wait (on the store's watch) until Run `name` of team-a is deleted.
async fn deleted(mcp: &Mcp, name: &str) {
    let store = mcp.store();
    let mut watch = store.watch(Some(store.resource_version().await.unwrap()));
    let gone = async {
        if store.get("team-a", name).await.unwrap().is_none() {
            return;
        }
        while let Some(ev) = watch.next().await {
            if let runway::store::WatchEvent::Deleted(r) = ev.unwrap()
                && r.metadata.name.as_deref() == Some(name)
            {
                return;
            }
        }
    };
    tokio::time::timeout(PATIENCE, gone)
        .await
        .unwrap_or_else(|_| panic!("{name} was not deleted"));
}

fn listed(r: &support::mcp::Reply) -> Vec<String> {
    r.result()["structuredContent"]["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["taskId"].as_str().unwrap().to_owned())
        .collect()
}

/// Start one `short` Run as alice and answer its question with `note`: its task id.
async fn answered(alice: &support::mcp::Client, note: &str) -> String {
    let r = alice.call("short", json!({})).await;
    let id = r.result()["taskId"].as_str().unwrap().to_owned();
    alice.await_status(&id, "input_required").await;
    alice
        .update(
            &id,
            json!({"ask.go": {"action": "accept", "content": {"note": note}}}),
        )
        .await
        .assert_complete();
    id
}

/// Start one `short` Run as alice, answer it, and wait until the store has deleted it.
async fn finished_and_deleted(mcp: &Mcp) -> String {
    let id = answered(&mcp.client("alice-token"), "ship it").await;
    deleted(mcp, &id).await;
    id
}

async fn read_back(mcp: &Mcp) {
    let id = finished_and_deleted(mcp).await;
    let alice = mcp.client("alice-token");
    // The live views no longer have it; the archive does, whole.
    assert!(!listed(&alice.call("runway_list_runs", json!({})).await).contains(&id));
    let got = alice
        .call("runway_get_run", json!({"taskId": id, "archived": true}))
        .await;
    let full = &got.result()["structuredContent"];
    assert_eq!(full["archived"], true);
    assert_eq!(full["phase"], "Succeeded");
    assert_eq!(full["requestedBy"]["username"], "alice");
    assert_eq!(full["answers"][0]["content"]["note"], "ship it");
    assert_eq!(full["answers"][0]["answeredBy"], "alice");
    assert!(full["answers"][0]["answeredAt"].is_string());
    assert_eq!(full["result"]["content"][0]["text"], "went: ship it");
    let reasons = got.event_reasons();
    assert!(
        reasons.iter().any(|r| r == "InputAnswered") && reasons.iter().any(|r| r == "Finished"),
        "{reasons:?}"
    );
    assert_eq!(full["youMayRetry"], false);
    let list = alice
        .call(
            "runway_list_runs",
            json!({"archived": true, "workflow": "short"}),
        )
        .await;
    assert_eq!(listed(&list), std::slice::from_ref(&id));
    assert_eq!(
        list.result()["structuredContent"]["runs"][0]["archived"],
        true
    );

    // The owner rule of live Runs: dave may get runs but did not request or answer it; bob
    // may list runs; carol is of another namespace.
    let dave = mcp.client("dave-token");
    let refused = dave
        .call("runway_get_run", json!({"taskId": id, "archived": true}))
        .await;
    assert_eq!(refused.error_code(), -32602);
    assert!(
        listed(
            &dave
                .call("runway_list_runs", json!({"archived": true}))
                .await
        )
        .is_empty()
    );
    // A 2025-era session (initialize) reads the archive through the same tools.
    let old = support::mcp::Old::connect(&mcp.url(), "alice-token", json!({})).await;
    let r = old
        .result(
            "tools/call",
            json!({"name": "runway_list_runs", "arguments": {"archived": true}}),
        )
        .await;
    assert_eq!(
        r["structuredContent"]["runs"][0]["taskId"],
        id.as_str(),
        "{r}"
    );
    let r = old
        .result(
            "tools/call",
            json!({"name": "runway_get_run", "arguments": {"taskId": id, "archived": true}}),
        )
        .await;
    assert_eq!(
        r["structuredContent"]["answers"][0]["answeredBy"], "alice",
        "{r}"
    );
    let bob = mcp.client("bob-token");
    assert_eq!(
        listed(
            &bob.call("runway_list_runs", json!({"archived": true}))
                .await
        ),
        std::slice::from_ref(&id)
    );
    let carol = support::mcp::Client::new(
        &format!("http://{}", mcp.addr),
        Some("carol-token"),
        "/namespaces/team-b/mcp",
    );
    assert!(
        listed(
            &carol
                .call("runway_list_runs", json!({"archived": true}))
                .await
        )
        .is_empty()
    );
    let elsewhere = carol
        .call("runway_get_run", json!({"taskId": id, "archived": true}))
        .await;
    assert_eq!(elsewhere.error_code(), -32602);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_archives_a_run_before_its_ttl_deletes_it_and_reads_it_back_under_the_owner_rule() {
    let mcp = Mcp::start(&[("wf.yaml", SHORT_LIVED)]).await;
    read_back(&mcp).await;
    // The archive lives in the database file: a restart reads it back.
    let dir = mcp.stop().await;
    let mcp = Mcp::start_in(dir).await;
    let alice = mcp.client("alice-token");
    assert_eq!(
        listed(
            &alice
                .call("runway_list_runs", json!({"archived": true}))
                .await
        )
        .len(),
        1
    );
}

fn postgres_settings(url: String) -> Settings {
    Settings {
        address: Some(url),
        retention: Default::default(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_archives_into_postgres_as_the_operator_does() {
    let dir = Mcp::prepare(&[("wf.yaml", SHORT_LIVED)]);
    let settings = postgres_settings(support::postgres::database());
    let mcp = Mcp::start_archived(dir, |_| {}, settings).await;
    read_back(&mcp).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_archive_asking_for_one_is_a_clear_error() {
    let dir = Mcp::prepare(&[("wf.yaml", SHORT_LIVED)]);
    let mcp = Mcp::start_archived(dir, |_| {}, Settings::default()).await;
    let alice = mcp.client("alice-token");
    for (tool, args) in [
        ("runway_list_runs", json!({"archived": true})),
        (
            "runway_get_run",
            json!({"taskId": "gone", "archived": true}),
        ),
    ] {
        let r = alice.call(tool, args).await;
        assert_eq!(r.error_code(), -32602);
        let said = r.last()["error"]["message"].as_str().unwrap();
        assert!(said.contains("no archive"), "{said}");
    }
    // And a Run whose time is over is simply deleted.
    finished_and_deleted(&mcp).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_stays_in_the_store_while_the_archive_refuses_it_and_goes_once_archived() {
    let url = support::postgres::database();
    let db = url.rsplit('/').next().unwrap().to_owned();
    let pg = support::postgres::server();
    let dir = Mcp::prepare(&[("wf.yaml", SHORT_LIVED)]);
    let mcp = Mcp::start_archived(dir, |_| {}, postgres_settings(url)).await;
    // The archive's table is away: every write fails.
    pg.psql(&db, "ALTER TABLE archived_runs RENAME TO elsewhere");
    let alice = mcp.client("alice-token");
    let id = answered(&alice, "x").await;
    let refused = wait_for_event(&alice, &id, "ArchiveFailed").await;
    assert!(refused.contains("not deleted yet"), "{refused}");
    let run = mcp.store().get("team-a", &id).await.unwrap();
    assert_eq!(
        run.map(|r| r.phase()),
        Some(RunPhase::Succeeded),
        "kept while unarchived"
    );
    pg.psql(&db, "ALTER TABLE elsewhere RENAME TO archived_runs");
    deleted(&mcp, &id).await;
    let rows = pg.psql(
        &db,
        &format!(
            "SELECT count(*) FROM archived_runs WHERE entry->'run'->'metadata'->>'name' = '{id}'"
        ),
    );
    assert_eq!(rows.trim(), "1");
}

const TICKING: &str = r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: tick, namespace: NS }
spec:
  tool: { description: "Ends at once, every second; keeps one." }
  steps: [ { name: work, delay: { duration: 10ms } } ]
  schedules:
    - { name: every-second, cron: "* * * * * *", successfulRunsHistoryLimit: 1 }
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduled_run_the_archive_refuses_is_kept_with_an_event_and_goes_once_archived() {
    let url = support::postgres::database();
    let db = url.rsplit('/').next().unwrap().to_owned();
    let pg = support::postgres::server();
    let dir = Mcp::prepare(&[("wf.yaml", TICKING)]);
    let mcp = Mcp::start_archived(dir, |_| {}, postgres_settings(url)).await;
    pg.psql(&db, "ALTER TABLE archived_runs RENAME TO elsewhere");
    // Past the history limit, the oldest succeeded Run is let go, and kept unarchived.
    let store = mcp.store();
    let mut watch = store.watch(None);
    let oldest = tokio::time::timeout(PATIENCE, async {
        loop {
            let mut done: Vec<Run> = store
                .list(Some("team-a"), &Default::default())
                .await
                .unwrap()
                .into_iter()
                .filter(|r| r.phase() == RunPhase::Succeeded)
                .map(|r| (*r).clone())
                .collect();
            if done.len() >= 3 {
                done.sort_by_key(|r| r.metadata.creation_timestamp.clone().map(|t| t.0));
                return done.remove(0).metadata.name.unwrap();
            }
            watch.next().await;
        }
    })
    .await
    .expect("three scheduled Runs succeed");
    let olga = mcp.client("olga-token");
    let refused = wait_for_event(&olga, &oldest, "ArchiveFailed").await;
    assert!(refused.contains("not deleted yet"), "{refused}");
    pg.psql(&db, "ALTER TABLE elsewhere RENAME TO archived_runs");
    deleted(&mcp, &oldest).await;
    let rows = pg.psql(
        &db,
        &format!(
            "SELECT count(*) FROM archived_runs WHERE entry->'run'->'metadata'->>'name' = '{oldest}'"
        ),
    );
    assert_eq!(rows.trim(), "1");
}

/// Follow the Run's Events (through `runway_get_run`, as a person would) until one with
/// `reason` shows; its message.
async fn wait_for_event(c: &support::mcp::Client, id: &str, reason: &str) -> String {
    let look = async {
        loop {
            let r = c.call("runway_get_run", json!({"taskId": id})).await;
            let events: Vec<Value> = r.result()["structuredContent"]["events"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            if let Some(e) = events.iter().find(|e| e["reason"] == reason) {
                return e["message"].as_str().unwrap_or_default().to_owned();
            }
            // Events have no feed to follow here; the archive is retried every 10 s.
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    };
    tokio::time::timeout(PATIENCE, look)
        .await
        .unwrap_or_else(|_| panic!("no {reason} event on {id}"))
}
