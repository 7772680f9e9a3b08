//! `lockkeeper bench`: a load generator over the ZooKeeper client protocol.
//!
//! It runs the same workloads against any ZooKeeper-protocol server (pipelined create+delete of
//! ephemeral-sequential znodes, getData reads) and prints throughput and latency quantiles. With
//! `--compare` it starts Keeper and Apache ZooKeeper itself and prints every figure side by side
//! as a ratio, which is how the numbers in the README are produced.
//!
//! `--locks` measures lockkeeper's ZooKeeper Mutex against Apache Curator's InterProcessMutex,
//! each on Keeper and on Apache ZooKeeper (see [`locks`]); `--recipes` measures lockkeeper's
//! leader latch and atomic long against Curator's LeaderLatch and DistributedAtomicLong the same
//! way, with election failover after SIGKILL of the leader's process (see [`recipes`]).
//!
//! `--recovery N` measures how long Keeper (and, with `--recovery-peer`, ZooKeeper) takes to come
//! back after SIGKILL with N znodes in a snapshot and a log tail, and checks that every znode
//! did; `--snapshot-latency N` measures request latency while a snapshot of N znodes is written.
//!
//! Everything is bounded: each run by time and by a request budget, each wait for a server by a
//! timeout. Servers the benchmark starts are killed on every way out (normal end, error, Ctrl-C,
//! SIGTERM, panic, and even SIGKILL of the benchmark, via the parent-death signal).

mod compare;
mod datadir;
mod driver;
mod jvm;
mod locks;
mod paced;
mod process;
mod recipes;
mod recovery;
mod redis;
mod snapshot;
mod startup;
mod stats;
mod versus;
mod workload;

use std::path::PathBuf;
use std::time::Duration;

use process::{KeeperFlags, Launcher, ServerKind};
use stats::Json;
use workload::{Namespace, Plan, Workload};

/// Error type of the benchmark: messages are written for the person at the terminal.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Load-test a ZooKeeper-protocol server, or compare Keeper with Apache ZooKeeper.
///
/// Without --compare, runs the workloads against an already running server at --connect. With
/// --compare, starts Keeper (`lockkeeper serve`) and Apache ZooKeeper one after the other on free
/// 127.0.0.1 ports, measures start-up time, throughput, latency and memory on each, and prints
/// every figure with the ratio Keeper/ZooKeeper.
#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:\n  \
    lockkeeper bench --connect 127.0.0.1:2181\n  \
    lockkeeper bench --connect 127.0.0.1:2181 --workload get --sessions 1,4,16 --duration 10s\n  \
    lockkeeper bench --compare --json bench.json\n  \
    lockkeeper bench --compare --only zookeeper\n  \
    lockkeeper bench --locks --json locks.json\n  \
    lockkeeper bench --recipes --json recipes.json\n  \
    lockkeeper bench --recovery 1000000 --recovery-peer\n  \
    lockkeeper bench --snapshot-latency 1000000 --rate 5000\n  \
    lockkeeper bench --redis --json redis.json")]
pub struct BenchArgs {
    /// Server to load, as host:port (any ZooKeeper-protocol server) [default: 127.0.0.1:2181].
    /// Everything is created under /lockkeeper-bench-<pid>-<random> and removed at the end
    /// (not after Ctrl-C). Not used with --compare.
    #[arg(long, value_name = "HOST:PORT", conflicts_with = "compare")]
    pub connect: Option<String>,

    /// Start Keeper and Apache ZooKeeper as child processes and compare them side by side.
    #[arg(long)]
    pub compare: bool,

    /// With --compare, measure only this server.
    #[arg(long, value_enum, requires = "compare")]
    pub only: Option<ServerKind>,

    /// How long each measured run lasts (e.g. 500ms, 5s, 1m).
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub duration: Duration,

    /// Unmeasured warm-up before each run, so JIT compilers and caches are hot.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub warmup: Duration,

    /// Session counts to run each workload with, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,8",
          value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub sessions: Vec<u16>,

    /// Requests in flight per session.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u16).range(1..=4096))]
    pub pipeline: u16,

    /// Workloads to run, comma-separated.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "create-delete,get"
    )]
    pub workload: Vec<Workload>,

    /// Upper bound on requests in one run, whatever --duration says (a create+delete is two).
    #[arg(long, default_value_t = 5_000_000)]
    pub max_ops: u64,

    /// Data size in bytes of the znodes that are created and read.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(0..=1_000_000))]
    pub data_size: u32,

    /// Persistent znodes to create before the memory (RSS) figure; 0 skips it.
    #[arg(long, default_value_t = 100_000)]
    pub rss_znodes: u64,

    /// Without --compare: PID of the server at --connect (on this machine), to report its CPU
    /// time per request and its memory with --rss-znodes znodes (deleted again afterwards).
    #[arg(long, value_name = "PID", conflicts_with = "compare")]
    pub server_pid: Option<u32>,

    /// With --compare: fresh starts per server for the start-up figure (the median is reported).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..=100))]
    pub startup_trials: u16,

    /// Bound on opening a session, and on a started server accepting its first one.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub connect_timeout: Duration,

    /// Also write the results as JSON to this file.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,

    /// With --compare: binary whose `serve` subcommand runs Keeper [default: this executable].
    #[arg(long, value_name = "PATH")]
    pub keeper_bin: Option<PathBuf>,

    /// With --compare: Java class path holding ZooKeeperServerMain and its dependencies.
    #[arg(
        long,
        value_name = "CLASSPATH",
        default_value = "/usr/share/java/zookeeper.jar"
    )]
    pub zookeeper_classpath: String,

    /// With --compare: extra JVM option for ZooKeeper, repeatable (e.g. --zookeeper-jvm-opt=-Xmx1g).
    #[arg(
        long = "zookeeper-jvm-opt",
        value_name = "OPT",
        allow_hyphen_values = true
    )]
    pub zookeeper_jvm_opts: Vec<String>,

    /// With --compare: ZooKeeper's forceSync (fsync its log before replying), yes or no.
    #[arg(long, value_name = "yes|no", default_value = "yes", action = clap::ArgAction::Set,
          value_parser = clap::builder::BoolishValueParser::new())]
    pub zookeeper_force_sync: bool,

    /// With --compare: the java executable.
    #[arg(long, value_name = "PATH", default_value = "java")]
    pub java: PathBuf,

    /// Do not draw progress bars (they are drawn on stderr, and only on a terminal).
    #[arg(long)]
    pub no_progress: bool,

    /// Crash-recovery benchmark: start Keeper (`--sync always`, a snapshot every 3/4 of N txns),
    /// create N znodes, wait for the snapshot, SIGKILL it, restart it on the same data dir, and
    /// report the time to the first session and any znode that did not come back.
    #[arg(long, value_name = "N", conflicts_with_all = ["compare", "connect"],
          value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    pub recovery: Option<u64>,

    /// With --recovery: also measure Apache ZooKeeper (forceSync as --zookeeper-force-sync, the
    /// same snapCount), for a ratio.
    #[arg(long, requires = "recovery")]
    pub recovery_peer: bool,

    /// Snapshot benchmark: start Keeper with N znodes, run a paced getData/setData mix, and
    /// compare p99 latency while Keeper writes a snapshot with p99 just before (--warmup, then
    /// --duration of baseline; sessions: the largest of --sessions, at most 8).
    #[arg(long, value_name = "N", conflicts_with_all = ["compare", "connect"],
          value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    pub snapshot_latency: Option<u64>,

    /// With --snapshot-latency: requests per second of the mix, over all sessions.
    #[arg(long, default_value_t = 5000.0, value_parser = parse_rate)]
    pub rate: f64,

    /// With --recovery or --snapshot-latency: bound on creating the N znodes.
    #[arg(long, default_value = "10m", value_parser = parse_duration)]
    pub populate_limit: Duration,

    /// With --recovery or --snapshot-latency: bound on waiting for a snapshot (past when it is
    /// due) and on writing it.
    #[arg(long, default_value = "2m", value_parser = parse_duration)]
    pub snapshot_limit: Duration,

    /// Boxed: the lock flags are only read once, and the other commands' arguments stay small.
    #[command(flatten)]
    pub locks: Box<locks::LockArgs>,
    /// The `--redis` mode's flags (boxed for the same reason).
    #[command(flatten)]
    pub redis_args: Box<redis::RedisArgs>,
    /// The `--recipes` mode's flags (boxed for the same reason).
    #[command(flatten)]
    pub recipes: Box<recipes::RecipeArgs>,
}

/// Runs the benchmark described by `args` until it completes, fails, or is interrupted.
pub async fn run(args: BenchArgs) -> Result<(), BoxError> {
    tokio::select! {
        result = run_to_end(args) => result,
        signal = interrupted() => {
            // Dropping `run_to_end` has already killed any server it started.
            Err(format!("interrupted by {signal}").into())
        }
    }
}

async fn run_to_end(args: BenchArgs) -> Result<(), BoxError> {
    let plan = Plan {
        connect: args
            .connect
            .clone()
            .unwrap_or_else(|| "127.0.0.1:2181".to_string()),
        duration: args.duration,
        warmup: args.warmup,
        pipeline: usize::from(args.pipeline),
        max_requests: args.max_ops,
        data_size: args.data_size as usize,
        connect_timeout: args.connect_timeout,
        progress: !args.no_progress,
        server_pid: args.server_pid,
    };
    let sessions: Vec<usize> = args.sessions.iter().map(|&s| usize::from(s)).collect();
    let result = if let Some(spec) = &args.recipes.election_participant {
        recipes::participate(
            spec,
            args.recipes.recipe_session_timeout,
            args.connect_timeout,
        )
        .await
    } else if args.recipes.recipes {
        let settings = recipes::Settings::from_args(
            &args.recipes,
            launcher(&args)?,
            &args.locks.curator_classpath,
            args.duration,
            args.warmup,
            args.connect_timeout,
        );
        recipes::run(&settings).await
    } else if args.locks.locks {
        let settings = locks::Settings::from_args(
            &args.locks,
            launcher(&args)?,
            args.duration,
            args.warmup,
            args.connect_timeout,
        );
        locks::run(&settings).await
    } else if args.redis_args.redis {
        redis::run(&args.redis_args.settings(&args)).await
    } else if args.recovery.is_some() || args.snapshot_latency.is_some() {
        durability(&args, plan, launcher(&args)?).await
    } else if args.compare {
        let launcher = launcher(&args)?;
        let settings = compare::Settings {
            plan,
            workloads: args.workload.clone(),
            sessions,
            servers: match args.only {
                Some(kind) => vec![kind],
                None => vec![ServerKind::Keeper, ServerKind::Zookeeper],
            },
            launcher,
            startup_trials: usize::from(args.startup_trials),
            startup_limit: args.connect_timeout,
            rss_znodes: args.rss_znodes,
            populate_limit: Duration::from_secs(180),
        };
        compare::compare(&settings).await
    } else {
        against_server(
            &plan,
            &args.workload,
            &sessions,
            args.rss_znodes,
            args.server_pid,
        )
        .await
    };
    match result {
        Ok(json) => write_json(args.json.as_ref(), &json),
        Err(e) => {
            if let Some(partial) = e.downcast_ref::<compare::Partial>() {
                write_json(args.json.as_ref(), &partial.0)?;
            }
            Err(e)
        }
    }
}

/// How to start the servers, from the flags; asks the Keeper binary which flags it has.
fn launcher(args: &BenchArgs) -> Result<Launcher, BoxError> {
    let keeper_bin = match &args.keeper_bin {
        Some(path) => path.clone(),
        None => std::env::current_exe()
            .map_err(|e| format!("cannot locate the lockkeeper binary: {e}"))?,
    };
    let keeper_flags = KeeperFlags::probe(&keeper_bin);
    Ok(Launcher {
        keeper_bin,
        java: args.java.clone(),
        zookeeper_classpath: args.zookeeper_classpath.clone(),
        zookeeper_jvm_opts: args.zookeeper_jvm_opts.clone(),
        zookeeper_force_sync: args.zookeeper_force_sync,
        keeper_flags,
    })
}

/// `--recovery` and/or `--snapshot-latency`, one after the other; the JSON has a section for each
/// that ran. A failure of the first does not skip the second.
async fn durability(args: &BenchArgs, plan: Plan, launcher: Launcher) -> Result<Json, BoxError> {
    let mut sections = Vec::new();
    let mut failures = Vec::new();
    let mut keep = |name: &'static str, result: Result<Json, BoxError>| match result {
        Ok(json) => sections.push((name, json)),
        Err(e) => {
            if let Some(partial) = e.downcast_ref::<compare::Partial>() {
                sections.push((name, partial.0.clone()));
            }
            failures.push(format!("{name}: {e}"));
        }
    };
    if let Some(znodes) = args.recovery {
        let settings = recovery::Settings {
            znodes,
            plan: plan.clone(),
            launcher: launcher.clone(),
            peer: args.recovery_peer,
            populate_limit: args.populate_limit,
            startup_limit: args.connect_timeout,
            snapshot_limit: args.snapshot_limit,
        };
        keep("recovery", recovery::run(&settings).await);
    }
    if let Some(znodes) = args.snapshot_latency {
        if args.recovery.is_some() {
            println!();
        }
        let settings = snapshot::Settings {
            znodes,
            plan: plan.clone(),
            launcher,
            sessions: args
                .sessions
                .iter()
                .copied()
                .max()
                .map_or(4, |s| usize::from(s).min(8)),
            rate: args.rate,
            warmup: args.warmup,
            window: args.duration,
            populate_limit: args.populate_limit,
            startup_limit: args.connect_timeout,
            snapshot_limit: args.snapshot_limit,
        };
        keep("snapshot_latency", snapshot::run(&settings).await);
    }
    let mut fields = vec![(
        "command",
        Json::Str(std::env::args().collect::<Vec<_>>().join(" ")),
    )];
    fields.extend(sections);
    let json = Json::obj(fields);
    if failures.is_empty() {
        Ok(json)
    } else {
        Err(Box::new(compare::Partial(json, failures.join("; "))))
    }
}

fn write_json(path: Option<&PathBuf>, json: &Json) -> Result<(), BoxError> {
    if let Some(path) = path {
        std::fs::write(path, json.render())
            .map_err(|e| format!("writing {}: {e}", path.display()))?;
        eprintln!("results written to {}", path.display());
    }
    Ok(())
}

/// Runs the workloads against a server the benchmark does not own, removing its znodes after.
async fn against_server(
    plan: &Plan,
    workloads: &[Workload],
    sessions: &[usize],
    rss_znodes: u64,
    server_pid: Option<u32>,
) -> Result<Json, BoxError> {
    println!(
        "lockkeeper bench against {}: {:?} per run after {:?} warm-up, {} requests in flight per session",
        plan.connect, plan.duration, plan.warmup, plan.pipeline
    );
    let mut namespace = Namespace::create(plan).await?;
    println!("{}", stats::run_header());
    let mut runs = Vec::new();
    let mut outcome: Result<(), BoxError> = Ok(());
    'all: for &workload in workloads {
        for &n in sessions {
            match namespace.run(workload, n, plan, "").await {
                Ok(s) => {
                    println!("{}", stats::run_row(&s));
                    runs.push(stats::run_json(&s));
                }
                Err(e) => {
                    outcome = Err(format!("{} x{n}: {e}", workload.name()).into());
                    break 'all;
                }
            }
        }
    }
    let mut memory = Json::Null;
    if let (Ok(()), Some(pid), true) = (&outcome, server_pid, rss_znodes > 0) {
        let before = process::rss_kib(pid)?;
        match namespace
            .populate(rss_znodes, 4, Duration::from_secs(180), plan, "")
            .await
        {
            Ok(_) => {
                tokio::time::sleep(Duration::from_millis(500)).await;
                let after = process::rss_kib(pid)?;
                println!(
                    "RSS of PID {pid}: {} before, {} with {rss_znodes} more znodes of {} bytes",
                    stats::fmt_kib(before),
                    stats::fmt_kib(after),
                    plan.data_size
                );
                memory = Json::obj(vec![
                    ("rss_before_kib", Json::Num(before as f64)),
                    ("rss_loaded_kib", Json::Num(after as f64)),
                    ("znodes", Json::Num(rss_znodes as f64)),
                ]);
            }
            Err(e) => outcome = Err(e),
        }
    }
    // Leave the server as we found it, even after a failed run; a failure here only warns.
    if let Err(e) = namespace.remove(plan).await {
        eprintln!("warning: could not remove the benchmark's znodes: {e}");
    }
    outcome?;
    Ok(Json::obj(vec![
        ("connect", Json::Str(plan.connect.clone())),
        ("duration_s", Json::num(plan.duration.as_secs_f64())),
        ("pipeline", Json::num(plan.pipeline as u32)),
        ("runs", Json::Arr(runs)),
        ("memory", memory),
    ]))
}

/// Resolves on Ctrl-C, SIGTERM or SIGHUP with the signal's name.
async fn interrupted() -> &'static str {
    async fn ctrl_c() {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await
        }
    }
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        async fn wait(kind: SignalKind) {
            match signal(kind) {
                Ok(mut s) => {
                    s.recv().await;
                }
                Err(_) => std::future::pending::<()>().await,
            }
        }
        tokio::select! {
            _ = ctrl_c() => "Ctrl-C",
            _ = wait(SignalKind::terminate()) => "SIGTERM",
            _ = wait(SignalKind::hangup()) => "SIGHUP",
        }
    }
    #[cfg(not(unix))]
    {
        ctrl_c().await;
        "Ctrl-C"
    }
}

/// A positive, finite request rate.
fn parse_rate(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(r) if r.is_finite() && r > 0.0 && r <= 10_000_000.0 => Ok(r),
        _ => Err(format!(
            "`{text}` is not a rate (requests per second, e.g. 5000)"
        )),
    }
}

/// Parses `250ms`, `5s`, `1.5s`, `2m`, `1h`; a bare number is seconds.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| c.is_ascii_alphabetic())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number
        .trim()
        .parse()
        .map_err(|_| format!("`{text}` is not a duration (try 500ms, 5s or 2m)"))?;
    let seconds = match unit {
        "" | "s" => value,
        "ms" => value / 1e3,
        "us" => value / 1e6,
        "m" | "min" => value * 60.0,
        "h" => value * 3600.0,
        _ => {
            return Err(format!(
                "unknown unit `{unit}` in `{text}` (use ms, s, m or h)"
            ));
        }
    };
    Duration::try_from_secs_f64(seconds).map_err(|_| format!("`{text}` is not a valid duration"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(clap::Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        bench: BenchArgs,
    }

    /// `bench <args>` parsed as the command line would be.
    pub(super) fn parse(args: &[&str]) -> Result<BenchArgs, clap::Error> {
        Cli::try_parse_from(std::iter::once("bench").chain(args.iter().copied())).map(|c| c.bench)
    }

    /// A launcher for tests that start Apache ZooKeeper from Debian's jar and never Keeper.
    pub(super) fn launcher() -> Launcher {
        Launcher {
            keeper_bin: "unused".into(),
            java: "java".into(),
            zookeeper_classpath: "/usr/share/java/zookeeper.jar".to_string(),
            zookeeper_jvm_opts: Vec::new(),
            zookeeper_force_sync: true,
            keeper_flags: Default::default(),
        }
    }

    #[test]
    fn durations_parse_in_common_units() {
        assert_eq!(parse_duration("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("3"), Ok(Duration::from_secs(3)));
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("-1s").is_err());
        assert!(parse_duration("s").is_err());
    }

    #[test]
    fn defaults_match_the_documented_ones() {
        let args = parse(&[]).expect("defaults parse");
        assert!(!args.compare);
        assert_eq!(args.connect, None);
        assert_eq!(args.sessions, vec![1, 8]);
        assert_eq!(args.pipeline, 64);
        assert_eq!(args.workload, vec![Workload::CreateDelete, Workload::Get]);
        assert_eq!(args.duration, Duration::from_secs(5));
        assert_eq!(args.warmup, Duration::from_secs(2));
        assert_eq!(args.rss_znodes, 100_000);
        assert_eq!(args.data_size, 16);
        assert!(args.zookeeper_force_sync);
    }

    #[test]
    fn lists_and_enums_parse() {
        let args = parse(&[
            "--connect",
            "127.0.0.1:2281",
            "--sessions",
            "1,4,16",
            "--workload",
            "get",
            "--duration",
            "500ms",
        ])
        .expect("parse");
        assert_eq!(args.connect.as_deref(), Some("127.0.0.1:2281"));
        assert_eq!(args.sessions, vec![1, 4, 16]);
        assert_eq!(args.workload, vec![Workload::Get]);
        assert_eq!(args.duration, Duration::from_millis(500));
        let args = parse(&[
            "--compare",
            "--only",
            "zookeeper",
            "--zookeeper-jvm-opt",
            "-Xmx1g",
        ])
        .expect("parse");
        assert_eq!(args.only, Some(ServerKind::Zookeeper));
        assert_eq!(args.zookeeper_jvm_opts, vec!["-Xmx1g".to_string()]);
        let args = parse(&["--compare", "--zookeeper-force-sync", "no"]).expect("parse");
        assert!(!args.zookeeper_force_sync);
    }

    #[test]
    fn contradictory_or_out_of_range_flags_are_refused() {
        assert!(
            parse(&["--only", "keeper"]).is_err(),
            "--only needs --compare"
        );
        assert!(parse(&["--compare", "--connect", "127.0.0.1:1"]).is_err());
        assert!(parse(&["--sessions", "0"]).is_err());
        assert!(parse(&["--pipeline", "0"]).is_err());
        assert!(parse(&["--workload", "set"]).is_err());
        assert!(parse(&["--duration", "soon"]).is_err());
    }

    #[test]
    fn durability_flags_parse_and_exclude_the_other_modes() {
        let args = parse(&["--recovery", "1000000", "--recovery-peer"]).expect("parse");
        assert_eq!(args.recovery, Some(1_000_000));
        assert!(args.recovery_peer);
        assert_eq!(args.snapshot_latency, None);
        assert_eq!(args.populate_limit, Duration::from_secs(600));
        let args = parse(&["--snapshot-latency", "500000", "--rate", "2500"]).expect("parse");
        assert_eq!(args.snapshot_latency, Some(500_000));
        assert_eq!(args.rate, 2500.0);
        assert_eq!(parse(&[]).expect("defaults").rate, 5000.0);
        assert!(parse(&["--recovery-peer"]).is_err(), "needs --recovery");
        assert!(parse(&["--recovery", "10", "--compare"]).is_err());
        assert!(parse(&["--snapshot-latency", "10", "--connect", "127.0.0.1:1"]).is_err());
        assert!(parse(&["--recovery", "0"]).is_err());
        assert!(parse(&["--snapshot-latency", "10", "--rate", "0"]).is_err());
        assert!(parse(&["--snapshot-latency", "10", "--rate", "fast"]).is_err());
        // Both in one run is allowed: one JSON document with a section for each.
        assert!(parse(&["--recovery", "10", "--snapshot-latency", "10"]).is_ok());
    }

    #[test]
    fn redis_flags_parse_and_exclude_the_other_modes() {
        let args = parse(&["--redis"]).expect("parse");
        let redis = &args.redis_args;
        assert!(redis.redis);
        assert_eq!(redis.redis_url, None);
        assert_eq!(redis.redis_clients, 8);
        assert_eq!(redis.redis_hold, Duration::from_millis(1));
        assert!(!parse(&[]).expect("defaults").redis_args.redis);
        let args = parse(&["--redis", "--redis-url", "redis://127.0.0.1:6380"]).expect("parse");
        assert_eq!(
            args.redis_args.redis_url.as_deref(),
            Some("redis://127.0.0.1:6380")
        );
        assert!(
            parse(&["--redis-url", "redis://127.0.0.1:6380"]).is_err(),
            "needs --redis"
        );
        assert!(parse(&["--redis", "--compare"]).is_err());
        assert!(parse(&["--redis", "--recovery", "10"]).is_err());
        assert!(parse(&["--redis", "--redis-clients", "0"]).is_err());
    }

    #[tokio::test]
    async fn absent_server_fails_with_a_clear_message() {
        let port = process::free_port().expect("free port");
        let args = parse(&[
            "--connect",
            &format!("127.0.0.1:{port}"),
            "--no-progress",
            "--connect-timeout",
            "20s",
        ])
        .expect("parse");
        let started = std::time::Instant::now();
        let err = run(args).await.expect_err("nothing listens there");
        assert!(err.to_string().contains("cannot open a session"), "{err}");
        assert!(started.elapsed() < Duration::from_secs(15));
    }
}
