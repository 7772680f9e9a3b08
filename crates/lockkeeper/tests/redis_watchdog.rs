//! The watchdog: renewal keeps a lock well past its TTL, stops at release and at the maximum
//! hold time, renews once a period (no more), and the guard's lost-lock signal fires when renewal
//! cannot go on or finds the key gone.

mod support_redis;

use std::time::Duration;

use lockkeeper::Error;
use lockkeeper::LockOptions;
use lockkeeper::redis::{Redis, RedisOptions};
use lockkeeper_testkit::{RedisNode, RedisServer};
use support_redis::{connect, eventually, exists, pttl, raw};

/// Short enough to see many renewals in a few seconds, long enough that a renewal delayed by a
/// busy machine (it is due every third of this) does not let the key expire.
const TTL: Duration = Duration::from_millis(1000);

#[tokio::test]
async fn renewal_holds_a_lock_far_beyond_its_ttl_and_stops_at_release() {
    let server = RedisServer::start();
    let redis = connect(&server).await;
    let lock = redis
        .lease_lock("long-job")
        .with_options(LockOptions::new().watchdog(TTL))
        .unwrap();
    let mut raw = raw(&server).await;
    let guard = lock.lock().await.expect("lock");
    let started = tokio::time::Instant::now();
    let mut highest_pttl = 0;
    while started.elapsed() < Duration::from_secs(4) {
        let left = pttl(&mut raw, lock.key()).await;
        assert!(left > 0, "key expired while the watchdog ran: PTTL {left}");
        highest_pttl = highest_pttl.max(left);
        assert!(guard.is_held());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        highest_pttl <= 1000,
        "PTTL never above the TTL: {highest_pttl}"
    );
    let other = connect(&server).await.lease_lock("long-job");
    assert!(other.try_lock().await.expect("try_lock").is_none());
    guard.release().await.expect("release");
    assert!(!exists(&mut raw, lock.key()).await);
    // Nothing renews (or re-creates) the key after the release.
    tokio::time::sleep(TTL).await;
    assert!(!exists(&mut raw, lock.key()).await);
}

#[tokio::test]
async fn dropping_the_guard_stops_renewal_and_releases() {
    let server = RedisServer::start();
    let redis = connect(&server).await;
    let lock = redis
        .lease_lock("dropped")
        .with_options(LockOptions::new().watchdog(Duration::from_secs(30)))
        .unwrap();
    let mut raw = raw(&server).await;
    let guard = lock.lock().await.expect("lock");
    drop(guard);
    eventually(Duration::from_secs(5), "released on drop", || {
        let mut raw = raw.clone();
        let key = lock.key().to_string();
        async move { !exists(&mut raw, &key).await }
    })
    .await;
    let _ = &mut raw;
}

#[tokio::test]
async fn maximum_hold_time_ends_renewal() {
    let server = RedisServer::start();
    let redis = connect(&server).await;
    let lock = redis
        .lease_lock("capped")
        .with_options(
            LockOptions::new()
                .watchdog(TTL)
                .max_hold(Duration::from_millis(2500)),
        )
        .unwrap();
    let mut raw = raw(&server).await;
    let guard = lock.lock().await.expect("lock");
    let started = tokio::time::Instant::now();
    // Renewed past the first TTL...
    tokio::time::sleep(Duration::from_millis(1600)).await;
    assert!(exists(&mut raw, lock.key()).await, "renewed past one TTL");
    // ...and not past the maximum hold time (plus generous slack for a loaded machine).
    eventually(
        Duration::from_secs(10),
        "the key expired after max_hold",
        || {
            let mut raw = raw.clone();
            let key = lock.key().to_string();
            async move { !exists(&mut raw, &key).await }
        },
    )
    .await;
    assert!(started.elapsed() >= Duration::from_millis(2400));
    tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("lost() fires once the capped lease ends");
    assert!(!guard.is_held());
    assert!(matches!(guard.release().await, Err(Error::NotHeld)));
}

#[tokio::test]
async fn lost_fires_when_the_key_is_deleted_behind_the_holders_back() {
    let server = RedisServer::start();
    let redis = connect(&server).await;
    let lock = redis
        .lease_lock("stolen")
        .with_options(LockOptions::new().watchdog(TTL))
        .unwrap();
    let mut raw = raw(&server).await;
    let guard = lock.lock().await.expect("lock");
    assert!(guard.is_held());
    let _: i64 = redis::cmd("DEL")
        .arg(lock.key())
        .query_async(&mut raw)
        .await
        .expect("DEL");
    tokio::time::timeout(Duration::from_secs(10), guard.lost())
        .await
        .expect("lost() fires at the next renewal");
    assert!(!guard.is_held());
    assert!(
        !exists(&mut raw, lock.key()).await,
        "a lost guard's watchdog does not re-create the key"
    );
}

#[tokio::test]
async fn lost_fires_when_the_server_dies() {
    let node = RedisNode::start();
    // A long response timeout: lost() must not wait for a command to time out.
    let options = RedisOptions::new().response_timeout(Duration::from_secs(30));
    let redis = Redis::connect_with(&node.url(), options)
        .await
        .expect("connect");
    let lock = redis
        .lease_lock("doomed")
        .with_options(LockOptions::new().watchdog(Duration::from_secs(1)))
        .unwrap();
    let guard = lock.lock().await.expect("lock");
    let lost = guard.lost();
    node.kill();
    let started = tokio::time::Instant::now();
    tokio::time::timeout(Duration::from_secs(15), lost)
        .await
        .expect("lost() fires when renewal cannot reach the server");
    assert!(!guard.is_held());
    assert!(
        started.elapsed() <= Duration::from_secs(5),
        "not later than the lease deadline: {:?}",
        started.elapsed()
    );
}

/// A renewal that finds the key gone ends the lease there and then: `lost()` resolves and
/// `is_held()` turns false well before the deadline the guard reported, not at it. The TTL is
/// long (renewal every 10 s), so the deadline is 20 s after the renewal that notices.
#[tokio::test]
async fn a_renewal_that_finds_the_key_gone_ends_the_lease_before_its_deadline() {
    let server = RedisServer::start();
    let redis = connect(&server).await;
    let lock = redis
        .lease_lock("stolen-long")
        .with_options(LockOptions::new().watchdog(Duration::from_secs(30)))
        .unwrap();
    let mut raw = raw(&server).await;
    let guard = lock.lock().await.expect("lock");
    let deadline = guard.valid_until().expect("held");
    let _: i64 = redis::cmd("DEL")
        .arg(lock.key())
        .query_async(&mut raw)
        .await
        .expect("DEL");
    tokio::time::timeout(Duration::from_secs(60), guard.lost())
        .await
        .expect("lost() fires");
    assert!(
        tokio::time::Instant::now() < deadline,
        "lost() waited for the deadline instead of the renewal that found the key gone"
    );
    assert!(!guard.is_held());
}

/// The watchdog renews once a third of the TTL, not more: over two held seconds with a 3 s TTL
/// Redis sees a handful of renewal scripts (a slow machine makes fewer, never more).
#[tokio::test]
async fn the_watchdog_renews_once_a_period() {
    let server = RedisServer::start();
    let redis = connect(&server).await;
    let lock = redis
        .lease_lock("paced")
        .with_options(LockOptions::new().watchdog(Duration::from_secs(3)))
        .unwrap();
    let mut raw = raw(&server).await;
    let guard = lock.lock().await.expect("lock");
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut raw)
        .await
        .expect("CONFIG RESETSTAT");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut raw)
        .await
        .expect("INFO");
    let calls = |command: &str| -> u64 {
        stats
            .lines()
            .find_map(|line| line.strip_prefix(&format!("cmdstat_{command}:calls=")))
            .and_then(|rest| rest.split(',').next())
            .map_or(0, |n| n.parse().expect("a count"))
    };
    let scripts = calls("evalsha") + calls("eval");
    assert!(scripts <= 10, "{scripts} scripts in two seconds: {stats}");
    guard.release().await.expect("release");
}
