//! The archive in a SQLite file: the embedded server's (beside its Runs, in the same file), or
//! a single operator replica's on a volume.

use std::path::Path;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use jiff::Timestamp;
use rusqlite::{Connection, OptionalExtension, params};

use super::{Archive, ArchiveError, Entry, Retention, micros};

/// How long a write waits for the Run store's writer, which shares the file.
const BUSY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Entries deleted per transaction by a prune: each holds the file's write lock briefly.
const PRUNE_CHUNK: usize = 500;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS archived_runs (
    uid TEXT PRIMARY KEY,
    namespace TEXT NOT NULL,
    name TEXT NOT NULL,
    created_us INTEGER NOT NULL,
    finished_us INTEGER NOT NULL,
    archived_us INTEGER NOT NULL,
    entry TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS archived_runs_by_place ON archived_runs (namespace, created_us, name);
CREATE INDEX IF NOT EXISTS archived_runs_by_end ON archived_runs (finished_us);";

/// Archived Runs in SQLite.
#[derive(Clone)]
pub struct SqliteArchive {
    conn: Arc<Mutex<Connection>>,
}

impl SqliteArchive {
    /// Open (or create) the archive in the database file `path`.
    pub fn open(path: &Path) -> Result<Self, ArchiveError> {
        let conn = Connection::open(path)?;
        conn.pragma_update(None, "journal_mode", crate::store::sqlite::JOURNAL_MODE)?;
        conn.pragma_update(None, "synchronous", crate::store::sqlite::SYNCHRONOUS)?;
        conn.busy_timeout(BUSY_TIMEOUT)?;
        conn.execute_batch(SCHEMA)?;
        Ok(Self {
            conn: Arc::new(Mutex::new(conn)),
        })
    }

    /// Run `f` with the connection on a blocking thread.
    async fn with<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<T, ArchiveError> + Send + 'static,
    ) -> Result<T, ArchiveError> {
        let conn = self.conn.clone();
        tokio::task::spawn_blocking(move || {
            let mut c = conn.lock().unwrap_or_else(|p| p.into_inner());
            f(&mut c)
        })
        .await
        .map_err(|_| ArchiveError::Stopped)?
    }
}

fn decode(rows: Vec<String>) -> Result<Vec<Entry>, ArchiveError> {
    rows.iter()
        .map(|s| serde_json::from_str(s).map_err(ArchiveError::from))
        .collect()
}

#[async_trait]
impl Archive for SqliteArchive {
    async fn put(&self, entry: &Entry) -> Result<(), ArchiveError> {
        let uid = entry.uid()?.to_owned();
        let (ns, name) = entry.key()?;
        let (ns, name) = (ns.to_owned(), name.to_owned());
        let (created, finished) = (entry.created_us(), entry.finished_us());
        let archived = micros(entry.archived_at);
        let body = serde_json::to_string(entry)?;
        self.with(move |c| {
            c.prepare_cached(
                "INSERT INTO archived_runs
                     (uid, namespace, name, created_us, finished_us, archived_us, entry)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
                 ON CONFLICT(uid) DO UPDATE SET finished_us = excluded.finished_us,
                     archived_us = excluded.archived_us, entry = excluded.entry",
            )?
            .execute(params![uid, ns, name, created, finished, archived, body])?;
            Ok(())
        })
        .await
    }

    async fn get(&self, namespace: &str, name: &str) -> Result<Option<Entry>, ArchiveError> {
        let (ns, name) = (namespace.to_owned(), name.to_owned());
        let body: Option<String> = self
            .with(move |c| {
                Ok(c.prepare_cached(
                    "SELECT entry FROM archived_runs WHERE namespace = ?1 AND name = ?2
                     ORDER BY created_us DESC LIMIT 1",
                )?
                .query_row(params![ns, name], |r| r.get(0))
                .optional()?)
            })
            .await?;
        Ok(body.map(|b| serde_json::from_str(&b)).transpose()?)
    }

    async fn page(
        &self,
        namespace: &str,
        newest: bool,
        after: Option<(i64, String)>,
        limit: usize,
    ) -> Result<Vec<Entry>, ArchiveError> {
        let ns = namespace.to_owned();
        let (t, n) = super::page_start(newest, after);
        let sql = if newest {
            "SELECT entry FROM archived_runs WHERE namespace = ?1 AND (created_us, name) < (?2, ?3)
             ORDER BY created_us DESC, name DESC LIMIT ?4"
        } else {
            "SELECT entry FROM archived_runs WHERE namespace = ?1 AND (created_us, name) > (?2, ?3)
             ORDER BY created_us, name LIMIT ?4"
        };
        let rows = self
            .with(move |c| {
                let mut s = c.prepare_cached(sql)?;
                let rows = s
                    .query_map(params![ns, t, n, limit as i64], |r| r.get::<_, String>(0))?
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(rows)
            })
            .await?;
        decode(rows)
    }

    async fn prune(&self, now: Timestamp, retention: Retention) -> Result<u64, ArchiveError> {
        let cutoff = retention
            .max_age
            .map(|age| micros(now) - age.as_micros() as i64);
        let keep = retention.max_per_namespace.map(|n| n as i64);
        self.with(move |c| {
            // What goes is read first (a read does not hold up the Run store's writer, which
            // shares the file), then deleted a chunk per transaction: one transaction over a
            // large archive held the write lock past the writer's busy timeout, failing
            // every write of the Runs waiting behind it.
            let mut due: Vec<String> = Vec::new();
            if let Some(cutoff) = cutoff {
                let mut s =
                    c.prepare_cached("SELECT uid FROM archived_runs WHERE finished_us < ?1")?;
                let rows = s.query_map(params![cutoff], |r| r.get::<_, String>(0))?;
                due.extend(rows.collect::<Result<Vec<_>, _>>()?);
            }
            if let Some(keep) = keep {
                let mut s = c.prepare_cached(
                    "SELECT uid FROM (
                         SELECT uid, finished_us, ROW_NUMBER() OVER (
                             PARTITION BY namespace ORDER BY finished_us DESC, uid) AS n
                         FROM archived_runs) AS ranked
                     WHERE ranked.n > ?1 AND ranked.finished_us >= ?2",
                )?;
                // Those past the age limit are due already.
                let floor = cutoff.unwrap_or(i64::MIN);
                let rows = s.query_map(params![keep, floor], |r| r.get::<_, String>(0))?;
                due.extend(rows.collect::<Result<Vec<_>, _>>()?);
            }
            let mut gone = 0;
            for chunk in due.chunks(PRUNE_CHUNK) {
                let tx = c.transaction()?;
                {
                    let mut s = tx.prepare_cached("DELETE FROM archived_runs WHERE uid = ?1")?;
                    for uid in chunk {
                        gone += s.execute(params![uid])?;
                    }
                }
                tx.commit()?;
            }
            Ok(gone as u64)
        })
        .await
    }
}
