//! An embedded Runway (store, manifest Workflows, controller) in the test process, plus waiting
//! helpers that follow the store's watch instead of sleeping.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use runway::api::{
    CancelRequest, InputAction, InputResponse, Principal, Run, RunSpec, WorkflowRef,
};
use runway::controller::{Config, Controller, LogEvents};
use runway::engine::validate::Capabilities;
use runway::steps::{Executors, StaticSecrets};
use runway::store::manifests::ManifestWorkflows;
use runway::store::sqlite::SqliteStore;
use runway::store::{RunStore, StoreError};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// Upper bound for any wait; a test that needs it has failed.
pub const PATIENCE: Duration = Duration::from_secs(20);

pub struct TempDir(PathBuf);

/// The commit the tested build names: what `git rev-parse HEAD` says in the checkout, or
/// `unknown` outside one (as the build script decides).
pub fn head_commit() -> String {
    std::env::var("RUNWAY_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(|| {
            let out = std::process::Command::new("git")
                .args(["rev-parse", "HEAD"])
                .current_dir(env!("CARGO_MANIFEST_DIR"))
                .output()
                .ok()?;
            out.status
                .success()
                .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
        })
        .unwrap_or_else(|| "unknown".to_owned())
}

impl TempDir {
    pub fn new() -> Self {
        let mut b = [0u8; 8];
        getrandom::fill(&mut b).unwrap();
        let p = std::env::temp_dir().join(format!(
            "runway-test-{}",
            data_encoding::HEXLOWER.encode(&b)
        ));
        std::fs::create_dir_all(&p).unwrap();
        Self(p)
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The egress policy of `runway serve`: loopback (where the tests' HTTP servers run) allowed.
pub fn local_egress() -> runway::steps::egress::Egress {
    runway::steps::egress::Egress {
        allow_loopback: true,
        ..Default::default()
    }
}

/// A fresh directory with `manifests` (file name, YAML) in its `workflows/`.
pub fn workflows_dir(manifests: &[(&str, &str)]) -> TempDir {
    let dir = TempDir::new();
    std::fs::create_dir_all(dir.path().join("workflows")).unwrap();
    for (name, yaml) in manifests {
        std::fs::write(dir.path().join("workflows").join(name), yaml).unwrap();
    }
    dir
}

pub struct Harness {
    pub dir: TempDir,
    pub store: SqliteStore,
    pub workflows: ManifestWorkflows,
    shutdown: CancellationToken,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Harness {
    /// Write `manifests` (file name, YAML) and start a controller on a fresh database.
    pub fn start(manifests: &[(&str, &str)]) -> Self {
        Self::start_in(workflows_dir(manifests))
    }

    /// Start a controller on the database and manifests already in `dir`.
    pub fn start_in(dir: TempDir) -> Self {
        runway::install_crypto_provider();
        let executor = Arc::new(Executors::new(
            Arc::new(StaticSecrets::default()),
            &local_egress(),
        ));
        Self::start_with(dir, executor, 8)
    }

    /// Start a controller with `workers` workers and this executor.
    pub fn start_with(
        dir: TempDir,
        executor: Arc<dyn runway::steps::Executor>,
        workers: usize,
    ) -> Self {
        Self::start_wrapped(dir, executor, workers, |s| Arc::new(s))
    }

    /// Start a controller whose store is `wrap` around the database (the harness itself reads
    /// and writes the database directly). Stopped, it stops as a crash would.
    pub fn start_wrapped(
        dir: TempDir,
        executor: Arc<dyn runway::steps::Executor>,
        workers: usize,
        wrap: impl FnOnce(SqliteStore) -> Arc<dyn RunStore>,
    ) -> Self {
        let config = Config {
            workers,
            drain: Duration::ZERO,
            ..Default::default()
        };
        Self::launch(dir, executor, config, wrap)
    }

    /// Start a controller that, told to stop, lets the effects in progress finish and writes
    /// them for up to `drain`, as `runway serve` and the operator do.
    pub fn start_draining(
        dir: TempDir,
        executor: Arc<dyn runway::steps::Executor>,
        drain: Duration,
    ) -> Self {
        let config = Config {
            workers: 8,
            drain,
            ..Default::default()
        };
        Self::launch(dir, executor, config, |s| Arc::new(s))
    }

    fn launch(
        dir: TempDir,
        executor: Arc<dyn runway::steps::Executor>,
        config: Config,
        wrap: impl FnOnce(SqliteStore) -> Arc<dyn RunStore>,
    ) -> Self {
        runway::install_crypto_provider();
        let store = SqliteStore::open(&dir.path().join("runs.db")).unwrap();
        let workflows =
            ManifestWorkflows::load(&dir.path().join("workflows"), Capabilities { jobs: false });
        let ctl = Controller::new(
            wrap(store.clone()),
            Arc::new(workflows.clone()),
            executor,
            Arc::new(LogEvents),
            config,
        );
        let shutdown = CancellationToken::new();
        let token = shutdown.clone();
        let task = tokio::spawn(async move { ctl.run(token).await });
        Self {
            dir,
            store,
            workflows,
            shutdown,
            task: Some(task),
        }
    }

    /// Tell the controller to stop, without waiting for it.
    pub fn begin_stop(&self) {
        self.shutdown.cancel();
    }

    /// Stop the controller (unless started draining, as a crash would: nothing is cleaned up)
    /// and hand back the directory.
    pub async fn stop(mut self) -> TempDir {
        self.shutdown.cancel();
        self.task.take().unwrap().await.unwrap();
        let Harness { dir, .. } = self;
        dir
    }

    pub async fn create(&self, workflow: &str, args: Value) -> Run {
        let name = format!("{workflow}-{}", runway::store::new_uid());
        self.create_named(workflow, &name, args).await
    }

    /// A Run of `workflow` named `name` (as `kubectl apply` of a fixed name makes one).
    pub async fn create_named(&self, workflow: &str, name: &str, args: Value) -> Run {
        let mut run = Run::new(
            name,
            RunSpec {
                workflow_ref: WorkflowRef {
                    name: workflow.into(),
                },
                arguments: Some(args),
                requested_by: Some(Principal {
                    username: "alice".into(),
                    uid: None,
                    groups: vec!["dev".into()],
                }),
                cancel: None,
                pause: None,
                retry_of: None,
                priority: None,
                input_responses: BTreeMap::new(),
            },
        );
        run.metadata.namespace = Some("default".into());
        // As the MCP endpoint does: orders Runs created within one second.
        run.metadata.annotations = Some(BTreeMap::from([(
            runway::api::annotations::REQUESTED_AT.to_owned(),
            jiff::Timestamp::now().to_string(),
        )]));
        self.store.create(run).await.unwrap()
    }

    /// Wait until the Run satisfies `pred`, following the watch.
    pub async fn wait_for(&self, name: &str, what: &str, pred: impl Fn(&Run) -> bool) -> Run {
        wait_for(&self.store, name, what, pred).await
    }

    pub async fn answer(
        &self,
        name: &str,
        key: &str,
        action: InputAction,
        content: Value,
        who: &str,
        groups: &[&str],
    ) {
        modify(&self.store, name, |r| {
            r.spec.input_responses.insert(
                key.into(),
                InputResponse {
                    action,
                    content: Some(content.clone()),
                    answered_by: Some(who.into()),
                    answered_by_groups: groups.iter().map(|g| g.to_string()).collect(),
                    answered_at: Some(jiff::Timestamp::now().to_string()),
                },
            );
        })
        .await;
    }

    pub async fn cancel(&self, name: &str, reason: &str) {
        modify(&self.store, name, |r| {
            r.spec.cancel = Some(CancelRequest {
                reason: Some(reason.into()),
                requested_by: Some("alice".into()),
                requested_at: Some(jiff::Timestamp::now().to_string()),
            });
        })
        .await;
    }
}

pub async fn modify(store: &SqliteStore, name: &str, f: impl Fn(&mut Run)) {
    loop {
        let mut run = store.get("default", name).await.unwrap().unwrap();
        f(&mut run);
        match store.update(run).await {
            Ok(_) => return,
            Err(StoreError::Conflict) => continue,
            Err(e) => panic!("update failed: {e}"),
        }
    }
}

pub async fn wait_for(
    store: &SqliteStore,
    name: &str,
    what: &str,
    pred: impl Fn(&Run) -> bool,
) -> Run {
    wait_for_in(store, "default", name, what, pred).await
}

/// Wait until Run `ns/name` satisfies `pred`, following the store's watch.
pub async fn wait_for_in(
    store: &SqliteStore,
    ns: &str,
    name: &str,
    what: &str,
    pred: impl Fn(&Run) -> bool,
) -> Run {
    let rv = store.resource_version().await.unwrap();
    let mut watch = store.watch(Some(rv));
    let check = async {
        if let Some(r) = store.get(ns, name).await.unwrap()
            && pred(&r)
        {
            return r;
        }
        while let Some(ev) = watch.next().await {
            let ev = ev.unwrap();
            let r = ev.run();
            if r.metadata.name.as_deref() == Some(name)
                && r.metadata.namespace.as_deref() == Some(ns)
                && pred(r)
            {
                return r.clone();
            }
        }
        panic!("watch ended")
    };
    match tokio::time::timeout(PATIENCE, check).await {
        Ok(r) => r,
        Err(_) => {
            let now = store.get(ns, name).await.unwrap();
            panic!("timed out waiting for {name} to be {what}; it is {now:#?}")
        }
    }
}

/// Wait until some Run of namespace `ns` satisfies `pred` (one there already, or one the
/// store's watch brings).
pub async fn wait_for_any(
    store: &SqliteStore,
    ns: &str,
    what: &str,
    pred: impl Fn(&Run) -> bool,
) -> Run {
    let rv = store.resource_version().await.unwrap();
    let mut watch = store.watch(Some(rv));
    let check = async {
        let now = store.list(Some(ns), &Default::default()).await.unwrap();
        if let Some(r) = now.iter().find(|r| pred(r)) {
            return (**r).clone();
        }
        while let Some(ev) = watch.next().await {
            let r = ev.unwrap().run().clone();
            if r.metadata.namespace.as_deref() == Some(ns) && pred(&r) {
                return r;
            }
        }
        panic!("watch ended")
    };
    tokio::time::timeout(PATIENCE, check)
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what} in {ns}"))
}
