//! The capture: a copy of the tree at one zxid, taken a chunk at a time while the tree changes.
//!
//! Taking a snapshot must not stall requests, and the core owns the tree, so the core walks the
//! tree in its key order (tree order: parents before children) a chunk at a time between
//! batches of requests. A write that reaches a node the walk has not visited yet first records
//! that node's *pre-image*; nodes created during the walk are skipped. What the walk records is
//! then exactly the tree at the capture's zxid, with a stall bounded by the chunk size.
//!
//! Where the recorded nodes go is a [`NodeSink`]: the snapshot's encoder (`disk::snapshot`),
//! which owns the file format. The walk knows no bytes but the ones the sink hands back.

use std::collections::HashSet;
use std::ops::Bound;

use super::{Node, Nodes, node, nodes_from, path_order};

/// Where a capture records nodes: each node once, as it was at the capture's zxid, parents
/// before children.
pub trait NodeSink: Send {
    /// Records `node` at `path`.
    fn node(&mut self, path: &str, node: &Node);
    /// Takes what the sink produced so far, to stream it to the writer.
    fn take_bytes(&mut self) -> Vec<u8>;
    /// The closing bytes, once every node has been recorded.
    fn finish(self: Box<Self>) -> Vec<u8>;
}

/// A capture under way: how far the walk has got and which nodes it must skip.
pub(super) struct Capture {
    pub(super) zxid: i64,
    /// The last key walked; everything at or before it is recorded.
    cursor: Option<String>,
    /// Nodes ahead of the cursor already recorded (their pre-image, before a write).
    recorded_ahead: HashSet<String>,
    /// Nodes ahead of the cursor created after the capture's zxid.
    created_ahead: HashSet<String>,
    walked: bool,
    sink: Box<dyn NodeSink>,
}

impl Capture {
    /// Starts a capture of the tree at `zxid` (the current state) into `sink`.
    pub(super) fn new(zxid: i64, sink: Box<dyn NodeSink>) -> Capture {
        Capture {
            zxid,
            cursor: None,
            recorded_ahead: HashSet::new(),
            created_ahead: HashSet::new(),
            walked: false,
            sink,
        }
    }

    fn ahead(&self, path: &str) -> bool {
        !self.walked
            && self
                .cursor
                .as_deref()
                .is_none_or(|c| path_order(path, c).is_gt())
    }

    /// Called before `path` is changed or deleted.
    pub(super) fn before_change(&mut self, path: &str, nodes: &Nodes) {
        if self.ahead(path)
            && !self.recorded_ahead.contains(path)
            && !self.created_ahead.contains(path)
        {
            if let Some(node) = node(nodes, path) {
                self.sink.node(path, node);
            }
            self.recorded_ahead.insert(path.to_string());
        }
    }

    /// Called when `path` is created.
    pub(super) fn on_create(&mut self, path: &str) {
        if self.ahead(path) && !self.recorded_ahead.contains(path) {
            self.created_ahead.insert(path.to_string());
        }
    }

    /// Records up to `limit` more nodes in key order.
    pub(super) fn walk(&mut self, nodes: &Nodes, limit: usize) {
        let start = match &self.cursor {
            Some(c) => Bound::Excluded(c.as_str()),
            None => Bound::Unbounded,
        };
        let mut last = None;
        let mut seen = 0;
        for (path, node) in nodes_from(nodes, start).take(limit) {
            seen += 1;
            last = Some(path);
            if self.recorded_ahead.remove(&**path) || self.created_ahead.remove(&**path) {
                continue;
            }
            self.sink.node(path, node);
        }
        match last {
            Some(path) if seen == limit => self.cursor = Some(path.to_string()),
            _ => {
                self.walked = true;
                self.recorded_ahead.clear();
                self.created_ahead.clear();
            }
        }
    }

    pub(super) fn is_walked(&self) -> bool {
        self.walked
    }

    /// Takes the bytes the sink produced so far.
    pub(super) fn take_bytes(&mut self) -> Vec<u8> {
        self.sink.take_bytes()
    }

    /// The sink's closing bytes.
    pub(super) fn finish(self) -> Vec<u8> {
        self.sink.finish()
    }
}
