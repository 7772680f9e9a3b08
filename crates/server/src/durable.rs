//! The durable mark: how far the log is on disk, and the messages waiting for it to move.
//!
//! Every message to a client reveals the state at some zxid and may leave only once the log is
//! durable that far (the outbox module). The log threads publish the mark here after each sync
//! (and bump its fault count when the disk fails). An outbox whose next message waits for a
//! later mark puts itself on the mark's waiting list, and the thread that publishes the mark
//! takes the list and writes what the mark released to the sockets itself: a reply leaves on
//! the thread that made it durable, with no other thread to wake.
//!
//! Invariants:
//! - **No lost wake-up**: an outbox checks the mark and joins the list under the list's lock,
//!   and a publisher changes the mark and takes the list under the same lock. So an outbox
//!   either sees the new mark or is on the list the publisher takes.
//! - **The list's lock is the innermost lock**: nothing else is taken while it is held, and the
//!   released outboxes are written only after it (and the caller's locks) are let go, through
//!   [`Released::write`].
//! - **The mark only moves forward** in zxid; publishers order their publications themselves
//!   (the log publishes under its own lock, in the order its groups were written).

use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::watch;

use crate::outbox::Waiting;
use crate::trace::SyncStamps;

/// The mark itself: the newest durable zxid, and how many disk faults have happened (a message
/// queued before a fault whose zxid the mark has not reached is dropped, never sent).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Durable {
    pub zxid: i64,
    pub faults: u64,
    /// The log has stopped (the server is shutting down): nothing more becomes durable.
    pub stopped: bool,
    /// When the sync that reached `zxid` went through each stage, for [`crate::trace`]; `None`
    /// before the first sync of this run.
    pub sync: Option<SyncStamps>,
}

/// What the mark says of a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
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
    pub fn verdict(&self, visible_at: i64, faults: u64) -> Verdict {
        if self.zxid >= visible_at {
            Verdict::Send
        } else if self.faults != faults || self.stopped {
            Verdict::Drop
        } else {
            Verdict::Wait
        }
    }
}

/// The mark, shared by the log threads (which move it), the core and every outbox.
pub struct DurableMark {
    /// The value, also for whoever awaits a change (the core, to finish a snapshot).
    value: watch::Sender<Durable>,
    /// Outboxes whose next message waits for the mark to move.
    waiting: Mutex<Vec<Waiting>>,
}

/// Outboxes a publication released: write them once every lock is let go.
#[must_use = "the released outboxes are written only by Released::write"]
pub struct Released(Vec<Waiting>);

impl Released {
    /// Writes what the new mark lets out to each released outbox's socket (or hands it to the
    /// connection's writer when the socket is full), on the calling thread.
    pub fn write(self) {
        for outbox in self.0 {
            outbox.released();
        }
    }
}

impl DurableMark {
    pub fn new(zxid: i64) -> Arc<DurableMark> {
        Arc::new(DurableMark {
            value: watch::Sender::new(Durable {
                zxid,
                ..Durable::default()
            }),
            waiting: Mutex::new(Vec::new()),
        })
    }

    pub fn get(&self) -> Durable {
        *self.value.borrow()
    }

    /// A receiver that sees every change of the mark.
    pub fn subscribe(&self) -> watch::Receiver<Durable> {
        self.value.subscribe()
    }

    /// Changes the mark and takes every outbox waiting for it.
    pub fn publish(&self, change: impl FnOnce(&mut Durable)) -> Released {
        let mut waiting = lock(&self.waiting);
        self.value.send_modify(change);
        Released(std::mem::take(&mut *waiting))
    }

    /// Puts `outbox` on the waiting list if the mark's verdict on its next message (which
    /// reveals `visible_at`, queued at `faults`) is still [`Verdict::Wait`]; returns the verdict.
    pub(crate) fn wait(&self, outbox: Waiting, visible_at: i64, faults: u64) -> Verdict {
        let mut waiting = lock(&self.waiting);
        let verdict = self.value.borrow().verdict(visible_at, faults);
        if verdict == Verdict::Wait {
            waiting.push(outbox);
        }
        verdict
    }
}

/// Locks a mutex of this module or the outbox's. Nothing is left half-updated under these
/// locks by a panic that could mislead the next holder, so a poisoned lock is used as is.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
