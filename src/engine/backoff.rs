//! How often a failed attempt is tried again and how long it waits first: a step's `retry`
//! policy, its templates rendered.

use jiff::SignedDuration;
use serde_json::Value;

use super::budget;
use super::duration::{self, DurationError};
use super::template::{self, TemplateError};

/// Backoff of the first retry when a policy gives none.
pub(super) const DEFAULT_BACKOFF: SignedDuration = SignedDuration::from_secs(1);

/// Cap of the backoff when a policy gives none.
pub(super) const DEFAULT_MAX_BACKOFF: SignedDuration = SignedDuration::from_mins(5);

/// Why a step's retry policy cannot be applied: a template of it did not render, or a value
/// is out of range.
#[derive(Debug, thiserror::Error)]
pub(super) enum RetryError {
    /// `retry.limit` did not render.
    #[error(transparent)]
    LimitTemplate(TemplateError),
    /// `retry.limit` is not a non-negative integer.
    #[error("retry.limit {rendered:?} is not a non-negative integer")]
    LimitNotAnInteger {
        /// The limit as rendered.
        rendered: String,
        /// Why it is no `u32`.
        #[source]
        source: std::num::ParseIntError,
    },
    /// `retry.limit` is over [`budget::MAX_RETRY_LIMIT`].
    #[error(
        "retry.limit {limit} exceeds the maximum of {}",
        budget::MAX_RETRY_LIMIT
    )]
    LimitTooHigh {
        /// The limit.
        limit: u32,
    },
    /// `retry.backoff` or `retry.maxBackoff` did not render.
    #[error("retry.{field}: {source}")]
    BackoffTemplate {
        /// The field's name.
        field: &'static str,
        /// The template's error.
        #[source]
        source: TemplateError,
    },
    /// `retry.backoff` or `retry.maxBackoff` rendered to no duration.
    #[error("retry.{field} {rendered:?} is not a duration: {source}")]
    BackoffDuration {
        /// The field's name.
        field: &'static str,
        /// The value as rendered.
        rendered: String,
        /// Why it is no duration.
        #[source]
        source: DurationError,
    },
}

pub(super) fn retry_limit(v: &Value, ctx: &Value) -> Result<u32, RetryError> {
    let rendered = match v {
        Value::String(s) => template::render(s, ctx).map_err(RetryError::LimitTemplate)?,
        other => other.to_string(),
    };
    let limit = rendered
        .trim()
        .parse::<u32>()
        .map_err(|source| RetryError::LimitNotAnInteger {
            rendered: rendered.clone(),
            source,
        })?;
    if limit > budget::MAX_RETRY_LIMIT {
        return Err(RetryError::LimitTooHigh { limit });
    }
    Ok(limit)
}

/// The wait before retry `attempt`: `backoff` doubled per attempt, at most `maxBackoff`. A
/// templated value that does not render to a duration is an error naming the field, as for
/// `retry.limit` (the step fails rather than retrying on a default nobody chose).
pub(super) fn backoff(
    policy: Option<&crate::api::RetryPolicy>,
    attempt: u32,
    ctx: &Value,
) -> Result<SignedDuration, RetryError> {
    let parse = |field: &'static str, s: Option<&String>, default| match s {
        None => Ok(default),
        Some(s) => {
            let rendered = template::render(s, ctx)
                .map_err(|source| RetryError::BackoffTemplate { field, source })?;
            duration::parse(&rendered).map_err(|source| RetryError::BackoffDuration {
                field,
                rendered,
                source,
            })
        }
    };
    let base = parse(
        "backoff",
        policy.and_then(|p| p.backoff.as_ref()),
        DEFAULT_BACKOFF,
    )?;
    let cap = parse(
        "maxBackoff",
        policy.and_then(|p| p.max_backoff.as_ref()),
        DEFAULT_MAX_BACKOFF,
    )?;
    let base = base.max(budget::MIN_BACKOFF);
    let factor = 2i32.saturating_pow(attempt.saturating_sub(1).min(30));
    Ok(base
        .checked_mul(factor)
        .unwrap_or(cap)
        .min(cap)
        .max(budget::MIN_BACKOFF))
}
