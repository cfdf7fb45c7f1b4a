//! What every request shares: the stores, authentication, settings, the Run change feed and
//! the request and stream budgets; and the tenant a request acts in.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio_util::sync::CancellationToken;

use super::config::Config;
use super::headers::AllowedHost;
use crate::auth::{Authenticator, Authorizer, Identity};
use crate::store::RunChanges;
use crate::store::events::EventLog;
use crate::store::{RunStore, WorkflowSource};

/// Everything a request needs.
pub struct McpState {
    /// Runs.
    pub store: Arc<dyn RunStore>,
    /// Workflows.
    pub workflows: Arc<dyn WorkflowSource>,
    /// Authentication.
    pub authn: Arc<dyn Authenticator>,
    /// Authorization.
    pub authz: Arc<dyn Authorizer>,
    /// Where a Run's Events are read back.
    pub event_log: Arc<dyn EventLog>,
    /// Settings.
    pub config: Config,
    /// Per-Run change feeds.
    pub events: RunChanges,
    /// Fires on server shutdown (which must not cancel blocking runs).
    pub shutdown: CancellationToken,
    /// One codec per state key, newest first.
    pub(super) codecs: Vec<rmcp::model::RequestStateCodec>,
    /// Slots of requests in process (`Config::max_concurrent_requests`).
    pub(super) requests: Arc<tokio::sync::Semaphore>,
    pub(super) hosts: Vec<AllowedHost>,
    pub(super) origins: Vec<String>,
    /// Open listen streams per principal.
    pub(super) streams: Arc<std::sync::Mutex<std::collections::HashMap<String, usize>>>,
    /// Requests in progress per principal and per namespace.
    pub(super) shares: Arc<super::shares::Shares>,
    /// Failed authentications per client address.
    pub(super) auth_failures: super::shares::AuthFailures,
    /// A number no other state of this process has had: what is remembered per thread about
    /// this state's keys (opened session ids) is told apart from another server's by it.
    pub(super) id: u64,
}

/// Why the endpoint's state cannot be assembled.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// The configuration has no state key.
    #[error("no state key")]
    NoKey,
    /// A state key cannot sign (too short).
    #[error("state key: {0}")]
    Key(#[source] rmcp::model::RequestStateError),
}

impl McpState {
    /// Assemble the state; starts the process's feed of Run changes (`events`), which the
    /// other waiters of the process share.
    pub fn new(
        store: Arc<dyn RunStore>,
        workflows: Arc<dyn WorkflowSource>,
        authn: Arc<dyn Authenticator>,
        authz: Arc<dyn Authorizer>,
        event_log: Arc<dyn EventLog>,
        config: Config,
        shutdown: CancellationToken,
    ) -> Result<Arc<Self>, StateError> {
        if config.state_keys.is_empty() {
            return Err(StateError::NoKey);
        }
        let codecs = config
            .state_keys
            .iter()
            .map(|k| rmcp::model::RequestStateCodec::try_new(k.clone()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(StateError::Key)?;
        let events = RunChanges::follow(store.clone(), shutdown.clone());
        let hosts = config.hosts().iter().map(|h| AllowedHost::new(h)).collect();
        let origins = config.origins();
        static NEXT_ID: AtomicU64 = AtomicU64::new(0);
        Ok(Arc::new(Self {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            requests: Arc::new(tokio::sync::Semaphore::new(config.max_concurrent_requests)),
            hosts,
            origins,
            streams: Arc::default(),
            shares: Arc::default(),
            auth_failures: Default::default(),
            store,
            workflows,
            authn,
            authz,
            event_log,
            config,
            events,
            shutdown,
            codecs,
        }))
    }
}

/// The tenant a request acts in, attached by the gate.
#[derive(Debug, Clone)]
pub struct Tenant {
    /// Namespace.
    pub namespace: String,
    /// Caller.
    pub identity: Arc<Identity>,
}

/// A state over a fresh SQLite store and no Workflows, without authentication, for unit tests;
/// its directory goes when it is dropped.
#[cfg(test)]
pub(crate) struct Scratch {
    /// The state.
    pub state: Arc<McpState>,
    /// Its store.
    pub store: Arc<crate::store::sqlite::SqliteStore>,
    dir: std::path::PathBuf,
}

#[cfg(test)]
impl Scratch {
    /// A new state in a new directory (a Tokio runtime must be running: the state follows its
    /// store's changes).
    pub(crate) fn new() -> Self {
        let mut b = [0u8; 8];
        getrandom::fill(&mut b).expect("the OS random source works");
        let dir = std::env::temp_dir().join(format!(
            "runway-state-{}",
            data_encoding::HEXLOWER.encode(&b)
        ));
        std::fs::create_dir_all(&dir).expect("the temporary directory is writable");
        let store = Arc::new(
            crate::store::sqlite::SqliteStore::open(&dir.join("runs.db")).expect("a scratch store"),
        );
        let auth = Arc::new(crate::auth::NoAuth::new("default".into()));
        let workflows = crate::store::manifests::ManifestWorkflows::load(
            &dir,
            crate::engine::validate::Capabilities { jobs: false },
        );
        let state = McpState::new(
            store.clone(),
            Arc::new(workflows),
            auth.clone(),
            auth,
            Arc::new(crate::controller::history::MemoryEvents::default()),
            Config::new(),
            CancellationToken::new(),
        )
        .expect("a state with a key");
        Self { state, store, dir }
    }
}

#[cfg(test)]
impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
