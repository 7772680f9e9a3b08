//! The semaphore: N permits shared across handles and processes, returned on release, and
//! returned by expiry when their holder crashed.

mod support_redis;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use lockkeeper::Error;
use lockkeeper::LockOptions;
use lockkeeper::redis::Redis;
use lockkeeper_testkit::RedisServer;
use lockkeeper_testkit::test_child::{self as child, ChildProcess};
use support_redis::connect;
use support_redis::resource::{Client, Resource};

#[tokio::test]
async fn permits_are_counted_across_handles() {
    let server = RedisServer::start();
    let a = connect(&server).await.semaphore("pool", 3);
    let b = connect(&server).await.semaphore("pool", 3);
    assert_eq!(a.available().await.expect("available"), 3);
    let two = a.acquire(2).await.expect("acquire 2");
    assert_eq!(two.permits(), 2);
    let one = b
        .try_acquire(1)
        .await
        .expect("try_acquire")
        .expect("one left");
    assert!(one.fencing_token() > two.fencing_token());
    assert_eq!(a.available().await.expect("available"), 0);
    assert!(
        b.try_acquire(1).await.expect("try_acquire").is_none(),
        "all taken"
    );
    let started = tokio::time::Instant::now();
    assert!(
        b.acquire_timeout(1, Duration::from_millis(300))
            .await
            .expect("acquire_timeout")
            .is_none()
    );
    assert!(started.elapsed() >= Duration::from_millis(300));

    let waiter = tokio::spawn({
        let b = b.clone();
        async move {
            b.acquire_timeout(2, Duration::from_secs(30))
                .await
                .expect("acquire_timeout")
                .expect("two permits come back")
        }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    two.release().await.expect("release");
    let again = tokio::time::timeout(Duration::from_secs(30), waiter)
        .await
        .expect("woken by the release")
        .expect("waiter");
    assert_eq!(again.permits(), 2);
    assert_eq!(a.available().await.expect("available"), 0);
    again.release().await.expect("release");
    one.release().await.expect("release");
    assert_eq!(a.available().await.expect("available"), 3);
}

#[tokio::test]
async fn expired_permits_come_back_and_their_release_is_not_held() {
    let server = RedisServer::start();
    let redis = connect(&server).await;
    let short = redis
        .semaphore("expiring", 1)
        .with_options(LockOptions::new().lease(Duration::from_millis(300)))
        .unwrap();
    let permit = short.acquire(1).await.expect("acquire");
    let other = connect(&server).await.semaphore("expiring", 1);
    let next = other
        .acquire_timeout(1, Duration::from_secs(20))
        .await
        .expect("acquire_timeout")
        .expect("the permit expired");
    assert!(!permit.is_held());
    assert!(matches!(permit.release().await, Err(Error::NotHeld)));
    assert!(
        next.is_held(),
        "the stale release took nothing from the new holder"
    );
    assert_eq!(other.available().await.expect("available"), 0);
    next.release().await.expect("release");
}

#[tokio::test]
async fn never_more_holders_than_permits() {
    let server = RedisServer::start();
    let inside = Arc::new(AtomicU64::new(0));
    let most = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let pool = connect(&server).await.semaphore("bounded", 3);
        let (inside, most) = (Arc::clone(&inside), Arc::clone(&most));
        tasks.push(tokio::spawn(async move {
            for _ in 0..10 {
                let permit = pool
                    .acquire_timeout(1, Duration::from_secs(60))
                    .await
                    .expect("acquire")
                    .expect("a permit within a minute");
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(5)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                permit.release().await.expect("release");
            }
        }));
    }
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(120), task)
            .await
            .expect("tasks finish")
            .expect("task");
    }
    let most = most.load(Ordering::SeqCst);
    assert!(most <= 3, "{most} holders at once with 3 permits");
    assert!(most >= 2, "permits were shared: at most {most} at once");
}

#[tokio::test]
async fn a_crashed_holders_permits_come_back() {
    if child::role().is_some() {
        let redis = Redis::connect(&std::env::var("LK_REDIS").expect("LK_REDIS"))
            .await
            .expect("child connects");
        let mut resource = Client::connect(
            std::env::var("LK_RESOURCE")
                .expect("LK_RESOURCE")
                .parse()
                .expect("addr"),
        )
        .await;
        let permit = redis
            .semaphore("crash", 2)
            .with_options(LockOptions::new().watchdog(Duration::from_secs(2)))
            .expect("options")
            .acquire(2)
            .await
            .expect("acquire");
        resource.enter(permit.fencing_token().get()).await;
        tokio::time::sleep(Duration::from_secs(300)).await;
        return;
    }
    let server = RedisServer::start();
    let resource = Resource::start();
    let mut holder = ChildProcess::spawn(
        "a_crashed_holders_permits_come_back",
        "holder",
        &[
            ("LK_REDIS", server.url()),
            ("LK_RESOURCE", resource.addr().to_string()),
        ],
    );
    support_redis::eventually(
        Duration::from_secs(60),
        "the child holds both permits",
        || {
            let entries = resource.stats().entries;
            async move { entries == 1 }
        },
    )
    .await;
    let pool = connect(&server).await.semaphore("crash", 2);
    // Renewed while the child lives: still taken after more than one of its TTLs.
    tokio::time::sleep(Duration::from_millis(3000)).await;
    assert!(pool.try_acquire(1).await.expect("try_acquire").is_none());
    holder.kill();
    let back = pool
        .acquire_timeout(2, Duration::from_secs(30))
        .await
        .expect("acquire_timeout")
        .expect("the dead holder's permits expired");
    assert_eq!(back.permits(), 2);
    back.release().await.expect("release");
}

#[tokio::test]
async fn bad_permit_counts_are_invalid_arguments() {
    let server = RedisServer::start();
    let redis = connect(&server).await;
    let pool = redis.semaphore("args", 2);
    assert!(matches!(
        pool.acquire(0).await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        pool.try_acquire(3).await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        pool.acquire_timeout(1, Duration::ZERO).await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        redis.semaphore("none", 0).try_acquire(1).await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        redis.semaphore("", 1).try_acquire(1).await,
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        pool.clone()
            .with_options(LockOptions::new().lease(Duration::ZERO)),
        Err(Error::InvalidArgument(_))
    ));
}
