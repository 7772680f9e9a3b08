//! The double barrier scenario: three members of a
//! [`DoubleBarrier`](lockkeeper::zk::DoubleBarrier) of three going round after round through a
//! fault, their history checked ([`crate::check::barrier`]).
//!
//! The members run in the orchestrator's process, each with its own session through its own
//! loopback proxy (so one can be cut off alone). Each round a member records that it enters,
//! calls `enter`, records that it passed, works a few milliseconds, records that it leaves and
//! calls `leave`. The records go into one list under one lock, so their order is one total
//! order. A member counts as entered from before its call (its node cannot exist earlier) and
//! as gone from before its leave (its node may go any moment after): both lean towards
//! finding no fault, so whatever the checker finds is one.
//!
//! Invariants: every call is bounded ([`CALL_WAIT`]); at most [`ROUNDS`] rounds; a member whose
//! call failed (its session lost while cut off) goes on with the next round, as a restarted
//! member would.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lockkeeper_testkit::Proxy;
use tokio::time::Instant;

use crate::backend::Backend;
use crate::check::barrier::{self, Event};
use crate::client::ZK_SESSION;
use crate::scenario::{Row, Scenario};

/// Members, and the barrier's size.
const MEMBERS: usize = 3;
/// The most rounds.
const ROUNDS: u32 = 30;
/// The longest one enter or leave may take.
const CALL_WAIT: Duration = Duration::from_secs(15);

/// Runs the barrier `scenario` on `backend` for about `length`.
pub(crate) async fn run(
    backend: &mut Backend,
    scenario: Scenario,
    seed: u64,
    length: Duration,
) -> Row {
    let started = Instant::now();
    let upstream = crate::recipes::upstream(backend, scenario);
    let path = format!("/faults/barrier-{seed:x}");
    let events = Arc::new(Mutex::new(Vec::new()));
    let mut proxies = Vec::new();
    let mut members = Vec::new();
    let pace = length / ROUNDS;
    for member in 0..MEMBERS {
        let proxy = Proxy::start(&upstream).await;
        let connect = proxy.connect_string();
        proxies.push(proxy);
        let (path, events) = (path.clone(), events.clone());
        members.push(tokio::spawn(rounds(
            member,
            connect,
            path,
            pace,
            started + length,
            events,
        )));
    }
    tokio::time::sleep(length / 4).await;
    crate::recipes::strike(backend, scenario, &proxies[0]).await;
    let mut problems = Vec::new();
    let mut failed_calls = 0;
    for member in members {
        match member.await {
            Ok(failed) => failed_calls += failed,
            Err(err) => problems.push(format!("a member panicked: {err}")),
        }
    }
    let events = events
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    problems.extend(
        barrier::check(&events, MEMBERS)
            .into_iter()
            .map(|p| format!("{p:?}")),
    );
    let passes = events
        .iter()
        .filter(|e| matches!(e, Event::Pass { .. }))
        .count();
    crate::recipes::row(
        scenario,
        seed,
        started,
        true,
        (passes, 0),
        problems,
        format!(
            "{passes} passes in {} events, {failed_calls} failed calls",
            events.len()
        ),
    )
}

/// One member's rounds until `until`; how many of its calls failed.
async fn rounds(
    member: usize,
    connect: String,
    path: String,
    pace: Duration,
    until: Instant,
    events: Arc<Mutex<Vec<Event>>>,
) -> usize {
    let record = |event: Event| {
        events
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(event);
    };
    let name = format!("m{member}");
    let Ok(session) = lockkeeper::zk::Session::builder(&connect)
        .session_timeout(ZK_SESSION)
        .connect()
        .await
    else {
        return 1;
    };
    let Ok(barrier) = session.double_barrier(&path, MEMBERS as u32) else {
        return 1;
    };
    let mut failed = 0;
    for round in 0..ROUNDS {
        if Instant::now() >= until {
            break;
        }
        tokio::time::sleep(pace).await;
        record(Event::Enter {
            member: name.clone(),
            round,
        });
        let Ok(Some(mut entered)) = barrier.enter_timeout(CALL_WAIT).await else {
            failed += 1;
            record(Event::Leave {
                member: name.clone(),
                round,
            });
            continue;
        };
        record(Event::Pass {
            member: name.clone(),
            round,
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
        record(Event::Leave {
            member: name.clone(),
            round,
        });
        if !matches!(entered.leave_timeout(CALL_WAIT).await, Ok(true)) {
            failed += 1;
        }
    }
    failed
}
