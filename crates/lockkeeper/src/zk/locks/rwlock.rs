//! [`RwLock`]: the ZooKeeper shared/exclusive lock (Curator's `InterProcessReadWriteLock`).
//!
//! Readers and writers queue in one directory, as `_c_{uuid}-__READ__{sequence}` and
//! `_c_{uuid}-__WRIT__{sequence}` nodes that sort together by sequence, so the queue is one
//! arrival order for both kinds. The grant rules are the ZooKeeper "Shared Locks" recipe:
//!
//! - a **writer** holds when its node is first, and watches the node just before it (exactly
//!   the mutex rule: it waits for every earlier reader and writer);
//! - a **reader** holds when no writer node comes before it, and watches the nearest earlier
//!   writer, asking again when that one goes (an earlier writer that timed out may leave
//!   another one in front).
//!
//! Each waiter also watches the node its rule would name once that one is gone, and lists
//! again when it goes (see the queue module), so a handoff costs the next holder no request.
//!
//! Because a reader waits for every *earlier* writer, a writer is never starved: readers that
//! arrive after it queue behind it, however many readers hold before it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::deadline::Deadline;
use crate::error::{Error, Result};
use crate::options::{Configure, Delay, LockOptions, Setting};
use crate::zk::hold::{Held, HoldOptions};
use crate::zk::locks::guard::LockGuard;
use crate::zk::locks::line::predecessor_rule;
use crate::zk::locks::line::{Decision, Line, READ_MARKER, WRITE_MARKER};
use crate::zk::locks::owner::Owner;
use crate::zk::path::validate_lock_path;
use crate::zk::session::{Health, Session};

/// Both markers: the sequence that orders the shared queue follows either.
const MARKERS: &[&str] = &[READ_MARKER, WRITE_MARKER];

/// A distributed read-write lock: many readers at once, or one writer. Its nodes use Curator's
/// `InterProcessReadWriteLock` layout, so Java services using Curator and Rust services using
/// lockkeeper can share one lock path.
///
/// The rules:
///
/// - **Readers share**: a read lock is granted as soon as no writer arrived before it.
/// - **Writers exclude**: a write lock is granted once every earlier reader and writer is
///   gone; while it is held nobody else reads or writes.
/// - **Fair, no writer starvation**: grants follow arrival order; a reader that arrives after
///   a waiting writer waits for that writer.
/// - **Herd-free**: a writer watches the node just before it, a reader the nearest earlier
///   writer, each also the node its rule names next (to list again early); a release wakes
///   only waiters it lets in or that list again early, never the whole queue.
/// - **Reentrant per handle, on each side**: `read()` on a handle (or a clone) that holds the
///   read lock re-enters without a round trip; the same for `write()`. Separate handles from
///   [`Session::rw_lock`] are separate owners, even in one session.
/// - **Downgrade**: a handle that holds the write lock may take the read lock; it is granted at
///   once. The write lock can then be released and the read lock stays: nobody can write in
///   between. (Writers that were already queued when the downgrade happened keep waiting until
///   the read lock goes too, since the read lock was granted ahead of them.)
/// - **No upgrade**: `write()` on a handle that holds only the read lock returns
///   [`Error::UpgradeRefused`]; waiting would deadlock, as the writer waits for every earlier
///   node, its own read node included.
/// - **Cancel-safe**: a dropped future, a timeout or an error deletes the waiter's node.
///
/// ```no_run
/// # async fn demo() -> lockkeeper::Result<()> {
/// use lockkeeper::zk::Session;
///
/// let session = Session::connect("127.0.0.1:2181").await?;
/// let config = session.rw_lock("/locks/config")?;
///
/// // Many services may read at once.
/// let read = config.read().await?;
/// // ... read the configuration
/// read.release().await?;
///
/// // One writes alone.
/// let write = config.write().await?;
/// // ... rewrite it, passing write.fencing_token() to the store
/// write.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RwLock {
    session: Session,
    read_queue: Line,
    write_queue: Line,
    readers: Arc<Owner>,
    writer: Arc<Owner>,
    options: HoldOptions,
}

impl RwLock {
    pub(crate) fn new(session: Session, path: &str) -> Result<RwLock> {
        validate_lock_path(path)?;
        let queue = |marker| Line {
            dir: path.to_owned(),
            marker,
            markers: MARKERS,
        };
        Ok(RwLock {
            session,
            read_queue: queue(READ_MARKER),
            write_queue: queue(WRITE_MARKER),
            readers: Arc::default(),
            writer: Arc::default(),
            options: HoldOptions::default(),
        })
    }

    /// How both sides hold the lock ([`LockOptions`]): `max_hold`, `lock_delay` and
    /// `keep_through_suspension`, as for a [`Mutex`](crate::zk::Mutex::with_options), for
    /// every read and write lock. Under lock-delay a reader is delayed only by a failed
    /// writer, a writer by any failed holder; a downgrade is never delayed (the write lock was
    /// ours). [`Error::InvalidArgument`] for a zero duration or an option this lock does not
    /// take (`lease`, `watchdog`).
    ///
    /// ```no_run
    /// # async fn demo(session: lockkeeper::zk::Session) -> lockkeeper::Result<()> {
    /// use std::time::Duration;
    /// use lockkeeper::LockOptions;
    ///
    /// let options = LockOptions::new().max_hold(Duration::from_secs(30));
    /// let config = session.rw_lock("/locks/config")?.with_options(options)?;
    /// let write = config.write().await?;
    /// # drop(write); Ok(()) }
    /// ```
    pub fn with_options(self, options: LockOptions) -> Result<RwLock> {
        options.apply(self)
    }

    /// The lock path (the parent of the read and write nodes).
    ///
    /// ```no_run
    /// # fn demo(session: lockkeeper::zk::Session) -> lockkeeper::Result<()> {
    /// let config = session.rw_lock("/locks/config")?;
    /// assert_eq!(config.path(), "/locks/config");
    /// # Ok(()) }
    /// ```
    pub fn path(&self) -> &str {
        &self.read_queue.dir
    }

    /// Waits until the read lock is granted: until no writer that arrived earlier holds or
    /// waits.
    ///
    /// ```no_run
    /// # async fn demo(session: lockkeeper::zk::Session) -> lockkeeper::Result<()> {
    /// let config = session.rw_lock("/locks/config")?;
    /// let guard = config.read().await?;
    /// // ... read, while writers are kept out
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn read(&self) -> Result<LockGuard> {
        let guard = self.acquire_read(Deadline::Never).await?;
        // With no deadline the acquisition only ends granted or with an error.
        guard.ok_or(Error::SessionLost)
    }

    /// Takes the read lock only if it can be granted now; `None` if a writer holds or waits
    /// ahead.
    ///
    /// ```no_run
    /// # async fn demo(session: lockkeeper::zk::Session) -> lockkeeper::Result<()> {
    /// let config = session.rw_lock("/locks/config")?;
    /// match config.try_read().await? {
    ///     Some(guard) => guard.release().await?,
    ///     None => println!("a writer is at work"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_read(&self) -> Result<Option<LockGuard>> {
        self.acquire_read(Deadline::Now).await
    }

    /// Waits at most `timeout` for the read lock; `None` if it was not granted in time (the
    /// waiting node is deleted before this returns). A zero timeout is refused with
    /// [`Error::InvalidArgument`]: use [`try_read`](Self::try_read).
    ///
    /// ```no_run
    /// # async fn demo(session: lockkeeper::zk::Session) -> lockkeeper::Result<()> {
    /// use std::time::Duration;
    ///
    /// let config = session.rw_lock("/locks/config")?;
    /// if let Some(guard) = config.read_timeout(Duration::from_secs(2)).await? {
    ///     guard.release().await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn read_timeout(&self, timeout: Duration) -> Result<Option<LockGuard>> {
        self.acquire_read(Deadline::after(timeout)?).await
    }

    /// Waits until the write lock is granted: until every reader and writer that arrived
    /// earlier is gone.
    ///
    /// [`Error::UpgradeRefused`] if this handle holds the read lock but not the write lock.
    ///
    /// ```no_run
    /// # async fn demo(session: lockkeeper::zk::Session) -> lockkeeper::Result<()> {
    /// let config = session.rw_lock("/locks/config")?;
    /// let guard = config.write().await?;
    /// // ... write, alone
    /// guard.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn write(&self) -> Result<LockGuard> {
        let guard = self.acquire_write(Deadline::Never).await?;
        guard.ok_or(Error::SessionLost)
    }

    /// Takes the write lock only if nobody else holds or waits for the lock now; `None`
    /// otherwise. [`Error::UpgradeRefused`] as for [`write`](Self::write).
    ///
    /// ```no_run
    /// # async fn demo(session: lockkeeper::zk::Session) -> lockkeeper::Result<()> {
    /// let config = session.rw_lock("/locks/config")?;
    /// if let Some(guard) = config.try_write().await? {
    ///     guard.release().await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_write(&self) -> Result<Option<LockGuard>> {
        self.acquire_write(Deadline::Now).await
    }

    /// Waits at most `timeout` for the write lock; `None` if it was not granted in time (the
    /// waiting node is deleted before this returns). A zero timeout is refused with
    /// [`Error::InvalidArgument`]: use [`try_write`](Self::try_write).
    /// [`Error::UpgradeRefused`] as for [`write`](Self::write).
    ///
    /// ```no_run
    /// # async fn demo(session: lockkeeper::zk::Session) -> lockkeeper::Result<()> {
    /// use std::time::Duration;
    ///
    /// let config = session.rw_lock("/locks/config")?;
    /// match config.write_timeout(Duration::from_secs(5)).await? {
    ///     Some(guard) => guard.release().await?,
    ///     None => println!("readers kept it for more than 5 s"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn write_timeout(&self, timeout: Duration) -> Result<Option<LockGuard>> {
        self.acquire_write(Deadline::after(timeout)?).await
    }

    /// How many read guards this handle holds (its read reentrancy count); 0 when none.
    ///
    /// ```no_run
    /// # async fn demo(session: lockkeeper::zk::Session) -> lockkeeper::Result<()> {
    /// let config = session.rw_lock("/locks/config")?;
    /// let first = config.read().await?;
    /// let again = config.read().await?; // re-entered: no second node
    /// assert_eq!(config.read_hold_count(), 2);
    /// # drop((first, again)); Ok(()) }
    /// ```
    pub fn read_hold_count(&self) -> usize {
        self.readers.count()
    }

    /// How many write guards this handle holds (its write reentrancy count); 0 when none.
    ///
    /// ```no_run
    /// # async fn demo(session: lockkeeper::zk::Session) -> lockkeeper::Result<()> {
    /// let config = session.rw_lock("/locks/config")?;
    /// let guard = config.write().await?;
    /// assert_eq!(config.write_hold_count(), 1);
    /// guard.release().await?;
    /// assert_eq!(config.write_hold_count(), 0);
    /// # Ok(()) }
    /// ```
    pub fn write_hold_count(&self) -> usize {
        self.writer.count()
    }

    async fn acquire_write(&self, deadline: Deadline) -> Result<Option<LockGuard>> {
        let holds = |owner: &Owner| owner.current().is_some_and(|held| !held.is_gone());
        if holds(&self.readers) && !holds(&self.writer) {
            return Err(Error::UpgradeRefused);
        }
        let held = self
            .writer
            .lock(deadline, || {
                self.write_queue.acquire_with(
                    &self.session,
                    &predecessor_rule,
                    deadline,
                    self.options,
                )
            })
            .await?;
        Ok(held.map(|held| LockGuard::new(self.writer.clone(), held)))
    }

    async fn acquire_read(&self, deadline: Deadline) -> Result<Option<LockGuard>> {
        let held = self
            .readers
            .lock(deadline, || self.read_node(deadline))
            .await?;
        Ok(held.map(|held| LockGuard::new(self.readers.clone(), held)))
    }

    /// Queues a read node; granted at once when this handle holds the write lock (downgrade).
    async fn read_node(&self, deadline: Deadline) -> Result<Option<Held>> {
        let write = self.writer.current().filter(|held| !held.is_gone());
        let Some(pin) = write.and_then(Pin::new) else {
            return self
                .read_queue
                .acquire_with(&self.session, &reader_rule, deadline, self.options)
                .await;
        };
        let write_name = child_name(pin.write.node()).to_owned();
        let overtakes = AtomicBool::new(false);
        // The write lock was ours until now: no failure to wait out. The downgrade rule records
        // what it saw only when it grants, which is on the first listing, a real one (the
        // queue also asks rules about listings it derives, see `queue::Rule`). The write's
        // release is recorded all the same, for the writers queued behind it.
        let downgraded = HoldOptions {
            at_once: true,
            ..self.options
        };
        let downgrade = |children: &[String], ours: usize| {
            // While its session lives, the pinned write node is on the server: our read node
            // may hold whatever comes between. Once it ended, this is a plain reader.
            if pin.write.generation().health() == Health::Ended {
                return reader_rule(children, ours);
            }
            let after_write = children[..ours]
                .iter()
                .position(|child| *child == write_name)
                .map_or(0, |at| at + 1);
            let between = children[after_write..ours].iter().any(|c| is_writer(c));
            overtakes.store(between, Ordering::Relaxed);
            Decision::Hold
        };
        let acquired = self
            .read_queue
            .acquire_with(&self.session, &downgrade, deadline, downgraded)
            .await;
        match acquired {
            Ok(Some(read)) if overtakes.load(Ordering::Relaxed) => {
                // Writers queued between the write node and ours must wait for our read node
                // too: the write node stays until the read lock is released.
                read.keep_pinned(pin.keep());
                Ok(Some(read))
            }
            other => {
                pin.end().await?;
                other
            }
        }
    }
}

/// The reader rule: hold when no writer comes before us; otherwise watch the nearest one.
fn reader_rule(children: &[String], ours: usize) -> Decision {
    match children[..ours].iter().rev().find(|child| is_writer(child)) {
        Some(writer) => Decision::Watch(writer.clone()),
        None => Decision::Hold,
    }
}

/// Curator's test: a write node is one whose name contains the write marker.
fn is_writer(name: &str) -> bool {
    name.contains(WRITE_MARKER)
}

fn child_name(node: &str) -> &str {
    node.rsplit('/').next().unwrap_or(node)
}

/// The write node's pin while a downgrade is decided; if the acquisition is abandoned (its
/// future dropped), `Drop` ends the pin in the background so a released write node still goes.
struct Pin {
    write: Arc<Held>,
    armed: bool,
}

impl Pin {
    fn new(write: Arc<Held>) -> Option<Pin> {
        write.pin().then_some(Pin { write, armed: true })
    }

    /// Hands the pinned write node over to the read node that keeps it.
    fn keep(mut self) -> Arc<Held> {
        self.armed = false;
        self.write.clone()
    }

    /// Ends the pin: the write node goes now if it was released meanwhile.
    async fn end(mut self) -> Result<()> {
        self.armed = false;
        match self.write.unpin().await {
            Ok(()) | Err(Error::NotHeld) => Ok(()),
            Err(err) => Err(err),
        }
    }
}

impl Drop for Pin {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let write = self.write.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                if let Err(err) = write.unpin().await {
                    tracing::debug!(%err, "ending an abandoned downgrade's pin failed");
                }
            });
        }
    }
}

impl std::fmt::Debug for RwLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RwLock")
            .field("path", &self.read_queue.dir)
            .field("read_hold_count", &self.readers.count())
            .field("write_hold_count", &self.writer.count())
            .finish()
    }
}

impl Configure for RwLock {
    fn described(&self) -> String {
        format!("the read-write lock {:?}", self.read_queue.dir)
    }

    fn set(&mut self, setting: Setting) -> Result<bool> {
        self.options
            .set(&self.read_queue.dir, setting, Delay::Taken)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn a_reader_waits_only_for_the_nearest_earlier_writer() {
        let queue = names(&[
            "_c_a-__READ__0000000001",
            "_c_b-__WRIT__0000000002",
            "_c_c-__READ__0000000003",
            "_c_d-__WRIT__0000000004",
            "_c_e-__READ__0000000005",
        ]);
        assert!(matches!(reader_rule(&queue, 0), Decision::Hold));
        match reader_rule(&queue, 2) {
            Decision::Watch(w) => assert_eq!(w, "_c_b-__WRIT__0000000002"),
            Decision::Hold => panic!("a reader behind a writer held"),
        }
        match reader_rule(&queue, 4) {
            Decision::Watch(w) => assert_eq!(w, "_c_d-__WRIT__0000000004"),
            Decision::Hold => panic!("a reader behind a writer held"),
        }
    }

    #[test]
    fn readers_before_any_writer_hold_together() {
        let queue = names(&[
            "_c_a-__READ__0000000001",
            "_c_b-__READ__0000000002",
            "_c_c-__WRIT__0000000003",
        ]);
        assert!(matches!(reader_rule(&queue, 1), Decision::Hold));
    }
}
