//! Multi-locks against Keeper and Apache ZooKeeper: all or nothing, every lock kind, one
//! `lost()` for all, no deadlock when two clients list overlapping sets in opposite orders,
//! and bad input.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use lockkeeper::Error;
use lockkeeper::zk::Session;
use lockkeeper::{Lock, MultiLock};
use support::{children, for_each_backend, session};
use tokio::time::timeout;

const WAIT: Duration = Duration::from_secs(20);

/// Rounds per client in the opposite-order test (`LOCKKEEPER_MULTI_ROUNDS`, default 1,000).
fn rounds() -> u32 {
    std::env::var("LOCKKEEPER_MULTI_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000)
}

fn mutexes(session: &Session, paths: &[&str]) -> MultiLock {
    MultiLock::new(
        paths
            .iter()
            .map(|path| Arc::new(session.mutex(path).unwrap()) as Arc<dyn Lock>),
    )
    .unwrap()
}

#[tokio::test]
async fn all_or_nothing() {
    for_each_backend(|connect| async move {
        let ours = session(&connect).await;
        let theirs = session(&connect).await;
        let multi = mutexes(&ours, &["/multi/b", "/multi/a"]);
        assert_eq!(
            multi.names(),
            ["/multi/a", "/multi/b"],
            "taken sorted by path"
        );

        // With one lock taken elsewhere, neither a try nor a timeout keeps the other.
        let blocker = theirs.mutex("/multi/b").unwrap().lock().await.unwrap();
        assert!(multi.try_lock().await.unwrap().is_none());
        assert!(
            children(&ours, "/multi/a").await.is_empty(),
            "a kept after a failed try"
        );
        assert!(
            multi
                .lock_timeout(Duration::from_millis(300))
                .await
                .unwrap()
                .is_none()
        );
        assert!(
            children(&ours, "/multi/a").await.is_empty(),
            "a kept after a timeout"
        );
        assert_eq!(children(&ours, "/multi/b").await.len(), 1);

        // Once free, both; a token per lock.
        let waiting = tokio::spawn({
            let multi = multi.clone();
            async move { multi.lock().await }
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        let blocker_token = blocker.fencing_token();
        blocker.release().await.unwrap();
        let guard = timeout(WAIT, waiting).await.unwrap().unwrap().unwrap();
        let tokens = guard.fencing_tokens();
        assert_eq!(
            tokens.iter().map(|(path, _)| *path).collect::<Vec<_>>(),
            ["/multi/a", "/multi/b"]
        );
        assert!(guard.fencing_token("/multi/b").unwrap() > blocker_token);
        assert!(guard.fencing_token("/multi/c").is_none());
        assert!(guard.is_held());
        assert!(guard.valid_until().is_some());
        assert!(
            theirs
                .mutex("/multi/a")
                .unwrap()
                .try_lock()
                .await
                .unwrap()
                .is_none()
        );
        guard.release().await.unwrap();
        assert!(children(&ours, "/multi/a").await.is_empty());
        assert!(children(&ours, "/multi/b").await.is_empty());
    })
    .await;
}

#[tokio::test]
async fn every_lock_kind_and_one_lost_for_all() {
    for_each_backend(|connect| async move {
        let ours = session(&connect).await;
        let theirs = session(&connect).await;
        let locks: [Arc<dyn Lock>; 4] = [
            Arc::new(ours.rw_lock("/kinds/write").unwrap().write_lock()),
            Arc::new(ours.rw_lock("/kinds/read").unwrap().read_lock()),
            Arc::new(ours.semaphore("/kinds/lease", 2).unwrap()),
            Arc::new(ours.mutex("/kinds/mutex").unwrap()),
        ];
        let multi = MultiLock::new(locks).unwrap();
        // Another reader and another lease holder do not keep it out.
        let reader = theirs.rw_lock("/kinds/read").unwrap().read().await.unwrap();
        let lease = theirs
            .semaphore("/kinds/lease", 2)
            .unwrap()
            .acquire(1)
            .await
            .unwrap();
        let guard = multi.try_lock().await.unwrap().expect("all four at once");
        assert_eq!(guard.fencing_tokens().len(), 4);
        // The write side excludes others.
        assert!(
            theirs
                .rw_lock("/kinds/write")
                .unwrap()
                .try_read()
                .await
                .unwrap()
                .is_none()
        );

        // One node deleted behind its back: lost() fires for the whole set.
        let mut lost = Box::pin(guard.lost());
        assert!(
            timeout(Duration::from_millis(300), &mut lost)
                .await
                .is_err()
        );
        let mutex_node = format!(
            "/kinds/mutex/{}",
            children(&theirs, "/kinds/mutex").await.remove(0)
        );
        theirs
            .client()
            .unwrap()
            .delete(&mutex_node, None)
            .await
            .unwrap();
        timeout(WAIT, lost)
            .await
            .expect("lost() after one lock went");
        assert!(!guard.is_held());
        // Release gives back the others and says one was not held.
        assert!(matches!(guard.release().await, Err(Error::NotHeld)));
        assert!(children(&theirs, "/kinds/write").await.is_empty());
        assert_eq!(children(&theirs, "/kinds/read").await.len(), 1);
        assert_eq!(children(&theirs, "/kinds/lease/leases").await.len(), 1);
        reader.release().await.unwrap();
        lease.release().await.unwrap();
    })
    .await;
}

/// Two clients list three locks in opposite orders and take them over and over: the canonical
/// order means neither can hold one while waiting for the other, and a shared resource sees
/// no overlap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opposite_orders_never_deadlock() {
    for_each_backend(|connect| async move {
        let rounds = rounds();
        let inside = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicU64::new(0));
        let mut clients = Vec::new();
        for order in [
            ["/deadlock/a", "/deadlock/b", "/deadlock/c"],
            ["/deadlock/c", "/deadlock/b", "/deadlock/a"],
        ] {
            let s = session(&connect).await;
            let multi = mutexes(&s, &order);
            let (inside, done) = (inside.clone(), done.clone());
            clients.push(tokio::spawn(async move {
                for _ in 0..rounds {
                    let guard = multi.lock().await.unwrap();
                    assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                    tokio::task::yield_now().await;
                    inside.store(false, Ordering::SeqCst);
                    guard.release().await.unwrap();
                    done.fetch_add(1, Ordering::Relaxed);
                }
                drop(s);
            }));
        }
        let started = std::time::Instant::now();
        for client in clients {
            timeout(Duration::from_secs(240), client)
                .await
                .unwrap_or_else(|_| {
                    panic!(
                        "stuck after {} of {} rounds: a deadlock",
                        done.load(Ordering::Relaxed),
                        2 * rounds
                    )
                })
                .unwrap();
        }
        eprintln!("{} rounds in {:?}", 2 * rounds, started.elapsed());
    })
    .await;
}

#[tokio::test]
async fn bad_input_is_refused_by_name() {
    for_each_backend(|connect| async move {
        let s = session(&connect).await;
        match MultiLock::new([]) {
            Err(Error::InvalidArgument(message)) => assert!(message.contains("at least one")),
            other => panic!("empty: {other:?}"),
        }
        let sides: [Arc<dyn Lock>; 2] = [
            Arc::new(s.rw_lock("/twice").unwrap().write_lock()),
            Arc::new(s.rw_lock("/twice").unwrap().read_lock()),
        ];
        let twice = MultiLock::new(sides);
        match twice {
            Err(Error::InvalidArgument(message)) => {
                assert!(
                    message.contains("\"/twice\"") && message.contains("twice"),
                    "{message}"
                );
            }
            other => panic!("one lock twice: {other:?}"),
        }
        let multi = mutexes(&s, &["/ok"]);
        assert!(matches!(
            multi.lock_timeout(Duration::ZERO).await,
            Err(Error::InvalidArgument(_))
        ));
    })
    .await;
}
