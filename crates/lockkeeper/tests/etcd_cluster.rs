//! The etcd mutex on a real 3-member cluster: a member and then the leader are killed while a
//! lock is held and another session waits; the holder keeps its lease, the waiter is granted
//! after the release with a higher fencing token, and the sessions stay usable.
#![cfg(feature = "etcd")]

mod support_etcd;

use std::time::{Duration, Instant};

use lockkeeper_testkit::{EtcdCluster, etcdctl};
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

/// A release sent through a follower just as the leader dies is forwarded to the dead leader
/// and never answered: etcd answers it only at its own request timeout, after the library's
/// (5 s by default). The release sends it again after a second instead (the delete is
/// conditional on the key's create revision, so a second copy is harmless), and the waiter is
/// granted about one leader election after the kill rather than a request timeout after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_in_flight_at_a_leader_kill_is_sent_again_within_a_second() {
    let cluster = EtcdCluster::start(3);
    let leader = cluster.leader();
    let (follower, other) = ((leader + 1) % 3, (leader + 2) % 3);
    // Each session on one follower only, so the release is a forwarded proposal.
    let a = session_on(&cluster.addr(follower).to_string()).await;
    let b = session_on(&cluster.addr(other).to_string()).await;
    let holding = a.mutex("jobs").expect("mutex").lock().await.expect("lock");
    let waiter = tokio::spawn({
        let mutex = b.mutex("jobs").expect("mutex");
        async move { mutex.lock().await.expect("lock after the release") }
    });
    // The waiter's key is in line before the leader dies.
    let queued = Instant::now();
    while etcdctl(
        &cluster.endpoints(),
        &["get", "--prefix", "--keys-only", "jobs/"],
    )
    .expect("etcdctl get")
    .lines()
    .filter(|line| !line.is_empty())
    .count()
        < 2
    {
        assert!(
            queued.elapsed() < Duration::from_secs(10),
            "the waiter never queued"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    cluster.kill(leader);
    let released = Instant::now();
    holding
        .release()
        .await
        .expect("release through the surviving follower");
    let took = released.elapsed();
    assert!(
        took < Duration::from_secs(3),
        "the release waited {took:?}: a request timeout, not a leader election"
    );
    let granted = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the waiter is granted after the release")
        .expect("task");
    granted.release().await.expect("release");
}

/// With two members of three gone there is no quorum: every write fails for as long as that
/// lasts. A `lock_timeout` returns "not granted" at its timeout and a `try_lock` reports the
/// failure after one attempt, instead of both retrying until the session's lease is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_quorum_timed_and_try_acquisitions_end_on_time() {
    let cluster = EtcdCluster::start(3);
    let survivor = 0;
    // A lease that outlives the test: what ends the acquisitions must be their own bounds.
    let a = lockkeeper::etcd::Session::builder(&cluster.addr(survivor).to_string())
        .ttl(Duration::from_secs(30))
        .connect()
        .await
        .expect("connect");
    let mutex = a.mutex("jobs").expect("mutex");
    cluster.kill(1);
    cluster.kill(2);
    // Past an election timeout: the survivor knows it has no leader.
    tokio::time::sleep(Duration::from_secs(1)).await;

    let started = Instant::now();
    let tried = mutex.try_lock().await;
    let took = started.elapsed();
    match tried {
        Err(err) => assert!(err.is_connection_loss(), "{err}"),
        Ok(got) => panic!("no write can succeed without a quorum: {:?}", got.is_some()),
    }
    // One attempt: bounded by the session's request timeout (5 s), not its lease. (First: a
    // timed acquisition's transaction still in flight holds the session's key name.)
    assert!(took < Duration::from_secs(6), "try_lock took {took:?}");

    // Not "someone else has it" (`Ok(None)`): nothing answered, which is an error naming
    // that, by the deadline plus the second a withdrawal may take (and a loose margin).
    let started = Instant::now();
    let timed = mutex.lock_timeout(Duration::from_millis(500)).await;
    let took = started.elapsed();
    match timed {
        Err(err) => assert!(
            err.is_connection_loss() && err.to_string().contains("unreachable"),
            "{err}"
        ),
        Ok(got) => panic!(
            "no write can succeed without a quorum, and no answer is not a busy lock: {:?}",
            got.is_some()
        ),
    }
    assert!(
        took < Duration::from_secs(4),
        "lock_timeout(500 ms) took {took:?}"
    );
}
