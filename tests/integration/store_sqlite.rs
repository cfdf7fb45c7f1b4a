//! The store contract against the embedded SQLite store, plus what only a file store can show.

use crate::support;

use std::sync::Arc;

use futures::StreamExt;
use runway::api::{Run, RunPhase, RunStatus};
use runway::store::sqlite::SqliteStore;
use runway::store::{RunStore, StoreError, WatchEvent};
use serde_json::json;
use support::contract;
use support::harness::TempDir;

fn store() -> (TempDir, SqliteStore) {
    let dir = TempDir::new();
    let s = SqliteStore::open(&dir.path().join("runs.db")).unwrap();
    (dir, s)
}

#[tokio::test]
async fn create_get_list() {
    let (_d, s) = store();
    contract::create_get_list(&s).await;
}

#[tokio::test]
async fn conditional_updates() {
    let (_d, s) = store();
    contract::conditional_updates(&s).await;
}

#[tokio::test]
async fn spec_transition_rules() {
    let (_d, s) = store();
    contract::spec_transition_rules(&s).await;
}

#[tokio::test]
async fn nulls_in_arguments_and_answers_survive_spec_updates() {
    let (_d, s) = store();
    contract::nulls_survive_spec_updates(&s).await;
}

#[tokio::test]
async fn delete() {
    let (_d, s) = store();
    contract::delete(&s).await;
}

#[tokio::test]
async fn watch_and_resume() {
    let (_d, s) = store();
    contract::watch_and_resume(&s).await;
}

#[tokio::test]
async fn create_started() {
    let (_d, s) = store();
    contract::create_started(&s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_creates_of_one_name() {
    let (_d, s) = store();
    contract::concurrent_creates_of_one_name(&s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_answers_first_wins() {
    let (_d, s) = store();
    contract::concurrent_answers_first_wins(&s).await;
}

#[tokio::test]
async fn runs_survive_reopening_the_file() {
    let d = TempDir::new();
    let path = d.path().join("runs.db");
    let (rv, created) = {
        let s = SqliteStore::open(&path).unwrap();
        let c = s.create(contract::run("a", "keep", "wf")).await.unwrap();
        let mut st = c.clone();
        st.status = Some(RunStatus {
            phase: RunPhase::Waiting,
            ..Default::default()
        });
        let c = s.update_status(st).await.unwrap();
        (s.resource_version().await.unwrap(), (*c).clone())
    };
    let s = SqliteStore::open(&path).unwrap();
    assert_eq!(s.get("a", "keep").await.unwrap().unwrap(), created);
    assert_eq!(s.resource_version().await.unwrap(), rv);
    // resource versions keep increasing across restarts
    let next = s.create(contract::run("a", "next", "wf")).await.unwrap();
    assert!(
        next.metadata
            .resource_version
            .unwrap()
            .parse::<u64>()
            .unwrap()
            > rv.parse::<u64>().unwrap()
    );
}

/// A store holds every Run in memory: Runs of one Workflow version share one copy of its
/// snapshot, written or read back from the file, and the status loses nothing by it.
/// The embedded store writes a Run and its first status as one change, durable at once, and
/// refuses one without the metadata that status was decided from (it would not match it).
#[tokio::test]
async fn a_run_created_with_its_status_is_one_durable_change() {
    let d = TempDir::new();
    let path = d.path().join("runs.db");
    let created = {
        let s = SqliteStore::open(&path).unwrap();
        let mut bare = contract::run("a", "bare", "wf");
        bare.status = Some(RunStatus {
            phase: RunPhase::Succeeded,
            ..Default::default()
        });
        assert!(
            matches!(s.create_started(bare).await, Err(StoreError::Invalid(_))),
            "a status without the uid, generation and creation time it was decided from"
        );
        assert!(s.get("a", "bare").await.unwrap().is_none());

        let since = s.resource_version().await.unwrap();
        let mut changes = s.watch(Some(since));
        let mut decided = contract::run("a", "one", "wf");
        decided.metadata.uid = Some(runway::store::new_uid());
        decided.metadata.generation = Some(1);
        decided.metadata.creation_timestamp = Some(runway::api::kube_time(jiff::Timestamp::now()));
        decided.status = Some(RunStatus {
            phase: RunPhase::Succeeded,
            ..Default::default()
        });
        let c = s.create_started(decided).await.unwrap();
        match changes.next().await {
            Some(Ok(WatchEvent::Applied(r))) => assert_eq!(*r, c),
            other => panic!("the first change is the Run with its status: {other:?}"),
        }
        c
    };
    let s = SqliteStore::open(&path).unwrap();
    assert_eq!(s.get("a", "one").await.unwrap().unwrap(), created);
}

#[tokio::test]
async fn runs_of_one_workflow_version_hold_one_copy_of_its_snapshot() {
    let d = TempDir::new();
    let path = d.path().join("runs.db");
    let snapshot = || json!({"steps": [{"name": "s", "delay": {"duration": "0s"}}]});
    let write = |s: SqliteStore, name: &'static str, snapshot: serde_json::Value| async move {
        let mut run = s.create(contract::run("a", name, "wf")).await.unwrap();
        run.status = Some(RunStatus {
            phase: RunPhase::Running,
            workflow: Some(Arc::new(snapshot)),
            ..Default::default()
        });
        s.update_status(run).await.unwrap();
    };
    let held = |run: &Arc<Run>| Arc::clone(run.status.as_ref().unwrap().workflow.as_ref().unwrap());
    for reopened in [false, true] {
        let s = SqliteStore::open(&path).unwrap();
        if !reopened {
            write(s.clone(), "one", snapshot()).await;
            write(s.clone(), "two", snapshot()).await;
            write(s.clone(), "other", json!({"steps": []})).await;
        }
        let get = |name| {
            let s = s.clone();
            async move { s.get_shared("a", name).await.unwrap().unwrap() }
        };
        let (one, two, other) = (get("one").await, get("two").await, get("other").await);
        assert!(
            Arc::ptr_eq(&held(&one), &held(&two)),
            "reopened: {reopened}"
        );
        assert!(!Arc::ptr_eq(&held(&one), &held(&other)));
        assert_eq!(*held(&two), snapshot());
        assert_eq!(*held(&other), json!({"steps": []}));
    }
}

#[tokio::test]
async fn a_watch_from_forgotten_history_is_gone() {
    let d = TempDir::new();
    let path = d.path().join("runs.db");
    {
        let s = SqliteStore::open(&path).unwrap();
        s.create(contract::run("a", "one", "wf")).await.unwrap();
        s.create(contract::run("a", "two", "wf")).await.unwrap();
    }
    let s = SqliteStore::open(&path).unwrap();
    use futures::StreamExt;
    let mut w = s.watch(Some("1".into()));
    assert_eq!(w.next().await.unwrap().unwrap_err(), StoreError::Gone);
}

#[test]
fn an_unwritable_path_is_a_clear_error() {
    let err = SqliteStore::open(std::path::Path::new("/proc/runway/nope.db"))
        .err()
        .unwrap();
    assert!(err.to_string().contains("store backend"), "{err}");
}

/// A database whose version counter cannot be read is refused at start: counting again from
/// zero would hand out versions the stored Runs already carry.
#[tokio::test]
async fn an_unreadable_version_counter_is_a_clear_error() {
    let d = TempDir::new();
    let path = d.path().join("runs.db");
    let s = SqliteStore::open(&path).unwrap();
    s.create(contract::run("a", "kept", "wf")).await.unwrap();
    drop(s);
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute("UPDATE kv SET v = 'seven' WHERE k = 'rv'", [])
        .unwrap();
    let err = SqliteStore::open(&path).err().unwrap();
    assert!(err.to_string().contains("store backend"), "{err}");
}

/// A statement SQLite answers by rolling the whole transaction back (an I/O error, a full disk;
/// here a trigger) fails every write of its group, and none of them is on disk afterwards: the
/// writes after it in the group must not run on their own, committed one by one, while their
/// callers are told they failed.
#[tokio::test]
async fn a_group_that_fails_leaves_nothing_of_it_on_disk() {
    let d = TempDir::new();
    let path = d.path().join("runs.db");
    let s = SqliteStore::open(&path).unwrap();
    let other = rusqlite::Connection::open(&path).unwrap();
    other
        .execute_batch(
            "CREATE TRIGGER refuse BEFORE INSERT ON runs WHEN NEW.name = 'refused'
             BEGIN SELECT RAISE(ROLLBACK, 'refused'); END;",
        )
        .unwrap();
    // Hold the write lock so that the writes below queue up and are committed as one group.
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    let names = ["before", "refused", "after-1", "after-2", "after-3"];
    let answers = {
        let all = futures::future::join_all(names.map(|n| s.create(contract::run("a", n, "wf"))));
        futures::pin_mut!(all);
        // One poll hands every write to the writer, in order.
        assert!(futures::poll!(all.as_mut()).is_pending());
        other.execute_batch("COMMIT").unwrap();
        all.await
    };
    assert!(answers[1].is_err(), "the refused write fails");
    let said: Vec<bool> = answers.iter().map(Result::is_ok).collect();
    let mut held = Vec::new();
    for n in names {
        held.push(s.get("a", n).await.unwrap().is_some());
    }
    assert_eq!(held, said, "the store holds what it said it wrote");
    drop(s);
    let reopened = SqliteStore::open(&path).unwrap();
    let mut stored = Vec::new();
    for n in names {
        stored.push(reopened.get("a", n).await.unwrap().is_some());
    }
    assert_eq!(stored, said, "the file holds what the store said it wrote");
    // The store goes on writing.
    reopened
        .create(contract::run("a", "later", "wf"))
        .await
        .unwrap();
}

/// Two stores on one file would count versions each on their own, hand out the same ones and
/// overwrite each other's Runs (a restart that opens the file while the old process still
/// writes): a second store waits for the first to let go, and says why when it does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_in_use_is_not_opened_twice() {
    let d = TempDir::new();
    let path = d.path().join("runs.db");
    let s = SqliteStore::open(&path).unwrap();
    s.create(contract::run("a", "kept", "wf")).await.unwrap();
    let p = path.clone();
    let err = tokio::task::spawn_blocking(move || SqliteStore::open(&p).err().unwrap())
        .await
        .unwrap();
    assert!(
        err.to_string().contains("is in use by another store"),
        "{err}"
    );
    // One that starts while the first is still there opens the file once it has let go.
    let p = path.clone();
    let second = tokio::task::spawn_blocking(move || SqliteStore::open(&p));
    drop(s);
    let second = second.await.unwrap().unwrap();
    assert!(second.get("a", "kept").await.unwrap().is_some());
}

/// A stored Run this version cannot read (one written by a newer version) is left out of
/// reads; a create under its name is refused rather than overwriting it.
#[tokio::test]
async fn a_create_does_not_overwrite_a_run_that_cannot_be_read() {
    let d = TempDir::new();
    let path = d.path().join("runs.db");
    let s = SqliteStore::open(&path).unwrap();
    s.create(contract::run("a", "newer", "wf")).await.unwrap();
    drop(s);
    let raw = rusqlite::Connection::open(&path).unwrap();
    raw.execute(
        "UPDATE runs SET body = '{\"apiVersion\": 2}' WHERE name = 'newer'",
        [],
    )
    .unwrap();
    let s = SqliteStore::open(&path).unwrap();
    assert_eq!(s.get("a", "newer").await.unwrap(), None);
    let again = s.create(contract::run("a", "newer", "wf")).await;
    assert_eq!(again.unwrap_err(), StoreError::AlreadyExists);
    let body: String = raw
        .query_row("SELECT body FROM runs WHERE name = 'newer'", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(body, "{\"apiVersion\": 2}");
}

/// A row whose body names another Run (or none) is left out like an unreadable one: cached
/// under the body's name, its writes and its delete would go to another row and the row would
/// come back at the next start. The server starts all the same.
#[tokio::test]
async fn a_row_whose_body_names_another_run_is_left_out() {
    let d = TempDir::new();
    let path = d.path().join("runs.db");
    let s = SqliteStore::open(&path).unwrap();
    s.create(contract::run("a", "moved", "wf")).await.unwrap();
    s.create(contract::run("a", "nameless", "wf"))
        .await
        .unwrap();
    s.create(contract::run("a", "fine", "wf")).await.unwrap();
    drop(s);
    let raw = rusqlite::Connection::open(&path).unwrap();
    raw.execute(
        "UPDATE runs SET body = json_set(body, '$.metadata.name', 'elsewhere') WHERE name = 'moved'",
        [],
    )
    .unwrap();
    raw.execute(
        "UPDATE runs SET body = json_remove(body, '$.metadata.namespace') WHERE name = 'nameless'",
        [],
    )
    .unwrap();
    let s = SqliteStore::open(&path).unwrap();
    assert!(s.get("a", "fine").await.unwrap().is_some());
    for name in ["moved", "elsewhere", "nameless"] {
        assert_eq!(s.get("a", name).await.unwrap(), None, "{name}");
    }
    assert_eq!(
        s.create(contract::run("a", "moved", "wf"))
            .await
            .unwrap_err(),
        StoreError::AlreadyExists
    );
}

/// Versions go on from the newest a stored Run carries, even when the counter is behind it
/// (the table restored without it): a version handed out twice would let a stale conditional
/// write through.
#[tokio::test]
async fn versions_go_on_past_the_stored_runs_when_the_counter_is_behind() {
    let d = TempDir::new();
    let path = d.path().join("runs.db");
    let s = SqliteStore::open(&path).unwrap();
    let kept = s.create(contract::run("a", "kept", "wf")).await.unwrap();
    drop(s);
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute("DELETE FROM kv WHERE k = 'rv'", [])
        .unwrap();
    let s = SqliteStore::open(&path).unwrap();
    let version = |r: &Run| -> u64 {
        r.metadata
            .resource_version
            .as_deref()
            .unwrap()
            .parse()
            .unwrap()
    };
    let next = s.create(contract::run("a", "next", "wf")).await.unwrap();
    assert!(version(&next) > version(&kept));
    assert!(s.resource_version().await.unwrap().parse::<u64>().unwrap() >= version(&next));
}
