//! How a Run ends: the endings of each kind of failure and the final status they write.

use serde_json::json;

use super::effects::Event;
use super::machine::Machine;
use super::record::guard_output;
use super::{MAX_RESULT_BYTES, ts};
use crate::api::{Ending, RunError, RunPhase, conditions, event_reasons, reasons};
use crate::protocol::codes;

/// A protocol-level failure carrying an upstream's JSON-RPC code and message.
pub(super) fn upstream_error_ending(step: &str, upstream: RunError) -> Ending {
    let message = format!("step {step}: upstream error: {}", upstream.message);
    Ending {
        phase: RunPhase::Failed,
        result: None,
        error: Some(RunError {
            code: upstream.code,
            message: message.clone(),
            data: Some(json!({
                "step": step,
                "upstream": upstream,
            })),
        }),
        message: Some(message),
    }
}

pub(super) fn tool_error_ending(message: String) -> Ending {
    Ending {
        phase: RunPhase::Failed,
        result: Some(json!({
            "content": [{"type": "text", "text": message}],
            "isError": true,
        })),
        error: None,
        message: Some(message),
    }
}

pub(super) fn fatal_ending(message: String) -> Ending {
    Ending {
        phase: RunPhase::Failed,
        result: None,
        error: Some(RunError {
            code: codes::INTERNAL_ERROR,
            message: message.clone(),
            data: None,
        }),
        message: Some(message),
    }
}

impl Machine<'_> {
    pub(super) fn finish_with(&mut self, ending: Ending) {
        self.st.ending = Some(ending);
        self.finalize();
    }

    pub(super) fn finalize(&mut self) {
        let ending = self
            .st
            .ending
            .clone()
            .unwrap_or_else(|| fatal_ending("no ending".into()));
        self.st.phase = ending.phase;
        self.st.finished_at = Some(ts(self.now));
        self.st.input_requests.clear();
        self.st.waiting_for = None;
        self.st.current_step = None;
        self.st.result = ending.result.map(|r| guard_output(r, MAX_RESULT_BYTES).0);
        self.st.error = ending.error;
        let (reason, message) = match ending.phase {
            RunPhase::Succeeded => (reasons::SUCCEEDED, "run succeeded".to_string()),
            RunPhase::Cancelled => (
                reasons::CANCELLED,
                ending.message.clone().unwrap_or_else(|| "cancelled".into()),
            ),
            _ => (
                reasons::FAILED,
                ending.message.clone().unwrap_or_else(|| "failed".into()),
            ),
        };
        self.st.status_message = Some(message.clone());
        self.st.conditions = vec![k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
            type_: conditions::FINISHED.into(),
            status: "True".into(),
            reason: reason.into(),
            message: message.clone(),
            last_transition_time: crate::api::kube_time(self.now),
            observed_generation: self.run.metadata.generation,
        }];
        let warning = ending.phase != RunPhase::Succeeded;
        self.events.push(Event {
            reason: event_reasons::FINISHED,
            message: format!("run {}: {message}", ending.phase.as_str()),
            warning,
        });
    }
}
