//! `lockkeeper-bench --redis`: lockkeeper's Redis lease lock against redis-py's `Lock`, on the
//! same redis-server in the same run.
//!
//! Two workloads, each on both clients:
//! - **uncontended**: one client locks and unlocks as fast as it can (cycles/s, cycle latency);
//! - **contended**: N clients (8 by default) want one lock all the time: lock, hold it for
//!   `--redis-hold` (a thread sleep on both sides), release, again. Reported: acquisitions/s (handoffs), how often the holder
//!   actually changed, and how long a lock call waited (p50/p99/p99.9). A wait that has not
//!   ended when the window closes is recorded as it stands, so starvation shows instead of
//!   vanishing from the figures.
//!
//! Both sides use blocking acquisition as a service would: lockkeeper's `lock()` (woken by the
//! release's pub/sub message) and redis-py's `acquire()` (retrying every 0.1 s, its default),
//! with the same fixed 30 s lease. redis-py runs as a Python child process
//! ([`redis_py.py`](./redis_py.py), embedded in the binary) that prints its figures as JSON.
//!
//! Bounded like every mode of the benchmark: by `--duration` and `--max-ops` per run, and by a
//! timeout on the Python child. The redis-server it starts (unless `--redis-url` is given) is
//! testkit's, killed on every way out, SIGKILL of the benchmark included (testkit's watcher kills
//! it within a second of this process's end; the Python child dies with the parent-death signal).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hdrhistogram::Histogram;
use lockkeeper::LockOptions;
use lockkeeper::redis::{Redis, RedisOptions};
use lockkeeper_testkit::RedisServer;
use tokio::time::Instant;

use super::BoxError;
use super::report::{Goal, print_goals};
use super::stats::{Json, fmt_duration, fmt_ratio, new_histogram, ratio, record};

mod python;

use python::PyFigures;

/// The lease both clients set: redis-py's `Lock(timeout=30)`, lockkeeper's `LockOptions::new().lease(30 s)`.
const LEASE: Duration = Duration::from_secs(30);

/// The flags of `lockkeeper-bench --redis`.
#[derive(clap::Args, Debug)]
pub struct RedisArgs {
    /// Redis lock benchmark: lockkeeper's LeaseLock against redis-py's Lock on one redis-server
    /// (started on a free loopback port unless --redis-url is given), uncontended and with
    /// --redis-clients contending for one lock; prints the ratios.
    #[arg(long)]
    pub redis: bool,

    /// With --redis: use this Redis instead of starting one (only keys under
    /// `lockkeeper-bench-<pid>-<random>` are written, and removed at the end).
    #[arg(long, value_name = "URL", requires = "redis")]
    pub redis_url: Option<String>,

    /// With --redis: clients contending for one lock.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub redis_clients: u16,

    /// With --redis: how long each client holds the contended lock.
    #[arg(long, default_value = "1ms", value_parser = super::parse_duration)]
    pub redis_hold: Duration,

    /// With --redis: the Python interpreter that has redis-py (`pip install redis`).
    #[arg(long, value_name = "PATH", default_value = "python3")]
    pub python: PathBuf,
}

impl RedisArgs {
    /// The settings of a run, with the duration, warm-up and bound shared with the other modes.
    pub fn settings(&self, bench: &lockkeeper_load::LoadArgs) -> Settings {
        Settings {
            url: self.redis_url.clone(),
            clients: usize::from(self.redis_clients),
            hold: self.redis_hold,
            warmup: bench.warmup,
            duration: bench.duration,
            max_ops: bench.max_ops,
            python: self.python.clone(),
        }
    }
}

/// What `--redis` was asked to do.
#[derive(Clone, Debug)]
pub struct Settings {
    /// An existing Redis to use; `None` starts a redis-server for the run.
    pub url: Option<String>,
    /// Clients contending for one lock.
    pub clients: usize,
    /// How long each client holds the contended lock.
    pub hold: Duration,
    pub warmup: Duration,
    pub duration: Duration,
    /// Upper bound on cycles (uncontended) and acquisitions (contended) in one run.
    pub max_ops: u64,
    /// The Python interpreter that has redis-py.
    pub python: PathBuf,
}

/// Runs both workloads on both clients, prints the table and the ratios, returns the JSON.
pub(crate) async fn run(settings: &Settings) -> Result<Json, BoxError> {
    // testkit's throwaway redis-server (no persistence, killed on drop and if this process
    // dies); its start blocks while it waits for PONG, so it runs off the runtime's threads.
    let server = match &settings.url {
        Some(_) => None,
        None => Some(
            tokio::task::spawn_blocking(RedisServer::try_start)
                .await
                .map_err(|e| format!("starting redis-server: {e}"))??,
        ),
    };
    let url = match (&settings.url, &server) {
        (Some(url), _) => url.clone(),
        (None, Some(server)) => server.url(),
        (None, None) => unreachable!("a server is started when no URL is given"),
    };
    // Everything this run writes lives under this prefix and is deleted at the end.
    let prefix = format!(
        "lockkeeper-bench-{}-{:08x}",
        std::process::id(),
        rand::random::<u32>()
    );
    let admin = Redis::connect(&url)
        .await
        .map_err(|e| format!("cannot connect to Redis at {url}: {e}"))?;
    let version = server_version(&admin).await;
    println!(
        "lockkeeper-bench --redis: redis-server {version} at {url}{}; {:?} per run after {:?} \
         warm-up; lease {LEASE:?}",
        if server.is_some() {
            " (started for this run)"
        } else {
            ""
        },
        settings.duration,
        settings.warmup,
    );
    let outcome = measure(settings, &url, &prefix).await;
    if let Err(e) = remove_keys(&admin, &prefix).await {
        eprintln!("warning: could not remove the benchmark's keys ({prefix}*): {e}");
    }
    let (ours, py) = outcome?;
    Ok(report(settings, &url, &version, &ours, &py))
}

/// lockkeeper's figures for one run.
struct Ours {
    lock: Uncontended,
    try_lock: Uncontended,
    contended: Contended,
}

async fn measure(
    settings: &Settings,
    url: &str,
    prefix: &str,
) -> Result<(Ours, PyFigures), BoxError> {
    let options = RedisOptions::new().key_prefix(prefix);
    let redis = Redis::connect_with(url, options.clone()).await?;
    let lock = uncontended(settings, &redis, "uncontended", Acquire::Lock).await?;
    let try_lock = uncontended(settings, &redis, "uncontended-try", Acquire::TryLock).await?;
    let contended = contended(settings, url, &options).await?;
    let ours = Ours {
        lock,
        try_lock,
        contended,
    };
    print_ours(settings, &ours);
    let py = python::run(settings, url, &format!("{prefix}:redis-py")).await?;
    print_py(&py);
    Ok((ours, py))
}

#[derive(Clone, Copy)]
enum Acquire {
    Lock,
    TryLock,
}

struct Uncontended {
    cycles: u64,
    elapsed: Duration,
    latency: Histogram<u64>,
}

impl Uncontended {
    fn per_sec(&self) -> f64 {
        per_sec(self.cycles, self.elapsed)
    }
}

async fn uncontended(
    settings: &Settings,
    redis: &Redis,
    name: &str,
    how: Acquire,
) -> Result<Uncontended, BoxError> {
    let lock = redis
        .lease_lock(name)
        .with_options(LockOptions::new().lease(LEASE))?;
    let cycle = || async {
        let guard = match how {
            Acquire::Lock => lock.lock().await?,
            Acquire::TryLock => lock
                .try_lock()
                .await?
                .ok_or("the uncontended lock was busy: is another client using this Redis?")?,
        };
        guard.release().await?;
        Ok::<(), BoxError>(())
    };
    let warm_until = Instant::now() + settings.warmup;
    while Instant::now() < warm_until {
        cycle().await?;
    }
    let mut latency = new_histogram();
    let start = Instant::now();
    let end = start + settings.duration;
    let mut cycles = 0;
    while cycles < settings.max_ops && Instant::now() < end {
        let began = Instant::now();
        cycle().await?;
        record(&mut latency, began.elapsed());
        cycles += 1;
    }
    Ok(Uncontended {
        cycles,
        elapsed: start.elapsed(),
        latency,
    })
}

struct Contended {
    acquisitions: u64,
    holder_changes: u64,
    elapsed: Duration,
    waits: Histogram<u64>,
}

impl Contended {
    fn per_sec(&self) -> f64 {
        per_sec(self.acquisitions, self.elapsed)
    }

    fn changes_per_sec(&self) -> f64 {
        per_sec(self.holder_changes, self.elapsed)
    }

    fn wait(&self, q: f64) -> Duration {
        Duration::from_micros(self.waits.value_at_quantile(q))
    }
}

/// What the contending clients record, under one mutex (touched once per acquisition).
struct Tally {
    waits: Histogram<u64>,
    holders: Vec<usize>,
    stopped_at: Option<Instant>,
}

async fn contended(
    settings: &Settings,
    url: &str,
    options: &RedisOptions,
) -> Result<Contended, BoxError> {
    // Each client has connections of its own, as separate services would.
    let mut locks = Vec::with_capacity(settings.clients);
    for _ in 0..settings.clients {
        let redis = Redis::connect_with(url, options.clone()).await?;
        locks.push(
            redis
                .lease_lock("contended")
                .with_options(LockOptions::new().lease(LEASE))?,
        );
    }
    let start = Instant::now() + Duration::from_millis(50);
    let measure_from = start + settings.warmup;
    let end = measure_from + settings.duration;
    let tally = Arc::new(Mutex::new(Tally {
        waits: new_histogram(),
        holders: Vec::new(),
        stopped_at: None,
    }));
    let mut tasks = Vec::new();
    for (ident, lock) in locks.into_iter().enumerate() {
        let tally = Arc::clone(&tally);
        let (hold, max_ops) = (settings.hold, settings.max_ops);
        tasks.push(tokio::spawn(async move {
            tokio::time::sleep_until(start).await;
            loop {
                let began = Instant::now();
                if began >= end || lock_tally(&tally).stopped_at.is_some() {
                    return Ok(());
                }
                let outcome = tokio::time::timeout_at(end, lock.lock()).await;
                let got = Instant::now();
                let measured = began >= measure_from;
                let guard = match outcome {
                    Ok(guard) => guard?,
                    Err(_) => {
                        // Still waiting when the window closed: count the wait so far.
                        if measured {
                            let mut tally = lock_tally(&tally);
                            if tally.stopped_at.is_none() {
                                record(&mut tally.waits, got - began);
                            }
                        }
                        return Ok(());
                    }
                };
                // Once --max-ops acquisitions are in, the window is closed: later ones are not
                // counted (the clients still waiting then are let through to the end).
                if measured {
                    let mut tally = lock_tally(&tally);
                    if tally.stopped_at.is_none() {
                        record(&mut tally.waits, got - began);
                        tally.holders.push(ident);
                        if tally.holders.len() as u64 >= max_ops {
                            tally.stopped_at = Some(got);
                        }
                    }
                }
                hold_for(hold).await;
                guard.release().await?;
            }
        }));
    }
    for task in tasks {
        let result: Result<(), lockkeeper::Error> = task.await?;
        result?;
    }
    let tally = lock_tally(&tally);
    let stopped = tally.stopped_at.unwrap_or(end);
    Ok(Contended {
        acquisitions: tally.holders.len() as u64,
        holder_changes: holder_changes(&tally.holders),
        elapsed: stopped.saturating_duration_since(measure_from),
        waits: tally.waits.clone(),
    })
}

/// The work done under the lock: a thread sleep, as on the Python side (`time.sleep`). Not
/// `tokio::time::sleep`, whose millisecond timer wheel rounds 1 ms up to as much as 2 ms and
/// would charge the lock for the timer's granularity.
async fn hold_for(hold: Duration) {
    if !hold.is_zero() {
        let _ = tokio::task::spawn_blocking(move || std::thread::sleep(hold)).await;
    }
}

fn lock_tally(tally: &Mutex<Tally>) -> std::sync::MutexGuard<'_, Tally> {
    // A panicking client task cannot leave a histogram half-recorded in a way that matters.
    tally
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// How many times the lock went to a different client than the one before.
fn holder_changes(holders: &[usize]) -> u64 {
    holders.windows(2).filter(|w| w[0] != w[1]).count() as u64
}

fn per_sec(count: u64, elapsed: Duration) -> f64 {
    if elapsed.is_zero() {
        0.0
    } else {
        count as f64 / elapsed.as_secs_f64()
    }
}

fn print_ours(settings: &Settings, ours: &Ours) {
    println!();
    println!("uncontended lock+unlock, 1 client             cycles/s       p50       p99");
    for (label, run) in [
        ("lockkeeper LeaseLock lock()+release()", &ours.lock),
        ("lockkeeper LeaseLock try_lock()+release()", &ours.try_lock),
    ] {
        println!(
            "  {label:<42} {:>9.0} {:>9} {:>9}",
            run.per_sec(),
            fmt_duration(quantile(&run.latency, 0.5)),
            fmt_duration(quantile(&run.latency, 0.99)),
        );
    }
    println!();
    println!(
        "contended, {} clients, hold {}        acquired/s  changes/s  wait p50     p99   p99.9",
        settings.clients,
        fmt_duration(settings.hold)
    );
    let c = &ours.contended;
    println!(
        "  {:<36} {:>10.0} {:>10.0} {:>9} {:>7} {:>7}",
        "lockkeeper LeaseLock lock()",
        c.per_sec(),
        c.changes_per_sec(),
        fmt_duration(c.wait(0.5)),
        fmt_duration(c.wait(0.99)),
        fmt_duration(c.wait(0.999)),
    );
}

fn print_py(py: &PyFigures) {
    println!();
    println!(
        "redis-py {} Lock (blocking acquire, sleep 0.1 s):",
        py.version
    );
    println!(
        "  uncontended acquire()+release()            {:>9.0} {:>9} {:>9}",
        py.uncontended_per_sec(),
        fmt_duration(py.uncontended_p50),
        fmt_duration(py.uncontended_p99),
    );
    println!(
        "  contended                            {:>10.0} {:>10.0} {:>9} {:>7} {:>7}",
        py.contended_per_sec(),
        py.changes_per_sec(),
        fmt_duration(py.wait_p50),
        fmt_duration(py.wait_p99),
        fmt_duration(py.wait_p999),
    );
}

fn quantile(hist: &Histogram<u64>, q: f64) -> Duration {
    Duration::from_micros(hist.value_at_quantile(q))
}

/// Prints the ratios and the targets, and builds the JSON document.
fn report(settings: &Settings, url: &str, version: &str, ours: &Ours, py: &PyFigures) -> Json {
    let cycles = ratio(Some(ours.lock.per_sec()), Some(py.uncontended_per_sec()));
    let handoffs = ratio(Some(ours.contended.per_sec()), Some(py.contended_per_sec()));
    let ours_p999 = ours.contended.wait(0.999).as_secs_f64();
    let py_p999 = py.wait_p999.as_secs_f64();
    // How many times shorter our p99.9 wait is (redis-py / lockkeeper).
    let p999 = ratio(Some(py_p999), Some(ours_p999.max(1e-6)));
    println!();
    println!("ratios (lockkeeper / redis-py; for waits, redis-py / lockkeeper: higher is better)");
    println!(
        "  uncontended cycles/s {}   contended acquisitions/s {}   holder changes/s {}   \
         wait p99.9 {} shorter",
        fmt_ratio(Some(ours.lock.per_sec()), Some(py.uncontended_per_sec())),
        fmt_ratio(Some(ours.contended.per_sec()), Some(py.contended_per_sec())),
        fmt_ratio(
            Some(ours.contended.changes_per_sec()),
            Some(py.changes_per_sec())
        ),
        fmt_ratio(Some(py_p999), Some(ours_p999.max(1e-6))),
    );
    let changes = ratio(
        Some(ours.contended.changes_per_sec()),
        Some(py.changes_per_sec()),
    );
    let goal = |name, ratio, target| Goal {
        name,
        ratio,
        target,
        at_most: false,
    };
    // Lock passed to another client counts too: acquisitions alone could be one client
    // re-taking its own lock.
    let goals = [
        goal("uncontended cycles/s, lockkeeper / redis-py", cycles, 1.0),
        goal(
            "contended acquisitions/s, lockkeeper / redis-py",
            handoffs,
            1.0,
        ),
        goal("holder changes/s, lockkeeper / redis-py", changes, 1.0),
        goal("wait p99.9, redis-py / lockkeeper", p999, 10.0),
    ];
    print_goals(&goals, None);
    let uncontended_json = |run: &Uncontended| {
        Json::obj(vec![
            ("cycles", Json::num(run.cycles as f64)),
            ("cycles_per_s", Json::num(run.per_sec())),
            (
                "p50_us",
                Json::num(quantile(&run.latency, 0.5).as_micros() as f64),
            ),
            (
                "p99_us",
                Json::num(quantile(&run.latency, 0.99).as_micros() as f64),
            ),
        ])
    };
    let c = &ours.contended;
    Json::obj(vec![
        (
            "command",
            Json::Str(std::env::args().collect::<Vec<_>>().join(" ")),
        ),
        ("redis_url", Json::Str(url.to_string())),
        ("redis_version", Json::Str(version.to_string())),
        ("clients", Json::num(settings.clients as f64)),
        ("hold_us", Json::num(settings.hold.as_micros() as f64)),
        ("duration_s", Json::num(settings.duration.as_secs_f64())),
        (
            "lockkeeper",
            Json::obj(vec![
                ("uncontended_lock", uncontended_json(&ours.lock)),
                ("uncontended_try_lock", uncontended_json(&ours.try_lock)),
                (
                    "contended",
                    Json::obj(vec![
                        ("acquisitions", Json::num(c.acquisitions as f64)),
                        ("acquisitions_per_s", Json::num(c.per_sec())),
                        ("holder_changes_per_s", Json::num(c.changes_per_sec())),
                        ("wait_p50_us", Json::num(c.wait(0.5).as_micros() as f64)),
                        ("wait_p99_us", Json::num(c.wait(0.99).as_micros() as f64)),
                        ("wait_p999_us", Json::num(c.wait(0.999).as_micros() as f64)),
                    ]),
                ),
            ]),
        ),
        ("redis_py", py.json()),
        (
            "ratios",
            Json::obj(vec![
                ("uncontended_cycles", Json::opt_num(cycles)),
                ("contended_acquisitions", Json::opt_num(handoffs)),
                ("contended_holder_changes", Json::opt_num(changes)),
                ("wait_p999_redis_py_over_lockkeeper", Json::opt_num(p999)),
            ]),
        ),
        (
            "goals",
            Json::Arr(goals.iter().map(Goal::to_json).collect()),
        ),
    ])
}

async fn server_version(redis: &Redis) -> String {
    let info: Result<String, _> = redis.command(::redis::cmd("INFO").arg("server")).await;
    info.ok()
        .and_then(|text| {
            text.lines().find_map(|l| {
                l.strip_prefix("redis_version:")
                    .map(|v| v.trim().to_string())
            })
        })
        .unwrap_or_else(|| "(unknown version)".to_string())
}

/// Deletes every key under `prefix` (lockkeeper's fencing counters have no expiry).
async fn remove_keys(redis: &Redis, prefix: &str) -> Result<(), BoxError> {
    let pattern = format!("{prefix}*");
    let mut cursor: u64 = 0;
    // Bounded: SCAN visits each key at most a few times; a run writes a handful of keys.
    for _ in 0..10_000 {
        let (next, keys): (u64, Vec<String>) = redis
            .command(
                ::redis::cmd("SCAN")
                    .arg(cursor)
                    .arg("MATCH")
                    .arg(&pattern)
                    .arg("COUNT")
                    .arg(1000),
            )
            .await?;
        if !keys.is_empty() {
            let _: i64 = redis.command(::redis::cmd("DEL").arg(&keys)).await?;
        }
        if next == 0 {
            return Ok(());
        }
        cursor = next;
    }
    Err("SCAN did not finish".into())
}
