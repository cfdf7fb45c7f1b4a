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

/// Archive `run`, then delete it: that Run only, by its uid. A Run made under the same name
/// while the archive was written (an idempotent call repeated after a delete) is not this one,
/// and is left alone.
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
    match store
        .delete(namespace, name, run.metadata.uid.as_deref())
        .await
    {
        Ok(()) | Err(StoreError::NotFound | StoreError::Conflict) => Ok(()),
        Err(e) => Err(e.into()),
    }
}
