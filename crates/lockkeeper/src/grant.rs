//! How long something the server granted for a time can be trusted by the client.
//!
//! A ZooKeeper session and a Redis lease have one thing in common: the server ends them a
//! fixed time after it last heard from the client, and the client cannot watch that happen.
//! So the client keeps its own, conservative deadline: the time it *sent* the request that
//! the server answered (the server heard it later, so its clock started later), plus the
//! granted time, minus an allowance for the two clocks running at slightly different rates
//! (1% plus 2 ms, as Redlock allows). Until that deadline the grant cannot have ended on the
//! server; after it, the client must assume it has.
//!
//! Times are `tokio::time::Instant` (the monotonic clock), which keeps running while the
//! process is stopped (SIGSTOP, a long GC-like pause): a holder that wakes up past its
//! deadline knows it before it does anything else.

use std::time::Duration;

use tokio::time::Instant;

/// The last instant a grant of `granted` can be trusted, when the request the server answered
/// left at `sent`.
pub(crate) fn trusted_until(sent: Instant, granted: Duration) -> Instant {
    sent + granted.saturating_sub(drift(granted))
}

/// The allowance for clock drift over `granted`.
fn drift(granted: Duration) -> Duration {
    granted / 100 + Duration::from_millis(2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_deadline_comes_before_the_server_s() {
        let sent = Instant::now();
        let until = trusted_until(sent, Duration::from_secs(10));
        assert_eq!(until - sent, Duration::from_millis(9_898));
    }

    #[test]
    fn a_grant_shorter_than_the_drift_is_never_trusted() {
        let sent = Instant::now();
        assert_eq!(trusted_until(sent, Duration::from_millis(1)), sent);
    }
}
