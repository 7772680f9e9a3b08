//! `Redis::inspect` and `Redis::revoke` against a real redis-server: for every lock kind
//! (lease, reentrant, read-write, semaphore), the holders with their owner, fencing token and
//! remaining lease, a waiter in line, and the kind found; a forced revocation of each kind's
//! holder takes the hold away (the guard sees the loss, the waiter gets the lock) and leaves a
//! holder that changed alone. Every wait is for a condition, with a generous bound.

mod support_redis;

use std::time::Duration;

use lockkeeper::Error;
use lockkeeper::LockOptions;
use lockkeeper::redis::{Inspection, Kind, LockKind, Redis, Revoked, State};
use lockkeeper_testkit::RedisServer;
use support_redis::connect;

/// Bound on any condition a test waits for.
const LIMIT: Duration = Duration::from_secs(30);

/// Waits (bounded) until the inspection of `name` satisfies `cond`; that inspection.
async fn inspect_until(
    redis: &Redis,
    name: &str,
    what: &str,
    cond: impl Fn(&Inspection) -> bool,
) -> Inspection {
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        let inspection = redis.inspect(name).await.expect("inspect");
        if cond(&inspection) {
            return inspection;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {LIMIT:?} waiting for: {what}; last seen: {inspection}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn waiting(inspection: &Inspection) -> usize {
    inspection.waiters().count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_under_a_name_is_an_empty_inspection_and_bad_names_are_refused() {
    let server = RedisServer::start();
    let redis = connect(&server).await;
    let inspection = redis.inspect("nobody").await.expect("inspect");
    assert!(inspection.is_empty(), "{inspection}");
    assert!(inspection.kinds().is_empty());
    assert!(inspection.to_string().contains("not held"), "{inspection}");
    for bad in ["", "a}b", "{x}"] {
        assert!(
            matches!(redis.inspect(bad).await, Err(Error::InvalidArgument(_))),
            "{bad:?} accepted"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_lock_holder_and_waiter() {
    let server = RedisServer::start();
    let redis = connect(&server).await;
    let guard = redis.lease_lock("lease").lock().await.expect("lock");
    let waiter = {
        let lock = connect(&server).await.lease_lock("lease");
        tokio::spawn(async move { lock.lock().await })
    };
    let seen = inspect_until(&redis, "lease", "the waiter in line", |i| waiting(i) == 1).await;
    assert_eq!(seen.kinds(), [LockKind::Lease]);
    let holder = seen.holders().next().expect("a holder");
    assert_eq!(holder.kind, Kind::Lease);
    assert_eq!(holder.owner, guard.token());
    assert_eq!(holder.key, "lockkeeper:lease:{lease}");
    assert_eq!(holder.fencing_token, Some(guard.fencing_token()));
    assert!(
        holder.ttl_left.is_some_and(|t| t > Duration::ZERO),
        "{seen}"
    );
    let waits = seen.waiters().next().expect("a waiter");
    assert_eq!(waits.kind, Kind::Lease);
    assert_eq!(waits.key, "lockkeeper:lease:{lease}:line");
    assert!(waits.waited.is_some() && waits.ttl_left.is_some(), "{seen}");
    assert!(
        seen.to_string().contains("1 holding, 1 waiting (lease)"),
        "{seen}"
    );

    // Forced: the guard loses it and the waiter, whose id was shown, gets it.
    let revoked = redis
        .revoke("lease", holder, Duration::from_millis(100))
        .await
        .expect("revoke");
    assert_eq!(revoked, Revoked::Deleted);
    let next = tokio::time::timeout(LIMIT, waiter)
        .await
        .expect("the waiter is granted")
        .expect("join")
        .expect("lock");
    assert_eq!(next.token(), waits.owner, "the waiter shown in line");
    assert!(next.fencing_token() > guard.fencing_token());
    tokio::time::timeout(LIMIT, guard.lost())
        .await
        .expect("the revoked holder learns it lost the lock");
    // The old holder is gone: revoking it again changes nothing.
    assert_eq!(
        redis
            .revoke("lease", holder, Duration::from_millis(10))
            .await
            .expect("revoke"),
        Revoked::AlreadyGone
    );
    let now = redis.inspect("lease").await.expect("inspect");
    assert_eq!(
        now.holders().next().map(|h| h.owner.as_str()),
        Some(next.token())
    );
    next.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reentrant_lock_owner_count_and_waiter() {
    let server = RedisServer::start();
    let redis = connect(&server).await;
    let lock = redis.reentrant_lock("re");
    let outer = lock.lock().await.expect("lock");
    let inner = lock.lock().await.expect("re-enter");
    let other = connect(&server).await;
    let waiter = {
        let lock = other.reentrant_lock("re");
        tokio::spawn(async move { lock.lock().await })
    };
    let seen = inspect_until(&redis, "re", "the other owner in line", |i| waiting(i) == 1).await;
    assert_eq!(seen.kinds(), [LockKind::Reentrant]);
    let holder = seen.holders().next().expect("a holder");
    assert_eq!(holder.kind, Kind::Reentrant);
    assert_eq!(holder.owner, redis.owner_id());
    assert_eq!(holder.count, 2);
    assert_eq!(holder.fencing_token, Some(outer.fencing_token()));
    assert_eq!(seen.waiters().next().map(|w| w.kind), Some(Kind::Reentrant));

    let revoked = redis
        .revoke("re", holder, Duration::from_millis(100))
        .await
        .expect("revoke");
    assert_eq!(revoked, Revoked::Deleted);
    let next = tokio::time::timeout(LIMIT, waiter)
        .await
        .expect("the waiter is granted")
        .expect("join")
        .expect("lock");
    let now = redis.inspect("re").await.expect("inspect");
    assert_eq!(
        now.holders().next().map(|h| h.owner.as_str()),
        Some(other.owner_id())
    );
    drop(inner);
    drop(outer);
    next.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rwlock_readers_writer_and_waiting_writer() {
    let server = RedisServer::start();
    let redis = connect(&server).await;
    let lock = redis
        .rw_lock("rw")
        .with_options(LockOptions::new().watchdog(Duration::from_secs(3)))
        .unwrap();
    let first = lock.read().await.expect("read");
    let second = lock.read().await.expect("read");
    let writer = {
        let lock = connect(&server).await.rw_lock("rw");
        tokio::spawn(async move { lock.write().await })
    };
    let seen = inspect_until(&redis, "rw", "the writer waits", |i| waiting(i) == 1).await;
    assert_eq!(seen.kinds(), [LockKind::RwLock]);
    let readers: Vec<_> = seen.holders().collect();
    assert_eq!(readers.len(), 2, "{seen}");
    for reader in &readers {
        assert_eq!(reader.kind, Kind::Read);
        assert_eq!(reader.fencing_token, None, "a reader's token is not kept");
        assert_eq!(reader.latest_token, Some(second.fencing_token()));
        assert!(
            reader.ttl_left.is_some_and(|t| t > Duration::ZERO),
            "{seen}"
        );
    }
    let waits = seen.waiters().next().expect("the waiting writer");
    assert_eq!((waits.kind, waits.state), (Kind::Write, State::Waits));
    assert_eq!(waits.key, "lockkeeper:rw:{rw}:intent");
    assert!(
        matches!(
            redis.revoke("rw", waits, Duration::ZERO).await,
            Err(Error::InvalidArgument(_))
        ),
        "a waiter holds nothing to revoke"
    );

    // Both readers revoked: their guards see the loss, the writer gets the lock.
    for reader in &readers {
        let revoked = redis
            .revoke("rw", reader, Duration::from_millis(50))
            .await
            .expect("revoke");
        assert_eq!(revoked, Revoked::Deleted);
    }
    tokio::time::timeout(LIMIT, first.lost())
        .await
        .expect("the first reader sees the loss");
    tokio::time::timeout(LIMIT, second.lost())
        .await
        .expect("the second reader sees the loss");
    let write = tokio::time::timeout(LIMIT, writer)
        .await
        .expect("the writer is granted")
        .expect("join")
        .expect("write");
    let seen = redis.inspect("rw").await.expect("inspect");
    let holder = seen.holders().next().expect("the writer holds");
    assert_eq!(holder.kind, Kind::Write);
    assert_eq!(holder.fencing_token, Some(write.fencing_token()));
    assert_eq!(waiting(&seen), 0, "{seen}");
    write.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphore_permit_holders_and_waiter() {
    let server = RedisServer::start();
    let redis = connect(&server).await;
    let pool = redis
        .semaphore("pool", 3)
        .with_options(LockOptions::new().watchdog(Duration::from_secs(3)))
        .unwrap();
    let two = pool.acquire(2).await.expect("acquire 2");
    let one = pool.acquire(1).await.expect("acquire 1");
    let waiter = {
        let pool = connect(&server).await.semaphore("pool", 3);
        tokio::spawn(async move { pool.acquire(1).await })
    };
    let seen = inspect_until(&redis, "pool", "the waiter in line", |i| waiting(i) == 1).await;
    assert_eq!(seen.kinds(), [LockKind::Semaphore]);
    let holders: Vec<_> = seen.holders().collect();
    assert_eq!(holders.len(), 2, "one entry per acquisition: {seen}");
    let mut counts: Vec<u64> = holders.iter().map(|h| h.count).collect();
    counts.sort();
    assert_eq!(counts, [1, 2], "{seen}");
    for holder in &holders {
        assert_eq!(holder.kind, Kind::Permit);
        assert_eq!(holder.key, "lockkeeper:semaphore:{pool}");
        assert_eq!(holder.latest_token, Some(one.fencing_token()));
        assert!(
            holder.ttl_left.is_some_and(|t| t > Duration::ZERO),
            "{seen}"
        );
    }
    let waits = seen.waiters().next().expect("the waiter");
    assert_eq!(waits.kind, Kind::Permit);
    assert_eq!(waits.key, "lockkeeper:semaphore:{pool}:line");

    // Revoking the two-permit acquisition frees both; the waiter takes one and leaves the line.
    let pair = holders
        .iter()
        .find(|h| h.count == 2)
        .expect("the two-permit holder");
    let revoked = redis
        .revoke("pool", pair, Duration::from_millis(50))
        .await
        .expect("revoke");
    assert_eq!(revoked, Revoked::Deleted);
    tokio::time::timeout(LIMIT, two.lost())
        .await
        .expect("the revoked holder sees the loss");
    let third = tokio::time::timeout(LIMIT, waiter)
        .await
        .expect("the waiter is granted")
        .expect("join")
        .expect("acquire");
    let seen = redis.inspect("pool").await.expect("inspect");
    assert_eq!(seen.holders().map(|h| h.count).sum::<u64>(), 2, "{seen}");
    assert_eq!(waiting(&seen), 0, "{seen}");
    assert!(one.is_held());
    third.release().await.expect("release");
    one.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_waiter_that_gives_up_leaves_the_line() {
    let server = RedisServer::start();
    let redis = connect(&server).await;
    let pool = redis.semaphore("full", 1);
    let held = pool.acquire(1).await.expect("acquire");
    let waiter = {
        let pool = connect(&server).await.semaphore("full", 1);
        tokio::spawn(async move { pool.acquire(1).await })
    };
    inspect_until(&redis, "full", "the waiter in line", |i| waiting(i) == 1).await;
    waiter.abort();
    inspect_until(&redis, "full", "the line is empty", |i| waiting(i) == 0).await;
    // A timed wait that ends leaves no place behind either.
    let timed = connect(&server).await.semaphore("full", 1);
    let none = timed
        .acquire_timeout(1, Duration::from_millis(200))
        .await
        .expect("acquire_timeout");
    assert!(none.is_none());
    inspect_until(&redis, "full", "the line is empty", |i| waiting(i) == 0).await;
    held.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_name_can_hold_several_kinds() {
    let server = RedisServer::start();
    let redis = connect(&server).await;
    let lease = redis.lease_lock("both").lock().await.expect("lock");
    let permit = redis
        .semaphore("both", 2)
        .acquire(1)
        .await
        .expect("acquire");
    let seen = redis.inspect("both").await.expect("inspect");
    assert_eq!(seen.kinds(), [LockKind::Lease, LockKind::Semaphore]);
    assert_eq!(seen.holders().count(), 2, "{seen}");
    lease.release().await.expect("release");
    permit.release().await.expect("release");
    assert!(redis.inspect("both").await.expect("inspect").is_empty());
}
