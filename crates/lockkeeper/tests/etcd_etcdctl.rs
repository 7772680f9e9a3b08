//! lockkeeper and etcdctl 3.4 on one name: `etcdctl lock` and lockkeeper's Mutex exclude each
//! other (Go's `concurrency.Mutex` layout), and `etcdctl elect` and lockkeeper's Election agree
//! on the leader both ways (campaign, `--listen`, proclaim, resign).
//!
//! etcdctl 3.4's `lock NAME -- CMD` does not hand the lock key to the command, so the tests
//! run `etcdctl lock NAME` without a command: it prints the key once granted and holds until
//! SIGINT, when it unlocks and exits.
#![cfg(feature = "etcd")]

mod support_etcd;

use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lockkeeper_testkit::{Etcd, LinePeer, die_with_parent};
use support_etcd::session;

/// A running etcdctl (API v3) on `endpoint`, its stdout lines read as they come; killed (by
/// PID) when dropped.
fn etcdctl(endpoint: &str, args: &[&str]) -> LinePeer {
    let mut command = Command::new("etcdctl");
    die_with_parent(&mut command);
    command
        .env("ETCDCTL_API", "3")
        .arg("--endpoints")
        .arg(endpoint)
        .args(args);
    LinePeer::spawn(&mut command, format!("etcdctl {}", args.join(" ")))
}

/// SIGINT (etcdctl unlocks or resigns, then exits), and waits for the exit (bounded).
fn interrupt(ctl: &mut LinePeer) {
    ctl.signal("INT");
    ctl.wait_exit(Duration::from_secs(10));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_lock_and_lockkeeper_exclude_each_other() {
    let etcd = Etcd::start();
    let endpoint = etcd.endpoint();
    let a = session(&etcd).await;

    // Held by lockkeeper: etcdctl waits; released: etcdctl gets it and prints the Go key.
    let guard = a
        .mutex("shared")
        .expect("mutex")
        .lock()
        .await
        .expect("lock");
    let mut ctl = etcdctl(&endpoint, &["lock", "shared"]);
    let early = ctl.line_within_async(Duration::from_millis(700)).await;
    assert_eq!(early, None, "etcdctl must wait while lockkeeper holds");
    guard.release().await.expect("release");
    let key = ctl.next_line_async(Duration::from_secs(10)).await;
    assert!(key.starts_with("shared/"), "{key}");
    // Held by etcdctl: lockkeeper's try_lock is refused; its lock() waits for the SIGINT.
    let mutex = a.mutex("shared").expect("mutex");
    assert!(mutex.try_lock().await.expect("try_lock").is_none());
    let waiter = tokio::spawn({
        let mutex = mutex.clone();
        async move { mutex.lock().await.expect("lock") }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiter.is_finished());
    tokio::task::spawn_blocking(move || interrupt(&mut ctl))
        .await
        .expect("join");
    let guard = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("granted after etcdctl unlocked")
        .expect("task");
    guard.release().await.expect("release");

    // Contention: two lockkeeper sessions and a series of etcdctl processes, 0 overlaps.
    let inside = Arc::new(AtomicUsize::new(0));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let enter = |inside: &AtomicUsize, overlaps: &AtomicUsize| {
        if inside.fetch_add(1, Ordering::SeqCst) != 0 {
            overlaps.fetch_add(1, Ordering::SeqCst);
        }
    };
    let ctl_rounds = {
        let (inside, overlaps, endpoint) =
            (Arc::clone(&inside), Arc::clone(&overlaps), endpoint.clone());
        tokio::task::spawn_blocking(move || {
            let mut rounds = 0;
            for _ in 0..6 {
                let mut ctl = etcdctl(&endpoint, &["lock", "shared"]);
                let key = ctl.next_line(Duration::from_secs(30));
                assert!(key.starts_with("shared/"));
                enter(&inside, &overlaps);
                std::thread::sleep(Duration::from_millis(30));
                // Out before the SIGINT: etcdctl unlocks on it, before it exits, so from here
                // on a lockkeeper grant is legitimate. [key printed, SIGINT] lies within
                // etcdctl's hold, as [lock() returned, release()] within lockkeeper's: an
                // overlap of those is an overlap of the holds.
                inside.fetch_sub(1, Ordering::SeqCst);
                interrupt(&mut ctl);
                rounds += 1;
            }
            rounds
        })
    };
    let mut tasks = Vec::new();
    for _ in 0..2 {
        let mutex = session(&etcd).await.mutex("shared").expect("mutex");
        let (inside, overlaps) = (Arc::clone(&inside), Arc::clone(&overlaps));
        tasks.push(tokio::spawn(async move {
            for _ in 0..8 {
                let guard = mutex.lock().await.expect("lock");
                enter(&inside, &overlaps);
                tokio::time::sleep(Duration::from_millis(30)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                guard.release().await.expect("release");
            }
        }));
    }
    for task in tasks {
        task.await.expect("lockkeeper task");
    }
    assert_eq!(ctl_rounds.await.expect("etcdctl rounds"), 6);
    assert_eq!(
        overlaps.load(Ordering::SeqCst),
        0,
        "lockkeeper and etcdctl overlapped"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_elect_and_lockkeeper_agree_on_the_leader() {
    let etcd = Etcd::start();
    let endpoint = etcd.endpoint();
    let a = session(&etcd).await;
    let election = a.election("leader").expect("election");
    let leadership = election.campaign("lockkeeper-a").await.expect("campaign");

    // etcdctl's observer names lockkeeper's leader, and follows a proclamation.
    let mut listen = etcdctl(&endpoint, &["elect", "--listen", "leader"]);
    let line = Duration::from_secs(10);
    assert_eq!(listen.next_line_async(line).await, leadership.key());
    assert_eq!(listen.next_line_async(line).await, "lockkeeper-a");
    leadership
        .proclaim("lockkeeper-a2")
        .await
        .expect("proclaim");
    listen.next_line_async(line).await; // the key again
    assert_eq!(listen.next_line_async(line).await, "lockkeeper-a2");

    // An etcdctl candidate waits behind lockkeeper's leader and wins when it resigns.
    let mut candidate = etcdctl(&endpoint, &["elect", "leader", "etcdctl-b"]);
    let early = candidate
        .line_within_async(Duration::from_millis(700))
        .await;
    assert_eq!(
        early, None,
        "etcdctl must not be elected while lockkeeper leads"
    );
    let token_a = leadership.fencing_token();
    leadership.resign().await.expect("resign");
    let elected_key = candidate.next_line_async(line).await;
    assert_eq!(candidate.next_line_async(line).await, "etcdctl-b");

    // lockkeeper's leader() and observer name etcdctl's leader.
    let leader = election
        .leader()
        .await
        .expect("leader")
        .expect("someone leads");
    assert_eq!(leader.value, b"etcdctl-b");
    assert_eq!(leader.key, elected_key);
    assert!(leader.token > token_a);
    let mut observer = election.observe();
    let observed = observer.next().await.expect("observe");
    assert_eq!(observed.value, b"etcdctl-b");
    // A lockkeeper candidate waits for etcdctl, and is elected when it resigns (SIGINT).
    let b = session(&etcd).await;
    let campaign = tokio::spawn({
        let election = b.election("leader").expect("election");
        async move { election.campaign("lockkeeper-b").await.expect("campaign") }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!campaign.is_finished());
    tokio::task::spawn_blocking(move || interrupt(&mut candidate))
        .await
        .expect("join");
    let won = tokio::time::timeout(Duration::from_secs(10), campaign)
        .await
        .expect("elected after etcdctl resigned")
        .expect("task");
    let next = tokio::time::timeout(Duration::from_secs(10), observer.next())
        .await
        .expect("the observer follows")
        .expect("observe");
    assert_eq!(next.value, b"lockkeeper-b");
    assert_eq!(next.key, won.key());
    let mut last = None;
    while let Some(line) = listen.line_within_async(Duration::from_secs(5)).await {
        let done = line == "lockkeeper-b";
        last = Some(line);
        if done {
            break;
        }
    }
    assert_eq!(
        last.as_deref(),
        Some("lockkeeper-b"),
        "etcdctl --listen follows"
    );
    won.resign().await.expect("resign");
}

/// `etcdctl lock NAME -- CMD` runs CMD while it holds the lock. CMD and the lockkeeper holders
/// each create one marker directory while inside (`mkdir` fails if it exists) and remove it
/// before leaving, so any overlap makes a `mkdir` fail on one side or the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_lock_with_a_command_and_lockkeeper_exclude_each_other() {
    let etcd = Etcd::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let marker = dir.path().join("inside");
    let script = format!(
        "mkdir {0} || exit 99; sleep 0.03; rmdir {0}",
        marker.display()
    );
    let ctl_runs = {
        let (endpoint, script) = (etcd.endpoint(), script.clone());
        tokio::task::spawn_blocking(move || {
            let mut failures = Vec::new();
            for _ in 0..6 {
                if let Err(err) = lockkeeper_testkit::etcdctl(
                    std::slice::from_ref(&endpoint),
                    &["lock", "marked", "--", "sh", "-c", &script],
                ) {
                    failures.push(err);
                }
            }
            failures
        })
    };
    let overlaps = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..2 {
        let mutex = session(&etcd).await.mutex("marked").expect("mutex");
        let (marker, overlaps) = (marker.clone(), Arc::clone(&overlaps));
        tasks.push(tokio::spawn(async move {
            for _ in 0..8 {
                let guard = mutex.lock().await.expect("lock");
                let made = std::fs::create_dir(&marker).is_ok();
                if !made {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                tokio::time::sleep(Duration::from_millis(30)).await;
                if made {
                    std::fs::remove_dir(&marker).expect("rmdir");
                }
                guard.release().await.expect("release");
            }
        }));
    }
    for task in tasks {
        task.await.expect("lockkeeper task");
    }
    let failures = ctl_runs.await.expect("etcdctl runs");
    assert!(
        failures.is_empty(),
        "etcdctl's command found someone inside: {failures:?}"
    );
    assert_eq!(
        overlaps.load(Ordering::SeqCst),
        0,
        "lockkeeper found etcdctl's command inside"
    );
}
