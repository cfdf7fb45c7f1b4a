//! Duration strings (`30s`, `5m`, `1h30m`, ISO 8601) used by Workflow fields.

use jiff::SignedDuration;

/// Parse a non-negative duration.
pub fn parse(s: &str) -> Result<SignedDuration, String> {
    let d: SignedDuration = s
        .trim()
        .parse()
        .map_err(|e| format!("invalid duration {s:?}: {e}"))?;
    if d.is_negative() {
        return Err(format!("invalid duration {s:?}: negative"));
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
    }

    #[test]
    fn rejects_garbage_and_negatives() {
        for bad in ["", "10", "soon", "-5s", "1d"] {
            assert!(parse(bad).is_err(), "{bad:?}");
        }
    }
}
