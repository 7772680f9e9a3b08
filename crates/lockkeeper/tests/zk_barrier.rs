//! Barriers and double barriers, against Keeper and Apache ZooKeeper: the barrier's set, wait
//! and remove with one wake-up per waiter, and a wait that carries on in the next session; a
//! double barrier of 10 members where nobody computes before all entered and nobody leaves
//! before all finished, with the wake-ups of entering and leaving counted (herd-free: at most
//! one per member entering, at most two per member leaving); timeouts and dropped futures that
//! leave no member node behind; a member whose session dies counting as left; bad input refused
//! by name; and both barriers shared with unmodified Curator 5.4 (`curator/Barriers.java`).

mod support;

#[allow(dead_code)]
#[path = "curator/jvm.rs"]
mod jvm;
#[allow(dead_code)]
#[path = "curator/zk.rs"]
mod zk;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use jvm::Jvm;
use lockkeeper::Error;
use lockkeeper::zk::{ConnectionState, Entered, Session};
use lockkeeper_testkit::both;
use support::{Partition, children, for_each_backend, session, wait_children};
use zk::{JVM_START, STEP, runtime};

/// Bound on anything that should happen promptly.
const SOON: Duration = Duration::from_secs(30);
/// How long something that must not happen is given to happen.
const QUIET: Duration = Duration::from_millis(700);

fn sum_notifications(sessions: &[Session]) -> u64 {
    sessions.iter().map(Session::notifications).sum()
}

/// The member nodes of a double barrier (its children but `ready`).
async fn members_of(session: &Session, path: &str) -> Vec<String> {
    let mut all = children(session, path).await;
    all.retain(|name| name != "ready");
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn barrier_holds_waiters_until_removed_waking_each_once() {
    for_each_backend(|connect| async move {
        let path = "/barriers/gate";
        let owner = session(&connect).await;
        let barrier = owner.barrier(path).unwrap();
        assert_eq!(barrier.path(), path);
        assert!(!barrier.is_set().await.unwrap());
        // Not set: waiting passes at once.
        assert!(barrier.wait_timeout(QUIET).await.unwrap());
        barrier.set().await.unwrap();
        barrier.set().await.unwrap(); // setting twice is fine
        assert!(barrier.is_set().await.unwrap());

        const WAITERS: usize = 5;
        let mut sessions = Vec::new();
        for _ in 0..WAITERS {
            sessions.push(session(&connect).await);
        }
        // A waiter with a timeout gives up while the barrier stands.
        assert!(
            !sessions[0]
                .barrier(path)
                .unwrap()
                .wait_timeout(QUIET)
                .await
                .unwrap()
        );
        let before = sum_notifications(&sessions);
        let passed = Arc::new(AtomicUsize::new(0));
        let mut waiting = Vec::new();
        for s in &sessions {
            let gate = s.barrier(path).unwrap();
            let passed = passed.clone();
            waiting.push(tokio::spawn(async move {
                gate.wait().await.unwrap();
                passed.fetch_add(1, Ordering::SeqCst);
            }));
        }
        tokio::time::sleep(QUIET).await;
        assert_eq!(
            passed.load(Ordering::SeqCst),
            0,
            "nobody passes a set barrier"
        );

        barrier.remove().await.unwrap();
        for task in waiting {
            tokio::time::timeout(SOON, task)
                .await
                .expect("waiter released")
                .unwrap();
        }
        assert_eq!(passed.load(Ordering::SeqCst), WAITERS);
        let woken = sum_notifications(&sessions) - before;
        eprintln!("barrier: {WAITERS} waiters, {woken} notifications on removal");
        assert_eq!(woken, WAITERS as u64, "one wake-up per waiter");
        barrier.remove().await.unwrap(); // removing twice is fine
        assert!(!barrier.is_set().await.unwrap());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_barrier_wait_carries_on_across_session_loss() {
    for_each_backend(|connect| async move {
        let path = "/barriers/expiry";
        let owner = session(&connect).await;
        let gate = owner.barrier(path).unwrap();
        gate.set().await.unwrap();
        let partition = Partition::start(&connect).await;
        let waiter = session(&partition.connect_string()).await;
        let first = waiter.session_id();
        let mut states = waiter.states();
        let waiting = tokio::spawn({
            let barrier = waiter.barrier(path).unwrap();
            async move { barrier.wait().await }
        });
        tokio::time::sleep(QUIET).await;
        partition.cut();
        tokio::time::timeout(SOON, async {
            while states.next().await != Some(ConnectionState::Lost) {}
        })
        .await
        .expect("the waiter's session expires");
        partition.heal();
        tokio::time::timeout(SOON, async {
            while states.next().await != Some(ConnectionState::Reconnected) {}
        })
        .await
        .expect("a new session");
        assert_ne!(waiter.session_id(), first);
        tokio::time::sleep(QUIET).await;
        assert!(!waiting.is_finished(), "the barrier is still set");
        gate.remove().await.unwrap();
        tokio::time::timeout(SOON, waiting)
            .await
            .expect("released in the new session")
            .unwrap()
            .unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ten_members_enter_together_and_leave_together_without_a_herd() {
    for_each_backend(|connect| async move {
        const N: usize = 10;
        let path = "/barriers/ten";
        let mut sessions = Vec::new();
        for _ in 0..N {
            sessions.push(session(&connect).await);
        }
        let arrived = Arc::new(AtomicUsize::new(0));
        let finished = Arc::new(AtomicUsize::new(0));
        // Measurement only: every member is in before the leave count starts.
        let all_in = Arc::new(tokio::sync::Barrier::new(N + 1));
        let leaving = Arc::new(tokio::sync::Barrier::new(N + 1));
        let mut tasks = Vec::new();
        for (i, s) in sessions.iter().enumerate() {
            let barrier = s.double_barrier(path, N as u32).unwrap();
            let (arrived, finished) = (arrived.clone(), finished.clone());
            let (all_in, leaving) = (all_in.clone(), leaving.clone());
            tasks.push(tokio::spawn(async move {
                // Staggered arrivals: the early ones must wait for the late ones.
                tokio::time::sleep(Duration::from_millis(40 * i as u64)).await;
                arrived.fetch_add(1, Ordering::SeqCst);
                let mut entered: Entered = barrier.enter().await.unwrap();
                assert_eq!(
                    arrived.load(Ordering::SeqCst),
                    N,
                    "member {i} computes before everyone entered"
                );
                all_in.wait().await;
                leaving.wait().await;
                // Uneven work: the quick ones must wait in leave for the slow ones.
                tokio::time::sleep(Duration::from_millis(40 * ((i * 7) % N) as u64)).await;
                finished.fetch_add(1, Ordering::SeqCst);
                entered.leave().await.unwrap();
                assert_eq!(
                    finished.load(Ordering::SeqCst),
                    N,
                    "member {i} left before everyone finished"
                );
            }));
        }
        tokio::time::timeout(SOON, all_in.wait())
            .await
            .expect("all entered");
        let entering = sum_notifications(&sessions);
        assert_eq!(members_of(&sessions[0], path).await.len(), N);
        leaving.wait().await;
        for task in tasks {
            tokio::time::timeout(SOON, task)
                .await
                .expect("member done")
                .unwrap();
        }
        let left = sum_notifications(&sessions) - entering;
        eprintln!("double barrier of {N}: {entering} notifications entering, {left} leaving");
        // Entering: each member that waited is woken once, when `ready` appears.
        assert!(entering <= (N - 1) as u64, "entering woke {entering} times");
        // Leaving: only the lowest is woken by a leave (when the highest goes), and the others
        // once when the lowest finally goes. A herd would wake everyone at every leave.
        assert!(left <= 2 * (N - 1) as u64, "leaving woke {left} times");
        assert!(
            children(&sessions[0], path).await.is_empty(),
            "ready and members gone"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn timeouts_and_dropped_futures_leave_no_member_behind() {
    for_each_backend(|connect| async move {
        let path = "/barriers/timeouts";
        let a = session(&connect).await;
        let barrier = a.double_barrier(path, 2).unwrap();
        assert_eq!(barrier.path(), path);
        assert_eq!(barrier.members(), 2);
        assert!(barrier.enter_timeout(QUIET).await.unwrap().is_none());
        assert!(
            members_of(&a, path).await.is_empty(),
            "the timed-out member is gone"
        );

        // A dropped enter future: its node is deleted in the background.
        let dropped = tokio::time::timeout(QUIET, barrier.enter()).await;
        assert!(dropped.is_err(), "one member alone cannot enter");
        wait_children(&a, path, 0).await;

        // A leave that times out still takes its node away, so the others are not held up.
        let b = session(&connect).await;
        let other = b.double_barrier(path, 2).unwrap();
        let (first, second) = tokio::join!(barrier.enter(), other.enter());
        let (mut first, mut second) = (first.unwrap(), second.unwrap());
        assert!(matches!(
            first.leave_timeout(Duration::ZERO).await,
            Err(Error::InvalidArgument(_))
        ));
        assert_eq!(
            members_of(&a, path).await.len(),
            2,
            "a refused leave does nothing"
        );
        assert!(
            !first.leave_timeout(QUIET).await.unwrap(),
            "the other is still in"
        );
        assert_eq!(members_of(&a, path).await.len(), 1);
        // Leaving again waits for the others again.
        let again = tokio::spawn(async move { first.leave().await });
        tokio::time::sleep(QUIET).await;
        assert!(!again.is_finished(), "the other is still in");
        assert!(second.leave_timeout(SOON).await.unwrap());
        tokio::time::timeout(SOON, again)
            .await
            .expect("released")
            .unwrap()
            .unwrap();
        assert!(children(&a, path).await.is_empty());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_member_whose_session_dies_counts_as_left() {
    for_each_backend(|connect| async move {
        let path = "/barriers/dies";
        let sessions = [
            session(&connect).await,
            session(&connect).await,
            session(&connect).await,
        ];
        let barriers: Vec<_> = sessions
            .iter()
            .map(|s| s.double_barrier(path, 3).unwrap())
            .collect();
        let (x, y, z) = tokio::join!(
            barriers[0].enter(),
            barriers[1].enter(),
            barriers[2].enter()
        );
        let (mut x, mut y, mut z) = (x.unwrap(), y.unwrap(), z.unwrap());
        let leaving = tokio::spawn(async move { tokio::join!(x.leave(), y.leave()) });
        tokio::time::sleep(QUIET).await;
        assert!(!leaving.is_finished(), "the third member has not left");
        sessions[2].close().await;
        let (x, y) = tokio::time::timeout(SOON, leaving)
            .await
            .expect("released")
            .unwrap();
        x.unwrap();
        y.unwrap();
        assert!(matches!(z.leave().await, Err(Error::SessionLost)));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_input_is_refused_by_name() {
    for_each_backend(|connect| async move {
        let s = session(&connect).await;
        match s.double_barrier("/barriers/zero", 0) {
            Err(Error::InvalidArgument(message)) => {
                assert!(message.contains("members"), "{message}");
                assert!(message.contains("/barriers/zero"), "{message}");
            }
            other => panic!("zero members: {other:?}"),
        }
        for path in ["", "barriers", "/barriers/", "/", "/zookeeper/x"] {
            for made in [
                s.barrier(path).map(|_| ()),
                s.double_barrier(path, 2).map(|_| ()),
            ] {
                match made {
                    Err(Error::InvalidArgument(message)) => {
                        assert!(message.contains("barrier path"), "{message}");
                        assert!(message.contains(&format!("{path:?}")), "{message}");
                    }
                    other => panic!("{path:?}: {other:?}"),
                }
            }
        }
        let barrier = s.double_barrier("/barriers/zero", 1).unwrap();
        assert!(matches!(
            barrier.enter_timeout(Duration::ZERO).await,
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            s.barrier("/barriers/zero")
                .unwrap()
                .wait_timeout(Duration::ZERO)
                .await,
            Err(Error::InvalidArgument(_))
        ));
        // One member is a group by itself: in and out at once.
        let mut alone = barrier.enter().await.unwrap();
        alone.leave().await.unwrap();
        assert!(children(&s, "/barriers/zero").await.is_empty());
    })
    .await;
}

/// Two Curator members and two lockkeeper members in one double barrier of four, then the
/// single barrier set and removed from each side with the other waiting.
#[test]
fn curator_and_lockkeeper_share_barriers() {
    let rt = runtime();
    for server in both() {
        eprintln!("--- against {}", server.name());
        let connect = server.connect_string();
        let path = "/barriers/mixed";
        let mut java = Jvm::spawn("Barriers", &[&connect, path, "4", "2"]);
        java.expect_line("READY", JVM_START);
        let (a, b) = rt.block_on(async { (session(&connect).await, session(&connect).await) });

        assert_eq!(java.request("enter 0", STEP), "OK enter 0");
        assert_eq!(java.request("enter 1", STEP), "OK enter 1");
        let first = rt.spawn({
            let barrier = a.double_barrier(path, 4).unwrap();
            async move { barrier.enter().await }
        });
        rt.block_on(async {
            while members_of(&a, path).await.len() < 3 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
        assert_eq!(
            java.line_within(QUIET),
            None,
            "Curator entered with 3 of 4 in"
        );
        assert!(!first.is_finished(), "lockkeeper entered with 3 of 4 in");
        let mut second = rt
            .block_on(async { b.double_barrier(path, 4).unwrap().enter().await })
            .unwrap();
        let first = rt.block_on(first).unwrap().unwrap();
        let mut entered = [java.next_line(STEP), java.next_line(STEP)];
        entered.sort();
        assert_eq!(entered, ["ENTERED 0", "ENTERED 1"]);

        // Leaving: nobody is out while one member is still in.
        let first = rt.spawn(async move {
            let mut first = first;
            first.leave().await
        });
        java.send("leave 0");
        java.send("leave 1");
        // Curator's non-lowest members return once one member node is left (its lines may
        // come before the acknowledgements), so only the lockkeeper side can be held to "not
        // before the last one leaves".
        std::thread::sleep(QUIET);
        assert!(
            !first.is_finished(),
            "lockkeeper left before the last member"
        );
        rt.block_on(second.leave()).unwrap();
        rt.block_on(async { tokio::time::timeout(SOON, first).await })
            .expect("released")
            .unwrap()
            .unwrap();
        let mut lines: Vec<String> = (0..4).map(|_| java.next_line(STEP)).collect();
        lines.sort();
        assert_eq!(lines, ["LEFT 0", "LEFT 1", "OK leave 0", "OK leave 1"]);
        rt.block_on(async { wait_children(&a, path, 0).await });

        // The single barrier, set by Curator and waited on by lockkeeper, then the other way.
        let gate = format!("{path}-gate");
        assert_eq!(java.request("set", STEP), "OK set");
        let barrier = a.barrier(&gate).unwrap();
        assert!(rt.block_on(barrier.is_set()).unwrap());
        assert!(!rt.block_on(barrier.wait_timeout(QUIET)).unwrap());
        let waiting = rt.spawn({
            let barrier = barrier.clone();
            async move { barrier.wait().await }
        });
        assert_eq!(java.request("remove", STEP), "OK remove");
        rt.block_on(async { tokio::time::timeout(SOON, waiting).await })
            .expect("released by Curator")
            .unwrap()
            .unwrap();

        rt.block_on(barrier.set()).unwrap();
        assert_eq!(java.request("wait 1", STEP), "OK wait 1");
        assert_eq!(
            java.line_within(QUIET),
            None,
            "Curator passed a set barrier"
        );
        rt.block_on(barrier.remove()).unwrap();
        assert_eq!(java.next_line(STEP), "PASSED 1");

        assert_eq!(java.request("quit", STEP), "BYE");
        let done = java.finish(STEP);
        assert!(done.success, "{}", done.transcript);
        rt.block_on(async {
            a.close().await;
            b.close().await;
        });
    }
}
