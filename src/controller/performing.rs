//! Performing an effect in the worker that reconciles its Run (the effects that end soon: an
//! `http` step, a delay) and recording its outcome.

use jiff::Timestamp;
use tokio_util::sync::CancellationToken;

use super::queue::Key;
use super::work::off_worker;
use super::{Controller, OnRefusal, Wrote};
use crate::api::Run;
use crate::engine::{self, Effect, Outcome};

impl Controller {
    /// Perform an effect and record its outcome. Returns whether to keep reconciling.
    pub(super) async fn execute(&self, k: &Key, run: &Run, effect: &Effect) -> bool {
        let Some(token) = self.inflight.start(k, effect, run) else {
            return false;
        };
        let outcome = self.perform(k, run, effect, token).await;
        // In progress until its outcome is written: a controller told to stop waits for that.
        let go_on = match outcome {
            Some(outcome) => self.record(k, effect, outcome).await,
            None => true,
        };
        self.inflight.end(k, effect);
        go_on
    }

    /// Run the executor for one attempt; `None` when it was cancelled first.
    #[tracing::instrument(name = "effect", skip_all, fields(
        namespace = %k.namespace,
        run = %k.name,
        uid = run.metadata.uid.as_deref().unwrap_or_default(),
        step = %effect.step,
        attempt = effect.attempt,
        kind = effect.action.kind(),
        otel.name = %format_args!("step {}", effect.step),
        otel.status_code = tracing::field::Empty,
        error.type = tracing::field::Empty,
        runway.step.retry_reason = tracing::field::Empty,
        trace_id = tracing::field::Empty,
        span_id = tracing::field::Empty,
    ))]
    pub(super) async fn perform(
        &self,
        k: &Key,
        run: &Run,
        effect: &Effect,
        token: CancellationToken,
    ) -> Option<Outcome> {
        // A cancel that landed between our read and registering the token is caught here (for
        // an effect a cancel stops).
        if !engine::survives_cancel(run, effect)
            && let Ok(Some(latest)) = self.store.get_shared(&k.namespace, &k.name).await
            && latest.spec.cancel.is_some()
        {
            token.cancel();
        }
        crate::telemetry::attempt_started(&tracing::Span::current(), run, effect);
        let started = std::time::Instant::now();
        let outcome = self.executor.execute(run, effect, token).await;
        self.config.metrics.step(effect.action.kind(), started);
        if let Some(outcome) = &outcome {
            crate::telemetry::attempt_ended(&tracing::Span::current(), outcome);
        }
        outcome
    }

    async fn record(&self, k: &Key, effect: &Effect, outcome: Outcome) -> bool {
        loop {
            let latest = match self.store.get_shared(&k.namespace, &k.name).await {
                Ok(Some(r)) => r,
                Ok(None) => return false,
                Err(e) => {
                    self.retry_later(k, e);
                    return false;
                }
            };
            // The Run was deleted and created again under its name while this ran: the outcome
            // is the deleted one's, and the new Run decides its own attempt.
            if !engine::is_effect_of(&latest, effect) {
                return true;
            }
            let recorded = {
                let (run, done) = (latest.clone(), [(effect.clone(), outcome.clone())]);
                off_worker(move || engine::record_and_decide(&run, &done, Timestamp::now())).await
            };
            let Some(status) = recorded.status else {
                return true;
            };
            // On a transient error the outcome is lost; the step is still Running and will be
            // attempted again under the same idempotency key.
            match self
                .write_status(k, &latest, status, &recorded.events, OnRefusal::FailRun)
                .await
            {
                Wrote::Run(_) => return true,
                Wrote::Conflict => continue,
                Wrote::Gone | Wrote::Refused | Wrote::Later => return false,
            }
        }
    }
}
