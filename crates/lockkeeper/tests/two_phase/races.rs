//! Two-phase commit when a vote changes after the coordinator read it: the coordinator is
//! frozen at a chosen request (`freezer.rs`) while site `a`'s commit vote vanishes, comes back
//! as another vote, or is rewritten, and `b` votes commit; then it is thawed. Whatever it read
//! before, the decision must follow the votes standing when it is written: never commit.
//!
//! Each safety check of the commit path has a case here that fails without it: the identity
//! of each vote read back before the commit (re-created: `DiesAndVotes`; rewritten in place:
//! `Rewritten`), the commit multi's check of each vote (`Dies` at the multi) and of the count
//! of votes cast (`DiesAndVotes` at the multi).

use std::time::Duration;

use lockkeeper::zk::{AbortReason, Outcome, Session, Vote};
use tokio::time::Instant;

use super::freezer::{Freezer, Trigger};
use crate::support::{for_each_backend, session};

/// The bound on each wait; the vote timeout is longer than any test, so a decision is never a
/// timeout here.
const WAIT: Duration = Duration::from_secs(30);
const VOTE_TIMEOUT: Duration = Duration::from_secs(600);

/// What happens to `a`'s commit vote while the coordinator is frozen.
#[derive(Clone, Copy, Debug)]
enum Change {
    /// `a`'s session ends (its ephemeral vote goes) and `a` does not come back.
    Dies,
    /// `a`'s session ends and `a` comes back in a new session and votes this.
    DiesAndVotes(Vote),
    /// Someone rewrites `a`'s vote node in place with `abort` (not the recipe: a stray write).
    Rewritten,
}

/// Waits (bounded) until `node` exists or not, as `present` says.
async fn wait_node(observer: &Session, node: &str, present: bool) {
    let deadline = Instant::now() + WAIT;
    loop {
        let stat = observer
            .client()
            .expect("observer client")
            .check_stat(node)
            .await
            .unwrap_or_else(|err| panic!("exists {node}: {err}"));
        if stat.is_some() == present {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{node} still {}",
            if present { "missing" } else { "there" }
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Joins `tx` as `site` in a session of its own and casts `vote`; the task waits for the
/// decision. Returns once the vote is cast.
async fn cast(
    connect: &str,
    path: &str,
    tx: &str,
    site: &str,
    vote: Vote,
) -> (Session, tokio::task::JoinHandle<Outcome>) {
    let session = session(connect).await;
    let proposal = session
        .two_phase(path)
        .unwrap()
        .join(tx, site)
        .await
        .unwrap_or_else(|err| panic!("{site} joins {tx}: {err}"));
    proposal
        .cast(vote)
        .await
        .unwrap_or_else(|err| panic!("{site} casts {vote:?} in {tx}: {err}"));
    let waiting = tokio::spawn(async move {
        tokio::time::timeout(WAIT, proposal.wait())
            .await
            .expect("a decision in time")
            .expect("wait for the decision")
    });
    (session, waiting)
}

/// Applies `change` to `a`'s vote under `tx`; `a`'s task waiting for the decision, if it still
/// has one (in its first session, or in the new one it voted in).
async fn apply(
    change: Change,
    connect: &str,
    path: &str,
    tx: &str,
    a: (Session, tokio::task::JoinHandle<Outcome>),
    observer: &Session,
) -> Option<(Session, tokio::task::JoinHandle<Outcome>)> {
    let node = format!("{path}/{tx}/votes/a");
    match change {
        Change::Dies | Change::DiesAndVotes(_) => {
            let (session, waiting) = a;
            waiting.abort();
            session.close().await;
            wait_node(observer, &node, false).await;
        }
        Change::Rewritten => {
            observer
                .client()
                .expect("observer client")
                .set_data(&node, b"abort", None)
                .await
                .unwrap_or_else(|err| panic!("rewrite {node}: {err}"));
            return Some(a);
        }
    }
    match change {
        Change::DiesAndVotes(vote) => Some(cast(connect, path, tx, "a", vote).await),
        _ => None,
    }
}

/// One case: the coordinator (through a freezer armed with `trigger`) proposes `tx` to `a` and
/// `b`; `a` votes commit; `b` votes commit before the freeze if `b_first`, else after the
/// change; the coordinator is frozen, `change` is applied, and it is thawed. Asserts the
/// decision is `expected` and that everyone who waits learns it.
async fn case(
    connect: &str,
    observer: &Session,
    tx: &str,
    trigger: impl FnOnce(&str) -> Trigger,
    b_first: bool,
    change: Change,
    expected: Outcome,
) {
    let path = "/2pc/races";
    let freezer = Freezer::start(connect).await;
    let coordinator = session(&freezer.connect_string()).await;
    let two_phase = coordinator.two_phase(path).unwrap();
    let proposing = {
        let (two_phase, tx) = (two_phase.clone(), tx.to_owned());
        tokio::spawn(async move {
            two_phase
                .propose(&tx, &["a", "b"], b"x", VOTE_TIMEOUT)
                .await
        })
    };
    // Armed once the proposal (a multi itself) has been written.
    wait_node(observer, &format!("{path}/{tx}/votes"), true).await;
    freezer.arm(trigger(&format!("{path}/{tx}/votes/a")));
    let a = cast(connect, path, tx, "a", Vote::Commit).await;
    let mut waiting = Vec::new();
    if b_first {
        waiting.push(cast(connect, path, tx, "b", Vote::Commit).await);
    }
    freezer.frozen().await;
    waiting.extend(apply(change, connect, path, tx, a, observer).await);
    if !b_first {
        waiting.push(cast(connect, path, tx, "b", Vote::Commit).await);
    }
    freezer.thaw();
    let outcome = tokio::time::timeout(WAIT, proposing)
        .await
        .unwrap_or_else(|_| panic!("{tx} ({change:?}): no decision in time"))
        .expect("coordinator task")
        .unwrap_or_else(|err| panic!("{tx} ({change:?}): propose: {err}"));
    assert_eq!(outcome, expected, "{tx} ({change:?}): the coordinator");
    for (_session, site) in waiting {
        let learned = site.await.expect("site task");
        assert_eq!(learned, expected, "{tx} ({change:?}): a site");
    }
    assert_eq!(
        two_phase.decision(tx).await.unwrap(),
        Some(expected),
        "{tx} ({change:?}): the decision written"
    );
    coordinator.close().await;
}

/// The coordinator read `a`'s commit vote, then was stopped before `b` voted; meanwhile `a`'s
/// vote went (its session ended) and came back as an abort or a new commit, or was rewritten.
/// Without the read-back's czxid check, a re-created vote has the version the coordinator read
/// and it commits; without its version check, the rewritten vote fails every commit multi and
/// no decision comes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_vote_changed_after_the_coordinator_read_it_never_commits() {
    for_each_backend(|connect| async move {
        let observer = session(&connect).await;
        let died = Outcome::Abort(AbortReason::Died("a".into()));
        let cases = [
            (Change::DiesAndVotes(Vote::Abort), died.clone()),
            (Change::DiesAndVotes(Vote::Commit), died.clone()),
            (
                Change::Rewritten,
                Outcome::Abort(AbortReason::Voted("a".into())),
            ),
        ];
        for (i, (change, expected)) in cases.into_iter().enumerate() {
            let tx = format!("read-{i}");
            case(
                &connect,
                &observer,
                &tx,
                |vote| Trigger::AfterGetData(vote.to_owned()),
                false,
                change,
                expected,
            )
            .await;
        }
    })
    .await;
}

/// The coordinator read both commit votes back and sent its commit multi, which is held back
/// while `a`'s vote goes (and, in one case, comes back as an abort). Without the multi's check
/// of each vote it commits over a vanished vote; without its check of the count of votes cast,
/// over a re-created one.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_vote_changed_while_the_commit_is_in_flight_never_commits() {
    for_each_backend(|connect| async move {
        let observer = session(&connect).await;
        let died = Outcome::Abort(AbortReason::Died("a".into()));
        for (i, change) in [Change::Dies, Change::DiesAndVotes(Vote::Abort)]
            .into_iter()
            .enumerate()
        {
            let tx = format!("multi-{i}");
            case(
                &connect,
                &observer,
                &tx,
                |_| Trigger::AtMulti,
                true,
                change,
                died.clone(),
            )
            .await;
        }
    })
    .await;
}
