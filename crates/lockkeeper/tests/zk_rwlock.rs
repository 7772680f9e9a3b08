//! The ZooKeeper RwLock against Keeper and Apache ZooKeeper: shared readers, exclusive
//! writers under contention, no writer starvation, herd-free reader waits, downgrade (and its
//! safety with a writer queued behind), refused upgrade, reentrancy, timeouts and
//! cancellation leaving no node, Curator's node names, and bad input.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use lockkeeper::Error;
use lockkeeper::zk::Session;
use support::{children, curator_name, for_each_backend, session, wait_children};
use tokio::sync::Barrier;

/// Bound on anything a test waits for (the machine may be loaded).
const LIMIT: Duration = Duration::from_secs(60);
/// How long a waiter is given to (wrongly) get in before we conclude it is kept out.
const KEPT_OUT: Duration = Duration::from_millis(500);

fn count(names: &[String], marker: &str) -> usize {
    names.iter().filter(|n| n.contains(marker)).count()
}

#[test]
fn curator_name_check_rejects_other_layouts() {
    let good = "_c_0b6a3b52-5d0e-4c55-9a43-4b2d1c9e8f70-__READ__0000000007";
    assert!(curator_name(good, "__READ__"));
    assert!(!curator_name(good, "__WRIT__"));
    assert!(!curator_name("__READ__0000000007", "__READ__"));
    assert!(!curator_name(
        "_c_0b6a3b52-5d0e-4c55-9a43-4b2d1c9e8f70-__READ__7",
        "__READ__"
    ));
    assert!(!curator_name(
        "_c_0b6a3b52x5d0e-4c55-9a43-4b2d1c9e8f70-__READ__0000000007",
        "__READ__"
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn readers_from_several_sessions_hold_at_the_same_time() {
    for_each_backend(|connect| async move {
        const READERS: usize = 5;
        let path = "/rw/shared";
        // Each reader waits at the barrier while holding: the barrier only opens if all of
        // them are inside at once.
        let barrier = Arc::new(Barrier::new(READERS + 1));
        let inside = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for _ in 0..READERS {
            let connect = connect.clone();
            let (barrier, inside, most) = (barrier.clone(), inside.clone(), most.clone());
            tasks.push(tokio::spawn(async move {
                let session = session(&connect).await;
                let guard = session.rw_lock(path).unwrap().read().await.unwrap();
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                barrier.wait().await;
                // Stay inside until the test has looked at the nodes.
                barrier.wait().await;
                inside.fetch_sub(1, Ordering::SeqCst);
                guard.release().await.unwrap();
            }));
        }
        tokio::time::timeout(LIMIT, barrier.wait())
            .await
            .expect("all readers inside at once");
        assert_eq!(most.load(Ordering::SeqCst), READERS);
        let observer = session(&connect).await;
        let nodes = children(&observer, path).await;
        assert_eq!(nodes.len(), READERS, "{nodes:?}");
        assert!(
            nodes.iter().all(|n| curator_name(n, "__READ__")),
            "not Curator's read-node layout: {nodes:?}"
        );
        // A writer cannot join them.
        let writer = observer.rw_lock(path).unwrap();
        assert!(writer.try_write().await.unwrap().is_none());
        barrier.wait().await;
        for task in tasks {
            tokio::time::timeout(LIMIT, task)
                .await
                .expect("bounded")
                .unwrap();
        }
        assert!(children(&observer, path).await.is_empty());
    })
    .await;
}

/// A resource shared by readers and written by writers: counts every overlap the lock should
/// have prevented.
#[derive(Default)]
struct Resource {
    readers: AtomicUsize,
    writer: AtomicBool,
    overlaps: AtomicUsize,
    reads: AtomicUsize,
    writes: AtomicUsize,
    last_write_token: AtomicU64,
    stale_tokens: AtomicUsize,
}

impl Resource {
    fn enter_write(&self, token: u64) {
        if self.writer.swap(true, Ordering::SeqCst) {
            self.overlaps.fetch_add(1, Ordering::SeqCst);
        }
        if self.readers.load(Ordering::SeqCst) > 0 {
            self.overlaps.fetch_add(1, Ordering::SeqCst);
        }
        if self.last_write_token.fetch_max(token, Ordering::SeqCst) >= token {
            self.stale_tokens.fetch_add(1, Ordering::SeqCst);
        }
        self.writes.fetch_add(1, Ordering::SeqCst);
    }

    fn leave_write(&self) {
        self.writer.store(false, Ordering::SeqCst);
    }

    fn enter_read(&self) {
        self.readers.fetch_add(1, Ordering::SeqCst);
        if self.writer.load(Ordering::SeqCst) {
            self.overlaps.fetch_add(1, Ordering::SeqCst);
        }
        self.reads.fetch_add(1, Ordering::SeqCst);
    }

    fn leave_read(&self) {
        self.readers.fetch_sub(1, Ordering::SeqCst);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_writer_excludes_readers_and_writers_under_contention() {
    for_each_backend(|connect| async move {
        const SESSIONS: usize = 6;
        const ROUNDS: usize = 10;
        let path = "/rw/contended";
        let resource = Arc::new(Resource::default());
        let mut tasks = Vec::new();
        for index in 0..SESSIONS {
            let connect = connect.clone();
            let resource = resource.clone();
            tasks.push(tokio::spawn(async move {
                let session = session(&connect).await;
                let lock = session.rw_lock(path).unwrap();
                for round in 0..ROUNDS {
                    if (index + round) % 3 == 0 {
                        let guard = lock.write().await.unwrap();
                        resource.enter_write(guard.fencing_token().get());
                        tokio::time::sleep(Duration::from_millis(2)).await;
                        resource.leave_write();
                        guard.release().await.unwrap();
                    } else {
                        let guard = lock.read().await.unwrap();
                        resource.enter_read();
                        tokio::time::sleep(Duration::from_millis(2)).await;
                        resource.leave_read();
                        guard.release().await.unwrap();
                    }
                }
            }));
        }
        for task in tasks {
            tokio::time::timeout(Duration::from_secs(180), task)
                .await
                .expect("bounded")
                .unwrap();
        }
        let writes = (0..SESSIONS)
            .flat_map(|i| (0..ROUNDS).map(move |r| (i + r) % 3 == 0))
            .filter(|w| *w)
            .count();
        assert_eq!(resource.writes.load(Ordering::SeqCst), writes);
        assert_eq!(
            resource.reads.load(Ordering::SeqCst),
            SESSIONS * ROUNDS - writes
        );
        assert_eq!(
            resource.overlaps.load(Ordering::SeqCst),
            0,
            "a writer overlapped another holder"
        );
        assert_eq!(
            resource.stale_tokens.load(Ordering::SeqCst),
            0,
            "a write fencing token did not increase"
        );
        let observer = session(&connect).await;
        assert!(children(&observer, path).await.is_empty(), "nodes left");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn readers_arriving_after_a_waiting_writer_wait_for_it() {
    for_each_backend(|connect| async move {
        let path = "/rw/no-starvation";
        let first = session(&connect).await;
        let reading = first.rw_lock(path).unwrap().read().await.unwrap();

        // A writer queues behind the reader.
        let writer_session = session(&connect).await;
        let writer = writer_session.rw_lock(path).unwrap();
        let (order_tx, mut order) = tokio::sync::mpsc::unbounded_channel();
        let writer_order = order_tx.clone();
        let (let_go, writer_done) = tokio::sync::oneshot::channel::<()>();
        let writing = tokio::spawn(async move {
            let guard = writer.write().await.unwrap();
            writer_order.send("writer").unwrap();
            // Hold until the test has looked at the readers.
            let _ = writer_done.await;
            guard.release().await.unwrap();
        });
        wait_children(&first, path, 2).await;

        // Readers that arrive now must not jump the waiting writer, although a reader holds.
        let late = session(&connect).await;
        assert!(
            late.rw_lock(path)
                .unwrap()
                .try_read()
                .await
                .unwrap()
                .is_none()
        );
        assert!(
            late.rw_lock(path)
                .unwrap()
                .read_timeout(Duration::from_millis(300))
                .await
                .unwrap()
                .is_none()
        );
        let mut readers = Vec::new();
        let mut reader_sessions = Vec::new();
        for _ in 0..2 {
            let session = session(&connect).await;
            reader_sessions.push(session.clone());
            let order_tx = order_tx.clone();
            readers.push(tokio::spawn(async move {
                let guard = session.rw_lock(path).unwrap().read().await.unwrap();
                order_tx.send("reader").unwrap();
                guard.release().await.unwrap();
            }));
        }
        let queued = wait_children(&first, path, 4).await;
        assert_eq!(count(&queued, "__WRIT__"), 1);
        tokio::time::sleep(KEPT_OUT).await;
        assert!(order.try_recv().is_err(), "someone jumped the queue");

        // The first reader leaves: the writer goes next. The late readers watch the writer,
        // not the reader that left, so its release wakes none of them.
        reading.release().await.unwrap();
        let next = tokio::time::timeout(LIMIT, order.recv())
            .await
            .expect("bounded");
        assert_eq!(next, Some("writer"));
        let woken: u64 = reader_sessions.iter().map(Session::notifications).sum();
        assert_eq!(woken, 0, "a reader was woken by another reader's release");
        tokio::time::sleep(KEPT_OUT).await;
        assert!(
            order.try_recv().is_err(),
            "a reader got in under the writer"
        );
        let_go.send(()).unwrap();
        for _ in 0..2 {
            let next = tokio::time::timeout(LIMIT, order.recv())
                .await
                .expect("bounded");
            assert_eq!(next, Some("reader"));
        }
        writing.await.unwrap();
        for reader in readers {
            tokio::time::timeout(LIMIT, reader)
                .await
                .expect("bounded")
                .unwrap();
        }
        // Each late reader was woken exactly once: by the writer's release.
        let woken: u64 = reader_sessions.iter().map(Session::notifications).sum();
        assert_eq!(woken, 2);
        assert!(children(&first, path).await.is_empty());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn downgrade_keeps_reading_after_the_write_is_released() {
    for_each_backend(|connect| async move {
        let path = "/rw/downgrade";
        let a = session(&connect).await;
        let b = session(&connect).await;
        let lock = a.rw_lock(path).unwrap();
        let write = lock.write().await.unwrap();
        let read = lock
            .try_read()
            .await
            .unwrap()
            .expect("the write holder reads at once");
        let nodes = children(&a, path).await;
        assert_eq!(count(&nodes, "__WRIT__"), 1, "{nodes:?}");
        assert_eq!(count(&nodes, "__READ__"), 1, "{nodes:?}");
        assert!(
            nodes.iter().any(|n| curator_name(n, "__WRIT__")),
            "{nodes:?}"
        );
        assert!(
            nodes.iter().any(|n| curator_name(n, "__READ__")),
            "{nodes:?}"
        );
        let other = b.rw_lock(path).unwrap();
        assert!(
            other.try_read().await.unwrap().is_none(),
            "read under a write"
        );

        write.release().await.unwrap();
        assert_eq!(lock.write_hold_count(), 0);
        assert_eq!(lock.read_hold_count(), 1);
        assert!(read.is_held());
        let nodes = wait_children(&a, path, 1).await;
        assert_eq!(count(&nodes, "__READ__"), 1, "{nodes:?}");
        // Still a reader: others may read, nobody may write.
        assert!(other.try_write().await.unwrap().is_none());
        let shared = other.try_read().await.unwrap().expect("readers share");
        shared.release().await.unwrap();
        read.release().await.unwrap();
        let write = other.try_write().await.unwrap().expect("free again");
        write.release().await.unwrap();
        assert!(children(&a, path).await.is_empty());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_downgraded_read_keeps_out_a_writer_queued_before_it() {
    for_each_backend(|connect| async move {
        let path = "/rw/downgrade-queued";
        let a = session(&connect).await;
        let b = session(&connect).await;
        let lock = a.rw_lock(path).unwrap();
        let write = lock.write().await.unwrap();
        let writer = b.rw_lock(path).unwrap();
        let granted = Arc::new(AtomicBool::new(false));
        let flag = granted.clone();
        let waiting = tokio::spawn(async move {
            let guard = writer.write().await.unwrap();
            flag.store(true, Ordering::SeqCst);
            guard
        });
        wait_children(&a, path, 2).await;
        // Our read node comes after b's write node, yet is granted at once.
        let read = lock.try_read().await.unwrap().expect("downgrade");
        write.release().await.unwrap();
        tokio::time::sleep(KEPT_OUT).await;
        assert!(
            !granted.load(Ordering::SeqCst),
            "a writer got in while a downgraded read was held"
        );
        assert!(read.is_held());
        // Our write node stays, so b's writer still waits on it.
        let nodes = children(&a, path).await;
        assert_eq!(count(&nodes, "__WRIT__"), 2, "{nodes:?}");
        read.release().await.unwrap();
        let theirs = tokio::time::timeout(LIMIT, waiting)
            .await
            .expect("the writer is granted once the read is released")
            .unwrap();
        let nodes = children(&a, path).await;
        assert_eq!(nodes.len(), 1, "our nodes left behind: {nodes:?}");
        theirs.release().await.unwrap();
    })
    .await;
}

/// A downgraded read guard whose node was deleted behind its back, dropped after its handle
/// has moved on (so nothing releases it), still lets its pinned write node go: the writer
/// queued behind that write node gets the lock. Otherwise the released write node would stay
/// until the session ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lost_downgraded_read_dropped_unreleased_lets_its_write_node_go() {
    for_each_backend(|connect| async move {
        let path = "/rw/downgrade-dropped";
        let a = session(&connect).await;
        let b = session(&connect).await;
        let lock = a.rw_lock(path).unwrap();
        let write = lock.write().await.unwrap();
        let writer = b.rw_lock(path).unwrap();
        let waiting = tokio::spawn(async move { writer.write().await.unwrap() });
        wait_children(&a, path, 2).await;
        let read = lock.try_read().await.unwrap().expect("downgrade");
        write.release().await.unwrap();
        b.client()
            .unwrap()
            .delete(read.node(), None)
            .await
            .expect("delete the read node");
        tokio::time::timeout(LIMIT, async {
            while read.is_held() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("is_held() turns false at the deletion");
        // The handle starts afresh (behind the pinned write node, so not granted): the lost
        // guard is no longer its hold, and dropping it releases nothing.
        assert!(lock.try_read().await.unwrap().is_none());
        drop(read);
        let theirs = tokio::time::timeout(LIMIT, waiting)
            .await
            .expect("the writer is granted once the lost read is dropped")
            .unwrap();
        let nodes = children(&a, path).await;
        assert_eq!(nodes.len(), 1, "our nodes left behind: {nodes:?}");
        theirs.release().await.unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn upgrading_a_read_lock_is_refused() {
    for_each_backend(|connect| async move {
        let path = "/rw/upgrade";
        let a = session(&connect).await;
        let lock = a.rw_lock(path).unwrap();
        let read = lock.read().await.unwrap();
        assert!(matches!(lock.write().await, Err(Error::UpgradeRefused)));
        assert!(matches!(lock.try_write().await, Err(Error::UpgradeRefused)));
        assert!(matches!(
            lock.clone().write_timeout(Duration::from_secs(1)).await,
            Err(Error::UpgradeRefused)
        ));
        assert_eq!(
            children(&a, path).await.len(),
            1,
            "an upgrade queued a node"
        );
        read.release().await.unwrap();
        // Not holding the read lock any more: writing is fine, and so is re-entering the write
        // while a downgraded read is held.
        let write = lock.write().await.unwrap();
        let read = lock.read().await.unwrap();
        let again = lock.try_write().await.unwrap().expect("re-entered");
        assert_eq!(lock.write_hold_count(), 2);
        assert_eq!(again.fencing_token(), write.fencing_token());
        again.release().await.unwrap();
        write.release().await.unwrap();
        read.release().await.unwrap();
        assert!(children(&a, path).await.is_empty());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn each_side_is_reentrant_per_handle() {
    for_each_backend(|connect| async move {
        let path = "/rw/reentrant";
        let a = session(&connect).await;
        let b = session(&connect).await;
        let lock = a.rw_lock(path).unwrap();
        let r1 = lock.read().await.unwrap();
        let r2 = lock.clone().read().await.unwrap();
        assert_eq!(lock.read_hold_count(), 2);
        assert_eq!(r1.fencing_token(), r2.fencing_token());
        assert_eq!(children(&a, path).await.len(), 1, "re-entry created a node");
        r1.release().await.unwrap();
        let other = b.rw_lock(path).unwrap();
        assert!(
            other.try_write().await.unwrap().is_none(),
            "freed too early"
        );
        r2.release().await.unwrap();
        let dropped = lock
            .try_write()
            .await
            .unwrap()
            .expect("free after the last read");
        // A dropped guard is released in the background.
        drop(dropped);
        wait_children(&a, path, 0).await;
        let w1 = lock.write().await.unwrap();
        let w2 = lock.write().await.unwrap();
        assert_eq!(children(&a, path).await.len(), 1);
        w1.release().await.unwrap();
        assert!(other.try_read().await.unwrap().is_none(), "freed too early");
        w2.release().await.unwrap();
        assert!(children(&a, path).await.is_empty());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_guard_whose_node_was_deleted_is_lost_and_not_held() {
    for_each_backend(|connect| async move {
        let path = "/rw/deleted";
        let a = session(&connect).await;
        let admin = session(&connect).await;
        let lock = a.rw_lock(path).unwrap();
        for side in ["read", "write"] {
            let guard = match side {
                "read" => lock.read().await.unwrap(),
                _ => lock.write().await.unwrap(),
            };
            let node = guard.node().to_owned();
            let deleting = async {
                tokio::time::sleep(Duration::from_millis(100)).await;
                admin.client().unwrap().delete(&node, None).await.unwrap();
            };
            tokio::time::timeout(LIMIT, async { tokio::join!(guard.lost(), deleting) })
                .await
                .expect("lost() fired on deletion");
            assert!(!guard.is_held(), "{side}");
            assert!(
                matches!(guard.release().await, Err(Error::NotHeld)),
                "{side}"
            );
        }
        // The handle takes the lock afresh afterwards.
        let write = lock.try_write().await.unwrap().expect("free");
        assert!(write.is_held());
        write.release().await.unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn timeouts_and_cancellation_leave_no_node_behind() {
    for_each_backend(|connect| async move {
        let path = "/rw/timeouts";
        let a = session(&connect).await;
        let b = session(&connect).await;
        let write = a.rw_lock(path).unwrap().write().await.unwrap();
        let lock = b.rw_lock(path).unwrap();
        assert!(lock.try_read().await.unwrap().is_none());
        assert!(lock.try_write().await.unwrap().is_none());
        let started = std::time::Instant::now();
        assert!(
            lock.read_timeout(Duration::from_millis(300))
                .await
                .unwrap()
                .is_none()
        );
        assert!(
            lock.write_timeout(Duration::from_millis(300))
                .await
                .unwrap()
                .is_none()
        );
        assert!(started.elapsed() >= Duration::from_millis(600));
        assert_eq!(
            children(&a, path).await.len(),
            1,
            "a timed-out node was left"
        );

        for side in ["read", "write"] {
            let lock = lock.clone();
            let waiting = tokio::spawn(async move {
                match side {
                    "read" => lock.read().await.map(drop),
                    _ => lock.write().await.map(drop),
                }
            });
            wait_children(&a, path, 2).await;
            waiting.abort();
            assert!(waiting.await.unwrap_err().is_cancelled());
            wait_children(&a, path, 1).await;
        }
        // Dropped in the middle of the create itself: whatever was created goes.
        for _ in 0..10 {
            let read = tokio::time::timeout(Duration::from_micros(300), lock.read()).await;
            assert!(read.is_err(), "read under a write");
            let write = tokio::time::timeout(Duration::from_micros(300), lock.write()).await;
            assert!(write.is_err(), "write under a write");
        }
        wait_children(&a, path, 1).await;
        write.release().await.unwrap();
        wait_children(&a, path, 0).await;
        // The handles still work after all that.
        let read = lock.try_read().await.unwrap().expect("free");
        read.release().await.unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_before_anything_is_sent() {
    for_each_backend(|connect| async move {
        let a = session(&connect).await;
        for path in [
            "",
            "rw",
            "/",
            "/rw/",
            "/a//b",
            "/a/./b",
            "/zookeeper",
            "/a\u{7}",
        ] {
            assert!(
                matches!(a.rw_lock(path), Err(Error::InvalidArgument(_))),
                "{path:?} accepted"
            );
        }
        let lock = a.rw_lock("/rw/bad-input").unwrap();
        assert!(matches!(
            lock.read_timeout(Duration::ZERO).await,
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            lock.write_timeout(Duration::ZERO).await,
            Err(Error::InvalidArgument(_))
        ));
        assert!(children(&a, "/rw/bad-input").await.is_empty());
        assert_eq!(lock.path(), "/rw/bad-input");
    })
    .await;
}
