//! The one error type of the crate, shared by the ZooKeeper recipes and the Redis locks.
//!
//! "Not acquired" is not an error: `try_lock()` and `lock_timeout(d)` return `Ok(None)` when the
//! lock is busy or the time ran out, so `?` only ever propagates real failures.

/// Everything a lockkeeper call can fail with.
///
/// ```no_run
/// # async fn demo(session: lockkeeper::zk::Session) {
/// use lockkeeper::Error;
///
/// let guard = session.mutex("/locks/orders").unwrap().lock().await.unwrap();
/// match guard.release().await {
///     Ok(()) => {}
///     // The session expired or someone deleted the node: the work done under the lock may
///     // have overlapped with another holder's.
///     Err(Error::NotHeld) => eprintln!("the lock was lost before the release"),
///     Err(other) => eprintln!("release failed: {other}"),
/// }
/// # }
/// ```
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A release, unlock or extend of a lock this guard or owner does not hold (any more): it was
    /// released already, its lease ran out, its session expired, or someone deleted it.
    #[error("the lock is not held")]
    NotHeld,

    /// This participant does not lead (any more): a confirm, proclaim or resign of a leadership
    /// that ended (its node or key deleted, its session lost, its maximum hold time passed, or
    /// resigned already).
    #[error("not the leader (any more)")]
    NotLeader,

    /// A queue item taken with a lock is no longer this consumer's: its lock went with the
    /// session, so the acknowledgement or requeue did nothing; the item stays in the queue and
    /// will be delivered again. `item` is its node.
    #[error("queue item {item}: no longer ours (its lock went with the session); it stays queued")]
    ItemLost {
        /// The item's node.
        item: String,
    },

    /// The request is well formed, but what the backend holds refuses it: a transaction id
    /// proposed before, a site that has voted already, a confirmation mark another process
    /// keeps rewriting. `path` names the node and `why` says what is there; nothing was
    /// changed.
    #[error("{path}: {why}")]
    Conflict {
        /// The node whose state refused the request.
        path: String,
        /// What is there, and why that refuses the request.
        why: String,
    },

    /// A node or key holds data the recipe cannot read: written by something else, or
    /// damaged. `path` names it and `why` says what was expected and what was found; nothing
    /// was changed.
    #[error("{path}: {why}")]
    Corrupt {
        /// The node (or key) whose data could not be read.
        path: String,
        /// What was expected there, and what was found.
        why: String,
    },

    /// A wrong argument from the caller (a path, a timeout, a lease count, a name), named in
    /// the message. Nothing was sent to the server.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// A read-lock holder asked for the write lock of the same read-write lock. Waiting would
    /// deadlock (the writer waits for every earlier node, including its own read node), so the
    /// request is refused; release the read lock first.
    #[error("upgrading a read lock to a write lock would deadlock")]
    UpgradeRefused,

    /// Connecting failed within the connection timeout: nothing answered at `address`, or what
    /// answered is not the server asked for. `address` is what was dialled (`host:port`, or the
    /// list of them); `cause` says what happened there.
    #[error("cannot connect to {address}: {cause}")]
    Connect {
        /// The address (or comma-separated addresses) dialled.
        address: String,
        /// What went wrong there.
        cause: ConnectCause,
    },

    /// The ZooKeeper session expired (or was closed) during the call; everything it held, its
    /// ephemeral lock nodes included, is gone. On etcd: the session's lease was lost (renewals
    /// failed until its deadline, etcd answered that it is gone) or the session was closed; its
    /// keys are gone or going with the lease.
    #[error("the session expired or was closed (ZooKeeper session or etcd lease)")]
    SessionLost,

    /// The retry policy gave up on an operation that kept failing with connection loss.
    #[error("gave up after {attempts} attempts: {last}")]
    RetriesExhausted {
        /// How many times the operation was tried.
        attempts: u32,
        /// The error of the last attempt.
        last: lockkeeper_zk_client::Error,
    },

    /// An optimistic update (a shared counter's increment, add or compare-and-set) lost to
    /// concurrent writers on every attempt its retry policy allowed, and to the promoted lock's
    /// timeout if it has one. Nothing was written: the caller may back off and try again.
    #[error("{path}: gave up after {attempts} attempts, each overtaken by a concurrent write")]
    Contended {
        /// The node that kept changing under the update.
        path: String,
        /// How many read-then-write attempts were made, those under the promoted lock included.
        attempts: u32,
    },

    /// A [`RedisFence`](crate::fence::RedisFence) was asked for on a Redis server that does not
    /// persist every write before acknowledging it, or whose settings could not be read
    /// (`CONFIG` renamed, disabled or denied). Such a server forgets the fence's highest tokens
    /// when it restarts, and the fence then accepts older tokens again. `address` is the
    /// server's `host:port`; `found` is what its settings were, or why they are unknown.
    #[error(
        "redis at {address} is not known to persist every write ({found}): a fence there would \
         forget its highest tokens at a restart and then accept older ones; it needs appendonly \
         yes with appendfsync always, or an explicit RedisFence::builder(..)\
         .accept_unpersisted_server()"
    )]
    NotDurable {
        /// The server's `host:port` (or which servers, when they could not be told apart).
        address: String,
        /// The settings found (`appendonly no, appendfsync everysec`), or why they are unknown.
        found: String,
    },

    /// An error from ZooKeeper (or Keeper) that the recipe does not handle itself.
    #[error("zookeeper: {0}")]
    Zk(#[from] lockkeeper_zk_client::Error),

    /// An error from Redis: connection, protocol or script.
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),

    /// An error from etcd (or the gRPC connection to it, or no answer in time) that the
    /// recipe does not handle itself; [`is_connection_loss`](Error::is_connection_loss) tells
    /// whether it may pass by itself.
    #[cfg(feature = "etcd")]
    #[error("etcd: {0}")]
    Etcd(#[from] crate::etcd::EtcdError),
}

impl Error {
    /// Whether the connection went while the request was in flight, so it may or may not have
    /// taken effect (a queue item put, a counter added to): check before doing it again.
    ///
    /// The ZooKeeper client reports such a loss as `ConnectionLoss`, a timeout, or the I/O
    /// error that ended the connection; this is true for all three, and for a Redis error
    /// that came from a dropped connection or a timeout.
    ///
    /// ```no_run
    /// # async fn demo(queue: lockkeeper::zk::DistributedQueue) {
    /// if let Err(err) = queue.put(b"job-42").await {
    ///     if err.is_connection_loss() {
    ///         // Maybe queued: look before putting it again, or make consumers idempotent.
    ///     }
    /// }
    /// # }
    /// ```
    pub fn is_connection_loss(&self) -> bool {
        match self {
            Error::Zk(err) => crate::zk::session::is_connection_loss(err),
            Error::Redis(err) => err.is_connection_dropped() || err.is_timeout(),
            #[cfg(feature = "etcd")]
            Error::Etcd(err) => crate::etcd::is_transient(err),
            _ => false,
        }
    }
}

/// Why connecting to a server failed, as far as a probe of the address could tell.
///
/// ```
/// use lockkeeper::{ConnectCause, Error};
///
/// let err = Error::Connect { address: "127.0.0.1:2181".into(), cause: ConnectCause::Refused };
/// assert_eq!(err.to_string(), "cannot connect to 127.0.0.1:2181: connection refused (nothing listens there)");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConnectCause {
    /// Nothing listens at the address (or a firewall rejects it).
    Refused,
    /// No TCP connection within the connection timeout: a host that is down, or a network that
    /// drops the packets.
    TimedOut(std::time::Duration),
    /// The TCP connection was made, but the server did not answer the handshake in time.
    NoAnswer(std::time::Duration),
    /// Something answered, but not as ZooKeeper does; the text says what it sent.
    NotZooKeeper(String),
    /// Something answered, but not as Redis does; the text says what it sent.
    NotRedis(String),
    /// The server is the right kind but refused us (authentication, too many connections, no
    /// quorum); the text is its answer.
    Rejected(String),
    /// Any other failure: name resolution, a local error, a handshake the client library
    /// refused; the text says which.
    Other(String),
    /// Several addresses were dialled, and each failed for the reason given.
    Each(Vec<(String, ConnectCause)>),
}

impl std::fmt::Display for ConnectCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnectCause::Refused => write!(f, "connection refused (nothing listens there)"),
            ConnectCause::TimedOut(after) => {
                write!(f, "timed out: no connection within {after:?}")
            }
            ConnectCause::NoAnswer(after) => {
                write!(
                    f,
                    "connected, but no answer to the handshake within {after:?}"
                )
            }
            ConnectCause::NotZooKeeper(what) => write!(f, "not a ZooKeeper server: {what}"),
            ConnectCause::NotRedis(what) => write!(f, "not a Redis server: {what}"),
            ConnectCause::Rejected(what) => write!(f, "the server refused the connection: {what}"),
            ConnectCause::Other(what) => write!(f, "{what}"),
            ConnectCause::Each(causes) => {
                for (i, (address, cause)) in causes.iter().enumerate() {
                    if i > 0 {
                        write!(f, "; ")?;
                    }
                    write!(f, "{address}: {cause}")?;
                }
                Ok(())
            }
        }
    }
}

/// `Result` with the crate's [`Error`].
///
/// ```
/// fn parse_ttl(ms: u64) -> lockkeeper::Result<std::time::Duration> {
///     if ms == 0 {
///         return Err(lockkeeper::Error::InvalidArgument("ttl must be positive".into()));
///     }
///     Ok(std::time::Duration::from_millis(ms))
/// }
/// assert!(parse_ttl(0).is_err());
/// ```
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_losses_are_told_from_other_failures() {
        use lockkeeper_zk_client::Error as Zk;
        assert!(Error::Zk(Zk::ConnectionLoss("127.0.0.1:2181: reset".into())).is_connection_loss());
        assert!(!Error::Zk(Zk::NoNode).is_connection_loss());
        assert!(!Error::SessionLost.is_connection_loss());
        assert!(!Error::NotHeld.is_connection_loss());
        let dropped =
            redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert!(Error::Redis(dropped).is_connection_loss());
    }
}
