//! Sessions on the ensemble when their member dies: one that can reach another member moves
//! there as the same session with its lock intact; one that cannot is told at once and loses
//! the lock only after the ensemble expired it.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use lockkeeper::Error;
use lockkeeper::LockOptions;
use lockkeeper::zk::ConnectionState;
use tokio::task::JoinHandle;
use tokio::time::{Instant, timeout};

use crate::harness::{ONE_ENSEMBLE, SESSION_TIMEOUT, blocking, ensemble, member_of, session_on};

/// How long a loss signal that was woken by a suspension may take to be seen resolved once the
/// session is back: only the scheduling of its task, so this only turns a miss into a failure.
const SEEN_WITHIN: Duration = Duration::from_secs(10);

/// Awaits `lost` in a task of its own, as a holder's work task would, and ends with the instant
/// it resolved. Returns once that task has polled it once and found it pending, so that it is
/// already waiting on the session's state before the caller causes a fault. `lost()` answers
/// from the holder's knowledge when its task runs: a task already waiting is woken by the
/// suspension itself, while one that first looks once the session is back (after a blocking
/// kill returned, say: a move can take less than the kill) rightly finds the lock held again.
async fn awaited_from_now(
    what: &str,
    lost: impl Future<Output = ()> + Send + 'static,
) -> JoinHandle<Instant> {
    let (armed, was_armed) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(async move {
        let mut lost = std::pin::pin!(lost);
        let mut armed = Some(armed);
        std::future::poll_fn(|cx| {
            let poll = lost.as_mut().poll(cx);
            if let Some(armed) = armed.take() {
                let _ = armed.send(poll.is_pending());
            }
            poll
        })
        .await;
        Instant::now()
    });
    let pending = was_armed
        .await
        .expect("the task awaiting a loss signal runs");
    assert!(pending, "{what} resolved before any fault");
    task
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
        .with_options(LockOptions::new().keep_through_suspension())
        .unwrap()
        .lead()
        .await
        .unwrap();
    let other = session_on(&zk.member_connect((on + 2) % zk.size())).await;

    // Everything the test observes of the move is listening before the member is killed, so
    // that what it sees does not depend on how fast the session moves (a move can take a few
    // milliseconds, less than the kill itself): the session's states are recorded by the
    // stream from here on, and both loss signals are awaited by tasks of their own, as a
    // holder's work tasks would await them, already waiting when the fault starts.
    let mut states = holder.states();
    let guard = Arc::new(guard);
    let guard_lost = awaited_from_now("the mutex guard's lost()", {
        let guard = guard.clone();
        async move { guard.lost().await }
    })
    .await;
    let leadership_lost = awaited_from_now("the leadership's lost()", {
        let term = leadership.term();
        async move { term.lost().await }
    })
    .await;
    let killed_at = Instant::now();
    blocking({
        let zk = zk.clone();
        move || zk.kill(on)
    })
    .await;
    let mut seen = Vec::new();
    while seen.last() != Some(&ConnectionState::Reconnected) {
        let state = timeout(SESSION_TIMEOUT * 2, states.next())
            .await
            .unwrap_or_else(|_| panic!("no reconnection; states so far {seen:?}"))
            .expect("the session reports states");
        seen.push(state);
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
    let guard_lost_at = timeout(SEEN_WITHIN, guard_lost)
        .await
        .expect("the mutex guard's lost() resolves at a suspension")
        .expect("the task awaiting the guard's lost()");
    eprintln!(
        "the mutex guard reported lost {:?} after the kill",
        guard_lost_at - killed_at
    );
    assert!(
        !leadership_lost.is_finished(),
        "a leadership kept through suspensions was reported lost"
    );
    // The task that awaited the guard's loss is over, and with it its share of the guard.
    let guard = Arc::into_inner(guard).expect("the guard is the test's alone again");
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
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !leadership_lost.is_finished(),
        "a leadership kept through suspensions was reported lost after the move"
    );
    assert!(leadership.is_leader());
    leadership_lost.abort();
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
