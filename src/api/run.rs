//! The `Run` custom resource: one call of a Workflow, and the durable record of an MCP task.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::schema::{any_object, any_value};
use super::{OpenInputRequest, StepRecord, WorkflowSpec};

/// A Run executes one call of a Workflow. Its name is the MCP `taskId`.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "runway.dev",
    version = "v1alpha1",
    kind = "Run",
    derive = "PartialEq",
    namespaced,
    status = "RunStatus",
    category = "runway",
    cel,
    printcolumn = r#"{"name":"Workflow","type":"string","jsonPath":".spec.workflowRef.name"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Step","type":"string","jsonPath":".status.currentStep"}"#,
    printcolumn = r#"{"name":"Waiting-For","type":"string","jsonPath":".status.waitingFor"}"#,
    printcolumn = r#"{"name":"Priority","type":"integer","jsonPath":".status.priority","priority":1}"#,
    printcolumn = r#"{"name":"Paused","type":"date","jsonPath":".status.paused.since"}"#,
    printcolumn = r#"{"name":"Requested-By","type":"string","jsonPath":".spec.requestedBy.username"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[x_kube(
    validation = kube::core::Rule::new("self.workflowRef == oldSelf.workflowRef").message("spec.workflowRef is immutable"),
    validation = kube::core::Rule::new("has(self.arguments) == has(oldSelf.arguments) && (!has(self.arguments) || self.arguments == oldSelf.arguments)").message("spec.arguments is immutable"),
    validation = kube::core::Rule::new("has(self.requestedBy) == has(oldSelf.requestedBy) && (!has(self.requestedBy) || self.requestedBy == oldSelf.requestedBy)").message("spec.requestedBy is immutable"),
    validation = kube::core::Rule::new("has(self.retryOf) == has(oldSelf.retryOf) && (!has(self.retryOf) || self.retryOf == oldSelf.retryOf)").message("spec.retryOf is immutable"),
    validation = kube::core::Rule::new("!has(oldSelf.cancel) || (has(self.cancel) && self.cancel == oldSelf.cancel)").message("spec.cancel can be set once and never changed"),
    validation = kube::core::Rule::new("!has(oldSelf.inputResponses) || (has(self.inputResponses) && oldSelf.inputResponses.all(k, k in self.inputResponses && self.inputResponses[k] == oldSelf.inputResponses[k]))").message("spec.inputResponses may only gain keys; an answer never changes")
)]
#[serde(rename_all = "camelCase")]
pub struct RunSpec {
    /// The Workflow this Run executes.
    pub workflow_ref: WorkflowRef,
    /// Tool arguments, validated against the Workflow's `inputSchema` when the Run is created.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "readable"
    )]
    #[schemars(schema_with = "any_object")]
    pub arguments: Option<Value>,
    /// Who called the tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_by: Option<Principal>,
    /// A request to stop the Run. Set once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancel: Option<CancelRequest>,
    /// The latest request to pause or resume the Run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause: Option<super::PauseRequest>,
    /// Its place in its Workflow's concurrency queue: higher goes first (-1000 to 1000; the
    /// Workflow's `concurrency.priority` when unset). May be changed while it waits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = -1000, max = 1000))]
    pub priority: Option<i32>,
    /// The failed Run this one retries from its failed step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_of: Option<super::RetryOf>,
    /// Answers to input requests, by key. Keys are only ever added.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 4096))]
    pub input_responses: BTreeMap<String, InputResponse>,
}

/// What a spec value nested too deeply to be read at all is read as: the API server keeps
/// JSON of any depth, and one such Run (written with kubectl) must not stop a cache of every
/// tenant's Runs from loading. The Run then fails on its arguments, or the answer is refused,
/// like any other value over the depth budget.
pub const UNREADABLE: &str = "<nested too deeply to be read>";

/// A spec value as it was written, or [`UNREADABLE`]: the value's text is taken without
/// nesting into it (which has no depth limit) and only then parsed, with the parser's own.
fn readable<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    let raw: Option<Box<serde_json::value::RawValue>> = Option::deserialize(d)?;
    Ok(raw.map(|r| {
        serde_json::from_str(r.get()).unwrap_or_else(|_| Value::String(UNREADABLE.to_owned()))
    }))
}

/// Reference to a Workflow in the Run's namespace.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowRef {
    /// Workflow name.
    pub name: String,
}

/// An authenticated identity.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Principal {
    /// User name (for ServiceAccounts `system:serviceaccount:<ns>:<name>`).
    #[schemars(length(max = 1024))]
    pub username: String,
    /// Stable user id, when the authenticator gives one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256))]
    pub uid: Option<String>,
    /// Groups of the user.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
}

/// A request to cancel a Run.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct CancelRequest {
    /// Why (free text, or `mcp-request-cancelled` when a blocking caller went away).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub reason: Option<String>,
    /// Who asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub requested_by: Option<String>,
    /// When (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_at: Option<String>,
}

/// An answer to one input request.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct InputResponse {
    /// `accept`, `decline` or `cancel`.
    pub action: InputAction,
    /// Accepted content.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "readable"
    )]
    #[schemars(schema_with = "any_value")]
    pub content: Option<Value>,
    /// Who answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub answered_by: Option<String>,
    /// Groups of who answered, as authenticated when the answer was recorded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub answered_by_groups: Vec<String>,
    /// When (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answered_at: Option<String>,
}

/// Elicitation answer actions.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum InputAction {
    /// The content is the answer.
    Accept,
    /// The answer is no.
    Decline,
    /// The question was dismissed; it is asked again under a fresh key.
    Cancel,
}

/// Lifecycle phase of a Run.
#[derive(
    JsonSchema,
    Serialize,
    Deserialize,
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
)]
pub enum RunPhase {
    /// Created, not yet started by the controller.
    #[default]
    Pending,
    /// Waiting for a slot under its Workflow's concurrency limit.
    Queued,
    /// Executing steps.
    Running,
    /// Waiting for input.
    Waiting,
    /// Cancel requested; cleanup in progress.
    Cancelling,
    /// Finished successfully.
    Succeeded,
    /// Finished with a tool error (`status.result`) or a protocol error (`status.error`).
    Failed,
    /// Cancelled.
    Cancelled,
}

impl RunPhase {
    /// Every phase, in lifecycle order.
    pub const ALL: [RunPhase; 8] = [
        Self::Pending,
        Self::Queued,
        Self::Running,
        Self::Waiting,
        Self::Cancelling,
        Self::Succeeded,
        Self::Failed,
        Self::Cancelled,
    ];

    /// Whether the phase is final.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed | Self::Cancelled)
    }

    /// The phase name as written in status.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "Pending",
            Self::Queued => "Queued",
            Self::Running => "Running",
            Self::Waiting => "Waiting",
            Self::Cancelling => "Cancelling",
            Self::Succeeded => "Succeeded",
            Self::Failed => "Failed",
            Self::Cancelled => "Cancelled",
        }
    }
}

/// Observed state of a Run, written only by the controller.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RunStatus {
    /// Lifecycle phase.
    #[serde(default)]
    pub phase: RunPhase,
    /// `Finished` once terminal.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// When the controller started the Run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    /// When the Run reached a terminal phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    /// Absolute deadline (creation + `execution.timeout`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<String>,
    /// Human-readable progress, e.g. `step 2/4: deploy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_message: Option<String>,
    /// Name of the step in progress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_step: Option<String>,
    /// The group the Run counts in under its Workflow's concurrency limit: its
    /// `concurrency.key`, rendered once when the Run was first decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency_key: Option<String>,
    /// Its priority in its Workflow's concurrency queue, as it was queued (its own, or the
    /// Workflow's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    /// Open input keys, comma-separated, for `kubectl get runs`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_for: Option<String>,
    /// The Workflow spec as it was when the Run started.
    // Shared: a store keeps one copy per distinct snapshot, however many Runs hold it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_object")]
    pub workflow: Option<Arc<Value>>,
    /// One record per step that started, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<StepRecord>,
    /// Open input requests, by key.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub input_requests: BTreeMap<String, OpenInputRequest>,
    /// How the Run ends, decided when the main steps end; `finally` steps run before it applies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ending: Option<Box<Ending>>,
    /// The final `CallToolResult` (also set for tool errors, with `isError: true`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_object")]
    pub result: Option<super::JsonText>,
    /// A protocol-level failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<Box<RunError>>,
    /// Answers that were not accepted, with why (ineligible approver, unknown key).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<Note>,
    /// Cleanups still to perform before `finally` steps run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cleanups: Vec<Cleanup>,
    /// Set while the Run is paused: no step starts until it is resumed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<Box<super::PausedState>>,
    /// The `spec.pause` last acted on (a different one is a new request).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause_request: Option<Box<super::PauseRequest>>,
    /// Generation of the spec last acted on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// Which terminal phase a Run is heading to while `finally` steps run.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Ending {
    /// `Succeeded`, `Failed` or `Cancelled`.
    pub phase: RunPhase,
    // Boxed, as the error: every finished Run keeps its ending, which by then holds neither.
    /// Result to publish.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_object")]
    pub result: Option<Box<Value>>,
    /// Error to publish.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<Box<RunError>>,
    /// Why, for `statusMessage`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// A protocol-level failure, as a JSON-RPC error.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RunError {
    /// JSON-RPC error code.
    pub code: i64,
    /// Message.
    pub message: String,
    /// Extra data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_value")]
    pub data: Option<Value>,
}

/// A remark about an answer or request that was ignored.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Note {
    /// Input key concerned.
    pub key: String,
    /// Who answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answered_by: Option<String>,
    /// Why it was ignored.
    pub message: String,
}

/// Work that undoes an interrupted step before `finally` runs: cancel an upstream task,
/// delete a Job. Best effort; the outcome is noted on the step.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Cleanup {
    /// Step the cleanup belongs to.
    pub step: String,
    /// `tasks/cancel` this upstream task (on the step's server).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancel_upstream_task: Option<String>,
    /// Delete this Job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete_job: Option<String>,
    /// Cancel this child Run (a `workflow` step's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancel_run: Option<String>,
}

impl Run {
    /// A Run of Workflow `workflow` to create in `namespace`, requested by `requested_by` at
    /// `requested_at`: the one recipe of every creator (an MCP call, a `workflow` step, a
    /// schedule). It carries the Workflow label (what selects a Workflow's Runs) and the
    /// requested-at annotation (the order of Runs under a concurrency limit, finer than
    /// `creationTimestamp`); a creator adds its own labels and annotations to these.
    pub fn requested(
        namespace: &str,
        name: &str,
        workflow: &str,
        arguments: Value,
        requested_by: Option<Principal>,
        requested_at: jiff::Timestamp,
    ) -> Self {
        let mut run = Run::new(
            name,
            RunSpec {
                workflow_ref: WorkflowRef {
                    name: workflow.to_owned(),
                },
                arguments: Some(arguments),
                requested_by,
                cancel: None,
                pause: None,
                retry_of: None,
                priority: None,
                input_responses: BTreeMap::new(),
            },
        );
        run.metadata.namespace = Some(namespace.to_owned());
        run.metadata.labels = Some(BTreeMap::from([(
            super::labels::WORKFLOW.to_owned(),
            workflow.to_owned(),
        )]));
        run.metadata.annotations = Some(BTreeMap::from([(
            super::annotations::REQUESTED_AT.to_owned(),
            requested_at.to_string(),
        )]));
        run
    }

    /// Add `labels` to the Run's labels.
    pub fn with_labels<'a>(mut self, labels: impl IntoIterator<Item = (&'a str, String)>) -> Self {
        let all = self.metadata.labels.get_or_insert_with(BTreeMap::new);
        all.extend(labels.into_iter().map(|(k, v)| (k.to_owned(), v)));
        self
    }

    /// Add `annotations` to the Run's annotations.
    pub fn with_annotations<'a>(
        mut self,
        annotations: impl IntoIterator<Item = (&'a str, String)>,
    ) -> Self {
        let all = self.metadata.annotations.get_or_insert_with(BTreeMap::new);
        all.extend(annotations.into_iter().map(|(k, v)| (k.to_owned(), v)));
        self
    }

    /// Phase, `Pending` when the controller has not written status yet.
    pub fn phase(&self) -> RunPhase {
        self.status.as_ref().map(|s| s.phase).unwrap_or_default()
    }

    /// The Workflow snapshot taken at start, if any.
    pub fn workflow_snapshot(&self) -> Option<WorkflowSpec> {
        self.status
            .as_ref()
            .and_then(|s| s.workflow.as_deref())
            .and_then(|w| WorkflowSpec::deserialize(w).ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spec_value_too_deep_to_parse_is_read_as_unreadable() {
        let deep = (0..200).fold(serde_json::json!(1), |v, _| serde_json::json!([v]));
        let mut run = Run::new(
            "deep",
            RunSpec {
                workflow_ref: WorkflowRef { name: "w".into() },
                arguments: Some(serde_json::json!({"x": deep})),
                requested_by: None,
                cancel: None,
                pause: None,
                retry_of: None,
                priority: None,
                input_responses: BTreeMap::new(),
            },
        );
        run.status = Some(RunStatus::default());
        let text = serde_json::to_string(&run).unwrap();
        let back: Run = serde_json::from_str(&text).unwrap();
        assert_eq!(back.spec.arguments, Some(Value::String(UNREADABLE.into())));
        let shallow: Run = serde_json::from_value(serde_json::json!({
            "apiVersion": "runway.dev/v1alpha1", "kind": "Run", "metadata": {"name": "s"},
            "spec": {"workflowRef": {"name": "w"}, "arguments": {"a": [1]}},
        }))
        .unwrap();
        assert_eq!(shallow.spec.arguments, Some(serde_json::json!({"a": [1]})));
    }
}
