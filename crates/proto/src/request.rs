//! A request frame decoded into a typed [`Request`], one variant per operation.
//!
//! Decoding only checks the encoding; whether a path is valid or a node exists is the server's
//! business, so that it can answer with ZooKeeper's error code for each case.

use bytes::Bytes;

use crate::codes::OpCode;
use crate::jute::{DecodeError, Jute, Reader};
use crate::records::*;

/// Any create: the four create opcodes differ only in what they reply and which flags they allow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateOp {
    /// Which create it was: decides the reply (path only, or path and stat) and allowed modes.
    pub op: OpCode,
    /// The node to create (the prefix of the name, for sequential nodes).
    pub path: String,
    /// `None` is jute's null, kept apart from empty data as ZooKeeper keeps it.
    pub data: Option<Bytes>,
    /// The node's ACL; must not be empty.
    pub acl: Vec<Acl>,
    /// Raw create flags; the server maps them to a `CreateMode` and rejects unknown ones.
    pub flags: i32,
    /// Time to live in ms, only for `CreateTtl` (0 otherwise).
    pub ttl: i64,
}

/// An operation inside a write `multi`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MultiOp {
    /// Create a node (any create opcode).
    Create(CreateOp),
    /// Delete a node at an expected version.
    Delete(PathVersionRequest),
    /// Replace a node's data at an expected version.
    SetData(SetDataRequest),
    /// Fail the whole multi unless the node has the expected version.
    Check(PathVersionRequest),
}

/// An operation inside a `multiRead`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadOp {
    /// List a node's children.
    GetChildren(PathWatchRequest),
    /// Read a node's data and stat.
    GetData(PathWatchRequest),
}

/// A client request after the handshake, by operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// create, create2, createContainer or createTTL.
    Create(CreateOp),
    /// Delete a node, optionally at an expected version.
    Delete(PathVersionRequest),
    /// Read a node's stat, optionally leaving a watch even if it is absent.
    Exists(PathWatchRequest),
    /// Read a node's data and stat, optionally leaving a data watch.
    GetData(PathWatchRequest),
    /// Replace a node's data, optionally at an expected version.
    SetData(SetDataRequest),
    /// Read a node's ACL and stat.
    GetAcl(PathRequest),
    /// Replace a node's ACL, optionally at an expected ACL version.
    SetAcl(SetAclRequest),
    /// List a node's children, optionally leaving a child watch.
    GetChildren(PathWatchRequest),
    /// List a node's children with the parent's stat.
    GetChildren2(PathWatchRequest),
    /// Wait until the server has caught up with the leader.
    Sync(PathRequest),
    /// Check a node's version on its own, as inside a multi.
    Check(PathVersionRequest),
    /// Write operations applied atomically.
    Multi(Vec<MultiOp>),
    /// Reads answered together, each with its own result.
    MultiRead(Vec<ReadOp>),
    /// Keeps an idle session alive.
    Ping,
    /// Adds credentials to the session.
    Auth(AuthPacket),
    /// One step of a SASL exchange (DIGEST-MD5: see [`crate::sasl`]).
    Sasl(SaslToken),
    /// Both SetWatches and SetWatches2; the old form has no persistent watches.
    SetWatches(SetWatches2),
    /// Ask whether the session holds a watch of a type on a path.
    CheckWatches(PathWatcherTypeRequest),
    /// Remove the session's watches of a type on a path.
    RemoveWatches(PathWatcherTypeRequest),
    /// Add a persistent or persistent-recursive watch.
    AddWatch(AddWatchRequest),
    /// List the session's ephemeral nodes under a prefix.
    GetEphemerals(PathRequest),
    /// Count the descendants of a node.
    GetAllChildrenNumber(PathRequest),
    /// List the session's authenticated identities.
    WhoAmI,
    /// End the session, deleting its ephemeral nodes.
    CloseSession,
    /// Known to ZooKeeper but not served by Keeper (reconfig, ...): answered Unimplemented.
    Unsupported(OpCode),
}

impl Request {
    /// Decodes the body that followed a [`RequestHeader`] with opcode `op`.
    pub fn decode(op: i32, body: Bytes) -> Result<Request, DecodeError> {
        let op = OpCode::try_from(op).map_err(DecodeError::UnknownOpCode)?;
        let mut r = Reader::new(body);
        let request = match op {
            OpCode::Create | OpCode::Create2 | OpCode::CreateContainer | OpCode::CreateTtl => {
                Request::Create(read_create(op, &mut r)?)
            }
            OpCode::Delete => Request::Delete(Jute::read(&mut r)?),
            OpCode::Exists => Request::Exists(Jute::read(&mut r)?),
            OpCode::GetData => Request::GetData(Jute::read(&mut r)?),
            OpCode::SetData => Request::SetData(Jute::read(&mut r)?),
            OpCode::GetAcl => Request::GetAcl(Jute::read(&mut r)?),
            OpCode::SetAcl => Request::SetAcl(Jute::read(&mut r)?),
            OpCode::GetChildren => Request::GetChildren(Jute::read(&mut r)?),
            OpCode::GetChildren2 => Request::GetChildren2(Jute::read(&mut r)?),
            OpCode::Sync => Request::Sync(Jute::read(&mut r)?),
            OpCode::Check => Request::Check(Jute::read(&mut r)?),
            OpCode::Multi => Request::Multi(read_multi(&mut r)?),
            OpCode::MultiRead => Request::MultiRead(read_multi_read(&mut r)?),
            OpCode::Ping => Request::Ping,
            OpCode::Auth => Request::Auth(Jute::read(&mut r)?),
            OpCode::Sasl => Request::Sasl(Jute::read(&mut r)?),
            OpCode::SetWatches => {
                let old: SetWatches = Jute::read(&mut r)?;
                Request::SetWatches(SetWatches2 {
                    relative_zxid: old.relative_zxid,
                    data_watches: old.data_watches,
                    exist_watches: old.exist_watches,
                    child_watches: old.child_watches,
                    ..SetWatches2::default()
                })
            }
            OpCode::SetWatches2 => Request::SetWatches(Jute::read(&mut r)?),
            OpCode::CheckWatches => Request::CheckWatches(Jute::read(&mut r)?),
            OpCode::RemoveWatches => Request::RemoveWatches(Jute::read(&mut r)?),
            OpCode::AddWatch => Request::AddWatch(Jute::read(&mut r)?),
            OpCode::GetEphemerals => Request::GetEphemerals(Jute::read(&mut r)?),
            OpCode::GetAllChildrenNumber => Request::GetAllChildrenNumber(Jute::read(&mut r)?),
            OpCode::WhoAmI => Request::WhoAmI,
            OpCode::CloseSession => Request::CloseSession,
            OpCode::Reconfig | OpCode::DeleteContainer => {
                return Ok(Request::Unsupported(op));
            }
            // ZooKeeper treats these two as unknown numbers; createSession it knows, but only
            // as the connect request, so a client sending it later gets a decoding error.
            OpCode::Notification | OpCode::Error => {
                return Err(DecodeError::UnknownOpCode(op.code()));
            }
            OpCode::CreateSession => return Err(DecodeError::UnexpectedOpCode(op.code())),
        };
        // Bytes after the record are ignored, as ZooKeeper ignores them.
        Ok(request)
    }

    /// True for operations that change state and so get a zxid of their own.
    pub fn is_write(&self) -> bool {
        matches!(
            self,
            Request::Create(_)
                | Request::Delete(_)
                | Request::SetData(_)
                | Request::SetAcl(_)
                | Request::Multi(_)
                | Request::CloseSession
        )
    }

    /// Encodes the body (everything after the header), for clients and tests.
    pub fn encode_body(&self, out: &mut Vec<u8>) {
        match self {
            Request::Create(c) => write_create(c, out),
            Request::Delete(r) | Request::Check(r) => r.write(out),
            Request::Exists(r)
            | Request::GetData(r)
            | Request::GetChildren(r)
            | Request::GetChildren2(r) => r.write(out),
            Request::SetData(r) => r.write(out),
            Request::GetAcl(r)
            | Request::Sync(r)
            | Request::GetEphemerals(r)
            | Request::GetAllChildrenNumber(r) => r.write(out),
            Request::SetAcl(r) => r.write(out),
            Request::Multi(ops) => {
                for op in ops {
                    let header = |code: OpCode| MultiHeader {
                        op: code.code(),
                        done: false,
                        err: -1,
                    };
                    match op {
                        MultiOp::Create(c) => {
                            header(c.op).write(out);
                            write_create(c, out);
                        }
                        MultiOp::Delete(r) => {
                            header(OpCode::Delete).write(out);
                            r.write(out);
                        }
                        MultiOp::SetData(r) => {
                            header(OpCode::SetData).write(out);
                            r.write(out);
                        }
                        MultiOp::Check(r) => {
                            header(OpCode::Check).write(out);
                            r.write(out);
                        }
                    }
                }
                MULTI_END.write(out);
            }
            Request::MultiRead(ops) => {
                for op in ops {
                    let (code, r) = match op {
                        ReadOp::GetChildren(r) => (OpCode::GetChildren, r),
                        ReadOp::GetData(r) => (OpCode::GetData, r),
                    };
                    MultiHeader {
                        op: code.code(),
                        done: false,
                        err: -1,
                    }
                    .write(out);
                    r.write(out);
                }
                MULTI_END.write(out);
            }
            Request::Auth(r) => r.write(out),
            Request::Sasl(r) => r.write(out),
            Request::SetWatches(r) => r.write(out),
            Request::CheckWatches(r) | Request::RemoveWatches(r) => r.write(out),
            Request::AddWatch(r) => r.write(out),
            Request::Ping | Request::WhoAmI | Request::CloseSession | Request::Unsupported(_) => {}
        }
    }

    /// The opcode this request is sent with.
    pub fn op_code(&self) -> OpCode {
        match self {
            Request::Create(c) => c.op,
            Request::Delete(_) => OpCode::Delete,
            Request::Exists(_) => OpCode::Exists,
            Request::GetData(_) => OpCode::GetData,
            Request::SetData(_) => OpCode::SetData,
            Request::GetAcl(_) => OpCode::GetAcl,
            Request::SetAcl(_) => OpCode::SetAcl,
            Request::GetChildren(_) => OpCode::GetChildren,
            Request::GetChildren2(_) => OpCode::GetChildren2,
            Request::Sync(_) => OpCode::Sync,
            Request::Check(_) => OpCode::Check,
            Request::Multi(_) => OpCode::Multi,
            Request::MultiRead(_) => OpCode::MultiRead,
            Request::Ping => OpCode::Ping,
            Request::Auth(_) => OpCode::Auth,
            Request::Sasl(_) => OpCode::Sasl,
            Request::SetWatches(_) => OpCode::SetWatches2,
            Request::CheckWatches(_) => OpCode::CheckWatches,
            Request::RemoveWatches(_) => OpCode::RemoveWatches,
            Request::AddWatch(_) => OpCode::AddWatch,
            Request::GetEphemerals(_) => OpCode::GetEphemerals,
            Request::GetAllChildrenNumber(_) => OpCode::GetAllChildrenNumber,
            Request::WhoAmI => OpCode::WhoAmI,
            Request::CloseSession => OpCode::CloseSession,
            Request::Unsupported(op) => *op,
        }
    }
}

/// The header that ends a multi request and a multi response.
pub const MULTI_END: MultiHeader = MultiHeader {
    op: -1,
    done: true,
    err: -1,
};

fn read_create(op: OpCode, r: &mut Reader) -> Result<CreateOp, DecodeError> {
    if op == OpCode::CreateTtl {
        let req: CreateTtlRequest = Jute::read(r)?;
        Ok(CreateOp {
            op,
            path: req.path,
            data: req.data,
            acl: req.acl,
            flags: req.flags,
            ttl: req.ttl,
        })
    } else {
        let req: CreateRequest = Jute::read(r)?;
        Ok(CreateOp {
            op,
            path: req.path,
            data: req.data,
            acl: req.acl,
            flags: req.flags,
            ttl: 0,
        })
    }
}

fn write_create(c: &CreateOp, out: &mut Vec<u8>) {
    c.path.write(out);
    c.data.write(out);
    c.acl.write(out);
    c.flags.write(out);
    if c.op == OpCode::CreateTtl {
        c.ttl.write(out);
    }
}

fn read_multi(r: &mut Reader) -> Result<Vec<MultiOp>, DecodeError> {
    let mut ops = Vec::new();
    loop {
        let header = MultiHeader::read(r)?;
        if header.done {
            return Ok(ops);
        }
        let op = OpCode::try_from(header.op).map_err(DecodeError::UnknownOpCode)?;
        ops.push(match op {
            OpCode::Create | OpCode::Create2 | OpCode::CreateContainer | OpCode::CreateTtl => {
                MultiOp::Create(read_create(op, r)?)
            }
            OpCode::Delete => MultiOp::Delete(Jute::read(r)?),
            OpCode::SetData => MultiOp::SetData(Jute::read(r)?),
            OpCode::Check => MultiOp::Check(Jute::read(r)?),
            other => return Err(DecodeError::UnexpectedOpCode(other.code())),
        });
    }
}

fn read_multi_read(r: &mut Reader) -> Result<Vec<ReadOp>, DecodeError> {
    let mut ops = Vec::new();
    loop {
        let header = MultiHeader::read(r)?;
        if header.done {
            return Ok(ops);
        }
        ops.push(
            match OpCode::try_from(header.op).map_err(DecodeError::UnknownOpCode)? {
                OpCode::GetChildren => ReadOp::GetChildren(Jute::read(r)?),
                OpCode::GetData => ReadOp::GetData(Jute::read(r)?),
                other => return Err(DecodeError::UnexpectedOpCode(other.code())),
            },
        );
    }
}
