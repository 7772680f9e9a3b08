//! Double barrier members that die instead of leaving, against Keeper and Apache ZooKeeper: a
//! death at any point of a round must not let the next round enter early. The lowest member
//! dying while the others wait in `leave` (they return, and `ready` is gone with the round); a
//! whole round dying (its `ready`, which nobody could delete, lets no later member in early,
//! while a late member of a group that still has a member in joins it at once, as with
//! Curator); a member dying while entering or before leaving; and a Curator member of the next
//! round kept waiting after the lowest died (`curator/Barriers.java`).
//!
//! A member dies by closing its session: the server deletes its node at once, with no timing
//! involved.

mod support;

#[allow(dead_code)]
#[path = "curator/jvm.rs"]
mod jvm;
#[allow(dead_code)]
#[path = "curator/zk.rs"]
mod zk;

use std::time::Duration;

use jvm::Jvm;
use lockkeeper::zk::{Entered, Session};
use lockkeeper_testkit::both;
use support::{children, for_each_backend, session, wait_children};
use zk::{JVM_START, STEP, runtime};

/// Bound on anything that should happen promptly.
const SOON: Duration = Duration::from_secs(30);
/// How long something that must not happen is given to happen.
const QUIET: Duration = Duration::from_millis(700);

/// The member nodes of a double barrier (its children but `ready`).
async fn members_of(session: &Session, path: &str) -> Vec<String> {
    let mut all = children(session, path).await;
    all.retain(|name| name != "ready");
    all
}

/// The name of a member's node (the last segment of its path).
fn name_of(entered: &Entered) -> String {
    let node = entered.node();
    node.rsplit('/').next().unwrap_or(node).to_owned()
}

/// `count` sessions that enter the double barrier of `count` at `path` together.
async fn round(connect: &str, path: &str, count: u32) -> Vec<(Session, Entered)> {
    let mut sessions = Vec::new();
    for _ in 0..count {
        sessions.push(session(connect).await);
    }
    let entering = sessions.iter().map(|s| {
        let barrier = s.double_barrier(path, count).unwrap();
        async move { barrier.enter().await }
    });
    let entered = tokio::time::timeout(SOON, futures_util::future::join_all(entering))
        .await
        .expect("a full round enters");
    sessions
        .into_iter()
        .zip(entered)
        .map(|(s, e)| (s, e.expect("enter")))
        .collect()
}

/// A lone member of a barrier of `count` is not let in, and a full round then enters and leaves.
async fn next_round_is_honest(connect: &str, path: &str, count: u32) {
    let lone = session(connect).await;
    let entered = lone
        .double_barrier(path, count)
        .unwrap()
        .enter_timeout(QUIET)
        .await
        .unwrap();
    assert!(
        entered.is_none(),
        "a lone member entered a barrier of {count} at {path}"
    );
    assert!(
        members_of(&lone, path).await.is_empty(),
        "the lone member's node is gone"
    );
    let members = round(connect, path, count).await;
    let leaving = members.into_iter().map(|(s, mut e)| async move {
        e.leave().await.expect("leave");
        s
    });
    let sessions = tokio::time::timeout(SOON, futures_util::future::join_all(leaving))
        .await
        .expect("the round leaves");
    assert!(children(&lone, path).await.is_empty(), "the round is gone");
    for s in sessions {
        s.close().await;
    }
    lone.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_lowest_member_dying_in_leave_takes_ready_with_the_round() {
    for_each_backend(|connect| async move {
        for count in [2u32, 3] {
            let path = format!("/barriers/lowest-dies-{count}");
            let path = path.as_str();
            let mut members = round(&connect, path, count).await;
            members.sort_by_key(|(_, e)| name_of(e));
            let (lowest_session, lowest) = members.remove(0);
            let observer = session(&connect).await;
            // Every other member leaves: each deletes its node and waits for the lowest.
            let leaving: Vec<_> = members
                .into_iter()
                .map(|(s, mut e)| {
                    tokio::spawn(async move {
                        let left = e.leave().await;
                        (s, left)
                    })
                })
                .collect();
            assert_eq!(
                wait_children(&observer, path, 2).await.len(),
                2,
                "the lowest member and ready"
            );
            assert!(
                leaving.iter().all(|task| !task.is_finished()),
                "nobody leaves while the lowest is in"
            );
            // The lowest dies instead of leaving.
            lowest_session.close().await;
            drop(lowest);
            for task in leaving {
                let (s, left) = tokio::time::timeout(SOON, task)
                    .await
                    .expect("the survivors are released")
                    .unwrap();
                left.expect("a survivor's leave");
                // Its leave has returned: the round is over, `ready` included.
                let left_behind = children(&observer, path).await;
                assert!(
                    left_behind.is_empty(),
                    "a survivor's leave returned with {left_behind:?} left at {path}"
                );
                s.close().await;
            }
            next_round_is_honest(&connect, path, count).await;
            observer.close().await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_ready_whose_round_died_lets_no_later_member_in_early() {
    for_each_backend(|connect| async move {
        let path = "/barriers/round-dies";
        let members = round(&connect, path, 3).await;
        let observer = session(&connect).await;
        for (s, e) in members {
            s.close().await;
            drop(e);
        }
        // Nobody left, so nobody could delete `ready`.
        assert_eq!(children(&observer, path).await, ["ready"]);

        // Two newcomers are not a group of three, whatever `ready` says.
        let (c, d) = (session(&connect).await, session(&connect).await);
        let (barrier_c, barrier_d) = (
            c.double_barrier(path, 3).unwrap(),
            d.double_barrier(path, 3).unwrap(),
        );
        let (in_c, in_d) = tokio::join!(
            barrier_c.enter_timeout(QUIET),
            barrier_d.enter_timeout(QUIET)
        );
        assert!(
            in_c.unwrap().is_none() && in_d.unwrap().is_none(),
            "two members entered a barrier of 3 on a dead round's ready"
        );
        assert!(
            children(&observer, path).await.is_empty(),
            "the dead round's ready was cleared"
        );
        c.close().await;
        d.close().await;
        next_round_is_honest(&connect, path, 3).await;
        observer.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_late_member_joins_a_group_still_in_at_once() {
    for_each_backend(|connect| async move {
        // `ready` stands for a group that still has a member in: a late member joins it (a
        // count is a threshold, not a limit), as Curator's members do, even when fewer than N
        // member nodes are left because the others are already waiting in leave.
        let path = "/barriers/late";
        let mut members = round(&connect, path, 3).await;
        members.sort_by_key(|(_, e)| name_of(e));
        let (lowest_session, mut lowest) = members.remove(0);
        let leaving: Vec<_> = members
            .into_iter()
            .map(|(s, mut e)| {
                tokio::spawn(async move {
                    e.leave().await.expect("leave");
                    s
                })
            })
            .collect();
        let late = session(&connect).await;
        wait_children(&late, path, 2).await; // the lowest and ready
        let barrier = late.double_barrier(path, 3).unwrap();
        let mut joined = tokio::time::timeout(SOON, barrier.enter())
            .await
            .expect("the late member joins the group at once")
            .unwrap();
        assert_eq!(members_of(&late, path).await.len(), 2);
        let (left_lowest, left_late) = tokio::time::timeout(
            SOON,
            futures_util::future::join(lowest.leave(), joined.leave()),
        )
        .await
        .expect("the lowest and the late member leave");
        left_lowest.unwrap();
        left_late.unwrap();
        for task in leaving {
            let s = tokio::time::timeout(SOON, task)
                .await
                .expect("the others are released")
                .unwrap();
            s.close().await;
        }
        assert!(children(&late, path).await.is_empty());
        lowest_session.close().await;
        late.close().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_member_dying_while_entering_or_before_leaving_lets_nobody_in_early() {
    for_each_backend(|connect| async move {
        // Dying while waiting to enter: it is not counted.
        let path = "/barriers/dies-entering";
        let early = session(&connect).await;
        let waiting = tokio::spawn({
            let barrier = early.double_barrier(path, 2).unwrap();
            async move { barrier.enter().await }
        });
        let observer = session(&connect).await;
        wait_children(&observer, path, 1).await;
        early.close().await;
        assert!(
            tokio::time::timeout(SOON, waiting)
                .await
                .expect("the dead member's enter ends")
                .unwrap()
                .is_err(),
            "a member whose session closed did not enter"
        );
        next_round_is_honest(&connect, path, 2).await;

        // Dying after entering, before anyone leaves: the other leaves alone, and clears
        // `ready` with the round.
        let path = "/barriers/dies-entered";
        let mut members = round(&connect, path, 2).await;
        let (dead, dead_entered) = members.pop().unwrap();
        dead.close().await;
        drop(dead_entered);
        let (s, mut e) = members.pop().unwrap();
        tokio::time::timeout(SOON, e.leave())
            .await
            .expect("the survivor leaves")
            .unwrap();
        assert!(children(&observer, path).await.is_empty());
        s.close().await;
        next_round_is_honest(&connect, path, 2).await;
        observer.close().await;
    })
    .await;
}

/// After the lowest lockkeeper member died and the survivor's leave returned, a Curator member
/// of the next round (which trusts any `ready` it finds) waits for a full group.
#[test]
fn a_curator_member_of_the_next_round_waits_after_the_lowest_died() {
    let rt = runtime();
    for server in both() {
        eprintln!("--- against {}", server.name());
        let connect = server.connect_string();
        let path = "/barriers/curator-next";
        let mut java = Jvm::spawn("Barriers", &[&connect, path, "2", "1"]);
        java.expect_line("READY", JVM_START);
        let observer = rt.block_on(session(&connect));

        let mut members = rt.block_on(round(&connect, path, 2));
        members.sort_by_key(|(_, e)| name_of(e));
        let (lowest_session, lowest) = members.remove(0);
        let (survivor_session, mut survivor) = members.remove(0);
        let leaving = rt.spawn(async move { survivor.leave().await });
        rt.block_on(wait_children(&observer, path, 2));
        rt.block_on(lowest_session.close());
        drop(lowest);
        rt.block_on(async { tokio::time::timeout(SOON, leaving).await })
            .expect("the survivor is released")
            .unwrap()
            .unwrap();

        assert_eq!(java.request("enter 0", STEP), "OK enter 0");
        assert_eq!(
            java.line_within(QUIET),
            None,
            "Curator entered a barrier of 2 alone"
        );
        let mut partner = rt
            .block_on(async {
                tokio::time::timeout(SOON, observer.double_barrier(path, 2).unwrap().enter()).await
            })
            .expect("lockkeeper enters with Curator")
            .unwrap();
        assert_eq!(java.next_line(STEP), "ENTERED 0");
        java.send("leave 0");
        rt.block_on(async { tokio::time::timeout(SOON, partner.leave()).await })
            .expect("lockkeeper leaves with Curator")
            .unwrap();
        let mut lines = [java.next_line(STEP), java.next_line(STEP)];
        lines.sort();
        assert_eq!(lines, ["LEFT 0", "OK leave 0"]);
        rt.block_on(wait_children(&observer, path, 0));

        assert_eq!(java.request("quit", STEP), "BYE");
        let done = java.finish(STEP);
        assert!(done.success, "{}", done.transcript);
        rt.block_on(async {
            survivor_session.close().await;
            observer.close().await;
        });
    }
}
