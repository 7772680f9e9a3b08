//! Outbox: the queue of messages from the core to one connection's writer, bounded in bytes.
//!
//! The core must never wait for a connection: it owns every session, and one client that stops
//! reading its socket would stall them all. So the core never blocks on a queue; instead each
//! connection may hold at most `max_queued_bytes` (see [`crate::Config::max_queued_bytes`]) of
//! messages queued but not yet written. A message that would pass the bound closes the
//! connection instead: its writer stops at once, without writing what is queued, and everything
//! queued is freed. The session behind it is left alone and may re-attach on a new connection,
//! as after any disconnect; its pending replies are lost like on any connection loss.
//!
//! Invariants:
//! - `queued_*` counts what the core has queued and the writer has not yet written to the
//!   socket (including what waits for the log to become durable); `sent_*` what was written.
//!   Both are counted in packets (close markers are not packets) and in [`Outgoing::memory`]
//!   bytes, so `cons` and `mntr` say what really happened, and the bound applies to memory.
//! - The core is the only one that adds to `queued_*`, the writer the only one that moves counts
//!   from `queued_*` to `sent_*`: the check against the bound is exact up to what the writer has
//!   just written (which only makes it err toward letting a message through).
//! - A connection always accepts one message whatever its size when nothing else is queued, so
//!   a bound smaller than the largest reply never makes a connection unusable.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tokio::sync::{Notify, mpsc};

use crate::reply::Outgoing;

/// What is counted for one connection, shared by the core (`cons`) and the writer.
#[derive(Debug, Default)]
pub struct ConnStats {
    pub queued_packets: AtomicU64,
    pub queued_bytes: AtomicU64,
    pub sent_packets: AtomicU64,
    pub sent_bytes: AtomicU64,
    overflowed: AtomicBool,
    overflow: Notify,
}

impl ConnStats {
    /// Waits until the core has given up on this connection.
    pub async fn overflowed(&self) {
        loop {
            // Notify keeps one permit for a notify_one that came first, so this cannot miss it.
            if self.overflowed.load(Ordering::Acquire) {
                return;
            }
            self.overflow.notified().await;
        }
    }
}

/// A message with what it was counted as.
pub struct Queued {
    pub outgoing: Outgoing,
    bytes: u64,
    packets: u64,
}

/// The core's end.
pub struct Outbox {
    tx: mpsc::UnboundedSender<Queued>,
    stats: Arc<ConnStats>,
    limit: u64,
}

/// The writer's end.
pub struct Inbox {
    rx: mpsc::UnboundedReceiver<Queued>,
    stats: Arc<ConnStats>,
    /// Packets written by every connection of the server (`mntr`'s zk_packets_sent).
    server_sent: Arc<AtomicU64>,
}

/// Why a message was not queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// This message would have passed the bound: the connection is being closed now.
    Overflow {
        queued_bytes: u64,
        message_bytes: u64,
    },
    /// The connection was already being closed for that (or its writer has ended).
    Closing,
}

/// A queue for one connection that holds at most `limit` bytes; `server_sent` counts the
/// packets every writer of the server has written.
pub fn channel(limit: u64, server_sent: Arc<AtomicU64>) -> (Outbox, Inbox) {
    let (tx, rx) = mpsc::unbounded_channel();
    let stats = Arc::new(ConnStats::default());
    (
        Outbox {
            tx,
            stats: stats.clone(),
            limit,
        },
        Inbox {
            rx,
            stats,
            server_sent,
        },
    )
}

impl Outbox {
    /// Queues `outgoing` unless that would pass the bound; never waits.
    pub fn push(&self, outgoing: Outgoing) -> Result<(), Refused> {
        let stats = &self.stats;
        if stats.overflowed.load(Ordering::Acquire) {
            return Err(Refused::Closing);
        }
        let bytes = outgoing.memory() as u64;
        let queued_bytes = stats.queued_bytes.load(Ordering::Acquire);
        if queued_bytes > 0 && queued_bytes + bytes > self.limit {
            stats.overflowed.store(true, Ordering::Release);
            stats.overflow.notify_one();
            return Err(Refused::Overflow {
                queued_bytes,
                message_bytes: bytes,
            });
        }
        let packets = u64::from(outgoing.is_packet());
        // Counted before it is sent, so the writer never takes off more than was put on.
        stats.queued_bytes.fetch_add(bytes, Ordering::AcqRel);
        stats.queued_packets.fetch_add(packets, Ordering::AcqRel);
        let queued = Queued {
            outgoing,
            bytes,
            packets,
        };
        self.tx.send(queued).map_err(|_| {
            // The writer has ended: it will not take this one off.
            stats.queued_bytes.fetch_sub(bytes, Ordering::AcqRel);
            stats.queued_packets.fetch_sub(packets, Ordering::AcqRel);
            Refused::Closing
        })
    }

    pub fn stats(&self) -> &ConnStats {
        &self.stats
    }
}

/// What the writer has taken off the queue but not yet written.
#[derive(Debug, Default, Clone, Copy)]
pub struct Batch {
    bytes: u64,
    packets: u64,
}

impl Batch {
    pub fn add(&mut self, queued: &Queued) {
        self.bytes += queued.bytes;
        self.packets += queued.packets;
    }
}

impl Inbox {
    pub async fn recv(&mut self) -> Option<Queued> {
        self.rx.recv().await
    }

    pub fn try_recv(&mut self) -> Option<Queued> {
        self.rx.try_recv().ok()
    }

    /// The stats, to wait for an overflow while the writer works.
    pub fn stats(&self) -> Arc<ConnStats> {
        self.stats.clone()
    }

    /// Moves a batch the writer has written to the socket from queued to sent.
    pub fn written(&self, batch: Batch) {
        let stats = &self.stats;
        stats.queued_bytes.fetch_sub(batch.bytes, Ordering::AcqRel);
        stats
            .queued_packets
            .fetch_sub(batch.packets, Ordering::AcqRel);
        stats.sent_bytes.fetch_add(batch.bytes, Ordering::AcqRel);
        stats
            .sent_packets
            .fetch_add(batch.packets, Ordering::AcqRel);
        self.server_sent.fetch_add(batch.packets, Ordering::Relaxed);
    }
}

impl Drop for Inbox {
    /// Whatever is still queued is dropped with the queue: it no longer counts as queued.
    fn drop(&mut self) {
        self.rx.close();
        let mut dropped = Batch::default();
        while let Ok(queued) = self.rx.try_recv() {
            dropped.add(&queued);
        }
        let stats = &self.stats;
        stats
            .queued_bytes
            .fetch_sub(dropped.bytes, Ordering::AcqRel);
        stats
            .queued_packets
            .fetch_sub(dropped.packets, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reply::{Body, Message};
    use lockkeeper_proto::ReplyHeader;

    fn event(path_len: usize) -> Outgoing {
        Outgoing {
            message: Message::Reply {
                header: ReplyHeader {
                    xid: -1,
                    zxid: -1,
                    err: 0,
                },
                body: Body::Path("x".repeat(path_len)),
            },
            visible_at: 0,
            faults: 0,
            close: false,
            stamps: None,
        }
    }

    #[test]
    fn counts_move_from_queued_to_sent_and_the_bound_closes() {
        let one = event(100).memory() as u64;
        assert!(one > 100, "the estimate counts more than the path: {one}");
        let (outbox, mut inbox) = channel(3 * one, Arc::default());
        for _ in 0..3 {
            outbox.push(event(100)).unwrap();
        }
        assert_eq!(outbox.stats().queued_packets.load(Ordering::Acquire), 3);
        assert_eq!(outbox.stats().queued_bytes.load(Ordering::Acquire), 3 * one);

        let mut batch = Batch::default();
        batch.add(&inbox.try_recv().unwrap());
        inbox.written(batch);
        let stats = inbox.stats();
        assert_eq!(stats.queued_packets.load(Ordering::Acquire), 2);
        assert_eq!(stats.sent_packets.load(Ordering::Acquire), 1);
        assert_eq!(stats.sent_bytes.load(Ordering::Acquire), one);

        outbox.push(event(100)).unwrap();
        match outbox.push(event(100)) {
            Err(Refused::Overflow {
                queued_bytes,
                message_bytes,
            }) => assert_eq!((queued_bytes, message_bytes), (3 * one, one)),
            other => panic!("expected an overflow, got {other:?}"),
        }
        assert_eq!(outbox.push(event(1)), Err(Refused::Closing));
        drop(inbox);
        assert_eq!(stats.queued_packets.load(Ordering::Acquire), 0);
        assert_eq!(stats.queued_bytes.load(Ordering::Acquire), 0);
    }

    #[test]
    fn one_message_larger_than_the_bound_still_goes_through_an_empty_queue() {
        let (outbox, _inbox) = channel(16, Arc::default());
        outbox.push(event(1000)).unwrap();
        assert!(matches!(
            outbox.push(event(1)),
            Err(Refused::Overflow { .. })
        ));
    }

    #[tokio::test]
    async fn the_writer_hears_of_an_overflow_that_came_before_it_waited() {
        let (outbox, inbox) = channel(1, Arc::default());
        outbox.push(event(10)).unwrap();
        assert!(outbox.push(event(10)).is_err());
        tokio::time::timeout(
            std::time::Duration::from_secs(5),
            inbox.stats().overflowed(),
        )
        .await
        .expect("overflowed() returns at once");
    }
}
