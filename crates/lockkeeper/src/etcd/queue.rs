//! Taking a place and waiting for the grant: the one acquisition every etcd lock shares.
//!
//! 1. (Keys named the same for every acquisition of a session, the Go layout `NAME/{lease:x}`)
//!    take the session-local lock of the key, so two handles of one session do not share it.
//! 2. One transaction: if the key does not exist, put it with the session's lease and read
//!    the lowest create revisions under the prefix waited on; else read the key. The put's
//!    revision is the key's create revision: its place in line and its fencing token. A key of
//!    ours left over from an earlier acquisition (a release whose answer was lost) is deleted
//!    and the transaction tried again, so no two grants share a token.
//! 3. If the read shows few enough earlier keys, granted (one round trip); else wait as
//!    [`wait`](crate::etcd::wait) describes, each look also checking that the key is still
//!    there (an operator may have deleted it: then take a new place).
//! 4. With lock-delay, wait out the failures seen (see [`delay`](crate::etcd::delay)).
//!
//! The transaction runs in a spawned task whose result owns the key ([`Held`]): if the caller
//! goes away (a dropped future, a timeout) while it is in flight, the task's result is dropped
//! when it lands and the key deleted, so no abandoned key blocks the line.
//!
//! A timed wait is bounded as a whole ([`crate::deadline`]): past its deadline, entering and
//! withdrawing get [`WITHDRAWAL`] more, and an etcd that has not answered by then is an error
//! naming that, not "not acquired". `Ok(None)` means etcd was heard: the key was withdrawn.

use crate::deadline::{Deadline, WITHDRAWAL};
use crate::error::{Error, Result};
use crate::etcd::delay;
use crate::etcd::error::{EtcdError, is_transient};
use crate::etcd::guard::{Held, HoldOptions, LockGuard};
use crate::etcd::rpc::{Compare, PutRequest, RangeRequest, RequestOp, TxnRequest};
use crate::etcd::session::{RETRY_PAUSE, Session};
use crate::etcd::wait::{Earlier, Waited, wait_for_earlier};

/// How often a stale key of ours is cleared before the acquisition gives up.
const STALE_CLEARINGS: u32 = 16;

/// What one acquisition puts and waits on.
#[derive(Clone, Debug)]
pub(crate) struct Place {
    /// The key to create.
    pub key: Vec<u8>,
    /// Its value (the proclaimed value of a candidate, empty for locks).
    pub value: Vec<u8>,
    /// The prefix whose earlier keys count.
    pub wait_on: Vec<u8>,
    /// How many earlier keys may remain at the grant.
    pub admits: usize,
    /// Whether the key is the same for every acquisition of the session (see step 1).
    pub per_session: bool,
}

/// Acquires `place`: `Ok(None)` when `deadline` passed first (no key left behind); an error
/// when etcd did not answer within [`WITHDRAWAL`] of the deadline.
pub(crate) async fn acquire(
    session: &Session,
    place: &Place,
    options: &HoldOptions,
    deadline: Deadline,
) -> Result<Option<LockGuard>> {
    loop {
        if !session.is_alive() {
            return Err(Error::SessionLost);
        }
        let permit = if place.per_session {
            let local = session.local_lock(&place.key);
            let permit = match deadline {
                Deadline::Now => local.try_lock_owned().ok(),
                _ => tokio::select! {
                    permit = local.lock_owned() => Some(permit),
                    () = deadline.sleep() => None,
                },
            };
            match permit {
                Some(permit) => Some(permit),
                None => return Ok(None),
            }
        } else {
            None
        };
        // A leader change or a lost quorum keeps the transaction failing for a while: a timed
        // acquisition gives up at its deadline (the key, if one lands, is deleted then), and
        // `try_` makes one attempt and reports a transient error as it is.
        let entering = enter(session, place, permit, !matches!(deadline, Deadline::Now));
        let (held, at_once) = match deadline {
            Deadline::Now | Deadline::Never => entering.await?,
            Deadline::At(at) => {
                tokio::pin!(entering);
                tokio::select! {
                    entered = &mut entering => entered?,
                    () = tokio::time::sleep_until(at) => {
                        // Past the deadline: the key, if it lands in time, is withdrawn at once.
                        let by = at + WITHDRAWAL;
                        let entered = tokio::time::timeout_at(by, entering)
                            .await
                            .map_err(|_| unanswered("while taking a place in line"))?;
                        let (held, _) = entered.map_err(|err| match err {
                            Error::Etcd(err) if is_transient(&err) => {
                                unanswered("while taking a place in line")
                            }
                            err => err,
                        })?;
                        withdraw(held, Some(by)).await?;
                        return Ok(None);
                    }
                }
            }
        };
        let earlier = Earlier {
            own: &place.key,
            prefix: &place.wait_on,
            rev: held.rev,
            admits: place.admits,
        };
        let mut gone = Vec::new();
        if !at_once {
            if let Deadline::Now = deadline {
                withdraw(held, None).await?;
                return Ok(None);
            }
            match wait_for_earlier(session, &earlier, deadline, &mut gone).await? {
                Waited::Granted => {}
                Waited::TimedOut => {
                    withdraw(held, deadline.withdrawn_by()).await?;
                    return Ok(None);
                }
                // Nothing of ours is left in line: take a new place (the loop's first step
                // ends the acquisition if the session went with the key).
                Waited::KeyGone => {
                    held.forget();
                    continue;
                }
            }
        }
        if let Some((delay, record)) = &options.lock_delay {
            if let Some(until) =
                delay::delayed_until(session, record, &gone, *delay, held.rev).await
            {
                if let Deadline::Now = deadline {
                    withdraw(held, None).await?;
                    return Ok(None);
                }
                tokio::select! {
                    () = tokio::time::sleep_until(until) => {}
                    () = session.lost() => return Err(Error::SessionLost),
                    () = deadline.sleep() => {
                        withdraw(held, deadline.withdrawn_by()).await?;
                        return Ok(None);
                    }
                }
            }
            delay::note_held(session, record, &held.key, held.rev).await;
        }
        if !session.is_alive() {
            return Err(Error::SessionLost);
        }
        return Ok(Some(LockGuard::grant(held, options)));
    }
}

/// Deletes the key of a waiter that gives up before answering, so that "not granted" leaves
/// nothing behind. In a task of its own: a caller going away meanwhile cannot stop it half-way,
/// and one that stops waiting at `by` leaves the task to finish the delete (or the lease to take
/// the key) while it reports that etcd did not answer.
async fn withdraw(held: Held, by: Option<tokio::time::Instant>) -> Result<()> {
    let withdrawn = tokio::spawn(async move {
        match held.release().await {
            Ok(()) | Err(Error::NotHeld) => Ok(()),
            Err(err) => {
                tracing::warn!(key = %held.key_text(), %err, "withdrawing a waiter's key failed");
                Err(err)
            }
        }
    });
    let answer = match by {
        Some(by) => tokio::time::timeout_at(by, withdrawn)
            .await
            .map_err(|_| unanswered("while withdrawing the waiting key"))?,
        None => withdrawn.await,
    };
    answer.unwrap_or(Ok(()))
}

/// The error of a timed wait whose deadline passed with etcd not answering `doing`: a transient
/// etcd error, so callers see the backend as unreachable rather than the lock as taken.
fn unanswered(doing: &str) -> Error {
    Error::Etcd(EtcdError::no_answer(format!(
        "etcd is unreachable: no answer within {WITHDRAWAL:?} of the deadline {doing}"
    )))
}

/// Step 2: the key, and whether the transaction's read already grants it. Transient errors
/// are tried again while the session lives when `retry`, else returned.
async fn enter(
    session: &Session,
    place: &Place,
    permit: Option<tokio::sync::OwnedMutexGuard<()>>,
    retry: bool,
) -> Result<(Held, bool)> {
    let (session, place) = (session.clone(), place.clone());
    // Spawned so that a caller going away cannot leave a key behind (see the module docs).
    let task = tokio::spawn(async move {
        let mut permit = permit;
        // Transient errors (a leader change) are retried for as long as the session lives, as
        // while waiting; only a key that keeps coming back is given up on.
        let mut stale = 0;
        loop {
            if !session.is_alive() {
                return Err(Error::SessionLost);
            }
            match try_enter(&session, &place).await {
                Ok(Entered::Put { rev, at_once }) => {
                    let held = Held::new(session.clone(), place.key.clone(), rev, permit.take());
                    return Ok((held, at_once));
                }
                Ok(Entered::Stale(_)) if stale >= STALE_CLEARINGS => {
                    return Err(Error::Etcd(EtcdError::internal(format!(
                        "could not create the key {:?}: it kept existing",
                        String::from_utf8_lossy(&place.key)
                    ))));
                }
                Ok(Entered::Stale(rev)) => {
                    stale += 1;
                    crate::etcd::guard::delete(&session, &place.key, rev, None)
                        .await
                        .or_else(|err| match err {
                            Error::NotHeld => Ok(()),
                            other => Err(other),
                        })?;
                }
                Err(err) if retry && is_transient(&err) => tokio::time::sleep(RETRY_PAUSE).await,
                Err(err) => return Err(Error::Etcd(err)),
            }
        }
    });
    task.await.map_err(|err| {
        Error::Etcd(EtcdError::internal(format!(
            "the acquiring task failed: {err}"
        )))
    })?
}

enum Entered {
    /// Created at `rev`; `at_once` if the read in the same transaction grants it.
    Put { rev: i64, at_once: bool },
    /// The key was there already, created at this revision.
    Stale(i64),
}

async fn try_enter(session: &Session, place: &Place) -> std::result::Result<Entered, EtcdError> {
    let key = place.key.as_slice();
    let first = Earlier {
        own: key,
        prefix: &place.wait_on,
        rev: 0,
        admits: place.admits,
    };
    let put = PutRequest::new(key, place.value.clone(), session.lease_id());
    let txn = TxnRequest {
        compare: vec![Compare::created_at(key, 0)],
        success: vec![RequestOp::put(put), RequestOp::range(first.first())],
        failure: vec![RequestOp::range(RangeRequest::key(key))],
    };
    let answer = session.client().txn(txn).await?;
    let responses = &answer.responses;
    if !answer.succeeded {
        let rev = responses
            .first()
            .and_then(|op| op.as_range())
            .and_then(|found| found.kvs.first())
            .map(|kv| kv.create_revision);
        // Deleted between the compare and now is impossible (one transaction); no answer is
        // treated as "try again".
        return Ok(Entered::Stale(rev.unwrap_or(0)));
    }
    let rev = answer.header.as_ref().map_or(0, |h| h.revision);
    let at_once = match responses.get(1).and_then(|op| op.as_range()) {
        Some(found) => Earlier { rev, ..first }.grants(&found.kvs),
        None => false,
    };
    Ok(Entered::Put { rev, at_once })
}
