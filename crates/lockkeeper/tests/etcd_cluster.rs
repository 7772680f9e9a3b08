//! The etcd mutex on a real 3-member cluster: a member and then the leader are killed while a
//! lock is held and another session waits; the holder keeps its lease, the waiter is granted
//! after the release with a higher fencing token, and the sessions stay usable.
#![cfg(feature = "etcd")]

mod support_etcd;

use std::time::Duration;

use lockkeeper_testkit::EtcdCluster;
use support_etcd::session_on;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn member_and_leader_kills_keep_locks_and_tokens_increasing() {
    let cluster = EtcdCluster::start(3);
    let a = session_on(&cluster.endpoints().join(",")).await;
    let b = session_on(&cluster.endpoints().join(",")).await;
    let holding = a
        .mutex("orders")
        .expect("mutex")
        .lock()
        .await
        .expect("lock");
    let waiter = tokio::spawn({
        let mutex = b.mutex("orders").expect("mutex");
        async move { mutex.lock().await.expect("lock after the failures") }
    });

    // A follower dies and comes back, then the leader dies: a quorum of two is always up.
    let leader = cluster.leader();
    let follower = (leader + 1) % cluster.size();
    cluster.kill(follower);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        a.is_alive() && holding.is_held(),
        "a follower's death changes nothing"
    );
    cluster.restart(follower);
    let killed_leader = cluster.kill_leader();
    assert_eq!(killed_leader, leader);
    // Longer than a session TTL: the keep-alives must find the surviving members.
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert!(a.is_alive(), "the holder's lease survived the failures");
    assert!(b.is_alive());
    assert!(holding.is_held());
    assert!(!waiter.is_finished(), "still held: the waiter waits");

    let token = holding.fencing_token();
    holding
        .release()
        .await
        .expect("release on the remaining members");
    let granted = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the waiter is granted after the release")
        .expect("task");
    assert!(
        granted.fencing_token() > token,
        "tokens increase across a leader change"
    );
    let granted_token = granted.fencing_token();
    granted.release().await.expect("release");

    // The killed members come back and the lock goes on working.
    cluster.restart(killed_leader);
    let again = a
        .mutex("orders")
        .expect("mutex")
        .lock()
        .await
        .expect("lock");
    assert!(again.fencing_token() > granted_token);
    again.release().await.expect("release");
}
