//! Lock-delay on etcd: after a holder *failed* (its lease ran out or was revoked, an operator
//! deleted its key) rather than released, nobody is granted the lock until the delay has
//! passed, so the failed holder's in-flight writes land first.
//!
//! A failure and a clean release look the same to a waiter (a DELETE event), so holders with
//! lock-delay keep a *release record* beside the lock, in the key `NAME.lock-delay` (outside
//! the `NAME/` prefix, so neither lockkeeper's waiters nor etcdctl's ever count it; no lease,
//! so it outlives holders):
//!
//! - on grant a holder writes `held REV KEY` (best effort);
//! - a clean release deletes its key and writes `released REV` in the same transaction, so the
//!   record's value *at the revision of the deletion* says whether that deletion was clean.
//!
//! A waiter with lock-delay about to be granted reads the record at the revision of each
//! deletion it saw ahead of it (a point-in-time read: later releases overwrite the record, but
//! not the past). A deletion not recorded as clean (or one whose revision etcd has compacted
//! away: the safe side) counts as a failure, and the grant waits until `delay` after the waiter
//! saw it. A waiter that saw nothing (it arrived after the keys ahead of it went) reads the
//! current record: `held REV KEY` for a key that is gone means its holder never released, and
//! the grant waits `delay` from now. Holders that never write the record (etcdctl, or handles
//! without lock-delay) are always treated as failed.

use std::time::Duration;

use tokio::time::Instant;

use crate::etcd::rpc::{PutRequest, RangeRequest, RequestOp};
use crate::etcd::session::Session;
use crate::etcd::wait::Gone;

/// The record key of the lock `name`.
pub(crate) fn record_key(name: &str) -> Vec<u8> {
    format!("{name}.lock-delay").into_bytes()
}

/// The operation a clean release adds to its delete.
pub(crate) fn released_op(record: &[u8], rev: i64) -> RequestOp {
    RequestOp::put(PutRequest::new(record, format!("released {rev}"), 0))
}

/// Records that `key` (create revision `rev`) was just granted. Best effort: without it only a
/// waiter arriving after this holder failed (not one already waiting) would miss the delay.
pub(crate) async fn note_held(session: &Session, record: &[u8], key: &[u8], rev: i64) {
    let mut value = format!("held {rev} ").into_bytes();
    value.extend_from_slice(key);
    if let Err(err) = session
        .client()
        .put(PutRequest::new(record, value, 0))
        .await
    {
        tracing::debug!(%err, "could not record a lock-delay grant");
    }
}

/// Until when a grant of the key created at `own_rev` must wait: `delay` after the latest
/// failure it can see (see the module docs). `None` when nothing failed.
pub(crate) async fn delayed_until(
    session: &Session,
    record: &[u8],
    gone: &[Gone],
    delay: Duration,
    own_rev: i64,
) -> Option<Instant> {
    let mut until: Option<Instant> = None;
    let mut later = |at: Instant| until = Some(until.map_or(at, |u| u.max(at)));
    let client = session.client();
    for g in gone {
        let then = RangeRequest::key(record).at_revision(g.deleted_at);
        let clean = match client.range(then).await {
            Ok(found) => found.kvs.iter().any(|kv| {
                kv.mod_revision == g.deleted_at
                    && kv.value == format!("released {}", g.create_rev).as_bytes()
            }),
            Err(_) => false,
        };
        if !clean {
            later(g.seen + delay);
        }
    }
    let current = client.range(RangeRequest::key(record)).await;
    let held = current.ok().and_then(|found| {
        let kv = found.kvs.first()?;
        let text = std::str::from_utf8(&kv.value).ok()?;
        let rest = text.strip_prefix("held ")?;
        let (rev, key) = rest.split_once(' ')?;
        Some((rev.parse::<i64>().ok()?, key.as_bytes().to_vec()))
    });
    if let Some((rev, key)) = held {
        let judged = gone.iter().any(|g| g.create_rev == rev);
        if rev != own_rev && !judged {
            let there = client.range(RangeRequest::key(key)).await;
            let alive = there
                .map(|found| found.kvs.iter().any(|kv| kv.create_revision == rev))
                // Unknown: the safe side.
                .unwrap_or(false);
            if !alive {
                later(Instant::now() + delay);
            }
        }
    }
    until
}
