//! [`Session::inspect`]: who holds a lock on etcd and who waits, for operators.
//!
//! One range read of every key under `NAME/`, in create-revision order, then each lease's
//! remaining time. Holders are told from waiters by the layouts of this module's recipes, the
//! same rules their waiters follow:
//!
//! - `NAME/{lease:x}`: a mutex holder or waiter, or an election candidate (Go's
//!   `concurrency` layout, so etcdctl's `lock` and `elect` keys too): the first one holds.
//! - `NAME/read/…` and `NAME/write/…`: the read-write lock. A reader holds while no writer
//!   came before it; a writer holds when nothing came before it.
//! - `NAME/{lease:x}-{unique}`: a semaphore's permits. The first `n` hold when the caller says
//!   what `n` is (the server does not store it); otherwise their state is unknown.
//!
//! It only reads; it never changes the lock.

use std::fmt;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::etcd::rpc::RangeRequest;
use crate::etcd::{Session, token};
use crate::fencing::FencingToken;

/// What a key under the lock's prefix is, by its layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `NAME/{lease:x}`: a mutex (lockkeeper's, Go's, etcdctl's) or an election candidate.
    Lock,
    /// `NAME/read/…`: a read side of a read-write lock.
    Read,
    /// `NAME/write/…`: a write side of a read-write lock.
    Write,
    /// `NAME/{lease:x}-{unique}`: a semaphore permit.
    Permit,
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::Lock => "lock",
            Kind::Read => "read",
            Kind::Write => "write",
            Kind::Permit => "permit",
        })
    }
}

/// Whether a participant holds, waits, or cannot be told (a permit without the limit).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// It holds the lock (or a permit, or leadership).
    Holds,
    /// It waits behind a holder.
    Waits,
    /// A semaphore permit when the caller gave no limit to tell holders from waiters.
    Unknown,
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            State::Holds => "holds",
            State::Waits => "waits",
            State::Unknown => "?",
        })
    }
}

/// One key under the lock's prefix.
#[derive(Clone, Debug)]
pub struct Participant {
    /// The full key.
    pub key: String,
    /// What the key is, by its layout.
    pub kind: Kind,
    /// Whether it holds or waits.
    pub state: State,
    /// The key's create revision: the token a holder hands to the resource.
    pub fencing_token: FencingToken,
    /// The key's lease (0: none).
    pub lease: i64,
    /// What is left of the lease's TTL; `None` when it has none or it has already expired.
    pub ttl_left: Option<Duration>,
    /// The key's value (an election candidate's proposal, say).
    pub value: Vec<u8>,
}

/// A lock's keys in queue order (create revision).
#[derive(Clone, Debug)]
pub struct Inspection {
    /// The lock's name, the prefix its keys live under.
    pub name: String,
    /// Every key under the prefix, oldest first.
    pub participants: Vec<Participant>,
}

impl Inspection {
    /// The participants in `state`.
    pub fn with_state(&self, state: State) -> impl Iterator<Item = &Participant> {
        self.participants.iter().filter(move |p| p.state == state)
    }
}

impl fmt::Display for Inspection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let count = |state| self.with_state(state).count();
        write!(
            f,
            "{}: {} holding, {} waiting",
            self.name,
            count(State::Holds),
            count(State::Waits)
        )?;
        let unknown = count(State::Unknown);
        if unknown > 0 {
            write!(f, ", {unknown} permits (give the limit to tell them apart)")?;
        }
        write!(
            f,
            "\n{:<6} {:<7} {:>10}  {:<16}  {:>8}  {:<16}  KEY",
            "STATE", "KIND", "TOKEN", "LEASE", "TTL", "VALUE"
        )?;
        for p in &self.participants {
            let ttl = p
                .ttl_left
                .map_or_else(|| "-".to_owned(), |t| format!("{}s", t.as_secs()));
            let mut value = String::from_utf8_lossy(&p.value).into_owned();
            if value.chars().count() > 16 {
                value = value.chars().take(15).chain(['…']).collect();
            }
            write!(
                f,
                "\n{:<6} {:<7} {:>10}  {:<16x}  {:>8}  {:<16}  {}",
                p.state.to_string(),
                p.kind.to_string(),
                p.fencing_token.get(),
                p.lease,
                ttl,
                value,
                p.key
            )?;
        }
        Ok(())
    }
}

/// The kind of the key `rest` (the part after `NAME/`).
fn kind_of(rest: &str) -> Kind {
    if rest.starts_with("read/") {
        Kind::Read
    } else if rest.starts_with("write/") {
        Kind::Write
    } else if rest.contains('-') {
        Kind::Permit
    } else {
        Kind::Lock
    }
}

/// Each key's state, in create-revision order, by the recipes' rules (see the module docs).
fn states(kinds: &[Kind], max_permits: Option<u32>) -> Vec<State> {
    let mut states = Vec::with_capacity(kinds.len());
    let mut lock_held = false;
    let mut side_before = false;
    let mut writer_before = false;
    let mut permits = 0u32;
    for kind in kinds {
        let state = match kind {
            Kind::Lock => !std::mem::replace(&mut lock_held, true),
            Kind::Read => {
                side_before = true;
                !writer_before
            }
            Kind::Write => {
                writer_before = true;
                !std::mem::replace(&mut side_before, true)
            }
            Kind::Permit => {
                permits += 1;
                match max_permits {
                    Some(n) => permits <= n,
                    None => {
                        states.push(State::Unknown);
                        continue;
                    }
                }
            }
        };
        states.push(if state { State::Holds } else { State::Waits });
    }
    states
}

impl Session {
    /// The keys of the lock, semaphore or election `name`, holders first in queue order, with
    /// each one's fencing token and lease. `max_permits` is a semaphore's limit, which the
    /// server does not store. Only reads.
    ///
    /// ```no_run
    /// # async fn demo(session: lockkeeper::etcd::Session) -> lockkeeper::Result<()> {
    /// println!("{}", session.inspect("orders", None).await?);
    /// # Ok(()) }
    /// ```
    pub async fn inspect(&self, name: &str, max_permits: Option<u32>) -> Result<Inspection> {
        super::check_name("lock", name)?;
        if max_permits == Some(0) {
            return Err(Error::InvalidArgument(format!(
                "the permits of the etcd semaphore {name:?} must be at least 1"
            )));
        }
        let prefix = format!("{name}/");
        let client = self.client();
        let found = client
            .range(RangeRequest::prefix(prefix.as_bytes()).oldest_first())
            .await?;
        let kvs = found.kvs;
        let kinds: Vec<Kind> = kvs
            .iter()
            .map(|kv| kind_of(&String::from_utf8_lossy(&kv.key[prefix.len()..])))
            .collect();
        let states = states(&kinds, max_permits);
        let mut participants = Vec::with_capacity(kvs.len());
        for ((kv, kind), state) in kvs.into_iter().zip(kinds).zip(states) {
            let ttl_left = match kv.lease {
                0 => None,
                lease => {
                    let answer = client.time_to_live(lease).await?;
                    u64::try_from(answer.ttl).ok().map(Duration::from_secs)
                }
            };
            participants.push(Participant {
                key: String::from_utf8_lossy(&kv.key).into_owned(),
                kind,
                state,
                fencing_token: token(kv.create_revision),
                lease: kv.lease,
                ttl_left,
                value: kv.value,
            });
        }
        Ok(Inspection {
            name: name.to_owned(),
            participants,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_follow_the_layouts() {
        assert_eq!(kind_of("694d7f3a1c2b0a11"), Kind::Lock);
        assert_eq!(kind_of("read/694d-ab12"), Kind::Read);
        assert_eq!(kind_of("write/694d-ab12"), Kind::Write);
        assert_eq!(kind_of("694d-ab12"), Kind::Permit);
    }

    #[test]
    fn states_follow_the_waiting_rules() {
        use Kind::*;
        use State::*;
        assert_eq!(states(&[Lock, Lock, Lock], None), [Holds, Waits, Waits]);
        // Readers share until a writer; a reader after a waiting writer waits behind it.
        assert_eq!(
            states(&[Read, Read, Write, Read], None),
            [Holds, Holds, Waits, Waits]
        );
        assert_eq!(states(&[Write, Read], None), [Holds, Waits]);
        assert_eq!(
            states(&[Permit, Permit, Permit], Some(2)),
            [Holds, Holds, Waits]
        );
        assert_eq!(states(&[Permit, Permit], None), [Unknown, Unknown]);
    }
}
