//! The records of the client protocol, field for field as `zookeeper.jute` declares them.
//!
//! Requests with the same layout share one struct (e.g. exists, getData and getChildren are all
//! a path plus a watch flag); the aliases keep ZooKeeper's names for readers who know them.

use bytes::Bytes;

use crate::jute::{DecodeError, Jute, Reader};
use crate::record;

record! {
    /// An identity within an ACL scheme, e.g. `digest` / `alice:hash`.
    pub struct Id { pub scheme: String, pub id: String }
}

record! {
    pub struct Acl { pub perms: i32, pub id: Id }
}

/// `world:anyone` with every permission: ZooKeeper's `OPEN_ACL_UNSAFE`, what clients give
/// nodes when they ask for no protection.
pub fn open_acl() -> Vec<Acl> {
    vec![Acl {
        perms: crate::codes::perms::ALL,
        id: Id {
            scheme: "world".into(),
            id: "anyone".into(),
        },
    }]
}

record! {
    /// Node metadata as clients see it.
    pub struct Stat {
        pub czxid: i64,
        pub mzxid: i64,
        pub ctime: i64,
        pub mtime: i64,
        pub version: i32,
        pub cversion: i32,
        pub aversion: i32,
        pub ephemeral_owner: i64,
        pub data_length: i32,
        pub num_children: i32,
        pub pzxid: i64,
    }
}

/// The first frame of every connection. Newer clients append a `readOnly` flag; older ones do
/// not, so it is optional on the wire and remembered so the response can mirror it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConnectRequest {
    pub protocol_version: i32,
    pub last_zxid_seen: i64,
    pub timeout: i32,
    pub session_id: i64,
    pub passwd: Bytes,
    pub read_only: Option<bool>,
}

impl ConnectRequest {
    /// What a client sends to start a new session: no session id, a zero password, nothing
    /// seen yet, and (as current clients send) not read-only.
    pub fn new_session(timeout_ms: i32) -> ConnectRequest {
        ConnectRequest {
            protocol_version: 0,
            last_zxid_seen: 0,
            timeout: timeout_ms,
            session_id: 0,
            passwd: Bytes::from_static(&[0; 16]),
            read_only: Some(false),
        }
    }
}

impl Jute for ConnectRequest {
    fn write(&self, out: &mut Vec<u8>) {
        self.protocol_version.write(out);
        self.last_zxid_seen.write(out);
        self.timeout.write(out);
        self.session_id.write(out);
        self.passwd.write(out);
        write_trailing_flag(self.read_only, out);
    }
    fn read(r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(ConnectRequest {
            protocol_version: r.read_i32()?,
            last_zxid_seen: r.read_i64()?,
            timeout: r.read_i32()?,
            session_id: r.read_i64()?,
            passwd: r.read_buffer()?,
            read_only: read_trailing_flag(r)?,
        })
    }
}

/// The optional `readOnly` byte that ends connect records: present only if the peer sent it.
fn read_trailing_flag(r: &mut Reader) -> Result<Option<bool>, DecodeError> {
    if r.remaining() == 0 {
        return Ok(None);
    }
    r.read_bool().map(Some)
}

fn write_trailing_flag(flag: Option<bool>, out: &mut Vec<u8>) {
    if let Some(flag) = flag {
        flag.write(out);
    }
}

/// The server's answer to [`ConnectRequest`]; `timeout` 0 means the session is gone.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConnectResponse {
    pub protocol_version: i32,
    pub timeout: i32,
    pub session_id: i64,
    pub passwd: Bytes,
    pub read_only: Option<bool>,
}

impl Jute for ConnectResponse {
    fn write(&self, out: &mut Vec<u8>) {
        self.protocol_version.write(out);
        self.timeout.write(out);
        self.session_id.write(out);
        self.passwd.write(out);
        write_trailing_flag(self.read_only, out);
    }
    fn read(r: &mut Reader) -> Result<Self, DecodeError> {
        Ok(ConnectResponse {
            protocol_version: r.read_i32()?,
            timeout: r.read_i32()?,
            session_id: r.read_i64()?,
            passwd: r.read_buffer()?,
            read_only: read_trailing_flag(r)?,
        })
    }
}

record! {
    pub struct RequestHeader { pub xid: i32, pub op: i32 }
}

record! {
    pub struct ReplyHeader { pub xid: i32, pub zxid: i64, pub err: i32 }
}

record! {
    /// Precedes each operation (and each result) inside a multi; `done` marks the end.
    pub struct MultiHeader { pub op: i32, pub done: bool, pub err: i32 }
}

record! {
    pub struct AuthPacket { pub auth_type: i32, pub scheme: String, pub auth: Bytes }
}

record! {
    /// exists, getData, getChildren and getChildren2 all send a path and a watch flag.
    pub struct PathWatchRequest { pub path: String, pub watch: bool }
}
pub type ExistsRequest = PathWatchRequest;
pub type GetDataRequest = PathWatchRequest;
pub type GetChildrenRequest = PathWatchRequest;
pub type GetChildren2Request = PathWatchRequest;

record! {
    /// getACL, sync, getAllChildrenNumber and getEphemerals (a prefix) send only a path.
    pub struct PathRequest { pub path: String }
}
pub type GetAclRequest = PathRequest;
pub type SyncRequest = PathRequest;
pub type SyncResponse = PathRequest;
pub type GetAllChildrenNumberRequest = PathRequest;
pub type GetEphemeralsRequest = PathRequest;
pub type CreateResponse = PathRequest;

record! {
    pub struct SetDataRequest { pub path: String, pub data: Option<Bytes>, pub version: i32 }
}

record! {
    pub struct CreateRequest { pub path: String, pub data: Option<Bytes>, pub acl: Vec<Acl>, pub flags: i32 }
}

record! {
    pub struct CreateTtlRequest {
        pub path: String,
        pub data: Option<Bytes>,
        pub acl: Vec<Acl>,
        pub flags: i32,
        pub ttl: i64,
    }
}

record! {
    /// delete and check both send a path and an expected version.
    pub struct PathVersionRequest { pub path: String, pub version: i32 }
}
pub type DeleteRequest = PathVersionRequest;
pub type CheckVersionRequest = PathVersionRequest;

record! {
    pub struct SetAclRequest { pub path: String, pub acl: Vec<Acl>, pub version: i32 }
}

record! {
    pub struct AddWatchRequest { pub path: String, pub mode: i32 }
}

record! {
    /// checkWatches and removeWatches send a path and a [`crate::WatcherType`].
    pub struct PathWatcherTypeRequest { pub path: String, pub watcher_type: i32 }
}
pub type CheckWatchesRequest = PathWatcherTypeRequest;
pub type RemoveWatchesRequest = PathWatcherTypeRequest;

record! {
    pub struct SetWatches {
        pub relative_zxid: i64,
        pub data_watches: Vec<String>,
        pub exist_watches: Vec<String>,
        pub child_watches: Vec<String>,
    }
}

record! {
    pub struct SetWatches2 {
        pub relative_zxid: i64,
        pub data_watches: Vec<String>,
        pub exist_watches: Vec<String>,
        pub child_watches: Vec<String>,
        pub persistent_watches: Vec<String>,
        pub persistent_recursive_watches: Vec<String>,
    }
}

record! {
    pub struct WatcherEvent { pub event_type: i32, pub state: i32, pub path: String }
}

record! {
    pub struct ErrorResponse { pub err: i32 }
}

record! {
    /// setData, setACL and exists answer with just a Stat.
    pub struct StatResponse { pub stat: Stat }
}
pub type SetDataResponse = StatResponse;
pub type SetAclResponse = StatResponse;
pub type ExistsResponse = StatResponse;

record! {
    pub struct Create2Response { pub path: String, pub stat: Stat }
}

record! {
    pub struct GetDataResponse { pub data: Option<Bytes>, pub stat: Stat }
}

record! {
    /// getChildren's children, and getEphemerals' paths.
    pub struct StringsResponse { pub strings: Vec<String> }
}
pub type GetChildrenResponse = StringsResponse;
pub type GetEphemeralsResponse = StringsResponse;

record! {
    pub struct GetChildren2Response { pub children: Vec<String>, pub stat: Stat }
}

record! {
    pub struct GetAllChildrenNumberResponse { pub total_number: i32 }
}

record! {
    pub struct GetAclResponse { pub acl: Vec<Acl>, pub stat: Stat }
}

record! {
    pub struct ClientInfo { pub auth_scheme: String, pub user: String }
}

record! {
    pub struct WhoAmIResponse { pub client_info: Vec<ClientInfo> }
}
