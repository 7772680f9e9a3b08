//! Transactions: the state changes the pipeline logs and applies, one per write request.
//!
//! A txn is fully decided by `prep` (sequential names chosen, ACLs expanded, versions computed),
//! so applying it is deterministic: replaying the same txns in zxid order rebuilds the same tree.

use std::sync::Arc;

use bytes::Bytes;
use lockkeeper_proto::{Acl, EventType, Stat};

use crate::path;
use crate::tree::DataTree;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Txn {
    CreateSession {
        session_id: i64,
        timeout_ms: i32,
        passwd: [u8; 16],
    },
    /// Ends a session (close or expiry) and deletes its ephemerals.
    CloseSession {
        session_id: i64,
    },
    Create {
        path: String,
        data: Option<Bytes>,
        acl: Vec<Acl>,
        ephemeral_owner: i64,
    },
    Delete {
        path: String,
    },
    SetData {
        path: String,
        data: Option<Bytes>,
        version: i32,
    },
    SetAcl {
        path: String,
        acl: Vec<Acl>,
        aversion: i32,
    },
    /// A version check inside a multi: changes nothing.
    Check {
        path: String,
    },
    Multi(Vec<Txn>),
}

/// What applying one txn produced, for the reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxnResult {
    Session,
    Created { path: String, stat: Stat },
    Deleted,
    DataSet(Stat),
    AclSet(Stat),
    Checked,
    Multi(Vec<TxnResult>),
}

/// A change a watch may be waiting for, with the ACL of the node it concerns: a watcher that
/// may not READ that node is not told (ZooKeeper filters events the same way).
#[derive(Debug, Clone)]
pub struct Trigger {
    pub path: String,
    pub event: EventType,
    pub acl: Arc<[Acl]>,
}

fn trigger(tree: &DataTree, path: &str, event: EventType, triggers: &mut Vec<Trigger>) {
    let acl = tree
        .get(path)
        .map_or_else(|| Arc::from([]), |n| n.acl.clone());
    let path = path.to_string();
    triggers.push(Trigger { path, event, acl });
}

/// Applies `txn` at `zxid`, appending the watch triggers it causes to `triggers`.
pub fn apply(
    tree: &mut DataTree,
    txn: &Txn,
    zxid: i64,
    time: i64,
    triggers: &mut Vec<Trigger>,
) -> TxnResult {
    match txn {
        Txn::CreateSession { .. } => TxnResult::Session,
        Txn::CloseSession { session_id } => {
            let paths: Vec<String> = tree.ephemerals_of(*session_id).cloned().collect();
            for p in paths {
                delete(tree, &p, zxid, triggers);
            }
            TxnResult::Session
        }
        Txn::Create {
            path: p,
            data,
            acl,
            ephemeral_owner,
        } => {
            let stat = tree.create(p, data.clone(), acl.clone(), *ephemeral_owner, zxid, time);
            trigger(tree, p, EventType::NodeCreated, triggers);
            if let Some(parent) = path::parent(p) {
                trigger(tree, parent, EventType::NodeChildrenChanged, triggers);
            }
            TxnResult::Created {
                path: p.clone(),
                stat,
            }
        }
        Txn::Delete { path: p } => {
            delete(tree, p, zxid, triggers);
            TxnResult::Deleted
        }
        Txn::SetData {
            path: p,
            data,
            version,
        } => {
            let stat = tree.set_data(p, data.clone(), *version, zxid, time);
            trigger(tree, p, EventType::NodeDataChanged, triggers);
            TxnResult::DataSet(stat)
        }
        Txn::SetAcl {
            path: p,
            acl,
            aversion,
        } => TxnResult::AclSet(tree.set_acl(p, acl.clone(), *aversion)),
        Txn::Check { .. } => TxnResult::Checked,
        Txn::Multi(txns) => TxnResult::Multi(
            txns.iter()
                .map(|t| apply(tree, t, zxid, time, triggers))
                .collect(),
        ),
    }
}

fn delete(tree: &mut DataTree, p: &str, zxid: i64, triggers: &mut Vec<Trigger>) {
    // The deleted node's ACL decides who hears of the delete, so look before deleting.
    trigger(tree, p, EventType::NodeDeleted, triggers);
    tree.delete(p, zxid);
    if let Some(parent) = path::parent(p) {
        trigger(tree, parent, EventType::NodeChildrenChanged, triggers);
    }
}
