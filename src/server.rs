//! `runway serve`: the embedded server — SQLite store, manifest Workflows, the controller and
//! the HTTP endpoint — assembled in one process.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use tokio_util::sync::CancellationToken;

use crate::controller::{self, Controller, LogEvents};
use crate::engine::validate::Capabilities;
use crate::steps::{Executors, StaticSecrets};
use crate::store::manifests::ManifestWorkflows;
use crate::store::sqlite::SqliteStore;
use crate::store::{RunStore, StoreError, WorkflowSource};

/// How often the manifest directory is checked for changes.
pub const RELOAD_EVERY: Duration = Duration::from_secs(1);

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

impl Server {
    /// Open the store, load Workflows, start the controller and the HTTP endpoint.
    pub async fn start(opts: Options) -> Result<Self, StartError> {
        if !opts.workflows.is_dir() {
            return Err(StartError::Workflows(opts.workflows.clone()));
        }
        let store = SqliteStore::open(&opts.db).map_err(|source| StartError::Database {
            path: opts.db.clone(),
            source,
        })?;
        let workflows = ManifestWorkflows::load(&opts.workflows, Capabilities { jobs: false });
        for p in workflows.problems() {
            tracing::error!(file = %p.file.display(), message = %p.message, "cannot load workflow manifest");
        }
        let listener = tokio::net::TcpListener::bind(opts.listen)
            .await
            .map_err(|source| StartError::Listen {
                addr: opts.listen,
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| StartError::Listen {
            addr: opts.listen,
            source,
        })?;
        let shutdown = CancellationToken::new();
        let mut tasks = tokio::task::JoinSet::new();

        let run_store: Arc<dyn RunStore> = Arc::new(store.clone());
        let wf_source: Arc<dyn WorkflowSource> = Arc::new(workflows.clone());
        let executor = Arc::new(Executors::new(Arc::new(StaticSecrets::default())));
        let ctl = Controller::new(
            run_store,
            wf_source,
            executor,
            Arc::new(LogEvents),
            controller::Config {
                workers: opts.workers,
            },
        );
        let token = shutdown.clone();
        tasks.spawn(async move { ctl.run(token).await });
        let reloader = workflows.spawn_reloader(RELOAD_EVERY);
        let token = shutdown.clone();
        tasks.spawn(async move {
            token.cancelled().await;
            reloader.abort();
        });

        let app = Router::new()
            .route("/healthz", get(|| async { "ok" }))
            .route("/readyz", get(|| async { "ok" }));
        let token = shutdown.clone();
        tasks.spawn(async move {
            let served = axum::serve(listener, app)
                .with_graceful_shutdown(async move { token.cancelled().await })
                .await;
            if let Err(e) = served {
                tracing::error!(error = %e, "HTTP server stopped");
            }
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
    pub async fn wait(mut self, shutdown: impl std::future::Future<Output = ()>) {
        shutdown.await;
        self.shutdown.cancel();
        while self.tasks.join_next().await.is_some() {}
    }
}
