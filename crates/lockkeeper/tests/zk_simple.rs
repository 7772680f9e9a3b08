//! `SimpleLock`, the one-node lock, against Keeper and Apache ZooKeeper.
//!
//! It must be as *correct* as `Mutex` (mutual exclusion, growing fencing tokens, reentrancy,
//! nothing left behind by a timeout or a cancelled acquisition, never deleting a node that is
//! not its own) and measurably *worse* in the one way the ZooKeeper recipes warn about: one
//! release wakes every waiter. The herd test counts the wake-ups of both recipes with
//! `Session::notifications()`, after the server's `wchs` says every waiter is watching.
//!
//! Every test body runs against each backend of `both()`; every wait is bounded by [`LIMIT`].

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::Poll;
use std::time::Duration;

use lockkeeper::zk::{LockGuard, Mutex, Session, SimpleLock};
use lockkeeper::{Error, FencingToken};
use lockkeeper_testkit::{both, total_watches};
use lockkeeper_zk_client::{AddWatchMode, CreateMode, CreateOptions, EventType};
use tokio::time::Instant;

/// The longest any single step may take. Generous: the machine is shared and loaded.
const LIMIT: Duration = Duration::from_secs(60);

/// One backend under test.
#[derive(Clone)]
struct Backend {
    connect: String,
    addr: SocketAddr,
    name: &'static str,
}

impl Backend {
    /// Awaits `fut`, failing the test (naming the backend and `what`) after [`LIMIT`].
    async fn within<T>(&self, what: &str, fut: impl Future<Output = T>) -> T {
        lockkeeper_testkit::within(LIMIT, format!("{}: {what}", self.name), fut).await
    }

    async fn session(&self) -> Session {
        self.within("connect", Session::connect(&self.connect))
            .await
            .unwrap_or_else(|e| panic!("{}: connect: {e}", self.name))
    }

    /// The session that owns `node`, or `None` if it does not exist.
    async fn owner_of(&self, session: &Session, node: &str) -> Option<i64> {
        let client = session.client().expect("client");
        self.within("stat", client.check_stat(node))
            .await
            .unwrap_or_else(|e| panic!("{}: stat {node}: {e}", self.name))
            .map(|stat| stat.ephemeral_owner)
    }

    /// Waits until `node` does not exist.
    async fn wait_absent(&self, session: &Session, node: &str, why: &str) {
        let deadline = Instant::now() + LIMIT;
        while let Some(owner) = self.owner_of(session, node).await {
            assert!(
                Instant::now() < deadline,
                "{}: {node} still exists (owner 0x{owner:x}): {why}",
                self.name
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The server's count of watches (`wchs`).
    async fn watches(&self) -> usize {
        let addr = self.addr;
        tokio::task::spawn_blocking(move || total_watches(addr))
            .await
            .unwrap_or_else(|e| panic!("{}: wchs: {e}", self.name))
    }

    async fn wait_watches(&self, count: usize, why: &str) {
        let deadline = Instant::now() + LIMIT;
        loop {
            let now = self.watches().await;
            if now == count {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{}: {now} watches on the server, want {count}: {why}",
                self.name
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Runs `body` once per backend of `both()`, each on a freshly started server.
async fn each_backend<F, Fut>(body: F)
where
    F: Fn(Backend) -> Fut,
    Fut: Future<Output = ()>,
{
    let servers = both();
    assert!(!servers.is_empty(), "no backend selected");
    for server in &servers {
        eprintln!("--- against {}", server.name());
        body(Backend {
            connect: server.connect_string(),
            addr: server.addr(),
            name: server.name(),
        })
        .await;
    }
}

/// Sessions taking the lock over and over never overlap, every acquisition finishes, fencing
/// tokens grow with every grant, and the lock node is gone at the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn excludes_across_sessions_with_growing_tokens() {
    const SESSIONS: usize = 4;
    const ITERATIONS: usize = 6;
    each_backend(|b| async move {
        let inside = Arc::new(AtomicUsize::new(0));
        let overlaps = Arc::new(AtomicUsize::new(0));
        let tokens = Arc::new(std::sync::Mutex::new(Vec::<FencingToken>::new()));
        let mut tasks = Vec::new();
        for _ in 0..SESSIONS {
            let (b, inside, overlaps, tokens) =
                (b.clone(), inside.clone(), overlaps.clone(), tokens.clone());
            tasks.push(tokio::spawn(async move {
                let session = b.session().await;
                let lock = session.simple_lock("/simple/excl").unwrap();
                for _ in 0..ITERATIONS {
                    let guard = b.within("lock", lock.lock()).await.unwrap();
                    if inside.fetch_add(1, Ordering::SeqCst) != 0 {
                        overlaps.fetch_add(1, Ordering::SeqCst);
                    }
                    tokens.lock().unwrap().push(guard.fencing_token());
                    tokio::time::sleep(Duration::from_millis(3)).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    b.within("release", guard.release()).await.unwrap();
                }
                session.close().await;
            }));
        }
        for task in tasks {
            b.within("contender", task).await.unwrap();
        }
        assert_eq!(
            overlaps.load(Ordering::SeqCst),
            0,
            "{}: holders overlapped",
            b.name
        );
        let tokens = tokens.lock().unwrap().clone();
        assert_eq!(tokens.len(), SESSIONS * ITERATIONS, "{}", b.name);
        assert!(
            tokens.windows(2).all(|pair| pair[0] < pair[1]),
            "{}: tokens in grant order must grow: {tokens:?}",
            b.name
        );
        let observer = b.session().await;
        b.wait_absent(&observer, "/simple/excl/lock", "every holder released")
            .await;
    })
    .await;
}

/// A busy lock: `try_lock` and `lock_timeout` say `None` without creating anything (the only
/// node is the holder's), a zero timeout is refused, and the lock is free once released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_lock_and_timeouts_leave_no_node() {
    each_backend(|b| async move {
        let (a, c) = (b.session().await, b.session().await);
        let holder = a.simple_lock("/simple/busy").unwrap();
        let other = c.simple_lock("/simple/busy").unwrap();
        let guard = b.within("lock", holder.lock()).await.unwrap();
        assert_eq!(guard.node(), "/simple/busy/lock");

        assert!(
            b.within("try_lock", other.try_lock())
                .await
                .unwrap()
                .is_none()
        );
        let started = Instant::now();
        let timed = b.within(
            "lock_timeout",
            other.lock_timeout(Duration::from_millis(300)),
        );
        assert!(timed.await.unwrap().is_none(), "{}", b.name);
        assert!(
            started.elapsed() >= Duration::from_millis(300),
            "{}",
            b.name
        );
        assert!(matches!(
            other.lock_timeout(Duration::ZERO).await,
            Err(Error::InvalidArgument(_))
        ));
        let children = c.client().unwrap().list_children("/simple/busy").await;
        assert_eq!(children.unwrap(), ["lock"], "{}", b.name);
        assert_eq!(
            b.owner_of(&c, guard.node()).await,
            Some(a.session_id()),
            "{}: the holder's node is untouched",
            b.name
        );

        b.within("release", guard.release()).await.unwrap();
        let taken = b.within("try_lock", other.try_lock()).await.unwrap();
        let taken = taken.unwrap_or_else(|| panic!("{}: free lock refused", b.name));
        assert_eq!(b.owner_of(&a, taken.node()).await, Some(c.session_id()));
        b.within("release", taken.release()).await.unwrap();
    })
    .await;
}

/// Bad arguments are refused before anything is sent.
#[tokio::test]
async fn bad_paths_are_refused() {
    each_backend(|b| async move {
        let session = b.session().await;
        for path in ["", "relative", "/", "/trailing/", "/a//b", "/zookeeper/x"] {
            assert!(
                matches!(session.simple_lock(path), Err(Error::InvalidArgument(_))),
                "{}: {path:?}",
                b.name
            );
        }
    })
    .await;
}

/// Cancelled acquisitions leave nothing behind: one dropped while waiting does not take the
/// lock later; one dropped right after its create was sent (the answer lost to the
/// cancellation) finds its node afterwards and deletes it. A persistent watch on the lock node
/// shows that such creates really happened and were undone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_acquisitions_leave_no_node() {
    const ATTEMPTS: u64 = 24;
    each_backend(|b| async move {
        let (a, c) = (b.session().await, b.session().await);
        let node = "/simple/cancel/lock";
        // A persistent parent: a container parent emptied by a release could be reaped, and
        // then each acquisition would start with a failed create and miss the point below.
        let observer = lockkeeper_zk_client::Client::connect(&b.connect)
            .await
            .unwrap();
        let persistent = CreateOptions::new(CreateMode::Persistent);
        observer.mkdir("/simple/cancel", &persistent).await.unwrap();

        // Cancelled while waiting.
        let guard = b
            .within("lock", a.simple_lock("/simple/cancel").unwrap().lock())
            .await;
        let guard = guard.unwrap();
        let waiter = c.simple_lock("/simple/cancel").unwrap();
        let waited = tokio::time::timeout(Duration::from_millis(300), waiter.lock()).await;
        assert!(waited.is_err(), "{}: a held lock was granted", b.name);
        b.within("release", guard.release()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(
            b.owner_of(&a, node).await,
            None,
            "{}: cancelled waiter took it",
            b.name
        );

        // Cancelled at increasing points: before the create's answer, and later.
        let mut events = observer
            .watch(node, AddWatchMode::Persistent)
            .await
            .unwrap();
        let mut granted = 0;
        for attempt in 0..ATTEMPTS {
            let lock = c.simple_lock("/simple/cancel").unwrap();
            if let Some(outcome) = poll_then_drop(lock.lock(), 1 + attempt / 2).await {
                let guard: LockGuard = outcome.unwrap();
                b.within("release", guard.release()).await.unwrap();
                granted += 1;
            }
            // Read in the acquiring session: ordered after its create.
            b.wait_absent(&c, node, "after a cancelled or released acquisition")
                .await;
        }
        // Every create is followed by its delete; creates beyond the grants were made by
        // cancelled acquisitions and undone by them.
        let (mut creates, mut deletes) = (0, 0);
        let deadline = Instant::now() + LIMIT;
        loop {
            match tokio::time::timeout(Duration::from_millis(500), events.changed()).await {
                Ok(event) => match event.event_type {
                    EventType::NodeCreated => creates += 1,
                    EventType::NodeDeleted => deletes += 1,
                    _ => {}
                },
                Err(_) if creates == deletes => break,
                Err(_) => {}
            }
            assert!(
                Instant::now() < deadline,
                "{}: {creates} creates but {deletes} deletes",
                b.name
            );
        }
        eprintln!(
            "{}: {ATTEMPTS} acquisitions: {granted} granted, {} cancelled after creating",
            b.name,
            creates - granted
        );
        assert!(
            creates > granted,
            "{}: no cancellation happened after its create reached the server",
            b.name
        );
        let last = c.simple_lock("/simple/cancel").unwrap();
        let guard = b.within("try_lock", last.try_lock()).await.unwrap();
        assert!(guard.is_some(), "{}: the lock is free", b.name);
    })
    .await;
}

/// Polls `fut` `polls` times (at least once), then drops it unless it finished: a
/// cancellation at a chosen point, from right after the first request was sent (one poll) to
/// well into the acquisition (a millisecond between later polls lets answers arrive).
async fn poll_then_drop<F: Future>(fut: F, polls: u64) -> Option<F::Output> {
    let mut fut = std::pin::pin!(fut);
    // A fresh cooperative budget, so that the first poll is not cut short before it sends.
    tokio::task::yield_now().await;
    for poll in 0..polls.max(1) {
        if poll > 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let polled = std::future::poll_fn(|cx| Poll::Ready(fut.as_mut().poll(cx))).await;
        if let Poll::Ready(output) = polled {
            return Some(output);
        }
    }
    None
}

/// Reentrant per handle (and its clones): re-entries share the node and token, the node goes
/// with the last guard; another handle, even in the same session, is excluded.
#[tokio::test]
async fn reentrant_per_handle() {
    each_backend(|b| async move {
        let session = b.session().await;
        let lock = session.simple_lock("/simple/reentry").unwrap();
        let first = b.within("lock", lock.lock()).await.unwrap();
        let second = b.within("lock again", lock.lock()).await.unwrap();
        let clone = lock.clone();
        let third = b
            .within("try_lock on a clone", clone.try_lock())
            .await
            .unwrap();
        let third = third.unwrap_or_else(|| panic!("{}: a clone is the same owner", b.name));
        assert_eq!(lock.hold_count(), 3);
        assert_eq!(first.fencing_token(), second.fencing_token());
        assert_eq!(first.fencing_token(), third.fencing_token());

        let stranger = session.simple_lock("/simple/reentry").unwrap();
        assert!(
            b.within("try_lock", stranger.try_lock())
                .await
                .unwrap()
                .is_none()
        );

        b.within("release", first.release()).await.unwrap();
        b.within("release", second.release()).await.unwrap();
        assert_eq!(lock.hold_count(), 1);
        assert_eq!(
            b.owner_of(&session, clone.node()).await,
            Some(session.session_id())
        );
        b.within("release", third.release()).await.unwrap();
        assert_eq!(lock.hold_count(), 0);
        assert_eq!(b.owner_of(&session, clone.node()).await, None, "{}", b.name);
        let taken = b.within("try_lock", stranger.try_lock()).await.unwrap();
        assert!(taken.is_some(), "{}: free after the last release", b.name);
    })
    .await;
}

/// A holder whose node was deleted behind its back (an operator breaking the lock) must not
/// delete the next holder's node, though it has the same name: its release says `NotHeld`.
#[tokio::test]
async fn release_never_deletes_the_next_holders_node() {
    each_backend(|b| async move {
        let (a, c) = (b.session().await, b.session().await);
        let first = a.simple_lock("/simple/broken").unwrap();
        let guard = b.within("lock", first.lock()).await.unwrap();
        let operator = lockkeeper_zk_client::Client::connect(&b.connect)
            .await
            .unwrap();
        operator.delete(guard.node(), None).await.unwrap();

        let next = c.simple_lock("/simple/broken").unwrap();
        let taken = b.within("lock", next.lock_timeout(LIMIT)).await.unwrap();
        let taken = taken.unwrap_or_else(|| panic!("{}: broken lock not free", b.name));
        assert!(taken.fencing_token() > guard.fencing_token());

        let released = b.within("stale release", guard.release()).await;
        assert!(
            matches!(released, Err(Error::NotHeld)),
            "{}: {released:?}",
            b.name
        );
        assert_eq!(
            b.owner_of(&a, taken.node()).await,
            Some(c.session_id()),
            "{}: the next holder's node survives",
            b.name
        );
        b.within("release", taken.release()).await.unwrap();
    })
    .await;
}

/// Either recipe, for the herd comparison.
#[derive(Clone)]
enum Recipe {
    Simple(SimpleLock),
    Mutex(Mutex),
}

impl Recipe {
    fn new(session: &Session, simple: bool, path: &str) -> Recipe {
        if simple {
            Recipe::Simple(session.simple_lock(path).unwrap())
        } else {
            Recipe::Mutex(session.mutex(path).unwrap())
        }
    }

    async fn lock(&self) -> lockkeeper::Result<LockGuard> {
        match self {
            Recipe::Simple(lock) => lock.lock().await,
            Recipe::Mutex(lock) => lock.lock().await,
        }
    }
}

/// How many waiters (each in its own session) one release wakes.
async fn wakeups_per_release(b: &Backend, simple: bool, waiters: usize) -> u64 {
    let path = if simple {
        "/herd/simple"
    } else {
        "/herd/mutex"
    };
    let holder = b.session().await;
    let guard = b
        .within("lock", Recipe::new(&holder, simple, path).lock())
        .await;
    let guard = guard.unwrap();
    let mut sessions = Vec::new();
    let (granted, mut grants) = tokio::sync::mpsc::unbounded_channel();
    for _ in 0..waiters {
        let session = b.session().await;
        let recipe = Recipe::new(&session, simple, path);
        let granted = granted.clone();
        tokio::spawn(async move {
            if let Ok(guard) = recipe.lock().await {
                // The receiver keeps the guard (and the lock) until the test ends.
                let _ = granted.send(guard);
            }
        });
        sessions.push(session);
    }
    // Each simple waiter watches the lock node. Each mutex waiter watches its predecessor and,
    // but for the first, the node before that (to list again early). The holder watches its
    // own node (so that `is_held()` is live): one more, before and after the handoff.
    let (watching, after_release) = if simple {
        (waiters + 1, waiters)
    } else {
        (2 * waiters, 2 * waiters - 2)
    };
    b.wait_watches(watching, "every waiter watching").await;
    let woken = |sessions: &[Session]| sessions.iter().map(Session::notifications).sum::<u64>();
    assert_eq!(woken(&sessions), 0, "{}: woken before any release", b.name);

    b.within("release", guard.release()).await.unwrap();
    let first = b.within("a waiter granted", grants.recv()).await;
    assert!(first.is_some(), "{}: no waiter was granted", b.name);
    // The others are back to watching (simple) or still watching (mutex); the notifications
    // the release sent have all been counted; give stray ones time to arrive.
    b.wait_watches(after_release, "the others watching again")
        .await;
    let sent = if simple { waiters } else { 2 };
    b.within("the release's notifications counted", async {
        while woken(&sessions) < sent as u64 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        grants.try_recv().is_err(),
        "{}: two waiters granted",
        b.name
    );
    let total = woken(&sessions);
    for session in sessions {
        session.close().await;
    }
    holder.close().await;
    total
}

/// The herd effect, measured: with K waiters one release of a `SimpleLock` wakes all K of
/// them, while a `Mutex` release wakes two: the one next in line, and the one behind it,
/// which lists again early.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_release_wakes_every_simple_waiter_but_two_mutex_waiters() {
    const WAITERS: usize = 4;
    each_backend(|b| async move {
        if b.connect.contains(',') {
            // `wchs` counts the watches of one server; an ensemble's are spread over three.
            eprintln!("skipped on an ensemble: the watch count is read from one server");
            return;
        }
        let simple = wakeups_per_release(&b, true, WAITERS).await;
        b.wait_watches(0, "the simple-lock sessions closed").await;
        let mutex = wakeups_per_release(&b, false, WAITERS).await;
        eprintln!(
            "{}: one release with {WAITERS} waiters woke {simple} (SimpleLock) vs {mutex} (Mutex)",
            b.name
        );
        assert_eq!(
            simple, WAITERS as u64,
            "{}: SimpleLock wakes every waiter",
            b.name
        );
        assert_eq!(mutex, 2, "{}: Mutex wakes the next two waiters", b.name);
    })
    .await;
}
