//! The counter scenario: [`AtomicLong`](lockkeeper::zk::AtomicLong) clients under a fault,
//! their history checked for linearizability ([`crate::check::counter`]).
//!
//! Three clients run in the orchestrator's process, each with its own session through its own
//! loopback proxy (so one can be cut off alone), calling increments, reads and
//! compare-and-sets in a seeded random mix with short pauses. Each call is recorded with when
//! it was called and answered on the orchestrator's monotonic clock; a call that failed is
//! recorded as unanswered (it may or may not have taken effect), except a read, which changes
//! nothing and is left out.
//!
//! Invariants: at most [`CALLS`] calls per client, so a history stays within the checker's
//! [`MAX_OPS`](crate::check::counter::MAX_OPS); every call is bounded by [`CALL_WAIT`]; the
//! fault strikes after a quarter of the scenario's length.

use std::time::Duration;

use lockkeeper_testkit::Proxy;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::time::Instant;

use crate::backend::Backend;
use crate::check::counter::{self, Answer, Call, Op};
use crate::client::ZK_SESSION;
use crate::scenario::{Row, Scenario};

/// Clients calling the counter at once.
const CLIENTS: u32 = 3;
/// Calls per client.
const CALLS: usize = 40;
/// The longest one call may take before it counts as unanswered.
const CALL_WAIT: Duration = Duration::from_secs(10);

/// Runs the counter `scenario` on `backend` for about `length`.
pub(crate) async fn run(
    backend: &mut Backend,
    scenario: Scenario,
    seed: u64,
    length: Duration,
) -> Row {
    let started = Instant::now();
    let upstream = crate::recipes::upstream(backend, scenario);
    let path = format!("/faults/counter-{seed:x}");
    let mut proxies = Vec::new();
    let mut tasks = Vec::new();
    // Calls spread over the whole scenario: the fault lands among them.
    let gap = length / CALLS as u32;
    for client in 0..CLIENTS {
        let proxy = Proxy::start(&upstream).await;
        let connect = proxy.connect_string();
        proxies.push(proxy);
        let path = path.clone();
        let rng = StdRng::seed_from_u64(seed.wrapping_add(u64::from(client)));
        tasks.push(tokio::spawn(calls(
            client, connect, path, rng, gap, started,
        )));
    }
    tokio::time::sleep(length / 4).await;
    crate::recipes::strike(backend, scenario, &proxies[0]).await;
    let mut history = Vec::new();
    let mut problems = Vec::new();
    for task in tasks {
        match task.await {
            Ok(Ok(calls)) => history.extend(calls),
            Ok(Err(err)) => problems.push(err),
            Err(err) => problems.push(format!("a counter client panicked: {err}")),
        }
    }
    let answered = history
        .iter()
        .filter(|c| c.answer != Answer::Unknown)
        .count();
    if let Err(problem) = counter::check(0, &history) {
        problems.push(format!("not linearizable: {problem:?}"));
    }
    crate::recipes::row(
        scenario,
        seed,
        started,
        true,
        (answered, history.len()),
        problems,
        format!("{} calls, {answered} answered", history.len()),
    )
}

/// One client's calls; `Err` only if it could never connect.
async fn calls(
    client: u32,
    connect: String,
    path: String,
    mut rng: StdRng,
    gap: Duration,
    started: Instant,
) -> Result<Vec<Call>, String> {
    let session = lockkeeper::zk::Session::builder(&connect)
        .session_timeout(ZK_SESSION)
        .connect()
        .await
        .map_err(|e| format!("counter client {client}: connect {connect}: {e}"))?;
    let counter = session
        .atomic_long(&path)
        .map_err(|e| format!("counter client {client}: {e}"))?;
    let now = || started.elapsed().as_nanos() as u64;
    let mut history = Vec::with_capacity(CALLS);
    let mut last_seen = 0;
    for _ in 0..CALLS {
        tokio::time::sleep(gap.mul_f64(rng.gen_range(0.5..1.5))).await;
        let op = match rng.gen_range(0..4) {
            0 => Op::Get,
            1 => Op::CompareAndSet {
                expected: last_seen,
                new: last_seen + 100,
            },
            _ => Op::Add(1),
        };
        let called = now();
        let answer = match op {
            Op::Get => tokio::time::timeout(CALL_WAIT, counter.load())
                .await
                .ok()
                .and_then(Result::ok)
                .map(Answer::Value),
            // The checker's model answers an add with the value after it.
            Op::Add(delta) => tokio::time::timeout(CALL_WAIT, counter.add_fetch(delta))
                .await
                .ok()
                .and_then(Result::ok)
                .map(Answer::Value),
            Op::CompareAndSet { expected, new } => {
                tokio::time::timeout(CALL_WAIT, counter.compare_exchange(expected, new))
                    .await
                    .ok()
                    .and_then(Result::ok)
                    .map(|exchanged| Answer::Set(exchanged.is_ok()))
            }
        };
        let answered = now();
        match answer {
            Some(answer) => {
                if let Answer::Value(value) = answer {
                    last_seen = value;
                }
                history.push(Call {
                    client,
                    op,
                    called,
                    answered,
                    answer,
                });
            }
            // A failed read changed nothing: leave it out.
            None if op == Op::Get => {}
            None => history.push(Call {
                client,
                op,
                called,
                answered,
                answer: Answer::Unknown,
            }),
        }
    }
    Ok(history)
}
