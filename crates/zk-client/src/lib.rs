//! A ZooKeeper client on Tokio, built for the latency of lock handoffs.
//!
//! A request is written to the socket by the task that makes it, and replies are read by the
//! session's own Tokio task, which wakes the waiting caller directly: no reactor thread of
//! another runtime and no channel between the caller and the socket. A lock handoff is mostly
//! round trips, so what a client adds to each one is what a lock service adds to each handoff.
//! A caller that keeps many requests in flight (a pipeline) holds its writes back under a
//! [`Cork`] so that a batch leaves in one write, and the server reads it in one.
//!
//! The client speaks ZooKeeper 3.6+'s protocol (`lockkeeper-proto`): sessions that survive
//! reconnection to any host of the connect string, one-shot and persistent (recursive) watches
//! restored after a reconnection, multi and multiRead, ACLs, TTL and container nodes, digest
//! credentials and a chroot.
//!
//! ```no_run
//! # async fn demo() -> Result<(), lockkeeper_zk_client::Error> {
//! use lockkeeper_zk_client::{Client, CreateMode, CreateOptions};
//!
//! let client = Client::connect("127.0.0.1:2181").await?;
//! let options = CreateOptions::new(CreateMode::EphemeralSequential);
//! let (stat, path) = client.create("/jobs/job-", b"payload", &options).await?;
//! let (data, watcher) = {
//!     let (data, _stat, watcher) = client.get_and_watch_data(&path).await?;
//!     (data, watcher)
//! };
//! client.delete(&path, Some(stat.version)).await?;
//! let event = watcher.changed().await; // NodeDeleted
//! # let _ = (data, event);
//! # Ok(())
//! # }
//! ```

#![warn(missing_docs)]

mod client;
mod error;
mod multi;
mod path;
mod sasl;
mod session;
mod socket;
mod watch;

pub use client::{Client, Connector, CreateOptions, DataAndStat, StateWatcher};
pub use error::{Error, HostFailure, Result};
pub use lockkeeper_proto::{Acl, AddWatchMode, CreateMode, Id, Stat, open_acl, perms};
pub use lockkeeper_tls::ClientFiles as TlsFiles;
pub use multi::{MultiReadResult, MultiReader, MultiWriteError, MultiWriteResult, MultiWriter};
pub use path::{DEFAULT_PORT, hosts};
pub use session::Cork;
pub use watch::{EventType, OneshotWatcher, PersistentWatcher, SessionState, WatchedEvent};
