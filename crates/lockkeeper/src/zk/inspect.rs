//! Inspection of a lock path: who holds it, who waits, in which order, and since when.
//!
//! The ZooKeeper recipes document points out that a lock made of sequential nodes makes
//! contention easy to see and debug: the queue *is* the directory listing. This module reads
//! that listing the way the recipes interpret it and adds what an operator needs to find the
//! processes behind the nodes: the owning session, the node's age and data. It only reads; it
//! never changes the lock.
//!
//! It knows the layouts written by lockkeeper, Curator and kazoo (`names` tells them apart by
//! node name, `judge` applies each recipe's grant rule, `read` does the round trips, `table`
//! draws it). Invariants:
//!
//! - **The verdict is the recipe's own**: a node holds exactly when its recipe, reading the
//!   same listing, would say it holds; a node whose rule cannot be applied from the listing is
//!   [`State::Unknown`], never guessed.
//! - **Two round trips whatever the queue's length** (three for a kazoo semaphore, whose lease
//!   limit is the path's data): one multi-read lists the path, the Curator semaphore
//!   sub-directories and the kazoo semaphore's sibling lock, then the nodes' data and stats
//!   are read in multi-reads of a bounded number of nodes. A node that goes away between the
//!   two (a waiter giving up, a holder releasing) is simply left out.

mod judge;
mod names;
mod read;
mod table;

use std::time::Duration;

use crate::error::{Error, Result};
use crate::fencing::FencingToken;
use crate::zk::path::validate_lock_path;
use crate::zk::session::{Generation, Session};

use judge::{judge_kazoo_semaphore, judge_leases, judge_lock_queue};
use names::{LEASES, LOCKS, is_kazoo_lease, kazoo_semaphore_lock};
use read::{list, read, read_chunk};

/// Lists the holders and waiters of the lock at `path`, in queue order.
///
/// Understands every Curator-compatible layout lockkeeper uses: a [`Mutex`] queue (`lock-`
/// nodes), a [`RwLock`] queue (`__READ__` and `__WRIT__` nodes in one order), a
/// [`SimpleLock`]'s single node, a [`LeaderLatch`] election (`latch-` nodes: the first
/// leads), and a [`Semaphore`] (`leases` and `locks` sub-directories; lease states are
/// [`State::Unknown`] here because the lease limit is not stored on the server: use
/// [`inspect_semaphore`]). It also reads kazoo's: `Lock`, `WriteLock` and `Election`
/// (`__lock__` nodes), `ReadLock` (`__rlock__`), and `Semaphore` (bare uuid leases, the limit
/// in the path's data, waiters in the sibling `{path}-__lock__`). A path that does not exist
/// is an empty inspection, not an error; an invalid path is [`Error::InvalidArgument`].
///
/// ```no_run
/// # async fn demo() -> lockkeeper::Result<()> {
/// use lockkeeper::zk::{Session, inspect};
///
/// let session = Session::connect("127.0.0.1:2181").await?;
/// let inspection = inspect(&session, "/locks/orders").await?;
/// println!("{inspection}");
/// for waiter in inspection.waiters() {
///     println!("session 0x{:x} waits since {:?}", waiter.session_id, waiter.age);
/// }
/// # Ok(()) }
/// ```
///
/// [`Mutex`]: crate::zk::Mutex
/// [`RwLock`]: crate::zk::RwLock
/// [`SimpleLock`]: crate::zk::SimpleLock
/// [`Semaphore`]: crate::zk::Semaphore
/// [`LeaderLatch`]: crate::zk::LeaderLatch
pub async fn inspect(session: &Session, path: &str) -> Result<Inspection> {
    validate_lock_path(path)?;
    run(&session.generation(), path, None).await
}

/// Lists the lease holders and waiters of the semaphore at `path`, given its lease limit:
/// the first `max_leases` leases in sequence order hold, the rest wait. (Curator's semaphore
/// admits one lease at a time under its internal lock, and only the newest can be over the
/// limit, so sequence order is grant order.) The internal lock's queue is listed too: its
/// first node is the participant taking a lease right now.
///
/// ```no_run
/// # async fn demo(session: lockkeeper::zk::Session) -> lockkeeper::Result<()> {
/// let inspection = lockkeeper::zk::inspect_semaphore(&session, "/pools/db", 4).await?;
/// println!("{} of 4 leases taken", inspection.holders().count());
/// # Ok(()) }
/// ```
pub async fn inspect_semaphore(
    session: &Session,
    path: &str,
    max_leases: u32,
) -> Result<Inspection> {
    validate_lock_path(path)?;
    if max_leases == 0 {
        return Err(Error::InvalidArgument(
            "max_leases must be greater than zero".into(),
        ));
    }
    run(&session.generation(), path, Some(max_leases)).await
}

/// What an inspection found at a lock path: its layout and its participants in queue order.
///
/// Its `Display` is a table for people:
///
/// ```text
/// /locks/orders (lock): 1 holding, 2 waiting
/// STATE  KIND   SEQUENCE    SESSION             AGE    TOKEN  DATA                 NODE
/// holds  mutex  0000000000  0x010000a6e4a10001  4.2s   37     lockkeeper web1:812  _c_3f…-lock-0000000000
/// waits  mutex  0000000001  0x010000a6e4a10002  3.9s   39     lockkeeper web2:907  _c_8a…-lock-0000000001
/// waits  mutex  0000000002  0x010000a6e4a10003  120ms  41     lockkeeper web1:913  _c_c1…-lock-0000000002
/// ```
///
/// ```no_run
/// # async fn demo(session: lockkeeper::zk::Session) -> lockkeeper::Result<()> {
/// let inspection = session.inspect("/locks/orders").await?;
/// if let Some(holder) = inspection.holders().next() {
///     println!("held by session 0x{:x} for {:?}", holder.session_id, holder.age);
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Inspection {
    /// The inspected lock path.
    pub path: String,
    /// What kind of lock the path holds.
    pub layout: Layout,
    /// Holders and waiters in queue order (for a semaphore: leases, then its internal lock).
    pub participants: Vec<Participant>,
}

impl Inspection {
    /// The participants that hold the lock (or a lease).
    pub fn holders(&self) -> impl Iterator<Item = &Participant> {
        self.participants.iter().filter(|p| p.state == State::Holds)
    }

    /// The participants that wait.
    pub fn waiters(&self) -> impl Iterator<Item = &Participant> {
        self.participants.iter().filter(|p| p.state == State::Waits)
    }

    /// True when nobody holds or waits (or the path does not exist).
    pub fn is_empty(&self) -> bool {
        self.participants.is_empty()
    }
}

/// The layout found at an inspected path.
///
/// ```no_run
/// # async fn demo(session: lockkeeper::zk::Session) -> lockkeeper::Result<()> {
/// use lockkeeper::zk::{Layout, NodeKind, State};
///
/// let inspection = session.inspect("/locks/orders").await?;
/// if inspection.layout == Layout::Lock {
///     for p in &inspection.participants {
///         let role = if p.state == State::Holds { "holds" } else { "waits" };
///         let kind = if p.kind == NodeKind::Mutex { "mutex" } else { "other" };
///         println!("{role} {kind} session 0x{:x} for {:?}", p.session_id, p.age);
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Layout {
    /// The path does not exist: nobody holds or waits.
    Missing,
    /// A directory of lock nodes: a mutex, read-write or simple lock (Curator's, kazoo's or
    /// lockkeeper's).
    Lock,
    /// A leader election: `latch-` nodes of Curator's `LeaderLatch` or lockkeeper's
    /// [`LeaderLatch`](crate::zk::LeaderLatch); the one that holds is the leader.
    Election,
    /// A semaphore (`leases` and `locks` sub-directories) and its lease limit, when given.
    Semaphore {
        /// The lease limit passed to [`inspect_semaphore`]; `None` from [`inspect`].
        max_leases: Option<u32>,
    },
    /// A kazoo `Semaphore`: lease nodes named by a bare uuid, the lease limit in the path's
    /// data, and its waiters queued in the sibling lock `{path}-__lock__`.
    KazooSemaphore {
        /// The lease limit kazoo wrote in the path's data; `None` if it is not a number.
        max_leases: Option<u32>,
    },
}

/// One node of a lock: a holder or a waiter.
///
/// ```no_run
/// # async fn demo(session: lockkeeper::zk::Session) -> lockkeeper::Result<()> {
/// use lockkeeper::zk::{Layout, NodeKind, State};
///
/// let inspection = session.inspect("/locks/orders").await?;
/// if inspection.layout == Layout::Lock {
///     for p in &inspection.participants {
///         let role = if p.state == State::Holds { "holds" } else { "waits" };
///         let kind = if p.kind == NodeKind::Mutex { "mutex" } else { "other" };
///         println!("{role} {kind} session 0x{:x} for {:?}", p.session_id, p.age);
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Participant {
    /// The node's full path.
    pub path: String,
    /// The node's path relative to the inspected path (`leases/…` and `locks/…` for a
    /// semaphore), as the table shows it.
    pub name: String,
    /// Which recipe's node it is, from its name.
    pub kind: NodeKind,
    /// The sequence number the server appended to the name; `None` for unsequenced nodes.
    pub sequence: Option<i64>,
    /// The session that owns the (ephemeral) node; 0 for a persistent node.
    pub session_id: i64,
    /// The node's czxid: the fencing token its holder was (or will be) given.
    pub fencing_token: FencingToken,
    /// How long the node has existed, by this machine's clock against the server's ctime.
    pub age: Duration,
    /// The node's data as text (invalid UTF-8 replaced): lockkeeper writes its pid there.
    pub data: String,
    /// Whether it holds or waits, by its recipe's rule.
    pub state: State,
}

/// Which recipe a lock node belongs to, from Curator's and kazoo's name markers.
///
/// ```no_run
/// # async fn demo(session: lockkeeper::zk::Session) -> lockkeeper::Result<()> {
/// use lockkeeper::zk::{Layout, NodeKind, State};
///
/// let inspection = session.inspect("/locks/orders").await?;
/// if inspection.layout == Layout::Lock {
///     for p in &inspection.participants {
///         let role = if p.state == State::Holds { "holds" } else { "waits" };
///         let kind = if p.kind == NodeKind::Mutex { "mutex" } else { "other" };
///         println!("{role} {kind} session 0x{:x} for {:?}", p.session_id, p.age);
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NodeKind {
    /// `…lock-{seq}`: a [`Mutex`](crate::zk::Mutex) node (also a semaphore's internal lock).
    Mutex,
    /// `…__READ__{seq}`: the read side of a read-write lock.
    Read,
    /// `…__WRIT__{seq}`: the write side of a read-write lock.
    Write,
    /// `…lease-{seq}`: a semaphore lease.
    Lease,
    /// `lock`: a [`SimpleLock`](crate::zk::SimpleLock)'s node.
    Simple,
    /// `…latch-{seq}`: a leader latch participant (Curator's or lockkeeper's); its data is
    /// the participant's id.
    Latch,
    /// `{uuid}__lock__{seq}`: kazoo's `Lock`, `WriteLock` or `Election` (they share the name).
    KazooLock,
    /// `{uuid}__rlock__{seq}`: kazoo's `ReadLock`.
    KazooRead,
    /// `{uuid}`: a lease of kazoo's `Semaphore`.
    KazooLease,
    /// Anything else; shown, but not judged.
    Other,
}

/// Whether a participant holds the lock.
///
/// ```no_run
/// # async fn demo(session: lockkeeper::zk::Session) -> lockkeeper::Result<()> {
/// use lockkeeper::zk::{Layout, NodeKind, State};
///
/// let inspection = session.inspect("/locks/orders").await?;
/// if inspection.layout == Layout::Lock {
///     for p in &inspection.participants {
///         let role = if p.state == State::Holds { "holds" } else { "waits" };
///         let kind = if p.kind == NodeKind::Mutex { "mutex" } else { "other" };
///         println!("{role} {kind} session 0x{:x} for {:?}", p.session_id, p.age);
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum State {
    /// Holds the lock (or a lease, or a semaphore's internal lock).
    Holds,
    /// Waits behind an earlier node.
    Waits,
    /// Cannot be told from the listing: a lease with no known limit, or an unknown node.
    Unknown,
}

async fn run(generation: &Generation, path: &str, max_leases: Option<u32>) -> Result<Inspection> {
    let leases_dir = format!("{path}/{LEASES}");
    let locks_dir = format!("{path}/{LOCKS}");
    let kazoo_dir = kazoo_semaphore_lock(path);
    let listings = list(generation, &[path, &leases_dir, &locks_dir, &kazoo_dir]).await?;
    let [top, leases, locks, kazoo_queue]: [Option<Vec<String>>; 4] =
        listings.try_into().map_err(|listings: Vec<_>| {
            Error::Zk(lockkeeper_zk_client::Error::Protocol(format!(
                "a multi-read of 4 listings answered {}",
                listings.len()
            )))
        })?;
    let inspection = |layout, participants| Inspection {
        path: path.to_owned(),
        layout,
        participants,
    };
    let Some(top) = top else {
        return Ok(inspection(Layout::Missing, Vec::new()));
    };
    if max_leases.is_some() || top.iter().any(|c| c == LEASES || c == LOCKS) {
        let mut participants =
            read(generation, &leases_dir, LEASES, leases.unwrap_or_default()).await?;
        judge_leases(&mut participants, max_leases);
        let mut internal = read(generation, &locks_dir, LOCKS, locks.unwrap_or_default()).await?;
        judge_lock_queue(&mut internal);
        participants.append(&mut internal);
        return Ok(inspection(Layout::Semaphore { max_leases }, participants));
    }
    if kazoo_queue.is_some() || top.iter().any(|name| is_kazoo_lease(name)) {
        return kazoo_semaphore(generation, path, top, kazoo_queue.unwrap_or_default()).await;
    }
    let mut participants = read(generation, path, "", top).await?;
    judge_lock_queue(&mut participants);
    let layout = if participants.iter().any(|p| p.kind == NodeKind::Latch) {
        Layout::Election
    } else {
        Layout::Lock
    };
    Ok(inspection(layout, participants))
}

/// A kazoo semaphore at `path`: its leases, then the waiters in its sibling lock queue, named
/// relative to `path` (`../{last}-__lock__/…`).
async fn kazoo_semaphore(
    generation: &Generation,
    path: &str,
    leases: Vec<String>,
    queue: Vec<String>,
) -> Result<Inspection> {
    let limit = read_chunk(generation, &[path.to_owned()]).await?;
    let max_leases = limit
        .into_iter()
        .flatten()
        .next()
        .and_then(|(data, _)| String::from_utf8_lossy(&data).trim().parse::<u32>().ok());
    let mut participants = read(generation, path, "", leases).await?;
    for lease in &mut participants {
        if lease.kind == NodeKind::Other && is_kazoo_lease(&lease.name) {
            lease.kind = NodeKind::KazooLease;
        }
    }
    let queue_dir = kazoo_semaphore_lock(path);
    let last = queue_dir.rsplit('/').next().unwrap_or_default();
    let mut waiters = read(generation, &queue_dir, &format!("../{last}"), queue).await?;
    judge_kazoo_semaphore(&mut participants, &mut waiters);
    participants.append(&mut waiters);
    Ok(Inspection {
        path: path.to_owned(),
        layout: Layout::KazooSemaphore { max_leases },
        participants,
    })
}
