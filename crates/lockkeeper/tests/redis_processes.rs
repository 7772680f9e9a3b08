//! The lease lock across processes: mutual exclusion between eight processes, a killed holder's
//! lock freed by its TTL, and a paused holder's late write refused thanks to the fencing token.
//!
//! Each test re-runs itself as the child processes it needs (see `support_redis::child`).

mod support_redis;

use std::time::Duration;

use lockkeeper::LockOptions;
use lockkeeper::redis::Redis;
use lockkeeper_testkit::RedisServer;
use lockkeeper_testkit::test_child::{self as child, ChildProcess};
use support_redis::resource::{Client, Resource};

const LOCK: &str = "processes";

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("child needs {name}"))
}

/// Child roles share one shape: connect, then act on the lock and the resource.
async fn child_handles() -> (Redis, Client) {
    let redis = Redis::connect(&env("LK_REDIS"))
        .await
        .expect("child connects");
    let resource = Client::connect(env("LK_RESOURCE").parse().expect("resource addr")).await;
    (redis, resource)
}

#[tokio::test]
async fn eight_processes_never_overlap_and_tokens_increase() {
    const ROUNDS: u64 = 15;
    if child::role().is_some() {
        let (redis, mut resource) = child_handles().await;
        let lock = redis.lease_lock(LOCK);
        for _ in 0..ROUNDS {
            let guard = lock
                .lock_timeout(Duration::from_secs(60))
                .await
                .expect("lock")
                .expect("acquired within a minute");
            resource.enter(guard.fencing_token().get()).await;
            tokio::time::sleep(Duration::from_millis(2)).await;
            resource.leave().await;
            guard.release().await.expect("release");
        }
        return;
    }
    let server = RedisServer::start();
    let resource = Resource::start();
    let vars = [
        ("LK_REDIS", server.url()),
        ("LK_RESOURCE", resource.addr().to_string()),
    ];
    let mut children: Vec<ChildProcess> = (0..8)
        .map(|_| {
            ChildProcess::spawn(
                "eight_processes_never_overlap_and_tokens_increase",
                "contender",
                &vars,
            )
        })
        .collect();
    for child in &mut children {
        assert!(child.wait_success(Duration::from_secs(180)), "child failed");
    }
    let stats = resource.stats();
    assert_eq!(stats.entries, 8 * ROUNDS, "{stats:?}");
    assert_eq!(stats.overlaps, 0, "{stats:?}");
    assert_eq!(stats.token_regressions, 0, "{stats:?}");
}

#[tokio::test]
async fn the_ttl_frees_the_lock_of_a_killed_holder() {
    if child::role().is_some() {
        let (redis, mut resource) = child_handles().await;
        let guard = redis
            .lease_lock(LOCK)
            .with_options(LockOptions::new().watchdog(Duration::from_secs(2)))
            .unwrap()
            .lock()
            .await
            .expect("lock");
        resource.enter(guard.fencing_token().get()).await;
        // Hold (and renew) until killed.
        tokio::time::sleep(Duration::from_secs(300)).await;
        return;
    }
    let server = RedisServer::start();
    let resource = Resource::start();
    let vars = [
        ("LK_REDIS", server.url()),
        ("LK_RESOURCE", resource.addr().to_string()),
    ];
    let mut holder =
        ChildProcess::spawn("the_ttl_frees_the_lock_of_a_killed_holder", "holder", &vars);
    let redis = Redis::connect(&server.url()).await.expect("connect");
    let lock = redis.lease_lock(LOCK);
    support_redis::eventually(Duration::from_secs(60), "the child holds the lock", || {
        let entries = resource.stats().entries;
        async move { entries == 1 }
    })
    .await;
    // Renewed while the child lives: still busy after more than one of its TTLs.
    tokio::time::sleep(Duration::from_millis(3000)).await;
    assert!(
        lock.try_lock().await.expect("try_lock").is_none(),
        "child holds it"
    );
    holder.kill();
    let guard = lock
        .lock_timeout(Duration::from_secs(30))
        .await
        .expect("lock_timeout")
        .expect("the dead holder's lease ran out");
    guard.release().await.expect("release");
}

#[tokio::test]
async fn a_paused_holders_late_write_is_refused_by_the_fencing_token() {
    if child::role().is_some() {
        let (redis, mut resource) = child_handles().await;
        let go = std::path::PathBuf::from(env("LK_GO"));
        let guard = redis
            .lease_lock(LOCK)
            .with_options(LockOptions::new().watchdog(Duration::from_secs(1)))
            .unwrap()
            .lock()
            .await
            .expect("lock");
        let token = guard.fencing_token().get();
        assert!(resource.write(token).await, "first write accepted");
        // Stopped here by the parent; written again once it is let go, the way a process that
        // paused (GC, swap, SIGSTOP) carries on as if nothing happened.
        while !go.exists() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let _ = resource.write(token).await;
        std::mem::forget(guard);
        return;
    }
    let server = RedisServer::start();
    let resource = Resource::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let go = dir.path().join("go");
    let vars = [
        ("LK_REDIS", server.url()),
        ("LK_RESOURCE", resource.addr().to_string()),
        ("LK_GO", go.display().to_string()),
    ];
    let mut paused = ChildProcess::spawn(
        "a_paused_holders_late_write_is_refused_by_the_fencing_token",
        "paused",
        &vars,
    );
    support_redis::eventually(Duration::from_secs(60), "the child wrote once", || {
        let accepted = resource.stats().accepted.len();
        async move { accepted == 1 }
    })
    .await;
    paused.signal("STOP");
    let redis = Redis::connect(&server.url()).await.expect("connect");
    let guard = redis
        .lease_lock(LOCK)
        .lock_timeout(Duration::from_secs(30))
        .await
        .expect("lock_timeout")
        .expect("acquired once the paused holder's lease ran out");
    let mut client = Client::connect(resource.addr()).await;
    assert!(client.write(guard.fencing_token().get()).await);
    std::fs::write(&go, b"go").expect("write go file");
    paused.signal("CONT");
    assert!(paused.wait_success(Duration::from_secs(60)), "child failed");
    let stats = resource.stats();
    let first = stats.accepted[0];
    assert_eq!(
        stats.accepted,
        vec![first, guard.fencing_token().get()],
        "{stats:?}"
    );
    assert_eq!(
        stats.refused,
        vec![first],
        "the late write was refused: {stats:?}"
    );
    guard.release().await.expect("release");
}
