//! The `runway` command: client subcommands against a real `runway serve`, and startup errors.

use crate::support;

use std::process::Stdio;

use serde_json::json;
use support::harness::TempDir;
use support::mcp::{AUTH, Client};
use support::process::{Process, free_port};
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

const WORKFLOWS: &str = r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: approve, namespace: team-a }
spec:
  tool:
    description: Asks for an approval and a reason.
    inputSchema: { type: object, properties: { change: { type: string } }, required: [change] }
  steps:
    - name: review
      input:
        requests:
          - name: decision
            message: "Approve {{ args.change }}?"
            requestedSchema:
              type: object
              properties: { approve: { type: boolean }, reason: { type: string } }
    - name: rejected
      when: "not inputs.decision.approve"
      fail: { message: "rejected: {{ inputs.decision.reason }}" }
  result:
    content: [ { type: text, text: "approved {{ args.change }}: {{ inputs.decision.reason }}" } ]
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: nap, namespace: team-a }
spec:
  tool: { description: Sleeps. }
  steps: [ { name: sleep, delay: { duration: 1h } } ]
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: place, namespace: team-a }
spec:
  tool: { description: Asks where and how many. }
  steps:
    - name: ask
      input:
        requests:
          - name: where
            message: "Where to?"
            requestedSchema:
              type: object
              properties:
                zone: { type: string, enum: [eu, us] }
                count: { type: integer, minimum: 1, default: 2 }
                note: { type: string }
              required: [zone]
  result: { content: [ { type: text, text: "{{ inputs.where.count }} in {{ inputs.where.zone }}, note: {{ inputs.where.note | default('none') }}" } ] }
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: label, namespace: team-a }
spec:
  tool: { description: "Asks for tags, then for a note." }
  steps:
    - name: ask
      input:
        requests:
          - name: tags
            message: "Which tags?"
            requestedSchema:
              type: object
              properties: { picked: { type: array, items: { type: string, enum: [x, "y", z] } } }
              required: [picked]
          - name: about
            message: "Anything to add?"
            requestedSchema: { type: object, properties: { note: { type: string } } }
  result: { content: [ { type: text, text: "{{ inputs.tags.picked | join(',') }} / {{ inputs.about.note }}" } ] }
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: gated, namespace: team-a }
spec:
  tool: { description: Needs an ops approver other than the requester. }
  execution: { pollInterval: 100ms }
  steps:
    - name: ask
      input:
        requests:
          - { name: ok, message: "ok?", approvers: { groups: [ops] }, distinctFromRequester: true }
  result: { content: [ { type: text, text: "approved" } ] }
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: broken, namespace: team-a }
spec:
  tool: { description: Fails with a protocol error. }
  steps: [ { name: f, fail: { error: { code: -31042, message: "upstream broke" } } } ]
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: pause, namespace: team-a }
spec:
  tool: { description: Pauses for two seconds. }
  execution: { pollInterval: 100ms }
  steps: [ { name: sleep, delay: { duration: 2s } } ]
  result: { content: [ { type: text, text: "paused" } ] }
"#;

fn runway() -> Command {
    Command::new(env!("CARGO_BIN_EXE_runway"))
}

#[tokio::test]
async fn version_names_the_release_and_the_commit() {
    let out = runway().arg("--version").output().await.unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8(out.stdout).unwrap().trim(),
        format!(
            "runway {} (commit {})",
            env!("CARGO_PKG_VERSION"),
            support::harness::head_commit()
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_says_whether_a_server_is_up_and_why_not() {
    let (dir, p) = setup().await;
    let mut up = client_cmd(&dir, &p);
    up.arg("check").arg(format!("--ready={}/readyz", p.base()));
    let (code, out, err) = run_with_stdin(up, "").await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out.trim(),
        format!(
            "runway {} answers at {}/namespaces/team-a/mcp",
            env!("CARGO_PKG_VERSION"),
            p.base()
        )
    );
    // A readiness URL that does not answer 2xx stops the check before MCP is asked.
    let mut unready = client_cmd(&dir, &p);
    unready
        .arg("check")
        .arg(format!("--ready={}/mcp", p.base()));
    let (code, _, err) = run_with_stdin(unready, "").await;
    assert_eq!(code, 2);
    assert!(err.contains("/mcp answered HTTP 405"), "{err}");
    // A token the server does not take.
    std::fs::write(dir.path().join("bad.token"), "nobody\n").unwrap();
    let mut refused = client_cmd(&dir, &p);
    refused
        .arg("check")
        .env("RUNWAY_TOKEN_FILE", dir.path().join("bad.token"));
    let (code, _, err) = run_with_stdin(refused, "").await;
    assert_eq!(code, 2);
    assert!(
        err.contains("HTTP 401") && err.contains("not accepted"),
        "{err}"
    );
    // Nothing listening.
    let mut down = client_cmd(&dir, &p);
    down.arg("check")
        .arg(format!("--url=http://127.0.0.1:{}/mcp", free_port()));
    let (code, _, err) = run_with_stdin(down, "").await;
    assert_eq!(code, 2);
    assert!(err.contains("cannot reach"), "{err}");
}

async fn setup() -> (TempDir, Process) {
    let dir = TempDir::new();
    std::fs::create_dir_all(dir.path().join("workflows")).unwrap();
    std::fs::write(dir.path().join("workflows/wf.yaml"), WORKFLOWS).unwrap();
    std::fs::write(dir.path().join("auth.yaml"), AUTH).unwrap();
    std::fs::write(dir.path().join("alice.token"), "alice-token\n").unwrap();
    let p = Process::start(dir.path(), 0).await;
    (dir, p)
}

fn client_cmd(dir: &TempDir, p: &Process) -> Command {
    let mut c = runway();
    c.env("RUNWAY_URL", format!("{}/namespaces/team-a/mcp", p.base()))
        .env("RUNWAY_TOKEN_FILE", dir.path().join("alice.token"))
        .env_remove("RUST_LOG");
    c
}

async fn run_with_stdin(mut cmd: Command, stdin: &str) -> (i32, String, String) {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .await
        .unwrap();
    let out = child.wait_with_output().await.unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runway_call_drives_an_approval_through_the_terminal() {
    let (dir, p) = setup().await;
    // as a task: the prompt is answered on stdin, the answer goes through tasks/update
    let mut cmd = client_cmd(&dir, &p);
    cmd.args(["call", "approve", "--arg", "change=v2"]);
    let (code, out, err) = run_with_stdin(cmd, "yes\nlooks good\n").await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), "approved v2: looks good");
    assert!(err.contains("Approve v2?"), "{err}");
    assert!(err.contains("task approve-"), "{err}");

    // blocking, through MRTR; a rejection is a tool error and exit status 1
    let mut cmd = client_cmd(&dir, &p);
    cmd.args(["call", "approve", "--arg", "change=v3", "--no-task"]);
    let (code, out, _) = run_with_stdin(cmd, "maybe\nno\ntoo risky\n").await;
    assert_eq!(code, 1);
    assert_eq!(out.trim(), "rejected: too risky");

    // unknown tools and bad arguments are clear errors with status 2
    let mut cmd = client_cmd(&dir, &p);
    cmd.args(["call", "nope"]);
    let (code, _, err) = run_with_stdin(cmd, "").await;
    assert_eq!(code, 2);
    assert!(err.contains("unknown tool"), "{err}");
    let mut cmd = client_cmd(&dir, &p);
    cmd.args(["call", "approve", "--arg", "oops"]);
    let (code, _, err) = run_with_stdin(cmd, "").await;
    assert_eq!(code, 2);
    assert!(err.contains("key=value"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runway_tasks_get_answer_watch_and_cancel() {
    let (dir, p) = setup().await;
    let c = Client::new(&p.base(), Some("alice-token"), "/namespaces/team-a/mcp");
    let approve = c.call("approve", json!({"change": "x"})).await.result()["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let nap = c.call("nap", json!({})).await.result()["taskId"]
        .as_str()
        .unwrap()
        .to_owned();

    // watch follows the task until it ends; start it before answering
    let mut watch = client_cmd(&dir, &p);
    watch
        .args(["tasks", "watch", &approve])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let watching = watch.spawn().unwrap();

    let mut get = client_cmd(&dir, &p);
    get.args(["tasks", "get", &nap]);
    let (code, out, err) = run_with_stdin(get, "").await;
    assert_eq!(code, 0, "{err}");
    let task: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(task["taskId"], nap.as_str());

    // wait until the approval is asking, then answer it from the command line
    c.await_status(&approve, "input_required").await;
    let answer = |key: &str, content: &str| {
        let mut cmd = client_cmd(&dir, &p);
        cmd.args(["tasks", "answer", &approve, key, "--accept", content]);
        run_with_stdin(cmd, "")
    };
    // A mistyped key and an answer the question's schema refuses are not taken: exit 3, why.
    let (code, _, err) = answer("review.decison", r#"{"approve": true}"#).await;
    assert_eq!(code, 3, "{err}");
    assert!(
        err.contains("not an open question") && err.contains("open: review.decision"),
        "{err}"
    );
    let (code, _, err) = answer("review.decision", r#"{"approve": "yes"}"#).await;
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("boolean"), "{err}");
    let (code, _, err) = answer("review.decision", r#"{"approve": true, "reason": "ok"}"#).await;
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("answer to review.decision taken"), "{err}");
    let out = watching.wait_with_output().await.unwrap();
    assert_eq!(out.status.code(), Some(0));
    let lines = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        lines.lines().next().unwrap().starts_with("input_required"),
        "{lines}"
    );
    assert!(
        lines.lines().last().unwrap().starts_with("completed"),
        "{lines}"
    );

    // Answered already, and the task has ended: not taken.
    let (code, _, err) = answer("review.decision", r#"{"approve": false}"#).await;
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("asks nothing now"), "{err}");

    // The list shows both tasks, with the console's filters.
    let list = |args: &[&str]| {
        let mut cmd = client_cmd(&dir, &p);
        cmd.args(["tasks", "list"]).args(args);
        run_with_stdin(cmd, "")
    };
    let (code, out, err) = list(&[]).await;
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0].starts_with("TASK") && lines[0].contains("REQUESTED BY"),
        "{out}"
    );
    assert_eq!(lines.len(), 3, "{out}");
    assert!(
        lines[1].starts_with(&nap) && lines[2].starts_with(&approve),
        "newest first: {out}"
    );
    let (_, out, _) = list(&["--oldest", "--limit", "1"]).await;
    assert!(out.lines().nth(1).unwrap().starts_with(&approve), "{out}");
    let (_, out, _) = list(&["--phase", "Succeeded", "--json"]).await;
    let runs: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(runs.as_array().unwrap().len(), 1);
    assert_eq!(runs[0]["taskId"], approve.as_str());
    let (code, out, err) = list(&["--since", "1h", "-l", "runway.dev/workflow=nap"]).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().count(), 2, "{out}");
    let (code, out, err) = list(&["--until", "2h"]).await;
    assert_eq!((code, out.as_str()), (0, ""), "{err}");
    assert!(err.contains("no tasks"), "{err}");
    let (code, _, err) = list(&["--since", "last week"]).await;
    assert_eq!(code, 2);
    assert!(err.contains("--since") && err.contains("RFC 3339"), "{err}");
    let (code, _, err) = list(&["-l", "a b"]).await;
    assert_eq!(code, 2);
    assert!(err.contains("labels"), "{err}");

    // Pause and resume say what they did; a finished task takes neither.
    let tasks = |args: &[&str]| {
        let mut cmd = client_cmd(&dir, &p);
        cmd.arg("tasks").args(args);
        run_with_stdin(cmd, "")
    };
    let (code, _, err) = tasks(&["pause", &nap, "--reason", "freeze"]).await;
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains(&format!("pause of task {nap} requested")),
        "{err}"
    );
    let (code, _, err) = tasks(&["pause", &nap]).await;
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("paused already"), "{err}");
    let (code, _, err) = tasks(&["resume", &nap]).await;
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains(&format!("resume of task {nap} requested")),
        "{err}"
    );
    let (code, _, err) = tasks(&["resume", &nap]).await;
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("not paused"), "{err}");
    let (code, _, err) = tasks(&["pause", &approve]).await;
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("has finished"), "{err}");

    // Cancel says what it did: requested for a running task, nothing for an ended one.
    let cancel = |id: &str| {
        let mut cmd = client_cmd(&dir, &p);
        cmd.args(["tasks", "cancel", id]);
        run_with_stdin(cmd, "")
    };
    let (code, _, err) = cancel(&nap).await;
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains(&format!("cancel of task {nap} requested (it was working)"))
            || err.contains(&format!("task {nap} cancelled (it was working")),
        "{err}"
    );
    let (code, _, err) = cancel(&approve).await;
    assert_eq!(code, 3, "{err}");
    assert!(
        err.contains("had already ended (completed); nothing to cancel"),
        "{err}"
    );
    let mut watch = client_cmd(&dir, &p);
    watch.args(["tasks", "watch", &nap]);
    let (code, out, _) = run_with_stdin(watch, "").await;
    assert_eq!(code, 1, "a cancelled task exits 1");
    assert!(
        out.trim().lines().last().unwrap().starts_with("cancelled"),
        "{out}"
    );

    // A cancelled task is retried as a new one; a completed one is not.
    let (code, out, err) = tasks(&["retry", &nap]).await;
    assert_eq!(code, 0, "{err}");
    let again = out.trim();
    assert!(again.starts_with("nap-") && again != nap, "{out}");
    assert!(
        err.contains(&format!("task {nap} retried as {again}; reused: nothing")),
        "{err}"
    );
    assert_eq!(c.get(again).await.result()["status"], "working");
    let (code, _, err) = tasks(&["retry", &approve, "--arg", "change=y"]).await;
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("has not failed"), "{err}");

    // Someone who may read Runs but not watch them is told so.
    std::fs::write(dir.path().join("rita.token"), "reader-token").unwrap();
    let mut watch = client_cmd(&dir, &p);
    watch
        .args(["tasks", "watch", &nap])
        .env("RUNWAY_TOKEN_FILE", dir.path().join("rita.token"));
    let (code, _, err) = run_with_stdin(watch, "").await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("rita may not watch runs"), "{err}");

    let mut missing = client_cmd(&dir, &p);
    missing.args(["tasks", "get", "nap-aaaaaaaaaaaaaaaaaaaaaaaaaa"]);
    let (code, _, err) = run_with_stdin(missing, "").await;
    assert_eq!(code, 2);
    assert!(err.contains("unknown task"), "{err}");
}

#[tokio::test]
async fn startup_errors_are_one_line_and_exit_2() {
    let dir = TempDir::new();
    std::fs::create_dir_all(dir.path().join("wf")).unwrap();
    let wf = dir.path().join("wf");
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec!["serve".into(), "--bogus".into()],
            "unexpected argument",
        ),
        (
            vec![
                "serve".into(),
                "--workflows".into(),
                wf.display().to_string(),
                "--db".into(),
                "/proc/none/x.db".into(),
                "--no-auth".into(),
            ],
            "cannot open database",
        ),
        (
            vec![
                "serve".into(),
                "--workflows".into(),
                "/nonexistent".into(),
                "--db".into(),
                dir.path().join("a.db").display().to_string(),
                "--no-auth".into(),
            ],
            "does not exist",
        ),
        (
            vec![
                "serve".into(),
                "--workflows".into(),
                wf.display().to_string(),
                "--db".into(),
                dir.path().join("b.db").display().to_string(),
                "--no-auth".into(),
                "--listen".into(),
                "0.0.0.0:0".into(),
            ],
            "loopback",
        ),
        (
            vec![
                "serve".into(),
                "--workflows".into(),
                wf.display().to_string(),
                "--db".into(),
                dir.path().join("c.db").display().to_string(),
            ],
            "--auth-file",
        ),
    ];
    for (args, needle) in cases {
        let out = runway().args(&args).output().await.unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

/// Send SIGINT to a child, as Ctrl-C in a terminal would.
async fn interrupt(child: &tokio::process::Child) {
    let pid = child.id().unwrap().to_string();
    let status = Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .await
        .unwrap();
    assert!(status.success());
}

/// Read the child's stderr until a line contains `needle`; returns that line.
async fn read_until(
    lines: &mut tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStderr>>,
    needle: &str,
) -> String {
    tokio::time::timeout(support::harness::PATIENCE, async {
        while let Some(l) = lines.next_line().await.unwrap() {
            if l.contains(needle) {
                return l;
            }
        }
        panic!("stderr ended before {needle:?}")
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_leaves_a_task_running_but_cancels_a_blocking_call() {
    use tokio::io::AsyncBufReadExt;
    let (dir, p) = setup().await;
    let c = Client::new(&p.base(), Some("alice-token"), "/namespaces/team-a/mcp");

    // a task keeps running; the client says where to find it
    let mut cmd = client_cmd(&dir, &p);
    cmd.args(["call", "nap"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut lines = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let line = read_until(&mut lines, "task nap-").await;
    let id = line.trim().strip_prefix("task ").unwrap().to_owned();
    c.await_status(&id, "working").await;
    interrupt(&child).await;
    read_until(&mut lines, "keeps running").await;
    assert_eq!(child.wait().await.unwrap().code(), Some(130));
    assert_eq!(c.get(&id).await.result()["status"], "working");

    // a blocking call owns its run: interrupting it cancels the run
    let mut cmd = client_cmd(&dir, &p);
    cmd.args(["call", "nap", "--no-task"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut lines = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    // A blocking call has no task id to print: find its Run in the database file. Another
    // process writes it, so there is no in-process event to wait on.
    let store_dir = dir.path().to_path_buf();
    let blocking = tokio::time::timeout(support::harness::PATIENCE, async {
        loop {
            if let Some(run) = newest_run(&store_dir, &[&id]).await {
                return run;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap();
    c.await_status(&blocking, "working").await;
    interrupt(&child).await;
    read_until(&mut lines, "cancelled").await;
    assert_eq!(child.wait().await.unwrap().code(), Some(130));
    let end = c.await_status(&blocking, "cancelled").await;
    assert_eq!(end["taskId"], blocking.as_str());
}

/// The name of a Run in the server's database other than `except` (read-only peek at the file).
async fn newest_run(dir: &std::path::Path, except: &[&String]) -> Option<String> {
    let conn = rusqlite::Connection::open_with_flags(
        dir.join("runs.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .ok()?;
    let mut stmt = conn
        .prepare("SELECT name FROM runs WHERE namespace = 'team-a'")
        .ok()?;
    let names: Vec<String> = stmt
        .query_map([], |r| r.get(0))
        .ok()?
        .filter_map(Result::ok)
        .collect();
    names
        .into_iter()
        .find(|n| n.starts_with("nap-") && !except.contains(&n))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runway_workflows_lists_status_and_fails_on_broken_manifests() {
    let dir = TempDir::new();
    let wf_dir = dir.path().join("workflows");
    std::fs::create_dir_all(&wf_dir).unwrap();
    std::fs::write(wf_dir.join("wf.yaml"), WORKFLOWS).unwrap();
    let list = || {
        let mut cmd = runway();
        cmd.args(["workflows", "--workflows"]).arg(&wf_dir);
        run_with_stdin(cmd, "")
    };
    let (code, out, err) = list().await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.lines()
            .any(|l| l.contains("approve") && l.contains("True")),
        "{out}"
    );

    std::fs::write(
        wf_dir.join("typo.yaml"),
        "apiVersion: runway.dev/v1alpha1\nkind: Workflow\nmetadata: { name: typo, namespace: team-a }\nspec:\n  stpes: []\n",
    )
    .unwrap();
    std::fs::write(
        wf_dir.join("kind.yaml"),
        "apiVersion: runway.dev/v1alpha1\nkind: Workfow\nmetadata: { name: k }\n",
    )
    .unwrap();
    let (code, out, err) = list().await;
    assert_eq!(code, 1, "{out}{err}");
    let row = out.lines().find(|l| l.contains(" typo ")).unwrap();
    assert!(
        row.contains("False")
            && row.contains("InvalidManifest")
            && row.contains("spec.stpes (line 5)"),
        "{row}"
    );
    assert!(
        err.contains("kind.yaml") && err.contains("kind Workfow"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runway_call_follows_its_task_across_a_server_restart() {
    use tokio::io::AsyncBufReadExt;
    let (dir, p) = setup().await;
    let port: u16 = p.base().rsplit(':').next().unwrap().parse().unwrap();
    let mut cmd = client_cmd(&dir, &p);
    cmd.args(["call", "pause"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut lines = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    read_until(&mut lines, "task pause-").await;
    p.kill9().await;
    read_until(&mut lines, "retrying").await;
    let _p = Process::start(dir.path(), port).await;
    read_until(&mut lines, "reconnected").await;
    let out = child.wait_with_output().await.unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "paused");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_at_a_prompt_leaves_and_says_how_to_come_back() {
    use tokio::io::AsyncBufReadExt;
    let (dir, p) = setup().await;
    let mut cmd = client_cmd(&dir, &p);
    cmd.args(["call", "approve", "--arg", "change=v9"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let _stdin = child.stdin.take();
    let mut lines = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let id = read_until(&mut lines, "task approve-").await;
    let id = id.trim().strip_prefix("task ").unwrap().to_owned();
    read_until(&mut lines, "Approve v9?").await;
    interrupt(&child).await;
    let line = read_until(&mut lines, "keeps running").await;
    assert!(line.contains(&format!("runway tasks get {id}")), "{line}");
    assert_eq!(child.wait().await.unwrap().code(), Some(130));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_errors_say_what_happened_in_the_users_terms() {
    let (dir, p) = setup().await;
    std::fs::write(dir.path().join("wrong.token"), "nope\n").unwrap();
    let unused = free_port();
    let cases: [(Vec<String>, Option<&str>, &str); 4] = [
        (
            vec![format!("{}/namespaces/team-a/mcp", p.base())],
            None,
            "HTTP 401 from",
        ),
        (
            vec![format!("{}/namespaces/team-a/mcp", p.base())],
            Some("wrong.token"),
            "token was not accepted",
        ),
        (
            vec![format!("http://127.0.0.1:{unused}/mcp")],
            Some("alice.token"),
            "cannot reach",
        ),
        (
            vec![format!("{}/nowhere", p.base())],
            Some("alice.token"),
            "HTTP 404",
        ),
    ];
    for (url, token, needle) in cases {
        let mut cmd = runway();
        cmd.env_remove("RUST_LOG")
            .env_remove("RUNWAY_TOKEN_FILE")
            .args(["call", "nap", "--url", &url[0]]);
        if let Some(t) = token {
            cmd.arg("--token-file").arg(dir.path().join(t));
        }
        let (code, _, err) = run_with_stdin(cmd, "").await;
        assert_eq!(code, 2, "{url:?}: {err}");
        assert!(err.contains(needle), "{url:?}: {err}");
        if token.is_none() {
            assert!(err.contains("pass --token-file"), "{err}");
        }
        assert!(
            !err.contains("rmcp") && !err.contains("Transport") && !err.contains("ERROR"),
            "library internals leak: {err}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_to_a_closed_pipe_ends_quietly() {
    use std::os::fd::{FromRawFd, OwnedFd};
    let (dir, p) = setup().await;
    let c = Client::new(&p.base(), Some("alice-token"), "/namespaces/team-a/mcp");
    let id = c.call("nap", json!({})).await.result()["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    // A pipe whose reader is gone, as with `runway tasks get … | head` after head exits.
    let mut fds = [0; 2];
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    drop(unsafe { OwnedFd::from_raw_fd(fds[0]) });
    let writer = unsafe { OwnedFd::from_raw_fd(fds[1]) };
    let mut cmd = client_cmd(&dir, &p);
    cmd.args(["tasks", "get", &id])
        .stdin(Stdio::null())
        .stdout(Stdio::from(writer))
        .stderr(Stdio::piped());
    let out = cmd.spawn().unwrap().wait_with_output().await.unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(out.status.code(), Some(0), "{err}");
}

/// `runway` under a pseudo-terminal (util-linux `script`), as a person at a terminal runs it.
fn in_a_terminal(dir: &TempDir, p: &Process, args: &str) -> Command {
    let mut cmd = Command::new("script");
    cmd.args(["--quiet", "--return", "--command"])
        .arg(format!("{} {args}", env!("CARGO_BIN_EXE_runway")))
        .arg("/dev/null")
        .env("RUNWAY_URL", format!("{}/namespaces/team-a/mcp", p.base()))
        .env("RUNWAY_TOKEN_FILE", dir.path().join("alice.token"))
        .env_remove("RUST_LOG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// Read the terminal's output until it contains `needle`; returns everything read so far.
async fn screen_until(out: &mut tokio::process::ChildStdout, seen: &mut String, needle: &str) {
    use tokio::io::AsyncReadExt;
    tokio::time::timeout(support::harness::PATIENCE, async {
        let mut buf = [0u8; 4096];
        while !seen.contains(needle) {
            let n = out.read(&mut buf).await.unwrap();
            assert!(n > 0, "the terminal closed before {needle:?}: {seen}");
            seen.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no {needle:?} on the terminal: {seen}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn questions_come_in_manifest_order_and_lists_are_typed_with_commas_or_json() {
    let (dir, p) = setup().await;
    let mut child = in_a_terminal(&dir, &p, "call label").spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut seen = String::new();
    // `ask.tags` before `ask.about`, as written, though its key sorts after.
    for (expect, typed) in [
        ("Which tags?", ""),
        (
            "picked* (list of string, comma-separated, one of x|y|z): ",
            "x, w\n",
        ),
        ("is not one of", "[\"x\", \"z\"\n"),
        ("not a list", "x, z\n"),
        ("Anything to add?", ""),
        ("note (string, optional, Enter skips): ", "fine\n"),
    ] {
        screen_until(&mut out, &mut seen, expect).await;
        stdin.write_all(typed.as_bytes()).await.unwrap();
    }
    screen_until(&mut out, &mut seen, "x,z / fine").await;
    assert!(child.wait().await.unwrap().success(), "{seen}");
    assert!(
        seen.find("Which tags?") < seen.find("Anything to add?"),
        "{seen}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_terminal_prompt_follows_the_manifest_and_checks_each_answer() {
    let (dir, p) = setup().await;
    let mut child = in_a_terminal(&dir, &p, "call place").spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut seen = String::new();
    screen_until(&mut out, &mut seen, "Where to?").await;
    // Manifest order (zone, count, note), required marks, choices and defaults; every wrong
    // answer is caught before anything is sent.
    for (expect, typed) in [
        ("zone* (string, one of eu|us): ", "\n"),
        ("an answer is required", "mars\n"),
        ("\"mars\" is not one of", "eu\n"),
        ("count (integer, default 2): ", "0\n"),
        ("minimum", "\n"),
        ("note (string, optional, Enter skips): ", "\n"),
    ] {
        screen_until(&mut out, &mut seen, expect).await;
        stdin.write_all(typed.as_bytes()).await.unwrap();
    }
    screen_until(&mut out, &mut seen, "2 in eu, note: none").await;
    assert!(child.wait().await.unwrap().success(), "{seen}");
    let order: Vec<usize> = ["zone*", "count (", "note ("]
        .iter()
        .map(|f| seen.find(f).unwrap())
        .collect();
    assert!(order.windows(2).all(|w| w[0] < w[1]), "{seen}");

    // Ctrl-C typed at the prompt: the terminal sends SIGINT; the task keeps running.
    let mut child = in_a_terminal(&dir, &p, "call place").spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut seen = String::new();
    screen_until(&mut out, &mut seen, "zone*").await;
    stdin.write_all(b"\x03").await.unwrap();
    screen_until(
        &mut out,
        &mut seen,
        "keeps running (runway tasks get place-",
    )
    .await;
    assert_eq!(child.wait().await.unwrap().code(), Some(130), "{seen}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_call_exits_the_same_with_and_without_a_task() {
    let (dir, p) = setup().await;
    for extra in [None, Some("--no-task")] {
        let mut cmd = client_cmd(&dir, &p);
        cmd.args(["call", "broken"]).args(extra);
        let (code, _, err) = run_with_stdin(cmd, "").await;
        assert_eq!(code, 1, "{extra:?}: {err}");
        assert!(
            err.contains("call failed: upstream broke (-31042)"),
            "{extra:?}: {err}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runway_call_waits_for_questions_that_are_someone_elses_to_answer() {
    use tokio::io::AsyncBufReadExt;
    let (dir, p) = setup().await;
    // Through a proxy that counts the polls.
    let proxy = support::upstream::Proxy::start(&p.base()).await;
    let mut cmd = client_cmd(&dir, &p);
    cmd.env(
        "RUNWAY_URL",
        format!("http://{}/namespaces/team-a/mcp", proxy.addr),
    )
    .args(["call", "gated"])
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut lines = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let id = read_until(&mut lines, "task gated-").await;
    let id = id.trim().strip_prefix("task ").unwrap().to_owned();
    // alice requested it and may not answer: she is not asked, she is told — once, however
    // many times she polls while she waits.
    read_until(&mut lines, "waiting for someone else to answer ask.ok").await;
    let polls = proxy.count("tasks/get");
    proxy.wait_for("tasks/get", polls + 4).await;
    let bob = Client::new(&p.base(), Some("bob-token"), "/namespaces/team-a/mcp");
    let taken = bob
        .update(&id, json!({"ask.ok": {"action": "accept", "content": {}}}))
        .await;
    taken.assert_complete();
    let mut rest = vec![];
    while let Some(l) = lines.next_line().await.unwrap() {
        rest.push(l);
    }
    let out = child.wait_with_output().await.unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "approved");
    assert!(
        !rest
            .iter()
            .any(|l| l.contains("waiting for someone else") || l.contains("step 1/1")),
        "printed again: {rest:?}"
    );
}

/// A proxy in front of `target` that plays a server which takes answers late: after each
/// `tasks/update`, the next `stale` polls still get the last `input_required` task it saw.
/// It counts the `tasks/update` requests.
async fn late_taker(
    target: String,
    stale: usize,
) -> (String, std::sync::Arc<std::sync::Mutex<usize>>) {
    use axum::body::{Body, to_bytes};
    use axum::extract::Request;
    use std::sync::{Arc, Mutex};
    #[derive(Default)]
    struct Late {
        updates: usize,
        replay: usize,
        last_input_required: Option<(String, Vec<u8>)>,
    }
    let late = Arc::new(Mutex::new(Late::default()));
    let updates = Arc::new(Mutex::new(0usize));
    let (l, u) = (late.clone(), updates.clone());
    runway::install_crypto_provider();
    let http = reqwest::Client::new();
    let app = axum::Router::new().fallback(move |req: Request| {
        let (late, updates, http, target) = (l.clone(), u.clone(), http.clone(), target.clone());
        async move {
            let method = req
                .headers()
                .get("mcp-method")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned();
            let mut out = http.post(format!("{target}{}", req.uri().path()));
            for (k, v) in req.headers() {
                if k != "host" && k != "content-length" {
                    out = out.header(k, v);
                }
            }
            let body = to_bytes(req.into_body(), usize::MAX).await.unwrap();
            if method == "tasks/get" {
                let mut late = late.lock().unwrap();
                if late.replay > 0
                    && let Some((ct, stale)) = late.last_input_required.clone()
                {
                    late.replay -= 1;
                    // The old answer, to this request's id.
                    let id =
                        serde_json::from_slice::<serde_json::Value>(&body).unwrap()["id"].clone();
                    let mut stale: serde_json::Value = serde_json::from_slice(&stale).unwrap();
                    stale["id"] = id;
                    return axum::response::Response::builder()
                        .header("content-type", ct)
                        .body(Body::from(stale.to_string()))
                        .unwrap();
                }
            }
            let resp = out.body(body).send().await.unwrap();
            let ct = resp
                .headers()
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("application/json")
                .to_owned();
            let status = resp.status();
            let body = resp.bytes().await.unwrap().to_vec();
            let mut late = late.lock().unwrap();
            if method == "tasks/update" {
                late.updates += 1;
                *updates.lock().unwrap() = late.updates;
                late.replay = stale;
            }
            if method == "tasks/get" && String::from_utf8_lossy(&body).contains("input_required") {
                late.last_input_required = Some((ct.clone(), body.clone()));
            }
            axum::response::Response::builder()
                .status(status.as_u16())
                .header("content-type", ct)
                .body(Body::from(body))
                .unwrap()
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), updates)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runway_call_answers_each_question_once_when_the_server_lists_it_again() {
    let (dir, p) = setup().await;
    let (proxy, updates) = late_taker(p.base(), 2).await;
    let mut cmd = client_cmd(&dir, &p);
    cmd.env("RUNWAY_URL", format!("{proxy}/namespaces/team-a/mcp"))
        .args(["call", "approve", "--arg", "change=v5"]);
    // One answer on stdin: a second prompt would meet the end of input and fail the call.
    let (code, out, err) = run_with_stdin(cmd, "yes\nonce\n").await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), "approved v5: once");
    assert_eq!(err.matches("Approve v5?").count(), 1, "{err}");
    assert_eq!(*updates.lock().unwrap(), 1, "one tasks/update");
}

const BRIEF: &str = r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: brief, namespace: team-a }
spec:
  tool: { description: "Done at once, deleted a second later." }
  execution: { ttlAfterFinished: 1s }
  steps: [ { name: work, delay: { duration: 10ms } } ]
  result: { content: [ { type: text, text: "briefly {{ args.what }}" } ] }
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runway_tasks_reads_a_deleted_task_from_the_archive() {
    let dir = TempDir::new();
    std::fs::create_dir_all(dir.path().join("workflows")).unwrap();
    std::fs::write(dir.path().join("workflows/wf.yaml"), BRIEF).unwrap();
    std::fs::write(dir.path().join("auth.yaml"), AUTH).unwrap();
    std::fs::write(dir.path().join("alice.token"), "alice-token\n").unwrap();
    let p = Process::start(dir.path(), 0).await;
    // Held until it ends (`--no-task`): a followed task could be deleted between its end and
    // the client's last look.
    let mut call = client_cmd(&dir, &p);
    call.args(["call", "brief", "--no-task", "--arg", "what=archived"]);
    let (code, out, err) = run_with_stdin(call, "").await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("briefly archived"), "{out}");
    let archived = || {
        let mut cmd = client_cmd(&dir, &p);
        cmd.args(["tasks", "list", "--archived", "--json"]);
        run_with_stdin(cmd, "")
    };
    // Deleted a second after it ended, and archived just before.
    let since = std::time::Instant::now();
    let id = loop {
        let (code, out, err) = archived().await;
        assert_eq!(code, 0, "{err}");
        let runs: serde_json::Value = serde_json::from_str(&out).unwrap();
        if let Some(id) = runs[0]["taskId"].as_str() {
            break id.to_owned();
        }
        assert!(
            since.elapsed() < support::harness::PATIENCE,
            "never archived"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    let get = |archived: bool| {
        let mut cmd = client_cmd(&dir, &p);
        cmd.args(["tasks", "get", &id]);
        if archived {
            cmd.arg("--archived");
        }
        run_with_stdin(cmd, "")
    };
    while get(false).await.0 == 0 {
        assert!(
            since.elapsed() < support::harness::PATIENCE,
            "{id} was never deleted"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let (code, out, err) = get(true).await;
    assert_eq!(code, 0, "{err}");
    let kept: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(kept["archived"], true);
    assert_eq!(kept["phase"], "Succeeded");
    assert_eq!(kept["arguments"]["what"], "archived");
    assert_eq!(kept["result"]["content"][0]["text"], "briefly archived");

    let mut list = client_cmd(&dir, &p);
    list.args(["tasks", "list", "--archived"]);
    let (code, out, err) = run_with_stdin(list, "").await;
    assert_eq!(code, 0, "{err}");
    assert!(
        out.lines().nth(1).is_some_and(|l| l.starts_with(&id)),
        "{out}"
    );
    let mut live = client_cmd(&dir, &p);
    live.args(["tasks", "list"]);
    let (_, out, _) = run_with_stdin(live, "").await;
    assert!(!out.contains(&id), "{out}");

    let mut unknown = client_cmd(&dir, &p);
    unknown.args(["tasks", "get", "never-was", "--archived"]);
    let (code, _, err) = run_with_stdin(unknown, "").await;
    assert_ne!(code, 0);
    assert!(err.contains("unknown task"), "{err}");
}
