//! Barriers: Curator's `DistributedBarrier` (processes wait while one node exists) and
//! `DistributedDoubleBarrier` (a group enters together once N members are in, and leaves
//! together once every member has left), in Curator's node layouts.
//!
//! Layouts, as Curator's sources have them:
//! - barrier: the persistent node `PATH` itself (parents created as containers). Set means it
//!   exists; waiters return once it is gone.
//! - double barrier: one ephemeral node `PATH/{uuid}` per member (`PATH` created as a
//!   container; no data here, Curator writes its client's default data, which nobody reads) and
//!   the persistent node `PATH/ready`, created by the member that counts N members in. Every
//!   member that sees the barrier empty at the end of its leave deletes `ready` (NoNode
//!   ignored), as Curator's members do; the last one out deletes its own node first.
//!
//! Invariants:
//! - **A round ends with its `ready`.** `ready` lets in whoever finds it, so one that outlives
//!   its group would let the next group's first member in alone. Two rules keep the next round
//!   honest, whichever member dies (its session ends) at whatever point of enter or leave:
//!   - a `leave` that returns `Ok` has deleted `ready` after seeing no member node left. The
//!     last member out is not the only one to do it, because it may die instead of leaving
//!     (the lowest member, which the others wait for): then the survivors, woken by its node's
//!     deletion, delete `ready` themselves. This is what keeps Curator's members of the next
//!     round honest, since they trust any `ready` they find.
//!   - an `enter` that finds `ready` (rather than seeing it created while it waits) trusts it
//!     only while a member node created before it (by czxid) still exists, that is while the
//!     group it let in has a member inside. Otherwise no leave is left to delete it (every
//!     member died, or the last one died between deleting its node and `ready`), so the
//!     newcomer deletes it and counts like everyone else. The lone newcomer waits, and so do
//!     two newcomers of a barrier of three: a count of nodes newer than `ready` could not tell
//!     a new group from the remains of an old one.
//!
//!   A member that dies while entering is not counted once its node is gone, and one that dies
//!   in leave counts as left; neither lets a later round enter or leave early. What the server
//!   cannot tell us is not covered: a member whose session ended but has not yet expired still
//!   counts, as its node is still there.
//! - **Herd-free.** A barrier waiter holds one exists watch. Entering, a member watches only
//!   `ready` and is woken once, when it is created. Leaving follows the recipes document: the
//!   lowest member watches the highest, every other member deletes its node and watches the
//!   lowest, so a leave wakes at most one process (the lowest, when the highest goes) until the
//!   lowest itself leaves last and releases the rest. Every wake-up is counted in
//!   [`Session::notifications`] so tests can hold this.
//! - **A member whose session dies counts as left**: its ephemeral node goes with the session,
//!   which is exactly what a leave does.
//! - **Cancel-safe.** A dropped `enter` future and a dropped [`Entered`] delete the member node
//!   in the background, and an enter or leave that times out deletes it before returning, so
//!   the others do not wait for a member that gave up. A dropped `leave` future leaves the node
//!   to its `Entered`, whose next `leave` carries on.
//!
//! Where Curator differs (read from its 5.4 sources): its `leave` returns for a non-lowest
//! member as soon as only one member node remains, before the lowest has left; here `leave`
//! returns once no member node remains. Its `enter` counts once, then takes any wake-up of its
//! one watcher (shared with `leave`) as "ready", counts `ready` among the members, and trusts
//! any `ready` it finds; here a member enters only on `ready`'s creation event or on finding a
//! `ready` whose group is still in, only member nodes count, and each watch belongs to the wait
//! that set it. A Curator `leave` that times out deletes `ready` too; here one that times out
//! leaves it to the members still in. None of this changes the nodes the other side sees, so
//! both can share a barrier. A Curator member still enters at once on the `ready` of a round
//! whose members all died; lockkeeper's members do not, and delete it.

use std::sync::Arc;
use std::time::Duration;

use lockkeeper_zk_client::{CreateMode, CreateOptions, EventType, OneshotWatcher, Stat};

use crate::deadline::Deadline;
use crate::error::{Error, Result};
use crate::zk::node::{create_parents, delete_node};
use crate::zk::path::validate_node_path;
use crate::zk::session::{Generation, Session};

/// The name of the double barrier's "everyone is in" node (Curator's `READY_NODE`).
const READY: &str = "ready";

/// How often a create that finds its parent missing creates the parents and tries again (a
/// container parent can be reaped between the two).
const MAX_PARENT_ATTEMPTS: u32 = 3;

impl Session {
    /// A [`Barrier`] at `path` (Curator's `DistributedBarrier` layout: the node `path` is the
    /// barrier). [`Error::InvalidArgument`] for a malformed path.
    pub fn barrier(&self, path: &str) -> Result<Barrier> {
        validate_node_path("barrier path", path)?;
        Ok(Barrier {
            session: self.clone(),
            path: path.to_owned(),
        })
    }

    /// A [`DoubleBarrier`] at `path` for groups of `members` (Curator's
    /// `DistributedDoubleBarrier` layout). Every member must pass the same count.
    /// [`Error::InvalidArgument`] for a malformed path or a `members` of 0.
    pub fn double_barrier(&self, path: &str, members: u32) -> Result<DoubleBarrier> {
        validate_node_path("barrier path", path)?;
        if members == 0 {
            return Err(Error::InvalidArgument(format!(
                "members for the double barrier {path:?}: must be at least 1"
            )));
        }
        Ok(DoubleBarrier {
            session: self.clone(),
            path: path.to_owned(),
            ready: format!("{path}/{READY}"),
            members,
        })
    }
}

/// A barrier: while its node exists, [`wait`](Barrier::wait) blocks; [`remove`](Barrier::remove)
/// lets every waiter through.
///
/// The node is persistent, so a barrier outlives the session that set it, and waiting carries
/// on across session expiry (the next session sets a new watch).
#[derive(Clone, Debug)]
pub struct Barrier {
    session: Session,
    path: String,
}

impl Barrier {
    /// The barrier's node.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Sets the barrier (creates its node); setting a barrier already set is not an error.
    pub async fn set(&self) -> Result<()> {
        let generation = self.session.connected_generation().await?;
        create_persistent(&generation, &self.path).await
    }

    /// Removes the barrier (deletes its node), releasing every waiter; removing a barrier that
    /// is not set is not an error.
    pub async fn remove(&self) -> Result<()> {
        let generation = self.session.connected_generation().await?;
        match delete_node(&generation, &self.path).await {
            Ok(()) | Err(Error::NotHeld) => Ok(()),
            Err(err) => Err(err),
        }
    }

    /// Whether the barrier is set now, without waiting.
    pub async fn is_set(&self) -> Result<bool> {
        let generation = self.session.connected_generation().await?;
        let path = self.path.as_str();
        let stat = generation
            .retry(|client| async move { client.check_stat(path).await })
            .await?;
        Ok(stat.is_some())
    }

    /// Waits until the barrier is not set.
    pub async fn wait(&self) -> Result<()> {
        self.wait_until(Deadline::Never).await.map(|_| ())
    }

    /// Waits at most `timeout` for the barrier to be removed: `true` if it was (or was not
    /// set), `false` if the time ran out. A zero timeout is refused (use
    /// [`is_set`](Barrier::is_set)).
    pub async fn wait_timeout(&self, timeout: Duration) -> Result<bool> {
        self.wait_until(Deadline::after(timeout)?).await
    }

    async fn wait_until(&self, deadline: Deadline) -> Result<bool> {
        let path = self.path.as_str();
        loop {
            let generation = tokio::select! {
                generation = self.session.connected_generation() => generation?,
                () = deadline.sleep() => return Ok(false),
            };
            let (stat, watcher) = match generation
                .retry(|client| async move { client.check_and_watch_stat(path).await })
                .await
            {
                Ok(found) => found,
                // That session ended: watch again from the next one.
                Err(Error::SessionLost) => continue,
                Err(err) => return Err(err),
            };
            if stat.is_none() {
                return Ok(true);
            }
            tokio::select! {
                event = watcher.changed() => {
                    if event.event_type != EventType::Session {
                        generation.count_notification();
                    }
                }
                () = deadline.sleep() => return Ok(false),
                () = generation.ended() => {}
            }
        }
    }
}

/// A double barrier: [`enter`](DoubleBarrier::enter) returns once `members` processes have
/// entered, and [`Entered::leave`] once every one of them has left.
///
/// Each `enter` makes a new member (its own node), so one handle can enter again after leaving.
///
/// Members that die: a member whose session ends, at any point of `enter` or `leave`, counts as
/// gone once the server has deleted its node (at once on a close, a session timeout later on a
/// crash). While entering it is no longer counted; once in, it counts as left, so the others'
/// `leave` returns without it. Either way the next round is not let in early: a `leave` that
/// returns has taken the group's `ready` away with it, even when the member that should have
/// left last died instead, and an `enter` does not trust a `ready` whose group has no member
/// left (every one of them died), so a lone member of the next round waits for a full group.
#[derive(Clone, Debug)]
pub struct DoubleBarrier {
    session: Session,
    path: String,
    ready: String,
    members: u32,
}

impl DoubleBarrier {
    /// The barrier's node (the parent of the member nodes).
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The number of members that must enter before any of them proceeds.
    pub fn members(&self) -> u32 {
        self.members
    }

    /// Enters and waits until `members` members are in.
    ///
    /// If `ready` already exists and a member of the group it let in is still in the barrier
    /// (the group is in, or has not finished leaving) this member is in at once, as with
    /// Curator. A `ready` whose group has gone (its members died before any of them could
    /// delete it) is deleted instead, and this member waits for a full group.
    pub async fn enter(&self) -> Result<Entered> {
        let entered = self.enter_until(Deadline::Never).await?;
        entered.ok_or(Error::SessionLost)
    }

    /// Enters and waits at most `timeout` for `members` members to be in; `None` if the time
    /// ran out, in which case this member's node is deleted again before returning.
    pub async fn enter_timeout(&self, timeout: Duration) -> Result<Option<Entered>> {
        self.enter_until(Deadline::after(timeout)?).await
    }

    /// The document's enter: watch `ready`, create our node, count; whoever counts N creates
    /// `ready`, the others sleep on their one watch until it appears. A `ready` found rather
    /// than seen created is trusted only while its group is still in (see
    /// [`group_still_in`](DoubleBarrier::group_still_in)); one whose group has gone is deleted
    /// and this member counts like the others.
    async fn enter_until(&self, deadline: Deadline) -> Result<Option<Entered>> {
        let generation = tokio::select! {
            generation = self.session.connected_generation() => generation?,
            () = deadline.sleep() => return Ok(None),
        };
        let name = uuid::Uuid::new_v4().to_string();
        let mut member = Entered {
            generation: generation.clone(),
            path: self.path.clone(),
            ready: self.ready.clone(),
            node: format!("{}/{name}", self.path),
            name,
            armed: true,
            finished: false,
        };
        let (mut ready, mut watcher) = self.watch_ready(&generation).await?;
        create_member(&generation, &self.path, &member.node).await?;
        loop {
            if let Some(found) = ready {
                if self.group_still_in(&generation, &found).await? {
                    return Ok(Some(member));
                }
                // Left by a group whose members all died (or whose last one died between
                // deleting its node and `ready`): nobody else will delete it, and trusting it
                // would let this member in alone. Our watch fires on this delete; a fresh one
                // replaces it.
                delete_ignoring_missing(&generation, &self.ready).await?;
                (ready, watcher) = self.watch_ready(&generation).await?;
                continue;
            }
            if self.count_members(&generation).await? >= self.members as usize {
                // Someone may have created it meanwhile: NodeExists is fine.
                create_persistent(&generation, &self.ready).await?;
                return Ok(Some(member));
            }
            tokio::select! {
                event = watcher.changed() => {
                    if event.event_type == EventType::Session {
                        member.armed = false;
                        return Err(Error::SessionLost);
                    }
                    generation.count_notification();
                    if event.event_type == EventType::NodeCreated {
                        // Created after our watch was set, by a member that had just counted
                        // N members in: a group that is in now, which we join.
                        return Ok(Some(member));
                    }
                    // No other event is expected on a node that did not exist; should one
                    // come, look again rather than guess.
                    (ready, watcher) = self.watch_ready(&generation).await?;
                }
                () = deadline.sleep() => {
                    member.abandon().await;
                    return Ok(None);
                }
                () = generation.ended() => {
                    member.armed = false;
                    return Err(Error::SessionLost);
                }
            }
        }
    }

    /// Whether the group that `ready` (whose stat is `ready`) let in is still in the barrier:
    /// some member node was created before `ready` and still exists. Whoever creates `ready`
    /// counted N member nodes first, so while one of them is there, the group is in (or
    /// leaving: it waits for us either way), and joining it is Curator's "N is a threshold".
    /// Once they are all gone, `ready` is the remains of a finished group; members that came
    /// after it (created later) are newcomers like us, however many.
    async fn group_still_in(&self, generation: &Generation, ready: &Stat) -> Result<bool> {
        for name in list_members(generation, &self.path).await? {
            let node = format!("{}/{name}", self.path);
            let node = node.as_str();
            let stat = generation
                .retry(|client| async move { client.check_stat(node).await })
                .await?;
            if stat.is_some_and(|stat| stat.czxid < ready.czxid) {
                return Ok(true);
            }
        }
        Ok(false)
    }

    async fn watch_ready(&self, generation: &Generation) -> Result<(Option<Stat>, OneshotWatcher)> {
        let ready = self.ready.as_str();
        generation
            .retry(|client| async move { client.check_and_watch_stat(ready).await })
            .await
    }

    async fn count_members(&self, generation: &Generation) -> Result<usize> {
        Ok(list_members(generation, &self.path).await?.len())
    }
}

/// A member inside a double barrier. Leave with [`leave`](Entered::leave); dropping it leaves
/// without waiting for the others (its node is deleted in the background).
pub struct Entered {
    generation: Arc<Generation>,
    path: String,
    ready: String,
    /// Our node's full path and its name (a uuid).
    node: String,
    name: String,
    /// Whether our node may still exist, so `Drop` must delete it.
    armed: bool,
    /// Set once a leave saw every member gone: later calls return at once.
    finished: bool,
}

impl Entered {
    /// This member's node.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// Leaves and waits until every member has left (a member whose session ended counts as
    /// left), then deletes the group's `ready`, so the next group starts from an empty barrier
    /// even if the member that should have left last died instead. [`Error::SessionLost`] if
    /// this member's own session ended first: its node went with it, so the others were not
    /// held up, but it cannot tell when they were done.
    ///
    /// Cancel-safe: if the future is dropped, this member's node is gone or goes when the
    /// `Entered` is dropped; calling `leave` again carries on waiting for the others.
    pub async fn leave(&mut self) -> Result<()> {
        self.leave_until(Deadline::Never).await.map(|_| ())
    }

    /// Leaves and waits at most `timeout` for every member to leave: `true` if they did,
    /// `false` if the time ran out. Either way this member's node is gone when it returns, so
    /// nobody waits for it; calling again waits for the others again. A zero timeout is
    /// refused, and then nothing is done.
    pub async fn leave_timeout(&mut self, timeout: Duration) -> Result<bool> {
        self.leave_until(Deadline::after(timeout)?).await
    }

    /// The document's leave, repeated until no member node is left: alone, delete ours and
    /// finish; lowest, wait for the highest to go; otherwise delete ours and wait for the
    /// lowest to go. The lowest leaves last, so it is the one that releases everyone; whoever
    /// finishes deletes `ready`.
    async fn leave_until(&mut self, deadline: Deadline) -> Result<bool> {
        if self.finished {
            return Ok(true);
        }
        let generation = self.generation.clone();
        loop {
            let members = match list_members(&generation, &self.path).await {
                Ok(members) => members,
                Err(Error::SessionLost) => {
                    self.armed = false;
                    return Err(Error::SessionLost);
                }
                Err(err) => return Err(err),
            };
            let index = members.iter().position(|m| *m == self.name);
            if index.is_none() {
                // Deleted by us, or by someone else: either way we are out.
                self.armed = false;
            }
            let Some(lowest) = members.first() else {
                break;
            };
            if self.armed && members.len() == 1 {
                // The last one out. Our node goes before `ready` (below, as every member does):
                // a newcomer in between finds a `ready` with no member older than it and does
                // not trust it, where the other order would let it count us.
                self.delete_ours().await?;
                break;
            }
            let watched = if index == Some(0) {
                format!("{}/{}", self.path, members[members.len() - 1])
            } else {
                format!("{}/{lowest}", self.path)
            };
            let watched = watched.as_str();
            let (stat, watcher) = generation
                .retry(|client| async move { client.check_and_watch_stat(watched).await })
                .await?;
            if self.armed && index != Some(0) {
                self.delete_ours().await?;
            }
            if stat.is_none() {
                continue;
            }
            tokio::select! {
                event = watcher.changed() => {
                    if event.event_type == EventType::Session {
                        self.armed = false;
                        return Err(Error::SessionLost);
                    }
                    generation.count_notification();
                }
                () = deadline.sleep() => {
                    if self.armed {
                        self.abandon().await;
                    }
                    return Ok(false);
                }
                () = generation.ended() => {
                    self.armed = false;
                    return Err(Error::SessionLost);
                }
            }
        }
        // Every member that sees the barrier empty deletes `ready`, not only the last one out:
        // the last one may have died instead of leaving, and a `ready` that outlives its group
        // lets the next group's first member in alone (Curator's members trust any `ready`
        // they find). If it fails, `finished` stays unset and the caller learns why.
        delete_ignoring_missing(&generation, &self.ready).await?;
        self.finished = true;
        Ok(true)
    }

    /// Deletes our node; on an error `Drop` still tries again in the background.
    async fn delete_ours(&mut self) -> Result<()> {
        match delete_node(&self.generation, &self.node).await {
            Ok(()) | Err(Error::NotHeld | Error::SessionLost) => {
                self.armed = false;
                Ok(())
            }
            Err(err) => Err(err),
        }
    }

    /// Deletes our node in a task of its own, so the delete finishes even if the caller stops
    /// waiting for this future.
    async fn abandon(&mut self) {
        self.armed = false;
        let cleanup = tokio::spawn(delete_member(self.generation.clone(), self.node.clone()));
        // An Err is a panic in the task (resumed here) or a runtime shutting down.
        if let Err(err) = cleanup.await
            && err.is_panic()
        {
            std::panic::resume_unwind(err.into_panic());
        }
    }
}

impl std::fmt::Debug for Entered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Entered").field("node", &self.node).finish()
    }
}

impl Drop for Entered {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        // Without a runtime the node goes when the session does.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(delete_member(self.generation.clone(), self.node.clone()));
        }
    }
}

/// Deletes a member node that is being given up; the outcome only matters to the log.
async fn delete_member(generation: Arc<Generation>, node: String) {
    match delete_node(&generation, &node).await {
        Ok(()) | Err(Error::NotHeld | Error::SessionLost) => {}
        Err(err) => tracing::warn!(node, %err, "could not delete a double barrier member"),
    }
}

/// The member nodes under `path` (everything but `ready`), sorted by name as Curator sorts
/// them; none if the barrier node does not exist.
async fn list_members(generation: &Generation, path: &str) -> Result<Vec<String>> {
    let mut members = generation
        .retry(|client| async move {
            match client.list_children(path).await {
                Err(lockkeeper_zk_client::Error::NoNode) => Ok(Vec::new()),
                other => other,
            }
        })
        .await?;
    members.retain(|name| name != READY);
    members.sort();
    Ok(members)
}

/// Creates our ephemeral member node; a retried create that finds the node made it (the name
/// is a fresh uuid, nobody else creates it).
async fn create_member(generation: &Generation, path: &str, node: &str) -> Result<()> {
    create(generation, path, node, CreateMode::Ephemeral).await
}

/// Creates the persistent node `node`; already existing is fine.
async fn create_persistent(generation: &Generation, node: &str) -> Result<()> {
    let parent = match node.rfind('/') {
        Some(0) | None => "/",
        Some(at) => &node[..at],
    };
    create(generation, parent, node, CreateMode::Persistent).await
}

/// Creates `node` under `parent` (creating missing parents as containers); NodeExists is
/// success.
async fn create(generation: &Generation, parent: &str, node: &str, mode: CreateMode) -> Result<()> {
    let options = CreateOptions::new(mode);
    let options = &options;
    let mut parent_attempts = 0;
    loop {
        let created = generation
            .retry(|client| async move {
                match client.create(node, b"", options).await {
                    Ok(_) | Err(lockkeeper_zk_client::Error::NodeExists) => Ok(true),
                    Err(lockkeeper_zk_client::Error::NoNode) => Ok(false),
                    Err(err) => Err(err),
                }
            })
            .await?;
        if created {
            return Ok(());
        }
        parent_attempts += 1;
        if parent_attempts > MAX_PARENT_ATTEMPTS {
            return Err(Error::Zk(lockkeeper_zk_client::Error::NoNode));
        }
        create_parents(&generation.client()?, parent).await?;
    }
}

/// Deletes `node`, a node that may be gone already.
async fn delete_ignoring_missing(generation: &Generation, node: &str) -> Result<()> {
    match delete_node(generation, node).await {
        Ok(()) | Err(Error::NotHeld) => Ok(()),
        Err(err) => Err(err),
    }
}
