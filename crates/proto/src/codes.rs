//! The numbers of the protocol: opcodes, error codes, event types, create modes, permissions.
//!
//! Values are ZooKeeper's, so that a client written for ZooKeeper reads our replies unchanged.

/// Generates an `i32`-backed enum with `code()` and `TryFrom<i32>`, so unknown values from the
/// network become an error instead of a panic.
macro_rules! int_enum {
    ($(#[$meta:meta])* pub enum $name:ident { $($(#[$vmeta:meta])* $variant:ident = $value:expr),* $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name { $($(#[$vmeta])* $variant = $value),* }

        impl $name {
            /// The value on the wire.
            pub const fn code(self) -> i32 {
                self as i32
            }
        }

        impl TryFrom<i32> for $name {
            type Error = i32;
            fn try_from(value: i32) -> Result<Self, i32> {
                match value {
                    $($value => Ok($name::$variant),)*
                    other => Err(other),
                }
            }
        }
    };
}

int_enum! {
    /// Request types (`ZooDefs.OpCode`).
    pub enum OpCode {
        /// A watch notification; never sent as a request.
        Notification = 0,
        /// Create a node; the reply carries its path.
        Create = 1,
        /// Delete a node, optionally only at a given version.
        Delete = 2,
        /// Read a node's stat, optionally leaving a watch even if it is absent.
        Exists = 3,
        /// Read a node's data and stat, optionally leaving a data watch.
        GetData = 4,
        /// Replace a node's data, optionally only at a given version.
        SetData = 5,
        /// Read a node's ACL and stat.
        GetAcl = 6,
        /// Replace a node's ACL, optionally only at a given ACL version.
        SetAcl = 7,
        /// List a node's children, optionally leaving a child watch.
        GetChildren = 8,
        /// Bring the serving server up to date with the leader before later reads.
        Sync = 9,
        /// Keep the session alive while the client is idle.
        Ping = 11,
        /// List a node's children together with the parent's stat.
        GetChildren2 = 12,
        /// Assert a node's version; only valid inside a multi.
        Check = 13,
        /// Apply several write operations atomically: all or none.
        Multi = 14,
        /// Create a node; the reply carries its path and stat.
        Create2 = 15,
        /// Change the ensemble membership (dynamic reconfiguration).
        Reconfig = 16,
        /// Ask whether the session holds watches of a type on a path.
        CheckWatches = 17,
        /// Remove the watches of a type the session holds on a path.
        RemoveWatches = 18,
        /// Create a container node, deleted by the server once its last child goes.
        CreateContainer = 19,
        /// Delete an empty container node (issued by the server itself).
        DeleteContainer = 20,
        /// Create a persistent node that the server deletes after a TTL without children or changes.
        CreateTtl = 21,
        /// Run several reads together; each gets its own result.
        MultiRead = 22,
        /// Add authentication credentials (scheme and bytes) to the session.
        Auth = 100,
        /// Re-register data, exist and child watches after a reconnect.
        SetWatches = 101,
        /// One step of a SASL authentication exchange.
        Sasl = 102,
        /// List the ephemeral nodes the session owns under a path prefix.
        GetEphemerals = 103,
        /// Count all descendants of a node.
        GetAllChildrenNumber = 104,
        /// Re-register watches after a reconnect, including persistent and recursive ones.
        SetWatches2 = 105,
        /// Add a persistent or persistent-recursive watch.
        AddWatch = 106,
        /// List the authenticated identities of the session.
        WhoAmI = 107,
        /// The connect handshake, as logged in a transaction header.
        CreateSession = -10,
        /// End the session; its ephemeral nodes are deleted.
        CloseSession = -11,
        /// A failed transaction, as logged by ZooKeeper (the error transaction).
        Error = -1,
    }
}

int_enum! {
    /// Result codes (`KeeperException.Code`), sent in `ReplyHeader.err` and multi results.
    pub enum ErrorCode {
        /// The operation succeeded.
        Ok = 0,
        /// The base of the system (server-side) error codes; never sent itself.
        SystemError = -1,
        /// The server found its state inconsistent at run time.
        RuntimeInconsistency = -2,
        /// The server found its data inconsistent.
        DataInconsistency = -3,
        /// The connection to the server was lost (client side).
        ConnectionLoss = -4,
        /// A record could not be serialized or deserialized.
        MarshallingError = -5,
        /// The operation is not implemented by this server.
        Unimplemented = -6,
        /// The operation timed out (client side).
        OperationTimeout = -7,
        /// The request carried invalid arguments (e.g. a malformed path).
        BadArguments = -8,
        /// The session is not known to the server.
        UnknownSession = -12,
        /// A reconfiguration found no quorum of the new configuration connected.
        NewConfigNoQuorum = -13,
        /// Another reconfiguration is already under way.
        ReconfigInProgress = -14,
        /// The base of the API errors; never sent itself.
        ApiError = -100,
        /// The node (or, for create, its parent) does not exist.
        NoNode = -101,
        /// The session lacks the permission the node's ACL requires.
        NoAuth = -102,
        /// The expected version does not match the node's.
        BadVersion = -103,
        /// Ephemeral nodes cannot have children.
        NoChildrenForEphemerals = -108,
        /// A node already exists at the path.
        NodeExists = -110,
        /// The node has children, so it cannot be deleted.
        NotEmpty = -111,
        /// The session expired; its ephemeral nodes and watches are gone.
        SessionExpired = -112,
        /// The client gave an invalid callback.
        InvalidCallback = -113,
        /// The ACL is empty or malformed.
        InvalidAcl = -114,
        /// Authentication failed.
        AuthFailed = -115,
        /// The session moved to another server.
        SessionMoved = -118,
        /// A write reached a read-only server.
        NotReadOnly = -119,
        /// Local sessions cannot create ephemeral nodes.
        EphemeralOnLocalSession = -120,
        /// The session holds no such watch to check or remove.
        NoWatcher = -121,
        /// The request did not complete in time.
        RequestTimeout = -122,
        /// Dynamic reconfiguration is disabled on the server.
        ReconfigDisabled = -123,
        /// The server requires SASL authentication and closed the session.
        SessionClosedRequireSaslAuth = -124,
        /// The write would exceed a hard quota.
        QuotaExceeded = -125,
        /// The server throttled the request under load.
        Throttled = -127,
    }
}

int_enum! {
    /// What a watch notification reports (`Watcher.Event.EventType`).
    pub enum EventType {
        /// A change of the connection state, not of a node.
        None = -1,
        /// The watched node was created.
        NodeCreated = 1,
        /// The watched node was deleted.
        NodeDeleted = 2,
        /// The watched node's data changed.
        NodeDataChanged = 3,
        /// A child of the watched node was created or deleted.
        NodeChildrenChanged = 4,
        /// A data watch was removed by `removeWatches`.
        DataWatchRemoved = 5,
        /// A child watch was removed by `removeWatches`.
        ChildWatchRemoved = 6,
        /// A persistent watch was removed by `removeWatches`.
        PersistentWatchRemoved = 7,
    }
}

int_enum! {
    /// Connection state carried by notifications (`Watcher.Event.KeeperState`).
    pub enum KeeperState {
        /// The client lost its connection; the session may still be alive.
        Disconnected = 0,
        /// The client is connected to a server that can take reads and writes.
        SyncConnected = 3,
        /// Authentication failed.
        AuthFailed = 4,
        /// The client is connected to a read-only server.
        ConnectedReadOnly = 5,
        /// SASL authentication succeeded.
        SaslAuthenticated = 6,
        /// The session expired; a new one must be made.
        Expired = -112,
        /// The client closed the session.
        Closed = 7,
    }
}

int_enum! {
    /// The `flags` of a create request (`CreateMode`).
    pub enum CreateMode {
        /// A node that stays until deleted.
        Persistent = 0,
        /// A node deleted when its session ends.
        Ephemeral = 1,
        /// A persistent node whose name gets the parent's ten-digit sequence number appended.
        PersistentSequential = 2,
        /// An ephemeral node whose name gets the parent's ten-digit sequence number appended.
        EphemeralSequential = 3,
        /// A node the server deletes once its last child is gone.
        Container = 4,
        /// A persistent node deleted after its TTL passes without children or changes.
        PersistentWithTtl = 5,
        /// A sequential persistent node with a TTL.
        PersistentSequentialWithTtl = 6,
    }
}

impl CreateMode {
    /// Whether the server appends a sequence number to the node's name.
    pub fn is_sequential(self) -> bool {
        matches!(
            self,
            CreateMode::PersistentSequential
                | CreateMode::EphemeralSequential
                | CreateMode::PersistentSequentialWithTtl
        )
    }

    /// Whether the node is deleted when its session ends.
    pub fn is_ephemeral(self) -> bool {
        matches!(
            self,
            CreateMode::Ephemeral | CreateMode::EphemeralSequential
        )
    }

    /// Whether the node is deleted after a TTL without children or changes.
    pub fn is_ttl(self) -> bool {
        matches!(
            self,
            CreateMode::PersistentWithTtl | CreateMode::PersistentSequentialWithTtl
        )
    }
}

int_enum! {
    /// The mode of an `addWatch` request.
    pub enum AddWatchMode {
        /// A watch that stays after it fires, on the node alone.
        Persistent = 0,
        /// A persistent watch on the node and every node below it.
        PersistentRecursive = 1,
    }
}

int_enum! {
    /// Which watches `removeWatches` and `checkWatches` address (`Watcher.WatcherType`).
    pub enum WatcherType {
        /// Child watches.
        Children = 1,
        /// Data watches (set by exists and getData).
        Data = 2,
        /// Watches of every type.
        Any = 3,
        /// Persistent watches.
        Persistent = 4,
        /// Persistent recursive watches.
        PersistentRecursive = 5,
    }
}

/// ACL permission bits (`ZooDefs.Perms`).
pub mod perms {
    /// getData, getChildren and exists-style reads of the node.
    pub const READ: i32 = 1;
    /// setData on the node.
    pub const WRITE: i32 = 2;
    /// Creating children of the node.
    pub const CREATE: i32 = 4;
    /// Deleting children of the node.
    pub const DELETE: i32 = 8;
    /// setAcl on the node.
    pub const ADMIN: i32 = 16;
    /// Every permission.
    pub const ALL: i32 = READ | WRITE | CREATE | DELETE | ADMIN;
}
