//! `runway serve`: the embedded server — SQLite store, manifest Workflows, the controller and
//! the HTTP endpoint — assembled in one process.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::auth::file::AuthFile;
use crate::auth::{Authenticator, Authorizer, NoAuth};
use crate::controller::history::MemoryEvents;
use crate::controller::schedules::Scheduler;
use crate::controller::{self, Controller};
use crate::engine::marks::Marks;
use crate::engine::validate::Capabilities;
use crate::mcp;
use crate::steps::tool::ToolExecutor;
use crate::steps::{Executors, StaticSecrets};
use crate::store::identities::WorkflowBook;
use crate::store::manifests::ManifestWorkflows;
use crate::store::sqlite::SqliteStore;
use crate::store::{RunChanges, RunStore, StoreError, WorkflowSource};

/// How often the manifest directory is checked for changes.
pub(crate) const RELOAD_EVERY: Duration = Duration::from_secs(1);

/// Settings of the embedded server.
#[derive(Debug, Clone)]
pub struct Options {
    /// Directory of Workflow manifests.
    pub workflows: PathBuf,
    /// SQLite database file.
    pub db: PathBuf,
    /// Address of the HTTP endpoint.
    pub listen: SocketAddr,
    /// Runs reconciled at once.
    pub workers: usize,
    /// How callers are authenticated and authorized.
    pub auth: AuthMode,
    /// MCP endpoint settings.
    pub mcp: mcp::Config,
    /// Where `http` and `tool` steps may connect.
    pub egress: crate::steps::egress::Egress,
    /// Where finished Runs are archived before they are deleted.
    pub archive: crate::store::archive::keeper::Settings,
}

/// Authentication of the embedded server.
#[derive(Debug, Clone)]
pub enum AuthMode {
    /// No authentication: everyone is `anonymous` in this namespace (loopback listeners only).
    None {
        /// Namespace of `POST /mcp`.
        namespace: String,
    },
    /// A token file.
    File(PathBuf),
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The database cannot be opened or written.
    #[error("cannot open database {path}: {source}")]
    Database {
        /// The file.
        path: PathBuf,
        /// Why.
        source: StoreError,
    },
    /// `--no-auth` on a non-loopback address.
    #[error("--no-auth is only allowed on a loopback address, not {0}")]
    NoAuthNotLoopback(SocketAddr),
    /// The auth file is unreadable or invalid.
    #[error("{0}")]
    AuthFile(String),
    /// The archive cannot be opened.
    #[error(transparent)]
    Archive(#[from] crate::store::archive::ArchiveError),
    /// The MCP endpoint cannot be configured.
    #[error(transparent)]
    Mcp(#[from] mcp::StateError),
    /// The workflow directory is missing.
    #[error("workflow directory {0} does not exist")]
    Workflows(PathBuf),
    /// The listen address is taken or not allowed.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

/// A running embedded server.
pub struct Server {
    /// Where the HTTP endpoint listens.
    pub addr: SocketAddr,
    /// The Run store.
    pub store: SqliteStore,
    /// The Workflows.
    pub workflows: ManifestWorkflows,
    shutdown: CancellationToken,
    tasks: tokio::task::JoinSet<()>,
}

/// Authentication, authorization and the Secrets steps may read.
type Access = (Arc<dyn Authenticator>, Arc<dyn Authorizer>, StaticSecrets);

/// Who may do what, and the Secrets steps may read: the auth file, or no authentication on a
/// loopback address.
fn access(opts: &Options) -> Result<Access, StartError> {
    Ok(match &opts.auth {
        AuthMode::None { namespace } => {
            if !opts.listen.ip().is_loopback() {
                return Err(StartError::NoAuthNotLoopback(opts.listen));
            }
            let a = Arc::new(NoAuth::new(namespace.clone()));
            (a.clone(), a, StaticSecrets::default())
        }
        AuthMode::File(path) => {
            let f = AuthFile::load(path).map_err(|e| StartError::AuthFile(e.to_string()))?;
            let secrets = StaticSecrets(f.secrets.clone());
            let f = Arc::new(f);
            (f.clone(), f, secrets)
        }
    })
}

/// Listen on `addr`, and the address bound (the port, when `addr` asked for any).
async fn bind(addr: SocketAddr) -> Result<(tokio::net::TcpListener, SocketAddr), StartError> {
    let listen = |source| StartError::Listen { addr, source };
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(listen)?;
    let bound = listener.local_addr().map_err(listen)?;
    Ok((listener, bound))
}

/// The controller of the embedded store, with every step executor.
fn run_controller(
    opts: &Options,
    run_store: &Arc<dyn RunStore>,
    wf_source: &Arc<dyn WorkflowSource>,
    events: &Arc<MemoryEvents>,
    secrets: StaticSecrets,
    changes: RunChanges,
    config: controller::Config,
) -> Arc<Controller> {
    let secrets = Arc::new(secrets);
    let executor = Arc::new(
        Executors::new(secrets.clone(), &opts.egress)
            .with_tool(Arc::new(ToolExecutor::new(secrets, &opts.egress)))
            .with_children(Arc::new(crate::steps::child::ChildExecutor::new(
                run_store.clone(),
                changes,
                config.marks.clone(),
            ))),
    );
    Controller::new(
        run_store.clone(),
        wf_source.clone(),
        executor,
        events.clone(),
        config,
    )
}

/// The Run store in the database file, and the manifest Workflows (which of two offering one
/// tool is older is kept in the same file).
fn open_stores(opts: &Options) -> Result<(SqliteStore, ManifestWorkflows), StartError> {
    if !opts.workflows.is_dir() {
        return Err(StartError::Workflows(opts.workflows.clone()));
    }
    let database = |source| StartError::Database {
        path: opts.db.clone(),
        source,
    };
    let store = SqliteStore::open(&opts.db).map_err(database)?;
    let book = WorkflowBook::open(&opts.db).map_err(database)?;
    let workflows =
        ManifestWorkflows::load_with(&opts.workflows, Capabilities { jobs: false }, Some(book));
    for p in workflows.problems() {
        tracing::error!(file = %p.file.display(), message = %p.message, "cannot load workflow manifest");
    }
    Ok((store, workflows))
}

impl Server {
    /// Open the store, load Workflows, start the controller and the HTTP endpoint.
    pub async fn start(opts: Options) -> Result<Self, StartError> {
        let (store, workflows) = open_stores(&opts)?;
        let (authn, authz, secrets) = access(&opts)?;
        let (listener, addr) = bind(opts.listen).await?;
        let shutdown = CancellationToken::new();
        let mut tasks = tokio::task::JoinSet::new();

        let run_store: Arc<dyn RunStore> = Arc::new(store.clone());
        let wf_source: Arc<dyn WorkflowSource> = Arc::new(workflows.clone());
        let events = Arc::new(MemoryEvents::default());
        let mut mcp_config = opts.mcp.clone();
        if mcp_config.state_keys.is_empty() {
            mcp_config.state_keys = vec![store.state_key().to_vec()];
        }
        let name_key = mcp_config.state_keys.first().cloned().unwrap_or_default();
        let marks = Marks::new(mcp_config.state_keys.clone());
        let archive = opts.archive.open(events.clone()).await?;
        mcp_config.archive = archive.clone();
        mcp_config.starter = Some(Arc::new(controller::Starter::new(
            run_store.clone(),
            events.clone(),
            opts.mcp.metrics.clone(),
        )));
        let state = mcp::McpState::new(
            run_store.clone(),
            wf_source.clone(),
            authn,
            authz,
            events.clone(),
            mcp_config,
            shutdown.clone(),
        )
        .map_err(StartError::Mcp)?;
        let changes = state.events.clone();
        let config = controller::Config {
            workers: opts.workers,
            workers_per_namespace: 0,
            metrics: opts.mcp.metrics.clone(),
            shards: controller::Shards::all(),
            marks: marks.clone(),
            archive: archive.clone(),
            drain: controller::DRAIN,
        };
        let ctl = run_controller(
            &opts, &run_store, &wf_source, &events, secrets, changes, config,
        );
        let token = shutdown.clone();
        tasks.spawn(async move { ctl.run(token).await });
        let scheduler = Scheduler::new(run_store, wf_source, events, name_key, marks)
            .with_archive(archive.clone(), opts.mcp.metrics.clone());
        if let Some(a) = archive {
            tasks.spawn(a.prune_until(shutdown.clone()));
        }
        let token = shutdown.clone();
        tasks.spawn(async move { scheduler.run(token).await });
        let reloader = workflows.spawn_reloader(RELOAD_EVERY);
        let token = shutdown.clone();
        tasks.spawn(async move {
            token.cancelled().await;
            reloader.abort();
        });
        let app = mcp::router(state).merge(crate::endpoint::health_and_metrics(
            Arc::new(store.clone()),
            opts.mcp.metrics.clone(),
        ));
        let token = shutdown.clone();
        tasks.spawn(async move {
            crate::endpoint::serve(listener, app, token).await;
        });
        tracing::info!(%addr, "runway serve started");
        Ok(Self {
            addr,
            store,
            workflows,
            shutdown,
            tasks,
        })
    }

    /// Stop everything and wait for it.
    pub async fn stop(mut self) {
        self.shutdown.cancel();
        while self.tasks.join_next().await.is_some() {}
    }

    /// Wait until the server is stopped by `shutdown`.
    pub async fn wait(mut self, shutdown: impl Future<Output = ()>) {
        shutdown.await;
        self.shutdown.cancel();
        while self.tasks.join_next().await.is_some() {}
    }
}
