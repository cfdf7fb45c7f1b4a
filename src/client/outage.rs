//! Waiting out a server that cannot be reached while a task runs on without the client.

use std::time::Duration;

/// How long `runway call` waits for an unreachable server before it gives up on following.
pub(super) const OUTAGE_LIMIT: Duration = Duration::from_secs(120);

/// Backoff while the server cannot be reached: 250 ms doubling to 5 s, for at most
/// [`OUTAGE_LIMIT`] in a row.
#[derive(Default)]
pub(super) struct Outage {
    since: Option<tokio::time::Instant>,
    delay: Duration,
}

impl Outage {
    /// The wait before the next attempt, or `None` past the limit.
    pub(super) fn next(&mut self, why: &str) -> Option<Duration> {
        let since = *self.since.get_or_insert_with(|| {
            eprintln!("  {why}; retrying");
            tokio::time::Instant::now()
        });
        if since.elapsed() >= OUTAGE_LIMIT {
            return None;
        }
        self.delay = (self.delay * 2).clamp(Duration::from_millis(250), Duration::from_secs(5));
        Some(self.delay)
    }

    pub(super) fn over(&mut self) {
        if self.since.take().is_some() {
            eprintln!("  reconnected");
        }
        self.delay = Duration::ZERO;
    }
}
