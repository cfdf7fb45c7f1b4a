//! Where Runs and Workflows live. `RunStore` and `WorkflowSource` are the seam between the
//! store-agnostic controller and MCP endpoint and the two backends: SQLite (embedded) and the
//! Kubernetes API.

pub mod archive;
pub mod changes;
mod compact;
pub mod events;
mod exclusive;
mod fill;
mod handoff;
pub mod identities;
pub mod kube;
pub mod kube_sources;
mod manifest_files;
pub mod manifests;

mod ordered;
mod overlay;
mod recent;
pub mod sqlite;

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use futures::stream::BoxStream;

use crate::api::{Run, Workflow};
pub use changes::{Change, RunChanges};

/// Store failures, with the semantics of the Kubernetes API.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum StoreError {
    /// No such object.
    #[error("not found")]
    NotFound,
    /// An object with that name exists.
    #[error("already exists")]
    AlreadyExists,
    /// The object changed since it was read (stale `resourceVersion`).
    #[error("conflict: the object was modified")]
    Conflict,
    /// The change breaks a rule of the resource (e.g. the Run spec transition rules).
    #[error("invalid: {0}")]
    Invalid(String),
    /// A watch asked for history the store no longer keeps; list again.
    #[error("resource version too old")]
    Gone,
    /// The backend failed.
    #[error("store backend: {0}")]
    Backend(String),
}

/// A change seen by a watch. The Run is shared: every watcher of the store gets the same one.
#[derive(Debug, Clone, PartialEq)]
pub enum WatchEvent {
    /// Created or modified.
    Applied(Arc<Run>),
    /// Deleted (the last state).
    Deleted(Arc<Run>),
}

impl WatchEvent {
    /// The Run concerned.
    pub fn run(&self) -> &Run {
        match self {
            Self::Applied(r) | Self::Deleted(r) => r,
        }
    }
}

/// How often a read-modify-write of a Run is tried again after a conflict before the writer
/// gives up with [`StoreError::Conflict`]: a Run written that often meanwhile is contended
/// beyond what a retry loop should absorb.
pub const MAX_CONFLICT_RETRIES: usize = 16;

/// Where a Run stands in creation order: its creation time, then its name (so Runs created in
/// the same second have one order everywhere).
pub type Place<'a> = (jiff::Timestamp, &'a str);

/// `run`'s [`Place`]; a Run not yet created sorts first.
pub fn place(run: &Run) -> Place<'_> {
    let created = run.metadata.creation_timestamp.as_ref().map(|t| t.0);
    (
        created.unwrap_or(jiff::Timestamp::UNIX_EPOCH),
        run.metadata.name.as_deref().unwrap_or_default(),
    )
}

/// A Run as a follower of the store weighs its cache against the source: its key, resource
/// version and uid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Versioned {
    /// Namespace and name.
    pub key: crate::api::ObjectKey,
    /// `metadata.resourceVersion`.
    pub version: String,
    /// `metadata.uid`: another one under the same key is another Run.
    pub uid: Option<String>,
}

impl Versioned {
    /// `metadata`'s, when it names a namespace and a name.
    pub fn of(metadata: &::kube::api::ObjectMeta) -> Option<Self> {
        Some(Self {
            key: crate::api::ObjectKey::of(metadata)?,
            version: metadata.resource_version.clone().unwrap_or_default(),
            uid: metadata.uid.clone(),
        })
    }
}

/// Told each Run of a [`RunStore::scan`]; `false` ends the scan.
pub type Visit<'a> = dyn FnMut(&Arc<Run>) -> bool + Send + 'a;

/// Runs: create, read, conditional update, status update, delete, watch.
#[async_trait]
pub trait RunStore: Send + Sync + 'static {
    /// Create; sets `uid`, `resourceVersion`, `generation` and `creationTimestamp`.
    async fn create(&self, run: Run) -> Result<Run, StoreError>;
    /// Whether [`RunStore::create_started`] keeps the status it is given. A Kubernetes create
    /// cannot: status is a subresource, written by a request of its own.
    fn creates_with_status(&self) -> bool {
        false
    }
    /// Create a Run that carries its first status, decided from the `uid`, `generation` and
    /// `creationTimestamp` it carries (which are kept; `resourceVersion` is set), in one write.
    /// A `creationTimestamp` finer than whole seconds, which the store would not keep, is
    /// [`StoreError::Invalid`]. Where [`RunStore::creates_with_status`] is false this is
    /// [`RunStore::create`].
    async fn create_started(&self, run: Run) -> Result<Run, StoreError> {
        self.create(run).await
    }
    /// Read one Run, reflecting every write that returned before the call.
    async fn get(&self, namespace: &str, name: &str) -> Result<Option<Run>, StoreError>;
    /// [`RunStore::get`] without a copy where the store keeps the Run shared (the hot read
    /// path of `tasks/get`); same freshness.
    async fn get_shared(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Arc<Run>>, StoreError> {
        Ok(self.get(namespace, name).await?.map(Arc::new))
    }
    /// List Runs of a namespace (all namespaces when `None`) whose labels include `labels`, in
    /// no particular order. Shared, not copied: a namespace may hold a hundred thousand Runs,
    /// listers read a few fields of each, and those that need an order sort what they kept.
    async fn list(
        &self,
        namespace: Option<&str>,
        labels: &BTreeMap<String, String>,
    ) -> Result<Vec<Arc<Run>>, StoreError>;
    /// The Runs of `namespace` in creation order ([`Place`]), newest first when `newest`,
    /// strictly past `after`, each told to `visit` until it says `false`. The default sorts
    /// what [`RunStore::list`] returns; a store that keeps the order reads only the Runs
    /// `visit` takes, so a page costs the page, not every Run of the namespace.
    async fn scan(
        &self,
        namespace: &str,
        newest: bool,
        after: Option<Place<'_>>,
        visit: &mut Visit<'_>,
    ) -> Result<(), StoreError> {
        let mut runs = self.list(Some(namespace), &BTreeMap::new()).await?;
        runs.retain(|r| after.is_none_or(|a| if newest { place(r) < a } else { place(r) > a }));
        if newest {
            runs.sort_unstable_by(|x, y| place(y).cmp(&place(x)));
        } else {
            runs.sort_unstable_by(|x, y| place(x).cmp(&place(y)));
        }
        for r in &runs {
            if !visit(r) {
                break;
            }
        }
        Ok(())
    }
    /// [`RunStore::list`] as the store holds it now, reflecting every write that returned before
    /// the call on any replica (a store that serves `list` from a cache asks its source). For
    /// the rare lookup that must not miss a Run another replica created a moment ago.
    async fn list_now(
        &self,
        namespace: Option<&str>,
        labels: &BTreeMap<String, String>,
    ) -> Result<Vec<Arc<Run>>, StoreError> {
        self.list(namespace, labels).await
    }
    /// Every Run's key and resource version as the store holds them now, and a resource
    /// version to watch from that misses nothing they lack: what a follower of the store lists
    /// before it watches. A store that serves `list` from a cache asks its source, whose list
    /// and version are one snapshot (the cache may lag the version a separate read returns).
    async fn keys_now(&self) -> Result<(Vec<Versioned>, String), StoreError> {
        let rv = self.resource_version().await?;
        let runs = self.list(None, &BTreeMap::new()).await?;
        let keys = runs.iter().filter_map(|r| Versioned::of(&r.metadata));
        Ok((keys.collect(), rv))
    }
    /// [`RunStore::get`] as the store holds it now (a store that serves reads from a cache asks
    /// its source, and serves what it found to the reads that follow): for reading a Run again
    /// after a gap in a watch, when the cache may lag.
    async fn get_now(&self, namespace: &str, name: &str) -> Result<Option<Arc<Run>>, StoreError> {
        self.get_shared(namespace, name).await
    }
    /// How many Runs are in each phase (for metrics), without copying them.
    async fn phase_counts(&self) -> Result<BTreeMap<crate::api::RunPhase, i64>, StoreError>;
    /// Replace metadata labels/annotations and spec, conditional on `metadata.resourceVersion`.
    /// Enforces the Run spec transition rules.
    async fn update(&self, run: Run) -> Result<Run, StoreError>;
    /// Replace status only; conditional on `metadata.resourceVersion` when it is set. Answers
    /// the Run as stored, shared with the store's cache: a status write is the controller's
    /// most frequent, and a Run with a thousand step records is not copied to answer it.
    async fn update_status(&self, run: Run) -> Result<Arc<Run>, StoreError>;
    /// Delete the Run `name`; with `uid`, only while the Run of that name is still that one
    /// (`Conflict` when another Run has taken the name since); with `version`, only while it
    /// is still at that `metadata.resourceVersion` (`Conflict` when it was written since).
    async fn delete(
        &self,
        namespace: &str,
        name: &str,
        uid: Option<&str>,
        version: Option<&str>,
    ) -> Result<(), StoreError>;
    /// Changes after `resource_version` (only future changes when `None`). Ends with
    /// `Err(Gone)` when that history is no longer kept.
    fn watch(
        &self,
        resource_version: Option<String>,
    ) -> BoxStream<'static, Result<WatchEvent, StoreError>>;
    /// The current resource version, to start a watch after a list.
    async fn resource_version(&self) -> Result<String, StoreError>;
}

/// How the Runs that calls ask for are created: by the controller's starter, which writes a
/// Run together with its first status where the store can (one write instead of two).
#[async_trait]
pub trait StartRun: std::fmt::Debug + Send + Sync + 'static {
    /// Create `run`, asked for by a call to `workflow`'s tool, as [`RunStore::create`] does,
    /// possibly with its first status.
    async fn start(&self, run: Run, workflow: &Workflow) -> Result<Run, StoreError>;
}

/// Workflows, as the controller and the MCP endpoint see them (with `Ready` conditions).
#[async_trait]
pub trait WorkflowSource: Send + Sync + 'static {
    /// One Workflow.
    async fn get(&self, namespace: &str, name: &str) -> Option<Workflow>;
    /// Workflows of a namespace, ordered by name.
    async fn list(&self, namespace: &str) -> Vec<Workflow>;
    /// Namespaces that hold at least one Workflow, sorted.
    async fn namespaces(&self) -> Vec<String>;
    /// The Ready Workflow of a namespace that serves tool `name` (the tool-name rule leaves at
    /// most one), shared rather than copied: every `tools/call` looks it up.
    async fn tool(&self, namespace: &str, name: &str) -> Option<Arc<Workflow>>;
    /// Receives a message whenever any Workflow changes.
    fn changes(&self) -> tokio::sync::watch::Receiver<u64>;
}

/// Values of secrets referenced by step headers (`valueFrom.secretKeyRef`).
#[async_trait]
pub trait SecretSource: Send + Sync + 'static {
    /// The value of `key` in Secret `name` of `namespace`.
    async fn get(&self, namespace: &str, name: &str, key: &str) -> Result<String, StoreError>;
}

/// Whether `labels` include every pair of `selector`.
pub fn labels_match(
    labels: Option<&BTreeMap<String, String>>,
    selector: &BTreeMap<String, String>,
) -> bool {
    selector
        .iter()
        .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
}

/// A random RFC 4122 version 4 UUID.
pub fn new_uid() -> String {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).expect("the OS random source works");
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h = data_encoding::HEXLOWER.encode(&b);
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// A new random state key, as text (so it can live in a file, a Secret or a database).
pub(crate) fn new_state_key() -> Vec<u8> {
    let mut b = [0u8; 32];
    getrandom::fill(&mut b).expect("the OS random source works");
    data_encoding::BASE64URL_NOPAD.encode(&b).into_bytes()
}

/// The key of a Run a store is asked to write: both namespace and name are required.
pub(crate) fn key_of(run: &Run) -> Result<crate::api::ObjectKey, StoreError> {
    crate::api::ObjectKey::of(&run.metadata).ok_or_else(|| {
        StoreError::Invalid("metadata.namespace and metadata.name are required".into())
    })
}
