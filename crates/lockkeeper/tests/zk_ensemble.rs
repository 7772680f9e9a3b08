//! The ZooKeeper recipes on a real three-member Apache ZooKeeper ensemble while members crash:
//! the ensemble leader killed and restarted under Mutex contention and under a leader
//! election, a follower killed under a Semaphore and RwLock writers, a session whose member is
//! killed moving to another member with its lock intact, a holder cut off with its only
//! member losing the lock (knowingly, and before anyone else holds it), and counter increments
//! and queue puts whose answers the leader kill lost (applied once or not at all).
//!
//! These are the faults a production ensemble has and a single server cannot show: a leader
//! kill disconnects every client at once and stops all writes until a new leader is elected;
//! a member kill moves only its clients. Sessions must survive both (they reconnect well
//! within their timeout), and exclusion and fencing must hold throughout.
//!
//! Files: this one (locks and leadership under leader and follower kills), `ensemble/sessions.rs`
//! (a session whose member dies), `ensemble/writes.rs` (counter and queue writes cut off),
//! `ensemble/harness.rs` (what they share).
//!
//! Only Apache ZooKeeper runs here (Keeper is a single server); `LOCKKEEPER_TEST_BACKENDS`
//! without `zookeeper` skips these tests. One ensemble at a time: three JVMs share two cores.

#[path = "ensemble/harness.rs"]
mod harness;
#[path = "ensemble/sessions.rs"]
mod sessions;
#[path = "ensemble/writes.rs"]
mod writes;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use harness::{
    Grants, ONE_ENSEMBLE, Resource, TEST_LIMIT, blocking, cut_off, ensemble, spread_sessions,
};
use lockkeeper::Error;
use tokio::time::{Instant, timeout};

/// Six sessions spread over the three members contend for one Mutex while the ensemble's
/// leader is killed (every client is cut off, writes stop until a new leader) and restarted:
/// never two holders, tokens strictly increasing across the kill, every session gets all its
/// turns, in bounded time. Prints how long the lock could not be taken around the kill.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mutex_contention_through_a_leader_kill_and_restart() {
    let _turn = ONE_ENSEMBLE.lock().await;
    let Some(zk) = ensemble().await else { return };
    const SESSIONS: usize = 6;
    const ROUNDS: usize = 20;
    /// How long a holder works, unless a kill is pending (see `killing`).
    const HOLD: Duration = Duration::from_millis(50);
    let resource = Arc::new(Resource::default());
    let grants = Arc::new(Grants::default());
    let lost_while_held = Arc::new(AtomicUsize::new(0));
    let retried = Arc::new(AtomicUsize::new(0));
    // Set before the kill: a holder then keeps working until it is told its lock may be
    // lost, however long the kill and the disconnection take on this machine, so that the
    // kill lands inside a hold. The first holder told clears it.
    let killing = Arc::new(AtomicBool::new(false));
    let mut workers = Vec::new();
    for session in spread_sessions(&zk, SESSIONS).await {
        let (resource, grants) = (resource.clone(), grants.clone());
        let (lost_while_held, retried) = (lost_while_held.clone(), retried.clone());
        let killing = killing.clone();
        workers.push(tokio::spawn(async move {
            let mutex = session.mutex("/ensemble/mutex").unwrap();
            let mut turns = 0;
            while turns < ROUNDS {
                let guard = match mutex.lock().await {
                    Ok(guard) => guard,
                    // The connection dropped mid-acquire (the kill): a caller retries.
                    Err(err) if cut_off(&err) => {
                        retried.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                    Err(err) => panic!("lock: {err}"),
                };
                grants.record();
                resource.enter(guard.fencing_token().get());
                // The work, abandoned at once if the lock may be lost.
                let work = async {
                    tokio::time::sleep(HOLD).await;
                    while killing.load(Ordering::SeqCst) {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                };
                tokio::select! {
                    () = guard.lost() => {
                        lost_while_held.fetch_add(1, Ordering::SeqCst);
                        killing.store(false, Ordering::SeqCst);
                    }
                    () = work => {}
                }
                resource.leave();
                match guard.release().await {
                    // A release cut off by the kill is retried by the session or left to
                    // the server; the turn counts either way.
                    Ok(()) | Err(Error::NotHeld) => {}
                    Err(err) if cut_off(&err) => {}
                    Err(err) => panic!("release: {err}"),
                }
                turns += 1;
            }
            session.close().await;
        }));
    }

    // Let contention settle, then kill the leader while someone holds the lock (and keeps
    // it until told it may be lost).
    let deadline = Instant::now() + TEST_LIMIT;
    while resource.writes.load(Ordering::SeqCst) < 20 {
        assert!(Instant::now() < deadline, "no contention started");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    killing.store(true, Ordering::SeqCst);
    while resource.inside.load(Ordering::SeqCst) == 0 {
        assert!(Instant::now() < deadline, "no contention started");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let killed_at = Instant::now();
    let old_leader = blocking({
        let zk = zk.clone();
        move || zk.kill_leader()
    })
    .await;
    let new_leader = blocking({
        let zk = zk.clone();
        move || zk.wait_for_quorum(Duration::from_secs(30))
    })
    .await;
    let elected_in = killed_at.elapsed();
    assert_ne!(new_leader, old_leader);
    // The lock is granted again with the old leader still down, then it comes back.
    while grants.count_after(killed_at) < 3 {
        assert!(
            Instant::now() < deadline,
            "no grant after the leader was killed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (before, after) = grants.around(killed_at);
    blocking({
        let zk = zk.clone();
        move || zk.restart(old_leader)
    })
    .await;

    for worker in workers {
        timeout(deadline.saturating_duration_since(Instant::now()), worker)
            .await
            .expect("every session got all its turns in time")
            .expect("a worker panicked");
    }
    let before = before.expect("grants before the kill");
    let after = after.expect("grants after the kill");
    eprintln!(
        "leader (member {}) killed: member {} led after {elected_in:?}; the lock was granted \
         {:?} after the kill ({:?} since the last grant before it); {} holds reported lost, \
         {} acquisitions retried",
        old_leader + 1,
        new_leader + 1,
        after - killed_at,
        after - before,
        lost_while_held.load(Ordering::SeqCst),
        retried.load(Ordering::SeqCst),
    );
    assert!(
        lost_while_held.load(Ordering::SeqCst) >= 1,
        "the holder at the kill was told its lock may be lost"
    );
    assert_eq!(resource.most_inside.load(Ordering::SeqCst), 1, "overlap");
    assert_eq!(
        resource.stale_tokens.load(Ordering::SeqCst),
        0,
        "a fencing token was not above the previous one"
    );
    assert_eq!(resource.writes.load(Ordering::SeqCst), SESSIONS * ROUNDS);
    assert!(
        after - killed_at < Duration::from_secs(15),
        "the lock stayed unavailable for {:?}",
        after - killed_at
    );
}

/// Three participants (each its own session, spread over the members) take turns leading
/// while the ensemble's leader is killed and restarted: never two leaders at once, each term's
/// token above the last, terms granted again after the kill.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn leader_election_through_an_ensemble_leader_kill() {
    let _turn = ONE_ENSEMBLE.lock().await;
    let Some(zk) = ensemble().await else { return };
    let leading = Arc::new(AtomicUsize::new(0));
    let most_leading = Arc::new(AtomicUsize::new(0));
    let tokens = Arc::new(StdMutex::new(Vec::<u64>::new()));
    let terms = Arc::new(Grants::default());
    let stop = Arc::new(AtomicBool::new(false));
    let mut participants = Vec::new();
    for (i, session) in spread_sessions(&zk, 3).await.into_iter().enumerate() {
        let (leading, most_leading) = (leading.clone(), most_leading.clone());
        let (tokens, terms, stop) = (tokens.clone(), terms.clone(), stop.clone());
        participants.push(tokio::spawn(async move {
            let latch = session
                .leader_latch("/ensemble/election", &format!("p{i}"))
                .unwrap();
            while !stop.load(Ordering::SeqCst) {
                let leadership = match latch.lead_timeout(Duration::from_secs(2)).await {
                    Ok(Some(leadership)) => leadership,
                    Ok(None) => continue,
                    Err(err) if cut_off(&err) => {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                    Err(err) => panic!("lead: {err}"),
                };
                let now = leading.fetch_add(1, Ordering::SeqCst) + 1;
                most_leading.fetch_max(now, Ordering::SeqCst);
                tokens
                    .lock()
                    .unwrap()
                    .push(leadership.fencing_token().get());
                terms.record();
                tokio::select! {
                    () = leadership.lost() => {}
                    () = tokio::time::sleep(Duration::from_millis(100)) => {}
                }
                leading.fetch_sub(1, Ordering::SeqCst);
                let _ = leadership.resign().await;
            }
            session.close().await;
        }));
    }
    let deadline = Instant::now() + TEST_LIMIT;
    while tokens.lock().unwrap().len() < 6 {
        assert!(Instant::now() < deadline, "no terms before the kill");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let killed_at = Instant::now();
    let old_leader = blocking({
        let zk = zk.clone();
        move || zk.kill_leader()
    })
    .await;
    while terms.count_after(killed_at) < 3 {
        assert!(Instant::now() < deadline, "no terms after the kill");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (_, first_term) = terms.around(killed_at);
    blocking({
        let zk = zk.clone();
        move || zk.restart(old_leader)
    })
    .await;
    let restarted_at = Instant::now();
    while terms.count_after(restarted_at) < 3 {
        assert!(Instant::now() < deadline, "no terms after the restart");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.store(true, Ordering::SeqCst);
    for participant in participants {
        timeout(Duration::from_secs(20), participant)
            .await
            .expect("participants stop")
            .expect("a participant panicked");
    }
    let tokens = tokens.lock().unwrap().clone();
    eprintln!(
        "{} terms; the first after the leader kill began {:?} after it",
        tokens.len(),
        first_term.map(|t| t - killed_at)
    );
    assert_eq!(
        most_leading.load(Ordering::SeqCst),
        1,
        "two leaders at once"
    );
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "term tokens not strictly increasing: {tokens:?}"
    );
}

/// A Semaphore (two leases among four sessions) and RwLock writers (three sessions) while a
/// follower is killed and restarted: never more than two lease holders, never two writers,
/// everyone gets all their turns.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn semaphore_and_rwlock_writers_through_a_follower_kill() {
    let _turn = ONE_ENSEMBLE.lock().await;
    let Some(zk) = ensemble().await else { return };
    const ROUNDS: usize = 15;
    let leased = Arc::new(Resource::default());
    let written = Arc::new(Resource::default());
    let done = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    let mut sessions = spread_sessions(&zk, 7).await;
    let writers = sessions.split_off(4);
    for session in sessions {
        let (leased, done) = (leased.clone(), done.clone());
        workers.push(tokio::spawn(async move {
            let semaphore = session.semaphore("/ensemble/semaphore", 2).unwrap();
            let mut turns = 0;
            while turns < ROUNDS {
                let leases = match semaphore.acquire(1).await {
                    Ok(leases) => leases,
                    Err(err) if cut_off(&err) => {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                    Err(err) => panic!("acquire: {err}"),
                };
                // Two holders at once are allowed: count them, tokens are per lease.
                let now = leased.inside.fetch_add(1, Ordering::SeqCst) + 1;
                leased.most_inside.fetch_max(now, Ordering::SeqCst);
                tokio::select! {
                    () = leases.lost() => {}
                    () = tokio::time::sleep(Duration::from_millis(20)) => {}
                }
                leased.inside.fetch_sub(1, Ordering::SeqCst);
                let _ = leases.release().await;
                turns += 1;
                done.fetch_add(1, Ordering::SeqCst);
            }
            session.close().await;
        }));
    }
    for session in writers {
        let (written, done) = (written.clone(), done.clone());
        workers.push(tokio::spawn(async move {
            let lock = session.rw_lock("/ensemble/rwlock").unwrap();
            let mut turns = 0;
            while turns < ROUNDS {
                let guard = match lock.write().await {
                    Ok(guard) => guard,
                    Err(err) if cut_off(&err) => {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                    Err(err) => panic!("write: {err}"),
                };
                written.enter(guard.fencing_token().get());
                tokio::select! {
                    () = guard.lost() => {}
                    () = tokio::time::sleep(Duration::from_millis(20)) => {}
                }
                written.leave();
                let _ = guard.release().await;
                turns += 1;
                done.fetch_add(1, Ordering::SeqCst);
            }
            session.close().await;
        }));
    }
    let deadline = Instant::now() + TEST_LIMIT;
    while done.load(Ordering::SeqCst) < 20 {
        assert!(Instant::now() < deadline, "no progress before the kill");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let follower = blocking({
        let zk = zk.clone();
        move || {
            let follower = (zk.leader() + 1) % zk.size();
            zk.kill(follower);
            follower
        }
    })
    .await;
    let at_kill = done.load(Ordering::SeqCst);
    while done.load(Ordering::SeqCst) < at_kill + 10 {
        assert!(
            Instant::now() < deadline,
            "no progress with a follower down"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    blocking({
        let zk = zk.clone();
        move || zk.restart(follower)
    })
    .await;
    for worker in workers {
        timeout(deadline.saturating_duration_since(Instant::now()), worker)
            .await
            .expect("every session got all its turns in time")
            .expect("a worker panicked");
    }
    assert_eq!(done.load(Ordering::SeqCst), 7 * ROUNDS);
    assert_eq!(
        leased.most_inside.load(Ordering::SeqCst),
        2,
        "at most two leases at once (and two were used)"
    );
    assert_eq!(written.most_inside.load(Ordering::SeqCst), 1, "two writers");
    assert_eq!(written.stale_tokens.load(Ordering::SeqCst), 0);
}
