//! The lease lock on a real redis-server: acquire and release, fencing tokens, waiting woken by
//! the release, timeouts, cancellation, and mutual exclusion between tasks.

mod support_redis;

use std::sync::Arc;
use std::time::Duration;

use lockkeeper::Error;
use lockkeeper::LockOptions;
use lockkeeper_testkit::RedisServer;
use support_redis::{connect, eventually, exists, pttl, raw, resource};

#[tokio::test]
async fn lock_release_and_increasing_fencing_tokens() {
    let server = RedisServer::start();
    let redis = connect(&server).await;
    let lock = redis.lease_lock("orders");
    let mut raw = raw(&server).await;

    let first = lock.lock().await.expect("lock");
    assert!(first.is_held());
    assert!(lock.is_locked().await.expect("is_locked"));
    let stored: String = redis::cmd("GET")
        .arg(lock.key())
        .query_async(&mut raw)
        .await
        .expect("GET");
    assert_eq!(stored, first.token(), "the key holds the guard's token");
    assert_eq!(first.token().len(), 32, "128-bit token as hex");
    let ttl = pttl(&mut raw, lock.key()).await;
    assert!(
        ttl > 20_000 && ttl <= 30_000,
        "default watchdog lease of 30 s, got PTTL {ttl}"
    );
    let left = lock
        .remaining_lease()
        .await
        .expect("remaining_lease")
        .expect("held");
    assert!(left > Duration::from_secs(20) && left <= Duration::from_secs(30));
    let t1 = first.fencing_token();
    first.release().await.expect("release");
    assert_eq!(lock.remaining_lease().await.expect("remaining_lease"), None);
    assert!(!exists(&mut raw, lock.key()).await, "released key is gone");

    let second = lock.try_lock().await.expect("try_lock").expect("free");
    assert!(second.fencing_token() > t1, "tokens strictly increase");
    let other = connect(&server).await.lease_lock("orders");
    assert!(other.try_lock().await.expect("try_lock").is_none(), "busy");
    let t2 = second.fencing_token();
    drop(second); // best-effort release in a spawned task
    let third = other
        .lock_timeout(Duration::from_secs(10))
        .await
        .expect("lock_timeout")
        .expect("freed by the dropped guard");
    assert!(third.fencing_token() > t2);
    third.release().await.expect("release");
}

#[tokio::test]
async fn waiters_are_woken_by_the_release_not_by_polling() {
    let server = RedisServer::start();
    let holder = connect(&server).await.lease_lock("report");
    let mut raw = raw(&server).await;
    let line = format!("{}:line", holder.key());
    // Twenty hand-overs. A waiter that only noticed the release when it next re-attempted
    // (at least once a second, to keep its place in line) would take about half a second per
    // hand-over, ten seconds in all; one woken by the release message takes milliseconds.
    let mut total = Duration::ZERO;
    for _ in 0..20 {
        // A long lease: without the release the waiter would wait for a minute.
        let guard = holder
            .clone()
            .with_options(LockOptions::new().lease(Duration::from_secs(60)))
            .unwrap()
            .lock()
            .await
            .expect("lock");
        let waiter = connect(&server).await.lease_lock("report");
        let waiting = tokio::spawn(async move {
            let guard = waiter
                .lock_timeout(Duration::from_secs(50))
                .await
                .expect("lock_timeout")
                .expect("acquired after the release");
            (tokio::time::Instant::now(), guard)
        });
        eventually(Duration::from_secs(20), "the waiter is in line", || {
            let (mut raw, line) = (raw.clone(), line.clone());
            async move {
                let n: i64 = redis::cmd("ZCARD")
                    .arg(&line)
                    .query_async(&mut raw)
                    .await
                    .expect("ZCARD");
                n == 1
            }
        })
        .await;
        let token = guard.fencing_token();
        let released = tokio::time::Instant::now();
        guard.release().await.expect("release");
        let (acquired, next) = tokio::time::timeout(Duration::from_secs(30), waiting)
            .await
            .expect("the waiter finished long before the 60 s lease")
            .expect("waiter task");
        assert!(next.fencing_token() > token);
        total += acquired - released;
        next.release().await.expect("release");
    }
    assert!(
        total < Duration::from_secs(5),
        "twenty hand-overs took {total:?}: waiters were not woken by the release"
    );
    let _ = &mut raw;
}

#[tokio::test]
async fn a_waiter_wakes_when_the_holders_lease_ends() {
    let server = RedisServer::start();
    let redis = connect(&server).await;
    let lock = redis
        .lease_lock("expiring")
        .with_options(LockOptions::new().lease(Duration::from_millis(500)))
        .unwrap();
    let guard = lock.lock().await.expect("lock");
    // The holder never releases (forget skips the release on drop); its lease ends.
    let started = tokio::time::Instant::now();
    let next = lock
        .lock_timeout(Duration::from_secs(20))
        .await
        .expect("lock_timeout")
        .expect("acquired once the lease ran out");
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert!(!guard.is_held(), "the first guard's lease is over");
    assert!(next.fencing_token() > guard.fencing_token());
    std::mem::forget(guard);
}

#[tokio::test]
async fn timeouts_and_busy_answers() {
    let server = RedisServer::start();
    let redis = connect(&server).await;
    let lock = redis.lease_lock("busy");
    let _guard = lock.lock().await.expect("lock");
    let started = tokio::time::Instant::now();
    let got = lock
        .lock_timeout(Duration::from_millis(400))
        .await
        .expect("lock_timeout");
    assert!(got.is_none(), "still held");
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(400) && waited < Duration::from_secs(10),
        "waited {waited:?}"
    );
    assert!(lock.try_lock().await.expect("try_lock").is_none());
}

#[tokio::test]
async fn fixed_lease_expires_and_the_late_release_is_not_held() {
    let server = RedisServer::start();
    let redis = connect(&server).await;
    let lock = redis
        .lease_lock("short")
        .with_options(LockOptions::new().lease(Duration::from_millis(300)))
        .unwrap();
    let guard = lock.lock().await.expect("lock");
    assert!(guard.is_held());
    let until = guard.valid_until().expect("deadline while held");
    assert!(until <= tokio::time::Instant::now() + Duration::from_millis(300));
    tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("lost() fires at the end of the lease");
    assert!(!guard.is_held());
    let mut raw = raw(&server).await;
    eventually(Duration::from_secs(5), "the key expired", || {
        let mut raw = raw.clone();
        let key = lock.key().to_string();
        async move { !exists(&mut raw, &key).await }
    })
    .await;
    let _ = &mut raw;
    let thief = lock.try_lock().await.expect("try_lock").expect("expired");
    assert!(
        matches!(guard.release().await, Err(Error::NotHeld)),
        "a release after the lease ended must not delete the new holder's key"
    );
    assert!(thief.is_held());
    assert!(
        lock.is_locked().await.expect("is_locked"),
        "thief still holds it"
    );
    thief.release().await.expect("release");
}

#[tokio::test]
async fn extend_moves_the_deadline_and_fails_once_lost() {
    let server = RedisServer::start();
    let redis = connect(&server).await;
    let lock = redis
        .lease_lock("extend")
        .with_options(LockOptions::new().lease(Duration::from_millis(1500)))
        .unwrap();
    let mut guard = lock.lock().await.expect("lock");
    guard.extend(Duration::from_secs(20)).await.expect("extend");
    let mut raw = raw(&server).await;
    assert!(pttl(&mut raw, lock.key()).await > 10_000);
    tokio::time::sleep(Duration::from_millis(2000)).await;
    assert!(guard.is_held(), "extended past the first lease");
    assert!(lock.force_unlock().await.expect("force_unlock"));
    assert!(matches!(
        guard.extend(Duration::from_secs(1)).await,
        Err(Error::NotHeld)
    ));
    assert!(!guard.is_held(), "a failed extend marks the guard lost");
    assert!(matches!(guard.release().await, Err(Error::NotHeld)));
}

#[tokio::test]
async fn releasing_someone_elses_lock_is_not_held() {
    let server = RedisServer::start();
    let redis = connect(&server).await;
    let lock = redis
        .lease_lock("foreign")
        .with_options(LockOptions::new().lease(Duration::from_secs(30)))
        .unwrap();
    let guard = lock.lock().await.expect("lock");
    let mut raw = raw(&server).await;
    // Someone else's token in the key: our compare-and-delete must leave it alone.
    let _: () = redis::cmd("SET")
        .arg(lock.key())
        .arg("someone-else")
        .query_async(&mut raw)
        .await
        .expect("SET");
    assert!(matches!(guard.release().await, Err(Error::NotHeld)));
    let still: String = redis::cmd("GET")
        .arg(lock.key())
        .query_async(&mut raw)
        .await
        .expect("GET");
    assert_eq!(still, "someone-else");
}

#[tokio::test]
async fn eight_tasks_never_overlap_and_tokens_increase() {
    let server = RedisServer::start();
    let resource = resource::Resource::start();
    let redis = connect(&server).await;
    let mut tasks = Vec::new();
    for task in 0..8 {
        // Half share one handle, half bring their own connections.
        let redis = if task % 2 == 0 {
            redis.clone()
        } else {
            connect(&server).await
        };
        let addr = resource.addr();
        tasks.push(tokio::spawn(async move {
            let lock = redis.lease_lock("shared");
            let mut client = resource::Client::connect(addr).await;
            for _ in 0..25 {
                let guard = lock
                    .lock_timeout(Duration::from_secs(60))
                    .await
                    .expect("lock")
                    .expect("acquired within a minute");
                client.enter(guard.fencing_token().get()).await;
                tokio::task::yield_now().await;
                client.leave().await;
                guard.release().await.expect("release");
            }
        }));
    }
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(120), task)
            .await
            .expect("contenders finish")
            .expect("contender");
    }
    let stats = resource.stats();
    assert_eq!(stats.entries, 200);
    assert_eq!(stats.overlaps, 0, "{stats:?}");
    assert_eq!(stats.token_regressions, 0, "{stats:?}");
}

#[tokio::test]
async fn a_cancelled_lock_call_leaves_nothing_behind() {
    let server = RedisServer::start();
    let redis = connect(&server).await;
    // A long lease: a leaked acquisition would outlive the test.
    let lock = redis
        .lease_lock("cancel")
        .with_options(LockOptions::new().lease(Duration::from_secs(120)))
        .unwrap();
    let mut cancelled = 0;
    for i in 0..60u64 {
        // Cut the call off at varying points, some while the script is on the wire. Every
        // third call is cut right after its first poll, so some are cut however fast the
        // machine answers.
        let call = lock.lock();
        let limit = Duration::from_micros(50 + (i * 37) % 900);
        let outcome = if i % 3 == 0 {
            tokio::select! {
                biased;
                guard = call => Some(guard),
                () = std::future::ready(()) => None,
            }
        } else {
            tokio::time::timeout(limit, call).await.ok()
        };
        match outcome {
            Some(guard) => drop(guard.expect("lock")),
            None => cancelled += 1,
        }
    }
    assert!(cancelled > 0, "some calls were cut off");
    let lock = Arc::new(lock);
    let probe = Arc::clone(&lock);
    eventually(
        Duration::from_secs(10),
        "no acquisition left behind",
        || {
            let probe = Arc::clone(&probe);
            async move { !probe.is_locked().await.expect("is_locked") }
        },
    )
    .await;
    let guard = lock.try_lock().await.expect("try_lock").expect("free");
    guard.release().await.expect("release");
}
