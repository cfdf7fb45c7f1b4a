//! `runway serve` as a child process, for crash tests: started, killed with SIGKILL, restarted.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

pub struct Process {
    pub child: Child,
    /// The port it listens on.
    pub port: u16,
    /// Every line the server wrote on stderr so far (its log).
    pub logs: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

/// A port nobody listens on now. Another process may take it before the caller binds it, so a
/// server this file starts is given port 0 instead and reports the port it bound
/// ([`Process::port`]); this is for addresses that must be known first or must stay unreachable.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Process {
    /// Start `runway serve` with a state key file and wait for its "started" log line. Port 0
    /// lets the server bind any free port, read back from that line: no other process can take
    /// it between a choice and the bind.
    pub async fn start(dir: &Path, port: u16) -> Self {
        Self::start_keyed(dir, port, Some(&key_file(dir))).await
    }

    /// Start `runway serve` with the state key file `key` (none: the database's key).
    pub async fn start_keyed(dir: &Path, port: u16, key: Option<&Path>) -> Self {
        Self::start_env(dir, port, key, &[]).await
    }

    /// [`Process::start_keyed`] with these environment variables set.
    pub async fn start_env(
        dir: &Path,
        port: u16,
        key: Option<&Path>,
        env: &[(&str, &str)],
    ) -> Self {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_runway"));
        cmd.envs(env.iter().copied());
        cmd.arg("serve")
            .arg("--workflows")
            .arg(dir.join("workflows"))
            .arg("--db")
            .arg(dir.join("runs.db"))
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--auth-file")
            .arg(dir.join("auth.yaml"));
        if let Some(key) = key {
            cmd.arg("--state-key-file").arg(key);
        }
        let mut child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let logs: std::sync::Arc<std::sync::Mutex<Vec<String>>> = Default::default();
        let kept = logs.clone();
        let bound = tokio::time::timeout(super::harness::PATIENCE, async {
            while let Some(line) = lines.next_line().await.unwrap() {
                let bound = line
                    .contains("runway serve started")
                    .then(|| bound_port(&line));
                kept.lock().unwrap().push(line);
                if let Some(bound) = bound {
                    return bound;
                }
            }
            None
        })
        .await
        .ok()
        .flatten();
        let Some(bound) = bound else {
            panic!("runway serve did not start: {:?}", logs.lock().unwrap());
        };
        assert!(
            port == 0 || port == bound,
            "asked for {port}, bound {bound}"
        );
        let port = bound;
        // Keep draining stderr so the child never blocks on a full pipe.
        let kept = logs.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                kept.lock().unwrap().push(line);
            }
        });
        Self { child, port, logs }
    }

    /// SIGKILL, as a crash.
    pub async fn kill9(mut self) {
        self.child.start_kill().unwrap();
        self.child.wait().await.unwrap();
    }

    pub fn base(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

/// The port in the `addr=` field of the server's "started" line.
fn bound_port(line: &str) -> Option<u16> {
    let addr = line.split_once("addr=")?.1.split_whitespace().next()?;
    addr.parse::<std::net::SocketAddr>().ok().map(|a| a.port())
}

fn key_file(dir: &Path) -> PathBuf {
    let f = dir.join("state.key");
    if !f.exists() {
        std::fs::write(&f, "a-shared-state-key-of-at-least-32-bytes").unwrap();
    }
    f
}
