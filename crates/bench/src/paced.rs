//! The paced driver: sends a getData/setData mix at a fixed rate, whatever the server's latency,
//! and keeps every request's send time and latency so that a run can be cut afterwards into the
//! moments before, during and after an event (a snapshot being written).
//!
//! A closed-loop client (the next request waits for a reply) slows down when the server stalls
//! and so hides the stall from its own latency figures. Here each session sends on a schedule and
//! keeps up to [`MAX_IN_FLIGHT`] requests outstanding, so the requests sent during a stall are all
//! delayed by it and all show it. Latency is measured from the actual send, so the timer's own
//! lateness is not charged to the server.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use lockkeeper_zk_client as zk;
use rand::{Rng, SeedableRng};
use tokio::task::JoinSet;

use super::BoxError;

/// Requests outstanding on one session beyond which sending waits (and the run is flagged as
/// having fallen behind its schedule).
pub(crate) const MAX_IN_FLIGHT: usize = 4096;

/// One write (setData) in this many requests; the rest are getData.
pub(crate) const WRITE_EVERY: u64 = 4;

/// How long replies may still arrive after sending stopped.
const DRAIN_LIMIT: Duration = Duration::from_secs(30);

/// One request: when it was sent (since the run's origin), how long its reply took.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Sample {
    pub sent_us: u64,
    pub latency_us: u64,
    pub write: bool,
}

impl Sample {
    pub(crate) fn done_us(&self) -> u64 {
        self.sent_us + self.latency_us
    }
}

/// What the sessions do and for how long.
#[derive(Clone, Debug)]
pub(crate) struct Pace {
    /// Requests per second over all sessions.
    pub rate: f64,
    /// Znodes `{prefix}{index:010}` for index in `0..keys` exist and are read and written.
    pub prefix: String,
    pub keys: u64,
    pub data: Vec<u8>,
    /// Sending stops here at the latest, even if nobody raises the stop flag.
    pub deadline: Instant,
}

/// Shared progress of a paced run, readable while it goes on.
#[derive(Debug, Default)]
pub(crate) struct Progress {
    /// setData requests answered so far.
    pub writes: AtomicU64,
    /// Requests answered so far.
    pub completed: AtomicU64,
    /// Times a session had [`MAX_IN_FLIGHT`] requests outstanding and sent late.
    pub fell_behind: AtomicU64,
    /// Raised by the caller to end sending.
    pub stop: AtomicBool,
}

/// The outcome of a paced run.
pub(crate) struct Paced {
    /// Every answered request, in no particular order.
    pub samples: Vec<Sample>,
    pub origin: Instant,
}

/// Runs the mix on every client until `progress.stop` is raised or `pace.deadline` passes, then
/// waits (bounded) for the outstanding replies. The first failed request ends the run.
pub(crate) async fn run(
    clients: &[zk::Client],
    pace: &Pace,
    progress: Arc<Progress>,
) -> Result<Paced, BoxError> {
    if clients.is_empty() || pace.rate <= 0.0 || pace.keys == 0 {
        return Err("a paced run needs sessions, a positive rate and znodes".into());
    }
    let origin = Instant::now();
    let sessions = clients.len();
    let interval = Duration::from_secs_f64(sessions as f64 / pace.rate);
    let pace = Arc::new(pace.clone());
    let mut tasks = JoinSet::new();
    for (i, client) in clients.iter().enumerate() {
        // Sessions are spread evenly over one interval so the server sees a steady stream.
        let first = origin + interval.mul_f64(i as f64 / sessions as f64);
        tasks.spawn(session(
            client.clone(),
            pace.clone(),
            progress.clone(),
            first,
            interval,
            origin,
            rand::random(),
        ));
    }
    let hard_stop = tokio::time::Instant::from_std(pace.deadline + DRAIN_LIMIT);
    let mut samples = Vec::new();
    loop {
        match tokio::time::timeout_at(hard_stop, tasks.join_next()).await {
            Ok(Some(joined)) => {
                let mut mine =
                    joined.map_err(|e| format!("session task ended abnormally: {e}"))??;
                samples.append(&mut mine);
            }
            Ok(None) => break,
            Err(_) => {
                return Err(format!(
                    "replies still missing {}s after the paced run's end: the server stalled",
                    DRAIN_LIMIT.as_secs()
                )
                .into());
            }
        }
    }
    Ok(Paced { samples, origin })
}

async fn session(
    client: zk::Client,
    pace: Arc<Pace>,
    progress: Arc<Progress>,
    first: Instant,
    interval: Duration,
    origin: Instant,
    seed: u64,
) -> Result<Vec<Sample>, String> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut samples = Vec::new();
    let mut in_flight = FuturesUnordered::new();
    let mut sent = 0u64;
    let mut next = first;
    let drain_until = pace.deadline + DRAIN_LIMIT;
    loop {
        let sending = !progress.stop.load(Ordering::Relaxed) && Instant::now() < pace.deadline;
        if sending {
            while Instant::now() >= next {
                if in_flight.len() >= MAX_IN_FLIGHT {
                    progress.fell_behind.fetch_add(1, Ordering::Relaxed);
                    break;
                }
                let key = rng.gen_range(0..pace.keys);
                let path = format!("{}{key:010}", pace.prefix);
                let write = sent.is_multiple_of(WRITE_EVERY);
                in_flight.push(request(&client, path, write, &pace.data, origin));
                sent += 1;
                next = first + interval.mul_f64(sent as f64);
            }
        } else if in_flight.is_empty() {
            break;
        }
        let full = in_flight.len() >= MAX_IN_FLIGHT;
        tokio::select! {
            Some(done) = in_flight.next(), if !in_flight.is_empty() => {
                let sample = done?;
                if sample.write {
                    progress.writes.fetch_add(1, Ordering::Relaxed);
                }
                progress.completed.fetch_add(1, Ordering::Relaxed);
                samples.push(sample);
            }
            // Wake up for the next send; also, at the latest every 50 ms, to see the stop flag.
            _ = tokio::time::sleep_until(tokio::time::Instant::from_std(
                next.min(Instant::now() + Duration::from_millis(50))
            )), if sending && !full => {}
            _ = tokio::time::sleep(Duration::from_millis(50)), if !sending => {}
        }
        if Instant::now() > drain_until {
            return Err("replies did not arrive after sending stopped".into());
        }
    }
    Ok(samples)
}

/// Sends one request; the clock starts before the call because the client writes the request
/// during the call, not when the future is first polled.
fn request(
    client: &zk::Client,
    path: String,
    write: bool,
    data: &[u8],
    origin: Instant,
) -> impl Future<Output = Result<Sample, String>> + use<> {
    let start = Instant::now();
    let reply = if write {
        futures::future::Either::Left(client.set_data(&path, data, None))
    } else {
        futures::future::Either::Right(client.get_data(&path))
    };
    async move {
        let result = match reply {
            futures::future::Either::Left(f) => f.await.map(|_| ()),
            futures::future::Either::Right(f) => f.await.map(|_| ()),
        };
        result.map_err(|e| {
            format!(
                "{} {path} failed: {e}",
                if write { "setData" } else { "getData" }
            )
        })?;
        let latency = start.elapsed();
        Ok(Sample {
            sent_us: (start - origin).as_micros() as u64,
            latency_us: (latency.as_micros() as u64).max(1),
            write,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{Namespace, Plan, close_session, open_session};
    use lockkeeper_testkit::{Keeper, TestServer};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_mix_keeps_its_rate_and_stops_when_told() {
        let server = Keeper::start();
        let plan = Plan {
            connect: server.connect_string(),
            duration: Duration::from_millis(300),
            warmup: Duration::ZERO,
            pipeline: 16,
            max_requests: 1_000_000,
            data_size: 16,
            connect_timeout: Duration::from_secs(60),
            progress: false,
            server_pid: None,
        };
        let mut namespace = Namespace::create(&plan).await.expect("namespace");
        namespace
            .populate(50, 2, Duration::from_secs(60), &plan, "")
            .await
            .expect("populate");
        let clients = vec![
            open_session(&plan.connect, plan.connect_timeout)
                .await
                .expect("session"),
            open_session(&plan.connect, plan.connect_timeout)
                .await
                .expect("session"),
        ];
        let pace = Pace {
            rate: 1000.0,
            prefix: format!("{}/mem/z-", namespace.root()),
            keys: 50,
            data: vec![b'y'; 16],
            deadline: Instant::now() + Duration::from_secs(1),
        };
        let progress = Arc::new(Progress::default());
        let started = Instant::now();
        let paced = run(&clients, &pace, progress.clone()).await.expect("run");
        let elapsed = started.elapsed();
        assert!(elapsed >= Duration::from_secs(1), "ran until the deadline");
        let n = paced.samples.len() as u64;
        // About 1000 requests in one second; a loaded machine may lag, never run ahead.
        assert!((500..=1002).contains(&n), "{n} requests");
        let writes = paced.samples.iter().filter(|s| s.write).count() as u64;
        assert_eq!(writes, progress.writes.load(Ordering::Relaxed));
        assert!(writes * WRITE_EVERY >= n - 2 && writes * WRITE_EVERY <= n + 2 * WRITE_EVERY);
        assert!(paced.samples.iter().all(|s| s.sent_us < 1_100_000));
        // The writes landed: every key read back has the new data or the old.
        let (data, _) = clients[0]
            .get_data(&format!("{}0000000007", pace.prefix))
            .await
            .expect("read back");
        assert!(data == vec![b'y'; 16] || data == vec![b'x'; 16]);

        // A raised stop flag ends sending long before the deadline.
        let long = Pace {
            deadline: Instant::now() + Duration::from_secs(60),
            ..pace.clone()
        };
        let progress = Arc::new(Progress::default());
        let stopper = {
            let progress = progress.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(200)).await;
                progress.stop.store(true, Ordering::Relaxed);
            })
        };
        let started = Instant::now();
        let stopped = run(&clients, &long, progress).await.expect("run");
        stopper.await.expect("stopper");
        assert!(started.elapsed() < Duration::from_secs(10));
        assert!(!stopped.samples.is_empty());
        for c in clients {
            close_session(c).await;
        }
        namespace.remove(&plan).await.expect("remove");
    }
}
