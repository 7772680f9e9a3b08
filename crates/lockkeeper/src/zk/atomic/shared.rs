//! [`SharedCount`]: Curator's `SharedCount`, an `i32` every participant sees, kept current by
//! a watch.
//!
//! Invariants:
//! - The node holds 4 bytes, a big-endian `i32`, as Curator's `SharedCount` and kazoo's
//!   `Counter(support_curator=True)` write it. The seed is written only by creating the node,
//!   so it never overwrites a value; an empty node (kazoo's `ensure_path` makes one) reads as
//!   the seed, as kazoo reads it as its default.
//! - The cached value only moves forward: a newer version of the node, or a node created after
//!   the one cached (higher czxid), replaces it; an older answer arriving late does not.
//! - One task per `SharedCount` follows the node: a data watch while it exists, an exists
//!   watch while it does not (Curator stops following a deleted node; this does not), and a
//!   fresh read after every reconnection and new session. It ends when the last handle goes.

use std::sync::Arc;

use lockkeeper_zk_client::{EventType, OneshotWatcher, Stat};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::ReusableBoxFuture;

use crate::error::Result;
use crate::zk::atomic::codec::{decode_i32, encode_i32};
use crate::zk::atomic::long::validate_counter_path;
use crate::zk::atomic::write::{Base, Written, write_if};
use crate::zk::node::look;
use crate::zk::session::{Generation, Session, is_connection_loss};

/// A count and the node version it was read at: what [`SharedCount::try_set`] compares.
///
/// `version` is -1 while the node does not exist (someone deleted it); `value` is then the
/// last value seen. A `try_set` against version -1 never writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct VersionedCount {
    /// The count.
    pub value: i32,
    /// The node's data version (ZooKeeper's `Stat.version`).
    pub version: i32,
}

/// A shared `i32` with the node layout of Curator's `SharedCount` (and kazoo's
/// `Counter(support_curator=True)`), so Java and Python services share it.
///
/// [`load`](Self::load) answers from a cache a watch keeps current, with no round trip;
/// [`store`](Self::store) writes whatever the value is, [`try_set`](Self::try_set) only if the node
/// is still at the version read; [`changes`](Self::changes) follows new values. Cheap to clone;
/// the watch ends when the last clone is dropped.
///
/// ```no_run
/// # async fn demo() -> lockkeeper::Result<()> {
/// use lockkeeper::zk::Session;
///
/// let session = Session::connect("127.0.0.1:2181").await?;
/// let workers = session.shared_count("/config/workers", 4).await?;
/// loop {
///     let seen = workers.versioned();
///     if workers.try_set(&seen, seen.value + 1).await? {
///         break;
///     }
///     // Someone else changed it first: the cache has their value now; try again.
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct SharedCount {
    inner: Arc<Inner>,
}

struct Inner {
    session: Session,
    path: String,
    seed: i32,
    current: Arc<watch::Sender<Cached>>,
    follower: JoinHandle<()>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.follower.abort();
    }
}

/// The cached count and the node it came from.
#[derive(Clone, Copy, Debug)]
struct Cached {
    count: VersionedCount,
    /// The czxid of the node read: a recreated node starts again at version 0.
    czxid: i64,
}

/// What one read of the node found.
enum Seen {
    Value(Cached),
    Absent,
}

impl SharedCount {
    pub(crate) async fn start(session: Session, path: &str, seed: i32) -> Result<SharedCount> {
        validate_counter_path(path)?;
        // Seed by creating: an existing node keeps its value. Whether a create whose answer
        // was lost went through does not matter; the read below says what is there.
        match write_if(&session, path, Base::Absent, &encode_i32(seed)).await {
            Ok(Written::Applied(_) | Written::Overtaken) => {}
            Err(crate::Error::Zk(err)) if is_connection_loss(&err) => {}
            Err(err) => return Err(err),
        }
        let generation = session.generation();
        let (seen, watcher) = read(&generation, path, seed, true).await?;
        let cached = match seen {
            Seen::Value(cached) => cached,
            Seen::Absent => absent(seed, 0),
        };
        let current = Arc::new(watch::Sender::new(cached));
        let follower = tokio::spawn(follow(
            session.clone(),
            path.to_owned(),
            seed,
            current.clone(),
            generation,
            watcher,
        ));
        Ok(SharedCount {
            inner: Arc::new(Inner {
                session,
                path: path.to_owned(),
                seed,
                current,
                follower,
            }),
        })
    }

    /// The counter node's path.
    pub fn path(&self) -> &str {
        &self.inner.path
    }

    /// The count, from the cache (no round trip; Curator's `getCount`).
    pub fn load(&self) -> i32 {
        self.inner.current.borrow().count.value
    }

    /// The count and its version, from the cache (Curator's `getVersionedValue`): pass it to
    /// [`try_set`](Self::try_set).
    pub fn versioned(&self) -> VersionedCount {
        self.inner.current.borrow().count
    }

    /// Reads the node now rather than the cache, and updates the cache with what it found.
    /// Unlike the watch (which keeps the last good value and logs), this reports a node that
    /// does not hold 4 bytes as an error naming the path and the bytes.
    pub async fn read(&self) -> Result<VersionedCount> {
        let (seen, _) = read(
            &self.inner.session.generation(),
            &self.inner.path,
            self.inner.seed,
            false,
        )
        .await?;
        match seen {
            Seen::Value(cached) => self.offer(cached),
            Seen::Absent => self.offer_absent(),
        }
        Ok(self.versioned())
    }

    /// Sets the count whatever it is now (Curator's `setCount`), creating the node if someone
    /// deleted it.
    pub async fn store(&self, value: i32) -> Result<()> {
        let data = encode_i32(value);
        let session = &self.inner.session;
        let attempts = session.generation().retry_policy().max_attempts();
        for _ in 0..attempts {
            // Set if present, else create; each fails only if the other case arose meanwhile.
            for base in [Base::Any, Base::Absent] {
                if let Written::Applied(stat) =
                    write_if(session, &self.inner.path, base, &data).await?
                {
                    self.offer(cached(value, &stat));
                    return Ok(());
                }
            }
        }
        Err(crate::Error::Contended {
            path: self.inner.path.clone(),
            attempts,
        })
    }

    /// Sets the count to `value` only if the node is still at `previous.version` (Curator's
    /// `trySetCount(VersionedValue, int)`). `false` if it changed since: nothing was written,
    /// and the cache holds the newer value, so `versioned()` is the next thing to try against.
    ///
    /// If the connection is lost while the write is in flight and the node changed since, the
    /// connection-loss error ([`Error::Zk`](crate::Error::Zk)) or
    /// [`Error::SessionLost`](crate::Error::SessionLost) says the outcome is unknown.
    pub async fn try_set(&self, previous: &VersionedCount, value: i32) -> Result<bool> {
        if previous.version < 0 {
            // Version -1 means "any version" to ZooKeeper: never send it.
            return Ok(false);
        }
        let base = Base::Version(previous.version);
        let session = &self.inner.session;
        match write_if(session, &self.inner.path, base, &encode_i32(value)).await? {
            Written::Applied(stat) => {
                self.offer(cached(value, &stat));
                Ok(true)
            }
            Written::Overtaken => {
                // Refresh the cache so that the caller's next attempt has a chance. A node
                // holding garbage is reported by the next read(), not here.
                if let Err(err) = self.read().await {
                    tracing::debug!(path = self.inner.path, %err, "re-reading after a lost try_set failed");
                }
                Ok(false)
            }
        }
    }

    /// New values from now on, as the watch sees them. Values written in quick succession may
    /// be seen only as the last of them (a ZooKeeper watch fires once per registration); the
    /// latest value is never skipped.
    pub fn changes(&self) -> CountChanges {
        CountChanges::new(self.inner.current.subscribe())
    }

    fn offer(&self, cached: Cached) {
        offer(&self.inner.current, cached);
    }

    fn offer_absent(&self) {
        let czxid = self.inner.current.borrow().czxid;
        self.inner
            .current
            .send_if_modified(|current| mark_absent(current, czxid));
    }
}

impl std::fmt::Debug for SharedCount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedCount")
            .field("path", &self.inner.path)
            .field("count", &self.versioned())
            .finish()
    }
}

/// The new values of a [`SharedCount`]: see [`SharedCount::changes`].
///
/// ```no_run
/// # async fn demo(count: lockkeeper::zk::SharedCount) {
/// let mut changes = count.changes();
/// while let Some(now) = changes.next().await {
///     println!("{} is now {} (version {})", count.path(), now.value, now.version);
/// }
/// # }
/// ```
///
/// It is also a [`Stream`](futures_util::Stream) of the same values, for its combinators.
pub struct CountChanges {
    /// The wait for the next change, owning the receiver it waits on.
    changed: ReusableBoxFuture<'static, Changed>,
}

/// A change waited for, and the receiver to wait on next.
type Changed = (bool, watch::Receiver<Cached>);

async fn changed(mut current: watch::Receiver<Cached>) -> Changed {
    let open = current.changed().await.is_ok();
    (open, current)
}

impl CountChanges {
    fn new(current: watch::Receiver<Cached>) -> CountChanges {
        CountChanges {
            changed: ReusableBoxFuture::new(changed(current)),
        }
    }

    /// The next new value; `None` once every handle of the [`SharedCount`] is dropped.
    pub async fn next(&mut self) -> Option<VersionedCount> {
        futures_util::StreamExt::next(self).await
    }
}

impl futures_util::Stream for CountChanges {
    type Item = VersionedCount;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<VersionedCount>> {
        let (open, mut current) = std::task::ready!(self.changed.poll(cx));
        let count = open.then(|| current.borrow_and_update().count);
        self.changed.set(changed(current));
        std::task::Poll::Ready(count)
    }
}

fn cached(value: i32, stat: &Stat) -> Cached {
    Cached {
        count: VersionedCount {
            value,
            version: stat.version,
        },
        czxid: stat.czxid,
    }
}

fn absent(value: i32, czxid: i64) -> Cached {
    Cached {
        count: VersionedCount { value, version: -1 },
        czxid,
    }
}

/// Replaces the cache with `new` if it comes from a later state of the node (see the module
/// docs); wakes the `changes()` streams if so.
fn offer(current: &watch::Sender<Cached>, new: Cached) {
    current.send_if_modified(|cached| {
        let newer = (new.czxid, new.count.version) > (cached.czxid, cached.count.version);
        if newer {
            *cached = new;
        }
        newer
    });
}

/// Marks the node of `czxid` as gone, keeping its last value.
fn mark_absent(cached: &mut Cached, czxid: i64) -> bool {
    if cached.czxid != czxid || cached.count.version < 0 {
        return false;
    }
    cached.count.version = -1;
    true
}

/// Reads the node (with a data watch, or an exists watch if it is absent, when `watch`).
async fn read(
    generation: &Generation,
    path: &str,
    seed: i32,
    watch: bool,
) -> Result<(Seen, Option<OneshotWatcher>)> {
    loop {
        if let Some((data, stat, watcher)) = look(generation, path, watch).await? {
            let value = decode_i32(path, &data)?.unwrap_or(seed);
            return Ok((Seen::Value(cached(value, &stat)), watcher));
        }
        if !watch {
            return Ok((Seen::Absent, None));
        }
        let (stat, watcher) = generation
            .retry(|client| async move { client.check_and_watch_stat(path).await })
            .await?;
        if stat.is_none() {
            return Ok((Seen::Absent, Some(watcher)));
        }
        // Created between the two reads: read its data.
    }
}

/// The follower task (see the module docs). Ends when aborted (the last handle dropped) or
/// when the session is closed.
async fn follow(
    session: Session,
    path: String,
    seed: i32,
    current: Arc<watch::Sender<Cached>>,
    mut generation: Arc<Generation>,
    mut watcher: Option<OneshotWatcher>,
) {
    let mut failures = 0u32;
    loop {
        match watcher.take() {
            Some(pending) => tokio::select! {
                event = pending.changed() => {
                    if event.event_type == EventType::Session {
                        // The session is over; wait for the generation to say so.
                        generation.ended().await;
                    }
                }
                () = generation.unhealthy() => {
                    let _ = generation.connected().await;
                }
            },
            None => {
                let pause = std::time::Duration::from_millis(100) * failures.min(50);
                tokio::time::sleep(pause).await;
            }
        }
        let Ok(next) = session.connected_generation().await else {
            return;
        };
        generation = next;
        match read(&generation, &path, seed, true).await {
            Ok((seen, next)) => {
                failures = 0;
                watcher = next;
                match seen {
                    Seen::Value(cached) => offer(&current, cached),
                    Seen::Absent => {
                        let czxid = current.borrow().czxid;
                        current.send_if_modified(|cached| mark_absent(cached, czxid));
                    }
                }
            }
            Err(err) => {
                failures += 1;
                if failures == 1 || failures.is_power_of_two() {
                    tracing::warn!(path, %err, failures, "following a shared count failed; the cache keeps the last good value");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Version -1 marks a node that does not exist (the module's invariant): a `try_set`
    /// against it never writes, whatever version a node created again later has.
    #[test]
    fn an_absent_count_has_version_minus_one_and_keeps_its_value() {
        let gone = absent(3, 77);
        assert_eq!(
            gone.count,
            VersionedCount {
                value: 3,
                version: -1
            }
        );
        assert_eq!(gone.czxid, 77);
        let mut cached = cached_at(5, 2, 77);
        assert!(mark_absent(&mut cached, 77));
        assert_eq!(
            cached.count,
            VersionedCount {
                value: 5,
                version: -1
            }
        );
        assert!(
            !mark_absent(&mut cached, 77),
            "already absent: no change to report"
        );
        let mut newer = cached_at(6, 0, 78);
        assert!(!mark_absent(&mut newer, 77), "another node's deletion");
        assert_eq!(newer.count.version, 0);
    }

    fn cached_at(value: i32, version: i32, czxid: i64) -> Cached {
        Cached {
            count: VersionedCount { value, version },
            czxid,
        }
    }
}
