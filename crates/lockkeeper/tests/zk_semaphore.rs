//! The ZooKeeper Semaphore against Keeper and Apache ZooKeeper: exactly N holders at once and
//! never N+1 under contention, several leases at once, leases coming back when a holder's
//! session ends, what held leases answer (tokens, validity, loss), timeouts and cancellation
//! leaving no node, Curator's node names, and bad input.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use lockkeeper::Error;
use support::{children, curator_name, for_each_backend, session, wait_children};
use tokio::sync::Barrier;

/// Bound on anything a test waits for (the machine may be loaded).
const LIMIT: Duration = Duration::from_secs(60);
/// How long a waiter is given to (wrongly) get in before we conclude it is kept out.
const KEPT_OUT: Duration = Duration::from_millis(500);

fn leases_dir(path: &str) -> String {
    format!("{path}/leases")
}

fn locks_dir(path: &str) -> String {
    format!("{path}/locks")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn exactly_max_holders_at_once_and_the_next_one_waits() {
    for_each_backend(|connect| async move {
        const MAX: u32 = 3;
        let path = "/sem/exact";
        // Each holder waits at the barrier while holding: it only opens if all MAX are in.
        let barrier = Arc::new(Barrier::new(MAX as usize + 1));
        let mut holders = Vec::new();
        for _ in 0..MAX {
            let connect = connect.clone();
            let barrier = barrier.clone();
            holders.push(tokio::spawn(async move {
                let session = session(&connect).await;
                let lease = session
                    .semaphore(path, MAX)
                    .unwrap()
                    .acquire(1)
                    .await
                    .unwrap();
                barrier.wait().await;
                // Hold until the test has checked that a fourth is kept out.
                barrier.wait().await;
                lease.release().await.unwrap();
            }));
        }
        tokio::time::timeout(LIMIT, barrier.wait())
            .await
            .expect("MAX holders inside at once");
        let observer = session(&connect).await;
        let leases = children(&observer, &leases_dir(path)).await;
        assert_eq!(leases.len(), MAX as usize);
        assert!(
            leases.iter().all(|n| curator_name(n, "lease-")),
            "not Curator's lease layout: {leases:?}"
        );
        let fourth = observer.semaphore(path, MAX).unwrap();
        assert!(fourth.try_acquire(1).await.unwrap().is_none());
        let waiting = tokio::spawn({
            let fourth = fourth.clone();
            async move { fourth.acquire(1).await.unwrap() }
        });
        // The waiter holds the internal lock and has its lease node in, over the limit.
        wait_children(&observer, &leases_dir(path), MAX as usize + 1).await;
        let locks = children(&observer, &locks_dir(path)).await;
        assert_eq!(locks.len(), 1, "{locks:?}");
        assert!(curator_name(&locks[0], "lock-"), "{locks:?}");
        tokio::time::sleep(KEPT_OUT).await;
        assert!(!waiting.is_finished(), "a fourth holder got in");
        barrier.wait().await;
        let lease = tokio::time::timeout(LIMIT, waiting)
            .await
            .expect("the fourth gets a lease once one comes back")
            .unwrap();
        assert_eq!(lease.len(), 1);
        assert!(lease.is_held());
        for holder in holders {
            tokio::time::timeout(LIMIT, holder)
                .await
                .expect("bounded")
                .unwrap();
        }
        lease.release().await.unwrap();
        assert!(children(&observer, &leases_dir(path)).await.is_empty());
        assert!(children(&observer, &locks_dir(path)).await.is_empty());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn never_more_than_max_leases_under_contention() {
    for_each_backend(|connect| async move {
        const MAX: u32 = 3;
        const SESSIONS: usize = 6;
        const ROUNDS: usize = 6;
        let path = "/sem/contended";
        let inside = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let over = Arc::new(AtomicUsize::new(0));
        let granted = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for index in 0..SESSIONS {
            let connect = connect.clone();
            let (inside, most, over, granted) =
                (inside.clone(), most.clone(), over.clone(), granted.clone());
            tasks.push(tokio::spawn(async move {
                let session = session(&connect).await;
                let semaphore = session.semaphore(path, MAX).unwrap();
                for round in 0..ROUNDS {
                    // A mix of single and double acquisitions, counted in leases.
                    let n = if (index + round) % 3 == 0 { 2 } else { 1 };
                    let leases = semaphore.acquire(n).await.unwrap();
                    assert_eq!(leases.len(), n as usize);
                    let now = inside.fetch_add(n as usize, Ordering::SeqCst) + n as usize;
                    most.fetch_max(now, Ordering::SeqCst);
                    if now > MAX as usize {
                        over.fetch_add(1, Ordering::SeqCst);
                    }
                    granted.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    inside.fetch_sub(n as usize, Ordering::SeqCst);
                    leases.release().await.unwrap();
                }
            }));
        }
        for task in tasks {
            tokio::time::timeout(Duration::from_secs(180), task)
                .await
                .expect("bounded")
                .unwrap();
        }
        assert_eq!(granted.load(Ordering::SeqCst), SESSIONS * ROUNDS);
        assert_eq!(
            over.load(Ordering::SeqCst),
            0,
            "more than {MAX} leases held at once (most: {})",
            most.load(Ordering::SeqCst)
        );
        eprintln!("most leases held at once: {}", most.load(Ordering::SeqCst));
        let observer = session(&connect).await;
        assert!(children(&observer, &leases_dir(path)).await.is_empty());
        assert!(children(&observer, &locks_dir(path)).await.is_empty());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn several_leases_are_taken_together() {
    for_each_backend(|connect| async move {
        let path = "/sem/multi";
        let a = session(&connect).await;
        let b = session(&connect).await;
        let semaphore = a.semaphore(path, 5).unwrap();
        let three = semaphore.acquire(3).await.unwrap();
        assert_eq!(three.len(), 3);
        assert_eq!(three.nodes().len(), 3);
        let leases = children(&a, &leases_dir(path)).await;
        assert_eq!(leases.len(), 3);
        for node in three.nodes() {
            let name = node.rsplit('/').next().unwrap();
            assert!(leases.iter().any(|l| l == name), "{node} not in {leases:?}");
        }
        let other = b.semaphore(path, 5).unwrap();
        // Two are free: three is too many (and takes none), two fit.
        assert!(other.try_acquire(3).await.unwrap().is_none());
        assert_eq!(children(&a, &leases_dir(path)).await.len(), 3);
        assert!(
            other
                .acquire_timeout(3, Duration::from_millis(300))
                .await
                .unwrap()
                .is_none()
        );
        assert_eq!(children(&a, &leases_dir(path)).await.len(), 3);
        let two = other.try_acquire(2).await.unwrap().expect("two are free");
        assert!(
            other.try_acquire(1).await.unwrap().is_none(),
            "a sixth lease"
        );
        // A waiter for four: once `three` goes only three are free, so it must wait for
        // `two` as well.
        let waiting = tokio::spawn({
            let other = other.clone();
            async move { other.acquire(4).await.unwrap() }
        });
        wait_children(&a, &leases_dir(path), 9).await;
        three.release().await.unwrap();
        tokio::time::sleep(KEPT_OUT).await;
        assert!(
            !waiting.is_finished(),
            "four granted while only three were free"
        );
        two.release().await.unwrap();
        let four = tokio::time::timeout(LIMIT, waiting)
            .await
            .expect("four granted once enough came back")
            .unwrap();
        assert_eq!(four.len(), 4);
        assert_eq!(children(&a, &leases_dir(path)).await.len(), 4);
        // Dropping releases every lease (in the background).
        drop(four);
        wait_children(&a, &leases_dir(path), 0).await;
    })
    .await;
}

/// What a set of leases answers while held and after one lease node is deleted behind it:
/// each lease's token is its node's czxid, `valid_until()` is in the future while held and
/// `None` after, and `lost()` stays pending while every lease is held.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn leases_answer_their_tokens_validity_and_loss() {
    for_each_backend(|connect| async move {
        let path = "/sem/answers";
        let holder = session(&connect).await;
        let other = session(&connect).await;
        let leases = holder.semaphore(path, 3).unwrap().acquire(2).await.unwrap();
        assert!(!leases.is_empty());
        assert_eq!(leases.len(), 2);
        let tokens = leases.fencing_tokens();
        assert_eq!(tokens.len(), 2, "one token per lease");
        let client = other.client().expect("client");
        for (node, token) in leases.nodes().into_iter().zip(&tokens) {
            let (_, stat) = client.get_data(node).await.expect("lease node");
            assert_eq!(
                token.get(),
                u64::try_from(stat.czxid).unwrap(),
                "{node}: the token is the node's czxid"
            );
        }
        let until = leases.valid_until().expect("valid while held");
        assert!(
            until > tokio::time::Instant::now(),
            "valid_until in the past"
        );
        assert!(
            tokio::time::timeout(KEPT_OUT, leases.lost()).await.is_err(),
            "lost() resolved while every lease is held"
        );

        let first = leases.nodes()[0].to_owned();
        client.delete(&first, None).await.expect("delete a lease");
        tokio::time::timeout(LIMIT, leases.lost())
            .await
            .expect("lost() once a lease node is deleted");
        assert!(!leases.is_held());
        assert_eq!(leases.valid_until(), None, "valid_until after the loss");
        // The next grant's token is higher than every earlier one.
        let next = other.semaphore(path, 3).unwrap().acquire(1).await.unwrap();
        assert!(next.fencing_tokens()[0] > *tokens.iter().max().unwrap());
        next.release().await.unwrap();
        drop(leases);
        wait_children(&other, &leases_dir(path), 0).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_closed_session_gives_its_leases_back() {
    for_each_backend(|connect| async move {
        let path = "/sem/session-closed";
        let holder = session(&connect).await;
        let observer = session(&connect).await;
        let leases = holder.semaphore(path, 2).unwrap().acquire(2).await.unwrap();
        assert!(leases.is_held());
        let waiter = session(&connect).await;
        let semaphore = waiter.semaphore(path, 2).unwrap();
        let waiting = tokio::spawn(async move { semaphore.acquire(2).await.unwrap() });
        wait_children(&observer, &leases_dir(path), 4).await;
        tokio::time::sleep(KEPT_OUT).await;
        assert!(!waiting.is_finished(), "granted over the limit");

        holder.close().await;
        tokio::time::timeout(LIMIT, leases.lost())
            .await
            .expect("lost() fired");
        assert!(!leases.is_held());
        let taken = tokio::time::timeout(LIMIT, waiting)
            .await
            .expect("the waiter gets the leases of the closed session")
            .unwrap();
        assert_eq!(taken.len(), 2);
        assert!(taken.is_held());
        assert!(matches!(leases.release().await, Err(Error::NotHeld)));
        taken.release().await.unwrap();
        wait_children(&observer, &leases_dir(path), 0).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn timeouts_and_cancellation_leave_no_node_behind() {
    for_each_backend(|connect| async move {
        let path = "/sem/timeouts";
        let a = session(&connect).await;
        let b = session(&connect).await;
        let c = session(&connect).await;
        let held = a.semaphore(path, 1).unwrap().acquire(1).await.unwrap();
        let semaphore = b.semaphore(path, 1).unwrap();
        let leases = leases_dir(path);
        let locks = locks_dir(path);

        assert!(semaphore.try_acquire(1).await.unwrap().is_none());
        assert_eq!(
            children(&a, &leases).await.len(),
            1,
            "try_acquire left a lease"
        );
        assert!(
            children(&a, &locks).await.is_empty(),
            "try_acquire left its lock"
        );
        let started = Instant::now();
        assert!(
            semaphore
                .acquire_timeout(1, Duration::from_millis(300))
                .await
                .unwrap()
                .is_none()
        );
        assert!(started.elapsed() >= Duration::from_millis(300));
        assert_eq!(
            children(&a, &leases).await.len(),
            1,
            "a timed-out lease was left"
        );
        assert!(
            children(&a, &locks).await.is_empty(),
            "a timed-out lock was left"
        );

        // One acquisition waits for a lease (holding the internal lock), another for the
        // internal lock: both are cancelled.
        let first = tokio::spawn({
            let semaphore = semaphore.clone();
            async move { semaphore.acquire(1).await.map(drop) }
        });
        wait_children(&a, &leases, 2).await;
        let second_semaphore = c.semaphore(path, 1).unwrap();
        let second = tokio::spawn(async move { second_semaphore.acquire(1).await.map(drop) });
        wait_children(&a, &locks, 2).await;
        // A timeout while waiting for the internal lock leaves nothing either.
        assert!(
            c.semaphore(path, 1)
                .unwrap()
                .acquire_timeout(1, Duration::from_millis(300))
                .await
                .unwrap()
                .is_none()
        );
        wait_children(&a, &locks, 2).await;
        first.abort();
        second.abort();
        assert!(first.await.unwrap_err().is_cancelled());
        assert!(second.await.unwrap_err().is_cancelled());
        wait_children(&a, &leases, 1).await;
        wait_children(&a, &locks, 0).await;

        // Dropped at any point of the acquisition: whatever was created goes.
        for micros in [100, 300, 1_000, 3_000, 10_000] {
            let attempt =
                tokio::time::timeout(Duration::from_micros(micros), semaphore.acquire(1)).await;
            assert!(attempt.is_err(), "granted while full");
        }
        wait_children(&a, &leases, 1).await;
        wait_children(&a, &locks, 0).await;
        held.release().await.unwrap();
        wait_children(&a, &leases, 0).await;
        // Still usable afterwards.
        let lease = semaphore.try_acquire(1).await.unwrap().expect("free");
        lease.release().await.unwrap();
    })
    .await;
}

/// An acquisition waiting under the internal mutex whose mutex node someone deletes still
/// gets its leases when they fit (the session is alive, so they are ours), rather than an error
/// that would leave them held by nobody who knows it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_internal_lock_does_not_cost_the_waiter_its_lease() {
    for_each_backend(|connect| async move {
        let path = "/semaphores/deleted-internal";
        let holder = session(&connect).await;
        let waiter = session(&connect).await;
        let operator = session(&connect).await;
        let held = holder.semaphore(path, 1).unwrap().acquire(1).await.unwrap();
        let waiting = tokio::spawn({
            let semaphore = waiter.semaphore(path, 1).unwrap();
            async move { semaphore.acquire(1).await }
        });
        // The waiter holds the internal mutex and has its lease node in line.
        let locks = wait_children(&operator, &locks_dir(path), 1).await;
        wait_children(&operator, &leases_dir(path), 2).await;
        operator
            .client()
            .unwrap()
            .delete(&format!("{}/{}", locks_dir(path), locks[0]), None)
            .await
            .unwrap();
        held.release().await.unwrap();
        let leases = tokio::time::timeout(Duration::from_secs(60), waiting)
            .await
            .expect("granted once the holder released")
            .unwrap()
            .expect("the lease is the waiter's: its session is alive");
        assert!(leases.is_held());
        assert_eq!(children(&operator, &leases_dir(path)).await.len(), 1);
        leases.release().await.unwrap();
        assert!(children(&operator, &leases_dir(path)).await.is_empty());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_before_anything_is_sent() {
    for_each_backend(|connect| async move {
        let a = session(&connect).await;
        let path = "/sem/bad-input";
        assert!(matches!(
            a.semaphore(path, 0),
            Err(Error::InvalidArgument(_))
        ));
        for bad in [
            "",
            "sem",
            "/",
            "/sem/",
            "/a//b",
            "/a/../b",
            "/zookeeper/s",
            "/a\n",
        ] {
            assert!(
                matches!(a.semaphore(bad, 2), Err(Error::InvalidArgument(_))),
                "{bad:?} accepted"
            );
        }
        let semaphore = a.semaphore(path, 2).unwrap();
        assert_eq!(semaphore.max_leases(), 2);
        assert_eq!(semaphore.path(), path);
        // Lock-delay is the queue locks' (a semaphore's lease nodes keep no line to wait in):
        // asked of a semaphore, it is refused by name rather than ignored.
        let delayed = semaphore
            .clone()
            .with_options(lockkeeper::LockOptions::new().lock_delay(Duration::from_secs(1)));
        match delayed {
            Err(Error::InvalidArgument(why)) => assert!(
                why.contains("lock_delay is not an option") && why.contains(path),
                "{why}"
            ),
            other => panic!(
                "lock_delay on a semaphore: {:?}",
                other.map(|s| s.path().to_owned())
            ),
        }
        for n in [0, 3, u32::MAX] {
            assert!(
                matches!(semaphore.acquire(n).await, Err(Error::InvalidArgument(_))),
                "acquire({n})"
            );
            assert!(
                matches!(
                    semaphore.try_acquire(n).await,
                    Err(Error::InvalidArgument(_))
                ),
                "try_acquire({n})"
            );
            assert!(
                matches!(
                    semaphore.acquire_timeout(n, Duration::from_secs(1)).await,
                    Err(Error::InvalidArgument(_))
                ),
                "acquire_timeout({n})"
            );
        }
        assert!(matches!(
            semaphore.acquire_timeout(1, Duration::ZERO).await,
            Err(Error::InvalidArgument(_))
        ));
        let client = a.client().unwrap();
        assert_eq!(
            client.check_stat(path).await.unwrap(),
            None,
            "bad input created nodes"
        );
    })
    .await;
}
