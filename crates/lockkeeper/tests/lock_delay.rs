//! Lock-delay, measured: after a holder *failed* nobody is granted the lock before the delay
//! has passed since the failure was visible; after a clean release by the holder the next
//! holder is granted at once, well under the delay. A holder given up at its maximum hold time
//! is still at work: the next holder waits the delay out, as after a failure.
//!
//! ZooKeeper failures: the holder's node deleted behind its back (as a forced revocation
//! does), and the holder's session expired behind the partition proxy. Redis failure: the
//! holder's lease lapsed. ZooKeeper bodies run on Keeper and Apache ZooKeeper; the Curator
//! check runs unmodified Curator 5.4 (`curator/Driver.java`) against both.

#[allow(dead_code)] // each test binary uses its own part of the JVM driver
#[path = "curator/jvm.rs"]
mod jvm;
mod support;

use std::time::Duration;

use lockkeeper::LockOptions;
use lockkeeper::redis::Redis;
use lockkeeper::zk::Session;
use lockkeeper_testkit::{RedisServer, both};
use support::{
    Partition, children, dir_with_perms, for_each_backend, session, wait_children, wait_watches,
};
use tokio::task::JoinHandle;
use tokio::time::{Instant, timeout};

const DELAY: Duration = Duration::from_millis(1500);
/// "At once": a clean handover must come well under the delay.
const PROMPT: Duration = Duration::from_millis(375);
/// A watch event reaches two sessions of this process a few milliseconds apart: when the
/// failure is seen by an observer rather than caused by the test, the waiter may have seen it
/// this much earlier.
const SKEW: Duration = Duration::from_millis(25);
const STEP: Duration = Duration::from_secs(60);

/// A waiter with lock-delay on `path`, queued before this returns; resolves to when it was
/// granted (it releases at once).
async fn waiter(
    session: Session,
    observer: &Session,
    path: &'static str,
    queued: usize,
) -> JoinHandle<Instant> {
    let task = tokio::spawn(async move {
        let mutex = session
            .mutex(path)
            .unwrap()
            .with_options(LockOptions::new().lock_delay(DELAY))
            .unwrap();
        let guard = mutex.lock().await.expect("waiter's lock");
        let at = Instant::now();
        guard.release().await.expect("waiter's release");
        at
    });
    wait_children(observer, path, queued).await;
    task
}

async fn granted(task: JoinHandle<Instant>) -> Instant {
    timeout(STEP, task)
        .await
        .expect("the waiter was granted")
        .expect("waiter task")
}

fn at_least(what: &str, granted: Instant, failed: Instant, delay: Duration) {
    let after = granted.saturating_duration_since(failed);
    eprintln!("{what}: granted {after:?} after the failure was visible");
    assert!(
        granted >= failed + delay,
        "{what}: granted {after:?} after the failure, before the delay {delay:?}"
    );
    assert!(
        after < delay + Duration::from_secs(5),
        "{what}: waited {after:?}"
    );
}

fn promptly(what: &str, granted: Instant, released: Instant) {
    let after = granted.saturating_duration_since(released);
    eprintln!("{what}: granted {after:?} after the clean release");
    assert!(
        after < PROMPT,
        "{what}: granted {after:?} after a clean release"
    );
}

#[tokio::test]
async fn zk_a_deleted_holder_delays_waiters_and_fresh_arrivals() {
    for_each_backend(|connect| async move {
        let path = "/lock-delay/deleted";
        let holder = session(&connect).await;
        let observer = session(&connect).await;
        let mutex = holder
            .mutex(path)
            .unwrap()
            .with_options(LockOptions::new().lock_delay(DELAY))
            .unwrap();

        // A queued waiter.
        let guard = mutex.lock().await.expect("lock");
        let waiting = waiter(session(&connect).await, &observer, path, 2).await;
        let deleted = Instant::now();
        observer
            .client()
            .unwrap()
            .delete(guard.node(), None)
            .await
            .expect("delete the holder's node");
        timeout(STEP, guard.lost())
            .await
            .expect("the holder hears of it");
        at_least("queued waiter", granted(waiting).await, deleted, DELAY);
        drop(guard);

        // A waiter that arrives after the failure: a try is refused during the delay.
        let guard = mutex.lock().await.expect("lock again");
        let deleted = Instant::now();
        observer
            .client()
            .unwrap()
            .delete(guard.node(), None)
            .await
            .expect("delete the holder's node");
        let fresh = session(&connect)
            .await
            .mutex(path)
            .unwrap()
            .with_options(LockOptions::new().lock_delay(DELAY))
            .unwrap();
        assert!(
            fresh.try_lock().await.expect("try_lock").is_none(),
            "a try right after the failure was granted"
        );
        let taken = fresh.lock().await.expect("fresh lock");
        at_least("fresh arrival", Instant::now(), deleted, DELAY);
        taken.release().await.expect("release");
        drop(guard);
    })
    .await;
}

/// A grant with lock-delay is reported only once the directory's record names the holder: a
/// waiter arriving after that holder failed learns of the failure from that line alone. Here the
/// directory's ACL lets anyone list it and create and delete lock nodes in it, but not write its
/// data: the lock is refused with the server's error, and the node it made is gone.
#[tokio::test]
async fn zk_a_grant_its_record_cannot_name_is_refused() {
    use lockkeeper_zk_client::perms::{CREATE, DELETE, READ};
    for_each_backend(|connect| async move {
        let path = "/lock-delay-unrecorded";
        let session = session(&connect).await;
        dir_with_perms(&session, path, READ | CREATE | DELETE).await;
        let mutex = session
            .mutex(path)
            .unwrap()
            .with_options(LockOptions::new().lock_delay(DELAY))
            .unwrap();
        match mutex.lock_timeout(STEP).await {
            Err(lockkeeper::Error::Zk(lockkeeper_zk_client::Error::NoAuth)) => {}
            other => panic!("a grant whose record cannot be written: {other:?}"),
        }
        assert_eq!(children(&session, path).await, Vec::<String>::new());
        // Without lock-delay there is no record to write: the same directory grants.
        let plain = session.mutex(path).unwrap();
        let guard = plain
            .lock_timeout(STEP)
            .await
            .expect("lock without lock-delay");
        guard.expect("granted").release().await.expect("release");
    })
    .await;
}

/// A waiter that watched its predecessor take over (the node two ahead released cleanly)
/// times the predecessor's later failure from the failure, not from the handoff it saw: after
/// a hold longer than the delay, the delay is still waited out in full.
#[tokio::test]
async fn zk_a_failure_after_a_long_hold_is_timed_from_the_failure() {
    for_each_backend(|connect| async move {
        let path = "/lock-delay/long-hold";
        let observer = session(&connect).await;
        let first = session(&connect).await;
        let guard = first
            .mutex(path)
            .unwrap()
            .with_options(LockOptions::new().lock_delay(DELAY))
            .unwrap()
            .lock()
            .await
            .expect("lock");
        let second = session(&connect).await;
        let next = second
            .mutex(path)
            .unwrap()
            .with_options(LockOptions::new().lock_delay(DELAY))
            .unwrap();
        let taking_over = tokio::spawn(async move { next.lock().await.expect("second lock") });
        wait_children(&observer, path, 2).await;
        let waiting = waiter(session(&connect).await, &observer, path, 3).await;
        // The holder's own watch, the second's on it, and the waiter's on both ahead of it.
        if !support::is_ensemble(&connect) {
            wait_watches(&connect, 4).await;
        }
        guard.release().await.expect("clean release");
        let holding = timeout(STEP, taking_over)
            .await
            .expect("the second takes over")
            .expect("second's task");
        // Longer than the delay: a delay timed from the handoff would be over already.
        tokio::time::sleep(DELAY + DELAY / 2).await;
        let deleted = Instant::now();
        observer
            .client()
            .unwrap()
            .delete(holding.node(), None)
            .await
            .expect("delete the second holder's node");
        at_least("waiter", granted(waiting).await, deleted, DELAY);
        drop(holding);
        drop(second);
    })
    .await;
}

#[tokio::test]
async fn zk_an_expired_holder_delays_the_next_grant() {
    for_each_backend(|connect| async move {
        let path = "/lock-delay/expired";
        let partition = Partition::start(&connect).await;
        let holder = session(&partition.connect_string()).await;
        let observer = session(&connect).await;
        let guard = holder
            .mutex(path)
            .unwrap()
            .with_options(LockOptions::new().lock_delay(DELAY))
            .unwrap()
            .lock()
            .await
            .expect("lock");
        let waiting = waiter(session(&connect).await, &observer, path, 2).await;
        let (_, _, watch) = observer
            .client()
            .unwrap()
            .get_and_watch_data(guard.node())
            .await
            .expect("watch the holder's node");
        partition.cut();
        // The server expires the silent session (4 s) and deletes its node.
        timeout(STEP, watch.changed())
            .await
            .expect("the holder's node went");
        let seen = Instant::now();
        at_least("after expiry", granted(waiting).await + SKEW, seen, DELAY);
        drop(guard);
    })
    .await;
}

#[tokio::test]
async fn zk_a_clean_release_hands_over_at_once_and_the_maximum_hold_time_waits_the_delay() {
    for_each_backend(|connect| async move {
        let path = "/lock-delay/clean";
        let holder = session(&connect).await;
        let observer = session(&connect).await;
        let mutex = holder
            .mutex(path)
            .unwrap()
            .with_options(LockOptions::new().lock_delay(DELAY))
            .unwrap();

        let guard = mutex.lock().await.expect("lock");
        let waiting = waiter(session(&connect).await, &observer, path, 2).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        let released = Instant::now();
        guard.release().await.expect("release");
        promptly("released", granted(waiting).await, released);

        let capped = mutex
            .with_options(LockOptions::new().max_hold(Duration::from_millis(500)))
            .unwrap();
        let guard = capped.lock().await.expect("lock");
        let waiting = waiter(session(&connect).await, &observer, path, 2).await;
        timeout(STEP, guard.lost())
            .await
            .expect("maximum hold time");
        let fired = Instant::now();
        // The timer deletes the node at the instant `lost()` fires on this side: the waiter
        // cannot see it gone sooner than that, less the wake-ups' skew.
        at_least(
            "maximum hold time",
            granted(waiting).await + SKEW,
            fired,
            DELAY,
        );
    })
    .await;
}

/// Nodes that go without failing do not delay anybody: a waiter ahead that gives up, and
/// readers releasing at the same moment (their records do not overwrite each other).
#[tokio::test]
async fn zk_waiters_giving_up_and_racing_reader_releases_do_not_delay() {
    for_each_backend(|connect| async move {
        let path = "/lock-delay/gave-up";
        let observer = session(&connect).await;
        let mutex = |s: Session| {
            s.mutex(path)
                .unwrap()
                .with_options(LockOptions::new().lock_delay(DELAY))
                .unwrap()
        };
        let guard = mutex(session(&connect).await).lock().await.expect("lock");
        let impatient = mutex(session(&connect).await);
        let gives_up = tokio::spawn(async move {
            impatient
                .lock_timeout(Duration::from_millis(300))
                .await
                .expect("lock_timeout")
        });
        wait_children(&observer, path, 2).await;
        let waiting = waiter(session(&connect).await, &observer, path, 3).await;
        assert!(
            gives_up.await.unwrap().is_none(),
            "the impatient waiter was granted"
        );
        wait_children(&observer, path, 2).await;
        let released = Instant::now();
        guard.release().await.expect("release");
        promptly(
            "behind a waiter that gave up",
            granted(waiting).await,
            released,
        );

        let path = "/lock-delay/readers";
        let rw = |s: Session| {
            s.rw_lock(path)
                .unwrap()
                .with_options(LockOptions::new().lock_delay(DELAY))
                .unwrap()
        };
        let mut readers = Vec::new();
        for _ in 0..4 {
            readers.push(rw(session(&connect).await).read().await.expect("read"));
        }
        let writer = rw(session(&connect).await);
        let writing = tokio::spawn(async move {
            let guard = writer.write().await.expect("write");
            let at = Instant::now();
            guard.release().await.expect("release");
            at
        });
        wait_children(&observer, path, 5).await;
        let released = Instant::now();
        let releases = readers.into_iter().map(|r| tokio::spawn(r.release()));
        for release in releases {
            release.await.unwrap().expect("release read");
        }
        promptly(
            "writer after racing readers",
            granted(writing).await,
            released,
        );
    })
    .await;
}

#[tokio::test]
async fn zk_rw_lock_readers_wait_out_a_failed_writer_and_writers_a_failed_reader() {
    for_each_backend(|connect| async move {
        let path = "/lock-delay/rw";
        let observer = session(&connect).await;
        for writer_fails in [true, false] {
            let holder = session(&connect)
                .await
                .rw_lock(path)
                .unwrap()
                .with_options(LockOptions::new().lock_delay(DELAY))
                .unwrap();
            let guard = if writer_fails {
                holder.write().await
            } else {
                holder.read().await
            }
            .expect("lock");
            let next = session(&connect)
                .await
                .rw_lock(path)
                .unwrap()
                .with_options(LockOptions::new().lock_delay(DELAY))
                .unwrap();
            let waiting = tokio::spawn(async move {
                let guard = if writer_fails {
                    next.read().await
                } else {
                    next.write().await
                }
                .expect("next");
                let at = Instant::now();
                guard.release().await.expect("release");
                at
            });
            wait_children(&observer, path, 2).await;
            let deleted = Instant::now();
            observer
                .client()
                .unwrap()
                .delete(guard.node(), None)
                .await
                .expect("delete");
            let what = if writer_fails {
                "reader after a failed writer"
            } else {
                "writer after a failed reader"
            };
            at_least(what, granted(waiting).await, deleted, DELAY);
            drop(guard);
        }
    })
    .await;
}

/// A Curator holder never writes the release record: a lockkeeper waiter with lock-delay waits
/// the delay after each of its releases. A Curator waiter behind a lockkeeper holder with
/// lock-delay is not confused by the record (it lives in the lock directory's data) and gets
/// the lock at once after a release.
#[test]
fn curator_holders_are_delayed_and_curator_waiters_unaffected() {
    for server in both() {
        let on = server.name();
        let path = "/lock-delay/curator";
        let mut curator = jvm::Jvm::spawn("Driver", &[&server.connect_string()]);
        curator.expect_line("READY", Duration::from_secs(120));
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let connect = server.connect_string();
        let observer = rt.block_on(session(&connect));

        assert_eq!(
            curator.request(&format!("acquire mutex {path}"), STEP),
            "OK true"
        );
        let second = rt.block_on(session(&connect));
        let waiting = rt.block_on(waiter(second, &observer, path, 2));
        let released = Instant::now();
        assert_eq!(
            curator.request(&format!("release mutex {path}"), STEP),
            "OK"
        );
        let at = rt.block_on(granted(waiting));
        at_least(
            &format!("after Curator's release, on {on}"),
            at,
            released,
            DELAY,
        );

        let mutex = rt
            .block_on(session(&connect))
            .mutex(path)
            .unwrap()
            .with_options(LockOptions::new().lock_delay(DELAY))
            .unwrap();
        let guard = rt.block_on(mutex.lock()).expect("lock");
        curator.send(&format!("acquire mutex {path}"));
        rt.block_on(wait_children(&observer, path, 2));
        let released = Instant::now();
        rt.block_on(guard.release()).expect("release");
        assert_eq!(
            curator.next_line(STEP),
            "OK true",
            "Curator's waiter, on {on}"
        );
        promptly(
            &format!("Curator after lockkeeper's release, on {on}"),
            Instant::now(),
            released,
        );
        assert_eq!(
            curator.request(&format!("release mutex {path}"), STEP),
            "OK"
        );
        assert_eq!(curator.request("quit", STEP), "BYE");
        let left = rt.block_on(support::children(&observer, path));
        assert!(left.is_empty(), "lock nodes left on {on}: {left:?}");
    }
}

async fn redis(server: &RedisServer) -> Redis {
    Redis::connect(&server.url()).await.expect("connect")
}

#[tokio::test]
async fn redis_a_lapsed_lease_delays_the_next_holder() {
    let server = RedisServer::start();
    let holder = redis(&server).await;
    let other = redis(&server).await;
    let lease = Duration::from_millis(500);
    let guard = holder
        .lease_lock("lapsed")
        .with_options(LockOptions::new().lease(lease).lock_delay(DELAY))
        .unwrap()
        .lock()
        .await
        .expect("lock");
    // The holder stops trusting its lease here: from then on it has failed (a paused or cut-off
    // holder whose lease ran out).
    let lapsed = guard.valid_until().expect("held");
    let taken = other
        .lease_lock("lapsed")
        .with_options(LockOptions::new().lock_delay(DELAY))
        .unwrap()
        .lock()
        .await
        .expect("next");
    assert!(!guard.is_held());
    at_least("lease lock", Instant::now(), lapsed, DELAY);
    taken.release().await.expect("release");
    drop(guard);

    let guard = holder
        .reentrant_lock("lapsed-reentrant")
        .with_options(LockOptions::new().lease(lease).lock_delay(DELAY))
        .unwrap()
        .lock()
        .await
        .expect("lock");
    let lapsed = guard.valid_until().expect("held");
    let taken = other
        .reentrant_lock("lapsed-reentrant")
        .lock()
        .await
        .expect("next");
    at_least("reentrant lock", Instant::now(), lapsed, DELAY);
    taken.release().await.expect("release");
    drop(guard);

    let guard = holder
        .rw_lock("lapsed-rw")
        .with_options(LockOptions::new().lease(lease).lock_delay(DELAY))
        .unwrap()
        .write()
        .await
        .expect("lock");
    let lapsed = guard.valid_until().expect("held");
    let taken = other.rw_lock("lapsed-rw").read().await.expect("next");
    at_least("rw lock", Instant::now(), lapsed, DELAY);
    taken.release().await.expect("release");
    drop(guard);

    let permit = holder
        .semaphore("lapsed-semaphore", 1)
        .with_options(LockOptions::new().lease(lease).lock_delay(DELAY))
        .unwrap()
        .acquire(1)
        .await
        .expect("acquire");
    let lapsed = permit.valid_until().expect("held");
    let taken = other
        .semaphore("lapsed-semaphore", 1)
        .acquire(1)
        .await
        .expect("next");
    at_least("semaphore", Instant::now(), lapsed, DELAY);
    taken.release().await.expect("release");
    drop(permit);
}

#[tokio::test]
async fn redis_a_clean_release_hands_over_at_once_renewals_keep_the_delay_and_the_maximum_hold_time_waits_it()
 {
    let server = RedisServer::start();
    let holder = redis(&server).await;
    let other = redis(&server).await;
    let lock = holder
        .lease_lock("clean")
        .with_options(
            LockOptions::new()
                .watchdog(Duration::from_millis(600))
                .lock_delay(DELAY),
        )
        .unwrap();

    let guard = lock.lock().await.expect("lock");
    let waiting = tokio::spawn({
        let lock = other.lease_lock("clean");
        async move {
            lock.lock()
                .await
                .expect("next")
                .release()
                .await
                .map(|()| Instant::now())
        }
    });
    // Renewed past a few lease periods, the key still outlives the lease by the delay.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let left = lock.remaining_lease().await.expect("pttl").expect("held");
    assert!(
        left > DELAY && left <= DELAY + Duration::from_millis(600),
        "PTTL {left:?}"
    );
    let released = Instant::now();
    guard.release().await.expect("release");
    let at = timeout(STEP, waiting)
        .await
        .expect("granted")
        .unwrap()
        .expect("next");
    promptly("lease lock", at, released);

    let guard = lock
        .clone()
        .with_options(LockOptions::new().max_hold(Duration::from_millis(500)))
        .unwrap()
        .lock()
        .await
        .expect("lock");
    let waiting = tokio::spawn({
        let lock = other.lease_lock("clean");
        async move {
            lock.lock()
                .await
                .expect("next")
                .release()
                .await
                .map(|()| Instant::now())
        }
    });
    timeout(STEP, guard.lost())
        .await
        .expect("maximum hold time");
    let fired = Instant::now();
    let at = timeout(STEP, waiting)
        .await
        .expect("granted")
        .unwrap()
        .expect("next");
    // The timer gives the lock up a moment after `lost()` fires on this side.
    at_least(
        "lease lock at the maximum hold time",
        at + SKEW,
        fired,
        DELAY,
    );
}

/// A holder that releases after its maximum hold time gave the lock up under lock-delay is
/// told `NotHeld`, and its release does not cut the delay short: the key, still holding its
/// token, is the server's record of the delay.
#[tokio::test]
async fn redis_a_release_after_the_maximum_hold_time_keeps_the_delay() {
    let server = RedisServer::start();
    let holder = redis(&server).await;
    let other = redis(&server).await;
    // A fixed lease far longer than the test: the key's TTL falls to the delay only when the
    // maximum hold time's timer sets it so.
    let lease = Duration::from_secs(60);
    let lock = holder
        .lease_lock("late-release")
        .with_options(
            LockOptions::new()
                .lease(lease)
                .max_hold(Duration::from_millis(300))
                .lock_delay(DELAY),
        )
        .unwrap();
    let guard = lock.lock().await.expect("lock");
    timeout(STEP, guard.lost())
        .await
        .expect("maximum hold time");
    // Wait for the timer's doing, then note when the key expires at the soonest: no sooner
    // than its TTL after the PTTL request was sent.
    let deadline = Instant::now() + STEP;
    let (sent, left) = loop {
        let sent = Instant::now();
        let left = lock.remaining_lease().await.expect("pttl");
        if let Some(left) = left.filter(|left| *left <= DELAY) {
            break (sent, left);
        }
        assert!(
            Instant::now() < deadline,
            "the timer never gave up the lock: PTTL {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert!(
        matches!(guard.release().await, Err(lockkeeper::Error::NotHeld)),
        "a release after the maximum hold time"
    );
    timeout(STEP, other.lease_lock("late-release").lock())
        .await
        .expect("granted")
        .expect("next")
        .release()
        .await
        .expect("release");
    // Redis expires keys to the millisecond: allow one.
    at_least(
        "lease lock released after its maximum hold time",
        Instant::now() + Duration::from_millis(1),
        sent,
        left,
    );
}
