//! One apply: the single function that changes the state a transaction changes.
//!
//! Live writes, recovery's replay of the log and the reload after a disk fault all go through
//! [`apply`], so replaying a log rebuilds exactly the state the live server had (the data tree,
//! the sessions and the last zxid). Invariants:
//! - **Deterministic.** What `apply` changes depends only on the state, the txn, its zxid and
//!   its time; nothing here reads the clock except for a session's expiry deadline, which
//!   [`State::resume`] sets afresh before a recovered state serves anyone.
//! - **State only.** Watch firing, replies and the log are the live path's business: `apply`
//!   returns what it did ([`Applied`]) and the core acts on it.

use std::time::{Duration, Instant};

use crate::state::session::{SessionRecord, Sessions};
use crate::state::tree::DataTree;
use crate::state::txn::{self, Trigger, Txn, TxnResult};

/// Everything a transaction changes.
pub(crate) struct State {
    pub tree: DataTree,
    pub sessions: Sessions,
    /// The newest zxid applied (or, in a live server, handed out: a rejected write uses one too).
    pub last_zxid: i64,
}

/// What applying one txn did: the result the reply is made from, and the changes a watch may
/// be waiting for.
pub(crate) struct Applied {
    pub result: TxnResult,
    pub triggers: Vec<Trigger>,
}

impl State {
    /// The state of a data dir that holds nothing yet.
    pub(crate) fn empty() -> State {
        State {
            tree: DataTree::new(),
            sessions: Sessions::new(Duration::ZERO, Duration::MAX),
            last_zxid: 0,
        }
    }

    /// The state a snapshot holds, taken at `zxid`.
    pub(crate) fn restore(tree: DataTree, sessions: &[SessionRecord], zxid: i64) -> State {
        let mut state = State {
            tree,
            last_zxid: zxid,
            ..State::empty()
        };
        let now = Instant::now();
        for s in sessions {
            state
                .sessions
                .insert(s.id, s.passwd, timeout(s.timeout_ms), now);
        }
        state
    }

    /// Makes a recovered state ready to serve: the sessions negotiate within `[min, max]`, every
    /// session's expiry deadline starts now (the time they spent in the log is not held against
    /// them), and every ephemeral belongs to a session that can expire, or it would live forever.
    pub(crate) fn resume(&mut self, min: Duration, max: Duration, now: Instant) {
        self.sessions.set_timeout_bounds(min, max);
        self.sessions.restart_deadlines(now);
        for owner in self.tree.ephemeral_owners() {
            if self.sessions.get(owner).is_none() {
                tracing::warn!(
                    session = format_args!("{owner:#x}"),
                    "ephemerals of an unknown session; it will expire"
                );
                self.sessions.insert(owner, rand::random(), min, now);
            }
        }
    }
}

/// Applies `txn` at `zxid` (logged at wall-clock `time`, in ms) to the whole state.
pub(crate) fn apply(state: &mut State, txn: &Txn, zxid: i64, time: i64) -> Applied {
    match txn {
        Txn::CreateSession {
            session_id,
            timeout_ms,
            passwd,
        } => {
            state
                .sessions
                .insert(*session_id, *passwd, timeout(*timeout_ms), Instant::now());
        }
        Txn::CloseSession { session_id } => {
            state.sessions.remove(*session_id);
        }
        _ => {}
    }
    let mut triggers = Vec::new();
    let result = txn::apply(&mut state.tree, txn, zxid, time, &mut triggers);
    state.last_zxid = state.last_zxid.max(zxid);
    Applied { result, triggers }
}

fn timeout(ms: i32) -> Duration {
    Duration::from_millis(ms.max(0) as u64)
}
