//! How long a blocking recipe call may wait: the one deadline type behind every `lock()`,
//! `lock_timeout(d)` and `try_lock()` (and `lead()`, `lead_timeout(d)`, `try_lead()`, ...) of
//! the ZooKeeper and etcd recipes.
//!
//! A zero timeout is refused rather than read as "try once": the `try_` variants say that
//! explicitly, and a zero computed by mistake should not silently turn a wait into a poll.
//!
//! A timed wait is bounded as a whole: once its deadline passes, withdrawing from the wait
//! (deleting a waiting node, leaving a line) may take at most [`WITHDRAWAL`] more, and a
//! backend that does not answer the withdrawal in that time is an error, not "not acquired":
//! `Ok(None)` promises that the backend was heard saying the lock is someone else's.

use std::time::Duration;

use tokio::time::Instant;

use crate::error::{Error, Result};

/// How long withdrawing from a timed wait may take past its deadline. A working backend
/// answers in milliseconds; one that has not answered in a second is not going to answer
/// before a caller who asked for a deadline stops caring.
pub(crate) const WITHDRAWAL: Duration = Duration::from_secs(1);

/// How long a blocking call may wait.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Deadline {
    /// `lock()`, `lead()`...: until done.
    Never,
    /// `lock_timeout(d)`...: until this instant.
    At(Instant),
    /// `try_lock()`...: only if it can be done at once.
    Now,
}

impl Deadline {
    pub(crate) fn after(timeout: std::time::Duration) -> Result<Deadline> {
        if timeout.is_zero() {
            return Err(Error::InvalidArgument(
                "timeout must be greater than zero (the try_ variant does not wait at all)".into(),
            ));
        }
        Ok(Deadline::At(Instant::now() + timeout))
    }

    /// The instant by which a timed wait must have withdrawn ([`WITHDRAWAL`] past its
    /// deadline); `None` for waits without a deadline.
    pub(crate) fn withdrawn_by(&self) -> Option<Instant> {
        match self {
            Deadline::At(at) => Some(*at + WITHDRAWAL),
            Deadline::Never | Deadline::Now => None,
        }
    }

    pub(crate) fn passed(&self) -> bool {
        match self {
            Deadline::Never => false,
            Deadline::At(at) => Instant::now() >= *at,
            Deadline::Now => true,
        }
    }

    pub(crate) async fn sleep(&self) {
        match self {
            Deadline::Never => std::future::pending().await,
            Deadline::At(at) => tokio::time::sleep_until(*at).await,
            Deadline::Now => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_timeout_is_refused() {
        assert!(matches!(
            Deadline::after(std::time::Duration::ZERO),
            Err(Error::InvalidArgument(_))
        ));
    }
}
