//! The data tree: every znode, with the indexes the server needs (ephemerals by session,
//! containers and TTL nodes for the reaper).
//!
//! The tree is owned by the core task alone, so it is plain data with no locks. Mutations here
//! cannot fail: `prep` has already checked every precondition against the same state, which is
//! what lets a multi be all-or-nothing without an undo log.
//!
//! Nodes live in one ordered map keyed by path, in *tree order* ([`path_order`]): by depth,
//! then bytewise. The children of a node are then one contiguous run of keys (same depth, the
//! parent's path plus `/` as prefix), so a node keeps no set of its children's names, only
//! their count: that set cost about a third of the tree's memory. Parents come before their
//! children, which a snapshot's walk relies on (the capture, in `tree/capture.rs`: it copies the
//! tree at one zxid while the tree changes, into a sink the snapshot's encoder implements).

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::ops::Bound;
use std::sync::Arc;

use bytes::Bytes;
use lockkeeper_proto::{Acl, Stat};

use crate::state::path;

mod capture;

use capture::Capture;
pub(crate) use capture::NodeSink;

/// `ephemeralOwner` of a container node, as ZooKeeper encodes it.
pub(crate) const CONTAINER_OWNER: i64 = i64::MIN;
/// High byte that marks a TTL node's `ephemeralOwner`; the TTL in ms fills the low 40 bits.
const TTL_MARK: i64 = 0xff00_0000_0000_0000_u64 as i64;
/// Largest TTL ZooKeeper can encode (40 bits of milliseconds, about 34 years).
pub(crate) const MAX_TTL: i64 = 0x0000_00ff_ffff_ffff;

/// What kind of node an `ephemeralOwner` value denotes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Owner {
    Persistent,
    Ephemeral(i64),
    Container,
    Ttl(i64),
}

impl Owner {
    pub(crate) fn decode(ephemeral_owner: i64) -> Owner {
        match ephemeral_owner {
            0 => Owner::Persistent,
            CONTAINER_OWNER => Owner::Container,
            v if v & TTL_MARK == TTL_MARK => Owner::Ttl(v & MAX_TTL),
            session => Owner::Ephemeral(session),
        }
    }

    pub(crate) fn ttl(ttl_ms: i64) -> i64 {
        TTL_MARK | ttl_ms
    }
}

#[derive(Debug, Clone)]
pub struct Node {
    /// `None` is null data, which ZooKeeper keeps apart from empty data. A boxed slice, not
    /// `Bytes`: 16 bytes in the node instead of 32, which takes the node's allocation down a
    /// size class (128 to 112 bytes with glibc); a read copies the data into its reply, which
    /// the reply's encoding does anyway.
    pub data: Option<Box<[u8]>>,
    pub acl: Arc<[Acl]>,
    pub czxid: i64,
    pub mzxid: i64,
    pub ctime: i64,
    pub mtime: i64,
    pub version: i32,
    pub aversion: i32,
    /// Children ever created under this node. It numbers sequential children, and clients see
    /// `cversion = 2 * child_creations - numChildren` (creations plus deletions), as in ZooKeeper.
    pub child_creations: i32,
    pub ephemeral_owner: i64,
    pub pzxid: i64,
    /// How many children it has now (their names are the keys below it in the tree's order).
    pub num_children: i32,
}

impl Node {
    pub fn stat(&self) -> Stat {
        let num_children = self.num_children;
        Stat {
            czxid: self.czxid,
            mzxid: self.mzxid,
            ctime: self.ctime,
            mtime: self.mtime,
            version: self.version,
            cversion: self
                .child_creations
                .wrapping_mul(2)
                .wrapping_sub(num_children),
            aversion: self.aversion,
            // Clients see 0 for containers and TTL nodes, as ZooKeeper shows them.
            ephemeral_owner: match Owner::decode(self.ephemeral_owner) {
                Owner::Ephemeral(session) => session,
                _ => 0,
            },
            data_length: self.data.as_ref().map_or(0, |d| d.len() as i32),
            num_children,
            pzxid: self.pzxid,
        }
    }

    fn new(
        data: Option<Bytes>,
        acl: Arc<[Acl]>,
        ephemeral_owner: i64,
        zxid: i64,
        time: i64,
    ) -> Node {
        Node {
            data: own(data),
            acl,
            czxid: zxid,
            mzxid: zxid,
            ctime: time,
            mtime: time,
            version: 0,
            aversion: 0,
            child_creations: 0,
            ephemeral_owner,
            pzxid: zxid,
            num_children: 0,
        }
    }
}

/// Copies data into an allocation of its own. Request data arrives as a slice of the socket's
/// read buffer; keeping that slice would pin the whole buffer (kilobytes) for every node.
fn own(data: Option<Bytes>) -> Option<Box<[u8]>> {
    data.map(|d| Box::from(&d[..]))
}

/// A path's depth: 0 for the root, otherwise its number of `/`.
fn depth(path: &str) -> usize {
    if path == "/" {
        0
    } else {
        path.bytes().filter(|&b| b == b'/').count()
    }
}

/// The tree's order of paths: by depth, then bytewise. Every node's children are contiguous
/// in it, and sorted by name, as `getChildren` answers them.
///
/// Every map lookup compares a path with a dozen keys, so this costs about what a plain string
/// comparison does: past the bytes both paths share (which hold as many `/` on either side),
/// only the differing tails are scanned for `/`, and they are short for siblings.
pub(crate) fn path_order(a: &str, b: &str) -> Ordering {
    if a == "/" || b == "/" {
        // The root's one `/` is depth 0, not 1.
        return depth(a).cmp(&depth(b)).then_with(|| a.cmp(b));
    }
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let shared = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let (a, b) = (&a[shared..], &b[shared..]);
    let slashes = |tail: &[u8]| tail.iter().filter(|&&c| c == b'/').count();
    slashes(a).cmp(&slashes(b)).then_with(|| a.cmp(b))
}

/// A path borrowed as a key of [`Nodes`] (ordered by [`path_order`]).
#[derive(PartialEq, Eq)]
#[repr(transparent)]
pub(crate) struct PathStr(str);

impl PathStr {
    pub(crate) fn new(path: &str) -> &PathStr {
        // SAFETY: `PathStr` is `repr(transparent)` over `str`, so the two references have the
        // same layout and the same metadata (the length).
        unsafe { &*(path as *const str as *const PathStr) }
    }
}

impl Ord for PathStr {
    fn cmp(&self, other: &Self) -> Ordering {
        path_order(&self.0, &other.0)
    }
}

impl PartialOrd for PathStr {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// A path owned as a key of [`Nodes`]. `Box<str>`, not `String`: no capacity word, in slots
/// that are often half empty.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct PathKey(Box<str>);

impl From<&str> for PathKey {
    fn from(path: &str) -> PathKey {
        PathKey(path.into())
    }
}

impl Borrow<PathStr> for PathKey {
    fn borrow(&self) -> &PathStr {
        PathStr::new(&self.0)
    }
}

impl Ord for PathKey {
    fn cmp(&self, other: &Self) -> Ordering {
        path_order(&self.0, &other.0)
    }
}

impl PartialOrd for PathKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl std::ops::Deref for PathKey {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

/// Every node by path, in tree order.
pub(crate) type Nodes = BTreeMap<PathKey, Box<Node>>;

/// The node at `path` in `nodes`.
pub(crate) fn node<'a>(nodes: &'a Nodes, path: &str) -> Option<&'a Node> {
    nodes.get(PathStr::new(path)).map(|n| &**n)
}

/// The nodes from `start` on, in tree order.
pub(crate) fn nodes_from<'a>(
    nodes: &'a Nodes,
    start: Bound<&str>,
) -> impl Iterator<Item = (&'a PathKey, &'a Node)> {
    let start = match start {
        Bound::Included(p) => Bound::Included(PathStr::new(p)),
        Bound::Excluded(p) => Bound::Excluded(PathStr::new(p)),
        Bound::Unbounded => Bound::Unbounded,
    };
    nodes
        .range::<PathStr, _>((start, Bound::Unbounded))
        .map(|(k, n)| (k, &**n))
}

/// One node as a snapshot holds it: its path and the node (children are derived from the
/// paths when the tree is rebuilt).
pub(crate) type NodeRecord = (String, Node);

pub struct DataTree {
    /// Ordered by path so a snapshot can walk it in chunks while it changes. Nodes are boxed:
    /// B-tree leaves are often half empty, and an empty slot then costs a pointer, not a node.
    nodes: Nodes,
    ephemerals: HashMap<i64, BTreeSet<String>>,
    containers: HashSet<String>,
    ttl_nodes: HashSet<String>,
    /// Most nodes share a handful of ACLs; one `Arc` per distinct ACL keeps them cheap.
    acl_cache: HashMap<Vec<Acl>, Arc<[Acl]>>,
    /// The capture under way (for a snapshot), which must see each node as it was at its zxid.
    capture: Option<Capture>,
    /// Bytes of paths and data, kept as nodes change so `mntr` and `/metrics` read a number
    /// instead of walking a tree of millions of nodes on the core's thread.
    data_size: usize,
}

impl Default for DataTree {
    fn default() -> Self {
        DataTree::new()
    }
}

impl DataTree {
    /// A fresh tree as ZooKeeper starts one: "/" plus "/zookeeper" with its "quota" and "config"
    /// children, added without transactions (hence root's cversion of -1 and zxids of 0).
    ///
    /// Each starts with empty data, not null, as in ZooKeeper: `getConfig` reads
    /// "/zookeeper/config", which a standalone ZooKeeper leaves empty, and clients parse what it
    /// answers (Curator's ensemble tracker fails on every connect when given null).
    pub fn new() -> DataTree {
        let mut tree = DataTree {
            nodes: BTreeMap::new(),
            ephemerals: HashMap::new(),
            containers: HashSet::new(),
            ttl_nodes: HashSet::new(),
            acl_cache: HashMap::new(),
            capture: None,
            data_size: 0,
        };
        let open = tree.intern_acl(crate::state::acl::open_acl());
        let read_only = tree.intern_acl(vec![Acl {
            perms: lockkeeper_proto::perms::READ,
            id: lockkeeper_proto::Id {
                scheme: "world".into(),
                id: "anyone".into(),
            },
        }]);
        for (p, acl) in INITIAL_PATHS
            .into_iter()
            .zip([&open, &open, &open, &read_only])
        {
            tree.nodes.insert(
                p.into(),
                Box::new(Node::new(Some(Bytes::new()), acl.clone(), 0, 0, 0)),
            );
            if let Some(parent) = path::parent(p).and_then(|parent| tree.get_mut(parent)) {
                parent.num_children += 1;
            }
        }
        if let Some(config) = tree.get_mut("/zookeeper/config") {
            config.aversion = -1;
        }
        tree.data_size = tree.measure_data_size();
        tree
    }

    /// The node at `path`. ZooKeeper also files the root under "", so reads of "" see "/".
    pub fn get(&self, path: &str) -> Option<&Node> {
        node(&self.nodes, if path.is_empty() { "/" } else { path })
    }

    fn get_mut(&mut self, path: &str) -> Option<&mut Node> {
        self.nodes.get_mut(PathStr::new(path)).map(|n| &mut **n)
    }

    /// The names of `path`'s children, sorted ("" is the root, as in [`DataTree::get`]).
    pub fn children(&self, path: &str) -> impl Iterator<Item = &str> + '_ {
        self.children_nodes(path).map(|(name, _)| name)
    }

    /// [`DataTree::children`] with each child's node.
    pub fn children_nodes(&self, path: &str) -> impl Iterator<Item = (&str, &Node)> + '_ {
        let path = if path.is_empty() { "/" } else { path };
        let prefix = if path == "/" {
            String::from("/")
        } else {
            format!("{path}/")
        };
        let child_depth = depth(path) + 1;
        // "P/" sorts first among P's children's depth. The root's prefix "/" is the root
        // itself (depth 0), so its children's run starts right after it.
        let start = if path == "/" {
            Bound::Excluded(PathKey::from("/"))
        } else {
            Bound::Included(PathKey::from(prefix.as_str()))
        };
        let len = prefix.len();
        self.nodes
            .range::<PathKey, _>((start, Bound::Unbounded))
            .take_while(move |(k, _)| depth(k) == child_depth && k.starts_with(prefix.as_str()))
            .map(move |(k, node)| (&k[len..], &**node))
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    pub fn intern_acl(&mut self, acl: Vec<Acl>) -> Arc<[Acl]> {
        if let Some(shared) = self.acl_cache.get(&acl) {
            return shared.clone();
        }
        let shared: Arc<[Acl]> = acl.clone().into();
        self.acl_cache.insert(acl, shared.clone());
        shared
    }

    /// Adds a node whose parent exists and whose path is free (checked by `prep`).
    pub fn create(
        &mut self,
        path: &str,
        data: Option<Bytes>,
        acl: Vec<Acl>,
        ephemeral_owner: i64,
        zxid: i64,
        time: i64,
    ) -> Stat {
        let acl = self.intern_acl(acl);
        let node = Node::new(data, acl, ephemeral_owner, zxid, time);
        let stat = node.stat();
        if let Some(capture) = &mut self.capture {
            if let Some(parent) = path::parent(path) {
                capture.before_change(parent, &self.nodes);
            }
            capture.on_create(path);
        }
        if let Some(parent) = path::parent(path).and_then(|p| self.get_mut(p)) {
            parent.num_children += 1;
            parent.child_creations = parent.child_creations.wrapping_add(1);
            parent.pzxid = zxid;
        }
        self.index(path, ephemeral_owner);
        self.data_size += node_size(path, &node);
        self.nodes.insert(path.into(), Box::new(node));
        stat
    }

    /// Removes a childless node (checked by `prep`).
    pub fn delete(&mut self, path: &str, zxid: i64) {
        if let Some(capture) = &mut self.capture {
            capture.before_change(path, &self.nodes);
            if let Some(parent) = path::parent(path) {
                capture.before_change(parent, &self.nodes);
            }
        }
        let Some(node) = self.nodes.remove(PathStr::new(path)) else {
            return;
        };
        self.data_size = self.data_size.saturating_sub(node_size(path, &node));
        if let Some(parent) = path::parent(path).and_then(|p| self.get_mut(p)) {
            parent.num_children -= 1;
            // A delete replayed after a later create must not move pzxid backwards.
            parent.pzxid = parent.pzxid.max(zxid);
        }
        match Owner::decode(node.ephemeral_owner) {
            Owner::Ephemeral(session) => {
                if let Some(paths) = self.ephemerals.get_mut(&session) {
                    paths.remove(path);
                    if paths.is_empty() {
                        self.ephemerals.remove(&session);
                    }
                }
            }
            Owner::Container => {
                self.containers.remove(path);
            }
            Owner::Ttl(_) => {
                self.ttl_nodes.remove(path);
            }
            Owner::Persistent => {}
        }
    }

    pub fn set_data(
        &mut self,
        path: &str,
        data: Option<Bytes>,
        version: i32,
        zxid: i64,
        time: i64,
    ) -> Stat {
        if let Some(capture) = &mut self.capture {
            capture.before_change(path, &self.nodes);
        }
        match self.nodes.get_mut(PathStr::new(path)) {
            Some(node) => {
                let data = own(data);
                self.data_size = (self.data_size + data.as_ref().map_or(0, |d| d.len()))
                    .saturating_sub(node.data.as_ref().map_or(0, |d| d.len()));
                node.data = data;
                node.version = version;
                node.mzxid = zxid;
                node.mtime = time;
                node.stat()
            }
            None => Stat::default(),
        }
    }

    pub fn set_acl(&mut self, path: &str, acl: Vec<Acl>, aversion: i32) -> Stat {
        let acl = self.intern_acl(acl);
        if let Some(capture) = &mut self.capture {
            capture.before_change(path, &self.nodes);
        }
        match self.get_mut(path) {
            Some(node) => {
                node.acl = acl;
                node.aversion = aversion;
                node.stat()
            }
            None => Stat::default(),
        }
    }

    /// The session's ephemeral paths, deepest first is not needed: ephemerals have no children.
    pub fn ephemerals_of(&self, session: i64) -> impl Iterator<Item = &String> {
        self.ephemerals.get(&session).into_iter().flatten()
    }

    pub fn ephemeral_count(&self) -> usize {
        self.ephemerals.values().map(BTreeSet::len).sum()
    }

    pub fn sessions_with_ephemerals(&self) -> impl Iterator<Item = (&i64, &BTreeSet<String>)> {
        self.ephemerals.iter()
    }

    /// Number of descendants of `path` (ZooKeeper's getAllChildrenNumber).
    pub fn descendant_count(&self, path: &str) -> usize {
        if path == "/" {
            return self.nodes.len() - 1;
        }
        // Descendants are not contiguous in tree order: walk down level by level.
        let mut count = 0;
        let mut level = vec![path.to_string()];
        while !level.is_empty() {
            let mut next = Vec::new();
            for parent in &level {
                for name in self.children(parent) {
                    next.push(format!("{parent}/{name}"));
                }
            }
            count += next.len();
            level = next;
        }
        count
    }

    /// Starts a capture of the current state (at `zxid`, the last applied) into `sink`.
    pub fn start_capture(&mut self, zxid: i64, sink: Box<dyn NodeSink>) {
        self.capture = Some(Capture::new(zxid, sink));
    }

    pub fn capture_zxid(&self) -> Option<i64> {
        self.capture.as_ref().map(|c| c.zxid)
    }

    pub fn capturing(&self) -> bool {
        self.capture.is_some()
    }

    /// Advances the capture by up to `limit` nodes and returns the bytes produced so far.
    pub fn capture_step(&mut self, limit: usize) -> Vec<u8> {
        match &mut self.capture {
            Some(capture) => {
                capture.walk(&self.nodes, limit);
                capture.take_bytes()
            }
            None => Vec::new(),
        }
    }

    /// Whether the capture's walk is complete (only its closing bytes remain).
    pub fn capture_walked(&self) -> bool {
        self.capture.as_ref().is_some_and(Capture::is_walked)
    }

    /// Ends a walked capture and returns its sink's closing bytes.
    pub fn finish_capture(&mut self) -> Vec<u8> {
        self.capture.take().map(Capture::finish).unwrap_or_default()
    }

    /// Every ACL in use, each once (for a snapshot's ACL table).
    pub fn acls(&self) -> Vec<Arc<[Acl]>> {
        self.acl_cache.values().cloned().collect()
    }

    /// Rebuilds a tree from a snapshot's ACL table and nodes; children and indexes are derived
    /// from the paths. The nodes come nearly sorted (the walk is in key order), so sorting them
    /// and bulk-building the map is much cheaper than a million separate inserts.
    pub fn restore(acls: Vec<Arc<[Acl]>>, mut records: Vec<NodeRecord>) -> DataTree {
        let mut tree = DataTree::new();
        for acl in acls {
            tree.acl_cache.insert(acl.to_vec(), acl);
        }
        records.sort_by(|a, b| path_order(&a.0, &b.0));
        for (path, node) in &records {
            tree.index(path, node.ephemeral_owner);
        }
        tree.nodes = records
            .into_iter()
            .map(|(path, mut node)| {
                node.num_children = 0;
                (PathKey(path.into_boxed_str()), Box::new(node))
            })
            .collect();
        let paths: Vec<PathKey> = tree.nodes.keys().cloned().collect();
        for p in paths {
            if let Some(parent) = path::parent(&p).and_then(|parent| tree.get_mut(parent)) {
                parent.num_children += 1;
            }
        }
        // Snapshots taken before these nodes started with empty data hold null for them. A node
        // no transaction has written (mzxid 0) still has its initial data, so it reads as a
        // fresh tree's would; one that was written keeps what the write gave it.
        for p in INITIAL_PATHS {
            if let Some(node) = tree.get_mut(p)
                && node.mzxid == 0
                && node.data.is_none()
            {
                node.data = Some(Box::default());
            }
        }
        tree.data_size = tree.measure_data_size();
        tree
    }

    fn index(&mut self, path: &str, ephemeral_owner: i64) {
        match Owner::decode(ephemeral_owner) {
            Owner::Ephemeral(session) => {
                self.ephemerals
                    .entry(session)
                    .or_default()
                    .insert(path.to_string());
            }
            Owner::Container => {
                self.containers.insert(path.to_string());
            }
            Owner::Ttl(_) => {
                self.ttl_nodes.insert(path.to_string());
            }
            Owner::Persistent => {}
        }
    }

    /// Sessions that own ephemerals, for recovery's check that every owner is a known session.
    pub fn ephemeral_owners(&self) -> Vec<i64> {
        self.ephemerals.keys().copied().collect()
    }

    /// Containers that had children and have none left, and TTL nodes without children whose
    /// TTL has passed since their last change: what the reaper deletes.
    pub fn reapable(&self, now_ms: i64) -> Vec<String> {
        let mut out: Vec<String> = self
            .containers
            .iter()
            .filter(|p| {
                self.get(p)
                    .is_some_and(|n| n.num_children == 0 && n.child_creations > 0)
            })
            .cloned()
            .collect();
        out.extend(
            self.ttl_nodes
                .iter()
                .filter(|p| {
                    self.get(p)
                        .is_some_and(|n| match Owner::decode(n.ephemeral_owner) {
                            Owner::Ttl(ttl) => {
                                n.num_children == 0 && now_ms > n.mtime.saturating_add(ttl)
                            }
                            _ => false,
                        })
                })
                .cloned(),
        );
        out.sort();
        out
    }

    /// Approximate bytes of node data (paths and data, as ZooKeeper counts them), for `mntr`
    /// and `/metrics`: kept up to date by every change, so reading it costs nothing.
    pub fn approximate_data_size(&self) -> usize {
        self.data_size
    }

    /// The data size counted from scratch: once at start-up, and by tests of the running count.
    fn measure_data_size(&self) -> usize {
        self.nodes.iter().map(|(p, n)| node_size(p, n)).sum()
    }
}

/// The nodes every tree starts with, parents first, as ZooKeeper creates them.
const INITIAL_PATHS: [&str; 4] = ["/", "/zookeeper", "/zookeeper/quota", "/zookeeper/config"];

/// What one node adds to [`DataTree::approximate_data_size`].
fn node_size(path: &str, node: &Node) -> usize {
    path.len() + node.data.as_ref().map_or(0, |d| d.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_tree_matches_zookeepers_initial_stats() {
        let tree = DataTree::new();
        let root = tree.get("/").unwrap().stat();
        assert_eq!((root.cversion, root.num_children, root.pzxid), (-1, 1, 0));
        let zk = tree.get("/zookeeper").unwrap().stat();
        assert_eq!((zk.cversion, zk.num_children), (-2, 2));
        assert_eq!(tree.get("/zookeeper/config").unwrap().stat().aversion, -1);
        for p in INITIAL_PATHS {
            assert_eq!(tree.get(p).unwrap().data.as_deref(), Some(&[][..]), "{p}");
        }
    }

    /// A snapshot written when the initial nodes held null data restores them empty, unless a
    /// transaction wrote them (null included).
    #[test]
    fn restore_reads_unwritten_initial_nodes_as_empty() {
        let fresh = DataTree::new();
        let mut records: Vec<NodeRecord> = INITIAL_PATHS
            .iter()
            .map(|p| {
                let mut node = fresh.get(p).unwrap().clone();
                node.data = None;
                (p.to_string(), node)
            })
            .collect();
        records[0].1.mzxid = 5;
        records[0].1.version = 1;
        let tree = DataTree::restore(fresh.acls(), records);
        assert_eq!(tree.get("/").unwrap().data, None, "written null stays null");
        for p in &INITIAL_PATHS[1..] {
            assert_eq!(tree.get(p).unwrap().data.as_deref(), Some(&[][..]), "{p}");
        }
    }

    #[test]
    fn the_running_data_size_equals_a_recount_after_every_change() {
        let mut tree = DataTree::new();
        let bytes = |n: usize| Some(Bytes::from(vec![7u8; n]));
        let mut zxid = 0;
        let step = |tree: &mut DataTree, what: &str| {
            assert_eq!(
                tree.approximate_data_size(),
                tree.measure_data_size(),
                "after {what}"
            );
        };
        step(&mut tree, "start");
        for i in 0..20 {
            zxid += 1;
            tree.create(
                &format!("/n{i}"),
                bytes(i * 3),
                crate::state::acl::open_acl(),
                0,
                zxid,
                0,
            );
            step(&mut tree, "create");
        }
        for i in 0..20 {
            zxid += 1;
            tree.set_data(&format!("/n{i}"), bytes(40 - i), 1, zxid, 0);
            step(&mut tree, "set_data");
        }
        tree.set_data("/n3", None, 2, zxid + 1, 0);
        step(&mut tree, "set_data to none");
        for i in (0..20).step_by(2) {
            tree.delete(&format!("/n{i}"), zxid + 2);
            step(&mut tree, "delete");
        }
        tree.delete("/missing", zxid + 3);
        step(&mut tree, "delete of a missing node");
        assert!(tree.approximate_data_size() > 0);
    }

    /// The fast comparison is the definition: depth first, then bytes.
    #[test]
    fn path_order_is_depth_then_bytes() {
        let paths = [
            "/",
            "/a",
            "/b",
            "/a/b",
            "/a/c",
            "/ab",
            "/a-",
            "/a/b/c",
            "/z",
            "/zz/y",
            "/a/b0",
            "/\u{e9}",
            "/\u{e9}/x",
            "/a/\u{e9}",
            "/0",
            "/a/b/c/d",
        ];
        for a in paths {
            for b in paths {
                let expected = depth(a).cmp(&depth(b)).then_with(|| a.cmp(b));
                assert_eq!(path_order(a, b), expected, "{a:?} vs {b:?}");
            }
        }
    }

    /// Children are a contiguous run in tree order: neither grandchildren nor siblings that
    /// share a prefix (`/ab` next to `/a`) may leak into a listing, and the counts follow.
    #[test]
    fn children_and_descendants_come_from_tree_order() {
        let mut tree = DataTree::new();
        let mut zxid = 0;
        for p in [
            "/a",
            "/ab",
            "/a/x",
            "/a/y",
            "/a/x/deep",
            "/a/x/deep/er",
            "/ab/z",
            "/a-",
            "/a/y0",
        ] {
            zxid += 1;
            tree.create(p, None, crate::state::acl::open_acl(), 0, zxid, 0);
        }
        let names = |t: &DataTree, p: &str| t.children(p).map(str::to_string).collect::<Vec<_>>();
        assert_eq!(names(&tree, "/"), ["a", "a-", "ab", "zookeeper"]);
        assert_eq!(names(&tree, ""), names(&tree, "/"));
        assert_eq!(names(&tree, "/a"), ["x", "y", "y0"]);
        assert_eq!(names(&tree, "/a/x"), ["deep"]);
        assert_eq!(names(&tree, "/ab"), ["z"]);
        assert!(names(&tree, "/a/y").is_empty());
        assert_eq!(tree.get("/a").unwrap().num_children, 3);
        assert_eq!(tree.descendant_count("/a"), 5);
        assert_eq!(tree.descendant_count("/ab"), 1);
        assert_eq!(tree.descendant_count("/"), tree.len() - 1);
        tree.delete("/a/x/deep/er", 20);
        assert_eq!(tree.descendant_count("/a"), 4);
        assert_eq!(tree.get("/a/x/deep").unwrap().num_children, 0);
        // Parents sort before their children, whatever the bytes say.
        assert!(path_order("/zz", "/a/b").is_lt());
        assert!(path_order("/", "/a").is_lt());
    }

    #[test]
    fn cversion_counts_creations_and_deletions() {
        let mut tree = DataTree::new();
        tree.create("/p", None, crate::state::acl::open_acl(), 0, 1, 0);
        tree.create("/p/a", None, crate::state::acl::open_acl(), 0, 2, 0);
        tree.create("/p/b", None, crate::state::acl::open_acl(), 0, 3, 0);
        tree.delete("/p/a", 4);
        let p = tree.get("/p").unwrap();
        assert_eq!(
            p.child_creations, 2,
            "the next sequential child is numbered 2"
        );
        assert_eq!(
            (p.stat().cversion, p.stat().num_children, p.stat().pzxid),
            (3, 1, 4)
        );
    }

    #[test]
    fn owner_encoding_round_trips() {
        assert_eq!(Owner::decode(0), Owner::Persistent);
        assert_eq!(Owner::decode(CONTAINER_OWNER), Owner::Container);
        assert_eq!(Owner::decode(Owner::ttl(5000)), Owner::Ttl(5000));
        assert_eq!(Owner::decode(0x0123_4567), Owner::Ephemeral(0x0123_4567));
    }

    #[test]
    fn reaps_used_empty_containers_and_expired_ttl_nodes() {
        let mut tree = DataTree::new();
        let acl = crate::state::acl::open_acl();
        tree.create("/c", None, acl.clone(), CONTAINER_OWNER, 1, 0);
        tree.create("/fresh", None, acl.clone(), CONTAINER_OWNER, 2, 0);
        tree.create("/c/x", None, acl.clone(), 0, 3, 0);
        tree.create("/t", None, acl, Owner::ttl(100), 4, 1000);
        assert!(tree.reapable(1050).is_empty());
        tree.delete("/c/x", 5);
        assert_eq!(tree.reapable(1050), vec!["/c".to_string()]);
        assert_eq!(
            tree.reapable(1101),
            vec!["/c".to_string(), "/t".to_string()]
        );
    }
}
