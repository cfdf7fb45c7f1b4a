//! The identity the embedded store gives each manifest Workflow — its uid and the time it was
//! first seen — kept in the server's database, so that it outlives restarts: which of two
//! Workflows offering one tool is the older (and keeps the tool) is decided by this time, and a
//! restart that reads the files in another order must not hand the tool to the other.

use std::path::Path;
use std::sync::Mutex;

use rusqlite::{Connection, OptionalExtension, params};

use super::StoreError;

/// The identities of the manifest Workflows a server has seen.
pub struct WorkflowBook {
    conn: Mutex<Connection>,
    /// Read only: a check of a directory (`runway workflows --db`) records nothing.
    read_only: bool,
}

impl WorkflowBook {
    /// Open the book in the database at `db` (the Runs' database; another connection to it).
    pub fn open(db: &Path) -> Result<Self, StoreError> {
        let conn = Connection::open(db).map_err(|e| StoreError::Backend(e.to_string()))?;
        conn.busy_timeout(std::time::Duration::from_secs(10))
            .and_then(|()| {
                conn.execute_batch(
                    "CREATE TABLE IF NOT EXISTS workflows (
                         namespace TEXT NOT NULL, name TEXT NOT NULL,
                         uid TEXT NOT NULL, created TEXT NOT NULL,
                         PRIMARY KEY (namespace, name));",
                )
            })
            .map_err(|e| StoreError::Backend(e.to_string()))?;
        Ok(Self {
            conn: Mutex::new(conn),
            read_only: false,
        })
    }

    /// Open the book in `db` (which must exist) to read what a server recorded, recording
    /// nothing.
    pub fn open_read_only(db: &Path) -> Result<Self, StoreError> {
        let conn = Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .map_err(|e| StoreError::Backend(format!("{}: {e}", db.display())))?;
        Ok(Self {
            conn: Mutex::new(conn),
            read_only: true,
        })
    }

    /// The uid and first-seen time of Workflow `name` of `namespace`, when it was seen before.
    pub fn get(&self, namespace: &str, name: &str) -> Option<(String, jiff::Timestamp)> {
        let conn = self.conn.lock().expect("book lock");
        let row: Option<(String, String)> = conn
            .query_row(
                "SELECT uid, created FROM workflows WHERE namespace = ?1 AND name = ?2",
                params![namespace, name],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()
            .ok()
            .flatten();
        let (uid, created) = row?;
        Some((uid, created.parse().ok()?))
    }

    /// Keep the identity of a Workflow seen for the first time. A Workflow deleted from the
    /// directory keeps its entry: put back, it is the Workflow it was.
    pub fn put(&self, namespace: &str, name: &str, uid: &str, created: jiff::Timestamp) {
        if self.read_only {
            return;
        }
        let conn = self.conn.lock().expect("book lock");
        if let Err(e) = conn.execute(
            "INSERT OR IGNORE INTO workflows (namespace, name, uid, created) VALUES (?1, ?2, ?3, ?4)",
            params![namespace, name, uid, created.to_string()],
        ) {
            tracing::warn!(namespace, workflow = name, error = %e, "cannot record the workflow's identity");
        }
    }
}
