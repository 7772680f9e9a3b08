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
        Notification = 0,
        Create = 1,
        Delete = 2,
        Exists = 3,
        GetData = 4,
        SetData = 5,
        GetAcl = 6,
        SetAcl = 7,
        GetChildren = 8,
        Sync = 9,
        Ping = 11,
        GetChildren2 = 12,
        Check = 13,
        Multi = 14,
        Create2 = 15,
        Reconfig = 16,
        CheckWatches = 17,
        RemoveWatches = 18,
        CreateContainer = 19,
        DeleteContainer = 20,
        CreateTtl = 21,
        MultiRead = 22,
        Auth = 100,
        SetWatches = 101,
        Sasl = 102,
        GetEphemerals = 103,
        GetAllChildrenNumber = 104,
        SetWatches2 = 105,
        AddWatch = 106,
        WhoAmI = 107,
        CreateSession = -10,
        CloseSession = -11,
        Error = -1,
    }
}

int_enum! {
    /// Result codes (`KeeperException.Code`), sent in `ReplyHeader.err` and multi results.
    pub enum ErrorCode {
        Ok = 0,
        SystemError = -1,
        RuntimeInconsistency = -2,
        DataInconsistency = -3,
        ConnectionLoss = -4,
        MarshallingError = -5,
        Unimplemented = -6,
        OperationTimeout = -7,
        BadArguments = -8,
        UnknownSession = -12,
        NewConfigNoQuorum = -13,
        ReconfigInProgress = -14,
        ApiError = -100,
        NoNode = -101,
        NoAuth = -102,
        BadVersion = -103,
        NoChildrenForEphemerals = -108,
        NodeExists = -110,
        NotEmpty = -111,
        SessionExpired = -112,
        InvalidCallback = -113,
        InvalidAcl = -114,
        AuthFailed = -115,
        SessionMoved = -118,
        NotReadOnly = -119,
        EphemeralOnLocalSession = -120,
        NoWatcher = -121,
        RequestTimeout = -122,
        ReconfigDisabled = -123,
        SessionClosedRequireSaslAuth = -124,
        QuotaExceeded = -125,
        Throttled = -127,
    }
}

int_enum! {
    /// What a watch notification reports (`Watcher.Event.EventType`).
    pub enum EventType {
        None = -1,
        NodeCreated = 1,
        NodeDeleted = 2,
        NodeDataChanged = 3,
        NodeChildrenChanged = 4,
        DataWatchRemoved = 5,
        ChildWatchRemoved = 6,
        PersistentWatchRemoved = 7,
    }
}

int_enum! {
    /// Connection state carried by notifications (`Watcher.Event.KeeperState`).
    pub enum KeeperState {
        Disconnected = 0,
        SyncConnected = 3,
        AuthFailed = 4,
        ConnectedReadOnly = 5,
        SaslAuthenticated = 6,
        Expired = -112,
        Closed = 7,
    }
}

int_enum! {
    /// The `flags` of a create request (`CreateMode`).
    pub enum CreateMode {
        Persistent = 0,
        Ephemeral = 1,
        PersistentSequential = 2,
        EphemeralSequential = 3,
        Container = 4,
        PersistentWithTtl = 5,
        PersistentSequentialWithTtl = 6,
    }
}

impl CreateMode {
    pub fn is_sequential(self) -> bool {
        matches!(
            self,
            CreateMode::PersistentSequential
                | CreateMode::EphemeralSequential
                | CreateMode::PersistentSequentialWithTtl
        )
    }

    pub fn is_ephemeral(self) -> bool {
        matches!(
            self,
            CreateMode::Ephemeral | CreateMode::EphemeralSequential
        )
    }

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
        Persistent = 0,
        PersistentRecursive = 1,
    }
}

int_enum! {
    /// Which watches `removeWatches` and `checkWatches` address (`Watcher.WatcherType`).
    pub enum WatcherType {
        Children = 1,
        Data = 2,
        Any = 3,
        Persistent = 4,
        PersistentRecursive = 5,
    }
}

/// ACL permission bits (`ZooDefs.Perms`).
pub mod perms {
    pub const READ: i32 = 1;
    pub const WRITE: i32 = 2;
    pub const CREATE: i32 = 4;
    pub const DELETE: i32 = 8;
    pub const ADMIN: i32 = 16;
    pub const ALL: i32 = READ | WRITE | CREATE | DELETE | ADMIN;
}
