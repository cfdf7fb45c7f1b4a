//! The `Workflow` custom resource: a tool definition plus the steps a call runs.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::schema::{any_object, any_value};
use super::steps::{
    DelayStep, FailStep, HttpStep, InputRequestSpec, InputStep, JobStep, SampleStep, ToolStep,
};

/// A Workflow is an MCP tool: calling it creates a Run that executes `steps`, then `finally`.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "runway.dev",
    version = "v1alpha1",
    kind = "Workflow",
    derive = "PartialEq",
    namespaced,
    status = "WorkflowStatus",
    shortname = "wf",
    category = "runway",
    cel,
    printcolumn = r#"{"name":"Tool","type":"string","jsonPath":".status.tool"}"#,
    printcolumn = r#"{"name":"Mode","type":"string","jsonPath":".spec.execution.mode"}"#,
    printcolumn = r#"{"name":"Steps","type":"integer","jsonPath":".status.stepCount","description":"Number of steps, finally included"}"#,
    printcolumn = r#"{"name":"Suspended","type":"boolean","jsonPath":".spec.suspend"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
// Uniqueness within `steps` and within `finally` is a list-map key (free for the API server);
// only the cross-list check costs CEL, bounded by the lists' and names' maximum sizes.
#[x_kube(validation = kube::core::Rule::new(
    "!has(self.finally) || self.finally.all(f, !self.steps.exists(s, s.name == f.name))"
).message("step names must be unique across steps and finally"))]
#[serde(rename_all = "camelCase")]
pub struct WorkflowSpec {
    /// How the Workflow appears as an MCP tool.
    #[serde(default)]
    pub tool: ToolSpec,
    /// How calls run: as tasks, blocking, or either; timeouts and garbage collection.
    #[serde(default)]
    pub execution: ExecutionSpec,
    /// Questions asked through MRTR before the Run exists, when the arguments they fill are missing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub elicit: Vec<ArgumentElicitation>,
    /// Steps, run in order. A Workflow without steps only renders its result.
    #[serde(default)]
    #[schemars(length(max = 64), extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub steps: Vec<Step>,
    /// Cleanup steps that run after the main steps succeed, fail or are cancelled.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64), extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub finally: Vec<Step>,
    /// Templates for the final `CallToolResult`. Without it the last step's output is returned as text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<ResultSpec>,
    /// Runs started on a timetable, as a CronJob starts Jobs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16), extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub schedules: Vec<ScheduleSpec>,
    /// Pause the Workflow: calls are still taken, but their Runs wait, not started, until it
    /// is resumed (Runs already started go on; pause those one by one).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub suspend: bool,
    /// A webhook told when a question for people opens, and before its timeout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notify: Option<super::NotifySpec>,
}

/// A timetable on which a Workflow starts Runs by itself.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ScheduleSpec {
    /// Names the schedule within the Workflow (a DNS label); its Runs carry it in the label
    /// `runway.dev/schedule`.
    #[schemars(length(min = 1, max = 40))]
    pub name: String,
    /// When: five cron fields (minute hour day-of-month month day-of-week, as a CronJob reads
    /// them), six with a leading seconds field, or `@hourly`, `@daily`, `@weekly`, `@monthly`,
    /// `@yearly`.
    #[schemars(length(min = 1, max = 200))]
    pub cron: String,
    /// IANA time zone the cron fields are read in (default `UTC`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_zone: Option<String>,
    /// The Runs' arguments, checked against `tool.inputSchema` when the Workflow is validated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_object")]
    pub arguments: Option<Value>,
    /// What to do when the previous Run of this schedule has not finished: `Allow` another,
    /// `Forbid` (skip this time), or `Replace` (cancel it and start the new one).
    #[serde(default)]
    pub concurrency_policy: ConcurrencyPolicy,
    /// A time missed (Runway was down) is made up for only within this long of it; without
    /// it, the latest missed time is always made up for, once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub starting_deadline: Option<String>,
    /// Start no Runs while true.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub suspend: bool,
    /// Succeeded Runs of this schedule kept (default 3; the newest Run is always kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 1000))]
    pub successful_runs_history_limit: Option<u32>,
    /// Failed or cancelled Runs of this schedule kept (default 1; the newest is always kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 1000))]
    pub failed_runs_history_limit: Option<u32>,
}

/// A schedule's answer to a Run that has not finished when the next is due.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ConcurrencyPolicy {
    /// Start the next Run anyway.
    #[default]
    Allow,
    /// Skip the next Run.
    Forbid,
    /// Cancel the unfinished Run and start the next.
    Replace,
}

/// The MCP tool a Workflow offers.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ToolSpec {
    /// MCP tool name; defaults to `metadata.name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 128),
        regex(pattern = r"^[A-Za-z0-9_.-]{1,128}$")
    )]
    pub name: Option<String>,
    /// Human-readable title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// What the tool does, for the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// JSON Schema (2020-12) of the arguments, kept verbatim. Defaults to an empty object schema.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_object")]
    pub input_schema: Option<Value>,
    /// JSON Schema (2020-12) of `structuredContent`, kept verbatim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_object")]
    pub output_schema: Option<Value>,
    /// MCP tool annotations (`readOnlyHint`, `destructiveHint`, ...), kept verbatim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_object")]
    pub annotations: Option<Value>,
}

/// How a call of the tool executes.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ExecutionSpec {
    /// `auto` (a task when the client declared the Tasks extension, else blocking), `task` or `sync`.
    #[serde(default)]
    pub mode: ExecutionMode,
    /// Absolute deadline of a Run, counted from its creation (queued and waiting time included).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
    /// Finished Runs are deleted this long after they finish.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_after_finished: Option<String>,
    /// How often clients should poll a task (`pollIntervalMs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub poll_interval: Option<String>,
    /// Client capabilities a caller must declare (for example `{sampling: {}}`); others get `-32021`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_object")]
    pub required_client_capabilities: Option<Value>,
    /// How many Runs of this Workflow (per key) may run at once; the others wait, `Queued`, in
    /// the order they were requested.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<ConcurrencySpec>,
    /// When a step fails for good while others run: stop the other running steps and start
    /// no more (`true`, the default), or let everything that does not depend on the failed
    /// step run to its end first (`false`). Either way the Run then fails and `finally` runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fail_fast: Option<bool>,
    /// When a step's last attempt fails: `Fail` the step and the Run (the default), or
    /// `Pause` the Run with the step waiting for one more attempt on resume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_retries_exhausted: Option<super::RetriesExhausted>,
}

/// A limit on the Runs of one Workflow that run at once.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ConcurrencySpec {
    /// Runs of one key that may have started and not finished, at most.
    #[schemars(range(min = 1, max = 10000))]
    pub limit: u32,
    /// Template over `args` naming the group a Run counts in (e.g. `{{ args.environment }}`):
    /// the limit holds per distinct value. Without it, one group for the whole Workflow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// Priority of this Workflow's Runs in its queue when a Run names none (`spec.priority`);
    /// higher goes first. Default 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = -1000, max = 1000))]
    pub priority: Option<i32>,
    /// How long a Run may wait in the queue (from its request) before it fails, unstarted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_timeout: Option<String>,
}

/// Whether a call becomes an MCP task.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum ExecutionMode {
    /// A task when the client declared the Tasks extension, else a blocking call.
    #[default]
    Auto,
    /// Always a task; clients without the extension are refused with `-32021`.
    Task,
    /// Never a task.
    Sync,
}

/// A question asked before a Run exists, to fill missing arguments (MRTR `input_required`).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ArgumentElicitation {
    /// The `inputRequests` key the client answers under.
    pub key: String,
    /// Message shown to the user.
    pub message: String,
    /// Elicitation schema (a flat object of primitive properties). Accepted content is merged into
    /// the arguments; the question is asked when any of its properties is missing from them.
    #[schemars(schema_with = "any_object")]
    pub requested_schema: Value,
}

/// One step. Exactly one of `http`, `tool`, `job`, `input`, `sample`, `delay`, `fail`,
/// `workflow` is set.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[x_kube(validation = kube::core::Rule::new(
    "[has(self.http), has(self.tool), has(self.job), has(self.input), has(self.sample), has(self.delay), has(self.fail), has(self.workflow)].filter(x, x).size() == 1"
).message("a step must set exactly one of http, tool, job, input, sample, delay, fail, workflow"))]
#[serde(rename_all = "camelCase")]
pub struct Step {
    /// Unique name; outputs are `steps.<name>.output` in templates. Letters, digits, `_` and `-`
    /// (no dots, so the `<step>.<request>` input keys of two steps can never collide).
    #[schemars(
        length(min = 1, max = 63),
        regex(pattern = r"^[A-Za-z0-9]([A-Za-z0-9_-]*[A-Za-z0-9])?$")
    )]
    pub name: String,
    /// Template condition; the step is skipped when it renders falsy (`false`, empty, `0`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when: Option<String>,
    /// Active time per attempt (a duration or a template rendering one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
    /// Retry policy for failed attempts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryPolicy>,
    /// Call an HTTP endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<HttpStep>,
    /// Call a tool on an upstream MCP server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<ToolStep>,
    /// Run a Kubernetes Job (Kubernetes store only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<JobStep>,
    /// Ask people or agents for input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<InputStep>,
    /// Ask the calling agent's model (`sampling/createMessage`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sample: Option<SampleStep>,
    /// Wait durably.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay: Option<DelayStep>,
    /// End the Run with a failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fail: Option<FailStep>,
    /// Start a Run of another Workflow in the same namespace and wait for its result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow: Option<ChildWorkflowStep>,
    /// Steps of the same list this one waits for. Without it a step waits for the step listed
    /// before it (so a list without `dependsOn` runs in order); `[]` starts it with the Run.
    /// Steps whose dependencies are met run at the same time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    pub depends_on: Option<Vec<String>>,
    /// Run the step once for each item of a list, `item` and `index` in its templates; its
    /// output is the list of the items' outputs, in order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub for_each: Option<ForEach>,
}

/// A step run once per item of a list.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ForEach {
    /// The items: a list (string leaves are templates), or one `{{ expression }}` rendering a
    /// list, such as `{{ args.regions }}` or `{{ steps.find.output.hosts }}`.
    #[schemars(schema_with = "any_value")]
    pub items: Value,
    /// Items in progress at once (default 10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1000))]
    pub parallelism: Option<u32>,
}

/// A child Run: another Workflow of the same namespace, called as the parent's requester.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ChildWorkflowStep {
    /// The Workflow's `metadata.name`.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// The child's arguments; string leaves are templates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_object")]
    pub arguments: Option<Value>,
}

/// Retry policy of a step.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RetryPolicy {
    /// Retries after the first attempt (a number or a template rendering one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "int_or_string")]
    pub limit: Option<Value>,
    /// First backoff; doubles on each retry. Default `1s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff: Option<String>,
    /// Upper bound of the backoff. Default `5m`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_backoff: Option<String>,
    /// Which failures retry. Default: `timeout`, `connection`, `serverError`, `tooManyRequests`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub retry_on: Vec<ErrorClass>,
}

fn int_or_string(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({ "x-kubernetes-int-or-string": true })
}

/// Classes of attempt failures, for `retry.retryOn`.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[serde(rename_all = "camelCase")]
pub enum ErrorClass {
    /// The attempt ran past its timeout.
    Timeout,
    /// The connection failed or broke.
    Connection,
    /// HTTP 5xx, or a retryable upstream error.
    ServerError,
    /// HTTP 429.
    TooManyRequests,
    /// Any other non-success HTTP status.
    ClientError,
    /// The upstream tool reported `isError` or a JSON-RPC error.
    ToolError,
}

/// Templates for the final `CallToolResult`.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ResultSpec {
    /// Content items (`text`, `image`, `audio`, `resource`, `resource_link`); string leaves are templates.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "any_list")]
    pub content: Vec<Value>,
    /// Structured result; string leaves are templates, a lone `{{ expr }}` keeps the value's JSON type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_value")]
    pub structured_content: Option<Value>,
}

fn any_list(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "array",
        "items": { "type": "object", "x-kubernetes-preserve-unknown-fields": true }
    })
}

/// Observed state of a Workflow.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WorkflowStatus {
    /// `Ready` with a reason and message for every validation failure.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Generation the conditions describe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The MCP tool name this Workflow offers (`spec.tool.name`, or the Workflow's name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// How many steps (main and `finally`) the Workflow declares.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_count: Option<i32>,
}

impl WorkflowStatus {
    /// The one rule for a Workflow's `Ready` condition, in both stores: `ok` with `reason` and
    /// `message`, observed at `wf`'s generation. Its `lastTransitionTime` moves to `now` only
    /// when the condition's status flips (the Kubernetes API conventions); a new reason or
    /// message, or a new generation with the same verdict, keeps the time `previous` had.
    pub fn ready(
        wf: &Workflow,
        previous: Option<&WorkflowStatus>,
        ok: bool,
        reason: &str,
        message: String,
        now: jiff::Timestamp,
    ) -> Self {
        let status = super::conditions::status(ok);
        let last_transition_time = previous
            .and_then(|p| {
                p.conditions
                    .iter()
                    .find(|c| c.type_ == super::conditions::READY)
            })
            .filter(|c| c.status == status)
            .map(|c| c.last_transition_time.clone())
            .unwrap_or_else(|| super::kube_time(now));
        Self::with_ready(
            wf,
            Condition {
                type_: super::conditions::READY.into(),
                status: status.into(),
                reason: reason.into(),
                message,
                last_transition_time,
                observed_generation: wf.metadata.generation,
            },
        )
    }

    /// A status of `wf` with this `Ready` condition, plus what `kubectl get wf` shows.
    pub fn with_ready(wf: &Workflow, ready: Condition) -> Self {
        Self {
            conditions: vec![ready],
            observed_generation: wf.metadata.generation,
            tool: Some(wf.tool_name().to_owned()),
            step_count: i32::try_from(wf.spec.steps.len() + wf.spec.finally.len()).ok(),
        }
    }
}

impl WorkflowSpec {
    /// The main steps, then the `finally` steps.
    pub fn all_steps(&self) -> impl Iterator<Item = &Step> {
        self.steps.iter().chain(&self.finally)
    }

    /// The step named `name`, main or `finally`; an item of a `forEach` step (`deploy[2]`)
    /// is its step.
    pub fn step(&self, name: &str) -> Option<&Step> {
        let name = item_of(name).map_or(name, |(step, _)| step);
        self.all_steps().find(|s| s.name == name)
    }

    /// Whether a step that fails stops the others (`execution.failFast`, default true).
    pub fn fail_fast(&self) -> bool {
        self.execution.fail_fast.unwrap_or(true)
    }

    /// Input request `name` of input step `step`.
    /// Where input request `name` of `step` stands in the manifest (step, then request), so
    /// that questions are asked in the order their author wrote them; unknown ones come last.
    pub fn input_request_place(&self, step: &str, name: &str) -> (usize, usize) {
        let base = item_of(step).map_or(step, |(s, _)| s);
        let Some(i) = self.all_steps().position(|s| s.name == base) else {
            return (usize::MAX, usize::MAX);
        };
        let j = self
            .step(step)
            .and_then(|s| s.input.as_ref())
            .and_then(|input| input.requests.iter().position(|r| r.name == name))
            .unwrap_or(usize::MAX);
        (i, j)
    }

    /// The input request `name` of `step`, if it is one of the Workflow's.
    pub fn input_request(&self, step: &str, name: &str) -> Option<&InputRequestSpec> {
        self.step(step)?
            .input
            .as_ref()?
            .requests
            .iter()
            .find(|r| r.name == name)
    }
}

impl Workflow {
    /// The MCP tool name: `spec.tool.name`, else `metadata.name`.
    pub fn tool_name(&self) -> &str {
        self.spec
            .tool
            .name
            .as_deref()
            .or(self.metadata.name.as_deref())
            .unwrap_or_default()
    }

    /// Whether Runway has validated the Workflow at its current generation (whatever the
    /// verdict): a Workflow applied a moment ago has no status yet.
    pub fn is_validated(&self) -> bool {
        self.status
            .as_ref()
            .is_some_and(|s| s.observed_generation == self.metadata.generation)
    }

    /// Where this Workflow stands among those offering one tool name: of two, the one created
    /// first (then the first by name) keeps it.
    pub fn seniority(&self) -> (Option<jiff::Timestamp>, Option<&str>) {
        let created = self.metadata.creation_timestamp.as_ref().map(|t| t.0);
        (created, self.metadata.name.as_deref())
    }

    /// Whether the Workflow's `Ready` condition is `True` for its current generation.
    pub fn is_ready(&self) -> bool {
        self.status.as_ref().is_some_and(|s| {
            s.observed_generation == self.metadata.generation
                && s.conditions.iter().any(|c| {
                    c.type_ == super::conditions::READY && c.status == super::conditions::TRUE
                })
        })
    }
}

impl Step {
    /// The kind of the step, by its set field.
    pub fn kind(&self) -> StepKind<'_> {
        match self {
            Step { http: Some(h), .. } => StepKind::Http(h),
            Step { tool: Some(t), .. } => StepKind::Tool(t),
            Step { job: Some(j), .. } => StepKind::Job(j),
            Step { input: Some(i), .. } => StepKind::Input(i),
            Step {
                sample: Some(s), ..
            } => StepKind::Sample(s),
            Step { delay: Some(d), .. } => StepKind::Delay(d),
            Step { fail: Some(f), .. } => StepKind::Fail(f),
            Step {
                workflow: Some(w), ..
            } => StepKind::Workflow(w),
            _ => StepKind::None,
        }
    }
}

/// The kind of a step, borrowed.
#[derive(Debug, Clone, Copy)]
pub enum StepKind<'a> {
    /// An HTTP request.
    Http(&'a HttpStep),
    /// An upstream MCP tool call.
    Tool(&'a ToolStep),
    /// A Kubernetes Job.
    Job(&'a JobStep),
    /// An input wait.
    Input(&'a InputStep),
    /// A question for the caller's model.
    Sample(&'a SampleStep),
    /// A durable timer.
    Delay(&'a DelayStep),
    /// A failure.
    Fail(&'a FailStep),
    /// A child Run.
    Workflow(&'a ChildWorkflowStep),
    /// No kind set (rejected by validation).
    None,
}

/// The name of item `index` of `forEach` step `step`, as its record is named.
pub fn item_name(step: &str, index: usize) -> String {
    format!("{step}[{index}]")
}

/// The step and index of an item record's name (`deploy[2]` → `("deploy", 2)`); `None` for
/// any other name. Step names cannot contain brackets, so the two never collide.
pub fn item_of(name: &str) -> Option<(&str, usize)> {
    let (step, rest) = name.split_once('[')?;
    let index = rest.strip_suffix(']')?.parse().ok()?;
    Some((step, index))
}

/// Secret-free map of labels, used by list filters.
pub type Labels = BTreeMap<String, String>;

#[cfg(test)]
mod tests {
    use super::*;

    fn wf(generation: i64) -> Workflow {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "runway.dev/v1alpha1", "kind": "Workflow",
            "metadata": {"name": "w", "generation": generation},
            "spec": {"tool": {}},
        }))
        .unwrap()
    }

    fn at(secs: i64) -> jiff::Timestamp {
        jiff::Timestamp::from_second(1_800_000_000 + secs).unwrap()
    }

    #[test]
    fn the_ready_condition_moves_its_time_only_when_its_status_flips() {
        let first = WorkflowStatus::ready(&wf(1), None, true, "Valid", "ok".into(), at(0));
        let time = |s: &WorkflowStatus| s.conditions[0].last_transition_time.clone();
        assert_eq!(time(&first), crate::api::kube_time(at(0)));
        assert_eq!(first.observed_generation, Some(1));
        // A new generation with the same verdict, another message: the time stays.
        let again =
            WorkflowStatus::ready(&wf(2), Some(&first), true, "Valid", "fine".into(), at(60));
        assert_eq!(time(&again), time(&first));
        assert_eq!(again.observed_generation, Some(2));
        // Not ready any more: a transition.
        let broken = WorkflowStatus::ready(
            &wf(3),
            Some(&again),
            false,
            "InvalidSpec",
            "x".into(),
            at(120),
        );
        assert_eq!(time(&broken), crate::api::kube_time(at(120)));
        assert_eq!(broken.conditions[0].status, crate::api::conditions::FALSE);
        // Still not ready, for another reason: no transition.
        let other = WorkflowStatus::ready(
            &wf(4),
            Some(&broken),
            false,
            "DuplicateTool",
            "y".into(),
            at(180),
        );
        assert_eq!(time(&other), time(&broken));
    }
}
