//! Duration strings (`30s`, `5m`, `1h30m`, ISO 8601) used by Workflow fields.

use jiff::SignedDuration;

/// The longest duration any field accepts: a year. Every timestamp Runway computes is a real
/// time plus at most a few of these, so no timestamp arithmetic can leave jiff's range.
pub const MAX: SignedDuration = SignedDuration::from_hours(24 * 366);

/// Parse a duration between zero and [`MAX`].
pub fn parse(s: &str) -> Result<SignedDuration, String> {
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
        ] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }
}
