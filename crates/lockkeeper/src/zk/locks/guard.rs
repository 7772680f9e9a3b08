//! The guard every ZooKeeper lock hands out: fencing token, lost-lock signal, release.

use std::sync::Arc;

use crate::error::Result;
use crate::fencing::FencingToken;
use crate::zk::hold::Held;
use crate::zk::locks::owner::{self, Owner};

/// Proof of holding a ZooKeeper lock ([`Mutex`], [`SimpleLock`], a side of [`RwLock`]).
///
/// Dropping it releases (best effort, in a background task); [`release`](LockGuard::release)
/// releases and reports the outcome. Each guard is one count of a reentrant hold: the lock
/// node is deleted when the last guard of its owner goes.
///
/// ```no_run
/// # async fn demo(session: lockkeeper::zk::Session) -> lockkeeper::Result<()> {
/// let mutex = session.mutex("/locks/orders")?;
/// let guard = mutex.lock().await?;
/// let token = guard.fencing_token(); // send it with every write to the protected resource
/// tokio::select! {
///     () = guard.lost() => eprintln!("lock lost: stop writing"),
///     () = tokio::time::sleep(std::time::Duration::from_secs(1)) => {} // the work
/// }
/// guard.release().await?;
/// # let _ = token; Ok(()) }
/// ```
///
/// [`Mutex`]: crate::zk::Mutex
/// [`SimpleLock`]: crate::zk::SimpleLock
/// [`RwLock`]: crate::zk::RwLock
#[must_use = "the lock is released when the guard is dropped"]
pub struct LockGuard {
    owner: Arc<Owner>,
    held: Arc<Held>,
    /// Set once `release` ran, so that `Drop` does not give the count back twice.
    done: bool,
}

impl LockGuard {
    pub(crate) fn new(owner: Arc<Owner>, held: Arc<Held>) -> LockGuard {
        LockGuard {
            owner,
            held,
            done: false,
        }
    }

    /// The czxid of the lock node: strictly increasing across every grant of this lock over
    /// its whole life (zxids only grow, even if the lock's parent is deleted and recreated).
    /// Re-entries share their hold's token.
    pub fn fencing_token(&self) -> FencingToken {
        self.held.token()
    }

    /// Whether the holder can still be sure it holds the lock: not released, node not
    /// deleted, session connected and within its deadline ([`valid_until`]). False while the
    /// session is suspended (it may come back true if the same session reconnects) and forever
    /// after the session expired. Answered from local state, with no round trip: a holder
    /// resumed after a pause longer than its session timeout gets `false` at its first check.
    /// Live: the node is watched from the grant on, so the answer turns false when the
    /// server's deletion event arrives, whether or not anyone awaits [`lost`](LockGuard::lost).
    ///
    /// [`valid_until`]: LockGuard::valid_until
    pub fn is_held(&self) -> bool {
        self.held.is_held()
    }

    /// The instant until which the lock is certainly still held, as far as this process can
    /// know without asking: when the newest request the server answered was sent, plus the
    /// negotiated session timeout, minus an allowance for clock drift (1% + 2 ms). The server
    /// cannot expire the session before then. A heartbeat keeps it about three quarters of a
    /// session timeout ahead while connected (less the drift allowance and a round trip). `None` once [`is_held`](LockGuard::is_held)
    /// is false.
    ///
    /// ```no_run
    /// # async fn demo(session: lockkeeper::zk::Session) -> lockkeeper::Result<()> {
    /// let guard = session.mutex("/locks/orders")?.lock().await?;
    /// // Only start a step that fits in the time the lock is certainly ours.
    /// let step = std::time::Duration::from_secs(2);
    /// match guard.valid_until() {
    ///     Some(until) if tokio::time::Instant::now() + step < until => { /* the step */ }
    ///     _ => eprintln!("not enough certain time left: skip the step"),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn valid_until(&self) -> Option<tokio::time::Instant> {
        self.held.valid_until()
    }

    /// Resolves as soon as the holder can no longer be sure it holds the lock: the session is
    /// suspended, expired or past [`valid_until`](LockGuard::valid_until), or the lock node
    /// was deleted by someone else. Cancel-safe; meant for `tokio::select!` against the work
    /// the lock protects.
    pub async fn lost(&self) {
        self.held.lost().await;
    }

    /// Resolves once a revoker has asked this holder to give the lock up (cooperative
    /// revocation: [`Session::request_revocation`], or Curator's `Revoker.attemptRevoke`). The
    /// holder decides what to do; a revoker that does not want to wait uses
    /// [`Session::revoke`], which deletes the node after a grace period (then [`lost`] fires).
    /// Requests made before this is called count too. Cancel-safe.
    ///
    /// ```no_run
    /// # async fn demo(session: lockkeeper::zk::Session) -> lockkeeper::Result<()> {
    /// let guard = session.mutex("/locks/reindex")?.lock().await?;
    /// tokio::select! {
    ///     () = guard.revocation_requested() => eprintln!("asked to give the lock up: stopping"),
    ///     () = guard.lost() => eprintln!("lock lost"),
    ///     () = tokio::time::sleep(std::time::Duration::from_secs(60)) => {} // the work
    /// }
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// [`Session::request_revocation`]: crate::zk::Session::request_revocation
    /// [`Session::revoke`]: crate::zk::Session::revoke
    /// [`lost`]: LockGuard::lost
    pub async fn revocation_requested(&self) {
        self.held.revocation_requested().await;
    }

    /// The full path of the lock node this guard holds (for logs and inspection).
    pub fn node(&self) -> &str {
        self.held.node()
    }

    /// Gives back this guard's count; deletes the lock node when it was the last.
    ///
    /// [`Error::NotHeld`](crate::Error::NotHeld) if the lock was known to be gone before the
    /// release: released already, the session had ended, or the server found no node. A
    /// release whose answer was lost with the connection and whose retry then finds no node
    /// may have deleted it itself, so it reports success (as Curator does).
    pub async fn release(mut self) -> Result<()> {
        self.done = true;
        owner::release(&self.owner, &self.held).await
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if !self.done {
            owner::release_in_background(&self.owner, &self.held);
        }
    }
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard")
            .field("node", &self.held.node())
            .field("fencing_token", &self.held.token())
            .field("is_held", &self.held.is_held())
            .finish()
    }
}
