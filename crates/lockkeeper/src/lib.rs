//! Distributed locks and coordination for Rust services.
//!
//! **One shape**: every lock of every backend is a [`Lock`] that hands out a [`Guard`] (the
//! fencing token, `is_held()`, `valid_until()`, `lost()`, `release()`), usable as trait
//! objects, and [`MultiLock`] holds any set of them all or nothing; see [`lock`].
//!
//! **The backends**: [`zk`] holds the ZooKeeper recipes (fair, herd-free locks whose
//! nodes use Apache Curator's layout, so Java and Rust services can share a lock); [`redis`]
//! holds the Redis lock family (lease locks, watchdog renewal, Redlock). Both follow
//! `tokio::sync`: `lock()`, `try_lock()`, `lock_timeout(d)`, and a guard that releases on drop.
//! The `etcd` module adds the same shape on etcd v3 (a mutex that `etcdctl lock` shares, an
//! election that `etcdctl elect` shares, a read-write lock and a semaphore). It is the cargo
//! feature `etcd`, on by default; building it needs no `protoc` installed (lockkeeper compiles
//! its own subset of etcd's protobuf API with the protoc that `protoc-bin-vendored` ships), and
//! `default-features = false` leaves it and its gRPC dependencies out.
//!
//! Every guard carries the two things a correct user of a distributed lock needs and most
//! toolkits leave out:
//! - a [`FencingToken`], strictly increasing per lock, to hand to the resource the lock protects
//!   so that it can refuse a write from a holder that paused past its lease;
//! - a lost-lock signal (`guard.lost().await` and `guard.is_held()`), because a distributed lock
//!   can be taken away (session expiry, lease end) without its holder doing anything.

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
pub use multi_lock::{MultiGuard, MultiLock};
pub use options::LockOptions;

/// The README's examples, compiled as doc tests so that they cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeExamples;
