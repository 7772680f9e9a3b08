//! A granted lock node, as every guard sees it: its path, its fencing token, and whether it
//! is still held.
//!
//! "Held" is the holder's *knowledge*, not the server's: while the session is suspended the
//! node may already be gone (the session may have expired on the server), so a careful holder
//! stops touching the protected resource. That is why `is_held()` is false while suspended and
//! `lost()` resolves at the first suspension, as Curator advises for SUSPENDED. For the same
//! reason a hold is not trusted past its session's deadline (`valid_until`): a holder that was
//! paused longer than its session timeout must not believe its lock is still there just
//! because nobody has told it otherwise yet.
//!
//! **`is_held()` is live.** From the moment a hold is shared ([`Held::share`], which every
//! guard's constructor goes through) a task watches its node, whether or not anyone awaits
//! `lost()`. `is_held()` turns false at the first of: the node's deletion event (or the node
//! found gone, or found re-created by someone else: its czxid is not our token), the
//! session's suspension or end (read from the session's state, which the client updates as
//! the connection changes), the local deadline, the maximum hold time. So a holder that polls
//! `is_held()`, as a Curator user polls `hasLeadership()`, learns of a deletion as soon as the
//! server's notification arrives. The watch ([`watch_node`], a [`Watcher`]) is a task aborted when the hold is
//! dropped; a one-shot watch survives reconnections of the same session (the client
//! re-registers it), and a read that failed with the connection is sent again once the
//! session is back.
//!
//! A hold may instead be told to *tolerate* suspensions (Curator's session error policy, for a
//! leader that would rather not step down on every network blip): then only the session's end,
//! its deadline or the node's deletion count. The deadline still bounds it: a suspension that
//! outlasts it may hide an expiry, so it ends the hold either way.
//!
//! The options every lock takes ([`HoldOptions`]) live here too, so that every lock kind
//! behaves the same:
//!
//! - a **maximum hold time** ends the hold at a fixed instant after the grant: `is_held()` is
//!   false and `lost()` resolves from that instant on, and a timer task deletes the node. A
//!   holder past its maximum hold time is by definition still working, so that delete is *not*
//!   recorded as a clean release: under lock-delay the next holder waits the delay out, as
//!   after a failure. The timer holds only a weak reference, so a guard dropped earlier is
//!   released as usual and the timer finds nothing to do;
//! - **lock-delay** (see [`delay`]) makes a release write its release record, and a grant
//!   record itself, so that waiters can tell a clean release from a failure.

pub(crate) mod delay;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use tokio::time::Instant;

use lockkeeper_zk_client::EventType;

use crate::error::{Error, Result};
use crate::fencing::FencingToken;
use crate::options::{self, Delay, Setting};
use crate::sync::{Watcher, lock};
use crate::zk::node::{delete_if_ours, delete_node};
use crate::zk::session::{Generation, Health, is_connection_loss};

/// One granted lock node.
pub(crate) struct Held {
    node: String,
    token: FencingToken,
    generation: Arc<Generation>,
    /// Set by release (or drop) before the delete is sent.
    released: AtomicBool,
    /// The watch on the node from the grant on ([`Held::share`]); `None` before.
    watch: Option<Watcher>,
    /// Closed before the delete is sent, so that no watch read follows it.
    watch_gate: Arc<WatchGate>,
    /// For a node whose name every holder reuses (a [`SimpleLock`]'s `{path}/lock`): the data
    /// only our node carries. Release then deletes the node only while it is still ours, so a
    /// holder whose node was deleted behind its back cannot delete the next holder's.
    ///
    /// [`SimpleLock`]: crate::zk::SimpleLock
    ours: Option<Vec<u8>>,
    /// Whether a write node stays on the server past its release: see [`Held::pin`].
    linger: StdMutex<Linger>,
    /// The pinned write node this read node keeps on the server until it is released.
    anchor: StdMutex<Option<Arc<Held>>>,
    /// Whether a suspension of the session counts as losing the hold.
    suspension: Suspension,
    /// The maximum hold time's end, fixed at the grant.
    max_hold_until: Option<Instant>,
    /// Whether a release records itself for waiters with lock-delay.
    recorded: bool,
}

/// The options a lock handle gives each of its holds: see the module docs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct HoldOptions {
    /// Give the lock up this long after the grant.
    pub max_hold: Option<Duration>,
    /// After a holder failed, grant nobody until this long after the failure was seen.
    pub lock_delay: Option<Duration>,
    /// A grant that waits out no failure although its releases are recorded (a read lock
    /// taken by downgrading: the write lock was ours until then).
    pub at_once: bool,
    /// What a suspended connection means to the holds.
    pub suspension: Suspension,
}

impl HoldOptions {
    /// Takes one option for the lock at `path` ([`Configure::set`](crate::options::Configure::set)'s contract): maximum hold
    /// time, lock-delay where `delay` says the lock has one, keeping through suspension.
    pub(crate) fn set(&mut self, path: &str, setting: Setting, delay: Delay) -> Result<bool> {
        match setting {
            Setting::MaxHold(max_hold) => {
                self.max_hold = Some(positive("max_hold", path, max_hold)?);
            }
            Setting::LockDelay(lock_delay) if delay == Delay::Taken => {
                self.lock_delay = Some(positive("lock_delay", path, lock_delay)?);
            }
            Setting::KeepThroughSuspension => self.suspension = Suspension::Tolerated,
            Setting::LockDelay(_) | Setting::Lease(_) | Setting::Watchdog(_) => return Ok(false),
        }
        Ok(true)
    }
}

/// [`options::positive`] for an option of the lock at `path`.
fn positive(option: &str, path: &str, duration: Duration) -> Result<Duration> {
    options::positive(option, &format!("the lock {path:?}"), duration)
}

/// What a revoker writes to a holder's node to ask it to give the lock up: Curator's
/// `LockInternals.REVOKE_MESSAGE`, so revokers and holders of either library understand each
/// other.
pub(crate) const REVOKE_MESSAGE: &[u8] = b"__REVOKE__";

/// What a suspended connection means to a hold: see the module docs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Suspension {
    /// Not trusted while suspended (the default, and Curator's standard policy).
    #[default]
    Lost,
    /// Kept through a suspension that reconnects to the same session within its deadline.
    Tolerated,
}

/// The pin of a write node under a downgraded read lock (see [`Held::pin`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Linger {
    #[default]
    No,
    /// Pinned: a release marks the node released but leaves it on the server.
    Pinned,
    /// Released while pinned: the node is still there until the pin ends.
    Deferred,
}

impl Held {
    pub(crate) fn new(node: String, token: FencingToken, generation: Arc<Generation>) -> Held {
        Held {
            node,
            token,
            generation,
            released: AtomicBool::new(false),
            watch: None,
            watch_gate: Arc::default(),
            ours: None,
            linger: StdMutex::default(),
            anchor: StdMutex::default(),
            suspension: Suspension::default(),
            max_hold_until: None,
            recorded: false,
        }
    }

    /// Applies a handle's options to this hold, granted just now.
    pub(crate) fn with_options(mut self, options: HoldOptions) -> Held {
        self.max_hold_until = options.max_hold.map(|max| Instant::now() + max);
        self.recorded = options.lock_delay.is_some();
        self.suspension = options.suspension;
        self
    }

    /// Shares this hold, granted just now, and starts what keeps it live: the watch on its node
    /// (so `is_held()` turns false at its deletion, see the module docs) and the maximum hold
    /// time's timer, if there is one. Every guard takes its hold through here.
    pub(crate) fn share(mut self) -> Arc<Held> {
        let czxid = self.token.get() as i64;
        self.watch = watch_node(&self.generation, &self.node, czxid, self.watch_gate.clone());
        let held = Arc::new(self);
        held.arm_max_hold();
        held
    }

    /// Whether the node's watch saw it deleted or replaced while it was not released.
    fn deleted(&self) -> bool {
        !self.released.load(Ordering::Acquire) && self.watch.as_ref().is_some_and(Watcher::is_set)
    }

    /// Starts the maximum hold time's timer, if there is one: at its end the node is deleted
    /// without a release record (see the module docs).
    fn arm_max_hold(self: &Arc<Self>) {
        let Some(until) = self.max_hold_until else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let hold = Arc::downgrade(self);
        runtime.spawn(async move {
            tokio::time::sleep_until(until).await;
            let Some(held) = hold.upgrade() else { return };
            match held.give_up().await {
                Ok(()) => tracing::debug!(node = held.node, "maximum hold time reached; given up"),
                Err(Error::NotHeld) => {}
                Err(err) => {
                    tracing::warn!(node = held.node, %err, "giving up at the maximum hold time failed");
                }
            }
        });
    }

    /// Makes release check that the node still carries `data` and our session before
    /// deleting it (for node names that are not unique to one acquisition).
    pub(crate) fn only_if_ours(mut self, data: Vec<u8>) -> Held {
        self.ours = Some(data);
        self
    }

    /// The full path of the lock node.
    pub(crate) fn node(&self) -> &str {
        &self.node
    }

    pub(crate) fn token(&self) -> FencingToken {
        self.token
    }

    pub(crate) fn generation(&self) -> &Arc<Generation> {
        &self.generation
    }

    pub(crate) fn is_held(&self) -> bool {
        !self.released.load(Ordering::Acquire)
            && !self.deleted()
            && self.healthy()
            && tokio::time::Instant::now() < self.generation.valid_until()
            && self
                .max_hold_until
                .is_none_or(|until| Instant::now() < until)
    }

    fn healthy(&self) -> bool {
        match (self.generation.health(), self.suspension) {
            (Health::Connected, _) => true,
            (Health::Suspended, Suspension::Tolerated) => true,
            (Health::Suspended, Suspension::Lost) | (Health::Ended, _) => false,
        }
    }

    /// Until when the hold can be trusted: its session's deadline while it is held, `None`
    /// once it is not.
    pub(crate) fn valid_until(&self) -> Option<tokio::time::Instant> {
        let until = self.generation.valid_until();
        let until = self.max_hold_until.map_or(until, |max| max.min(until));
        self.is_held().then_some(until)
    }

    /// True when this hold can never be held again (unlike a suspension, which may pass).
    pub(crate) fn is_gone(&self) -> bool {
        self.released.load(Ordering::Acquire)
            || self.deleted()
            || self.generation.health() == Health::Ended
            || self
                .max_hold_until
                .is_some_and(|until| Instant::now() >= until)
    }

    /// Resolves when the holder can no longer be sure it holds the lock: the session is
    /// suspended or ended or past its deadline, the node was deleted behind its back, or it
    /// was released, or its maximum hold time is up.
    pub(crate) async fn lost(&self) {
        if !self.is_held() {
            return;
        }
        let unhealthy = async {
            match self.suspension {
                Suspension::Lost => self.generation.unhealthy().await,
                Suspension::Tolerated => self.generation.ended().await,
            }
        };
        let max_hold = async {
            match self.max_hold_until {
                Some(until) => tokio::time::sleep_until(until).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = unhealthy => {}
            () = self.generation.untrusted() => {}
            () = self.node_deleted() => {}
            () = max_hold => {}
        }
    }

    /// Resolves once the node's watch has seen it deleted or replaced.
    async fn node_deleted(&self) {
        match &self.watch {
            Some(watch) => watch.set().await,
            None => std::future::pending().await,
        }
    }

    /// Resolves once someone has asked this hold to give the lock up, by writing
    /// [`REVOKE_MESSAGE`] to its node, including a request written before this was called
    /// (Curator's holder only hears requests made after it started watching). Stays pending
    /// if the node goes or the session ends: [`lost`](Held::lost) reports those.
    pub(crate) async fn revocation_requested(&self) {
        loop {
            let Ok(client) = self.generation.client() else {
                return std::future::pending().await;
            };
            match client.get_and_watch_data(&self.node).await {
                Ok((data, _, watcher)) => {
                    if data == REVOKE_MESSAGE {
                        return;
                    }
                    match watcher.changed().await.event_type {
                        EventType::NodeDeleted | EventType::Session => {
                            return std::future::pending().await;
                        }
                        // Changed data (or a reconnection): read it again.
                        _ => continue,
                    }
                }
                Err(err) if is_connection_loss(&err) => {
                    if self.generation.connected().await.is_err() {
                        return std::future::pending().await;
                    }
                }
                Err(_) => return std::future::pending().await,
            }
        }
    }

    /// Deletes the node. `NotHeld` if it was already released, deleted, or its session ended.
    /// A read node that keeps a pinned write node ends that pin too.
    pub(crate) async fn release(&self) -> Result<()> {
        let released = self.release_node().await;
        let anchor = lock(&self.anchor).take();
        if let Some(pinned) = anchor {
            match pinned.unpin().await {
                Ok(()) | Err(Error::NotHeld) => {}
                Err(err) => return released.and(Err(err)),
            }
        }
        released
    }

    async fn release_node(&self) -> Result<()> {
        self.end(Ending::Released).await
    }

    /// Deletes the node at the maximum hold time: like a release, but never recorded as a
    /// clean one, so lock-delay keeps the next holder out for its delay (the holder is still
    /// at work, and its writes may still be in flight). A pinned write node is released as
    /// usual: the read lock it pins is ours, so nothing of another holder can be in flight.
    async fn give_up(&self) -> Result<()> {
        let released = self.end(Ending::GivenUp).await;
        let anchor = lock(&self.anchor).take();
        if let Some(pinned) = anchor {
            match pinned.unpin().await {
                Ok(()) | Err(Error::NotHeld) => {}
                Err(err) => return released.and(Err(err)),
            }
        }
        released
    }

    async fn end(&self, ending: Ending) -> Result<()> {
        if self.deleted() || self.released.swap(true, Ordering::AcqRel) {
            return Err(Error::NotHeld);
        }
        if self.generation.health() == Health::Ended {
            return Err(Error::NotHeld);
        }
        if self.defer_delete() {
            return Ok(());
        }
        self.watch_gate.close();
        match (&self.ours, ending) {
            (Some(data), _) => delete_if_ours(&self.generation, &self.node, data).await,
            (None, Ending::Released) => self.delete().await,
            (None, Ending::GivenUp) => delete_node(&self.generation, &self.node).await,
        }
    }

    /// Deletes the node as a clean release: with its release record under lock-delay.
    async fn delete(&self) -> Result<()> {
        if self.recorded {
            delay::release_recorded(&self.generation, &self.node).await
        } else {
            delete_node(&self.generation, &self.node).await
        }
    }

    /// Releases from a destructor: best effort, in a task on the current runtime if any.
    pub(crate) fn release_in_background(self: Arc<Self>) {
        if self.released.load(Ordering::Acquire) {
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    if let Err(err) = self.release().await {
                        if !matches!(err, Error::NotHeld) {
                            tracing::warn!(node = self.node, %err, "releasing a dropped lock guard failed");
                        }
                    }
                });
            }
            // Without a runtime the node goes when the session does (ephemeral).
            Err(_) => tracing::debug!(node = self.node, "lock guard dropped outside a runtime"),
        }
    }

    /// Keeps this node on the server past its release, until [`unpin`](Held::unpin).
    ///
    /// A read lock taken by downgrading is granted at once, ahead of any writer queued behind
    /// this write node; such writers see only the nodes before theirs, so they must go on
    /// waiting for this one until that read lock is released. False if already released or
    /// gone (then there is nothing to keep).
    pub(crate) fn pin(&self) -> bool {
        let mut linger = lock(&self.linger);
        // Checked under the lock: `release` marks `released` before it looks at the pin.
        if self.is_gone() {
            return false;
        }
        *linger = Linger::Pinned;
        true
    }

    /// Ends a pin; deletes the node now if it was released meanwhile.
    pub(crate) async fn unpin(&self) -> Result<()> {
        let was = std::mem::take(&mut *lock(&self.linger));
        match was {
            Linger::Deferred => {
                self.watch_gate.close();
                self.delete().await
            }
            Linger::No | Linger::Pinned => Ok(()),
        }
    }

    /// Makes this (read) node's release, or its drop, end the pin of `pinned`.
    pub(crate) fn keep_pinned(&self, pinned: Arc<Held>) {
        *lock(&self.anchor) = Some(pinned);
    }

    /// At release: whether the pin keeps the node (the pin's end deletes it instead).
    fn defer_delete(&self) -> bool {
        let mut linger = lock(&self.linger);
        if *linger == Linger::Pinned {
            *linger = Linger::Deferred;
            return true;
        }
        false
    }
}

/// How a hold's node is deleted by its holder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ending {
    /// A release: recorded as clean under lock-delay.
    Released,
    /// The maximum hold time: never recorded as clean.
    GivenUp,
}

/// Keeps a held node's watch reads ahead of its holder's delete on the wire. The watch sends
/// each read under the gate's lock, and only while the gate is open; the holder closes it
/// before it sends the delete. A read sent after the delete would find the node missing and
/// leave on the server a watch for a creation that never comes (a sequential name is never
/// reused); one sent before it is answered first, since one session's requests are answered
/// in order, so a release returns only once every read of its watch has reached the server.
#[derive(Debug, Default)]
pub(crate) struct WatchGate(StdMutex<bool>);

impl WatchGate {
    /// `read()`, sent now, if the holder has not closed the gate.
    fn send<F>(&self, read: impl FnOnce() -> F) -> Option<F> {
        let closed = lock(&self.0);
        (!*closed).then(read)
    }

    /// No watch read is sent from now on.
    pub(crate) fn close(&self) {
        *lock(&self.0) = true;
    }
}

/// Starts the watch on a held node (see the module docs): set once the node is deleted, found
/// missing, or found to be another node of the same name. Used by every hold, and by a queue
/// item's lock node.
///
/// The watch's first read goes out when its task first runs, not before the grant returns:
/// a holder that releases at once (a tight lock loop) then costs no read at all, and one
/// that holds the lock is watched a few microseconds after the grant. `gate` keeps every read
/// ahead of the holder's delete.
pub(crate) fn watch_node(
    generation: &Arc<Generation>,
    node: &str,
    czxid: i64,
    gate: Arc<WatchGate>,
) -> Option<Watcher> {
    let (generation, node) = (generation.clone(), node.to_owned());
    Watcher::spawn(async move {
        let gone = watch_until_gone(&generation, &node, czxid, &gate).await;
        if gone {
            tracing::debug!(node, "watched node deleted");
        }
        gone
    })
}

/// Watches `node` until it is gone: `true` when it was deleted, or is found missing, or is
/// found to be another node of the same name (its czxid is not `czxid`: someone deleted ours
/// and created theirs, possibly while we were disconnected); `false` when the session ended
/// first (the session's state reports that) or the holder closed `gate` to delete the node.
async fn watch_until_gone(
    generation: &Generation,
    node: &str,
    czxid: i64,
    gate: &WatchGate,
) -> bool {
    loop {
        // The client handle is not kept across the wait: the watch must not keep a session
        // alive that its owner has let go.
        let Ok(client) = generation.client() else {
            return false;
        };
        let Some(read) = gate.send(|| client.check_and_watch_stat(node)) else {
            return false;
        };
        drop(client);
        match read.await {
            Ok((None, _)) => return true,
            Ok((Some(stat), _)) if stat.czxid != czxid => return true,
            Ok((Some(_), watcher)) => match watcher.changed().await.event_type {
                EventType::NodeDeleted => return true,
                // The only session events a one-shot watch hears are terminal ones.
                EventType::Session => return false,
                // A data change (a revocation request, a lock-delay record) or a node
                // re-created while we were away: look again.
                _ => continue,
            },
            // Watch again once the same session is back; a lost session ends the hold anyway.
            Err(err) if is_connection_loss(&err) => {
                if generation.connected().await.is_err() {
                    return false;
                }
            }
            Err(err) => {
                tracing::warn!(node, %err, "watching a held lock node failed");
                return false;
            }
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        // A read node whose hold was lost without a release: let its pinned write node go.
        let anchor = self
            .anchor
            .get_mut()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        if let (Some(pinned), Ok(runtime)) = (anchor, tokio::runtime::Handle::try_current()) {
            runtime.spawn(async move {
                if let Err(err) = pinned.unpin().await {
                    tracing::debug!(node = pinned.node, %err, "ending a write node's pin failed");
                }
            });
        }
    }
}
