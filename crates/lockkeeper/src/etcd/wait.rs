//! The one way every etcd recipe waits: until few enough keys created before its own remain
//! under a prefix.
//!
//! A waiter's key has a create revision `rev`; it is granted when at most `admits` keys under
//! the prefix it waits on have a lower create revision (0 for a mutex, a writer, a reader
//! looking at writers, a candidate; `n - 1` for a semaphore of `n`). To wait, it reads the
//! `admits + 1` keys with the *highest* create revisions below its own (Go's
//! `WithLastCreate` + `WithMaxCreateRev(rev - 1)`) and watches them for a deletion (from the
//! current revision, then checking they are still there: see `wait_for_a_deletion`); then it
//! reads again. For `admits == 0` that is exactly Go's
//! `waitDeletes`: one key, the one just before, so a release wakes one waiter.
//!
//! Why the highest ones suffice: while all `admits + 1` of them exist there are more than
//! `admits` earlier keys, so the waiter cannot be granted until one of *them* goes; deletions
//! of older keys change nothing it could act on. Keys created after the read have higher
//! revisions than the waiter's and never count.
//!
//! Every wait also ends, with [`Error::SessionLost`], when the waiter's own session is lost
//! (its key is gone or going with the lease: waiting on would be etcd #19597), and with
//! "not granted" at the caller's deadline.

use std::time::Duration;

use tokio::time::Instant;

use crate::deadline::Deadline;
use crate::error::{Error, Result};
use crate::etcd::error::{EtcdError, is_transient};
use crate::etcd::rpc::{
    Client, Compare, KeyValue, RangeRequest, RequestOp, TxnRequest, WatchCreateRequest,
    WatchResponse,
};
use crate::etcd::session::{RETRY_PAUSE, Session};

/// What a wait came to.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Waited {
    /// At most `admits` earlier keys are left.
    Granted,
    /// The deadline came first.
    TimedOut,
    /// The waiter's own key is gone (its lease, an operator): it is no longer in line.
    KeyGone,
}

/// A key a waiter saw deleted ahead of it.
#[derive(Clone, Debug)]
pub(crate) struct Gone {
    pub create_rev: i64,
    /// The revision of the deletion.
    pub deleted_at: i64,
    /// When the waiter saw it.
    pub seen: Instant,
}

/// The keys counted as "before" a waiter: those under `prefix` created before `rev`.
#[derive(Clone, Debug)]
pub(crate) struct Earlier<'a> {
    /// The waiter's own key.
    pub own: &'a [u8],
    pub prefix: &'a [u8],
    pub rev: i64,
    pub admits: usize,
}

impl Earlier<'_> {
    /// Whether the keys `first` (the lowest create revisions under the prefix, ascending, at
    /// least `admits + 1` of them when there are that many) grant the waiter.
    pub(crate) fn grants(&self, first: &[KeyValue]) -> bool {
        first
            .iter()
            .filter(|kv| kv.create_revision < self.rev)
            .count()
            <= self.admits
    }

    /// The read of the `admits + 1` lowest create revisions under the prefix (for the
    /// uncontended path, inside the acquiring transaction).
    pub(crate) fn first(&self) -> RangeRequest {
        RangeRequest::prefix(self.prefix)
            .oldest_first()
            .limit(limit(self.admits))
            .keys_only()
    }
}

fn limit(admits: usize) -> i64 {
    i64::try_from(admits).unwrap_or(i64::MAX - 1) + 1
}

/// Waits until at most `earlier.admits` keys under the prefix were created before
/// `earlier.rev`, the session is lost (`SessionLost`), or `deadline` passes (`TimedOut`).
/// Every deletion seen on the way is added to `gone` (lock-delay judges them).
pub(crate) async fn wait_for_earlier(
    session: &Session,
    earlier: &Earlier<'_>,
    deadline: Deadline,
    gone: &mut Vec<Gone>,
) -> Result<Waited> {
    let waiting = async {
        loop {
            match look_and_watch(session, earlier, gone).await {
                Ok(Look::Granted) => return Ok(Waited::Granted),
                Ok(Look::Gone) => return Ok(Waited::KeyGone),
                Ok(Look::Again) => {}
                // A member went away mid-wait: look again (on another member, if need be).
                Err(err) if is_transient(&err) => {
                    tracing::debug!(%err, "waiting on etcd: looking again after an error");
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
                Err(err) => return Err(Error::Etcd(err)),
            }
        }
    };
    tokio::select! {
        waited = waiting => waited,
        () = session.lost() => Err(Error::SessionLost),
        () = deadline.sleep() => Ok(Waited::TimedOut),
    }
}

/// What one look at the earlier keys found.
enum Look {
    Granted,
    /// A key that blocked was deleted (or the watch ended): look again.
    Again,
    Gone,
}

/// One look at the earlier keys, in one transaction with the check that the waiter's own key is
/// still there (Go checks that with a separate read after its wait); unless granted, a watch
/// until one of the keys that block goes.
async fn look_and_watch(
    session: &Session,
    earlier: &Earlier<'_>,
    gone: &mut Vec<Gone>,
) -> std::result::Result<Look, EtcdError> {
    let last_before = RangeRequest::prefix(earlier.prefix)
        .newest_first()
        .created_by(earlier.rev - 1)
        .limit(limit(earlier.admits))
        .keys_only();
    let txn = TxnRequest {
        compare: vec![Compare::created_at(earlier.own, earlier.rev)],
        success: vec![RequestOp::range(last_before)],
        failure: Vec::new(),
    };
    let answer = session.client().txn(txn).await?;
    if !answer.succeeded {
        return Ok(Look::Gone);
    }
    let Some(found) = answer.responses.first().and_then(|op| op.as_range()) else {
        return Ok(Look::Again);
    };
    if found.kvs.len() <= earlier.admits {
        return Ok(Look::Granted);
    }
    let keys: Vec<(Vec<u8>, i64)> = found
        .kvs
        .iter()
        .map(|kv| (kv.key.clone(), kv.create_revision))
        .collect();
    wait_for_a_deletion(session, &keys, gone).await?;
    Ok(Look::Again)
}

/// Resolves when one of `keys` (key, create revision) is deleted after the listing that found
/// them (or the watch could not be kept, which makes the caller read again: a spurious
/// wake-up, never a missed one).
///
/// The watches start at the store's current revision, not at the listing's: etcd delivers a
/// watch that starts in the past from a catch-up loop that runs every 100 ms, which would put
/// up to 100 ms into every handoff (etcd's own lock service pays it). A deletion between the
/// listing and the watches is caught instead by checking, once every watch is in place, that
/// the keys are still there. Such a deletion is not added to `gone`: lock-delay then judges
/// the holder by the current record, as for a waiter that saw nothing.
///
/// "The current revision" is not atomic on etcd's side either: the server reads its revision
/// (the one the watch's `created` answer carries), then registers the watch, and a write in
/// between files the watch with the catch-up loop after all. The check after the watches
/// tells: if the store is still at the revision every `created` answer carried, no write came
/// in between and every watch is live. If it has moved on, the watches are opened again (at
/// most [`WATCH_ATTEMPTS`] times in all); if the last ones are still in doubt, the check is
/// repeated every [`DOUBT_POLL`] until an event comes or the catch-up loop has normally run
/// ([`CATCH_UP`] after the watches were opened), so a handoff waits about a poll, not 100 ms.
async fn wait_for_a_deletion(
    session: &Session,
    keys: &[(Vec<u8>, i64)],
    gone: &mut Vec<Gone>,
) -> std::result::Result<(), EtcdError> {
    let client = session.client();
    let Some(((first, _), rest)) = keys.split_first() else {
        return Ok(());
    };
    let mut attempts = 0;
    'watch: loop {
        attempts += 1;
        let mut stream = client.watch(WatchCreateRequest::key(first.clone())).await?;
        for (key, _) in rest {
            stream.watch(WatchCreateRequest::key(key.clone())).await?;
        }
        let opened = Instant::now();
        let mut uncreated = keys.len();
        // The oldest revision a watch was registered at.
        let mut registered_at = i64::MAX;
        // Whether the last watches may have been filed with the catch-up loop.
        let mut in_doubt = false;
        loop {
            let answer = if in_doubt && opened.elapsed() < CATCH_UP {
                match tokio::time::timeout(DOUBT_POLL, stream.message()).await {
                    Ok(answer) => answer?,
                    Err(_) => {
                        if still_there(client, keys).await?.is_none() {
                            return Ok(());
                        }
                        continue;
                    }
                }
            } else {
                stream.message().await?
            };
            let Some(answer) = answer else { break };
            if answer.canceled || answer.compact_revision != 0 {
                // Compacted past our revision, or cancelled by the server: read again.
                return Ok(());
            }
            if answer.created {
                uncreated = uncreated.saturating_sub(1);
                let revision = answer.header.as_ref().map_or(0, |h| h.revision);
                registered_at = registered_at.min(revision);
                if uncreated == 0 {
                    match still_there(client, keys).await? {
                        None => return Ok(()),
                        Some(now) if now > registered_at && attempts < WATCH_ATTEMPTS => {
                            continue 'watch;
                        }
                        Some(now) => in_doubt = now > registered_at,
                    }
                }
            }
            if record_deletions(&answer, keys, gone) {
                return Ok(());
            }
        }
        // The stream ended (a member went away): read again, on another member if need be.
        tokio::time::sleep(RETRY_PAUSE).await;
        return Ok(());
    }
}

/// Adds to `gone` each deletion of one of `keys` in `answer`; whether there was one.
fn record_deletions(answer: &WatchResponse, keys: &[(Vec<u8>, i64)], gone: &mut Vec<Gone>) -> bool {
    let mut deleted = false;
    for event in &answer.events {
        let Some(kv) = &event.kv else { continue };
        if !event.is_delete() {
            continue;
        }
        if let Some((_, rev)) = keys.iter().find(|(key, _)| *key == kv.key) {
            deleted = true;
            gone.push(Gone {
                create_rev: *rev,
                deleted_at: kv.mod_revision,
                seen: Instant::now(),
            });
        }
    }
    deleted
}

/// How many times the watches of one wait are opened while the store moves on under them.
const WATCH_ATTEMPTS: u32 = 2;
/// How often watches in doubt are backed by a read.
const DOUBT_POLL: Duration = Duration::from_millis(5);
/// How long after watches are opened etcd's catch-up loop (every 100 ms) has normally brought
/// them up to date; a watch still behind after that delivers its events late, never loses them.
const CATCH_UP: Duration = Duration::from_millis(110);

/// The store's revision if every key is still there with its create revision, `None` if one
/// is gone (one read, after the watches). Linearizable: a transaction of compares alone is
/// answered from the local store of whichever member gets it, which may not have applied a
/// deletion the watches (perhaps on another member) started after; the count it carries makes
/// etcd confirm with the leader first. No header counts as the highest revision: in doubt.
async fn still_there(
    client: &Client,
    keys: &[(Vec<u8>, i64)],
) -> std::result::Result<Option<i64>, EtcdError> {
    let compare = keys
        .iter()
        .map(|(key, rev)| Compare::created_at(key.clone(), *rev))
        .collect();
    let success = keys
        .first()
        .map(|(key, _)| RequestOp::range(RangeRequest::key(key.clone()).count_only()))
        .into_iter()
        .collect();
    let txn = TxnRequest {
        compare,
        success,
        failure: Vec::new(),
    };
    let answer = client.txn(txn).await?;
    Ok(answer
        .succeeded
        .then(|| answer.header.map_or(i64::MAX, |h| h.revision)))
}
