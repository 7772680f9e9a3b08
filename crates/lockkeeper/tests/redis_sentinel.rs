//! The Redis locks through a Sentinel-aware handle, against a real master, replica and
//! sentinels: they exclude and fence as on one server, and after a failover (asked for, or
//! forced by killing the master) the same handles find the new master and the lock works
//! there, its fencing tokens still increasing.
//!
//! Replication is asynchronous, so before each failover the test waits until the replica has
//! everything the master has; without that, the fencing counter could go backwards (the
//! module docs of `lockkeeper::redis` explain that hazard).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lockkeeper::FencingToken;
use lockkeeper::redis::{LeaseGuard, LeaseLock, Redis, RedisOptions, Unlock};
use lockkeeper_testkit::resp::{self, Reply};
use lockkeeper_testkit::{RedisNode, RedisSentinel};

async fn handle(set: &RedisSentinel) -> Redis {
    Redis::connect_sentinel(&set.sentinel_urls(), set.master_name(), RedisOptions::new())
        .await
        .expect("connect through Sentinel")
}

fn node_at(set: &RedisSentinel, addr: SocketAddr) -> &RedisNode {
    set.nodes()
        .iter()
        .find(|n| n.addr() == addr)
        .expect("one of the set's nodes")
}

fn replication_offset(node: &RedisNode, field: &str) -> i64 {
    let reply = node.command(&["INFO", "replication"]).expect("INFO");
    let info = reply.text().expect("INFO answers text").to_string();
    resp::info_field(&info, field)
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in {info}"))
}

/// Waits until the replica has applied everything the master had when this was called.
fn wait_replicated(set: &RedisSentinel) {
    let master = set.current_master();
    let replica = set
        .nodes()
        .iter()
        .find(|n| n.addr() != master)
        .expect("a replica");
    let target = replication_offset(node_at(set, master), "master_repl_offset");
    let deadline = Instant::now() + Duration::from_secs(60);
    while replication_offset(replica, "slave_repl_offset") < target {
        assert!(Instant::now() < deadline, "the replica did not catch up");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Takes `lock`, riding out the errors a handle sees while its master changes under it (the
/// old master refusing writes as a replica, or gone); returns the guard and how many attempts
/// failed first.
async fn lock_after_failover(lock: &LeaseLock) -> (LeaseGuard, u32) {
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut failures = 0;
    loop {
        match lock.lock_timeout(Duration::from_secs(10)).await {
            Ok(Some(guard)) => return (guard, failures),
            Ok(None) => panic!("{} is free, yet not acquired", lock.name()),
            Err(error) => {
                failures += 1;
                assert!(
                    Instant::now() < deadline,
                    "still failing after the failover: {error}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

/// Two handles contending for `name`: mutual exclusion, and tokens increasing in acquisition
/// order. Returns the last token.
async fn contend(set: &RedisSentinel, name: &str) -> FencingToken {
    let inside = Arc::new(AtomicBool::new(false));
    let tokens = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for _ in 0..2 {
        let lock = handle(set).await.lease_lock(name);
        let (inside, tokens) = (Arc::clone(&inside), Arc::clone(&tokens));
        tasks.push(tokio::spawn(async move {
            for _ in 0..5 {
                let guard = lock
                    .lock_timeout(Duration::from_secs(120))
                    .await
                    .expect("no error")
                    .expect("acquired in time");
                assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                tokens.lock().unwrap().push(guard.fencing_token());
                tokio::time::sleep(Duration::from_millis(2)).await;
                inside.store(false, Ordering::SeqCst);
                guard.release().await.expect("release");
            }
        }));
    }
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(300), task)
            .await
            .expect("finished in time")
            .expect("no assertion failed");
    }
    let tokens = tokens.lock().unwrap();
    assert_eq!(tokens.len(), 10);
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
    *tokens.last().expect("ten tokens")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_work_on_the_new_master_after_a_requested_failover() {
    let set = RedisSentinel::start(1);
    let redis = handle(&set).await;
    let last = contend(&set, "orders").await;
    let reentrant = redis.reentrant_lock("accounts");
    let held = reentrant.lock().await.expect("free");
    let reentrant_token = held.fencing_token();
    assert_eq!(held.release().await.expect("release"), Unlock::Released);
    wait_replicated(&set);

    let old = set.current_master();
    let new = set.failover();
    assert_ne!(old, new);

    let lock = redis.lease_lock("orders");
    let (guard, failures) = lock_after_failover(&lock).await;
    assert!(
        guard.fencing_token() > last,
        "token went backwards: {} after {last}",
        guard.fencing_token()
    );
    // The key is on the new master (and replicated to the old one, now its replica).
    let on_new = node_at(&set, new).command(&["GET", lock.key()]).unwrap();
    assert_eq!(on_new, Reply::Bulk(guard.token().to_string()));
    let role = node_at(&set, new).command(&["ROLE"]).unwrap();
    assert!(matches!(&role, Reply::Array(r) if r.first() == Some(&Reply::Bulk("master".into()))));
    // A second handle contends against this one on the new master.
    let other = handle(&set).await.lease_lock("orders");
    assert!(other.try_lock().await.expect("no error").is_none());
    guard.release().await.expect("release");
    let again = other
        .lock_timeout(Duration::from_secs(60))
        .await
        .expect("no error")
        .expect("free");
    again.release().await.expect("release");

    // The reentrant lock too.
    let outer = reentrant.lock().await.expect("free on the new master");
    assert!(outer.fencing_token() > reentrant_token);
    let inner = reentrant
        .try_lock()
        .await
        .expect("no error")
        .expect("re-entry");
    assert_eq!(
        inner.release().await.expect("release"),
        Unlock::Decremented { remaining: 1 }
    );
    assert_eq!(outer.release().await.expect("release"), Unlock::Released);
    eprintln!("attempts that failed while the handle found the new master: {failures}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_work_on_the_new_master_after_the_old_one_is_killed() {
    let set = RedisSentinel::start(3);
    let redis = handle(&set).await;
    let last = contend(&set, "jobs").await;
    wait_replicated(&set);

    let old = set.current_master();
    let new = set.kill_master(); // SIGKILL; the sentinels agree it is down and promote
    assert_ne!(old, new);

    let lock = redis.lease_lock("jobs");
    let (guard, failures) = lock_after_failover(&lock).await;
    assert!(guard.fencing_token() > last);
    let on_new = node_at(&set, new).command(&["GET", lock.key()]).unwrap();
    assert_eq!(on_new, Reply::Bulk(guard.token().to_string()));
    guard.release().await.expect("release");
    eprintln!("attempts that failed while the handle found the new master: {failures}");
}
