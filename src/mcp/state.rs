//! What every request shares: the stores, authentication, settings, the Run change feed and
//! the request and stream budgets; and the tenant a request acts in.

use std::sync::Arc;

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
        Ok(Arc::new(Self {
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
