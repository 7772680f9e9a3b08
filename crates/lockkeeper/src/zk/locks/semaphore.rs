//! [`Semaphore`]: at most N lease holders at once (Curator's `InterProcessSemaphoreV2`).
//!
//! Layout, as Curator's: a lease is an ephemeral sequential node
//! `{path}/leases/_c_{uuid}-lease-{sequence}` (protected, like the lock nodes), and an
//! internal mutex at `{path}/locks` serializes acquisitions. An acquisition:
//!
//! 1. takes the internal mutex (the fair, herd-free queue every lock here uses);
//! 2. creates its lease nodes;
//! 3. lists the leases with a child watch: if there are no more than N, it holds them;
//!    otherwise it waits for the watch (a lease released, or its holder's session gone) and
//!    lists again;
//! 4. releases the internal mutex, granted or not.
//!
//! The mutex is what makes counting children enough: only its holder has lease nodes that are
//! not granted yet, so "at most N children" means "ours fit". Waiters other than the mutex
//! holder wait in the mutex queue, each watching at most two nodes, so a release wakes at most
//! two processes.
//!
//! Curator takes several leases one at a time, taking and releasing the mutex for each, so two
//! processes that each want most of the leases can each end up holding some and waiting
//! forever for the rest. lockkeeper keeps the mutex until all of its leases are granted: a
//! holder of partial leases is always the one process still acquiring, and it finishes as soon
//! as enough leases come back. The nodes are the same, so both can share one semaphore.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use lockkeeper_zk_client::EventType;

use crate::deadline::Deadline;
use crate::error::{Error, Result};
use crate::fencing::FencingToken;
use crate::options::{Configure, Delay, LockOptions, Setting};
use crate::zk::hold::{Held, HoldOptions};
use crate::zk::locks::line::{
    LEASE_MARKER, LOCK_MARKER, Line, PendingNode, node_data, predecessor_rule, unanswered,
};
use crate::zk::node::delete_node;
use crate::zk::path::validate_lock_path;
use crate::zk::session::{Generation, Health, Session};

/// The child of the semaphore path holding the internal mutex's nodes.
pub(crate) const LOCKS_DIR: &str = "locks";
/// The child of the semaphore path holding the lease nodes.
pub(crate) const LEASES_DIR: &str = "leases";

/// A distributed counting semaphore: at most `max_leases` leases are held at once, across
/// every process using the same path and the same maximum. Node layout and algorithm are
/// Curator's `InterProcessSemaphoreV2`, so Java services using Curator can share it.
///
/// - **Bounded**: never more than `max_leases` leases held at once (all users must agree on
///   the maximum, as with Curator).
/// - **Several at once**: [`acquire(n)`](Semaphore::acquire) takes `n` leases together or none.
/// - **Fair**: acquisitions are served in arrival order (they queue on an internal mutex).
/// - **Leases are ephemeral**: a holder whose session ends gives its leases back.
/// - **Cancel-safe**: a dropped future, a timeout or an error leaves no lease or mutex node.
///
/// ```no_run
/// # async fn demo() -> lockkeeper::Result<()> {
/// use lockkeeper::zk::Session;
///
/// let session = Session::connect("127.0.0.1:2181").await?;
/// // At most 4 exports run at once, across the whole fleet.
/// let exports = session.semaphore("/semaphores/exports", 4)?;
/// let lease = exports.acquire(1).await?;
/// // ... run one export
/// lease.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Semaphore {
    session: Session,
    path: String,
    max_leases: u32,
    lock: Line,
    leases: Line,
    options: HoldOptions,
}

impl Semaphore {
    pub(crate) fn new(session: Session, path: &str, max_leases: u32) -> Result<Semaphore> {
        validate_lock_path(path)?;
        if max_leases == 0 {
            return Err(Error::InvalidArgument(format!(
                "semaphore {path:?}: max_leases must be at least 1"
            )));
        }
        Ok(Semaphore {
            session,
            path: path.to_owned(),
            max_leases,
            lock: Line {
                dir: format!("{path}/{LOCKS_DIR}"),
                marker: LOCK_MARKER,
                markers: &[LOCK_MARKER],
            },
            leases: Line {
                dir: format!("{path}/{LEASES_DIR}"),
                marker: LEASE_MARKER,
                markers: &[LEASE_MARKER],
            },
            options: HoldOptions::default(),
        })
    }

    /// How the leases are held ([`LockOptions`]): `max_hold` (every lease is given up that
    /// long after its grant: [`Leases::lost`] resolves and the lease nodes are deleted) and
    /// `keep_through_suspension`, as for a [`Mutex`](crate::zk::Mutex::with_options).
    /// [`Error::InvalidArgument`] for a zero duration or an option a semaphore does not take
    /// (`lease`, `watchdog`, `lock_delay`).
    ///
    /// ```no_run
    /// # async fn demo(session: lockkeeper::zk::Session) -> lockkeeper::Result<()> {
    /// use std::time::Duration;
    /// use lockkeeper::LockOptions;
    ///
    /// let options = LockOptions::new().max_hold(Duration::from_secs(600));
    /// let exports = session.semaphore("/semaphores/exports", 4)?.with_options(options)?;
    /// let lease = exports.acquire(1).await?;
    /// # drop(lease); Ok(()) }
    /// ```
    pub fn with_options(self, options: LockOptions) -> Result<Semaphore> {
        options.apply(self)
    }

    /// The semaphore path (the parent of `locks` and `leases`).
    ///
    /// ```no_run
    /// # fn demo(session: lockkeeper::zk::Session) -> lockkeeper::Result<()> {
    /// let exports = session.semaphore("/semaphores/exports", 4)?;
    /// assert_eq!(exports.path(), "/semaphores/exports");
    /// # Ok(()) }
    /// ```
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The most leases held at once.
    ///
    /// ```no_run
    /// # fn demo(session: lockkeeper::zk::Session) -> lockkeeper::Result<()> {
    /// let exports = session.semaphore("/semaphores/exports", 4)?;
    /// assert_eq!(exports.max_leases(), 4);
    /// # Ok(()) }
    /// ```
    pub fn max_leases(&self) -> u32 {
        self.max_leases
    }

    /// Waits until `n` leases are granted together.
    ///
    /// [`Error::InvalidArgument`] if `n` is 0 or more than the maximum (it could never be
    /// granted).
    ///
    /// ```no_run
    /// # async fn demo(session: lockkeeper::zk::Session) -> lockkeeper::Result<()> {
    /// let workers = session.semaphore("/semaphores/gpu", 8)?;
    /// let leases = workers.acquire(2).await?; // a job that needs two GPUs
    /// assert_eq!(leases.len(), 2);
    /// leases.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn acquire(&self, n: u32) -> Result<Leases> {
        let leases = self.acquire_with(n, Deadline::Never).await?;
        // With no deadline the acquisition only ends granted or with an error.
        leases.ok_or(Error::SessionLost)
    }

    /// Takes `n` leases only if they can be granted now; `None` if too few are free (or
    /// another acquisition holds the internal mutex at this moment).
    ///
    /// ```no_run
    /// # async fn demo(session: lockkeeper::zk::Session) -> lockkeeper::Result<()> {
    /// let exports = session.semaphore("/semaphores/exports", 4)?;
    /// match exports.try_acquire(1).await? {
    ///     Some(lease) => lease.release().await?,
    ///     None => println!("4 exports are running already"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_acquire(&self, n: u32) -> Result<Option<Leases>> {
        self.acquire_with(n, Deadline::Now).await
    }

    /// Waits at most `timeout` for `n` leases; `None` if they were not granted in time (our
    /// lease and mutex nodes are deleted before this returns). A zero timeout is refused with
    /// [`Error::InvalidArgument`]: use [`try_acquire`](Self::try_acquire).
    ///
    /// ```no_run
    /// # async fn demo(session: lockkeeper::zk::Session) -> lockkeeper::Result<()> {
    /// use std::time::Duration;
    ///
    /// let exports = session.semaphore("/semaphores/exports", 4)?;
    /// if let Some(lease) = exports.acquire_timeout(1, Duration::from_secs(30)).await? {
    ///     lease.release().await?;
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn acquire_timeout(&self, n: u32, timeout: Duration) -> Result<Option<Leases>> {
        self.acquire_with(n, Deadline::after(timeout)?).await
    }

    fn check_count(&self, n: u32) -> Result<()> {
        if n == 0 {
            return Err(Error::InvalidArgument(format!(
                "semaphore {:?}: cannot acquire 0 leases",
                self.path
            )));
        }
        if n > self.max_leases {
            return Err(Error::InvalidArgument(format!(
                "semaphore {:?}: {n} leases asked for, but at most {} can ever be held",
                self.path, self.max_leases
            )));
        }
        Ok(())
    }

    async fn acquire_with(&self, n: u32, deadline: Deadline) -> Result<Option<Leases>> {
        self.check_count(n)?;
        let Some(lock) = self
            .lock
            .acquire(&self.session, &predecessor_rule, deadline)
            .await?
        else {
            return Ok(None);
        };
        let generation = lock.generation().clone();
        let lock = InternalLock {
            held: Arc::new(lock),
            done: false,
        };
        // A timed acquisition is bounded as a whole (see `crate::deadline`): taking the leases and
        // letting the internal mutex go end by the withdrawal deadline, or say the server did
        // not answer (what was cut short is deleted in the background).
        let by = deadline.withdrawn_by();
        let taking = self.take_leases(&generation, n, deadline);
        let leases = match by {
            None => taking.await,
            Some(by) => tokio::time::timeout_at(by, taking)
                .await
                .unwrap_or_else(|_| {
                    Err(unanswered(&generation, "while withdrawing the waiting leases").into())
                }),
        };
        // Granted or not, the next acquisition may go now.
        let unlocked = match by {
            None => lock.release().await,
            Some(by) => tokio::time::timeout_at(by, lock.release())
                .await
                .unwrap_or_else(|_| {
                    Err(unanswered(&generation, "while releasing the internal lock").into())
                }),
        };
        let leases = leases?;
        match unlocked {
            Ok(()) => Ok(leases),
            // The mutex node was gone: with the session (then so are the leases) or deleted
            // by someone else (then the leases are still ours).
            Err(Error::NotHeld) if generation.health() != Health::Ended => Ok(leases),
            Err(Error::NotHeld) => Err(Error::SessionLost),
            Err(err) => Err(err),
        }
    }

    /// Creates `n` lease nodes and waits until they fit under the maximum. Called with the
    /// internal mutex held.
    async fn take_leases(
        &self,
        generation: &Arc<Generation>,
        n: u32,
        deadline: Deadline,
    ) -> Result<Option<Leases>> {
        'create: loop {
            let mut pending = Vec::with_capacity(n as usize);
            for _ in 0..n {
                let mut node = PendingNode::new(&self.leases, generation);
                let (name, czxid, _) = node.create(&self.leases, node_data()).await?;
                pending.push(Lease { node, name, czxid });
            }
            loop {
                let dir = &self.leases.dir;
                let (children, watcher) = generation
                    .retry(|client| async move { client.list_and_watch_children(dir).await })
                    .await?;
                if pending.iter().any(|lease| !children.contains(&lease.name)) {
                    // Someone deleted one of our lease nodes: Curator starts the lease over.
                    tracing::warn!(dir, "lease node deleted while waiting; creating again");
                    continue 'create;
                }
                if children.len() <= self.max_leases as usize {
                    return Ok(Some(self.grant(generation, pending)));
                }
                if deadline.passed() {
                    self.abandon(generation, pending).await;
                    return Ok(None);
                }
                tokio::select! {
                    event = watcher.changed() => {
                        if event.event_type == EventType::Session {
                            // The only session events a watch sees are terminal ones.
                            return Err(Error::SessionLost);
                        }
                        generation.count_notification();
                    }
                    () = deadline.sleep() => {
                        self.abandon(generation, pending).await;
                        return Ok(None);
                    }
                    () = generation.ended() => return Err(Error::SessionLost),
                }
            }
        }
    }

    fn grant(&self, generation: &Arc<Generation>, pending: Vec<Lease>) -> Leases {
        let leases = pending
            .into_iter()
            .map(|mut lease| {
                lease.node.disarm();
                Held::new(
                    format!("{}/{}", self.leases.dir, lease.name),
                    FencingToken::new(lease.czxid as u64),
                    generation.clone(),
                )
                .with_options(self.options)
                .share()
            })
            .collect();
        Leases {
            leases,
            done: false,
        }
    }

    /// Deletes lease nodes that were not granted in time, before the caller hears "timed out",
    /// in a task of its own so that the deletes finish even if the caller stops waiting.
    async fn abandon(&self, generation: &Arc<Generation>, pending: Vec<Lease>) {
        let generation = generation.clone();
        let dir = self.leases.dir.clone();
        let cleanup = tokio::spawn(async move {
            for mut lease in pending {
                lease.node.disarm();
                let node = format!("{dir}/{}", lease.name);
                match delete_node(&generation, &node).await {
                    Ok(()) | Err(Error::NotHeld) => {}
                    Err(err) => tracing::warn!(node, %err, "could not delete a timed-out lease"),
                }
            }
        });
        // An Err is a panic in the task (resumed here) or a runtime shutting down (then
        // nobody polls this future any more).
        if let Err(err) = cleanup.await {
            if err.is_panic() {
                std::panic::resume_unwind(err.into_panic());
            }
        }
    }
}

/// One lease node created and not yet granted.
struct Lease {
    node: PendingNode,
    name: String,
    czxid: i64,
}

/// The internal mutex while an acquisition holds it; released in the background if the
/// acquisition's future is dropped, so that one abandoned acquisition cannot block the rest.
struct InternalLock {
    held: Arc<Held>,
    /// Set once `release` ran, so that `Drop` does not release twice.
    done: bool,
}

impl InternalLock {
    /// Releases in a task of its own: the delete completes even if the caller stops waiting.
    async fn release(mut self) -> Result<()> {
        self.done = true;
        let held = self.held.clone();
        match tokio::spawn(async move { held.release().await }).await {
            Ok(released) => released,
            Err(err) if err.is_panic() => std::panic::resume_unwind(err.into_panic()),
            // The runtime is shutting down: nobody polls this future any more.
            Err(_) => Err(Error::SessionLost),
        }
    }
}

impl Drop for InternalLock {
    fn drop(&mut self) {
        if !self.done {
            self.held.clone().release_in_background();
        }
    }
}

impl std::fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Semaphore")
            .field("path", &self.path)
            .field("max_leases", &self.max_leases)
            .finish()
    }
}

/// Leases granted by a [`Semaphore`], held together and released together.
///
/// Dropping it releases them (best effort, in a background task);
/// [`release`](Leases::release) releases and reports the outcome. Like a lock guard it knows
/// when it can no longer be sure of its leases: [`lost`](Leases::lost), [`is_held`](Leases::is_held).
///
/// ```no_run
/// # async fn demo(session: lockkeeper::zk::Session) -> lockkeeper::Result<()> {
/// let exports = session.semaphore("/semaphores/exports", 4)?;
/// let leases = exports.acquire(2).await?;
/// tokio::select! {
///     () = leases.lost() => eprintln!("session trouble: stop the export"),
///     () = tokio::time::sleep(std::time::Duration::from_secs(1)) => {} // the export
/// }
/// leases.release().await?;
/// # Ok(()) }
/// ```
#[must_use = "the leases are released when dropped"]
pub struct Leases {
    leases: Vec<Arc<Held>>,
    /// Set once `release` ran, so that `Drop` does not release twice.
    done: bool,
}

impl Leases {
    /// How many leases this holds (the `n` it was acquired with).
    ///
    /// ```no_run
    /// # async fn demo(semaphore: lockkeeper::zk::Semaphore) -> lockkeeper::Result<()> {
    /// let leases = semaphore.acquire(3).await?;
    /// assert_eq!(leases.len(), 3);
    /// # Ok(()) }
    /// ```
    pub fn len(&self) -> usize {
        self.leases.len()
    }

    /// Whether this holds no lease; never true for leases a semaphore granted.
    ///
    /// ```no_run
    /// # async fn demo(semaphore: lockkeeper::zk::Semaphore) -> lockkeeper::Result<()> {
    /// assert!(!semaphore.acquire(1).await?.is_empty());
    /// # Ok(()) }
    /// ```
    pub fn is_empty(&self) -> bool {
        self.leases.is_empty()
    }

    /// The full paths of the lease nodes (for logs and inspection).
    ///
    /// ```no_run
    /// # async fn demo(semaphore: lockkeeper::zk::Semaphore) -> lockkeeper::Result<()> {
    /// let leases = semaphore.acquire(1).await?;
    /// println!("holding {:?}", leases.nodes());
    /// # Ok(()) }
    /// ```
    pub fn nodes(&self) -> Vec<&str> {
        self.leases.iter().map(|held| held.node()).collect()
    }

    /// The fencing token of each lease: its lease node's czxid, in the order of
    /// [`nodes`](Leases::nodes). Leases are not exclusive, so a token tells a resource which
    /// grant a write comes from, not that no one else holds a lease.
    pub fn fencing_tokens(&self) -> Vec<FencingToken> {
        self.leases.iter().map(|held| held.token()).collect()
    }

    /// Whether the holder can still be sure it holds every lease: not released, no lease node
    /// deleted, session connected and within its deadline. False while the session is
    /// suspended; answered without a round trip.
    ///
    /// ```no_run
    /// # async fn demo(semaphore: lockkeeper::zk::Semaphore) -> lockkeeper::Result<()> {
    /// let leases = semaphore.acquire(1).await?;
    /// if !leases.is_held() {
    ///     eprintln!("stop: the leases may be gone");
    /// }
    /// # Ok(()) }
    /// ```
    pub fn is_held(&self) -> bool {
        self.leases.iter().all(|held| held.is_held())
    }

    /// The instant until which every lease is certainly still held, as for
    /// [`LockGuard::valid_until`](crate::zk::LockGuard::valid_until); `None` once
    /// [`is_held`](Leases::is_held) is false.
    ///
    /// ```no_run
    /// # async fn demo(semaphore: lockkeeper::zk::Semaphore) -> lockkeeper::Result<()> {
    /// let leases = semaphore.acquire(1).await?;
    /// println!("certainly held until {:?}", leases.valid_until());
    /// # Ok(()) }
    /// ```
    pub fn valid_until(&self) -> Option<tokio::time::Instant> {
        self.leases
            .iter()
            .map(|held| held.valid_until())
            .collect::<Option<Vec<_>>>()?
            .into_iter()
            .min()
    }

    /// Resolves as soon as the holder can no longer be sure it holds every lease: the session
    /// is suspended or expired, or a lease node was deleted by someone else. Cancel-safe.
    ///
    /// ```no_run
    /// # async fn demo(semaphore: lockkeeper::zk::Semaphore) -> lockkeeper::Result<()> {
    /// let leases = semaphore.acquire(1).await?;
    /// leases.lost().await;
    /// eprintln!("the lease may be someone else's now");
    /// # Ok(()) }
    /// ```
    pub async fn lost(&self) {
        let mut watches: Vec<Pin<Box<dyn Future<Output = ()> + Send + '_>>> = self
            .leases
            .iter()
            .map(|held| Box::pin(held.lost()) as Pin<Box<dyn Future<Output = ()> + Send + '_>>)
            .collect();
        std::future::poll_fn(|cx| {
            if watches.iter_mut().any(|w| w.as_mut().poll(cx).is_ready()) {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await;
    }

    /// Gives every lease back (deletes the lease nodes).
    ///
    /// [`Error::NotHeld`] if some lease was no longer held: the session expired, or a lease
    /// node was deleted by someone else. The other leases are released all the same.
    ///
    /// ```no_run
    /// # async fn demo(semaphore: lockkeeper::zk::Semaphore) -> lockkeeper::Result<()> {
    /// let leases = semaphore.acquire(2).await?;
    /// leases.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn release(mut self) -> Result<()> {
        self.done = true;
        let mut outcome = Ok(());
        for held in &self.leases {
            let released = held.release().await;
            if outcome.is_ok() {
                outcome = released;
            }
        }
        outcome
    }
}

impl Drop for Leases {
    fn drop(&mut self) {
        if !self.done {
            for held in self.leases.drain(..) {
                held.release_in_background();
            }
        }
    }
}

impl std::fmt::Debug for Leases {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leases")
            .field("nodes", &self.nodes())
            .field("is_held", &self.is_held())
            .finish()
    }
}

impl Configure for Semaphore {
    fn described(&self) -> String {
        format!("the semaphore {:?}", self.path)
    }

    fn set(&mut self, setting: Setting) -> Result<bool> {
        self.options.set(&self.path, setting, Delay::NotTaken)
    }
}
