//! [`LockGuard`], what every etcd lock hands out, and [`Held`], the key behind it.
//!
//! A held key is known by its name *and* its create revision: every delete compares the create
//! revision first, so a holder whose key went (lease lost, deleted by an operator) can never
//! delete a later key of the same name. The create revision is also the fencing token: etcd's
//! revision counter is one for the whole cluster and only grows, so a later grant of the lock
//! always has a higher one.
//!
//! "Held" is the holder's knowledge: not released, key not seen deleted, the session within its
//! deadline ([`Session::valid_until`]), and before the maximum hold time. It is live: a granted
//! key is watched from the grant on ([`watch_key`], a [`Watcher`]), so `is_held()` turns false when the key's
//! deletion (or replacement) is seen, whether or not anyone awaits `lost()`. A key that is dropped
//! without a release (a guard, or a waiter that gave up) is deleted in a background task, so
//! every wait is cancel-safe.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use tokio::sync::OwnedMutexGuard;
use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::etcd::error::{EtcdError, is_transient};
use crate::etcd::rpc::{Compare, RangeRequest, RequestOp, TxnRequest, WatchCreateRequest};
use crate::etcd::session::{RETRY_PAUSE, Session};
use crate::etcd::{delay, token};
use crate::fencing::FencingToken;
use crate::sync::{Watcher, lock};

/// How long one release waits for its answer before it is sent again: about what electing a
/// new leader takes. A write that a follower has forwarded to a leader that then dies is never
/// answered; etcd gives up on it only at its own request timeout, later than the session's
/// (5 s by default), and everyone in line would wait that long. The delete is conditional on
/// the key's create revision, so a second copy of it is harmless.
const RELEASE_PATIENCE: Duration = Duration::from_secs(1);
/// How long a release is sent again while its answers are lost or late: past etcd's own
/// request timeout (5 s plus two election timeouts by default), so a release outlasts a leader
/// change. The last attempt then waits a whole request timeout, and its error is the answer.
const RELEASE_BUDGET: Duration = Duration::from_secs(10);

/// One key of a waiter or holder, deleted (compare-and-delete) when dropped unreleased.
pub(crate) struct Held {
    pub(crate) session: Session,
    pub(crate) key: Vec<u8>,
    /// The key's create revision.
    pub(crate) rev: i64,
    released: AtomicBool,
    /// The watch on a granted key (none on a waiter's).
    watch: Option<Watcher>,
    max_hold_until: Option<Instant>,
    /// The lock-delay record a clean release writes (see [`delay`]), when the lock has one.
    /// Set only at the grant: a waiter that gives up must not overwrite the holder's `held`
    /// entry, or a late arrival would miss the delay after that holder fails.
    record: Option<Arc<[u8]>>,
    /// The session-local lock of a key named the same for every acquisition, held until the
    /// key is deleted.
    permit: StdMutex<Option<OwnedMutexGuard<()>>>,
}

impl Held {
    pub(crate) fn new(
        session: Session,
        key: Vec<u8>,
        rev: i64,
        permit: Option<OwnedMutexGuard<()>>,
    ) -> Held {
        Held {
            session,
            key,
            rev,
            released: AtomicBool::new(false),
            watch: None,
            max_hold_until: None,
            record: None,
            permit: StdMutex::new(permit),
        }
    }

    /// Sets what the lock's options make of the granted key: where a clean release records
    /// itself, and when the grant (now) ends at the latest, with a timer that deletes the key
    /// at that end. That delete writes no release record: a holder past its maximum hold time
    /// is still at work, so under lock-delay the next holder waits the delay out, as after a
    /// failure. The timer holds a weak reference: a guard released earlier leaves it nothing
    /// to do.
    fn granted(mut self, options: &HoldOptions) -> Arc<Held> {
        self.record = options
            .lock_delay
            .as_ref()
            .map(|(_, record)| record.clone());
        self.max_hold_until = options.max_hold.map(|max| Instant::now() + max);
        self.watch = watch_key(&self.session, &self.key, self.rev);
        let held = Arc::new(self);
        if let (Some(until), Ok(runtime)) =
            (held.max_hold_until, tokio::runtime::Handle::try_current())
        {
            let weak = Arc::downgrade(&held);
            runtime.spawn(async move {
                tokio::time::sleep_until(until).await;
                let Some(held) = weak.upgrade() else { return };
                match held.end(None).await {
                    Ok(()) | Err(Error::NotHeld) => {}
                    Err(err) => tracing::warn!(key = %held.key_text(), %err,
                        "giving up at the maximum hold time failed"),
                }
            });
        }
        held
    }

    pub(crate) fn key_text(&self) -> String {
        String::from_utf8_lossy(&self.key).into_owned()
    }

    fn is_held(&self) -> bool {
        !self.released.load(Ordering::Acquire)
            && !self.deleted()
            && self.session.is_alive()
            && self
                .max_hold_until
                .is_none_or(|until| Instant::now() < until)
    }

    fn valid_until(&self) -> Option<Instant> {
        let until = self.session.valid_until()?;
        let until = self.max_hold_until.map_or(until, |max| max.min(until));
        self.is_held().then_some(until)
    }

    async fn lost(&self) {
        if !self.is_held() {
            return;
        }
        let max_hold = async {
            match self.max_hold_until {
                Some(until) => tokio::time::sleep_until(until).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = self.session.lost() => {}
            () = self.key_deleted() => {}
            () = max_hold => {}
        }
    }

    /// Whether the key's watch saw it deleted or replaced while it was not released.
    fn deleted(&self) -> bool {
        !self.released.load(Ordering::Acquire) && self.watch.as_ref().is_some_and(Watcher::is_set)
    }

    /// Resolves when the key is seen deleted (or recreated by someone else).
    async fn key_deleted(&self) {
        match &self.watch {
            Some(watch) => watch.set().await,
            None => std::future::pending().await,
        }
    }

    /// Deletes the key if it is still this one. `NotHeld` when it was known gone: released
    /// before, seen deleted, the session lost, or etcd found another key (or none) there.
    pub(crate) async fn release(&self) -> Result<()> {
        self.end(self.record.as_deref()).await
    }

    /// [`release`](Held::release), writing `record` (the lock-delay record of a clean release)
    /// if there is one.
    async fn end(&self, record: Option<&[u8]>) -> Result<()> {
        if self.deleted() || self.released.swap(true, Ordering::AcqRel) {
            return Err(Error::NotHeld);
        }
        let released = if self.session.is_alive() {
            delete(&self.session, &self.key, self.rev, record).await
        } else {
            Err(Error::NotHeld)
        };
        drop(lock(&self.permit).take());
        released
    }

    /// Marks the key released without deleting it (the caller deleted it, or it must stay).
    pub(crate) fn forget(&self) {
        self.released.store(true, Ordering::Release);
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if self.released.load(Ordering::Acquire) || !self.session.is_alive() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            // Without a runtime the key goes with the lease.
            return;
        };
        let (session, key, rev, record) = (
            self.session.clone(),
            std::mem::take(&mut self.key),
            self.rev,
            self.record.take(),
        );
        let permit = lock(&self.permit).take();
        runtime.spawn(async move {
            match delete(&session, &key, rev, record.as_deref()).await {
                Ok(()) | Err(Error::NotHeld) => {}
                Err(err) => tracing::warn!(key = %String::from_utf8_lossy(&key), %err,
                    "deleting a dropped lock key failed"),
            }
            drop(permit);
        });
    }
}

/// Starts the watch on a held key: set once the key (created at `rev`) is seen deleted or
/// replaced.
fn watch_key(session: &Session, key: &[u8], rev: i64) -> Option<Watcher> {
    let (session, key) = (session.clone(), key.to_vec());
    Watcher::spawn(async move {
        watch_until_gone(&session, &key, rev).await;
        true
    })
}

/// Returns once `key` (created at `rev`) is seen deleted or replaced; never, if etcd refuses
/// the watch for good (the session's deadline still bounds the hold).
async fn watch_until_gone(session: &Session, key: &[u8], rev: i64) {
    // Watched from the grant; after a watch ended without an answer (etcd compacted past the
    // revision, a member went away), from the revision of the read that found the key still
    // ours.
    let mut from = rev;
    loop {
        match watch_deletion(session, key, rev, from).await {
            Ok(true) => return,
            Ok(false) => {}
            Err(err) if is_transient(&err) => {}
            Err(_) => return std::future::pending().await,
        }
        tokio::time::sleep(RETRY_PAUSE).await;
        if let Ok(found) = session.client().range(RangeRequest::key(key)).await {
            if !found.kvs.iter().any(|kv| kv.create_revision == rev) {
                return;
            }
            from = found.header.map_or(from, |h| h.revision + 1);
        }
    }
}

/// `true` when a watch from revision `from` saw `key` (created at `rev`) deleted or replaced;
/// `false` when it ended without knowing.
async fn watch_deletion(
    session: &Session,
    key: &[u8],
    rev: i64,
    from: i64,
) -> std::result::Result<bool, EtcdError> {
    let watch = WatchCreateRequest::key(key).start_at(from);
    let mut stream = session.client().watch(watch).await?;
    while let Some(answer) = stream.message().await? {
        if answer.canceled || answer.compact_revision != 0 {
            return Ok(false);
        }
        let gone = answer.events.iter().any(|event| {
            event.is_delete()
                || event
                    .kv
                    .as_ref()
                    .is_some_and(|kv| kv.create_revision != rev)
        });
        if gone {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Compare-and-delete of `key` at create revision `rev`, writing the lock-delay `record` in the
/// same transaction. Sent again when the answer is lost or late ([`RELEASE_PATIENCE`], for up
/// to [`RELEASE_BUDGET`]); a retry that finds the key gone after such a loss counts as
/// released (the lost attempt may have deleted it).
pub(crate) async fn delete(
    session: &Session,
    key: &[u8],
    rev: i64,
    record: Option<&[u8]>,
) -> Result<()> {
    let give_up = tokio::time::Instant::now() + RELEASE_BUDGET;
    let mut unanswered = false;
    loop {
        let mut ops = vec![RequestOp::delete(key)];
        if let Some(record) = record {
            ops.push(delay::released_op(record, rev));
        }
        let txn = TxnRequest {
            compare: vec![Compare::created_at(key, rev)],
            success: ops,
            failure: Vec::new(),
        };
        // The last attempt waits as long as any request (the session's request timeout), so a
        // cluster that answers everything slowly still gets its answer through.
        let last = tokio::time::Instant::now() + RELEASE_PATIENCE >= give_up;
        let answer = if last {
            session.client().txn(txn).await
        } else {
            tokio::time::timeout(RELEASE_PATIENCE, session.client().txn(txn))
                .await
                .unwrap_or_else(|_| {
                    Err(EtcdError::no_answer(format!(
                        "no answer to the release within {RELEASE_PATIENCE:?}"
                    )))
                })
        };
        match answer {
            Ok(answer) if answer.succeeded => return Ok(()),
            Ok(_) if unanswered => return Ok(()),
            Ok(_) => return Err(Error::NotHeld),
            Err(err) if is_transient(&err) && !last => {
                unanswered = true;
                tokio::time::sleep(RETRY_PAUSE).await;
            }
            Err(err) => return Err(Error::Etcd(err)),
        }
    }
}

/// The options every etcd lock gives its holds.
#[derive(Clone, Debug, Default)]
pub(crate) struct HoldOptions {
    /// Give the lock up this long after the grant.
    pub max_hold: Option<Duration>,
    /// After a holder failed, grant nobody until this long after the failure was seen; with
    /// the key of the lock's release record.
    pub lock_delay: Option<(Duration, Arc<[u8]>)>,
}

/// Proof of holding an etcd lock ([`Mutex`], a side of an [`RwLock`], a [`Semaphore`] permit).
///
/// Dropping it releases (in a background task); [`release`](LockGuard::release) releases and
/// reports.
///
/// ```no_run
/// # async fn demo(session: lockkeeper::etcd::Session) -> lockkeeper::Result<()> {
/// let guard = session.mutex("orders")?.lock().await?;
/// let token = guard.fencing_token(); // the key's create revision
/// tokio::select! {
///     () = guard.lost() => eprintln!("lock lost: stop writing"),
///     () = tokio::time::sleep(std::time::Duration::from_secs(1)) => {} // the work, with `token`
/// }
/// guard.release().await?;
/// # let _ = token; Ok(()) }
/// ```
///
/// [`Mutex`]: crate::etcd::Mutex
/// [`RwLock`]: crate::etcd::RwLock
/// [`Semaphore`]: crate::etcd::Semaphore
#[must_use = "the lock is released when the guard is dropped"]
pub struct LockGuard {
    held: Arc<Held>,
}

impl LockGuard {
    /// Turns a granted key into a guard (starting its maximum hold time).
    pub(crate) fn grant(held: Held, options: &HoldOptions) -> LockGuard {
        LockGuard {
            held: held.granted(options),
        }
    }

    /// The create revision of the lock key: etcd's revision counter is one for the whole
    /// cluster and never goes back, so each grant of this lock gets a higher token than every
    /// earlier grant, across members, leader changes and restarts.
    pub fn fencing_token(&self) -> FencingToken {
        token(self.held.rev)
    }

    /// Whether the holder can still be sure it holds the lock: not released, key not seen
    /// deleted, the session within [`valid_until`](LockGuard::valid_until), and the maximum
    /// hold time not reached. Local state only: a holder resumed after a pause past its lease
    /// TTL gets `false` at its first check.
    pub fn is_held(&self) -> bool {
        self.held.is_held()
    }

    /// The instant until which the lock is certainly still held: the session's
    /// [`valid_until`](crate::etcd::Session::valid_until) (send time of the last successful
    /// renewal + TTL − drift allowance), or the maximum hold time if sooner. `None` once not
    /// held.
    pub fn valid_until(&self) -> Option<Instant> {
        self.held.valid_until()
    }

    /// Resolves as soon as the holder can no longer be sure it holds the lock: the session is
    /// lost (renewal failed until the TTL passed, the lease is gone, or it was closed), the key
    /// was deleted by someone else, the maximum hold time passed, or the guard was released.
    /// Cancel-safe; race it against the work the lock protects.
    pub async fn lost(&self) {
        self.held.lost().await;
    }

    pub(crate) fn held(&self) -> &Held {
        &self.held
    }

    /// The key held, e.g. `orders/694d7c1ab2e3f00c` (for logs and etcdctl).
    pub fn key(&self) -> String {
        self.held.key_text()
    }

    /// Deletes the key (compare-and-delete on its create revision). [`Error::NotHeld`] if the
    /// lock was known to be gone before: released already (or at the maximum hold time), the
    /// key deleted, or the session lost.
    pub async fn release(self) -> Result<()> {
        self.held.release().await
    }
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard")
            .field("key", &self.held.key_text())
            .field("fencing_token", &self.held.rev)
            .field("is_held", &self.held.is_held())
            .finish()
    }
}
