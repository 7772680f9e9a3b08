//! What a request can fail with: the server's answer, or the connection's fate.
//!
//! Server answers keep ZooKeeper's names (`NoNode`, `BadVersion`, ...), so code written against
//! ZooKeeper's documentation reads the same here. The client's own outcomes say whether the
//! request may still have been applied: [`Error::ConnectionLoss`] (it may), or
//! [`Error::SessionExpired`] and [`Error::ClientClosed`] (nothing more will be).

use lockkeeper_proto::ErrorCode;

/// Why a request failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The node (or, for a create, its parent) does not exist.
    #[error("no node")]
    NoNode,
    /// A node already exists at the path created.
    #[error("node exists")]
    NodeExists,
    /// The node's version is not the one the request expected.
    #[error("bad version")]
    BadVersion,
    /// The node has children, so it cannot be deleted.
    #[error("node has children")]
    NotEmpty,
    /// The parent is ephemeral, and ephemeral nodes cannot have children.
    #[error("ephemeral nodes may not have children")]
    NoChildrenForEphemerals,
    /// The ACL is empty or malformed.
    #[error("invalid ACL")]
    InvalidAcl,
    /// The node's ACL does not grant the session the permission the request needs.
    #[error("not authorized")]
    NoAuth,
    /// The server refused the session's credentials; the session is over.
    #[error("authentication failed")]
    AuthFailed,
    /// The session holds no such watch to check or remove.
    #[error("no such watcher")]
    NoWatcher,
    /// The server does not implement the operation (e.g. TTL nodes switched off).
    #[error("operation not implemented by the server")]
    Unimplemented,
    /// The session was taken over by a connection to another server.
    #[error("session moved to another server")]
    SessionMoved,
    /// The request was invalid (a malformed path, bad TTL, ...), said by the server or by
    /// this client before sending.
    #[error("bad arguments: {0}")]
    BadArguments(String),
    /// The connection broke (or was never there) before the answer came: the request may or
    /// may not have been applied.
    #[error("connection lost: {0}")]
    ConnectionLoss(String),
    /// No server of the connect string established a session in time: each host tried and
    /// why it gave none, the latest failure of each.
    #[error(
        "no ZooKeeper server of {hosts:?} established a session within {timeout:?} ({})",
        shown_failures(failures)
    )]
    Connect {
        /// The connect string's hosts, comma-separated.
        hosts: String,
        /// The connection timeout that passed (or the round that ended, with `one_round`).
        timeout: std::time::Duration,
        /// Each host tried, `host:port`, and why it gave no session.
        failures: Vec<(String, HostFailure)>,
    },
    /// The server ended the session; its ephemeral nodes are gone.
    #[error("session expired")]
    SessionExpired,
    /// [`Client::close`](crate::Client::close) was called, or every handle was dropped.
    #[error("client closed")]
    ClientClosed,
    /// The server answered something this client cannot read: the connection is dropped.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// Any other error code from the server.
    #[error("server error {0:?}")]
    Server(ErrorCode),
    /// An error code ZooKeeper does not define.
    #[error("unknown server error code {0}")]
    UnknownCode(i32),
}

/// Why one host gave no session, as far as the client could see at the socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostFailure {
    /// The connection was refused: nothing listens there.
    Refused,
    /// No TCP connection within this long.
    ConnectTimedOut(std::time::Duration),
    /// Connected, but the handshake was not answered within this long.
    NoAnswer(std::time::Duration),
    /// It answered, but not as ZooKeeper does: the first of its bytes, shown.
    NotZooKeeper(String),
    /// It closed the connection without answering the handshake (a ZooKeeper server that is
    /// not serving: no quorum, or too many connections from this address).
    Closed,
    /// It answered the handshake by refusing to open a session.
    SessionRefused,
    /// The TLS handshake failed: the reason (an untrusted or expired certificate, a name it
    /// is not valid for, a peer that does not speak TLS).
    Tls(String),
    /// Any other I/O error on the way.
    Io(String),
}

impl std::fmt::Display for HostFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HostFailure::Refused => write!(f, "connection refused (nothing listens there)"),
            HostFailure::ConnectTimedOut(after) => {
                write!(f, "timed out: no connection within {after:?}")
            }
            HostFailure::NoAnswer(after) => {
                write!(
                    f,
                    "connected, but no answer to the handshake within {after:?}"
                )
            }
            HostFailure::NotZooKeeper(what) => write!(f, "not a ZooKeeper server: {what}"),
            HostFailure::Closed => write!(
                f,
                "it closed the connection without answering ZooKeeper's handshake (a ZooKeeper \
                 server that is not serving: no quorum, or too many connections from this \
                 address; or not ZooKeeper at all)"
            ),
            HostFailure::SessionRefused => write!(f, "it refused to open a session"),
            HostFailure::Tls(why) => write!(f, "{why}"),
            HostFailure::Io(what) => write!(f, "{what}"),
        }
    }
}

/// `host: why; host: why`, or that no host was tried.
fn shown_failures(failures: &[(String, HostFailure)]) -> String {
    if failures.is_empty() {
        return "no host was tried".to_owned();
    }
    failures
        .iter()
        .map(|(host, why)| format!("{host}: {why}"))
        .collect::<Vec<_>>()
        .join("; ")
}

impl Error {
    /// The error for a reply header's `err`, or `None` for `Ok`.
    pub(crate) fn from_code(code: i32) -> Option<Error> {
        let Ok(code) = ErrorCode::try_from(code) else {
            return Some(Error::UnknownCode(code));
        };
        Some(match code {
            ErrorCode::Ok => return None,
            ErrorCode::NoNode => Error::NoNode,
            ErrorCode::NodeExists => Error::NodeExists,
            ErrorCode::BadVersion => Error::BadVersion,
            ErrorCode::NotEmpty => Error::NotEmpty,
            ErrorCode::NoChildrenForEphemerals => Error::NoChildrenForEphemerals,
            ErrorCode::InvalidAcl => Error::InvalidAcl,
            ErrorCode::NoAuth => Error::NoAuth,
            ErrorCode::AuthFailed => Error::AuthFailed,
            ErrorCode::NoWatcher => Error::NoWatcher,
            ErrorCode::Unimplemented => Error::Unimplemented,
            ErrorCode::SessionMoved => Error::SessionMoved,
            ErrorCode::SessionExpired => Error::SessionExpired,
            ErrorCode::BadArguments => Error::BadArguments("refused by the server".into()),
            ErrorCode::ConnectionLoss => Error::ConnectionLoss("reported by the server".into()),
            other => Error::Server(other),
        })
    }

    /// Whether the request may have been applied although no answer said so.
    pub fn is_connection_loss(&self) -> bool {
        matches!(self, Error::ConnectionLoss(_))
    }

    /// Whether the session is over: nothing will succeed on this client again.
    pub fn is_terminal(&self) -> bool {
        matches!(
            self,
            Error::SessionExpired | Error::ClientClosed | Error::AuthFailed
        )
    }
}

/// A request's outcome.
pub type Result<T, E = Error> = std::result::Result<T, E>;
