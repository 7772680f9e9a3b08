//! ZooKeeper guards know their own deadline, and waiters know when their session has died.
//!
//! - `valid_until()` stays ahead of the clock while the session is healthy (a heartbeat moves
//!   it on even when the holder does nothing).
//! - A holder frozen with SIGSTOP past its session timeout, then resumed, answers
//!   `is_held() == false` at its very first check, although nobody has told it anything yet:
//!   its session expired and another process holds the lock.
//! - A waiter whose own session is cut off stops with an error within the session timeout and
//!   a tick, on every recipe, instead of waiting for a grant that can no longer come.

mod support;

use std::time::Duration;

use lockkeeper::Error;
use lockkeeper::zk::Session;
use lockkeeper_testkit::test_child::{self, ChildProcess};
use support::{Partition, for_each_backend, session, wait_children};
use tokio::time::Instant;

/// The session timeout every session of these tests asks for (the test servers' minimum).
const TIMEOUT: Duration = Duration::from_secs(4);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn valid_until_stays_ahead_while_the_session_is_healthy() {
    for_each_backend(|connect| async move {
        let holder = session(&connect).await;
        let guard = holder
            .mutex("/locks/deadline")
            .unwrap()
            .lock()
            .await
            .unwrap();
        let first = guard.valid_until().expect("held");
        let timeout = holder.session_timeout();
        assert!(
            first <= Instant::now() + timeout,
            "beyond the session timeout"
        );
        // Two whole session timeouts of doing nothing: the heartbeat keeps it ahead.
        let end = Instant::now() + timeout * 2;
        let mut last = first;
        while Instant::now() < end {
            tokio::time::sleep(Duration::from_millis(250)).await;
            assert!(guard.is_held(), "healthy and held");
            let until = guard.valid_until().expect("held");
            let ahead = until.saturating_duration_since(Instant::now());
            assert!(
                ahead >= timeout / 2,
                "only {ahead:?} ahead of a {timeout:?} session"
            );
            last = last.max(until);
        }
        assert!(
            last > first + timeout,
            "the deadline never moved on: {first:?} -> {last:?}"
        );
        guard.release().await.unwrap();
    })
    .await;
}

/// The child's part: take the lock, then check `is_held()` every 20 ms. When a check comes
/// long after the one before (the parent stopped us), that first check after the gap must say
/// not held, and `valid_until()` must be `None`; the exit code tells the parent.
async fn paused_holder_child() {
    let connect = std::env::var("ZK_CONNECT").expect("ZK_CONNECT");
    let holder = Session::builder(&connect)
        .session_timeout(TIMEOUT)
        .connect()
        .await
        .expect("child connects");
    let guard = holder.mutex("/locks/paused").unwrap().lock().await.unwrap();
    println!("holding");
    let mut before = std::time::Instant::now();
    let give_up = before + Duration::from_secs(120);
    while std::time::Instant::now() < give_up {
        std::thread::sleep(Duration::from_millis(20));
        let now = std::time::Instant::now();
        let gap = now - before;
        before = now;
        if gap > TIMEOUT * 2 {
            // The first look after the pause, before anything else has run on this task.
            let held = guard.is_held();
            let until = guard.valid_until();
            eprintln!("after a {gap:?} pause: is_held={held} valid_until={until:?}");
            std::process::exit(if !held && until.is_none() { 0 } else { 3 });
        }
        assert!(guard.is_held(), "held before the pause");
    }
    eprintln!("never paused");
    std::process::exit(4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_resumed_after_its_session_expired_knows_at_its_first_check() {
    if test_child::role().is_some() {
        return paused_holder_child().await;
    }
    for_each_backend(|connect| async move {
        let observer = session(&connect).await;
        let mut child = ChildProcess::spawn(
            "a_holder_resumed_after_its_session_expired_knows_at_its_first_check",
            "holder",
            &[("ZK_CONNECT", connect.clone())],
        );
        wait_children(&observer, "/locks/paused", 1).await;
        child.signal("STOP");
        // The server expires the frozen session and hands the lock on.
        let next = observer.mutex("/locks/paused").unwrap();
        let guard = next
            .lock_timeout(Duration::from_secs(60))
            .await
            .unwrap()
            .expect("granted once the frozen holder's session expired");
        // Leave the child frozen for longer than its session timeout in all.
        tokio::time::sleep(TIMEOUT).await;
        child.signal("CONT");
        assert!(
            tokio::task::spawn_blocking(move || child.wait_success(Duration::from_secs(60)))
                .await
                .unwrap(),
            "the resumed holder believed it still held the lock (see its stderr)"
        );
        assert!(guard.is_held());
        guard.release().await.unwrap();
    })
    .await;
}

/// Starts `wait` on a session behind a partition while `path` is held by someone else, cuts
/// the partition, and checks the wait ends with `SessionLost` within the session timeout plus
/// a tick of slack.
async fn a_cut_waiter_stops<W, F>(connect: &str, path: &str, queued: usize, wait: W)
where
    W: FnOnce(Session) -> F,
    F: Future<Output = lockkeeper::Result<()>> + Send + 'static,
{
    let partition = Partition::start(connect).await;
    let waiter = session(&partition.connect_string()).await;
    let observer = session(connect).await;
    let waiting = tokio::spawn(wait(waiter.clone()));
    wait_children(&observer, path, queued).await;
    let cut = Instant::now();
    partition.cut();
    let outcome = tokio::time::timeout(Duration::from_secs(60), waiting)
        .await
        .expect("the waiter stopped")
        .expect("the waiting task did not panic");
    let took = cut.elapsed();
    assert!(
        matches!(outcome, Err(Error::SessionLost)),
        "{path}: {outcome:?}"
    );
    let bound = waiter.session_timeout() + Duration::from_secs(2);
    assert!(
        took <= bound,
        "{path}: the waiter stopped {took:?} after the cut (bound {bound:?})"
    );
    drop(partition);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_waiter_whose_session_is_cut_off_stops_with_an_error_on_every_recipe() {
    for_each_backend(|connect| async move {
        let holder = session(&connect).await;

        let mutex = holder
            .mutex("/locks/cut-mutex")
            .unwrap()
            .lock()
            .await
            .unwrap();
        a_cut_waiter_stops(&connect, "/locks/cut-mutex", 2, |s| async move {
            s.mutex("/locks/cut-mutex")?.lock().await.map(drop)
        })
        .await;
        mutex.release().await.unwrap();

        let rw = holder.rw_lock("/locks/cut-rw").unwrap();
        let write = rw.write().await.unwrap();
        a_cut_waiter_stops(&connect, "/locks/cut-rw", 2, |s| async move {
            s.rw_lock("/locks/cut-rw")?.read().await.map(drop)
        })
        .await;
        write.release().await.unwrap();

        let leases = holder
            .semaphore("/semaphores/cut", 1)
            .unwrap()
            .acquire(1)
            .await
            .unwrap();
        a_cut_waiter_stops(&connect, "/semaphores/cut/leases", 2, |s| async move {
            s.semaphore("/semaphores/cut", 1)?
                .acquire(1)
                .await
                .map(drop)
        })
        .await;
        leases.release().await.unwrap();

        let simple = holder
            .simple_lock("/locks/cut-simple")
            .unwrap()
            .lock()
            .await
            .unwrap();
        // A simple lock's waiters leave no node: the holder's is the only one.
        a_cut_waiter_stops(&connect, "/locks/cut-simple", 1, |s| async move {
            s.simple_lock("/locks/cut-simple")?.lock().await.map(drop)
        })
        .await;
        simple.release().await.unwrap();
    })
    .await;
}
