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
//! out not to be ours any more or when renewals keep failing until the deadline.
//!
//! Two options every lock kind shares, kept here so they behave the same everywhere:
//!
//! - a **maximum hold time**: at that instant after the acquire was sent, the lease ends
//!   (`is_held()` false, `lost()` resolves) and a timer gives the lock up. Without lock-delay
//!   that is the guard's own compare-and-delete. With lock-delay it is a renewal to the delay
//!   alone: a holder past its maximum hold time is by definition still at work, so the key
//!   keeps everyone out for the delay, exactly as after a lapsed lease. Whichever comes first,
//!   the guard's release (or drop) or the timer, *claims* the release; the other sends
//!   nothing (a reentrant hold must not be given back twice);
//! - **lock-delay**: the key's TTL on the server is the lease *plus* the delay, while the
//!   holder trusts only the lease. A clean release deletes the key at once; a holder that
//!   lapsed (crashed, paused, partitioned) leaves the key to keep everyone out for the delay
//!   after its own validity ended, so its in-flight writes land before a new holder starts.
//!
//! Every lock kind also takes from here the helpers of its scripts' answers: fresh random
//! tokens, fencing counter values as tokens, `PTTL` answers as waits.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redis::RedisError;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::conn::unexpected_reply;
use crate::grant::trusted_until;
use crate::options::{self, Setting};
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
    /// The lock is given up this long after the acquisition.
    pub max_hold: Option<Duration>,
    /// Added to every TTL set on the server, never to the holder's own deadline.
    pub lock_delay: Option<Duration>,
}

impl LeaseSpec {
    pub(crate) fn new(watchdog: Duration) -> LeaseSpec {
        LeaseSpec {
            fixed: None,
            watchdog,
            max_hold: None,
            lock_delay: None,
        }
    }

    /// Takes one option ([`Configure::set`](crate::options::Configure::set)'s contract): a
    /// lease or a watchdog TTL, a maximum hold time, a lock-delay; each checked at once.
    pub(crate) fn set(&mut self, setting: Setting) -> Result<bool> {
        match setting {
            Setting::Lease(lease) => self.fixed = Some(lease),
            Setting::Watchdog(ttl) => {
                self.fixed = None;
                self.watchdog = ttl;
            }
            Setting::MaxHold(max_hold) => self.max_hold = Some(max_hold),
            Setting::LockDelay(delay) => self.lock_delay = Some(delay),
            Setting::KeepThroughSuspension => return Ok(false),
        }
        self.check()?;
        Ok(true)
    }

    /// The TTL the server sets for a lease of `lease`: longer by the lock-delay.
    pub(crate) fn on_server(&self, lease: Duration) -> Duration {
        lease.saturating_add(self.lock_delay.unwrap_or_default())
    }

    /// The TTL the acquire script sets.
    pub(crate) fn server_ttl(&self) -> Duration {
        self.on_server(self.ttl())
    }

    /// The TTL to set on acquisition.
    pub(crate) fn ttl(&self) -> Duration {
        self.fixed.unwrap_or(self.watchdog)
    }

    /// Zero (or sub-millisecond, which Redis would round to zero) durations are refused.
    pub(crate) fn check(&self) -> Result<()> {
        if let Some(fixed) = self.fixed {
            check_ttl("lease time", fixed)?;
        }
        check_ttl("watchdog lease", self.watchdog)?;
        if let Some(max_hold) = self.max_hold {
            check_ttl("max_hold (the maximum hold time)", max_hold)?;
            options::at_most_longest("max_hold (the maximum hold time)", max_hold)?;
        }
        if let Some(delay) = self.lock_delay {
            check_ttl("lock_delay", delay)?;
            options::at_most_longest("lock_delay", delay)?;
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
    /// Given up at the maximum hold time (and released by the lease's timer).
    MaxHold,
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

/// One release by the guard's own compare-and-delete: `Ok(true)` if the lock was still ours.
pub(crate) type Release =
    Arc<dyn Fn() -> Pin<Box<dyn Future<Output = Result<bool>> + Send>> + Send + Sync>;

/// A [`Release`] from an async release function.
pub(crate) fn release_by<F, Fut>(release: F) -> Release
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<bool>> + Send + 'static,
{
    Arc::new(move || Box::pin(release()))
}

/// The lease of one acquisition, owned by its guard.
pub(crate) struct Lease {
    status: Arc<watch::Sender<Status>>,
    watchdog: Option<JoinHandle<()>>,
    /// The maximum hold time's timer.
    limit: Option<JoinHandle<()>>,
    /// Set by whoever releases first: the guard or the maximum hold time's timer.
    claimed: Arc<AtomicBool>,
    /// The lock-delay added to TTLs on the server.
    delay: Duration,
}

impl Lease {
    /// A lease acquired by a request sent at `sent`, kept as `spec` says. With a watchdog,
    /// `renew` is called every TTL/3 (with the server's TTL: the lease plus the lock-delay);
    /// with a maximum hold time, `release` is called at its end.
    pub(crate) fn start(sent: Instant, spec: LeaseSpec, renew: Renew, release: Release) -> Lease {
        let ttl = spec.ttl();
        let delay = spec.lock_delay.unwrap_or_default();
        let stop_at = spec.max_hold.map(|max| sent + max);
        let valid_until = trusted_until(sent, ttl);
        let status = Arc::new(watch::Sender::new(Status::Held {
            valid_until: stop_at.map_or(valid_until, |stop| stop.min(valid_until)),
        }));
        let claimed = Arc::new(AtomicBool::new(false));
        let watchdog = match spec.fixed {
            Some(_) => None,
            None => Some(tokio::spawn(watchdog(
                Arc::clone(&status),
                sent,
                ttl,
                delay,
                stop_at,
                Arc::clone(&renew),
            ))),
        };
        let limit = stop_at.map(|stop_at| {
            let give_up = if delay.is_zero() {
                release
            } else {
                keep_out_for(delay, Arc::clone(&renew))
            };
            tokio::spawn(give_up_at(
                stop_at,
                Arc::clone(&status),
                Arc::clone(&claimed),
                give_up,
            ))
        });
        Lease {
            status,
            watchdog,
            limit,
            claimed,
            delay,
        }
    }

    /// The TTL the server sets for a lease of `lease` (an explicit extend): longer by the
    /// lock-delay.
    pub(crate) fn on_server(&self, lease: Duration) -> Duration {
        lease.saturating_add(self.delay)
    }

    /// Whether the lease is still ours: not lost, not released, and its deadline ahead.
    pub(crate) fn is_held(&self) -> bool {
        match *self.status.borrow() {
            Status::Held { valid_until } => Instant::now() < valid_until,
            Status::Lost | Status::Released | Status::MaxHold => false,
        }
    }

    /// The current deadline, while held.
    pub(crate) fn valid_until(&self) -> Option<Instant> {
        match *self.status.borrow() {
            Status::Held { valid_until } if Instant::now() < valid_until => Some(valid_until),
            _ => None,
        }
    }

    /// Resolves once the lease is lost, released, or past its deadline.
    pub(crate) fn lost(&self) -> impl Future<Output = ()> + Send + use<> {
        let mut status = self.status.subscribe();
        async move {
            loop {
                let current = *status.borrow_and_update();
                match current {
                    Status::Lost | Status::Released | Status::MaxHold => return,
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
    pub(crate) fn renewed(&self, valid_until: Instant) {
        self.status.send_if_modified(|s| match s {
            Status::Held { .. } => {
                *s = Status::Held { valid_until };
                true
            }
            _ => false,
        });
    }

    /// Marks the lease lost (an explicit extend found the lock gone).
    pub(crate) fn mark_lost(&self) {
        self.stop_watchdog();
        self.status.send_replace(Status::Lost);
    }

    /// Stops renewing and marks the lease released; called before the release is sent, so
    /// that no renewal lands after it (one in flight is harmless: it only extends a key that
    /// is still ours, and finds nothing once the release deleted it). False when the maximum
    /// hold time's timer claimed the release first: then the caller must send none.
    pub(crate) fn end(&mut self) -> bool {
        self.stop_watchdog();
        if self.claimed.swap(true, Ordering::AcqRel) {
            return false;
        }
        if let Some(limit) = &self.limit {
            limit.abort();
        }
        self.status.send_replace(Status::Released);
        true
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
    pub(crate) async fn release_with<F, Fut>(&mut self, mut attempt: F) -> Result<()>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<bool>>,
    {
        let trusted = self.is_held();
        if !self.end() {
            // Released at the maximum hold time already.
            return Err(Error::NotHeld);
        }
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
        if let Some(limit) = &self.limit {
            limit.abort();
        }
    }
}

/// The maximum hold time's timer: at `stop_at`, unless the guard released first, ends the
/// lease (so `lost()` resolves at that instant) and releases the lock, retrying a release
/// whose answer was lost (the compare-and-delete is idempotent).
/// What the maximum hold time does under lock-delay: renews the key to `delay` alone, so
/// nobody is granted until the delay has passed (see the module docs).
fn keep_out_for(delay: Duration, renew: Renew) -> Release {
    Arc::new(move || {
        let renewal = renew(delay);
        Box::pin(async move { renewal.await.map_err(Error::Redis) })
    })
}

async fn give_up_at(
    stop_at: Instant,
    status: Arc<watch::Sender<Status>>,
    claimed: Arc<AtomicBool>,
    release: Release,
) {
    tokio::time::sleep_until(stop_at).await;
    if claimed.swap(true, Ordering::AcqRel) {
        return;
    }
    status.send_replace(Status::MaxHold);
    for tries in 1..=RELEASE_ATTEMPTS {
        match release().await {
            Ok(released) => {
                tracing::debug!(released, "maximum hold time reached; lock released");
                return;
            }
            Err(Error::Redis(err)) if answer_lost(&err) && tries < RELEASE_ATTEMPTS => {
                tokio::time::sleep(Duration::from_millis(50) * 2u32.pow(tries)).await;
            }
            Err(err) => {
                tracing::warn!(%err, "releasing at the maximum hold time failed");
                return;
            }
        }
    }
}

/// Moves the deadline of a lease that is still held (never revives an ended one).
fn still_held(status: &watch::Sender<Status>, valid_until: Instant) {
    status.send_if_modified(|current| match current {
        Status::Held { .. } => {
            *current = Status::Held { valid_until };
            true
        }
        _ => false,
    });
}

/// Marks a lease that is still held as lost.
fn lost(status: &watch::Sender<Status>) {
    status.send_if_modified(|current| match current {
        Status::Held { .. } => {
            *current = Status::Lost;
            true
        }
        _ => false,
    });
}

/// The renewal loop. Runs until the lease is lost, the maximum hold time is reached, or it is
/// aborted at release.
async fn watchdog(
    status: Arc<watch::Sender<Status>>,
    acquired: Instant,
    ttl: Duration,
    delay: Duration,
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
            lost(&status);
            return;
        }
        // At the maximum hold time the lease's timer releases the lock: no renewal after it.
        if stop_at.is_some_and(|stop_at| stop_at <= sent) {
            return;
        }
        let lease = ttl;
        let outcome =
            tokio::time::timeout(valid_until - sent, renew(lease.saturating_add(delay))).await;
        match outcome {
            Ok(Ok(true)) => {
                valid_until = trusted_until(sent, lease);
                // Never trusted past the maximum hold time.
                still_held(
                    &status,
                    stop_at.map_or(valid_until, |stop| stop.min(valid_until)),
                );
                next = sent + period;
            }
            Ok(Ok(false)) => {
                tracing::warn!("lock lease renewal found the lock no longer held");
                lost(&status);
                return;
            }
            Ok(Err(error)) => {
                tracing::warn!(%error, "lock lease renewal failed; retrying until the deadline");
                // Retry soon, but not in a tight loop.
                next = Instant::now() + (period / 4).max(Duration::from_millis(10));
            }
            Err(_) => {
                tracing::warn!("lock lease renewal timed out at the lease deadline");
                lost(&status);
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Redis counts leases in whole milliseconds: one is the shortest, and is allowed.
    #[test]
    fn a_ttl_of_one_millisecond_is_the_shortest_allowed() {
        assert!(check_ttl("lease time", Duration::from_millis(1)).is_ok());
        let err = check_ttl("lease time", Duration::from_micros(999)).unwrap_err();
        assert!(
            err.to_string().contains("lease time must be at least 1 ms"),
            "{err}"
        );
    }

    /// The fencing counter starts at 1: zero or less is a corrupt counter, not a token.
    #[test]
    fn a_fencing_counter_below_one_is_corruption() {
        assert_eq!(fencing_token(1).unwrap(), FencingToken::new(1));
        assert!(fencing_token(0).is_err());
        assert!(fencing_token(-5).is_err());
    }
}
