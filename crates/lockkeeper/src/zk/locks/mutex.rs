//! [`Mutex`]: the fair, herd-free ZooKeeper lock (Curator's `InterProcessMutex`).

use std::sync::Arc;
use std::time::Duration;

use crate::deadline::Deadline;
use crate::error::Result;
use crate::options::{Configure, Delay, LockOptions, Setting};
use crate::zk::hold::HoldOptions;
use crate::zk::locks::guard::LockGuard;
use crate::zk::locks::line::{LOCK_MARKER, Line, predecessor_rule};
use crate::zk::locks::owner::Owner;
use crate::zk::path::validate_lock_path;
use crate::zk::session::Session;

/// A distributed mutual-exclusion lock: the ZooKeeper lock recipe, with Curator's
/// `InterProcessMutex` node layout so Java services using Curator and Rust services using
/// lockkeeper can share one lock path.
///
/// - **Fair**: grants follow the order of arrival (sequence numbers).
/// - **Herd-free**: each waiter watches the node just before it, and the one before that so
///   it can list again early, so a release wakes at most two waiters. Without lock-delay, the
///   next holder is usually granted on the release's notification alone, with no request
///   after it.
/// - **Reentrant per handle**: `lock()` on a handle (or a clone) that holds the lock re-enters
///   without a round trip; the node goes when the last guard does. Separate handles from
///   [`Session::mutex`] exclude each other, even in one session.
/// - **Cancel-safe**: dropping a `lock()` future, a timeout, or an error deletes the waiter's
///   node, so no abandoned node blocks the queue.
///
/// ```no_run
/// # async fn demo() -> lockkeeper::Result<()> {
/// use std::time::Duration;
/// use lockkeeper::zk::Session;
///
/// let session = Session::connect("127.0.0.1:2181").await?;
/// let mutex = session.mutex("/locks/nightly-report")?;
/// if let Some(guard) = mutex.lock_timeout(Duration::from_secs(5)).await? {
///     println!("running with fencing token {}", guard.fencing_token());
///     guard.release().await?;
/// } else {
///     println!("someone else is running it");
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Mutex {
    session: Session,
    queue: Line,
    owner: Arc<Owner>,
    options: HoldOptions,
}

impl Mutex {
    pub(crate) fn new(session: Session, path: &str) -> Result<Mutex> {
        validate_lock_path(path)?;
        Ok(Mutex {
            session,
            queue: Line {
                dir: path.to_owned(),
                marker: LOCK_MARKER,
                markers: &[LOCK_MARKER],
            },
            owner: Arc::default(),
            options: HoldOptions::default(),
        })
    }

    /// How the lock is held ([`LockOptions`]): this lock takes
    /// - `max_hold`: each grant is given up that long after it, whatever the holder is doing:
    ///   [`lost`](LockGuard::lost) resolves, [`is_held`](LockGuard::is_held) turns false and
    ///   the node is deleted. Re-entries share the first grant's limit.
    /// - `lock_delay`: when a holder *failed* (its session expired, its node was deleted by a
    ///   revocation, it hit its maximum hold time) rather than released, this handle is not
    ///   granted the lock until the delay after it saw the node gone. A clean release by a
    ///   holder with lock-delay hands over at once; a release by any other holder (Curator's,
    ///   or a handle without lock-delay) counts as a failure. Give every handle the same delay.
    /// - `keep_through_suspension`: the guard survives a suspended connection that comes back
    ///   to the same session before the session could have expired on the server (a network
    ///   blip, a ZooKeeper member restarting): [`lost`](LockGuard::lost) then resolves only
    ///   when the session ends, its deadline passes, or the node is deleted. The default, as
    ///   Curator advises for SUSPENDED, counts every suspension as a loss; while suspended the
    ///   job may be running after the server expired the session, and the fencing token is
    ///   what protects the resource then.
    ///
    /// [`Error::InvalidArgument`](crate::Error) for a zero duration or an option this lock
    /// does not take (`lease`, `watchdog`); options left unset keep this handle's.
    ///
    /// ```no_run
    /// # async fn demo(session: lockkeeper::zk::Session) -> lockkeeper::Result<()> {
    /// use std::time::Duration;
    /// use lockkeeper::LockOptions;
    ///
    /// let options = LockOptions::new()
    ///     .max_hold(Duration::from_secs(60))
    ///     .lock_delay(Duration::from_secs(5));
    /// let mutex = session.mutex("/locks/ledger")?.with_options(options)?;
    /// let guard = mutex.lock().await?; // 5 s after a failed holder's node went, at the soonest
    /// guard.release().await?; // clean: the next holder starts at once
    /// # Ok(()) }
    /// ```
    pub fn with_options(self, options: LockOptions) -> Result<Mutex> {
        options.apply(self)
    }

    /// The lock path (the parent of the lock nodes).
    pub fn path(&self) -> &str {
        &self.queue.dir
    }

    /// Waits until the lock is granted.
    pub async fn lock(&self) -> Result<LockGuard> {
        let guard = self.acquire(Deadline::Never).await?;
        // With no deadline the acquisition only ends granted or with an error.
        guard.ok_or(crate::Error::SessionLost)
    }

    /// Takes the lock only if it is free now; `None` if someone else holds it.
    pub async fn try_lock(&self) -> Result<Option<LockGuard>> {
        self.acquire(Deadline::Now).await
    }

    /// Waits at most `timeout`; `None` if the lock was not granted in time (the waiting node
    /// is deleted before this returns). A zero timeout is refused: use [`try_lock`](Self::try_lock).
    pub async fn lock_timeout(&self, timeout: Duration) -> Result<Option<LockGuard>> {
        self.acquire(Deadline::after(timeout)?).await
    }

    /// How many guards this handle holds (its reentrancy count); 0 when it does not hold.
    pub fn hold_count(&self) -> usize {
        self.owner.count()
    }

    async fn acquire(&self, deadline: Deadline) -> Result<Option<LockGuard>> {
        let held = self
            .owner
            .lock(deadline, || {
                self.queue
                    .acquire_with(&self.session, &predecessor_rule, deadline, self.options)
            })
            .await?;
        Ok(held.map(|held| LockGuard::new(self.owner.clone(), held)))
    }
}

impl std::fmt::Debug for Mutex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mutex")
            .field("path", &self.queue.dir)
            .field("hold_count", &self.owner.count())
            .finish()
    }
}

impl Configure for Mutex {
    fn described(&self) -> String {
        format!("the lock {:?}", self.queue.dir)
    }

    fn set(&mut self, setting: Setting) -> Result<bool> {
        self.options.set(&self.queue.dir, setting, Delay::Taken)
    }
}
