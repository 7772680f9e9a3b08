//! [`Mutex`]: the etcd lock with the key layout of Go's `concurrency.Mutex`, so that
//! `etcdctl lock`, Go services and lockkeeper exclude each other on one name.

use std::sync::Arc;
use std::time::Duration;

use crate::deadline::Deadline;
use crate::error::Result;
use crate::etcd::check_name;
use crate::etcd::guard::{HoldOptions, LockGuard};
use crate::etcd::queue::{Place, acquire};
use crate::etcd::session::Session;
use crate::options::{Configure, Delay, LockOptions, Setting};

/// A distributed mutual-exclusion lock on etcd, laid out exactly as Go's `concurrency.Mutex`
/// (and so `etcdctl lock NAME`): the key `NAME/{lease id in hex}` with the session's lease;
/// the holder is the key with the lowest create revision under `NAME/`.
///
/// - **Fair and herd-free**: a waiter watches only the key created just before its own, so a
///   release wakes one waiter, in order of arrival.
/// - **One key per session**: as in Go, a session has one key per lock name. Two handles of
///   one session (or two `lock()` calls on one handle) exclude each other in the process
///   before they reach etcd; the lock is not reentrant.
/// - **Cancel-safe**: a dropped `lock()` future, a timeout or an error deletes the waiter's key.
/// - **Lost signal**: [`LockGuard::lost`] fires when the session's lease can no longer be
///   trusted or the key is deleted.
///
/// ```no_run
/// # async fn demo() -> lockkeeper::Result<()> {
/// use std::time::Duration;
/// use lockkeeper::etcd::Session;
///
/// let session = Session::connect("127.0.0.1:2379").await?;
/// let mutex = session.mutex("nightly-report")?;
/// if let Some(guard) = mutex.lock_timeout(Duration::from_secs(5)).await? {
///     println!("running with fencing token {}", guard.fencing_token());
///     guard.release().await?;
/// } else {
///     println!("someone else is running it");
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Mutex {
    session: Session,
    name: Arc<str>,
    options: HoldOptions,
}

impl Session {
    /// The mutex called `name` (see [`Mutex`]); its keys live under `name/`.
    /// [`Error::InvalidArgument`](crate::Error) for an empty name.
    pub fn mutex(&self, name: &str) -> Result<Mutex> {
        check_name("lock", name)?;
        Ok(Mutex {
            session: self.clone(),
            name: Arc::from(name),
            options: HoldOptions::default(),
        })
    }
}

impl Mutex {
    /// How the lock is held ([`LockOptions`]):
    /// - `max_hold`: each grant is given up that long after it, whatever the holder is doing:
    ///   the guard's `lost()` resolves and `is_held()` turns false at that instant, and the
    ///   key is deleted. That is not a clean release: under lock-delay the next holder waits
    ///   the delay out, since a holder past its maximum hold time is still at work.
    /// - `lock_delay`: after a holder *failed* (lease lost, key deleted) rather than released,
    ///   this handle is not granted the lock until the delay after it saw the key gone, so the
    ///   failed holder's in-flight writes land first. Clean releases by handles with
    ///   lock-delay hand over at once; any other release (etcdctl's, Go's) counts as a
    ///   failure. The record lives in the key `NAME.lock-delay`.
    ///
    /// [`Error::InvalidArgument`](crate::Error) for zero, or for `lease`, `watchdog` and
    /// `keep_through_suspension`, which an etcd lock does not take (its lease is the
    /// session's: see [`SessionBuilder`](crate::etcd::SessionBuilder)).
    pub fn with_options(self, options: LockOptions) -> Result<Mutex> {
        options.apply(self)
    }

    /// The lock's name (its keys' prefix without the `/`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The key this session's holder or waiter has: `NAME/{lease:x}`.
    pub fn key(&self) -> String {
        format!("{}/{:x}", self.name, self.session.lease_id())
    }

    /// Waits until the lock is granted. [`Error::SessionLost`](crate::Error) if the session
    /// is lost meanwhile.
    pub async fn lock(&self) -> Result<LockGuard> {
        let guard = self.acquire(Deadline::Never).await?;
        // Without a deadline the acquisition ends only granted or with an error.
        guard.ok_or(crate::Error::SessionLost)
    }

    /// Takes the lock only if it is free now; `None` if someone else holds it (or another
    /// handle of this session does).
    pub async fn try_lock(&self) -> Result<Option<LockGuard>> {
        self.acquire(Deadline::Now).await
    }

    /// Waits at most `timeout`; `None` if not granted in time (the waiting key is deleted).
    /// A zero timeout is refused: use [`try_lock`](Self::try_lock).
    pub async fn lock_timeout(&self, timeout: Duration) -> Result<Option<LockGuard>> {
        self.acquire(Deadline::after(timeout)?).await
    }

    async fn acquire(&self, deadline: Deadline) -> Result<Option<LockGuard>> {
        let place = Place {
            key: self.key().into_bytes(),
            value: Vec::new(),
            wait_on: format!("{}/", self.name).into_bytes(),
            admits: 0,
            per_session: true,
        };
        acquire(&self.session, &place, &self.options, deadline).await
    }
}

impl Configure for Mutex {
    fn described(&self) -> String {
        format!("the etcd lock {:?}", self.name)
    }

    fn set(&mut self, setting: Setting) -> Result<bool> {
        self.options.set(&self.name, setting, Delay::Taken)
    }
}
