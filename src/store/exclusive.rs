//! The lock that keeps a database file to one store at a time.

use std::path::Path;

use super::StoreError;

/// How long opening a database waits for another store (a process still stopping) to let go
/// of it, and how often it looks.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(10);
const LOCK_POLL: std::time::Duration = std::time::Duration::from_millis(50);

/// The exclusive lock on `<path>.lock`, held while a store writes `path`: two stores on one
/// file would each count versions on their own, hand out the same ones and overwrite each
/// other's Runs (a restart that opens the file while the old process still writes).
pub(super) fn lock(path: &Path) -> Result<std::fs::File, StoreError> {
    let mut name = path.as_os_str().to_owned();
    name.push(".lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&name)
        .map_err(|e| StoreError::Backend(e.to_string()))?;
    let deadline = std::time::Instant::now() + LOCK_WAIT;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(file),
            Err(std::fs::TryLockError::WouldBlock) if std::time::Instant::now() < deadline => {
                std::thread::sleep(LOCK_POLL);
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(StoreError::Backend(format!(
                    "{} is in use by another store (still after {}s): is another runway process \
                     running on it?",
                    path.display(),
                    LOCK_WAIT.as_secs()
                )));
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(StoreError::Backend(e.to_string())),
        }
    }
}
