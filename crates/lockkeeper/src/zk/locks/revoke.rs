//! Revoking a lock that someone else holds: cooperatively, Curator's way, or by force, the
//! recipes document's way.
//!
//! - **Cooperative**: the revoker writes `__REVOKE__` to the holder's node (what Curator's
//!   `Revoker.attemptRevoke` writes and what a Curator holder that called `makeRevocable`
//!   listens for); a lockkeeper holder hears it on
//!   [`LockGuard::revocation_requested`](crate::zk::LockGuard::revocation_requested) and
//!   decides. Nothing happens to a holder that does not listen.
//! - **Forced**: the revoker asks, waits a grace period for the holder to release, then
//!   deletes the node itself. The next waiter is granted at once; the old holder's guard sees
//!   its node deleted (`lost()` fires when it is connected to hear it), and its fencing token
//!   is now lower than the next holder's, so a resource that checks tokens refuses its late
//!   writes. That is the only protection from a holder that is paused or partitioned while its
//!   node is deleted: the revoker cannot make it stop, only make its writes stale.
//!
//! Both work on the node of one holder (a path from [`Session::inspect`]): a lock path may
//! have several holders (readers, leases), and which of them to revoke is the caller's choice.
//! A revocation request rewrites the node's data, which [`SimpleLock`](crate::zk::SimpleLock)
//! uses to recognise its own node: revoke mutexes and read-write locks, whose nodes are named
//! by their holders.

use std::time::Duration;

use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::zk::hold::REVOKE_MESSAGE;
use crate::zk::path::validate_node_path;
use crate::zk::session::{Generation, Session};

/// What a forced [`Session::revoke`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Revoked {
    /// There was no such node: nobody held through it.
    AlreadyGone,
    /// The holder released within the grace period.
    Released,
    /// The grace period passed and the revoker deleted the node.
    Deleted,
}

impl Session {
    /// Asks the holder of the lock node `node` to give the lock up, as Curator's
    /// `Revoker.attemptRevoke` does: `true` if the request was written, `false` if the node
    /// is gone. Cooperative: the holder decides (see
    /// [`LockGuard::revocation_requested`](crate::zk::LockGuard::revocation_requested)).
    ///
    /// ```no_run
    /// # async fn demo(session: lockkeeper::zk::Session) -> lockkeeper::Result<()> {
    /// let inspection = session.inspect("/locks/reindex").await?;
    /// for holder in inspection.holders() {
    ///     session.request_revocation(&holder.path).await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn request_revocation(&self, node: &str) -> Result<bool> {
        validate_node_path("lock node", node)?;
        let generation = self.connected_generation().await?;
        request(&generation, node).await
    }

    /// Revokes the lock held through `node` by force: asks the holder (as
    /// [`request_revocation`](Session::request_revocation) does), waits up to `grace` for it to
    /// release, then deletes the node. A zero grace deletes at once.
    ///
    /// ```no_run
    /// # async fn demo(session: lockkeeper::zk::Session, node: &str) -> lockkeeper::Result<()> {
    /// use std::time::Duration;
    /// use lockkeeper::zk::Revoked;
    ///
    /// match session.revoke(node, Duration::from_secs(5)).await? {
    ///     Revoked::Deleted => eprintln!("the holder did not let go: its node was deleted"),
    ///     Revoked::Released => eprintln!("the holder released in time"),
    ///     Revoked::AlreadyGone => eprintln!("nobody held through {node}"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn revoke(&self, node: &str, grace: Duration) -> Result<Revoked> {
        validate_node_path("lock node", node)?;
        let generation = self.connected_generation().await?;
        if !request(&generation, node).await? {
            return Ok(Revoked::AlreadyGone);
        }
        if released_within(&generation, node, Instant::now() + grace).await? {
            return Ok(Revoked::Released);
        }
        let deleted = generation
            .retry(|client| async move {
                match client.delete(node, None).await {
                    Ok(()) => Ok(true),
                    Err(lockkeeper_zk_client::Error::NoNode) => Ok(false),
                    Err(err) => Err(err),
                }
            })
            .await?;
        // A delete retried after a lost answer may find its own work done: either way the
        // holder no longer holds, and it did not release in the grace period.
        tracing::info!(node, deleted, "lock revoked by force");
        Ok(if deleted {
            Revoked::Deleted
        } else {
            Revoked::Released
        })
    }
}

/// Writes the revocation request; `false` if the node is gone.
async fn request(generation: &Generation, node: &str) -> Result<bool> {
    generation
        .retry(|client| async move {
            match client.set_data(node, REVOKE_MESSAGE, None).await {
                Ok(_) => Ok(true),
                Err(lockkeeper_zk_client::Error::NoNode) => Ok(false),
                Err(err) => Err(err),
            }
        })
        .await
        .map_err(|err| match err {
            Error::Zk(lockkeeper_zk_client::Error::NoAuth) => {
                Error::InvalidArgument(format!("lock node {node:?}: not allowed to write it (ACL)"))
            }
            other => other,
        })
}

/// Waits until `node` is gone (`true`) or `until` has passed (`false`).
async fn released_within(generation: &Generation, node: &str, until: Instant) -> Result<bool> {
    loop {
        let (stat, watcher) = generation
            .retry(|client| async move { client.check_and_watch_stat(node).await })
            .await?;
        if stat.is_none() {
            return Ok(true);
        }
        tokio::select! {
            _ = watcher.changed() => {}
            () = tokio::time::sleep_until(until) => return Ok(false),
            () = generation.ended() => return Err(Error::SessionLost),
        }
    }
}
