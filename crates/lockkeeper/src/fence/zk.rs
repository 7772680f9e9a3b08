//! The ZooKeeper fence: a znode written only while the writer's lock node exists, and only
//! with a token at least the one stored in it.
//!
//! Layout: the fenced node's data is the token (8 bytes, big-endian) followed by the value.
//!
//! A write reads the node (its token and version), refuses a lower token, and otherwise
//! commits one multi: a check that the lock node exists (any version) and a `setData` at the
//! version read (a `create` if there was no node). The multi is all or nothing, so:
//! - a writer whose lock node is gone (its session expired, or the lock was revoked) writes
//!   nothing and gets [`Error::NotHeld`], even before its guard noticed;
//! - a writer overtaken between its read and its multi (the version moved) reads again, so
//!   the token comparison always sees the latest write: no lost update.
//!
//! Either condition alone fences: the lock-node check needs no token, the token comparison
//! protects writers whose locks are not ZooKeeper nodes. Retrying after a lost answer is safe:
//! if the first attempt applied, the retry finds its own token stored and writes the same
//! value again. (If a newer holder wrote in between, the retry is refused although the first
//! attempt took effect before the newer write: the stored state is right, the outcome reports
//! the later refusal.)

use lockkeeper_zk_client::{Client, CreateMode, CreateOptions, Error as ZkError, MultiWriteError};

use super::Outcome;
use crate::zk::path::validate_node_path;
use crate::zk::{LockGuard, Session};
use crate::{Error, FencingToken, Result};

/// How many times a write re-reads after being overtaken before giving up with
/// [`Error::Contended`]. Each overtaking is another writer's accepted write, so a writer
/// exhausting this is one among many writing the same node at once.
const ATTEMPTS: u32 = 100;

/// The length of the token prefix of a fenced node's data.
const TOKEN_LEN: usize = 8;

/// One fenced znode.
///
/// ```no_run
/// # async fn demo(session: lockkeeper::zk::Session) -> lockkeeper::Result<()> {
/// use lockkeeper::fence::{Outcome, ZkFence};
///
/// let fence = ZkFence::new(&session, "/resources/orders")?;
/// let guard = session.mutex("/locks/orders")?.lock().await?;
/// // Written only while guard's lock node exists and no newer token wrote first.
/// assert_eq!(fence.write(&guard, b"v2").await?, Outcome::Accepted);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct ZkFence {
    session: Session,
    path: String,
}

impl ZkFence {
    /// A fence on the node at `path` (created on the first write, with its missing parents).
    /// [`Error::InvalidArgument`] for a path that is empty, relative, the root, under
    /// `/zookeeper`, or otherwise malformed.
    pub fn new(session: &Session, path: &str) -> Result<ZkFence> {
        check_path(path)?;
        Ok(ZkFence {
            session: session.clone(),
            path: path.to_owned(),
        })
    }

    /// The fenced node's path.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Writes `value` under `guard`: its lock node must still exist and its token must be at
    /// least the stored one. [`Error::NotHeld`] if the lock node is gone (nothing written).
    pub async fn write(&self, guard: &LockGuard, value: &[u8]) -> Result<Outcome> {
        self.write_checked(guard.node(), guard.fencing_token(), value)
            .await
    }

    /// [`write`](ZkFence::write) for a holder that is not a [`LockGuard`] (a Curator client's
    /// lock node, a semaphore lease, a leader's node): the write happens only while
    /// `lock_node` exists and `token` is at least the stored one.
    ///
    /// Waits while the session is suspended (the write goes to the server once it is
    /// connected again); [`Error::Contended`] if 100 writes in a row overtook this one
    /// between its read and its multi.
    pub async fn write_checked(
        &self,
        lock_node: &str,
        token: FencingToken,
        value: &[u8],
    ) -> Result<Outcome> {
        check_lock_node(lock_node)?;
        let mut data = Vec::with_capacity(TOKEN_LEN + value.len());
        data.extend_from_slice(&token.get().to_be_bytes());
        data.extend_from_slice(value);
        let generation = self.session.connected_generation().await?;
        for _ in 0..ATTEMPTS {
            let found = generation
                .retry(|client| read_node(client, &self.path))
                .await?;
            let version = match found {
                Some((data, version)) => {
                    let (stored, _) = self.decode(&data)?;
                    if stored > token {
                        return Ok(Outcome::Refused { highest: stored });
                    }
                    Some(version)
                }
                None => None,
            };
            let committed = generation
                .retry(|client| {
                    let data = &data;
                    async move {
                        let create = CreateOptions::new(CreateMode::Persistent);
                        if version.is_none()
                            && let Some((parent, _)) = self.path.rsplit_once('/')
                            && !parent.is_empty()
                        {
                            match client.mkdir(parent, &create).await {
                                Ok(()) | Err(ZkError::NodeExists) => {}
                                Err(err) => return Err(err),
                            }
                        }
                        let mut multi = client.multi();
                        multi.add_check_version(lock_node, -1)?;
                        match version {
                            Some(version) => multi.add_set_data(&self.path, data, Some(version))?,
                            None => multi.add_create(&self.path, data, &create)?,
                        }
                        match multi.commit().await {
                            Ok(_) => Ok(Committed::Written),
                            Err(MultiWriteError::OperationFailed {
                                index: 0,
                                source: ZkError::NoNode,
                            }) => Ok(Committed::LockGone),
                            Err(MultiWriteError::OperationFailed {
                                index: 1,
                                source: ZkError::BadVersion | ZkError::NoNode | ZkError::NodeExists,
                            }) => Ok(Committed::Overtaken),
                            Err(err) => Err(err.into()),
                        }
                    }
                })
                .await?;
            match committed {
                Committed::Written => return Ok(Outcome::Accepted),
                Committed::LockGone => return Err(Error::NotHeld),
                Committed::Overtaken => {}
            }
        }
        Err(Error::Contended {
            path: self.path.clone(),
            attempts: ATTEMPTS,
        })
    }

    /// The stored token and value; `None` before the first write.
    pub async fn read(&self) -> Result<Option<(FencingToken, Vec<u8>)>> {
        let generation = self.session.connected_generation().await?;
        let found = generation
            .retry(|client| read_node(client, &self.path))
            .await?;
        found.map(|(data, _)| self.decode(&data)).transpose()
    }

    /// Decodes the fenced node's data into its token and value.
    fn decode(&self, data: &[u8]) -> Result<(FencingToken, Vec<u8>)> {
        let Some((token, value)) = data.split_first_chunk::<TOKEN_LEN>() else {
            return Err(Error::InvalidArgument(format!(
                "fence path {:?} holds {} bytes, not a token and a value: it is not a fenced node",
                self.path,
                data.len()
            )));
        };
        Ok((
            FencingToken::new(u64::from_be_bytes(*token)),
            value.to_vec(),
        ))
    }
}

/// What one multi did.
enum Committed {
    Written,
    /// The lock node did not exist.
    LockGone,
    /// The fenced node changed since it was read.
    Overtaken,
}

/// The data and version of `path`; `None` if there is no node.
async fn read_node(
    client: Client,
    path: &str,
) -> std::result::Result<Option<(Vec<u8>, i32)>, ZkError> {
    match client.get_data(path).await {
        Ok((data, stat)) => Ok(Some((data, stat.version))),
        Err(ZkError::NoNode) => Ok(None),
        Err(err) => Err(err),
    }
}

/// Checks the fenced node's path before anything is sent, naming it in the error (the
/// client library's own check names no argument): the recipes' own check.
fn check_path(path: &str) -> Result<()> {
    validate_node_path("fence path", path)
}

/// Checks the lock node a write is conditioned on.
fn check_lock_node(node: &str) -> Result<()> {
    validate_node_path("lock node", node)
}
