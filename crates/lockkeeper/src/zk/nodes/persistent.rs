//! The persistent node: one node that a handle keeps on the server, with its data, through
//! connection losses, session losses and deletions behind its back (Curator's
//! `PersistentNode`). Group membership and the naming helper are built on it.
//!
//! A task follows the session's generations and keeps the node there: it looks at the node
//! with a data watch, creates it (parents as containers) when it is missing, writes our data
//! when the node is ours but holds something else, and looks again whenever the watch fires,
//! the same session reconnects, or a new generation starts.
//!
//! Invariants:
//! - **We only ever write to or delete the node this handle created.** A node is ours when its
//!   czxid is the one our create returned (or, after a create whose answer was lost, when its
//!   ephemeral owner is our session). Curator instead takes over whatever it finds on
//!   NodeExists (it overwrites the data and deletes the node on close), so two members with one
//!   id, or a restarted process next to its previous session's node, silently share and then
//!   delete each other's node. Here an ephemeral node that is not ours is left alone and
//!   watched; ours is created once it is gone (a previous process's session expires within its
//!   timeout). [`is_present`](PersistentNode::is_present) says false meanwhile.
//! - **Our own ephemeral from an ended generation is replaced at once**: the client gave that
//!   session up (it outlived its deadline while suspended) but the server may not have expired
//!   it yet; we delete that node (it is ours by czxid) and create one in the live session.
//! - **A persistent node found on the path is adopted**, as Curator does: it has no owner to
//!   tell apart and outlives sessions, so a previous run of the same service left it, and the
//!   only useful reading of "keep this path with this data" is to take it over.
//! - **Stopping is clean**: [`delete`](PersistentNode::delete) stops the task between two
//!   steps (never in the middle of a create, whose node it could then not recognise) and only
//!   then deletes the node, so nothing re-creates it afterwards. Dropping the handle does the
//!   same in the background.
//! - A data change by someone else is not fought as it happens (as in Curator); our data is
//!   written back at the next look (a reconnection, a new generation, a re-create).

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use lockkeeper_zk_client::{CreateMode, CreateOptions, EventType, OneshotWatcher, Stat};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::error::{Error, Result};
use crate::sync::lock;
use crate::zk::node::{create_parents, look};
use crate::zk::session::{Generation, Health, Session, is_connection_loss};

/// How many looks one settling may take when the node keeps changing under it (created,
/// deleted, written by others) before it backs off.
const SETTLE_ATTEMPTS: u32 = 10;

/// The longest pause between two settlings that failed.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// A node kept on the server until [`delete`](PersistentNode::delete) or drop.
pub(crate) struct PersistentNode {
    shared: Arc<Shared>,
    task: Option<JoinHandle<()>>,
}

/// Shared by the handle and its task.
struct Shared {
    session: Session,
    path: String,
    ephemeral: bool,
    /// What the node holds, and what a re-create writes.
    data: StdMutex<Vec<u8>>,
    /// The czxid of the node we created (or adopted): how a node found later is known as ours.
    czxid: StdMutex<Option<i64>>,
    /// Whether our node is on the server, as far as the task knows.
    present: watch::Sender<bool>,
    /// The session that created (or found) our node when `present` was last set: an
    /// ephemeral is not present in any other, nor once that session has ended.
    present_in: AtomicI64,
    /// Set once to stop the task.
    stop: watch::Sender<bool>,
}

/// Whom a node found on the path belongs to.
enum Owner {
    /// Ours, in the live session (or, persistent, ours by adoption).
    Us,
    /// Ours, but an ephemeral of a session the client has given up.
    UsBefore,
    /// Someone else's: leave it alone.
    Other,
}

impl PersistentNode {
    /// Creates `path` with `data` (parents as containers) and keeps it there: re-created after
    /// a session loss and when deleted behind our back. Returns once the node is ours on the
    /// server, or once it is known to be someone else's ephemeral (then it is created when
    /// that one goes; see the module docs). The path must be valid (the caller checks it).
    pub(crate) async fn create(
        session: &Session,
        path: &str,
        data: Vec<u8>,
        ephemeral: bool,
    ) -> Result<PersistentNode> {
        let shared = Arc::new(Shared {
            session: session.clone(),
            path: path.to_owned(),
            ephemeral,
            data: StdMutex::new(data),
            czxid: StdMutex::new(None),
            present: watch::Sender::new(false),
            present_in: AtomicI64::new(0),
            stop: watch::Sender::new(false),
        });
        let generation = session.connected_generation().await?;
        let watcher = shared.settle(&generation).await?;
        let task = tokio::spawn(keep(Arc::clone(&shared), generation, watcher));
        Ok(PersistentNode {
            shared,
            task: Some(task),
        })
    }

    /// The node's path.
    pub(crate) fn path(&self) -> &str {
        &self.shared.path
    }

    /// The data the node holds (or will hold once it is re-created).
    pub(crate) fn data(&self) -> Vec<u8> {
        self.shared.data()
    }

    /// Whether our node is on the server, as far as we know: false while someone else's node
    /// sits on the path, and (ephemeral) from the end of its session until the node is
    /// created again in the next, without waiting for the task to notice.
    pub(crate) fn is_present(&self) -> bool {
        self.shared.is_present()
    }

    /// Resolves once [`is_present`](PersistentNode::is_present) is true.
    pub(crate) async fn wait_present(&self) {
        // Subscribed before the check: every later change wakes the loop.
        let mut presence = self.shared.present.subscribe();
        while !self.shared.is_present() {
            if presence.changed().await.is_err() {
                return std::future::pending().await;
            }
        }
    }

    /// Sets the data, on the server now if our node is there (a versioned write, so it never
    /// lands on someone else's node), and for every later re-create. `Ok` means the node holds
    /// `data` now, or will when it is next created.
    pub(crate) async fn set_data(&self, data: Vec<u8>) -> Result<()> {
        *lock(&self.shared.data) = data;
        let generation = self.shared.session.generation();
        match self.shared.write(&generation).await {
            // The generation ended: the next one's node is created with the new data.
            Err(Error::SessionLost) if self.shared.session_open() => Ok(()),
            other => other,
        }
    }

    /// Stops keeping the node and deletes it (if it is ours). Nothing re-creates it afterwards.
    pub(crate) async fn delete(mut self) -> Result<()> {
        let task = self.task.take();
        self.shared.stop.send_replace(true);
        if let Some(task) = task {
            // The task ends at its next step; a panic in it is not ours to propagate here.
            let _ = task.await;
        }
        self.shared.delete_ours().await
    }
}

impl Drop for PersistentNode {
    fn drop(&mut self) {
        let Some(task) = self.task.take() else {
            return;
        };
        self.shared.stop.send_replace(true);
        let shared = Arc::clone(&self.shared);
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    let _ = task.await;
                    if let Err(err) = shared.delete_ours().await {
                        tracing::warn!(path = shared.path, %err, "deleting a dropped persistent node failed");
                    }
                });
            }
            // No runtime to delete from: an ephemeral goes with its session.
            Err(_) => task.abort(),
        }
    }
}

impl Shared {
    fn data(&self) -> Vec<u8> {
        lock(&self.data).clone()
    }

    fn is_present(&self) -> bool {
        if !*self.present.borrow() {
            return false;
        }
        if !self.ephemeral {
            return true;
        }
        let generation = self.session.generation();
        generation.health() != Health::Ended
            && generation.session_id() == self.present_in.load(Ordering::Acquire)
    }

    /// Records that our node is on the server in `generation`'s session.
    fn mark_present(&self, generation: &Generation) {
        self.present_in
            .store(generation.session_id(), Ordering::Release);
        self.present.send_replace(true);
    }

    fn stopped(&self) -> bool {
        *self.stop.borrow()
    }

    /// Resolves once the handle asked the task to stop.
    async fn stopping(&self) {
        let mut stop = self.stop.subscribe();
        // The sender lives in `self`, which outlives this borrow.
        let _ = stop.wait_for(|stop| *stop).await;
    }

    fn session_open(&self) -> bool {
        self.session.state() != crate::zk::ConnectionState::Closed
    }

    /// Brings the server to "our node is there with our data" if it can, in `generation`.
    /// Returns the watch to wait on: on our node, or on someone else's that we wait out.
    async fn settle(&self, generation: &Generation) -> Result<OneshotWatcher> {
        // Set when our create's answer was lost: a node of our session found next is that one.
        let mut created_unanswered = false;
        for _ in 0..SETTLE_ATTEMPTS {
            let Some((data, stat, watcher)) = look(generation, &self.path, true).await? else {
                self.present.send_replace(false);
                created_unanswered = self.create(generation).await?;
                continue;
            };
            let Some(watcher) = watcher else {
                continue;
            };
            match self.owner(generation, &stat, created_unanswered) {
                Owner::Us => {
                    *lock(&self.czxid) = Some(stat.czxid);
                    if data != self.data() {
                        self.set_versioned(generation, &stat).await?;
                        continue;
                    }
                    self.mark_present(generation);
                    return Ok(watcher);
                }
                Owner::UsBefore => {
                    self.present.send_replace(false);
                    self.delete_versioned(generation, &stat).await?;
                }
                Owner::Other => {
                    self.present.send_replace(false);
                    tracing::info!(
                        path = self.path,
                        owner = format_args!("0x{:x}", stat.ephemeral_owner),
                        "someone else's node is on the path; ours is created once it is gone"
                    );
                    return Ok(watcher);
                }
            }
        }
        // The node kept changing under every look: the task tries again after a pause.
        Err(self.contended())
    }

    /// What a step reports when the node changed under every one of its attempts.
    fn contended(&self) -> Error {
        Error::Contended {
            path: self.path.clone(),
            attempts: SETTLE_ATTEMPTS,
        }
    }

    fn owner(&self, generation: &Generation, stat: &Stat, created_unanswered: bool) -> Owner {
        if !self.ephemeral {
            return Owner::Us;
        }
        let live = stat.ephemeral_owner == generation.session_id();
        let ours = *lock(&self.czxid) == Some(stat.czxid);
        match (ours, live) {
            (true, true) => Owner::Us,
            (true, false) => Owner::UsBefore,
            (false, true) if created_unanswered => Owner::Us,
            (false, _) => Owner::Other,
        }
    }

    /// Creates the node; `Ok(true)` if an attempt's answer was lost (the node found next may
    /// be the one it created). NodeExists is not an error: the next look decides.
    async fn create(&self, generation: &Generation) -> Result<bool> {
        let mode = if self.ephemeral {
            CreateMode::Ephemeral
        } else {
            CreateMode::Persistent
        };
        let options = CreateOptions::new(mode);
        let data = self.data();
        let mut unanswered = false;
        for _ in 0..2 {
            let unanswered_now = AtomicBool::new(false);
            let made = generation
                .retry(|client| {
                    let (options, data, flag) = (&options, &data, &unanswered_now);
                    async move {
                        match client.create(&self.path, data, options).await {
                            Ok((stat, _)) => Ok(Some(stat)),
                            Err(lockkeeper_zk_client::Error::NodeExists) => Ok(None),
                            Err(err) => {
                                if is_connection_loss(&err) {
                                    flag.store(true, Ordering::Relaxed);
                                }
                                Err(err)
                            }
                        }
                    }
                })
                .await;
            unanswered |= unanswered_now.into_inner();
            match made {
                Ok(Some(stat)) => {
                    *lock(&self.czxid) = Some(stat.czxid);
                    self.mark_present(generation);
                    return Ok(unanswered);
                }
                Ok(None) => return Ok(unanswered),
                Err(Error::Zk(lockkeeper_zk_client::Error::NoNode)) => {
                    create_parents(&generation.client()?, parent(&self.path)).await?;
                }
                Err(err) => return Err(err),
            }
        }
        // The parents were created but went again (containers reaped at once): look again.
        Ok(unanswered)
    }

    /// Writes our data over our node at `stat`'s version. BadVersion and NoNode are not
    /// errors: the next look decides.
    async fn set_versioned(&self, generation: &Generation, stat: &Stat) -> Result<()> {
        let data = self.data();
        let written = generation
            .retry(|client| {
                let data = &data;
                async move { client.set_data(&self.path, data, Some(stat.version)).await }
            })
            .await;
        match written {
            Ok(_) => Ok(()),
            Err(Error::Zk(
                lockkeeper_zk_client::Error::BadVersion | lockkeeper_zk_client::Error::NoNode,
            )) => Ok(()),
            Err(err) => Err(err),
        }
    }

    /// Deletes the node at `stat`'s version; gone already or changed meanwhile is not an error.
    async fn delete_versioned(&self, generation: &Generation, stat: &Stat) -> Result<()> {
        let deleted = generation
            .retry(|client| async move { client.delete(&self.path, Some(stat.version)).await })
            .await;
        match deleted {
            Ok(()) => Ok(()),
            Err(Error::Zk(
                lockkeeper_zk_client::Error::BadVersion | lockkeeper_zk_client::Error::NoNode,
            )) => Ok(()),
            Err(err) => Err(err),
        }
    }

    /// Writes our data to our node if it is there and holds something else.
    async fn write(&self, generation: &Generation) -> Result<()> {
        for _ in 0..SETTLE_ATTEMPTS {
            let Some((data, stat, _)) = look(generation, &self.path, false).await? else {
                // Gone: the task creates it with the new data.
                return Ok(());
            };
            if !matches!(self.owner(generation, &stat, false), Owner::Us)
                || *lock(&self.czxid) != Some(stat.czxid)
            {
                return Ok(());
            }
            if data == self.data() {
                return Ok(());
            }
            self.set_versioned(generation, &stat).await?;
        }
        Err(self.contended())
    }

    /// Deletes our node, wherever it was created; someone else's is left alone.
    async fn delete_ours(&self) -> Result<()> {
        self.present.send_replace(false);
        let Some(czxid) = *lock(&self.czxid) else {
            return Ok(());
        };
        let generation = self.session.generation();
        for _ in 0..SETTLE_ATTEMPTS {
            let found = match look(&generation, &self.path, false).await {
                Ok(found) => found,
                // An ephemeral went with the session; a persistent one is left for now.
                Err(Error::SessionLost) if self.ephemeral => return Ok(()),
                Err(err) => return Err(err),
            };
            let Some((_, stat, _)) = found else {
                return Ok(());
            };
            if stat.czxid != czxid {
                return Ok(());
            }
            match generation
                .retry(|client| async move { client.delete(&self.path, Some(stat.version)).await })
                .await
            {
                Ok(()) | Err(Error::Zk(lockkeeper_zk_client::Error::NoNode)) => return Ok(()),
                Err(Error::Zk(lockkeeper_zk_client::Error::BadVersion)) => continue,
                Err(Error::SessionLost) if self.ephemeral => return Ok(()),
                Err(err) => return Err(err),
            }
        }
        Err(self.contended())
    }
}

/// The keeper task: waits for a reason to look again, then settles, until stopped.
async fn keep(shared: Arc<Shared>, mut generation: Arc<Generation>, first: OneshotWatcher) {
    let mut watcher = Some(first);
    let mut failures = 0u32;
    loop {
        if let Some(current) = watcher.take() {
            tokio::select! {
                () = shared.stopping() => return,
                event = current.changed() => {
                    if event.event_type == EventType::Session {
                        // The session is over; the generation's end follows.
                        tokio::select! {
                            () = shared.stopping() => return,
                            () = generation.ended() => {}
                        }
                    }
                }
                () = generation.unhealthy() => {
                    tokio::select! {
                        () = shared.stopping() => return,
                        _ = generation.connected() => {}
                    }
                }
            }
        }
        if generation.health() == Health::Ended {
            shared.present.send_replace(false);
        }
        let next = tokio::select! {
            () = shared.stopping() => return,
            next = shared.session.connected_generation() => next,
        };
        let Ok(next) = next else {
            // The session was closed: nothing to keep.
            shared.present.send_replace(false);
            return;
        };
        generation = next;
        if shared.stopped() {
            return;
        }
        match shared.settle(&generation).await {
            Ok(next) => {
                failures = 0;
                watcher = Some(next);
            }
            Err(err) => {
                failures += 1;
                if failures == 1 || failures.is_power_of_two() {
                    tracing::warn!(path = shared.path, %err, failures, "keeping a persistent node failed; trying again");
                }
                let pause = (Duration::from_millis(100) * failures).min(MAX_BACKOFF);
                tokio::select! {
                    () = shared.stopping() => return,
                    () = tokio::time::sleep(pause) => {}
                }
            }
        }
    }
}

/// The parent of an absolute path ("/" for a node at the root).
fn parent(path: &str) -> &str {
    match path.rfind('/') {
        Some(0) | None => "/",
        Some(i) => &path[..i],
    }
}

#[cfg(test)]
mod tests;
