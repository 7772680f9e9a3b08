//! Inspection of a lock path: who holds it, who waits, in which order, and since when.
//!
//! The ZooKeeper recipes document points out that a lock made of sequential nodes makes
//! contention easy to see and debug: the queue *is* the directory listing. This module reads
//! that listing the way the recipes interpret it (Curator's node names and sequence order) and
//! adds what an operator needs to find the processes behind the nodes: the owning session, the
//! node's age and data. It only reads; it never changes the lock.
//!
//! Two round trips whatever the queue's length: one multi-read lists the path and the
//! semaphore sub-directories, then the nodes' data and stats are read in multi-reads of
//! [`CHUNK`] nodes. A node that goes away between the two (a waiter giving up, a holder
//! releasing) is simply left out.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use zookeeper_client::{Client, MultiReadResult, Stat};

use crate::error::{Error, Result};
use crate::fencing::FencingToken;
use crate::zk::path::validate_lock_path;
use crate::zk::queue::LOCK_MARKER;
use crate::zk::queue::Queue;
use crate::zk::session::{Generation, Session};
use crate::zk::simple::SIMPLE_NODE;

/// Curator's marker of a read-lock node (`InterProcessReadWriteLock`).
const READ_MARKER: &str = "__READ__";
/// Curator's marker of a write-lock node.
const WRITE_MARKER: &str = "__WRIT__";
/// Curator's marker of a semaphore lease node (`InterProcessSemaphoreV2`).
const LEASE_MARKER: &str = "lease-";
/// Every marker, for sorting a directory that may mix them.
const MARKERS: &[&str] = &[LOCK_MARKER, READ_MARKER, WRITE_MARKER, LEASE_MARKER];

/// The sub-directories of a Curator semaphore: its leases, and the lock that serializes
/// taking them.
const LEASES: &str = "leases";
const LOCKS: &str = "locks";

/// Nodes read per multi-read: keeps each reply far below the 1 MB frame limit.
const CHUNK: usize = 200;

/// Lists the holders and waiters of the lock at `path`, in queue order.
///
/// Understands every Curator-compatible layout lockkeeper uses: a [`Mutex`] queue (`lock-`
/// nodes), a [`RwLock`] queue (`__READ__` and `__WRIT__` nodes in one order), a
/// [`SimpleLock`]'s single node, and a [`Semaphore`] (`leases` and `locks` sub-directories;
/// lease states are [`State::Unknown`] here because the lease limit is not stored on the
/// server: use [`inspect_semaphore`]). A path that does not exist is an empty inspection, not
/// an error; an invalid path is [`Error::InvalidArgument`].
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
/// STATE  KIND   SEQUENCE    SESSION             AGE    TOKEN  DATA                NODE
/// holds  mutex  0000000000  0x010000a6e4a10001  4.2s   37     lockkeeper pid=812  _c_3f…-lock-0000000000
/// waits  mutex  0000000001  0x010000a6e4a10002  3.9s   39     lockkeeper pid=907  _c_8a…-lock-0000000001
/// waits  mutex  0000000002  0x010000a6e4a10003  120ms  41     lockkeeper pid=913  _c_c1…-lock-0000000002
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
    /// A directory of lock nodes: a mutex, read-write or simple lock.
    Lock,
    /// A semaphore (`leases` and `locks` sub-directories) and its lease limit, when given.
    Semaphore {
        /// The lease limit passed to [`inspect_semaphore`]; `None` from [`inspect`].
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

/// Which recipe a lock node belongs to, from Curator's name markers.
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
    let listings = list(generation, &[path, &leases_dir, &locks_dir]).await?;
    let mut listings = listings.into_iter();
    let (Some(top), Some(leases), Some(locks)) =
        (listings.next(), listings.next(), listings.next())
    else {
        return Err(Error::Zk(zookeeper_client::Error::UnexpectedError(
            "a multi-read answered fewer results than it was asked".into(),
        )));
    };
    let Some(top) = top else {
        return Ok(Inspection {
            path: path.to_owned(),
            layout: Layout::Missing,
            participants: Vec::new(),
        });
    };
    let semaphore = max_leases.is_some() || top.iter().any(|c| c == LEASES || c == LOCKS);
    if !semaphore {
        let mut participants = read(generation, path, "", top).await?;
        judge_lock_queue(&mut participants);
        return Ok(Inspection {
            path: path.to_owned(),
            layout: Layout::Lock,
            participants,
        });
    }
    let mut participants =
        read(generation, &leases_dir, LEASES, leases.unwrap_or_default()).await?;
    judge_leases(&mut participants, max_leases);
    let mut internal = read(generation, &locks_dir, LOCKS, locks.unwrap_or_default()).await?;
    judge_lock_queue(&mut internal);
    participants.append(&mut internal);
    Ok(Inspection {
        path: path.to_owned(),
        layout: Layout::Semaphore { max_leases },
        participants,
    })
}

/// The children of each directory in one multi-read; `None` for a directory that is missing.
async fn list(generation: &Generation, dirs: &[&str]) -> Result<Vec<Option<Vec<String>>>> {
    let results = generation
        .retry(|client| async move {
            let mut reader = client.new_multi_reader();
            for dir in dirs {
                reader.add_get_children(dir)?;
            }
            reader.commit().await
        })
        .await?;
    results
        .into_iter()
        .map(|result| match result {
            MultiReadResult::Children { children } => Ok(Some(children)),
            MultiReadResult::Error {
                err: zookeeper_client::Error::NoNode,
            } => Ok(None),
            MultiReadResult::Error { err } => Err(Error::Zk(err)),
            other => Err(unexpected(&other)),
        })
        .collect()
}

/// Reads the nodes `names` of `dir` and returns them sorted in queue order, leaving out the
/// ones that no longer exist. `prefix` is the directory relative to the inspected path.
async fn read(
    generation: &Generation,
    dir: &str,
    prefix: &str,
    names: Vec<String>,
) -> Result<Vec<Participant>> {
    let queue = Queue {
        dir: dir.to_owned(),
        marker: LOCK_MARKER,
        markers: MARKERS,
    };
    let mut names = queue.sort(names);
    // Unsequenced nodes (a simple lock's node, strays) after the queue, in name order.
    names.sort_by_key(|name| classify(name).1.is_none());
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let mut participants = Vec::with_capacity(names.len());
    for chunk in names.chunks(CHUNK) {
        let paths: Vec<String> = chunk.iter().map(|name| format!("{dir}/{name}")).collect();
        let results = read_chunk(generation, &paths).await?;
        for ((name, path), result) in chunk.iter().zip(paths).zip(results) {
            let Some((data, stat)) = result else {
                continue; // gone since the listing
            };
            let (kind, sequence) = classify(name);
            participants.push(Participant {
                name: match prefix {
                    "" => name.clone(),
                    prefix => format!("{prefix}/{name}"),
                },
                path,
                kind,
                sequence,
                session_id: stat.ephemeral_owner,
                fencing_token: FencingToken::new(stat.czxid as u64),
                age: age(now, &stat),
                data: String::from_utf8_lossy(&data).into_owned(),
                state: State::Unknown,
            });
        }
    }
    Ok(participants)
}

/// Data and stat of each path in one multi-read; `None` for a node that no longer exists.
async fn read_chunk(
    generation: &Generation,
    paths: &[String],
) -> Result<Vec<Option<(Vec<u8>, Stat)>>> {
    let results = generation
        .retry(|client: Client| async move {
            let mut reader = client.new_multi_reader();
            for path in paths {
                reader.add_get_data(path)?;
            }
            reader.commit().await
        })
        .await?;
    if results.len() != paths.len() {
        return Err(Error::Zk(zookeeper_client::Error::UnexpectedError(
            format!(
                "a multi-read of {} nodes answered {} results",
                paths.len(),
                results.len()
            ),
        )));
    }
    results
        .into_iter()
        .map(|result| match result {
            MultiReadResult::Data { data, stat } => Ok(Some((data, stat))),
            MultiReadResult::Error {
                err: zookeeper_client::Error::NoNode,
            } => Ok(None),
            MultiReadResult::Error { err } => Err(Error::Zk(err)),
            other => Err(unexpected(&other)),
        })
        .collect()
}

fn unexpected(result: &MultiReadResult) -> Error {
    Error::Zk(zookeeper_client::Error::UnexpectedError(format!(
        "unexpected multi-read result {result:?}"
    )))
}

/// The node's kind and sequence from its name: the marker nearest the end wins (a uuid
/// prefix never contains one), and the sequence is the number after it.
fn classify(name: &str) -> (NodeKind, Option<i64>) {
    if name == SIMPLE_NODE {
        return (NodeKind::Simple, None);
    }
    let found = MARKERS
        .iter()
        .filter_map(|marker| name.rfind(marker).map(|at| (marker, at + marker.len())))
        .max_by_key(|(_, end)| *end);
    let Some((marker, end)) = found else {
        return (NodeKind::Other, None);
    };
    let Ok(sequence) = name[end..].parse::<i64>() else {
        return (NodeKind::Other, None);
    };
    let kind = match *marker {
        LOCK_MARKER => NodeKind::Mutex,
        READ_MARKER => NodeKind::Read,
        WRITE_MARKER => NodeKind::Write,
        _ => NodeKind::Lease,
    };
    (kind, Some(sequence))
}

fn age(now: Duration, stat: &Stat) -> Duration {
    let created = Duration::from_millis(stat.ctime.max(0) as u64);
    now.saturating_sub(created)
}

/// The lock recipes' grant rules over one queue in sequence order:
/// - a mutex or write node holds only if it is the first node of the queue;
/// - a read node holds if no write (or mutex) node comes before it;
/// - a simple lock's node holds by existing.
///
/// One case the listing cannot show: a Curator write-lock holder that also takes the read lock
/// (a downgrade) holds its read node though its own write node precedes it; it is shown waiting.
fn judge_lock_queue(queue: &mut [Participant]) {
    let mut first = true;
    let mut exclusive_before = false;
    for participant in queue {
        participant.state = match participant.kind {
            NodeKind::Mutex | NodeKind::Write if first => State::Holds,
            NodeKind::Mutex | NodeKind::Write => State::Waits,
            NodeKind::Read if exclusive_before => State::Waits,
            NodeKind::Read => State::Holds,
            NodeKind::Simple => State::Holds,
            NodeKind::Lease | NodeKind::Other => State::Unknown,
        };
        match participant.kind {
            NodeKind::Mutex | NodeKind::Write => {
                first = false;
                exclusive_before = true;
            }
            NodeKind::Read => first = false,
            _ => {}
        }
    }
}

/// A semaphore's leases in sequence order: the first `max_leases` hold, the rest wait; all
/// unknown without a limit.
fn judge_leases(leases: &mut [Participant], max_leases: Option<u32>) {
    let mut granted = 0u32;
    for participant in leases {
        participant.state = match (participant.kind, max_leases) {
            (NodeKind::Lease, Some(max)) if granted < max => {
                granted += 1;
                State::Holds
            }
            (NodeKind::Lease, Some(_)) => State::Waits,
            _ => State::Unknown,
        };
    }
}

impl std::fmt::Display for Inspection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let layout = match self.layout {
            Layout::Missing => {
                return write!(f, "{}: no such node (nobody holds or waits)", self.path);
            }
            Layout::Lock => "lock".to_owned(),
            Layout::Semaphore { max_leases: None } => "semaphore, lease limit unknown".to_owned(),
            Layout::Semaphore {
                max_leases: Some(max),
            } => format!("semaphore of {max} leases"),
        };
        write!(
            f,
            "{} ({layout}): {} holding, {} waiting",
            self.path,
            self.holders().count(),
            self.waiters().count()
        )?;
        let mut rows = vec![COLUMNS.map(str::to_owned)];
        rows.extend(self.participants.iter().map(Participant::row));
        let mut widths = [0; COLUMNS.len()];
        for row in &rows {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(cell.chars().count());
            }
        }
        for row in &rows {
            let mut line = String::new();
            for (column, (cell, width)) in row.iter().zip(widths).enumerate() {
                if column + 1 == COLUMNS.len() {
                    line.push_str(cell);
                } else {
                    line.push_str(&format!("{cell:<width$}  "));
                }
            }
            write!(f, "\n{}", line.trim_end())?;
        }
        Ok(())
    }
}

const COLUMNS: [&str; 8] = [
    "STATE", "KIND", "SEQUENCE", "SESSION", "AGE", "TOKEN", "DATA", "NODE",
];

/// Longest data shown in the table, in characters.
const DATA_WIDTH: usize = 40;

impl Participant {
    /// The session id as ZooKeeper's tools print it (`0x` and 16 hex digits).
    pub fn session_hex(&self) -> String {
        format!("0x{:016x}", self.session_id)
    }

    fn row(&self) -> [String; 8] {
        [
            self.state.to_string(),
            self.kind.to_string(),
            self.sequence
                .map_or_else(|| "-".to_owned(), |sequence| format!("{sequence:010}")),
            self.session_hex(),
            human_age(self.age),
            self.fencing_token.to_string(),
            printable(&self.data),
            self.name.clone(),
        ]
    }
}

impl std::fmt::Display for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            State::Holds => "holds",
            State::Waits => "waits",
            State::Unknown => "?",
        })
    }
}

impl std::fmt::Display for NodeKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            NodeKind::Mutex => "mutex",
            NodeKind::Read => "read",
            NodeKind::Write => "write",
            NodeKind::Lease => "lease",
            NodeKind::Simple => "simple",
            NodeKind::Other => "other",
        })
    }
}

/// Data on one line: control characters escaped, cut at [`DATA_WIDTH`].
fn printable(data: &str) -> String {
    let escaped: String = data
        .chars()
        .flat_map(|c| {
            if c.is_control() {
                c.escape_default().collect::<Vec<_>>()
            } else {
                vec![c]
            }
        })
        .collect();
    match escaped.char_indices().nth(DATA_WIDTH) {
        Some((cut, _)) => format!("{}…", &escaped[..cut]),
        None => escaped,
    }
}

fn human_age(age: Duration) -> String {
    let secs = age.as_secs();
    match secs {
        0 => format!("{}ms", age.as_millis()),
        1..60 => format!("{:.1}s", age.as_secs_f64()),
        60..3600 => format!("{}m{:02}s", secs / 60, secs % 60),
        _ => format!("{}h{:02}m", secs / 3600, secs % 3600 / 60),
    }
}

/// Naming and grant rules are tested against real servers in `tests/zk_inspect.rs`; these
/// are the parts that a listing from the server cannot stage.
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_escapes_and_cuts_data() {
        assert_eq!(printable("a\nb"), "a\\nb");
        let long = "x".repeat(DATA_WIDTH + 5);
        assert_eq!(printable(&long).chars().count(), DATA_WIDTH + 1);
        assert_eq!(human_age(Duration::from_millis(250)), "250ms");
        assert_eq!(human_age(Duration::from_secs(125)), "2m05s");
    }

    /// A node listed but deleted before its stat is read (a waiter that gave up) is left out,
    /// not an error: the listing is taken, one of its nodes deleted, then the stats are read.
    #[tokio::test]
    async fn a_node_deleted_after_the_listing_is_skipped() {
        use zookeeper_client::{Acls, CreateMode};
        for server in lockkeeper_testkit::both() {
            let name = server.name();
            let session = Session::connect(&server.connect_string()).await.unwrap();
            let guard = session
                .mutex("/inspect/gone")
                .unwrap()
                .lock()
                .await
                .unwrap();
            let client = session.client().unwrap();
            let options = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());
            let (_, sequence) = client
                .create("/inspect/gone/_c_x-lock-", b"", &options)
                .await
                .unwrap();
            let leaving = format!("/inspect/gone/_c_x-lock-{sequence}");
            let listing = client.list_children("/inspect/gone").await.unwrap();
            assert_eq!(listing.len(), 2, "{name}: {listing:?}");
            client.delete(&leaving, None).await.unwrap();
            let found = read(&session.generation(), "/inspect/gone", "", listing)
                .await
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            let paths: Vec<&str> = found.iter().map(|p| p.path.as_str()).collect();
            assert_eq!(paths, [guard.node()], "{name}");
            guard.release().await.unwrap();
        }
    }
}
