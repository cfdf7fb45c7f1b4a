//! `workflow` steps: start a child Run of another Workflow in the parent's namespace, as the
//! parent's requester, wait for it to end and take its result; cancel it when the parent no
//! longer waits for it.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Resource;
use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

pub(crate) use super::lineage::sealed_child;
use super::lineage::{Lineage, child_parts, lineage};
use super::{Executor, within_deadline};
use crate::api::{
    CancelRequest, Cleanup, Run, RunError, RunPhase, annotations, conditions, labels, reasons,
};
use crate::api::{ErrorClass, JsonText};
use crate::engine::marks::{Marks, Sealed};
use crate::engine::{Action, Effect, Outcome, budget};
use crate::protocol::codes;
use crate::store::changes::{ends, stale};
use crate::store::{Change, RunChanges, RunStore, StoreError};

/// How often a waiting parent reads its child again even without a change notice: a safety
/// net for a notice missed while the store's cache caught up.
const RECHECK: Duration = Duration::from_secs(10);

/// Longest wait for the answer to a child's create, which holds its tree's lock.
const CREATE_TIMEOUT: Duration = Duration::from_secs(60);

/// Locks that make "count the tree, then create" one step per Run tree in this process
/// (striped by the root's uid, so that their number stays fixed).
const TREE_LOCKS: usize = 64;

/// Starts, follows and cancels child Runs.
pub struct ChildExecutor {
    store: Arc<dyn RunStore>,
    changes: RunChanges,
    marks: Marks,
    trees: Vec<tokio::sync::Mutex<()>>,
    /// Uids of Runs whose seal held, so that counting a tree checks each Run's seal once.
    sealed: std::sync::Mutex<std::collections::HashSet<String>>,
}

/// Most uids [`ChildExecutor::sealed`] remembers before it starts over.
const SEALED_REMEMBERED: usize = 100_000;

/// A bound of the Run tree was reached: the step ends the Run with a protocol-level error that
/// names the bound (not retried: trying again meets the same bound).
fn limit(reason: &str, message: String) -> Outcome {
    Outcome::Fatal(RunError {
        code: codes::INTERNAL_ERROR,
        message,
        data: Some(json!({ "reason": reason })),
    })
}

impl ChildExecutor {
    /// Children in `store`, followed through `changes` (fed by the controller's watch),
    /// sealed and recognised with `marks`.
    pub fn new(store: Arc<dyn RunStore>, changes: RunChanges, marks: Marks) -> Self {
        Self {
            store,
            changes,
            marks,
            trees: (0..TREE_LOCKS)
                .map(|_| tokio::sync::Mutex::new(()))
                .collect(),
            sealed: Default::default(),
        }
    }

    /// [`sealed_child`], remembered by uid.
    fn is_sealed(&self, run: &Run) -> bool {
        let uid = run.metadata.uid.as_deref().unwrap_or_default();
        if self.sealed.lock().expect("sealed lock").contains(uid) {
            return true;
        }
        let sealed = sealed_child(&self.marks, run);
        if sealed && !uid.is_empty() {
            let mut known = self.sealed.lock().expect("sealed lock");
            if known.len() >= SEALED_REMEMBERED {
                known.clear();
            }
            known.insert(uid.to_owned());
        }
        sealed
    }

    fn tree_lock(&self, root: &str) -> &tokio::sync::Mutex<()> {
        let h = root.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
        &self.trees[usize::try_from(h % TREE_LOCKS as u64).unwrap_or_default()]
    }

    fn failed(message: String) -> Outcome {
        Outcome::Failed {
            class: ErrorClass::ToolError,
            message,
            detail: None,
        }
    }

    fn connection(e: StoreError) -> Outcome {
        Outcome::Failed {
            class: ErrorClass::Connection,
            message: format!("the run store failed: {e}"),
            detail: None,
        }
    }

    /// The child Run of `parent` for this attempt, as it is first created, sealed.
    fn child(
        &self,
        parent: &Run,
        workflow: &str,
        arguments: &Value,
        name: &str,
        tree: &Lineage,
    ) -> Run {
        let parent_name = parent.metadata.name.clone().unwrap_or_default();
        let parent_uid = parent.metadata.uid.clone().unwrap_or_default();
        let mut run = Run::requested(
            parent.metadata.namespace.as_deref().unwrap_or_default(),
            name,
            workflow,
            arguments.clone(),
            parent.spec.requested_by.clone(),
            jiff::Timestamp::now(),
        )
        .with_labels([
            (labels::PARENT, parent_name.clone()),
            (labels::ROOT, tree.root.clone()),
        ])
        .with_annotations([
            (annotations::PARENT_UID, parent_uid.clone()),
            (annotations::DEPTH, (tree.depth + 1).to_string()),
            (annotations::LINEAGE, tree.workflows.join(",")),
        ]);
        let mark = self.marks.seal(Sealed::Child, &child_parts(&run));
        // The child's trace hangs under this step attempt of its parent.
        run = run
            .with_annotations([(annotations::MARK, mark)])
            .with_annotations(crate::telemetry::run_annotation());
        // Kubernetes deletes the child with its parent.
        run.metadata.owner_references = Some(vec![OwnerReference {
            api_version: Run::api_version(&()).into_owned(),
            kind: Run::kind(&()).into_owned(),
            name: parent_name,
            uid: parent_uid,
            controller: Some(true),
            block_owner_deletion: None,
        }]);
        run
    }

    /// Whether `existing` is this attempt's child: sealed by Runway, under this parent.
    fn adoptable(&self, parent: &Run, existing: &Run) -> bool {
        sealed_child(&self.marks, existing)
            && parent_uid(existing) == parent.metadata.uid.as_deref()
    }

    /// The bound a new child of `parent` would break, if any: children of one Run,
    /// descendants of one top-level Run (only sealed Runs count; the Runs that exist are the
    /// count, since children live as long as their root).
    async fn over_limit(&self, parent: &Run, tree: &Lineage) -> Result<Option<Outcome>, Outcome> {
        let ns = parent.metadata.namespace.clone().unwrap_or_default();
        let selector =
            std::collections::BTreeMap::from([(labels::ROOT.to_owned(), tree.root.clone())]);
        let descendants: Vec<_> = self
            .store
            .list(Some(&ns), &selector)
            .await
            .map_err(Self::connection)?
            .into_iter()
            .filter(|r| self.is_sealed(r))
            .collect();
        if descendants.len() >= budget::MAX_DESCENDANTS {
            return Ok(Some(limit(
                reasons::RUN_LIMIT,
                format!(
                    "run limit: this run's top-level run has {} runs below it (at most {})",
                    descendants.len(),
                    budget::MAX_DESCENDANTS
                ),
            )));
        }
        let children = descendants
            .iter()
            .filter(|r| parent_uid(r) == parent.metadata.uid.as_deref())
            .count();
        if children >= budget::MAX_CHILDREN {
            return Ok(Some(limit(
                reasons::RUN_LIMIT,
                format!(
                    "run limit: this run started {children} child runs (at most {})",
                    budget::MAX_CHILDREN
                ),
            )));
        }
        Ok(None)
    }

    /// Whether `existing` is the child Runway made for an earlier Run of `parent`'s name
    /// (another uid): that Run was deleted and this one made under its name, and its children
    /// go with it a moment later.
    fn left_by_earlier(&self, parent: &Run, existing: &Run) -> bool {
        let named = existing
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(labels::PARENT));
        named.is_some()
            && named == parent.metadata.name.as_ref()
            && parent_uid(existing) != parent.metadata.uid.as_deref()
            && sealed_child(&self.marks, existing)
    }

    /// Once no child of an earlier Run of `parent`'s name holds the name `name`, for at most
    /// [`super::EARLIER_GONE_WAIT`].
    async fn until_earlier_gone(&self, parent: &Run, ns: &str, name: &str) -> Result<(), Outcome> {
        let mut changes = self.changes.subscribe(ns, name);
        let mut at_source = false;
        let wait = async {
            loop {
                match self.read(ns, name, at_source).await {
                    Ok(Some(existing)) if self.left_by_earlier(parent, &existing) => {}
                    Ok(_) => return Ok(()),
                    Err(e) => return Err(Self::connection(e)),
                }
                // Until it changes (or notices were missed), then look again; after a gap the
                // feed could not vouch for (closed), subscribed again and read at the source.
                let changed = tokio::time::timeout(RECHECK, changes.recv()).await;
                at_source = matches!(changed, Ok(Err(RecvError::Closed)));
                if at_source {
                    changes = self.changes.subscribe(ns, name);
                }
            }
        };
        match tokio::time::timeout(super::EARLIER_GONE_WAIT, wait).await {
            Ok(gone) => gone,
            Err(_) => Err(Outcome::Failed {
                class: ErrorClass::Timeout,
                message: format!("run {name} of an earlier run of this name is still there"),
                detail: None,
            }),
        }
    }

    /// Create the child, or find the one an earlier try of this attempt created; `Ok(false)`
    /// when stopped before a create began. Within one process, counting the tree and creating
    /// are one step per tree, and a create under way is not dropped when the step is stopped:
    /// dropped, it could still land after the step's cleanup looked for the child (the
    /// cleanup waits for the tree's lock first).
    async fn start(
        &self,
        parent: &Run,
        child: Run,
        tree: &Lineage,
        cancel: &CancellationToken,
    ) -> Result<bool, Outcome> {
        let (ns, name) = (
            child.metadata.namespace.clone().unwrap_or_default(),
            child.metadata.name.clone().unwrap_or_default(),
        );
        let not_ours = || {
            Self::failed(format!(
                "a run named {name} exists and is not this step's child"
            ))
        };
        let ready = async {
            self.until_earlier_gone(parent, &ns, &name).await?;
            let lock = self.tree_lock(&tree.root).lock().await;
            match self.store.get(&ns, &name).await {
                Ok(Some(existing)) if self.adoptable(parent, &existing) => return Ok(None),
                Ok(Some(_)) => return Err(not_ours()),
                Ok(None) => {}
                Err(e) => return Err(Self::connection(e)),
            }
            if let Some(refused) = self.over_limit(parent, tree).await? {
                return Err(refused);
            }
            Ok(Some(lock))
        };
        let lock = tokio::select! {
            biased;
            () = cancel.cancelled() => return Ok(false),
            ready = ready => ready?,
        };
        let Some(_tree) = lock else { return Ok(true) };
        // Stopped while the lock was waited for: the cleanup may have looked already.
        if cancel.is_cancelled() {
            return Ok(false);
        }
        // Bounded, since the tree's lock is held: an API server that never answers must not
        // hold every child start and cleanup of the trees sharing it.
        let created = tokio::time::timeout(CREATE_TIMEOUT, self.store.create(child))
            .await
            .unwrap_or_else(|_| Err(StoreError::Backend("the create had no answer".into())));
        match created {
            Ok(_) => Ok(true),
            Err(StoreError::AlreadyExists) => match self.store.get(&ns, &name).await {
                Ok(Some(existing)) if self.adoptable(parent, &existing) => Ok(true),
                Ok(Some(_)) => Err(not_ours()),
                Ok(None) => Err(Self::connection(StoreError::NotFound)),
                Err(e) => Err(Self::connection(e)),
            },
            Err(StoreError::Invalid(why)) => {
                Err(Self::failed(format!("the child run was refused: {why}")))
            }
            Err(e) => Err(Self::connection(e)),
        }
    }

    /// Run `name`: from the store's cache, or `at_source` (after a gap in the change feed, which
    /// the cache may not have caught up with either).
    async fn read(&self, ns: &str, name: &str, at_source: bool) -> Result<Option<Run>, StoreError> {
        match at_source {
            true => Ok(self
                .store
                .get_now(ns, name)
                .await?
                .map(Arc::unwrap_or_clone)),
            false => self.store.get(ns, name).await,
        }
    }

    /// Wait until the child ends; its ending is the step's outcome. A read that fails for a
    /// reason that may pass is tried again (the step's timeout bounds the wait): failing the
    /// step would cancel a child that runs on fine and start its work over.
    async fn follow(&self, ns: &str, name: &str) -> Outcome {
        let mut changes = self.changes.subscribe(ns, name);
        let mut at_source = false;
        let what = format!("reading child run {name}");
        loop {
            let read = || self.read(ns, name, at_source);
            let child = match super::again(&what, passing, read).await {
                Ok(Some(child)) => child,
                Ok(None) => return Self::failed(format!("child run {name} was deleted")),
                Err(e) => return Self::connection(e),
            };
            if let Some(outcome) = ended(&child) {
                return outcome;
            }
            // Until this child changes (or notices were missed), then read it again. What the
            // feed still brings of an earlier Run of the name is older than this child.
            let mut closed = false;
            let waited = tokio::time::timeout(RECHECK, async {
                loop {
                    match changes.recv().await {
                        Ok(Change::Updated(run)) if stale(&run, &child) => {}
                        Ok(Change::Updated(run)) => return ended(&run),
                        Ok(Change::Deleted(d)) if ends(&d, &child) => {
                            return Some(Self::failed(format!("child run {name} was deleted")));
                        }
                        Ok(Change::Deleted(_)) => {}
                        Err(RecvError::Lagged(_)) => return None,
                        // After a gap the feed could not vouch for the child.
                        Err(RecvError::Closed) => {
                            closed = true;
                            return None;
                        }
                    }
                }
            })
            .await;
            if let Ok(Some(outcome)) = waited {
                return outcome;
            }
            at_source = closed;
            if closed {
                changes = self.changes.subscribe(ns, name);
            }
        }
    }

    /// Ask the child to stop, unless it has ended. A store failure that may pass is tried
    /// again until the cleanup's deadline: a cancel given up on is not asked for again, and
    /// the child would run on to its end.
    async fn cancel(&self, parent: &Run, name: &str) -> Outcome {
        let who = parent
            .spec
            .cancel
            .as_ref()
            .and_then(|c| c.requested_by.clone())
            .unwrap_or_else(|| "runway".into());
        let parent_name = parent.metadata.name.clone().unwrap_or_default();
        let request = CancelRequest {
            reason: Some(format!("parent run {parent_name} stopped waiting for it")),
            requested_by: Some(who),
            requested_at: Some(jiff::Timestamp::now().to_string()),
        };
        // A create of the child under way in this process (its step stopped meanwhile) ends
        // first, so that the child is found.
        drop(
            self.tree_lock(&lineage(&self.marks, parent).root)
                .lock()
                .await,
        );
        let what = format!("cancelling child run {name}");
        let asked = super::again(&what, passing, || self.ask_to_stop(parent, name, &request));
        asked.await.unwrap_or_else(Self::connection)
    }

    /// One try at writing `request` on the child; `Conflict` when it kept changing. A Run of
    /// that name that does not name `parent` as its parent (a parent named to match could point
    /// a cleanup at someone else's) is left alone; one made before children were sealed does.
    async fn ask_to_stop(
        &self,
        parent: &Run,
        name: &str,
        request: &CancelRequest,
    ) -> Result<Outcome, StoreError> {
        let ns = parent.metadata.namespace.as_deref().unwrap_or_default();
        for _ in 0..8 {
            // Not in a cache that may lag a create that just returned: asked at the source.
            let found = match self.store.get(ns, name).await? {
                Some(c) => Some(c),
                None => self
                    .store
                    .get_now(ns, name)
                    .await?
                    .map(Arc::unwrap_or_clone),
            };
            let mut child = match found {
                Some(c) => c,
                None => {
                    return Ok(Outcome::Succeeded(json!(format!(
                        "child run {name} is gone"
                    ))));
                }
            };
            if parent_uid(&child) != parent.metadata.uid.as_deref() {
                return Ok(Outcome::Succeeded(json!(format!(
                    "run {name} is not this run's child; left"
                ))));
            }
            if child.phase().is_terminal() || child.spec.cancel.is_some() {
                return Ok(Outcome::Succeeded(Value::Null));
            }
            child.spec.cancel = Some(request.clone());
            match self.store.update(child).await {
                Ok(_) => {
                    return Ok(Outcome::Succeeded(json!(format!(
                        "cancelled child run {name}"
                    ))));
                }
                Err(StoreError::Conflict) => continue,
                Err(StoreError::NotFound) => return Ok(Outcome::Succeeded(Value::Null)),
                Err(e) => return Err(e),
            }
        }
        Err(StoreError::Conflict)
    }
}

/// Whether a store failure may pass: the backend failing, a write lost to a concurrent one.
fn passing(e: &StoreError) -> bool {
    matches!(e, StoreError::Backend(_) | StoreError::Conflict)
}

fn parent_uid(run: &Run) -> Option<&str> {
    run.metadata
        .annotations
        .as_ref()?
        .get(annotations::PARENT_UID)
        .map(String::as_str)
}

/// The step's outcome once the child has ended: its structured content (else its whole
/// result) on success; its protocol error, tool error or cancellation otherwise.
fn ended(child: &Run) -> Option<Outcome> {
    let st = child.status.as_ref()?;
    let name = child.metadata.name.as_deref().unwrap_or_default();
    // The detail (the Finished condition) rather than the content-free statusMessage: the
    // parent's step message is read by those who may read the parent.
    let why = st
        .conditions
        .iter()
        .find(|c| c.type_ == conditions::FINISHED)
        .map(|c| c.message.clone())
        .or_else(|| st.status_message.clone())
        .unwrap_or_default();
    match st.phase {
        RunPhase::Succeeded => {
            let result = st.result.as_ref().map_or(Value::Null, JsonText::to_value);
            let output = result.get("structuredContent").cloned().unwrap_or(result);
            Some(Outcome::Succeeded(output))
        }
        RunPhase::Failed => Some(match &st.error {
            Some(error) => Outcome::UpstreamFailed {
                class: ErrorClass::ToolError,
                message: format!("child run {name} failed: {why}"),
                error: Some(RunError::clone(error)),
                call_ended: true,
            },
            None => ChildExecutor::failed(format!("child run {name} failed: {why}")),
        }),
        RunPhase::Cancelled => Some(ChildExecutor::failed(format!(
            "child run {name} was cancelled: {why}"
        ))),
        _ => None,
    }
}

impl ChildExecutor {
    /// A `workflow` step's attempt: start its child (a create under way finishes even when
    /// the step is stopped meanwhile), then follow it until it ends or the step is stopped.
    async fn run_child(
        &self,
        run: &Run,
        effect: &Effect,
        (workflow, arguments, run_name): (&str, &Value, &str),
        cancel: &CancellationToken,
    ) -> Option<Outcome> {
        let tree = lineage(&self.marks, run);
        if tree.depth + 1 > budget::MAX_CHILD_DEPTH {
            return Some(limit(
                reasons::RUN_LIMIT,
                format!(
                    "run limit: child runs nest deeper than {}",
                    budget::MAX_CHILD_DEPTH
                ),
            ));
        }
        if tree.workflows.iter().any(|w| w == workflow) {
            return Some(limit(
                reasons::WORKFLOW_CYCLE,
                format!(
                    "workflow {workflow} is already running above this run ({}): workflows may not call themselves",
                    tree.workflows.join(" -> ")
                ),
            ));
        }
        let child = self.child(run, workflow, arguments, run_name, &tree);
        match self.start(run, child, &tree, cancel).await {
            Ok(true) if !cancel.is_cancelled() => {}
            Err(outcome) if !cancel.is_cancelled() => return Some(outcome),
            // Stopped: the step's cleanup cancels a child that was made.
            Ok(_) | Err(_) => return None,
        }
        let ns = run.metadata.namespace.clone().unwrap_or_default();
        let following = within_deadline(effect, self.follow(&ns, run_name), || Outcome::Failed {
            class: ErrorClass::Timeout,
            message: format!("child run {run_name} did not finish in time"),
            detail: None,
        });
        tokio::select! {
            outcome = following => Some(outcome),
            () = cancel.cancelled() => None,
        }
    }
}

#[async_trait]
impl Executor for ChildExecutor {
    async fn execute(
        &self,
        run: &Run,
        effect: &Effect,
        cancel: CancellationToken,
    ) -> Option<Outcome> {
        if let Action::Child {
            workflow,
            arguments,
            run_name,
        } = &effect.action
        {
            let child = (workflow.as_str(), arguments, run_name.as_str());
            return self.run_child(run, effect, child, &cancel).await;
        }
        let work = async {
            match &effect.action {
                Action::Cleanup(Cleanup {
                    cancel_run: Some(name),
                    ..
                }) => {
                    let timed_out = || Outcome::Failed {
                        class: ErrorClass::Timeout,
                        message: format!(
                            "cancelling child run {name}: not done in the time a cleanup has"
                        ),
                        detail: None,
                    };
                    within_deadline(effect, self.cancel(run, name), timed_out).await
                }
                _ => Outcome::internal("not a child run effect"),
            }
        };
        tokio::select! {
            outcome = work => Some(outcome),
            _ = cancel.cancelled() => None,
        }
    }
}
