//! Fences: the resource side of fencing tokens.
//!
//! A lock cannot stop a holder that paused (GC, SIGSTOP, a slow disk) past its session or
//! lease from writing after someone else took the lock; only the resource can. A fence is the
//! part of the resource that remembers, per resource id, the highest [`FencingToken`] it has
//! seen, and refuses a write that carries a lower one.
//!
//! Invariants every fence here keeps:
//! - **The check, the store of the token and the write are one atomic step.** A check followed
//!   by a separate write lets two writers both pass the check and the older one land last.
//! - **An equal token is accepted**: one holder writes many times under one token.
//! - **A refused write is not an error** where nothing else rides on it: it is the fence
//!   working, reported as [`Outcome::Refused`] with the highest token seen; `Err` is for a
//!   backend that failed or an argument that is wrong (an empty resource id is
//!   [`Error::InvalidArgument`]). The exception is the SQL fence, whose write usually shares a
//!   transaction with other writes: there a refusal is [`sql::SqlError::Stale`], so that `?`
//!   leaves before the commit and the transaction rolls back instead of committing the rest.
//! - **A fence remembers only as long as its store does.** One whose store can forget
//!   ([`RedisFence`]: a restart without persistence, a failover to a replica that missed the
//!   latest writes) then accepts older tokens; it says so, and refuses to be built on a store
//!   it cannot see persist every write unless the caller opts out by name.
//! - **The highest token never decreases**, so the accepted writes of one resource carry
//!   non-decreasing tokens in the order they took effect: no lost update.
//!
//! The fences, by where the resource lives:
//! - [`LocalFence`]: in this process (a service that owns its resource);
//! - [`RedisFence`]: a Redis-held resource, written by a Lua script that checks and stores the
//!   token in the same step as the write; built only on a server with `appendonly yes` and
//!   `appendfsync always` unless told otherwise, and still forgetful across a failover;
//! - [`sql`]: the conditional upsert, as SQL to copy and as helpers for PostgreSQL
//!   (feature `postgres`) and SQLite (feature `sqlite`);
//! - [`ZkFence`]: a znode written in a multi with a check that the writer's lock node still
//!   exists, besides the token comparison.

mod local;
mod redis;
pub mod sql;
mod zk;

pub use local::LocalFence;
pub use redis::{RedisFence, RedisFenceBuilder};
pub use zk::ZkFence;

use crate::{Error, FencingToken, Result};

/// What a fence did with one write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use = "a refused write did not happen"]
pub enum Outcome {
    /// The token was at least the highest seen: the write happened and the token is now the
    /// highest.
    Accepted,
    /// A write with a higher token came first: nothing was written. `highest` is the highest
    /// token the fence had seen when it refused (the current holder's, or a later one).
    Refused {
        /// The token that outranked the refused one.
        highest: FencingToken,
    },
}

impl Outcome {
    /// Whether the write happened.
    pub fn is_accepted(self) -> bool {
        self == Outcome::Accepted
    }
}

/// Checks a resource id: not empty, no control characters (it becomes part of a key, a row id
/// or a log line). `what` names the argument in the error.
pub(crate) fn check_resource(what: &str, resource: &str) -> Result<()> {
    if resource.is_empty() {
        return Err(Error::InvalidArgument(format!("{what} must not be empty")));
    }
    if resource.chars().any(char::is_control) {
        return Err(Error::InvalidArgument(format!(
            "{what} {resource:?} must not contain control characters"
        )));
    }
    Ok(())
}
