//! The etcd mutex on a real single-member etcd: grants and increasing fencing tokens, releases
//! whose answers are late or lost, waiting woken by the release, timeouts and cancellation that
//! leave no key, exclusion between tasks and between handles of one session, and waiters that
//! stop when their session is lost.
#![cfg(feature = "etcd")]

mod support_etcd;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use lockkeeper::Error;
use lockkeeper::LockOptions;
use lockkeeper::etcd::{Mutex, Session};
use lockkeeper_testkit::{Etcd, Proxy, etcdctl};
use support_etcd::{keys, ranges_served, revoke_lease, session, session_on};

/// The create revision of `key`, as etcdctl shows it.
fn create_revision(etcd: &Etcd, key: &str) -> Option<u64> {
    etcdctl(&[etcd.endpoint()], &["get", key, "-w", "fields"])
        .expect("etcdctl get")
        .lines()
        .find_map(|l| l.strip_prefix("\"CreateRevision\" : ")?.trim().parse().ok())
}

#[tokio::test]
async fn grants_release_and_increasing_tokens() {
    let etcd = Etcd::start();
    let a = session(&etcd).await;
    let b = session(&etcd).await;
    let mutex = a.mutex("orders").expect("mutex");

    let first = mutex.lock().await.expect("lock");
    assert!(first.is_held());
    assert_eq!(first.key(), format!("orders/{:x}", a.lease_id()));
    assert_eq!(keys(&etcd, "orders/"), vec![first.key()], "Go's layout");
    let until = first.valid_until().expect("held");
    assert!(until > tokio::time::Instant::now() + Duration::from_secs(3));
    let other = b.mutex("orders").expect("mutex");
    assert!(other.try_lock().await.expect("try_lock").is_none(), "busy");
    assert_eq!(
        keys(&etcd, "orders/"),
        vec![first.key()],
        "try_lock left no key"
    );
    let t1 = first.fencing_token();
    first.release().await.expect("release");
    assert!(keys(&etcd, "orders/").is_empty(), "released key is gone");

    let second = other.try_lock().await.expect("try_lock").expect("free");
    assert!(second.fencing_token() > t1, "tokens strictly increase");
    let t2 = second.fencing_token();
    drop(second); // released in a background task
    let third = mutex
        .lock_timeout(Duration::from_secs(5))
        .await
        .expect("lock_timeout")
        .expect("freed by the dropped guard");
    assert!(third.fencing_token() > t2);
    third.release().await.expect("release");
}

#[tokio::test]
async fn release_of_a_lost_lock_is_not_held() {
    let etcd = Etcd::start();
    let a = session(&etcd).await;
    let guard = a.mutex("gone").expect("mutex").lock().await.expect("lock");
    etcdctl(&[etcd.endpoint()], &["del", &guard.key()]).expect("etcdctl del");
    tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("lost() fires when the key is deleted");
    assert!(!guard.is_held());
    assert!(guard.valid_until().is_none());
    assert!(matches!(guard.release().await, Err(Error::NotHeld)));
}

/// A release is a compare-and-delete on the key's create revision, and etcd's answer decides:
/// a key deleted behind the holder, whose deletion the holder has not yet seen, is `NotHeld`.
#[tokio::test]
async fn a_release_of_a_key_deleted_unseen_is_not_held() {
    let etcd = Etcd::start();
    let proxy = Proxy::start(&etcd.addr().to_string()).await;
    let a = session_on(&proxy.connect_string()).await;
    let guard = a
        .mutex("unseen")
        .expect("mutex")
        .lock()
        .await
        .expect("lock");
    // The deletion's event is held back with every other reply, so the guard cannot see it.
    proxy.hold_replies();
    etcdctl(&[etcd.endpoint()], &["del", &guard.key()]).expect("etcdctl del");
    assert!(
        guard.is_held(),
        "the deletion is not seen while replies are held"
    );
    // The release is sent at its first poll; its answer comes 100 ms later, well within one
    // attempt's patience (1 s), so it is the first attempt's answer.
    let (released, ()) = tokio::join!(guard.release(), async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        proxy.let_replies_through();
    });
    assert!(matches!(released, Err(Error::NotHeld)), "{released:?}");
}

/// A release whose answer is late is sent again, and the retry that finds the key gone counts
/// as the release: the attempt whose answer was late deleted it.
#[tokio::test]
async fn a_release_whose_answer_is_late_is_sent_again_and_counts() {
    let etcd = Etcd::start();
    let proxy = Proxy::start(&etcd.addr().to_string()).await;
    let a = session_on(&proxy.connect_string()).await;
    let guard = a.mutex("late").expect("mutex").lock().await.expect("lock");
    // Replies held past one attempt's patience (1 s): the first attempt deletes the key and is
    // not answered in time; the next one finds the key gone.
    proxy.hold_replies();
    let (released, ()) = tokio::join!(guard.release(), async {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        proxy.let_replies_through();
    });
    released.expect("a release whose first answer was late");
    assert!(keys(&etcd, "late/").is_empty(), "the key is gone");
}

/// With etcd out of reach, a release is sent again for a bounded time (10 s), then answers
/// with etcd's error: never retried for ever, never called released.
#[tokio::test]
async fn a_release_with_etcd_out_of_reach_ends_with_the_error() {
    let etcd = Etcd::start();
    let proxy = Proxy::start(&etcd.addr().to_string()).await;
    // A lease that outlives the release's attempts, so the release is tried, not known lost.
    let a = Session::builder(&proxy.connect_string())
        .ttl(Duration::from_secs(60))
        .connect()
        .await
        .expect("session");
    let guard = a.mutex("cut").expect("mutex").lock().await.expect("lock");
    proxy.cut();
    let released = tokio::time::timeout(Duration::from_secs(60), guard.release())
        .await
        .expect("the release gives up within a minute");
    assert!(matches!(released, Err(Error::Etcd(_))), "{released:?}");
}

/// A key of the session's own left in line (a release that never got through) is cleared and
/// the place taken anew, with a new create revision: no two grants share a fencing token.
#[tokio::test]
async fn a_stale_key_of_the_session_is_cleared_before_its_place_is_taken() {
    let etcd = Etcd::start();
    let a = session(&etcd).await;
    let key = format!("stale/{:x}", a.lease_id());
    let lease = format!("--lease={:x}", a.lease_id());
    etcdctl(&[etcd.endpoint()], &["put", &lease, &key, ""]).expect("etcdctl put");
    let stale = create_revision(&etcd, &key).expect("the stale key's revision");
    let guard = a.mutex("stale").expect("mutex").lock().await.expect("lock");
    assert_eq!(guard.key(), key);
    let granted = create_revision(&etcd, &key).expect("the granted key's revision");
    assert!(
        granted > stale,
        "granted at {granted}, the stale key was {stale}"
    );
    guard.release().await.expect("release");
}

#[tokio::test]
async fn a_release_wakes_the_waiter_and_timeouts_leave_no_key() {
    let etcd = Etcd::start();
    let a = session(&etcd).await;
    let b = session(&etcd).await;
    let c = session(&etcd).await;
    let held = a.mutex("line").expect("mutex").lock().await.expect("lock");

    let started = Instant::now();
    let timed_out = b
        .mutex("line")
        .expect("mutex")
        .lock_timeout(Duration::from_millis(300))
        .await
        .expect("lock_timeout");
    assert!(timed_out.is_none());
    assert!(started.elapsed() < Duration::from_secs(3));
    // A dropped lock() future is cancel-safe as well.
    let waiting = c.mutex("line").expect("mutex");
    let dropped = tokio::time::timeout(Duration::from_millis(300), waiting.lock()).await;
    assert!(dropped.is_err(), "still waiting");
    let deadline = Instant::now() + Duration::from_secs(5);
    while keys(&etcd, "line/").len() > 1 {
        assert!(
            Instant::now() < deadline,
            "abandoned keys: {:?}",
            keys(&etcd, "line/")
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(keys(&etcd, "line/"), vec![held.key()]);

    let waiter = tokio::spawn({
        let mutex = b.mutex("line").expect("mutex");
        async move {
            let guard = mutex.lock().await.expect("lock");
            let token = guard.fencing_token();
            guard.release().await.expect("release");
            token
        }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiter.is_finished(), "waits while held");
    let t = held.fencing_token();
    let released = Instant::now();
    held.release().await.expect("release");
    let token = waiter.await.expect("waiter");
    assert!(token > t);
    assert!(
        released.elapsed() < Duration::from_secs(2),
        "woken by the release"
    );
}

#[tokio::test]
async fn tasks_and_handles_of_one_session_exclude_each_other() {
    let etcd = Etcd::start();
    let sessions = [session(&etcd).await, session(&etcd).await];
    // Two tasks per session: the second one shares the session's key name.
    let mutexes = (0..4).map(|i| sessions[i % 2].mutex("shared").expect("mutex"));
    take_turns_one_at_a_time(mutexes.collect(), 5, Duration::from_millis(5)).await;
}

/// Each of `mutexes` in a task of its own takes `turns` turns, holding each for `hold`; asserts
/// that no two tasks ever held at once and that every grant had its own token.
async fn take_turns_one_at_a_time(mutexes: Vec<Mutex>, turns: usize, hold: Duration) {
    let inside = Arc::new(AtomicUsize::new(0));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for mutex in mutexes {
        let (inside, overlaps) = (Arc::clone(&inside), Arc::clone(&overlaps));
        tasks.push(tokio::spawn(async move {
            let mut tokens = Vec::new();
            for _ in 0..turns {
                let guard = tokio::time::timeout(Duration::from_secs(20), mutex.lock())
                    .await
                    .expect("a grant within 20 s")
                    .expect("lock");
                if inside.fetch_add(1, Ordering::SeqCst) != 0 {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                tokio::time::sleep(hold).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                tokens.push(guard.fencing_token());
                guard.release().await.expect("release");
            }
            tokens
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.expect("task"));
    }
    assert_eq!(overlaps.load(Ordering::SeqCst), 0, "no two holders at once");
    let count = all.len();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), count, "every grant has its own token");
}

/// Handoffs while another client writes without pause, which is what puts a waiter's watches
/// in doubt (the store moves on between their opening and the check after them, so they are
/// opened again, then backed by reads): every grant still comes, one holder at a time, each
/// with its own token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handoffs_under_a_stream_of_other_writes_keep_one_holder() {
    let etcd = Etcd::start();
    let sessions = [
        session(&etcd).await,
        session(&etcd).await,
        session(&etcd).await,
    ];
    // The other client: a leader that proclaims a new value as fast as etcd takes it, one
    // write (a put of its key, outside the lock's prefix) per round trip.
    let noise = session(&etcd).await;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = tokio::spawn({
        let stop = Arc::clone(&stop);
        async move {
            let election = noise.election("noise").expect("election");
            let leadership = election.campaign("0").await.expect("campaign");
            let started = Instant::now();
            let mut writes = 0u32;
            // Bounded by a count and a time, whatever the handoffs do.
            while !stop.load(Ordering::SeqCst)
                && writes < 100_000
                && started.elapsed() < Duration::from_secs(60)
            {
                leadership
                    .proclaim(writes.to_string())
                    .await
                    .expect("noise write");
                writes += 1;
            }
            writes
        }
    });
    let mutexes = sessions.iter().map(|s| s.mutex("busy").expect("mutex"));
    take_turns_one_at_a_time(mutexes.collect(), 15, Duration::from_millis(2)).await;
    stop.store(true, Ordering::SeqCst);
    let writes = writer.await.expect("writer");
    assert!(writes > 0, "the other client wrote meanwhile");
}

#[tokio::test]
async fn a_waiter_whose_session_is_lost_stops_waiting() {
    let etcd = Etcd::start();
    let a = session(&etcd).await;
    let b = session(&etcd).await;
    let _held = a.mutex("stuck").expect("mutex").lock().await.expect("lock");
    let waiter = tokio::spawn({
        let mutex = b.mutex("stuck").expect("mutex");
        async move { mutex.lock().await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Revoking the lease behind the session's back: its keep-alive finds the lease gone.
    revoke_lease(&etcd, &b);
    let ended = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the waiter stops within the TTL")
        .expect("task");
    assert!(matches!(ended, Err(Error::SessionLost)), "{ended:?}");
    assert!(!b.is_alive());
    assert!(b.valid_until().is_none());
    assert!(matches!(
        b.mutex("other").expect("mutex").lock().await,
        Err(Error::SessionLost)
    ));
}

#[tokio::test]
async fn max_hold_gives_the_lock_up() {
    let etcd = Etcd::start();
    let a = session(&etcd).await;
    let mutex = a
        .mutex("bounded")
        .expect("mutex")
        .with_options(LockOptions::new().max_hold(Duration::from_millis(300)))
        .expect("max_hold");
    let guard = mutex.lock().await.expect("lock");
    let granted = Instant::now();
    tokio::time::timeout(Duration::from_secs(3), guard.lost())
        .await
        .expect("lost at the maximum hold time");
    assert!(granted.elapsed() >= Duration::from_millis(290));
    assert!(!guard.is_held());
    let b = session(&etcd).await;
    let next = b
        .mutex("bounded")
        .expect("mutex")
        .lock_timeout(Duration::from_secs(3))
        .await
        .expect("lock_timeout")
        .expect("released at the maximum hold time");
    assert!(next.fencing_token() > guard.fencing_token());
    assert!(matches!(guard.release().await, Err(Error::NotHeld)));
}

#[tokio::test]
async fn lock_delay_waits_after_a_failed_holder_only() {
    let etcd = Etcd::start();
    let delay = Duration::from_millis(1500);
    let a = session(&etcd).await;
    let b = session(&etcd).await;
    let mutex = |s: &Session| {
        s.mutex("ledger")
            .expect("mutex")
            .with_options(LockOptions::new().lock_delay(delay))
            .expect("delay")
    };

    // A clean release hands over at once.
    let held = mutex(&a).lock().await.expect("lock");
    let waiter = tokio::spawn({
        let m = mutex(&b);
        async move { m.lock().await.expect("lock") }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let released = Instant::now();
    held.release().await.expect("release");
    let next = waiter.await.expect("waiter");
    assert!(released.elapsed() < delay / 2, "clean release: no delay");
    next.release().await.expect("release");

    // A holder that fails (its lease revoked) keeps the queued waiter out for the delay.
    let held = mutex(&a).lock().await.expect("lock");
    let waiter = tokio::spawn({
        let m = mutex(&b);
        async move { m.lock().await.expect("lock") }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let failed = Instant::now();
    revoke_lease(&etcd, &a);
    let next = waiter.await.expect("waiter");
    assert!(failed.elapsed() >= delay, "waited {:?}", failed.elapsed());
    assert!(next.fencing_token() > held.fencing_token());
    drop(held);

    // A waiter arriving after the failure waits too (the record says `held`, the key is gone).
    next.release().await.expect("release");
    let c = session(&etcd).await;
    let guard = mutex(&c).lock().await.expect("lock");
    let d = session(&etcd).await;
    revoke_lease(&etcd, &c);
    drop(guard);
    let late = Instant::now();
    let got = mutex(&d).lock().await.expect("lock");
    assert!(
        late.elapsed() >= delay - Duration::from_millis(100),
        "late arrival waited {:?}",
        late.elapsed()
    );
    got.release().await.expect("release");
}

/// A lock-delay waiter that gives up leaves the holder's `held` entry alone: after that
/// holder fails, a late arrival still waits out the delay.
#[tokio::test]
async fn a_waiter_giving_up_keeps_the_delay_after_the_holder_fails() {
    let etcd = Etcd::start();
    let delay = Duration::from_millis(1500);
    let mutex = |s: &Session| {
        s.mutex("till")
            .expect("mutex")
            .with_options(LockOptions::new().lock_delay(delay))
            .expect("delay")
    };
    let holder = session(&etcd).await;
    let guard = mutex(&holder).lock().await.expect("lock");
    let quitter = session(&etcd).await;
    let gave_up = mutex(&quitter)
        .lock_timeout(Duration::from_millis(300))
        .await
        .expect("lock_timeout");
    assert!(gave_up.is_none(), "the lock is held");
    revoke_lease(&etcd, &holder);
    drop(guard);
    let late = session(&etcd).await;
    let arrived = Instant::now();
    let got = mutex(&late).lock().await.expect("lock");
    assert!(
        arrived.elapsed() >= delay - Duration::from_millis(100),
        "the late arrival waited only {:?}: the waiter that gave up erased the holder's entry",
        arrived.elapsed()
    );
    got.release().await.expect("release");
}

#[tokio::test]
async fn a_waiter_whose_key_is_deleted_takes_a_new_place() {
    let etcd = Etcd::start();
    let a = session(&etcd).await;
    let b = session(&etcd).await;
    let held = a.mutex("queue").expect("mutex").lock().await.expect("lock");
    let waiting = b.mutex("queue").expect("mutex");
    let key = waiting.key();
    let waiter = tokio::spawn(async move { waiting.lock().await.expect("lock") });
    let deadline = Instant::now() + Duration::from_secs(5);
    while keys(&etcd, "queue/").len() < 2 {
        assert!(Instant::now() < deadline, "the waiter never queued");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let first = create_revision(&etcd, &key).expect("the waiter's key");
    etcdctl(&[etcd.endpoint()], &["del", &key]).expect("etcdctl del");
    // The waiter notices at its next look (the next deletion ahead of it), so release.
    held.release().await.expect("release");
    let guard = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("granted on a new key")
        .expect("task");
    assert_eq!(guard.key(), key, "the same Go key name, created again");
    let again = create_revision(&etcd, &key).expect("the key again");
    assert!(
        again > first,
        "a new key: created at {again}, after {first}"
    );
    assert_eq!(guard.fencing_token().get(), again);
    guard.release().await.expect("release");
}

#[tokio::test]
async fn lost_watches_past_a_compaction() {
    let etcd = Etcd::start();
    let a = session(&etcd).await;
    let guard = a
        .mutex("compacted")
        .expect("mutex")
        .lock()
        .await
        .expect("lock");
    let ctl = |args: &[&str]| etcdctl(&[etcd.endpoint()], args).expect("etcdctl");
    for i in 0..5 {
        ctl(&["put", "filler", &i.to_string()]);
    }
    let revision = create_revision(&etcd, "filler").expect("filler") + 4;
    ctl(&["compact", &revision.to_string()]);
    // Watching from the grant's revision is refused now; lost() must not fire for that.
    let lost = tokio::time::timeout(Duration::from_millis(500), guard.lost()).await;
    assert!(lost.is_err(), "lost() fired although the key is there");
    assert!(guard.is_held());
    let watching = tokio::time::timeout(Duration::from_secs(5), guard.lost());
    let deleting = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        ctl(&["del", &guard.key()]);
    };
    let (lost, ()) = tokio::join!(watching, deleting);
    assert!(
        lost.is_ok(),
        "lost() fires when the key goes after the compaction"
    );
    assert!(!guard.is_held());
}

/// A holder given up at its maximum hold time is still at work: under lock-delay the next
/// holder waits the delay out, as after a failure (a clean release would hand over at once).
#[tokio::test]
async fn the_maximum_hold_time_is_not_a_clean_release_under_lock_delay() {
    let etcd = Etcd::start();
    let delay = Duration::from_millis(1500);
    let a = session(&etcd).await;
    let b = session(&etcd).await;
    let held = a
        .mutex("capped")
        .expect("mutex")
        .with_options(LockOptions::new().lock_delay(delay))
        .expect("delay")
        .with_options(LockOptions::new().max_hold(Duration::from_millis(300)))
        .expect("max_hold")
        .lock()
        .await
        .expect("lock");
    let waiter = tokio::spawn({
        let m = b
            .mutex("capped")
            .expect("mutex")
            .with_options(LockOptions::new().lock_delay(delay))
            .expect("delay");
        async move {
            let guard = m.lock().await.expect("next lock");
            (Instant::now(), guard)
        }
    });
    tokio::time::timeout(Duration::from_secs(10), held.lost())
        .await
        .expect("lost at the maximum hold time");
    let fired = Instant::now();
    let (granted, next) = tokio::time::timeout(Duration::from_secs(30), waiter)
        .await
        .expect("the next holder is granted")
        .expect("task");
    assert!(
        granted + Duration::from_millis(25) >= fired + delay,
        "granted {:?} after the maximum hold time, before the delay {delay:?}",
        granted.saturating_duration_since(fired)
    );
    assert!(next.fencing_token() > held.fencing_token());
    next.release().await.expect("release");
}

/// `is_held()` is live: a key deleted behind the holder turns it false with nobody awaiting
/// `lost()`, on the mutex and on an election's leadership.
#[tokio::test]
async fn a_deleted_key_ends_is_held_with_nobody_awaiting_lost() {
    let etcd = Etcd::start();
    let a = session(&etcd).await;
    let guard = a.mutex("live").expect("mutex").lock().await.expect("lock");
    let leadership = a
        .election("live-election")
        .expect("election")
        .campaign("a")
        .await
        .expect("campaign");
    for key in [guard.key(), leadership.key()] {
        etcdctl(&[etcd.endpoint()], &["del", &key]).expect("etcdctl del");
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while guard.is_held() || leadership.is_held() {
        assert!(
            Instant::now() < deadline,
            "still held 10 s after the keys were deleted: mutex {}, leadership {}",
            guard.is_held(),
            leadership.is_held()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(matches!(guard.release().await, Err(Error::NotHeld)));
}

/// A held key is watched, not polled: holding a lock for two seconds costs etcd no reads. (The
/// watch falls back to reading the key every 100 ms only when a watch stream ends without an
/// answer, so a watch that never worked would show up here as some twenty reads.)
#[tokio::test]
async fn a_held_key_is_watched_not_polled() {
    let etcd = Etcd::start();
    let a = session(&etcd).await;
    let guard = a
        .mutex("watched")
        .expect("mutex")
        .lock()
        .await
        .expect("lock");
    // Let the watch's first answer arrive before counting.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = ranges_served(&etcd).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let reads = ranges_served(&etcd).await - before;
    assert!(reads <= 2, "{reads} reads of etcd while one key was held");
    assert!(guard.is_held());
    guard.release().await.expect("release");
}

/// A watch stream broken under a held key (etcd restarted on the same data: the lease and the
/// key survive) is taken up again: a deletion after the restart still turns `is_held()` false.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_key_is_watched_again_after_etcd_restarts() {
    let etcd = Etcd::start();
    let a = Session::builder(&etcd.endpoint())
        .ttl(Duration::from_secs(30))
        .connect()
        .await
        .expect("session");
    let guard = a
        .mutex("restarted")
        .expect("mutex")
        .lock()
        .await
        .expect("lock");
    let key = guard.key();
    tokio::task::block_in_place(|| etcd.restart());
    assert!(guard.is_held(), "the key outlives the restart");
    etcdctl(&[etcd.endpoint()], &["del", &key]).expect("etcdctl del");
    let deadline = Instant::now() + Duration::from_secs(20);
    while guard.is_held() {
        assert!(
            Instant::now() < deadline,
            "still held 20 s after its key was deleted behind a restarted etcd"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
