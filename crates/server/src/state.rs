//! State: what the server knows, and the one way it changes. No IO, no file format, no
//! sockets: the core owns one [`apply::State`] and changes it only through [`apply::apply`],
//! which recovery (in `disk`) replays the log with.
//!
//! - [`path`]: znode paths, split into parent and name.
//! - [`acl`]: who a connection is (auth ids) and what a node's ACL lets it do.
//! - [`tree`]: every znode, with the indexes for ephemerals, containers and TTL nodes, and the
//!   walk that copies the tree at one zxid while it changes (the sink it feeds is the
//!   snapshot's, in `disk`).
//! - [`session`]: sessions, their passwords, timeouts and expiry.
//! - [`watch`]: who watches which path, and the events a change fires.
//! - [`txn`]: the transactions, each one write's whole decided effect.
//! - [`prep`]: a write request checked against the tree and made into a txn (or an error).
//! - [`apply`]: the one function that applies a txn to the tree and the sessions.

pub(crate) mod acl;
pub(crate) mod apply;
pub(crate) mod path;
pub(crate) mod prep;
pub(crate) mod session;
pub(crate) mod tree;
pub(crate) mod txn;
pub(crate) mod watch;
