//! The lockkeeper side of `lockkeeper-bench --locks`: the three measurements on lockkeeper's
//! ZooKeeper recipes, and the figures they produce (shared with the Curator side).
//!
//! Every loop is bounded by a count and by a deadline, and every single acquisition by
//! [`ACQUIRE_LIMIT`], so a lock that is never granted fails the run instead of stalling it.
//! Sessions are opened before the clock starts and closed after it stops.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use lockkeeper::zk::{Mutex, Session, SimpleLock};
use tokio::sync::Barrier;

use crate::BoxError;
use crate::stats::{self, Json, rate};

/// Bound on one acquisition: far beyond any wait a healthy run sees.
pub(crate) const ACQUIRE_LIMIT: Duration = Duration::from_secs(60);

/// Session timeout asked of the server: a benchmark on a loaded machine must not lose its
/// session to a scheduling hiccup.
const SESSION_TIMEOUT: Duration = Duration::from_secs(30);

/// Uncontended lock+release cycles on one session.
#[derive(Clone, Debug)]
pub(crate) struct Uncontended {
    pub cycles: u64,
    pub elapsed: Duration,
}

impl Uncontended {
    pub(crate) fn per_sec(&self) -> f64 {
        rate(self.cycles, self.elapsed)
    }
}

/// Several sessions handing one lock from one to the next.
#[derive(Clone, Debug)]
pub(crate) struct Contended {
    pub clients: usize,
    /// Acquisitions over all sessions (each is one handoff).
    pub handoffs: u64,
    /// From the common start to the last release.
    pub elapsed: Duration,
    /// Time from asking for the lock to holding it, per acquisition, in microseconds.
    pub waits: Histogram<u64>,
    pub mean_wait: Duration,
    /// Exact, where the histogram keeps three significant digits.
    pub max_wait: Duration,
}

impl Contended {
    /// The column heads of a contended run's rows, the label column `width` wide.
    pub(crate) fn table_header(width: usize) -> String {
        format!(
            "{:<width$} {:>5} {:>8} {:>10} {:>9} {:>9} {:>9} {:>8}",
            "client",
            "trial",
            "handoffs",
            "handoffs/s",
            "wait p50",
            "wait p99",
            "wait max",
            "max/mean"
        )
    }

    /// One trial's row under [`table_header`](Contended::table_header).
    pub(crate) fn table_row(&self, label: &str, trial: u32, width: usize) -> String {
        format!(
            "{label:<width$} {:>5} {:>8} {:>10.0} {:>9} {:>9} {:>9} {:>8}",
            trial + 1,
            self.handoffs,
            self.per_sec(),
            stats::fmt_duration(self.wait_quantile(0.5)),
            stats::fmt_duration(self.wait_quantile(0.99)),
            stats::fmt_duration(self.max_wait),
            self.fairness().map_or("-".into(), |f| format!("{f:.1}"))
        )
    }

    /// The figures of the run for a JSON report, wait times in microseconds.
    pub(crate) fn json(&self) -> Vec<(&'static str, Json)> {
        let us = |d: Duration| Json::num(d.as_secs_f64() * 1e6);
        vec![
            ("sessions", Json::num(self.clients as u32)),
            ("handoffs", Json::Num(self.handoffs as f64)),
            ("elapsed_s", Json::num(self.elapsed.as_secs_f64())),
            ("handoffs_per_sec", Json::num(self.per_sec())),
            ("wait_p50_us", us(self.wait_quantile(0.5))),
            ("wait_p99_us", us(self.wait_quantile(0.99))),
            ("wait_max_us", us(self.max_wait)),
            ("wait_mean_us", us(self.mean_wait)),
            ("fairness", Json::opt_num(self.fairness())),
        ]
    }

    pub(crate) fn from_waits(clients: usize, waits: &[Duration], elapsed: Duration) -> Contended {
        let mut hist = stats::new_histogram();
        for &wait in waits {
            stats::record(&mut hist, wait);
        }
        let total: Duration = waits.iter().sum();
        let mean_wait = match u32::try_from(waits.len()) {
            Ok(n) if n > 0 => total / n,
            _ => Duration::ZERO,
        };
        Contended {
            clients,
            handoffs: waits.len() as u64,
            elapsed,
            waits: hist,
            mean_wait,
            max_wait: waits.iter().copied().max().unwrap_or_default(),
        }
    }

    pub(crate) fn per_sec(&self) -> f64 {
        rate(self.handoffs, self.elapsed)
    }

    pub(crate) fn wait_quantile(&self, q: f64) -> Duration {
        Duration::from_micros(self.waits.value_at_quantile(q))
    }

    /// Longest wait over mean wait: 1 would be perfectly even; a lock that lets some waiters
    /// starve while others barge shows a large figure.
    pub(crate) fn fairness(&self) -> Option<f64> {
        let mean = self.mean_wait.as_secs_f64();
        (mean > 0.0).then(|| self.max_wait.as_secs_f64() / mean)
    }
}

/// Watch notifications per release with many waiters on one lock.
#[derive(Clone, Debug)]
pub(crate) struct Herd {
    pub sessions: usize,
    pub releases: u64,
    pub notifications: u64,
}

impl Herd {
    pub(crate) fn per_release(&self) -> Option<f64> {
        (self.releases > 0).then(|| self.notifications as f64 / self.releases as f64)
    }
}

/// Which lockkeeper lock a herd measurement uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LockKind {
    /// The fair, herd-free Mutex: each waiter watches its predecessor only.
    Mutex,
    /// The naive lock on one fixed node: every waiter watches it.
    Simple,
}

impl LockKind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            LockKind::Mutex => "Mutex",
            LockKind::Simple => "SimpleLock",
        }
    }
}

/// Opens one lockkeeper session, bounded by `limit`.
pub(crate) async fn open(connect: &str, limit: Duration) -> Result<Session, BoxError> {
    let builder = Session::builder(connect).session_timeout(SESSION_TIMEOUT);
    match tokio::time::timeout(limit, builder.connect()).await {
        Ok(Ok(session)) => Ok(session),
        Ok(Err(e)) => Err(format!("cannot open a lockkeeper session with {connect}: {e}").into()),
        Err(_) => Err(format!("no lockkeeper session with {connect} within {limit:?}").into()),
    }
}

/// Opens `n` sessions (see [`open`]); on any failure closes those that opened.
pub(crate) async fn open_many(
    connect: &str,
    n: usize,
    limit: Duration,
) -> Result<Vec<Session>, BoxError> {
    open_all(n, || open(connect, limit), close_all).await
}

/// Opens `n` clients at once with `open`; on any failure closes those that opened with
/// `close` and returns the first error. For every backend's contenders.
pub(crate) async fn open_all<T, Opened, Closed>(
    n: usize,
    open: impl Fn() -> Opened,
    close: impl FnOnce(Vec<T>) -> Closed,
) -> Result<Vec<T>, BoxError>
where
    Opened: Future<Output = Result<T, BoxError>>,
    Closed: Future<Output = ()>,
{
    let opened = futures::future::join_all((0..n).map(|_| open())).await;
    let mut clients = Vec::with_capacity(n);
    let mut first_error = None;
    for result in opened {
        match result {
            Ok(client) => clients.push(client),
            Err(e) => first_error = first_error.or(Some(e)),
        }
    }
    match first_error {
        None => Ok(clients),
        Some(e) => {
            close(clients).await;
            Err(e)
        }
    }
}

/// Closes every session, all at once.
pub(crate) async fn close_all(sessions: Vec<Session>) {
    futures::future::join_all(sessions.iter().map(lockkeeper::zk::Session::close)).await;
}

/// One acquire+release of `mutex`, the acquisition bounded by [`ACQUIRE_LIMIT`]; returns the
/// time spent waiting for the grant.
async fn cycle(mutex: &Mutex) -> Result<Duration, BoxError> {
    let asked = Instant::now();
    let Some(guard) = mutex.lock_timeout(ACQUIRE_LIMIT).await? else {
        return Err(format!("no lock on {} within {ACQUIRE_LIMIT:?}", mutex.path()).into());
    };
    let waited = asked.elapsed();
    guard.release().await?;
    Ok(waited)
}

/// Up to `cycles` lock+release cycles of a Mutex on one session, or until `limit` passed,
/// after up to `warmup_cycles` unmeasured ones (bounded by `warmup`).
///
/// The loop runs in a spawned task, as the contended ones do and as a service's code does. A
/// future driven by `block_on` (this benchmark's caller, or the body of `#[tokio::main]`) is
/// not on a runtime worker, so each reply would cross threads to reach it: a wake-up per
/// request that the client library does not cost where it is normally used (`--trace` shows
/// both).
pub(super) async fn uncontended(
    connect: &str,
    path: &str,
    warmup_cycles: u32,
    warmup: Duration,
    cycles: u32,
    limit: Duration,
    connect_limit: Duration,
) -> Result<Uncontended, BoxError> {
    let session = open(connect, connect_limit).await?;
    let mutex = match session.mutex(path) {
        Ok(mutex) => mutex,
        Err(e) => {
            session.close().await;
            return Err(e.into());
        }
    };
    let run = tokio::spawn(async move {
        let warm_until = Instant::now() + warmup;
        for _ in 0..warmup_cycles {
            if Instant::now() >= warm_until {
                break;
            }
            cycle(&mutex).await?;
        }
        let started = Instant::now();
        let mut done = 0u64;
        while done < u64::from(cycles) && started.elapsed() < limit {
            cycle(&mutex).await?;
            done += 1;
        }
        Ok(Uncontended {
            cycles: done,
            elapsed: started.elapsed(),
        })
    });
    let result = run
        .await
        .unwrap_or_else(|e| Err(format!("uncontended task: {e}").into()));
    session.close().await;
    result
}

/// `clients` sessions, each with its own Mutex on `path`, looping lock -> release up to
/// `cycles` times or until `limit` passed (then each finishes the wait it is in).
pub(super) async fn contended(
    connect: &str,
    path: &str,
    clients: usize,
    cycles: u32,
    limit: Duration,
    connect_limit: Duration,
) -> Result<Contended, BoxError> {
    let sessions = open_many(connect, clients, connect_limit).await?;
    let mutexes = sessions
        .iter()
        .map(|session| session.mutex(path))
        .collect::<Result<Vec<_>, _>>()?;
    let contenders = mutexes.into_iter().map(|mutex| {
        let mutex = Arc::new(mutex);
        move || {
            let mutex = Arc::clone(&mutex);
            async move { cycle(&mutex).await }
        }
    });
    let result = contend(contenders, cycles as usize, limit).await;
    close_all(sessions).await;
    result
}

/// The contended run of every lock benchmark: the contenders start together (a barrier), each
/// calls its `cycle` (one lock -> release, returning the wait) up to `cycles` times or until
/// `limit` passed (then it finishes the wait it is in); every wait is gathered, timed from the
/// start.
pub(crate) async fn contend<C, F>(
    contenders: impl IntoIterator<Item = C>,
    cycles: usize,
    limit: Duration,
) -> Result<Contended, BoxError>
where
    C: FnMut() -> F + Send + 'static,
    F: Future<Output = Result<Duration, BoxError>> + Send,
{
    let contenders: Vec<C> = contenders.into_iter().collect();
    let clients = contenders.len();
    let start = Arc::new(Barrier::new(clients + 1));
    let mut tasks = Vec::with_capacity(clients);
    for mut cycle in contenders {
        let start = Arc::clone(&start);
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            let deadline = Instant::now() + limit;
            let mut waits = Vec::new();
            while waits.len() < cycles && Instant::now() < deadline {
                waits.push(cycle().await?);
            }
            Ok::<_, BoxError>(waits)
        }));
    }
    start.wait().await;
    let started = Instant::now();
    let mut waits = Vec::new();
    let mut failure = None;
    for task in tasks {
        match task.await {
            Ok(Ok(mine)) => waits.extend(mine),
            Ok(Err(e)) => failure = failure.or(Some(e)),
            Err(e) => failure = failure.or(Some(format!("contender task: {e}").into())),
        }
    }
    let elapsed = started.elapsed();
    match failure {
        Some(e) => Err(e),
        None => Ok(Contended::from_waits(clients, &waits, elapsed)),
    }
}

/// `sessions` sessions contend for one lock of `kind`, each acquiring and releasing it
/// `cycles` times; returns the watch notifications their waiters received per release.
pub(super) async fn herd(
    connect: &str,
    path: &str,
    kind: LockKind,
    sessions: usize,
    cycles: u32,
    limit: Duration,
    connect_limit: Duration,
) -> Result<Herd, BoxError> {
    let opened = open_many(connect, sessions, connect_limit).await?;
    let before: u64 = opened.iter().map(Session::notifications).sum();
    let start = Arc::new(Barrier::new(sessions + 1));
    let mut tasks = Vec::with_capacity(sessions);
    for session in &opened {
        let lock = HerdLock::new(session, path, kind)?;
        let start = Arc::clone(&start);
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            let deadline = Instant::now() + limit;
            let mut releases = 0u64;
            while releases < u64::from(cycles) && Instant::now() < deadline {
                lock.cycle().await?;
                releases += 1;
            }
            Ok::<_, BoxError>(releases)
        }));
    }
    start.wait().await;
    let mut releases = 0;
    let mut failure = None;
    for task in tasks {
        match task.await {
            Ok(Ok(n)) => releases += n,
            Ok(Err(e)) => failure = failure.or(Some(e)),
            Err(e) => failure = failure.or(Some(format!("waiter task: {e}").into())),
        }
    }
    let after: u64 = opened.iter().map(Session::notifications).sum();
    close_all(opened).await;
    match failure {
        Some(e) => Err(e),
        None => Ok(Herd {
            sessions,
            releases,
            notifications: after.saturating_sub(before),
        }),
    }
}

/// The lock of one herd contender.
enum HerdLock {
    Mutex(Mutex),
    Simple(SimpleLock),
}

impl HerdLock {
    fn new(session: &Session, path: &str, kind: LockKind) -> Result<HerdLock, BoxError> {
        Ok(match kind {
            LockKind::Mutex => HerdLock::Mutex(session.mutex(path)?),
            LockKind::Simple => HerdLock::Simple(session.simple_lock(path)?),
        })
    }

    async fn cycle(&self) -> Result<(), BoxError> {
        match self {
            HerdLock::Mutex(mutex) => cycle(mutex).await.map(drop),
            HerdLock::Simple(lock) => {
                let Some(guard) = lock.lock_timeout(ACQUIRE_LIMIT).await? else {
                    return Err(
                        format!("no lock on {} within {ACQUIRE_LIMIT:?}", lock.path()).into(),
                    );
                };
                guard.release().await?;
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contended_figures_follow_the_waits() {
        let ms = Duration::from_millis;
        let c = Contended::from_waits(2, &[ms(1), ms(2), ms(3), ms(10)], Duration::from_secs(2));
        assert_eq!(c.handoffs, 4);
        assert_eq!(c.per_sec(), 2.0);
        assert_eq!(c.mean_wait, ms(4));
        assert_eq!(c.max_wait, ms(10));
        assert_eq!(c.fairness(), Some(2.5));
        let none = Contended::from_waits(8, &[], Duration::ZERO);
        assert_eq!(
            (none.handoffs, none.per_sec(), none.fairness()),
            (0, 0.0, None)
        );
        let herd = Herd {
            sessions: 4,
            releases: 8,
            notifications: 6,
        };
        assert_eq!(herd.per_release(), Some(0.75));
    }
}
