//! The one shape every lock of every backend has: a [`Lock`] hands out a [`Guard`].
//!
//! Each backend's locks keep their own types and inherent methods (a ZooKeeper
//! [`Mutex`](crate::zk::Mutex) returns a [`zk::LockGuard`](crate::zk::LockGuard) with a node
//! path, a Redis lock a guard that can extend its lease); the traits are what they all have in
//! common, usable as trait objects, so code that takes "a lock" takes any of them: the command
//! line's `lock`, the fault suite's clients and [`MultiLock`](crate::MultiLock) do.
//!
//! ```no_run
//! use lockkeeper::{Guard, Lock};
//!
//! /// Runs `job` under whatever lock it is given: ZooKeeper, Redis or etcd.
//! async fn exclusively(lock: &dyn Lock) -> lockkeeper::Result<()> {
//!     let guard = lock.lock().await?;
//!     let token = guard.fencing_token(); // `None` only for Redlock
//!     tokio::select! {
//!         () = guard.lost() => eprintln!("{} lost: stop writing", lock.name()),
//!         () = tokio::time::sleep(std::time::Duration::from_secs(1)) => {} // the job, with `token`
//!     }
//!     guard.release().await
//! }
//!
//! # async fn demo(zk: lockkeeper::zk::Session, redis: lockkeeper::redis::Redis)
//! #     -> lockkeeper::Result<()> {
//! exclusively(&zk.mutex("/locks/report")?).await?;
//! exclusively(&redis.lease_lock("report")).await?;
//! # Ok(()) }
//! ```
//!
//! The model is Curator's `InterProcessLock` (acquire, acquire with a timeout, release, is
//! held), with the two things a distributed lock's holder needs besides: the fencing token and
//! the lost-lock signal. A read-write lock is two locks, [`ReadLock`] and [`WriteLock`]
//! (`rw.read_lock()`, `rw.write_lock()`, as Curator's `readLock()` and `writeLock()`); a
//! semaphore is a lock of one lease.

use std::any::Any;
use std::fmt::Debug;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::Result;
use crate::fencing::FencingToken;
use crate::options::LockOptions;

mod backends;

/// A boxed future, the form a trait object's async methods return.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A lock: something that can be waited for and held, on any backend.
///
/// Every wait is cancel-safe: dropping the future before it is ready leaves nothing behind on
/// the server (no lock node, no queue entry, no key), and holds nothing.
pub trait Lock: Debug + Send + Sync {
    /// The lock's name on its backend: the lock's path on ZooKeeper, its name on Redis and
    /// etcd. Two handles on one lock have the same name.
    fn name(&self) -> &str;

    /// Waits until the lock is granted, for as long as it takes.
    ///
    /// Fails when the backend cannot be reached or the session ends while waiting
    /// ([`Error::SessionLost`](crate::Error::SessionLost) and the backend's errors), and with
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a handle whose settings
    /// the backend refuses; never "not granted".
    fn lock(&self) -> BoxFuture<'_, Result<Box<dyn Guard>>>;

    /// One attempt: the guard if the lock is free now, `None` (holding nothing) if another
    /// holder has it. Fails, rather than answering `None`, when the backend cannot tell (not
    /// connected, unreachable): "someone else has it" is never a guess.
    fn try_lock(&self) -> BoxFuture<'_, Result<Option<Box<dyn Guard>>>>;

    /// Waits at most `timeout`: `None` (holding nothing) if the lock was not granted by then.
    /// The wait, including giving up its place in line, ends within about a second of
    /// `timeout` even when the backend stops answering, and then it fails with the backend's
    /// unreachable error instead of answering `None`. A zero `timeout` is
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument): use
    /// [`try_lock`](Lock::try_lock).
    fn lock_timeout(&self, timeout: Duration) -> BoxFuture<'_, Result<Option<Box<dyn Guard>>>>;

    /// The same lock, held with `options` ([`LockOptions`]): each option set replaces this
    /// handle's, the others are kept. [`Error::InvalidArgument`](crate::Error::InvalidArgument)
    /// for a value the backend refuses or an option this lock does not take.
    fn with_options(&self, options: LockOptions) -> Result<Box<dyn Lock>>;
}

/// Proof of holding a [`Lock`]: what every guard of every backend answers.
///
/// Dropping a guard releases it in the background (best effort);
/// [`release`](Guard::release) releases and reports the outcome.
///
/// What only one backend's guard has (a Redis lease's `extend`, its value in the key) is one
/// downcast away, since every guard is [`Any`]:
///
/// ```no_run
/// # async fn demo(lock: &dyn lockkeeper::Lock) -> lockkeeper::Result<()> {
/// use std::any::Any;
/// use lockkeeper::redis::LeaseGuard;
///
/// let guard = lock.lock().await?;
/// if let Some(lease) = (&*guard as &dyn Any).downcast_ref::<LeaseGuard>() {
///     println!("the key holds {}", lease.token());
/// }
/// # Ok(()) }
/// ```
pub trait Guard: Any + Debug + Send + Sync {
    /// The token to send with every write to the protected resource, so that it can refuse
    /// a holder that paused past its hold ([`Fence`](crate::fence)): strictly increasing over
    /// every grant of the lock. `None` for a Redlock guard: independent masters share no
    /// counter, so Redlock has no token to give.
    fn fencing_token(&self) -> Option<FencingToken>;

    /// Whether the holder can still be sure it holds the lock, from local state with no
    /// round trip: not released, not seen deleted or taken over, and before
    /// [`valid_until`](Guard::valid_until). Live: it turns false at the backend's deletion
    /// event, the session's or lease's end, or the local deadline, whether or not anyone
    /// awaits [`lost`](Guard::lost).
    fn is_held(&self) -> bool;

    /// The instant until which the lock is certainly still held, as far as this process can
    /// know without asking (the session's or lease's deadline less a drift allowance, or the
    /// maximum hold time if sooner); `None` once [`is_held`](Guard::is_held) is false.
    fn valid_until(&self) -> Option<Instant>;

    /// Resolves as soon as [`is_held`](Guard::is_held) turns false. Cancel-safe; meant for
    /// `tokio::select!` against the work the lock protects.
    fn lost(&self) -> BoxFuture<'_, ()>;

    /// Resolves once someone asked this holder to give the lock up (cooperative revocation:
    /// `lockkeeper revoke`, Curator's `Revoker`). The holder decides what to do. Never
    /// resolves on a backend without cooperative revocation (Redis, etcd).
    fn revocation_requested(&self) -> BoxFuture<'_, ()> {
        Box::pin(std::future::pending())
    }

    /// What records this hold on the backend, for logs and inspection: the lock node's path
    /// (ZooKeeper), the key (Redis, etcd); several, comma-separated, for a guard of several.
    fn held_as(&self) -> String;

    /// Releases the lock and reports the outcome.
    /// [`Error::NotHeld`](crate::Error::NotHeld) if it was known to be gone before the release
    /// (lost, or its maximum hold time passed); the backend's error if the release could not be
    /// confirmed (the hold then ends with its session or lease).
    fn release(self: Box<Self>) -> BoxFuture<'static, Result<()>>;
}

/// The read side of a read-write lock, as a [`Lock`]: `rw.read_lock()` on any backend's
/// `RwLock`. Readers share the lock; a writer excludes them.
#[derive(Clone, Debug)]
pub struct ReadLock<L>(L);

/// The write side of a read-write lock, as a [`Lock`]: `rw.write_lock()` on any backend's
/// `RwLock`. A writer excludes readers and other writers.
#[derive(Clone, Debug)]
pub struct WriteLock<L>(L);

impl<L> ReadLock<L> {
    /// The read-write lock this is the read side of.
    pub fn rw_lock(&self) -> &L {
        &self.0
    }
}

impl<L> WriteLock<L> {
    /// The read-write lock this is the write side of.
    pub fn rw_lock(&self) -> &L {
        &self.0
    }
}
