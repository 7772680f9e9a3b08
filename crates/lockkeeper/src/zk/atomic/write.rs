//! Writing a counter node against the state it was read in, without ever writing twice.
//!
//! Every counter update is read-compute-write: the write is a `setData` at the version read
//! (or a `create` if the node was absent), so a concurrent writer makes it fail (BadVersion,
//! NodeExists, NoNode) instead of being overwritten. That is the whole of the atomicity.
//!
//! A connection loss while such a write is in flight leaves its outcome unknown. Curator and
//! kazoo retry the whole update then, and if the lost write had in fact been applied the retry
//! applies the delta a second time. Here the node is read again instead: if it is still exactly
//! as it was read (same version, or still absent) the write cannot have been applied and is
//! sent again; if it changed, nobody can tell our write from another client's, so the call
//! fails with the connection-loss error (or `SessionLost`) rather than guess. An update is
//! therefore applied once or not at all, and the caller is told when it cannot know which.

use lockkeeper_zk_client::{CreateMode, CreateOptions, Stat};
use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::zk::node::{create_parents, look};
use crate::zk::session::{Session, is_connection_loss, is_terminal};

/// The state of the node a new value was computed from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Base {
    /// There was no node: create it.
    Absent,
    /// The node was at this version: set it at this version.
    Version(i32),
    /// Whatever the node's version: set it unconditionally (it must exist).
    Any,
}

impl Base {
    pub(super) fn of(stat: Option<&Stat>) -> Base {
        stat.map_or(Base::Absent, |stat| Base::Version(stat.version))
    }
}

/// What a conditional write did.
#[derive(Debug)]
pub(super) enum Written {
    /// Applied; the node's new stat.
    Applied(Stat),
    /// Someone else changed (or created, or deleted) the node since it was read.
    Overtaken,
}

/// Writes `data` to `path` if the node is still in the state `base`; see the module docs for
/// what a connection loss does.
pub(super) async fn write_if(
    session: &Session,
    path: &str,
    base: Base,
    data: &[u8],
) -> Result<Written> {
    let policy = session.generation().retry_policy();
    let mut attempt = 1;
    loop {
        // The current generation each time: a write proved unapplied may be sent again in
        // the session that replaced a lost one.
        let generation = session.generation();
        let client = generation.client()?;
        let sent = Instant::now();
        let answer = match base {
            Base::Absent => create(&client, path, data).await?,
            Base::Version(version) => client.set_data(path, data, Some(version)).await,
            Base::Any => client.set_data(path, data, None).await,
        };
        let lost = match answer {
            Ok(stat) => {
                generation.heard_at(sent);
                return Ok(Written::Applied(stat));
            }
            Err(
                lockkeeper_zk_client::Error::BadVersion
                | lockkeeper_zk_client::Error::NodeExists
                | lockkeeper_zk_client::Error::NoNode,
            ) => {
                generation.heard_at(sent);
                return Ok(Written::Overtaken);
            }
            Err(err) if is_connection_loss(&err) || is_terminal(&err) => err,
            Err(err) => {
                generation.heard_at(sent);
                return Err(Error::Zk(err));
            }
        };
        if !unchanged(session, path, base).await {
            tracing::debug!(path, %lost, "a counter write whose answer was lost may have been applied");
            return Err(if is_terminal(&lost) {
                Error::SessionLost
            } else {
                Error::Zk(lost)
            });
        }
        if attempt >= policy.max_attempts() {
            return Err(Error::RetriesExhausted {
                attempts: attempt,
                last: lost,
            });
        }
        tokio::select! {
            () = tokio::time::sleep(policy.delay(attempt)) => {}
            () = generation.ended() => return Err(Error::SessionLost),
        }
        attempt += 1;
    }
}

/// Whether the node is provably still in the state `base` (a failed read proves nothing), so
/// that sending the write again cannot apply it twice. An unconditional set is always safe to
/// send again: applying it twice leaves what applying it once does.
async fn unchanged(session: &Session, path: &str, base: Base) -> bool {
    if base == Base::Any {
        return true;
    }
    match look(&session.generation(), path, false).await {
        Ok(None) => base == Base::Absent,
        Ok(Some((_, stat, _))) => base == Base::Version(stat.version),
        Err(_) => false,
    }
}

/// Creates the counter node with `data`, its missing parents as containers (as Curator's
/// `creatingParentContainersIfNeeded` does), the node itself persistent. The outer `Result`
/// is a failure to create the parents; the inner one is the create's own answer.
async fn create(
    client: &lockkeeper_zk_client::Client,
    path: &str,
    data: &[u8],
) -> Result<std::result::Result<Stat, lockkeeper_zk_client::Error>> {
    let options = CreateOptions::new(CreateMode::Persistent);
    match client.create(path, data, &options).await {
        Err(lockkeeper_zk_client::Error::NoNode) => {
            if let Some(parent) = parent(path) {
                create_parents(client, parent).await?;
            }
            Ok(client
                .create(path, data, &options)
                .await
                .map(|(stat, _)| stat))
        }
        answer => Ok(answer.map(|(stat, _)| stat)),
    }
}

/// The parent of an absolute path, `None` for a node at the root (which always exists).
fn parent(path: &str) -> Option<&str> {
    match path.rfind('/') {
        Some(0) | None => None,
        Some(i) => Some(&path[..i]),
    }
}
