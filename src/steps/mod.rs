//! Step executors: they perform the effects the engine asks for and report outcomes. Each one
//! honours the attempt deadline and stops promptly when the Run is cancelled.

pub mod child;
pub mod egress;
pub mod http;
pub mod job;
mod lineage;
pub mod slots;
pub mod tool;

use std::sync::Arc;

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use crate::api::Run;
use crate::engine::{Action, Effect, Outcome};
use crate::store::SecretSource;

/// Performs effects.
#[async_trait]
pub trait Executor: Send + Sync + 'static {
    /// Perform one attempt. `None` when `cancel` fired first: the outcome is unknown and the
    /// controller decides again from the Run's latest state.
    async fn execute(
        &self,
        run: &Run,
        effect: &Effect,
        cancel: CancellationToken,
    ) -> Option<Outcome>;
}

/// The executors of one server, by step kind. `tool` and `job` executors are plugged in by
/// the servers that can run them; without one, such a step fails with a clear error.
pub struct Executors {
    http: http::HttpExecutor,
    tool: Option<Arc<dyn Executor>>,
    job: Option<Arc<dyn Executor>>,
    child: Option<Arc<dyn Executor>>,
}

impl Executors {
    /// Executors with secrets from `secrets`, connecting where `egress` allows.
    pub fn new(secrets: Arc<dyn SecretSource>, egress: &egress::Egress) -> Self {
        Self {
            http: http::HttpExecutor::new(secrets, egress),
            tool: None,
            job: None,
            child: None,
        }
    }

    /// Run `tool` steps (and their cleanups) with `e`.
    pub(crate) fn with_tool(mut self, e: Arc<dyn Executor>) -> Self {
        self.tool = Some(e);
        self
    }

    /// Run `workflow` steps (and their cleanups) with `e`.
    pub fn with_children(mut self, e: Arc<dyn Executor>) -> Self {
        self.child = Some(e);
        self
    }

    /// Run `job` steps (and their cleanups) with `e`.
    pub(crate) fn with_jobs(mut self, e: Arc<dyn Executor>) -> Self {
        self.job = Some(e);
        self
    }
}

#[async_trait]
impl Executor for Executors {
    async fn execute(
        &self,
        run: &Run,
        effect: &Effect,
        cancel: CancellationToken,
    ) -> Option<Outcome> {
        let delegate = match &effect.action {
            Action::Http(_) | Action::Notify { .. } => {
                return self.http.execute(run, effect, cancel).await;
            }
            Action::Tool { .. } => self.tool.as_ref().ok_or("tool"),
            Action::Job { .. } => self.job.as_ref().ok_or("job"),
            Action::Child { .. } => self.child.as_ref().ok_or("workflow"),
            Action::Cleanup(c) if c.cancel_run.is_some() => self.child.as_ref().ok_or("workflow"),
            Action::Cleanup(c) if c.cancel_upstream_task.is_some() => {
                self.tool.as_ref().ok_or("tool")
            }
            Action::Cleanup(_) => self.job.as_ref().ok_or("job"),
        };
        match delegate {
            Ok(e) => e.execute(run, effect, cancel).await,
            Err(kind) => Some(Outcome::internal(format!(
                "{kind} steps cannot run on this server"
            ))),
        }
    }
}

/// What is left of an attempt's time: `None` without a deadline, zero past it.
pub(crate) fn time_left(effect: &Effect) -> Option<std::time::Duration> {
    effect.deadline.map(|d| {
        std::time::Duration::try_from(d.duration_since(jiff::Timestamp::now())).unwrap_or_default()
    })
}

/// Longest wait for a Job or child Run that an earlier Run of the same name left under the name
/// an attempt uses (that Run deleted and one made again under its name: what it left goes with
/// it, a moment later, by the API server's garbage collection).
pub(crate) const EARLIER_GONE_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// How long a call that failed for a reason that may pass waits before it is tried again, at
/// first and at most.
const AGAIN_FIRST: std::time::Duration = std::time::Duration::from_secs(1);
const AGAIN_MAX: std::time::Duration = std::time::Duration::from_secs(30);

/// `attempt` (`what` says what it does) until it succeeds, pausing longer each time it fails
/// for a reason `passing` says may pass; the error of one that will not. Whoever calls it bounds
/// the wait (a step's timeout, a cleanup's deadline): a call about something already running
/// outside (a Job, a child Run) is tried again rather than failed, since failing the step would
/// leave that thing running or start its work over.
pub(crate) async fn again<T, E, F, Fut>(
    what: &str,
    passing: impl Fn(&E) -> bool,
    mut attempt: F,
) -> Result<T, E>
where
    E: std::fmt::Display,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let mut pause = AGAIN_FIRST;
    loop {
        match attempt().await {
            Err(e) if passing(&e) => {
                tracing::warn!(error = %e, "{what} failed; trying again in {pause:?}");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(AGAIN_MAX);
            }
            done => return done,
        }
    }
}

/// `attempt` bounded by the effect's deadline; `timed_out` is the outcome when time runs out.
pub(crate) async fn within_deadline(
    effect: &Effect,
    attempt: impl Future<Output = Outcome>,
    timed_out: impl FnOnce() -> Outcome,
) -> Outcome {
    match time_left(effect) {
        Some(left) => tokio::time::timeout(left, attempt)
            .await
            .unwrap_or_else(|_| timed_out()),
        None => attempt.await,
    }
}

/// Secrets for the embedded store: a fixed map (from the auth file's `secrets` section).
#[derive(Default, Clone)]
pub struct StaticSecrets(
    pub std::collections::BTreeMap<String, std::collections::BTreeMap<String, String>>,
);

#[async_trait]
impl SecretSource for StaticSecrets {
    async fn get(
        &self,
        namespace: &str,
        name: &str,
        key: &str,
    ) -> Result<String, crate::store::StoreError> {
        // A Secret's name has no `/`: `team-b/webhook` asked from team-a must not find team-b's
        // entry through the fallback to names valid in every namespace.
        if name.contains('/') {
            return Err(crate::store::StoreError::NotFound);
        }
        self.0
            .get(&format!("{namespace}/{name}"))
            .or_else(|| self.0.get(name))
            .and_then(|s| s.get(key))
            .cloned()
            .ok_or(crate::store::StoreError::NotFound)
    }
}

/// A `valueFrom` header whose Secret key cannot be read.
#[derive(Debug, thiserror::Error)]
#[error("header {name}: secret {secret}/{key}: {source}")]
pub(crate) struct SecretHeaderError {
    /// The header's name.
    name: String,
    /// The Secret's name.
    secret: String,
    /// The key in the Secret.
    key: String,
    /// Why it cannot be read.
    #[source]
    source: crate::store::StoreError,
}

impl SecretHeaderError {
    /// The step's outcome (`prefix` names where the header is): a Secret that could not be
    /// read for a reason that may pass (the API server failing) fails the attempt as a
    /// connection failure, which the step's retries cover; a Secret or key that is not there
    /// is the Workflow's error.
    pub(crate) fn outcome(&self, prefix: &str) -> Outcome {
        let message = format!("{prefix}{self}");
        match self.source {
            crate::store::StoreError::Backend(_) => Outcome::Failed {
                class: crate::api::ErrorClass::Connection,
                message,
                detail: None,
            },
            _ => Outcome::internal(message),
        }
    }
}

/// Rendered headers as `(name, value)` pairs, reading `valueFrom` Secrets in the Run's namespace.
pub(crate) async fn resolve_headers(
    secrets: &dyn SecretSource,
    run: &Run,
    headers: &[crate::engine::HeaderValue],
) -> Result<Vec<(String, String)>, SecretHeaderError> {
    let ns = run.metadata.namespace.as_deref().unwrap_or_default();
    let mut out = Vec::with_capacity(headers.len());
    for h in headers {
        match h {
            crate::engine::HeaderValue::Inline { name, value } => {
                out.push((name.clone(), value.clone()))
            }
            crate::engine::HeaderValue::Secret { name, secret, key } => {
                match secrets.get(ns, secret, key).await {
                    Ok(v) => out.push((name.clone(), v)),
                    Err(source) => {
                        return Err(SecretHeaderError {
                            name: name.clone(),
                            secret: secret.clone(),
                            key: key.clone(),
                            source,
                        });
                    }
                }
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[tokio::test]
    async fn a_secret_name_cannot_reach_into_another_namespace() {
        let secrets = StaticSecrets(BTreeMap::from([
            (
                "team-b/webhook".to_owned(),
                BTreeMap::from([("token".to_owned(), "b-secret".to_owned())]),
            ),
            (
                "shared".to_owned(),
                BTreeMap::from([("token".to_owned(), "for-all".to_owned())]),
            ),
        ]));
        assert!(
            secrets
                .get("team-a", "team-b/webhook", "token")
                .await
                .is_err()
        );
        assert_eq!(
            secrets.get("team-b", "webhook", "token").await.unwrap(),
            "b-secret"
        );
        assert!(secrets.get("team-a", "webhook", "token").await.is_err());
        assert_eq!(
            secrets.get("team-a", "shared", "token").await.unwrap(),
            "for-all"
        );
    }
}
