//! The local-count reentrant lock: one [`LeaseLock`] key in Redis, re-entries counted in this
//! process.
//!
//! Cheaper than the hash recipe (a re-entry costs no round trip) but the count lives here, not
//! in Redis: other processes cannot re-enter, and the Redis key's lease knows nothing of the
//! count. With a fixed lease the key can expire while the count still says "held"; only the
//! watchdog (the default) keeps the two together, and even then a lost lease is only reported
//! through [`is_held`](LocalReentrantGuard::is_held) and [`lost`](LocalReentrantGuard::lost).

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

use super::client::Redis;
use super::lease_lock::{LeaseGuard, LeaseLock};
use super::reentrant::Unlock;
use crate::{Error, FencingToken, Result};

/// A reentrant lock whose owner is this value: any code holding a reference to it may
/// re-enter without a round trip, and must release as often. Across processes (and across
/// separate `LocalReentrantLock` values) it excludes like a [`LeaseLock`].
///
/// Not `Clone` on purpose: sharing it (in an `Arc`) shares ownership, so do that only with
/// code meant to re-enter; tasks that must exclude each other use values of their own.
///
/// ```no_run
/// # async fn demo(redis: lockkeeper::redis::Redis) -> lockkeeper::Result<()> {
/// let lock = redis.local_reentrant_lock("cache-rebuild");
/// let outer = lock.lock().await?;
/// let inner = lock.lock().await?; // counted here, nothing sent
/// assert_eq!(inner.fencing_token(), outer.fencing_token());
/// inner.release().await?;
/// outer.release().await?; // the Redis key goes now
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct LocalReentrantLock {
    lock: LeaseLock,
    shared: Arc<Shared>,
    /// One acquisition from Redis at a time per value: a second caller waits for it and then
    /// re-enters.
    acquiring: tokio::sync::Mutex<()>,
}

#[derive(Debug, Default)]
struct Shared {
    holding: Mutex<Option<Holding>>,
}

#[derive(Debug)]
struct Holding {
    guard: LeaseGuard,
    count: u64,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Option<Holding>> {
        // Critical sections only move values in and out; a panic cannot leave them torn.
        crate::sync::lock(&self.holding)
    }
}

impl Redis {
    /// The local-count reentrant lock called `name` (see [`LocalReentrantLock`]).
    pub fn local_reentrant_lock(&self, name: &str) -> LocalReentrantLock {
        LocalReentrantLock::new(self.lease_lock(name))
    }
}

impl LocalReentrantLock {
    /// Counts re-entries locally over `lock` (with its lease settings).
    pub fn new(lock: LeaseLock) -> LocalReentrantLock {
        LocalReentrantLock {
            lock,
            shared: Arc::new(Shared::default()),
            acquiring: tokio::sync::Mutex::new(()),
        }
    }

    /// The lease lock underneath.
    pub fn lease_lock(&self) -> &LeaseLock {
        &self.lock
    }

    /// How many times this value holds the lock (0: not at all).
    pub fn hold_count(&self) -> u64 {
        self.shared.lock().as_ref().map_or(0, |h| h.count)
    }

    /// Waits until acquired; a re-entry returns at once. [`Error::NotHeld`] for a re-entry
    /// while the first acquisition's lease is lost: release the outer guards first.
    pub async fn lock(&self) -> Result<LocalReentrantGuard> {
        if let Some(guard) = self.reenter()? {
            return Ok(guard);
        }
        let _acquiring = self.acquiring.lock().await;
        if let Some(guard) = self.reenter()? {
            return Ok(guard);
        }
        let guard = self.lock.lock().await?;
        Ok(self.first(guard))
    }

    /// One attempt (a re-entry always succeeds while the lease holds).
    pub async fn try_lock(&self) -> Result<Option<LocalReentrantGuard>> {
        if let Some(guard) = self.reenter()? {
            return Ok(Some(guard));
        }
        let Ok(_acquiring) = self.acquiring.try_lock() else {
            // Another caller of this value is acquiring from Redis right now.
            return Ok(None);
        };
        if let Some(guard) = self.reenter()? {
            return Ok(Some(guard));
        }
        Ok(self.lock.try_lock().await?.map(|guard| self.first(guard)))
    }

    /// Waits at most `timeout`.
    pub async fn lock_timeout(&self, timeout: Duration) -> Result<Option<LocalReentrantGuard>> {
        let deadline = super::wait::deadline_in(timeout)?;
        if let Some(guard) = self.reenter()? {
            return Ok(Some(guard));
        }
        let Ok(_acquiring) = tokio::time::timeout_at(deadline, self.acquiring.lock()).await else {
            return Ok(None);
        };
        if let Some(guard) = self.reenter()? {
            return Ok(Some(guard));
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(self.lock.try_lock().await?.map(|guard| self.first(guard)));
        }
        Ok(self
            .lock
            .lock_timeout(left)
            .await?
            .map(|guard| self.first(guard)))
    }

    fn reenter(&self) -> Result<Option<LocalReentrantGuard>> {
        let mut holding = self.shared.lock();
        let Some(held) = holding.as_mut() else {
            return Ok(None);
        };
        if !held.guard.is_held() {
            return Err(Error::NotHeld);
        }
        held.count += 1;
        Ok(Some(LocalReentrantGuard {
            shared: Arc::clone(&self.shared),
            name: Arc::from(self.lock.name()),
            fencing: held.guard.fencing_token(),
            released: false,
        }))
    }

    fn first(&self, guard: LeaseGuard) -> LocalReentrantGuard {
        let fencing = guard.fencing_token();
        *self.shared.lock() = Some(Holding { guard, count: 1 });
        LocalReentrantGuard {
            shared: Arc::clone(&self.shared),
            name: Arc::from(self.lock.name()),
            fencing,
            released: false,
        }
    }
}

/// One hold of a [`LocalReentrantLock`]. The last hold released (or dropped) releases the
/// Redis key.
///
/// ```no_run
/// # async fn demo(redis: lockkeeper::redis::Redis) -> lockkeeper::Result<()> {
/// let lock = redis.local_reentrant_lock("cache-rebuild");
/// let guard = lock.lock().await?;
/// assert!(guard.is_held());
/// guard.release().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct LocalReentrantGuard {
    shared: Arc<Shared>,
    name: Arc<str>,
    fencing: FencingToken,
    released: bool,
}

impl LocalReentrantGuard {
    /// The name of the lock held.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The fencing token of the acquisition from Redis that all holds share.
    pub fn fencing_token(&self) -> FencingToken {
        self.fencing
    }

    /// Whether the Redis lease underneath is still good.
    pub fn is_held(&self) -> bool {
        self.shared
            .lock()
            .as_ref()
            .is_some_and(|h| h.guard.is_held())
    }

    /// The instant the Redis lease underneath ends (earlier than the key's expiry on the
    /// server), while held.
    pub fn valid_until(&self) -> Option<Instant> {
        self.shared
            .lock()
            .as_ref()
            .and_then(|h| h.guard.valid_until())
    }

    /// Resolves when the Redis lease underneath is lost or ends.
    pub fn lost(&self) -> impl Future<Output = ()> + Send + use<> {
        let lost = self.shared.lock().as_ref().map(|h| h.guard.lost());
        async move {
            if let Some(lost) = lost {
                lost.await;
            }
        }
    }

    /// Releases this hold; the last one releases the Redis key ([`Error::NotHeld`] if its
    /// lease had ended).
    pub async fn release(mut self) -> Result<Unlock> {
        self.released = true;
        match self.take_hold() {
            Some(guard) => guard.release().await.map(|()| Unlock::Released),
            None => Ok(Unlock::Decremented {
                remaining: self.shared.lock().as_ref().map_or(0, |h| h.count),
            }),
        }
    }

    /// Decrements the count; the Redis guard if this was the last hold.
    fn take_hold(&self) -> Option<LeaseGuard> {
        let mut holding = self.shared.lock();
        let held = holding.as_mut()?;
        held.count -= 1;
        if held.count > 0 {
            return None;
        }
        holding.take().map(|h| h.guard)
    }
}

impl Drop for LocalReentrantGuard {
    fn drop(&mut self) {
        if !self.released {
            // The lease guard's own drop releases the key (best effort).
            drop(self.take_hold());
        }
    }
}
