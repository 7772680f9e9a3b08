//! Locks, Curator's `locks` family: the fair [`Mutex`], the [`RwLock`], the [`Semaphore`],
//! the naive [`SimpleLock`] kept to measure against, and revocation.
//!
//! - `line`: the waiting line of ephemeral-sequential nodes every fair lock queues in (the
//!   ZooKeeper lock recipe proper, Curator's `LockInternals`); leader election queues in it
//!   too, with its own marker.
//! - `owner`: one handle's count of re-entries into the node it holds.
//! - `guard`: the [`LockGuard`] every lock here hands out.
//! - `mutex`, `rwlock`, `semaphore`, `simple_lock`: the recipes.
//! - `revoke`: asking a holder to let go, or deleting its node.
//!
//! What a held node means (live `is_held()`, max hold, lock-delay) is the shared layer's
//! (`zk/hold.rs`), used here and by the leader latch and queue items alike.

mod guard;
pub(super) mod line;
mod mutex;
mod owner;
mod revoke;
mod rwlock;
mod semaphore;
pub(super) mod simple_lock;

pub use guard::LockGuard;
pub use mutex::Mutex;
pub use revoke::Revoked;
pub use rwlock::RwLock;
pub use semaphore::{Leases, Semaphore};
pub use simple_lock::SimpleLock;
