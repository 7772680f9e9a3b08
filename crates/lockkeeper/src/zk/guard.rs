//! The guard every ZooKeeper lock hands out: fencing token, lost-lock signal, release.

use std::sync::Arc;

use crate::error::Result;
use crate::fencing::FencingToken;
use crate::zk::hold::Held;
use crate::zk::owner::{self, Owner};

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
    /// deleted, session connected. False while the session is suspended (it may come back
    /// true if the same session reconnects) and forever after the session expired.
    pub fn is_held(&self) -> bool {
        self.held.is_held()
    }

    /// Resolves as soon as the holder can no longer be sure it holds the lock: the session is
    /// suspended or expired, or the lock node was deleted by someone else. Cancel-safe; meant
    /// for `tokio::select!` against the work the lock protects.
    pub async fn lost(&self) {
        self.held.lost().await
    }

    /// The full path of the lock node this guard holds (for logs and inspection).
    pub fn node(&self) -> &str {
        self.held.node()
    }

    /// Gives back this guard's count; deletes the lock node when it was the last.
    ///
    /// [`Error::NotHeld`](crate::Error::NotHeld) if the lock was no longer held: the session
    /// expired, or the node was deleted by someone else.
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
