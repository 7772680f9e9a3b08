//! Reentrant locks: the hash recipe (counts per owner in Redis, owners shared across
//! connections) and the local-count variant (one key, re-entries counted in the process).

mod support_redis;

use std::time::Duration;

use lockkeeper::Error;
use lockkeeper::LockOptions;
use lockkeeper::redis::Unlock;
use lockkeeper_testkit::RedisServer;
use support_redis::{connect, exists, raw};

#[tokio::test]
async fn re_entries_are_counted_and_share_the_fencing_token() {
    let server = RedisServer::start();
    let redis = connect(&server).await;
    let lock = redis.reentrant_lock("accounts");
    let mut raw = raw(&server).await;

    let outer = lock.lock().await.expect("lock");
    assert_eq!(outer.count(), 1);
    let inner = lock.try_lock().await.expect("try_lock").expect("re-entry");
    assert_eq!(inner.count(), 2);
    let innermost = lock
        .lock_timeout(Duration::from_secs(1))
        .await
        .expect("lock_timeout")
        .expect("re-entry");
    assert_eq!(innermost.count(), 3);
    assert_eq!(inner.fencing_token(), outer.fencing_token());
    assert_eq!(innermost.fencing_token(), outer.fencing_token());
    assert_eq!(lock.hold_count().await.expect("hold_count"), 3);
    assert!(
        lock.remaining_lease()
            .await
            .expect("remaining_lease")
            .is_some_and(|left| left > Duration::from_secs(20))
    );
    let stored: Option<u64> = redis::cmd("HGET")
        .arg(lock.key())
        .arg(redis.owner_id())
        .query_async(&mut raw)
        .await
        .expect("HGET");
    assert_eq!(
        stored,
        Some(3),
        "the count lives in the hash under the owner id"
    );

    assert_eq!(
        innermost.release().await.expect("release"),
        Unlock::Decremented { remaining: 2 }
    );
    assert_eq!(
        inner.release().await.expect("release"),
        Unlock::Decremented { remaining: 1 }
    );
    assert!(exists(&mut raw, lock.key()).await);
    let first_token = outer.fencing_token();
    assert_eq!(outer.release().await.expect("release"), Unlock::Released);
    assert!(!exists(&mut raw, lock.key()).await);
    assert_eq!(lock.hold_count().await.expect("hold_count"), 0);

    let again = lock.lock().await.expect("lock");
    assert!(
        again.fencing_token() > first_token,
        "a new first acquisition, a new token"
    );
    assert_eq!(again.release().await.expect("release"), Unlock::Released);
}

#[tokio::test]
async fn another_owner_waits_and_cannot_unlock() {
    let server = RedisServer::start();
    let mine = connect(&server).await.reentrant_lock("ledger");
    let theirs = connect(&server).await.reentrant_lock("ledger");
    assert_ne!(
        mine.owner_id(),
        theirs.owner_id(),
        "one owner id per handle"
    );

    let guard = mine.lock().await.expect("lock");
    assert!(theirs.try_lock().await.expect("try_lock").is_none());
    assert!(
        matches!(theirs.unlock().await, Err(Error::NotHeld)),
        "a foreign unlock is NotHeld"
    );
    assert_eq!(mine.hold_count().await.expect("hold_count"), 1, "untouched");

    let token = guard.fencing_token();
    let waiter = tokio::spawn({
        let theirs = theirs.clone();
        async move {
            theirs
                .lock_timeout(Duration::from_secs(30))
                .await
                .expect("lock_timeout")
                .expect("acquired after the release")
        }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(guard.release().await.expect("release"), Unlock::Released);
    let theirs_guard = tokio::time::timeout(Duration::from_secs(30), waiter)
        .await
        .expect("waiter finishes")
        .expect("waiter");
    assert!(theirs_guard.fencing_token() > token);
    assert!(matches!(mine.unlock().await, Err(Error::NotHeld)));
    theirs_guard.release().await.expect("release");
}

#[tokio::test]
async fn a_shared_owner_id_spans_connections() {
    let server = RedisServer::start();
    // Two independent connections (as two processes would have) with one owner id.
    let a = connect(&server)
        .await
        .with_owner_id("billing-worker-7")
        .expect("owner id");
    let b = connect(&server)
        .await
        .with_owner_id("billing-worker-7")
        .expect("owner id");
    let stranger = connect(&server).await.reentrant_lock("invoices");
    let first = a.reentrant_lock("invoices").lock().await.expect("lock");
    let second = b
        .reentrant_lock("invoices")
        .try_lock()
        .await
        .expect("try_lock")
        .expect("same owner re-enters from another connection");
    assert_eq!(second.count(), 2);
    assert_eq!(second.fencing_token(), first.fencing_token());
    assert!(stranger.try_lock().await.expect("try_lock").is_none());
    // Guard-less unlock from the other connection, as a second process would.
    std::mem::forget(second);
    assert_eq!(
        b.reentrant_lock("invoices").unlock().await.expect("unlock"),
        Unlock::Decremented { remaining: 1 }
    );
    assert_eq!(first.release().await.expect("release"), Unlock::Released);
    assert!(stranger.try_lock().await.expect("try_lock").is_some());

    // The owner can also be set per lock.
    let lock = connect(&server)
        .await
        .reentrant_lock("per-lock")
        .owner("job-42");
    assert_eq!(lock.owner_id(), "job-42");
    let guard = lock.lock().await.expect("lock");
    assert_eq!(guard.owner_id(), "job-42");
    guard.release().await.expect("release");
}

#[tokio::test]
async fn a_release_after_force_unlock_is_not_held() {
    let server = RedisServer::start();
    let redis = connect(&server).await;
    let lock = redis.reentrant_lock("forced");
    let guard = lock.lock().await.expect("lock");
    assert!(lock.is_locked().await.expect("is_locked"));
    assert!(lock.force_unlock().await.expect("force_unlock"));
    assert!(!lock.is_locked().await.expect("is_locked"));
    assert!(matches!(guard.release().await, Err(Error::NotHeld)));
    assert!(
        !lock.force_unlock().await.expect("force_unlock"),
        "nothing left"
    );
}

#[tokio::test]
async fn a_short_inner_lease_does_not_cut_the_outer_one() {
    let server = RedisServer::start();
    let redis = connect(&server).await;
    let lock = redis.reentrant_lock("nested");
    let mut raw = raw(&server).await;
    let outer = lock
        .clone()
        .with_options(LockOptions::new().lease(Duration::from_secs(30)))
        .unwrap()
        .lock()
        .await
        .expect("lock");
    let inner = lock
        .clone()
        .with_options(LockOptions::new().lease(Duration::from_millis(200)))
        .unwrap()
        .lock()
        .await
        .expect("re-entry");
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(!inner.is_held(), "the inner hold's own lease ended");
    assert!(outer.is_held());
    assert!(
        exists(&mut raw, lock.key()).await,
        "the re-entry refreshed, never shortened, the lease"
    );
    drop(inner);
    assert_eq!(outer.release().await.expect("release"), Unlock::Released);
}

#[tokio::test]
async fn the_watchdog_renews_a_reentrant_lock_and_reports_its_loss() {
    let server = RedisServer::start();
    let redis = connect(&server).await;
    let lock = redis
        .reentrant_lock("renewed")
        .with_options(LockOptions::new().watchdog(Duration::from_millis(1000)))
        .unwrap();
    let mut raw = raw(&server).await;
    let guard = lock.lock().await.expect("lock");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        exists(&mut raw, lock.key()).await,
        "renewed past three TTLs"
    );
    assert!(guard.is_held());
    let _: i64 = redis::cmd("DEL")
        .arg(lock.key())
        .query_async(&mut raw)
        .await
        .expect("DEL");
    tokio::time::timeout(Duration::from_secs(10), guard.lost())
        .await
        .expect("lost() fires");
    assert!(!guard.is_held());
}

#[tokio::test]
async fn a_key_of_the_wrong_type_is_a_redis_error() {
    let server = RedisServer::start();
    let redis = connect(&server).await;
    let lock = redis.reentrant_lock("clobbered");
    let mut raw = raw(&server).await;
    let _: () = redis::cmd("SET")
        .arg(lock.key())
        .arg("a string, not a hash")
        .query_async(&mut raw)
        .await
        .expect("SET");
    match lock.try_lock().await {
        Err(Error::Redis(error)) => {
            assert!(error.to_string().contains("WRONGTYPE"), "{error}");
        }
        other => panic!("expected a script error, got {other:?}"),
    }
}

#[tokio::test]
async fn local_count_re_entries_cost_no_round_trip() {
    let server = RedisServer::start();
    let redis = connect(&server).await;
    let lock = redis.local_reentrant_lock("local");
    let other = connect(&server).await.local_reentrant_lock("local");
    let mut raw = raw(&server).await;

    let outer = lock.lock().await.expect("lock");
    let calls = || async {
        let mut raw = support_redis::raw(&server).await;
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut raw)
            .await
            .expect("INFO");
        info.lines()
            .filter(|l| l.starts_with("cmdstat_eval"))
            .map(ToString::to_string)
            .collect::<Vec<_>>()
    };
    let before = calls().await;
    let inner = lock.lock().await.expect("re-entry");
    let innermost = lock.try_lock().await.expect("try_lock").expect("re-entry");
    assert_eq!(before, calls().await, "re-entries sent no script");
    assert_eq!(lock.hold_count(), 3);
    assert_eq!(inner.fencing_token(), outer.fencing_token());
    assert!(
        other.try_lock().await.expect("try_lock").is_none(),
        "excludes others"
    );

    assert_eq!(
        innermost.release().await.expect("release"),
        Unlock::Decremented { remaining: 2 }
    );
    drop(inner);
    assert_eq!(lock.hold_count(), 1);
    assert!(exists(&mut raw, lock.lease_lock().key()).await);
    assert_eq!(outer.release().await.expect("release"), Unlock::Released);
    assert!(!exists(&mut raw, lock.lease_lock().key()).await);
    assert!(other.try_lock().await.expect("try_lock").is_some());
}

#[tokio::test]
async fn local_count_caveat_a_fixed_lease_runs_out_under_the_count() {
    let server = RedisServer::start();
    let redis = connect(&server).await;
    let lock = lockkeeper::redis::LocalReentrantLock::new(
        redis
            .lease_lock("caveat")
            .with_options(LockOptions::new().lease(Duration::from_millis(300)))
            .unwrap(),
    );
    let outer = lock.lock().await.expect("lock");
    tokio::time::timeout(Duration::from_secs(5), outer.lost())
        .await
        .expect("the lease ends although the count says held");
    assert_eq!(lock.hold_count(), 1, "the local count still says held");
    assert!(!outer.is_held());
    assert!(
        matches!(lock.lock().await, Err(Error::NotHeld)),
        "no re-entry into a lost lease"
    );
    let thief = connect(&server)
        .await
        .lease_lock("caveat")
        .lock_timeout(Duration::from_secs(10))
        .await
        .expect("lock_timeout")
        .expect("the key expired");
    assert!(matches!(outer.release().await, Err(Error::NotHeld)));
    assert!(thief.is_held());
}

#[tokio::test]
async fn re_entries_skip_the_line_newcomers_do_not() {
    let server = RedisServer::start();
    let redis = connect(&server).await;
    let lock = redis.reentrant_lock("queued");
    let stranger = connect(&server).await.reentrant_lock("queued");
    let mut raw = raw(&server).await;
    let outer = lock.lock().await.expect("lock");
    // Someone lined up for the lock a second ago, longer than newcomers may barge in ahead
    // of it, and went quiet: the place lapses in 2 s.
    let time: Vec<u64> = redis::cmd("TIME")
        .query_async(&mut raw)
        .await
        .expect("TIME");
    let now_ms = time[0] * 1000 + time[1] / 1000;
    let _: () = redis::pipe()
        .cmd("ZADD")
        .arg(format!("{}:line", lock.key()))
        .arg(now_ms - 1000)
        .arg("quiet-waiter")
        .ignore()
        .cmd("ZADD")
        .arg(format!("{}:line:deadlines", lock.key()))
        .arg(now_ms + 2000)
        .arg("quiet-waiter")
        .ignore()
        .query_async(&mut raw)
        .await
        .expect("ZADD");
    let inner = lock
        .try_lock()
        .await
        .expect("try_lock")
        .expect("the owner re-enters without queueing");
    assert_eq!(inner.count(), 2);
    drop(inner);
    outer.release().await.expect("release");
    assert!(
        stranger.try_lock().await.expect("try_lock").is_none(),
        "the free lock waits for the waiter that lined up first"
    );
    let guard = stranger
        .lock_timeout(Duration::from_secs(30))
        .await
        .expect("lock_timeout")
        .expect("acquired once the quiet waiter's place lapsed");
    guard.release().await.expect("release");
}
