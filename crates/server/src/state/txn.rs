//! Transactions: the state changes the pipeline logs and applies, one per write request.
//!
//! A txn is fully decided by `prep` (sequential names chosen, ACLs expanded, versions computed),
//! so applying it is deterministic: replaying the same txns in zxid order rebuilds the same tree.

use std::sync::Arc;

use bytes::Bytes;
use lockkeeper_proto::{Acl, EventType, Stat};

use crate::state::path;
use crate::state::tree::DataTree;

/// One logged state change, decided in full before it is applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Txn {
    /// Starts a session.
    CreateSession {
        /// The new session's id.
        session_id: i64,
        /// The negotiated timeout in milliseconds.
        timeout_ms: i32,
        /// The password a client presents to resume the session.
        passwd: [u8; 16],
    },
    /// Ends a session (close or expiry) and deletes its ephemerals.
    CloseSession {
        /// The session ended.
        session_id: i64,
    },
    /// Creates a node.
    Create {
        /// The full path, sequence suffix included.
        path: String,
        /// The initial data; `None` is jute's null.
        data: Option<Bytes>,
        /// The ACL, with `auth` entries already expanded to the session's identities.
        acl: Vec<Acl>,
        /// The owning session for an ephemeral node, 0 otherwise.
        ephemeral_owner: i64,
    },
    /// Deletes a node.
    Delete {
        /// The node deleted.
        path: String,
    },
    /// Replaces a node's data.
    SetData {
        /// The node changed.
        path: String,
        /// The new data; `None` is jute's null.
        data: Option<Bytes>,
        /// The node's data version after the change.
        version: i32,
    },
    /// Replaces a node's ACL.
    SetAcl {
        /// The node changed.
        path: String,
        /// The new ACL, expanded as for a create.
        acl: Vec<Acl>,
        /// The node's ACL version after the change.
        aversion: i32,
    },
    /// A version check inside a multi: changes nothing.
    Check {
        /// The node checked.
        path: String,
    },
    /// Several txns applied together, all or none.
    Multi(Vec<Txn>),
}

/// What applying one txn produced, for the reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TxnResult {
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
pub(crate) struct Trigger {
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
pub(crate) fn apply(
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

/// The binary form of a txn in the log: a tag, then the fields as jute values. Decoding checks
/// every length, so a damaged record is an error, never a panic.
mod codec {
    use bytes::Bytes;
    use lockkeeper_proto::{Acl, DecodeError, Jute, Reader};

    use super::Txn;

    const CREATE_SESSION: i32 = 1;
    const CLOSE_SESSION: i32 = 2;
    const CREATE: i32 = 3;
    const DELETE: i32 = 4;
    const SET_DATA: i32 = 5;
    const SET_ACL: i32 = 6;
    const CHECK: i32 = 7;
    const MULTI: i32 = 8;

    impl Txn {
        /// Appends the txn's log encoding to `out`.
        pub fn encode(&self, out: &mut Vec<u8>) {
            match self {
                Txn::CreateSession {
                    session_id,
                    timeout_ms,
                    passwd,
                } => {
                    CREATE_SESSION.write(out);
                    session_id.write(out);
                    timeout_ms.write(out);
                    Bytes::copy_from_slice(passwd).write(out);
                }
                Txn::CloseSession { session_id } => {
                    CLOSE_SESSION.write(out);
                    session_id.write(out);
                }
                Txn::Create {
                    path,
                    data,
                    acl,
                    ephemeral_owner,
                } => {
                    CREATE.write(out);
                    path.write(out);
                    data.write(out);
                    acl.write(out);
                    ephemeral_owner.write(out);
                }
                Txn::Delete { path } => {
                    DELETE.write(out);
                    path.write(out);
                }
                Txn::SetData {
                    path,
                    data,
                    version,
                } => {
                    SET_DATA.write(out);
                    path.write(out);
                    data.write(out);
                    version.write(out);
                }
                Txn::SetAcl {
                    path,
                    acl,
                    aversion,
                } => {
                    SET_ACL.write(out);
                    path.write(out);
                    acl.write(out);
                    aversion.write(out);
                }
                Txn::Check { path } => {
                    CHECK.write(out);
                    path.write(out);
                }
                Txn::Multi(txns) => {
                    MULTI.write(out);
                    (txns.len() as i32).write(out);
                    for txn in txns {
                        txn.encode(out);
                    }
                }
            }
        }

        /// Reads one txn written by [`Txn::encode`].
        pub fn decode(r: &mut Reader) -> Result<Txn, DecodeError> {
            Ok(match r.read_i32()? {
                CREATE_SESSION => {
                    let session_id = r.read_i64()?;
                    let timeout_ms = r.read_i32()?;
                    let raw = r.read_buffer()?;
                    let mut passwd = [0u8; 16];
                    if raw.len() != passwd.len() {
                        return Err(DecodeError::Truncated { needed: 16 });
                    }
                    passwd.copy_from_slice(&raw);
                    Txn::CreateSession {
                        session_id,
                        timeout_ms,
                        passwd,
                    }
                }
                CLOSE_SESSION => Txn::CloseSession {
                    session_id: r.read_i64()?,
                },
                CREATE => Txn::Create {
                    path: r.read_string()?,
                    data: Jute::read(r)?,
                    acl: Vec::<Acl>::read(r)?,
                    ephemeral_owner: r.read_i64()?,
                },
                DELETE => Txn::Delete {
                    path: r.read_string()?,
                },
                SET_DATA => Txn::SetData {
                    path: r.read_string()?,
                    data: Jute::read(r)?,
                    version: r.read_i32()?,
                },
                SET_ACL => Txn::SetAcl {
                    path: r.read_string()?,
                    acl: Vec::<Acl>::read(r)?,
                    aversion: r.read_i32()?,
                },
                CHECK => Txn::Check {
                    path: r.read_string()?,
                },
                MULTI => {
                    let count = r.read_i32()?;
                    if count < 0 || count as usize > r.remaining() {
                        return Err(DecodeError::NegativeLength(count));
                    }
                    (0..count)
                        .map(|_| Txn::decode(r))
                        .collect::<Result<_, _>>()
                        .map(Txn::Multi)?
                }
                other => return Err(DecodeError::UnknownOpCode(other)),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockkeeper_proto::Reader;

    #[test]
    fn every_txn_round_trips_through_its_log_encoding() {
        let txns = vec![
            Txn::CreateSession {
                session_id: 42,
                timeout_ms: 4000,
                passwd: [7; 16],
            },
            Txn::CloseSession { session_id: 42 },
            Txn::Create {
                path: "/a".into(),
                data: None,
                acl: crate::state::acl::open_acl(),
                ephemeral_owner: 42,
            },
            Txn::Create {
                path: "/b".into(),
                data: Some(Bytes::from_static(b"x")),
                acl: vec![],
                ephemeral_owner: 0,
            },
            Txn::Delete { path: "/a".into() },
            Txn::SetData {
                path: "/b".into(),
                data: Some(Bytes::from_static(b"yz")),
                version: 3,
            },
            Txn::SetAcl {
                path: "/b".into(),
                acl: crate::state::acl::open_acl(),
                aversion: 1,
            },
            Txn::Multi(vec![
                Txn::Check { path: "/b".into() },
                Txn::Delete { path: "/b".into() },
            ]),
        ];
        for txn in txns {
            let mut bytes = Vec::new();
            txn.encode(&mut bytes);
            let decoded = Txn::decode(&mut Reader::new(Bytes::from(bytes))).unwrap();
            assert_eq!(decoded, txn);
        }
    }

    #[test]
    fn damaged_txns_fail_to_decode() {
        let mut bytes = Vec::new();
        Txn::Delete {
            path: "/abc".into(),
        }
        .encode(&mut bytes);
        bytes.truncate(bytes.len() - 1);
        assert!(Txn::decode(&mut Reader::new(Bytes::from(bytes))).is_err());
        assert!(Txn::decode(&mut Reader::new(Bytes::from_static(&[0, 0, 0, 99]))).is_err());
    }
}
