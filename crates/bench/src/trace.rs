//! `lockkeeper-bench --trace`: where a durable write's time goes inside Keeper, stage by stage.
//!
//! Starts Keeper (`--sync always`) as the other modes do, measures what one fdatasync of a 4 KiB
//! overwrite costs on the filesystem of Keeper's data dir (in this process, as the floor a
//! durable write cannot go under), then runs these workloads and reads Keeper's write-path trace
//! (`mntr`'s `lk_write_stage_*` keys, see the server's `trace` module) before and after each:
//!
//! 1. **one synchronous client** doing create+delete pairs, four times: through
//!    `zookeeper-client`, through `lockkeeper-zk-client`, and through a client with no library
//!    (`wire`) on a blocking socket and on a tokio socket awaited in the task; and one
//!    session's uncontended `zk::Mutex` lock -> release cycles, timed the same way (the
//!    acquisition's create and listing as one op, the release as the other).
//!    For each: p50/p99 per pair and per op, each stage's mean per traced reply and its share
//!    of the client's mean per op, and the rest ("client + loopback": the client, the kernel's
//!    loopback both ways); the library-free client's pairs also on a second Keeper that never
//!    syncs (`--sync none`): what a pair costs besides its syncs on this machine at that
//!    moment; then `lockkeeper-zk-client`'s pairs once more from `block_on` on a thread of its
//!    own, for what a caller off the runtime's workers pays. The clients run on a runtime
//!    worker, as a service's code does;
//! 2. **a contended handoff**: several sessions of lockkeeper's `zk::Mutex` looping
//!    lock -> release on one lock, handoffs per second and each stage's time per handoff, with
//!    `reaction` (a watch event written to the next request on that connection: what the
//!    waiting client takes to act on its notification);
//! 3. **the recipes' contended paths**, once each: several sessions incrementing one
//!    `AtomicLong` (losers try again at once) and a resign handoff in a `LeaderLatch` (the
//!    leader requeues, the next participant is granted), each with its rate, log syncs per
//!    operation and each stage's time per operation, as for the handoff;
//! 4. **the targets** (see [`targets`]): `--trace-trials` trials of the library-free durable
//!    pairs (on both sockets), `lockkeeper-zk-client`'s pairs and a lock cycle's requests sent
//!    bare through it, the uncontended Mutex cycles and the never-synced pairs, timed in rounds
//!    that take turns (see [`trials`]), each trial but the first followed by the contended
//!    handoff again; each target judged on the medians, and the cycle's p50 split into the
//!    steps between those clients.
//!
//! Bounded: each run by a count and by `--duration`, each wait by `--connect-timeout` or a
//! fixed limit; both Keepers are killed on every way out (each is a [`ChildServer`]).

use std::collections::HashMap;
use std::fs::OpenOptions;
use std::future::Future;
use std::net::SocketAddr;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use lockkeeper_load::BoxError;
use lockkeeper_load::stats::{Json, fmt_duration, new_histogram, record};
use lockkeeper_server::Stage;
use tokio::sync::Barrier;
use zookeeper_client::{Acls, Client, CreateMode};

mod targets;
mod trials;
mod wire;

use super::locks::{close_all, open, open_many};
use super::process::{ChildServer, Launcher, ServerKind, ServerOptions};
use super::recipes::{CounterRetry, measure as recipe};
use super::startup::first_session;
use targets::Trials;

/// The pipeline's stages in order, as `mntr` names them (`reaction` is apart).
fn pipeline() -> impl Iterator<Item = &'static str> {
    Stage::PIPELINE.into_iter().map(Stage::name)
}

/// Every stage `mntr` names, the pipeline's and `reaction`.
fn all_stages() -> impl Iterator<Item = &'static str> {
    Stage::ALL.into_iter().map(Stage::name)
}
/// The key of the log's sync count among the [`Totals`] (its count; no sum).
const SYNCS: &str = "log syncs";
/// The key of the log's groups taken after a thread hand-off (`lk_log_handoffs`; a count).
const HANDOFFS: &str = "log hand-offs";
/// fdatasyncs of the 4 KiB overwrite measured for the floor (fewer if [`SYNC_LIMIT`] passes).
const SYNC_SAMPLES: u32 = 2000;
/// The longest the fdatasync measurement may take.
const SYNC_LIMIT: Duration = Duration::from_secs(30);
/// The longest one request (or one lock acquisition) may take.
const OP_LIMIT: Duration = Duration::from_secs(10);

/// Flags of the trace mode (`--duration`, `--connect-timeout`, `--json` apply too).
#[derive(clap::Args, Debug, Clone)]
pub struct TraceArgs {
    /// Trace benchmark: start Keeper (`--sync always`), measure fdatasync on its data dir, then
    /// trace a synchronous client's create+delete pairs, an uncontended Mutex's lock -> release
    /// cycles and a contended Mutex handoff through Keeper's write path, stage by stage (each
    /// run at most --duration); the pairs also on a second Keeper with `--sync none`.
    #[arg(long)]
    pub trace: bool,

    /// With --trace: create+delete pairs of the synchronous client.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub trace_pairs: u32,

    /// With --trace: sessions looping on one Mutex in the handoff run.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u16).range(2..=256))]
    pub trace_clients: u16,

    /// With --trace: trials of the runs the targets are judged on (the library-free pairs,
    /// lockkeeper-zk-client's pairs and a lock cycle's requests through it, the uncontended
    /// Mutex and the never-synced pairs, taking turns of 50, then the contended handoff); each
    /// target is judged on the medians.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=50))]
    pub trace_trials: u32,
}

/// What one run needs.
#[derive(Clone)]
pub(crate) struct Settings {
    pub launcher: Launcher,
    pub pairs: u32,
    pub clients: usize,
    /// Trials of the runs the targets are judged on (see `--trace-trials`).
    pub trials: u32,
    pub limit: Duration,
    pub connect_limit: Duration,
}

/// The stage totals `mntr` reports: (count, sum µs) per stage name.
type Totals = HashMap<String, (f64, f64)>;

pub(crate) async fn run(settings: &Settings) -> Result<Json, BoxError> {
    if !settings.launcher.keeper_flags.sync {
        return Err("this Keeper binary has no --sync flag: nothing durable to trace".into());
    }
    let mut server = ChildServer::spawn(ServerKind::Keeper, &settings.launcher)?;
    let ready = first_session(&mut server, settings.connect_limit).await?;
    println!(
        "keeper: {} (first session after {})",
        settings.launcher.describe(ServerKind::Keeper),
        fmt_duration(ready)
    );
    let unsynced_options = ServerOptions {
        unsynced: true,
        ..ServerOptions::default()
    };
    let mut unsynced =
        ChildServer::spawn_with(ServerKind::Keeper, &settings.launcher, &unsynced_options)?;
    let ready = first_session(&mut unsynced, settings.connect_limit).await?;
    println!(
        "and a Keeper that never syncs: the same with --sync none (first session after {})",
        fmt_duration(ready)
    );
    // On a runtime worker, as a service's code runs (see `own_client_off_worker`).
    let (addr, unsynced_addr, dir, mine) = (
        server.addr(),
        unsynced.addr(),
        server.data_dir().to_path_buf(),
        settings.clone(),
    );
    let json = tokio::spawn(async move { measure(addr, &dir, unsynced_addr, &mine).await })
        .await
        .unwrap_or_else(|e| Err(format!("trace task: {e}").into()));
    drop(unsynced);
    drop(server);
    json
}

/// Every figure of the mode, on a Keeper (syncing every write) at `addr` whose data dir is
/// `data_dir`, and one that never syncs at `unsynced_addr`.
async fn measure(
    addr: SocketAddr,
    data_dir: &Path,
    unsynced_addr: SocketAddr,
    settings: &Settings,
) -> Result<Json, BoxError> {
    let data_dir = data_dir.to_path_buf();
    let sync_p50 = tokio::task::spawn_blocking(move || fdatasync_p50(&data_dir))
        .await
        .map_err(|e| format!("fdatasync measurement: {e}"))??;
    println!(
        "fdatasync of a 4 KiB overwrite in Keeper's data dir: p50 {} ({SYNC_SAMPLES} samples at most)",
        fmt_us(sync_p50)
    );
    let library = library_pairs(addr, settings).await?;
    let own = own_client_pairs(addr, settings).await?;
    let bare = bare_pairs(addr, settings).await?;
    let in_task = task_pairs(addr, settings).await?;
    let mut unsynced = bare_pairs(unsynced_addr, settings).await?;
    unsynced.what = UNSYNCED_PAIRS;
    let cycles = mutex_cycles(addr, settings).await?;
    print_pairs(&[
        ("(a) zookeeper-client", &library),
        ("(b) lockkeeper-zk-client", &own),
        ("(c) no client library", &bare),
        ("(c2) no library, tokio", &in_task),
        ("(d) uncontended Mutex", &cycles),
    ]);
    println!("{}", p50_line(library.p50(), own.p50(), bare.p50()));
    println!("{}", unsynced_line(&unsynced));
    let off_worker = own_client_off_worker(addr, settings).await?;
    println!(
        "(b) again, driven by block_on instead of a runtime worker: per op mean {:.1} µs, \
         {:+.1} µs (each reply crosses threads to reach the caller)",
        off_worker.op_mean_us(),
        off_worker.op_mean_us() - own.op_mean_us()
    );
    println!();
    let (handoff, handoff_syncs) = handoff_run(addr, settings, true).await?;
    println!();
    let counter = counter_run(addr, settings).await?;
    println!();
    let resign = resign_run(addr, settings).await?;
    // The targets' trials, each ended by a contended handoff run; the one above is the first.
    let mut trials = Trials {
        handoff_syncs: vec![handoff_syncs],
        ..Trials::default()
    };
    println!();
    for trial in 0..settings.trials {
        trials::trial(addr, unsynced_addr, settings, trial % 2 == 1, &mut trials).await?;
        if trial > 0 {
            let (_, syncs) = handoff_run(addr, settings, false).await?;
            trials.handoff_syncs.push(syncs);
        }
    }
    for line in trials.lines() {
        println!("{line}");
    }
    Ok(Json::obj(vec![
        (
            "command",
            Json::Str(std::env::args().collect::<Vec<_>>().join(" ")),
        ),
        ("fdatasync_p50_us", Json::num(micros(sync_p50))),
        ("trials", trials.json()),
        ("durable_pairs", library.json()),
        ("durable_pairs_lockkeeper_zk_client", own.json()),
        ("durable_pairs_no_library", bare.json()),
        ("durable_pairs_no_library_tokio", in_task.json()),
        ("unsynced_pairs_no_library", unsynced.json()),
        ("uncontended_mutex_cycles", cycles.json()),
        (
            "durable_pairs_lockkeeper_zk_client_block_on",
            off_worker.json(),
        ),
        ("contended_handoff", handoff),
        ("contended_counter", counter),
        ("resign_handoff", resign),
    ]))
}

/// (f): `settings.clients` sessions incrementing one `AtomicLong`, as many increments in all as
/// the synchronous run had pairs; an increment that loses tries again at once.
async fn counter_run(addr: SocketAddr, settings: &Settings) -> Result<Json, BoxError> {
    let clients = settings.clients;
    let each = u32::try_from(settings.pairs as usize / clients)
        .unwrap_or(u32::MAX)
        .max(1);
    let before = totals(addr).await?;
    let run = recipe::counter(
        &addr.to_string(),
        "/trace-counter",
        clients,
        each,
        CounterRetry::Spin,
        settings.limit,
        settings.connect_limit,
    )
    .await?;
    let stages = delta(&before, &totals(addr).await?);
    let what = format!(
        "(f) contended counter, {clients} sessions on one AtomicLong: {} increments in {}",
        run.increments,
        fmt_duration(run.elapsed)
    );
    Ok(per_op_report(
        &what,
        "increment",
        run.increments,
        run.elapsed,
        &stages,
    ))
}

/// (g): a resign handoff in a `LeaderLatch` of 3 participants: the leader requeues, the next is
/// granted, as many times as the synchronous run had pairs, at most 1000.
async fn resign_run(addr: SocketAddr, settings: &Settings) -> Result<Json, BoxError> {
    const PARTICIPANTS: usize = 3;
    let before = totals(addr).await?;
    let run = recipe::handoff(
        &addr.to_string(),
        "/trace-election",
        PARTICIPANTS,
        settings.pairs.min(1000),
        settings.limit,
        settings.connect_limit,
    )
    .await?;
    let stages = delta(&before, &totals(addr).await?);
    let mean = run.mean_gap().unwrap_or_default();
    let what = format!(
        "(g) resign handoff, {PARTICIPANTS} participants in one LeaderLatch: {} handoffs in {}, \
         resign to the next grant {} on average",
        run.count(),
        fmt_duration(run.elapsed),
        fmt_duration(mean)
    );
    let report = per_op_report(&what, "handoff", run.count(), run.elapsed, &stages);
    Ok(Json::obj(vec![
        ("resign_to_grant_mean_us", Json::num(micros(mean))),
        ("run", report),
    ]))
}

/// Prints `what`, the rate of `ops` over `elapsed`, the log syncs per op and each stage's time
/// per op; answers the same as JSON.
fn per_op_report(what: &str, op: &str, ops: u64, elapsed: Duration, stages: &Totals) -> Json {
    let n = ops.max(1) as f64;
    let per_sec = ops as f64 / elapsed.as_secs_f64().max(1e-9);
    let syncs = stages.get(SYNCS).map_or(0.0, |(count, _)| *count);
    println!(
        "{what}, {per_sec:.0}/s ({:.1} µs each), {:.2} log syncs per {op}",
        1e6 / per_sec.max(1e-9),
        syncs / n
    );
    println!(
        "{:<18} {:>13} {:>15} {:>15}",
        "stage",
        "mean µs/trace",
        format!("traced/{op}"),
        format!("sum µs/{op}")
    );
    for stage in all_stages() {
        let (count, sum) = stages.get(stage).copied().unwrap_or_default();
        println!(
            "{stage:<18} {:>13.1} {:>15.2} {:>15.1}",
            mean_of(stages, stage),
            count / n,
            sum / n,
        );
    }
    Json::obj(vec![
        ("ops", Json::num(n)),
        ("per_sec", Json::num(per_sec)),
        ("log_syncs_per_op", Json::num(syncs / n)),
        ("stages_us_per_op", stage_json(stages, Some(n))),
        ("stages_mean_us_per_reply", stage_json(stages, None)),
    ])
}

/// p50 of `SYNC_SAMPLES` fdatasyncs of one 4 KiB block overwritten in place, in a file in
/// `dir` (removed after): the cheapest durable write this filesystem offers.
fn fdatasync_p50(dir: &Path) -> Result<Duration, BoxError> {
    let path = dir.join("fdatasync-probe");
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
    let block = [0x5au8; 4096];
    let measured = (|| -> std::io::Result<Vec<Duration>> {
        // Allocated and synced first, so each sample is an overwrite, as Keeper's log writes are.
        file.write_all_at(&block, 0)?;
        file.sync_all()?;
        let deadline = Instant::now() + SYNC_LIMIT;
        let mut samples = Vec::with_capacity(SYNC_SAMPLES as usize);
        while samples.len() < SYNC_SAMPLES as usize && Instant::now() < deadline {
            file.write_all_at(&block, 0)?;
            let started = Instant::now();
            file.sync_data()?;
            samples.push(started.elapsed());
        }
        Ok(samples)
    })();
    drop(file);
    let _ = std::fs::remove_file(&path);
    let mut samples = measured.map_err(|e| format!("fdatasync on {}: {e}", path.display()))?;
    samples.sort();
    samples
        .get(samples.len() / 2)
        .copied()
        .ok_or_else(|| "no fdatasync sample".into())
}

/// A synchronous client's times: each pair, and each op of it.
pub(crate) struct PairTimes {
    pairs: u64,
    per_pair: Histogram<u64>,
    per_op: Histogram<u64>,
    op_total: Duration,
}

impl PairTimes {
    pub(crate) fn new() -> PairTimes {
        PairTimes {
            pairs: 0,
            per_pair: new_histogram(),
            per_op: new_histogram(),
            op_total: Duration::ZERO,
        }
    }

    pub(crate) fn count(&self) -> u64 {
        self.pairs
    }

    /// The p50 of a pair.
    fn p50(&self) -> Duration {
        Duration::from_micros(self.per_pair.value_at_quantile(0.5))
    }

    /// Adds `other`'s pairs to these.
    fn absorb(&mut self, other: &PairTimes) -> Result<(), BoxError> {
        self.per_pair.add(&other.per_pair)?;
        self.per_op.add(&other.per_op)?;
        self.op_total += other.op_total;
        self.pairs += other.pairs;
        Ok(())
    }

    /// One pair: the create sent at `t0` and answered at `t1`, the delete answered at `t2`.
    pub(crate) fn record(&mut self, t0: Instant, t1: Instant, t2: Instant) {
        record(&mut self.per_op, t1 - t0);
        record(&mut self.per_op, t2 - t1);
        record(&mut self.per_pair, t2 - t0);
        self.op_total += t2 - t0;
        self.pairs += 1;
    }
}

/// A synchronous client's figures: its times and Keeper's stage deltas over its run.
struct Pairs {
    /// What a pair is, for the report.
    what: &'static str,
    times: PairTimes,
    stages: Totals,
}

/// What [`timed_pairs`] times unless told otherwise.
const DURABLE_PAIRS: &str = "durable create+delete pairs";
/// What the library-free client times on the Keeper that never syncs.
const UNSYNCED_PAIRS: &str = "create+delete pairs, never synced";

impl Pairs {
    fn of(times: PairTimes, stages: Totals) -> Pairs {
        Pairs {
            what: DURABLE_PAIRS,
            times,
            stages,
        }
    }

    fn p50(&self) -> Duration {
        self.times.p50()
    }

    /// Mean client-observed time per op, in µs.
    fn op_mean_us(&self) -> f64 {
        micros(self.times.op_total) / (2 * self.times.pairs.max(1)) as f64
    }

    fn syncs_per_op(&self) -> f64 {
        let syncs = self.stages.get(SYNCS).map_or(0.0, |(count, _)| *count);
        syncs / (2 * self.times.pairs.max(1)) as f64
    }

    /// The log's groups taken after a thread hand-off, per op.
    fn handoffs_per_op(&self) -> f64 {
        let handoffs = self.stages.get(HANDOFFS).map_or(0.0, |(count, _)| *count);
        handoffs / (2 * self.times.pairs.max(1)) as f64
    }

    /// What the client, its library and the loopback took of a mean op: what Keeper's stages
    /// do not account for.
    fn outside_us(&self) -> f64 {
        self.op_mean_us()
            - pipeline()
                .map(|stage| mean_of(&self.stages, stage))
                .sum::<f64>()
    }

    fn json(&self) -> Json {
        let q = |h: &Histogram<u64>, q: f64| Json::num(h.value_at_quantile(q) as f64);
        let t = &self.times;
        Json::obj(vec![
            ("pairs", Json::num(t.pairs as f64)),
            ("pair_p50_us", q(&t.per_pair, 0.5)),
            ("pair_p99_us", q(&t.per_pair, 0.99)),
            ("op_p50_us", q(&t.per_op, 0.5)),
            ("op_p99_us", q(&t.per_op, 0.99)),
            ("op_mean_us", Json::num(self.op_mean_us())),
            ("log_syncs_per_op", Json::num(self.syncs_per_op())),
            ("log_handoffs_per_op", Json::num(self.handoffs_per_op())),
            ("client_and_loopback_us", Json::num(self.outside_us())),
            ("stages_mean_us_per_reply", stage_json(&self.stages, None)),
        ])
    }
}

/// One synchronous client with no library (ZooKeeper's wire protocol on a blocking socket, on
/// a thread of the blocking pool): create+delete pairs, each op answered before the next.
async fn bare_pairs(addr: SocketAddr, settings: &Settings) -> Result<Pairs, BoxError> {
    let mut wire = tokio::task::spawn_blocking(move || wire::warmed_up(addr, OP_LIMIT))
        .await
        .map_err(|e| format!("library-free client on {addr}: {e}"))??;
    let before = totals(addr).await?;
    let (pairs, limit) = (settings.pairs, settings.limit);
    let times = tokio::task::spawn_blocking(move || wire.pairs(pairs, limit))
        .await
        .map_err(|e| format!("library-free client on {addr}: {e}"))??;
    Ok(Pairs::of(times, delta(&before, &totals(addr).await?)))
}

/// The same library-free client on a tokio socket, in this task: what a tokio client's
/// wake-ups on each reply cost next to a blocking read, with no library between.
async fn task_pairs(addr: SocketAddr, settings: &Settings) -> Result<Pairs, BoxError> {
    let mut wire = wire::warmed_up_in_task(addr, OP_LIMIT).await?;
    let before = totals(addr).await?;
    let times = wire.pairs(settings.pairs, settings.limit).await?;
    Ok(Pairs::of(times, delta(&before, &totals(addr).await?)))
}

/// One synchronous client on `zookeeper-client` (the Rust ZooKeeper client most services use):
/// create+delete pairs, each op awaited before the next.
async fn library_pairs(addr: SocketAddr, settings: &Settings) -> Result<Pairs, BoxError> {
    let zk = within("connect", Client::connect(&addr.to_string())).await??;
    let persistent = CreateMode::Persistent.with_acls(Acls::anyone_all());
    timed_pairs(addr, settings, |path, create| {
        let op = if create {
            let created = zk.create(path, b"x", &persistent);
            Box::pin(async move { created.await.map(drop) }) as BoxFuture<'_, _>
        } else {
            Box::pin(zk.delete(path, None))
        };
        async move { Ok(op.await?) }
    })
    .await
}

/// The same pairs through `lockkeeper-zk-client`, the Tokio-native client.
async fn own_client_pairs(addr: SocketAddr, settings: &Settings) -> Result<Pairs, BoxError> {
    use lockkeeper_zk_client as own;
    let zk = within("connect", own::Client::connect(&addr.to_string())).await??;
    let persistent = own::CreateOptions::new(own::CreateMode::Persistent);
    timed_pairs(addr, settings, |path, create| {
        let op = if create {
            let created = zk.create(path, b"x", &persistent);
            Box::pin(async move { created.await.map(drop) }) as BoxFuture<'static, _>
        } else {
            Box::pin(zk.delete(path, None))
        };
        async move { Ok(op.await?) }
    })
    .await
}

/// [`own_client_pairs`] driven by `block_on` on a thread of its own, as the body of
/// `#[tokio::main]` is: not on a runtime worker, so each reply's wake-up crosses threads.
async fn own_client_off_worker(addr: SocketAddr, settings: &Settings) -> Result<Pairs, BoxError> {
    let runtime = tokio::runtime::Handle::current();
    let settings = settings.clone();
    tokio::task::spawn_blocking(move || runtime.block_on(own_client_pairs(addr, &settings)))
        .await
        .map_err(|e| format!("block_on client: {e}"))?
}

/// One session's uncontended `zk::Mutex` lock -> release cycles, timed as pairs: the
/// acquisition (create and listing, sent together) is the first op, the release (delete) the
/// second.
async fn mutex_cycles(addr: SocketAddr, settings: &Settings) -> Result<Pairs, BoxError> {
    let session = open(&addr.to_string(), settings.connect_limit).await?;
    let cycles = match session.mutex("/trace-mutex") {
        Ok(mutex) => {
            let held = std::sync::Mutex::new(None);
            timed_pairs(addr, settings, |_, lock| {
                let (mutex, held) = (&mutex, &held);
                async move {
                    if lock {
                        let Some(guard) = mutex.lock_timeout(OP_LIMIT).await? else {
                            return Err(
                                format!("no lock on {} within {OP_LIMIT:?}", mutex.path()).into()
                            );
                        };
                        *held.lock().map_err(|_| "poisoned")? = Some(guard);
                    } else {
                        let guard = held.lock().map_err(|_| "poisoned")?.take();
                        guard.ok_or("release without a lock")?.release().await?;
                    }
                    Ok(())
                }
            })
            .await
        }
        Err(e) => Err(e.into()),
    };
    session.close().await;
    Ok(Pairs {
        what: "lock -> release cycles (create and listing; delete)",
        ..cycles?
    })
}

type BoxFuture<'a, T> = std::pin::Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A warm-up, then create+delete pairs with `op(path, create)`, each op awaited before the
/// next; Keeper's stages over the timed pairs alone.
async fn timed_pairs<F, Fut>(
    addr: SocketAddr,
    settings: &Settings,
    op: F,
) -> Result<Pairs, BoxError>
where
    F: Fn(&'static str, bool) -> Fut,
    Fut: Future<Output = Result<(), BoxError>>,
{
    for _ in 0..50 {
        within("warm-up create", op("/trace-warm", true)).await??;
        within("warm-up delete", op("/trace-warm", false)).await??;
    }
    let before = totals(addr).await?;
    let mut times = PairTimes::new();
    let started = Instant::now();
    while times.count() < u64::from(settings.pairs) && started.elapsed() < settings.limit {
        let t0 = Instant::now();
        within("create", op("/trace-pair", true)).await??;
        let t1 = Instant::now();
        within("delete", op("/trace-pair", false)).await??;
        times.record(t0, t1, Instant::now());
    }
    Ok(Pairs::of(times, delta(&before, &totals(addr).await?)))
}

/// The synchronous clients' figures, and Keeper's stages of each, side by side.
fn print_pairs(runs: &[(&str, &Pairs)]) {
    for (name, p) in runs {
        let q = |h: &Histogram<u64>, q: f64| fmt_us(Duration::from_micros(h.value_at_quantile(q)));
        let t = &p.times;
        println!(
            "{name}, one synchronous client, {} {}: per pair p50 {} p99 {}; per op p50 {} p99 {} \
             mean {}; log syncs per op {:.2}, log thread hand-offs per op {:.2}",
            t.pairs,
            p.what,
            q(&t.per_pair, 0.5),
            q(&t.per_pair, 0.99),
            q(&t.per_op, 0.5),
            q(&t.per_op, 0.99),
            fmt_us(t.op_total / (2 * t.pairs.max(1)) as u32),
            p.syncs_per_op(),
            p.handoffs_per_op(),
        );
    }
    let mut header = format!("{:<18}", "mean µs per op");
    for (name, _) in runs {
        header.push_str(&format!(" {:>24} {:>7}", name, "share"));
    }
    println!("{header}");
    let row = |stage: &str, value: &dyn Fn(&Pairs) -> f64| {
        let mut line = format!("{stage:<18}");
        for (_, p) in runs {
            let v = value(p);
            let share = 100.0 * v / p.op_mean_us().max(f64::MIN_POSITIVE);
            line.push_str(&format!(" {v:>24.1} {share:>6.1}%"));
        }
        println!("{line}");
    };
    for stage in pipeline() {
        row(stage, &|p| mean_of(&p.stages, stage));
    }
    row("client + loopback", &|p| p.outside_us());
    row("client-observed", &|p| p.op_mean_us());
}

/// Several sessions looping lock -> release on one Mutex; stage time per handoff (printed in
/// full if `detail`, else in a line) and log syncs per handoff.
async fn handoff_run(
    addr: SocketAddr,
    settings: &Settings,
    detail: bool,
) -> Result<(Json, f64), BoxError> {
    let connect = addr.to_string();
    let clients = settings.clients;
    let sessions = open_many(&connect, clients, settings.connect_limit).await?;
    let before = totals(addr).await?;
    let start = Arc::new(Barrier::new(clients + 1));
    let mut tasks = Vec::with_capacity(clients);
    // Per session: as many cycles as the synchronous run had pairs, split among the sessions.
    let cycles = (settings.pairs as usize).div_ceil(clients).max(1);
    for session in &sessions {
        let mutex = session.mutex("/trace-lock")?;
        let start = Arc::clone(&start);
        let limit = settings.limit;
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            let deadline = Instant::now() + limit;
            let mut holds = Vec::with_capacity(cycles);
            while holds.len() < cycles && Instant::now() < deadline {
                let Some(guard) = mutex.lock_timeout(OP_LIMIT).await? else {
                    return Err::<Vec<Hold>, BoxError>(
                        format!("no lock on /trace-lock within {OP_LIMIT:?}").into(),
                    );
                };
                let granted = Instant::now();
                guard.release().await?;
                holds.push(Hold {
                    granted,
                    released: Instant::now(),
                });
            }
            Ok(holds)
        }));
    }
    start.wait().await;
    let started = Instant::now();
    let mut holds = Vec::new();
    let mut failure: Option<BoxError> = None;
    for task in tasks {
        match task.await {
            Ok(Ok(done)) => holds.extend(done),
            Ok(Err(e)) => failure = failure.or(Some(e)),
            Err(e) => failure = failure.or(Some(format!("contender task: {e}").into())),
        }
    }
    let elapsed = started.elapsed();
    let after = totals(addr).await;
    close_all(sessions).await;
    if let Some(e) = failure {
        return Err(e);
    }
    let stages = delta(&before, &after?);
    let handoffs = holds.len();
    let client = ClientSide::of(holds);
    let per_sec = handoffs as f64 / elapsed.as_secs_f64().max(1e-9);
    let handoff_us = 1e6 / per_sec.max(1e-9);
    let n = handoffs.max(1) as f64;
    let syncs = stages.get(SYNCS).map_or(0.0, |(count, _)| *count);
    let json = Json::obj(vec![
        ("clients", Json::num(clients as f64)),
        ("handoffs", Json::num(handoffs as f64)),
        ("handoffs_per_sec", Json::num(per_sec)),
        ("handoff_us", Json::num(handoff_us)),
        ("log_syncs_per_handoff", Json::num(syncs / n)),
        ("release_p50_us", Json::num(client.release_us)),
        (
            "release_answered_to_next_grant_p50_us",
            Json::num(client.next_grant_us),
        ),
        ("stages_us_per_handoff", stage_json(&stages, Some(n))),
        ("stages_mean_us_per_reply", stage_json(&stages, None)),
    ]);
    if detail {
        println!(
            "(e) contended handoff, {clients} sessions on one Mutex: {handoffs} handoffs in {}, \
             {per_sec:.0}/s ({handoff_us:.1} µs each), {:.2} log syncs per handoff",
            fmt_duration(elapsed),
            syncs / n
        );
        println!(
            "client side, p50: the holder's release answered after {:.1} µs; the next holder \
             granted {:.1} µs after that",
            client.release_us, client.next_grant_us
        );
        // Replies released by one sync share it: the sums per handoff overlap in time.
        println!(
            "{:<18} {:>13} {:>15} {:>15}",
            "stage", "mean µs/trace", "traced/handoff", "sum µs/handoff"
        );
        for stage in all_stages() {
            let (count, sum) = stages.get(stage).copied().unwrap_or_default();
            println!(
                "{stage:<18} {:>13.1} {:>15.2} {:>15.1}",
                mean_of(&stages, stage),
                count / n,
                sum / n,
            );
        }
    } else {
        println!(
            "(e) again: {handoffs} handoffs in {}, {:.2} log syncs per handoff",
            fmt_duration(elapsed),
            syncs / n
        );
    }
    Ok((json, syncs / n))
}

/// One turn of a contender: when its `lock()` returned and when its `release()` did.
struct Hold {
    granted: Instant,
    released: Instant,
}

/// A handoff as the clients see it: the holder's release round trip (the delete and its
/// sync), then the wait from its answer to the next holder's grant (the notification and
/// what the waiter does before its `lock()` returns).
struct ClientSide {
    release_us: f64,
    next_grant_us: f64,
}

impl ClientSide {
    fn of(mut holds: Vec<Hold>) -> ClientSide {
        holds.sort_by_key(|hold| hold.granted);
        let p50 = |mut micros: Vec<f64>| {
            micros.sort_by(f64::total_cmp);
            micros.get(micros.len() / 2).copied().unwrap_or(0.0)
        };
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        ClientSide {
            release_us: p50(holds.iter().map(|h| us(h.released - h.granted)).collect()),
            next_grant_us: p50(holds
                .windows(2)
                .map(|w| us(w[1].granted.saturating_duration_since(w[0].released)))
                .collect()),
        }
    }
}

/// Each stage's mean per traced reply, or (with `per`) its sum divided by `per`.
fn stage_json(stages: &Totals, per: Option<f64>) -> Json {
    Json::obj(
        all_stages()
            .map(|stage| {
                let value = match per {
                    Some(n) => stages.get(stage).map_or(0.0, |(_, sum)| sum / n),
                    None => mean_of(stages, stage),
                };
                (stage, Json::num(value))
            })
            .collect(),
    )
}

fn mean_of(stages: &Totals, stage: &str) -> f64 {
    match stages.get(stage) {
        Some(&(count, sum)) if count > 0.0 => sum / count,
        _ => 0.0,
    }
}

/// Keeper's `mntr`.
async fn mntr(addr: SocketAddr) -> Result<String, BoxError> {
    let text = tokio::task::spawn_blocking(move || {
        lockkeeper_testkit::try_four_letter_word(addr, "mntr", OP_LIMIT)
    })
    .await
    .map_err(|e| format!("mntr: {e}"))?
    .map_err(|e| format!("mntr from {addr}: {e}"))?;
    Ok(text)
}

/// Keeper's stage totals from `mntr`.
async fn totals(addr: SocketAddr) -> Result<Totals, BoxError> {
    parse_totals(&mntr(addr).await?).map_err(|e| format!("mntr from {addr}: {e}").into())
}

/// The p50 of Keeper's own recent fdatasyncs, µs: `mntr`'s `lk_log_sync_p50_us`, over the
/// syncs of the last one to two minutes.
async fn keeper_sync_p50(addr: SocketAddr) -> Result<f64, BoxError> {
    parse_sync_p50(&mntr(addr).await?).map_err(|e| format!("mntr from {addr}: {e}").into())
}

fn parse_sync_p50(mntr: &str) -> Result<f64, String> {
    const KEY: &str = "lk_log_sync_p50_us\t";
    let value = mntr
        .lines()
        .find_map(|line| line.strip_prefix(KEY))
        .ok_or("no lk_log_sync_p50_us: this Keeper has not synced recently, or does not say")?;
    value
        .trim()
        .parse()
        .map_err(|e| format!("lk_log_sync_p50_us\t{value}: {e}"))
}

/// The stage counts and sums (and the log's syncs) among `mntr`'s lines; ZooKeeper's own keys
/// are skipped.
fn parse_totals(mntr: &str) -> Result<Totals, String> {
    let mut totals = Totals::new();
    for line in mntr.lines() {
        let Some((key, value)) = line.split_once('\t') else {
            continue;
        };
        if !key.starts_with("lk_") {
            continue;
        }
        let number = || -> Result<f64, String> {
            value
                .trim()
                .parse()
                .map_err(|e| format!("{key}\t{value}: {e}"))
        };
        if key == "lk_log_syncs" {
            totals.insert(SYNCS.to_string(), (number()?, 0.0));
        } else if key == "lk_log_handoffs" {
            totals.insert(HANDOFFS.to_string(), (number()?, 0.0));
        } else if let Some(rest) = key.strip_prefix("lk_write_stage_") {
            if let Some(stage) = rest.strip_suffix("_count") {
                totals.entry(stage.to_string()).or_default().0 = number()?;
            } else if let Some(stage) = rest.strip_suffix("_us_sum") {
                totals.entry(stage.to_string()).or_default().1 = number()?;
            }
        }
    }
    if !pipeline().all(|stage| totals.contains_key(stage)) {
        return Err("no lk_write_stage_ keys: this Keeper does not trace its write path".into());
    }
    Ok(totals)
}

fn delta(before: &Totals, after: &Totals) -> Totals {
    after
        .iter()
        .map(|(stage, &(count, sum))| {
            let (c0, s0) = before.get(stage).copied().unwrap_or_default();
            (stage.clone(), (count - c0, sum - s0))
        })
        .collect()
}

async fn within<T>(what: &str, fut: impl Future<Output = T>) -> Result<T, BoxError> {
    tokio::time::timeout(OP_LIMIT, fut)
        .await
        .map_err(|_| format!("{what} did not complete within {OP_LIMIT:?}").into())
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn fmt_us(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1e3)
}

/// The durable pair's p50 through each client.
pub(crate) fn p50_line(library_p50: Duration, own_p50: Duration, bare_p50: Duration) -> String {
    format!(
        "durable create+delete p50: {} through zookeeper-client, {} through \
         lockkeeper-zk-client, {} with no client library",
        fmt_us(library_p50),
        fmt_us(own_p50),
        fmt_us(bare_p50),
    )
}

/// The library-free pairs on the Keeper that never syncs.
fn unsynced_line(unsynced: &Pairs) -> String {
    format!(
        "(c) again, on a Keeper that never syncs: {} {}, per pair p50 {}: what a pair costs \
         besides its syncs",
        unsynced.times.pairs,
        unsynced.what,
        fmt_us(unsynced.p50()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deltas_and_means_come_from_mntr_counts_and_sums() {
        let before: Totals = [("write".to_string(), (10.0, 100.0))].into();
        let after: Totals = [
            ("write".to_string(), (30.0, 500.0)),
            ("reaction".to_string(), (0.0, 0.0)),
        ]
        .into();
        let mut mntr = String::from(
            "zk_version\t3.8.0-lockkeeper\nzk_avg_latency\t0.1\nlk_log_syncs\t7\nlk_log_handoffs\t3\n",
        );
        for stage in pipeline() {
            mntr.push_str(&format!(
                "lk_write_stage_{stage}_count\t2\nlk_write_stage_{stage}_us_sum\t5.5\nlk_write_stage_{stage}_us_max\t3.0\n"
            ));
        }
        let parsed = parse_totals(&mntr).expect("parse");
        assert_eq!(parsed["queue"], (2.0, 5.5));
        assert_eq!(parsed[SYNCS].0, 7.0);
        assert_eq!(parsed[HANDOFFS].0, 3.0);
        assert!(parse_totals("zk_version\t3.8.0\n").is_err(), "no stages");
        assert!(
            parse_totals("lk_log_syncs\tmany\n").is_err(),
            "not a number"
        );
        assert_eq!(
            parse_sync_p50("lk_log_syncs\t7\nlk_log_sync_p50_us\t142\n"),
            Ok(142.0)
        );
        let none = parse_sync_p50("lk_log_syncs\t0\n").expect_err("no p50");
        assert!(none.contains("lk_log_sync_p50_us"), "{none}");
        let garbled = parse_sync_p50("lk_log_sync_p50_us\tmany\n").expect_err("not a number");
        assert!(garbled.contains("many"), "{garbled}");
        let d = delta(&before, &after);
        assert_eq!(d["write"], (20.0, 400.0));
        assert_eq!(mean_of(&d, "write"), 20.0);
        assert_eq!(mean_of(&d, "reaction"), 0.0, "no division by zero");
        assert_eq!(
            p50_line(
                Duration::from_micros(480),
                Duration::from_micros(420),
                Duration::from_micros(400),
            ),
            "durable create+delete p50: 0.480 ms through zookeeper-client, 0.420 ms through \
             lockkeeper-zk-client, 0.400 ms with no client library"
        );
    }

    /// The whole mode in a tiny configuration, on an in-process Keeper that syncs every write:
    /// every synchronous client (and the uncontended Mutex) ran every pair, each synced once
    /// per op, Keeper traced their writes, the pairs on a second Keeper synced nothing, and the
    /// handoff run took its figures. Speed is not asserted.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn measures_both_clients_and_the_handoff_in_a_tiny_run() {
        let dir = tempfile::tempdir().expect("tempdir");
        let keeper = lockkeeper_testkit::Keeper::start_with(lockkeeper_server::Config {
            sync: lockkeeper_server::SyncMode::Always,
            // The Mutex's directory is a container, empty between cycles: a reap inside the
            // timed run would add its own synced writes to the count asserted below.
            container_check_interval: Duration::from_secs(3600),
            ..lockkeeper_testkit::Keeper::test_config(dir.path())
        });
        let settings = Settings {
            launcher: super::super::tests::launcher(),
            pairs: 20,
            clients: 3,
            trials: 2,
            limit: Duration::from_secs(30),
            connect_limit: Duration::from_secs(30),
        };
        // The test kit's own configuration never syncs.
        let unsynced = lockkeeper_testkit::Keeper::start();
        use lockkeeper_testkit::TestServer;
        let json = measure(keeper.addr(), keeper.data_dir(), unsynced.addr(), &settings)
            .await
            .expect("measured");
        let (field, number) = (super::super::tests::field, super::super::tests::number);
        assert!(number(&json, "fdatasync_p50_us") > 0.0, "{}", json.render());
        for key in [
            "durable_pairs",
            "durable_pairs_lockkeeper_zk_client",
            "durable_pairs_no_library",
            "durable_pairs_no_library_tokio",
            "uncontended_mutex_cycles",
            "durable_pairs_lockkeeper_zk_client_block_on",
        ] {
            let pairs = field(&json, key);
            assert_eq!(number(pairs, "pairs"), 20.0, "{key}: {}", pairs.render());
            assert!(
                number(pairs, "pair_p50_us") > 0.0,
                "{key}: {}",
                pairs.render()
            );
            // Twenty creates and twenty deletes, each synced before its reply: a sync per op
            // (groups of one, as nothing else writes), whichever client sent them; the Mutex's
            // listing rides with its create and syncs nothing.
            assert!(
                (number(pairs, "log_syncs_per_op") - 1.0).abs() < 0.05,
                "{key}: {}",
                pairs.render()
            );
            let stages = field(pairs, "stages_mean_us_per_reply");
            assert!(
                number(stages, "fdatasync") > 0.0,
                "{key}: {}",
                pairs.render()
            );
        }
        let unsynced = field(&json, "unsynced_pairs_no_library");
        assert_eq!(number(unsynced, "pairs"), 20.0, "{}", unsynced.render());
        assert_eq!(
            number(unsynced, "log_syncs_per_op"),
            0.0,
            "the unsynced Keeper synced: {}",
            unsynced.render()
        );
        let handoff = field(&json, "contended_handoff");
        assert_eq!(number(handoff, "handoffs"), 21.0, "{}", handoff.render());
        assert!(number(handoff, "handoffs_per_sec") > 0.0);
        // Two trials of each run behind the targets, and every target judged.
        let trials = field(&json, "trials");
        for key in [
            "durable_pair_p50_us",
            "tokio_pair_p50_us",
            "zk_client_pair_p50_us",
            "lock_requests_p50_us",
            "unsynced_pair_p50_us",
            "uncontended_cycle_p50_us",
            "log_syncs_per_uncontended_cycle",
            "log_syncs_per_contended_handoff",
        ] {
            assert_eq!(
                number(field(trials, key), "trials"),
                2.0,
                "{key}: {}",
                trials.render()
            );
        }
        assert_eq!(
            number(field(trials, "log_syncs_per_uncontended_cycle"), "median"),
            2.0,
            "{}",
            trials.render()
        );
        let targets = trials.render();
        assert_eq!(targets.matches("\"met\"").count(), 4, "{targets}");
        assert!(!targets.contains("\"met\": \"unknown\""), "{targets}");
    }

    #[test]
    fn trace_flags_parse_and_exclude_the_other_modes() {
        let parse = super::super::tests::parse;
        let args = parse(&["--trace"]).expect("parse");
        assert!(args.trace.trace);
        assert_eq!(
            (
                args.trace.trace_pairs,
                args.trace.trace_clients,
                args.trace.trace_trials
            ),
            (2000, 8, 5)
        );
        assert!(parse(&["--trace", "--compare"]).is_err());
        assert!(parse(&["--trace", "--locks"]).is_err());
        assert!(parse(&["--trace", "--trace-clients", "1"]).is_err());
        assert!(parse(&["--trace", "--trace-pairs", "0"]).is_err());
        assert!(parse(&["--trace", "--trace-trials", "0"]).is_err());
    }
}
