//! Leader election: the ZooKeeper recipe, with Curator's `LeaderLatch` node layout so Java
//! and Rust replicas can stand in one election.
//!
//! Every participant queues an ephemeral-sequential node `{path}/_c_{uuid}-latch-{sequence}`
//! whose data is its id in UTF-8; the lowest sequence leads, and every other participant
//! watches the node just before its own (getData) and the one before that (to list again
//! early), so a leader's departure wakes at most two participants. That is the locks' waiting
//! line (`zk/locks/line.rs`) with the latch marker and the id as the node's data; this module
//! adds what makes a lock a leadership:
//!
//! - **One term, one node.** A term starts when our node is first *and* read back as owned by
//!   our session, and ends when that node goes (resign, requeue, loss). A new term always
//!   queues a new node, so its fencing token (the node's czxid) is higher than every earlier
//!   term's: sequence order is creation order is zxid order, and a node only leads once every
//!   node created before it is gone.
//! - **Confirmed before trusted.** Curator's latch could act on a listing that showed a node
//!   its session no longer had (CURATOR-696, two leaders after a reconnect). Here the grant is
//!   followed by a read of our own node: it must exist and its ephemeral owner must be the
//!   session that queued it, or we queue again.
//! - **A deleted latch path is re-joined** (CURATOR-724): a waiter whose node vanished queues
//!   again, creating the missing parents as containers; a leader whose node vanished sees
//!   [`Leadership::lost`], and [`LeaderLatch::run`] queues again.
//! - **A leader knows at once.** [`Leadership::is_leader`] is live: the term's node is
//!   watched from the grant on, so the moment it is deleted (by an operator, a revoker, or
//!   the session's expiry on the server) `is_leader()` is false, before the next participant
//!   can be granted, whether or not anyone awaits [`Leadership::lost`].
//! - **No orphans.** A node granted but found not ours on the read-back (rewritten, or gone
//!   with an expired session) is deleted before queueing again, so a participant never waits
//!   behind its own leftover node.
//! - **Maximum hold time.** [`LeaderLatch::max_hold`] ends every term at a fixed time after its
//!   grant: `is_leader()` turns false and the node is deleted, and [`LeaderLatch::run`] queues
//!   again at the back.
//! - **Suspension.** By default a suspended connection ends trust in the leadership at once
//!   (Curator's standard error policy); [`LockOptions::keep_through_suspension`](crate::LockOptions::keep_through_suspension) keeps it
//!   through a suspension that reconnects to the same session before its deadline (Curator's
//!   session error policy). A session loss ends it either way.
//!
//! The latch path must hold latch nodes only (as Curator requires). Nodes of another recipe
//! are sorted by their whole name, not by their sequence: a name that sorts before the
//! sequence digits would block the queue, and Curator's `LeaderSelector` (whose nodes are
//! `-lock-`, not `-latch-`) on the same path would lead beside this latch. Share a path with
//! Curator's `LeaderLatch` only.

mod confirm;
mod leadership;
mod run;

use std::time::Duration;

use futures_util::future::join_all;

pub use leadership::{LeaderTerm, Leadership};

use crate::deadline::Deadline;
use crate::error::{Error, Result};
use crate::fencing::FencingToken;
use crate::options::{Configure, Delay, LockOptions, Setting};
use crate::zk::hold::HoldOptions;
use crate::zk::locks::line::{LATCH_MARKER, Line, predecessor_rule};
use crate::zk::path::validate_node_path;
use crate::zk::session::Session;

impl Session {
    /// A participant `id` in the election at `path` (Curator's `LeaderLatch` layout). Each
    /// call makes a separate participant, even with the same id.
    ///
    /// [`Error::InvalidArgument`] for a path that is not absolute, or an empty id.
    pub fn leader_latch(&self, path: &str, id: &str) -> Result<LeaderLatch> {
        LeaderLatch::new(self.clone(), path, id)
    }
}

/// A participant in a leader election.
///
/// ```no_run
/// # async fn demo(session: lockkeeper::zk::Session) -> lockkeeper::Result<()> {
/// let latch = session.leader_latch("/services/billing/leader", "billing-1")?;
/// let leadership = latch.lead().await?;
/// println!("leading with fencing token {}", leadership.fencing_token());
/// tokio::select! {
///     () = leadership.lost() => eprintln!("no longer leader: stop"),
///     () = tokio::time::sleep(std::time::Duration::from_secs(60)) => {} // the leader's work
/// }
/// leadership.resign().await?;
/// # Ok(()) }
/// ```
///
/// - **Fair and herd-free**: participants lead in order of arrival; a departure wakes at most
///   two.
/// - **Cancel-safe**: dropping a [`lead`](LeaderLatch::lead) future deletes its node.
/// - **Interoperable**: Curator's `LeaderLatch` on the same path queues in the same order, and
///   [`leader`](LeaderLatch::leader) names the same participant as Curator's `getLeader()`.
///   (Curator's `LeaderSelector` uses another node name, `-lock-`: it must not share a path
///   with a latch, Curator's or this one.)
#[derive(Clone)]
pub struct LeaderLatch {
    session: Session,
    queue: Line,
    id: String,
    /// What each term's hold gets: the suspension policy and the maximum hold time.
    options: HoldOptions,
}

/// One participant of an election, as [`LeaderLatch::candidates`] lists them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// The participant's id (its node's data; not UTF-8 bytes are replaced).
    pub id: String,
    /// The ZooKeeper session that owns the node.
    pub session_id: i64,
    /// The full path of its latch node.
    pub node: String,
    /// The czxid of its node: the fencing token it leads with when its turn comes.
    pub fencing_token: FencingToken,
    /// Whether it is first in the queue, i.e. the leader.
    pub is_leader: bool,
}

impl LeaderLatch {
    fn new(session: Session, path: &str, id: &str) -> Result<LeaderLatch> {
        validate_node_path("election path", path)?;
        if id.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "participant id for the election at {path:?} is empty"
            )));
        }
        Ok(LeaderLatch {
            session,
            queue: Line {
                dir: path.to_owned(),
                marker: LATCH_MARKER,
                markers: &[LATCH_MARKER],
            },
            id: id.to_owned(),
            options: HoldOptions::default(),
        })
    }

    /// How leadership is held ([`LockOptions`]):
    /// - `max_hold`: every term ends that long after its grant: from then on `is_leader()` is
    ///   false and [`lost`](Leadership::lost) resolves, and the node is deleted, which grants
    ///   the next participant. For a leader that must not keep the role forever (a stuck
    ///   leader hands over instead of blocking the election); [`run`](LeaderLatch::run)
    ///   queues again.
    /// - `keep_through_suspension`: leadership survives a suspended connection that reconnects
    ///   to the same session before the session's deadline, instead of ending at the first
    ///   suspension. Choose it when a leadership change costs more than a leader that acts
    ///   during a few seconds of doubt; its writes must then carry the fencing token, because
    ///   during the suspension another participant may already lead if the session expired on
    ///   the server.
    ///
    /// [`Error::InvalidArgument`] for a zero duration or an option a latch does not take
    /// (`lease`, `watchdog`, `lock_delay`).
    pub fn with_options(self, options: LockOptions) -> Result<LeaderLatch> {
        options.apply(self)
    }

    /// The election path (the parent of the latch nodes).
    pub fn path(&self) -> &str {
        &self.queue.dir
    }

    /// This participant's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Queues and waits until this participant leads.
    ///
    /// [`Error::SessionLost`] if the session ends while waiting (the node went with it; call
    /// again to queue in the next session, or use [`run`](LeaderLatch::run), which does).
    pub async fn lead(&self) -> Result<Leadership> {
        let leadership = self.acquire(Deadline::Never).await?;
        leadership.ok_or(Error::SessionLost)
    }

    /// Leads only if nobody else does now; `None` otherwise (no node is left behind).
    pub async fn try_lead(&self) -> Result<Option<Leadership>> {
        self.acquire(Deadline::Now).await
    }

    /// Waits at most `timeout` to lead; `None` if the turn did not come in time (the node is
    /// deleted before this returns). A zero timeout is refused: use
    /// [`try_lead`](LeaderLatch::try_lead).
    pub async fn lead_timeout(&self, timeout: Duration) -> Result<Option<Leadership>> {
        self.acquire(Deadline::after(timeout)?).await
    }

    async fn acquire(&self, deadline: Deadline) -> Result<Option<Leadership>> {
        loop {
            let Some(held) = self
                .queue
                .acquire_as(
                    &self.session,
                    &predecessor_rule,
                    deadline,
                    self.id.as_bytes(),
                    self.options,
                )
                .await?
            else {
                return Ok(None);
            };
            if leadership::owned_by_session(&held, self.id.as_bytes()).await? {
                return Ok(Some(Leadership::new(held, self.clone())));
            }
            // Granted on a listing, but the node is not (or no longer) ours on the server:
            // never lead on it. If it is still there (its data was rewritten), delete it, or
            // the next node would queue behind it until the session ends. Then queue again,
            // unless the caller would not wait.
            tracing::warn!(
                node = held.node(),
                "latch node not owned by this session when granted; queueing again"
            );
            match held.release().await {
                Ok(()) | Err(Error::NotHeld) => {}
                Err(err) => return Err(err),
            }
            if deadline.passed() {
                return Ok(None);
            }
        }
    }

    /// Everyone in the election, in queue order (the leader first): what Curator's
    /// `getParticipants()` shows, plus each one's session and token.
    pub async fn candidates(&self) -> Result<Vec<Candidate>> {
        let generation = self.session.connected_generation().await?;
        let children = match generation
            .retry(|client| async move { client.list_children(&self.queue.dir).await })
            .await
        {
            Ok(children) => children,
            Err(Error::Zk(lockkeeper_zk_client::Error::NoNode)) => return Ok(Vec::new()),
            Err(err) => return Err(err),
        };
        let names: Vec<String> = self
            .queue
            .sort(children)
            .into_iter()
            .filter(|name| name.contains(LATCH_MARKER))
            .collect();
        // All reads are sent before the first answer is awaited: one round trip in all.
        let client = generation.client()?;
        let paths: Vec<String> = names
            .iter()
            .map(|name| format!("{}/{}", self.queue.dir, name))
            .collect();
        let reads = join_all(paths.iter().map(|path| client.get_data(path))).await;
        let mut candidates = Vec::with_capacity(names.len());
        for (path, read) in paths.into_iter().zip(reads) {
            match read {
                Ok((data, stat)) => candidates.push(Candidate {
                    id: String::from_utf8_lossy(&data).into_owned(),
                    session_id: stat.ephemeral_owner,
                    node: path,
                    fencing_token: FencingToken::new(stat.czxid as u64),
                    is_leader: candidates.is_empty(),
                }),
                // Left between the listing and the read: no longer a candidate.
                Err(lockkeeper_zk_client::Error::NoNode) => {}
                Err(err) => return Err(Error::Zk(err)),
            }
        }
        Ok(candidates)
    }

    /// The participant leading now, as Curator's `getLeader()` names it; `None` when nobody
    /// is queued.
    pub async fn leader(&self) -> Result<Option<Candidate>> {
        Ok(self.candidates().await?.into_iter().next())
    }
}

impl std::fmt::Debug for LeaderLatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderLatch")
            .field("path", &self.queue.dir)
            .field("id", &self.id)
            .field("suspension", &self.options.suspension)
            .field("max_hold", &self.options.max_hold)
            .finish()
    }
}

impl Configure for LeaderLatch {
    fn described(&self) -> String {
        format!("the leader latch {:?}", self.queue.dir)
    }

    fn set(&mut self, setting: Setting) -> Result<bool> {
        self.options.set(&self.queue.dir, setting, Delay::NotTaken)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latch_nodes_sort_by_sequence() {
        let queue = Line {
            dir: "/e".into(),
            marker: LATCH_MARKER,
            markers: &[LATCH_MARKER],
        };
        let sorted = queue.sort(vec![
            "_c_ffff-latch-0000000007".into(),
            "_c_0000-latch-0000000012".into(),
            "_c_8888-latch-0000000003".into(),
        ]);
        assert_eq!(sorted[0], "_c_8888-latch-0000000003");
        assert_eq!(sorted[2], "_c_0000-latch-0000000012");
    }
}
