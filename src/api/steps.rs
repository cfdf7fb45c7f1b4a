//! What each kind of step does: the `http`, `tool`, `job`, `input`, `sample`, `delay` and
//! `fail` bodies of a Workflow step.

use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::schema::{any_object, any_value};

/// An HTTP request.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HttpStep {
    /// Method; default `GET`, or `POST` when a body is set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// URL template.
    pub url: String,
    /// Headers; values are templates or come from a Secret.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<Header>,
    /// Body: a string template, or JSON whose string leaves are templates (sent as JSON).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_value")]
    pub body: Option<Value>,
    /// Status codes that count as success. Default: any 2xx.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("items" = {"type": "integer", "format": "int32", "minimum": 100, "maximum": 599}))]
    pub success_codes: Vec<u16>,
}

/// A header with an inline value or a value from a Secret.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[x_kube(validation = kube::core::Rule::new("has(self.value) != has(self.valueFrom)").message("a header sets exactly one of value, valueFrom"))]
#[serde(rename_all = "camelCase")]
pub struct Header {
    /// Header name.
    pub name: String,
    /// Value template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// Value from a Secret in the Run's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_from: Option<ValueFrom>,
}

/// Where a secret value comes from.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ValueFrom {
    /// A key of a Secret.
    pub secret_key_ref: SecretKeyRef,
}

/// A key of a Secret in the Run's namespace.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyRef {
    /// Secret name.
    pub name: String,
    /// Key within the Secret.
    pub key: String,
}

/// A call of a tool on an upstream MCP server.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ToolStep {
    /// The upstream server.
    pub server: UpstreamServer,
    /// Upstream tool name.
    #[schemars(
        length(min = 1, max = 128),
        regex(pattern = r"^[A-Za-z0-9_.-]{1,128}$")
    )]
    pub name: String,
    /// Arguments; string leaves are templates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_object")]
    pub arguments: Option<Value>,
    /// `auto` declares the Tasks extension upstream; `never` does not.
    #[serde(default)]
    pub task: UpstreamTaskMode,
}

/// Whether a tool step declares the Tasks extension upstream.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum UpstreamTaskMode {
    /// Declare the extension; follow an upstream task if one is returned.
    #[default]
    Auto,
    /// Never ask for a task.
    Never,
}

/// An upstream MCP server.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct UpstreamServer {
    /// Streamable HTTP endpoint URL.
    pub url: String,
    /// Headers sent on every request (for example `Authorization`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<Header>,
}

/// A Kubernetes Job built from a pod template.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct JobStep {
    /// Pod template of the Job, kept verbatim.
    #[schemars(schema_with = "any_object")]
    pub template: Value,
    /// Pod retries inside the Job (`backoffLimit`). Default 0: Runway's own retry policy applies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff_limit: Option<i32>,
}

/// Input from people or agents.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct InputStep {
    /// Requests opened together; the step continues when all are answered.
    #[schemars(length(min = 1, max = 16))]
    pub requests: Vec<InputRequestSpec>,
    /// How long to wait for answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
    /// What happens when the wait times out.
    #[serde(default)]
    pub on_timeout: OnTimeout,
    /// Whether `decline` lets the step succeed (the output records the decline) instead of failing it.
    #[serde(default)]
    pub allow_decline: bool,
}

/// One named request of an input step: an `elicitation/create` form, or with `url` a page the
/// person opens (URL mode).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct InputRequestSpec {
    /// Name of the request; its answer is `inputs.<name>` in templates.
    #[schemars(length(min = 1, max = 63))]
    pub name: String,
    /// Message template shown to the person answering.
    pub message: String,
    /// Elicitation schema of the answer, kept verbatim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "any_object")]
    pub requested_schema: Option<Value>,
    /// URL mode instead of a form: a page (an http or https URL template) the person opens to do
    /// something the Run must not see, such as signing in or paying. Accepting means they agreed
    /// to open it, not that it is done; later steps wait for the outcome by their own means.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2048))]
    pub url: Option<String>,
    /// Who may answer; anyone who may update the Run when empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approvers: Option<Approvers>,
    /// The requester of the Run may not answer.
    #[serde(default)]
    pub distinct_from_requester: bool,
    /// How many different approvers must accept (2 to 10; default 1). Needs `approvers`; one
    /// eligible decline declines it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10))]
    pub approvals: Option<u32>,
}

/// Users and groups allowed to answer.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Approvers {
    /// Usernames.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub users: Vec<String>,
    /// Group names.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
}

/// What an input step does when its wait times out.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum OnTimeout {
    /// Fail the step.
    #[default]
    Fail,
    /// Continue; unanswered requests have a `null` output.
    Continue,
}

/// A question for the calling agent's model: one `sampling/createMessage` request, asked like
/// an input request (MRTR `input_required` for a blocking call, the task's `inputRequests`
/// otherwise) and answered with the model's message. The step's output is that message:
/// `text`, `model`, `stopReason` and the full `content`.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SampleStep {
    /// The user message (a template), e.g. "Summarize {{ steps.fetch.output.body }}".
    #[schemars(length(min = 1, max = 65536))]
    pub prompt: String,
    /// System prompt (a template).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16384))]
    pub system_prompt: Option<String>,
    /// Most tokens the model may generate. Default 1000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100000))]
    pub max_tokens: Option<u32>,
    /// How long to wait for the answer; the step fails when it runs out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<String>,
}

/// A durable timer.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DelayStep {
    /// How long to wait (a duration or a template rendering one).
    pub duration: String,
}

/// End the Run with a failure.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FailStep {
    /// Message template: without `error` the Run ends as a tool error (`isError: true`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// A protocol-level failure (`failed` task with this JSON-RPC error).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<FailError>,
}

/// A protocol-level error.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FailError {
    /// JSON-RPC error code.
    pub code: i64,
    /// Message template.
    pub message: String,
}
