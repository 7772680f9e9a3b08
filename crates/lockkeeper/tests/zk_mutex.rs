//! The ZooKeeper Mutex against Keeper and Apache ZooKeeper: exclusion, fairness, herd-free
//! waking, cancellation, expiry, reentrancy, release errors and bad input.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use lockkeeper::Error;
use lockkeeper::LockOptions;
use lockkeeper::zk::Session;
use lockkeeper::zk::{ConnectionState, Delivery};
use support::{
    Partition, children, for_each_backend, long_session, read_only_dir, requests_received, session,
    wait_children, wait_state, wait_watches,
};
use tokio::sync::Mutex as AsyncMutex;
use tokio::time::timeout;

/// A resource the lock protects: it counts overlapping holders and, like a real store with
/// fencing, rejects a token that is not greater than the last one it accepted.
#[derive(Default)]
struct Resource {
    inside: AtomicBool,
    overlaps: AtomicUsize,
    writes: AtomicUsize,
    last_token: AtomicU64,
    stale_tokens: AtomicUsize,
}

impl Resource {
    fn enter(&self, token: u64) {
        if self.inside.swap(true, Ordering::SeqCst) {
            self.overlaps.fetch_add(1, Ordering::SeqCst);
        }
        let previous = self.last_token.fetch_max(token, Ordering::SeqCst);
        if token <= previous {
            self.stale_tokens.fetch_add(1, Ordering::SeqCst);
        }
        self.writes.fetch_add(1, Ordering::SeqCst);
    }

    fn leave(&self) {
        self.inside.store(false, Ordering::SeqCst);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_sessions_never_overlap_and_tokens_increase() {
    for_each_backend(|connect| async move {
        const SESSIONS: usize = 8;
        const ROUNDS: usize = 12;
        let resource = Arc::new(Resource::default());
        let mut tasks = Vec::new();
        for _ in 0..SESSIONS {
            let connect = connect.clone();
            let resource = resource.clone();
            tasks.push(tokio::spawn(async move {
                let session = session(&connect).await;
                let mutex = session.mutex("/locks/hammer").unwrap();
                for _ in 0..ROUNDS {
                    let guard = mutex.lock().await.unwrap();
                    resource.enter(guard.fencing_token().get());
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    resource.leave();
                    guard.release().await.unwrap();
                }
            }));
        }
        for task in tasks {
            tokio::time::timeout(Duration::from_secs(120), task)
                .await
                .expect("bounded")
                .unwrap();
        }
        assert_eq!(resource.writes.load(Ordering::SeqCst), SESSIONS * ROUNDS);
        assert_eq!(
            resource.overlaps.load(Ordering::SeqCst),
            0,
            "holders overlapped"
        );
        assert_eq!(
            resource.stale_tokens.load(Ordering::SeqCst),
            0,
            "a fencing token did not increase"
        );
        let observer = session(&connect).await;
        assert!(
            children(&observer, "/locks/hammer").await.is_empty(),
            "nodes left behind"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn grants_in_arrival_order_and_each_release_wakes_at_most_two_waiters() {
    for_each_backend(|connect| async move {
        const WAITERS: usize = 6;
        let path = "/locks/fifo";
        let holder = session(&connect).await;
        let first = holder.mutex(path).unwrap().lock().await.unwrap();
        let order = Arc::new(AsyncMutex::new(Vec::new()));
        let mut sessions = Vec::new();
        let mut tasks = Vec::new();
        for waiter in 0..WAITERS {
            let session = session(&connect).await;
            sessions.push(session.clone());
            let order = order.clone();
            tasks.push(tokio::spawn(async move {
                let guard = session.mutex(path).unwrap().lock().await.unwrap();
                order.lock().await.push(waiter);
                tokio::time::sleep(Duration::from_millis(10)).await;
                guard.release().await.unwrap();
            }));
            // The next waiter only starts once this one's node is in the queue.
            wait_children(&holder, path, waiter + 2).await;
        }
        // Let every waiter reach its watches before the first release: its predecessor and,
        // but for the first, the node before that.
        // (and the holder's watch on its own node, which keeps `is_held()` live).
        wait_watches(&connect, 2 * WAITERS).await;
        let woken_before: u64 = sessions.iter().map(Session::notifications).sum();
        assert_eq!(
            woken_before, 0,
            "a waiter was woken while nothing was released"
        );
        first.release().await.unwrap();
        for task in tasks {
            tokio::time::timeout(Duration::from_secs(60), task)
                .await
                .expect("bounded")
                .unwrap();
        }
        assert_eq!(
            *order.lock().await,
            (0..WAITERS).collect::<Vec<_>>(),
            "not granted in arrival order"
        );
        // WAITERS releases happened while someone waited (the holder's and WAITERS-1 waiters').
        // Herd-free: each release wakes the waiter behind it and, but for the last, the one
        // behind that (which watches two ahead to list again early), never more. The first may
        // go uncounted: when the next waiter's early listing comes back after the release, it
        // is granted from that listing and drops its watch on the releaser unread.
        let woken: u64 = sessions.iter().map(Session::notifications).sum();
        assert!(
            (WAITERS as u64..2 * WAITERS as u64).contains(&woken),
            "{woken} notifications for {WAITERS} releases: each must wake the next waiter, and \
             at most one more"
        );
    })
    .await;
}

/// A `try_lock` that finds the lock held gives up on that listing: it queues, lists, and
/// withdraws, and never sets a watch on the holder's node (nothing would ever fire it for a
/// caller that is not waiting).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failed_try_lock_lists_once_and_watches_nothing() {
    for_each_backend(|connect| async move {
        let path = "/locks/try-once";
        let holder = long_session(&connect).await;
        let _held = holder.mutex(path).unwrap().lock().await.unwrap();
        let trying = long_session(&connect).await;
        let mutex = trying.mutex(path).unwrap();
        let before = requests_received(&connect, &trying);
        assert!(mutex.try_lock().await.unwrap().is_none());
        // The delete's answer came back before try_lock returned, so its request was read.
        let sent = requests_received(&connect, &trying) - before;
        println!("a failed try_lock sent {sent} requests");
        assert_eq!(
            sent, 3,
            "create, list, delete: a failed try_lock must not watch the holder"
        );
    })
    .await;
}

/// The waiter's predecessor and the node two ahead of it (both of which it watches) deleted
/// in one transaction: it lists again and must watch the holder now before it, not take the
/// fired watch of a node that is gone for the holder's. It is granted only when the holder
/// releases.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_waiter_whose_two_watched_nodes_vanish_together_waits_for_the_holder() {
    for_each_backend(|connect| async move {
        let path = "/locks/two-vanish";
        let holder = long_session(&connect).await;
        let guard = holder.mutex(path).unwrap().lock().await.unwrap();
        // Two waiters behind the holder; deleted, they queue again (behind the last one).
        let mut others = Vec::new();
        for i in 1..=2 {
            let session = long_session(&connect).await;
            let mutex = session.mutex(path).unwrap();
            others.push(tokio::spawn(async move {
                let _session = &session;
                mutex.lock().await.unwrap()
            }));
            wait_children(&holder, path, i + 1).await;
        }
        let last = long_session(&connect).await;
        let mutex = last.mutex(path).unwrap();
        let granted = Arc::new(AtomicBool::new(false));
        let flag = granted.clone();
        let waiting = tokio::spawn(async move {
            let guard = mutex.lock().await.unwrap();
            flag.store(true, Ordering::SeqCst);
            guard
        });
        let line = wait_children(&holder, path, 4).await;
        // The holder's own watch, one by the first waiter, two by each of the others.
        wait_watches(&connect, 6).await;
        let mut sorted = line.clone();
        sorted.sort_by_key(|name| name.rsplit('-').next().unwrap_or_default().to_owned());
        let client = holder.client().unwrap();
        let mut both = client.multi();
        for name in &sorted[1..3] {
            both.add_delete(&format!("{path}/{name}"), None).unwrap();
        }
        both.commit().await.expect("delete both waiters' nodes");
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(
            !granted.load(Ordering::SeqCst),
            "granted while the holder still holds ({sorted:?} less the two deleted)"
        );
        assert!(guard.is_held());
        guard.release().await.unwrap();
        let theirs = tokio::time::timeout(Duration::from_secs(30), waiting)
            .await
            .expect("granted once the holder released")
            .unwrap();
        theirs.release().await.unwrap();
        for other in others {
            other.abort();
        }
    })
    .await;
}

/// A waiter's listing goes stale while the nodes ahead of it take their turns, so it also
/// watches the node two ahead and lists again when that one goes, while its predecessor holds.
/// The handoff to it then costs it no request at all: the notification grants.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_handoff_costs_the_next_waiter_no_request() {
    for_each_backend(|connect| async move {
        let path = "/locks/stale-listing";
        // Long timeouts: no ping falls into the counted windows.
        let sessions = [
            long_session(&connect).await,
            long_session(&connect).await,
            long_session(&connect).await,
        ];
        let last = long_session(&connect).await;
        let mut guards = Vec::new();
        guards.push(sessions[0].mutex(path).unwrap().lock().await.unwrap());
        let mut waiting = Vec::new();
        for (i, session) in sessions.iter().enumerate().skip(1) {
            let mutex = session.mutex(path).unwrap();
            waiting.push(tokio::spawn(async move { mutex.lock().await.unwrap() }));
            wait_children(&last, path, i + 1).await;
        }
        let mutex = last.mutex(path).unwrap();
        let last_waits = tokio::spawn(async move { mutex.lock().await.unwrap() });
        wait_children(&sessions[0], path, 4).await;
        // The last waiter listed [0, 1, 2, last]: it watches 2, and 1 as the node ahead of 2. With
        // 1 watching 0, 2 watching 1 and 0, and the holder 0 watching its own node (so that its
        // `is_held()` is live), that is six watches.
        wait_watches(&connect, 6).await;
        let queued = requests_received(&connect, &last);
        let mut waiting = waiting.into_iter();
        for _ in 0..2 {
            guards.pop().unwrap().release().await.unwrap();
            let guard = tokio::time::timeout(Duration::from_secs(10), waiting.next().unwrap())
                .await
                .expect("granted")
                .unwrap();
            guards.push(guard);
        }
        // 1 went: the last waiter lists once, while 2 holds, and keeps its watch on 2.
        let relisted =
            lockkeeper_testkit::within(Duration::from_secs(10), "the new listing", async {
                loop {
                    let now = requests_received(&connect, &last);
                    if now > queued {
                        break now;
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            })
            .await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        let before = requests_received(&connect, &last);
        assert_eq!(
            (relisted - queued, before - queued),
            (1, 1),
            "the node two ahead going must cost the last waiter one listing"
        );
        guards.pop().unwrap().release().await.unwrap();
        let granted = tokio::time::timeout(Duration::from_secs(10), last_waits)
            .await
            .expect("granted")
            .unwrap();
        // The grant came from the notification alone. The one request after it is the new
        // holder's watch on its own node, sent once the lock is granted, off the grant's path.
        let after =
            lockkeeper_testkit::within(Duration::from_secs(10), "the holder's watch", async {
                loop {
                    let now = requests_received(&connect, &last);
                    if now > before {
                        break now;
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            })
            .await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        let after = after.max(requests_received(&connect, &last));
        assert_eq!(
            after - before,
            1,
            "the handoff to the last waiter took {} requests, not the notification alone and \
             the holder's watch",
            after - before
        );
        granted.release().await.unwrap();
    })
    .await;
}

/// An uncontended lock and release cost three requests the caller waits for, in two round
/// trips: the create and the listing together, then the delete (Curator's cost three round
/// trips). A holder that keeps the lock a moment adds a fourth, the watch on its own node
/// that keeps `is_held()` live; nobody waits for its answer, and a release sent before it
/// went out (a tight lock loop) saves it. The watch goes out before the delete or not at
/// all, so the count is exact once the release returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_uncontended_lock_and_release_cost_three_requests() {
    for_each_backend(|connect| async move {
        let session = Session::builder(&connect)
            .session_timeout(Duration::from_secs(30))
            .connect()
            .await
            .expect("connect");
        let mutex = session.mutex("/locks/uncontended-cost").unwrap();
        // The first lock also creates the lock's parent nodes.
        mutex.lock().await.unwrap().release().await.unwrap();
        let before = requests_received(&connect, &session);
        let mut counted = before;
        for cycle in 1..=3 {
            let guard = mutex.lock().await.unwrap();
            // Held until the watch is on the server: the fourth request.
            let with_watch =
                lockkeeper_testkit::within(Duration::from_secs(10), "the holder's watch", async {
                    loop {
                        let now = requests_received(&connect, &session);
                        if now >= counted + 3 {
                            break now;
                        }
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                })
                .await;
            guard.release().await.unwrap();
            let after = requests_received(&connect, &session);
            assert_eq!(
                (with_watch - counted, after - with_watch),
                (3, 1),
                "cycle {cycle}: the lock (create, listing, watch), then the release"
            );
            counted = after;
        }
        // Give a stray request (a watch sent after the release, say) time to arrive.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let after = requests_received(&connect, &session);
        assert_eq!(
            after - before,
            12,
            "three held lock+release cycles took {} requests, not 4 each",
            after - before
        );
        // A tight loop races each holder's watch against its release: the watch goes out
        // before the delete or not at all, so none is left behind on the server waiting for
        // a node that will never be created again.
        for _ in 0..50 {
            mutex.lock().await.unwrap().release().await.unwrap();
        }
        let addr = connect.parse().expect("a single host:port");
        assert_eq!(
            lockkeeper_testkit::total_watches(addr),
            0,
            "watches left on the server after released locks"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn try_lock_and_timeout_leave_no_node_behind() {
    for_each_backend(|connect| async move {
        let path = "/locks/timeout";
        let a = session(&connect).await;
        let b = session(&connect).await;
        let held = a.mutex(path).unwrap().lock().await.unwrap();
        let other = b.mutex(path).unwrap();
        assert!(other.try_lock().await.unwrap().is_none());
        assert_eq!(children(&a, path).await.len(), 1, "try_lock left its node");
        let started = std::time::Instant::now();
        assert!(
            other
                .lock_timeout(Duration::from_millis(300))
                .await
                .unwrap()
                .is_none()
        );
        assert!(
            started.elapsed() >= Duration::from_millis(300),
            "returned before the timeout"
        );
        assert_eq!(
            children(&a, path).await.len(),
            1,
            "lock_timeout left its node"
        );
        held.release().await.unwrap();
        let guard = other
            .lock_timeout(Duration::from_secs(10))
            .await
            .unwrap()
            .expect("free now");
        assert!(guard.is_held());
        guard.release().await.unwrap();
        assert!(children(&a, path).await.is_empty());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dropped_lock_future_removes_its_node() {
    for_each_backend(|connect| async move {
        let path = "/locks/cancel";
        let a = session(&connect).await;
        let b = session(&connect).await;
        let held = a.mutex(path).unwrap().lock().await.unwrap();
        let waiter = b.mutex(path).unwrap();
        let waiting = tokio::spawn(async move { waiter.lock().await.map(|g| g.fencing_token()) });
        wait_children(&a, path, 2).await;
        waiting.abort();
        assert!(waiting.await.unwrap_err().is_cancelled());
        wait_children(&a, path, 1).await;
        // Cancelling in the middle of the create itself: whatever got created is removed.
        for _ in 0..20 {
            let waiter = b.mutex(path).unwrap();
            let attempt = tokio::time::timeout(Duration::from_micros(300), waiter.lock()).await;
            assert!(attempt.is_err(), "granted while held");
        }
        wait_children(&a, path, 1).await;
        held.release().await.unwrap();
        wait_children(&a, path, 0).await;
    })
    .await;
}

/// A try does not wait, not even for a connection: while the session is suspended it fails at
/// once with `SessionLost`, rather than waiting for the network to heal (or, for a queue,
/// answering "empty" about a queue it cannot see). Every try of a recipe: `Mutex`,
/// `SimpleLock`, `Semaphore`, `LeaderLatch`, `DistributedQueue`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_try_while_disconnected_fails_at_once() {
    for_each_backend(|connect| async move {
        let partition = Partition::start(&connect).await;
        let cut_off = session(&partition.connect_string()).await;
        let mutex = cut_off.mutex("/locks/try-disconnected").unwrap();
        let simple = cut_off
            .simple_lock("/locks/try-disconnected-simple")
            .unwrap();
        let semaphore = cut_off.semaphore("/locks/try-disconnected-sem", 2).unwrap();
        let latch = cut_off
            .leader_latch("/locks/try-disconnected-latch", "cut-off")
            .unwrap();
        let queue = cut_off
            .distributed_queue("/locks/try-disconnected-queue")
            .unwrap();
        partition.cut();
        wait_state(&cut_off, ConnectionState::Suspended).await;
        // Far less than the cut lasts (it lasts until healed below): no answer may wait for
        // the connection.
        let within = Duration::from_secs(20);
        let tried = timeout(within, mutex.try_lock()).await.expect("Mutex");
        assert!(matches!(tried, Err(Error::SessionLost)), "Mutex: {tried:?}");
        let tried = timeout(within, simple.try_lock())
            .await
            .expect("SimpleLock");
        assert!(
            matches!(tried, Err(Error::SessionLost)),
            "SimpleLock: {tried:?}"
        );
        let tried = timeout(within, semaphore.try_acquire(1))
            .await
            .expect("Semaphore");
        assert!(
            matches!(tried, Err(Error::SessionLost)),
            "Semaphore: {tried:?}"
        );
        let tried = timeout(within, latch.try_lead())
            .await
            .expect("LeaderLatch");
        assert!(
            matches!(tried, Err(Error::SessionLost)),
            "LeaderLatch: {tried:?}"
        );
        let tried = timeout(within, queue.try_take(Delivery::AtMostOnce))
            .await
            .expect("DistributedQueue");
        assert!(
            matches!(tried, Err(Error::SessionLost)),
            "DistributedQueue: {tried:?}"
        );
        partition.heal();
        wait_state(&cut_off, ConnectionState::Reconnected).await;
        let guard = mutex
            .try_lock()
            .await
            .unwrap()
            .expect("free once connected");
        assert!(
            queue
                .try_take(Delivery::AtMostOnce)
                .await
                .unwrap()
                .is_none(),
            "empty"
        );
        guard.release().await.unwrap();
        // A closed session: not "empty" either.
        cut_off.close().await;
        let tried = queue.try_take(Delivery::AtMostOnce).await;
        assert!(
            matches!(tried, Err(Error::SessionLost)),
            "closed: {tried:?}"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn session_expiry_fires_lost_and_frees_the_lock() {
    for_each_backend(|connect| async move {
        let path = "/locks/expiry";
        // The holder reaches the server through a proxy that can cut the network.
        let partition = Partition::start(&connect).await;
        let holder = session(&partition.connect_string()).await;
        let waiter = session(&connect).await;
        let guard = holder.mutex(path).unwrap().lock().await.unwrap();
        let token = guard.fencing_token();
        let next = waiter.mutex(path).unwrap();
        let waiting = tokio::spawn(async move { next.lock().await.unwrap() });
        wait_children(&waiter, path, 2).await;
        assert!(guard.is_held());
        partition.cut();
        tokio::time::timeout(Duration::from_secs(30), guard.lost())
            .await
            .expect("lost() fired");
        assert!(!guard.is_held());
        // The server expires the silent session and deletes its lock node.
        let taken = tokio::time::timeout(Duration::from_secs(60), waiting)
            .await
            .expect("waiter granted")
            .unwrap();
        let taken_token = taken.fencing_token();
        assert!(taken_token > token);
        wait_state(&holder, ConnectionState::Lost).await;
        assert!(matches!(guard.release().await, Err(Error::NotHeld)));
        taken.release().await.unwrap();
        // Once the network heals, the holder's session comes back as a new session, and its
        // handles work again.
        partition.heal();
        let regained =
            tokio::time::timeout(Duration::from_secs(60), holder.mutex(path).unwrap().lock())
                .await
                .expect("the holder's session reconnected")
                .unwrap();
        assert!(regained.is_held());
        assert!(regained.fencing_token() > taken_token);
        regained.release().await.unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reentry_is_counted_and_the_node_goes_at_zero() {
    for_each_backend(|connect| async move {
        let path = "/locks/reentrant";
        let a = session(&connect).await;
        let b = session(&connect).await;
        let mutex = a.mutex(path).unwrap();
        let outer = mutex.lock().await.unwrap();
        let inner = mutex.clone().lock().await.unwrap();
        let third = mutex
            .try_lock()
            .await
            .unwrap()
            .expect("re-entry never waits");
        assert_eq!(mutex.hold_count(), 3);
        assert_eq!(outer.fencing_token(), inner.fencing_token());
        assert_eq!(children(&a, path).await.len(), 1, "re-entry created a node");
        let other = b.mutex(path).unwrap();
        // A second handle in the same session is another owner: it must wait.
        assert!(a.mutex(path).unwrap().try_lock().await.unwrap().is_none());
        inner.release().await.unwrap();
        third.release().await.unwrap();
        assert_eq!(mutex.hold_count(), 1);
        assert!(
            other.try_lock().await.unwrap().is_none(),
            "freed before the count reached zero"
        );
        outer.release().await.unwrap();
        assert_eq!(mutex.hold_count(), 0);
        let taken = other.try_lock().await.unwrap().expect("free at zero");
        taken.release().await.unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn releasing_a_lock_deleted_behind_our_back_is_not_held() {
    for_each_backend(|connect| async move {
        let path = "/locks/broken";
        let a = session(&connect).await;
        let admin = session(&connect).await;
        let guard = a.mutex(path).unwrap().lock().await.unwrap();
        let node = guard.node().to_owned();
        let lost = async { guard.lost().await };
        let deleting = async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            admin.client().unwrap().delete(&node, None).await.unwrap();
        };
        let ((), ()) = tokio::time::timeout(Duration::from_secs(20), async {
            tokio::join!(lost, deleting)
        })
        .await
        .expect("lost() fired on deletion");
        assert!(!guard.is_held());
        assert!(matches!(guard.release().await, Err(Error::NotHeld)));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fencing_tokens_keep_increasing_when_the_parent_is_recreated() {
    for_each_backend(|connect| async move {
        let path = "/locks/recreated/lock";
        let a = session(&connect).await;
        let mutex = a.mutex(path).unwrap();
        let first = mutex.lock().await.unwrap();
        let token = first.fencing_token();
        first.release().await.unwrap();
        let client = a.client().unwrap();
        client.delete(path, None).await.unwrap();
        client.delete("/locks/recreated", None).await.unwrap();
        let second = mutex.lock().await.unwrap();
        assert!(second.fencing_token() > token);
        second.release().await.unwrap();
    })
    .await;
}

/// A session closed while a lock's create is in flight ends that lock with `SessionLost`, as
/// every other end of the session does, not with the client's own error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_whose_session_closes_during_its_create_is_session_lost() {
    for_each_backend(|connect| async move {
        let proxy = Partition::start(&connect).await;
        let observer = session(&connect).await;
        let persistent =
            lockkeeper_zk_client::CreateOptions::new(lockkeeper_zk_client::CreateMode::Persistent);
        let dir = observer.client().unwrap();
        dir.mkdir("/locks/closing", &persistent).await.unwrap();
        let closing = session(&proxy.connect_string()).await;
        let mutex = closing.mutex("/locks/closing").unwrap();
        // The create reaches the server and makes the lock node; its answer does not come back.
        proxy.hold_replies();
        let locking = tokio::spawn(async move { mutex.lock().await.map(drop) });
        wait_children(&observer, "/locks/closing", 1).await;
        closing.close().await;
        // The held answers stay held until the lock has ended: let through earlier, the
        // create's answer (and the listing's beside it) can reach the session before it has
        // ended its pending requests, and grant the lock.
        let ended = timeout(Duration::from_secs(30), locking).await;
        proxy.let_replies_through();
        match ended {
            Ok(Ok(Err(Error::SessionLost))) => {}
            other => panic!("a lock whose session closed: {other:?}"),
        }
    })
    .await;
}

/// A create the server refuses for good (here its ACL: anyone may read the directory, nobody
/// may create in it) is the server's error, at once: not retried, not a lost session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_the_server_refuses_is_its_error() {
    for_each_backend(|connect| async move {
        let session = session(&connect).await;
        read_only_dir(&session, "/locks-ro").await;
        let mutex = session.mutex("/locks-ro").unwrap();
        match mutex.lock_timeout(Duration::from_secs(30)).await {
            Err(Error::Zk(lockkeeper_zk_client::Error::NoAuth)) => {}
            other => panic!("a create the server refuses: {other:?}"),
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_before_anything_is_sent() {
    for_each_backend(|connect| async move {
        let a = session(&connect).await;
        for path in [
            "",
            "locks",
            "/",
            "/locks/",
            "/a//b",
            "/a/../b",
            "/zookeeper/x",
            "/a\u{1}",
        ] {
            assert!(
                matches!(a.mutex(path), Err(Error::InvalidArgument(_))),
                "{path:?} accepted"
            );
        }
        let mutex = a.mutex("/locks/bad-input").unwrap();
        assert!(matches!(
            mutex.lock_timeout(Duration::ZERO).await,
            Err(Error::InvalidArgument(_))
        ));
        assert!(children(&a, "/locks/bad-input").await.is_empty());
        assert!(matches!(
            Session::builder(&connect)
                .session_timeout(Duration::ZERO)
                .connect()
                .await,
            Err(Error::InvalidArgument(_))
        ));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_chroot_is_created_and_locks_live_under_it() {
    for_each_backend(|connect| async move {
        let chrooted = session(&format!("{connect}/apps/billing")).await;
        let guard = chrooted
            .mutex("/locks/invoices")
            .unwrap()
            .lock()
            .await
            .unwrap();
        let root = session(&connect).await;
        let nodes = children(&root, "/apps/billing/locks/invoices").await;
        assert_eq!(nodes.len(), 1, "{nodes:?}");
        assert_eq!(guard.node(), format!("/locks/invoices/{}", nodes[0]));
        guard.release().await.unwrap();
    })
    .await;
}

/// A short cut that reconnects to the same session: a lock taken with the default policy is
/// lost at the suspension; one from `keep_through_suspension()` (a Mutex and a Semaphore lease)
/// stays held, keeps its node and token, and still notices its node being deleted afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_through_suspension_rides_out_a_short_cut() {
    for_each_backend(|connect| async move {
        let partition = Partition::start(&connect).await;
        let through = Session::builder(&partition.connect_string())
            .session_timeout(Duration::from_secs(10))
            .connect()
            .await
            .unwrap();
        let first_id = through.session_id();
        let kept = through
            .mutex("/keep/mutex")
            .unwrap()
            .with_options(LockOptions::new().keep_through_suspension())
            .unwrap()
            .lock()
            .await
            .unwrap();
        let (kept_node, kept_token) = (kept.node().to_owned(), kept.fencing_token());
        let leases = through
            .semaphore("/keep/semaphore", 1)
            .unwrap()
            .with_options(LockOptions::new().keep_through_suspension())
            .unwrap()
            .acquire(1)
            .await
            .unwrap();
        let standard = through
            .mutex("/keep/standard")
            .unwrap()
            .lock()
            .await
            .unwrap();

        partition.cut();
        wait_state(&through, ConnectionState::Suspended).await;
        tokio::time::timeout(Duration::from_secs(2), standard.lost())
            .await
            .expect("the default policy gives the lock up at the suspension");
        assert!(!standard.is_held());
        assert!(kept.is_held(), "kept while suspended, within its deadline");
        assert!(leases.is_held(), "leases kept while suspended");
        tokio::time::sleep(Duration::from_secs(1)).await;
        partition.heal();
        wait_state(&through, ConnectionState::Reconnected).await;
        assert_eq!(through.session_id(), first_id, "the same session came back");

        assert!(kept.is_held() && leases.is_held());
        assert_eq!(
            (kept.node(), kept.fencing_token()),
            (kept_node.as_str(), kept_token)
        );
        let mut lost = Box::pin(kept.lost());
        assert!(
            tokio::time::timeout(Duration::from_millis(300), &mut lost)
                .await
                .is_err(),
            "a kept lock reported lost after the same session came back"
        );
        let other = session(&connect).await;
        assert!(
            other
                .mutex("/keep/mutex")
                .unwrap()
                .try_lock()
                .await
                .unwrap()
                .is_none(),
            "the kept lock is still held on the server"
        );
        // Still watching its node after the reconnect: a deletion is noticed.
        other
            .client()
            .unwrap()
            .delete(&kept_node, None)
            .await
            .unwrap();
        tokio::time::timeout(Duration::from_secs(10), lost)
            .await
            .expect("lost after the node was deleted");
        assert!(!kept.is_held());
        leases.release().await.unwrap();
    })
    .await;
}

/// A timed wait is bounded as a whole: a waiter cut off from the server while it waits ends by
/// its deadline plus the second a withdrawal may take (here with a loose margin), and says the
/// server is unreachable instead of `Ok(None)`, which would claim someone else holds the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_wait_cut_off_from_the_server_ends_on_time_as_unreachable() {
    for_each_backend(|connect| async move {
        if support::is_ensemble(&connect) {
            eprintln!("skipped on an ensemble: the proxy cuts a single server");
            return;
        }
        let path = "/locks/cut-wait";
        let holder = session(&connect).await;
        let held = holder.mutex(path).unwrap().lock().await.expect("lock");
        let partition = Partition::start(&connect).await;
        let waiter = Session::builder(&partition.connect_string())
            .session_timeout(Duration::from_secs(20))
            .connect()
            .await
            .expect("connect through the proxy");
        let mutex = waiter.mutex(path).unwrap();
        let timeout = Duration::from_secs(2);
        let started = tokio::time::Instant::now();
        let waiting = tokio::spawn(async move { mutex.lock_timeout(timeout).await });
        wait_children(&holder, path, 2).await;
        partition.cut();
        let answer = tokio::time::timeout(Duration::from_secs(30), waiting)
            .await
            .expect("the timed wait ended")
            .expect("task");
        let took = started.elapsed();
        match answer {
            Err(err) => assert!(
                err.is_connection_loss() && err.to_string().contains("unreachable"),
                "{err}"
            ),
            Ok(got) => panic!(
                "a wait cut off from its server answered {:?}",
                got.is_some()
            ),
        }
        assert!(
            took < timeout + Duration::from_secs(4),
            "lock_timeout({timeout:?}) took {took:?}"
        );
        partition.heal();
        held.release().await.expect("release");
    })
    .await;
}

/// A timed wait whose session is cut off before it could queue a node ends by its deadline as
/// unreachable too: nothing was heard, so it cannot say the lock is held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_wait_that_never_reached_the_server_ends_as_unreachable() {
    for_each_backend(|connect| async move {
        if support::is_ensemble(&connect) {
            eprintln!("skipped on an ensemble: the proxy cuts a single server");
            return;
        }
        let partition = Partition::start(&connect).await;
        let waiter = Session::builder(&partition.connect_string())
            .session_timeout(Duration::from_secs(20))
            .connect()
            .await
            .expect("connect through the proxy");
        let mutex = waiter.mutex("/locks/never-reached").unwrap();
        partition.cut();
        wait_state(&waiter, ConnectionState::Suspended).await;
        let timeout = Duration::from_secs(1);
        let started = tokio::time::Instant::now();
        let answer = mutex.lock_timeout(timeout).await;
        let took = started.elapsed();
        match answer {
            Err(err) => assert!(err.to_string().contains("unreachable"), "{err}"),
            Ok(got) => panic!(
                "a wait that never reached its server answered {:?}",
                got.is_some()
            ),
        }
        assert!(
            took < timeout + Duration::from_secs(4),
            "lock_timeout({timeout:?}) took {took:?}"
        );
        partition.heal();
    })
    .await;
}
