//! Taking a finished Run out of the store together with the child Runs below it, each archived
//! first (when there is an archive): what a time to live and a schedule's history limits both
//! do. The children go first, so that a removal cut short is found again through the Run; on
//! Kubernetes the owner references would delete them too, but unarchived.

use std::collections::BTreeMap;

use crate::api::Run;
use crate::engine::marks::Marks;
use crate::store::archive::ArchiveError;
use crate::store::archive::keeper::Archiver;
use crate::store::{RunStore, StoreError};

/// Why a Run (or one below it) is still in the store.
#[derive(Debug, thiserror::Error)]
pub(super) enum RetireError {
    /// A Run could not be archived, so it was kept.
    #[error("cannot archive run {name}: {source}")]
    Archive {
        /// The Run that was kept (the top-level one or a child).
        run: Box<Run>,
        /// Its name, for the message.
        name: String,
        /// Why.
        #[source]
        source: ArchiveError,
    },
    /// A child Run below it has not finished (a parent can end while a child it cancelled
    /// still runs its `finally` steps or cleanups): nothing was removed.
    #[error("child run {0} has not finished")]
    Unfinished(String),
    /// A Run was written after it was archived (or its name taken by another Run): it was
    /// kept, to be read and archived again.
    #[error("run {0} changed while it was archived")]
    Changed(String),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Archive and delete `run` and the children this process sealed below it (by its uid as
/// their root); a child that merely carries the label is left alone. While any of those
/// children still runs or owes cleanups, nothing is removed: deleting it would cut its
/// `finally` steps short and leave what it started running.
pub(super) async fn retire_tree(
    store: &dyn RunStore,
    archive: Option<&Archiver>,
    marks: &Marks,
    run: &Run,
) -> Result<(), RetireError> {
    let namespace = run.metadata.namespace.as_deref().unwrap_or_default();
    if let Some(uid) = run.metadata.uid.clone() {
        let below = BTreeMap::from([(crate::api::labels::ROOT.to_owned(), uid)]);
        let children = store.list(Some(namespace), &below).await?;
        let sealed: Vec<_> = children
            .iter()
            .filter(|c| crate::steps::child::sealed_child(marks, c))
            .collect();
        if let Some(busy) = sealed.iter().find(|c| !done(c)) {
            let name = busy.metadata.name.clone().unwrap_or_default();
            return Err(RetireError::Unfinished(name));
        }
        for child in sealed {
            retire(store, archive, child).await?;
        }
    }
    retire(store, archive, run).await
}

/// Whether `run` has finished and has nothing left to undo.
fn done(run: &Run) -> bool {
    run.phase().is_terminal() && run.status.as_ref().is_none_or(|s| s.cleanups.is_empty())
}

/// Archive `run`, then delete it: that Run only, by its uid, and only at the version that
/// was archived. A Run made under the same name while the archive was written (an idempotent
/// call repeated after a delete) is not this one, and is left alone; a write to this one in
/// between (a label, a late status) would be lost with it, so it is kept for another pass.
async fn retire(
    store: &dyn RunStore,
    archive: Option<&Archiver>,
    run: &Run,
) -> Result<(), RetireError> {
    let name = run.metadata.name.as_deref().unwrap_or_default();
    if let Some(archiver) = archive
        && let Err(source) = archiver.keep(run).await
    {
        return Err(RetireError::Archive {
            run: Box::new(run.clone()),
            name: name.to_owned(),
            source,
        });
    }
    let namespace = run.metadata.namespace.as_deref().unwrap_or_default();
    let m = &run.metadata;
    let (uid, version) = (m.uid.as_deref(), m.resource_version.as_deref());
    match store.delete(namespace, name, uid, version).await {
        Ok(()) | Err(StoreError::NotFound) => Ok(()),
        Err(StoreError::Conflict) => Err(RetireError::Changed(name.to_owned())),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use async_trait::async_trait;
    use jiff::Timestamp;

    use super::*;
    use crate::api::{RunPhase, RunStatus};
    use crate::controller::history::MemoryEvents;
    use crate::store::archive::sqlite::SqliteArchive;
    use crate::store::archive::{Archive, Entry, Retention};
    use crate::store::sqlite::SqliteStore;

    /// An archive during whose first write somebody labels the Run being archived.
    struct Meddled {
        archive: SqliteArchive,
        store: Arc<SqliteStore>,
        once: AtomicBool,
    }

    #[async_trait]
    impl Archive for Meddled {
        async fn put(&self, entry: &Entry) -> Result<(), ArchiveError> {
            if !self.once.swap(true, Ordering::SeqCst) {
                let m = &entry.run.metadata;
                let (ns, name) = (m.namespace.as_deref().unwrap(), m.name.as_deref().unwrap());
                let mut run = self.store.get(ns, name).await.unwrap().unwrap();
                run.metadata
                    .labels
                    .get_or_insert_default()
                    .insert("team".into(), "b".into());
                self.store.update(run).await.unwrap();
            }
            self.archive.put(entry).await
        }
        async fn get(&self, namespace: &str, name: &str) -> Result<Option<Entry>, ArchiveError> {
            self.archive.get(namespace, name).await
        }
        async fn page(
            &self,
            namespace: &str,
            newest: bool,
            after: Option<(i64, String)>,
            limit: usize,
        ) -> Result<Vec<Entry>, ArchiveError> {
            self.archive.page(namespace, newest, after, limit).await
        }
        async fn prune(&self, now: Timestamp, retention: Retention) -> Result<u64, ArchiveError> {
            self.archive.prune(now, retention).await
        }
    }

    #[tokio::test]
    async fn a_run_written_while_it_is_archived_is_kept_and_archived_again() {
        let dir = std::env::temp_dir().join(format!("runway-retire-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let store = Arc::new(SqliteStore::open(&dir.join("runs.db")).unwrap());
        let run = Run::requested(
            "ns",
            "r",
            "w",
            serde_json::Value::Null,
            None,
            Timestamp::now(),
        );
        let mut run = store.create(run).await.unwrap();
        run.status = Some(RunStatus {
            phase: RunPhase::Succeeded,
            ..Default::default()
        });
        store.update_status(run).await.unwrap();
        let meddled = Meddled {
            archive: SqliteArchive::open(&dir.join("archive.db")).unwrap(),
            store: Arc::clone(&store),
            once: AtomicBool::new(false),
        };
        let archiver = Archiver::new(
            Arc::new(meddled),
            Arc::new(MemoryEvents::default()),
            Retention::default(),
        );
        let marks = Marks::default();

        let read = store.get("ns", "r").await.unwrap().unwrap();
        let kept = retire_tree(&*store, Some(&archiver), &marks, &read).await;
        assert!(matches!(kept, Err(RetireError::Changed(n)) if n == "r"));
        let still = store.get("ns", "r").await.unwrap().expect("kept");
        assert_eq!(still.metadata.labels.as_ref().unwrap()["team"], "b");

        retire_tree(&*store, Some(&archiver), &marks, &still)
            .await
            .unwrap();
        assert!(store.get("ns", "r").await.unwrap().is_none());
        let entry = archiver.archive().get("ns", "r").await.unwrap().unwrap();
        assert_eq!(entry.run.metadata.labels.unwrap()["team"], "b");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
