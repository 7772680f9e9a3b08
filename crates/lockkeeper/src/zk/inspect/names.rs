//! What a node's name says: which recipe (and which client) made it, and its sequence.
//!
//! Curator's recipes end a node's name with a marker and the sequence the server appended
//! (`_c_{uuid}-lock-0000000007`); kazoo's with `__lock__`/`__rlock__` and the sequence
//! (`{uuid}__lock__0000000007`); a kazoo semaphore lease is a bare 32-digit hex uuid. The
//! marker nearest the end of a name wins: a uuid prefix never contains one.

use crate::zk::locks::line::{LATCH_MARKER, LEASE_MARKER, LOCK_MARKER, READ_MARKER, WRITE_MARKER};
use crate::zk::locks::simple_lock::SIMPLE_NODE;

use super::NodeKind;

/// kazoo's marker of a `Lock` or `WriteLock` node (also its `Election`, built on `Lock`).
pub(super) const KAZOO_LOCK_MARKER: &str = "__lock__";
/// kazoo's marker of a `ReadLock` node.
const KAZOO_READ_MARKER: &str = "__rlock__";

/// Every marker, for sorting a directory that may mix them. Sequences are zero-padded to the
/// same width by the server, so one order serves Curator's and kazoo's nodes alike.
pub(super) const MARKERS: &[&str] = &[
    LOCK_MARKER,
    READ_MARKER,
    WRITE_MARKER,
    LEASE_MARKER,
    LATCH_MARKER,
    KAZOO_LOCK_MARKER,
    KAZOO_READ_MARKER,
];

/// The sub-directories of a Curator semaphore: its leases, and the lock that serializes
/// taking them.
pub(super) const LEASES: &str = "leases";
pub(super) const LOCKS: &str = "locks";

/// The node's kind and sequence from its name; [`NodeKind::Other`] without a sequence when
/// no marker is followed by a number.
pub(super) fn classify(name: &str) -> (NodeKind, Option<i64>) {
    if name == SIMPLE_NODE {
        return (NodeKind::Simple, None);
    }
    let found = MARKERS
        .iter()
        .filter_map(|marker| name.rfind(marker).map(|at| (marker, at + marker.len())))
        .max_by_key(|(_, end)| *end);
    let Some((marker, end)) = found else {
        return (NodeKind::Other, None);
    };
    // kazoo matches `-?\d{10}`: a sequence past i32::MAX wraps to a negative number.
    let Ok(sequence) = name[end..].parse::<i64>() else {
        return (NodeKind::Other, None);
    };
    let kind = match *marker {
        LOCK_MARKER => NodeKind::Mutex,
        READ_MARKER => NodeKind::Read,
        WRITE_MARKER => NodeKind::Write,
        LEASE_MARKER => NodeKind::Lease,
        LATCH_MARKER => NodeKind::Latch,
        KAZOO_LOCK_MARKER => NodeKind::KazooLock,
        _ => NodeKind::KazooRead,
    };
    (kind, Some(sequence))
}

/// Whether `name` is a kazoo semaphore lease: `uuid.uuid4().hex`, 32 lowercase hex digits.
pub(super) fn is_kazoo_lease(name: &str) -> bool {
    name.len() == 32
        && name
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// The sibling directory where a kazoo semaphore at `path` queues for its leases: kazoo names
/// it `{path}-__lock__` (a sibling, not a child, so the lease directory holds leases only).
pub(super) fn kazoo_semaphore_lock(path: &str) -> String {
    format!("{path}-{KAZOO_LOCK_MARKER}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_of_both_clients() {
        let cases = [
            ("_c_1f-lock-0000000003", NodeKind::Mutex, Some(3)),
            ("_c_1f-__READ__0000000004", NodeKind::Read, Some(4)),
            ("_c_1f-__WRIT__0000000005", NodeKind::Write, Some(5)),
            ("_c_1f-lease-0000000006", NodeKind::Lease, Some(6)),
            ("_c_1f-latch-0000000007", NodeKind::Latch, Some(7)),
            ("9a1f__lock__0000000008", NodeKind::KazooLock, Some(8)),
            ("9a1f__rlock__0000000009", NodeKind::KazooRead, Some(9)),
            ("9a1f__lock__-000000001", NodeKind::KazooLock, Some(-1)),
            ("lock", NodeKind::Simple, None),
            ("config", NodeKind::Other, None),
            ("_c_1f-lock-x", NodeKind::Other, None),
        ];
        for (name, kind, sequence) in cases {
            assert_eq!(classify(name), (kind, sequence), "{name}");
        }
        assert!(is_kazoo_lease("0123456789abcdef0123456789abcdef"));
        assert!(!is_kazoo_lease("0123456789abcdef0123456789abcdeF"));
        assert!(!is_kazoo_lease("config"));
    }
}
