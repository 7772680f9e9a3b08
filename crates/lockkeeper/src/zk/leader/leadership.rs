//! The leadership guard: one term of one participant, shaped like the lock guards.
//!
//! A term is one latch node (see the module docs of the election). [`Leadership`] owns it:
//! resigning or dropping it deletes the node; [`LeaderTerm`] is a cheap, clonable view of the
//! same term for the task that does the leader's work, which may watch the term but not end
//! it.

use std::sync::Arc;

use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::fencing::FencingToken;
use crate::zk::hold::Held;
use crate::zk::leader::LeaderLatch;
use crate::zk::node::{is_ours, look};
use crate::zk::session::Generation;

/// Whether the node of a fresh grant exists, carries our id and is owned by the session that
/// queued it.
pub(super) async fn owned_by_session(held: &Held, id: &[u8]) -> Result<bool> {
    let generation = held.generation();
    match look(generation, held.node(), false).await? {
        Some((data, stat, _)) => Ok(is_ours(generation, id, &data, &stat)),
        None => Ok(false),
    }
}

/// One term of leadership: proof that this participant leads, until [`lost`] resolves.
///
/// Dropping it resigns (best effort, in a background task); [`resign`] resigns and reports
/// the outcome.
///
/// [`lost`]: Leadership::lost
/// [`resign`]: Leadership::resign
#[must_use = "leadership is resigned when the guard is dropped"]
pub struct Leadership {
    term: LeaderTerm,
    latch: LeaderLatch,
    /// Set once the term was ended explicitly, so that `Drop` does not delete twice.
    done: bool,
}

/// A view of one term for the task doing the leader's work: token, deadline and loss, but
/// not the power to end the term. Cheap to clone.
#[derive(Clone)]
pub struct LeaderTerm {
    held: Arc<Held>,
}

impl LeaderTerm {
    /// The czxid of this term's latch node: higher than every earlier term's of this
    /// election, so a resource that refuses lower tokens refuses a deposed leader's writes.
    pub fn fencing_token(&self) -> FencingToken {
        self.held.token()
    }

    /// Whether this participant can still be sure it leads: its node is there as far as it
    /// knows, and its session is connected (or, with
    /// [`keep_through_suspension`](crate::LockOptions::keep_through_suspension), not yet past its
    /// deadline). Answered locally, with no round trip, and live: the term's node is watched
    /// from the grant on, so a deposed leader answers false as soon as the deletion event
    /// arrives, whether or not anyone awaits [`lost`](LeaderTerm::lost).
    pub fn is_leader(&self) -> bool {
        self.held.is_held()
    }

    /// Until when the leadership is certainly still held, as far as this process can know
    /// without asking (the session's deadline: see
    /// [`LockGuard::valid_until`](crate::zk::LockGuard::valid_until)); `None` once
    /// [`is_leader`](LeaderTerm::is_leader) is false.
    pub fn valid_until(&self) -> Option<Instant> {
        self.held.valid_until()
    }

    /// Resolves as soon as this participant can no longer be sure it leads: its node was
    /// deleted, its session ended or passed its deadline, or (by default) the connection was
    /// suspended. Cancel-safe.
    pub async fn lost(&self) {
        self.held.lost().await;
    }

    /// The full path of this term's latch node.
    pub fn node(&self) -> &str {
        self.held.node()
    }
}

impl Leadership {
    pub(super) fn new(held: Held, latch: LeaderLatch) -> Leadership {
        Leadership {
            term: LeaderTerm { held: held.share() },
            latch,
            done: false,
        }
    }

    /// A view of this term for a task (see [`LeaderTerm`]).
    pub fn term(&self) -> LeaderTerm {
        self.term.clone()
    }

    /// See [`LeaderTerm::fencing_token`].
    pub fn fencing_token(&self) -> FencingToken {
        self.term.fencing_token()
    }

    /// See [`LeaderTerm::is_leader`].
    pub fn is_leader(&self) -> bool {
        self.term.is_leader()
    }

    /// See [`LeaderTerm::valid_until`].
    pub fn valid_until(&self) -> Option<Instant> {
        self.term.valid_until()
    }

    /// See [`LeaderTerm::lost`].
    pub async fn lost(&self) {
        self.term.lost().await;
    }

    /// The full path of this term's latch node.
    pub fn node(&self) -> &str {
        self.term.node()
    }

    /// The session generation this term lives in.
    pub(super) fn generation(&self) -> &Arc<Generation> {
        self.term.held.generation()
    }

    /// The participant this leadership belongs to.
    pub fn latch(&self) -> &LeaderLatch {
        &self.latch
    }

    /// Gives up leadership and leaves the election: the node is deleted, which wakes the next
    /// participant. [`Error::NotLeader`] if the leadership was already gone (node deleted,
    /// session ended, maximum hold time passed).
    pub async fn resign(mut self) -> Result<()> {
        self.done = true;
        match self.term.held.release().await {
            Err(Error::NotHeld) => Err(Error::NotLeader),
            released => released,
        }
    }

    /// Gives up leadership and queues again at the back: resigns, then waits for the next
    /// term (a new node, so a higher fencing token). A leadership already lost still queues
    /// again.
    pub async fn requeue(mut self) -> Result<Leadership> {
        self.done = true;
        match self.term.held.release().await {
            Ok(()) | Err(Error::NotHeld) => {}
            Err(err) => return Err(err),
        }
        self.latch.lead().await
    }
}

impl Drop for Leadership {
    fn drop(&mut self) {
        if !self.done {
            self.term.held.clone().release_in_background();
        }
    }
}

impl std::fmt::Debug for Leadership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leadership")
            .field("id", &self.latch.id())
            .field("node", &self.term.node())
            .field("fencing_token", &self.term.fencing_token())
            .field("is_leader", &self.term.is_leader())
            .finish()
    }
}

impl std::fmt::Debug for LeaderTerm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderTerm")
            .field("node", &self.node())
            .field("fencing_token", &self.fencing_token())
            .field("is_leader", &self.is_leader())
            .finish()
    }
}
