//! Locks and elections on etcd v3: the same shape as [`zk`](crate::zk) and
//! [`redis`](crate::redis), with the create revision as fencing token and a lost signal from
//! the lease. Behind the cargo feature `etcd`, on by default (it talks to etcd through
//! lockkeeper's own gRPC client, `rpc`; building it needs no protoc installed).
//!
//! Start with a [`Session`] (one lease, renewed every third of its TTL), then ask it for a
//! recipe:
//!
//! ```no_run
//! # async fn demo() -> lockkeeper::Result<()> {
//! use lockkeeper::etcd::Session;
//!
//! let session = Session::connect("127.0.0.1:2379").await?;
//! let guard = session.mutex("orders")?.lock().await?;
//! // hand guard.fencing_token() to the resource with every write
//! guard.release().await?;
//! # Ok(()) }
//! ```
//!
//! | type | keys under `NAME/` | compatible with |
//! | --- | --- | --- |
//! | [`Mutex`] | `NAME/{lease:x}`, lowest create revision holds | Go `concurrency.Mutex`, `etcdctl lock` |
//! | [`Election`] | `NAME/{lease:x}` = proclaimed value, lowest create revision leads | Go `concurrency.Election`, `etcdctl elect` (campaign, `--listen`) |
//! | [`RwLock`] | `NAME/read/{lease:x}-{unique}`, `NAME/write/{lease:x}-{unique}`; readers wait for earlier writers, writers for every earlier key | lockkeeper only |
//! | [`Semaphore`] | `NAME/{lease:x}-{unique}`; a permit while fewer than `n` older keys | lockkeeper only |
//!
//! Lock-delay, where asked for, keeps a release record in `NAME.lock-delay` (outside `NAME/`).
//!
//! # Invariants
//!
//! - **Fencing token = create revision** of the holder's key. etcd has one revision counter
//!   for the whole cluster, and it never goes back (not at a leader change, not at a restart),
//!   so every grant of a lock has a higher token than all earlier ones.
//! - **Lost signal from the lease.** A guard is held while its session is within its
//!   deadline: the send time of the last successful renewal + TTL − (1% + 2 ms). When renewal
//!   fails until then, etcd may expire the lease and delete the keys at any moment after, so
//!   `lost()` fires *at* that instant, without waiting for a failed round trip.
//! - **Waiters stop with their session.** A waiter whose session is lost returns
//!   [`Error::SessionLost`](crate::Error) at once, instead of waiting on for a
//!   lock it can no longer get (etcd #19597).
//! - **Every wait is cancel-safe**: a dropped or timed-out acquisition deletes its key.

mod delay;
mod election;
mod error;
mod guard;
mod inspect;
mod mutex;
mod queue;
mod rpc;
mod rwlock;
mod semaphore;
mod session;
mod wait;

use std::sync::Arc;
use std::time::Duration;

pub use election::{Candidacy, Election, Leader, Leadership, Observer};
pub use error::EtcdError;
pub use guard::LockGuard;
pub use inspect::{Inspection, Kind, Participant, State};
pub use mutex::Mutex;
pub use rwlock::RwLock;
pub use semaphore::Semaphore;
pub use session::{DEFAULT_CONNECT_TIMEOUT, DEFAULT_TTL, Session, SessionBuilder};

pub(crate) use error::is_transient;

use crate::error::{Error, Result};
use crate::fencing::FencingToken;
use crate::options::{self, Delay, Setting};

/// An empty name would put the keys at the root (`/…`), shared with every other empty-named
/// user: refused, naming the kind of recipe.
fn check_name(kind: &str, name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(Error::InvalidArgument(format!(
            "the etcd {kind} name must not be empty, got {name:?}"
        )));
    }
    Ok(())
}

/// A suffix that makes a key unique to one acquisition (the read-write lock and the semaphore
/// let one session hold several keys of one name).
fn unique_suffix() -> String {
    let mut id = uuid::Uuid::new_v4().simple().to_string();
    id.truncate(16);
    id
}

/// The fencing token of a key: its create revision. etcd's revision counter is one for the
/// whole cluster and starts at 1, so every real revision converts.
fn token(create_revision: i64) -> FencingToken {
    FencingToken::new(u64::try_from(create_revision).unwrap_or(0))
}

/// [`options::positive`] for an option of the etcd lock `name`.
fn positive(option: &str, name: &str, duration: Duration) -> Result<Duration> {
    options::positive(option, &format!("the etcd lock {name:?}"), duration)
}

impl guard::HoldOptions {
    /// Takes one option for the lock `name` ([`Configure::set`](options::Configure::set)'s
    /// contract): a maximum hold time, and a lock-delay where `delay` says so (the mutex and the
    /// read-write lock), recorded in the key `NAME.lock-delay`.
    fn set(&mut self, name: &str, setting: Setting, delay: Delay) -> Result<bool> {
        match setting {
            Setting::MaxHold(max_hold) => {
                self.max_hold = Some(positive("max_hold", name, max_hold)?);
            }
            Setting::LockDelay(lock_delay) if delay == Delay::Taken => {
                let lock_delay = positive("lock_delay", name, lock_delay)?;
                self.lock_delay = Some((lock_delay, Arc::from(delay::record_key(name))));
            }
            Setting::LockDelay(_)
            | Setting::Lease(_)
            | Setting::Watchdog(_)
            | Setting::KeepThroughSuspension => return Ok(false),
        }
        Ok(true)
    }
}
