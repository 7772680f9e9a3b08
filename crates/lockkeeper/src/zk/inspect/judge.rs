//! Who holds and who waits, by each recipe's grant rule over a listing in sequence order.
//!
//! The rules are the recipes' own, so the verdict is what the participants themselves decide
//! from the same listing; nothing here asks the participants.

use super::{NodeKind, Participant, State};

/// The lock recipes' grant rules over one queue in sequence order:
/// - a mutex, write or latch node (Curator's), or a kazoo `__lock__` node (kazoo's `Lock`,
///   `WriteLock`, `Election`) holds only if it is the first lock node of the queue;
/// - a read node holds if no exclusive node comes before it (Curator's `__READ__` and
///   kazoo's `__rlock__` alike);
/// - a simple lock's node holds by existing.
///
/// One case the listing cannot show: a Curator write-lock holder that also takes the read lock
/// (a downgrade) holds its read node though its own write node precedes it; it is shown waiting.
pub(super) fn judge_lock_queue(queue: &mut [Participant]) {
    let mut first = true;
    let mut exclusive_before = false;
    for participant in queue {
        participant.state = match participant.kind {
            NodeKind::Mutex | NodeKind::Write | NodeKind::Latch | NodeKind::KazooLock if first => {
                State::Holds
            }
            NodeKind::Mutex | NodeKind::Write | NodeKind::Latch | NodeKind::KazooLock => {
                State::Waits
            }
            NodeKind::Read | NodeKind::KazooRead if exclusive_before => State::Waits,
            NodeKind::Read | NodeKind::KazooRead => State::Holds,
            NodeKind::Simple => State::Holds,
            NodeKind::Lease | NodeKind::KazooLease | NodeKind::Other => State::Unknown,
        };
        match participant.kind {
            NodeKind::Mutex | NodeKind::Write | NodeKind::Latch | NodeKind::KazooLock => {
                first = false;
                exclusive_before = true;
            }
            NodeKind::Read | NodeKind::KazooRead => first = false,
            _ => {}
        }
    }
}

/// A Curator semaphore's leases in sequence order: the first `max_leases` hold, the rest
/// wait; all unknown without a limit.
pub(super) fn judge_leases(leases: &mut [Participant], max_leases: Option<u32>) {
    let mut granted = 0u32;
    for participant in leases {
        participant.state = match (participant.kind, max_leases) {
            (NodeKind::Lease, Some(max)) if granted < max => {
                granted += 1;
                State::Holds
            }
            (NodeKind::Lease, Some(_)) => State::Waits,
            _ => State::Unknown,
        };
    }
}

/// A kazoo semaphore: a lease node exists only while its lease is held (kazoo creates it
/// after counting the free leases, under its lock), so every lease holds; everyone in the
/// sibling lock queue waits for a lease, its head included (it holds only the right to look).
pub(super) fn judge_kazoo_semaphore(leases: &mut [Participant], queue: &mut [Participant]) {
    for lease in leases {
        lease.state = match lease.kind {
            NodeKind::KazooLease => State::Holds,
            _ => State::Unknown,
        };
    }
    for waiter in queue {
        waiter.state = match waiter.kind {
            NodeKind::KazooLock => State::Waits,
            _ => State::Unknown,
        };
    }
}
