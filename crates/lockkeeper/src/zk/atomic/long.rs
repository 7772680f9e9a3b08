//! [`AtomicLong`]: Curator's `DistributedAtomicLong`, an `i64` updated optimistically.
//!
//! Invariants:
//! - The node holds 8 bytes, a big-endian `i64`, exactly as Curator writes it; an absent or
//!   empty node reads as 0, as in Curator. Any other length is an error, never a guess.
//! - Every update is read, compute, then a write conditional on the version read
//!   ([`write_if`]): it is applied exactly once or not at all, whoever else writes the node
//!   (lockkeeper, Curator, or a plain client).
//! - Attempts that lose to a concurrent write are retried under the optimistic retry policy;
//!   when it is spent the update is either promoted to a [`Mutex`] (if configured) or fails
//!   with [`Error::Contended`]. The lock only thins out the contention: the write under it is
//!   still conditional, so a holder that loses the lock, or a writer that never takes it,
//!   cannot make an update go missing.
//!
//! [`Mutex`]: crate::zk::Mutex

use std::convert::Infallible;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::zk::atomic::codec::{decode_i64, encode_i64};
use crate::zk::atomic::write::{Base, Written, write_if};
use crate::zk::node::look;
use crate::zk::path::{validate_lock_path, validate_node_path};
use crate::zk::retry::RetryPolicy;
use crate::zk::session::Session;

/// A 64-bit counter shared through one ZooKeeper node, with the node layout of Curator's
/// `DistributedAtomicLong` so that Java services using Curator share it.
///
/// - Named as Rust's atomics are: [`fetch_add`](Self::fetch_add) and
///   [`fetch_sub`](Self::fetch_sub) answer the value before, [`add_fetch`](Self::add_fetch)
///   the value after, [`compare_exchange`](Self::compare_exchange), [`load`](Self::load) and
///   [`store`](Self::store); each method's docs name its Curator counterpart.
/// - Updates are atomic: each is applied exactly once or not at all, even across connection
///   losses (see [`fetch_add`](Self::fetch_add)).
/// - Arithmetic wraps around on overflow (`i64::MAX + 1` is `i64::MIN`), as Java's `long`
///   does in Curator and as [`std::sync::atomic::AtomicI64::fetch_add`] does.
/// - An update that keeps losing to concurrent writers is retried under the
///   [optimistic retry policy](Self::optimistic_retries), then fails with
///   [`Error::Contended`], unless it is [promoted to a lock](Self::promote_to_lock).
///
/// ```no_run
/// # async fn demo() -> lockkeeper::Result<()> {
/// use std::time::Duration;
/// use lockkeeper::zk::Session;
///
/// let session = Session::connect("127.0.0.1:2181").await?;
/// let orders = session
///     .atomic_long("/counters/orders")?
///     .promote_to_lock("/counters/orders-lock", Duration::from_secs(5))?;
/// let id = orders.add_fetch(1).await?; // the new value: 1 for the first order
/// println!("order number {id}");
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct AtomicLong {
    session: Session,
    path: String,
    retries: RetryPolicy,
    promotion: Option<Promotion>,
}

/// Where and how long a promoted update waits for the lock.
#[derive(Clone, Debug)]
struct Promotion {
    lock_path: String,
    timeout: Duration,
}

impl AtomicLong {
    pub(crate) fn new(session: Session, path: &str) -> Result<AtomicLong> {
        validate_counter_path(path)?;
        Ok(AtomicLong {
            session,
            path: path.to_owned(),
            retries: default_retries(),
            promotion: None,
        })
    }

    /// The counter node's path.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// How often an update that lost to a concurrent write is attempted, and how long it
    /// backs off in between (the jitter spreads contenders apart). The default is 20
    /// attempts backing off from 5 ms to at most 500 ms. `RetryPolicy::never()` makes one
    /// attempt. Curator's equivalent is the `RetryPolicy` given to `DistributedAtomicLong`.
    pub fn optimistic_retries(mut self, policy: RetryPolicy) -> AtomicLong {
        self.retries = policy;
        self
    }

    /// Once the optimistic attempts are spent, takes the [`Mutex`](crate::zk::Mutex) at
    /// `lock_path` (through [`Session::mutex`], waiting at most `timeout`) and attempts the
    /// update again under it, backing off as the retry policy says, until it is written or
    /// `timeout` has passed once more (writers that have not promoted still race the holder),
    /// then releases the lock. Every writer that promotes must name the same lock path;
    /// Curator's `PromotedToLock` with that `lockPath` queues in the same lock. If the lock is
    /// not granted in time, or the second `timeout` passes, the update fails with
    /// [`Error::Contended`], having written nothing.
    ///
    /// [`Error::InvalidArgument`] for a lock path that is not absolute or a zero timeout.
    pub fn promote_to_lock(mut self, lock_path: &str, timeout: Duration) -> Result<AtomicLong> {
        validate_lock_path(lock_path)?;
        if timeout.is_zero() {
            return Err(Error::InvalidArgument(format!(
                "counter {:?}: the promoted lock {lock_path:?} needs a timeout greater than zero",
                self.path
            )));
        }
        self.promotion = Some(Promotion {
            lock_path: lock_path.to_owned(),
            timeout,
        });
        Ok(self)
    }

    /// The current value: 0 if the node does not exist or is empty (Curator's reading;
    /// Curator's `get().postValue()`).
    pub async fn load(&self) -> Result<i64> {
        Ok(self.read().await?.0)
    }

    /// Adds `delta` (wrapping on overflow, as Curator and [`AtomicI64::fetch_add`] do) and
    /// returns the value before, as [`AtomicI64::fetch_add`] does (Curator's
    /// `add(delta).preValue()`; its `increment()` is `fetch_add(1)`). An absent node is
    /// created (its missing parents as containers) holding `delta`.
    ///
    /// Errors: [`Error::Contended`] when every allowed attempt lost to a concurrent writer
    /// (nothing was written). If the connection is lost while the write is in flight and the
    /// node has changed since, the outcome is unknown and the connection-loss error
    /// ([`Error::Zk`]) or [`Error::SessionLost`] is returned: the delta was added once or not at
    /// all, never twice.
    ///
    /// [`AtomicI64::fetch_add`]: std::sync::atomic::AtomicI64::fetch_add
    pub async fn fetch_add(&self, delta: i64) -> Result<i64> {
        let added = self
            .update(|current| Ok::<_, Infallible>(current.wrapping_add(delta)))
            .await?;
        Ok(added.unwrap_or_else(|never| match never {}))
    }

    /// Subtracts `delta` (wrapping) and returns the value before, as
    /// [`AtomicI64::fetch_sub`](std::sync::atomic::AtomicI64::fetch_sub) does (Curator's
    /// `subtract(delta).preValue()`; its `decrement()` is `fetch_sub(1)`). As
    /// [`fetch_add`](Self::fetch_add) otherwise.
    pub async fn fetch_sub(&self, delta: i64) -> Result<i64> {
        self.fetch_add(delta.wrapping_neg()).await
    }

    /// Adds `delta` (wrapping) and returns the value after: the new value, as Curator's
    /// `add(delta).postValue()`, for a counter that hands out ids. As
    /// [`fetch_add`](Self::fetch_add) otherwise.
    pub async fn add_fetch(&self, delta: i64) -> Result<i64> {
        Ok(self.fetch_add(delta).await?.wrapping_add(delta))
    }

    /// Sets the value to `new` if it is `current` now, as
    /// [`AtomicI64::compare_exchange`](std::sync::atomic::AtomicI64::compare_exchange) does:
    /// `Ok(previous)` (which is `current`) if it was written, `Err(actual)` (nothing written)
    /// with the value found if it was not. An absent node counts as 0, as
    /// [`load`](Self::load) reads it. Curator's `compareAndSet`, except that it does not fail
    /// merely because the node was *written* since it was read: it reads again and fails only
    /// if the *value* differs, under the same retries (and promotion) as
    /// [`fetch_add`](Self::fetch_add).
    pub async fn compare_exchange(
        &self,
        current: i64,
        new: i64,
    ) -> Result<std::result::Result<i64, i64>> {
        self.update(|found| {
            if found == current {
                Ok(new)
            } else {
                Err(found)
            }
        })
        .await
    }

    /// Sets the value whatever it is now (Curator's `forceSet`), creating the node if needed,
    /// as [`AtomicI64::store`](std::sync::atomic::AtomicI64::store) does.
    pub async fn store(&self, value: i64) -> Result<()> {
        let data = encode_i64(value);
        for _ in 0..self.retries.max_attempts() {
            // Set if present, else create; each fails only if the other case arose meanwhile.
            for base in [Base::Any, Base::Absent] {
                if let Written::Applied(_) =
                    write_if(&self.session, &self.path, base, &data).await?
                {
                    return Ok(());
                }
            }
        }
        Err(Error::Contended {
            path: self.path.clone(),
            attempts: self.retries.max_attempts(),
        })
    }

    /// Creates the node holding `value` if it does not exist yet (Curator's `initialize`);
    /// `false` if it existed already, whatever it holds.
    pub async fn initialize(&self, value: i64) -> Result<bool> {
        match write_if(&self.session, &self.path, Base::Absent, &encode_i64(value)).await? {
            Written::Applied(_) => Ok(true),
            Written::Overtaken => Ok(false),
        }
    }

    /// The current value and the state it was read in.
    async fn read(&self) -> Result<(i64, Base)> {
        let found = look(&self.session.generation(), &self.path, false).await?;
        let Some((data, stat, _)) = found else {
            return Ok((0, Base::Absent));
        };
        let value = decode_i64(&self.path, &data)?.unwrap_or(0);
        Ok((value, Base::of(Some(&stat))))
    }

    /// Runs one update: `make` maps the current value to the one to write, or to the reason
    /// not to write (a compare-and-exchange whose expected value is not there). Answers the
    /// value the write replaced. Optimistically first, then under the promoted lock if there
    /// is one.
    async fn update<E>(&self, make: impl Fn(i64) -> Result<i64, E>) -> Result<Result<i64, E>> {
        let mut attempts = 0;
        if let Some(finished) = self.attempt(&make, &mut attempts, None).await? {
            return Ok(finished);
        }
        let contended = |attempts| Error::Contended {
            path: self.path.clone(),
            attempts,
        };
        let Some(promotion) = &self.promotion else {
            return Err(contended(attempts));
        };
        // A fresh handle per update: a shared one would let concurrent updates of clones of
        // this counter re-enter each other's hold instead of queueing.
        let mutex = self.session.mutex(&promotion.lock_path)?;
        let Some(guard) = mutex.lock_timeout(promotion.timeout).await? else {
            tracing::debug!(
                path = self.path,
                lock = promotion.lock_path,
                "the promoted lock was not granted in time"
            );
            return Err(contended(attempts));
        };
        // Writers that have not promoted (yet) still race us: keep trying, as long again as
        // the lock could have taken.
        let until = Instant::now() + promotion.timeout;
        let outcome = self.attempt(&make, &mut attempts, Some(until)).await;
        if let Err(err) = guard.release().await {
            // The update's outcome stands whatever happened to the lock: its write was
            // conditional. A lock node left behind goes with the session.
            tracing::warn!(lock = promotion.lock_path, %err, "releasing the promoted counter lock failed");
        }
        outcome?.ok_or_else(|| contended(attempts))
    }

    /// Read-compute-write until it is written or declined; `None` once the retry policy is
    /// spent, or, under the promoted lock (`until`), once that instant has passed.
    async fn attempt<E>(
        &self,
        make: &impl Fn(i64) -> Result<i64, E>,
        attempts: &mut u32,
        until: Option<Instant>,
    ) -> Result<Option<Result<i64, E>>> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            *attempts += 1;
            let (current, base) = self.read().await?;
            let new = match make(current) {
                Ok(new) => new,
                Err(declined) => return Ok(Some(Err(declined))),
            };
            match write_if(&self.session, &self.path, base, &encode_i64(new)).await? {
                Written::Applied(_) => return Ok(Some(Ok(current))),
                Written::Overtaken => {}
            }
            let delay = self.retries.delay(attempt.min(self.retries.max_attempts()));
            let spent = match until {
                None => attempt >= self.retries.max_attempts(),
                Some(until) => Instant::now() + delay >= until,
            };
            if spent {
                return Ok(None);
            }
            tokio::time::sleep(delay).await;
        }
    }
}

/// 20 attempts, 5 ms doubling to at most 500 ms (about 7 s in the worst case): enough for
/// dozens of writers hammering one node, short enough to report a hopeless one.
fn default_retries() -> RetryPolicy {
    RetryPolicy::exponential(Duration::from_millis(5), Duration::from_millis(500), 20)
}

/// A counter path is checked as a lock path is, and the message says it is a counter's.
pub(super) fn validate_counter_path(path: &str) -> Result<()> {
    validate_node_path("counter path", path)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The default a new user meets: 20 attempts from 5 ms, each pause at most 500 ms (with
    /// jitter, at least half the nominal pause).
    #[test]
    fn the_default_optimistic_retries_are_twenty_from_five_milliseconds() {
        let policy = default_retries();
        assert_eq!(policy.max_attempts(), 20);
        let first = policy.delay(1);
        assert!(
            first >= Duration::from_micros(2_500) && first <= Duration::from_millis(5),
            "{first:?}"
        );
        let last = policy.delay(20);
        assert!(
            last >= Duration::from_millis(250) && last <= Duration::from_millis(500),
            "{last:?}"
        );
    }
}
