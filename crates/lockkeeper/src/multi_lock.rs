//! Several locks held all or nothing (Curator's `InterProcessMultiLock`).
//!
//! A multi-lock is made of any [`Lock`]s (a ZooKeeper `Mutex`, a side of a read-write lock, a
//! lease of a semaphore, a Redis or etcd lock, on one backend or several) and takes them
//! through the trait, as any user would; it adds only the order and the all-or-nothing rule:
//!
//! - **One canonical order**: the locks are taken sorted by name, whatever order the caller
//!   listed them in. Two multi-locks over overlapping sets therefore always take the shared
//!   locks in the same order, and cannot each hold one while waiting for the other (Curator
//!   takes them in the caller's order, so two callers listing them differently can deadlock).
//! - **All or nothing**: if one lock cannot be taken (a timeout, a try that fails, an error),
//!   those already taken are released, in reverse order, before the call returns.
//! - **Released in reverse order**, by [`MultiGuard::release`] or on drop.
//!
//! One lock name may appear once: a read and a write side of one lock, or two handles on one
//! lock, would wait for each other.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::select_all;
use tokio::time::Instant;

use crate::deadline::Deadline;
use crate::error::{Error, Result};
use crate::fencing::FencingToken;
use crate::lock::{Guard, Lock};
use crate::options::LockOptions;

/// Several locks taken together: see the module docs.
///
/// ```no_run
/// # async fn demo(session: lockkeeper::zk::Session) -> lockkeeper::Result<()> {
/// use std::sync::Arc;
/// use lockkeeper::{Lock, MultiLock};
///
/// let locks: [Arc<dyn Lock>; 3] = [
///     Arc::new(session.mutex("/accounts/alice")?),
///     Arc::new(session.mutex("/accounts/bob")?),
///     Arc::new(session.rw_lock("/config/rates")?.read_lock()),
/// ];
/// let transfer = MultiLock::new(locks)?;
/// let guard = transfer.lock().await?;
/// let alice = guard.fencing_token("/accounts/alice"); // one token per lock
/// tokio::select! {
///     () = guard.lost() => eprintln!("one of the locks was lost: stop"),
///     () = tokio::time::sleep(std::time::Duration::from_millis(10)) => {} // the transfer
/// }
/// guard.release().await?; // in reverse order
/// # let _ = alice; Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct MultiLock {
    /// Sorted by name: the order they are taken in.
    locks: Vec<Arc<dyn Lock>>,
}

impl MultiLock {
    /// A multi-lock over `locks`. [`Error::InvalidArgument`] for an empty set or a name that
    /// appears twice.
    pub fn new(locks: impl IntoIterator<Item = Arc<dyn Lock>>) -> Result<MultiLock> {
        let mut locks: Vec<Arc<dyn Lock>> = locks.into_iter().collect();
        if locks.is_empty() {
            return Err(Error::InvalidArgument(
                "a multi-lock needs at least one lock".into(),
            ));
        }
        locks.sort_by(|a, b| a.name().cmp(b.name()));
        if let Some(pair) = locks
            .windows(2)
            .find(|pair| pair[0].name() == pair[1].name())
        {
            return Err(Error::InvalidArgument(format!(
                "lock {:?} appears twice in one multi-lock; its holds would wait for each other",
                pair[0].name()
            )));
        }
        Ok(MultiLock { locks })
    }

    /// Every lock held with `options` ([`Lock::with_options`]); options not set keep each
    /// lock's own. With `max_hold`, each lock is given up that long after its own grant: the
    /// guard counts as lost from the first lock's limit on, at most `max_hold` after the
    /// acquisition began to be granted, and each lock is released at its own limit (the last
    /// one at most the acquisition's duration later). [`Error::InvalidArgument`] for a value
    /// or an option one of the locks refuses, naming that lock.
    ///
    /// ```no_run
    /// # async fn demo(session: lockkeeper::zk::Session) -> lockkeeper::Result<()> {
    /// use std::{sync::Arc, time::Duration};
    /// use lockkeeper::{Lock, LockOptions, MultiLock};
    ///
    /// let locks: [Arc<dyn Lock>; 2] = [
    ///     Arc::new(session.mutex("/accounts/alice")?),
    ///     Arc::new(session.mutex("/accounts/bob")?),
    /// ];
    /// let options = LockOptions::new().max_hold(Duration::from_secs(5));
    /// let both = MultiLock::new(locks)?.with_options(options)?;
    /// let guard = both.lock().await?;
    /// guard.lost().await; // within 5 s of the first grant
    /// # Ok(()) }
    /// ```
    pub fn with_options(self, options: LockOptions) -> Result<MultiLock> {
        let locks = self
            .locks
            .iter()
            .map(|lock| lock.with_options(options).map(Arc::from))
            .collect::<Result<Vec<_>>>()?;
        Ok(MultiLock { locks })
    }

    /// The locks' names, in the order they are taken.
    pub fn names(&self) -> Vec<&str> {
        self.locks.iter().map(|lock| lock.name()).collect()
    }

    /// Waits until every lock is held.
    pub async fn lock(&self) -> Result<MultiGuard> {
        let guard = self.acquire(Deadline::Never).await?;
        guard.ok_or(Error::SessionLost)
    }

    /// Takes every lock only if each is free now; `None` (holding nothing) otherwise.
    pub async fn try_lock(&self) -> Result<Option<MultiGuard>> {
        self.acquire(Deadline::Now).await
    }

    /// Waits at most `timeout` in all; `None` (holding nothing) if some lock was not granted
    /// in time. A zero timeout is refused: use [`try_lock`](MultiLock::try_lock).
    pub async fn lock_timeout(&self, timeout: Duration) -> Result<Option<MultiGuard>> {
        self.acquire(Deadline::after(timeout)?).await
    }

    async fn acquire(&self, deadline: Deadline) -> Result<Option<MultiGuard>> {
        let mut taken = MultiGuard { held: Vec::new() };
        for lock in &self.locks {
            match take(lock.as_ref(), deadline).await {
                Ok(Some(one)) => taken.held.push((lock.name().to_owned(), one)),
                Ok(None) => {
                    taken.release_quietly().await;
                    return Ok(None);
                }
                Err(err) => {
                    taken.release_quietly().await;
                    return Err(err);
                }
            }
        }
        Ok(Some(taken))
    }
}

/// Takes one lock of the set within what is left of the set's `deadline`; `None` if it was not
/// granted in time. Once the time is up, a lock still to take gets one try.
async fn take(lock: &dyn Lock, deadline: Deadline) -> Result<Option<Box<dyn Guard>>> {
    match deadline {
        Deadline::Never => lock.lock().await.map(Some),
        Deadline::At(at) => match at.checked_duration_since(Instant::now()) {
            Some(left) if !left.is_zero() => lock.lock_timeout(left).await,
            _ => lock.try_lock().await,
        },
        Deadline::Now => lock.try_lock().await,
    }
}

/// Every lock of a [`MultiLock`], held. Dropping it releases them in reverse order (best
/// effort, in the background); [`release`](MultiGuard::release) reports the outcome.
#[must_use = "the locks are released when the guard is dropped"]
pub struct MultiGuard {
    /// Each lock's name and guard, in the order taken.
    held: Vec<(String, Box<dyn Guard>)>,
}

impl MultiGuard {
    /// Each lock's name and fencing token, in the order taken (a lease's token is its lease
    /// node's czxid); a lock without tokens (Redlock) is left out. Send the token of each
    /// resource's lock with the writes to it.
    pub fn fencing_tokens(&self) -> Vec<(&str, FencingToken)> {
        self.held
            .iter()
            .filter_map(|(name, one)| Some((name.as_str(), one.fencing_token()?)))
            .collect()
    }

    /// The fencing token of the lock called `name`, if it is one of this multi-lock's and has
    /// tokens.
    pub fn fencing_token(&self, name: &str) -> Option<FencingToken> {
        self.held
            .iter()
            .find(|(held, _)| held == name)
            .and_then(|(_, one)| one.fencing_token())
    }

    /// Whether every lock is still certainly held (see [`Guard::is_held`]).
    pub fn is_held(&self) -> bool {
        self.held.iter().all(|(_, one)| one.is_held())
    }

    /// The earliest of the locks' deadlines (see [`Guard::valid_until`]); `None` once
    /// [`is_held`](MultiGuard::is_held) is false.
    pub fn valid_until(&self) -> Option<Instant> {
        self.held
            .iter()
            .map(|(_, one)| one.valid_until())
            .collect::<Option<Vec<_>>>()?
            .into_iter()
            .min()
    }

    /// Resolves as soon as any of the locks can no longer be trusted (see [`Guard::lost`]).
    /// Cancel-safe.
    pub async fn lost(&self) {
        let watches: Vec<_> = self.held.iter().map(|(_, one)| one.lost()).collect();
        select_all(watches).await;
    }

    /// Releases every lock, in reverse order. Every lock is released even if one fails; the
    /// first failure is returned ([`Error::NotHeld`] if that lock was already lost).
    pub async fn release(mut self) -> Result<()> {
        let mut outcome = Ok(());
        while let Some((_, one)) = self.held.pop() {
            let released = one.release().await;
            if outcome.is_ok() {
                outcome = released;
            }
        }
        outcome
    }

    /// Gives back what an abandoned acquisition took; the caller reports its own outcome.
    async fn release_quietly(&mut self) {
        while let Some((name, one)) = self.held.pop() {
            if let Err(err) = one.release().await {
                tracing::debug!(name, %err, "releasing part of an abandoned multi-lock failed");
            }
        }
    }
}

impl Drop for MultiGuard {
    fn drop(&mut self) {
        // Dropping each guard releases it in the background; drop them last-taken first.
        while let Some(one) = self.held.pop() {
            drop(one);
        }
    }
}

impl std::fmt::Debug for MultiGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MultiGuard")
            .field("fencing_tokens", &self.fencing_tokens())
            .field("is_held", &self.is_held())
            .finish()
    }
}
