//! ZooKeeper recipes: locks that work the same on Keeper and on an Apache ZooKeeper ensemble.
//!
//! Everything starts from a [`Session`]; each recipe is a handle made from it:
//!
//! ```no_run
//! # async fn demo() -> lockkeeper::Result<()> {
//! use lockkeeper::zk::Session;
//!
//! let session = Session::connect("127.0.0.1:2181/myapp").await?;
//! let mutex = session.mutex("/locks/orders")?;
//! let guard = mutex.lock().await?;
//! // ... write to the resource, passing guard.fencing_token() along
//! guard.release().await?;
//! # Ok(()) }
//! ```
//!
//! Node layouts are Curator's, so a lock can be shared with Java services using Curator.
//!
//! The recipes, by Curator's families (each re-exported here, so every one is one click away):
//!
//! | family | recipes |
//! |---|---|
//! | locks | [`Mutex`], [`RwLock`], [`Semaphore`], [`SimpleLock`], revocation ([`LockGuard::revocation_requested`], [`Session::revoke`]); several at once: [`MultiLock`](crate::MultiLock) |
//! | leader | [`LeaderLatch`] ([`Leadership`], [`LeaderTerm`]) |
//! | cache | [`Cache`] ([`Session::tree_cache`], [`Session::node_cache`]) |
//! | barriers | [`Barrier`], [`DoubleBarrier`]; two-phase commit: [`TwoPhase`] |
//! | queue | [`DistributedQueue`], [`PriorityQueue`], [`SimpleQueue`] |
//! | atomic | [`AtomicLong`], [`SharedCount`] |
//! | nodes | group membership ([`Group`], [`Member`]), naming ([`Registration`], [`NameWatch`]) |
//! | inspection | [`inspect`], [`inspect_semaphore`] |
//!
//! Two rules every handle follows:
//! - **A constructor on [`Session`] is `async` exactly when it asks the server** something
//!   before it can return: [`Session::tree_cache`] and [`Session::node_cache`] prime the
//!   cache, [`Session::shared_count`] reads (or creates) the count, [`Session::watch_name`]
//!   reads the name. The others ([`Session::mutex`], [`Session::atomic_long`], ...) only
//!   check their arguments, send nothing, and are plain functions.
//! - **Every stream of events is a [`Stream`](futures_util::Stream)** ([`CacheEvents`],
//!   [`GroupView`], [`NameWatch`], [`CountChanges`], [`StateStream`]), with an inherent
//!   `next()` that answers the same, for a `while let` without importing `StreamExt`.
//!
//! The recipes speak to the server through [`client`] (the crate `lockkeeper-zk-client`), a
//! ZooKeeper client on Tokio; [`Session::client`] hands out its `Client` for operations the
//! recipes do not cover, and [`Error::Zk`](crate::Error::Zk) carries its errors.

// The shared layer: the session and its connection, node operations, paths, retries, a held
// node and inspection. The families below use it, and never each other, except through the
// locks' waiting line (`locks::line`), which leader election queues on too.
mod connect;
mod hold;
mod inspect;
mod node;
pub(crate) mod path;
mod retry;
pub(crate) mod session;

// The recipes, by Curator's families.
mod atomic;
mod barriers;
mod cache;
mod leader;
mod locks;
mod nodes;
mod queue;
mod two_phase;

/// The ZooKeeper client the recipes run on: `lockkeeper-zk-client`, re-exported so that the
/// `Client` of [`Session::client`] and the errors in [`Error::Zk`](crate::Error::Zk) need no
/// dependency of their own.
pub use lockkeeper_zk_client as client;

pub use atomic::{AtomicLong, CountChanges, SharedCount, VersionedCount};
pub use barriers::{Barrier, DoubleBarrier, Entered};
pub use cache::{Cache, CacheEvent, CacheEvents, CachedNode};
pub use inspect::{Inspection, Layout, NodeKind, Participant, State, inspect, inspect_semaphore};
pub use leader::{Candidate, LeaderLatch, LeaderTerm, Leadership};
pub use lockkeeper_zk_client::TlsFiles;
pub use locks::{Leases, LockGuard, Mutex, Revoked, RwLock, Semaphore, SimpleLock};
pub use nodes::{Group, GroupView, Member, MemberEvent, NameWatch, Registered, Registration};
pub use queue::{Delivery, DistributedQueue, PriorityQueue, SimpleQueue, Taken};
pub use retry::RetryPolicy;
pub use session::{ConnectionState, Session, SessionBuilder, StateStream};
pub use two_phase::{AbortReason, Outcome, Proposal, TwoPhase, Vote};

impl Session {
    /// A [`Mutex`] on `path` (Curator's `InterProcessMutex` layout). Each call makes a new
    /// owner: handles from separate calls exclude each other.
    pub fn mutex(&self, path: &str) -> crate::Result<Mutex> {
        Mutex::new(self.clone(), path)
    }

    /// A [`RwLock`] on `path` (Curator's `InterProcessReadWriteLock` layout). Each call makes
    /// a new owner: handles from separate calls are separate readers and writers.
    pub fn rw_lock(&self, path: &str) -> crate::Result<RwLock> {
        RwLock::new(self.clone(), path)
    }

    /// A [`Semaphore`] at `path` granting at most `max_leases` leases at once (Curator's
    /// `InterProcessSemaphoreV2` layout). Every user of the path must pass the same maximum.
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a `max_leases` of 0.
    pub fn semaphore(&self, path: &str, max_leases: u32) -> crate::Result<Semaphore> {
        Semaphore::new(self.clone(), path, max_leases)
    }

    /// A [`SimpleLock`] on `path`: the naive one-node lock, unfair and prone to the herd
    /// effect, kept to compare against [`Mutex`]. Each call makes a new owner.
    pub fn simple_lock(&self, path: &str) -> crate::Result<SimpleLock> {
        SimpleLock::new(self.clone(), path)
    }

    /// The holders and waiters of the lock at `path`, in queue order: see [`inspect`].
    pub async fn inspect(&self, path: &str) -> crate::Result<Inspection> {
        inspect(self, path).await
    }

    /// The lease holders and waiters of the semaphore at `path`: see [`inspect_semaphore`].
    pub async fn inspect_semaphore(
        &self,
        path: &str,
        max_leases: u32,
    ) -> crate::Result<Inspection> {
        inspect_semaphore(self, path, max_leases).await
    }
}
