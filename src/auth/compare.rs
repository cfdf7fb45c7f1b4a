//! Comparing secrets: equality whose time does not tell where two tokens first differ.

/// Equality whose time depends on the lengths only, not on where the bytes first differ: a
/// caller must not learn from an answer's timing how much of someone's token it guessed (a
/// token file's, or another client's on a connection a proxy shares).
pub(super) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_means_the_same_bytes() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
        assert!(constant_time_eq(b"", b""));
    }
}
