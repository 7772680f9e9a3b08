//! What the ensemble tests share: one ensemble at a time, sessions spread over its members,
//! where a session is connected, and the protected resource and grant log the assertions
//! read.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use lockkeeper::Error;
use lockkeeper::zk::Session;
use lockkeeper_testkit::{ZkEnsemble, backend_enabled, try_four_letter_word};
use tokio::time::Instant;

/// The session timeout of every session here: long enough to ride out an election (well under
/// a second on an idle machine), short enough that a lost session shows within a test.
pub(crate) const SESSION_TIMEOUT: Duration = Duration::from_secs(4);

/// Bounds each test's whole run of contention.
pub(crate) const TEST_LIMIT: Duration = Duration::from_secs(60);

/// Tests here take turns: each starts its own ensemble, and only one may run at a time.
pub(crate) static ONE_ENSEMBLE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Starts a three-member ensemble, or `None` when ZooKeeper is not a selected backend.
pub(crate) async fn ensemble() -> Option<Arc<ZkEnsemble>> {
    if !backend_enabled("zookeeper") {
        eprintln!("skipped: zookeeper is not in LOCKKEEPER_TEST_BACKENDS");
        return None;
    }
    Some(blocking(|| Arc::new(ZkEnsemble::start(3))).await)
}

/// Whether `err` means the operation was cut off by the fault (the connection or the session
/// went): a caller retries those. Anything else is a failure of the test.
pub(crate) fn cut_off(err: &Error) -> bool {
    use lockkeeper_zk_client::Error as Zk;
    err.is_connection_loss()
        || matches!(
            err,
            Error::SessionLost
                | Error::RetriesExhausted { .. }
                | Error::Zk(Zk::SessionExpired | Zk::ClientClosed)
        )
}

/// Runs an ensemble operation (they block: kills, restarts, waits) off the async workers.
pub(crate) async fn blocking<T: Send + 'static>(op: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(op)
        .await
        .expect("ensemble operation panicked")
}

/// `count` sessions on the whole connect string, spread evenly over the members: the client
/// picks a member at random, so a session that lands on a member that already has its share
/// is closed and connected again (bounded).
pub(crate) async fn spread_sessions(ensemble: &Arc<ZkEnsemble>, count: usize) -> Vec<Session> {
    let share = count.div_ceil(ensemble.size());
    let mut on_member = vec![0; ensemble.size()];
    let mut sessions = Vec::with_capacity(count);
    for _attempt in 0..count * 20 {
        if sessions.len() == count {
            break;
        }
        let session = session_on(&ensemble.connect_string()).await;
        let id = session.session_id();
        let member = blocking({
            let ensemble = ensemble.clone();
            move || member_of(&ensemble, id)
        })
        .await
        .expect("a new session is on some member");
        if on_member[member] < share {
            on_member[member] += 1;
            sessions.push(session);
        } else {
            session.close().await;
        }
    }
    assert_eq!(sessions.len(), count, "sessions per member: {on_member:?}");
    sessions
}

pub(crate) async fn session_on(connect: &str) -> Session {
    Session::builder(connect)
        .session_timeout(SESSION_TIMEOUT)
        .connect()
        .await
        .unwrap_or_else(|e| panic!("connect {connect}: {e}"))
}

/// The member whose `cons` lists session `id`, if any.
pub(crate) fn member_of(ensemble: &ZkEnsemble, id: i64) -> Option<usize> {
    let needle = format!("sid=0x{id:x}");
    (0..ensemble.size()).find(|&i| {
        ensemble.pid(i).is_some()
            && try_four_letter_word(ensemble.member_addr(i), "cons", Duration::from_secs(2))
                .is_ok_and(|cons| cons.contains(&needle))
    })
}

/// A resource the lock protects: counts holders inside at once (must stay at one) and, like
/// a fenced store, refuses a token not above the last one it accepted.
#[derive(Default)]
pub(crate) struct Resource {
    pub inside: AtomicUsize,
    pub most_inside: AtomicUsize,
    pub last_token: AtomicU64,
    pub stale_tokens: AtomicUsize,
    pub writes: AtomicUsize,
}

impl Resource {
    pub(crate) fn enter(&self, token: u64) {
        let now = self.inside.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_inside.fetch_max(now, Ordering::SeqCst);
        if self.last_token.fetch_max(token, Ordering::SeqCst) >= token {
            self.stale_tokens.fetch_add(1, Ordering::SeqCst);
        }
        self.writes.fetch_add(1, Ordering::SeqCst);
    }

    pub(crate) fn leave(&self) {
        self.inside.fetch_sub(1, Ordering::SeqCst);
    }
}

/// When each grant happened, to measure how long nobody could take the lock around a fault.
#[derive(Default)]
pub(crate) struct Grants(StdMutex<Vec<Instant>>);

impl Grants {
    pub(crate) fn record(&self) {
        self.0.lock().unwrap().push(Instant::now());
    }

    /// The first grant after `at`, and the last one before it.
    pub(crate) fn around(&self, at: Instant) -> (Option<Instant>, Option<Instant>) {
        let grants = self.0.lock().unwrap();
        let before = grants.iter().copied().filter(|g| *g <= at).max();
        let after = grants.iter().copied().filter(|g| *g > at).min();
        (before, after)
    }

    pub(crate) fn count_after(&self, at: Instant) -> usize {
        self.0.lock().unwrap().iter().filter(|g| **g > at).count()
    }
}
