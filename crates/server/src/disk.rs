//! Disk: the data dir, and how far it is durable. Every file format lives here.
//!
//! - [`datadir_lock`]: one server per data dir (an flock on `lock`, naming its holder).
//! - [`log`]: the txn log (`log.<zxid>` segments), appended by the core, written and synced
//!   in groups by the log workers.
//! - [`durable`]: the durable mark the log workers publish, and the waiters (outboxes) it
//!   releases; it knows them only as [`durable::Waiter`].
//! - [`snapshot`]: the whole state at one zxid (`snapshot.<zxid>`), encoded from the tree's
//!   walk and written in the background.
//! - [`recovery`]: the state rebuilt from the newest good snapshot and the log after it, at
//!   start and by `lockkeeper verify`.

pub mod datadir_lock;
pub(crate) mod durable;
pub(crate) mod log;
pub mod recovery;
pub(crate) mod snapshot;
