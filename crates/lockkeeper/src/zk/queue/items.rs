//! The item layer under [`DistributedQueue`](super::DistributedQueue) and
//! [`PriorityQueue`](super::PriorityQueue): Curator's node layout, puts, and taking one item
//! node in either [`Delivery`] mode.
//!
//! Layout: items are persistent-sequential children `{path}/queue-{seq}` (the priority queue
//! puts its encoded priority between the prefix and the sequence), each holding an
//! [envelope](super::envelope). At-least-once consumers lock an item by creating the ephemeral
//! node `{lock path}/{item name}` (Curator's `QueueBuilder.lockPath`); children of the queue
//! path without the `queue-` prefix are not items and are ignored, as Curator ignores them.
//!
//! Invariants:
//! - A consumer never polls: when no item can be claimed it waits on child watches of the
//!   queue path and of the lock path (an item stays put when its consumer dies; only its lock
//!   node goes).
//! - At-least-once: the item is removed only by a multi that also checks and deletes this
//!   consumer's lock node, run in the session that created the lock. A consumer whose session
//!   may have expired can therefore never remove an item another consumer has since locked.
//! - At-most-once: the item is removed (read and delete pipelined) before it is handed out, and
//!   handed out only if this consumer's delete is the one that removed it. An item node whose
//!   data is not an envelope is therefore removed (and logged), as Curator's consumer does;
//!   at-least-once consumers leave it in place.

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex as StdMutex};

use lockkeeper_zk_client::{
    Client, CreateMode, CreateOptions, MultiWriteError, OneshotWatcher, Stat,
};
use rand::Rng;

use super::envelope;
use crate::deadline::Deadline;
use crate::error::{Error, Result};
use crate::sync::Watcher;
use crate::zk::hold::{WatchGate, watch_node};
use crate::zk::node::delete_if_ours;
use crate::zk::session::{Generation, Health, Session, is_connection_loss, is_terminal};

/// The prefix of every item node (Curator's `QUEUE_ITEM_NAME`).
pub(crate) const ITEM_PREFIX: &str = "queue-";

/// How items are consumed: what happens to an item whose consumer dies while handling it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Delivery {
    /// The item stays in the queue until its handler succeeded: a consumer that dies (or
    /// whose session can no longer be trusted) before its acknowledgement leaves the item to
    /// be delivered again. Nothing is lost; an item can be handled more than once, never by
    /// two consumers at once while the first one's session can still be alive.
    AtLeastOnce,
    /// The item is removed before its handler runs: a consumer that dies while handling it
    /// loses it. Nothing is handled twice.
    AtMostOnce,
}

/// The shared state of a queue handle and its clones.
pub(crate) struct Items {
    pub(crate) session: Session,
    pub(crate) path: String,
    pub(crate) lock_path: String,
    /// Item names from the last listing not tried yet, in queue order.
    cached: StdMutex<VecDeque<String>>,
    /// Items whose data is not an envelope: left in place, not tried again by this handle.
    corrupt: StdMutex<HashSet<String>>,
}

fn persistent() -> CreateOptions {
    CreateOptions::new(CreateMode::Persistent)
}

fn sequential() -> CreateOptions {
    CreateOptions::new(CreateMode::PersistentSequential)
}

fn ephemeral() -> CreateOptions {
    CreateOptions::new(CreateMode::Ephemeral)
}

fn zk_error(err: lockkeeper_zk_client::Error) -> Error {
    if is_terminal(&err) {
        Error::SessionLost
    } else {
        Error::Zk(err)
    }
}

impl Items {
    pub(crate) fn new(session: Session, path: String, lock_path: String) -> Items {
        Items {
            session,
            path,
            lock_path,
            cached: StdMutex::default(),
            corrupt: StdMutex::default(),
        }
    }

    /// Creates `nodes` (name prefix, envelope) in one multi, creating the queue path first if
    /// needed. Not retried after a lost answer: a sequential create cannot tell whether it
    /// already happened, and a retry could queue the items twice.
    pub(crate) async fn create(&self, nodes: &[(String, Vec<u8>)]) -> Result<()> {
        if nodes.is_empty() {
            return Ok(());
        }
        let generation = self.session.connected_generation().await?;
        let client = generation.client()?;
        let mut created_path = false;
        loop {
            let outcome = if let [(prefix, data)] = nodes {
                let node = format!("{}/{prefix}", self.path);
                client.create(&node, data, &sequential()).await.map(|_| ())
            } else {
                let mut multi = client.multi();
                for (prefix, data) in nodes {
                    let node = format!("{}/{prefix}", self.path);
                    multi.add_create(&node, data, &sequential())?;
                }
                multi
                    .commit()
                    .await
                    .map(|_| ())
                    .map_err(lockkeeper_zk_client::Error::from)
            };
            match outcome {
                Ok(()) => return Ok(()),
                Err(lockkeeper_zk_client::Error::NoNode) if !created_path => {
                    ensure_dir(&client, &self.path).await?;
                    created_path = true;
                }
                Err(err) => return Err(zk_error(err)),
            }
        }
    }

    /// Takes one item node, waiting (on child watches) until one can be claimed or `deadline`
    /// passes. Follows the session across generations.
    pub(crate) async fn take(
        self: &Arc<Self>,
        delivery: Delivery,
        deadline: Deadline,
    ) -> Result<Option<Taken>> {
        loop {
            let generation = match deadline {
                // A try while disconnected (suspended, or between sessions) says so at once:
                // "nothing to take" would be a claim about a queue it cannot see, and waiting
                // for the connection may take as long as the network does to heal.
                Deadline::Now => {
                    let generation = self.session.generation();
                    if generation.health() != Health::Connected {
                        return Err(Error::SessionLost);
                    }
                    generation
                }
                _ => tokio::select! {
                    generation = self.session.connected_generation() => generation?,
                    () = deadline.sleep() => return Ok(None),
                },
            };
            match self.take_in(&generation, delivery, deadline).await {
                Err(Error::SessionLost) if !matches!(deadline, Deadline::Now) => {
                    if deadline.passed() {
                        return Ok(None);
                    }
                }
                other => return other,
            }
        }
    }

    async fn take_in(
        self: &Arc<Self>,
        generation: &Arc<Generation>,
        delivery: Delivery,
        deadline: Deadline,
    ) -> Result<Option<Taken>> {
        loop {
            while let Some(name) = self.next_cached() {
                match self.claim(generation, &name, delivery).await? {
                    Claim::Taken(taken) => return Ok(Some(taken)),
                    Claim::Gone => {}
                    Claim::Contended => self.skip_ahead(),
                }
            }
            let client = generation.client()?;
            let (items, queue_watch, lock_watch) = match self.list(&client, delivery).await {
                // The connection dropped, perhaps under a claim that lost its answer: the
                // session may live on, so a waiting take lists again once it is connected (a
                // try says so at once). Paced, as the loss may not be reported as a
                // suspension yet.
                Err(err) if err.is_connection_loss() && !matches!(deadline, Deadline::Now) => {
                    let reconnected = async {
                        tokio::time::sleep(generation.retry_policy().delay(1)).await;
                        generation.connected().await
                    };
                    tokio::select! {
                        connected = reconnected => connected?,
                        () = deadline.sleep() => return Ok(None),
                    }
                    continue;
                }
                listed => listed?,
            };
            if !items.is_empty() {
                *crate::sync::lock(&self.cached) = items;
                continue;
            }
            if deadline.passed() {
                return Ok(None);
            }
            tokio::select! {
                _ = queue_watch.changed() => {}
                _ = wait_watch(lock_watch) => {}
                () = deadline.sleep() => return Ok(None),
                () = generation.ended() => return Err(Error::SessionLost),
            }
        }
    }

    fn next_cached(&self) -> Option<String> {
        crate::sync::lock(&self.cached).pop_front()
    }

    /// After losing a race for an item, jump ahead: consumers that listed the same children
    /// would otherwise trail each other down the listing, the one behind finding every item
    /// gone. A lone consumer never loses a race, so it still takes items in queue order.
    fn skip_ahead(&self) {
        let mut cached = crate::sync::lock(&self.cached);
        let window = cached.len().min(32);
        if window > 0 {
            let skip = rand::thread_rng().gen_range(0..window);
            cached.drain(..skip);
        }
    }

    /// Lists the queue (and for at-least-once the lock path) with watches, pipelined; returns
    /// the claimable item names in queue order.
    async fn list(
        &self,
        client: &Client,
        delivery: Delivery,
    ) -> Result<(VecDeque<String>, OneshotWatcher, Option<OneshotWatcher>)> {
        let (queue, locks) = match delivery {
            Delivery::AtMostOnce => (list_watched(client, &self.path).await?, None),
            Delivery::AtLeastOnce => {
                let (queue, locks) = tokio::join!(
                    list_watched(client, &self.path),
                    list_watched(client, &self.lock_path)
                );
                (queue?, Some(locks?))
            }
        };
        let (mut children, queue_watch) = queue;
        let (locked, lock_watch): (HashSet<String>, _) = match locks {
            Some((locks, watch)) => (locks.into_iter().collect(), Some(watch)),
            None => (HashSet::new(), None),
        };
        let corrupt = crate::sync::lock(&self.corrupt);
        children.retain(|name| {
            name.starts_with(ITEM_PREFIX) && !locked.contains(name) && !corrupt.contains(name)
        });
        children.sort();
        Ok((children.into(), queue_watch, lock_watch))
    }

    async fn claim(
        self: &Arc<Self>,
        generation: &Arc<Generation>,
        name: &str,
        delivery: Delivery,
    ) -> Result<Claim> {
        let claim = match delivery {
            Delivery::AtMostOnce => self.claim_removing(generation, name).await?,
            Delivery::AtLeastOnce => self.claim_locking(generation, name).await?,
        };
        if let Claim::Taken(taken) = &claim
            && let Err(why) = &taken.decoded
        {
            tracing::warn!(item = %taken.item, why, "not a queue item envelope: left in place");
            crate::sync::lock(&self.corrupt).insert(name.to_owned());
            return Ok(Claim::Gone);
        }
        Ok(claim)
    }

    /// At-most-once: read and delete pipelined; ours only if our delete removed it.
    async fn claim_removing(&self, generation: &Arc<Generation>, name: &str) -> Result<Claim> {
        let client = generation.client()?;
        let item = format!("{}/{name}", self.path);
        let sent = tokio::time::Instant::now();
        let (read, deleted) = tokio::join!(client.get_data(&item), client.delete(&item, None));
        match (read, deleted) {
            (Ok((data, _)), Ok(())) => {
                generation.heard_at(sent);
                Ok(Claim::Taken(Taken::removed(item, data)))
            }
            (
                _,
                Err(lockkeeper_zk_client::Error::NoNode | lockkeeper_zk_client::Error::BadVersion),
            ) => {
                generation.heard_at(sent);
                Ok(Claim::Contended)
            }
            // The delete's answer was lost: the item may be gone with nobody to handle it.
            // Handing it out could deliver it twice, so it is not (counted as a loss).
            (_, Err(err)) if is_connection_loss(&err) => {
                tracing::warn!(item, "delete answer lost: the item may be lost");
                Ok(Claim::Gone)
            }
            (_, Err(err)) => Err(zk_error(err)),
            (Err(err), Ok(())) => {
                tracing::warn!(item, %err, "item removed but its read failed: lost");
                Ok(Claim::Gone)
            }
        }
    }

    /// At-least-once: create the lock node and read the item, pipelined.
    async fn claim_locking(&self, generation: &Arc<Generation>, name: &str) -> Result<Claim> {
        let client = generation.client()?;
        let item = format!("{}/{name}", self.path);
        let lock = format!("{}/{name}", self.lock_path);
        // The lock's data names this claim, so that after a lost answer we delete the lock
        // only if it is ours (another consumer may have created it instead).
        let token = uuid::Uuid::new_v4().to_string();
        let mut created_dir = false;
        loop {
            let sent = tokio::time::Instant::now();
            let (created, read) = tokio::join!(
                client.create(&lock, token.as_bytes(), &ephemeral()),
                client.get_data(&item)
            );
            match created {
                Ok((stat, _)) => {
                    generation.heard_at(sent);
                    let taken = match read {
                        Ok((data, _)) => Taken::locked(item, data, lock, &stat, generation.clone()),
                        Err(err) => {
                            // Consumed between our listing and our lock (another consumer
                            // is ahead of us in the same listing), or unread: release the
                            // lock at once, retried so that it cannot linger in a live
                            // session and hold the item from everyone.
                            release_lock(generation, &lock).await;
                            if is_connection_loss(&err) {
                                return Ok(Claim::Gone);
                            }
                            return Ok(Claim::Contended);
                        }
                    };
                    return Ok(Claim::Taken(taken));
                }
                Err(lockkeeper_zk_client::Error::NodeExists) => {
                    generation.heard_at(sent);
                    return Ok(Claim::Contended);
                }
                Err(lockkeeper_zk_client::Error::NoNode) if !created_dir => {
                    ensure_dir(&client, &self.lock_path).await?;
                    created_dir = true;
                }
                // A lost answer: the lock may exist, ephemeral in this session. Release it if
                // it is ours; the item is tried again after the next listing.
                Err(err) if is_connection_loss(&err) => {
                    let _ = delete_if_ours(generation, &lock, token.as_bytes()).await;
                    return Ok(Claim::Gone);
                }
                Err(err) => return Err(zk_error(err)),
            }
        }
    }
}

enum Claim {
    Taken(Taken),
    /// Nothing to hand out (consumed meanwhile, corrupt, or an unknown outcome).
    Gone,
    /// Another consumer got there first.
    Contended,
}

/// Deletes our lock node (this claim created it) if it still exists, retrying connection
/// losses in this generation.
async fn release_lock(generation: &Generation, lock: &str) {
    let released = generation
        .retry(|client| async move {
            match client.delete(lock, None).await {
                Err(lockkeeper_zk_client::Error::NoNode) => Ok(()),
                other => other,
            }
        })
        .await;
    if let Err(err) = released {
        tracing::debug!(lock, %err, "lock not released: it goes with the session");
    }
}

async fn list_watched(client: &Client, path: &str) -> Result<(Vec<String>, OneshotWatcher)> {
    loop {
        match client.list_and_watch_children(path).await {
            Ok(found) => return Ok(found),
            Err(lockkeeper_zk_client::Error::NoNode) => ensure_dir(client, path).await?,
            Err(err) => return Err(zk_error(err)),
        }
    }
}

async fn wait_watch(watch: Option<OneshotWatcher>) {
    match watch {
        Some(watch) => {
            watch.changed().await;
        }
        None => std::future::pending().await,
    }
}

/// Creates `path` and its missing ancestors as persistent nodes (Curator's queue creates its
/// queue and lock paths with `creatingParentsIfNeeded`).
pub(crate) async fn ensure_dir(client: &Client, path: &str) -> Result<()> {
    match client.mkdir(path, &persistent()).await {
        Ok(()) | Err(lockkeeper_zk_client::Error::NodeExists) => Ok(()),
        Err(err) => Err(zk_error(err)),
    }
}

/// One taken item node: its items, and (at-least-once) the lock that keeps other consumers
/// off it until [`ack`](Taken::ack), [`requeue`](Taken::requeue) or
/// [`release`](Taken::release). Dropping it unacknowledged releases the lock, leaving the
/// item to be delivered again.
pub struct Taken {
    item: String,
    data: Vec<u8>,
    decoded: std::result::Result<Vec<Vec<u8>>, String>,
    /// At-least-once: the lock node and the version it was created with.
    lock: Option<(String, i32)>,
    /// At-least-once: the watch on the lock node, so that `is_held()` turns false when it is
    /// deleted (by an operator, or anyone but this consumer) with nobody awaiting `lost()`.
    watch: Option<Watcher>,
    /// Closed before the lock node is deleted, so that no watch read follows the delete.
    watch_gate: Arc<WatchGate>,
    generation: Option<Arc<Generation>>,
    settled: bool,
}

impl std::fmt::Debug for Taken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Taken")
            .field("item", &self.item)
            .field("lock", &self.lock)
            .finish_non_exhaustive()
    }
}

impl Taken {
    fn removed(item: String, data: Vec<u8>) -> Taken {
        Taken {
            decoded: envelope::decode(&data),
            item,
            data,
            lock: None,
            watch: None,
            watch_gate: Arc::default(),
            generation: None,
            settled: true,
        }
    }

    fn locked(
        item: String,
        data: Vec<u8>,
        lock: String,
        created: &Stat,
        generation: Arc<Generation>,
    ) -> Taken {
        let watch_gate = Arc::<WatchGate>::default();
        let watch = watch_node(&generation, &lock, created.czxid, watch_gate.clone());
        Taken {
            decoded: envelope::decode(&data),
            item,
            data,
            lock: Some((lock, created.version)),
            watch,
            watch_gate,
            generation: Some(generation),
            settled: false,
        }
    }

    /// The items of this node: one for a `put`, several for a Curator `putMulti` (or our
    /// [`put_multi`](super::DistributedQueue::put_multi)), handled and acknowledged together.
    pub fn items(&self) -> &[Vec<u8>] {
        match &self.decoded {
            Ok(items) => items,
            Err(_) => &[],
        }
    }

    /// The full path of the item node (`{path}/queue-{seq}`).
    pub fn node(&self) -> &str {
        &self.item
    }

    /// How this item was taken.
    pub fn delivery(&self) -> Delivery {
        if self.lock.is_some() {
            Delivery::AtLeastOnce
        } else {
            Delivery::AtMostOnce
        }
    }

    /// Resolves when this consumer can no longer be sure its lock exists (at-least-once): its
    /// session ended, the time the server could have expired it has come without word
    /// from the server, or the lock node was deleted by someone else. From then on another consumer may take the item, so a handler should
    /// stop; [`DistributedQueue::consume`](super::DistributedQueue::consume) drops it then.
    /// Never resolves for at-most-once items: nobody else can get them.
    pub async fn lost(&self) {
        match &self.generation {
            Some(generation) if !self.settled => tokio::select! {
                () = generation.ended() => {}
                () = generation.untrusted() => {}
                () = async {
                    match &self.watch {
                        Some(watch) => watch.set().await,
                        None => std::future::pending().await,
                    }
                } => {}
            },
            _ => std::future::pending().await,
        }
    }

    /// Whether the lock is still certainly ours (always true for at-most-once items): the
    /// session is alive and within its deadline, and the lock node was not seen deleted (it is
    /// watched from the claim on, so this is live).
    pub fn is_held(&self) -> bool {
        match &self.generation {
            Some(generation) => {
                generation.client().is_ok()
                    && tokio::time::Instant::now() < generation.valid_until()
                    && !self.watch.as_ref().is_some_and(Watcher::is_set)
            }
            None => true,
        }
    }

    /// Removes the item for good: at-least-once, one multi that checks our lock node, deletes
    /// the item and deletes the lock. [`Error::ItemLost`] if the lock is gone (the session
    /// ended): the item stays and will be delivered again. A no-op for at-most-once items.
    pub async fn ack(mut self) -> Result<()> {
        self.settle(None).await
    }

    /// Puts the item back at the end of the queue (same name prefix, so a priority item keeps
    /// its priority) and removes this one, in one multi with the lock check: the item is never
    /// both lost and duplicated. [`Error::ItemLost`] if the lock is gone (the item stays where
    /// it was). [`Error::InvalidArgument`] for at-most-once items (already removed).
    pub async fn requeue(mut self) -> Result<()> {
        if self.generation.is_none() {
            return Err(Error::InvalidArgument(format!(
                "requeue {}: an at-most-once item is removed when taken; put its data again",
                self.item
            )));
        }
        let prefix = self.requeue_prefix();
        self.settle(Some(prefix)).await
    }

    /// Gives the item back without handling it: deletes our lock node, so the item is
    /// delivered again (it keeps its place at the head). A no-op for at-most-once items.
    pub async fn release(mut self) -> Result<()> {
        self.settled = true;
        let (Some(generation), Some((lock, _))) = (&self.generation, &self.lock) else {
            return Ok(());
        };
        self.watch_gate.close();
        crate::zk::node::delete_node(generation, lock).await
    }

    /// The item node's name without its 10-digit sequence number.
    fn requeue_prefix(&self) -> String {
        let name = self.item.rsplit('/').next().unwrap_or(ITEM_PREFIX);
        let cut = name.len().saturating_sub(10);
        if name.is_char_boundary(cut) && name[..cut].starts_with(ITEM_PREFIX) {
            name[..cut].to_owned()
        } else {
            ITEM_PREFIX.to_owned()
        }
    }

    async fn settle(&mut self, requeue_as: Option<String>) -> Result<()> {
        self.settled = true;
        let (Some(generation), Some((lock, version))) = (&self.generation, &self.lock) else {
            return Ok(());
        };
        self.watch_gate.close();
        let (item, data) = (self.item.as_str(), self.data.as_slice());
        let dir = item.rsplit_once('/').map_or("", |(dir, _)| dir);
        let again = requeue_as.map(|prefix| format!("{dir}/{prefix}"));
        // Set once an attempt's answer was lost: a later NoNode on the lock check then means
        // that attempt went through (in a live session only our own multi removes our lock).
        let unanswered = std::sync::atomic::AtomicBool::new(false);
        let outcome = generation
            .retry(|client| {
                let unanswered = &unanswered;
                let again = again.as_deref();
                async move {
                    let mut multi = client.multi();
                    multi.add_check_version(lock, *version)?;
                    multi.add_delete(item, None)?;
                    if let Some(again) = again {
                        multi.add_create(again, data, &sequential())?;
                    }
                    multi.add_delete(lock, None)?;
                    match multi.commit().await {
                        Ok(_) => Ok(true),
                        Err(MultiWriteError::OperationFailed {
                            index: 0,
                            source: lockkeeper_zk_client::Error::NoNode,
                        }) => Ok(false),
                        Err(err) => {
                            let err = lockkeeper_zk_client::Error::from(err);
                            if is_connection_loss(&err) {
                                unanswered.store(true, std::sync::atomic::Ordering::Release);
                            }
                            Err(err)
                        }
                    }
                }
            })
            .await;
        match outcome {
            Ok(true) => Ok(()),
            Ok(false) if unanswered.load(std::sync::atomic::Ordering::Acquire) => Ok(()),
            Ok(false) | Err(Error::SessionLost) => Err(Error::ItemLost {
                item: self.item.clone(),
            }),
            Err(err) => Err(err),
        }
    }
}

impl Drop for Taken {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        let (Some(generation), Some((lock, _))) = (self.generation.take(), self.lock.take()) else {
            return;
        };
        // Dropped unacknowledged (a handler error, a panic, a cancelled consumer): give the
        // item back now rather than when the session ends.
        self.watch_gate.close();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = crate::zk::node::delete_node(&generation, &lock).await;
            });
        }
    }
}
