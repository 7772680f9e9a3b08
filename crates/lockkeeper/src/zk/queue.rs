//! Queues: Curator's `DistributedQueue` (with at-least-once and at-most-once consumption),
//! `DistributedPriorityQueue` and `SimpleDistributedQueue`, on their Curator node layouts so
//! Java producers and Rust consumers (and the reverse) share one queue.
//!
//! - [`DistributedQueue`]: items `{path}/queue-{seq}` (persistent sequential) holding Curator's
//!   item envelope; consumed in either [`Delivery`] mode (see `items` for the invariants).
//! - [`PriorityQueue`]: the same with Curator's priority encoding in the node name.
//! - [`SimpleQueue`]: `{path}/qn-{seq}` holding raw bytes; taking removes.
//!
//! Every blocking take waits on child watches, never by polling. Files: `envelope` (the codec),
//! `items` (layout, puts, taking), `priority`, `simple`.

mod envelope;
mod items;
mod priority;
mod simple;

use std::sync::Arc;
use std::time::Duration;

pub use items::{Delivery, Taken};
pub use priority::PriorityQueue;
pub use simple::SimpleQueue;

use crate::deadline::Deadline;
use crate::error::{Error, Result};
use crate::zk::path::validate_node_path;
use crate::zk::session::Session;
use items::{ITEM_PREFIX, Items};

impl Session {
    /// A [`DistributedQueue`] at `path` (Curator's `DistributedQueue` layout); at-least-once
    /// consumers lock items under `{path}-locks` unless [`DistributedQueue::with_lock_path`]
    /// says otherwise.
    pub fn distributed_queue(&self, path: &str) -> Result<DistributedQueue> {
        DistributedQueue::new(self.clone(), path)
    }

    /// A [`PriorityQueue`] at `path` (Curator's `DistributedPriorityQueue` layout).
    pub fn priority_queue(&self, path: &str) -> Result<PriorityQueue> {
        Ok(PriorityQueue::new(DistributedQueue::new(
            self.clone(),
            path,
        )?))
    }

    /// A [`SimpleQueue`] at `path` (Curator's `SimpleDistributedQueue` layout).
    pub fn simple_queue(&self, path: &str) -> Result<SimpleQueue> {
        SimpleQueue::new(self.clone(), path)
    }
}

/// A distributed FIFO queue with Curator's `DistributedQueue` layout: a Java producer's items
/// are consumed here and ours by a Curator consumer.
///
/// Producers [`put`](DistributedQueue::put) (one node per item; [`put_all`](
/// DistributedQueue::put_all) creates many in one atomic multi). Consumers
/// [`take`](DistributedQueue::take) a [`Taken`] item and acknowledge it, or hand a handler to
/// [`consume`](DistributedQueue::consume). The [`Delivery`] mode decides what a consumer's
/// death costs: at-least-once may deliver an item again, at-most-once may lose it.
///
/// ```no_run
/// # async fn demo() -> lockkeeper::Result<()> {
/// use lockkeeper::zk::{Delivery, Session};
///
/// let session = Session::connect("127.0.0.1:2181").await?;
/// let queue = session.distributed_queue("/queues/jobs")?;
/// queue.put(b"resize 42.png").await?;
/// let job = queue.take(Delivery::AtLeastOnce).await?;
/// println!("{:?}", job.items());
/// job.ack().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct DistributedQueue {
    items: Arc<Items>,
}

impl std::fmt::Debug for DistributedQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DistributedQueue")
            .field("path", &self.items.path)
            .field("lock_path", &self.items.lock_path)
            .finish()
    }
}

impl DistributedQueue {
    fn new(session: Session, path: &str) -> Result<DistributedQueue> {
        validate_node_path("queue path", path)?;
        let lock_path = format!("{path}-locks");
        Ok(DistributedQueue {
            items: Arc::new(Items::new(session, path.to_owned(), lock_path)),
        })
    }

    /// The same queue with at-least-once locks under `lock_path` (Curator's
    /// `QueueBuilder.lockPath`: every consumer of the queue must use the same one).
    pub fn with_lock_path(self, lock_path: &str) -> Result<DistributedQueue> {
        validate_node_path("queue lock path", lock_path)?;
        if lock_path == self.items.path {
            return Err(Error::InvalidArgument(format!(
                "queue lock path {lock_path:?}: must differ from the queue path"
            )));
        }
        Ok(DistributedQueue {
            items: Arc::new(Items::new(
                self.items.session.clone(),
                self.items.path.clone(),
                lock_path.to_owned(),
            )),
        })
    }

    /// The queue path.
    pub fn path(&self) -> &str {
        &self.items.path
    }

    /// Where at-least-once consumers create their lock nodes.
    pub fn lock_path(&self) -> &str {
        &self.items.lock_path
    }

    /// Adds one item. A put whose answer is lost returns the error and is not retried (it may
    /// or may not have been queued; a retry could queue it twice).
    pub async fn put(&self, item: &[u8]) -> Result<()> {
        self.put_all(&[item]).await
    }

    /// Adds items, one node each, in one multi: all are queued or none.
    pub async fn put_all(&self, items: &[&[u8]]) -> Result<()> {
        self.put_named(ITEM_PREFIX, items).await
    }

    /// Adds items as one node (Curator's `putMulti`): consumed, acknowledged and requeued
    /// together. [`Error::InvalidArgument`] for an empty list (Curator would queue a node
    /// with no item in it).
    pub async fn put_multi(&self, items: &[&[u8]]) -> Result<()> {
        if items.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "put_multi on {}: no items",
                self.items.path
            )));
        }
        let node = (ITEM_PREFIX.to_owned(), envelope::encode(items));
        self.items.create(&[node]).await
    }

    pub(crate) async fn put_named(&self, prefix: &str, items: &[&[u8]]) -> Result<()> {
        let nodes: Vec<(String, Vec<u8>)> = items
            .iter()
            .map(|item| (prefix.to_owned(), envelope::encode([item])))
            .collect();
        self.items.create(&nodes).await
    }

    /// Takes the next item, waiting (on a child watch) until there is one. A connection blip
    /// or a session loss does not end the wait: the take lists again once connected (in the
    /// new session after a loss); it fails with what the server refused (`NoAuth`, ...) or when
    /// the session is closed.
    pub async fn take(&self, delivery: Delivery) -> Result<Taken> {
        match self.items.take(delivery, Deadline::Never).await? {
            Some(taken) => Ok(taken),
            None => Err(Error::SessionLost),
        }
    }

    /// Takes the next item, waiting at most `timeout`; `None` if none came.
    pub async fn take_timeout(
        &self,
        delivery: Delivery,
        timeout: Duration,
    ) -> Result<Option<Taken>> {
        self.items.take(delivery, Deadline::after(timeout)?).await
    }

    /// Takes the next item if one can be had at once; `None` when the queue is empty.
    /// [`Error::SessionLost`] at once while the session is not connected: an empty answer
    /// would be a claim about a queue it cannot see.
    pub async fn try_take(&self, delivery: Delivery) -> Result<Option<Taken>> {
        self.items.take(delivery, Deadline::Now).await
    }

    /// Runs `handler` on every item, forever (until an error that is not the handler's).
    ///
    /// At-least-once: an item is acknowledged after its handler succeeded, requeued at the
    /// end of the queue if it failed (Curator's `ErrorMode.REQUEUE`), and the handler is
    /// dropped mid-way if the lock may be lost ([`Taken::lost`]), leaving the item to be
    /// delivered again. At-most-once: a failed item is logged and gone.
    pub async fn consume<F, Fut, E>(&self, delivery: Delivery, mut handler: F) -> Result<()>
    where
        F: FnMut(Vec<u8>) -> Fut,
        Fut: Future<Output = std::result::Result<(), E>>,
        E: std::fmt::Display,
    {
        loop {
            let taken = self.take(delivery).await?;
            let run = async {
                for item in taken.items() {
                    handler(item.clone()).await?;
                }
                Ok::<(), E>(())
            };
            // Biased: a process resuming from a pause past its deadline must not run the
            // handler one more step before it notices.
            let outcome = tokio::select! {
                biased;
                () = taken.lost() => None,
                outcome = run => Some(outcome),
            };
            let settled = match outcome {
                Some(Ok(())) => taken.ack().await,
                Some(Err(err)) => {
                    tracing::warn!(item = taken.node(), %err, "queue handler failed");
                    match delivery {
                        Delivery::AtLeastOnce => taken.requeue().await,
                        Delivery::AtMostOnce => Ok(()),
                    }
                }
                None => {
                    tracing::warn!(
                        item = taken.node(),
                        "lock lost mid-handler: left for redelivery"
                    );
                    Ok(())
                }
            };
            match settled {
                Ok(()) | Err(Error::ItemLost { .. }) => {}
                Err(err) => return Err(err),
            }
        }
    }
}
