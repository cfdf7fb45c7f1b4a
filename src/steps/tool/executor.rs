//! The executor of `tool` steps: resolves the upstream's headers, runs an attempt, and
//! cancels the upstream task when the Run is cancelled.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use reqwest::header::{HeaderName, HeaderValue as HttpHeaderValue};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::upstream::*;
use crate::api::{ErrorClass, Run, ToolStep, UpstreamTaskMode};
use crate::engine::{self, Action, Effect, HeaderValue, Outcome};
use crate::steps::Executor;
use crate::store::SecretSource;

/// Time allowed for a cleanup: the upstream's cancel ack and its task reaching an end.
const CLEANUP_TIMEOUT: Duration = Duration::from_secs(60);

/// Executes `tool` steps and cancels their upstream tasks.
pub(crate) struct ToolExecutor {
    client: reqwest::Client,
    egress: crate::steps::egress::Egress,
    secrets: Arc<dyn SecretSource>,
}

impl ToolExecutor {
    /// A new executor; `valueFrom` headers are read from `secrets`; it connects where
    /// `egress` allows.
    pub fn new(secrets: Arc<dyn SecretSource>, egress: &crate::steps::egress::Egress) -> Self {
        Self {
            client: egress.client(),
            egress: egress.clone(),
            secrets,
        }
    }

    /// Resolve the headers of the upstream server of `step`.
    async fn upstream(
        &self,
        run: &Run,
        step: &ToolStep,
        headers: &[HeaderValue],
    ) -> Result<Upstream, Outcome> {
        let url = reqwest::Url::parse(&step.server.url).map_err(|e| {
            Outcome::internal(format!("tool.server.url {:?}: {e}", step.server.url))
        })?;
        self.egress
            .check_url(&url)
            .map_err(|e| Outcome::internal(e.to_string()))?;
        let resolved = crate::steps::resolve_headers(&*self.secrets, run, headers)
            .await
            .map_err(|e| e.outcome("tool.server."))?;
        let mut map = HashMap::new();
        for (name, value) in resolved {
            let name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|e| Outcome::internal(format!("tool.server.header {name}: {e}")))?;
            let value = HttpHeaderValue::from_str(&value)
                .map_err(|e| Outcome::internal(format!("tool.server.header {name}: {e}")))?;
            map.insert(name, value);
        }
        Ok(Upstream {
            client: self.client.clone(),
            url: step.server.url.clone(),
            headers: map,
            tasks: step.task == UpstreamTaskMode::Auto,
        })
    }

    async fn cleanup(&self, run: &Run, step: &str, task_id: &str) -> Outcome {
        let (tool, headers) = match engine::upstream_server(run, step) {
            Ok(s) => s,
            Err(e) => return Outcome::internal(e.to_string()),
        };
        let up = match self.upstream(run, &tool, &headers).await {
            Ok(up) => up,
            Err(o) => return o,
        };
        let cancelled = async {
            up.cancel_task(task_id).await?;
            up.wait_ended(task_id).await
        };
        match tokio::time::timeout(CLEANUP_TIMEOUT, cancelled).await {
            Ok(Ok(())) => {
                Outcome::Succeeded(Value::String(format!("upstream task {task_id} cancelled")))
            }
            Ok(Err(o)) => o,
            Err(_) => Outcome::Failed {
                detail: None,
                class: ErrorClass::Timeout,
                message: format!(
                    "tasks/cancel {task_id} on {}: the task has not ended within {}s",
                    up.url,
                    CLEANUP_TIMEOUT.as_secs()
                ),
            },
        }
    }
}

#[async_trait]
impl Executor for ToolExecutor {
    async fn execute(
        &self,
        run: &Run,
        effect: &Effect,
        cancel: CancellationToken,
    ) -> Option<Outcome> {
        let (step, arguments, headers, upstream_task_id, answers, request_state) =
            match &effect.action {
                Action::Tool {
                    step,
                    arguments,
                    headers,
                    upstream_task_id,
                    answers,
                    request_state,
                } => (
                    step,
                    arguments,
                    headers,
                    upstream_task_id,
                    answers,
                    request_state,
                ),
                Action::Cleanup(c) => {
                    let Some(id) = &c.cancel_upstream_task else {
                        return Some(Outcome::internal("a tool cleanup needs an upstream task"));
                    };
                    return tokio::select! {
                        out = self.cleanup(run, &c.step, id) => Some(out),
                        _ = cancel.cancelled() => None,
                    };
                }
                _ => return Some(Outcome::internal("not a tool step")),
            };
        let up = match self.upstream(run, step, headers).await {
            Ok(up) => up,
            Err(o) => return Some(o),
        };
        let may_make_task = AtomicBool::new(false);
        let call = Call {
            tool: &step.name,
            arguments,
            upstream_task_id: upstream_task_id.as_deref(),
            answers: answers.as_ref(),
            request_state: request_state.as_deref(),
            // A crash resumes the same attempt, so it repeats this key and an upstream that
            // honours it hands back the same task; a retry is a new call with a new key.
            idempotency_key: format!("{}/{}", effect.idempotency_key, effect.attempt),
            may_make_task: &may_make_task,
        };
        let attempt =
            crate::steps::within_deadline(effect, up.attempt(&call), || Outcome::Failed {
                detail: None,
                class: ErrorClass::Timeout,
                message: match call.upstream_task_id {
                    Some(id) => format!("timed out following upstream task {id}"),
                    None => format!("tools/call {} on {}: timed out", call.tool, up.url),
                },
            });
        tokio::pin!(attempt);
        tokio::select! {
            out = &mut attempt => Some(out),
            _ = cancel.cancelled() => {
                // Dropping the attempt aborts a blocking call. A known upstream task is told
                // now too: the Run may have been deleted, and then no cleanup follows. A call
                // to an upstream that declared Tasks may be making a task this instant: it is
                // let finish briefly, since dropped, its task would run on unknown to anyone.
                let id = match call.upstream_task_id {
                    Some(id) => Some(id.to_owned()),
                    None if may_make_task.load(Ordering::Acquire) => made_meanwhile(attempt).await,
                    None => None,
                };
                if let Some(id) = id {
                    tell_cancelled(&up, &id).await;
                }
                None
            }
        }
    }
}

/// Send `tasks/cancel` for upstream task `id` of an attempt that was aborted (best effort,
/// [`CANCEL_TIMEOUT`]).
async fn tell_cancelled(up: &Upstream, id: &str) {
    match tokio::time::timeout(CANCEL_TIMEOUT, up.cancel_task(id)).await {
        Ok(Ok(())) => tracing::info!(url = %up.url, task = id, "upstream task cancelled"),
        Ok(Err(o)) => {
            tracing::warn!(url = %up.url, task = id, outcome = ?o, "cannot cancel upstream task")
        }
        Err(_) => tracing::warn!(url = %up.url, task = id, "cancelling upstream task timed out"),
    }
}

/// The upstream task `attempt` makes if it answers within [`CANCEL_TIMEOUT`] with one.
async fn made_meanwhile(attempt: impl Future<Output = Outcome>) -> Option<String> {
    match tokio::time::timeout(CANCEL_TIMEOUT, attempt).await {
        Ok(Outcome::Checkpoint {
            upstream_task_id, ..
        }) => upstream_task_id,
        _ => None,
    }
}
