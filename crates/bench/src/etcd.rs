//! `lockkeeper-bench --etcd`: lockkeeper's Mutex on etcd against etcd's own lock service
//! (v3lock, see [`v3lock`]), on one etcd member in the same run.
//!
//! Two measurements, each taken for both sides in every trial, every other trial in reverse
//! order (so drift during the run favours neither side), each figure the median of a side's
//! trials (`--etcd-trials`, 5 by default), printed with their range:
//! - **uncontended**: one client locks and unlocks one name as fast as it can (cycles/s, and
//!   the cycle's p50/p99);
//! - **contended**: `--etcd-clients` clients (8 by default), each with its own session (its own
//!   connection and lease), loop lock -> unlock on one name: handoffs/s, the wait for each
//!   grant (p50, p99, max) and fairness (longest wait over mean wait).
//!
//! The ratios are of lockkeeper's medians over v3lock's from the same run, and the target the
//! issue sets (contended handoffs/s at least 3x v3lock's) is judged on that ratio and printed
//! with its verdict.
//!
//! Invariants: the etcd member is testkit's ([`Etcd`]: loopback ports, a temporary data
//! directory, killed on drop and if this process dies) unless `--etcd-endpoint` names one;
//! every lock name is fresh (side, measurement and trial in it), so one run's keys never meet
//! another's; every loop is bounded by a count and by `--duration`, and every acquisition by
//! [`ACQUIRE_LIMIT`]; clients connect before the clock starts and close (releasing their
//! leases) after it stops.

mod report;
mod v3lock;

use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use lockkeeper_testkit::Etcd;

use crate::BoxError;
use crate::locks::{ACQUIRE_LIMIT, Contended, contend, open_all};
use crate::stats::{self, Json, rate};
use report::Report;
use v3lock::V3Lock;

/// The flags of `lockkeeper-bench --etcd` (`--duration`, `--warmup`, `--connect-timeout` and
/// `--json` apply too).
#[derive(clap::Args, Debug, Clone)]
pub struct EtcdArgs {
    /// etcd lock benchmark: lockkeeper's Mutex on etcd against etcd's lock service (the v3lock
    /// Lock/Unlock RPCs through etcd-client, one lease per client), on one etcd member started
    /// on a free loopback port unless --etcd-endpoint is given: uncontended cycles/s and
    /// handoffs/s with --etcd-clients contending, the median of --etcd-trials with its range;
    /// prints the ratios of medians.
    #[arg(long)]
    pub etcd: bool,

    /// With --etcd: use this etcd (HOST:PORT) instead of starting one (only keys under
    /// `lockkeeper-bench-<pid>-<random>/` are written; every lease is revoked at the end).
    #[arg(long, value_name = "HOST:PORT", requires = "etcd")]
    pub etcd_endpoint: Option<String>,

    /// With --etcd: lock+unlock cycles of each uncontended run (and at most as many warm-up
    /// cycles, within --warmup).
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u32).range(1..))]
    pub etcd_cycles: u32,

    /// With --etcd: clients contending for one lock, each with its own session.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u16).range(2..=256))]
    pub etcd_clients: u16,

    /// With --etcd: acquisitions per client in each contended run.
    #[arg(long, default_value_t = 250, value_parser = clap::value_parser!(u32).range(1..))]
    pub etcd_handoffs: u32,

    /// With --etcd: trials over both sides, every other one in reverse order; each figure is
    /// the median of a side's trials (printed with their range), and each ratio a ratio of
    /// medians.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub etcd_trials: u32,

    /// With --etcd: the lease TTL of every session on both sides (whole seconds).
    #[arg(long, value_name = "D", default_value = "30s", value_parser = parse_ttl)]
    pub etcd_ttl: Duration,
}

impl EtcdArgs {
    /// The settings of a run, with the bounds shared with the other modes.
    pub fn settings(&self, load: &lockkeeper_load::LoadArgs) -> Settings {
        Settings {
            endpoint: self.etcd_endpoint.clone(),
            cycles: self.etcd_cycles,
            clients: usize::from(self.etcd_clients),
            handoffs: self.etcd_handoffs,
            trials: self.etcd_trials,
            ttl: self.etcd_ttl,
            warmup: load.warmup,
            limit: load.duration,
            connect_limit: load.connect_timeout,
        }
    }
}

/// A lease TTL: a duration of whole seconds, at least one (etcd counts leases in seconds).
fn parse_ttl(text: &str) -> Result<Duration, String> {
    let ttl = crate::parse_duration(text)?;
    if ttl < Duration::from_secs(1) || ttl.subsec_nanos() != 0 {
        return Err(format!(
            "`{text}` is not a lease TTL: etcd takes whole seconds, at least 1s"
        ));
    }
    Ok(ttl)
}

/// What `--etcd` was asked to do.
#[derive(Clone, Debug)]
pub struct Settings {
    /// An etcd to use (`host:port`); `None` starts one member for the run.
    pub endpoint: Option<String>,
    pub cycles: u32,
    pub clients: usize,
    pub handoffs: u32,
    pub trials: u32,
    /// Every session's lease TTL, on both sides.
    pub ttl: Duration,
    /// Bound on the warm-up before each uncontended run.
    pub warmup: Duration,
    /// Bound on each measured run.
    pub limit: Duration,
    /// Bound on starting etcd and on opening a session.
    pub connect_limit: Duration,
}

/// Which lock is measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Side {
    /// `lockkeeper::etcd::Mutex`.
    Lockkeeper,
    /// etcd's lock service through `etcd_client::LockClient`.
    V3lock,
}

impl Side {
    pub(crate) const ALL: [Side; 2] = [Side::Lockkeeper, Side::V3lock];

    pub(crate) fn label(self) -> &'static str {
        match self {
            Side::Lockkeeper => "lockkeeper Mutex",
            Side::V3lock => "etcd v3lock (etcd-client)",
        }
    }

    pub(crate) fn json_key(self) -> &'static str {
        match self {
            Side::Lockkeeper => "lockkeeper",
            Side::V3lock => "v3lock",
        }
    }

    /// Both sides in the order of trial `trial`: every other trial reversed.
    pub(crate) fn in_turn(trial: u32) -> [Side; 2] {
        let mut order = Side::ALL;
        if trial % 2 == 1 {
            order.reverse();
        }
        order
    }
}

/// Starts etcd (unless one is given), measures, prints the table and returns the JSON (or a
/// [`Partial`](crate::report::Partial) carrying it when some figure could not be taken).
pub(crate) async fn run(settings: &Settings) -> Result<Json, BoxError> {
    // testkit's member blocks while it waits for health, so it starts off the async threads.
    let started = match &settings.endpoint {
        Some(_) => None,
        None => Some(
            tokio::task::spawn_blocking(Etcd::try_start)
                .await
                .map_err(|e| format!("starting etcd: {e}"))??,
        ),
    };
    let endpoint = match (&settings.endpoint, &started) {
        (Some(endpoint), _) => endpoint.clone(),
        (None, Some(etcd)) => etcd.addr().to_string(),
        (None, None) => unreachable!("a member is started when no endpoint is given"),
    };
    let version = etcd_version(&endpoint, settings.connect_limit).await;
    println!(
        "lockkeeper-bench --etcd: etcd {version} at {endpoint}{}; each measured run at most {}, \
         lease TTL {:?}, {} trials",
        if started.is_some() {
            " (one member started for this run)"
        } else {
            ""
        },
        stats::fmt_duration(settings.limit),
        settings.ttl,
        settings.trials,
    );
    let prefix = format!(
        "lockkeeper-bench-{}-{:08x}",
        std::process::id(),
        rand::random::<u32>()
    );
    let report = measure(settings, &endpoint, &prefix).await;
    let json = report.to_json(settings, &endpoint, &version);
    report.finish(json)
}

/// Takes every figure against the etcd at `endpoint`, printing each as it comes; a figure that
/// cannot be taken is recorded as an error and the others are still taken.
pub(crate) async fn measure(settings: &Settings, endpoint: &str, prefix: &str) -> Report {
    let mut report = Report::default();
    report.print_uncontended_header(settings);
    for trial in 0..settings.trials {
        for side in Side::in_turn(trial) {
            let name = format!("{prefix}/uncontended-{}-{trial}", side.json_key());
            let result = uncontended(settings, endpoint, side, &name).await;
            report.add_uncontended(side, trial, result);
        }
    }
    report.print_contended_header(settings);
    for trial in 0..settings.trials {
        for side in Side::in_turn(trial) {
            let name = format!("{prefix}/contended-{}-{trial}", side.json_key());
            let result = contended(settings, endpoint, side, &name).await;
            report.add_contended(side, trial, result);
        }
    }
    report
}

/// One client of either side: a lockkeeper session with its Mutex, or a v3lock client with
/// its lease.
enum Client {
    Lockkeeper {
        session: lockkeeper::etcd::Session,
        mutex: lockkeeper::etcd::Mutex,
    },
    /// Boxed: a v3lock client is several times the size of a lockkeeper session.
    V3lock(Box<V3Lock>),
}

impl Client {
    async fn open(
        settings: &Settings,
        endpoint: &str,
        side: Side,
        name: &str,
    ) -> Result<Client, BoxError> {
        match side {
            Side::Lockkeeper => {
                let connecting = lockkeeper::etcd::Session::builder(endpoint)
                    .ttl(settings.ttl)
                    .connect_timeout(settings.connect_limit)
                    .connect();
                let session = match tokio::time::timeout(settings.connect_limit, connecting).await {
                    Ok(Ok(session)) => session,
                    Ok(Err(e)) => {
                        return Err(
                            format!("lockkeeper session with etcd at {endpoint}: {e}").into()
                        );
                    }
                    Err(_) => {
                        return Err(format!(
                            "no lockkeeper session with etcd at {endpoint} within {:?}",
                            settings.connect_limit
                        )
                        .into());
                    }
                };
                let mutex = session.mutex(name)?;
                Ok(Client::Lockkeeper { session, mutex })
            }
            Side::V3lock => Ok(Client::V3lock(Box::new(
                V3Lock::open(endpoint, name, settings.ttl, settings.connect_limit).await?,
            ))),
        }
    }

    /// One lock + unlock; the time spent waiting for the grant.
    async fn cycle(&self) -> Result<Duration, BoxError> {
        match self {
            Client::Lockkeeper { mutex, .. } => {
                let asked = Instant::now();
                let Some(guard) = mutex.lock_timeout(ACQUIRE_LIMIT).await? else {
                    return Err(format!("no lock within {ACQUIRE_LIMIT:?}").into());
                };
                let waited = asked.elapsed();
                guard.release().await?;
                Ok(waited)
            }
            Client::V3lock(client) => client.cycle().await,
        }
    }

    /// Ends the session (revoking its lease).
    async fn close(self) {
        match self {
            Client::Lockkeeper { session, mutex } => {
                drop(mutex);
                // Best effort: a lease that cannot be revoked lapses after its TTL.
                let _ = session.close().await;
            }
            Client::V3lock(client) => (*client).close().await,
        }
    }
}

/// Opens `n` clients of `side` at once; on any failure closes those that opened.
async fn open_many(
    settings: &Settings,
    endpoint: &str,
    side: Side,
    name: &str,
    n: usize,
) -> Result<Vec<Client>, BoxError> {
    open_all(
        n,
        || Client::open(settings, endpoint, side, name),
        close_all,
    )
    .await
}

async fn close_all(clients: Vec<Client>) {
    futures::future::join_all(clients.into_iter().map(Client::close)).await;
}

/// Uncontended lock+unlock cycles of one client, with each cycle's latency.
pub(crate) struct Uncontended {
    pub cycles: u64,
    pub elapsed: Duration,
    /// Whole cycles (lock and unlock), in microseconds.
    pub latency: Histogram<u64>,
}

impl Uncontended {
    pub(crate) fn per_sec(&self) -> f64 {
        rate(self.cycles, self.elapsed)
    }

    pub(crate) fn quantile(&self, q: f64) -> Duration {
        Duration::from_micros(self.latency.value_at_quantile(q))
    }
}

/// Up to `cycles` cycles of one client or until `limit`, after up to as many unmeasured ones
/// within `warmup`.
async fn uncontended(
    settings: &Settings,
    endpoint: &str,
    side: Side,
    name: &str,
) -> Result<Uncontended, BoxError> {
    let client = Client::open(settings, endpoint, side, name).await?;
    let result = async {
        let warm_until = Instant::now() + settings.warmup;
        for _ in 0..settings.cycles {
            if Instant::now() >= warm_until {
                break;
            }
            client.cycle().await?;
        }
        let mut latency = stats::new_histogram();
        let started = Instant::now();
        let mut cycles = 0u64;
        while cycles < u64::from(settings.cycles) && started.elapsed() < settings.limit {
            let began = Instant::now();
            client.cycle().await?;
            stats::record(&mut latency, began.elapsed());
            cycles += 1;
        }
        Ok(Uncontended {
            cycles,
            elapsed: started.elapsed(),
            latency,
        })
    }
    .await;
    client.close().await;
    result
}

/// `settings.clients` clients, each with its own session, looping lock -> unlock on `name`
/// up to `settings.handoffs` times or until `limit` passed (then each finishes its wait).
async fn contended(
    settings: &Settings,
    endpoint: &str,
    side: Side,
    name: &str,
) -> Result<Contended, BoxError> {
    let clients = open_many(settings, endpoint, side, name, settings.clients).await?;
    let clients: Vec<Arc<Client>> = clients.into_iter().map(Arc::new).collect();
    let contenders = clients.iter().map(|client| {
        let client = Arc::clone(client);
        move || {
            let client = Arc::clone(&client);
            async move { client.cycle().await }
        }
    });
    let result = contend(contenders, settings.handoffs as usize, settings.limit).await;
    // Every contender has ended, so each client is held once again.
    let clients: Vec<Client> = clients.into_iter().filter_map(Arc::into_inner).collect();
    close_all(clients).await;
    result
}

/// The server's version from its status, or `(unknown version)`.
async fn etcd_version(endpoint: &str, limit: Duration) -> String {
    let status = async {
        let mut client = etcd_client::Client::connect([endpoint], None).await.ok()?;
        client.status().await.ok()
    };
    match tokio::time::timeout(limit, status).await {
        Ok(Some(status)) => status.version().to_string(),
        _ => "(unknown version)".into(),
    }
}

#[cfg(test)]
mod tests;
