//! Watched configuration: a cache of one node or of a whole subtree, read from memory and kept
//! up to date by the server's watch events (Curator's `CuratorCache`).
//!
//! A tree cache registers one persistent recursive watch on its root (`AddWatch`, opcode 106:
//! Apache ZooKeeper 3.6 and later, and Keeper); a node cache one persistent watch on its node.
//! Those events carry no data, so each one is a prompt to read the node again: the view
//! follows the reads, under an ordering rule that never lets an older version of a node
//! replace a newer one (`cache/view.rs`). A server older than 3.6 answers `AddWatch` with
//! `Unimplemented` (and closes the connection): building the cache fails with that error.
//!
//! Invariants:
//! - The watch is registered before the reads it backs: every change after a read has an
//!   event queued, so the view cannot miss it.
//! - After every reconnection, and in every new session after `Lost`, the watch is registered
//!   again and the whole view is read afresh, the difference emitted as events, then
//!   [`CacheEvent::Rebuilt`]. Events are not delivered while disconnected (ZOOKEEPER-4698):
//!   the client registers persistent watches again when it reconnects, but nothing tells it
//!   what changed meanwhile.
//! - Until then the cache serves the last view it read: stale, never inconsistent.
//! - Dropping the last handle (or [`Cache::close`]) stops the task and removes the watch.

mod task;
mod view;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex as StdMutex, MutexGuard};
use std::time::Duration;

use lockkeeper_zk_client::Stat;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::error::{Error, Result};
use crate::sync::lock;
use crate::zk::path::validate_path;
use crate::zk::session::Session;
use task::Spec;
use view::View;

/// A node as the cache last read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CachedNode {
    /// The node's data.
    pub data: Vec<u8>,
    /// The node's stat, as of the last read. Its children counters (`num_children`,
    /// `cversion`, `pzxid`) follow creations and deletions of children too: those events make
    /// the cache read the parent again (without emitting an event for it).
    pub stat: Stat,
}

/// A change to a [`Cache`]. The events of one path come in its version order.
#[derive(Clone, Debug, PartialEq)]
pub enum CacheEvent {
    /// A node appeared (or was seen for the first time).
    Created {
        /// Its full path.
        path: String,
        /// What it holds.
        node: CachedNode,
    },
    /// A node's data changed (a newer `mzxid`).
    Changed {
        /// Its full path.
        path: String,
        /// The version the cache held before.
        old: CachedNode,
        /// The new version.
        node: CachedNode,
    },
    /// A node is gone. A node deleted and created again between two reads shows as
    /// `Deleted` then `Created`.
    Deleted {
        /// Its full path.
        path: String,
        /// The last version the cache held.
        old: CachedNode,
    },
    /// The view is complete for the first time: only seen by [`Cache::replay`] streams, after
    /// the `Created` of every node.
    Initialized,
    /// The view was read again in full after a reconnection or a new session; the events just
    /// before this one were the difference.
    Rebuilt,
}

/// A cache of one node or of a subtree: see the module docs. Cheap to clone; every clone
/// shares the one view, and dropping the last one stops it.
///
/// ```no_run
/// # async fn demo(session: lockkeeper::zk::Session) -> lockkeeper::Result<()> {
/// let cache = session.tree_cache("/config").await?;
/// if let Some(node) = cache.get("/config/db/url") {
///     println!("db at {}", String::from_utf8_lossy(&node.data));
/// }
/// let mut events = cache.events();
/// while let Some(event) = events.next().await {
///     println!("{event:?}");
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Cache {
    inner: Arc<Inner>,
}

struct Inner {
    root: String,
    view: Arc<StdMutex<View>>,
    task: StdMutex<Option<JoinHandle<()>>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(task) = take(&self.task) {
            task.abort();
        }
        lock(&self.view).close();
    }
}

impl Session {
    /// A cache of `path` and everything below it, kept by one persistent recursive watch
    /// (ZooKeeper 3.6+ or Keeper). Returns once the whole subtree has been read; `path` need
    /// not exist yet. [`Error::InvalidArgument`] for a path that is not absolute.
    pub async fn tree_cache(&self, path: &str) -> Result<Cache> {
        Cache::start(self, path, true).await
    }

    /// A cache of the single node `path` (which may not exist yet), kept by one persistent
    /// watch. Returns once the node has been read.
    pub async fn node_cache(&self, path: &str) -> Result<Cache> {
        Cache::start(self, path, false).await
    }
}

impl Cache {
    async fn start(session: &Session, path: &str, recursive: bool) -> Result<Cache> {
        validate_path("cache path", path)?;
        let view = Arc::new(StdMutex::new(View::default()));
        let (ready, initialized) = oneshot::channel();
        let spec = Spec {
            root: path.to_owned(),
            recursive,
        };
        let task = tokio::spawn(task::run(session.clone(), spec, view.clone(), ready));
        let cache = Cache {
            inner: Arc::new(Inner {
                root: path.to_owned(),
                view,
                task: StdMutex::new(Some(task)),
            }),
        };
        match initialized.await {
            Ok(Ok(())) => Ok(cache),
            Ok(Err(err)) => Err(err),
            // The task ended without a word: only a closed session does that.
            Err(_) => Err(Error::SessionLost),
        }
    }

    /// The path this cache was made for.
    pub fn path(&self) -> &str {
        &self.inner.root
    }

    /// The node at `path` as last read, from memory; `None` if it does not exist (or is
    /// outside the cache).
    pub fn get(&self, path: &str) -> Option<CachedNode> {
        self.view().get(path)
    }

    /// The direct children of `path` in the cache, by name, sorted.
    pub fn children(&self, path: &str) -> Vec<(String, CachedNode)> {
        self.view().children(path)
    }

    /// Every node in the cache, by full path.
    pub fn snapshot(&self) -> BTreeMap<String, CachedNode> {
        self.view().snapshot()
    }

    /// How many nodes the cache holds.
    pub fn len(&self) -> usize {
        self.view().len()
    }

    /// Whether the cache holds no node (the path does not exist).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The changes from now on. Events wait in memory until read: a subscriber that stops
    /// reading should be dropped.
    pub fn events(&self) -> CacheEvents {
        let receiver = self.view().subscribe();
        self.stream(receiver)
    }

    /// The current view as events (a `Created` for every node, then
    /// [`CacheEvent::Initialized`]), followed by the changes from then on, with nothing
    /// missed or told twice in between.
    pub fn replay(&self) -> CacheEvents {
        let receiver = self.view().subscribe_replayed();
        self.stream(receiver)
    }

    /// The current view and the changes from then on, taken together.
    pub fn snapshot_and_events(&self) -> (BTreeMap<String, CachedNode>, CacheEvents) {
        let mut view = self.view();
        let snapshot = view.snapshot();
        let receiver = view.subscribe();
        drop(view);
        (snapshot, self.stream(receiver))
    }

    /// Stops the cache for every clone: the watch is removed and every event stream ends.
    pub async fn close(self) {
        if let Some(task) = take(&self.inner.task) {
            task.abort();
            // A cancelled task has dropped its watch by the time this returns.
            let _ = task.await;
        }
        lock(&self.inner.view).close();
    }

    fn view(&self) -> MutexGuard<'_, View> {
        lock(&self.inner.view)
    }

    fn stream(&self, receiver: mpsc::UnboundedReceiver<CacheEvent>) -> CacheEvents {
        CacheEvents {
            root: self.inner.root.clone(),
            receiver,
        }
    }
}

impl std::fmt::Debug for Cache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cache")
            .field("path", &self.inner.root)
            .field("nodes", &self.len())
            .finish()
    }
}

/// A stream of [`CacheEvent`]s from [`Cache::events`] or [`Cache::replay`]: a
/// [`Stream`](futures_util::Stream), for its combinators, and [`next`](CacheEvents::next) for a
/// plain loop.
pub struct CacheEvents {
    root: String,
    receiver: mpsc::UnboundedReceiver<CacheEvent>,
}

impl CacheEvents {
    /// The next event; `None` once the cache is closed (or dropped) and every event sent
    /// before was read.
    pub async fn next(&mut self) -> Option<CacheEvent> {
        self.receiver.recv().await
    }

    /// The next event if one comes within `timeout`; `Ok(None)` if none did (or the cache is
    /// closed). [`Error::InvalidArgument`] for a zero timeout: use [`try_next`].
    ///
    /// [`try_next`]: CacheEvents::try_next
    pub async fn next_timeout(&mut self, timeout: Duration) -> Result<Option<CacheEvent>> {
        if timeout.is_zero() {
            return Err(Error::InvalidArgument(format!(
                "timeout for the events of the cache of {:?} must be greater than zero \
                 (try_next does not wait)",
                self.root
            )));
        }
        Ok(tokio::time::timeout(timeout, self.receiver.recv())
            .await
            .ok()
            .flatten())
    }

    /// The next event if one is waiting, without waiting.
    pub fn try_next(&mut self) -> Option<CacheEvent> {
        self.receiver.try_recv().ok()
    }
}

/// Ends when [`next`](CacheEvents::next) would answer `None`.
impl futures_util::Stream for CacheEvents {
    type Item = CacheEvent;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<CacheEvent>> {
        self.receiver.poll_recv(cx)
    }
}

fn take(task: &StdMutex<Option<JoinHandle<()>>>) -> Option<JoinHandle<()>> {
    lock(task).take()
}
