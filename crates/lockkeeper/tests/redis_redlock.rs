//! Redlock over five real, independent redis-server masters: what it tolerates (a minority
//! down), how it fails (a majority down: no lock, nothing left behind), that it excludes, and
//! the crash-restart hole its documentation warns about, with and without `appendfsync always`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use lockkeeper::Error;
use lockkeeper::LockOptions;
use lockkeeper::redis::redlock::{Redlock, RedlockOptions};
use lockkeeper_testkit::resp::Reply;
use lockkeeper_testkit::{NodeOptions, RedisNode};

/// Generous for a loaded machine: a live master always answers well within this.
const NODE_TIMEOUT: Duration = Duration::from_secs(2);
const LEASE: Duration = Duration::from_secs(120);

fn masters(count: usize, durable: bool) -> Vec<RedisNode> {
    (0..count)
        .map(|_| RedisNode::start_with(NodeOptions::new().durable(durable)))
        .collect()
}

fn redlock(nodes: &[RedisNode]) -> Redlock {
    let urls: Vec<String> = nodes.iter().map(RedisNode::url).collect();
    let options = RedlockOptions::new()
        .node_timeout(NODE_TIMEOUT)
        .retry_delay(Duration::from_millis(20));
    Redlock::with_options(&urls, options).expect("valid options")
}

/// The value of `key` on `node`, `None` if absent.
fn value(node: &RedisNode, key: &str) -> Option<String> {
    match node.command(&["GET", key]).expect("GET") {
        Reply::Bulk(v) => Some(v),
        Reply::Nil => None,
        other => panic!("GET {key}: {other:?}"),
    }
}

/// Every key on `node`.
fn keys(node: &RedisNode) -> Vec<String> {
    match node.command(&["KEYS", "*"]).expect("KEYS") {
        Reply::Array(keys) => keys
            .iter()
            .map(|k| k.text().expect("a key").to_string())
            .collect(),
        other => panic!("KEYS: {other:?}"),
    }
}

fn signal(node: &RedisNode, sig: &str) {
    let pid = node.pid().expect("running").to_string();
    let status = std::process::Command::new("kill")
        .args([sig, &pid])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill {sig} {pid}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_with_two_of_five_masters_down() {
    let nodes = masters(5, false);
    nodes[3].kill();
    nodes[4].kill();
    let lock = redlock(&nodes)
        .lease_lock("two-down")
        .with_options(LockOptions::new().lease(LEASE))
        .unwrap();
    assert_eq!(redlock(&nodes).quorum(), 3);

    let guard = lock
        .try_lock()
        .await
        .expect("no error")
        .expect("3 of 5 is a majority");
    assert!(guard.is_held());
    assert!(guard.validity() > Duration::ZERO && guard.validity() < LEASE);
    for node in &nodes[..3] {
        assert_eq!(value(node, lock.key()).as_deref(), Some(guard.token()));
        let Reply::Int(pttl) = node.command(&["PTTL", lock.key()]).unwrap() else {
            panic!("PTTL");
        };
        assert!(pttl > 0 && pttl <= LEASE.as_millis() as i64, "{pttl}");
    }

    // Another client finds it taken, on the same three masters.
    let other = redlock(&nodes)
        .lease_lock("two-down")
        .with_options(LockOptions::new().lease(LEASE))
        .unwrap();
    assert!(other.try_lock().await.expect("no error").is_none());
    assert!(
        other
            .lock_timeout(Duration::from_millis(300))
            .await
            .expect("no error")
            .is_none()
    );
    for node in &nodes[..3] {
        assert_eq!(value(node, lock.key()).as_deref(), Some(guard.token()));
    }

    guard.release().await.expect("release");
    for node in &nodes[..3] {
        assert_eq!(value(node, lock.key()), None);
    }
    let second = other.try_lock().await.expect("no error").expect("free now");
    second.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fails_cleanly_with_three_of_five_masters_down() {
    let nodes = masters(5, false);
    for node in &nodes[2..] {
        node.kill();
    }
    let lock = redlock(&nodes)
        .lease_lock("three-down")
        .with_options(LockOptions::new().lease(LEASE))
        .unwrap();

    let started = Instant::now();
    let outcome = lock.try_lock().await;
    assert!(
        matches!(outcome, Err(Error::Redis(_))),
        "no majority can answer: {outcome:?}"
    );
    let outcome = lock.lock_timeout(Duration::from_secs(1)).await;
    assert!(matches!(outcome, Err(Error::Redis(_))), "{outcome:?}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "took {:?}",
        started.elapsed()
    );
    // The two live masters granted the lock each time, and each time it was taken back.
    for node in &nodes[..2] {
        assert_eq!(keys(node), Vec::<String>::new(), "left behind");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_majority_that_times_out_is_undone_when_it_wakes() {
    let nodes = masters(5, false);
    let lock = redlock(&nodes)
        .lease_lock("paused")
        .with_options(LockOptions::new().lease(LEASE))
        .unwrap();
    // Connect to every master first: a paused master would stall a fresh handshake instead.
    lock.try_lock()
        .await
        .expect("no error")
        .expect("all up")
        .release()
        .await
        .expect("release");
    for node in &nodes[2..] {
        signal(node, "-STOP");
    }
    let outcome = lock.try_lock().await;
    for node in &nodes[2..] {
        signal(node, "-CONT");
    }
    assert!(matches!(outcome, Err(Error::Redis(_))), "{outcome:?}");
    // The paused masters received SET and then the compare-and-delete; woken up, they run
    // both in order, so nothing is left anywhere.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left: Vec<String> = nodes.iter().flat_map(keys).collect();
        if left.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "left behind: {left:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contenders_exclude_each_other() {
    const CLIENTS: usize = 4;
    const ROUNDS: u32 = 8;
    let nodes = masters(5, false);
    let inside = Arc::new(AtomicBool::new(false));
    let entries = Arc::new(AtomicU32::new(0));
    let mut tasks = Vec::new();
    for _ in 0..CLIENTS {
        let lock = redlock(&nodes)
            .lease_lock("contended")
            .with_options(LockOptions::new().lease(LEASE))
            .unwrap();
        let (inside, entries) = (Arc::clone(&inside), Arc::clone(&entries));
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let guard = lock
                    .lock_timeout(Duration::from_secs(120))
                    .await
                    .expect("no error")
                    .expect("acquired within the timeout");
                assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                entries.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(5)).await;
                assert!(guard.is_held());
                inside.store(false, Ordering::SeqCst);
                guard.release().await.expect("release");
            }
        }));
    }
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(300), task)
            .await
            .expect("contenders finished")
            .expect("no assertion failed");
    }
    assert_eq!(entries.load(Ordering::SeqCst), CLIENTS as u32 * ROUNDS);
    for node in &nodes {
        assert_eq!(keys(node), Vec::<String>::new());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_wait_leaves_nothing_behind() {
    let nodes = masters(5, false);
    let lock = redlock(&nodes)
        .lease_lock("cancelled")
        .with_options(LockOptions::new().lease(LEASE))
        .unwrap();
    // Someone else holds the key on three masters: every attempt takes the other two, then
    // gives them back. Cancel attempts at all sorts of points.
    for node in &nodes[..3] {
        node.command(&["SET", lock.key(), "someone-else", "PX", "600000"])
            .unwrap();
    }
    for wait_us in (0..40).map(|i| i * 250) {
        let outcome = tokio::time::timeout(Duration::from_micros(wait_us), lock.lock()).await;
        assert!(outcome.is_err(), "acquired a lock held by a majority");
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left: Vec<String> = nodes[3..].iter().flat_map(keys).collect();
        if left.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "left behind: {left:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for node in &nodes[..3] {
        assert_eq!(value(node, lock.key()).as_deref(), Some("someone-else"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validity_runs_out_and_extend_needs_a_majority() {
    let nodes = masters(5, false);
    let redlock = Redlock::with_options(
        &nodes.iter().map(RedisNode::url).collect::<Vec<_>>(),
        RedlockOptions::new().node_timeout(Duration::from_secs(1)),
    )
    .unwrap();
    let lock = redlock
        .lease_lock("short")
        .with_options(LockOptions::new().lease(Duration::from_secs(3)))
        .unwrap();
    let mut guard = lock
        .lock_timeout(Duration::from_secs(60))
        .await
        .unwrap()
        .expect("free");
    let first_until = guard.valid_until().expect("held");

    // Extend: a new vote sets a longer lease everywhere.
    guard.extend(LEASE).await.expect("extend on all five");
    assert!(guard.valid_until().expect("held") > first_until);
    for node in &nodes {
        let Reply::Int(pttl) = node.command(&["PTTL", lock.key()]).unwrap() else {
            panic!("PTTL");
        };
        assert!(pttl > 3_000, "not extended: {pttl}");
    }

    // The key vanishes from three masters (a flush, or restarts without persistence): the
    // next extend cannot find a majority, and the guard counts itself lost.
    for node in &nodes[..3] {
        node.command(&["DEL", lock.key()]).unwrap();
    }
    let outcome = guard.extend(LEASE).await;
    assert!(matches!(outcome, Err(Error::NotHeld)), "{outcome:?}");
    assert!(!guard.is_held());
    assert_eq!(guard.validity(), Duration::ZERO);
    tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("lost() resolves at once for a lost guard");
    assert!(matches!(guard.release().await, Err(Error::NotHeld)));

    // A short lease just runs out: is_held() turns false and lost() resolves.
    let guard = lock
        .lock_timeout(Duration::from_secs(60))
        .await
        .unwrap()
        .expect("free");
    assert!(guard.validity() <= Duration::from_secs(3));
    tokio::time::timeout(Duration::from_secs(60), guard.lost())
        .await
        .expect("lost() resolves when the validity ends");
    assert!(!guard.is_held());
    assert_eq!(guard.valid_until(), None);
    assert!(matches!(guard.release().await, Err(Error::NotHeld)));
}

/// The scenario from the Redlock safety debate. Client A takes the lock while two of five
/// masters are down, so it lives on masters 0, 1 and 2 only. The two come back (empty), and
/// master 2 crashes and restarts. Now masters 2, 3 and 4 are free, a majority, and client B
/// takes the lock while A's validity has most of its lease to run. Returns (A's guard still
/// held, B acquired) for the caller to judge.
async fn crash_restart_scenario(durable: bool) -> (bool, bool) {
    let nodes = masters(5, durable);
    let name = format!("crash-restart-{durable}");
    nodes[3].kill();
    nodes[4].kill();
    let a = redlock(&nodes)
        .lease_lock(&name)
        .with_options(LockOptions::new().lease(LEASE))
        .unwrap();
    let a_guard = a.try_lock().await.expect("no error").expect("3 of 5");
    nodes[3].restart();
    nodes[4].restart();

    nodes[2].restart(); // SIGKILL, then start on the same port and data directory
    let kept = value(&nodes[2], a.key());
    if durable {
        assert_eq!(
            kept.as_deref(),
            Some(a_guard.token()),
            "the AOF kept A's key"
        );
    } else {
        assert_eq!(kept, None, "without persistence the restart forgot A's key");
    }

    let b = redlock(&nodes)
        .lease_lock(&name)
        .with_options(LockOptions::new().lease(LEASE))
        .unwrap();
    let b_guard = b.try_lock().await.expect("no error");
    let outcome = (a_guard.is_held(), b_guard.is_some());
    if let Some(b_guard) = b_guard {
        b_guard.release().await.expect("release B");
    }
    a_guard.release().await.expect("release A");
    outcome
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_restarted_without_persistence_lets_a_second_client_in() {
    let (a_held, b_acquired) = crash_restart_scenario(false).await;
    assert!(a_held, "A's validity had not run out");
    assert!(
        b_acquired,
        "B should have found a majority (the documented hole)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn masters_with_appendfsync_always_keep_the_lock_across_a_crash() {
    let (a_held, b_acquired) = crash_restart_scenario(true).await;
    assert!(a_held);
    assert!(
        !b_acquired,
        "two holders although the masters persist every write"
    );
}
