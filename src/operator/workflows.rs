//! The Workflow validator: decides each Workflow's `Ready` condition and writes its status,
//! deciding a namespace's other Workflows again when one changes or goes.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::{Action as ControllerAction, Controller as KubeController};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::api::{Workflow, WorkflowStatus, reasons};
use crate::engine::validate::{self, Capabilities};
use crate::store::kube::CONTROLLER_MANAGER;
use crate::store::kube_sources::KubeWorkflows;

/// How soon a Workflow held back by another one (its tool name, a cycle through it) is
/// validated again. The event that
/// should free it (the other one changing or going) may reach this controller before the
/// Workflow cache it decides from, and a verdict made on that cache would otherwise stand.
const NEIGHBOUR_RECHECK: Duration = Duration::from_secs(5);

/// What the Workflow validator needs.
struct WorkflowContext {
    client: Client,
    workflows: KubeWorkflows,
}

/// The `Ready` condition a Workflow should have, given the others of its namespace.
pub(crate) fn workflow_status(
    wf: &Workflow,
    all: &[Arc<Workflow>],
    now: jiff::Timestamp,
) -> WorkflowStatus {
    let caps = Capabilities { jobs: true };
    let (ok, reason, message) = match validate::readiness(wf, all.iter().map(|w| w.as_ref()), caps)
    {
        Err(e) => (false, e.reason, e.message),
        Ok(()) => (true, reasons::VALID, "workflow is valid".to_owned()),
    };
    WorkflowStatus::ready(wf, wf.status.as_ref(), ok, reason, message, now)
}

async fn reconcile_workflow(
    wf: Arc<Workflow>,
    ctx: Arc<WorkflowContext>,
) -> Result<ControllerAction, kube::Error> {
    let status = workflow_status(&wf, &ctx.workflows.all(), jiff::Timestamp::now());
    if wf.status.as_ref() != Some(&status) {
        let api: Api<Workflow> =
            Api::namespaced(ctx.client.clone(), &wf.namespace().unwrap_or_default());
        let patch =
            json!({"apiVersion": "runway.dev/v1alpha1", "kind": "Workflow", "status": status});
        api.patch_status(
            &wf.name_any(),
            &PatchParams::apply(CONTROLLER_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await?;
        tracing::info!(namespace = %wf.namespace().unwrap_or_default(), workflow = %wf.name_any(), ready = %status.conditions[0].status, reason = %status.conditions[0].reason, "workflow validated");
    }
    // Both verdicts depend on the namespace's other Workflows.
    if [reasons::DUPLICATE_TOOL, reasons::WORKFLOW_CYCLE]
        .contains(&status.conditions[0].reason.as_str())
    {
        return Ok(ControllerAction::requeue(NEIGHBOUR_RECHECK));
    }
    Ok(ControllerAction::await_change())
}

fn workflow_error(_: Arc<Workflow>, e: &kube::Error, _: Arc<WorkflowContext>) -> ControllerAction {
    tracing::warn!(error = %e, "cannot write workflow status");
    ControllerAction::requeue(Duration::from_secs(5))
}

/// The validator of every Workflow, until `stop`.
pub(super) fn validator(
    client: Client,
    workflows: KubeWorkflows,
    stop: CancellationToken,
) -> impl Future<Output = ()> {
    let ctx = Arc::new(WorkflowContext {
        client: client.clone(),
        workflows: workflows.clone(),
    });
    let api: Api<Workflow> = Api::all(client);
    // Readiness depends on the other Workflows of the namespace (the tool-name rule): when one
    // changes or goes, the others are decided again, so a Workflow that waited behind an
    // older one with its tool name becomes Ready once that one is gone.
    let neighbours = workflows.clone();
    KubeController::new(api.clone(), watcher::Config::default())
        .watches(api, watcher::Config::default(), move |changed: Workflow| {
            neighbours
                .all()
                .into_iter()
                .filter(|o| {
                    o.namespace() == changed.namespace() && o.name_any() != changed.name_any()
                })
                .map(|o| kube::runtime::reflector::ObjectRef::from_obj(o.as_ref()))
                .collect::<Vec<_>>()
        })
        .graceful_shutdown_on(stop.clone().cancelled_owned())
        .run(reconcile_workflow, workflow_error, ctx)
        .for_each(|_| async {})
}
