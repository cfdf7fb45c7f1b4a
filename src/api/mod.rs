//! Custom resource types (`Workflow`, `Run`) and the names that go with them: condition types,
//! reasons and event reasons live here, once.

pub mod notify;
pub mod pause;
pub mod records;
pub mod retry;
pub mod run;
pub mod schema;
pub mod steps;
pub mod text;
pub mod workflow;

pub use notify::*;
pub use pause::*;
pub use records::*;
pub use retry::*;
pub use run::*;
pub use steps::*;
pub use text::JsonText;
pub use workflow::*;

/// API group of every Runway resource.
pub const GROUP: &str = "runway.dev";
/// API version of every Runway resource.
pub const VERSION: &str = "v1alpha1";

/// Where an object lives: namespace and name. The one key of Runs and Workflows in the stores,
/// the work queue and the event fan-out.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectKey {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl ObjectKey {
    /// The key of `namespace`/`name`.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// The key of an object, when it names both its namespace and itself.
    pub fn of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> Option<Self> {
        match (&meta.namespace, &meta.name) {
            (Some(ns), Some(n)) if !ns.is_empty() && !n.is_empty() => Some(Self::new(ns, n)),
            _ => None,
        }
    }
}

impl std::fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// Condition types written on Workflows and Runs.
pub mod conditions {
    /// A Workflow passed validation and is offered as a tool.
    pub const READY: &str = "Ready";
    /// The `status` of a condition that holds.
    pub const TRUE: &str = "True";
    /// The `status` of a condition that does not hold.
    pub const FALSE: &str = "False";

    /// The `status` value for `holds`.
    pub fn status(holds: bool) -> &'static str {
        if holds { TRUE } else { FALSE }
    }
    /// A Run has reached a terminal phase.
    pub const FINISHED: &str = "Finished";
}

/// Machine-readable reasons used in conditions and run errors.
pub mod reasons {
    /// The Workflow is valid.
    pub const VALID: &str = "Valid";
    /// The manifest could not be parsed as a Workflow.
    pub const INVALID_MANIFEST: &str = "InvalidManifest";
    /// A JSON Schema in the tool definition does not compile.
    pub const INVALID_SCHEMA: &str = "InvalidSchema";
    /// A structural rule (the CEL rules of the CRD) is broken.
    pub const INVALID_SPEC: &str = "InvalidSpec";
    /// A template does not compile.
    pub const INVALID_TEMPLATE: &str = "InvalidTemplate";
    /// A duration field does not parse.
    pub const INVALID_DURATION: &str = "InvalidDuration";
    /// Two Workflows of a namespace offer the same tool name.
    pub const DUPLICATE_TOOL: &str = "DuplicateTool";
    /// A step kind needs a store this server does not run on.
    pub const UNSUPPORTED_STEP: &str = "UnsupportedStep";
    /// A Workflow's `workflow` steps lead back to it (directly or through others).
    pub const WORKFLOW_CYCLE: &str = "WorkflowCycle";
    /// A Run would make its Run tree larger than the limits allow (children of one Run,
    /// descendants of one top-level Run).
    pub const RUN_LIMIT: &str = "RunLimitExceeded";
    /// A schedule's cron expression, time zone, deadline or arguments are not valid.
    pub const INVALID_SCHEDULE: &str = "InvalidSchedule";
    /// A Run finished successfully.
    pub const SUCCEEDED: &str = "Succeeded";
    /// A Run failed.
    pub const FAILED: &str = "Failed";
    /// A Run was cancelled.
    pub const CANCELLED: &str = "Cancelled";
    /// Cancellation reason when the client of a call went away before the answer naming its
    /// Run reached it (a held call, or a task handle that was never delivered).
    pub const MCP_REQUEST_CANCELLED: &str = "mcp-request-cancelled";
}

/// Reasons of the Kubernetes Events recorded on Runs.
pub mod event_reasons {
    /// A schedule started the Run.
    pub const SCHEDULED: &str = "Scheduled";
    /// A step started an attempt.
    pub const STEP_STARTED: &str = "StepStarted";
    /// A step succeeded.
    pub const STEP_SUCCEEDED: &str = "StepSucceeded";
    /// A step failed for good.
    pub const STEP_FAILED: &str = "StepFailed";
    /// A step was skipped by its `when`.
    pub const STEP_SKIPPED: &str = "StepSkipped";
    /// A running step was stopped because another failed (`execution.failFast`).
    pub const STEP_STOPPED: &str = "StepStopped";
    /// A Run opened input requests.
    pub const INPUT_REQUESTED: &str = "InputRequested";
    /// Someone answered an input request.
    pub const INPUT_ANSWERED: &str = "InputAnswered";
    /// An answer was ignored (ineligible approver).
    pub const INPUT_REJECTED: &str = "InputRejected";
    /// Someone asked to cancel a Run.
    pub const CANCEL_REQUESTED: &str = "CancelRequested";
    /// A Run reached a terminal phase.
    pub const FINISHED: &str = "Finished";
    /// Someone paused a Run, or Runway held it when a step ran out of retries.
    pub const PAUSED: &str = "Paused";
    /// Someone resumed a paused Run.
    pub const RESUMED: &str = "Resumed";
    /// A Run that has not started waits because its Workflow is paused.
    pub const WORKFLOW_PAUSED: &str = "WorkflowPaused";
    /// A retry took over the outputs of the steps that succeeded in the Run it retries.
    pub const STEPS_REUSED: &str = "StepsReused";
    /// A retry was refused: reusing the retried Run's outputs would not be safe.
    pub const RETRY_REFUSED: &str = "RetryRefused";
    /// A question's approvers were told (or reminded) through the Workflow's webhook.
    pub const APPROVERS_NOTIFIED: &str = "ApproversNotified";
    /// The webhook that tells approvers did not take the message.
    pub const NOTIFY_FAILED: &str = "NotifyFailed";
    /// A finished Run could not be written to the archive: it is kept until it can be.
    pub const ARCHIVE_FAILED: &str = "ArchiveFailed";
}

/// Labels Runway puts on Runs.
pub mod labels {
    /// Name of the Workflow a Run belongs to.
    pub const WORKFLOW: &str = "runway.dev/workflow";
    /// Name of the schedule that started a Run.
    pub const SCHEDULE: &str = "runway.dev/schedule";
    /// Name of the Run whose `workflow` step started this one.
    pub const PARENT: &str = "runway.dev/parent";
    /// The held 2025-era call a Run belongs to (a keyed hash of the client's session and its
    /// request id), so that the client's `notifications/cancelled`, on whichever replica it
    /// arrives, finds the Run.
    pub const CALL: &str = "runway.dev/call";
    /// UID of the top-level Run a child Run descends from: what counts a Run tree's size.
    pub const ROOT: &str = "runway.dev/root";
    /// Name of the Run a retry from the failed step retries (to find a Run's retries).
    pub const RETRY_OF: &str = "runway.dev/retry-of";
}

/// Annotations on Runs.
pub mod annotations {
    /// The instant a Run was requested (RFC 3339, nanoseconds): it orders Runs created within
    /// the same second under a concurrency limit, which `creationTimestamp` cannot.
    pub const REQUESTED_AT: &str = "runway.dev/requested-at";
    /// The schedule time a scheduled Run was started for (RFC 3339).
    pub const SCHEDULED_FOR: &str = "runway.dev/scheduled-for";
    /// UID of the parent Run of a child Run (a label holds its name; names are reused).
    pub const PARENT_UID: &str = "runway.dev/parent-uid";
    /// How many parents a child Run has above it (1 for a child of a top-level Run).
    pub const DEPTH: &str = "runway.dev/depth";
    /// The Workflows above a child Run, from its root down, comma-separated: what stops a
    /// Workflow from calling itself through others.
    pub const LINEAGE: &str = "runway.dev/lineage";
    /// The operator's seal on what it created itself (a child Run, a scheduled Run, a Job): an
    /// HMAC under the state key of the object's identity and the markers above. Objects with
    /// the same name or markers but no valid seal are never adopted or acted on.
    pub const MARK: &str = "runway.dev/mark";
    /// The W3C trace context (`traceparent`) of what created the Run — the MCP request, the
    /// parent Run's step — so that its trace joins the caller's. Written only while traces
    /// are exported; a Run without it starts a trace of its own.
    pub const TRACEPARENT: &str = "runway.dev/traceparent";
}

/// Longest workflow-name prefix of a task id (the id stays within 63 characters).
const MAX_PREFIX: usize = 36;

/// A task id (a Run's name) from 16 bytes — random, or an HMAC for idempotent calls and
/// scheduled Runs: `<workflow prefix>-<26 lowercase base32 characters>`. Every taskId has
/// this shape and these 128 bits, so none can be guessed from another.
pub fn task_id_from(workflow: &str, bytes: &[u8; 16]) -> String {
    let mut prefix: String = workflow
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .take(MAX_PREFIX)
        .collect();
    prefix = prefix.trim_matches('-').to_owned();
    if prefix.is_empty() {
        prefix = "run".into();
    }
    let suffix = data_encoding::BASE32_NOPAD.encode(bytes).to_lowercase();
    format!("{prefix}-{suffix}")
}

/// A Kubernetes `Time` for `t`, at the whole-second precision the API server keeps.
pub fn kube_time(t: jiff::Timestamp) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Time {
    k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        jiff::Timestamp::from_second(t.as_second()).expect("a valid timestamp stays valid"),
    )
}

/// Whether `s` is a DNS label (RFC 1123): what a namespace name must be. Checked before a name
/// from a caller goes anywhere near an API path.
pub fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    (1..=63).contains(&b.len())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// Whether `s` is a DNS subdomain (RFC 1123): what the name of a Run must be, so also every
/// taskId (minted ones and those of Runs created with kubectl).
pub fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|part| {
            let b = part.as_bytes();
            !b.is_empty()
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
                && b[0] != b'-'
                && b[b.len() - 1] != b'-'
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_from_callers_are_checked_before_use() {
        for ok in ["a", "team-a", "x1", &"a".repeat(63)] {
            assert!(is_dns_label(ok), "{ok}");
            assert!(is_dns_subdomain(ok), "{ok}");
        }
        for bad in [
            "",
            "-a",
            "a-",
            "A",
            "a_b",
            "a/b",
            "?labelSelector=x",
            "a%2Fb",
            "..",
            &"a".repeat(64),
        ] {
            assert!(!is_dns_label(bad), "{bad}");
        }
        assert!(is_dns_subdomain("wait-abc.def"));
        assert!(is_dns_subdomain(&format!("{}.b", "a".repeat(63))));
        for bad in [
            "",
            "a..b",
            ".a",
            "a.",
            "a/b",
            "?watch=1",
            "x y",
            &"a".repeat(254),
        ] {
            assert!(!is_dns_subdomain(bad), "{bad}");
        }
    }
}
