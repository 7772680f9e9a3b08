//! [`Redis::inspect`]: who holds a Redis lock of any kind and who waits, for operators; and
//! [`Redis::revoke`], which takes a hold away.
//!
//! Every lock kind of this module's siblings keeps its state under keys that carry the lock's
//! name as a hash tag ([`keys`](super::keys)), so one name can be inspected without knowing its
//! kind: the lease lock (`PREFIX:lease:{NAME}`), the reentrant lock (`PREFIX:reentrant:{NAME}`),
//! the read-write lock (`PREFIX:rw:{NAME}:readers`, `:writer`, `:intent`) and the semaphore
//! (`PREFIX:semaphore:{NAME}`), each with its fencing counter (`…:fence`) and, for the lease
//! and reentrant locks and the semaphore, its waiting line (`…:line`, [`line`](super::line)).
//! The layout is read here, next to the recipes that write it, and nowhere else.
//!
//! Invariants:
//!
//! - **Reads are point-in-time.** One read-only script reads every key of every kind in one
//!   atomic step against the server's clock, so an inspection is a state the server was in,
//!   never a mix of two. It is stale as soon as it is returned; it only reads and never changes
//!   the lock.
//! - **Expired is gone.** A reader, permit or place in line whose expiry score has passed
//!   counts for nothing, as the recipes' own scripts treat it, even before a script removes it.
//! - **What a holder entry means, per kind** ([`Kind`]): a lease lock's holder is the key's
//!   random token; a reentrant lock's holder is an owner id with its hold count (several
//!   processes may share the id); a read-write lock has one entry per live reader (its token)
//!   or one for the writer; a semaphore has one entry per acquisition (its id and how many
//!   permits it took). A fencing token is given only where the server knows it: the lease,
//!   reentrant and write holder's is the counter's value, since only they can have taken the
//!   last one; readers and permits share their lock's counter and the server keeps no token per
//!   holder, so theirs is at most [`Participant::latest_token`].
//! - **What a waiter entry means**: a live place in a lease, reentrant or semaphore lock's line
//!   (a waiter that found the lock busy; in join order), or a read-write lock's waiting writer
//!   (its intent mark). Readers blocked by a writer leave no trace on the server and are not
//!   shown.
//! - **Revocation compares before it deletes.** [`Redis::revoke`] removes a hold only if the
//!   same holder (same kind, same token, owner or acquisition id) still has it, in the same
//!   script that deletes it, and wakes waiters as the holder's own release would. The holder's
//!   guard finds its hold gone at its next renewal and reports the loss.

mod read;
mod revoke;

use std::fmt;
use std::time::Duration;

use super::client::Redis;
use super::keys::check_name;
use crate::Result;
use crate::fencing::FencingToken;

pub use revoke::Revoked;

/// Which recipe a Redis lock found under a name is.
///
/// ```no_run
/// # async fn demo(redis: lockkeeper::redis::Redis) -> lockkeeper::Result<()> {
/// use lockkeeper::redis::LockKind;
///
/// let inspection = redis.inspect("pool").await?;
/// if inspection.kinds().contains(&LockKind::Semaphore) {
///     println!("{} permits taken", inspection.holders().map(|h| h.count).sum::<u64>());
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum LockKind {
    /// A [`LeaseLock`](super::LeaseLock) (also [`LocalReentrantLock`](super::LocalReentrantLock)).
    Lease,
    /// A [`ReentrantLock`](super::ReentrantLock).
    Reentrant,
    /// A [`RwLock`](super::RwLock).
    RwLock,
    /// A [`Semaphore`](super::Semaphore).
    Semaphore,
}

impl fmt::Display for LockKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LockKind::Lease => "lease",
            LockKind::Reentrant => "reentrant",
            LockKind::RwLock => "rwlock",
            LockKind::Semaphore => "semaphore",
        })
    }
}

/// What one participant is, by the key it was found in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Kind {
    /// A lease lock's holder (the key's token) or a waiter in its line.
    Lease,
    /// A reentrant lock's owner (with its hold count) or a waiter in its line.
    Reentrant,
    /// A read-write lock's reader.
    Read,
    /// A read-write lock's writer, or the writer waiting for it.
    Write,
    /// A semaphore acquisition (with how many permits it took) or a waiter in its line.
    Permit,
}

impl Kind {
    /// The lock kind this participant belongs to.
    pub fn lock_kind(self) -> LockKind {
        match self {
            Kind::Lease => LockKind::Lease,
            Kind::Reentrant => LockKind::Reentrant,
            Kind::Read | Kind::Write => LockKind::RwLock,
            Kind::Permit => LockKind::Semaphore,
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::Lease => "lease",
            Kind::Reentrant => "reentrant",
            Kind::Read => "read",
            Kind::Write => "write",
            Kind::Permit => "permit",
        })
    }
}

/// Whether a participant holds or waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum State {
    /// Holds the lock (or a read hold, or permits).
    Holds,
    /// Waits for it.
    Waits,
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            State::Holds => "holds",
            State::Waits => "waits",
        })
    }
}

/// One holder or waiter of a Redis lock (see the module docs for what an entry means).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Participant {
    /// What it is.
    pub kind: Kind,
    /// Whether it holds or waits.
    pub state: State,
    /// The key it was found in (the lock, the readers' set, the line…).
    pub key: String,
    /// Who: the lease or reader or writer token, the reentrant owner id, the semaphore
    /// acquisition id, or a waiter's id (its token for the lease lock).
    pub owner: String,
    /// Reentrant holds of the owner, or permits of the acquisition; 1 otherwise.
    pub count: u64,
    /// The holder's fencing token where the server knows it (see the module docs); `None` for
    /// readers, permits and waiters.
    pub fencing_token: Option<FencingToken>,
    /// The last token the lock's counter issued: a holder's own token is at most this.
    pub latest_token: Option<FencingToken>,
    /// What is left of a holder's lease, or until a waiter's place lapses (it refreshes it
    /// while it waits); `None` for a key without expiry.
    pub ttl_left: Option<Duration>,
    /// How long a waiter in a line has waited; `None` for holders and a waiting writer.
    pub waited: Option<Duration>,
}

/// What [`Redis::inspect`] found under a name: holders first, then waiters, by kind.
///
/// Its `Display` is a table for people:
///
/// ```text
/// pool: 2 holding, 1 waiting (semaphore)
/// STATE  KIND    COUNT   TOKEN  LATEST  TTL    OWNER                             KEY
/// holds  permit      1       -       8  29.1s  5d0c3e…                           lockkeeper:semaphore:{pool}
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Inspection {
    /// The inspected lock name.
    pub name: String,
    /// Holders, then waiters, of every kind found.
    pub participants: Vec<Participant>,
}

impl Inspection {
    /// The participants that hold.
    pub fn holders(&self) -> impl Iterator<Item = &Participant> {
        self.participants.iter().filter(|p| p.state == State::Holds)
    }

    /// The participants that wait.
    pub fn waiters(&self) -> impl Iterator<Item = &Participant> {
        self.participants.iter().filter(|p| p.state == State::Waits)
    }

    /// The lock kinds found (holders or waiters), in [`LockKind`] order; usually one.
    pub fn kinds(&self) -> Vec<LockKind> {
        let mut kinds: Vec<LockKind> = self
            .participants
            .iter()
            .map(|p| p.kind.lock_kind())
            .collect();
        kinds.sort();
        kinds.dedup();
        kinds
    }

    /// True when nobody holds or waits under the name.
    pub fn is_empty(&self) -> bool {
        self.participants.is_empty()
    }
}

impl fmt::Display for Inspection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return write!(
                f,
                "{}: not held, nobody waits (no lease, reentrant, read-write or semaphore keys)",
                self.name
            );
        }
        let kinds: Vec<String> = self.kinds().iter().map(ToString::to_string).collect();
        write!(
            f,
            "{}: {} holding, {} waiting ({})",
            self.name,
            self.holders().count(),
            self.waiters().count(),
            kinds.join(", ")
        )?;
        let token = |t: Option<FencingToken>| t.map_or_else(|| "-".to_owned(), |t| t.to_string());
        let rows: Vec<[String; 8]> = std::iter::once(
            [
                "STATE", "KIND", "COUNT", "TOKEN", "LATEST", "TTL", "OWNER", "KEY",
            ]
            .map(str::to_owned),
        )
        .chain(self.participants.iter().map(|p| {
            [
                p.state.to_string(),
                p.kind.to_string(),
                p.count.to_string(),
                token(p.fencing_token),
                token(p.latest_token),
                p.ttl_left
                    .map_or_else(|| "none".to_owned(), |t| format!("{:.1}s", t.as_secs_f64())),
                p.owner.clone(),
                p.key.clone(),
            ]
        }))
        .collect();
        let mut widths = [0; 8];
        for row in &rows {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(cell.chars().count());
            }
        }
        for row in &rows {
            let mut line = String::new();
            for (cell, width) in row.iter().zip(widths) {
                line.push_str(&format!("{cell:<width$}  "));
            }
            write!(f, "\n{}", line.trim_end())?;
        }
        Ok(())
    }
}

impl Redis {
    /// The holders and waiters of every Redis lock kind called `name`: lease, reentrant,
    /// read-write lock and semaphore, read in one atomic step (see the module docs). A name
    /// nobody uses is an empty inspection, not an error; an invalid name is
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument).
    ///
    /// ```no_run
    /// # async fn demo(redis: lockkeeper::redis::Redis) -> lockkeeper::Result<()> {
    /// let inspection = redis.inspect("orders").await?;
    /// println!("{inspection}");
    /// for holder in inspection.holders() {
    ///     println!("{} held by {} for {:?} more", holder.kind, holder.owner, holder.ttl_left);
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn inspect(&self, name: &str) -> Result<Inspection> {
        check_name("lock", name)?;
        read::inspect(self, name).await
    }
}

/// [`Redis::inspect`] as a function, shaped like [`zk::inspect`](crate::zk::inspect).
pub async fn inspect(redis: &Redis, name: &str) -> Result<Inspection> {
    redis.inspect(name).await
}
