//! `runway_retry_run`: a new Run of a failed or cancelled Run's Workflow that takes over the
//! outputs of the steps that succeeded there and runs again from the step that failed.

use rmcp::model::ErrorData;
use serde_json::{Map, Value};

use super::access::{Access, allowed, task_run};
use super::calls::validate_args;
use super::errors::{forbidden, internal, invalid, unknown_task};
use super::handler::RunwayMcp;
use super::projection;
use super::state::Tenant;
use crate::api::{RetryOf, Run, item_of, labels};
use crate::auth::{Resource, Verb};
use crate::engine::retry;
use crate::store::StoreError;

/// A retry that was created.
pub(super) struct Retried {
    /// The new Run's name (its taskId).
    pub(super) task_id: String,
    /// The steps it takes over, in order.
    pub(super) reused: Vec<String>,
}

impl RunwayMcp {
    /// Retry the caller's task `task_id` from its failed step, with its arguments overridden
    /// key by key by `overrides`. Refused with why (`-32602`) when the Run may not be retried or
    /// reuse would not be safe; the controller checks again before the new Run starts.
    pub(super) async fn retry_task_of(
        &self,
        t: &Tenant,
        task_id: &str,
        overrides: Option<Map<String, Value>>,
    ) -> Result<Retried, ErrorData> {
        let original = task_run(&self.state, t, task_id, Access::Read)
            .await?
            .ok_or_else(unknown_task)?;
        if !allowed(&self.state, t, Verb::Create, Resource::Runs).await? {
            return Err(forbidden(t, Verb::Create, Resource::Runs));
        }
        let workflow = &original.spec.workflow_ref.name;
        let wf = self
            .state
            .workflows
            .get(&t.namespace, workflow)
            .await
            .filter(|w| w.is_ready())
            .ok_or_else(|| invalid(format!("workflow {workflow} is not Ready")))?;
        let mut args = original
            .spec
            .arguments
            .as_ref()
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        args.extend(overrides.unwrap_or_default());
        let mut run = Run::requested(
            &t.namespace,
            &projection::new_task_id(workflow),
            workflow,
            Value::Object(args),
            Some(t.identity.principal.clone()),
            jiff::Timestamp::now(),
        )
        .with_labels([(labels::RETRY_OF, task_id.to_owned())])
        .with_annotations(crate::telemetry::run_annotation());
        run.spec.retry_of = Some(RetryOf {
            name: task_id.to_owned(),
            uid: original.metadata.uid.clone(),
        });
        // Who may retry is decided before the arguments are validated: a validation error may
        // quote the whole argument object, which only the requester may read.
        let records = retry::plan(&run, &original, &wf.spec).map_err(|e| invalid(e.to_string()))?;
        let args = run.spec.arguments.as_ref().and_then(Value::as_object);
        validate_args(&wf, args.unwrap_or(&Map::new()))?;
        let fresh = run.metadata.name.clone().unwrap_or_default();
        let created = match self.state.store.create(run).await {
            Ok(created) => created,
            // The answer was lost (a gateway's timeout, which the client library sends again
            // into AlreadyExists under this fresh name): the retry fails, so a Run that landed
            // all the same must not go on beside the one the next retry makes.
            Err(e @ (StoreError::Backend(_) | StoreError::AlreadyExists)) => {
                super::delivery::give_up(&self.state, t.clone(), fresh);
                return Err(internal(e));
            }
            Err(e) => return Err(internal(e)),
        };
        let task_id = created.metadata.name.unwrap_or_default();
        tracing::info!(namespace = %t.namespace, run = %task_id, retry_of = %original.metadata.name.as_deref().unwrap_or_default(), by = %t.identity.principal.username, "retry created");
        Ok(Retried {
            task_id,
            reused: records
                .iter()
                .filter(|r| item_of(&r.name).is_none())
                .map(|r| r.name.clone())
                .collect(),
        })
    }
}
