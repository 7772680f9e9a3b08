//! The one way the library takes its std mutexes.
//!
//! They guard a few instructions each (a handle's state, a table of local waiters), never an
//! await, so a panic while one was held cannot have left its data half-changed in a way a later
//! user would misread: a poisoned mutex is taken as it is rather than turned into a panic in
//! every task that touches the handle after.

use std::sync::{Mutex, MutexGuard};

/// Locks `mutex`, taking it even if a panic poisoned it.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
