//! The [`Lock`] and [`Guard`] traits over every lock of every backend, leader elections
//! included. One test body, given
//! trait objects only, holds each lock, sees a second owner kept out (try and timeout), sees
//! the guard lost at a maximum hold time set through the trait, and the lock free after a
//! release with a higher fencing token; and a [`MultiLock`] holds locks of ZooKeeper, Redis and
//! etcd together. The per-backend tests cover each lock's own behaviour; these cover that the
//! traits forward to it, for every lock, so the command line and the fault suite can take any.

mod support;
#[cfg(feature = "etcd")]
mod support_etcd;

use std::sync::Arc;
use std::time::Duration;

use lockkeeper::redis::Redis;
use lockkeeper::redis::redlock::Redlock;
use lockkeeper::{Error, Lock, LockOptions, MultiLock};
use lockkeeper_testkit::{RedisNode, RedisServer, TestServer};
use support::{for_each_backend, session};
use tokio::time::timeout;

/// Long enough for any grant on a loaded machine; the tests wait on conditions, not on it.
const PATIENCE: Duration = Duration::from_secs(30);

/// Holds `ours`, keeps `theirs` out, hands over on release, and loses a hold at a maximum hold
/// time set through [`Lock::with_max_hold`]. `ours` and `theirs` are two owners of one lock.
/// `tokens`: whether the lock hands out fencing tokens (all but Redlock).
async fn one_lock(kind: &str, ours: &dyn Lock, theirs: &dyn Lock, tokens: bool) {
    assert_eq!(
        ours.name(),
        theirs.name(),
        "{kind}: two handles on one lock"
    );
    let guard = timeout(PATIENCE, ours.lock())
        .await
        .unwrap_or_else(|_| panic!("{kind}: lock in time"))
        .unwrap_or_else(|e| panic!("{kind}: lock: {e}"));
    assert!(guard.is_held(), "{kind}: held once granted");
    assert!(
        guard.valid_until().is_some(),
        "{kind}: a deadline while held"
    );
    assert_eq!(
        guard.fencing_token().is_some(),
        tokens,
        "{kind}: fencing token"
    );
    assert!(
        !guard.held_as().is_empty(),
        "{kind}: says what records the hold"
    );

    assert!(
        theirs.try_lock().await.expect("try").is_none(),
        "{kind}: a second owner's try is kept out"
    );
    assert!(
        theirs
            .lock_timeout(Duration::from_millis(200))
            .await
            .expect("timed")
            .is_none(),
        "{kind}: a second owner's timed wait is kept out"
    );
    assert!(
        matches!(
            theirs.lock_timeout(Duration::ZERO).await,
            Err(Error::InvalidArgument(_))
        ),
        "{kind}: a zero timeout is refused"
    );

    let first = guard.fencing_token();
    guard.release().await.expect("release");
    let next = timeout(PATIENCE, theirs.lock_timeout(PATIENCE))
        .await
        .expect("in time")
        .expect("lock after the release")
        .unwrap_or_else(|| panic!("{kind}: free after the release"));
    assert!(
        next.fencing_token() > first || !tokens,
        "{kind}: a higher token"
    );
    next.release().await.expect("release");

    // A maximum hold time set through the trait ends the hold: lost() resolves, is_held()
    // turns false, and the other owner gets the lock.
    let bounded = ours
        .with_options(LockOptions::new().max_hold(Duration::from_millis(500)))
        .expect("max hold");
    assert_eq!(bounded.name(), ours.name(), "{kind}: the same lock");
    let guard = bounded.lock().await.expect("lock with a maximum hold");
    timeout(PATIENCE, guard.lost())
        .await
        .unwrap_or_else(|_| panic!("{kind}: lost at the maximum hold time"));
    assert!(
        !guard.is_held(),
        "{kind}: not held past the maximum hold time"
    );
    let after = timeout(PATIENCE, theirs.lock())
        .await
        .expect("in time")
        .expect("the other owner gets it");
    after.release().await.expect("release");
    assert!(
        matches!(guard.release().await, Err(Error::NotHeld)),
        "{kind}: releasing a hold given up is NotHeld"
    );
    assert!(
        matches!(
            ours.with_options(LockOptions::new().max_hold(Duration::ZERO)),
            Err(Error::InvalidArgument(_))
        ),
        "{kind}: a zero maximum hold time is refused"
    );
    // No lock takes both a Redis lease and a ZooKeeper suspension policy: an option a lock
    // has no use for is refused by name, never ignored.
    let foreign = LockOptions::new()
        .lease(Duration::from_secs(10))
        .keep_through_suspension();
    match ours.with_options(foreign) {
        Err(Error::InvalidArgument(why)) => assert!(
            why.contains("is not an option of") && why.contains(ours.name()),
            "{kind}: {why}"
        ),
        other => panic!(
            "{kind}: a foreign option accepted: {:?}",
            other.map(|l| l.name().to_owned())
        ),
    }
}

#[tokio::test]
async fn every_zookeeper_lock() {
    for_each_backend(|connect| async move {
        let (a, b) = (session(&connect).await, session(&connect).await);
        one_lock(
            "mutex",
            &a.mutex("/t/mutex").unwrap(),
            &b.mutex("/t/mutex").unwrap(),
            true,
        )
        .await;
        one_lock(
            "simple lock",
            &a.simple_lock("/t/simple").unwrap(),
            &b.simple_lock("/t/simple").unwrap(),
            true,
        )
        .await;
        let (rw_a, rw_b) = (a.rw_lock("/t/rw").unwrap(), b.rw_lock("/t/rw").unwrap());
        one_lock("write side", &rw_a.write_lock(), &rw_b.write_lock(), true).await;
        // A writer keeps a reader out as well.
        one_lock(
            "write side over a reader",
            &rw_a.write_lock(),
            &rw_b.read_lock(),
            true,
        )
        .await;
        one_lock(
            "semaphore of 1",
            &a.semaphore("/t/semaphore", 1).unwrap(),
            &b.semaphore("/t/semaphore", 1).unwrap(),
            true,
        )
        .await;
        one_lock(
            "leader latch",
            &a.leader_latch("/t/leader", "a").unwrap(),
            &b.leader_latch("/t/leader", "b").unwrap(),
            true,
        )
        .await;
    })
    .await;
}

#[tokio::test]
async fn every_redis_lock() {
    let server = RedisServer::start();
    let connect = || async { Redis::connect(&server.url()).await.expect("connect") };
    let (a, b) = (connect().await, connect().await);
    one_lock(
        "lease lock",
        &a.lease_lock("t-lease"),
        &b.lease_lock("t-lease"),
        true,
    )
    .await;
    one_lock(
        "reentrant lock",
        &a.reentrant_lock("t-reentrant"),
        &b.reentrant_lock("t-reentrant"),
        true,
    )
    .await;
    one_lock(
        "local reentrant lock",
        &a.local_reentrant_lock("t-local"),
        &b.local_reentrant_lock("t-local"),
        true,
    )
    .await;
    let (rw_a, rw_b) = (a.rw_lock("t-rw"), b.rw_lock("t-rw"));
    one_lock("write side", &rw_a.write_lock(), &rw_b.write_lock(), true).await;
    one_lock(
        "write side over a reader",
        &rw_a.write_lock(),
        &rw_b.read_lock(),
        true,
    )
    .await;
    one_lock(
        "semaphore of 1",
        &a.semaphore("t-semaphore", 1),
        &b.semaphore("t-semaphore", 1),
        true,
    )
    .await;

    let masters: Vec<RedisNode> = (0..3).map(|_| RedisNode::start()).collect();
    let urls: Vec<String> = masters.iter().map(RedisNode::url).collect();
    let (red_a, red_b) = (
        Redlock::new(&urls).expect("redlock"),
        Redlock::new(&urls).expect("redlock"),
    );
    one_lock(
        "redlock",
        &red_a.lease_lock("t-red"),
        &red_b.lease_lock("t-red"),
        false,
    )
    .await;
}

#[cfg(feature = "etcd")]
#[tokio::test]
async fn every_etcd_lock() {
    let etcd = lockkeeper_testkit::Etcd::start();
    let (a, b) = (
        support_etcd::session(&etcd).await,
        support_etcd::session(&etcd).await,
    );
    one_lock(
        "mutex",
        &a.mutex("t-mutex").unwrap(),
        &b.mutex("t-mutex").unwrap(),
        true,
    )
    .await;
    let (rw_a, rw_b) = (a.rw_lock("t-rw").unwrap(), b.rw_lock("t-rw").unwrap());
    one_lock("write side", &rw_a.write_lock(), &rw_b.write_lock(), true).await;
    one_lock(
        "write side over a reader",
        &rw_a.write_lock(),
        &rw_b.read_lock(),
        true,
    )
    .await;
    one_lock(
        "semaphore of 1",
        &a.semaphore("t-semaphore", 1).unwrap(),
        &b.semaphore("t-semaphore", 1).unwrap(),
        true,
    )
    .await;
    one_lock(
        "election",
        &a.election("t-election").unwrap().candidacy("a"),
        &b.election("t-election").unwrap().candidacy("b"),
        true,
    )
    .await;
}

/// One multi-lock over a ZooKeeper mutex and a Redis lease lock (and an etcd mutex, with the
/// feature): all or nothing across backends, one token per lock, released together.
#[tokio::test]
async fn a_multi_lock_across_backends() {
    let keeper = lockkeeper_testkit::Keeper::start();
    let redis_server = RedisServer::start();
    let zk = session(&keeper.connect_string()).await;
    let redis = Redis::connect(&redis_server.url()).await.expect("connect");
    #[allow(unused_mut)]
    let mut locks: Vec<Arc<dyn Lock>> = vec![
        Arc::new(zk.mutex("/accounts/alice").unwrap()),
        Arc::new(redis.lease_lock("accounts-bob")),
    ];
    #[cfg(feature = "etcd")]
    let etcd = lockkeeper_testkit::Etcd::start();
    #[cfg(feature = "etcd")]
    let etcd_session = support_etcd::session(&etcd).await;
    #[cfg(feature = "etcd")]
    locks.push(Arc::new(etcd_session.mutex("accounts-carol").unwrap()));
    let count = locks.len();
    let multi = MultiLock::new(locks).expect("multi-lock");

    // Another owner of the Redis lock keeps the whole set out, and nothing else stays taken.
    let other = Redis::connect(&redis_server.url()).await.expect("connect");
    let blocker = other
        .lease_lock("accounts-bob")
        .lock()
        .await
        .expect("blocker");
    assert!(
        multi.try_lock().await.expect("try").is_none(),
        "all or nothing"
    );
    let zk_other = session(&keeper.connect_string()).await;
    let alice = zk_other.mutex("/accounts/alice").unwrap();
    alice
        .try_lock()
        .await
        .expect("try")
        .expect("alice was given back")
        .release()
        .await
        .unwrap();
    blocker.release().await.expect("release");

    let guard = multi.lock().await.expect("every lock");
    assert!(guard.is_held());
    assert_eq!(guard.fencing_tokens().len(), count, "one token per lock");
    assert!(
        alice.try_lock().await.expect("try").is_none(),
        "alice held by the set"
    );
    guard.release().await.expect("release");
    alice
        .try_lock()
        .await
        .expect("try")
        .expect("alice free")
        .release()
        .await
        .unwrap();
}
