//! Two-phase commit against Keeper and Apache ZooKeeper: commit, each reason to abort, the
//! single decision under a race with recovery, bad input. The multi-process test that SIGKILLs
//! the coordinator or a site at each step is in `two_phase/faults.rs`; the votes that change
//! while the coordinator is frozen between its read and its decision, in `two_phase/races.rs`.

mod support;

#[path = "two_phase/faults.rs"]
mod faults;
#[path = "two_phase/freezer.rs"]
mod freezer;
#[path = "two_phase/races.rs"]
mod races;

use std::time::Duration;

use freezer::{Freezer, Trigger};
use lockkeeper::Error;
use lockkeeper::zk::{AbortReason, Outcome, TwoPhase, Vote};
use support::{for_each_backend, session};

const WAIT: Duration = Duration::from_secs(20);

/// Runs `site` joining `tx` and voting `vote` in a task of its own session; its outcome.
fn site(
    connect: &str,
    path: &str,
    tx: &str,
    name: &str,
    vote: Vote,
) -> tokio::task::JoinHandle<(Outcome, Vec<u8>)> {
    let (connect, path, tx, name) = (
        connect.to_owned(),
        path.to_owned(),
        tx.to_owned(),
        name.to_owned(),
    );
    tokio::spawn(async move {
        let session = session(&connect).await;
        let two_phase = session.two_phase(&path).unwrap();
        let proposal = two_phase.join(&tx, &name).await.expect("join");
        assert_eq!(proposal.site(), name);
        let outcome = tokio::time::timeout(WAIT, proposal.vote(vote))
            .await
            .expect("a decision in time")
            .expect("vote");
        // A site is woken by the proposal and by the decision, never by another site's vote.
        assert!(
            session.notifications() <= 2,
            "site {name} woken {} times",
            session.notifications()
        );
        (outcome, proposal.payload().to_vec())
    })
}

async fn outcomes(sites: Vec<tokio::task::JoinHandle<(Outcome, Vec<u8>)>>) -> Vec<Outcome> {
    let mut all = Vec::new();
    for site in sites {
        let (outcome, payload) = site.await.expect("site task");
        assert_eq!(payload, b"move 10 from a to b");
        all.push(outcome);
    }
    all
}

/// A site that joins before anything is proposed waits on watches, is woken by the proposal
/// (a notification, counted), and sees it whole: its transaction, every site, the payload.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_site_waiting_for_the_proposal_is_woken_by_it() {
    for_each_backend(|connect| async move {
        if support::is_ensemble(&connect) {
            eprintln!("skipped on an ensemble: watches are counted on one server");
            return;
        }
        let coordinator = session(&connect).await;
        let two_phase = coordinator.two_phase("/2pc/early").unwrap();
        assert_eq!(two_phase.path(), "/2pc/early");
        let site_session = session(&connect).await;
        let site = site_session.two_phase("/2pc/early").unwrap();
        let joining =
            tokio::spawn(async move { site.join_timeout("tx-early", "a", WAIT).await.unwrap() });
        // The site's watches are on the server before the proposal is written.
        let addr = connect.parse().expect("a single host:port");
        let deadline = tokio::time::Instant::now() + WAIT;
        while tokio::task::spawn_blocking(move || lockkeeper_testkit::total_watches(addr))
            .await
            .unwrap()
            == 0
        {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the site set no watch"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let proposing = tokio::spawn(async move {
            two_phase
                .propose("tx-early", &["a", "b"], b"payload", Duration::from_secs(1))
                .await
        });
        let proposal = tokio::time::timeout(WAIT, joining)
            .await
            .expect("joined")
            .unwrap()
            .expect("a proposal, not a timeout");
        assert_eq!(proposal.tx_id(), "tx-early");
        assert_eq!(proposal.site(), "a");
        assert_eq!(proposal.sites(), ["a", "b"]);
        assert_eq!(proposal.payload(), b"payload");
        assert!(
            site_session.notifications() >= 1,
            "the proposal's notification was not counted"
        );
        // Nobody voted: the vote times out.
        let outcome = proposing.await.unwrap().unwrap();
        let nobody = vec!["a".to_owned(), "b".to_owned()];
        assert_eq!(outcome, Outcome::Abort(AbortReason::TimedOut(nobody)));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_commit_vote_commits_and_everyone_learns_it() {
    for_each_backend(|connect| async move {
        let coordinator = session(&connect).await;
        let two_phase = coordinator.two_phase("/2pc/commit").unwrap();
        let names = ["a", "b", "c", "d", "e"];
        let sites = names
            .iter()
            .map(|n| site(&connect, "/2pc/commit", "tx-1", n, Vote::Commit))
            .collect();
        let outcome = two_phase
            .propose("tx-1", &names, b"move 10 from a to b", WAIT)
            .await
            .unwrap();
        assert_eq!(outcome, Outcome::Commit);
        assert!(outcomes(sites).await.iter().all(Outcome::is_commit));
        assert_eq!(
            two_phase.decision("tx-1").await.unwrap(),
            Some(Outcome::Commit)
        );
        // Recovery after a decision returns it, never overwrites it.
        assert_eq!(two_phase.recover("tx-1").await.unwrap(), Outcome::Commit);
        two_phase.forget("tx-1").await.unwrap();
        assert_eq!(two_phase.decision("tx-1").await.unwrap(), None);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_abort_vote_aborts_everyone() {
    for_each_backend(|connect| async move {
        let coordinator = session(&connect).await;
        let two_phase = coordinator.two_phase("/2pc/abort").unwrap();
        let names = ["a", "b", "c"];
        let sites = names
            .iter()
            .map(|n| {
                let vote = if *n == "b" { Vote::Abort } else { Vote::Commit };
                site(&connect, "/2pc/abort", "tx-1", n, vote)
            })
            .collect();
        let outcome = two_phase
            .propose("tx-1", &names, b"move 10 from a to b", WAIT)
            .await
            .unwrap();
        let aborted = Outcome::Abort(AbortReason::Voted("b".into()));
        assert_eq!(outcome, aborted);
        assert!(outcomes(sites).await.iter().all(|o| *o == aborted));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_missing_vote_times_out_into_abort() {
    for_each_backend(|connect| async move {
        let coordinator = session(&connect).await;
        let two_phase = coordinator.two_phase("/2pc/timeout").unwrap();
        let sites = vec![site(&connect, "/2pc/timeout", "tx-1", "a", Vote::Commit)];
        let outcome = two_phase
            .propose(
                "tx-1",
                &["a", "b"],
                b"move 10 from a to b",
                Duration::from_millis(1500),
            )
            .await
            .unwrap();
        let aborted = Outcome::Abort(AbortReason::TimedOut(vec!["b".into()]));
        assert_eq!(outcome, aborted);
        assert_eq!(outcomes(sites).await, vec![aborted.clone()]);
        // A late site learns the same decision, and its vote changes nothing.
        let late = session(&connect).await;
        let proposal = late
            .two_phase("/2pc/timeout")
            .unwrap()
            .join("tx-1", "b")
            .await
            .unwrap();
        assert_eq!(proposal.vote(Vote::Commit).await.unwrap(), aborted);
    })
    .await;
}

/// The coordinator reads a's commit vote and is frozen (its requests held back) until a's
/// session has ended: it must see the vote vanish and decide abort at once, without waiting
/// for b (whose vote comes only after the decision, and changes nothing).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_commit_vote_that_vanishes_aborts() {
    for_each_backend(|connect| async move {
        let freezer = Freezer::start(&connect).await;
        let coordinator = session(&freezer.connect_string()).await;
        let two_phase = coordinator.two_phase("/2pc/died").unwrap();
        let proposing = {
            let two_phase = two_phase.clone();
            tokio::spawn(async move {
                two_phase
                    .propose("tx-1", &["a", "b"], b"x", Duration::from_secs(600))
                    .await
            })
        };
        let doomed = session(&connect).await;
        let proposal = doomed
            .two_phase("/2pc/died")
            .unwrap()
            .join("tx-1", "a")
            .await
            .unwrap();
        // Armed once the proposal (a multi) is written, before the vote exists.
        freezer.arm(Trigger::AfterGetData("/2pc/died/tx-1/votes/a".into()));
        proposal.cast(Vote::Commit).await.unwrap();
        // Voting twice is refused: a vote is written once.
        assert!(matches!(
            proposal.cast(Vote::Abort).await,
            Err(Error::Conflict { why, .. }) if why.contains("\"a\"")
        ));
        freezer.frozen().await;
        doomed.close().await;
        support::wait_children(&session(&connect).await, "/2pc/died/tx-1/votes", 0).await;
        freezer.thaw();
        let outcome = tokio::time::timeout(WAIT, proposing)
            .await
            .expect("decided in time")
            .unwrap()
            .unwrap();
        assert_eq!(outcome, Outcome::Abort(AbortReason::Died("a".into())));
        // b votes commit afterwards: the decision stands.
        let b = session(&connect).await;
        let proposal = b
            .two_phase("/2pc/died")
            .unwrap()
            .join("tx-1", "b")
            .await
            .unwrap();
        assert_eq!(proposal.vote(Vote::Commit).await.unwrap(), outcome);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn recovery_decides_abort_once_and_fences_a_late_proposal() {
    for_each_backend(|connect| async move {
        let session = session(&connect).await;
        let two_phase = session.two_phase("/2pc/recover").unwrap();
        // Never proposed: recovery writes the transaction and its abort.
        let waiting = site(&connect, "/2pc/recover", "tx-1", "a", Vote::Commit);
        let recovered = Outcome::Abort(AbortReason::Recovered);
        assert_eq!(two_phase.recover("tx-1").await.unwrap(), recovered);
        let (outcome, payload) = waiting.await.unwrap();
        assert_eq!((outcome, payload), (recovered.clone(), Vec::new()));
        assert!(matches!(
            two_phase.propose("tx-1", &["a"], b"late", WAIT).await,
            Err(Error::Conflict { path, .. }) if path.contains("tx-1")
        ));
        // A coordinator still waiting for votes learns a recovery's abort at once.
        let proposing = {
            let two_phase = two_phase.clone();
            tokio::spawn(async move {
                two_phase
                    .propose("tx-3", &["a"], b"x", Duration::from_secs(600))
                    .await
            })
        };
        let deadline = tokio::time::Instant::now() + WAIT;
        while support::children(&session, "/2pc/recover/tx-3")
            .await
            .is_empty()
        {
            assert!(tokio::time::Instant::now() < deadline, "never proposed");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(two_phase.recover("tx-3").await.unwrap(), recovered);
        let learned = tokio::time::timeout(WAIT, proposing)
            .await
            .expect("learned in time");
        assert_eq!(learned.unwrap().unwrap(), recovered);
        // Many recoveries and a coordinator racing: one decision, everyone reports it.
        let proposing = {
            let two_phase = two_phase.clone();
            tokio::spawn(async move { two_phase.propose("tx-2", &["a"], b"x", WAIT).await })
        };
        let mut racers = Vec::new();
        for _ in 0..4 {
            let two_phase = two_phase.clone();
            racers.push(tokio::spawn(async move { two_phase.recover("tx-2").await }));
        }
        let voter = site(&connect, "/2pc/recover", "tx-2", "a", Vote::Commit);
        let mut all = vec![voter.await.unwrap().0];
        for racer in racers {
            all.push(racer.await.unwrap().unwrap());
        }
        // The coordinator reports the decision, or was fenced by a recovery that came first.
        match proposing.await.unwrap() {
            Ok(outcome) => all.push(outcome),
            Err(Error::Conflict { why, .. }) => {
                assert!(why.contains("exists already"), "{why}");
                assert_eq!(all[0], recovered);
            }
            Err(err) => panic!("propose: {err}"),
        }
        let written = two_phase
            .decision("tx-2")
            .await
            .unwrap()
            .expect("a decision");
        assert!(all.iter().all(|o| *o == written), "{all:?} vs {written:?}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_with_its_name() {
    for_each_backend(|connect| async move {
        let session = session(&connect).await;
        let refused = |result: lockkeeper::Result<TwoPhase>, word: &str| match result {
            Err(Error::InvalidArgument(m)) => assert!(m.contains(word), "{m}"),
            other => panic!("expected InvalidArgument, got {other:?}"),
        };
        refused(session.two_phase("2pc"), "transaction path");
        refused(session.two_phase("/2pc/"), "transaction path");
        refused(session.two_phase("/zookeeper/x"), "transaction path");
        let two_phase = session.two_phase("/2pc/bad").unwrap();
        let invalid = |result: lockkeeper::Result<Outcome>, word: &str| match result {
            Err(Error::InvalidArgument(m)) => assert!(m.contains(word), "{m}"),
            other => panic!("expected InvalidArgument naming {word}, got {other:?}"),
        };
        invalid(
            two_phase.propose("a/b", &["s"], b"", WAIT).await,
            "transaction id",
        );
        invalid(
            two_phase.propose("", &["s"], b"", WAIT).await,
            "transaction id",
        );
        invalid(two_phase.propose("t", &[], b"", WAIT).await, "sites");
        invalid(
            two_phase.propose("t", &["s", "s"], b"", WAIT).await,
            "named twice",
        );
        invalid(two_phase.propose("t", &["s/x"], b"", WAIT).await, "site");
        invalid(
            two_phase.propose("t", &["s"], b"", Duration::ZERO).await,
            "vote timeout",
        );
        invalid(two_phase.recover("..").await, "transaction id");
        assert!(matches!(
            two_phase.decision("a\nb").await,
            Err(Error::InvalidArgument(_))
        ));
        // Joining as a site the proposal does not name.
        let proposing = {
            let two_phase = two_phase.clone();
            tokio::spawn(async move {
                two_phase
                    .propose("t", &["s"], b"", Duration::from_secs(2))
                    .await
            })
        };
        match two_phase.join("t", "intruder").await {
            Err(Error::InvalidArgument(m)) => assert!(m.contains("intruder"), "{m}"),
            other => panic!("expected InvalidArgument, got {other:?}"),
        }
        assert_eq!(
            proposing.await.unwrap().unwrap(),
            Outcome::Abort(AbortReason::TimedOut(vec!["s".into()]))
        );
        // Nothing proposed: a join with a timeout gives up.
        let none = two_phase
            .join_timeout("never", "s", Duration::from_millis(200))
            .await
            .unwrap();
        assert!(none.is_none());
    })
    .await;
}

/// A second coordinator proposing a transaction id another one proposed is refused: it must
/// not take the other's proposal for a retry of its own and collect its votes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_second_coordinator_of_one_transaction_is_refused() {
    for_each_backend(|connect| async move {
        let first = session(&connect).await.two_phase("/2pc/twice").unwrap();
        let second = session(&connect).await.two_phase("/2pc/twice").unwrap();
        let proposing = tokio::spawn(async move {
            first
                .propose("tx", &["a"], b"first", Duration::from_secs(2))
                .await
        });
        let joined = session(&connect).await.two_phase("/2pc/twice").unwrap();
        let proposal = joined.join("tx", "a").await.expect("the first proposal");
        assert_eq!(proposal.payload(), b"first");
        match second.propose("tx", &["a"], b"second", WAIT).await {
            Err(Error::Conflict { why, .. }) => assert!(why.contains("exists already"), "{why}"),
            other => panic!("a second proposal of tx: {other:?}"),
        }
        assert_eq!(
            proposing.await.unwrap().unwrap(),
            Outcome::Abort(AbortReason::TimedOut(vec!["a".into()]))
        );
    })
    .await;
}

/// A site votes once. The same vote again from its own session is the vote it cast (a retry
/// whose first answer was lost looks the same): it waits for the decision with it. Another
/// vote, or the same vote from another session, is refused as "has voted already".
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_site_votes_once() {
    for_each_backend(|connect| async move {
        let coordinator = session(&connect).await.two_phase("/2pc/once").unwrap();
        let proposing = tokio::spawn(async move {
            coordinator
                .propose("tx", &["a", "b"], b"p", Duration::from_secs(3))
                .await
        });
        let site_session = session(&connect).await;
        let site = site_session.two_phase("/2pc/once").unwrap();
        let first = site.join("tx", "a").await.expect("join");
        let voting = tokio::spawn(async move { first.vote(Vote::Commit).await });
        support::wait_children(&site_session, "/2pc/once/tx/votes", 1).await;
        let refused = |what: &str, voted: lockkeeper::Result<Outcome>| match voted {
            Err(Error::Conflict { why, .. }) => {
                assert!(why.contains("voted already"), "{what}: {why}");
            }
            other => panic!("{what}: {other:?}"),
        };
        let again = site.join("tx", "a").await.expect("join again");
        let voted = tokio::time::timeout(WAIT, again.vote(Vote::Abort)).await;
        refused("another vote", voted.expect("answered"));
        let elsewhere = session(&connect).await.two_phase("/2pc/once").unwrap();
        let other = elsewhere.join("tx", "a").await.expect("join elsewhere");
        let voted = tokio::time::timeout(WAIT, other.vote(Vote::Commit)).await;
        refused(
            "the same vote from another session",
            voted.expect("answered"),
        );
        let same = site.join("tx", "a").await.expect("join once more");
        let outcome = tokio::time::timeout(WAIT, same.vote(Vote::Commit))
            .await
            .expect("decided")
            .expect("the vote it cast");
        let timed_out = Outcome::Abort(AbortReason::TimedOut(vec!["b".into()]));
        assert_eq!(outcome, timed_out);
        assert_eq!(voting.await.unwrap().unwrap(), timed_out);
        assert_eq!(proposing.await.unwrap().unwrap(), timed_out);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_coordinator_whose_session_expires_carries_on_in_the_next() {
    use lockkeeper::zk::ConnectionState;
    use support::Partition;

    for_each_backend(|connect| async move {
        let partition = Partition::start(&connect).await;
        let coordinator = session(&partition.connect_string()).await;
        let first = coordinator.session_id();
        let mut states = coordinator.states();
        let two_phase = coordinator.two_phase("/2pc/expiry").unwrap();
        let proposing = tokio::spawn(async move {
            two_phase
                .propose(
                    "tx-1",
                    &["a", "b"],
                    b"move 10 from a to b",
                    Duration::from_secs(60),
                )
                .await
        });
        let observer = session(&connect).await;
        support::wait_children(&observer, "/2pc/expiry", 1).await;
        partition.cut();
        tokio::time::timeout(WAIT, async {
            while states.next().await != Some(ConnectionState::Lost) {}
        })
        .await
        .expect("the coordinator's session expires");
        // Votes cast while the coordinator has no session.
        let sites = ["a", "b"]
            .iter()
            .map(|n| site(&connect, "/2pc/expiry", "tx-1", n, Vote::Commit))
            .collect();
        support::wait_children(&observer, "/2pc/expiry/tx-1/votes", 2).await;
        partition.heal();
        let outcome = tokio::time::timeout(WAIT, proposing)
            .await
            .expect("decided in time")
            .unwrap()
            .unwrap();
        assert_ne!(coordinator.session_id(), first);
        assert_eq!(outcome, Outcome::Commit);
        assert!(outcomes(sites).await.iter().all(Outcome::is_commit));
    })
    .await;
}
