//! Operations on single nodes that every recipe shares: reading a lock node, creating a lock
//! directory's parents, and deleting a node on release.
//!
//! This is the layer under the recipes: the lock queue, the holds and the simple lock all use
//! it, and it uses nothing of theirs.
//!
//! Deleting on release has one subtlety. After a connection loss the delete is retried, and a
//! retry cannot tell "my first attempt deleted it" from "it was already gone": both answer
//! NoNode. The first means the lock was held until released; only the second means it was lost
//! before. So a delete reports `NotHeld` only when it *knows* the node was gone before its
//! delete reached the server (the first answer is NoNode, or the session had ended before the
//! delete was sent); after an attempt whose answer was lost, NoNode or the session's end
//! counts as released, as Curator treats NoNode on release.

use std::sync::atomic::{AtomicBool, Ordering};

use lockkeeper_zk_client::{Client, CreateMode, CreateOptions, OneshotWatcher, Stat};

use crate::error::{Error, Result};
use crate::zk::session::{Generation, is_connection_loss, is_terminal};

/// What one delete found, before the caller maps it to its outcome.
enum Deleted {
    /// Deleted by this call.
    Now,
    /// NoNode (or a version that no longer matches).
    Missing,
}

/// Deletes `node` (at `version`, or any version), retrying connection losses. `Ok` if the
/// node is gone because of this call or may be; `NotHeld` if it was gone before (see the
/// module docs).
async fn delete(generation: &Generation, node: &str, version: Option<i32>) -> Result<()> {
    // Set when an attempt's answer was lost: from then on the delete may have happened.
    let unanswered = AtomicBool::new(false);
    let result = generation
        .retry(|client| {
            let unanswered = &unanswered;
            async move {
                match client.delete(node, version).await {
                    Ok(()) => Ok(Deleted::Now),
                    Err(
                        lockkeeper_zk_client::Error::NoNode
                        | lockkeeper_zk_client::Error::BadVersion,
                    ) => Ok(Deleted::Missing),
                    Err(err) => {
                        if is_connection_loss(&err) {
                            unanswered.store(true, Ordering::Release);
                        }
                        Err(err)
                    }
                }
            }
        })
        .await;
    let maybe_deleted = unanswered.load(Ordering::Acquire);
    match result {
        Ok(Deleted::Now) => Ok(()),
        Ok(Deleted::Missing) | Err(Error::SessionLost) if maybe_deleted => {
            tracing::debug!(
                node,
                "a delete whose answer was lost went through (or the node went with it)"
            );
            Ok(())
        }
        Ok(Deleted::Missing) | Err(Error::SessionLost) => Err(Error::NotHeld),
        Err(err) => Err(err),
    }
}

/// Deletes one lock node this session created. `NotHeld` if it was gone before.
pub(crate) async fn delete_node(generation: &Generation, node: &str) -> Result<()> {
    delete(generation, node, None).await
}

/// Deletes `node` if it is still the one carrying `ours` in this session; `NotHeld` if it is
/// gone or belongs to someone else now. For node names every holder reuses (a simple lock's
/// `{path}/lock`): the read and the versioned delete leave a window only to a third party
/// deleting our node and someone creating theirs in between.
pub(crate) async fn delete_if_ours(generation: &Generation, node: &str, ours: &[u8]) -> Result<()> {
    let found = match look(generation, node, false).await {
        Ok(found) => found,
        Err(Error::SessionLost) => return Err(Error::NotHeld),
        Err(err) => return Err(err),
    };
    let Some((data, stat, _)) = found else {
        return Err(Error::NotHeld);
    };
    if !is_ours(generation, ours, &data, &stat) {
        return Err(Error::NotHeld);
    }
    delete(generation, node, Some(stat.version)).await
}

/// Whether a node read back is the one an acquisition created: same session, same data (the
/// data carries the acquisition's uuid, so another handle of the session does not match).
pub(crate) fn is_ours(generation: &Generation, ours: &[u8], data: &[u8], stat: &Stat) -> bool {
    stat.ephemeral_owner == generation.session_id() && data == ours
}

/// Reads `node` (setting a data watch on it when `watch`); `None` if it does not exist, in
/// which case no watch is left behind.
pub(crate) async fn look(
    generation: &Generation,
    node: &str,
    watch: bool,
) -> Result<Option<(Vec<u8>, Stat, Option<OneshotWatcher>)>> {
    generation
        .retry(|client| async move {
            let read = if watch {
                client
                    .get_and_watch_data(node)
                    .await
                    .map(|(data, stat, watcher)| (data, stat, Some(watcher)))
            } else {
                client
                    .get_data(node)
                    .await
                    .map(|(data, stat)| (data, stat, None))
            };
            match read {
                Ok(found) => Ok(Some(found)),
                Err(lockkeeper_zk_client::Error::NoNode) => Ok(None),
                Err(err) => Err(err),
            }
        })
        .await
}

/// Creates `path` with `data` in `mode` (world-accessible), retrying connection losses;
/// `false` if a node was already there. A create retried after a lost answer may find its own
/// node: callers that must tell read the node back (its owner, its data).
pub(crate) async fn create_unless_exists(
    generation: &Generation,
    path: &str,
    data: &[u8],
    mode: CreateMode,
) -> Result<bool> {
    let options = CreateOptions::new(mode);
    let options = &options;
    generation
        .retry(|client| async move {
            match client.create(path, data, options).await {
                Ok(_) => Ok(true),
                Err(lockkeeper_zk_client::Error::NodeExists) => Ok(false),
                Err(err) => Err(err),
            }
        })
        .await
}

/// Creates the missing ancestors of a lock directory as containers, as Curator does, so the
/// server removes them once their last lock node is gone.
pub(crate) async fn create_parents(client: &Client, dir: &str) -> Result<()> {
    let options = CreateOptions::new(CreateMode::Container);
    match client.mkdir(dir, &options).await {
        Ok(()) => Ok(()),
        Err(err) if is_terminal(&err) => Err(Error::SessionLost),
        // A connection loss is handled by the create that follows.
        Err(err) if is_connection_loss(&err) => Ok(()),
        Err(err) => Err(Error::Zk(err)),
    }
}
