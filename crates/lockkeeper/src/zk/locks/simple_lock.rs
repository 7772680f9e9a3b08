//! [`SimpleLock`]: the naive ZooKeeper lock, one ephemeral node that everyone races to create.
//!
//! It is here to be measured, not recommended. It is the lock most people write first, and the
//! ZooKeeper recipes document starts from it to explain why the real recipe ([`Mutex`]) queues
//! sequential nodes instead: every release wakes every waiter (the *herd effect*) and the
//! fastest re-creator wins, whoever waited longest (no fairness).
//!
//! Layout: the lock is the ephemeral node `{path}/lock`; `{path}` and its missing ancestors
//! are created as containers (as the queue recipes create theirs), so the server reaps them
//! once the lock is gone. The node's data is `lockkeeper pid={pid} owner={uuid}`: the uuid is
//! new for every acquisition, which is how an acquisition recognises its own node when the
//! answer to its create was lost, and how release avoids deleting someone else's.
//!
//! [`Mutex`]: crate::zk::Mutex

use std::sync::Arc;
use std::time::Duration;

use lockkeeper_zk_client::{CreateMode, CreateOptions, EventType};
use uuid::Uuid;

use crate::deadline::Deadline;
use crate::error::{Error, Result};
use crate::fencing::FencingToken;
use crate::options::{Configure, Delay, LockOptions, Setting};
use crate::zk::hold::{Held, HoldOptions};
use crate::zk::locks::guard::LockGuard;
use crate::zk::locks::owner::Owner;
use crate::zk::node::{create_parents, delete_if_ours, is_ours, look};
use crate::zk::path::validate_lock_path;
use crate::zk::session::{Generation, Health, Session, is_connection_loss, is_terminal};

/// The name of a [`SimpleLock`]'s node under its lock path.
pub(crate) const SIMPLE_NODE: &str = "lock";

/// How often a create may find the lock's parent missing (someone deleting it as fast as we
/// create it) before giving up.
const MAX_PARENT_ATTEMPTS: u32 = 5;

/// The textbook ephemeral-node lock: whoever creates `{path}/lock` holds the lock.
///
/// Acquiring tries to create the node; if it exists, the waiter watches it and tries again
/// when it changes. Simple, and fine for a handful of rarely contending processes, but:
///
/// - **Herd effect**: every waiter watches the same node, so every release wakes *every*
///   waiter, and all of them race to create the node again. With K waiters a release costs K
///   notifications and K creates (of which K−1 fail and re-watch); [`Mutex`] wakes at most two.
///   [`Session::notifications`] counts the wake-ups, so the difference can be seen.
/// - **Unfair**: the winner is whoever's create reaches the server first, not whoever waited
///   longest; a waiter can starve under steady contention.
/// - **Invisible waiters**: waiters leave no node, only watches, so
///   [`inspect`](crate::zk::inspect) shows the holder alone.
///
/// Otherwise it behaves like [`Mutex`]: the fencing token is the node's czxid (each grant
/// creates a new node, so tokens grow), the lock is reentrant per handle, every wait is
/// cancel-safe, and the guard reports `lost()`. Its layout is lockkeeper's own; Curator has no
/// equivalent recipe.
///
/// ```no_run
/// # async fn demo() -> lockkeeper::Result<()> {
/// use std::time::Duration;
/// use lockkeeper::zk::Session;
///
/// let session = Session::connect("127.0.0.1:2181").await?;
/// let lock = session.simple_lock("/locks/cache-rebuild")?;
/// match lock.lock_timeout(Duration::from_secs(2)).await? {
///     Some(guard) => {
///         println!("rebuilding with fencing token {}", guard.fencing_token());
///         guard.release().await?;
///     }
///     None => println!("someone else is rebuilding"),
/// }
/// println!("{} waiters woken so far", session.notifications());
/// # Ok(()) }
/// ```
///
/// [`Mutex`]: crate::zk::Mutex
#[derive(Clone)]
pub struct SimpleLock {
    session: Session,
    path: String,
    node: String,
    owner: Arc<Owner>,
    options: HoldOptions,
}

impl SimpleLock {
    pub(crate) fn new(session: Session, path: &str) -> Result<SimpleLock> {
        validate_lock_path(path)?;
        Ok(SimpleLock {
            session,
            path: path.to_owned(),
            node: format!("{path}/{SIMPLE_NODE}"),
            owner: Arc::default(),
            options: HoldOptions::default(),
        })
    }

    /// How the lock is held ([`LockOptions`]): `max_hold` and `keep_through_suspension`, as
    /// for a [`Mutex`](crate::zk::Mutex::with_options). Lock-delay is offered by the queue
    /// locks only: this lock's waiters race for one node and keep no place to wait in.
    /// [`Error::InvalidArgument`] for a zero duration or an option this lock does not take.
    ///
    /// ```no_run
    /// # async fn demo(session: lockkeeper::zk::Session) -> lockkeeper::Result<()> {
    /// use std::time::Duration;
    /// use lockkeeper::LockOptions;
    ///
    /// let lock = session
    ///     .simple_lock("/locks/cache")?
    ///     .with_options(LockOptions::new().max_hold(Duration::from_secs(10)))?;
    /// let guard = lock.lock().await?;
    /// # drop(guard); Ok(()) }
    /// ```
    pub fn with_options(self, options: LockOptions) -> Result<SimpleLock> {
        options.apply(self)
    }

    /// The lock path (the parent of the lock node).
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The full path of the lock node, `{path}/lock`.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// Waits until the lock is granted.
    pub async fn lock(&self) -> Result<LockGuard> {
        let guard = self.acquire(Deadline::Never).await?;
        // With no deadline the acquisition only ends granted or with an error.
        guard.ok_or(Error::SessionLost)
    }

    /// Takes the lock only if it is free now; `None` if someone else holds it.
    pub async fn try_lock(&self) -> Result<Option<LockGuard>> {
        self.acquire(Deadline::Now).await
    }

    /// Waits at most `timeout`; `None` if the lock was not granted in time. A zero timeout is
    /// refused: use [`try_lock`](Self::try_lock).
    pub async fn lock_timeout(&self, timeout: Duration) -> Result<Option<LockGuard>> {
        self.acquire(Deadline::after(timeout)?).await
    }

    /// How many guards this handle holds (its reentrancy count); 0 when it does not hold.
    pub fn hold_count(&self) -> usize {
        self.owner.count()
    }

    async fn acquire(&self, deadline: Deadline) -> Result<Option<LockGuard>> {
        let held = self.owner.lock(deadline, || self.attempt(deadline)).await?;
        Ok(held.map(|held| LockGuard::new(self.owner.clone(), held)))
    }

    /// Races for the node until it is ours or the deadline passes.
    async fn attempt(&self, deadline: Deadline) -> Result<Option<Held>> {
        let generation = match deadline {
            // try_lock while disconnected: do not wait for the connection.
            Deadline::Now if self.session.generation().health() != Health::Connected => {
                return Err(Error::SessionLost);
            }
            _ => self.session.connected_generation().await?,
        };
        let mut create = PendingCreate::new(&generation, &self.node, self.options);
        let options = CreateOptions::new(CreateMode::Ephemeral);
        let mut parent_attempts = 0;
        let mut losses = 0;
        loop {
            // Scoped to the create: a waiter holding a client would keep a closed session
            // alive on the server.
            let created = {
                let client = generation.client()?;
                // From here until the answer is read the node may exist without our knowing
                // it: if this future is dropped meanwhile, `PendingCreate` cleans up.
                create.uncertain = true;
                match client.create(&self.node, &create.data, &options).await {
                    Err(lockkeeper_zk_client::Error::NoNode)
                        if parent_attempts < MAX_PARENT_ATTEMPTS =>
                    {
                        create.uncertain = false;
                        parent_attempts += 1;
                        create_parents(&client, &self.path).await?;
                        continue;
                    }
                    created => created,
                }
            };
            match created {
                Ok((stat, _)) => return Ok(Some(create.granted(stat.czxid))),
                // Definitely not created: someone else holds the lock.
                Err(lockkeeper_zk_client::Error::NodeExists) => {
                    create.uncertain = false;
                    if deadline.passed() {
                        return Ok(None);
                    }
                }
                // The session is over, and any node it created with it.
                Err(err) if is_terminal(&err) => {
                    create.uncertain = false;
                    return Err(Error::SessionLost);
                }
                // Maybe created: the look below tells, by the node's owner and data.
                Err(err) if is_connection_loss(&err) => {
                    losses += 1;
                    if losses >= generation.retry_policy().max_attempts() {
                        // Resolve the doubt in the background before giving up.
                        return Err(Error::RetriesExhausted {
                            attempts: losses,
                            last: err,
                        });
                    }
                }
                Err(err) => {
                    create.uncertain = false;
                    return Err(Error::Zk(err));
                }
            }
            let watch = !deadline.passed();
            let Some((data, stat, watcher)) = look(&generation, &self.node, watch).await? else {
                // Gone already (or never created): race for it again.
                create.uncertain = false;
                if deadline.passed() {
                    return Ok(None);
                }
                continue;
            };
            if is_ours(&generation, &create.data, &data, &stat) {
                return Ok(Some(create.granted(stat.czxid)));
            }
            create.uncertain = false;
            let Some(watcher) = watcher else {
                return Ok(None);
            };
            tokio::select! {
                event = watcher.changed() => {
                    if event.event_type == EventType::Session {
                        // The only session events a watch sees are terminal ones.
                        return Err(Error::SessionLost);
                    }
                    // Every waiter gets this event for the same release: the herd.
                    generation.count_notification();
                }
                () = deadline.sleep() => return Ok(None),
                () = generation.ended() => return Err(Error::SessionLost),
            }
        }
    }
}

impl std::fmt::Debug for SimpleLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimpleLock")
            .field("node", &self.node)
            .field("hold_count", &self.owner.count())
            .finish()
    }
}

/// One acquisition's create: the data that identifies its node, and whether a create may
/// have succeeded without our hearing of it. If the acquisition is abandoned in that state
/// (its future dropped, or it gave up), `Drop` looks the node up and deletes it if it is ours.
struct PendingCreate {
    generation: Arc<Generation>,
    node: String,
    data: Vec<u8>,
    uncertain: bool,
    options: HoldOptions,
}

impl PendingCreate {
    fn new(generation: &Arc<Generation>, node: &str, options: HoldOptions) -> PendingCreate {
        PendingCreate {
            generation: generation.clone(),
            node: node.to_owned(),
            data: format!(
                "lockkeeper pid={} owner={}",
                std::process::id(),
                Uuid::new_v4()
            )
            .into_bytes(),
            uncertain: false,
            options,
        }
    }

    /// The node is ours: hand it over as a hold whose release checks it is still ours.
    fn granted(&mut self, czxid: i64) -> Held {
        self.uncertain = false;
        Held::new(
            self.node.clone(),
            FencingToken::new(czxid as u64),
            self.generation.clone(),
        )
        .only_if_ours(self.data.clone())
        .with_options(self.options)
    }
}

impl Drop for PendingCreate {
    fn drop(&mut self) {
        if !self.uncertain {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            // No runtime to clean up with: the node goes when the session does.
            return;
        };
        let generation = self.generation.clone();
        let node = std::mem::take(&mut self.node);
        let data = std::mem::take(&mut self.data);
        runtime.spawn(async move {
            // Requests are answered in order per session, so this read sees the create that
            // was sent before it, even if the create's answer never reached us.
            match delete_if_ours(&generation, &node, &data).await {
                Ok(()) => tracing::debug!(node, "deleted the node of an abandoned acquisition"),
                Err(Error::NotHeld) => {}
                Err(err) => tracing::warn!(node, %err, "could not check an abandoned lock node"),
            }
        });
    }
}

impl Configure for SimpleLock {
    fn described(&self) -> String {
        format!("the lock {:?}", self.path)
    }

    fn set(&mut self, setting: Setting) -> Result<bool> {
        self.options.set(&self.path, setting, Delay::NotTaken)
    }
}
