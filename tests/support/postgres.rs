//! A private PostgreSQL server for the tests (Debian's `postgresql` package, which `.ci/run`
//! installs): one per test binary, started on first use on a loopback port, each test in a
//! database of its own. Run as the `postgres` user when the tests run as root (the server
//! refuses root), and killed with the test binary.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The running server.
pub struct Postgres {
    pub port: u16,
    bin: PathBuf,
    user: Option<(u32, u32)>,
}

static SERVER: OnceLock<Postgres> = OnceLock::new();
static DATABASES: AtomicUsize = AtomicUsize::new(0);

/// The server of this test binary, started on first use.
pub fn server() -> &'static Postgres {
    SERVER.get_or_init(Postgres::start)
}

/// A fresh database on the server: its URL.
pub fn database() -> String {
    let pg = server();
    let name = format!("t{}", DATABASES.fetch_add(1, Ordering::SeqCst));
    pg.psql("postgres", &format!("CREATE DATABASE {name}"));
    pg.url(&name)
}

/// The installed server's programs (`/usr/lib/postgresql/<version>/bin`), newest version.
fn bin_dir() -> PathBuf {
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.path().join("bin"))
                .collect()
        })
        .unwrap_or_default();
    versions.retain(|b| b.join("postgres").is_file());
    versions.sort();
    versions.pop().expect(
        "PostgreSQL is not installed (Debian package postgresql; .ci/run installs it): \
         the archive tests need a real server",
    )
}

/// uid and gid of the `postgres` user, when the tests run as root.
fn server_user() -> Option<(u32, u32)> {
    // SAFETY: getuid has no preconditions.
    if unsafe { libc::getuid() } != 0 {
        return None;
    }
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap();
    let line = passwd
        .lines()
        .find(|l| l.starts_with("postgres:"))
        .expect("the postgresql package creates the postgres user");
    let f: Vec<&str> = line.split(':').collect();
    Some((f[2].parse().unwrap(), f[3].parse().unwrap()))
}

/// Prefix of the servers' directories.
const LITTER: &str = "runway-test-postgres-";

/// Remove the directories of servers whose test binaries have ended (their servers died with
/// them).
fn clear_litter(tmp: &Path) {
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return;
    };
    for e in entries.filter_map(Result::ok) {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix(LITTER) else {
            continue;
        };
        if !Path::new("/proc").join(pid).exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

impl Postgres {
    fn start() -> Self {
        let bin = bin_dir();
        let user = server_user();
        // In the system's temporary directory: the server's user must reach it (a checkout
        // may sit below a directory only root enters), and its socket path must stay short.
        let tmp = std::env::temp_dir();
        clear_litter(&tmp);
        let dir = tmp.join(format!("{LITTER}{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        if let Some((uid, gid)) = user {
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid)).unwrap();
        }
        let me = Self {
            port: super::process::free_port(),
            bin,
            user,
        };
        let data = dir.join("data");
        let out = me
            .command("initdb")
            .args([
                "-D",
                data.to_str().unwrap(),
                "-U",
                "postgres",
                "-A",
                "trust",
            ])
            .args(["-E", "UTF8", "--no-sync"])
            .output()
            .unwrap();
        assert!(out.status.success(), "initdb: {out:?}");
        let mut cmd = me.command("postgres");
        cmd.args(["-D", data.to_str().unwrap(), "-p", &me.port.to_string()])
            .args([
                "-k",
                dir.to_str().unwrap(),
                "-c",
                "listen_addresses=127.0.0.1",
            ])
            .args(["-c", "fsync=off", "-c", "full_page_writes=off"])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("server.log")).unwrap());
        spawn_for_life(cmd);
        let deadline = Instant::now() + Duration::from_secs(60);
        while !me.ready() {
            assert!(
                Instant::now() < deadline,
                "PostgreSQL did not start; see {}",
                dir.join("server.log").display()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        me
    }

    /// One of the server's programs, run as the server's user.
    fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new(self.bin.join(program));
        if let Some((uid, gid)) = self.user {
            cmd.uid(uid).gid(gid);
        }
        cmd.env("LC_ALL", "C.UTF-8").current_dir("/");
        cmd
    }

    fn ready(&self) -> bool {
        self.command("pg_isready")
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "-q"])
            .status()
            .is_ok_and(|s| s.success())
    }

    /// Run `sql` in database `db`; panics when it fails.
    pub fn psql(&self, db: &str, sql: &str) -> String {
        let out = self
            .command("psql")
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-U",
                "postgres",
            ])
            .args(["-d", db, "-v", "ON_ERROR_STOP=1", "-tAc", sql])
            .output()
            .unwrap();
        assert!(out.status.success(), "psql {sql}: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    }

    /// The URL of database `db`.
    pub fn url(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.port)
    }
}

/// Start `cmd` from a thread that lives as long as the test binary, with the parent-death
/// signal set: the kernel sends it when the spawning thread ends, and a test's thread ends
/// with the test.
fn spawn_for_life(mut cmd: Command) {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("postgres".into())
        .spawn(move || {
            // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
            unsafe {
                cmd.pre_exec(|| {
                    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                    Ok(())
                });
            }
            let child = cmd.spawn();
            let ok = child.is_ok();
            tx.send(child.map(|_| ())).unwrap();
            if ok {
                loop {
                    std::thread::park();
                }
            }
        })
        .unwrap();
    rx.recv().unwrap().expect("cannot start postgres");
}
