//! Distributed locks and coordination for Rust services: a lock that exactly one process
//! holds, a leader among replicas, members, caches, counters, barriers, queues and two-phase
//! commit, on ZooKeeper (or Keeper, its server), Redis and etcd.
//!
//! # A tour
//!
//! ```no_run
//! use lockkeeper::zk::Session;
//! # async fn demo() -> lockkeeper::Result<()> {
//! # async fn write_to_store(_: lockkeeper::FencingToken) -> lockkeeper::Result<()> { Ok(()) }
//! let session = Session::connect("127.0.0.1:2181").await?;     // ZooKeeper or Keeper
//! let guard = session.mutex("/locks/orders")?.lock().await?;   // fair; Curator's layout
//! tokio::select! {
//!     () = guard.lost() => eprintln!("lost the lock: stop"),   // expired, paused, deleted
//!     result = write_to_store(guard.fencing_token()) => result?, // the store refuses old tokens
//! }
//! guard.release().await?;
//!
//! let latch = session.leader_latch("/services/billing/leader", "billing-1")?;
//! latch.run(|term| async move { let _token = term.fencing_token(); /* lead */ }).await?;
//! # Ok(()) }
//! ```
//!
//! **One shape**: every lock of every backend is a [`Lock`] that hands out a [`Guard`] (the
//! fencing token, `is_held()`, `valid_until()`, `lost()`, `release()`), usable as trait
//! objects, and [`MultiLock`] holds any set of them all or nothing; see [`lock`]. How a lock is
//! held (lease, maximum hold time, lock-delay) is one [`LockOptions`].
//!
//! Every guard carries the two things a correct user of a distributed lock needs and most
//! toolkits leave out:
//! - a [`FencingToken`], strictly increasing per lock, to hand to the resource the lock protects
//!   so that it can refuse a write from a holder that paused past its lease ([`fence`] has
//!   resources that check it);
//! - a lost-lock signal (`guard.lost().await` and `guard.is_held()`), because a distributed lock
//!   can be taken away (session expiry, lease end) without its holder doing anything.
//!
//! # Layout
//!
//! - [`lock`]: the [`Lock`] and [`Guard`] traits every lock implements; [`LockOptions`];
//!   [`MultiLock`], several locks all or nothing.
//! - [`zk`]: the ZooKeeper recipes, by Curator's families (locks, leader election, caches,
//!   barriers, queues, counters, membership and naming, two-phase commit), on a [`zk::Session`];
//!   `zk::client` is the ZooKeeper client underneath.
//! - [`redis`]: the Redis lock family (lease, reentrant, read-write, semaphore, Redlock).
//! - [`etcd`] (the cargo feature `etcd`, on by default; no `protoc` needed: lockkeeper compiles
//!   its own subset of etcd's protobuf API with a vendored protoc): a mutex and an election
//!   shared with `etcdctl lock` and `etcdctl elect`, a read-write lock and a semaphore.
//!   `default-features = false` leaves it and its gRPC dependencies out.
//! - [`fence`]: resources that refuse stale fencing tokens (in-process, Redis, SQL, ZooKeeper).
//! - [`error`]: one [`Error`] for every backend.
//!
//! # The guide
//!
//! The repository's `docs/guide/` has a page per task, from locks and fencing to running Keeper
//! in production; `docs/safety.md` says what is guaranteed under which faults, and how the fault
//! suite shows it. `examples/` has a runnable program per family
//! (`cargo run -p lockkeeper --example zk_mutex`).

#![warn(missing_docs)]

mod deadline;
pub mod error;
#[cfg(feature = "etcd")]
pub mod etcd;
pub mod fence;
pub mod fencing;
mod grant;
pub mod lock;
mod multi_lock;
mod options;
mod probe;
pub mod redis;
mod sync;
pub mod zk;

pub use error::{ConnectCause, Error, Result};
pub use fence::{LocalFence, RedisFence, ZkFence};
pub use fencing::FencingToken;
pub use lock::{Guard, Lock};
/// A client's TLS files (the CA, and a certificate for servers that ask for one), for every
/// backend: `zk::SessionBuilder::tls`, `redis::RedisOptions::tls`, `etcd::SessionBuilder::tls`.
pub use lockkeeper_zk_client::TlsFiles;
pub use multi_lock::{MultiGuard, MultiLock};
pub use options::LockOptions;

/// The examples of the README and of every guide page, compiled as doc tests so that they
/// cannot drift from the API (`tests/docs.rs` checks that every page with Rust in it is here).
#[cfg(doctest)]
pub mod documentation {
    #[doc = include_str!("../../../README.md")]
    pub struct Readme;
    #[doc = include_str!("../../../docs/guide/barriers.md")]
    pub struct Barriers;
    #[doc = include_str!("../../../docs/guide/configuration-and-naming.md")]
    pub struct ConfigurationAndNaming;
    #[doc = include_str!("../../../docs/guide/counters.md")]
    pub struct Counters;
    #[doc = include_str!("../../../docs/guide/etcd.md")]
    pub struct Etcd;
    #[doc = include_str!("../../../docs/guide/fencing.md")]
    pub struct Fencing;
    #[doc = include_str!("../../../docs/guide/leader-election.md")]
    pub struct LeaderElection;
    #[doc = include_str!("../../../docs/guide/locks.md")]
    pub struct Locks;
    #[doc = include_str!("../../../docs/guide/membership.md")]
    pub struct Membership;
    #[doc = include_str!("../../../docs/guide/queues.md")]
    pub struct Queues;
    #[doc = include_str!("../../../docs/guide/redis.md")]
    pub struct Redis;
    #[doc = include_str!("../../../docs/guide/revocation-and-multi-locks.md")]
    pub struct RevocationAndMultiLocks;
    #[doc = include_str!("../../../docs/guide/testing.md")]
    pub struct Testing;
    #[doc = include_str!("../../../docs/guide/two-phase-commit.md")]
    pub struct TwoPhaseCommit;
    #[doc = include_str!("../../../docs/guide/zookeeper-client.md")]
    pub struct ZookeeperClient;
}
