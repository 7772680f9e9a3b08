//! Shared counters, with Curator's node layouts: [`SharedCount`] (an `i32` every participant
//! watches) and [`AtomicLong`] (Curator's `DistributedAtomicLong`, an `i64` updated
//! optimistically).
//!
//! Both keep their value as the bytes of one persistent node, so Curator's `SharedCount` and
//! `DistributedAtomicLong`, and kazoo's `Counter(support_curator=True)` (which is
//! `SharedCount`'s format), read and write the same counters:
//!
//! - `codec`: the bytes (4 or 8, big-endian, signed), and the error for anything else;
//! - `write`: the conditional write every update ends with, and what a connection loss
//!   during it means (never a second application);
//! - `long` and `shared`: the two recipes on top.
//!
//! Counters are not locks: nothing here is ephemeral, so a counter outlives the sessions that
//! wrote it, and a new session (after `Lost`) carries on with the same value.

mod codec;
mod long;
mod shared;
mod write;

pub use long::AtomicLong;
pub use shared::{CountChanges, SharedCount, VersionedCount};

use crate::error::Result;
use crate::zk::session::Session;

impl Session {
    /// An [`AtomicLong`] at `path` (Curator's `DistributedAtomicLong` layout). Nothing is
    /// sent until it is used; an absent node reads as 0. [`Error::InvalidArgument`] for a path
    /// that is not absolute.
    ///
    /// [`Error::InvalidArgument`]: crate::Error::InvalidArgument
    pub fn atomic_long(&self, path: &str) -> Result<AtomicLong> {
        AtomicLong::new(self.clone(), path)
    }

    /// A [`SharedCount`] at `path` (Curator's `SharedCount` layout): creates the node holding
    /// `seed` if it does not exist (an existing node keeps its value), reads it, and starts
    /// watching it. Fails if the node holds anything but 4 bytes (or nothing).
    pub async fn shared_count(&self, path: &str, seed: i32) -> Result<SharedCount> {
        SharedCount::start(self.clone(), path, seed).await
    }
}
