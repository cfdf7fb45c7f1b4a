//! Writing to the archive and keeping it within its retention: what the controller and the
//! scheduler call before they delete a Run, and the pruning loop beside them.

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use tokio_util::sync::CancellationToken;

use super::postgres::PostgresArchive;
use super::sqlite::SqliteArchive;
use super::{Archive, ArchiveError, Entry, Retention};
use crate::api::Run;
use crate::store::events::EventLog;

/// Longest wait for one archive write: the controller's worker that collects a Run waits for
/// it, and a hung server must not hold it.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// How often the archive is pruned to its retention.
pub const PRUNE_EVERY: Duration = Duration::from_secs(600);

/// Where finished Runs are archived and for how long, as the command line gives it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Settings {
    /// `sqlite:PATH` or a PostgreSQL URL; `None`: no archive.
    pub address: Option<String>,
    /// How long entries are kept.
    pub retention: Retention,
}

impl Settings {
    /// The archiver these settings ask for, with the Events of `events`; `None` without an
    /// address.
    pub async fn open(
        &self,
        events: Arc<dyn EventLog>,
    ) -> Result<Option<Arc<Archiver>>, ArchiveError> {
        let Some(address) = &self.address else {
            return Ok(None);
        };
        let archive = open(address).await?;
        Ok(Some(Arc::new(Archiver::new(
            archive,
            events,
            self.retention,
        ))))
    }
}

/// The archive with the event log whose Events go with each Run, and its retention.
pub struct Archiver {
    archive: Arc<dyn Archive>,
    events: Arc<dyn EventLog>,
    retention: Retention,
}

impl std::fmt::Debug for Archiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Archiver")
            .field("retention", &self.retention)
            .finish_non_exhaustive()
    }
}

/// The archive at `address`: `sqlite:PATH`, or a PostgreSQL URL (`postgres://…`,
/// `postgresql://…`).
pub async fn open(address: &str) -> Result<Arc<dyn Archive>, ArchiveError> {
    if let Some(path) = address.strip_prefix("sqlite:") {
        if path.is_empty() {
            return Err(ArchiveError::Address(address.into()));
        }
        return Ok(Arc::new(SqliteArchive::open(std::path::Path::new(path))?));
    }
    if address.starts_with("postgres://") || address.starts_with("postgresql://") {
        return Ok(Arc::new(PostgresArchive::open(address).await?));
    }
    // Not echoed: a mistyped URL may still carry a password.
    Err(ArchiveError::Address(match address.split_once("://") {
        Some((scheme, _)) => format!("{scheme}://…"),
        None => address.into(),
    }))
}

impl Archiver {
    /// Archive into `archive` with the Events of `events`, kept per `retention`.
    pub fn new(archive: Arc<dyn Archive>, events: Arc<dyn EventLog>, retention: Retention) -> Self {
        Self {
            archive,
            events,
            retention,
        }
    }

    /// The archive, to read from.
    pub fn archive(&self) -> &Arc<dyn Archive> {
        &self.archive
    }

    /// Write `run` and its Events to the archive; returns once committed. Events are a
    /// convenience: when they cannot be read the Run is archived without them.
    pub async fn keep(&self, run: &Run) -> Result<(), ArchiveError> {
        let m = &run.metadata;
        let (ns, name, uid) = (
            m.namespace.as_deref().unwrap_or_default(),
            m.name.as_deref().unwrap_or_default(),
            m.uid.as_deref().unwrap_or_default(),
        );
        let events = self.events.recent(ns, name, uid).await.unwrap_or_else(|e| {
            tracing::warn!(namespace = %ns, run = %name, error = %e, "archiving a run without its events");
            Vec::new()
        });
        let mut run = run.clone();
        run.metadata.managed_fields = None;
        let entry = Entry {
            run,
            events,
            archived_at: Timestamp::now(),
        };
        tokio::time::timeout(WRITE_TIMEOUT, self.archive.put(&entry))
            .await
            .map_err(|_| ArchiveError::TimedOut(WRITE_TIMEOUT))?
    }

    /// Prune the archive to its retention now and every [`PRUNE_EVERY`] until `shutdown`.
    /// Every replica may do it: a second prune finds nothing to delete.
    pub async fn prune_until(self: Arc<Self>, shutdown: CancellationToken) {
        if self.retention.max_age.is_none() && self.retention.max_per_namespace.is_none() {
            return;
        }
        loop {
            match self.archive.prune(Timestamp::now(), self.retention).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(entries = n, "archive pruned to its retention"),
                Err(e) => tracing::warn!(error = %e, "cannot prune the archive"),
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(PRUNE_EVERY) => {}
            }
        }
    }
}
