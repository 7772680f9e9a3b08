//! How long a blocking recipe call may wait: the one deadline type behind every `lock()`,
//! `lock_timeout(d)` and `try_lock()` (and `lead()`, `lead_timeout(d)`, `try_lead()`, ...) of
//! the ZooKeeper and etcd recipes.
//!
//! A zero timeout is refused rather than read as "try once": the `try_` variants say that
//! explicitly, and a zero computed by mistake should not silently turn a wait into a poll.

use tokio::time::Instant;

use crate::error::{Error, Result};

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
