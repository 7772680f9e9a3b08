//! The durable mark: how far the log is on disk, and the messages waiting for it to move.
//!
//! Every message to a client reveals the state at some zxid and may leave only once the log is
//! durable that far (the outbox module). The log workers publish the mark here after each sync;
//! the core counts a disk fault on it once it has stopped queueing for the old state. An outbox whose next message waits for a
//! later mark puts itself on the mark's waiting list, and the thread that publishes the mark
//! takes the list and writes what the mark released to the sockets itself: a reply leaves on
//! the thread that made it durable, with no other thread to wake.
//!
//! Invariants:
//! - **No lost wake-up**: an outbox checks the mark and joins the list under the list's lock,
//!   and a publisher changes the mark and takes the list under the same lock. So an outbox
//!   either sees the new mark or is on the list the publisher takes.
//! - **The list's lock is taken last**: only the mark's own (the watch's) is taken inside it,
//!   and the released outboxes are written only after it is let go, through
//!   [`Released::write`] (the log writes them after its publish lock too; after a fault, still
//!   under its writer lock, which no outbox ever takes).
//! - **The mark only moves forward** in zxid; publishers order their publications themselves
//!   (the log publishes under its own lock, in the order its groups were written).

use std::sync::{Arc, Mutex, Weak};

use tokio::sync::watch;

use crate::sync::lock;
use crate::trace::SyncStamps;

/// The mark itself: the newest durable zxid, and how many disk faults have happened (a message
/// queued before a fault that reveals more than was durable at the fault is dropped, never
/// sent).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Durable {
    pub zxid: i64,
    pub faults: u64,
    /// The durable zxid when the last fault happened. After a fault the core reloads what is
    /// durable and goes on in a new epoch, so a later mark says nothing of what was lost.
    pub faulted_at: i64,
    /// The log has stopped (the server is shutting down): nothing more becomes durable.
    pub stopped: bool,
    /// When the sync that reached `zxid` went through each stage, for [`crate::trace`]; `None`
    /// before the first sync of this run.
    pub sync: Option<SyncStamps>,
}

/// What the mark says of a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Everything it reveals is durable.
    Send,
    /// Not yet.
    Wait,
    /// Never: a disk fault since it was queued may have lost what it reveals, or the log
    /// has stopped.
    Drop,
}

impl Durable {
    /// The verdict on a message that reveals the state at `visible_at` and was queued when
    /// `faults` disk faults had happened.
    pub(crate) fn verdict(&self, visible_at: i64, faults: u64) -> Verdict {
        if faults == self.faults {
            if self.zxid >= visible_at {
                Verdict::Send
            } else if self.stopped {
                Verdict::Drop
            } else {
                Verdict::Wait
            }
        } else if faults + 1 == self.faults && visible_at <= self.faulted_at {
            // It was durable before the fault (the zxids after it are another epoch's).
            Verdict::Send
        } else {
            Verdict::Drop
        }
    }

    /// Counts a disk fault: what is not durable now may never be.
    pub(crate) fn fault(&mut self) {
        self.faults += 1;
        self.faulted_at = self.zxid;
    }
}

/// What waits on the mark: a connection's outbox (`net::outbox`), whose next message reveals
/// more than is durable. The mark holds it weakly (see [`Waiting`]) and knows nothing else of it.
pub(crate) trait Waiter: Send + Sync {
    /// The mark took this waiter off its list (it moved, or a fault or the log's stop decided
    /// the waiter's next message): write what it released. Called on the publishing thread,
    /// with no lock of the mark held.
    fn released(self: Arc<Self>);
}

/// A waiter on the list. Weak: one that nobody else holds any more has nothing left to send,
/// and is dropped from the list ([`Waiting::strong_count`] is 0).
pub(crate) type Waiting = Weak<dyn Waiter>;

/// The mark, shared by the log workers (which move it), the core and every outbox.
pub(crate) struct DurableMark {
    /// The value, also for whoever awaits a change (the core, to finish a snapshot).
    value: watch::Sender<Durable>,
    /// Outboxes whose next message waits for the mark to move.
    waiting: Mutex<WaitingList>,
}

/// The waiting list, and the length at which entries whose connection is gone are dropped from
/// it (without a publication, as while the disk fails, nothing else would).
struct WaitingList {
    outboxes: Vec<Waiting>,
    prune_at: usize,
}

/// The shortest list that is ever pruned.
const PRUNE_AT: usize = 64;

/// Outboxes a publication released: write them once every lock is let go.
#[must_use = "the released outboxes are written only by Released::write"]
pub(crate) struct Released(Vec<Waiting>);

impl Released {
    /// Writes what the new mark lets out to each released outbox's socket (or hands it to the
    /// connection's writer when the socket is full), on the calling thread.
    pub(crate) fn write(self) {
        for waiting in self.0 {
            if let Some(waiter) = waiting.upgrade() {
                waiter.released();
            }
        }
    }
}

impl DurableMark {
    pub(crate) fn new(zxid: i64) -> Arc<DurableMark> {
        Arc::new(DurableMark {
            value: watch::Sender::new(Durable {
                zxid,
                ..Durable::default()
            }),
            waiting: Mutex::new(WaitingList {
                outboxes: Vec::new(),
                prune_at: PRUNE_AT,
            }),
        })
    }

    pub(crate) fn get(&self) -> Durable {
        *self.value.borrow()
    }

    /// A receiver that sees every change of the mark.
    pub(crate) fn subscribe(&self) -> watch::Receiver<Durable> {
        self.value.subscribe()
    }

    /// Changes the mark and takes every outbox waiting for it.
    pub(crate) fn publish(&self, change: impl FnOnce(&mut Durable)) -> Released {
        let mut waiting = lock(&self.waiting);
        self.value.send_modify(change);
        waiting.prune_at = PRUNE_AT;
        Released(std::mem::take(&mut waiting.outboxes))
    }

    /// Puts `outbox` on the waiting list if the mark's verdict on its next message (which
    /// reveals `visible_at`, queued at `faults`) is still [`Verdict::Wait`]; returns the verdict.
    pub(crate) fn wait(&self, outbox: Waiting, visible_at: i64, faults: u64) -> Verdict {
        let mut waiting = lock(&self.waiting);
        let verdict = self.value.borrow().verdict(visible_at, faults);
        if verdict == Verdict::Wait {
            if waiting.outboxes.len() >= waiting.prune_at {
                waiting.outboxes.retain(|w| w.strong_count() > 0);
                waiting.prune_at = PRUNE_AT.max(2 * waiting.outboxes.len());
            }
            waiting.outboxes.push(outbox);
        }
        verdict
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_verdict_sends_only_what_was_durable_before_a_fault_and_drops_after_two() {
        let mut mark = Durable {
            zxid: 10,
            ..Durable::default()
        };
        assert_eq!(mark.verdict(10, 0), Verdict::Send);
        assert_eq!(mark.verdict(11, 0), Verdict::Wait);
        mark.fault();
        assert_eq!(
            mark.verdict(10, 0),
            Verdict::Send,
            "durable before the fault"
        );
        assert_eq!(
            mark.verdict(11, 0),
            Verdict::Drop,
            "maybe lost in the fault"
        );
        assert_eq!(mark.verdict(11, 1), Verdict::Wait, "queued after it");
        // The reload goes on in a new epoch: its zxids pass the old ones.
        mark.zxid = 2 << 32 | 5;
        assert_eq!(
            mark.verdict(11, 0),
            Verdict::Drop,
            "a new epoch's mark says nothing of it"
        );
        assert_eq!(mark.verdict(2 << 32 | 5, 1), Verdict::Send);
        mark.fault();
        assert_eq!(
            mark.verdict(10, 0),
            Verdict::Drop,
            "two faults since: not known"
        );
        mark.stopped = true;
        assert_eq!(mark.verdict(2 << 32 | 6, 2), Verdict::Drop);
        assert_eq!(mark.verdict(2 << 32 | 5, 2), Verdict::Send);
    }

    /// A waiter whose outbox is already gone.
    struct Gone;

    impl Waiter for Gone {
        fn released(self: Arc<Self>) {}
    }

    #[test]
    fn a_long_waiting_list_drops_the_outboxes_nobody_holds() {
        let mark = DurableMark::new(0);
        for _ in 0..1000 {
            assert_eq!(mark.wait(Weak::<Gone>::new(), 1, 0), Verdict::Wait);
        }
        let waiting = lock(&mark.waiting);
        assert!(
            waiting.outboxes.len() <= PRUNE_AT,
            "{} entries kept",
            waiting.outboxes.len()
        );
    }
}
