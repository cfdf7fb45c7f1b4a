//! The archive in PostgreSQL: the operator's, shared by its replicas. One connection, opened
//! again after it breaks; entries are `jsonb`, so that they can be queried with SQL too.

use async_trait::async_trait;
use jiff::Timestamp;
use tokio::sync::Mutex;
use tokio::time::Instant;
use tokio_postgres::{Client, NoTls};

use super::{Archive, ArchiveError, Entry, Retention, micros};

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS archived_runs (
    uid TEXT PRIMARY KEY,
    namespace TEXT NOT NULL,
    name TEXT COLLATE \"C\" NOT NULL,
    created_us BIGINT NOT NULL,
    finished_us BIGINT NOT NULL,
    archived_us BIGINT NOT NULL,
    entry JSONB NOT NULL);
CREATE INDEX IF NOT EXISTS archived_runs_by_place ON archived_runs (namespace, created_us, name);
CREATE INDEX IF NOT EXISTS archived_runs_by_end ON archived_runs (finished_us);";

/// How long a connection attempt may take unless the URL says (`connect_timeout`): a writer
/// waits for it, and an unreachable host must not hold a worker for long.
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);
/// After a failed connection attempt, calls fail at once for this long instead of each
/// waiting for an attempt of its own: an archive that is down must not queue every worker
/// that collects a Run behind it.
const RECONNECT_AFTER: std::time::Duration = std::time::Duration::from_secs(10);

/// Archived Runs in PostgreSQL.
pub struct PostgresArchive {
    config: tokio_postgres::Config,
    link: Mutex<Link>,
}

/// The connection, or when the next attempt to make one may be.
#[derive(Default)]
struct Link {
    client: Option<Client>,
    retry_at: Option<Instant>,
    last_error: String,
}

impl std::fmt::Debug for PostgresArchive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The address may carry a password.
        f.debug_struct("PostgresArchive").finish_non_exhaustive()
    }
}

impl PostgresArchive {
    /// The archive in the database at `url` (`postgres://user:password@host:port/db`); a URL
    /// that does not parse is an error. The server is connected to now, and the archive's
    /// table made where it is missing; a server that cannot be reached now is only logged:
    /// writes try again, and the Runs wait in the store meanwhile.
    pub async fn open(url: &str) -> Result<Self, ArchiveError> {
        let mut config: tokio_postgres::Config = url.parse()?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        let me = Self {
            config,
            link: Mutex::new(Link::default()),
        };
        if let Err(e) = me.client().await {
            tracing::warn!(error = %e, "the archive cannot be reached yet; finished runs are kept until it can");
        }
        Ok(me)
    }

    /// The connection, opened (again) when there is none or it broke; within
    /// [`RECONNECT_AFTER`] of a failed attempt, the failure again.
    async fn client(&self) -> Result<tokio::sync::MutexGuard<'_, Link>, ArchiveError> {
        let mut link = self.link.lock().await;
        if link.client.as_ref().is_some_and(|c| !c.is_closed()) {
            return Ok(link);
        }
        if link.retry_at.is_some_and(|t| Instant::now() < t) {
            return Err(ArchiveError::Unreachable(link.last_error.clone()));
        }
        match self.connect().await {
            Ok(client) => {
                *link = Link {
                    client: Some(client),
                    ..Link::default()
                };
                Ok(link)
            }
            Err(e) => {
                link.client = None;
                link.retry_at = Some(Instant::now() + RECONNECT_AFTER);
                link.last_error = e.to_string();
                Err(e)
            }
        }
    }

    async fn connect(&self) -> Result<Client, ArchiveError> {
        let (client, connection) = self.config.connect(NoTls).await?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::warn!(error = %e, "archive connection ended");
            }
        });
        client.batch_execute(SCHEMA).await?;
        Ok(client)
    }
}

fn decode(rows: &[tokio_postgres::Row]) -> Result<Vec<Entry>, ArchiveError> {
    rows.iter()
        .map(|r| serde_json::from_str(r.try_get::<_, &str>(0)?).map_err(ArchiveError::from))
        .collect()
}

fn connected(link: &Link) -> Result<&Client, ArchiveError> {
    link.client.as_ref().ok_or(ArchiveError::Stopped)
}

#[async_trait]
impl Archive for PostgresArchive {
    async fn put(&self, entry: &Entry) -> Result<(), ArchiveError> {
        let uid = entry.uid()?;
        let (ns, name) = entry.key()?;
        let body = serde_json::to_string(entry)?;
        let slot = self.client().await?;
        connected(&slot)?
            .execute(
                "INSERT INTO archived_runs
                     (uid, namespace, name, created_us, finished_us, archived_us, entry)
                 VALUES ($1, $2, $3, $4, $5, $6, $7::text::jsonb)
                 ON CONFLICT (uid) DO UPDATE SET finished_us = excluded.finished_us,
                     archived_us = excluded.archived_us, entry = excluded.entry",
                &[
                    &uid,
                    &ns,
                    &name,
                    &entry.created_us(),
                    &entry.finished_us(),
                    &micros(entry.archived_at),
                    &body,
                ],
            )
            .await?;
        Ok(())
    }

    async fn get(&self, namespace: &str, name: &str) -> Result<Option<Entry>, ArchiveError> {
        let slot = self.client().await?;
        let rows = connected(&slot)?
            .query(
                "SELECT entry::text FROM archived_runs WHERE namespace = $1 AND name = $2
                 ORDER BY created_us DESC LIMIT 1",
                &[&namespace, &name],
            )
            .await?;
        Ok(decode(&rows)?.into_iter().next())
    }

    async fn page(
        &self,
        namespace: &str,
        newest: bool,
        after: Option<(i64, String)>,
        limit: usize,
    ) -> Result<Vec<Entry>, ArchiveError> {
        let (t, n) = super::page_start(newest, after);
        // Names compare byte by byte (the column's collation is "C"), as in SQLite and the
        // live list. The page is chosen before any entry is turned into text: whatever plan
        // the server picks, only the page's entries are.
        let sql = if newest {
            "SELECT entry::text FROM (
                 SELECT entry, created_us, name FROM archived_runs
                 WHERE namespace = $1 AND (created_us, name) < ($2, $3)
                 ORDER BY created_us DESC, name DESC LIMIT $4) AS page
             ORDER BY created_us DESC, name DESC"
        } else {
            "SELECT entry::text FROM (
                 SELECT entry, created_us, name FROM archived_runs
                 WHERE namespace = $1 AND (created_us, name) > ($2, $3)
                 ORDER BY created_us, name LIMIT $4) AS page
             ORDER BY created_us, name"
        };
        let slot = self.client().await?;
        let rows = connected(&slot)?
            .query(sql, &[&namespace, &t, &n, &(limit as i64)])
            .await?;
        decode(&rows)
    }

    async fn prune(&self, now: Timestamp, retention: Retention) -> Result<u64, ArchiveError> {
        let slot = self.client().await?;
        let client = connected(&slot)?;
        let mut gone = 0;
        if let Some(age) = retention.max_age {
            let cutoff = micros(now) - age.as_micros() as i64;
            gone += client
                .execute(
                    "DELETE FROM archived_runs WHERE finished_us < $1",
                    &[&cutoff],
                )
                .await?;
        }
        if let Some(keep) = retention.max_per_namespace {
            gone += client
                .execute(
                    "DELETE FROM archived_runs WHERE uid IN (
                         SELECT uid FROM (
                             SELECT uid, ROW_NUMBER() OVER (
                                 PARTITION BY namespace ORDER BY finished_us DESC, uid) AS n
                             FROM archived_runs) AS ranked
                         WHERE ranked.n > $1)",
                    &[&(keep as i64)],
                )
                .await?;
        }
        Ok(gone)
    }
}
