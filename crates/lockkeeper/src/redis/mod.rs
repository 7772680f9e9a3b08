//! The Redis lock family: lease locks with a watchdog, reentrant locks, read-write locks and
//! semaphores, all with fencing tokens and a lost-lock signal; and [`redlock`] over several
//! independent masters.
//!
//! Start with a [`Redis`] handle (one server, a Redis Cluster, or a Sentinel-managed master),
//! then ask it for a lock:
//!
//! ```no_run
//! # async fn demo() -> lockkeeper::Result<()> {
//! use lockkeeper::redis::Redis;
//!
//! let redis = Redis::connect("redis://127.0.0.1:6379").await?;
//! let guard = redis.lease_lock("orders").lock().await?;
//! // hand guard.fencing_token() to the resource with every write
//! guard.release().await?;
//! # Ok(())
//! # }
//! ```
//!
//! | type | recipe | Redisson counterpart |
//! | --- | --- | --- |
//! | [`LeaseLock`] | `SET key token NX PX ttl`, compare-and-delete, compare-and-pexpire | `RLock` without reentrancy |
//! | [`ReentrantLock`] | hash `{owner: count}` | `RLock` |
//! | [`LocalReentrantLock`] | one [`LeaseLock`] key, re-entries counted in the process | |
//! | [`RwLock`] | sorted set of readers with per-reader expiry, a writer key | `RReadWriteLock` |
//! | [`Semaphore`] | sorted set of permits with per-permit expiry | `RPermitExpirableSemaphore` |
//!
//! Every guard has `fencing_token()`, `is_held()`, `valid_until()`, `lost()` and
//! `release()`, and is released (best effort, in a spawned task) when dropped.
//!
//! # Leases and the watchdog
//!
//! A lock taken without an explicit lease gets the handle's watchdog lease (30 s unless
//! [`RedisOptions::watchdog_timeout`] says otherwise), renewed every third of it while the
//! guard lives; a crashed holder's lock frees itself one lease later. `max_hold(d)` gives the
//! lock up at `d` (released cleanly, and `lost()` fires). With `lease(d)` nothing renews: the guard stops counting as held at the
//! end of the lease, computed from when the acquire was *sent*, minus 1% + 2 ms for clock
//! drift, so the holder gives up before the server could hand the lock to someone else.
//!
//! # Waiting
//!
//! A waiting call subscribes to the lock's release channel (one shared subscriber connection
//! per handle, multiplexing every channel its waiters wait on) and sleeps until a release is
//! published or the holder's lease would run out; nothing polls. For the lease and reentrant
//! locks, a waiter that found the lock busy joins the lock's *line*; a release wakes only the
//! head of the line, and once the head has waited 50 ms a free lock is kept for it (before
//! that anyone may barge in, as in Go's `sync.Mutex`), so nobody starves; that is not a
//! fairness guarantee (a place lapses if its waiter stops refreshing it, once a second while
//! waiting). Every wait is
//! cancel-safe: a dropped `lock()` future leaves no lock and no place in line behind.
//!
//! A Redis that cannot be reached makes the call fail with [`Error::Redis`](crate::Error)
//! rather than wait; the connections reconnect on their own for the next call.
//!
//! # Fencing tokens and failover
//!
//! Each lock has a counter key (`PREFIX:KIND:{name}:fence`) that the acquire script `INCR`s in
//! the same atomic step that takes the lock, so tokens strictly increase for as long as that
//! key survives. Redis replication is asynchronous: if the master fails before its latest
//! `INCR`s reached the replica that takes over (or a server without persistence restarts),
//! the counter is behind and **tokens go backwards**. The next holder then gets a token lower
//! than one already handed out, and fencing no longer protects: a paused holder of the older,
//! higher token can still get a late write past the resource. (Its guard reports the loss, as
//! renewal finds the key gone, but a paused process does not look.) Where that matters, run
//! Redis with `appendonly yes` and `appendfsync always` and wait for replicas (`WAIT`) before
//! trusting a failover, or use a ZooKeeper lock, whose token (the lock node's czxid) has no
//! such gap.
//!
//! # What the library keeps in Redis
//!
//! Every key of a lock carries the lock's name as a hash tag, so that in a cluster a lock's
//! scripts run on one node: `PREFIX:lease:{name}` (the lock), `PREFIX:lease:{name}:fence`
//! (the counter), `PREFIX:lease:{name}:line` and `...:line:deadlines` (waiters), and the
//! release channel `PREFIX:lease:{name}:released`; likewise `reentrant`, `rw` (`:readers`,
//! `:writer`, `:intent`) and `semaphore` (with a `:line` of its waiters that only shows who
//! waits). The fencing counter has no expiry (it must outlive every holder); all other keys
//! expire with their lease. [`Redis::inspect`] reads all of a name's keys, of every kind, in
//! one step: its holders and waiters; [`Redis::revoke`] takes a hold away.

mod client;
mod conn;
mod diagnose;
mod inspect;
mod keys;
pub(crate) mod lease;
mod lease_lock;
mod line;
mod local_reentrant;
mod pubsub;
pub mod redlock;
mod reentrant;
mod rwlock;
mod script;
mod semaphore;
mod wait;

pub use client::{Redis, RedisOptions};
pub use inspect::{Inspection, Kind, LockKind, Participant, Revoked, State, inspect};
pub use keys::DEFAULT_PREFIX;
pub use lease::DEFAULT_WATCHDOG_TTL;
pub use lease_lock::{LeaseGuard, LeaseLock};
pub use local_reentrant::{LocalReentrantGuard, LocalReentrantLock};
pub use reentrant::{ReentrantGuard, ReentrantLock, Unlock};
pub use rwlock::{RwGuard, RwLock, RwMode};
pub use semaphore::{Semaphore, SemaphorePermit};
