//! Two-phase commit with a process killed at each step: one coordinator and 5 sites, each a
//! process of its own (this test binary re-run by `test_child`, 4 s sessions), votes drawn at
//! random (commit with probability 0.85, so that some runs commit). In turn the coordinator
//! is SIGKILLed before its proposal, while it waits for votes, and after its decision; then
//! one site before it joins, after it joins, after it votes (before the decision), and after
//! the decision. A process stops at its step (it logs it and sleeps) so that the kill lands
//! exactly there. Where the coordinator died undecided, the test recovers as a new
//! coordinator.
//!
//! Asserted per run, against Keeper and Apache ZooKeeper: every surviving process reaches the
//! decision written in ZooKeeper; never commit after an abort vote; commit only when all 5
//! voted commit; and the reason each step must produce (a site killed before voting: timed out;
//! a commit vote killed before the decision: died; a coordinator killed undecided: recovered).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use lockkeeper::zk::{AbortReason, Outcome, Session, Vote};
use lockkeeper_testkit::test_child::{self, ChildProcess};
use rand::Rng;
use tokio::time::Instant;

use crate::support::{for_each_backend, session};

const TEST: &str = "faults::coordinator_or_site_killed_at_each_step";
const SITES: [&str; 5] = ["s0", "s1", "s2", "s3", "s4"];
const PATH: &str = "/2pc/faults";
/// The bound on any one wait of the parent or a child.
const LIMIT: Duration = Duration::from_secs(60);

#[derive(Clone, Copy, Debug)]
enum Victim {
    /// The coordinator, stopped at "connected", "awaiting votes" or "decided".
    Coordinator(&'static str),
    /// Site `SITES[i]`, stopped at "connected", "joined", "voted" or "decided".
    Site(usize, &'static str),
}

const RUNS: [Victim; 7] = [
    Victim::Coordinator("connected"),
    Victim::Coordinator("awaiting votes"),
    Victim::Coordinator("decided"),
    Victim::Site(1, "connected"),
    Victim::Site(2, "joined"),
    Victim::Site(3, "voted"),
    Victim::Site(4, "decided"),
];

fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} unset"))
}

/// Appends one line with one write, so a SIGKILL cannot leave half of it.
fn log(line: &str) {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(var("TPC_LOG"))
        .expect("child log");
    file.write_all(format!("{line}\n").as_bytes())
        .expect("log line");
}

/// Stops here (until SIGKILLed) if this is the step to die at.
async fn step(name: &str) {
    log(name);
    if var("TPC_PAUSE") == name {
        log(&format!("paused {name}"));
        tokio::time::sleep(Duration::from_secs(600)).await;
    }
}

async fn child_session() -> Session {
    Session::builder(&var("TPC_CONNECT"))
        .session_timeout(Duration::from_secs(4))
        .connect()
        .await
        .expect("child session")
}

async fn coordinator_child() {
    let two_phase = child_session().await.two_phase(PATH).unwrap();
    step("connected").await;
    let timeout = Duration::from_millis(var("TPC_TIMEOUT_MS").parse().unwrap());
    let outcome = two_phase
        .propose(&var("TPC_TX"), &SITES, b"payload", timeout)
        .await
        .expect("propose");
    log(&format!("outcome {outcome}"));
    step("decided").await;
}

async fn site_child() {
    let two_phase = child_session().await.two_phase(PATH).unwrap();
    step("connected").await;
    let proposal = tokio::time::timeout(LIMIT, two_phase.join(&var("TPC_TX"), &var("TPC_SITE")))
        .await
        .expect("a proposal in time")
        .expect("join");
    step("joined").await;
    let hold = PathBuf::from(var("TPC_HOLD"));
    if !hold.as_os_str().is_empty() {
        let deadline = Instant::now() + LIMIT;
        while !hold.exists() {
            assert!(Instant::now() < deadline, "never released");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let vote = if var("TPC_VOTE") == "commit" {
        Vote::Commit
    } else {
        Vote::Abort
    };
    log(&format!("vote {}", var("TPC_VOTE")));
    proposal.cast(vote).await.expect("cast");
    step("voted").await;
    let outcome = proposal
        .wait_timeout(LIMIT)
        .await
        .expect("wait")
        .expect("a decision in time");
    log(&format!("outcome {outcome}"));
    step("decided").await;
}

/// Waits (bounded) until `log` has the line `line`.
async fn wait_line(log: &Path, line: &str) {
    let deadline = Instant::now() + LIMIT;
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if text.lines().any(|l| l == line) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{} never logged {line:?}: {text}",
            log.display()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn lines(log: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines().map(str::to_owned).collect()
}

fn outcome_line(log: &Path) -> Option<String> {
    lines(log)
        .into_iter()
        .find_map(|l| l.strip_prefix("outcome ").map(str::to_owned))
}

/// One run: start everyone, kill the victim at its step, recover if needed, check everything.
async fn run(connect: &str, observer: &Session, tx: &str, victim: Victim) {
    let dir = tempfile::tempdir().unwrap();
    let hold = dir.path().join("release");
    let votes: Vec<&str> = SITES
        .iter()
        .map(|_| {
            if rand::thread_rng().gen_bool(0.85) {
                "commit"
            } else {
                "abort"
            }
        })
        .collect();
    let site_pause = |i: usize| match victim {
        Victim::Site(v, at) if v == i => at,
        _ => "",
    };
    // Which sites hold their vote until the test releases them: all of them while the
    // coordinator is to die waiting, every site but the victim when it must vote first.
    let holds = |i: usize| match victim {
        Victim::Coordinator("awaiting votes") => true,
        Victim::Site(v, "voted") => v != i,
        _ => false,
    };
    let timeout_ms = match victim {
        Victim::Site(_, "connected" | "joined") => 3_000,
        _ => 30_000,
    };
    let common = |log: &Path| {
        vec![
            ("TPC_CONNECT", connect.to_owned()),
            ("TPC_TX", tx.to_owned()),
            ("TPC_LOG", log.display().to_string()),
        ]
    };
    let coordinator_log = dir.path().join("coordinator");
    let mut env = common(&coordinator_log);
    let coordinator_pause = match victim {
        Victim::Coordinator(at) => at,
        _ => "",
    };
    env.push(("TPC_PAUSE", coordinator_pause.to_owned()));
    env.push(("TPC_TIMEOUT_MS", timeout_ms.to_string()));
    let mut coordinator = ChildProcess::spawn(TEST, "coordinator", &env);
    let mut sites = Vec::new();
    let site_logs: Vec<PathBuf> = SITES.iter().map(|s| dir.path().join(s)).collect();
    for (i, name) in SITES.iter().enumerate() {
        let mut env = common(&site_logs[i]);
        env.push(("TPC_SITE", (*name).to_owned()));
        env.push(("TPC_VOTE", votes[i].to_owned()));
        env.push(("TPC_PAUSE", site_pause(i).to_owned()));
        let held = if holds(i) {
            hold.display().to_string()
        } else {
            String::new()
        };
        env.push(("TPC_HOLD", held));
        sites.push(ChildProcess::spawn(TEST, "site", &env));
    }

    let two_phase = observer.two_phase(PATH).unwrap();
    let mut recovered = None;
    match victim {
        Victim::Coordinator("awaiting votes") => {
            for log in &site_logs {
                wait_line(log, "joined").await;
            }
            coordinator.kill();
            std::fs::write(&hold, b"").unwrap();
            recovered = Some(two_phase.recover(tx).await.unwrap());
        }
        Victim::Coordinator(at) => {
            wait_line(&coordinator_log, &format!("paused {at}")).await;
            coordinator.kill();
            if at == "connected" {
                recovered = Some(two_phase.recover(tx).await.unwrap());
            }
        }
        Victim::Site(v, at) => {
            wait_line(&site_logs[v], &format!("paused {at}")).await;
            sites[v].kill();
            if at == "voted" {
                // Until its commit vote is gone with its session (or an abort vote decided).
                let vote = format!("{PATH}/{tx}/votes/{}", SITES[v]);
                let deadline = Instant::now() + LIMIT;
                while two_phase.decision(tx).await.unwrap().is_none()
                    && observer
                        .client()
                        .unwrap()
                        .check_stat(&vote)
                        .await
                        .unwrap()
                        .is_some()
                {
                    assert!(
                        Instant::now() < deadline,
                        "the killed site's vote never went"
                    );
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                std::fs::write(&hold, b"").unwrap();
            }
        }
    }

    // Every survivor finishes and reports the decision written.
    let victim_site = match victim {
        Victim::Site(v, _) => Some(v),
        Victim::Coordinator(_) => None,
    };
    for (i, site) in sites.iter_mut().enumerate() {
        if victim_site != Some(i) {
            assert!(site.wait_success(LIMIT), "site {} failed", SITES[i]);
        }
    }
    if victim_site.is_some() {
        assert!(coordinator.wait_success(LIMIT), "the coordinator failed");
    }
    let decision = two_phase.decision(tx).await.unwrap().expect("a decision");
    let shown = decision.to_string();
    for (i, log) in site_logs.iter().enumerate() {
        let reported = outcome_line(log);
        if victim_site == Some(i) && reported.is_none() {
            continue;
        }
        assert_eq!(
            reported.as_deref(),
            Some(shown.as_str()),
            "site {}",
            SITES[i]
        );
    }
    if let Some(reported) = outcome_line(&coordinator_log) {
        assert_eq!(reported, shown, "the coordinator");
    }
    if let Some(recovered) = recovered {
        assert_eq!(recovered, decision, "recovery");
    }

    // Never commit after an abort vote; commit only on 5 commit votes.
    let voted: Vec<Option<String>> = site_logs
        .iter()
        .map(|log| {
            lines(log)
                .into_iter()
                .find_map(|l| l.strip_prefix("vote ").map(str::to_owned))
        })
        .collect();
    if decision.is_commit() {
        assert!(
            voted.iter().all(|v| v.as_deref() == Some("commit")),
            "commit with votes {voted:?}"
        );
    }
    if voted.iter().any(|v| v.as_deref() == Some("abort")) {
        assert!(
            !decision.is_commit(),
            "commit after an abort vote: {voted:?}"
        );
    }

    // What each step must produce.
    match victim {
        Victim::Coordinator("connected" | "awaiting votes") => {
            assert_eq!(decision, Outcome::Abort(AbortReason::Recovered));
        }
        Victim::Site(v, "connected" | "joined") => match &decision {
            Outcome::Abort(AbortReason::TimedOut(missing)) => {
                assert!(missing.contains(&SITES[v].to_owned()), "{missing:?}");
            }
            Outcome::Abort(AbortReason::Voted(site)) => assert_ne!(site, SITES[v]),
            other => panic!("a site that never voted, yet {other}"),
        },
        Victim::Site(v, "voted") => {
            let expected = if votes[v] == "commit" {
                AbortReason::Died(SITES[v].to_owned())
            } else {
                AbortReason::Voted(SITES[v].to_owned())
            };
            assert_eq!(decision, Outcome::Abort(expected));
        }
        _ => {}
    }
    eprintln!("{victim:?}: votes {votes:?}: {shown}");
    two_phase.forget(tx).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coordinator_or_site_killed_at_each_step() {
    match test_child::role().as_deref() {
        Some("coordinator") => return coordinator_child().await,
        Some("site") => return site_child().await,
        _ => {}
    }
    for_each_backend(|connect| async move {
        let observer = session(&connect).await;
        for (i, victim) in RUNS.iter().enumerate() {
            run(&connect, &observer, &format!("tx-{i}"), *victim).await;
        }
    })
    .await;
}
