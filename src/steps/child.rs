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

use super::{Executor, within_deadline};
use crate::api::ErrorClass;
use crate::api::{CancelRequest, Cleanup, Run, RunPhase, annotations, conditions, labels};
use crate::engine::{Action, Effect, Outcome, budget};
use crate::store::{Change, RunChanges, RunStore, StoreError};

/// How often a waiting parent reads its child again even without a change notice: a safety
/// net for a notice missed while the store's cache caught up.
const RECHECK: Duration = Duration::from_secs(10);

/// Starts, follows and cancels child Runs.
pub struct ChildExecutor {
    store: Arc<dyn RunStore>,
    changes: RunChanges,
}

impl ChildExecutor {
    /// Children in `store`, followed through `changes` (fed by the controller's watch).
    pub fn new(store: Arc<dyn RunStore>, changes: RunChanges) -> Self {
        Self { store, changes }
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

    /// The child Run of `parent` for this attempt, as it is first created.
    fn child(parent: &Run, workflow: &str, arguments: &Value, name: &str, depth: u32) -> Run {
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
        .with_labels([(labels::PARENT, parent_name.clone())])
        .with_annotations([
            (annotations::PARENT_UID, parent_uid.clone()),
            (annotations::DEPTH, depth.to_string()),
        ]);
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

    /// Create the child, or find the one an earlier try of this attempt created.
    async fn start(&self, parent: &Run, child: Run) -> Result<(), Outcome> {
        let (ns, name) = (
            child.metadata.namespace.clone().unwrap_or_default(),
            child.metadata.name.clone().unwrap_or_default(),
        );
        match self.store.create(child).await {
            Ok(_) => Ok(()),
            Err(StoreError::AlreadyExists) => match self.store.get(&ns, &name).await {
                Ok(Some(existing)) if parent_uid(&existing) == parent.metadata.uid.as_deref() => {
                    Ok(())
                }
                Ok(Some(_)) => Err(Self::failed(format!(
                    "a run named {name} exists and is not this step's child"
                ))),
                Ok(None) => Err(Self::connection(StoreError::NotFound)),
                Err(e) => Err(Self::connection(e)),
            },
            Err(StoreError::Invalid(why)) => {
                Err(Self::failed(format!("the child run was refused: {why}")))
            }
            Err(e) => Err(Self::connection(e)),
        }
    }

    /// Wait until the child ends; its ending is the step's outcome.
    async fn follow(&self, ns: &str, name: &str) -> Outcome {
        let mut changes = self.changes.subscribe(ns, name);
        loop {
            match self.store.get(ns, name).await {
                Ok(Some(child)) => {
                    if let Some(outcome) = ended(&child) {
                        return outcome;
                    }
                }
                Ok(None) => return Self::failed(format!("child run {name} was deleted")),
                Err(e) => return Self::connection(e),
            }
            // Until this child changes (or notices were missed), then read it again.
            let waited = tokio::time::timeout(RECHECK, async {
                loop {
                    match changes.recv().await {
                        Ok(Change::Updated(run)) => return ended(&run),
                        Ok(Change::Deleted) => {
                            return Some(Self::failed(format!("child run {name} was deleted")));
                        }
                        Err(RecvError::Lagged(_)) => return None,
                        Err(RecvError::Closed) => {
                            std::future::pending::<()>().await;
                        }
                    }
                }
            })
            .await;
            if let Ok(Some(outcome)) = waited {
                return outcome;
            }
        }
    }

    /// Ask the child to stop, unless it has ended.
    async fn cancel(&self, parent: &Run, name: &str) -> Outcome {
        let ns = parent.metadata.namespace.clone().unwrap_or_default();
        let who = parent
            .spec
            .cancel
            .as_ref()
            .and_then(|c| c.requested_by.clone())
            .unwrap_or_else(|| "runway".into());
        let parent_name = parent.metadata.name.clone().unwrap_or_default();
        for _ in 0..8 {
            let mut child = match self.store.get(&ns, name).await {
                Ok(Some(c)) => c,
                Ok(None) => return Outcome::Succeeded(json!(format!("child run {name} is gone"))),
                Err(e) => return Self::connection(e),
            };
            if child.phase().is_terminal() || child.spec.cancel.is_some() {
                return Outcome::Succeeded(Value::Null);
            }
            child.spec.cancel = Some(CancelRequest {
                reason: Some(format!("parent run {parent_name} stopped waiting for it")),
                requested_by: Some(who.clone()),
                requested_at: Some(jiff::Timestamp::now().to_string()),
            });
            match self.store.update(child).await {
                Ok(_) => return Outcome::Succeeded(json!(format!("cancelled child run {name}"))),
                Err(StoreError::Conflict) => continue,
                Err(StoreError::NotFound) => return Outcome::Succeeded(Value::Null),
                Err(e) => return Self::connection(e),
            }
        }
        Self::connection(StoreError::Conflict)
    }
}

fn parent_uid(run: &Run) -> Option<&str> {
    run.metadata
        .annotations
        .as_ref()?
        .get(annotations::PARENT_UID)
        .map(String::as_str)
}

/// A Run's nesting depth (0 for a Run nobody's step started).
fn depth(run: &Run) -> u32 {
    run.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(annotations::DEPTH))
        .and_then(|d| d.parse().ok())
        .unwrap_or(0)
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
            let result = st.result.clone().unwrap_or(Value::Null);
            let output = result.get("structuredContent").cloned().unwrap_or(result);
            Some(Outcome::Succeeded(output))
        }
        RunPhase::Failed => Some(match &st.error {
            Some(error) => Outcome::UpstreamFailed {
                class: ErrorClass::ToolError,
                message: format!("child run {name} failed: {why}"),
                error: Some(error.clone()),
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

#[async_trait]
impl Executor for ChildExecutor {
    async fn execute(
        &self,
        run: &Run,
        effect: &Effect,
        cancel: CancellationToken,
    ) -> Option<Outcome> {
        let work = async {
            match &effect.action {
                Action::Child {
                    workflow,
                    arguments,
                    run_name,
                } => {
                    let depth = depth(run) + 1;
                    if depth > budget::MAX_CHILD_DEPTH {
                        return Self::failed(format!(
                            "child runs nest deeper than {}",
                            budget::MAX_CHILD_DEPTH
                        ));
                    }
                    let child = Self::child(run, workflow, arguments, run_name, depth);
                    if let Err(outcome) = self.start(run, child).await {
                        return outcome;
                    }
                    let ns = run.metadata.namespace.clone().unwrap_or_default();
                    within_deadline(effect, self.follow(&ns, run_name), || Outcome::Failed {
                        class: ErrorClass::Timeout,
                        message: format!("child run {run_name} did not finish in time"),
                        detail: None,
                    })
                    .await
                }
                Action::Cleanup(Cleanup {
                    cancel_run: Some(name),
                    ..
                }) => self.cancel(run, name).await,
                _ => Outcome::internal("not a child run effect"),
            }
        };
        tokio::select! {
            outcome = work => Some(outcome),
            _ = cancel.cancelled() => None,
        }
    }
}
