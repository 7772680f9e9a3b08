//! The bounded retry policy for idempotent ZooKeeper operations.
//!
//! A connection loss says nothing about whether the server applied a request, so only
//! operations that are safe to repeat are retried: reads, deleting one exact node (a second
//! delete answers NoNode, which the caller treats as done), and the protected create (which
//! looks its node up by uuid before creating again). Backoff is exponential with jitter so that
//! many clients cut off by one server do not come back in lockstep.

use std::time::Duration;

use rand::Rng;

/// How often and how patiently an idempotent operation is retried after a connection loss.
///
/// ```
/// use std::time::Duration;
/// use lockkeeper::zk::RetryPolicy;
///
/// let policy = RetryPolicy::exponential(Duration::from_millis(50), Duration::from_secs(2), 8);
/// assert_eq!(policy.max_attempts(), 8);
/// assert!(policy.delay(3) <= Duration::from_secs(2));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    base: Duration,
    max_delay: Duration,
    max_attempts: u32,
}

impl RetryPolicy {
    /// Retries up to `max_attempts` times in all, waiting `base * 2^n` (capped at `max_delay`,
    /// with up to 50 % random jitter) before retry `n`. `max_attempts` of 1 means no retry.
    pub fn exponential(base: Duration, max_delay: Duration, max_attempts: u32) -> RetryPolicy {
        RetryPolicy {
            base,
            max_delay: max_delay.max(base),
            max_attempts: max_attempts.max(1),
        }
    }

    /// Never retries: the first connection loss is returned to the caller.
    pub fn never() -> RetryPolicy {
        RetryPolicy::exponential(Duration::ZERO, Duration::ZERO, 1)
    }

    /// How many attempts in all, the first included.
    pub fn max_attempts(&self) -> u32 {
        self.max_attempts
    }

    /// The wait before attempt number `attempt + 1` (attempt counts from 1).
    pub fn delay(&self, attempt: u32) -> Duration {
        let exponent = attempt.saturating_sub(1).min(20);
        let nominal = self.base.saturating_mul(1 << exponent).min(self.max_delay);
        let jitter = rand::thread_rng().gen_range(0.5..=1.0);
        nominal.mul_f64(jitter)
    }
}

impl Default for RetryPolicy {
    /// 100 ms doubling to at most 4 s, 10 attempts: rides out a server restart or a leader
    /// election (a few seconds) without hiding a dead ensemble for long.
    fn default() -> RetryPolicy {
        RetryPolicy::exponential(Duration::from_millis(100), Duration::from_secs(4), 10)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_grow_and_stay_capped() {
        let policy =
            RetryPolicy::exponential(Duration::from_millis(10), Duration::from_millis(70), 9);
        for attempt in 1..=9 {
            let delay = policy.delay(attempt);
            let nominal =
                Duration::from_millis(10 * (1 << (attempt - 1))).min(Duration::from_millis(70));
            assert!(
                delay <= nominal,
                "attempt {attempt}: {delay:?} > {nominal:?}"
            );
            assert!(
                delay >= nominal / 2,
                "attempt {attempt}: {delay:?} < half of {nominal:?}"
            );
        }
    }

    #[test]
    fn at_least_one_attempt() {
        assert_eq!(
            RetryPolicy::exponential(Duration::ZERO, Duration::ZERO, 0).max_attempts(),
            1
        );
        assert_eq!(RetryPolicy::never().max_attempts(), 1);
    }
}
