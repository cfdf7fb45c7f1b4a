//! The latest of many status timestamps, found without parsing each one.
//!
//! A task's `lastUpdatedAt` is the latest of every stamp in its Run's status, and a `forEach`
//! Run holds three per item: parsing a thousand items' stamps was most of the server's work on
//! every `tasks/get` of such a Run. The stamps the engine writes share one shape (UTC, `Z`,
//! four-digit year, 0–9 fraction digits), whose order is the order of its text once the
//! fraction is compared apart; only the latest of those is parsed, and any stamp of another
//! shape is parsed as before.

use jiff::Timestamp;

/// A stamp's sort key: its whole seconds' text and its fraction's digits.
type Key<'a> = (&'a [u8], &'a [u8]);

/// A stamp of the engine's shape, split into the part whose text orders it (`YYYY-MM-DDTHH:MM:SS`)
/// and its fraction's digits (compared as text too: `0.5` sorts after `0.45`, and a stamp
/// without a fraction before one with any).
fn key(s: &str) -> Option<Key<'_>> {
    let b = s.as_bytes();
    if b.len() < 20 || b.len() > 30 || b[b.len() - 1] != b'Z' {
        return None;
    }
    let (whole, rest) = b.split_at(19);
    // `d` is a digit; a leap second (`:60`) reads as `:59`, where its text would not sort, so
    // `5` is a digit up to 5 and such a stamp takes the slow way.
    const SHAPE: &[u8; 19] = b"dddd-dd-ddTdd:dd:5d";
    let shape_ok = whole.iter().zip(SHAPE).all(|(&c, &p)| match p {
        b'd' => c.is_ascii_digit(),
        b'5' => (b'0'..=b'5').contains(&c),
        _ => c == p,
    });
    if !shape_ok {
        return None;
    }
    let fraction = match rest {
        [b'Z'] => &[][..],
        [b'.', digits @ .., b'Z']
            if !digits.is_empty() && digits.iter().all(u8::is_ascii_digit) =>
        {
            digits
        }
        _ => return None,
    };
    Some((whole, fraction))
}

/// The latest of `stamps` that reads as a timestamp; `None` when none does.
pub fn latest<'a, I>(stamps: I) -> Option<Timestamp>
where
    I: IntoIterator<Item = &'a str>,
    I::IntoIter: Clone,
{
    let stamps = stamps.into_iter();
    let mut best: Option<(Key<'_>, &str)> = None;
    let mut other: Option<Timestamp> = None;
    for s in stamps.clone() {
        // Many records share a stamp (the items a decision started): the same text is no later.
        if best.is_some_and(|(_, b)| b == s) {
            continue;
        }
        match key(s) {
            Some(k) => {
                if best.is_none_or(|(b, _)| k > b) {
                    best = Some((k, s));
                }
            }
            None => other = other.max(s.parse().ok()),
        }
    }
    match best.map(|(_, s)| s.parse::<Timestamp>()) {
        Some(Ok(t)) => Some(t.max(other.unwrap_or(t))),
        // The latest of the engine's shape is no real time (a month 13): read them all.
        Some(Err(_)) => stamps.filter_map(|s| s.parse().ok()).max(),
        None => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn slow(stamps: &[&str]) -> Option<Timestamp> {
        stamps.iter().filter_map(|s| s.parse().ok()).max()
    }

    #[test]
    fn the_latest_is_found_across_fractions_and_shapes() {
        let cases: &[&[&str]] = &[
            &[],
            &["not a time"],
            &["2026-12-06T10:00:00Z", "2026-12-06T10:00:00.5Z"],
            &["2026-12-06T10:00:00.5Z", "2026-12-06T10:00:00.45Z"],
            &["2026-12-06T10:00:00.999999999Z", "2026-12-06T10:00:01Z"],
            // Another shape that is later than every stamp of the engine's.
            &["2026-12-06T10:00:00Z", "2026-12-06T12:00:00+01:00"],
            &["2026-12-06T10:00:00Z", "2026-12-06 10:00:01Z"],
            // A stamp of the engine's shape that is no real time, later than the real ones.
            &["2026-12-06T10:00:00Z", "2026-13-06T10:00:00Z", "garbage"],
            &["2026-02-30T10:00:00Z"],
            &["2026-12-06T23:59:59.5Z", "2026-12-06T23:59:60Z"],
        ];
        for stamps in cases {
            assert_eq!(latest(stamps.iter().copied()), slow(stamps), "{stamps:?}");
        }
        assert_eq!(
            latest(["2026-12-06T10:00:00.45Z", "2026-12-06T10:00:00.5Z"]),
            Some("2026-12-06T10:00:00.5Z".parse().unwrap())
        );
    }

    proptest! {
        /// Whatever stamps the engine writes, the latest is the one parsing each would find:
        /// anywhere in jiff's range, and within a few seconds of each other, where the
        /// fractions decide.
        #[test]
        fn the_latest_of_written_stamps_is_the_parsed_latest(
            base in Timestamp::MIN.as_second()..Timestamp::MAX.as_second() - 3,
            stamps in proptest::collection::vec((0i64..3, 0i32..1_000_000_000, 0u8..4), 0..12),
        ) {
            let written: Vec<String> = stamps
                .iter()
                .map(|&(offset, n, coarse)| {
                    // Whole seconds and whole milliseconds are common: fewer fraction digits.
                    let n = match coarse { 0 => 0, 1 => n - n % 1_000_000, _ => n };
                    Timestamp::new(base + offset, n).unwrap().to_string()
                })
                .collect();
            let stamps: Vec<&str> = written.iter().map(String::as_str).collect();
            prop_assert_eq!(latest(stamps.iter().copied()), slow(&stamps));
        }
    }
}
