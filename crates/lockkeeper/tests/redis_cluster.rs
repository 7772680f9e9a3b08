//! The Redis locks through a Redis Cluster client, against a real three-master cluster: they
//! exclude, their fencing tokens increase, all keys of one lock sit in one hash slot (or the
//! scripts touching them together would be refused with CROSSSLOT), locks spread over the
//! masters, and a release wakes a waiter through the cluster's pub/sub.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lockkeeper::LockOptions;
use lockkeeper::redis::{Redis, RedisOptions, Unlock};
use lockkeeper_testkit::RedisCluster;
use lockkeeper_testkit::resp::Reply;

async fn handle(cluster: &RedisCluster) -> Redis {
    Redis::connect_cluster(&cluster.urls(), RedisOptions::new())
        .await
        .expect("connect to the cluster")
}

/// Every key on every master whose name contains `{tag}`, with the master holding it.
fn keys_tagged(cluster: &RedisCluster, tag: &str) -> Vec<(SocketAddr, String)> {
    let pattern = format!("*{{{tag}}}*");
    let mut found = Vec::new();
    for (index, addr) in cluster.addrs().into_iter().enumerate() {
        let Reply::Array(keys) = cluster.command(index, &["KEYS", &pattern]) else {
            panic!("KEYS answers an array");
        };
        for key in keys {
            found.push((addr, key.text().expect("a key name").to_string()));
        }
    }
    found
}

/// Lock names whose keys land on three different masters.
fn one_name_per_master(cluster: &RedisCluster, redis: &Redis) -> Vec<String> {
    let mut seen = BTreeSet::new();
    let mut names = Vec::new();
    for i in 0..1000 {
        let name = format!("job-{i}");
        let master = cluster.master_for(redis.lease_lock(&name).key());
        if seen.insert(master) {
            names.push(name);
        }
        if names.len() == 3 {
            return names;
        }
    }
    panic!("no three names spread over three masters");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_locks_exclude_and_fence_on_every_master() {
    const TASKS: usize = 3;
    const ROUNDS: usize = 6;
    let cluster = RedisCluster::start();
    let first = handle(&cluster).await;
    let names = one_name_per_master(&cluster, &first);
    let mut tasks = Vec::new();
    let mut records = Vec::new();
    for name in &names {
        let inside = Arc::new(AtomicBool::new(false));
        let tokens = Arc::new(Mutex::new(Vec::new()));
        records.push((name.clone(), Arc::clone(&tokens)));
        for _ in 0..TASKS {
            let lock = handle(&cluster).await.lease_lock(name);
            let (inside, tokens) = (Arc::clone(&inside), Arc::clone(&tokens));
            tasks.push(tokio::spawn(async move {
                for _ in 0..ROUNDS {
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
    }
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(300), task)
            .await
            .expect("finished in time")
            .expect("no assertion failed");
    }
    for (name, tokens) in records {
        let tokens = tokens.lock().unwrap();
        assert_eq!(tokens.len(), TASKS * ROUNDS, "{name}");
        assert!(
            tokens.windows(2).all(|w| w[0] < w[1]),
            "{name}: tokens not increasing in acquisition order: {tokens:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_keys_of_one_lock_share_one_slot() {
    let cluster = RedisCluster::start();
    let redis = handle(&cluster).await;
    let lease = redis.lease_lock("invoices");
    let guard = lease.lock().await.expect("free");
    let reentrant = redis.reentrant_lock("ledger");
    let held = reentrant.lock().await.expect("free");

    for (name, key) in [("invoices", lease.key()), ("ledger", reentrant.key())] {
        let keys = keys_tagged(&cluster, name);
        // The lock key and its fencing counter at least.
        assert!(keys.len() >= 2, "{name}: {keys:?}");
        assert!(
            keys.iter().any(|(_, k)| k == key),
            "{name}: {key} not among {keys:?}"
        );
        let slot = cluster.keyslot(key);
        let master = cluster.master_for(key);
        for (addr, k) in &keys {
            assert_eq!(
                cluster.keyslot(k),
                slot,
                "{k} is in another slot than {key}"
            );
            assert_eq!(*addr, master, "{k}");
        }
    }
    guard.release().await.expect("release");
    assert_eq!(held.release().await.expect("release"), Unlock::Released);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reentrant_locks_count_per_owner_through_the_cluster() {
    let cluster = RedisCluster::start();
    let alice = handle(&cluster).await;
    let bob = handle(&cluster).await;
    let lock = alice.reentrant_lock("accounts");
    let outer = lock.lock().await.expect("free");
    let inner = lock
        .try_lock()
        .await
        .expect("no error")
        .expect("same owner re-enters");
    assert_eq!(inner.fencing_token(), outer.fencing_token());
    assert_eq!(lock.hold_count().await.expect("count"), 2);
    let bobs = bob.reentrant_lock("accounts");
    assert!(
        bobs.try_lock().await.expect("no error").is_none(),
        "another owner got in"
    );

    assert_eq!(
        inner.release().await.expect("release"),
        Unlock::Decremented { remaining: 1 }
    );
    assert!(bobs.try_lock().await.expect("no error").is_none());
    let first_token = outer.fencing_token();
    assert_eq!(outer.release().await.expect("release"), Unlock::Released);
    let taken = bobs
        .lock_timeout(Duration::from_secs(60))
        .await
        .expect("no error")
        .expect("free now");
    assert!(taken.fencing_token() > first_token);
    assert_eq!(taken.release().await.expect("release"), Unlock::Released);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_a_waiter_long_before_the_lease_ends() {
    let cluster = RedisCluster::start();
    let holder = handle(&cluster).await;
    let waiter = handle(&cluster).await;
    let lease = Duration::from_secs(120);
    let guard = holder
        .lease_lock("wake")
        .with_options(LockOptions::new().lease(lease))
        .unwrap()
        .lock()
        .await
        .expect("free");
    let lock = waiter.lease_lock("wake");
    let waiting = tokio::spawn(async move {
        lock.lock_timeout(Duration::from_secs(60))
            .await
            .expect("no error")
            .expect("woken by the release")
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let released_at = Instant::now();
    guard.release().await.expect("release");
    let second = tokio::time::timeout(Duration::from_secs(90), waiting)
        .await
        .expect("waiter done")
        .expect("waiter ok");
    // Polling would only find the lock free after the 120 s lease; the release message
    // wakes the waiter at once (bounded generously for a loaded machine).
    assert!(
        released_at.elapsed() < Duration::from_secs(30),
        "woken {:?} after the release",
        released_at.elapsed()
    );
    second.release().await.expect("release");
}
