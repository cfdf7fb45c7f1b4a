//! The archive: finished Runs, with their Events, kept after the store deletes them (their
//! time to live over, a schedule's history limit reached, their top-level Run collected).
//! SQLite for the embedded server, PostgreSQL for the operator; `keeper` writes and prunes.

pub mod keeper;
pub mod postgres;
pub mod sqlite;

use async_trait::async_trait;
use jiff::Timestamp;
use serde::{Deserialize, Serialize};

use super::Place;
use super::events::RecordedEvent;
use crate::api::Run;

/// One archived Run: the object as it was last (metadata, spec with its answers and who gave
/// them, status with every step), and its Events.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// The Run.
    pub run: Run,
    /// Its Events, oldest first (those the event log still held when it was archived).
    pub events: Vec<RecordedEvent>,
    /// When it was written to the archive.
    pub archived_at: Timestamp,
}

impl Entry {
    /// The Run's uid, the archive's key: a Run made again under a name is another entry.
    pub fn uid(&self) -> Result<&str, ArchiveError> {
        self.run
            .metadata
            .uid
            .as_deref()
            .ok_or(ArchiveError::Invalid("the Run has no uid"))
    }

    /// Namespace and name.
    pub fn key(&self) -> Result<(&str, &str), ArchiveError> {
        let m = &self.run.metadata;
        m.namespace
            .as_deref()
            .zip(m.name.as_deref())
            .ok_or(ArchiveError::Invalid("the Run has no namespace or name"))
    }

    /// Creation time in microseconds since the epoch (the list order, with the name).
    pub fn created_us(&self) -> i64 {
        micros(super::place(&self.run).0)
    }

    /// When the Run finished, in microseconds (retention by age counts from it); a Run
    /// without a recorded end counts from its archiving.
    pub fn finished_us(&self) -> i64 {
        self.run
            .status
            .as_ref()
            .and_then(|s| s.finished_at.as_deref())
            .and_then(|t| t.parse::<Timestamp>().ok())
            .map_or(micros(self.archived_at), micros)
    }
}

/// Microseconds since the epoch (the archive's time columns).
pub fn micros(t: Timestamp) -> i64 {
    t.as_microsecond()
}

/// Archive failures. The caller keeps the Run in the store when a write fails.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    /// The archive address is not one Runway knows.
    #[error("archive {0:?}: expected sqlite:PATH or postgres://…")]
    Address(String),
    /// The entry cannot be archived as it is.
    #[error("cannot archive: {0}")]
    Invalid(&'static str),
    /// An entry read back does not decode (written by something else).
    #[error("archived entry does not decode: {0}")]
    Decode(#[from] serde_json::Error),
    /// SQLite failed.
    #[error("archive (SQLite): {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// PostgreSQL failed.
    #[error("archive (PostgreSQL): {0}")]
    Postgres(#[from] tokio_postgres::Error),
    /// The archive's worker went away (the process is stopping), or there is no connection.
    #[error("archive worker stopped")]
    Stopped,
    /// The server could not be reached a moment ago; no new attempt is made yet.
    #[error("archive (PostgreSQL) unreachable: {0}")]
    Unreachable(String),
    /// A write took longer than it may.
    #[error("archive write took longer than {0:?}")]
    TimedOut(std::time::Duration),
}

/// How long archived Runs are kept.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Retention {
    /// Entries whose Run finished longer ago than this go (`None`: no age limit).
    pub max_age: Option<jiff::SignedDuration>,
    /// Entries of a namespace past this many, the oldest first, go (`None`: no count limit).
    pub max_per_namespace: Option<u64>,
}

/// Where archived Runs are kept.
#[async_trait]
pub trait Archive: Send + Sync + 'static {
    /// Write `entry`, replacing an entry of the same uid: writing again after a crash between
    /// archiving and deleting keeps one entry, not two. Returns once committed.
    async fn put(&self, entry: &Entry) -> Result<(), ArchiveError>;
    /// The newest entry (by creation) of Run `name` in `namespace`.
    async fn get(&self, namespace: &str, name: &str) -> Result<Option<Entry>, ArchiveError>;
    /// Up to `limit` entries of `namespace` in creation order (newest first when `newest`),
    /// strictly past `after`: creation time in microseconds, then name.
    async fn page(
        &self,
        namespace: &str,
        newest: bool,
        after: Option<(i64, String)>,
        limit: usize,
    ) -> Result<Vec<Entry>, ArchiveError>;
    /// Delete what `retention` lets go as of `now`; how many entries went.
    async fn prune(&self, now: Timestamp, retention: Retention) -> Result<u64, ArchiveError>;
}

/// Where a page in creation order starts: past `after`, or before (after) every entry.
pub(crate) fn page_start(newest: bool, after: Option<(i64, String)>) -> (i64, String) {
    after.unwrap_or(if newest {
        (i64::MAX, String::new())
    } else {
        (i64::MIN, String::new())
    })
}

/// Entries read per query of [`scan`].
const SCAN_PAGE: usize = 100;

/// Tell `visit` the archived Runs of `namespace` in creation order (as
/// [`super::RunStore::scan`] does for live ones), until it says `false` or none is left.
pub async fn scan(
    archive: &dyn Archive,
    namespace: &str,
    newest: bool,
    after: Option<Place<'_>>,
    visit: &mut (dyn FnMut(&Entry) -> bool + Send),
) -> Result<(), ArchiveError> {
    let mut from = after.map(|(t, n)| (micros(t), n.to_owned()));
    loop {
        let page = archive
            .page(namespace, newest, from.clone(), SCAN_PAGE)
            .await?;
        for e in &page {
            if !visit(e) {
                return Ok(());
            }
        }
        match page.last() {
            Some(last) if page.len() == SCAN_PAGE => {
                let (_, name) = last.key()?;
                from = Some((last.created_us(), name.to_owned()));
            }
            _ => return Ok(()),
        }
    }
}
