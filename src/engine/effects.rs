//! What the engine asks of the world and what the world reports back: the decision, its
//! Events, the effects executors perform and the outcomes they record.

use std::collections::BTreeMap;

use jiff::Timestamp;
use serde_json::Value;

use crate::api::{ErrorClass, JobStep, RunError, RunStatus, ToolStep};
use crate::protocol::codes;

/// What the controller does after writing [`Decision::status`].
#[derive(Debug, Clone, PartialEq)]
pub enum Next {
    /// Perform this effect, then report its outcome through [`record`](super::record).
    Execute(Box<Effect>),
    /// Steps run at the same time: perform each effect not already under way (each reports
    /// its own outcome), and decide again at `wake` if nothing else happens first.
    Branches {
        /// One effect per running step that needs one.
        effects: Vec<Effect>,
        /// The earliest timer of the other running steps.
        wake: Option<Timestamp>,
    },
    /// Nothing to do until this time (or until the Run changes). `None`: until the Run changes.
    WaitUntil(Option<Timestamp>),
    /// The Run is terminal. Delete it at this time (`None`: keep it).
    Finished {
        /// Garbage collection time.
        delete_at: Option<Timestamp>,
    },
}

/// The outcome of [`decide`](super::decide).
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// Status to write first, when it changed.
    pub status: Option<RunStatus>,
    /// Transitions worth an Event, in order.
    pub events: Vec<Event>,
    /// What to do after the write.
    pub next: Next,
}

/// The outcome of [`record_and_decide`](super::record_and_decide).
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    /// Status to write first, when it changed.
    pub status: Option<RunStatus>,
    /// The Events of the outcomes recorded, then those of the decision, in order.
    pub events: Vec<Event>,
    /// What to do after the write; `None` when nothing could be decided (a Run without its
    /// Workflow snapshot), so that a decision of its own follows.
    pub next: Option<Next>,
}

/// A transition worth telling people about (a Kubernetes Event, a log line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Event reason (`api::event_reasons`).
    pub reason: &'static str,
    /// Human-readable message.
    pub message: String,
    /// Whether it is a warning.
    pub warning: bool,
}

/// An effect for an executor: one attempt of one step.
#[derive(Debug, Clone, PartialEq)]
pub struct Effect {
    /// Step name.
    pub step: String,
    /// Attempt number.
    pub attempt: u32,
    /// The attempt must be abandoned at this time (step timeout or run deadline).
    pub deadline: Option<Timestamp>,
    /// `<run uid>/<step>`: the same on every attempt and after restarts.
    pub idempotency_key: String,
    /// What to do.
    pub action: Action,
}

/// Rendered work for an executor.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// An HTTP request.
    Http(HttpRequest),
    /// A tool call on an upstream MCP server.
    Tool {
        /// The step as declared.
        step: ToolStep,
        /// Rendered arguments.
        arguments: Value,
        /// Headers for every request to the server: rendered values, or Secret references.
        headers: Vec<HeaderValue>,
        /// Upstream task recorded by an earlier attempt, to resume instead of calling again.
        upstream_task_id: Option<String>,
        /// Answers to forward upstream first (upstream key → `{action, content}`).
        answers: Option<Value>,
        /// The upstream MRTR `requestState` to echo with `answers` (no upstream task).
        request_state: Option<String>,
    },
    /// Start a child Run (or find the one an earlier try started) and wait for it to finish.
    Child {
        /// The Workflow the child runs.
        workflow: String,
        /// Rendered arguments.
        arguments: Value,
        /// Deterministic name of the child Run for this attempt.
        run_name: String,
    },
    /// Undo an interrupted step (see `api::Cleanup`).
    Cleanup(crate::api::Cleanup),
    /// Tell the approvers of open question `key` through the Workflow's webhook.
    Notify {
        /// The question.
        key: String,
        /// A reminder before its timeout, not the first message.
        reminder: bool,
        /// The webhook request.
        request: HttpRequest,
    },
    /// A Kubernetes Job.
    Job {
        /// The step as declared.
        step: JobStep,
        /// Deterministic Job name for this attempt.
        job_name: String,
        /// Environment added to every container: `RUNWAY_ITEM` and `RUNWAY_INDEX` for an item
        /// of a `forEach` step (pod templates are not templates).
        env: Vec<(String, String)>,
    },
}

impl Action {
    /// The kind of work, as metrics and traces name it: the step kind, or `cleanup`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Http(_) => "http",
            Self::Tool { .. } => "tool",
            Self::Job { .. } => "job",
            Self::Child { .. } => "workflow",
            Self::Cleanup(_) => "cleanup",
            Self::Notify { .. } => "notify",
        }
    }
}

/// A rendered HTTP request.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpRequest {
    /// Method.
    pub method: String,
    /// URL.
    pub url: String,
    /// Headers: rendered values, or Secret references the executor resolves.
    pub headers: Vec<HeaderValue>,
    /// Body.
    pub body: Option<Body>,
    /// Success status codes (empty: any 2xx).
    pub success_codes: Vec<u16>,
}

/// A header to send.
#[derive(Debug, Clone, PartialEq)]
pub enum HeaderValue {
    /// A literal value.
    Inline {
        /// Header name.
        name: String,
        /// Rendered value.
        value: String,
    },
    /// A value from a Secret in the Run's namespace.
    Secret {
        /// Header name.
        name: String,
        /// Secret name.
        secret: String,
        /// Key in the Secret.
        key: String,
    },
}

/// A request body.
#[derive(Debug, Clone, PartialEq)]
pub enum Body {
    /// Sent as `text/plain`.
    Text(String),
    /// Sent as `application/json`.
    Json(Value),
}

/// What an executor reports for an attempt.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The step succeeded with this output.
    Succeeded(Value),
    /// The attempt failed; the retry policy decides what follows.
    Failed {
        /// Kind of failure.
        class: ErrorClass,
        /// Why, in words fit for the caller and the task's `statusMessage`.
        message: String,
        /// What only the Run's readers should see (an upstream's response body, say): kept in
        /// the step's record, never in the Run's message or the tool error.
        detail: Option<String>,
    },
    /// A `tool` step's upstream call failed. The retry policy applies as for `Failed`; when the
    /// step fails for good and `error` is set, the Run ends with that protocol-level error.
    UpstreamFailed {
        /// Kind of failure.
        class: ErrorClass,
        /// Why.
        message: String,
        /// The upstream's JSON-RPC error (its code and message), when it answered with one.
        error: Option<RunError>,
        /// The upstream call is over (its task failed, was cancelled or is unknown; it answered
        /// an error or a tool error): a retry calls the tool again instead of following it.
        call_ended: bool,
    },
    /// The attempt failed in a way that ends the Run with a protocol-level error.
    Fatal(RunError),
    /// The attempt is still going and has something to record before it continues (an
    /// upstream task id, a Job name). The step stays running; the next attempt resumes it.
    Checkpoint {
        /// Upstream task created by the call.
        upstream_task_id: Option<String>,
        /// Job created for the attempt.
        job_name: Option<String>,
    },
    /// The upstream server asks for input; it is surfaced as this Run's own input requests.
    NeedsInput {
        /// Upstream key → `{method, params}`.
        requests: BTreeMap<String, Value>,
        /// Upstream MRTR `requestState` to echo with the answers.
        request_state: Option<String>,
    },
}

impl Outcome {
    /// What kind of failure this is (`timeout`, `server_error`, `internal`…), `None` for
    /// anything but a failure.
    pub fn failure_class(&self) -> Option<String> {
        match self {
            Self::Failed { class, .. } | Self::UpstreamFailed { class, .. } => Some(
                serde_json::to_value(class)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default(),
            ),
            Self::Fatal(e) => Some(e.code.to_string()),
            _ => None,
        }
    }

    /// A protocol-level failure of this server (`-32603`): a step this server cannot perform
    /// as asked. It ends the Run; retrying would not help.
    pub(crate) fn internal(message: impl Into<String>) -> Self {
        Self::Fatal(RunError {
            code: codes::INTERNAL_ERROR,
            message: message.into(),
            data: None,
        })
    }
}
