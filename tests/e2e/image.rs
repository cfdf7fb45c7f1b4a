//! The Runway image as a container runtime would see it: the OCI archive `make image` builds,
//! unpacked with umoci, and its entrypoint started the way the kubelet starts a container of
//! the chart's Deployment — the image's user, working directory and environment, the chart's
//! `args` in place of the image's `CMD`, a read-only root filesystem, the ServiceAccount token
//! and the state key mounted where Kubernetes mounts them, nothing else.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command};

use serde_json::Value;

use crate::cluster::{Cluster, SYSTEM_NS, free_port, root, wait_until};

/// The variable naming the folder `make image` wrote the archive to (`make e2e` sets it).
pub const IMAGE_DIR_ENV: &str = "RUNWAY_E2E_IMAGE_DIR";

/// Where the kubelet mounts a Pod's ServiceAccount token, CA and namespace.
const SERVICE_ACCOUNT_DIR: &str = "var/run/secrets/kubernetes.io/serviceaccount";

/// An unpacked image.
pub struct Image {
    /// The bundle folder: `rootfs/` and the runtime's `config.json`.
    pub bundle: PathBuf,
    /// The image configuration (`config` of the OCI image config blob).
    pub config: Value,
    /// Every path its layers hold, relative, sorted.
    layer_paths: Vec<String>,
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().expect("the program is installed");
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn json_file(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

impl Image {
    /// The image of the folder named by [`IMAGE_DIR_ENV`] (default `target/image`), unpacked
    /// once per test binary into a fresh folder under `target/e2e`.
    pub fn unpacked() -> &'static Self {
        static IMAGE: std::sync::OnceLock<Image> = std::sync::OnceLock::new();
        IMAGE.get_or_init(Self::unpack)
    }

    fn unpack() -> Self {
        let dir = std::env::var_os(IMAGE_DIR_ENV)
            .map(PathBuf::from)
            .unwrap_or_else(|| root().join("target/image"));
        let archive = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}: run `make image` (make e2e does)", dir.display()))
            .filter_map(Result::ok)
            .map(|e| e.path())
            .find(|p| p.to_string_lossy().ends_with(".oci.tar"))
            .unwrap_or_else(|| panic!("no .oci.tar in {}: run `make image`", dir.display()));
        let work = root()
            .join("target/e2e")
            .join(format!("image-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&work);
        let layout = work.join("layout");
        std::fs::create_dir_all(&layout).unwrap();
        run(Command::new("tar")
            .arg("-xf")
            .arg(&archive)
            .arg("-C")
            .arg(&layout));
        let index = json_file(&layout.join("index.json"));
        let manifest_ref = &index["manifests"][0];
        let tag = manifest_ref["annotations"]["org.opencontainers.image.ref.name"]
            .as_str()
            .expect("the image is tagged")
            .to_owned();
        let blob = |digest: &str| {
            layout
                .join("blobs/sha256")
                .join(digest.trim_start_matches("sha256:"))
        };
        let manifest = json_file(&blob(manifest_ref["digest"].as_str().unwrap()));
        let config = json_file(&blob(manifest["config"]["digest"].as_str().unwrap()));
        // Every layer is a whole tar archive: a runtime refuses one that ends early, even where
        // a lenient unpacker takes what is there.
        let mut layer_paths = vec![];
        for layer in manifest["layers"].as_array().unwrap() {
            let path = blob(layer["digest"].as_str().unwrap());
            let listed = Command::new("tar").arg("-tzf").arg(&path).output().unwrap();
            assert!(
                listed.status.success(),
                "layer {} is not a whole tar archive: {}",
                layer["digest"],
                String::from_utf8_lossy(&listed.stderr)
            );
            layer_paths.extend(
                String::from_utf8_lossy(&listed.stdout)
                    .lines()
                    .map(|l| l.trim_start_matches("./").trim_end_matches('/').to_owned())
                    .filter(|l| !l.is_empty() && l != "."),
            );
        }
        layer_paths.sort();
        layer_paths.dedup();
        let bundle = work.join("bundle");
        run(Command::new("umoci")
            .arg("unpack")
            .arg("--image")
            .arg(format!("{}:{tag}", layout.display()))
            .arg(&bundle));
        Self {
            bundle,
            config: config["config"].clone(),
            layer_paths,
        }
    }

    /// The image's root filesystem.
    pub fn rootfs(&self) -> PathBuf {
        self.bundle.join("rootfs")
    }

    /// Every path the image's layers hold (files, links and folders), relative, sorted.
    pub fn paths(&self) -> Vec<String> {
        self.layer_paths.clone()
    }

    /// The image's user, as `uid:gid`.
    pub fn user(&self) -> String {
        self.config["User"].as_str().unwrap_or_default().to_owned()
    }

    /// The image's environment, `(name, value)`.
    pub fn env(&self) -> Vec<(String, String)> {
        self.config["Env"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|kv| {
                kv.as_str()?
                    .split_once('=')
                    .map(|(k, v)| (k.to_owned(), v.to_owned()))
            })
            .collect()
    }

    /// The entrypoint and the arguments that follow it: Kubernetes `args` replace `CMD`.
    fn argv(&self, args: &[String]) -> Vec<String> {
        let entrypoint = self.config["Entrypoint"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        entrypoint
            .iter()
            .map(|v| v.as_str().unwrap().to_owned())
            .chain(args.iter().cloned())
            .collect()
    }

    /// Run the entrypoint with `args` (or the image's `CMD` when `None`) to its end, with a
    /// read-only root and nothing mounted; its standard output.
    pub fn output(&self, args: Option<&[String]>) -> String {
        let args = args.map(<[String]>::to_vec).unwrap_or_else(|| {
            self.config["Cmd"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|v| v.as_str().unwrap().to_owned())
                .collect()
        });
        let mut cmd = self.container(&[], &[], &args);
        run(&mut cmd)
    }

    /// Start `runway operator` from the image as a replica of the chart's Deployment would
    /// run on `c`: `args` are the container's (from the rendered chart, `$(VAR)` expanded, the
    /// ports set), `identity` its Pod name. Returns the process and its (MCP, metrics) ports.
    pub fn start_operator(
        &self,
        c: &Cluster,
        identity: &str,
        args: &[String],
    ) -> (Child, u16, u16) {
        let (mcp, metrics) = (free_port(), free_port());
        let args: Vec<String> = args
            .iter()
            .map(|a| {
                if a.starts_with("--listen=") {
                    format!("--listen=127.0.0.1:{mcp}")
                } else if a.starts_with("--metrics-listen=") {
                    format!("--metrics-listen=127.0.0.1:{metrics}")
                } else {
                    a.replace("$(POD_IP)", "127.0.0.1")
                }
            })
            .collect();
        // What the kubelet mounts: the projected ServiceAccount volume and the state key Secret
        // (mode 0440, group = the Pod's fsGroup).
        let mounts = self.bundle.join("mounts");
        let sa = mounts.join("serviceaccount");
        std::fs::create_dir_all(&sa).unwrap();
        std::fs::write(sa.join("token"), c.operator_token()).unwrap();
        std::fs::copy(c.dir.join("ca.crt"), sa.join("ca.crt")).unwrap();
        std::fs::write(sa.join("namespace"), SYSTEM_NS).unwrap();
        let state = mounts.join("state");
        std::fs::create_dir_all(&state).unwrap();
        let key_arg = args
            .iter()
            .find_map(|a| a.strip_prefix("--state-key-file="))
            .expect("the chart passes --state-key-file");
        let key_file = state.join(Path::new(key_arg).file_name().unwrap());
        std::fs::copy(&c.state_key, &key_file).unwrap();
        let gid = self.user().split(':').nth(1).unwrap_or("0").to_owned();
        run(Command::new("chown").arg(format!("0:{gid}")).arg(&key_file));
        run(Command::new("chmod").arg("0440").arg(&key_file));
        let key_dir = Path::new(key_arg)
            .parent()
            .unwrap()
            .to_str()
            .unwrap()
            .trim_start_matches('/')
            .to_owned();
        let binds = [
            (sa.as_path(), SERVICE_ACCOUNT_DIR),
            (state.as_path(), key_dir.as_str()),
        ];
        let env = [
            ("KUBERNETES_SERVICE_HOST", "127.0.0.1".to_owned()),
            ("KUBERNETES_SERVICE_PORT", c.api_port().to_string()),
            ("POD_NAMESPACE", SYSTEM_NS.to_owned()),
            ("POD_NAME", identity.to_owned()),
            ("POD_IP", "127.0.0.1".to_owned()),
            ("RUST_LOG", "info,rmcp=warn,kube=warn".to_owned()),
        ];
        let cmd = self.container(&binds, &env, &args);
        let child = c.spawn_logged(cmd, identity);
        wait_until(&format!("the image's operator {identity} to serve"), || {
            crate::cluster::http_status(metrics, "/readyz") == Some(200)
        });
        (child, mcp, metrics)
    }

    /// The command that runs the entrypoint with `args` as a container: in a mount namespace of
    /// its own, `binds` (host folder, path in the image) mounted read-only, `/proc`, a minimal
    /// `/dev` and a read-only root; then `chroot` as the image's user, in its working
    /// directory, with the image's environment and `env` only.
    fn container(
        &self,
        binds: &[(&Path, &str)],
        env: &[(&str, String)],
        args: &[String],
    ) -> Command {
        let rootfs = self.rootfs();
        // The runtime makes the mount points; they are not files of the image.
        let mut points = vec!["proc".to_owned(), "dev".to_owned()];
        points.extend(binds.iter().map(|(_, at)| (*at).to_owned()));
        for p in &points {
            std::fs::create_dir_all(rootfs.join(p)).unwrap();
        }
        for dev in ["null", "zero", "random", "urandom"] {
            let _ = std::fs::File::create(rootfs.join("dev").join(dev));
        }
        let mut script = String::from("set -eu\nr=\"$1\"; shift\nmount --bind \"$r\" \"$r\"\n");
        script.push_str("mount -t proc proc \"$r/proc\"\n");
        for dev in ["null", "zero", "random", "urandom"] {
            script.push_str(&format!("mount --bind /dev/{dev} \"$r/dev/{dev}\"\n"));
        }
        for (host, at) in binds {
            script.push_str(&format!(
                "mount --bind {host:?} \"$r/{at}\"\nmount -o remount,bind,ro \"$r/{at}\"\n"
            ));
        }
        script.push_str("mount -o remount,bind,ro \"$r\"\n");
        let (uid, gid) = self
            .user()
            .split_once(':')
            .map(|(u, g)| (u.to_owned(), g.to_owned()))
            .expect("the image names uid:gid");
        // chroot starts the process in `/`, which must be the image's working directory.
        let cwd = self.config["WorkingDir"].as_str().unwrap_or_default();
        assert!(
            cwd.is_empty() || cwd == "/",
            "a working directory of {cwd} is not run here"
        );
        let path = self
            .env()
            .into_iter()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v)
            .unwrap_or_default();
        script.push_str(&format!(
            "PATH={path:?} /usr/sbin/chroot --userspec={uid}:{gid} --groups={gid} \"$r\" \"$@\"\n"
        ));
        // A PID namespace whose first process is this shell, which stays root: when the test
        // binary dies, `--kill-child` kills the shell and with it everything in the namespace
        // (a parent-death signal would not reach the entrypoint, whose credentials changed).
        let mut cmd = Command::new("unshare");
        cmd.args([
            "--mount",
            "--propagation",
            "private",
            "--pid",
            "--fork",
            "--kill-child",
            "sh",
            "-c",
        ])
        .arg(script)
        .arg("container")
        .arg(&rootfs);
        cmd.env_clear();
        for (k, v) in self.env() {
            cmd.env(k, v);
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        // `sh`, `mount` and `chroot` are the runtime's, from the host; the script sets the
        // image's PATH again before it starts the entrypoint.
        cmd.env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin");
        cmd.args(self.argv(args));
        cmd
    }
}
