//! Watches: the table of who waits for what, and what a notification wakes.
//!
//! A one-shot watch is left by a read (`get_and_watch_data`, `check_and_watch_stat`,
//! `list_and_watch_children`) and fires once; a persistent one is left by
//! [`Client::watch`](crate::Client::watch) and fires until it is dropped. The table is
//! ZooKeeper's client-side mirror of the server's: a registration is added by the session task
//! when the read's *reply* is read, before any later frame, so no notification the server sends
//! after the reply can be missed. After a reconnection the whole table is sent to the new
//! server (`setWatches2`), which fires at once whatever changed since the last zxid seen.
//!
//! Removing a dropped persistent watcher's watch from the server removes every watch of the
//! session on that path (the only removal ZooKeeper 3.8 takes), so it is sent only when nothing
//! else wants one there: no live watcher in the table and no watching request in flight. Until
//! then the path is noted (`removal_wanted`), and every later reply carrying a watch or
//! notification decides again (`Shared::remove_all_unwanted`).
//!
//! Which watches a notification wakes, as ZooKeeper's `ZKWatchManager` decides:
//!
//! | event | data | exist | child | persistent (path) | recursive (path and ancestors) |
//! |---|---|---|---|---|---|
//! | created, data changed | yes | yes | | yes | yes |
//! | deleted | yes | yes | yes | yes | yes |
//! | children changed | | | yes | yes | |
//!
//! Session events: persistent watchers hear every change of connection (so a cache knows to
//! read again after a reconnection); one-shot watchers hear only the end of the session.

use std::collections::{HashMap, HashSet};

use tokio::sync::{mpsc, oneshot};

/// What a watch reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventType {
    /// The connection changed; see [`WatchedEvent::session_state`].
    Session,
    /// The watched node was created.
    NodeCreated,
    /// The watched node was deleted.
    NodeDeleted,
    /// The watched node's data changed.
    NodeDataChanged,
    /// A child of the watched node was created or deleted.
    NodeChildrenChanged,
}

/// The state of a client's session.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SessionState {
    /// The connection is gone; the session may live on, and the client is reconnecting.
    Disconnected,
    /// Connected, the session alive.
    SyncConnected,
    /// The server ended the session.
    Expired,
    /// The server refused the client's credentials.
    AuthFailed,
    /// The client was closed.
    Closed,
}

impl SessionState {
    /// Whether the session is over for good.
    pub fn is_terminated(self) -> bool {
        matches!(
            self,
            SessionState::Expired | SessionState::AuthFailed | SessionState::Closed
        )
    }
}

/// One notification.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchedEvent {
    /// What happened.
    pub event_type: EventType,
    /// The session's state when the event was sent.
    pub session_state: SessionState,
    /// The node (without the chroot); empty for session events.
    pub path: String,
}

impl WatchedEvent {
    pub(crate) fn session(state: SessionState) -> WatchedEvent {
        WatchedEvent {
            event_type: EventType::Session,
            session_state: state,
            path: String::new(),
        }
    }
}

/// A one-shot watch: resolves once, on the first change or at the end of the session.
#[derive(Debug)]
pub struct OneshotWatcher {
    rx: oneshot::Receiver<WatchedEvent>,
}

impl OneshotWatcher {
    pub(crate) fn new(rx: oneshot::Receiver<WatchedEvent>) -> OneshotWatcher {
        OneshotWatcher { rx }
    }

    /// The event that fired the watch. A client dropped meanwhile reports `Closed`.
    pub async fn changed(self) -> WatchedEvent {
        self.rx
            .await
            .unwrap_or_else(|_| WatchedEvent::session(SessionState::Closed))
    }
}

/// A persistent watch (or a recursive one, on a whole subtree). Dropping it removes the watch
/// from the server once no other watcher of this client needs it.
#[derive(Debug)]
pub struct PersistentWatcher {
    rx: mpsc::UnboundedReceiver<WatchedEvent>,
    /// The terminal event, once seen: repeated on every later call.
    ended: Option<WatchedEvent>,
    pub(crate) removal: Option<Removal>,
}

/// What dropping a [`PersistentWatcher`] must undo.
#[derive(Debug)]
pub(crate) struct Removal {
    pub path: String,
    pub recursive: bool,
    pub client: std::sync::Weak<crate::session::Shared>,
}

impl PersistentWatcher {
    pub(crate) fn new(rx: mpsc::UnboundedReceiver<WatchedEvent>, removal: Removal) -> Self {
        PersistentWatcher {
            rx,
            ended: None,
            removal: Some(removal),
        }
    }

    /// The next event: a change under the watch, or a change of connection. After a terminal
    /// session state every call returns it again.
    pub async fn changed(&mut self) -> WatchedEvent {
        if let Some(ended) = &self.ended {
            return ended.clone();
        }
        let event = self
            .rx
            .recv()
            .await
            .unwrap_or_else(|| WatchedEvent::session(SessionState::Closed));
        if event.session_state.is_terminated() {
            self.ended = Some(event.clone());
        }
        event
    }
}

impl Drop for PersistentWatcher {
    fn drop(&mut self) {
        // Close first, so the table sees this watcher as gone when it counts the others.
        self.rx.close();
        if let Some(removal) = self.removal.take()
            && let Some(shared) = removal.client.upgrade()
        {
            shared.unwatch(&removal.path, removal.recursive);
        }
    }
}

/// Which one-shot table a read's registration goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// getData, or exists on a node that exists.
    Data,
    /// exists on a node that does not exist: fires when it is created.
    Exist,
    Child,
}

/// A registration carried by a request until its reply is read.
#[derive(Debug)]
pub(crate) enum Registration {
    /// A one-shot watch on `path` (the server's path); for exists, `Kind::Data` becomes
    /// `Kind::Exist` when the node is missing.
    Oneshot {
        kind: Kind,
        exists: bool,
        path: String,
        tx: oneshot::Sender<WatchedEvent>,
    },
    Persistent {
        recursive: bool,
        path: String,
        tx: mpsc::UnboundedSender<WatchedEvent>,
    },
}

impl Registration {
    /// The server path the watch is on.
    pub(crate) fn path(&self) -> &str {
        match self {
            Registration::Oneshot { path, .. } | Registration::Persistent { path, .. } => path,
        }
    }
}

/// Every watch of one client, keyed by server path.
#[derive(Default)]
pub(crate) struct Table {
    data: HashMap<String, Vec<oneshot::Sender<WatchedEvent>>>,
    exist: HashMap<String, Vec<oneshot::Sender<WatchedEvent>>>,
    child: HashMap<String, Vec<oneshot::Sender<WatchedEvent>>>,
    persistent: HashMap<String, Vec<mpsc::UnboundedSender<WatchedEvent>>>,
    recursive: HashMap<String, Vec<mpsc::UnboundedSender<WatchedEvent>>>,
    /// Paths where the server may hold a watch of a dropped persistent watcher, whose removal
    /// waits until no one-shot watch and no request in flight there would go with it (see
    /// `Shared::remove_unwanted`).
    removal_wanted: HashSet<String>,
}

/// The paths of each kind, as `setWatches2` sends them.
#[derive(Default, Debug)]
pub(crate) struct Paths {
    pub data: Vec<String>,
    pub exist: Vec<String>,
    pub child: Vec<String>,
    pub persistent: Vec<String>,
    pub recursive: Vec<String>,
}

impl Paths {
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.data.is_empty()
            && self.exist.is_empty()
            && self.child.is_empty()
            && self.persistent.is_empty()
            && self.recursive.is_empty()
    }
}

impl Table {
    /// Adds a registration whose request succeeded (`ok`), or for exists, answered either way.
    /// Returns the path of a persistent watch whose watcher was dropped before the answer
    /// came: nobody will hear it, so it should be removed from the server again.
    pub(crate) fn register(
        &mut self,
        registration: Registration,
        ok: bool,
        no_node: bool,
    ) -> Option<(String, bool)> {
        match registration {
            Registration::Oneshot {
                kind,
                exists,
                path,
                tx,
            } => {
                let kind = match (exists, ok, no_node) {
                    (true, _, true) => Kind::Exist,
                    (_, true, _) => kind,
                    // A failed read leaves no watch on the server.
                    _ => return None,
                };
                let table = match kind {
                    Kind::Data => &mut self.data,
                    Kind::Exist => &mut self.exist,
                    Kind::Child => &mut self.child,
                };
                table.entry(path).or_default().push(tx);
                None
            }
            Registration::Persistent {
                recursive,
                path,
                tx,
            } if ok => {
                let abandoned = tx.is_closed();
                let table = if recursive {
                    &mut self.recursive
                } else {
                    &mut self.persistent
                };
                table.entry(path.clone()).or_default().push(tx);
                abandoned.then_some((path, recursive))
            }
            Registration::Persistent { .. } => None,
        }
    }

    /// Delivers a node event (server path `path`, reported to watchers as `shown`).
    pub(crate) fn fire(&mut self, event_type: EventType, path: &str, shown: &str) {
        let event = WatchedEvent {
            event_type,
            session_state: SessionState::SyncConnected,
            path: shown.to_owned(),
        };
        let oneshot_tables = match event_type {
            EventType::NodeCreated | EventType::NodeDataChanged => {
                vec![&mut self.data, &mut self.exist]
            }
            EventType::NodeDeleted => vec![&mut self.data, &mut self.exist, &mut self.child],
            EventType::NodeChildrenChanged => vec![&mut self.child],
            EventType::Session => Vec::new(),
        };
        for table in oneshot_tables {
            for tx in table.remove(path).unwrap_or_default() {
                let _ = tx.send(event.clone());
            }
        }
        if event_type == EventType::Session {
            return;
        }
        send_all(self.persistent.get_mut(path), &event);
        if event_type != EventType::NodeChildrenChanged {
            for ancestor in ancestors(path) {
                send_all(self.recursive.get_mut(ancestor), &event);
            }
        }
    }

    /// Tells persistent watchers the connection changed; a terminal state also ends every
    /// one-shot watch and empties the table.
    pub(crate) fn session(&mut self, state: SessionState) {
        let event = WatchedEvent::session(state);
        for senders in self
            .persistent
            .values_mut()
            .chain(self.recursive.values_mut())
        {
            send_all(Some(senders), &event);
        }
        if state.is_terminated() {
            for (_, senders) in self
                .data
                .drain()
                .chain(self.exist.drain())
                .chain(self.child.drain())
            {
                for tx in senders {
                    let _ = tx.send(event.clone());
                }
            }
            self.persistent.clear();
            self.recursive.clear();
        }
    }

    /// Forgets dropped persistent watchers of `path` (recursive ones if `recursive`); true if
    /// that left none of that kind there.
    ///
    /// The removal ZooKeeper 3.6–3.8 understands is of *every* watch of the session on a path
    /// (`WatcherType::Any`; they answer the persistent types with MarshallingError), so what
    /// else watches that path decides when the removal can be sent.
    pub(crate) fn prune_persistent(&mut self, path: &str, recursive: bool) -> bool {
        let table = if recursive {
            &mut self.recursive
        } else {
            &mut self.persistent
        };
        let Some(senders) = table.get_mut(path) else {
            return false;
        };
        senders.retain(|tx| !tx.is_closed());
        if !senders.is_empty() {
            return false;
        }
        table.remove(path);
        true
    }

    /// Whether a persistent watcher (of either mode) of `path` is live.
    pub(crate) fn persistent_watched(&self, path: &str) -> bool {
        let closed = mpsc::UnboundedSender::is_closed;
        any_live(self.persistent.get(path), closed) || any_live(self.recursive.get(path), closed)
    }

    /// Whether a one-shot watch on `path` waits to fire.
    pub(crate) fn oneshot_watched(&self, path: &str) -> bool {
        let closed = oneshot::Sender::is_closed;
        any_live(self.data.get(path), closed)
            || any_live(self.exist.get(path), closed)
            || any_live(self.child.get(path), closed)
    }

    /// Notes that the server may hold a watch on `path` that no watcher here wants.
    pub(crate) fn want_removal(&mut self, path: &str) {
        self.removal_wanted.insert(path.to_owned());
    }

    /// Whether [`Table::want_removal`] noted any path.
    pub(crate) fn removals_wait(&self) -> bool {
        !self.removal_wanted.is_empty()
    }

    /// The paths [`Table::want_removal`] noted.
    pub(crate) fn wanted_removals(&self) -> Vec<String> {
        self.removal_wanted.iter().cloned().collect()
    }

    /// The removal of `path`'s watches was sent, or a persistent watcher wants them again.
    pub(crate) fn removal_done(&mut self, path: &str) {
        self.removal_wanted.remove(path);
    }

    /// The connection is gone, and with it every watch on the server: nothing waits for
    /// removal (a new connection gets exactly the table's watches, `setWatches2`).
    pub(crate) fn forget_wanted_removals(&mut self) {
        self.removal_wanted.clear();
    }

    /// Every watched path, for `setWatches2` after a reconnection. Watchers whose receivers
    /// are gone are dropped first: nobody would hear them fire.
    pub(crate) fn paths(&mut self) -> Paths {
        fn live<T>(
            table: &mut HashMap<String, Vec<T>>,
            closed: impl Fn(&T) -> bool,
        ) -> Vec<String> {
            table.retain(|_, senders| {
                senders.retain(|tx| !closed(tx));
                !senders.is_empty()
            });
            table.keys().cloned().collect()
        }
        Paths {
            data: live(&mut self.data, oneshot::Sender::is_closed),
            exist: live(&mut self.exist, oneshot::Sender::is_closed),
            child: live(&mut self.child, oneshot::Sender::is_closed),
            persistent: live(&mut self.persistent, mpsc::UnboundedSender::is_closed),
            recursive: live(&mut self.recursive, mpsc::UnboundedSender::is_closed),
        }
    }
}

/// Whether any of `senders` still has its receiver.
fn any_live<T>(senders: Option<&Vec<T>>, closed: impl Fn(&T) -> bool) -> bool {
    senders.is_some_and(|senders| senders.iter().any(|tx| !closed(tx)))
}

fn send_all(senders: Option<&mut Vec<mpsc::UnboundedSender<WatchedEvent>>>, event: &WatchedEvent) {
    if let Some(senders) = senders {
        senders.retain(|tx| tx.send(event.clone()).is_ok());
    }
}

/// `path` and every ancestor up to the root: `/a/b`, `/a`, `/`.
fn ancestors(path: &str) -> impl Iterator<Item = &str> {
    let mut next = Some(path);
    std::iter::from_fn(move || {
        let current = next?;
        next = match current.rfind('/') {
            _ if current == "/" => None,
            Some(0) => Some("/"),
            Some(at) => Some(&current[..at]),
            None => None,
        };
        Some(current)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ancestors_run_up_to_the_root() {
        assert_eq!(ancestors("/a/b").collect::<Vec<_>>(), ["/a/b", "/a", "/"]);
        assert_eq!(ancestors("/").collect::<Vec<_>>(), ["/"]);
    }

    #[test]
    fn events_wake_the_watches_zookeeper_wakes() {
        let mut table = Table::default();
        let mut one = |kind, exists, no_node: bool| {
            let (tx, rx) = oneshot::channel();
            let registration = Registration::Oneshot {
                kind,
                exists,
                path: "/n".into(),
                tx,
            };
            assert_eq!(table.register(registration, !no_node, no_node), None);
            rx
        };
        let mut data = one(Kind::Data, false, false);
        let mut exist = one(Kind::Data, true, true);
        let mut child = one(Kind::Child, false, false);
        // A failed getData leaves nothing behind.
        let mut failed = one(Kind::Data, false, true);
        let (tx, mut recursive) = mpsc::unbounded_channel();
        table.register(
            Registration::Persistent {
                recursive: true,
                path: "/".into(),
                tx,
            },
            true,
            false,
        );
        table.fire(EventType::NodeChildrenChanged, "/n", "/n");
        assert_eq!(
            child.try_recv().unwrap().event_type,
            EventType::NodeChildrenChanged
        );
        assert!(data.try_recv().is_err() && exist.try_recv().is_err());
        assert!(
            recursive.try_recv().is_err(),
            "recursive watches skip child events"
        );
        table.fire(EventType::NodeCreated, "/n", "/n");
        assert_eq!(exist.try_recv().unwrap().event_type, EventType::NodeCreated);
        assert_eq!(data.try_recv().unwrap().event_type, EventType::NodeCreated);
        assert_eq!(recursive.try_recv().unwrap().path, "/n");
        assert!(matches!(
            failed.try_recv(),
            Err(oneshot::error::TryRecvError::Closed)
        ));
        table.session(SessionState::Expired);
        let end = recursive.try_recv().unwrap();
        assert_eq!(
            (end.event_type, end.session_state),
            (EventType::Session, SessionState::Expired)
        );
        assert!(table.paths().is_empty());
    }
}
