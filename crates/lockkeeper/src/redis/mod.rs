//! The Redis lock family: lease locks with a watchdog, reentrant locks, read-write locks and
//! semaphores, all with fencing tokens and a lost-lock signal.
//!
//! Start with a [`Redis`] handle (one server, a cluster, or Sentinel), then ask it for a lock:
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
//! # Fencing tokens and failover
//!
//! Each lock has a counter key (`PREFIX:KIND:{name}:fence`) that the acquire script `INCR`s in
//! the same atomic step that takes the lock, so tokens strictly increase for as long as that
//! key survives. Redis replication is asynchronous: if the master fails before the latest
//! `INCR` reached a replica (or a server without persistence restarts), the promoted server's
//! counter is behind and tokens *go backwards*; a resource that checks tokens then refuses the
//! new holder's writes until the counter passes the old value, which is the safe direction
//! but an outage. Run Redis with `appendonly yes` and `appendfsync always` (or `WAIT` for
//! replicas) if that matters; a ZooKeeper lock's token has no such gap.
//!
//! # What the library keeps in Redis
//!
//! Every key of a lock carries the lock's name as a hash tag: `PREFIX:lease:{name}`,
//! `PREFIX:lease:{name}:fence`, and the release channel `PREFIX:lease:{name}:released`. The
//! fencing counter has no expiry (it must outlive every holder); all other keys expire with
//! their lease.

mod client;
mod conn;
mod keys;
mod lease;
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
pub use keys::DEFAULT_PREFIX;
pub use lease::DEFAULT_WATCHDOG_TTL;
pub use lease_lock::{LeaseGuard, LeaseLock};
pub use local_reentrant::{LocalReentrantGuard, LocalReentrantLock};
pub use reentrant::{ReentrantGuard, ReentrantLock, Unlock};
pub use rwlock::{RwGuard, RwLock, RwMode};
pub use semaphore::{Semaphore, SemaphorePermit};
