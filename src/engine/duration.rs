//! Duration strings (`30s`, `5m`, `1h30m`, ISO 8601) used by Workflow fields.

use jiff::SignedDuration;

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

/// Parse a duration between zero and [`MAX`].
pub fn parse(s: &str) -> Result<SignedDuration, String> {
    if !documented_form(s.trim()) {
        return Err(format!(
            "invalid duration {s:?}: write it as 30s, 5m, 1h30m or ISO 8601 PT5M"
        ));
    }
    let d: SignedDuration = s
        .trim()
        .parse()
        .map_err(|e| format!("invalid duration {s:?}: {e}"))?;
    if d.is_negative() {
        return Err(format!("invalid duration {s:?}: negative"));
    }
    if d > MAX {
        return Err(format!(
            "invalid duration {s:?}: longer than the maximum of {}h",
            MAX.as_hours()
        ));
    }
    Ok(d)
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
