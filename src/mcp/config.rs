//! The endpoint's settings: limits, allowed hosts and origins, the owner rule, state keys.

use std::time::Duration;

/// Largest request body accepted.
pub const MAX_BODY_BYTES: usize = 4 * 1024 * 1024;
/// Default of [`Config::body_read_timeout`].
pub(crate) const BODY_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Default of [`Config::max_streams_per_principal`].
pub(crate) const MAX_STREAMS_PER_PRINCIPAL: usize = 16;
/// Default of [`Config::hold_limit`]: under the 60 s most clients wait for an answer.
pub(crate) const HOLD_LIMIT: Duration = Duration::from_secs(50);
/// Default of [`Config::max_concurrent_requests`].
pub(crate) const MAX_CONCURRENT_REQUESTS: usize = 1024;

/// Who may act on a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TaskAccess {
    /// Only the principal that requested the Run, or who may `list runs` in the namespace.
    Owner,
    /// Anyone the namespace's RBAC allows.
    Namespace,
}

/// Settings of the endpoint.
#[derive(Debug, Clone)]
pub struct Config {
    /// Host names accepted in `Host` (loopback is always accepted).
    pub allowed_hosts: Vec<String>,
    /// Origins accepted when a request carries `Origin` (none: only requests without Origin,
    /// or with a loopback Origin).
    pub allowed_origins: Vec<String>,
    /// Owner rule.
    pub task_access: TaskAccess,
    /// Keys (each ≥ 32 bytes) of `requestState` and idempotent task ids, newest first: the
    /// first signs and names new Runs; the others still verify and find the Runs they named,
    /// so a key can be rotated with an overlap period.
    pub state_keys: Vec<Vec<u8>>,
    /// SSE keep-alive period; a vanished client is noticed within about this time.
    pub keep_alive: Duration,
    /// How long a `requestState` stays valid.
    pub state_ttl: Duration,
    /// Where request counts are recorded.
    pub metrics: crate::telemetry::Metrics,
    /// How long a client may take to send its request body once its headers were accepted
    /// (408 after that).
    pub body_read_timeout: Duration,
    /// Requests processed at once (a request holds its slot until its response starts; the
    /// stream that may follow does not). Past it: 503 with `Retry-After`.
    pub max_concurrent_requests: usize,
    /// Open `subscriptions/listen` streams one principal may hold (per server). Past it: 429.
    pub max_streams_per_principal: usize,
    /// Whether `runway_list_runs` is offered.
    pub list_tool: bool,
    /// Namespaces where `runway_list_runs` is not offered even so.
    pub list_tool_off_in: std::collections::BTreeSet<String>,
    /// Whether the web console (`/ui/`) is served.
    pub console: bool,
    /// How long a 2025-era blocking call without a progress token is held before it is
    /// answered with a result naming its Run (which goes on).
    pub hold_limit: Duration,
    /// The archive of finished Runs, read by `runway_list_runs` and `runway_get_run` with
    /// `archived` (none: those refuse it).
    pub archive: Option<std::sync::Arc<crate::store::archive::keeper::Archiver>>,
    /// Creates the Runs calls ask for (none: the store creates them, and the controller
    /// decides their first status when its watch brings them).
    pub starter: Option<std::sync::Arc<dyn crate::store::StartRun>>,
}

impl Config {
    /// Defaults with a fresh random state key.
    pub fn new() -> Self {
        let key = crate::store::new_state_key();
        Self {
            allowed_hosts: vec![],
            allowed_origins: vec![],
            task_access: TaskAccess::Owner,
            state_keys: vec![key],
            keep_alive: Duration::from_secs(1),
            state_ttl: Duration::from_secs(3600),
            metrics: Default::default(),
            body_read_timeout: BODY_READ_TIMEOUT,
            max_concurrent_requests: MAX_CONCURRENT_REQUESTS,
            max_streams_per_principal: MAX_STREAMS_PER_PRINCIPAL,
            list_tool: true,
            list_tool_off_in: Default::default(),
            console: true,
            hold_limit: HOLD_LIMIT,
            archive: None,
            starter: None,
        }
    }
}

/// Shortest state key accepted.
pub(crate) const MIN_STATE_KEY_BYTES: usize = 32;

/// Why a key file or Secret holds no usable state keys.
#[derive(Debug, thiserror::Error)]
pub enum StateKeyError {
    /// Nothing but blank lines.
    #[error("no state key")]
    NoKey,
    /// A key too short to sign with.
    #[error("state key {index} is shorter than {MIN_STATE_KEY_BYTES} bytes")]
    TooShort {
        /// Which key, counting from 1 (blank lines not counted).
        index: usize,
    },
}

/// State keys as a key file or Secret holds them: one per line, newest first; blank lines and
/// surrounding whitespace are ignored.
pub fn parse_state_keys(text: &[u8]) -> Result<Vec<Vec<u8>>, StateKeyError> {
    let keys: Vec<Vec<u8>> = text
        .split(|b| *b == b'\n')
        .map(|l| l.trim_ascii().to_vec())
        .filter(|l| !l.is_empty())
        .collect();
    if keys.is_empty() {
        return Err(StateKeyError::NoKey);
    }
    if let Some(i) = keys.iter().position(|k| k.len() < MIN_STATE_KEY_BYTES) {
        return Err(StateKeyError::TooShort { index: i + 1 });
    }
    Ok(keys)
}

impl Default for Config {
    fn default() -> Self {
        Self::new()
    }
}

impl Config {
    /// Host names (`host` for any port, `host:port` for one) requests may carry.
    pub(super) fn hosts(&self) -> Vec<String> {
        let mut hosts: Vec<String> = vec![
            "localhost".into(),
            "127.0.0.1".into(),
            "::1".into(),
            "[::1]".into(),
        ];
        hosts.extend(self.allowed_hosts.iter().cloned());
        hosts
    }

    /// Origins (`scheme://host:port`, `:*` for any port) requests carrying `Origin` may have.
    pub(super) fn origins(&self) -> Vec<String> {
        let mut origins: Vec<String> = vec![
            "http://localhost:*".into(),
            "http://127.0.0.1:*".into(),
            "http://[::1]:*".into(),
        ];
        origins.extend(self.allowed_origins.iter().cloned());
        origins
    }
}
