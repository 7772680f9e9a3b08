//! Several locks held all or nothing (Curator's `InterProcessMultiLock`).
//!
//! A multi-lock is made of ordinary lock handles ([`Mutex`], a side of a [`RwLock`], a lease
//! of a [`Semaphore`]) and takes them through their public API, as any user would; it adds
//! only the order and the all-or-nothing rule:
//!
//! - **One canonical order**: the locks are taken sorted by path, whatever order the caller
//!   listed them in. Two multi-locks over overlapping sets therefore always take the shared
//!   locks in the same order, and cannot each hold one while waiting for the other (Curator
//!   takes them in the caller's order, so two callers listing them differently can deadlock).
//! - **All or nothing**: if one lock cannot be taken (a timeout, a try that fails, an error),
//!   those already taken are released, in reverse order, before the call returns.
//! - **Released in reverse order**, by [`MultiGuard::release`] or on drop.
//!
//! One lock path may appear once: a read and a write side of one lock, or two handles on one
//! path, would wait for each other.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use futures_util::future::select_all;
use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::fencing::FencingToken;
use crate::wait::Deadline;
use crate::zk::guard::LockGuard;
use crate::zk::mutex::Mutex;
use crate::zk::rwlock::RwLock;
use crate::zk::semaphore::{Leases, Semaphore};

/// One lock of a [`MultiLock`].
#[derive(Clone, Debug)]
pub enum Lockable {
    /// A [`Mutex`].
    Mutex(Mutex),
    /// The read side of a [`RwLock`].
    Read(RwLock),
    /// The write side of a [`RwLock`].
    Write(RwLock),
    /// One lease of a [`Semaphore`].
    Lease(Semaphore),
}

impl Lockable {
    fn path(&self) -> &str {
        match self {
            Lockable::Mutex(mutex) => mutex.path(),
            Lockable::Read(lock) | Lockable::Write(lock) => lock.path(),
            Lockable::Lease(semaphore) => semaphore.path(),
        }
    }

    /// Takes this lock within `deadline`; `None` if it was not granted in time.
    async fn take(&self, deadline: Deadline) -> Result<Option<Taken>> {
        let remaining = match deadline {
            Deadline::At(at) => match at.checked_duration_since(Instant::now()) {
                Some(left) if !left.is_zero() => Some(left),
                // The time is up before this lock's turn: only a try is left.
                _ => None,
            },
            Deadline::Never | Deadline::Now => None,
        };
        let wait = match (deadline, remaining) {
            (Deadline::Never, _) => Wait::Forever,
            (Deadline::At(_), Some(left)) => Wait::For(left),
            (Deadline::At(_), None) | (Deadline::Now, _) => Wait::Try,
        };
        Ok(match self {
            Lockable::Mutex(mutex) => match wait {
                Wait::Forever => Some(mutex.lock().await?),
                Wait::For(left) => mutex.lock_timeout(left).await?,
                Wait::Try => mutex.try_lock().await?,
            }
            .map(Taken::Guard),
            Lockable::Read(lock) => match wait {
                Wait::Forever => Some(lock.read().await?),
                Wait::For(left) => lock.read_timeout(left).await?,
                Wait::Try => lock.try_read().await?,
            }
            .map(Taken::Guard),
            Lockable::Write(lock) => match wait {
                Wait::Forever => Some(lock.write().await?),
                Wait::For(left) => lock.write_timeout(left).await?,
                Wait::Try => lock.try_write().await?,
            }
            .map(Taken::Guard),
            Lockable::Lease(semaphore) => match wait {
                Wait::Forever => Some(semaphore.acquire(1).await?),
                Wait::For(left) => semaphore.acquire_timeout(1, left).await?,
                Wait::Try => semaphore.try_acquire(1).await?,
            }
            .map(Taken::Leases),
        })
    }
}

impl From<Mutex> for Lockable {
    fn from(mutex: Mutex) -> Lockable {
        Lockable::Mutex(mutex)
    }
}

/// How one lock of the set may wait.
#[derive(Clone, Copy)]
enum Wait {
    Forever,
    For(Duration),
    Try,
}

/// One lock as held.
enum Taken {
    Guard(LockGuard),
    Leases(Leases),
}

impl Taken {
    fn token(&self) -> FencingToken {
        match self {
            Taken::Guard(guard) => guard.fencing_token(),
            // One lease was asked for, so there is exactly one token.
            Taken::Leases(leases) => leases.fencing_tokens()[0],
        }
    }

    fn is_held(&self) -> bool {
        match self {
            Taken::Guard(guard) => guard.is_held(),
            Taken::Leases(leases) => leases.is_held(),
        }
    }

    fn valid_until(&self) -> Option<Instant> {
        match self {
            Taken::Guard(guard) => guard.valid_until(),
            Taken::Leases(leases) => leases.valid_until(),
        }
    }

    async fn lost(&self) {
        match self {
            Taken::Guard(guard) => guard.lost().await,
            Taken::Leases(leases) => leases.lost().await,
        }
    }

    async fn release(self) -> Result<()> {
        match self {
            Taken::Guard(guard) => guard.release().await,
            Taken::Leases(leases) => leases.release().await,
        }
    }
}

/// Several locks taken together: see the module docs.
///
/// ```no_run
/// # async fn demo(session: lockkeeper::zk::Session) -> lockkeeper::Result<()> {
/// use lockkeeper::zk::{Lockable, MultiLock};
///
/// let transfer = MultiLock::new([
///     Lockable::Mutex(session.mutex("/accounts/alice")?),
///     Lockable::Mutex(session.mutex("/accounts/bob")?),
///     Lockable::Read(session.rw_lock("/config/rates")?),
/// ])?;
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
    /// Sorted by path: the order they are taken in.
    locks: Vec<Lockable>,
}

impl MultiLock {
    /// A multi-lock over `locks`. [`Error::InvalidArgument`] for an empty set or a path that
    /// appears twice.
    pub fn new(locks: impl IntoIterator<Item = Lockable>) -> Result<MultiLock> {
        let mut locks: Vec<Lockable> = locks.into_iter().collect();
        if locks.is_empty() {
            return Err(Error::InvalidArgument(
                "a multi-lock needs at least one lock".into(),
            ));
        }
        locks.sort_by(|a, b| a.path().cmp(b.path()));
        if let Some(pair) = locks
            .windows(2)
            .find(|pair| pair[0].path() == pair[1].path())
        {
            return Err(Error::InvalidArgument(format!(
                "lock path {:?} appears twice in one multi-lock; its holds would wait for each \
                 other",
                pair[0].path()
            )));
        }
        Ok(MultiLock { locks })
    }

    /// Gives every lock up `max_hold` after its own grant (see
    /// [`Mutex::max_hold`]): the guard counts as lost from the first lock's limit on, at most
    /// `max_hold` after the acquisition began to be granted, and each lock is released at its
    /// own limit (the last one at most the acquisition's duration later). Overrides the
    /// maximum hold times the handles were given. [`Error::InvalidArgument`] for zero.
    ///
    /// ```no_run
    /// # async fn demo(session: lockkeeper::zk::Session) -> lockkeeper::Result<()> {
    /// use std::time::Duration;
    /// use lockkeeper::zk::{Lockable, MultiLock};
    ///
    /// let both = MultiLock::new([
    ///     Lockable::Mutex(session.mutex("/accounts/alice")?),
    ///     Lockable::Mutex(session.mutex("/accounts/bob")?),
    /// ])?
    /// .max_hold(Duration::from_secs(5))?;
    /// let guard = both.lock().await?;
    /// guard.lost().await; // within 5 s of the first grant
    /// # Ok(()) }
    /// ```
    pub fn max_hold(self, max_hold: Duration) -> Result<MultiLock> {
        let locks = self
            .locks
            .into_iter()
            .map(|lock| {
                Ok(match lock {
                    Lockable::Mutex(mutex) => Lockable::Mutex(mutex.max_hold(max_hold)?),
                    Lockable::Read(lock) => Lockable::Read(lock.max_hold(max_hold)?),
                    Lockable::Write(lock) => Lockable::Write(lock.max_hold(max_hold)?),
                    Lockable::Lease(semaphore) => Lockable::Lease(semaphore.max_hold(max_hold)?),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(MultiLock { locks })
    }

    /// The lock paths, in the order they are taken.
    pub fn paths(&self) -> Vec<&str> {
        self.locks.iter().map(Lockable::path).collect()
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
            match lock.take(deadline).await {
                Ok(Some(one)) => taken.held.push((lock.path().to_owned(), one)),
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

/// Every lock of a [`MultiLock`], held. Dropping it releases them in reverse order (best
/// effort, in the background); [`release`](MultiGuard::release) reports the outcome.
#[must_use = "the locks are released when the guard is dropped"]
pub struct MultiGuard {
    /// In the order taken.
    held: Vec<(String, Taken)>,
}

impl MultiGuard {
    /// Each lock's path and fencing token, in the order taken (a lease's token is its lease
    /// node's czxid). Send the token of each resource's lock with the writes to it.
    pub fn fencing_tokens(&self) -> Vec<(&str, FencingToken)> {
        self.held
            .iter()
            .map(|(path, one)| (path.as_str(), one.token()))
            .collect()
    }

    /// The fencing token of the lock at `path`, if it is one of this multi-lock's.
    pub fn fencing_token(&self, path: &str) -> Option<FencingToken> {
        self.held
            .iter()
            .find(|(held, _)| held == path)
            .map(|(_, one)| one.token())
    }

    /// Whether every lock is still certainly held (see [`LockGuard::is_held`]).
    pub fn is_held(&self) -> bool {
        self.held.iter().all(|(_, one)| one.is_held())
    }

    /// The earliest of the locks' deadlines (see [`LockGuard::valid_until`]); `None` once
    /// [`is_held`](MultiGuard::is_held) is false.
    pub fn valid_until(&self) -> Option<Instant> {
        self.held
            .iter()
            .map(|(_, one)| one.valid_until())
            .collect::<Option<Vec<_>>>()?
            .into_iter()
            .min()
    }

    /// Resolves as soon as any of the locks can no longer be trusted (see
    /// [`LockGuard::lost`]). Cancel-safe.
    pub async fn lost(&self) {
        let watches: Vec<Pin<Box<dyn Future<Output = ()> + Send + '_>>> = self
            .held
            .iter()
            .map(|(_, one)| Box::pin(one.lost()) as Pin<Box<dyn Future<Output = ()> + Send + '_>>)
            .collect();
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
        while let Some((path, one)) = self.held.pop() {
            if let Err(err) = one.release().await {
                tracing::debug!(path, %err, "releasing part of an abandoned multi-lock failed");
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
