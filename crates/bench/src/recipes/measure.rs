//! The lockkeeper side of the counter and handoff runs of `bench --recipes`, and the figures both
//! sides produce.
//!
//! Every loop is bounded by a count and by a deadline, and every wait for leadership by
//! [`GRANT_LIMIT`], so an election that never grants fails the run instead of stalling it.
//! Sessions are opened before the clock starts and closed after it stops.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, Instant};

use lockkeeper::zk::RetryPolicy;
use tokio::sync::Barrier;

use super::CounterRetry;
use crate::BoxError;
use crate::locks::{close_all, open_many};
use crate::stats::rate;
use crate::workload::{close_session, open_session};

/// Bound on one wait for leadership: far beyond any wait a healthy run sees.
pub(super) const GRANT_LIMIT: Duration = Duration::from_secs(60);

/// Tries of one increment under `--counter-retry spin`, with no sleep in between.
const SPIN_TRIES: u32 = 10_000;

/// Several sessions incrementing one counter.
#[derive(Clone, Debug)]
pub(crate) struct Increments {
    pub sessions: usize,
    pub increments: u64,
    pub elapsed: Duration,
    /// Compare-and-set attempts, when the client counts them (Curator does).
    pub tries: Option<u64>,
}

impl Increments {
    pub(crate) fn per_sec(&self) -> f64 {
        rate(self.increments, self.elapsed)
    }
}

/// Leadership passed from a resigning leader to the next participant, over and over.
#[derive(Clone, Debug)]
pub(crate) struct Handoffs {
    pub participants: usize,
    /// From the leader's resign to the next participant's grant, one per handoff.
    pub gaps: Vec<Duration>,
    /// From the common start to the last grant.
    pub elapsed: Duration,
}

impl Handoffs {
    pub(crate) fn count(&self) -> u64 {
        self.gaps.len() as u64
    }

    pub(crate) fn per_sec(&self) -> f64 {
        rate(self.count(), self.elapsed)
    }

    pub(crate) fn mean_gap(&self) -> Option<Duration> {
        let n = u32::try_from(self.gaps.len()).ok().filter(|&n| n > 0)?;
        Some(self.gaps.iter().sum::<Duration>() / n)
    }

    pub(crate) fn max_gap(&self) -> Option<Duration> {
        self.gaps.iter().copied().max()
    }
}

/// `sessions` sessions, each incrementing the atomic long at `path` up to `increments` times or
/// until `limit` passed, retrying as `retry` says.
pub(crate) async fn counter(
    connect: &str,
    path: &str,
    sessions: usize,
    increments: u32,
    retry: CounterRetry,
    limit: Duration,
    connect_limit: Duration,
) -> Result<Increments, BoxError> {
    let opened = open_many(connect, sessions, connect_limit).await?;
    let start = Arc::new(Barrier::new(sessions + 1));
    let mut tasks = Vec::with_capacity(sessions);
    for session in &opened {
        let counter = match session.atomic_long(path) {
            Ok(counter) => match retry {
                CounterRetry::Backoff => counter,
                CounterRetry::Spin => counter.optimistic_retries(RetryPolicy::exponential(
                    Duration::ZERO,
                    Duration::ZERO,
                    SPIN_TRIES,
                )),
            },
            Err(e) => {
                close_all(opened).await;
                return Err(e.into());
            }
        };
        let start = Arc::clone(&start);
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            let deadline = Instant::now() + limit;
            let mut done = 0u64;
            while done < u64::from(increments) && Instant::now() < deadline {
                counter.fetch_add(1).await?;
                done += 1;
            }
            Ok::<_, BoxError>(done)
        }));
    }
    start.wait().await;
    let started = Instant::now();
    let mut done = 0;
    let mut failure = None;
    for task in tasks {
        match task.await {
            Ok(Ok(n)) => done += n,
            Ok(Err(e)) => failure = failure.or(Some(e)),
            Err(e) => failure = failure.or(Some(format!("incrementing task: {e}").into())),
        }
    }
    let elapsed = started.elapsed();
    close_all(opened).await;
    match failure {
        Some(e) => Err(e),
        None => Ok(Increments {
            sessions,
            increments: done,
            elapsed,
            tries: None,
        }),
    }
}

/// Reads the counter at `path` as Curator's `DistributedAtomicLong` stores it (8 bytes, big
/// endian) and fails unless it equals the increments `run` counted: a counter that loses
/// increments would otherwise look fast.
pub(super) async fn check_counter(
    connect: &str,
    path: &str,
    run: Increments,
    connect_limit: Duration,
) -> Result<Increments, BoxError> {
    let client = open_session(connect, connect_limit).await?;
    let read = tokio::time::timeout(connect_limit, client.get_data(path)).await;
    close_session(client).await;
    let (data, _) = read
        .map_err(|_| format!("reading the counter {path}: no answer within {connect_limit:?}"))?
        .map_err(|e| format!("reading the counter {path}: {e}"))?;
    let bytes: [u8; 8] = data.as_slice().try_into().map_err(|_| {
        format!(
            "the counter {path} holds {} bytes, not a DistributedAtomicLong's 8",
            data.len()
        )
    })?;
    let value = i64::from_be_bytes(bytes);
    if u64::try_from(value).ok() != Some(run.increments) {
        return Err(format!(
            "the counter {path} ends at {value} after {} counted increments",
            run.increments
        )
        .into());
    }
    Ok(run)
}

/// What the participants of a handoff run share. Only the leader of the moment writes
/// `resigned_at`, so a grant that finds it set is a handoff from that resign.
#[derive(Default)]
struct HandoffState {
    resigned_at: StdMutex<Option<Instant>>,
    gaps: StdMutex<Vec<Duration>>,
    last_grant: StdMutex<Option<Instant>>,
    stop: AtomicBool,
}

/// `participants` sessions in one election at `path`: the leader records the handoff that made
/// it leader, then requeues (gives leadership up and joins again at the back), until `handoffs`
/// handoffs or `limit` passed. Then each participant in turn resigns as it is granted.
pub(crate) async fn handoff(
    connect: &str,
    path: &str,
    participants: usize,
    handoffs: u32,
    limit: Duration,
    connect_limit: Duration,
) -> Result<Handoffs, BoxError> {
    let opened = open_many(connect, participants, connect_limit).await?;
    let state = Arc::new(HandoffState::default());
    let start = Arc::new(Barrier::new(participants + 1));
    let mut tasks = Vec::with_capacity(participants);
    for (i, session) in opened.iter().enumerate() {
        let latch = match session.leader_latch(path, &format!("participant-{i}")) {
            Ok(latch) => latch,
            Err(e) => {
                close_all(opened).await;
                return Err(e.into());
            }
        };
        let (start, state) = (Arc::clone(&start), Arc::clone(&state));
        let target = handoffs as usize;
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            let deadline = Instant::now() + limit;
            let mut leadership = granted(latch.lead()).await?;
            loop {
                let now = Instant::now();
                let resigned = lock(&state.resigned_at).take();
                if let (Some(resigned), false) = (resigned, state.stop.load(Ordering::SeqCst)) {
                    let mut gaps = lock(&state.gaps);
                    gaps.push(now - resigned);
                    *lock(&state.last_grant) = Some(now);
                    if gaps.len() >= target || now >= deadline {
                        state.stop.store(true, Ordering::SeqCst);
                    }
                }
                if state.stop.load(Ordering::SeqCst) {
                    leadership.resign().await?;
                    return Ok::<_, BoxError>(());
                }
                *lock(&state.resigned_at) = Some(Instant::now());
                leadership = granted(leadership.requeue()).await?;
            }
        }));
    }
    start.wait().await;
    let started = Instant::now();
    let mut failure = None;
    for task in tasks {
        match task.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => failure = failure.or(Some(e)),
            Err(e) => failure = failure.or(Some(format!("participant task: {e}").into())),
        }
    }
    close_all(opened).await;
    if let Some(e) = failure {
        return Err(e);
    }
    let gaps = std::mem::take(&mut *lock(&state.gaps));
    let elapsed = lock(&state.last_grant).map_or(Duration::ZERO, |t| t - started);
    Ok(Handoffs {
        participants,
        gaps,
        elapsed,
    })
}

/// A wait for leadership, bounded by [`GRANT_LIMIT`].
async fn granted<T, E>(wait: impl Future<Output = Result<T, E>>) -> Result<T, BoxError>
where
    E: Into<BoxError>,
{
    match tokio::time::timeout(GRANT_LIMIT, wait).await {
        Ok(result) => result.map_err(Into::into),
        Err(_) => Err(format!("not leader within {GRANT_LIMIT:?}").into()),
    }
}

/// The benchmark's own bookkeeping lock; a panic elsewhere does not make its data wrong.
fn lock<T>(mutex: &StdMutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_follow_the_counts() {
        let ms = Duration::from_millis;
        let h = Handoffs {
            participants: 2,
            gaps: vec![ms(2), ms(4), ms(6)],
            elapsed: Duration::from_secs(3),
        };
        assert_eq!((h.count(), h.per_sec()), (3, 1.0));
        assert_eq!((h.mean_gap(), h.max_gap()), (Some(ms(4)), Some(ms(6))));
        let none = Handoffs {
            participants: 2,
            gaps: Vec::new(),
            elapsed: Duration::ZERO,
        };
        assert_eq!((none.per_sec(), none.mean_gap()), (0.0, None));
        let c = Increments {
            sessions: 8,
            increments: 500,
            elapsed: Duration::from_millis(250),
            tries: None,
        };
        assert_eq!(c.per_sec(), 2000.0);
    }
}
