//! The server's one way to take a std mutex (the log's, the durable mark's, the outboxes', the
//! per-address connection counts).

use std::sync::{Mutex, MutexGuard};

/// Locks `mutex`. Every field under these locks is written whole, so a thread that panicked
/// while holding one leaves nothing half-updated that could mislead the next holder: a poisoned
/// lock is used as it is.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
