//! What a controller is configured with: its workers, its shards of the Runs, its metrics, and
//! where engine events go.

use super::queue::Key;
use crate::api::Run;
use crate::engine::{self, Event};

/// Where engine events go (Kubernetes Events, or the log).
pub trait EventSink: Send + Sync + 'static {
    /// Record `event` about `run`.
    fn record(&self, run: &Run, event: &Event);
}

/// Events as structured log lines.
pub struct LogEvents;

impl EventSink for LogEvents {
    fn record(&self, run: &Run, event: &Event) {
        let ns = run.metadata.namespace.as_deref().unwrap_or_default();
        let name = run.metadata.name.as_deref().unwrap_or_default();
        if event.warning {
            tracing::warn!(
                namespace = ns,
                run = name,
                reason = event.reason,
                "{}",
                event.message
            );
        } else {
            tracing::info!(
                namespace = ns,
                run = name,
                reason = event.reason,
                "{}",
                event.message
            );
        }
    }
}

/// Controller settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// Runs reconciled at once.
    pub workers: usize,
    /// Runs of one namespace reconciled at once (0: half the workers, at least one), so that
    /// one tenant cannot occupy every worker.
    pub workers_per_namespace: usize,
    /// Where reconcile errors, queue depth and step durations are recorded.
    pub metrics: crate::telemetry::Metrics,
    /// Which Runs this controller drives (all of them unless the work is split across
    /// replicas).
    pub shards: Shards,
    /// The seals on the Runs Runway starts itself: a top-level Run's collection takes the
    /// child Runs below it, found by their seals.
    pub marks: engine::marks::Marks,
    /// Where finished Runs are written before they are deleted (none: they are deleted).
    pub archive: Option<std::sync::Arc<crate::store::archive::keeper::Archiver>>,
    /// How long a controller told to stop lets the effects in progress finish and writes
    /// their outcomes, starting nothing new, before it abandons what is left (which the next
    /// start resumes, sending an unrecorded attempt again): see [`DRAIN`].
    pub drain: std::time::Duration,
}

/// The default of [`Config::drain`]: enough for an `http` step's answer that is on its way,
/// short enough not to hold a rolling restart.
pub const DRAIN: std::time::Duration = std::time::Duration::from_secs(2);

/// A share of the Runs: those whose shard — a stable hash of namespace and name, modulo
/// `count` — is in `owned`. Replicas that split the work own disjoint shares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shards {
    /// Number of shards the Runs are split into (at least 1).
    pub count: u32,
    /// The shards driven here.
    pub owned: std::collections::BTreeSet<u32>,
}

impl Shards {
    /// Every Run.
    pub fn all() -> Self {
        Self {
            count: 1,
            owned: [0].into(),
        }
    }

    /// The shard of Run `key` among `count`. FNV-1a: stable across processes, versions and
    /// machines, which every replica's answer must be.
    pub fn of(key: &Key, count: u32) -> u32 {
        let h = engine::stable_hash(key.namespace.bytes().chain([b'/']).chain(key.name.bytes()));
        (h % u64::from(count.max(1))) as u32
    }

    /// Whether Run `key` is driven here.
    pub fn owns(&self, key: &Key) -> bool {
        self.owned.contains(&Self::of(key, self.count))
    }
}

impl Default for Config {
    fn default() -> Self {
        Self {
            workers: 32,
            workers_per_namespace: 0,
            metrics: Default::default(),
            shards: Shards::all(),
            marks: Default::default(),
            archive: None,
            drain: DRAIN,
        }
    }
}
