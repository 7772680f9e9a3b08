//! [`SimpleQueue`]: Curator's `SimpleDistributedQueue`, the ZooKeeper recipes document's queue:
//! raw bytes in persistent-sequential `{path}/qn-{seq}` nodes; taking reads then deletes.
//!
//! Invariants: an item is returned only by the consumer whose delete removed it (so never
//! twice); a consumer that dies between its delete and its caller loses the item (this queue
//! is at-most-once, like Curator's and kazoo's). Children without the `qn-` prefix are ignored.
//! A blocking take waits on a child watch, never by polling.

use std::time::Duration;

use lockkeeper_zk_client::{CreateMode, CreateOptions};

use crate::deadline::Deadline;
use crate::error::{Error, Result};
use crate::zk::path::validate_node_path;
use crate::zk::session::{Session, is_connection_loss, is_terminal};

const PREFIX: &str = "qn-";

/// The simple distributed queue (Curator's `SimpleDistributedQueue` layout): FIFO of raw
/// bytes, at-most-once.
///
/// ```no_run
/// # async fn demo(session: lockkeeper::zk::Session) -> lockkeeper::Result<()> {
/// let queue = session.simple_queue("/queues/mail")?;
/// queue.offer(b"hello").await?;
/// assert_eq!(queue.peek().await?.as_deref(), Some(&b"hello"[..]));
/// assert_eq!(queue.take().await?, b"hello");
/// assert_eq!(queue.poll().await?, None);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct SimpleQueue {
    session: Session,
    path: String,
}

fn zk_error(err: lockkeeper_zk_client::Error) -> Error {
    if is_terminal(&err) {
        Error::SessionLost
    } else {
        Error::Zk(err)
    }
}

impl SimpleQueue {
    pub(crate) fn new(session: Session, path: &str) -> Result<SimpleQueue> {
        validate_node_path("queue path", path)?;
        Ok(SimpleQueue {
            session,
            path: path.to_owned(),
        })
    }

    /// The queue path.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Adds an item (any bytes, empty included). Not retried after a lost answer (it may or
    /// may not have been queued).
    pub async fn offer(&self, item: &[u8]) -> Result<()> {
        let generation = self.session.connected_generation().await?;
        let client = generation.client()?;
        let node = format!("{}/{PREFIX}", self.path);
        let options = CreateOptions::new(CreateMode::PersistentSequential);
        match client.create(&node, item, &options).await {
            Ok(_) => Ok(()),
            Err(lockkeeper_zk_client::Error::NoNode) => {
                self.ensure_path(&client).await?;
                client
                    .create(&node, item, &options)
                    .await
                    .map_err(zk_error)?;
                Ok(())
            }
            Err(err) => Err(zk_error(err)),
        }
    }

    /// Removes and returns the head, waiting (on a child watch) until there is one.
    pub async fn take(&self) -> Result<Vec<u8>> {
        match self.take_until(Deadline::Never).await? {
            Some(item) => Ok(item),
            None => Err(Error::SessionLost),
        }
    }

    /// Removes and returns the head, waiting at most `timeout`.
    pub async fn take_timeout(&self, timeout: Duration) -> Result<Option<Vec<u8>>> {
        self.take_until(Deadline::after(timeout)?).await
    }

    /// Removes and returns the head if there is one.
    pub async fn poll(&self) -> Result<Option<Vec<u8>>> {
        self.take_until(Deadline::Now).await
    }

    /// Returns the head without removing it.
    pub async fn peek(&self) -> Result<Option<Vec<u8>>> {
        let generation = self.session.connected_generation().await?;
        let path = self.path.as_str();
        let found = generation
            .retry(|client| async move {
                let children = match client.list_children(path).await {
                    Ok(children) => children,
                    Err(lockkeeper_zk_client::Error::NoNode) => return Ok(None),
                    Err(err) => return Err(err),
                };
                for name in sorted_items(children) {
                    match client.get_data(&format!("{path}/{name}")).await {
                        Ok((data, _)) => return Ok(Some(data)),
                        Err(lockkeeper_zk_client::Error::NoNode) => continue,
                        Err(err) => return Err(err),
                    }
                }
                Ok(None)
            })
            .await?;
        Ok(found)
    }

    async fn ensure_path(&self, client: &lockkeeper_zk_client::Client) -> Result<()> {
        // Curator makes the path with containers, which the server removes once empty.
        let options = CreateOptions::new(CreateMode::Container);
        match client.mkdir(&self.path, &options).await {
            Ok(()) | Err(lockkeeper_zk_client::Error::NodeExists) => Ok(()),
            Err(err) => Err(zk_error(err)),
        }
    }

    async fn take_until(&self, deadline: Deadline) -> Result<Option<Vec<u8>>> {
        loop {
            let generation = match deadline {
                Deadline::Now => self.session.connected_generation().await?,
                _ => tokio::select! {
                    generation = self.session.connected_generation() => generation?,
                    () = deadline.sleep() => return Ok(None),
                },
            };
            let client = generation.client()?;
            let (children, watch) = match client.list_and_watch_children(&self.path).await {
                Ok(found) => found,
                Err(lockkeeper_zk_client::Error::NoNode) => {
                    self.ensure_path(&client).await?;
                    continue;
                }
                Err(err) if is_terminal(&err) && !matches!(deadline, Deadline::Now) => continue,
                Err(err) => return Err(zk_error(err)),
            };
            for name in sorted_items(children) {
                let node = format!("{}/{name}", self.path);
                // Read and delete pipelined: the item is ours only if our delete removed it.
                let (read, deleted) =
                    tokio::join!(client.get_data(&node), client.delete(&node, None));
                match (read, deleted) {
                    (Ok((data, _)), Ok(())) => return Ok(Some(data)),
                    (_, Err(lockkeeper_zk_client::Error::NoNode)) => continue,
                    (_, Err(err)) if is_connection_loss(&err) => {
                        tracing::warn!(node, "delete answer lost: the item may be lost");
                        continue;
                    }
                    (_, Err(err)) => return Err(zk_error(err)),
                    (Err(err), Ok(())) => {
                        tracing::warn!(node, %err, "item removed but its read failed: lost");
                        continue;
                    }
                }
            }
            if deadline.passed() {
                return Ok(None);
            }
            tokio::select! {
                _ = watch.changed() => {}
                () = deadline.sleep() => return Ok(None),
                () = generation.ended() => {}
            }
        }
    }
}

fn sorted_items(mut children: Vec<String>) -> Vec<String> {
    children.retain(|name| name.starts_with(PREFIX));
    children.sort();
    children
}
