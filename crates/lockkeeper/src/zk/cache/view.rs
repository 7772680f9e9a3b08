//! The cache's memory: the nodes as last read, the ordering rule every update passes through,
//! and the subscribers that hear of each change.
//!
//! Invariants:
//! - A node is only ever replaced by a newer version of itself: a later incarnation (greater
//!   `czxid`), or the same incarnation with a greater `mzxid` (a data change) or newer
//!   children or ACL counters (a stat-only change, which emits no event). So the events of one
//!   path follow its version order, whatever order the reads come back in.
//! - A read that finds no node removes the cached one (and its cached descendants): reads are
//!   answered in the order they were sent on the one connection, and a new session syncs
//!   before its first read, so "no node" is never older than what the view holds.
//! - Every change and its event happen under one lock, so a subscriber's events continue
//!   exactly the view it subscribed against.

use std::collections::BTreeMap;

use tokio::sync::mpsc;

use super::{CacheEvent, CachedNode};

/// What a read of a node means for the cached version.
#[derive(Debug, PartialEq, Eq)]
enum Update {
    /// Not newer than what the view holds: ignored.
    Stale,
    /// A later incarnation: the node was deleted and created again.
    Recreated,
    /// The same node with newer data.
    Changed,
    /// The same data; only the children or ACL counters moved on. No event.
    StatOnly,
}

fn compare(old: &CachedNode, new: &CachedNode) -> Update {
    let (o, n) = (&old.stat, &new.stat);
    if n.czxid != o.czxid {
        return if n.czxid > o.czxid {
            Update::Recreated
        } else {
            Update::Stale
        };
    }
    if n.mzxid != o.mzxid {
        return if n.mzxid > o.mzxid {
            Update::Changed
        } else {
            Update::Stale
        };
    }
    let moved_on = n.pzxid >= o.pzxid && n.cversion >= o.cversion && n.aversion >= o.aversion;
    if moved_on && n != o {
        Update::StatOnly
    } else {
        Update::Stale
    }
}

/// The nodes and the subscribers of one cache.
#[derive(Default)]
pub(super) struct View {
    nodes: BTreeMap<String, CachedNode>,
    subscribers: Vec<mpsc::UnboundedSender<CacheEvent>>,
    /// Set once the cache stopped: no more subscribers, no more events.
    closed: bool,
}

impl View {
    pub(super) fn get(&self, path: &str) -> Option<CachedNode> {
        self.nodes.get(path).cloned()
    }

    pub(super) fn snapshot(&self) -> BTreeMap<String, CachedNode> {
        self.nodes.clone()
    }

    /// The direct children of `path`, by name (sorted).
    pub(super) fn children(&self, path: &str) -> Vec<(String, CachedNode)> {
        let prefix = child_prefix(path);
        self.nodes
            .range::<str, _>((
                std::ops::Bound::Excluded(prefix.as_str()),
                std::ops::Bound::Unbounded,
            ))
            .take_while(|(p, _)| p.starts_with(&prefix))
            .filter_map(|(p, node)| {
                let name = &p[prefix.len()..];
                (!name.is_empty() && !name.contains('/')).then(|| (name.to_owned(), node.clone()))
            })
            .collect()
    }

    pub(super) fn len(&self) -> usize {
        self.nodes.len()
    }

    /// A receiver for the events from now on; closed at once if the cache has stopped.
    pub(super) fn subscribe(&mut self) -> mpsc::UnboundedReceiver<CacheEvent> {
        let (sender, receiver) = mpsc::unbounded_channel();
        if !self.closed {
            self.subscribers.push(sender);
        }
        receiver
    }

    /// A receiver that first gets a `Created` for every node now in the view and then
    /// `Initialized`, then the events from now on: one atomic step, so nothing is missed or
    /// told twice.
    pub(super) fn subscribe_replayed(&mut self) -> mpsc::UnboundedReceiver<CacheEvent> {
        let (sender, receiver) = mpsc::unbounded_channel();
        for (path, node) in &self.nodes {
            let _ = sender.send(CacheEvent::Created {
                path: path.clone(),
                node: node.clone(),
            });
        }
        let _ = sender.send(CacheEvent::Initialized);
        if !self.closed {
            self.subscribers.push(sender);
        }
        receiver
    }

    pub(super) fn emit(&mut self, event: CacheEvent) {
        if self.closed {
            return;
        }
        // A subscriber whose receiver is gone is forgotten.
        self.subscribers
            .retain(|subscriber| subscriber.send(event.clone()).is_ok());
    }

    /// Stops the view: subscribers' streams end once they have read what was sent.
    pub(super) fn close(&mut self) {
        self.closed = true;
        self.subscribers.clear();
    }

    /// Applies what a read of `path` found (`None`: no such node), under the ordering rule.
    pub(super) fn apply(&mut self, path: &str, found: Option<CachedNode>) {
        match (self.nodes.get(path), found) {
            (None, None) => {}
            (None, Some(node)) => self.insert(path, node),
            (Some(_), None) => self.remove_subtree(path, i64::MAX),
            (Some(old), Some(node)) => match compare(old, &node) {
                Update::Stale => {}
                Update::StatOnly => {
                    self.nodes.insert(path.to_owned(), node);
                }
                Update::Changed => {
                    let old = old.clone();
                    self.nodes.insert(path.to_owned(), node.clone());
                    self.emit(CacheEvent::Changed {
                        path: path.to_owned(),
                        old,
                        node,
                    });
                }
                Update::Recreated => {
                    // The old incarnation's children went with it; children of the new one
                    // (created after it, so with a greater czxid) may be cached already.
                    self.remove_subtree(path, node.stat.czxid);
                    self.insert(path, node);
                }
            },
        }
    }

    /// Replaces the view by a complete fresh read, emitting the difference: deletions first
    /// (deepest first), then creations and changes (parents first).
    pub(super) fn replace_all(&mut self, fresh: BTreeMap<String, CachedNode>) {
        let gone: Vec<String> = self
            .nodes
            .keys()
            .filter(|path| !fresh.contains_key(*path))
            .cloned()
            .collect();
        for path in gone.iter().rev() {
            if let Some(old) = self.nodes.remove(path) {
                self.emit(CacheEvent::Deleted {
                    path: path.clone(),
                    old,
                });
            }
        }
        for (path, node) in fresh {
            self.apply(&path, Some(node));
        }
    }

    fn insert(&mut self, path: &str, node: CachedNode) {
        self.nodes.insert(path.to_owned(), node.clone());
        self.emit(CacheEvent::Created {
            path: path.to_owned(),
            node,
        });
    }

    /// Removes `path` and every cached node below it created before `before` (a zxid),
    /// deepest first, with their events.
    fn remove_subtree(&mut self, path: &str, before: i64) {
        let prefix = child_prefix(path);
        let below: Vec<String> = self
            .nodes
            .range::<str, _>((
                std::ops::Bound::Excluded(prefix.as_str()),
                std::ops::Bound::Unbounded,
            ))
            .take_while(|(p, _)| p.starts_with(&prefix))
            .filter(|(_, node)| node.stat.czxid < before)
            .map(|(p, _)| p.clone())
            .collect();
        for p in below.iter().rev().map(String::as_str).chain([path]) {
            if let Some(old) = self.nodes.remove(p) {
                self.emit(CacheEvent::Deleted {
                    path: p.to_owned(),
                    old,
                });
            }
        }
    }
}

/// What the paths of `path`'s descendants start with.
pub(super) fn child_prefix(path: &str) -> String {
    if path == "/" {
        "/".to_owned()
    } else {
        format!("{path}/")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockkeeper_zk_client::Stat;

    fn node(czxid: i64, mzxid: i64, data: &str) -> CachedNode {
        let mut stat: Stat = blank_stat();
        stat.czxid = czxid;
        stat.mzxid = mzxid;
        CachedNode {
            data: data.as_bytes().to_vec(),
            stat,
        }
    }

    fn blank_stat() -> Stat {
        Stat {
            czxid: 0,
            mzxid: 0,
            pzxid: 0,
            ctime: 0,
            mtime: 0,
            version: 0,
            cversion: 0,
            aversion: 0,
            ephemeral_owner: 0,
            data_length: 0,
            num_children: 0,
        }
    }

    fn drain(receiver: &mut mpsc::UnboundedReceiver<CacheEvent>) -> Vec<String> {
        let mut seen = Vec::new();
        while let Ok(event) = receiver.try_recv() {
            seen.push(match event {
                CacheEvent::Created { path, node } => format!("+{path}@{}", node.stat.mzxid),
                CacheEvent::Changed { path, node, .. } => format!("~{path}@{}", node.stat.mzxid),
                CacheEvent::Deleted { path, .. } => format!("-{path}"),
                CacheEvent::Initialized => "init".into(),
                CacheEvent::Rebuilt => "rebuilt".into(),
            });
        }
        seen
    }

    #[test]
    fn an_older_read_never_replaces_a_newer_one() {
        let mut view = View::default();
        let mut events = view.subscribe();
        view.apply("/a", Some(node(5, 7, "new")));
        view.apply("/a", Some(node(5, 6, "old")));
        view.apply("/a", Some(node(4, 9, "older incarnation")));
        assert_eq!(view.get("/a").unwrap().data, b"new");
        view.apply("/a", Some(node(5, 8, "newer")));
        view.apply("/a", Some(node(9, 9, "recreated")));
        assert_eq!(drain(&mut events), ["+/a@7", "~/a@8", "-/a", "+/a@9"]);
    }

    #[test]
    fn a_recreated_parent_keeps_the_children_of_its_new_incarnation() {
        let mut view = View::default();
        view.apply("/p", Some(node(1, 1, "")));
        view.apply("/p/old", Some(node(2, 2, "")));
        // Read before the parent's re-creation was seen: a child of the new incarnation.
        view.apply("/p/new", Some(node(6, 6, "")));
        let mut events = view.subscribe();
        view.apply("/p", Some(node(5, 5, "")));
        assert_eq!(drain(&mut events), ["-/p/old", "-/p", "+/p@5"]);
        assert!(view.get("/p/new").is_some());
    }

    #[test]
    fn a_missing_node_takes_its_descendants_and_a_refresh_emits_the_difference() {
        let mut view = View::default();
        view.apply("/a", Some(node(1, 1, "")));
        view.apply("/a/b", Some(node(2, 2, "")));
        view.apply("/a/b/c", Some(node(3, 3, "")));
        view.apply("/a-x", Some(node(4, 4, "")));
        assert_eq!(view.children("/a").len(), 1);
        let mut events = view.subscribe();
        view.apply("/a/b", None);
        assert_eq!(drain(&mut events), ["-/a/b/c", "-/a/b"]);
        let fresh = BTreeMap::from([
            ("/a".to_owned(), node(1, 5, "")),
            ("/a/d".to_owned(), node(6, 6, "")),
        ]);
        view.replace_all(fresh);
        assert_eq!(drain(&mut events), ["-/a-x", "~/a@5", "+/a/d@6"]);
        let mut replayed = view.subscribe_replayed();
        assert_eq!(drain(&mut replayed), ["+/a@5", "+/a/d@6", "init"]);
    }
}
