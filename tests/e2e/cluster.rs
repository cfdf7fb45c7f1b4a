//! A real Kubernetes control plane for the e2e tier: etcd, kube-apiserver and
//! kube-controller-manager from the folder named by `KUBEBUILDER_ASSETS` (the variable envtest
//! uses), set up as a cluster admin would install Runway: the CRDs and the chart's rendered
//! objects applied with server-side apply, `runway operator` replicas running as the chart's
//! ServiceAccount with a token from the TokenRequest API, tenants as static-token users.
//!
//! One control plane per test binary, started by the first test that asks for it; each test
//! makes its own namespaces. Every process is started from one long-lived thread with
//! `PR_SET_PDEATHSIG`, so they all die with the test binary, however it ends.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The variable naming the folder with `etcd`, `kube-apiserver` and `kube-controller-manager`.
pub const ASSETS_ENV: &str = "KUBEBUILDER_ASSETS";
/// The rendered chart (`make e2e` writes it; `RUNWAY_E2E_CHART` overrides the path).
pub const CHART_ENV: &str = "RUNWAY_E2E_CHART";
/// Namespace the chart is installed in.
pub const SYSTEM_NS: &str = "runway-system";
/// The chart's ServiceAccount (release `runway`).
pub const OPERATOR_SA: &str = "runway";
/// The Lease the replicas elect a leader with.
pub const LEASE: &str = "runway-controller";
/// How long a test waits for anything the cluster does (a Lease expiry takes ~15 s).
pub const PATIENCE: Duration = Duration::from_secs(90);

/// Static-token users: name, groups. Their tokens: [`token`].
pub const USERS: &[(&str, &str)] = &[
    ("admin", "system:masters"),
    // Callers of their namespace's tools.
    ("alice", "devs"),
    ("bob", "devs"),
    // An approver: holds runway-approver (and caller) only.
    ("carol", "ops"),
    // Authenticated, and bound to nothing.
    ("mallory", ""),
];

/// The audience the chart's operator accepts tokens for (`auth.tokenAudiences`).
pub const AUDIENCE: &str = "runway";

/// The API server's own token audience (its ServiceAccount issuer).
pub const API_AUDIENCE: &str = "https://kubernetes.default.svc.cluster.local";

/// The bearer token of a static user: `<name>-token-` and filler to 1,024 bytes, the length of
/// a ServiceAccount's projected token (a signed JWT), so that what a request pays per token
/// byte shows here as it does for agents in a cluster.
pub fn token(user: &str) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut t = format!("{user}-token-");
    let mut x = user.bytes().fold(0x9e37_79b9_7f4a_7c15_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    while t.len() < 1024 {
        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        t.push(ALPHABET[(x >> 58) as usize] as char);
    }
    t
}

/// A running control plane with Runway installed.
pub struct Cluster {
    pub dir: PathBuf,
    pub server: String,
    operators: Mutex<Vec<Operator>>,
    /// etcd, kube-apiserver, kube-controller-manager: they live as long as the test binary.
    control_plane: Mutex<Vec<Child>>,
    pub state_key: PathBuf,
    /// Shards the replicas split the Runs into (`--shards`).
    pub shards: u32,
    /// Lease timing flags of every replica.
    lease_flags: Vec<String>,
}

/// Lease timings of the replicas: shorter than the defaults, so that a takeover after a crash
/// does not hold the tier up for long.
const LEASE_FLAGS: [&str; 3] = [
    "--lease-duration=6s",
    "--lease-renew-deadline=4s",
    "--lease-retry-period=1s",
];

/// One `runway operator` replica.
pub struct Operator {
    pub identity: String,
    pub mcp: u16,
    pub metrics: u16,
    child: Child,
}

static CLUSTER: OnceLock<Cluster> = OnceLock::new();

/// The control plane of this test binary, started on first use with `replicas` operators
/// (one shard: a single leader drives the Runs).
pub fn cluster(replicas: usize) -> &'static Cluster {
    sharded_cluster(replicas, 1)
}

/// The control plane of this test binary, started on first use with `replicas` operators that
/// split the Runs into `shards`.
pub fn sharded_cluster(replicas: usize, shards: u32) -> &'static Cluster {
    let c = CLUSTER.get_or_init(|| Cluster::start(replicas, shards, &LEASE_FLAGS));
    assert_eq!(c.shards, shards, "one control plane per test binary");
    c
}

/// The control plane of this test binary, started on first use with the CRDs of the folder
/// `crds` and no operator: the test starts what it needs.
pub fn cluster_with_crds(crds: &Path) -> &'static Cluster {
    CLUSTER.get_or_init(|| Cluster::start_with(0, 1, &LEASE_FLAGS, crds))
}

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

type Job = (Command, mpsc::Sender<std::io::Result<Child>>);

/// Children are spawned on this thread, which lives as long as the process: the kernel's
/// parent-death signal fires when the spawning *thread* exits, not only the process.
fn spawner() -> &'static Mutex<mpsc::Sender<Job>> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<Job>>> = OnceLock::new();
    SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("e2e-spawner".into())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
                    unsafe {
                        cmd.pre_exec(|| {
                            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                            Ok(())
                        });
                    }
                    let _ = reply.send(cmd.spawn());
                }
            })
            .expect("spawner thread");
        Mutex::new(tx)
    })
}

/// Remove the etcd data of every control plane in `parent` whose process has exited. A run's
/// folder (`cluster-<pid>`) stays for its logs; its etcd data, a few hundred MiB after a
/// benchmark, would otherwise pile up with every run.
pub fn prune_finished(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let pid = entry
            .file_name()
            .to_str()
            .and_then(|n| n.strip_prefix("cluster-"))
            .and_then(|p| p.parse::<libc::pid_t>().ok());
        if pid.is_some_and(|pid| !alive(pid)) {
            let _ = std::fs::remove_dir_all(entry.path().join("etcd"));
        }
    }
}

/// Whether process `pid` exists (one owned by another user counts).
fn alive(pid: libc::pid_t) -> bool {
    // SAFETY: signal 0 sends nothing; it only asks whether the process exists.
    let answered = unsafe { libc::kill(pid, 0) };
    answered == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

fn spawn(cmd: Command) -> Child {
    let (tx, rx) = mpsc::channel();
    let program = format!("{:?}", cmd.get_program());
    spawner()
        .lock()
        .unwrap()
        .send((cmd, tx))
        .expect("spawner alive");
    rx.recv()
        .expect("spawner replies")
        .unwrap_or_else(|e| panic!("cannot start {program}: {e}"))
}

fn log_to(cmd: &mut Command, file: &Path) {
    let f = std::fs::File::create(file).unwrap();
    cmd.stdout(Stdio::null()).stderr(f);
}

/// The `runway` binary the replicas run: this build's, or `RUNWAY_BENCH_BIN`, with which the
/// benchmark (which shares this harness) compares two builds under one load generator.
fn runway_bin() -> PathBuf {
    std::env::var_os("RUNWAY_BENCH_BIN")
        .map(Into::into)
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_runway").into())
}

/// A free loopback port (bound, read, released). Here rather than shared with the test support
/// code, so that the kube benchmark can use this file on its own.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

fn assets() -> PathBuf {
    const BINARIES: [&str; 3] = ["etcd", "kube-apiserver", "kube-controller-manager"];
    let how = "Point KUBEBUILDER_ASSETS at a folder holding etcd, kube-apiserver and \
               kube-controller-manager (v1.36): `setup-envtest use 1.36 -p path` prints a folder \
               with the first two; kube-controller-manager is in the Kubernetes server release \
               (kubernetes-server-linux-amd64.tar.gz, server/bin/). CI extracts them into \
               .cache/k8s; `make e2e` uses that folder when it exists.";
    let Some(dir) = std::env::var_os(ASSETS_ENV) else {
        panic!("the e2e tier needs a Kubernetes control plane and {ASSETS_ENV} is not set. {how}");
    };
    let dir = PathBuf::from(dir);
    let missing: Vec<_> = BINARIES.iter().filter(|b| !dir.join(b).is_file()).collect();
    assert!(
        missing.is_empty(),
        "{ASSETS_ENV}={} lacks {missing:?}. {how}",
        dir.display()
    );
    dir
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl is installed");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A plain HTTP GET on loopback; the status code, or `None` when nothing answers.
pub fn http_status(port: u16, path: &str) -> Option<u16> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    buf.split_whitespace().nth(1)?.parse().ok()
}

pub fn wait_until(what: &str, mut ok: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ok() {
        assert!(start.elapsed() < PATIENCE, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

impl Cluster {
    /// Start a control plane with Runway installed, and `replicas` operators splitting the
    /// Runs into `shards`, with these lease timing flags (none: the defaults).
    pub fn start(replicas: usize, shards: u32, lease_flags: &[&str]) -> Self {
        Self::start_with(replicas, shards, lease_flags, &root().join("crds"))
    }

    /// [`Cluster::start`] with the CRDs of the folder `crds` (another release's, say).
    pub fn start_with(replicas: usize, shards: u32, lease_flags: &[&str], crds: &Path) -> Self {
        let bin = assets();
        let chart = std::env::var_os(CHART_ENV)
            .map(PathBuf::from)
            .unwrap_or_else(|| root().join("target/e2e/chart.yaml"));
        assert!(
            chart.is_file(),
            "{} is missing: run the tier with `make e2e`, which renders the chart first",
            chart.display()
        );
        let parent = root().join("target/e2e");
        prune_finished(&parent);
        let dir = parent.join(format!("cluster-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();

        // A CA, the API server's serving certificate, the ServiceAccount signing key.
        openssl(
            &dir,
            &[
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                "ca.key",
                "-out",
                "ca.crt",
                "-days",
                "2",
                "-subj",
                "/CN=runway-e2e-ca",
            ],
        );
        openssl(
            &dir,
            &[
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                "apiserver.key",
                "-out",
                "apiserver.csr",
                "-subj",
                "/CN=kube-apiserver",
            ],
        );
        std::fs::write(
            dir.join("san.ext"),
            "subjectAltName=IP:127.0.0.1,DNS:localhost\n",
        )
        .unwrap();
        openssl(
            &dir,
            &[
                "x509",
                "-req",
                "-in",
                "apiserver.csr",
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                "apiserver.crt",
                "-days",
                "2",
                "-extfile",
                "san.ext",
            ],
        );
        openssl(&dir, &["genrsa", "-out", "sa.key", "2048"]);
        openssl(&dir, &["rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub"]);
        let tokens: String = USERS
            .iter()
            .map(|(u, g)| format!("{},{u},{u}-uid,\"{g}\"\n", token(u)))
            .collect();
        std::fs::write(dir.join("tokens.csv"), tokens).unwrap();

        let (etcd_port, peer_port, api_port, kcm_port) =
            (free_port(), free_port(), free_port(), free_port());
        let etcd_url = format!("http://127.0.0.1:{etcd_port}");
        let mut etcd = Command::new(bin.join("etcd"));
        etcd.current_dir(&dir).args([
            "--name=e2e",
            "--data-dir=etcd",
            &format!("--listen-client-urls={etcd_url}"),
            &format!("--advertise-client-urls={etcd_url}"),
            &format!("--listen-peer-urls=http://127.0.0.1:{peer_port}"),
            "--unsafe-no-fsync",
        ]);
        log_to(&mut etcd, &dir.join("etcd.log"));
        let mut control_plane = vec![spawn(etcd)];

        let mut api = Command::new(bin.join("kube-apiserver"));
        api.current_dir(&dir).args([
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            &format!("--secure-port={api_port}"),
            "--tls-cert-file=apiserver.crt",
            "--tls-private-key-file=apiserver.key",
            "--client-ca-file=ca.crt",
            &format!("--etcd-servers={etcd_url}"),
            "--service-cluster-ip-range=10.0.0.0/24",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            // The static users' tokens carry no audience of their own: the API server vouches
            // for them for its own audiences, so Runway's (the chart's default) is added here,
            // as a cluster admin who signs people in with static tokens or OIDC would.
            &format!("--api-audiences={API_AUDIENCE},{AUDIENCE}"),
            "--service-account-key-file=sa.pub",
            "--service-account-signing-key-file=sa.key",
            "--authorization-mode=RBAC",
            "--endpoint-reconciler-type=none",
            "--token-auth-file=tokens.csv",
        ]);
        log_to(&mut api, &dir.join("kube-apiserver.log"));
        control_plane.push(spawn(api));

        let server = format!("https://127.0.0.1:{api_port}");
        for (user, _) in USERS {
            write_kubeconfig(&dir, &server, user, &token(user));
        }
        let me = Self {
            state_key: dir.join("state.key"),
            dir,
            server,
            operators: Mutex::new(Vec::new()),
            control_plane: Mutex::new(control_plane),
            shards,
            lease_flags: lease_flags.iter().map(|f| f.to_string()).collect(),
        };
        wait_until("the API server to be ready", || {
            me.kubectl("admin", &["get", "--raw=/readyz"])
                .status
                .success()
        });

        let kubeconfig = me.kubeconfig("admin");
        let kubeconfig = kubeconfig.to_str().unwrap();
        let mut kcm = Command::new(bin.join("kube-controller-manager"));
        kcm.current_dir(&me.dir).args([
            &format!("--kubeconfig={kubeconfig}"),
            &format!("--authentication-kubeconfig={kubeconfig}"),
            &format!("--authorization-kubeconfig={kubeconfig}"),
            "--bind-address=127.0.0.1",
            &format!("--secure-port={kcm_port}"),
            "--cert-dir=kcm-certs",
            "--leader-elect=false",
            "--use-service-account-credentials=true",
            "--service-account-private-key-file=sa.key",
            "--root-ca-file=ca.crt",
            "--cluster-signing-cert-file=ca.crt",
            "--cluster-signing-key-file=ca.key",
            "--controllers=*",
        ]);
        log_to(&mut kcm, &me.dir.join("kube-controller-manager.log"));
        me.control_plane.lock().unwrap().push(spawn(kcm));

        // Install as a cluster admin would: CRDs, then the chart's objects, by server-side apply.
        me.admin(&["apply", "--server-side", "-f", crds.to_str().unwrap()]);
        me.admin(&[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd/workflows.runway.dev",
            "crd/runs.runway.dev",
        ]);
        me.admin(&["create", "namespace", SYSTEM_NS]);
        me.admin(&[
            "apply",
            "--server-side",
            "-n",
            SYSTEM_NS,
            "-f",
            chart.to_str().unwrap(),
        ]);
        let key = me.admin(&[
            "get",
            "secret",
            "runway-state-key",
            "-n",
            SYSTEM_NS,
            "-o",
            "jsonpath={.data.state-key}",
        ]);
        let key = data_encoding::BASE64.decode(key.trim().as_bytes()).unwrap();
        std::fs::write(&me.state_key, key).unwrap();
        let sa_token = me.admin(&[
            "create",
            "token",
            OPERATOR_SA,
            "-n",
            SYSTEM_NS,
            "--duration=24h",
        ]);
        write_kubeconfig(&me.dir, &me.server, "operator", sa_token.trim());
        std::fs::write(me.dir.join("operator.token"), sa_token.trim()).unwrap();

        for i in 0..replicas {
            me.start_operator(&format!("replica-{i}"));
        }
        me
    }

    /// The kubeconfig file of a static user (or `operator`, the chart's ServiceAccount).
    pub fn kubeconfig(&self, user: &str) -> PathBuf {
        self.dir.join(format!("{user}.kubeconfig"))
    }

    /// Run kubectl as `user`.
    pub fn kubectl(&self, user: &str, args: &[&str]) -> Output {
        Command::new("kubectl")
            .arg(format!("--kubeconfig={}", self.kubeconfig(user).display()))
            .args(args)
            .output()
            .expect("kubectl is installed")
    }

    /// Run kubectl as `user` with `stdin` as standard input.
    pub fn kubectl_stdin(&self, user: &str, args: &[&str], stdin: &str) -> Output {
        let mut child = Command::new("kubectl")
            .arg(format!("--kubeconfig={}", self.kubeconfig(user).display()))
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kubectl is installed");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(stdin.as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    }

    /// Run kubectl as `user`; it must succeed. Returns its standard output.
    pub fn ok(&self, user: &str, args: &[&str]) -> String {
        let out = self.kubectl(user, args);
        assert!(
            out.status.success(),
            "kubectl {args:?} as {user} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Run kubectl as the cluster admin; it must succeed.
    pub fn admin(&self, args: &[&str]) -> String {
        self.ok("admin", args)
    }

    /// A merge patch of `what` (`run/<name>`) as `user`, as `kubectl patch --type=merge` does.
    pub fn patch(&self, user: &str, ns: &str, what: &str, patch: &serde_json::Value) -> Output {
        self.kubectl(
            user,
            &[
                "patch",
                what,
                "-n",
                ns,
                "--type=merge",
                "-p",
                &patch.to_string(),
            ],
        )
    }

    /// Apply YAML as `user` (server-side).
    pub fn apply(&self, user: &str, ns: &str, yaml: &str) -> Output {
        self.kubectl_stdin(user, &["apply", "--server-side", "-n", ns, "-f", "-"], yaml)
    }

    /// A fresh namespace for one test, with `RoleBinding`s of the chart's tenant roles: `devs`
    /// and `ops` hold runway-caller and runway-approver (cancel and answer need `update`);
    /// `mallory` gets nothing.
    pub fn namespace(&self, prefix: &str) -> String {
        let mut b = [0u8; 4];
        getrandom::fill(&mut b).unwrap();
        let ns = format!("{prefix}-{}", data_encoding::HEXLOWER.encode(&b));
        self.admin(&["create", "namespace", &ns]);
        self.admin(&[
            "create",
            "rolebinding",
            "devs-call",
            "-n",
            &ns,
            "--clusterrole=runway-caller",
            "--group=devs",
        ]);
        self.admin(&[
            "create",
            "rolebinding",
            "ops-call",
            "-n",
            &ns,
            "--clusterrole=runway-caller",
            "--group=ops",
        ]);
        self.admin(&[
            "create",
            "rolebinding",
            "approve",
            "-n",
            &ns,
            "--clusterrole=runway-approver",
            "--group=ops",
            "--group=devs",
        ]);
        ns
    }

    /// Start a replica of `runway operator` as the chart's ServiceAccount, with the chart's
    /// flags, and wait until it serves.
    pub fn start_operator(&self, identity: &str) -> u16 {
        self.start_operator_keyed(identity, true)
    }

    /// Start a replica; without `key_file` it takes the state key from the chart's Secret
    /// itself (`--state-key-secret`), as a replica started by hand would.
    pub fn start_operator_keyed(&self, identity: &str, key_file: bool) -> u16 {
        self.start_operator_with(identity, key_file, self.shards, &[])
    }

    /// Start a replica that splits the Runs into `shards`, with `extra` flags.
    pub fn start_operator_with(
        &self,
        identity: &str,
        key_file: bool,
        shards: u32,
        extra: &[&str],
    ) -> u16 {
        self.start_operator_env(identity, key_file, shards, extra, &[])
    }

    /// [`Cluster::start_operator_with`] with these environment variables set.
    pub fn start_operator_env(
        &self,
        identity: &str,
        key_file: bool,
        shards: u32,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> u16 {
        // A port found free can be taken by someone else before the replica binds it; such a
        // start is tried again on other ports, any other early exit fails with the log.
        let log = self.dir.join(format!("{identity}.log"));
        for attempt in 1.. {
            let (mcp, metrics) = (free_port(), free_port());
            let mut cmd = Command::new(runway_bin());
            cmd.envs(env.iter().copied());
            cmd.current_dir(&self.dir)
                .env("KUBECONFIG", self.kubeconfig("operator"))
                .env("POD_NAMESPACE", SYSTEM_NS)
                .env("POD_NAME", identity)
                .env("RUST_LOG", "info,rmcp=warn,kube=warn")
                .args([
                    "operator",
                    &format!("--listen=127.0.0.1:{mcp}"),
                    &format!("--metrics-listen=127.0.0.1:{metrics}"),
                    &format!("--lease-name={LEASE}"),
                    &format!("--shards={shards}"),
                    // The tests' HTTP sinks run on this machine's loopback, which the
                    // operator's egress policy denies by default.
                    "--egress-allow=127.0.0.1/32",
                    &format!("--token-audience={AUDIENCE}"),
                ]);
            cmd.args(&self.lease_flags).args(extra);
            if key_file {
                cmd.arg(format!("--state-key-file={}", self.state_key.display()));
            }
            log_to(&mut cmd, &log);
            let mut child = spawn(cmd);
            let start = Instant::now();
            let exited = loop {
                if http_status(metrics, "/readyz") == Some(200) {
                    break None;
                }
                if let Some(status) = child.try_wait().unwrap() {
                    break Some(status);
                }
                assert!(
                    start.elapsed() < PATIENCE,
                    "timed out waiting for operator {identity} to serve"
                );
                std::thread::sleep(Duration::from_millis(200));
            };
            let Some(status) = exited else {
                self.operators.lock().unwrap().push(Operator {
                    identity: identity.into(),
                    mcp,
                    metrics,
                    child,
                });
                return mcp;
            };
            let said = std::fs::read_to_string(&log).unwrap_or_default();
            assert!(
                attempt < 3 && said.contains("Address already in use"),
                "operator {identity} exited ({status}) before serving: {said}"
            );
        }
        unreachable!("the loop returns or fails")
    }

    /// The chart's ServiceAccount token the replicas use (from the TokenRequest API).
    pub fn operator_token(&self) -> String {
        std::fs::read_to_string(self.dir.join("operator.token")).unwrap()
    }

    /// The API server's port on loopback.
    pub fn api_port(&self) -> u16 {
        self.server.rsplit(':').next().unwrap().parse().unwrap()
    }

    /// Start `cmd` as a child of this test binary (it dies with it), its stderr in
    /// `<name>.log` beside the control plane's logs.
    pub fn spawn_logged(&self, mut cmd: Command, name: &str) -> Child {
        log_to(&mut cmd, &self.dir.join(format!("{name}.log")));
        spawn(cmd)
    }

    /// MCP ports of the running replicas.
    pub fn mcp_ports(&self) -> Vec<u16> {
        self.operators
            .lock()
            .unwrap()
            .iter()
            .map(|o| o.mcp)
            .collect()
    }

    /// Base URL of replica `i`.
    pub fn base(&self, i: usize) -> String {
        format!("http://127.0.0.1:{}", self.mcp_ports()[i])
    }

    /// Identities of the running replicas.
    pub fn replicas(&self) -> Vec<String> {
        let ops = self.operators.lock().unwrap();
        ops.iter().map(|o| o.identity.clone()).collect()
    }

    /// Base URL of the replica named `identity`.
    pub fn base_of(&self, identity: &str) -> String {
        format!("http://127.0.0.1:{}", self.mcp_port(identity))
    }

    /// The replica that holds the Lease now.
    pub fn leader(&self) -> String {
        let mut holder = String::new();
        wait_until("a leader", || {
            holder = self.holders_of(1).remove(0);
            self.operators
                .lock()
                .unwrap()
                .iter()
                .any(|o| o.identity == holder)
        });
        holder
    }

    /// `f` of the running replica named `identity`.
    fn with<T>(&self, identity: &str, f: impl FnOnce(&Operator) -> T) -> T {
        let ops = self.operators.lock().unwrap();
        let op = ops
            .iter()
            .find(|o| o.identity == identity)
            .unwrap_or_else(|| panic!("no replica {identity}"));
        f(op)
    }

    /// Remove the replica named `identity` from the running ones (to stop it).
    fn take(&self, identity: &str) -> Operator {
        let mut ops = self.operators.lock().unwrap();
        let i = ops
            .iter()
            .position(|o| o.identity == identity)
            .unwrap_or_else(|| panic!("no replica {identity}"));
        ops.remove(i)
    }

    /// SIGKILL a replica, as a crash.
    pub fn kill(&self, identity: &str) {
        let mut op = self.take(identity);
        op.child.kill().unwrap();
        op.child.wait().unwrap();
    }

    /// Port of a replica's MCP endpoint.
    pub fn mcp_port(&self, identity: &str) -> u16 {
        self.with(identity, |op| op.mcp)
    }

    /// Every process of the cluster by name and id: etcd, kube-apiserver,
    /// kube-controller-manager and the running replicas (for what each of them costs).
    pub fn processes(&self) -> Vec<(String, u32)> {
        let names = ["etcd", "kube-apiserver", "kube-controller-manager"];
        let mut out: Vec<(String, u32)> = names
            .iter()
            .zip(self.control_plane.lock().unwrap().iter())
            .map(|(n, c)| (n.to_string(), c.id()))
            .collect();
        for op in self.operators.lock().unwrap().iter() {
            out.push((op.identity.clone(), op.child.id()));
        }
        out
    }

    /// Process id of a replica.
    pub fn pid(&self, identity: &str) -> u32 {
        self.with(identity, |op| op.child.id())
    }

    /// Port of a replica's metrics endpoint.
    pub fn metrics_port(&self, identity: &str) -> u16 {
        self.with(identity, |op| op.metrics)
    }

    /// Stop a replica as Kubernetes does (SIGTERM), and wait until it has exited.
    pub fn stop(&self, identity: &str) {
        let mut op = self.take(identity);
        let pid = op.child.id().to_string();
        assert!(
            Command::new("kill")
                .args(["-TERM", &pid])
                .status()
                .unwrap()
                .success()
        );
        let status = op.child.wait().unwrap();
        assert!(status.success(), "{identity} stopped with {status}");
    }

    /// The holder of each shard's Lease (empty when none), shard 0 first.
    pub fn holders(&self) -> Vec<String> {
        self.holders_of(self.shards)
    }

    /// The holder of each of `shards` shard Leases (empty when none), shard 0 first.
    pub fn holders_of(&self, shards: u32) -> Vec<String> {
        (0..shards)
            .map(|i| {
                let name = match i {
                    0 => LEASE.to_owned(),
                    i => format!("{LEASE}-{i}"),
                };
                self.admin(&[
                    "get",
                    "lease",
                    &name,
                    "-n",
                    SYSTEM_NS,
                    "-o",
                    "jsonpath={.spec.holderIdentity}",
                    "--ignore-not-found",
                ])
                .trim()
                .to_owned()
            })
            .collect()
    }

    /// Wait until the shards' holders satisfy `ok`; returns them.
    pub fn wait_holders(&self, what: &str, ok: impl Fn(&[String]) -> bool) -> Vec<String> {
        let mut holders = vec![];
        wait_until(what, || {
            holders = self.holders();
            ok(&holders)
        });
        holders
    }

    /// A replica's log so far, for assertion messages.
    pub fn log(&self, identity: &str) -> String {
        std::fs::read_to_string(self.dir.join(format!("{identity}.log"))).unwrap_or_default()
    }

    /// Wait until these Workflows of `ns` are Ready (as `kubectl wait` does).
    pub fn wait_ready(&self, ns: &str, workflows: &[&str]) {
        let names: Vec<String> = workflows.iter().map(|w| format!("wf/{w}")).collect();
        let mut args = vec!["wait", "-n", ns, "--for=condition=Ready", "--timeout=60s"];
        args.extend(names.iter().map(String::as_str));
        self.admin(&args);
    }

    /// Wait (polling kubectl, as a user would) until `what` in `ns` exists and its `jsonpath`
    /// equals `want`. A Run may be named (a parent's status names its child) before it is
    /// created, and `--for=jsonpath` gives up at once on an object that does not exist yet.
    pub fn wait_jsonpath(&self, ns: &str, what: &str, jsonpath: &str, want: &str) {
        let timeout = format!("--timeout={}s", PATIENCE.as_secs());
        let created = self.kubectl("admin", &["wait", "-n", ns, "--for=create", what, &timeout]);
        assert!(
            created.status.success(),
            "{what} was never created: {}",
            String::from_utf8_lossy(&created.stderr)
        );
        let out = self.kubectl(
            "admin",
            &[
                "wait",
                "-n",
                ns,
                &format!("--for=jsonpath={jsonpath}={want}"),
                what,
                &timeout,
            ],
        );
        assert!(
            out.status.success(),
            "{what} never had {jsonpath}={want}: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            self.admin(&["get", "-n", ns, what, "-o", "yaml"])
        );
    }
}

fn write_kubeconfig(dir: &Path, server: &str, user: &str, token: &str) {
    let ca = dir.join("ca.crt");
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: e2e\n  cluster:\n    server: {server}\n    \
         certificate-authority: {}\nusers:\n- name: {user}\n  user:\n    token: {token}\n\
         contexts:\n- name: e2e\n  context:\n    cluster: e2e\n    user: {user}\n\
         current-context: e2e\n",
        ca.display()
    );
    std::fs::write(dir.join(format!("{user}.kubeconfig")), text).unwrap();
}
