//! The queue of ephemeral-sequential nodes that every lock recipe waits in.
//!
//! This is the ZooKeeper lock recipe proper, shared by [`Mutex`], the read and write sides of
//! [`RwLock`] and the [`Semaphore`]'s internal lock, as Curator's `LockInternals` is shared by
//! its recipes (and with Curator's node names, so both can queue in one directory):
//!
//! 1. create `{dir}/_c_{uuid}-{marker}{sequence}`, ephemeral and sequential. The uuid makes the
//!    creation *protected*: after a connection loss the node is found again by its uuid
//!    instead of being created twice and orphaned;
//! 2. list the children, sort them by sequence, and ask the recipe's [`Rule`] whether our node
//!    holds; if not, which earlier node to watch;
//! 3. watch that node with getData (not exists: if it is already gone, getData says NoNode and
//!    leaves no watch behind), and also the node the rule would name once that one is gone
//!    (for a mutex, the node two ahead of ours);
//! 4. when the watched node goes, grant if the last listing without it says so (nothing can
//!    queue *ahead* of us, so that listing is a superset of the truth), else go back to 2.
//!    When the second node goes, go back to 2 at once, while the watched node still holds: its
//!    release then finds a listing fresh enough to grant on the notification alone.
//!
//! A release therefore wakes only waiters it lets in or that list again early (for a mutex, at
//! most the two behind it: no herd), and grants follow sequence order (FIFO). Creating the
//! node and listing the children are sent back to back without waiting: ZooKeeper answers one
//! session's requests in order, so the listing already contains our node and an uncontended
//! acquire costs one round trip.
//!
//! With lock-delay (`HoldOptions::lock_delay`), a node the rule grants waits first until
//! the delay has passed since any holder ahead of it was seen to fail (see `hold::delay`).
//!
//! [`Mutex`]: crate::zk::Mutex
//! [`RwLock`]: crate::zk::RwLock
//! [`Semaphore`]: crate::zk::Semaphore

use std::sync::Arc;

use lockkeeper_zk_client::{CreateMode, CreateOptions, EventType, Stat};
use uuid::Uuid;

use crate::deadline::Deadline;
use crate::error::{Error, Result};
use crate::fencing::FencingToken;
use crate::zk::hold::delay::{self, Vanished};
use crate::zk::hold::{Held, HoldOptions};
use crate::zk::node::{create_parents, delete_node};
use crate::zk::session::{Generation, Health, Session, is_connection_loss, is_terminal};

/// A recipe's answer for one node of the queue.
pub(crate) enum Decision {
    /// The node holds the lock.
    Hold,
    /// The node waits; watch this earlier node (a child name) and ask again when it changes.
    Watch(String),
}

/// A recipe's grant rule: given the queue sorted by sequence and the index of our node.
///
/// It is also asked about listings the server never sent (the last one without nodes seen to
/// go), so it must depend on its arguments alone, only ever name a node ahead of ours, and,
/// when it grants on a listing, grant on every listing whose nodes ahead of ours are a subset
/// of that one's.
pub(crate) type Rule<'r> = &'r (dyn Fn(&[String], usize) -> Decision + Sync);

// The markers in the names of the nodes that wait in a line, as Curator names them
// (`_c_{uuid}-{marker}{sequence}`), declared here once for the recipes and for inspection.

/// The marker of a mutex node (and of the semaphore's internal lock).
pub(crate) const LOCK_MARKER: &str = "lock-";
/// The marker of a read node (`InterProcessReadWriteLock`).
pub(crate) const READ_MARKER: &str = "__READ__";
/// The marker of a write node.
pub(crate) const WRITE_MARKER: &str = "__WRIT__";
/// The marker of a semaphore lease node (`InterProcessSemaphoreV2`).
pub(crate) const LEASE_MARKER: &str = "lease-";
/// The marker of a leader latch node (`LeaderLatch`).
pub(crate) const LATCH_MARKER: &str = "latch-";

/// The rule of a mutex and of a leader latch: the first node holds; every other node watches
/// the one just before it.
pub(crate) fn predecessor_rule(children: &[String], ours: usize) -> Decision {
    match ours {
        0 => Decision::Hold,
        _ => Decision::Watch(children[ours - 1].clone()),
    }
}

/// One queue directory and the marker its nodes carry before the sequence number.
#[derive(Clone, Debug)]
pub(crate) struct Line {
    /// The lock path (the parent of the nodes), as the user gave it.
    pub dir: String,
    /// The marker of the nodes this handle creates: `lock-`, `__READ__`, `__WRIT__`, `lease-`.
    pub marker: &'static str,
    /// Every marker that may appear in the directory, for sorting (`lock-` alone, or both
    /// read-write markers): the sequence is what follows the marker.
    pub markers: &'static [&'static str],
}

impl Line {
    /// The children of the directory, sorted by sequence (Curator's order).
    pub(crate) fn sort(&self, mut children: Vec<String>) -> Vec<String> {
        children.sort_by(|a, b| {
            self.sequence_part(a)
                .cmp(self.sequence_part(b))
                .then(a.cmp(b))
        });
        children
    }

    /// What follows the last marker in `name` (the zero-padded sequence), or the whole name.
    pub(crate) fn sequence_part<'n>(&self, name: &'n str) -> &'n str {
        self.markers
            .iter()
            .filter_map(|marker| name.rfind(marker).map(|at| &name[at + marker.len()..]))
            .min_by_key(|rest| rest.len())
            .unwrap_or(name)
    }

    fn path_of(&self, name: &str) -> String {
        // Joined, not formatted: this runs on every acquisition.
        [self.dir.as_str(), "/", name].concat()
    }

    /// Waits in the queue until `rule` says our node holds, or the deadline passes (`None`).
    ///
    /// Cancel-safe: if the future is dropped, a task deletes our node (found by uuid if the
    /// create had not answered yet).
    pub(crate) async fn acquire(
        &self,
        session: &Session,
        rule: Rule<'_>,
        deadline: Deadline,
    ) -> Result<Option<Held>> {
        self.acquire_with(session, rule, deadline, HoldOptions::default())
            .await
    }

    /// [`acquire`](Line::acquire) for a lock handle with options: the hold gets them, and
    /// the wait honours lock-delay.
    pub(crate) async fn acquire_with(
        &self,
        session: &Session,
        rule: Rule<'_>,
        deadline: Deadline,
        options: HoldOptions,
    ) -> Result<Option<Held>> {
        self.acquire_node(session, rule, deadline, node_data(), options)
            .await
    }

    /// [`acquire_with`](Line::acquire_with) with a node carrying `data` instead of the process
    /// id (a leader latch's node carries the participant's id, as Curator's does).
    pub(crate) async fn acquire_as(
        &self,
        session: &Session,
        rule: Rule<'_>,
        deadline: Deadline,
        data: &[u8],
        options: HoldOptions,
    ) -> Result<Option<Held>> {
        self.acquire_node(session, rule, deadline, data, options)
            .await
    }

    /// Waits in line; a timed wait is bounded as a whole (see [`crate::deadline`]): when its
    /// deadline passes, whatever the wait is doing (waiting for a watch, a connection, a
    /// retried request) is dropped and the waiting node withdrawn within
    /// [`WITHDRAWAL`](crate::deadline::WITHDRAWAL). `Ok(None)` only when the server confirmed the
    /// withdrawal; a server that did not answer in time is an error naming why.
    async fn acquire_node(
        &self,
        session: &Session,
        rule: Rule<'_>,
        deadline: Deadline,
        data: &[u8],
        options: HoldOptions,
    ) -> Result<Option<Held>> {
        let mut pending = None;
        let (Deadline::At(at), Some(by)) = (deadline, deadline.withdrawn_by()) else {
            let waited = self
                .wait_in_line(session, rule, deadline, data, options, &mut pending)
                .await?;
            if waited.is_none() {
                if let Some(mut pending) = pending {
                    pending.withdraw().await?;
                }
            }
            return Ok(waited);
        };
        let waiting = self.wait_in_line(session, rule, deadline, data, options, &mut pending);
        match tokio::time::timeout_at(at, waiting).await {
            Ok(Ok(Some(held))) => return Ok(Some(held)),
            // The pending node, if any, is deleted in the background as it is dropped.
            Ok(Err(err)) => return Err(err),
            Ok(Ok(None)) | Err(_) => {}
        }
        let generation = match &pending {
            Some(pending) => pending.generation.clone(),
            None => session.generation(),
        };
        let withdrawn = match pending.as_mut() {
            Some(pending) => tokio::time::timeout_at(by, pending.withdraw())
                .await
                .map_err(|_| unanswered(&generation, "while withdrawing the waiting node")),
            // No node was created: the wait never had a connected session.
            None if generation.health() == Health::Connected => Ok(Ok(())),
            None => Err(unanswered(&generation, "while connecting")),
        };
        match withdrawn {
            Ok(Ok(())) => Ok(None),
            Ok(Err(err)) => Err(err),
            // Still armed: dropping it leaves the delete to a background task (the node goes
            // with the session anyway if the server never answers again).
            Err(err) => {
                drop(pending);
                Err(err.into())
            }
        }
    }

    /// The wait itself: creates our node (into `pending`, so that a caller whose deadline cut
    /// this short can withdraw it), waits for our turn, and queues again if the node is
    /// deleted. `Ok(None)` when the deadline passed, leaving the node in `pending`, armed.
    async fn wait_in_line(
        &self,
        session: &Session,
        rule: Rule<'_>,
        deadline: Deadline,
        data: &[u8],
        options: HoldOptions,
        pending: &mut Option<PendingNode>,
    ) -> Result<Option<Held>> {
        let generation = match deadline {
            // try_lock while disconnected (suspended, or between generations): do not wait
            // for the connection, which may take as long as the network does to heal.
            Deadline::Now if session.generation().health() != Health::Connected => {
                return Err(Error::SessionLost);
            }
            _ => session.connected_generation().await?,
        };
        loop {
            let node = pending.insert(PendingNode::new(self, &generation));
            // A waiter with lock-delay that gives up leaves as cleanly as a release.
            node.recorded = options.lock_delay.is_some();
            let (name, czxid, mut listing) = node.create(self, data).await?;
            let path = self.path_of(&name);
            match self
                .wait_turn(
                    &generation,
                    &name,
                    rule,
                    deadline,
                    &mut listing,
                    options.lock_delay.filter(|_| !options.at_once),
                )
                .await?
            {
                Turn::Granted => {
                    if options.lock_delay.is_some() {
                        match delay::note_held(&generation, &path).await {
                            Ok(()) => {}
                            // The directory went, our node with it: queue again.
                            Err(Error::NotHeld) => {
                                node.disarm();
                                continue;
                            }
                            // Unrecorded, a failure of this hold would not delay a waiter
                            // arriving after it: no grant. Nobody held through this node, so
                            // it goes without a release record.
                            Err(err) => {
                                node.recorded = false;
                                let _ = node.withdraw().await;
                                return Err(err);
                            }
                        }
                    }
                    node.disarm();
                    let held = Held::new(path, FencingToken::new(czxid as u64), generation);
                    return Ok(Some(held.with_options(options)));
                }
                Turn::TimedOut => return Ok(None),
                // Our node was deleted by someone else while we waited: queue again.
                Turn::NodeGone => {
                    node.disarm();
                    tracing::warn!(
                        node = path,
                        "lock node deleted while waiting; queueing again"
                    );
                }
            }
        }
    }

    async fn wait_turn(
        &self,
        generation: &Generation,
        name: &str,
        rule: Rule<'_>,
        deadline: Deadline,
        listing: &mut Option<Vec<String>>,
        lock_delay: Option<std::time::Duration>,
    ) -> Result<Turn> {
        let mut vanished = Vanished::default();
        // The queue as last seen, sorted. Between listings it only shrinks: a new node always
        // gets a higher sequence than ours, so nothing can appear *before* us. When the node
        // we watch is deleted, the last listing minus that node is therefore a superset of
        // the nodes now ahead of us, and a rule that grants on a superset grants on the truth:
        // a handoff from a predecessor that was first when we listed needs no new listing.
        // When that superset does not grant, it is listed anew rather than walked: it is
        // mostly stale, and asking after each stale node costs a round trip answered NoNode
        // before the listing that grants.
        //
        // To keep the listing fresh enough for that, a waiter also watches the node it would
        // watch next (its predecessor's predecessor, for a mutex) and lists again when that
        // one goes: while the predecessor still holds, off the handoff's path. The handoff to
        // us then costs the notification alone, not a listing after it. A mutex release
        // notifies at most two waiters, so there is still no herd.
        let mut known: Option<Vec<String>> = listing.take().map(|children| self.sort(children));
        // The one watch of the last round whose event was not taken: reused if the new listing
        // needs it again (if it fired meanwhile, it wakes the next round at once).
        let mut unfired = Unfired::None;
        loop {
            let children = match known.take() {
                Some(children) => children,
                None => match generation
                    .retry(|client| async move { client.list_children(&self.dir).await })
                    .await
                {
                    Ok(children) => self.sort(children),
                    // The whole directory was deleted, our node with it: queue again (the
                    // create makes the directory anew).
                    Err(Error::Zk(lockkeeper_zk_client::Error::NoNode)) => {
                        return Ok(Turn::NodeGone);
                    }
                    Err(err) => return Err(err),
                },
            };
            let Some(ours) = children.iter().position(|child| child == name) else {
                return Ok(Turn::NodeGone);
            };
            // The watched node, gone before its notification reached us, is still one seen
            // gone (lock-delay counts it as failed unless its record says otherwise).
            if let Unfired::Watched(watch) = &unfired
                && !children.contains(&watch.name)
            {
                vanished.saw(&watch.name);
            }
            let watched = match rule(&children, ours) {
                Decision::Hold => {
                    let Some(delay) = lock_delay else {
                        return Ok(Turn::Granted);
                    };
                    let until = self
                        .delayed_until(generation, &children, ours, rule, delay, &mut vanished)
                        .await?;
                    match until {
                        Some(until) if until > tokio::time::Instant::now() => {
                            tokio::select! {
                                () = tokio::time::sleep_until(until) => {}
                                () = deadline.sleep() => return Ok(Turn::TimedOut),
                                () = generation.ended() => return Err(Error::SessionLost),
                            }
                            // Look again: our node may have gone meanwhile.
                            continue;
                        }
                        _ => return Ok(Turn::Granted),
                    }
                }
                Decision::Watch(_) if deadline.passed() => return Ok(Turn::TimedOut),
                Decision::Watch(watched) => watched,
            };
            // The listing without the watched node: once that node goes, a superset of what
            // is ahead of us. `next` is `None` exactly when the rule grants on it.
            let mut rest = children;
            rest.retain(|child| *child != watched);
            let next = next_watched(rule, &rest, name);
            let kept = match std::mem::replace(&mut unfired, Unfired::None) {
                Unfired::Watched(kept) | Unfired::Next(kept) => Some(kept),
                Unfired::None => None,
            };
            let (kept_watched, kept_next) = match kept {
                Some(kept) if kept.name == watched => (Some(kept), None),
                Some(kept) if next.as_deref() == Some(kept.name.as_str()) => (None, Some(kept)),
                _ => (None, None),
            };
            let (watch, ahead) =
                tokio::join!(self.rewatch(generation, &watched, kept_watched), async {
                    match &next {
                        Some(next) => self.rewatch(generation, next, kept_next).await.map(Some),
                        None => Ok(None),
                    }
                });
            let mut watch = watch?;
            // The second watch only saves a listing later: without it, wait as before (but not
            // on a session that is over).
            let mut ahead = match ahead {
                Ok(ahead) => ahead,
                Err(Error::SessionLost) => return Err(Error::SessionLost),
                Err(_) => None,
            };
            let woke = tokio::select! {
                // Both may have fired (one session's nodes go together): the watched node first.
                biased;
                fired = &mut watch.fired => Woke::Watched(fired),
                fired = fired_or_never(&mut ahead) => Woke::Ahead(fired),
                () = deadline.sleep() => return Ok(Turn::TimedOut),
                () = generation.ended() => return Err(Error::SessionLost),
            };
            let fired = match woke {
                Woke::Watched(fired) => {
                    unfired = ahead.map_or(Unfired::None, Unfired::Next);
                    known = match fired {
                        Fired::Deleted => {
                            vanished.saw(&watched);
                            next.is_none().then_some(rest)
                        }
                        // Gone before the watch: list again (which also finds our own node
                        // gone if the whole directory was deleted).
                        Fired::Gone => {
                            vanished.saw(&watched);
                            None
                        }
                        // A data change on the watched node: look at the queue again.
                        Fired::Changed | Fired::SessionEnded => None,
                    };
                    fired
                }
                // The node ahead of the watched one went (or changed): list again now, while
                // the watched node is still there, keeping its watch.
                Woke::Ahead(fired) => {
                    unfired = Unfired::Watched(watch);
                    known = None;
                    fired
                }
            };
            match fired {
                Fired::SessionEnded => return Err(Error::SessionLost),
                Fired::Deleted | Fired::Changed => generation.count_notification(),
                Fired::Gone => {}
            }
        }
    }

    /// The watch on `name`: `kept` if there is one whose event was not taken, else a new one.
    async fn rewatch(
        &self,
        generation: &Generation,
        name: &str,
        kept: Option<NodeWatch>,
    ) -> Result<NodeWatch> {
        match kept {
            Some(kept) => Ok(kept),
            None => self.watch_node(generation, name).await,
        }
    }

    /// Leaves a watch on the queue node `name`; a node already gone is a watch already fired.
    async fn watch_node(&self, generation: &Generation, name: &str) -> Result<NodeWatch> {
        let path = self.path_of(name);
        let watcher = generation
            .retry(|client| {
                let path = path.clone();
                async move {
                    match client.get_and_watch_data(&path).await {
                        Ok((_, _, watcher)) => Ok(Some(watcher)),
                        // Already gone: no watch was left.
                        Err(lockkeeper_zk_client::Error::NoNode) => Ok(None),
                        Err(err) => Err(err),
                    }
                }
            })
            .await?;
        let fired: FiredFuture = match watcher {
            Some(watcher) => Box::pin(async move {
                match watcher.changed().await.event_type {
                    // The only session events a watch sees are terminal ones.
                    EventType::Session => Fired::SessionEnded,
                    EventType::NodeDeleted => Fired::Deleted,
                    _ => Fired::Changed,
                }
            }),
            None => Box::pin(std::future::ready(Fired::Gone)),
        };
        Ok(NodeWatch {
            name: name.to_owned(),
            fired,
        })
    }
}

/// What a watch on a queue node reported.
#[derive(Clone, Copy, Debug)]
enum Fired {
    /// The node was deleted (a notification).
    Deleted,
    /// The node was already gone when the watch was asked for (no notification).
    Gone,
    /// The node's data changed.
    Changed,
    /// The session ended.
    SessionEnded,
}

type FiredFuture = std::pin::Pin<Box<dyn std::future::Future<Output = Fired> + Send>>;

/// A watch left on one queue node, kept across listings that still need it.
struct NodeWatch {
    name: String,
    fired: FiredFuture,
}

/// A watch of the last round whose event was not taken, by the part it played.
enum Unfired {
    None,
    /// On the node the rule named.
    Watched(NodeWatch),
    /// On the node the rule would name next.
    Next(NodeWatch),
}

/// Which watch woke a waiter.
enum Woke {
    /// The node the rule named.
    Watched(Fired),
    /// The node the rule would name next.
    Ahead(Fired),
}

/// Waits for `watch` to fire, or for ever when there is none.
async fn fired_or_never(watch: &mut Option<NodeWatch>) -> Fired {
    match watch {
        Some(watch) => (&mut watch.fired).await,
        None => std::future::pending().await,
    }
}

/// The node `rule` would have us watch in `rest`, the listing without the watched node
/// (`None`: it would grant).
fn next_watched(rule: Rule<'_>, rest: &[String], name: &str) -> Option<String> {
    let ours = rest.iter().position(|child| child == name)?;
    match rule(rest, ours) {
        Decision::Hold => None,
        Decision::Watch(next) => Some(next),
    }
}

impl Line {
    /// Under lock-delay, until when a grant the rule allows must wait: see `hold::delay`. The
    /// record's `held` node counts as seen gone now when it is missing from `children` and
    /// would have kept our node out (the rule, asked with it put back, says wait).
    async fn delayed_until(
        &self,
        generation: &Generation,
        children: &[String],
        ours: usize,
        rule: Rule<'_>,
        delay: std::time::Duration,
        vanished: &mut Vanished,
    ) -> Result<Option<tokio::time::Instant>> {
        let record = delay::read(generation, &self.dir).await?;
        if let Some(holder) = &record.held {
            if *holder != children[ours] && !children.contains(holder) && !record.released(holder) {
                let mut with = children.to_vec();
                with.push(holder.clone());
                let with = self.sort(with);
                let ours_then = with.iter().position(|child| *child == children[ours]);
                if let Some(at) = ours_then {
                    if matches!(rule(&with, at), Decision::Watch(_)) {
                        vanished.saw(holder);
                    }
                }
            }
        }
        Ok(vanished.delayed_until(&record, delay))
    }
}

enum Turn {
    Granted,
    TimedOut,
    NodeGone,
}

/// Our queue node from the moment its create is sent until it is granted or deleted. If the
/// acquisition is abandoned in between (an error, or its future dropped), `Drop` deletes it
/// in the background.
pub(crate) struct PendingNode {
    generation: Arc<Generation>,
    dir: String,
    /// `_c_{uuid}-`: every name this acquisition could have created starts with it.
    protection: String,
    marker: &'static str,
    /// The node's name once the server has answered the create.
    created: Option<String>,
    armed: bool,
    /// Whether an abandoned node is deleted with a release record (see `hold::delay`).
    pub(crate) recorded: bool,
}

/// Data of a lock node: enough for an operator looking at the queue to find the process,
/// `lockkeeper HOST:PID` (a pid alone names no machine when holders run on several). Read once
/// per process: neither changes while it runs, and an acquisition then makes no system call
/// for it.
pub(crate) fn node_data() -> &'static [u8] {
    static DATA: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    DATA.get_or_init(|| {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_owned())
            .ok()
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "localhost".to_owned());
        format!("lockkeeper {host}:{}", std::process::id()).into_bytes()
    })
}

const MAX_PARENT_ATTEMPTS: u32 = 5;

/// Curator's protection prefix for a node whose create may be retried, `_c_{uuid}-`, written
/// without the formatting machinery: it is made on every acquisition.
fn protection(uuid: Uuid) -> String {
    let mut buf = [0u8; uuid::fmt::Hyphenated::LENGTH];
    ["_c_", uuid.hyphenated().encode_lower(&mut buf) as &str, "-"].concat()
}

impl PendingNode {
    pub(crate) fn new(queue: &Line, generation: &Arc<Generation>) -> PendingNode {
        PendingNode {
            generation: generation.clone(),
            dir: queue.dir.clone(),
            protection: protection(Uuid::new_v4()),
            marker: queue.marker,
            created: None,
            armed: true,
            recorded: false,
        }
    }

    /// Creates the node (protected, creating missing parents as containers) and returns its
    /// name, its czxid, and the directory listing when it was fetched in the same round trip.
    pub(crate) async fn create(
        &mut self,
        queue: &Line,
        data: &[u8],
    ) -> Result<(String, i64, Option<Vec<String>>)> {
        let prefix = [self.dir.as_str(), "/", &self.protection, self.marker].concat();
        let options = CreateOptions::new(CreateMode::EphemeralSequential);
        let mut attempt = 1;
        let mut parent_attempts = 0;
        loop {
            let client = self.generation.client()?;
            // Both in one write, and so in one read of the server's.
            let (create, listing) = {
                let _cork = client.cork();
                let create = client.create(&prefix, data, &options);
                (create, client.list_children(&queue.dir))
            };
            let created = create.await;
            let listed = listing.await;
            match created {
                Ok((stat, path)) => {
                    // The server appended the sequence to our prefix: the name is the last
                    // segment of the path it answered.
                    let name = path.rsplit('/').next().unwrap_or_default().to_owned();
                    self.created = Some(name.clone());
                    return Ok((name, stat.czxid, listed.ok()));
                }
                Err(lockkeeper_zk_client::Error::NoNode)
                    if parent_attempts < MAX_PARENT_ATTEMPTS =>
                {
                    parent_attempts += 1;
                    create_parents(&client, &self.dir).await?;
                }
                Err(err) if is_terminal(&err) => return Err(Error::SessionLost),
                Err(err) if is_connection_loss(&err) => {
                    if let Some((name, stat)) = self.find_created().await? {
                        self.created = Some(name.clone());
                        return Ok((name, stat.czxid, None));
                    }
                    if attempt >= self.generation_attempts() {
                        return Err(Error::RetriesExhausted {
                            attempts: attempt,
                            last: err,
                        });
                    }
                    attempt += 1;
                }
                Err(err) => return Err(Error::Zk(err)),
            }
        }
    }

    fn generation_attempts(&self) -> u32 {
        self.generation.retry_policy().max_attempts()
    }

    /// After a connection loss during create: the node may exist; its name carries our uuid.
    async fn find_created(&self) -> Result<Option<(String, Stat)>> {
        let children = match self
            .generation
            .retry(|client| async move { client.list_children(&self.dir).await })
            .await
        {
            Ok(children) => children,
            Err(Error::Zk(lockkeeper_zk_client::Error::NoNode)) => return Ok(None),
            Err(err) => return Err(err),
        };
        let Some(name) = children
            .into_iter()
            .find(|c| c.starts_with(&self.protection))
        else {
            return Ok(None);
        };
        let path = format!("{}/{}", self.dir, name);
        let stat = self
            .generation
            .retry(|client| {
                let path = path.clone();
                async move { client.check_stat(&path).await }
            })
            .await?;
        Ok(stat.map(|stat| (name, stat)))
    }

    pub(crate) fn disarm(&mut self) {
        self.armed = false;
    }

    /// Deletes the node now (found by its uuid if the create was not answered), and disarms
    /// once that is done. A node already gone counts as withdrawn. Cancel-safe: dropped
    /// before the end, the node is still armed and `Drop` deletes it in the background.
    pub(crate) async fn withdraw(&mut self) -> Result<()> {
        remove(
            &self.generation,
            &self.dir,
            &self.protection,
            self.created.clone(),
            self.recorded,
        )
        .await?;
        self.armed = false;
        Ok(())
    }
}

/// Deletes what an acquisition created in `dir`: `created`, or every child whose name carries
/// its `protection` (requests are ordered per session, so a listing sent now sees a create
/// that was sent before it, even if its answer never reached us). A node already gone is
/// not an error.
async fn remove(
    generation: &Generation,
    dir: &str,
    protection: &str,
    created: Option<String>,
    recorded: bool,
) -> Result<()> {
    let names = match created {
        Some(name) => vec![name],
        None => match generation
            .retry(|client| async move { client.list_children(dir).await })
            .await
        {
            Ok(children) => children
                .into_iter()
                .filter(|c| c.starts_with(protection))
                .collect(),
            Err(Error::Zk(lockkeeper_zk_client::Error::NoNode)) => Vec::new(),
            Err(err) => return Err(err),
        },
    };
    for name in names {
        let node = format!("{dir}/{name}");
        let deleted = if recorded {
            delay::release_recorded(generation, &node).await
        } else {
            delete_node(generation, &node).await
        };
        match deleted {
            Ok(()) | Err(Error::NotHeld) => {}
            Err(err) => return Err(err),
        }
    }
    Ok(())
}

/// The error of a timed wait whose withdrawal the server did not answer within
/// [`WITHDRAWAL`](crate::deadline::WITHDRAWAL) of the deadline: a connection loss (the node may
/// or may not be gone; it goes with the session if the server never answers), saying what the
/// session's connection looked like.
pub(crate) fn unanswered(generation: &Generation, doing: &str) -> lockkeeper_zk_client::Error {
    let state = match generation.health() {
        Health::Connected => "connected, but the server did not answer",
        Health::Suspended => "the connection to the server is down",
        Health::Ended => "the session ended",
    };
    lockkeeper_zk_client::Error::ConnectionLoss(format!(
        "the server is unreachable: no answer within {:?} of the deadline {doing} ({state})",
        crate::deadline::WITHDRAWAL
    ))
}

impl Drop for PendingNode {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            // No runtime to clean up with: the node goes when the session does.
            return;
        };
        let generation = self.generation.clone();
        let dir = self.dir.clone();
        let protection = self.protection.clone();
        let created = self.created.take();
        let recorded = self.recorded;
        runtime.spawn(async move {
            if let Err(err) = remove(&generation, &dir, &protection, created, recorded).await {
                tracing::warn!(dir, %err, "could not delete an abandoned lock node");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue(markers: &'static [&'static str]) -> Line {
        Line {
            dir: "/l".into(),
            marker: markers[0],
            markers,
        }
    }

    #[test]
    fn a_lock_node_names_this_host_and_process() {
        let data = String::from_utf8(node_data().to_vec()).expect("utf-8");
        let (host, pid) = data
            .strip_prefix("lockkeeper ")
            .and_then(|rest| rest.rsplit_once(':'))
            .unwrap_or_else(|| panic!("not `lockkeeper HOST:PID`: {data:?}"));
        assert!(!host.is_empty(), "{data:?}");
        assert_eq!(pid, std::process::id().to_string(), "{data:?}");
    }

    #[test]
    fn the_protection_prefix_is_curators() {
        let uuid = Uuid::from_u128(0x0123_4567_89ab_cdef_fedc_ba98_7654_3210);
        assert_eq!(protection(uuid), "_c_01234567-89ab-cdef-fedc-ba9876543210-");
        let fresh = Uuid::new_v4();
        assert_eq!(protection(fresh), format!("_c_{fresh}-"));
    }

    #[test]
    fn sorts_by_sequence_not_by_uuid() {
        let q = queue(&["lock-"]);
        let sorted = q.sort(vec![
            "_c_ffff-lock-0000000002".into(),
            "_c_0000-lock-0000000010".into(),
            "_c_8888-lock-0000000001".into(),
        ]);
        assert_eq!(
            sorted,
            [
                "_c_8888-lock-0000000001",
                "_c_ffff-lock-0000000002",
                "_c_0000-lock-0000000010"
            ]
        );
    }

    #[test]
    fn read_write_markers_share_one_order() {
        let q = queue(&["__READ__", "__WRIT__"]);
        let sorted = q.sort(vec![
            "_c_a-__WRIT__0000000003".into(),
            "_c_b-__READ__0000000001".into(),
            "_c_c-__WRIT__0000000002".into(),
        ]);
        assert_eq!(
            sorted,
            [
                "_c_b-__READ__0000000001",
                "_c_c-__WRIT__0000000002",
                "_c_a-__WRIT__0000000003"
            ]
        );
    }
}
