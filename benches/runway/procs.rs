//! The servers under test as child processes: started on loopback, waited for, measured
//! (resident memory), and always killed — by `Drop`, so a panic cleans up too, and by the
//! kernel (`PR_SET_PDEATHSIG`) if the benchmark itself is killed.

use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::load::Conn;

/// How long a server may take to answer its first request.
const STARTUP: Duration = Duration::from_secs(30);

/// A child process that is killed (SIGKILL) and reaped when dropped.
pub struct Proc {
    /// What it is, for messages.
    pub what: String,
    /// Where it listens.
    pub addr: SocketAddr,
    child: Option<Child>,
}

/// A free loopback port (bound, read, released).
pub fn free_addr() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
}

impl Proc {
    /// Spawn `cmd`, which will listen on `addr`; stdout is discarded, stderr goes to `log`.
    pub fn spawn(what: &str, mut cmd: Command, addr: SocketAddr, log: &Path) -> Self {
        let log = std::fs::File::create(log).expect("a log file in the work directory");
        // SAFETY: prctl is async-signal-safe and touches only the calling (child) process.
        // NB: the signal fires when the *thread* that spawned the child exits, so children are
        // spawned from the main thread only (the top-level future of `block_on`).
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
        Self {
            what: what.to_owned(),
            addr,
            child: Some(child),
        }
    }

    /// Process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("a running child").id()
    }

    /// Wait until the server answers `GET path` (any status) or accepts a connection.
    pub async fn ready(&mut self, path: Option<&str>) -> Duration {
        let start = Instant::now();
        while start.elapsed() < STARTUP {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(Child::try_wait) {
                panic!("{} exited during startup: {status}", self.what);
            }
            if let Ok(mut c) = Conn::open(self.addr).await {
                match path {
                    None => return start.elapsed(),
                    Some(p) => {
                        if c.get(p).await.is_ok_and(|s| s.is_success()) {
                            return start.elapsed();
                        }
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("{} did not start within {STARTUP:?}", self.what);
    }

    /// Resident memory (VmRSS) and its peak (VmHWM), bytes.
    pub fn memory(&self) -> (u64, u64) {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap_or_default();
        let kb = |key: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
                .unwrap_or(0)
                * 1024
        };
        (kb("VmRSS:"), kb("VmHWM:"))
    }

    /// SIGKILL and reap (a crash, or the end of a scenario).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The `runway` binary under test: this build's, or `RUNWAY_BENCH_BIN` (to compare two builds
/// under the same load generator and baselines).
pub fn runway_bin() -> PathBuf {
    std::env::var_os("RUNWAY_BENCH_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_runway")))
}

/// `runway serve` on `addr`, with `dir/workflows` and `dir/runs.db`, without authentication.
pub fn runway(dir: &Path, addr: SocketAddr, log: &str) -> Proc {
    let mut cmd = serve(dir, addr);
    cmd.arg("--no-auth");
    Proc::spawn("runway serve", cmd, addr, &dir.join(log))
}

/// The `runway serve` command for `dir` and `addr`, authentication flags still to add.
pub fn serve(dir: &Path, addr: SocketAddr) -> Command {
    let mut cmd = Command::new(runway_bin());
    cmd.arg("serve")
        .arg("--workflows")
        .arg(dir.join("workflows"))
        .arg("--db")
        .arg(dir.join("runs.db"))
        .arg("--listen")
        .arg(addr.to_string());
    cmd
}

/// This benchmark binary again, serving one baseline (`http-limit` or `rmcp-peer`).
pub fn baseline(which: &str, addr: SocketAddr, dir: &Path, extra: &[&str]) -> Proc {
    let exe = std::env::current_exe().expect("the benchmark's own path");
    let mut cmd = Command::new(exe);
    cmd.arg(which).arg(addr.to_string()).args(extra);
    Proc::spawn(which, cmd, addr, &dir.join(format!("{which}.log")))
}

/// A fresh, empty work directory for one server under `root`.
pub fn work_dir(root: &Path, name: &str) -> PathBuf {
    let d = root.join(name);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(d.join("workflows")).expect("the work directory is writable");
    d
}
