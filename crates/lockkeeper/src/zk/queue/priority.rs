//! [`PriorityQueue`]: Curator's `DistributedPriorityQueue` layout, items ordered by priority
//! (lower first), then by arrival.
//!
//! Curator puts the priority in the node name, between the `queue-` prefix and the sequence
//! number: `1` and 8 upper-case hex digits for a priority >= 0, `0` and the 8 hex digits of its
//! 32-bit two's complement for a negative one, so that names sort by priority. Priorities are
//! therefore Java `int`s; anything outside `i32` is refused rather than wrapped into another
//! priority.

use std::time::Duration;

use super::items::ITEM_PREFIX;
use super::{Delivery, DistributedQueue, Taken};
use crate::error::Result;

/// A distributed priority queue (Curator's `DistributedPriorityQueue` layout): items with a
/// lower priority are taken first. Consumption is as for [`DistributedQueue`].
///
/// ```no_run
/// # async fn demo(session: lockkeeper::zk::Session) -> lockkeeper::Result<()> {
/// use lockkeeper::zk::Delivery;
///
/// let queue = session.priority_queue("/queues/alerts")?;
/// queue.put(b"disk 91%", 5).await?;
/// queue.put(b"datacenter on fire", -10).await?;
/// let first = queue.take(Delivery::AtLeastOnce).await?;
/// assert_eq!(first.items()[0], b"datacenter on fire");
/// first.ack().await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct PriorityQueue {
    queue: DistributedQueue,
}

/// The node name prefix for `priority` (Curator's `priorityToString`): Java's `int`, so every
/// `i32` has one.
pub(crate) fn encode_priority(priority: i32) -> String {
    let sign = if priority >= 0 { '1' } else { '0' };
    format!("{ITEM_PREFIX}{sign}{:08X}", priority as u32)
}

impl PriorityQueue {
    pub(crate) fn new(queue: DistributedQueue) -> PriorityQueue {
        PriorityQueue { queue }
    }

    /// The same queue with at-least-once locks under `lock_path`.
    pub fn with_lock_path(self, lock_path: &str) -> Result<PriorityQueue> {
        Ok(PriorityQueue::new(self.queue.with_lock_path(lock_path)?))
    }

    /// The queue path.
    pub fn path(&self) -> &str {
        self.queue.path()
    }

    /// Adds one item with `priority` (lower is taken first): an `i32`, as Curator's is a Java
    /// `int`.
    pub async fn put(&self, item: &[u8], priority: i32) -> Result<()> {
        self.put_all(&[item], priority).await
    }

    /// Adds items with one `priority`, one node each, in one multi.
    pub async fn put_all(&self, items: &[&[u8]], priority: i32) -> Result<()> {
        let prefix = encode_priority(priority);
        self.queue.put_named(&prefix, items).await
    }

    /// Takes the item of lowest priority, waiting until there is one.
    pub async fn take(&self, delivery: Delivery) -> Result<Taken> {
        self.queue.take(delivery).await
    }

    /// As [`take`](PriorityQueue::take), waiting at most `timeout`.
    pub async fn take_timeout(
        &self,
        delivery: Delivery,
        timeout: Duration,
    ) -> Result<Option<Taken>> {
        self.queue.take_timeout(delivery, timeout).await
    }

    /// As [`take`](PriorityQueue::take), only if an item can be had at once.
    pub async fn try_take(&self, delivery: Delivery) -> Result<Option<Taken>> {
        self.queue.try_take(delivery).await
    }

    /// Runs `handler` on every item in priority order: see [`DistributedQueue::consume`].
    pub async fn consume<F, Fut, E>(&self, delivery: Delivery, handler: F) -> Result<()>
    where
        F: FnMut(Vec<u8>) -> Fut,
        Fut: Future<Output = std::result::Result<(), E>>,
        E: std::fmt::Display,
    {
        self.queue.consume(delivery, handler).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn curator_encoding_sorts_by_priority() {
        assert_eq!(encode_priority(0), "queue-100000000");
        assert_eq!(encode_priority(255), "queue-1000000FF");
        assert_eq!(encode_priority(-1), "queue-0FFFFFFFF");
        let mut names: Vec<String> = [5, -3, i32::MAX, i32::MIN, 0]
            .into_iter()
            .map(encode_priority)
            .collect();
        names.sort();
        let back: Vec<String> = [i32::MIN, -3, 0, 5, i32::MAX]
            .into_iter()
            .map(encode_priority)
            .collect();
        assert_eq!(names, back);
    }
}
