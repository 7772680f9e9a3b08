//! The two-phase commit scenario: a coordinator and three sites of
//! [`TwoPhase`] through a fault, each transaction's history checked
//! ([`crate::check::two_phase`]).
//!
//! A coordinator and three sites run in the orchestrator's process, each with its own session
//! through its own loopback proxy (so one can be cut off alone). Transactions run one after
//! another for the scenario's length: the coordinator proposes, every site joins and casts a
//! seeded random vote (abort one time in five), then waits for the decision. The history of
//! each transaction is the votes the sites cast (a site that could not join or cast has no
//! vote) and the outcome each site and the coordinator learned.
//!
//! What the check can and cannot see: an abort vote is persistent, so any abort cast must end
//! in abort for everyone; a site without a vote must not see a commit; and everyone who
//! learns an outcome learns the same one. A commit vote that vanished with its site's session
//! before the decision cannot be told apart from one that stood from the sites' side; the
//! server knows. So the check reads the votes standing at each decision from the server's
//! transaction log, Keeper's or Apache ZooKeeper's ([`crate::check::standing`]); where there
//! is none to read it counts every cast commit vote as standing, the weaker claim, and the
//! row's note says which applied.
//!
//! Invariants: every call is bounded; at most [`TRANSACTIONS`] transactions.

use std::time::Duration;

use lockkeeper::zk::{Outcome as TxOutcome, TwoPhase, Vote as TxVote};
use lockkeeper_testkit::Proxy;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::time::Instant;

use crate::backend::Backend;
use crate::check::standing;
use crate::check::two_phase::{self, Outcome, Transaction, Vote};
use crate::client::ZK_SESSION;
use crate::scenario::{Fault, Row, Scenario};

/// Sites per transaction.
const SITES: usize = 3;
/// The most transactions in one scenario.
const TRANSACTIONS: usize = 40;
/// How long the coordinator waits for votes before it aborts.
const VOTE_TIMEOUT: Duration = Duration::from_secs(3);
/// How long a site waits to join, and then for the decision.
const SITE_WAIT: Duration = Duration::from_secs(15);

/// Runs the two-phase commit `scenario` on `backend` for about `length`.
pub(crate) async fn run(
    backend: &mut Backend,
    scenario: Scenario,
    seed: u64,
    length: Duration,
) -> Row {
    let started = Instant::now();
    let upstream = crate::recipes::upstream(backend, scenario);
    let path = format!("/faults/2pc-{seed:x}");
    // Proxy 0 is the coordinator's, 1.. the sites'.
    let mut proxies = Vec::new();
    let mut handles = Vec::new();
    for _ in 0..=SITES {
        let proxy = Proxy::start(&upstream).await;
        let session = lockkeeper::zk::Session::builder(&proxy.connect_string())
            .session_timeout(ZK_SESSION)
            .connect()
            .await
            .unwrap_or_else(|e| panic!("{scenario}: connect: {e}"));
        handles.push(
            session
                .two_phase(&path)
                .unwrap_or_else(|e| panic!("{scenario}: {e}")),
        );
        proxies.push(proxy);
    }
    let sites: Vec<String> = (0..SITES).map(|i| format!("site{i}")).collect();
    let mut rng = StdRng::seed_from_u64(seed);
    let fault_at = started + length / 4;
    let mut faulted = false;
    let mut histories = Vec::new();
    let mut problems = Vec::new();
    let mut commits = 0;
    for tx in 0..TRANSACTIONS {
        if started.elapsed() >= length && faulted {
            break;
        }
        // Spread over the scenario's length, so transactions run before, across and after
        // the fault.
        tokio::time::sleep(length / TRANSACTIONS as u32).await;
        if !faulted && Instant::now() >= fault_at {
            faulted = true;
            match scenario.fault {
                Fault::None => {}
                Fault::Server => backend.server_fault().await,
                // A site cut off past its session, transactions going on meanwhile.
                Fault::Cut => proxies[1].cut(),
                other => panic!("{scenario}: two-phase commit has no {other:?} fault"),
            }
        }
        if scenario.fault == Fault::Cut
            && faulted
            && Instant::now() >= fault_at + ZK_SESSION + Duration::from_secs(2)
        {
            proxies[1].heal();
        }
        let votes: Vec<TxVote> = (0..SITES)
            .map(|_| {
                if rng.gen_range(0..5) == 0 {
                    TxVote::Abort
                } else {
                    TxVote::Commit
                }
            })
            .collect();
        let history = transaction(&handles, &sites, &format!("tx-{tx}"), &votes).await;
        if history
            .learned
            .iter()
            .any(|(_, o)| *o == Some(Outcome::Commit))
        {
            commits += 1;
        }
        histories.push(history);
    }
    if scenario.fault == Fault::Cut {
        proxies[1].heal();
    }
    // The server's own order, where there is one to read: the votes that stood at each
    // decision replace the votes the sites cast.
    let log = backend.server_history();
    let mut from_log = 0;
    for (tx, history) in histories.iter_mut().enumerate() {
        if let Some(Ok(log)) = &log {
            if let Some(votes) = standing::at_decision(log, &path, &format!("tx-{tx}"), &sites) {
                history.votes = votes;
                from_log += 1;
            }
        }
        problems.extend(
            two_phase::check(history)
                .into_iter()
                .map(|p| format!("tx-{tx}: {p:?}")),
        );
    }
    let votes_read = match &log {
        Some(Ok(_)) => format!(
            "standing votes read from the server's log for {from_log} of them (the rest show \
             no decision there)"
        ),
        Some(Err(err)) => {
            format!("the server's log unreadable ({err}): cast votes counted as standing")
        }
        None => "cast commit votes counted as standing (the servers' log is not read)".into(),
    };
    crate::recipes::row(
        scenario,
        seed,
        started,
        faulted,
        (histories.len(), 0),
        problems,
        format!(
            "{} transactions, {commits} committed; {votes_read}",
            histories.len()
        ),
    )
}

/// One transaction: the coordinator proposes while every site joins and votes; what each
/// cast and learned.
async fn transaction(
    handles: &[TwoPhase],
    sites: &[String],
    tx: &str,
    votes: &[TxVote],
) -> Transaction {
    let site_names: Vec<&str> = sites.iter().map(String::as_str).collect();
    let coordinator = async {
        let proposed = handles[0].propose(tx, &site_names, b"payload", VOTE_TIMEOUT);
        match tokio::time::timeout(SITE_WAIT, proposed).await {
            Ok(Ok(outcome)) => Some(learned(&outcome)),
            _ => None,
        }
    };
    // Each site in a task of its own, so the sites and the coordinator go at once.
    let participants: Vec<_> = sites
        .iter()
        .zip(votes)
        .enumerate()
        .map(|(i, (site, vote))| {
            let (handle, site, vote, tx) =
                (handles[1 + i].clone(), site.clone(), *vote, tx.to_owned());
            tokio::spawn(async move {
                let Ok(Some(joined)) = handle.join_timeout(&tx, &site, SITE_WAIT).await else {
                    return (site, Vote::Missing, None);
                };
                let cast = match tokio::time::timeout(SITE_WAIT, joined.cast(vote)).await {
                    Ok(Ok(())) => match vote {
                        TxVote::Commit => Vote::Commit,
                        TxVote::Abort => Vote::Abort,
                    },
                    _ => Vote::Missing,
                };
                let outcome = match joined.wait_timeout(SITE_WAIT).await {
                    Ok(Some(outcome)) => Some(learned(&outcome)),
                    _ => None,
                };
                (site, cast, outcome)
            })
        })
        .collect();
    let decided = coordinator.await;
    let mut sited = Vec::new();
    for (participant, site) in participants.into_iter().zip(sites) {
        // A site's task only panics if the library does; then it learned nothing.
        sited.push(
            participant
                .await
                .unwrap_or_else(|_| (site.clone(), Vote::Missing, None)),
        );
    }
    let mut history = Transaction {
        votes: sited.iter().map(|(s, v, _)| (s.clone(), *v)).collect(),
        learned: sited.into_iter().map(|(s, _, o)| (s, o)).collect(),
    };
    history.learned.push(("coordinator".into(), decided));
    history
}

fn learned(outcome: &TxOutcome) -> Outcome {
    if outcome.is_commit() {
        Outcome::Commit
    } else {
        Outcome::Abort
    }
}
