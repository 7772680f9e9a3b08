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
//! Only Apache ZooKeeper runs here (Keeper is a single server); `LOCKKEEPER_TEST_BACKENDS`
//! without `zookeeper` skips these tests. One ensemble at a time: three JVMs share two cores.

#[path = "ensemble/harness.rs"]
mod harness;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use harness::{
    Grants, ONE_ENSEMBLE, Resource, SESSION_TIMEOUT, TEST_LIMIT, blocking, cut_off, ensemble,
    member_of, session_on, spread_sessions,
};
use lockkeeper::Error;
use lockkeeper::zk::ConnectionState;
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
    /// Long enough that the kill lands inside a hold, and its loss is reported to the holder.
    const HOLD: Duration = Duration::from_millis(50);
    let resource = Arc::new(Resource::default());
    let grants = Arc::new(Grants::default());
    let lost_while_held = Arc::new(AtomicUsize::new(0));
    let retried = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for session in spread_sessions(&zk, SESSIONS).await {
        let (resource, grants) = (resource.clone(), grants.clone());
        let (lost_while_held, retried) = (lost_while_held.clone(), retried.clone());
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
                tokio::select! {
                    () = guard.lost() => { lost_while_held.fetch_add(1, Ordering::SeqCst); }
                    () = tokio::time::sleep(HOLD) => {}
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

    // Let contention settle, then kill the leader while someone holds the lock.
    let deadline = Instant::now() + TEST_LIMIT;
    while resource.writes.load(Ordering::SeqCst) < 20 || resource.inside.load(Ordering::SeqCst) == 0
    {
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

/// A session whose member is killed reconnects to another member within its timeout, as the
/// same session: its lock node stays (same node, same token, still its own), nobody else can
/// take the lock, the guard is held again and releases cleanly; a leadership kept through
/// suspensions never reports lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_session_moves_to_another_member_and_keeps_its_lock() {
    let _turn = ONE_ENSEMBLE.lock().await;
    let Some(zk) = ensemble().await else { return };
    // A session on a follower, so that killing its member moves only it (killing the leader
    // is the other tests' fault). The client picks a member itself: connect until it is a
    // follower (a third of tries land on the leader).
    let leader = blocking({
        let zk = zk.clone();
        move || zk.leader()
    })
    .await;
    let mut attempts = 0;
    let (holder, id, on) = loop {
        attempts += 1;
        assert!(attempts <= 20, "no session landed on a follower");
        let holder = session_on(&zk.connect_string()).await;
        let id = holder.session_id();
        let on = blocking({
            let zk = zk.clone();
            move || member_of(&zk, id)
        })
        .await
        .expect("the session is on some member");
        if on != leader {
            break (holder, id, on);
        }
        holder.close().await;
    };
    let mutex = holder.mutex("/ensemble/moving").unwrap();
    let guard = mutex.lock().await.unwrap();
    let token = guard.fencing_token();
    let leadership = holder
        .leader_latch("/ensemble/moving-election", "holder")
        .unwrap()
        .keep_through_suspension()
        .lead()
        .await
        .unwrap();
    let other = session_on(&zk.member_connect((on + 2) % zk.size())).await;

    let mut states = holder.states();
    let mut leadership_lost = Box::pin(leadership.lost());
    let mut guard_lost = Box::pin(guard.lost());
    let killed_at = Instant::now();
    blocking({
        let zk = zk.clone();
        move || zk.kill(on)
    })
    .await;
    // Both loss signals are awaited while the member dies and the session moves, as a holder
    // doing its work in a select would.
    let mut seen = Vec::new();
    let mut guard_reported_lost = false;
    let mut leadership_reported_lost = false;
    while seen.last() != Some(&ConnectionState::Reconnected) {
        tokio::select! {
            state = timeout(SESSION_TIMEOUT * 2, states.next()) => {
                let state = state
                    .unwrap_or_else(|_| panic!("no reconnection; states so far {seen:?}"))
                    .expect("the session reports states");
                seen.push(state);
            }
            () = &mut guard_lost, if !guard_reported_lost => guard_reported_lost = true,
            () = &mut leadership_lost, if !leadership_reported_lost => {
                leadership_reported_lost = true;
            }
        }
    }
    let moved_in = killed_at.elapsed();
    assert_eq!(
        seen,
        [ConnectionState::Suspended, ConnectionState::Reconnected],
        "suspended, then the same session back: never lost"
    );
    assert_eq!(holder.session_id(), id, "the same session came back");
    let now_on = blocking({
        let zk = zk.clone();
        move || member_of(&zk, id)
    })
    .await
    .expect("the session is on a live member");
    assert_ne!(now_on, on, "moved to another member");
    eprintln!(
        "member {} killed: the session moved to member {} in {moved_in:?}",
        on + 1,
        now_on + 1
    );

    // The guard's lost() follows Curator's standard policy (documented on LockGuard::lost):
    // a suspension is a possible loss, so it resolved; the leadership was told to keep
    // through suspensions and did not. Neither lock was actually lost: the guard is held
    // again, its node intact, and the leadership never wavered.
    assert!(
        guard_reported_lost,
        "the mutex guard's lost() resolves at a suspension"
    );
    assert!(
        !leadership_reported_lost,
        "a leadership kept through suspensions was reported lost"
    );
    drop(guard_lost);
    assert!(guard.is_held(), "held again once the same session is back");
    assert!(guard.valid_until().is_some());
    let (_, stat) = other
        .client()
        .unwrap()
        .get_data(guard.node())
        .await
        .expect("the lock node is still there");
    assert_eq!(stat.ephemeral_owner, id, "still the holder's node");
    assert_eq!(
        stat.czxid as u64,
        token.get(),
        "the same node, the same token"
    );
    assert!(
        other
            .mutex("/ensemble/moving")
            .unwrap()
            .try_lock()
            .await
            .unwrap()
            .is_none(),
        "nobody else can take the lock"
    );
    assert!(
        timeout(Duration::from_millis(300), &mut leadership_lost)
            .await
            .is_err(),
        "a leadership kept through suspensions was reported lost after the move"
    );
    assert!(leadership.is_leader());
    drop(leadership_lost);
    guard.release().await.expect("released as the holder");
    assert!(
        other
            .mutex("/ensemble/moving")
            .unwrap()
            .try_lock()
            .await
            .unwrap()
            .is_some(),
        "free after the release"
    );
    leadership.resign().await.expect("resigned as the leader");
    blocking(move || {
        zk.restart(on);
        // The ensemble is whole again: every member serves.
        for i in 0..zk.size() {
            zk.wait_serving(i, Duration::from_secs(20));
        }
    })
    .await;
}

/// A holder whose only member is killed is cut off from the ensemble: its guard reports lost
/// at once, the ensemble expires its session after the timeout, and only then is a waiter on
/// the other members granted the lock, with a higher token. When the member is back the holder
/// runs in a new session, and its old guard is not held.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_holder_cut_off_with_its_member_loses_before_the_lock_moves() {
    let _turn = ONE_ENSEMBLE.lock().await;
    let Some(zk) = ensemble().await else { return };
    let alone = blocking({
        let zk = zk.clone();
        move || (zk.leader() + 1) % zk.size()
    })
    .await;
    let rest: Vec<String> = (1..zk.size())
        .map(|i| zk.member_connect((alone + i) % zk.size()))
        .collect();
    let holder = session_on(&zk.member_connect(alone)).await;
    let first_id = holder.session_id();
    let waiter = session_on(&rest.join(",")).await;
    let guard = holder
        .mutex("/ensemble/cut-off")
        .unwrap()
        .lock()
        .await
        .unwrap();
    let old_token = guard.fencing_token();
    let waiting = tokio::spawn({
        let mutex = waiter.mutex("/ensemble/cut-off").unwrap();
        async move {
            let granted = mutex.lock().await;
            (Instant::now(), granted)
        }
    });
    let client = waiter.client().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while client
        .list_children("/ensemble/cut-off")
        .await
        .unwrap()
        .len()
        < 2
    {
        assert!(Instant::now() < deadline, "the waiter never queued");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let mut states = holder.states();
    let killed_at = Instant::now();
    blocking({
        let zk = zk.clone();
        move || zk.kill(alone)
    })
    .await;
    timeout(Duration::from_secs(2), guard.lost())
        .await
        .expect("the cut-off holder is told at once");
    let lost_at = Instant::now();
    let (granted_at, granted) = timeout(SESSION_TIMEOUT * 3, waiting)
        .await
        .expect("the waiter is granted once the holder's session expired")
        .expect("the waiter's task");
    let granted = granted.expect("the waiter's lock");
    eprintln!(
        "holder told {:?} after its member died; the lock moved after {:?} (session timeout \
         {SESSION_TIMEOUT:?})",
        lost_at - killed_at,
        granted_at - killed_at
    );
    assert!(lost_at < granted_at, "someone held before the holder knew");
    assert!(
        granted_at - killed_at >= SESSION_TIMEOUT / 2,
        "the lock moved before the holder's session could have expired"
    );
    assert!(granted.fencing_token() > old_token);

    // The member comes back: the holder's session is gone, so it connects a new one.
    blocking({
        let zk = zk.clone();
        move || zk.restart(alone)
    })
    .await;
    let mut seen = Vec::new();
    while seen.last() != Some(&ConnectionState::Reconnected) {
        let state = timeout(Duration::from_secs(30), states.next())
            .await
            .unwrap_or_else(|_| panic!("no new session; states so far {seen:?}"))
            .expect("the session reports states");
        seen.push(state);
    }
    assert!(
        seen.contains(&ConnectionState::Lost),
        "the old session ended: {seen:?}"
    );
    assert_ne!(holder.session_id(), first_id, "a new session");
    assert!(!guard.is_held());
    assert!(matches!(guard.release().await, Err(Error::NotHeld)));
    granted.release().await.expect("the new holder releases");
}

/// Counter increments and queue puts in flight while the ensemble's leader is killed: the
/// writes whose answers are lost are exactly the ones the library may not know about. An
/// increment is applied once or not at all (every value an increment returned is distinct,
/// and the final count exceeds the acknowledged ones by no more than the calls that failed
/// unsure), and every acknowledged queue item is there exactly once, with no item twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn counter_and_queue_writes_through_a_leader_kill() {
    let _turn = ONE_ENSEMBLE.lock().await;
    let Some(zk) = ensemble().await else { return };
    let stop = Arc::new(AtomicBool::new(false));
    let values = Arc::new(StdMutex::new(Vec::<i64>::new()));
    let unsure_increments = Arc::new(AtomicUsize::new(0));
    let queued = Arc::new(StdMutex::new(Vec::<String>::new()));
    let unsure_puts = Arc::new(StdMutex::new(Vec::<String>::new()));
    let mut sessions = spread_sessions(&zk, 6).await;
    let producers = sessions.split_off(4);
    let mut workers = Vec::new();
    for session in sessions {
        let (stop, values, unsure) = (stop.clone(), values.clone(), unsure_increments.clone());
        workers.push(tokio::spawn(async move {
            let counter = session.atomic_long("/ensemble/counter").unwrap();
            while !stop.load(Ordering::SeqCst) {
                match counter.increment().await {
                    Ok(value) => values.lock().unwrap().push(value),
                    Err(err) if cut_off(&err) => {
                        unsure.fetch_add(1, Ordering::SeqCst);
                    }
                    // Given up under contention: never applied.
                    Err(Error::Contended { .. }) => {}
                    Err(err) => panic!("increment: {err}"),
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            session
        }));
    }
    for (p, session) in producers.into_iter().enumerate() {
        let (stop, queued, unsure) = (stop.clone(), queued.clone(), unsure_puts.clone());
        workers.push(tokio::spawn(async move {
            let queue = session.distributed_queue("/ensemble/queue").unwrap();
            let mut n = 0;
            while !stop.load(Ordering::SeqCst) {
                let item = format!("p{p}-{n}");
                n += 1;
                match queue.put(item.as_bytes()).await {
                    Ok(()) => queued.lock().unwrap().push(item),
                    Err(err) if cut_off(&err) => unsure.lock().unwrap().push(item),
                    Err(err) => panic!("put: {err}"),
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            session
        }));
    }
    let progress = || values.lock().unwrap().len() + queued.lock().unwrap().len();
    let deadline = Instant::now() + TEST_LIMIT;
    while progress() < 40 {
        assert!(Instant::now() < deadline, "no writes before the kill");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let old_leader = blocking({
        let zk = zk.clone();
        move || zk.kill_leader()
    })
    .await;
    let at_kill = progress();
    while progress() < at_kill + 40 {
        assert!(Instant::now() < deadline, "no writes after the kill");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    blocking({
        let zk = zk.clone();
        move || zk.restart(old_leader)
    })
    .await;
    stop.store(true, Ordering::SeqCst);
    let mut sessions = Vec::new();
    for worker in workers {
        let session = timeout(Duration::from_secs(30), worker)
            .await
            .expect("writers stop")
            .expect("a writer panicked");
        sessions.push(session);
    }

    let values = values.lock().unwrap().clone();
    let unsure = unsure_increments.load(Ordering::SeqCst);
    let reader = &sessions[0];
    let last = reader
        .atomic_long("/ensemble/counter")
        .unwrap()
        .get()
        .await
        .unwrap();
    let mut distinct = values.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(
        distinct.len(),
        values.len(),
        "two increments returned one value"
    );
    let acknowledged = i64::try_from(values.len()).unwrap();
    assert!(
        acknowledged <= last && last <= acknowledged + i64::try_from(unsure).unwrap(),
        "{acknowledged} increments acknowledged, {unsure} unsure, and the counter says {last}"
    );

    let queue = reader.distributed_queue("/ensemble/queue").unwrap();
    let mut taken = Vec::new();
    while let Some(item) = queue
        .try_take(lockkeeper::zk::Delivery::AtMostOnce)
        .await
        .unwrap()
    {
        for bytes in item.items() {
            taken.push(String::from_utf8(bytes.clone()).unwrap());
        }
        assert!(taken.len() < 100_000, "the queue does not end");
    }
    let queued = queued.lock().unwrap().clone();
    let unsure_puts = unsure_puts.lock().unwrap().clone();
    let mut counted = std::collections::HashMap::<&str, usize>::new();
    for item in &taken {
        *counted.entry(item).or_default() += 1;
    }
    for item in &queued {
        assert_eq!(counted.get(item.as_str()), Some(&1), "acknowledged {item}");
    }
    for (item, count) in &counted {
        assert_eq!(*count, 1, "{item} was queued {count} times");
        assert!(
            queued.iter().chain(&unsure_puts).any(|q| q == item),
            "{item} was never put"
        );
    }
    eprintln!(
        "counter: {acknowledged} increments acknowledged, {unsure} unsure, final {last}; queue: \
         {} puts acknowledged, {} unsure, {} items taken",
        queued.len(),
        unsure_puts.len(),
        taken.len()
    );
}
