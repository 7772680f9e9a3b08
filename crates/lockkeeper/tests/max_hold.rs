//! Maximum hold time on every lock kind: at its limit the guard gives the lock up by itself,
//! `lost()` fires within a tick of the deadline, `is_held()` is false after, the next waiter
//! gets the lock at once, and a later `release()` says `NotHeld`.
//!
//! The deadline is fixed when the lock is granted, which happens between the call that asks
//! for it (`before`) and the moment that call returns (`granted`). So `lost()` must resolve no
//! earlier than `before + max_hold` and no later than `granted + max_hold + TICK`. `TICK` is
//! the guard's timer precision: tokio's timer has a 1 ms resolution, and a timer task on a
//! loaded two-core machine may be scheduled late (typically under 3 ms here, once 27 ms while
//! JVMs were starting beside it), so 30 ms is allowed.
//!
//! ZooKeeper bodies run on Keeper and Apache ZooKeeper; Redis bodies on a fresh redis-server.

mod support;

use std::sync::Arc;
use std::time::Duration;

use lockkeeper::Error;
use lockkeeper::LockOptions;
use lockkeeper::redis::Redis;
use lockkeeper::redis::redlock::Redlock;
use lockkeeper::{Lock, MultiLock};
use lockkeeper_testkit::{RedisNode, RedisServer};
use support::{for_each_backend, session};
use tokio::time::{Instant, timeout};

const MAX_HOLD: Duration = Duration::from_millis(600);
const TICK: Duration = Duration::from_millis(30);
/// Bound on any step that should be quick (a waiter's grant once the lock is free).
const STEP: Duration = Duration::from_secs(10);

/// Waits for `lost` and checks it resolved within a tick of the deadline that lies between
/// `before + MAX_HOLD` and `granted + MAX_HOLD`; returns when it fired.
async fn fires_on_time(
    what: &str,
    before: Instant,
    granted: Instant,
    lost: impl Future,
) -> Instant {
    timeout(MAX_HOLD + STEP, lost)
        .await
        .unwrap_or_else(|_| panic!("{what}: lost() never fired"));
    let fired = Instant::now();
    assert!(
        fired >= before + MAX_HOLD,
        "{what}: lost() fired {:?} before the maximum hold time",
        (before + MAX_HOLD) - fired
    );
    let late = fired.saturating_duration_since(granted + MAX_HOLD);
    assert!(
        late <= TICK,
        "{what}: lost() fired {late:?} after the deadline (tick {TICK:?})"
    );
    eprintln!("{what}: lost() {late:?} after the latest possible deadline");
    fired
}

/// Waits until `waiter` finishes (it takes the lock given up at the maximum hold time) and
/// checks it got it promptly after `fired`: a release at the maximum hold time is clean.
async fn next_gets_it<T>(what: &str, fired: Instant, waiter: tokio::task::JoinHandle<T>) -> T {
    let taken = timeout(STEP, waiter)
        .await
        .unwrap_or_else(|_| panic!("{what}: the next waiter never got the lock"))
        .expect("waiter task");
    eprintln!("{what}: next holder {:?} after lost()", fired.elapsed());
    taken
}

fn not_held<T: std::fmt::Debug>(what: &str, released: lockkeeper::Result<T>) {
    assert!(
        matches!(released, Err(Error::NotHeld)),
        "{what}: release after the maximum hold time: {released:?}"
    );
}

#[tokio::test]
async fn zk_mutex_is_given_up_at_its_maximum_hold_time() {
    for_each_backend(|connect| async move {
        let path = "/max-hold/mutex";
        let holder = session(&connect).await;
        let other = session(&connect).await;
        let mutex = holder
            .mutex(path)
            .unwrap()
            .with_options(LockOptions::new().max_hold(MAX_HOLD))
            .unwrap();
        let before = Instant::now();
        let guard = mutex.lock().await.expect("lock");
        let granted = Instant::now();
        let waiter = tokio::spawn(async move {
            let guard = other.mutex(path).unwrap().lock().await.expect("next lock");
            let at = Instant::now();
            guard.release().await.expect("release");
            at
        });
        assert!(guard.is_held());
        let fired = fires_on_time("mutex", before, granted, guard.lost()).await;
        assert!(!guard.is_held(), "is_held() after the maximum hold time");
        assert_eq!(mutex.hold_count(), 1);
        let next = next_gets_it("mutex", fired, waiter).await;
        assert!(next >= fired);
        not_held("mutex", guard.release().await);
        // The handle takes the lock afresh after that.
        let again = mutex.lock().await.expect("lock again");
        assert!(again.is_held());
        again.release().await.expect("release again");
    })
    .await;
}

/// A `lock()` on the same handle once the maximum hold time has passed, but before the timer
/// that gives the hold up has run, starts afresh: a new node with a new token, the old guard
/// `NotHeld`. The test's runtime has one thread, and blocking it past the maximum hold time is
/// what keeps the timer from running first.
#[tokio::test]
async fn zk_a_handle_locks_afresh_before_the_maximum_hold_timer_has_run() {
    for_each_backend(|connect| async move {
        let path = "/max-hold/afresh";
        let holder = session(&connect).await;
        let mutex = holder
            .mutex(path)
            .unwrap()
            .with_options(LockOptions::new().max_hold(MAX_HOLD))
            .unwrap();
        let first = mutex.lock().await.expect("lock");
        std::thread::sleep(MAX_HOLD + TICK);
        assert!(!first.is_held(), "is_held() after the maximum hold time");
        let again = timeout(STEP, mutex.lock())
            .await
            .expect("lock() again after the maximum hold time")
            .expect("lock again");
        assert!(again.is_held(), "the new hold");
        assert_ne!(again.fencing_token(), first.fencing_token(), "a new node");
        not_held("mutex", first.release().await);
        again.release().await.expect("release again");
    })
    .await;
}

#[tokio::test]
async fn zk_rw_lock_both_sides_are_given_up() {
    for_each_backend(|connect| async move {
        let path = "/max-hold/rw";
        let holder = session(&connect).await;
        let other = session(&connect).await;
        let lock = holder
            .rw_lock(path)
            .unwrap()
            .with_options(LockOptions::new().max_hold(MAX_HOLD))
            .unwrap();
        for write in [true, false] {
            let side = if write { "write side" } else { "read side" };
            let before = Instant::now();
            let guard = if write {
                lock.write().await
            } else {
                lock.read().await
            }
            .expect("lock");
            let granted = Instant::now();
            let waiter = tokio::spawn({
                let other = other.rw_lock(path).unwrap();
                async move { other.write().await.expect("next write").release().await }
            });
            let fired = fires_on_time(side, before, granted, guard.lost()).await;
            assert!(
                !guard.is_held(),
                "{side}: is_held() after the maximum hold time"
            );
            next_gets_it(side, fired, waiter).await.expect("release");
            not_held(side, guard.release().await);
        }
    })
    .await;
}

#[tokio::test]
async fn zk_semaphore_leases_are_given_back() {
    for_each_backend(|connect| async move {
        let path = "/max-hold/semaphore";
        let holder = session(&connect).await;
        let other = session(&connect).await;
        let semaphore = holder
            .semaphore(path, 2)
            .unwrap()
            .with_options(LockOptions::new().max_hold(MAX_HOLD))
            .unwrap();
        let before = Instant::now();
        let leases = semaphore.acquire(2).await.expect("acquire");
        let granted = Instant::now();
        let waiter = tokio::spawn(async move {
            let semaphore = other.semaphore(path, 2).unwrap();
            semaphore.acquire(2).await.expect("next").release().await
        });
        let fired = fires_on_time("semaphore", before, granted, leases.lost()).await;
        assert!(!leases.is_held());
        next_gets_it("semaphore", fired, waiter)
            .await
            .expect("release");
        not_held("semaphore", leases.release().await);
    })
    .await;
}

#[tokio::test]
async fn zk_simple_lock_is_given_up() {
    for_each_backend(|connect| async move {
        let path = "/max-hold/simple";
        let holder = session(&connect).await;
        let other = session(&connect).await;
        let lock = holder
            .simple_lock(path)
            .unwrap()
            .with_options(LockOptions::new().max_hold(MAX_HOLD))
            .unwrap();
        let before = Instant::now();
        let guard = lock.lock().await.expect("lock");
        let granted = Instant::now();
        let waiter = tokio::spawn(async move {
            let lock = other.simple_lock(path).unwrap();
            lock.lock().await.expect("next").release().await
        });
        let fired = fires_on_time("simple lock", before, granted, guard.lost()).await;
        assert!(!guard.is_held());
        next_gets_it("simple lock", fired, waiter)
            .await
            .expect("release");
        not_held("simple lock", guard.release().await);
    })
    .await;
}

#[tokio::test]
async fn zk_multi_lock_is_given_up() {
    for_each_backend(|connect| async move {
        let holder = session(&connect).await;
        let other = session(&connect).await;
        let locks = |s: &lockkeeper::zk::Session| {
            let locks: [Arc<dyn Lock>; 3] = [
                Arc::new(s.mutex("/max-hold/multi/a").unwrap()),
                Arc::new(s.rw_lock("/max-hold/multi/b").unwrap().write_lock()),
                Arc::new(s.semaphore("/max-hold/multi/c", 1).unwrap()),
            ];
            MultiLock::new(locks).unwrap()
        };
        let multi = locks(&holder)
            .with_options(LockOptions::new().max_hold(MAX_HOLD))
            .unwrap();
        let before = Instant::now();
        let guard = multi.lock().await.expect("lock");
        let granted = Instant::now();
        let waiter = tokio::spawn({
            let multi = locks(&other);
            async move { multi.lock().await.expect("next").release().await }
        });
        let fired = fires_on_time("multi-lock", before, granted, guard.lost()).await;
        assert!(!guard.is_held());
        next_gets_it("multi-lock", fired, waiter)
            .await
            .expect("release");
        assert!(guard.release().await.is_err());
    })
    .await;
}

#[tokio::test]
async fn zk_leader_latch_term_ends_and_the_next_participant_leads() {
    for_each_backend(|connect| async move {
        let path = "/max-hold/latch";
        let leader = session(&connect).await;
        let other = session(&connect).await;
        let latch = leader
            .leader_latch(path, "capped")
            .unwrap()
            .with_options(LockOptions::new().max_hold(MAX_HOLD))
            .unwrap();
        let before = Instant::now();
        let leadership = latch.lead().await.expect("lead");
        let granted = Instant::now();
        let waiter = tokio::spawn(async move {
            let next = other
                .leader_latch(path, "next")
                .unwrap()
                .lead()
                .await
                .expect("next leads");
            let at = Instant::now();
            next.resign().await.expect("resign");
            at
        });
        assert!(leadership.is_leader());
        let fired = fires_on_time("latch", before, granted, leadership.lost()).await;
        assert!(
            !leadership.is_leader(),
            "is_leader() after the maximum hold time"
        );
        let next = next_gets_it("latch", fired, waiter).await;
        assert!(next >= fired);
        assert!(
            matches!(leadership.resign().await, Err(Error::NotLeader)),
            "latch: resign after the maximum hold time"
        );
        match latch.with_options(LockOptions::new().max_hold(Duration::ZERO)) {
            Err(Error::InvalidArgument(msg)) => {
                assert!(msg.contains("max_hold") && msg.contains(path), "{msg}");
            }
            other => panic!("zero max_hold accepted: {other:?}"),
        }
    })
    .await;
}

#[tokio::test]
async fn zk_zero_maximum_hold_time_is_refused_naming_the_option() {
    for_each_backend(|connect| async move {
        let s = session(&connect).await;
        let refused = [
            s.mutex("/max-hold/zero")
                .unwrap()
                .with_options(LockOptions::new().max_hold(Duration::ZERO))
                .err(),
            s.rw_lock("/max-hold/zero")
                .unwrap()
                .with_options(LockOptions::new().max_hold(Duration::ZERO))
                .err(),
            s.simple_lock("/max-hold/zero")
                .unwrap()
                .with_options(LockOptions::new().max_hold(Duration::ZERO))
                .err(),
            s.semaphore("/max-hold/zero", 1)
                .unwrap()
                .with_options(LockOptions::new().max_hold(Duration::ZERO))
                .err(),
        ];
        for err in refused {
            match err {
                Some(Error::InvalidArgument(msg)) => {
                    assert!(
                        msg.contains("max_hold") && msg.contains("/max-hold/zero"),
                        "{msg}"
                    );
                }
                other => panic!("zero max_hold accepted: {other:?}"),
            }
        }
        match s
            .mutex("/max-hold/zero")
            .unwrap()
            .with_options(LockOptions::new().max_hold(Duration::MAX))
        {
            Err(Error::InvalidArgument(msg)) => assert!(msg.contains("at most"), "{msg}"),
            other => panic!("an endless max_hold accepted: {other:?}"),
        }
        match s
            .mutex("/max-hold/zero")
            .unwrap()
            .with_options(LockOptions::new().lock_delay(Duration::ZERO))
        {
            Err(Error::InvalidArgument(msg)) => assert!(msg.contains("lock_delay"), "{msg}"),
            other => panic!("zero lock_delay accepted: {other:?}"),
        }
    })
    .await;
}

async fn redis(server: &RedisServer) -> Redis {
    Redis::connect(&server.url()).await.expect("connect")
}

#[tokio::test]
async fn redis_lease_lock_is_given_up_with_and_without_a_watchdog() {
    let server = RedisServer::start();
    let redis = redis(&server).await;
    for watchdog in [true, false] {
        let what = if watchdog {
            "lease lock (watchdog)"
        } else {
            "lease lock (fixed lease)"
        };
        let lock = redis.lease_lock("max-hold");
        let options = if watchdog {
            LockOptions::new().watchdog(Duration::from_millis(300))
        } else {
            LockOptions::new().lease(Duration::from_secs(30))
        };
        let lock = lock.with_options(options.max_hold(MAX_HOLD)).unwrap();
        let before = Instant::now();
        let guard = lock.lock().await.expect("lock");
        let granted = Instant::now();
        let waiter = tokio::spawn({
            let lock = redis.lease_lock("max-hold");
            async move { lock.lock().await.expect("next").release().await }
        });
        let fired = fires_on_time(what, before, granted, guard.lost()).await;
        assert!(!guard.is_held());
        next_gets_it(what, fired, waiter).await.expect("release");
        not_held(what, guard.release().await);
    }
}

#[tokio::test]
async fn redis_reentrant_rw_and_semaphore_are_given_up() {
    let server = RedisServer::start();
    let redis = redis(&server).await;
    let other = Redis::connect(&server.url()).await.expect("connect");

    let lock = redis
        .reentrant_lock("max-hold-reentrant")
        .with_options(LockOptions::new().max_hold(MAX_HOLD))
        .unwrap();
    let before = Instant::now();
    let guard = lock.lock().await.expect("lock");
    let granted = Instant::now();
    let waiter = tokio::spawn({
        let lock = other.reentrant_lock("max-hold-reentrant");
        async move { lock.lock().await.expect("next").release().await }
    });
    let fired = fires_on_time("reentrant", before, granted, guard.lost()).await;
    assert!(!guard.is_held());
    next_gets_it("reentrant", fired, waiter)
        .await
        .expect("release");
    not_held("reentrant", guard.release().await);

    for write in [true, false] {
        let what = if write {
            "rw write side"
        } else {
            "rw read side"
        };
        let lock = redis
            .rw_lock("max-hold-rw")
            .with_options(LockOptions::new().max_hold(MAX_HOLD))
            .unwrap();
        let before = Instant::now();
        let guard = if write {
            lock.write().await
        } else {
            lock.read().await
        }
        .expect("lock");
        let granted = Instant::now();
        let waiter = tokio::spawn({
            let lock = other.rw_lock("max-hold-rw");
            async move { lock.write().await.expect("next").release().await }
        });
        let fired = fires_on_time(what, before, granted, guard.lost()).await;
        assert!(!guard.is_held());
        next_gets_it(what, fired, waiter).await.expect("release");
        not_held(what, guard.release().await);
    }

    let semaphore = redis
        .semaphore("max-hold-semaphore", 1)
        .with_options(LockOptions::new().max_hold(MAX_HOLD))
        .unwrap();
    let before = Instant::now();
    let permit = semaphore.acquire(1).await.expect("acquire");
    let granted = Instant::now();
    let waiter = tokio::spawn({
        let semaphore = other.semaphore("max-hold-semaphore", 1);
        async move { semaphore.acquire(1).await.expect("next").release().await }
    });
    let fired = fires_on_time("semaphore", before, granted, permit.lost()).await;
    assert!(!permit.is_held());
    next_gets_it("semaphore", fired, waiter)
        .await
        .expect("release");
    not_held("semaphore", permit.release().await);
}

#[tokio::test]
async fn redis_redlock_is_given_up() {
    let masters: Vec<RedisNode> = (0..3).map(|_| RedisNode::start()).collect();
    let urls: Vec<String> = masters.iter().map(RedisNode::url).collect();
    let redlock = Redlock::new(&urls).expect("redlock");
    let lock = redlock
        .lease_lock("max-hold")
        .with_options(LockOptions::new().max_hold(MAX_HOLD))
        .unwrap();
    let before = Instant::now();
    let guard = lock.lock().await.expect("lock");
    let granted = Instant::now();
    let waiter = tokio::spawn({
        let lock = redlock.lease_lock("max-hold");
        async move { lock.lock().await.expect("next").release().await }
    });
    let fired = fires_on_time("redlock", before, granted, guard.lost()).await;
    assert!(!guard.is_held());
    next_gets_it("redlock", fired, waiter)
        .await
        .expect("release");
    not_held("redlock", guard.release().await);
}

#[tokio::test]
async fn redis_zero_maximum_hold_time_and_lock_delay_are_refused() {
    let server = RedisServer::start();
    let redis = redis(&server).await;
    let zero_hold = LockOptions::new().max_hold(Duration::ZERO);
    let zero_delay = LockOptions::new().lock_delay(Duration::ZERO);
    // Refused when the options are given, before anything is sent.
    for (result, option) in [
        (
            redis.lease_lock("z").with_options(zero_hold).err(),
            "max_hold",
        ),
        (
            redis.lease_lock("z").with_options(zero_delay).err(),
            "lock_delay",
        ),
        (
            redis.reentrant_lock("z").with_options(zero_delay).err(),
            "lock_delay",
        ),
        (redis.rw_lock("z").with_options(zero_hold).err(), "max_hold"),
        (
            redis.semaphore("z", 1).with_options(zero_hold).err(),
            "max_hold",
        ),
    ] {
        match result {
            Some(Error::InvalidArgument(msg)) => assert!(msg.contains(option), "{msg}"),
            other => panic!("zero {option} accepted: {other:?}"),
        }
    }
}
