//! The queue scenario: a [`DistributedQueue`](lockkeeper::zk::DistributedQueue) with
//! producers and at-least-once consumers under a fault, its history checked for lost items
//! ([`crate::check::queue`]).
//!
//! Two producers and two consumers run in the orchestrator's process, each with its own session
//! through its own loopback proxy (so one can be cut off alone). Each producer puts
//! [`ITEMS`] unique items (`p<producer>-<n>`), recording which puts were acknowledged and which
//! got no answer. Each consumer takes one item at a time, at least once, and acknowledges it;
//! an item counts as taken once its acknowledgement returned, or failed (the delete may have
//! happened: a failed acknowledgement whose item is still there is delivered again and taken
//! by someone). After the producers finish and the fault has healed, the consumers drain the
//! queue until it stays empty for [`DRAIN_QUIET`].
//!
//! Invariants: every call is bounded ([`CALL_WAIT`]), the drain too ([`DRAIN_LIMIT`]); the
//! fault strikes after a quarter of the scenario's length, so items are in flight in both
//! directions when it does.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lockkeeper::zk::Delivery;
use lockkeeper_testkit::Proxy;
use tokio::time::Instant;

use crate::backend::Backend;
use crate::check::queue;
use crate::client::ZK_SESSION;
use crate::scenario::{Row, Scenario};

/// Items each producer puts.
const ITEMS: usize = 30;
/// Producers and consumers.
const PRODUCERS: usize = 2;
const CONSUMERS: usize = 2;
/// The longest one call may take.
const CALL_WAIT: Duration = Duration::from_secs(10);
/// The queue counts as drained once no consumer took anything for this long: past a session,
/// so an item locked by a consumer cut off at the end is delivered again before it ends.
const DRAIN_QUIET: Duration = Duration::from_secs(5);
/// The longest drain.
const DRAIN_LIMIT: Duration = Duration::from_secs(60);

/// What the clients recorded.
#[derive(Default)]
struct History {
    acknowledged: Vec<String>,
    unanswered: Vec<String>,
    taken: Vec<String>,
    last_take: Option<Instant>,
}

/// Runs the queue `scenario` on `backend` for about `length`.
pub(crate) async fn run(
    backend: &mut Backend,
    scenario: Scenario,
    seed: u64,
    length: Duration,
) -> Row {
    let started = Instant::now();
    let upstream = crate::recipes::upstream(backend, scenario);
    let path = format!("/faults/queue-{seed:x}");
    let history = Arc::new(Mutex::new(History::default()));
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut proxies = Vec::new();
    let mut producers = Vec::new();
    let mut consumers = Vec::new();
    let gap = length / ITEMS as u32;
    for index in 0..PRODUCERS + CONSUMERS {
        let proxy = Proxy::start(&upstream).await;
        let connect = proxy.connect_string();
        proxies.push(proxy);
        let (path, history) = (path.clone(), history.clone());
        if index < PRODUCERS {
            producers.push(tokio::spawn(produce(index, connect, path, gap, history)));
        } else {
            let done = done.clone();
            consumers.push(tokio::spawn(consume(connect, path, history, done)));
        }
    }
    tokio::time::sleep(length / 4).await;
    // The fault: the server restarted, or the first consumer cut off past its session.
    crate::recipes::strike(backend, scenario, &proxies[PRODUCERS]).await;
    let mut problems = Vec::new();
    for producer in producers {
        if let Err(err) = producer.await {
            problems.push(format!("a producer panicked: {err}"));
        }
    }
    // Drain: until nothing was taken for a while, bounded.
    let drain_until = Instant::now() + DRAIN_LIMIT;
    loop {
        let quiet = {
            let history = history
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            history
                .last_take
                .is_none_or(|last| last.elapsed() >= DRAIN_QUIET)
        };
        if quiet || Instant::now() >= drain_until {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    done.store(true, std::sync::atomic::Ordering::Release);
    for consumer in consumers {
        consumer.abort();
    }
    let history = history
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let report = queue::check(&history.acknowledged, &history.unanswered, &history.taken);
    if report.violated() {
        problems.push(format!("acknowledged puts never taken: {:?}", report.lost));
    }
    let redelivered: usize = report.duplicates.iter().map(|(_, n)| n - 1).sum();
    crate::recipes::row(
        scenario,
        seed,
        started,
        true,
        (history.taken.len(), history.acknowledged.len()),
        problems,
        format!(
            "{} puts acknowledged, {} unanswered, {} takes, {redelivered} redeliveries (at least \
             once allows them), {} taken without an acknowledged put",
            history.acknowledged.len(),
            history.unanswered.len(),
            history.taken.len(),
            report.unacknowledged_taken
        ),
    )
}

async fn produce(
    index: usize,
    connect: String,
    path: String,
    gap: Duration,
    history: Arc<Mutex<History>>,
) {
    let Ok(session) = connect_session(&connect).await else {
        return;
    };
    let Ok(queue) = session.distributed_queue(&path) else {
        return;
    };
    for n in 0..ITEMS {
        tokio::time::sleep(gap).await;
        let item = format!("p{index}-{n}");
        let put = tokio::time::timeout(CALL_WAIT, queue.put(item.as_bytes())).await;
        let mut history = history
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match put {
            Ok(Ok(())) => history.acknowledged.push(item),
            _ => history.unanswered.push(item),
        }
    }
}

async fn consume(
    connect: String,
    path: String,
    history: Arc<Mutex<History>>,
    done: Arc<std::sync::atomic::AtomicBool>,
) {
    let Ok(session) = connect_session(&connect).await else {
        return;
    };
    let Ok(queue) = session.distributed_queue(&path) else {
        return;
    };
    while !done.load(std::sync::atomic::Ordering::Acquire) {
        let taken = match queue
            .take_timeout(Delivery::AtLeastOnce, Duration::from_millis(500))
            .await
        {
            Ok(Some(taken)) => taken,
            Ok(None) => continue,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let items: Vec<String> = taken
            .items()
            .iter()
            .map(|item| String::from_utf8_lossy(item).into_owned())
            .collect();
        // Acknowledged, or failed (it may have been deleted): taken either way.
        let _ = tokio::time::timeout(CALL_WAIT, taken.ack()).await;
        let mut history = history
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        history.taken.extend(items);
        history.last_take = Some(Instant::now());
    }
}

async fn connect_session(connect: &str) -> lockkeeper::Result<lockkeeper::zk::Session> {
    lockkeeper::zk::Session::builder(connect)
        .session_timeout(ZK_SESSION)
        .connect()
        .await
}
