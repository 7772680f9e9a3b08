//! The operations of the differential test.
//!
//! An [`Op`] is plain data (paths, bytes, versions, a session slot), so a failing sequence can be
//! printed, replayed and shrunk without the generator (`generate.rs`) that drew it.

use std::fmt;

/// How many sessions the generator spreads its operations over.
pub(crate) const SLOTS: usize = 4;

/// The one slot that sets persistent watches; the others set one-shot watches only. ZooKeeper
/// 3.8 does not support two kinds of watch on one path of one connection (ZOOKEEPER-4466), so
/// the test never asks for that (the generator also keeps one addWatch mode per path).
pub(crate) const PERSISTENT_SLOT: usize = SLOTS - 1;

/// The users the digest scheme knows in this test: `(user, password)`.
pub(crate) const USERS: [(&str, &str); 2] = [("alice", "alice-secret"), ("bob", "bob-secret")];

/// The kind of node a create asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NodeKind {
    Persistent,
    Ephemeral,
    PersistentSequential,
    EphemeralSequential,
    Container,
    /// A TTL node; the TTL is long enough that no node expires during a run.
    Ttl,
    TtlSequential,
}

impl NodeKind {
    pub(crate) fn is_sequential(self) -> bool {
        matches!(
            self,
            NodeKind::PersistentSequential
                | NodeKind::EphemeralSequential
                | NodeKind::TtlSequential
        )
    }
}

/// The ACL a create or setAcl asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AclChoice {
    /// world:anyone, all permissions.
    AnyoneAll,
    /// world:anyone, read only.
    AnyoneRead,
    /// auth scheme, all permissions: the creator's own digest identities (`InvalidACL` for a
    /// session without any).
    CreatorAll,
    /// digest:alice, all permissions.
    Alice,
    /// digest:alice all, digest:bob read, world:anyone create|read.
    Mixed,
    /// ip:127.0.0.1 all: every loopback session passes.
    Loopback,
    /// ip:10.0.0.0/8 read plus digest:bob all: loopback sessions only pass as bob.
    ForeignNetOrBob,
    /// world:anyone with every permission but delete (children cannot be removed).
    NoDelete,
    /// A digest id that is not `user:hash`: `InvalidACL`.
    Malformed,
}

/// What a one-shot watch is set with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WatchKind {
    Exists,
    Data,
    Children,
}

/// One operation inside a `multi` transaction.
#[derive(Clone, Debug)]
pub(crate) enum SubOp {
    Create {
        path: String,
        data: Vec<u8>,
        kind: NodeKind,
    },
    Delete {
        path: String,
        version: Option<i32>,
    },
    SetData {
        path: String,
        data: Vec<u8>,
        version: Option<i32>,
    },
    Check {
        path: String,
        version: i32,
    },
}

/// One operation inside a `multiRead`.
#[derive(Clone, Debug)]
pub(crate) enum ReadOp {
    GetData(String),
    GetChildren(String),
}

/// One step of a run. `s` is the session slot (0..[`SLOTS`]) that performs it.
#[derive(Clone, Debug)]
pub(crate) enum Op {
    Create {
        s: usize,
        path: String,
        data: Vec<u8>,
        kind: NodeKind,
        acl: AclChoice,
    },
    Delete {
        s: usize,
        path: String,
        version: Option<i32>,
    },
    SetData {
        s: usize,
        path: String,
        data: Vec<u8>,
        version: Option<i32>,
    },
    GetData {
        s: usize,
        path: String,
    },
    Exists {
        s: usize,
        path: String,
    },
    /// getChildren (opcode 8): names only.
    ListChildren {
        s: usize,
        path: String,
    },
    /// getChildren2 (opcode 12): names and the parent's stat.
    GetChildren {
        s: usize,
        path: String,
    },
    GetAcl {
        s: usize,
        path: String,
    },
    SetAcl {
        s: usize,
        path: String,
        acl: AclChoice,
        version: Option<i32>,
    },
    Multi {
        s: usize,
        ops: Vec<SubOp>,
    },
    MultiRead {
        s: usize,
        ops: Vec<ReadOp>,
    },
    GetEphemerals {
        s: usize,
        prefix: String,
    },
    AllChildrenNumber {
        s: usize,
        path: String,
    },
    Sync {
        s: usize,
        path: String,
    },
    /// addauth digest for [`USERS`]`[user]`.
    AddAuth {
        s: usize,
        user: usize,
    },
    WhoAmI {
        s: usize,
    },
    /// A read that also leaves a one-shot watch behind.
    Watch {
        s: usize,
        path: String,
        kind: WatchKind,
    },
    /// addWatch: a persistent watch on `path`, or on its whole subtree when `recursive`.
    AddWatch {
        s: usize,
        path: String,
        recursive: bool,
    },
    /// Closes the slot's session (its ephemerals go, its watches go) and opens a new one in
    /// its place, with the same digest identities.
    CloseSession {
        s: usize,
    },
    /// Reads the whole tree through a separate session that holds every identity.
    Dump,
}

fn show_data(data: &[u8]) -> String {
    format!("{:?}", String::from_utf8_lossy(data))
}

fn show_version(version: Option<i32>) -> String {
    match version {
        None => "-1".to_string(),
        Some(v) => v.to_string(),
    }
}

impl fmt::Display for SubOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SubOp::Create { path, data, kind } => {
                write!(f, "create {path} {kind:?} {}", show_data(data))
            }
            SubOp::Delete { path, version } => {
                write!(f, "delete {path} v={}", show_version(*version))
            }
            SubOp::SetData {
                path,
                data,
                version,
            } => {
                write!(
                    f,
                    "setData {path} {} v={}",
                    show_data(data),
                    show_version(*version)
                )
            }
            SubOp::Check { path, version } => write!(f, "check {path} v={version}"),
        }
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::Create {
                s,
                path,
                data,
                kind,
                acl,
            } => {
                write!(
                    f,
                    "s{s} create {path} {kind:?} {} acl={acl:?}",
                    show_data(data)
                )
            }
            Op::Delete { s, path, version } => {
                write!(f, "s{s} delete {path} v={}", show_version(*version))
            }
            Op::SetData {
                s,
                path,
                data,
                version,
            } => {
                write!(
                    f,
                    "s{s} setData {path} {} v={}",
                    show_data(data),
                    show_version(*version)
                )
            }
            Op::GetData { s, path } => write!(f, "s{s} getData {path}"),
            Op::Exists { s, path } => write!(f, "s{s} exists {path}"),
            Op::ListChildren { s, path } => write!(f, "s{s} getChildren {path}"),
            Op::GetChildren { s, path } => write!(f, "s{s} getChildren2 {path}"),
            Op::GetAcl { s, path } => write!(f, "s{s} getAcl {path}"),
            Op::SetAcl {
                s,
                path,
                acl,
                version,
            } => {
                write!(f, "s{s} setAcl {path} {acl:?} v={}", show_version(*version))
            }
            Op::Multi { s, ops } => {
                let ops: Vec<String> = ops.iter().map(ToString::to_string).collect();
                write!(f, "s{s} multi [{}]", ops.join("; "))
            }
            Op::MultiRead { s, ops } => {
                let ops: Vec<String> = ops
                    .iter()
                    .map(|op| match op {
                        ReadOp::GetData(p) => format!("getData {p}"),
                        ReadOp::GetChildren(p) => format!("getChildren {p}"),
                    })
                    .collect();
                write!(f, "s{s} multiRead [{}]", ops.join("; "))
            }
            Op::GetEphemerals { s, prefix } => write!(f, "s{s} getEphemerals {prefix}"),
            Op::AllChildrenNumber { s, path } => write!(f, "s{s} getAllChildrenNumber {path}"),
            Op::Sync { s, path } => write!(f, "s{s} sync {path}"),
            Op::AddAuth { s, user } => write!(f, "s{s} addauth digest {}", USERS[*user].0),
            Op::WhoAmI { s } => write!(f, "s{s} whoami"),
            Op::Watch { s, path, kind } => write!(f, "s{s} watch {kind:?} {path}"),
            Op::AddWatch { s, path, recursive } => {
                let mode = if *recursive {
                    "PersistentRecursive"
                } else {
                    "Persistent"
                };
                write!(f, "s{s} addWatch {mode} {path}")
            }
            Op::CloseSession { s } => write!(f, "s{s} close session (and reopen)"),
            Op::Dump => write!(f, "dump tree"),
        }
    }
}
