//! `is_held()` and `is_leader()` are live: they turn false when the node is deleted behind the
//! holder's back, with nobody awaiting `lost()`, on every ZooKeeper guard (mutex, read-write
//! lock, simple lock, semaphore lease, leader latch, a queue item taken at least once), and two
//! participants of an election never both keep answering `is_leader()`.
//!
//! Each body deletes the held node from another session (as an operator or a forced revocation
//! would) and then polls the guard, as a Curator user polls `hasLeadership()`. The answer must
//! turn false within a generous bound (the notification's way from the server); nothing here
//! depends on the machine's speed but that bound. Bodies run on Keeper and Apache ZooKeeper.

mod support;

use std::time::Duration;

use lockkeeper::LockOptions;
use lockkeeper::zk::{ConnectionState, Session};
use support::{for_each_backend, session};
use tokio::time::{Instant, timeout};

/// How long a deletion's notification may take to reach the holder on a loaded machine.
const NOTICE: Duration = Duration::from_secs(10);

/// Polls `held` until it answers false; panics naming `what` if it still says true after
/// [`NOTICE`]. Never awaits anything of the guard's.
async fn turns_false(what: &str, held: impl Fn() -> bool) {
    let deadline = Instant::now() + NOTICE;
    while held() {
        assert!(
            Instant::now() < deadline,
            "{what}: still true {NOTICE:?} after its node was deleted"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Deletes `node` from `by`'s session.
async fn delete(by: &Session, node: &str) {
    by.client()
        .expect("client")
        .delete(node, None)
        .await
        .unwrap_or_else(|err| panic!("delete {node}: {err}"));
}

#[tokio::test]
async fn a_deleted_lock_node_ends_is_held_with_nobody_awaiting_lost() {
    for_each_backend(|connect| async move {
        let holder = session(&connect).await;
        let operator = session(&connect).await;

        let guard = holder
            .mutex("/live/mutex")
            .unwrap()
            .lock()
            .await
            .expect("lock");
        assert!(guard.is_held());
        delete(&operator, guard.node()).await;
        turns_false("mutex is_held()", || guard.is_held()).await;
        assert!(
            guard.valid_until().is_none(),
            "valid_until() of a lost lock"
        );
        timeout(NOTICE, guard.lost())
            .await
            .expect("lost() resolves");
        assert!(matches!(
            guard.release().await,
            Err(lockkeeper::Error::NotHeld)
        ));

        let rw = holder.rw_lock("/live/rw").unwrap();
        let write = rw.write().await.expect("write lock");
        delete(&operator, write.node()).await;
        turns_false("write lock is_held()", || write.is_held()).await;
        drop(write);
        let read = rw.read().await.expect("read lock");
        delete(&operator, read.node()).await;
        turns_false("read lock is_held()", || read.is_held()).await;
        drop(read);

        let simple = holder.simple_lock("/live/simple").unwrap();
        let guard = simple.lock().await.expect("simple lock");
        delete(&operator, guard.node()).await;
        turns_false("simple lock is_held()", || guard.is_held()).await;
    })
    .await;
}

/// A simple lock's node has the same name for every holder: a node deleted and created again
/// by the next holder is not ours, although a node of that name exists.
#[tokio::test]
async fn a_simple_lock_node_taken_over_by_the_next_holder_is_not_ours() {
    for_each_backend(|connect| async move {
        let holder = session(&connect).await;
        let next = session(&connect).await;
        let guard = holder
            .simple_lock("/live/taken-over")
            .unwrap()
            .lock()
            .await
            .expect("lock");
        delete(&next, guard.node()).await;
        let theirs = next
            .simple_lock("/live/taken-over")
            .unwrap()
            .lock()
            .await
            .expect("the next holder's lock");
        assert_eq!(theirs.node(), guard.node());
        turns_false("first holder's is_held()", || guard.is_held()).await;
        assert!(theirs.is_held());
        theirs.release().await.expect("release");
    })
    .await;
}

#[tokio::test]
async fn a_deleted_semaphore_lease_ends_is_held() {
    for_each_backend(|connect| async move {
        let holder = session(&connect).await;
        let operator = session(&connect).await;
        let semaphore = holder.semaphore("/live/semaphore", 2).unwrap();
        let lease = semaphore.acquire(1).await.expect("lease");
        assert!(lease.is_held());
        let leases = support::children(&operator, "/live/semaphore/leases").await;
        assert_eq!(leases.len(), 1, "{leases:?}");
        delete(&operator, &format!("/live/semaphore/leases/{}", leases[0])).await;
        turns_false("semaphore lease is_held()", || lease.is_held()).await;
    })
    .await;
}

/// The fault this pins: the leader's node is deleted, the next participant is granted, and
/// both would answer `is_leader()` with true. The deposed leader must turn false on its own.
#[tokio::test]
async fn a_deposed_leader_stops_answering_is_leader() {
    for_each_backend(|connect| async move {
        for tolerant in [false, true] {
            let path = if tolerant {
                "/live/election-tolerant"
            } else {
                "/live/election"
            };
            let first = session(&connect).await;
            let second = session(&connect).await;
            let operator = session(&connect).await;
            let latch = |s: &Session, id: &str| {
                let latch = s.leader_latch(path, id).unwrap();
                if tolerant {
                    latch
                        .with_options(LockOptions::new().keep_through_suspension())
                        .unwrap()
                } else {
                    latch
                }
            };
            let leading = latch(&first, "first").lead().await.expect("first leads");
            let next = tokio::spawn({
                let latch = latch(&second, "second");
                async move { latch.lead().await.expect("second leads") }
            });
            support::wait_children(&operator, path, 2).await;
            assert!(leading.is_leader());

            delete(&operator, leading.node()).await;
            let successor = timeout(NOTICE, next)
                .await
                .expect("the next participant is granted")
                .expect("task");
            assert!(successor.is_leader());
            turns_false("deposed leader's is_leader()", || leading.is_leader()).await;
            assert!(successor.is_leader(), "the successor still leads");
            successor.resign().await.expect("resign");
        }
    })
    .await;
}

/// A granted latch node found rewritten on the read-back is not led on, and is deleted before
/// the participant queues again: it would otherwise sit ahead of the participant's new node
/// until the session ends.
#[tokio::test]
async fn a_latch_node_rewritten_before_the_grant_is_not_left_behind() {
    for_each_backend(|connect| async move {
        let path = "/live/rewritten";
        let leader_session = session(&connect).await;
        let waiter = session(&connect).await;
        let operator = session(&connect).await;
        let leading = leader_session
            .leader_latch(path, "leader")
            .unwrap()
            .lead()
            .await
            .expect("leads");
        let next = tokio::spawn({
            let latch = waiter.leader_latch(path, "waiter").unwrap();
            async move { latch.lead().await.expect("waiter leads") }
        });
        let queued = support::wait_children(&operator, path, 2).await;
        let waiting = queued
            .iter()
            .map(|name| format!("{path}/{name}"))
            .find(|node| node != leading.node())
            .expect("the waiter's node");
        operator
            .client()
            .unwrap()
            .set_data(&waiting, b"someone else", None)
            .await
            .expect("rewrite the waiter's node");

        leading.resign().await.expect("resign");
        let successor = timeout(NOTICE, next)
            .await
            .expect("the waiter leads on a node of its own, not behind its orphan")
            .expect("task");
        assert_ne!(successor.node(), waiting, "led on the rewritten node");
        let left = support::children(&operator, path).await;
        assert_eq!(left.len(), 1, "nodes left in the election: {left:?}");
        successor.resign().await.expect("resign");
    })
    .await;
}

/// A node deleted and created again under the same name while the holder was cut off: after
/// the same session reconnects, the node of that name is someone else's (another czxid), so
/// the hold is over although a node is there.
#[tokio::test]
async fn a_node_replaced_while_the_holder_was_away_is_not_held_after_the_reconnect() {
    for_each_backend(|connect| async move {
        if support::is_ensemble(&connect) {
            eprintln!("skipped on an ensemble: the proxy cuts a single server");
            return;
        }
        let path = "/live/replaced";
        let partition = support::Partition::start(&connect).await;
        let holder = Session::builder(&partition.connect_string())
            .session_timeout(Duration::from_secs(20))
            .connect()
            .await
            .expect("connect through the proxy");
        let first_id = holder.session_id();
        let operator = session(&connect).await;
        let guard = holder
            .simple_lock(path)
            .unwrap()
            .lock()
            .await
            .expect("lock");

        partition.cut();
        support::wait_state(&holder, ConnectionState::Suspended).await;
        delete(&operator, guard.node()).await;
        let theirs = operator
            .simple_lock(path)
            .unwrap()
            .lock()
            .await
            .expect("lock");
        assert_eq!(theirs.node(), guard.node());
        partition.heal();
        support::wait_state(&holder, ConnectionState::Reconnected).await;
        assert_eq!(holder.session_id(), first_id, "the same session came back");

        turns_false("is_held() after the reconnect", || guard.is_held()).await;
        assert!(theirs.is_held());
        theirs.release().await.expect("release");
    })
    .await;
}

/// An item taken at least once claims it with a lock node: deleting that node (another
/// consumer may then take the item) turns the item's `is_held()` false on its own.
#[tokio::test]
async fn a_deleted_queue_item_lock_ends_is_held() {
    for_each_backend(|connect| async move {
        let consumer = session(&connect).await;
        let operator = session(&connect).await;
        let queue = consumer.distributed_queue("/live/queue").unwrap();
        queue.put_all(&[b"job"]).await.expect("put");
        let taken = queue
            .take(lockkeeper::zk::Delivery::AtLeastOnce)
            .await
            .expect("take");
        assert!(taken.is_held());
        let locks = support::children(&operator, "/live/queue-locks").await;
        assert_eq!(locks.len(), 1, "{locks:?}");
        delete(&operator, &format!("/live/queue-locks/{}", locks[0])).await;
        turns_false("queue item is_held()", || taken.is_held()).await;
        timeout(NOTICE, taken.lost())
            .await
            .expect("lost() resolves");
    })
    .await;
}

/// Each re-entry of a hold that was lost says so when released: the deletion ended every
/// count, not only the last, so no `release()` of it returns `Ok`.
#[tokio::test]
async fn every_re_entry_of_a_deleted_hold_releases_as_not_held() {
    for_each_backend(|connect| async move {
        let holder = session(&connect).await;
        let operator = session(&connect).await;
        let mutex = holder.mutex("/live/re-entered").unwrap();
        let outer = mutex.lock().await.expect("lock");
        let inner = mutex.lock().await.expect("re-enter");
        assert_eq!(mutex.hold_count(), 2);
        delete(&operator, outer.node()).await;
        turns_false("re-entered mutex is_held()", || inner.is_held()).await;
        let released = inner.release().await;
        assert!(
            matches!(released, Err(lockkeeper::Error::NotHeld)),
            "releasing a re-entry after the deletion: {released:?}"
        );
        let released = outer.release().await;
        assert!(
            matches!(released, Err(lockkeeper::Error::NotHeld)),
            "releasing the last count after the deletion: {released:?}"
        );
    })
    .await;
}

/// What a handle does with a hold it knows is gone, and with one that may come back: a mutex
/// whose node was deleted takes the lock afresh on the next `lock()` (a new node, a higher
/// token); one whose session is only suspended re-enters its hold once the same session is
/// back, instead of queueing a second node behind its own.
#[tokio::test]
async fn a_handle_starts_afresh_after_a_deletion_and_re_enters_after_a_suspension() {
    for_each_backend(|connect| async move {
        if support::is_ensemble(&connect) {
            eprintln!("skipped on an ensemble: the proxy cuts a single server");
            return;
        }
        let operator = session(&connect).await;
        let holder = session(&connect).await;
        let mutex = holder.mutex("/live/afresh").unwrap();
        let first = mutex.lock().await.expect("lock");
        delete(&operator, first.node()).await;
        turns_false("is_held() after the deletion", || first.is_held()).await;
        let again = timeout(NOTICE, mutex.lock())
            .await
            .expect("a handle whose node was deleted takes the lock afresh")
            .expect("lock again");
        assert!(again.fencing_token() > first.fencing_token());
        assert_eq!(mutex.hold_count(), 1);
        drop(first);
        again.release().await.expect("release");

        let partition = support::Partition::start(&connect).await;
        let through = Session::builder(&partition.connect_string())
            .session_timeout(Duration::from_secs(20))
            .connect()
            .await
            .expect("connect through the proxy");
        let mutex = through.mutex("/live/re-enter").unwrap();
        let held = mutex.lock().await.expect("lock");
        partition.cut();
        support::wait_state(&through, ConnectionState::Suspended).await;
        let reentry = tokio::spawn({
            let mutex = mutex.clone();
            async move { mutex.lock().await }
        });
        partition.heal();
        let reentered = timeout(NOTICE, reentry)
            .await
            .expect("re-entered once the same session was back, not queued behind itself")
            .expect("task")
            .expect("lock");
        assert_eq!(reentered.fencing_token(), held.fencing_token());
        assert_eq!(mutex.hold_count(), 2);
        assert_eq!(
            support::children(&operator, "/live/re-enter").await.len(),
            1
        );
        reentered.release().await.expect("release the re-entry");
        held.release().await.expect("release");
    })
    .await;
}

/// A release ends the hold before its delete is sent: a view of the term (`LeaderTerm`, which
/// the leader's work task keeps) says not leading the moment `resign()` returns, without
/// waiting for the deletion's notification.
#[tokio::test]
async fn a_resigned_term_is_over_when_resign_returns() {
    for_each_backend(|connect| async move {
        let s = session(&connect).await;
        for round in 0..20 {
            let leadership = s
                .leader_latch("/live/resigned", "leader")
                .unwrap()
                .lead()
                .await
                .expect("lead");
            let term = leadership.term();
            assert!(term.is_leader());
            leadership.resign().await.expect("resign");
            assert!(
                !term.is_leader(),
                "round {round}: still leading after resign()"
            );
            assert!(term.valid_until().is_none(), "round {round}: valid_until()");
        }
    })
    .await;
}
