//! The records of the client protocol, field for field as `zookeeper.jute` declares them.
//!
//! Requests with the same layout share one struct (e.g. exists, getData and getChildren are all
//! a path plus a watch flag); the aliases keep ZooKeeper's names for readers who know them.

use bytes::Bytes;

use crate::jute::{DecodeError, Jute, Reader};
use crate::record;

record! {
    /// An identity within an ACL scheme, e.g. `digest` / `alice:hash`.
    pub struct Id {
        /// The authentication scheme: `world`, `auth`, `digest`, `ip`, ...
        pub scheme: String,
        /// The identity in that scheme's syntax (`anyone`, `user:base64(sha1)`, an address).
        pub id: String,
    }
}

record! {
    /// One entry of a node's access control list: what `id` may do.
    pub struct Acl {
        /// The granted permissions, a sum of [`crate::perms`] bits.
        pub perms: i32,
        /// Whom the permissions are granted to.
        pub id: Id,
    }
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
        /// The zxid of the transaction that created the node.
        pub czxid: i64,
        /// The zxid of the transaction that last changed the node's data.
        pub mzxid: i64,
        /// When the node was created, in milliseconds since the Unix epoch.
        pub ctime: i64,
        /// When the node's data last changed, in milliseconds since the Unix epoch.
        pub mtime: i64,
        /// The number of changes to the node's data (what setData and delete compare).
        pub version: i32,
        /// The number of changes to the node's children.
        pub cversion: i32,
        /// The number of changes to the node's ACL (what setACL compares).
        pub aversion: i32,
        /// The session id of the owner if the node is ephemeral, 0 otherwise.
        pub ephemeral_owner: i64,
        /// The length of the node's data in bytes.
        pub data_length: i32,
        /// The number of children of the node.
        pub num_children: i32,
        /// The zxid of the transaction that last created or deleted a child of the node.
        pub pzxid: i64,
    }
}

/// The first frame of every connection. Newer clients append a `readOnly` flag; older ones do
/// not, so it is optional on the wire and remembered so the response can mirror it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConnectRequest {
    /// The protocol version; 0 for every ZooKeeper client to date.
    pub protocol_version: i32,
    /// The highest zxid the client has seen: a server behind it must refuse the connection.
    pub last_zxid_seen: i64,
    /// The session timeout the client asks for, in milliseconds.
    pub timeout: i32,
    /// The session to resume, or 0 for a new one.
    pub session_id: i64,
    /// The password of the session to resume (16 bytes), zeros for a new one.
    pub passwd: Bytes,
    /// Whether the client accepts a read-only server; `None` if the client did not send it.
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

/// Writes the `readOnly` byte only if it was there, so a reply mirrors the request's form.
fn write_trailing_flag(flag: Option<bool>, out: &mut Vec<u8>) {
    if let Some(flag) = flag {
        flag.write(out);
    }
}

/// The server's answer to [`ConnectRequest`]; `timeout` 0 means the session is gone.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConnectResponse {
    /// The protocol version; 0.
    pub protocol_version: i32,
    /// The negotiated session timeout in milliseconds; 0 if the session expired.
    pub timeout: i32,
    /// The id of the new or resumed session.
    pub session_id: i64,
    /// The session's password, presented again to resume the session on another connection.
    pub passwd: Bytes,
    /// Whether the server is read-only; `None` if the client did not send the flag.
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
    /// Precedes every request after the connect handshake.
    pub struct RequestHeader {
        /// The client's number for the request, echoed in the reply; negative for special
        /// requests (ping, auth, setWatches).
        pub xid: i32,
        /// The request type, an [`crate::OpCode`].
        pub op: i32,
    }
}

record! {
    /// Precedes every reply and watch notification.
    pub struct ReplyHeader {
        /// The xid of the request answered, or [`crate::XID_NOTIFICATION`] for an event.
        pub xid: i32,
        /// The last zxid the server had applied when it replied.
        pub zxid: i64,
        /// The result, an [`crate::ErrorCode`]; 0 on success, and then a body follows.
        pub err: i32,
    }
}

record! {
    /// Precedes each operation (and each result) inside a multi; `done` marks the end.
    pub struct MultiHeader {
        /// The operation's [`crate::OpCode`]; -1 in the closing header and for a failed result.
        pub op: i32,
        /// True only in the closing header.
        pub done: bool,
        /// In results, the operation's [`crate::ErrorCode`]; -1 in requests.
        pub err: i32,
    }
}

record! {
    /// One step of a SASL exchange (opcode [`crate::OpCode::Sasl`]): ZooKeeper's
    /// `GetSASLRequest` from the client, and its `SetSASLResponse` answer, alike on the wire. A
    /// null token (length -1) is what a failed step is answered with.
    pub struct SaslToken {
        /// The mechanism's bytes for this step.
        pub token: Option<Bytes>,
    }
}

record! {
    /// Adds credentials to the session (xid [`crate::XID_AUTH`]).
    pub struct AuthPacket {
        /// Unused by ZooKeeper; clients send 0.
        pub auth_type: i32,
        /// The authentication scheme, e.g. `digest`.
        pub scheme: String,
        /// The credentials in the scheme's syntax, e.g. `user:password` for digest.
        pub auth: Bytes,
    }
}

record! {
    /// exists, getData, getChildren and getChildren2 all send a path and a watch flag.
    pub struct PathWatchRequest {
        /// The node read.
        pub path: String,
        /// Whether to leave a watch that fires once on the node's next change.
        pub watch: bool,
    }
}
/// exists: a path and a watch flag.
pub type ExistsRequest = PathWatchRequest;
/// getData: a path and a watch flag.
pub type GetDataRequest = PathWatchRequest;
/// getChildren: a path and a watch flag.
pub type GetChildrenRequest = PathWatchRequest;
/// getChildren2: a path and a watch flag.
pub type GetChildren2Request = PathWatchRequest;

record! {
    /// getACL, sync, getAllChildrenNumber and getEphemerals (a prefix) send only a path.
    pub struct PathRequest {
        /// The node addressed (a path prefix for getEphemerals).
        pub path: String,
    }
}
/// getACL: the node whose ACL to read.
pub type GetAclRequest = PathRequest;
/// sync: the path whose server to bring up to date.
pub type SyncRequest = PathRequest;
/// sync's reply: the path it was given.
pub type SyncResponse = PathRequest;
/// getAllChildrenNumber: the node whose descendants to count.
pub type GetAllChildrenNumberRequest = PathRequest;
/// getEphemerals: the prefix under which to list the session's ephemeral nodes.
pub type GetEphemeralsRequest = PathRequest;
/// create's reply: the path created (with its sequence suffix, if any).
pub type CreateResponse = PathRequest;

record! {
    /// Replaces a node's data.
    pub struct SetDataRequest {
        /// The node to change.
        pub path: String,
        /// The new data; `None` is jute's null.
        pub data: Option<Bytes>,
        /// The data version the node must have, or -1 for any.
        pub version: i32,
    }
}

record! {
    /// create, create2 and createContainer.
    pub struct CreateRequest {
        /// The node to create (the prefix of the name, for sequential nodes).
        pub path: String,
        /// The node's initial data; `None` is jute's null.
        pub data: Option<Bytes>,
        /// The node's ACL; must not be empty.
        pub acl: Vec<Acl>,
        /// The [`crate::CreateMode`].
        pub flags: i32,
    }
}

record! {
    /// createTTL: a create with a time to live.
    pub struct CreateTtlRequest {
        /// The node to create (the prefix of the name, for sequential nodes).
        pub path: String,
        /// The node's initial data; `None` is jute's null.
        pub data: Option<Bytes>,
        /// The node's ACL; must not be empty.
        pub acl: Vec<Acl>,
        /// The [`crate::CreateMode`], one of the TTL modes.
        pub flags: i32,
        /// How long, in milliseconds, the node may go without children or changes before the
        /// server deletes it.
        pub ttl: i64,
    }
}

record! {
    /// delete and check both send a path and an expected version.
    pub struct PathVersionRequest {
        /// The node addressed.
        pub path: String,
        /// The data version the node must have, or -1 for any.
        pub version: i32,
    }
}
/// delete: the node and the version it must have.
pub type DeleteRequest = PathVersionRequest;
/// check (in a multi): the node and the version it must have.
pub type CheckVersionRequest = PathVersionRequest;

record! {
    /// Replaces a node's ACL.
    pub struct SetAclRequest {
        /// The node to change.
        pub path: String,
        /// The new ACL; must not be empty.
        pub acl: Vec<Acl>,
        /// The ACL version (`aversion`) the node must have, or -1 for any.
        pub version: i32,
    }
}

record! {
    /// Adds a watch that stays after it fires.
    pub struct AddWatchRequest {
        /// The node watched (and, for a recursive watch, everything below it).
        pub path: String,
        /// The [`crate::AddWatchMode`].
        pub mode: i32,
    }
}

record! {
    /// checkWatches and removeWatches send a path and a [`crate::WatcherType`].
    pub struct PathWatcherTypeRequest {
        /// The node whose watches are addressed.
        pub path: String,
        /// Which watches, a [`crate::WatcherType`].
        pub watcher_type: i32,
    }
}
/// checkWatches: does the session hold such a watch?
pub type CheckWatchesRequest = PathWatcherTypeRequest;
/// removeWatches: remove the session's watches of a type on a path.
pub type RemoveWatchesRequest = PathWatcherTypeRequest;

record! {
    /// Re-registers a reconnecting client's watches (xid [`crate::XID_SET_WATCHES`]).
    pub struct SetWatches {
        /// The last zxid the client saw: watches on nodes changed since fire at once.
        pub relative_zxid: i64,
        /// Paths with a data watch (from getData).
        pub data_watches: Vec<String>,
        /// Paths with an exist watch on an absent node (from exists).
        pub exist_watches: Vec<String>,
        /// Paths with a child watch (from getChildren).
        pub child_watches: Vec<String>,
    }
}

record! {
    /// [`SetWatches`] with the persistent watches of `addWatch`.
    pub struct SetWatches2 {
        /// The last zxid the client saw: watches on nodes changed since fire at once.
        pub relative_zxid: i64,
        /// Paths with a data watch (from getData).
        pub data_watches: Vec<String>,
        /// Paths with an exist watch on an absent node (from exists).
        pub exist_watches: Vec<String>,
        /// Paths with a child watch (from getChildren).
        pub child_watches: Vec<String>,
        /// Paths with a persistent watch.
        pub persistent_watches: Vec<String>,
        /// Paths with a persistent recursive watch.
        pub persistent_recursive_watches: Vec<String>,
    }
}

record! {
    /// The body of a watch notification.
    pub struct WatcherEvent {
        /// What happened, an [`crate::EventType`].
        pub event_type: i32,
        /// The connection state, a [`crate::KeeperState`].
        pub state: i32,
        /// The node the event is about; empty for a change of connection state.
        pub path: String,
    }
}

record! {
    /// A failed operation's result inside a multi reply.
    pub struct ErrorResponse {
        /// The operation's [`crate::ErrorCode`]; a failed multi reports one for every operation.
        pub err: i32,
    }
}

record! {
    /// setData, setACL and exists answer with just a Stat.
    pub struct StatResponse {
        /// The node's metadata (after the change, for setData and setACL).
        pub stat: Stat,
    }
}
/// setData's reply: the node's stat after the change.
pub type SetDataResponse = StatResponse;
/// setACL's reply: the node's stat after the change.
pub type SetAclResponse = StatResponse;
/// exists' reply: the node's stat (an absent node is the NoNode error instead).
pub type ExistsResponse = StatResponse;

record! {
    /// The reply of create2, createContainer and createTTL.
    pub struct Create2Response {
        /// The path created (with its sequence suffix, if any).
        pub path: String,
        /// The new node's metadata.
        pub stat: Stat,
    }
}

record! {
    /// getData's reply.
    pub struct GetDataResponse {
        /// The node's data; `None` is jute's null.
        pub data: Option<Bytes>,
        /// The node's metadata.
        pub stat: Stat,
    }
}

record! {
    /// getChildren's children, and getEphemerals' paths.
    pub struct StringsResponse {
        /// Child names (not full paths), or full paths for getEphemerals.
        pub strings: Vec<String>,
    }
}
/// getChildren's reply: the children's names.
pub type GetChildrenResponse = StringsResponse;
/// getEphemerals' reply: the paths of the session's ephemeral nodes.
pub type GetEphemeralsResponse = StringsResponse;

record! {
    /// getChildren2's reply.
    pub struct GetChildren2Response {
        /// The children's names (not full paths).
        pub children: Vec<String>,
        /// The parent's metadata.
        pub stat: Stat,
    }
}

record! {
    /// getAllChildrenNumber's reply.
    pub struct GetAllChildrenNumberResponse {
        /// The number of nodes below the path, at every depth.
        pub total_number: i32,
    }
}

record! {
    /// getACL's reply.
    pub struct GetAclResponse {
        /// The node's ACL.
        pub acl: Vec<Acl>,
        /// The node's metadata.
        pub stat: Stat,
    }
}

record! {
    /// One identity of the session, as whoAmI reports it.
    pub struct ClientInfo {
        /// The scheme the identity was authenticated with, e.g. `ip` or `digest`.
        pub auth_scheme: String,
        /// The identity in that scheme, e.g. the client's address or the digest user.
        pub user: String,
    }
}

record! {
    /// whoAmI's reply.
    pub struct WhoAmIResponse {
        /// Every identity the session holds.
        pub client_info: Vec<ClientInfo>,
    }
}
