//! [`LockOptions`]: how a lock is held, as one value that every lock of every backend takes
//! (`with_options`), and the checks every backend makes of the durations in it, in one place,
//! so that a value one backend refuses no other takes.
//!
//! Each lock says which options it has (`Configure`); an option a lock has no use for is
//! refused with an error naming the option and the lock, never ignored: a `lock_delay` that
//! silently did nothing would be a promise broken at the worst moment.

use std::fmt;
use std::time::Duration;

use crate::error::{Error, Result};

/// How a lock is held: lease, watchdog, maximum hold time, lock-delay, and what a suspended
/// connection means. Every lock handle takes one through its `with_options`, and every
/// option left unset keeps the handle's own setting (its backend's default at first).
///
/// Which lock takes what:
///
/// | option | ZooKeeper | Redis | etcd |
/// |---|---|---|---|
/// | [`lease`](crate::LockOptions::lease), [`watchdog`](crate::LockOptions::watchdog) | no (the session is the lease) | every lock | no (the session's lease) |
/// | [`max_hold`](crate::LockOptions::max_hold) | every lock and the leader latch | every lock | every lock and candidacy |
/// | [`lock_delay`](crate::LockOptions::lock_delay) | `Mutex`, `RwLock` | every lock | `Mutex`, `RwLock` |
/// | [`keep_through_suspension`](crate::LockOptions::keep_through_suspension) | every lock and the leader latch | no | no |
///
/// An option a lock does not take is [`Error::InvalidArgument`] naming the option and the
/// lock; so are a zero maximum hold time or lock-delay, a lease under a millisecond, and a
/// lease and a watchdog together.
///
/// ```no_run
/// # async fn demo(session: lockkeeper::zk::Session) -> lockkeeper::Result<()> {
/// use std::time::Duration;
/// use lockkeeper::LockOptions;
///
/// let held_briefly = LockOptions::new()
///     .max_hold(Duration::from_secs(60))
///     .lock_delay(Duration::from_secs(5));
/// let mutex = session.mutex("/locks/report")?.with_options(held_briefly)?;
/// let guard = mutex.lock().await?;
/// guard.lost().await; // at the latest 60 s after the grant
/// # Ok(()) }
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LockOptions {
    lease: Option<Duration>,
    watchdog: Option<Duration>,
    max_hold: Option<Duration>,
    lock_delay: Option<Duration>,
    keep_through_suspension: bool,
}

impl LockOptions {
    /// No option set: a handle given these keeps its own settings.
    pub const fn new() -> LockOptions {
        LockOptions {
            lease: None,
            watchdog: None,
            max_hold: None,
            lock_delay: None,
            keep_through_suspension: false,
        }
    }

    /// Redis: hold each acquisition for exactly `lease`, with no watchdog renewing it (at
    /// least 1 ms; Redis counts in milliseconds). Excludes [`watchdog`](crate::LockOptions::watchdog).
    pub const fn lease(mut self, lease: Duration) -> LockOptions {
        self.lease = Some(lease);
        self
    }

    /// Redis: keep the lock with a watchdog, a lease of `ttl` renewed every third of it while
    /// the guard lives (instead of the client's default TTL). Excludes [`lease`](crate::LockOptions::lease).
    pub const fn watchdog(mut self, ttl: Duration) -> LockOptions {
        self.watchdog = Some(ttl);
        self
    }

    /// Give the lock up `max_hold` after each grant, whatever the holder is doing: the guard's
    /// `lost()` resolves and `is_held()` turns false at that instant, and the lock is freed on
    /// the server (its node deleted, its key removed, its key revoked). A bound on how long a
    /// stuck holder keeps everyone out. Under lock-delay the next holder waits the delay out,
    /// because a holder past its maximum hold time is still at work and its writes may be in
    /// flight. Re-entries of a reentrant lock share the first grant's limit.
    pub const fn max_hold(mut self, max_hold: Duration) -> LockOptions {
        self.max_hold = Some(max_hold);
        self
    }

    /// Lock-delay: when a holder *failed* (its session or lease ended, its node was deleted by
    /// a revocation, it hit its maximum hold time) rather than released, the next holder is
    /// not granted the lock until `delay` after, so the failed holder's in-flight writes land
    /// first. A clean release hands over at once. Give every handle of a lock the same delay.
    pub const fn lock_delay(mut self, delay: Duration) -> LockOptions {
        self.lock_delay = Some(delay);
        self
    }

    /// ZooKeeper: keep holding through a suspended connection that reconnects to the same
    /// session in time. By default (Curator's standard policy) a suspension counts as loss at
    /// once: a holder cannot tell then whether its session will survive. Choose this where a
    /// brief network blip must not abort the work, and let the fencing token protect the
    /// resource in the gap.
    pub const fn keep_through_suspension(mut self) -> LockOptions {
        self.keep_through_suspension = true;
        self
    }

    /// Applies every option set to `handle`, in one order, refusing what it does not take.
    pub(crate) fn apply<T: Configure>(self, mut handle: T) -> Result<T> {
        if let (Some(lease), Some(ttl)) = (self.lease, self.watchdog) {
            return Err(Error::InvalidArgument(format!(
                "a lease ({lease:?}) and a watchdog ({ttl:?}) exclude each other, for {}",
                handle.described()
            )));
        }
        let settings = [
            self.lease.map(Setting::Lease),
            self.watchdog.map(Setting::Watchdog),
            self.max_hold.map(Setting::MaxHold),
            self.lock_delay.map(Setting::LockDelay),
            self.keep_through_suspension
                .then_some(Setting::KeepThroughSuspension),
        ];
        for setting in settings.into_iter().flatten() {
            if !handle.set(setting)? {
                return Err(Error::InvalidArgument(format!(
                    "{setting} is not an option of {}",
                    handle.described()
                )));
            }
        }
        Ok(handle)
    }
}

/// One option with its value, as a lock applies it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Setting {
    Lease(Duration),
    Watchdog(Duration),
    MaxHold(Duration),
    LockDelay(Duration),
    KeepThroughSuspension,
}

impl Setting {
    /// The option's name, as the builder method and every error spell it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Setting::Lease(_) => "lease",
            Setting::Watchdog(_) => "watchdog",
            Setting::MaxHold(_) => "max_hold",
            Setting::LockDelay(_) => "lock_delay",
            Setting::KeepThroughSuspension => "keep_through_suspension",
        }
    }
}

impl fmt::Display for Setting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Whether a lock has a lock-delay: the queue locks (the ZooKeeper and etcd mutexes and
/// read-write locks) do; semaphores, the simple lock and elections do not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Delay {
    Taken,
    NotTaken,
}

/// What a lock handle does with each option: every `with_options` is
/// [`LockOptions::apply`] over it.
pub(crate) trait Configure {
    /// The lock as errors name it: `the lock "/locks/x"`, `the Redis lock "orders"`.
    fn described(&self) -> String;

    /// Takes `setting`: `Ok(false)` when the lock has no such option, an error when it has
    /// but refuses the value.
    fn set(&mut self, setting: Setting) -> Result<bool>;
}

/// The longest maximum hold time or lock-delay taken: far beyond any real use, and short
/// enough that adding it to an instant or a lease cannot overflow.
pub(crate) const LONGEST: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// `duration` unless it is longer than [`LONGEST`]; the error names `option`.
pub(crate) fn at_most_longest(option: &str, duration: Duration) -> Result<Duration> {
    if duration > LONGEST {
        return Err(Error::InvalidArgument(format!(
            "{option} must be at most 100 years, got {duration:?}"
        )));
    }
    Ok(duration)
}

/// A zero duration would silently mean "never hold" or "no delay": refused, naming the option
/// and `lock` (e.g. `the lock "/locks/x"`), as is one too long to add to an instant.
pub(crate) fn positive(option: &str, lock: &str, duration: Duration) -> Result<Duration> {
    if duration.is_zero() {
        return Err(Error::InvalidArgument(format!(
            "{option} for {lock} must be greater than zero"
        )));
    }
    at_most_longest(&format!("{option} for {lock}"), duration)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A lock that takes only a maximum hold time, recording what it was given.
    #[derive(Debug, Default)]
    struct MaxHoldOnly(Option<Duration>);

    impl Configure for MaxHoldOnly {
        fn described(&self) -> String {
            "the lock \"/x\"".to_owned()
        }

        fn set(&mut self, setting: Setting) -> Result<bool> {
            match setting {
                Setting::MaxHold(d) => {
                    self.0 = Some(positive("max_hold", &self.described(), d)?);
                    Ok(true)
                }
                _ => Ok(false),
            }
        }
    }

    #[test]
    fn options_reach_the_lock_and_unset_ones_keep_its_own() {
        let d = Duration::from_secs(3);
        let lock = LockOptions::new()
            .max_hold(d)
            .apply(MaxHoldOnly::default())
            .unwrap();
        assert_eq!(lock.0, Some(d));
        let kept = LockOptions::new().apply(MaxHoldOnly(Some(d))).unwrap();
        assert_eq!(kept.0, Some(d));
    }

    #[test]
    fn an_option_the_lock_does_not_take_is_refused_by_name() {
        let err = LockOptions::new()
            .lock_delay(Duration::from_secs(1))
            .apply(MaxHoldOnly::default())
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid argument: lock_delay is not an option of the lock \"/x\""
        );
        let err = LockOptions::new()
            .keep_through_suspension()
            .apply(MaxHoldOnly::default())
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("keep_through_suspension is not an option"),
            "{err}"
        );
    }

    #[test]
    fn a_lease_and_a_watchdog_together_are_refused() {
        let err = LockOptions::new()
            .lease(Duration::from_secs(1))
            .watchdog(Duration::from_secs(9))
            .apply(MaxHoldOnly::default())
            .unwrap_err();
        assert!(err.to_string().contains("exclude each other"), "{err}");
    }

    #[test]
    fn a_refused_value_is_the_locks_error() {
        let err = LockOptions::new()
            .max_hold(Duration::ZERO)
            .apply(MaxHoldOnly::default())
            .unwrap_err();
        assert!(
            err.to_string().contains("must be greater than zero"),
            "{err}"
        );
        assert!(positive("max_hold", "x", LONGEST).is_ok());
        assert!(positive("max_hold", "x", LONGEST + Duration::from_secs(1)).is_err());
    }
}
