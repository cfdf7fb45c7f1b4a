//! Duration strings (`30s`, `5m`, `1h30m`, ISO 8601) used by Workflow fields.

use jiff::SignedDuration;
use serde_json::Value;

use super::template::{self, TemplateError};

/// The longest duration any field accepts: a year. Every timestamp Runway computes is a real
/// time plus at most a few of these, so no timestamp arithmetic can leave jiff's range.
pub const MAX: SignedDuration = SignedDuration::from_hours(24 * 366);

/// Units of the compact form, longest first where one is a prefix of another.
const UNITS: [&str; 7] = ["ns", "us", "µs", "ms", "h", "m", "s"];

/// Whether `s` is in one of the two documented forms: compact (`90s`, `1h30m`, `1.5h`, as
/// Kubernetes and Argo write them) or ISO 8601 (`PT5M`). Other spellings a lenient parser would
/// take (`5 minutes`, `5 mins`) are refused so that a manifest means the same everywhere.
fn documented_form(s: &str) -> bool {
    if s.starts_with(['P', 'p']) {
        return true;
    }
    let mut rest = s;
    while !rest.is_empty() {
        let number = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if number == 0 {
            return false;
        }
        rest = &rest[number..];
        let Some(unit) = UNITS.iter().find(|u| rest.starts_with(**u)) else {
            return false;
        };
        rest = &rest[unit.len()..];
    }
    !s.is_empty()
}

/// Why a duration string is refused; each message names the string.
#[derive(Debug, thiserror::Error)]
pub enum DurationError {
    /// Not in one of the documented forms (`30s`, `1h30m`, ISO 8601 `PT5M`).
    #[error("invalid duration {input:?}: write it as 30s, 5m, 1h30m or ISO 8601 PT5M")]
    Form {
        /// The string as given.
        input: String,
    },
    /// In a documented form, but not a duration jiff reads.
    #[error("invalid duration {input:?}: {source}")]
    Parse {
        /// The string as given.
        input: String,
        /// Why jiff refused it.
        #[source]
        source: jiff::Error,
    },
    /// Below zero.
    #[error("invalid duration {input:?}: negative")]
    Negative {
        /// The string as given.
        input: String,
    },
    /// Longer than [`MAX`].
    #[error("invalid duration {input:?}: longer than the maximum of {}h", MAX.as_hours())]
    TooLong {
        /// The string as given.
        input: String,
    },
}

/// How long a Run may take from its creation when its Workflow sets no `execution.timeout`:
/// a week. Without a bound an input step nobody answers, or an upstream task that never ends,
/// would hold its Run (and a concurrency slot) forever.
pub const DEFAULT_RUN_TIMEOUT: SignedDuration = SignedDuration::from_secs(7 * 24 * 3600);
/// [`DEFAULT_RUN_TIMEOUT`] as `execution.timeout` would spell it.
pub const DEFAULT_RUN_TIMEOUT_TEXT: &str = "168h";

/// A Run's absolute timeout: its Workflow's `execution.timeout`, else [`DEFAULT_RUN_TIMEOUT`].
pub fn run_timeout(timeout: Option<&str>) -> Result<SignedDuration, DurationError> {
    timeout.map_or(Ok(DEFAULT_RUN_TIMEOUT), parse)
}

/// Parse a duration between zero and [`MAX`].
pub fn parse(s: &str) -> Result<SignedDuration, DurationError> {
    let input = || s.to_owned();
    if !documented_form(s.trim()) {
        return Err(DurationError::Form { input: input() });
    }
    let d: SignedDuration = s.trim().parse().map_err(|source| DurationError::Parse {
        input: input(),
        source,
    })?;
    if d.is_negative() {
        return Err(DurationError::Negative { input: input() });
    }
    if d > MAX {
        return Err(DurationError::TooLong { input: input() });
    }
    Ok(d)
}

/// Why a templated duration field (`timeout`, `delay.duration`) gives no duration.
#[derive(Debug, thiserror::Error)]
pub enum RenderedDurationError {
    /// The template did not render.
    #[error(transparent)]
    Template(#[from] TemplateError),
    /// What it rendered to is not a duration.
    #[error(transparent)]
    Duration(#[from] DurationError),
}

/// Render a duration template against `ctx` and parse what it gives.
pub(crate) fn render(template: &str, ctx: &Value) -> Result<SignedDuration, RenderedDurationError> {
    Ok(parse(&template::render(template, ctx)?)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_common_forms() {
        assert_eq!(parse("30s").unwrap(), SignedDuration::from_secs(30));
        assert_eq!(parse("1h30m").unwrap(), SignedDuration::from_mins(90));
        assert_eq!(parse("PT5M").unwrap(), SignedDuration::from_mins(5));
        assert_eq!(parse("250ms").unwrap(), SignedDuration::from_millis(250));
        assert_eq!(parse("8784h").unwrap(), MAX);
    }

    #[test]
    fn rejects_garbage_and_negatives() {
        for bad in [
            "",
            "10",
            "soon",
            "-5s",
            "1d",
            "8785h",
            "99999999h",
            "PT99999999H",
            "5 minutes",
            "5 mins",
            "1h 30m",
            "h",
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }
}
