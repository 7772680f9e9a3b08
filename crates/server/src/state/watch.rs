//! Watches: who wants to hear about which path, and the events a change fires.
//!
//! Watches belong to a *connection* (as in ZooKeeper, where the connection is the watcher): a
//! client that reconnects re-registers its watches with SetWatches. One-shot data and child
//! watches are removed when they fire; persistent and persistent-recursive watches stay until
//! removed or the connection closes.

use std::collections::{HashMap, HashSet};

use lockkeeper_proto::{EventType, WatcherType};

use crate::state::path;

pub(crate) type ConnId = u64;

/// An event to deliver: to which connection, what happened, where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Fired {
    pub conn: ConnId,
    pub event: EventType,
    pub path: String,
}

#[derive(Default)]
struct WatchTable(HashMap<String, HashSet<ConnId>>);

impl WatchTable {
    fn add(&mut self, path: &str, conn: ConnId) {
        self.0.entry(path.to_string()).or_default().insert(conn);
    }

    fn take(&mut self, path: &str) -> HashSet<ConnId> {
        self.0.remove(path).unwrap_or_default()
    }

    fn get(&self, path: &str) -> Option<&HashSet<ConnId>> {
        self.0.get(path)
    }

    fn contains(&self, path: &str, conn: ConnId) -> bool {
        self.0.get(path).is_some_and(|s| s.contains(&conn))
    }

    fn remove(&mut self, path: &str, conn: ConnId) -> bool {
        let Some(set) = self.0.get_mut(path) else {
            return false;
        };
        let removed = set.remove(&conn);
        if set.is_empty() {
            self.0.remove(path);
        }
        removed
    }

    fn remove_conn(&mut self, conn: ConnId) {
        self.0.retain(|_, set| {
            set.remove(&conn);
            !set.is_empty()
        });
    }

    fn count(&self) -> usize {
        self.0.values().map(HashSet::len).sum()
    }
}

#[derive(Default)]
pub(crate) struct Watches {
    /// getData and exists watches: fire on create, change and delete of the node.
    data: WatchTable,
    /// getChildren watches: fire when the children change or the node is deleted.
    child: WatchTable,
    persistent: WatchTable,
    recursive: WatchTable,
}

impl Watches {
    pub(crate) fn add_data(&mut self, path: &str, conn: ConnId) {
        self.data.add(path, conn);
    }

    pub(crate) fn add_child(&mut self, path: &str, conn: ConnId) {
        self.child.add(path, conn);
    }

    /// Adds a persistent watch; a connection has one mode per path, the last one asked for
    /// (as in ZooKeeper 3.8).
    pub(crate) fn add_persistent(&mut self, path: &str, conn: ConnId, recursive: bool) {
        if recursive {
            self.persistent.remove(path, conn);
            self.recursive.add(path, conn);
        } else {
            self.recursive.remove(path, conn);
            self.persistent.add(path, conn);
        }
    }

    /// Collects the events `event` at `path` fires. Each connection hears of one change once,
    /// even if several of its watches match (ZooKeeper's suppression of duplicate watchers).
    pub(crate) fn trigger(&mut self, path: &str, event: EventType, out: &mut Vec<Fired>) {
        let mut conns: HashSet<ConnId> = HashSet::new();
        match event {
            EventType::NodeChildrenChanged => {
                conns.extend(self.child.take(path));
                conns.extend(self.persistent.get(path).into_iter().flatten());
            }
            _ => {
                conns.extend(self.data.take(path));
                if event == EventType::NodeDeleted {
                    conns.extend(self.child.take(path));
                }
                conns.extend(self.persistent.get(path).into_iter().flatten());
                if !self.recursive.0.is_empty() {
                    for ancestor in path::self_and_ancestors(path) {
                        conns.extend(self.recursive.get(ancestor).into_iter().flatten());
                    }
                }
            }
        }
        let mut conns: Vec<ConnId> = conns.into_iter().collect();
        conns.sort_unstable();
        out.extend(conns.into_iter().map(|conn| Fired {
            conn,
            event,
            path: path.to_string(),
        }));
    }

    /// Removes `conn`'s watches of `kind` on `path`; false if it had none (NoWatcher).
    pub(crate) fn remove(&mut self, path: &str, conn: ConnId, kind: WatcherType) -> bool {
        match kind {
            WatcherType::Data => self.data.remove(path, conn),
            WatcherType::Children => self.child.remove(path, conn),
            WatcherType::Persistent => self.persistent.remove(path, conn),
            WatcherType::PersistentRecursive => self.recursive.remove(path, conn),
            WatcherType::Any => {
                let removed = [
                    self.data.remove(path, conn),
                    self.child.remove(path, conn),
                    self.persistent.remove(path, conn),
                    self.recursive.remove(path, conn),
                ];
                removed.contains(&true)
            }
        }
    }

    /// Whether `conn` has a watch of `kind` on `path` (checkWatches).
    pub(crate) fn has(&self, path: &str, conn: ConnId, kind: WatcherType) -> bool {
        match kind {
            WatcherType::Data => self.data.contains(path, conn),
            WatcherType::Children => self.child.contains(path, conn),
            WatcherType::Persistent => self.persistent.contains(path, conn),
            WatcherType::PersistentRecursive => self.recursive.contains(path, conn),
            WatcherType::Any => [
                WatcherType::Data,
                WatcherType::Children,
                WatcherType::Persistent,
                WatcherType::PersistentRecursive,
            ]
            .into_iter()
            .any(|k| self.has(path, conn, k)),
        }
    }

    pub(crate) fn remove_connection(&mut self, conn: ConnId) {
        for table in [
            &mut self.data,
            &mut self.child,
            &mut self.persistent,
            &mut self.recursive,
        ] {
            table.remove_conn(conn);
        }
    }

    pub(crate) fn count(&self) -> usize {
        self.data.count() + self.child.count() + self.persistent.count() + self.recursive.count()
    }

    /// Distinct watched paths and watching connections, for `wchs`.
    pub(crate) fn summary(&self) -> (usize, usize) {
        let mut paths: HashSet<&str> = HashSet::new();
        let mut conns: HashSet<ConnId> = HashSet::new();
        for table in [&self.data, &self.child, &self.persistent, &self.recursive] {
            for (p, set) in &table.0 {
                paths.insert(p.as_str());
                conns.extend(set);
            }
        }
        (conns.len(), paths.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fire(w: &mut Watches, path: &str, event: EventType) -> Vec<(ConnId, EventType)> {
        let mut out = Vec::new();
        w.trigger(path, event, &mut out);
        out.into_iter().map(|f| (f.conn, f.event)).collect()
    }

    #[test]
    fn one_shot_watches_fire_once() {
        let mut w = Watches::default();
        w.add_data("/a", 1);
        assert_eq!(
            fire(&mut w, "/a", EventType::NodeDataChanged),
            vec![(1, EventType::NodeDataChanged)]
        );
        assert!(fire(&mut w, "/a", EventType::NodeDataChanged).is_empty());
    }

    #[test]
    fn delete_fires_one_event_per_connection_for_data_and_child_watches() {
        let mut w = Watches::default();
        w.add_data("/a", 1);
        w.add_child("/a", 1);
        w.add_child("/a", 2);
        assert_eq!(
            fire(&mut w, "/a", EventType::NodeDeleted),
            vec![(1, EventType::NodeDeleted), (2, EventType::NodeDeleted)]
        );
        assert_eq!(w.count(), 0);
    }

    #[test]
    fn persistent_watches_stay_and_recursive_ones_see_descendants_but_not_child_events() {
        let mut w = Watches::default();
        w.add_persistent("/a", 1, false);
        w.add_persistent("/a", 2, true);
        assert_eq!(
            fire(&mut w, "/a", EventType::NodeChildrenChanged),
            vec![(1, EventType::NodeChildrenChanged)]
        );
        assert_eq!(
            fire(&mut w, "/a/b/c", EventType::NodeCreated),
            vec![(2, EventType::NodeCreated)]
        );
        assert_eq!(fire(&mut w, "/a", EventType::NodeDataChanged).len(), 2);
        assert_eq!(
            fire(&mut w, "/a", EventType::NodeDataChanged).len(),
            2,
            "still there"
        );
        assert!(w.remove("/a", 2, WatcherType::PersistentRecursive));
        assert!(!w.remove("/a", 2, WatcherType::PersistentRecursive));
    }
}
