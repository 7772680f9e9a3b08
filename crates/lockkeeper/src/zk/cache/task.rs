//! The task that keeps a cache's view up to date: it follows the session's generations,
//! registers the watch in each connection, reads the view in full, then reads again every
//! node an event names.
//!
//! Reads go out on the one connection in order and are applied in the order sent, a batch at
//! a time: the events waiting when a batch starts are read together (pipelined), each path
//! once. The view's ordering rule does the rest (`view.rs`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use futures_util::FutureExt;
use futures_util::future::join_all;
use lockkeeper_zk_client::{AddWatchMode, Client, EventType, PersistentWatcher, SessionState};
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::view::{View, child_prefix};
use super::{CacheEvent, CachedNode, lock};
use crate::error::{Error, Result};
use crate::zk::session::{Generation, Session, is_connection_loss, is_terminal};

/// At most this many reads in flight at once, in a refresh or a batch of events.
const BATCH: usize = 512;

/// What a cache watches.
pub(super) struct Spec {
    pub root: String,
    /// A tree cache (persistent recursive watch) or a node cache (persistent watch).
    pub recursive: bool,
}

impl Spec {
    fn mode(&self) -> AddWatchMode {
        if self.recursive {
            AddWatchMode::PersistentRecursive
        } else {
            AddWatchMode::Persistent
        }
    }

    /// Whether an event's path belongs to this cache.
    fn covers(&self, path: &str) -> bool {
        path == self.root || (self.recursive && path.starts_with(&child_prefix(&self.root)))
    }

    /// The cached parent of `path`, whose children counters a creation or deletion moves.
    fn cached_parent<'p>(&self, path: &'p str) -> Option<&'p str> {
        if !self.recursive || path == self.root {
            return None;
        }
        let parent = match path.rfind('/') {
            Some(0) => "/",
            Some(i) => &path[..i],
            None => return None,
        };
        self.covers(parent).then_some(parent)
    }
}

/// Why following a connection stopped.
enum Stop {
    /// The generation ended: carry on in the next one.
    Ended,
    /// Nothing will work: the cache stops with this error.
    Fatal(Error),
}

/// Why a round of reads did not finish.
enum Interrupted {
    /// The connection dropped: the reconnection brings a full refresh.
    ConnectionLoss,
    /// The session is over.
    Ended,
}

/// Runs a cache until its session is closed or the cache is dropped (which aborts this task).
/// `ready` gets the outcome of the first full read.
pub(super) async fn run(
    session: Session,
    spec: Spec,
    view: Arc<StdMutex<View>>,
    ready: oneshot::Sender<Result<()>>,
) {
    let mut ready = Some(ready);
    loop {
        let generation = match session.connected_generation().await {
            Ok(generation) => generation,
            Err(err) => return stop(&view, &mut ready, err),
        };
        match follow(&generation, &spec, &view, &mut ready).await {
            // Wait for the session to notice, so the next generation is a new one.
            Stop::Ended => generation.ended().await,
            Stop::Fatal(err) => return stop(&view, &mut ready, err),
        }
    }
}

fn stop(view: &StdMutex<View>, ready: &mut Option<oneshot::Sender<Result<()>>>, err: Error) {
    match ready.take() {
        Some(ready) => {
            let _ = ready.send(Err(err));
        }
        // A closed session is the normal end of a cache.
        None if matches!(err, Error::SessionLost) => tracing::debug!("a ZooKeeper cache stopped"),
        None => tracing::error!(%err, "a ZooKeeper cache stopped"),
    }
    lock(view).close();
}

/// Follows one generation: per connection, registers the watch, refreshes, then applies
/// events until the connection or the generation ends.
async fn follow(
    generation: &Generation,
    spec: &Spec,
    view: &StdMutex<View>,
    ready: &mut Option<oneshot::Sender<Result<()>>>,
) -> Stop {
    let mut attempt = 1;
    // The previous connection's watcher lives until the new one is registered, so that its
    // removal cannot reach the server after the new registration.
    let mut _previous: Option<PersistentWatcher> = None;
    'connection: loop {
        let Ok(client) = generation.client() else {
            return Stop::Ended;
        };
        let mut watcher = match client.watch(&spec.root, spec.mode()).await {
            Ok(watcher) => watcher,
            Err(lockkeeper_zk_client::Error::Unimplemented) => {
                tracing::error!(
                    path = spec.root,
                    "the server does not implement AddWatch (opcode 106): a cache needs \
                     persistent watches, Apache ZooKeeper 3.6 or later (or Keeper)"
                );
                return Stop::Fatal(Error::Zk(lockkeeper_zk_client::Error::Unimplemented));
            }
            Err(err) if is_terminal(&err) => return Stop::Ended,
            Err(err) if is_connection_loss(&err) => {
                let pause = pause(generation, attempt);
                attempt = attempt.saturating_add(1);
                tokio::select! {
                    () = tokio::time::sleep(pause) => continue 'connection,
                    () = generation.ended() => return Stop::Ended,
                }
            }
            Err(err) => return Stop::Fatal(Error::Zk(err)),
        };
        _previous = None;
        // After a read failed, the view waits for the reconnection's refresh, or starts over
        // at this time if no reconnection is reported (a request that timed out alone).
        let mut start_over = match refresh(&client, spec, view, ready.is_none()).await {
            Ok(()) => {
                if let Some(ready) = ready.take() {
                    let _ = ready.send(Ok(()));
                }
                attempt = 1;
                None
            }
            Err(Interrupted::Ended) => return Stop::Ended,
            Err(Interrupted::ConnectionLoss) => Some(Instant::now() + pause(generation, attempt)),
        };
        drop(client);
        let mut lookahead = None;
        loop {
            let event = match lookahead.take() {
                Some(event) => event,
                None => tokio::select! {
                    event = watcher.changed() => event,
                    () = generation.ended() => return Stop::Ended,
                    () = sleep_until(start_over), if start_over.is_some() => {
                        attempt = attempt.saturating_add(1);
                        _previous = Some(watcher);
                        continue 'connection;
                    }
                },
            };
            if event.event_type == EventType::Session {
                match event.session_state {
                    // The watcher must not be polled after a terminal state.
                    state if state.is_terminated() => return Stop::Ended,
                    SessionState::SyncConnected => {
                        _previous = Some(watcher);
                        continue 'connection;
                    }
                    _ => continue,
                }
            }
            if start_over.is_some() {
                continue;
            }
            // Everything already waiting is read in the same batch.
            let mut batch = Vec::new();
            add_paths(spec, &event.path, event.event_type, &mut batch);
            while batch.len() < BATCH {
                let Some(next) = watcher.changed().now_or_never() else {
                    break;
                };
                if next.event_type == EventType::Session {
                    lookahead = Some(next);
                    break;
                }
                add_paths(spec, &next.path, next.event_type, &mut batch);
            }
            let Ok(client) = generation.client() else {
                return Stop::Ended;
            };
            match read_nodes(&client, &batch, view).await {
                Ok(()) => {}
                Err(Interrupted::Ended) => return Stop::Ended,
                Err(Interrupted::ConnectionLoss) => {
                    start_over = Some(Instant::now() + pause(generation, attempt));
                }
            }
        }
    }
}

/// The pause before registering the watch again after a connection loss: the retry policy's,
/// but never so short that a policy without delays spins.
fn pause(generation: &Generation, attempt: u32) -> Duration {
    generation
        .retry_policy()
        .delay(attempt)
        .max(Duration::from_millis(20))
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The paths an event asks to read again: its node, and for a creation or deletion in a tree
/// cache the parent, whose children counters moved.
fn add_paths(spec: &Spec, path: &str, kind: EventType, batch: &mut Vec<String>) {
    if !spec.covers(path) {
        return;
    }
    let mut push = |p: &str| {
        if !batch.iter().any(|queued| queued == p) {
            batch.push(p.to_owned());
        }
    };
    push(path);
    if matches!(kind, EventType::NodeCreated | EventType::NodeDeleted) {
        if let Some(parent) = spec.cached_parent(path) {
            push(parent);
        }
    }
}

/// Reads every path of `batch` (pipelined) and applies the answers in order.
async fn read_nodes(
    client: &Client,
    batch: &[String],
    view: &StdMutex<View>,
) -> Result<(), Interrupted> {
    for chunk in batch.chunks(BATCH) {
        let answers = join_all(chunk.iter().map(|path| client.get_data(path))).await;
        let mut view = lock(view);
        for (path, answer) in chunk.iter().zip(answers) {
            if let Some(found) = classify(answer)? {
                view.apply(path, found);
            }
        }
    }
    Ok(())
}

/// Maps a read's answer: `Some(Some(node))`, `Some(None)` for no node, `None` for an answer
/// the cache cannot use (no permission: the node is left as it was, with a warning).
#[allow(clippy::type_complexity)]
fn classify(
    answer: std::result::Result<(Vec<u8>, lockkeeper_zk_client::Stat), lockkeeper_zk_client::Error>,
) -> Result<Option<Option<CachedNode>>, Interrupted> {
    match answer {
        Ok((data, stat)) => Ok(Some(Some(CachedNode { data, stat }))),
        Err(lockkeeper_zk_client::Error::NoNode) => Ok(Some(None)),
        Err(err) if is_terminal(&err) => Err(Interrupted::Ended),
        Err(err) if is_connection_loss(&err) => Err(Interrupted::ConnectionLoss),
        Err(err) => {
            tracing::warn!(%err, "a ZooKeeper cache cannot read a node; keeping what it had");
            Ok(None)
        }
    }
}

/// Reads the whole view afresh and replaces the cached one with it, emitting the difference,
/// then `Rebuilt` (not for the first read, which only completes initialization).
async fn refresh(
    client: &Client,
    spec: &Spec,
    view: &StdMutex<View>,
    rebuilt: bool,
) -> Result<(), Interrupted> {
    // A new session may be served by a server behind the one the last session used: sync
    // first, so that no read below is older than what the view holds.
    match client.sync(&spec.root).await {
        Ok(()) | Err(lockkeeper_zk_client::Error::NoNode) => {}
        Err(err) if is_terminal(&err) => return Err(Interrupted::Ended),
        Err(err) if is_connection_loss(&err) => return Err(Interrupted::ConnectionLoss),
        Err(err) => tracing::debug!(%err, "sync before a cache refresh failed"),
    }
    let fresh = read_tree(client, spec).await?;
    let mut view = lock(view);
    view.replace_all(fresh);
    if rebuilt {
        view.emit(CacheEvent::Rebuilt);
    }
    Ok(())
}

/// Reads the cache's root and, for a tree cache, everything below it, level by level. Not an
/// atomic snapshot: what changes during the read has events queued behind it.
async fn read_tree(
    client: &Client,
    spec: &Spec,
) -> Result<BTreeMap<String, CachedNode>, Interrupted> {
    let mut fresh = BTreeMap::new();
    let mut level = vec![spec.root.clone()];
    while !level.is_empty() {
        let mut parents = Vec::new();
        for chunk in level.chunks(BATCH) {
            let answers = join_all(chunk.iter().map(|path| client.get_data(path))).await;
            for (path, answer) in chunk.iter().zip(answers) {
                if let Some(Some(node)) = classify(answer)? {
                    if spec.recursive && node.stat.num_children > 0 {
                        parents.push(path.clone());
                    }
                    fresh.insert(path.clone(), node);
                }
            }
        }
        let mut next = Vec::new();
        for chunk in parents.chunks(BATCH) {
            let answers = join_all(chunk.iter().map(|path| client.list_children(path))).await;
            for (parent, answer) in chunk.iter().zip(answers) {
                match answer {
                    Ok(children) => {
                        let prefix = child_prefix(parent);
                        next.extend(children.into_iter().map(|child| format!("{prefix}{child}")));
                    }
                    Err(lockkeeper_zk_client::Error::NoNode) => {}
                    Err(err) if is_terminal(&err) => return Err(Interrupted::Ended),
                    Err(err) if is_connection_loss(&err) => {
                        return Err(Interrupted::ConnectionLoss);
                    }
                    Err(err) => {
                        tracing::warn!(%err, parent, "a ZooKeeper cache cannot list children");
                    }
                }
            }
        }
        level = next;
    }
    Ok(fresh)
}
