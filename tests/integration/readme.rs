//! The README's local demo, run line by line as written: every command a new user copies first
//! must work and end the way its comment says.

use crate::support;

use std::collections::BTreeMap;
use std::process::Stdio;

use support::harness::TempDir;
use support::process::free_port;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;

/// What a person types at the prompts of tools that ask questions.
const ANSWERS: [(&str, &str); 1] = [("release-notes", "looks fine\nlow\n")];

/// The bash block under `heading`, as (command, comment, runs in the background).
fn demo(heading: &str) -> Vec<(Vec<String>, String, bool)> {
    let readme = include_str!("../../README.md");
    let section = readme
        .split(heading)
        .nth(1)
        .expect("the README has the demo section");
    let block = section
        .split("```bash\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("the demo has a bash block");
    block
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let (cmd, comment) = l.split_once(" #").unwrap_or((l, ""));
            let cmd = cmd.trim();
            let background = cmd.ends_with('&');
            let words = cmd
                .trim_end_matches('&')
                .split_whitespace()
                .map(str::to_owned)
                .collect();
            (words, comment.trim().to_owned(), background)
        })
        .collect()
}

fn runway(words: &[String]) -> Command {
    assert_eq!(words[0], "target/debug/runway", "{words:?}");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_runway"));
    cmd.args(&words[1..])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env_remove("RUST_LOG")
        .env_remove("RUNWAY_TOKEN_FILE")
        .kill_on_drop(true);
    cmd
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_demo_runs_as_written() {
    let dir = TempDir::new();
    let port = free_port();
    let mut server = None;
    let mut started: BTreeMap<String, String> = BTreeMap::new();
    let mut background = Vec::new();
    for (mut words, comment, in_background) in demo("## 60-second local demo") {
        if words[0] == "cargo" {
            continue;
        }
        if words[1] == "serve" {
            // The demo's server, on a port of its own and a database in a scratch directory.
            let db = words.iter().position(|w| w == "--db").unwrap() + 1;
            words[db] = dir.path().join("demo.db").display().to_string();
            let mut cmd = runway(&words);
            cmd.args(["--listen", &format!("127.0.0.1:{port}")])
                .stdout(Stdio::null())
                .stderr(Stdio::piped());
            let mut child = cmd.spawn().unwrap();
            let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
            tokio::time::timeout(support::harness::PATIENCE, async {
                while let Some(l) = lines.next_line().await.unwrap() {
                    if l.contains("runway serve started") {
                        return;
                    }
                }
                panic!("the demo server did not start");
            })
            .await
            .unwrap();
            tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
            server = Some(child);
            continue;
        }
        // `long-job-…` stands for the id a background call printed.
        for w in words.iter_mut() {
            if let Some(prefix) = w.strip_suffix('…') {
                *w = started
                    .get(prefix)
                    .unwrap_or_else(|| panic!("no task {prefix}… was started before"))
                    .clone();
            }
        }
        let mut cmd = runway(&words);
        cmd.env("RUNWAY_URL", format!("http://127.0.0.1:{port}/mcp"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        let tool = words.get(2).cloned().unwrap_or_default();
        let typed = ANSWERS
            .iter()
            .find(|(t, _)| words[1] == "call" && *t == tool)
            .map_or("", |(_, a)| a);
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(typed.as_bytes()).await.unwrap();
        if in_background {
            // Read the task id it prints, then let it run on as a backgrounded command does.
            let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
            let prefix = format!("task {tool}-");
            let line = tokio::time::timeout(support::harness::PATIENCE, async {
                loop {
                    let l = lines.next_line().await.unwrap().expect("a task id");
                    if l.starts_with(&prefix) {
                        return l;
                    }
                }
            })
            .await
            .unwrap();
            started.insert(format!("{tool}-"), line["task ".len()..].trim().to_owned());
            // Keep its stderr open and read, as a terminal would.
            let rest = tokio::spawn(async move {
                let mut all = String::new();
                while let Ok(Some(l)) = lines.next_line().await {
                    all.push_str(&l);
                    all.push('\n');
                }
                all
            });
            background.push((child, stdin, rest, words.clone()));
            continue;
        }
        drop(stdin);
        let out = child.wait_with_output().await.unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        let expected = if comment.starts_with("exits 1") { 1 } else { 0 };
        assert_eq!(
            out.status.code(),
            Some(expected),
            "{words:?} ({comment}): {err}"
        );
    }
    // The cancelled background call ends as the comment after it says: cancelled.
    for (child, stdin, rest, words) in background {
        drop(stdin);
        let out = child.wait_with_output().await.unwrap();
        let err = rest.await.unwrap();
        assert_eq!(out.status.code(), Some(1), "{words:?}: {err}");
        assert!(err.contains("task cancelled"), "{err}");
    }
    assert!(server.is_some(), "the demo starts a server");
}

/// Split a shell line into words: whitespace separates, single quotes group.
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quoted = false;
    let mut any = false;
    for c in line.chars() {
        match c {
            '\'' => {
                quoted = !quoted;
                any = true;
            }
            c if c.is_whitespace() && !quoted => {
                if any {
                    words.push(std::mem::take(&mut word));
                    any = false;
                }
            }
            c => {
                word.push(c);
                any = true;
            }
        }
    }
    if any {
        words.push(word);
    }
    words
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_approval_example_recipe_works_as_written() {
    let text = include_str!("../../examples/approval.yaml");
    let dir = TempDir::new();
    std::os::unix::fs::symlink(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples"),
        dir.path().join("examples"),
    )
    .unwrap();
    // The auth file the comment shows, with its indentation.
    let auth: String = text
        .lines()
        .skip_while(|l| !l.starts_with("#   auth.yaml:"))
        .skip(1)
        .take_while(|l| l.len() > 1)
        .map(|l| format!("{}\n", &l["#     ".len()..]))
        .collect();
    std::fs::write(dir.path().join("auth.yaml"), &auth).unwrap();
    let port = free_port();
    let mut server = None;
    let mut call = None;
    let mut task = String::new();
    for line in text.lines().filter_map(|l| l.strip_prefix("#   $ ")) {
        let background = line.trim_end().ends_with('&');
        for part in line.trim_end().trim_end_matches('&').split("&&") {
            let mut words = shell_words(part);
            if words[0] == "echo" {
                assert_eq!(words[2], ">", "{part}");
                std::fs::write(dir.path().join(&words[3]), format!("{}\n", words[1])).unwrap();
                continue;
            }
            assert_eq!(words[0], "runway", "{part}");
            for w in words.iter_mut().filter(|w| *w == "<taskId>") {
                *w = task.clone();
            }
            let mut cmd = Command::new(env!("CARGO_BIN_EXE_runway"));
            cmd.args(&words[1..])
                .current_dir(dir.path())
                .env_remove("RUST_LOG")
                .env_remove("RUNWAY_TOKEN_FILE")
                .env("RUNWAY_URL", format!("http://127.0.0.1:{port}/mcp"))
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .kill_on_drop(true);
            if words[1] == "serve" {
                cmd.args(["--listen", &format!("127.0.0.1:{port}")]);
            }
            let mut child = cmd.spawn().unwrap();
            if !background {
                let out = child.wait_with_output().await.unwrap();
                let err = String::from_utf8_lossy(&out.stderr);
                assert_eq!(out.status.code(), Some(0), "{part}: {err}");
                assert!(err.contains("answer to approval.decision taken"), "{err}");
                continue;
            }
            let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
            let wanted = if words[1] == "serve" {
                "runway serve started"
            } else {
                "waiting for someone else to answer approval.decision"
            };
            tokio::time::timeout(support::harness::PATIENCE, async {
                while let Some(l) = lines.next_line().await.unwrap() {
                    if let Some(id) = l.strip_prefix("task ") {
                        task = id.trim().to_owned();
                    }
                    if l.contains(wanted) {
                        return;
                    }
                }
                panic!("{part}: no {wanted:?}");
            })
            .await
            .unwrap_or_else(|_| panic!("{part}: no {wanted:?}"));
            tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
            if words[1] == "serve" {
                server = Some(child);
            } else {
                call = Some(child);
            }
        }
    }
    assert!(
        server.is_some() && task.starts_with("approve-deploy-"),
        "{task}"
    );
    let out = call.unwrap().wait_with_output().await.unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).lines().next(),
        Some("Deployment of api approved.")
    );
}
