//! Leases: how long an acquisition may be trusted, and the watchdog that keeps it alive.
//!
//! A Redis lock is a key with a time to live. Its holder cannot see the key expire, so it keeps
//! its own conservative deadline: the time it *sent* the acquire (or renewal), plus the TTL,
//! minus an allowance for clock drift (1% of the TTL plus 2 ms, as Redlock does). The server's
//! clock starts later than ours, so as long as the clocks run at about the same rate, our
//! deadline passes before the key can expire.
//!
//! With a watchdog (no explicit lease), a task renews the lease every TTL/3 with a
//! compare-and-pexpire; it gives up, and the guard reports the lock as lost, when the key turns
//! out not to be ours any more or when renewals keep failing until the deadline. An optional
//! maximum hold time stops the renewals, after which the lease runs out on its own.
//!
//! Every lock kind also takes from here the helpers of its scripts' answers: fresh random
//! tokens, fencing counter values as tokens, `PTTL` answers as waits.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use redis::RedisError;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::conn::unexpected_reply;
use crate::deadline::trusted_until;
use crate::{Error, FencingToken, Result};

/// How often a release is sent in all when its answers are lost with the connection.
const RELEASE_ATTEMPTS: u32 = 4;

/// Whether a command may have run although no answer came: the connection broke or the
/// answer was late.
fn answer_lost(err: &RedisError) -> bool {
    err.is_io_error() || err.is_connection_dropped() || err.is_timeout()
}

/// The lease a default watchdog keeps renewing: Redisson's `lockWatchdogTimeout`.
pub const DEFAULT_WATCHDOG_TTL: Duration = Duration::from_secs(30);

/// How an acquisition's lease is kept: the shared settings of every lock kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct LeaseSpec {
    /// An explicit lease: no watchdog, the lock expires after this long.
    pub fixed: Option<Duration>,
    /// The TTL the watchdog sets (and renews every third of) when there is no explicit lease.
    pub watchdog: Duration,
    /// With a watchdog: renewals stop this long after the acquisition.
    pub max_hold: Option<Duration>,
}

impl LeaseSpec {
    pub fn new(watchdog: Duration) -> LeaseSpec {
        LeaseSpec {
            fixed: None,
            watchdog,
            max_hold: None,
        }
    }

    /// The TTL to set on acquisition.
    pub fn ttl(&self) -> Duration {
        self.fixed.unwrap_or(self.watchdog)
    }

    /// Zero (or sub-millisecond, which Redis would round to zero) durations are refused.
    pub fn check(&self) -> Result<()> {
        if let Some(fixed) = self.fixed {
            check_ttl("lease time", fixed)?;
        }
        check_ttl("watchdog lease", self.watchdog)?;
        if let Some(max_hold) = self.max_hold {
            check_ttl("maximum hold time", max_hold)?;
        }
        Ok(())
    }
}

/// A TTL must be at least one millisecond: Redis counts leases in milliseconds.
pub(crate) fn check_ttl(what: &str, ttl: Duration) -> Result<()> {
    if ttl < Duration::from_millis(1) {
        return Err(Error::InvalidArgument(format!(
            "{what} must be at least 1 ms, got {ttl:?}"
        )));
    }
    Ok(())
}

/// A duration as the whole milliseconds Redis takes (at least 1).
pub(crate) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis())
        .unwrap_or(u64::MAX)
        .max(1)
}

/// A fresh random 128-bit token, as 32 hex digits.
pub(crate) fn new_token() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// A fencing counter value as a token (the counter starts at 1; anything else is corruption).
pub(crate) fn fencing_token(value: i64) -> Result<FencingToken> {
    u64::try_from(value)
        .ok()
        .filter(|v| *v > 0)
        .map(FencingToken::new)
        .ok_or_else(|| {
            unexpected_reply("the fencing counter is not a positive integer", value).into()
        })
}

/// A `PTTL` answer as a wait: none when the key has no expiry (-1) or is gone (-2).
pub(crate) fn remaining(pttl: i64) -> Option<Duration> {
    u64::try_from(pttl).ok().map(Duration::from_millis)
}

/// Where a lease stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Status {
    /// Held, as far as we know, until this instant.
    Held { valid_until: Instant },
    /// Renewal found the lock gone or taken over, or failed until the deadline.
    Lost,
    /// Released by its holder.
    Released,
}

/// One renewal: sets the lease to the given TTL if the lock is still ours; `Ok(false)` if it is
/// not.
pub(crate) type Renew = Arc<
    dyn Fn(Duration) -> Pin<Box<dyn Future<Output = Result<bool, RedisError>> + Send>>
        + Send
        + Sync,
>;

/// A [`Renew`] from an async renewal function of the crate's own result type.
pub(crate) fn renew_with<F, Fut>(renew: F) -> Renew
where
    F: Fn(Duration) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<bool>> + Send + 'static,
{
    Arc::new(move |ttl| {
        let renewal = renew(ttl);
        Box::pin(async move {
            match renewal.await {
                Ok(renewed) => Ok(renewed),
                Err(Error::Redis(error)) => Err(error),
                Err(other) => Err(RedisError::from((
                    redis::ErrorKind::Client,
                    "lease renewal failed",
                    other.to_string(),
                ))),
            }
        })
    })
}

/// The lease of one acquisition, owned by its guard.
pub(crate) struct Lease {
    status: Arc<watch::Sender<Status>>,
    watchdog: Option<JoinHandle<()>>,
}

impl Lease {
    /// A lease acquired by a request sent at `sent`, kept as `spec` says. With a watchdog,
    /// `renew` is called every TTL/3.
    pub fn start(sent: Instant, spec: LeaseSpec, renew: Renew) -> Lease {
        let ttl = spec.ttl();
        let status = Arc::new(watch::Sender::new(Status::Held {
            valid_until: trusted_until(sent, ttl),
        }));
        let watchdog = match spec.fixed {
            Some(_) => None,
            None => {
                let stop_at = spec.max_hold.map(|max| sent + max);
                Some(tokio::spawn(watchdog(
                    Arc::clone(&status),
                    sent,
                    ttl,
                    stop_at,
                    renew,
                )))
            }
        };
        Lease { status, watchdog }
    }

    /// Whether the lease is still ours: not lost, not released, and its deadline ahead.
    pub fn is_held(&self) -> bool {
        match *self.status.borrow() {
            Status::Held { valid_until } => Instant::now() < valid_until,
            Status::Lost | Status::Released => false,
        }
    }

    /// The current deadline, while held.
    pub fn valid_until(&self) -> Option<Instant> {
        match *self.status.borrow() {
            Status::Held { valid_until } if Instant::now() < valid_until => Some(valid_until),
            _ => None,
        }
    }

    /// Resolves once the lease is lost, released, or past its deadline.
    pub fn lost(&self) -> impl Future<Output = ()> + Send + use<> {
        let mut status = self.status.subscribe();
        async move {
            loop {
                let current = *status.borrow_and_update();
                match current {
                    Status::Lost | Status::Released => return,
                    Status::Held { valid_until } => {
                        tokio::select! {
                            _ = tokio::time::sleep_until(valid_until) => {
                                // The deadline may have moved while we slept.
                                if matches!(*status.borrow(), Status::Held { valid_until: v } if v <= Instant::now()) {
                                    return;
                                }
                            }
                            changed = status.changed() => {
                                if changed.is_err() {
                                    return;
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    /// Moves the deadline (after an explicit extend).
    pub fn renewed(&self, valid_until: Instant) {
        self.status.send_if_modified(|s| match s {
            Status::Held { .. } => {
                *s = Status::Held { valid_until };
                true
            }
            _ => false,
        });
    }

    /// Marks the lease lost (an explicit extend found the lock gone).
    pub fn mark_lost(&self) {
        self.stop_watchdog();
        self.status.send_replace(Status::Lost);
    }

    /// Stops renewing and marks the lease released; called before the release is sent, so
    /// that no renewal lands after it (one in flight is harmless: it only extends a key that
    /// is still ours, and finds nothing once the release deleted it).
    pub fn end(&mut self) {
        self.stop_watchdog();
        self.status.send_replace(Status::Released);
    }

    /// Ends the lease and releases the lock with `attempt`: an idempotent compare-and-delete
    /// by the holder's unique token, answering whether the lock was still ours.
    ///
    /// A connection lost before the answer leaves it unknown whether the script ran, so it is
    /// sent again (a few times, backing off, while the client reconnects). If a retry finds the
    /// lock not ours, the lost attempt may well have released it; when that attempt left while
    /// the lease was still valid, nothing says the lock was lost first, and the release counts
    /// as done. `NotHeld` only when the server said "not yours" to a first attempt, or to a
    /// retry of one sent after the lease had run out.
    pub async fn release_with<F, Fut>(&mut self, mut attempt: F) -> Result<()>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<bool>>,
    {
        let trusted = self.is_held();
        self.end();
        let mut unanswered = false;
        let mut tries = 0u32;
        loop {
            tries += 1;
            match attempt().await {
                Ok(true) => return Ok(()),
                Ok(false) if unanswered && trusted => {
                    tracing::debug!("a release whose answer was lost went through");
                    return Ok(());
                }
                Ok(false) => return Err(Error::NotHeld),
                Err(Error::Redis(err)) if answer_lost(&err) && tries < RELEASE_ATTEMPTS => {
                    tracing::debug!(%err, "the answer to a release was lost; sending it again");
                    unanswered = true;
                    tokio::time::sleep(Duration::from_millis(50) * 2u32.pow(tries)).await;
                }
                Err(err) => return Err(err),
            }
        }
    }

    fn stop_watchdog(&self) {
        if let Some(watchdog) = &self.watchdog {
            watchdog.abort();
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.stop_watchdog();
    }
}

/// The renewal loop. Runs until the lease is lost, the maximum hold time stops it, or it is
/// aborted at release.
async fn watchdog(
    status: Arc<watch::Sender<Status>>,
    acquired: Instant,
    ttl: Duration,
    stop_at: Option<Instant>,
    renew: Renew,
) {
    let period = (ttl / 3).max(Duration::from_millis(1));
    let mut valid_until = trusted_until(acquired, ttl);
    let mut next = acquired + period;
    loop {
        tokio::time::sleep_until(next).await;
        let sent = Instant::now();
        if sent >= valid_until {
            status.send_replace(Status::Lost);
            return;
        }
        // With a maximum hold time, the last renewal only reaches up to it.
        let lease = match stop_at {
            Some(stop_at) if stop_at <= sent => return,
            Some(stop_at) => ttl.min(stop_at - sent),
            None => ttl,
        };
        if lease < Duration::from_millis(1) {
            return;
        }
        let outcome = tokio::time::timeout(valid_until - sent, renew(lease)).await;
        match outcome {
            Ok(Ok(true)) => {
                valid_until = trusted_until(sent, lease);
                status.send_replace(Status::Held { valid_until });
                next = sent + period;
            }
            Ok(Ok(false)) => {
                tracing::warn!("lock lease renewal found the lock no longer held");
                status.send_replace(Status::Lost);
                return;
            }
            Ok(Err(error)) => {
                tracing::warn!(%error, "lock lease renewal failed; retrying until the deadline");
                // Retry soon, but not in a tight loop.
                next = Instant::now() + (period / 4).max(Duration::from_millis(10));
            }
            Err(_) => {
                tracing::warn!("lock lease renewal timed out at the lease deadline");
                status.send_replace(Status::Lost);
                return;
            }
        }
    }
}
