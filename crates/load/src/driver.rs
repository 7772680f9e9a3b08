//! The pipelined driver: keeps a bounded window of requests in flight on each session until a
//! deadline or a request budget ends the run, records every request's latency, and shows progress.
//!
//! Pipelining (many requests outstanding on one session, replies in order) is how a busy
//! application uses ZooKeeper and what a server must be good at. Every loop here stops at a
//! deadline *and* at a request budget, whichever comes first, and the wait for the last replies
//! is bounded too.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use lockkeeper_zk_client as zk;
use tokio::task::JoinSet;

use super::BoxError;
use super::stats;

/// How long replies may keep arriving after a run's deadline before the run is declared stuck.
const DRAIN_GRACE: Duration = Duration::from_secs(30);

/// One request (or request pair) a session can issue. `index` is unique within a run and
/// numbers the znodes of the bulk-creation steps.
#[derive(Debug)]
pub(super) enum Op {
    CreateDelete { prefix: String },
    Get { path: String },
    CreatePersistent { prefix: String },
    Delete { prefix: String },
}

impl Op {
    /// Requests one op sends; the budget and the throughput count requests.
    fn requests(&self) -> u64 {
        match self {
            Op::CreateDelete { .. } => 2,
            _ => 1,
        }
    }

    fn describe(&self) -> &'static str {
        match self {
            Op::CreateDelete { .. } => "create/delete of an ephemeral-sequential znode",
            Op::Get { .. } => "getData",
            Op::CreatePersistent { .. } => "create of a persistent znode",
            Op::Delete { .. } => "delete",
        }
    }
}

/// Latencies of the requests of one op.
pub(super) struct Sample {
    first: Duration,
    second: Option<Duration>,
}

/// Options of the create/delete workload's nodes (open ACL, as every mode's default).
fn ephemeral_sequential() -> zk::CreateOptions {
    zk::CreateOptions::new(zk::CreateMode::EphemeralSequential)
}

/// Options of the bulk-created persistent nodes and of the namespace's own.
pub(super) fn persistent() -> zk::CreateOptions {
    zk::CreateOptions::new(zk::CreateMode::Persistent)
}

/// Issues `op` and waits for its replies. The clock starts before the call because the client
/// writes the request during the call, not when the future is first polled.
async fn perform(
    client: &zk::Client,
    op: &Op,
    data: &[u8],
    index: u64,
) -> Result<Sample, zk::Error> {
    let start = Instant::now();
    match op {
        Op::CreateDelete { prefix } => {
            let (_, path) = client.create(prefix, data, &ephemeral_sequential()).await?;
            let created = Instant::now();
            client.delete(&path, None).await?;
            Ok(Sample {
                first: created - start,
                second: Some(created.elapsed()),
            })
        }
        Op::Get { path } => {
            client.get_data(path).await?;
            Ok(Sample {
                first: start.elapsed(),
                second: None,
            })
        }
        Op::CreatePersistent { prefix } => {
            client
                .create(&format!("{prefix}{index:010}"), data, &persistent())
                .await?;
            Ok(Sample {
                first: start.elapsed(),
                second: None,
            })
        }
        Op::Delete { prefix } => {
            client.delete(&format!("{prefix}{index:010}"), None).await?;
            Ok(Sample {
                first: start.elapsed(),
                second: None,
            })
        }
    }
}

/// State shared by the sessions of one run.
struct Shared {
    /// Requests handed out so far (may run past `max`: a refused claim still counts).
    issued: AtomicU64,
    max: u64,
    /// Requests answered so far, for the progress bar.
    completed: AtomicU64,
}

impl Shared {
    /// Claims budget for one op; returns its index, or `None` when the budget is spent.
    fn claim(&self, requests: u64) -> Option<u64> {
        let before = self.issued.fetch_add(requests, Ordering::Relaxed);
        (before + requests <= self.max).then_some(before / requests)
    }
}

/// What one session achieved.
struct Tally {
    requests: u64,
    latency: Histogram<u64>,
}

/// Keeps up to `window` ops in flight on `client` until `deadline` or the shared budget ends,
/// then collects the outstanding replies. The first failed request ends the session's run: a
/// benchmark whose requests fail measures nothing worth printing.
async fn drive_session(
    client: zk::Client,
    op: Arc<Op>,
    data: Arc<[u8]>,
    window: usize,
    deadline: Instant,
    shared: Arc<Shared>,
) -> Result<Tally, String> {
    let mut latency = stats::new_histogram();
    let mut requests = 0u64;
    let per_op = op.requests();
    let mut in_flight = FuturesUnordered::new();
    let mut open = true;
    loop {
        while open && in_flight.len() < window {
            if Instant::now() >= deadline {
                open = false;
                break;
            }
            match shared.claim(per_op) {
                Some(index) => in_flight.push(perform(&client, &op, &data, index)),
                None => open = false,
            }
        }
        if in_flight.is_empty() {
            break;
        }
        // Wait for an op to finish, then take every other one that has finished meanwhile
        // before refilling, so that the refill's requests leave together. Every poll runs
        // under a cork: the requests the polled ops send (a new op's first, a create's
        // delete) go out in one write, as a pipelining client's do, and the server reads
        // them in one go.
        let mut next = std::future::poll_fn(|cx| {
            let _cork = client.cork();
            in_flight.poll_next_unpin(cx)
        })
        .await;
        while let Some(result) = next {
            let sample = result.map_err(|e| format!("{} failed: {e}", op.describe()))?;
            stats::record(&mut latency, sample.first);
            if let Some(second) = sample.second {
                stats::record(&mut latency, second);
            }
            requests += per_op;
            shared.completed.fetch_add(per_op, Ordering::Relaxed);
            let _cork = client.cork();
            next = in_flight.next().now_or_never().flatten();
        }
    }
    Ok(Tally { requests, latency })
}

/// What the progress bar measures progress against.
#[derive(Clone, Copy)]
pub(super) enum Goal {
    Time(Duration),
    Requests(u64),
}

/// Aborts the progress ticker however the run ends.
struct Ticker(tokio::task::JoinHandle<()>, ProgressBar);

impl Drop for Ticker {
    fn drop(&mut self) {
        self.0.abort();
        self.1.finish_and_clear();
    }
}

fn start_ticker(enabled: bool, label: String, goal: Goal, shared: Arc<Shared>) -> Ticker {
    let len = match goal {
        Goal::Time(d) => u64::try_from(d.as_millis()).unwrap_or(u64::MAX),
        Goal::Requests(n) => n,
    };
    // indicatif also hides itself when stderr is not a terminal.
    let bar = if enabled {
        ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr_with_hz(10))
    } else {
        ProgressBar::hidden()
    };
    let style = ProgressStyle::with_template("{prefix} {msg} [{wide_bar}]")
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
    bar.set_style(style);
    bar.set_prefix(label);
    let ticking = bar.clone();
    let started = Instant::now();
    let handle = tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        loop {
            tick.tick().await;
            let done = shared.completed.load(Ordering::Relaxed);
            let elapsed = started.elapsed();
            let position = match goal {
                Goal::Time(_) => u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
                Goal::Requests(_) => done,
            };
            ticking.set_position(position.min(len));
            let rate = done as f64 / elapsed.as_secs_f64().max(1e-3);
            ticking.set_message(format!("{done} requests {rate:.0}/s"));
        }
    });
    Ticker(handle, bar)
}

/// Raw outcome of [`drive`].
pub(super) struct Driven {
    pub requests: u64,
    pub elapsed: Duration,
    pub latency: Histogram<u64>,
}

/// Runs `op` on every client at once for `duration` or `max` requests, whichever ends first.
pub(super) async fn drive(
    clients: &[zk::Client],
    op: Op,
    data: &[u8],
    window: usize,
    duration: Duration,
    max: u64,
    progress: (bool, String, Goal),
) -> Result<Driven, BoxError> {
    let op = Arc::new(op);
    let data: Arc<[u8]> = Arc::from(data);
    let shared = Arc::new(Shared {
        issued: AtomicU64::new(0),
        max,
        completed: AtomicU64::new(0),
    });
    let (enabled, label, goal) = progress;
    let _ticker = start_ticker(enabled, label, goal, shared.clone());
    let start = Instant::now();
    let deadline = start + duration;
    // A JoinSet aborts its tasks when dropped, so an interrupted run leaves no load behind.
    let mut sessions = JoinSet::new();
    for client in clients {
        sessions.spawn(drive_session(
            client.clone(),
            op.clone(),
            data.clone(),
            window,
            deadline,
            shared.clone(),
        ));
    }
    let hard_stop = tokio::time::Instant::from_std(deadline + DRAIN_GRACE);
    let mut latency = stats::new_histogram();
    let mut requests = 0;
    loop {
        let joined = match tokio::time::timeout_at(hard_stop, sessions.join_next()).await {
            Ok(Some(joined)) => joined,
            Ok(None) => break,
            Err(_) => {
                return Err(format!(
                    "replies still missing {} after the run's end: the server stalled",
                    stats::fmt_duration(DRAIN_GRACE)
                )
                .into());
            }
        };
        let tally = joined.map_err(|e| format!("session task ended abnormally: {e}"))??;
        latency
            .add(&tally.latency)
            .map_err(|e| format!("merging latency histograms: {e}"))?;
        requests += tally.requests;
    }
    Ok(Driven {
        requests,
        elapsed: start.elapsed(),
        latency,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_claims_stop_at_the_maximum_and_number_ops() {
        let shared = Shared {
            issued: AtomicU64::new(0),
            max: 5,
            completed: AtomicU64::new(0),
        };
        // Pairs of requests: indices 0 and 1 fit (4 requests), a third pair would make 6 > 5.
        assert_eq!(shared.claim(2), Some(0));
        assert_eq!(shared.claim(2), Some(1));
        assert_eq!(shared.claim(2), None);
        assert_eq!(shared.claim(2), None);
    }

    #[test]
    fn single_request_claims_are_contiguous() {
        let shared = Shared {
            issued: AtomicU64::new(0),
            max: 3,
            completed: AtomicU64::new(0),
        };
        let got: Vec<_> = (0..5).map(|_| shared.claim(1)).collect();
        assert_eq!(got, vec![Some(0), Some(1), Some(2), None, None]);
    }
}
