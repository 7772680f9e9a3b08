//! `lockkeeper-bench`: the comparison harness, which starts the peers it measures against.
//!
//! `--compare` starts Keeper (`lockkeeper serve`) and Apache ZooKeeper itself, runs the same
//! workloads against each (pipelined create+delete of ephemeral-sequential znodes, getData reads)
//! and prints every figure side by side as a ratio, which is how the numbers in docs/benchmarks.md
//! are produced. The load itself comes from `lockkeeper-load`, which `lockkeeper bench --connect`
//! uses against a server someone else runs; what lives here is everything that starts a process.
//!
//! `--locks` measures lockkeeper's ZooKeeper Mutex against Apache Curator's InterProcessMutex,
//! each on Keeper and on Apache ZooKeeper (see [`locks`]); `--recipes` measures lockkeeper's
//! leader latch and atomic long against Curator's LeaderLatch and DistributedAtomicLong the same
//! way, with election failover after SIGKILL of the leader's process (see [`recipes`]); `--redis`
//! measures the Redis lease lock against redis-py's Lock on one redis-server (see [`redis`]);
//! `--etcd` measures lockkeeper's Mutex on etcd against etcd's own lock service (v3lock) on one
//! etcd member (see [`etcd`]).
//!
//! `--trace` follows Keeper's durable writes through its pipeline, stage by stage, for one
//! synchronous client, an uncontended lock and a contended lock handoff (see [`trace`]).
//!
//! `--recovery N` measures how long Keeper (and, with `--recovery-peer`, ZooKeeper) takes to come
//! back after SIGKILL with N znodes in a snapshot and a log tail, and checks that every znode
//! did; `--snapshot-latency N` measures request latency while a snapshot of N znodes is written.
//!
//! Everything is bounded: each run by time and by a request budget, each wait for a server by a
//! timeout. Servers the benchmark starts are killed on every way out (normal end, error, Ctrl-C,
//! SIGTERM, panic, and even SIGKILL of the benchmark, via the parent-death signal). Free ports,
//! zoo.cfg, the Curator classpath, javac, redis-server and the parent-death signal come from
//! `lockkeeper-testkit`, the same process layer the tests use.
//!
//! # Layout
//!
//! - one module per mode: `compare`, `locks/`, `recipes/`, `redis/`, `etcd/`, `trace/`,
//!   `recovery`, `snapshot`;
//! - `process`: the servers under test as child processes (Keeper's `serve`, ZooKeeper on
//!   testkit's command line), `startup`: the wait for their first session;
//! - `versus`: what `--locks` and `--recipes` share (both servers started, the four
//!   client/server combinations in alternating order, the ratio table against Curator on
//!   ZooKeeper);
//! - `report`: what every comparison's report is made of (trials, spreads, failures, targets,
//!   the `--json` document);
//! - `jvm`: the Curator programs, compiled and run as child JVMs; `paced` and `datadir`: the
//!   paced request mix and the data directory reader of `--snapshot-latency` and `--recovery`.

mod compare;
mod datadir;
mod etcd;
mod jvm;
mod locks;
mod paced;
mod process;
mod recipes;
mod recovery;
mod redis;
mod report;
mod snapshot;
mod startup;
mod trace;
mod versus;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use lockkeeper_load::{
    BoxError, LoadArgs, interrupted, parse_duration, stats, workload, write_json,
};
use process::{KeeperFlags, Launcher, ServerKind};
use stats::Json;
use workload::Plan;

/// Compare Keeper with Apache ZooKeeper, and lockkeeper's recipes and Redis locks with Curator's
/// and redis-py's, starting every server and peer program itself.
///
/// Each mode starts what it measures on free 127.0.0.1 ports and stops it on every way out. To
/// load a server that is already running, use `lockkeeper bench --connect HOST:PORT`.
#[derive(clap::Parser, Debug)]
#[command(name = "lockkeeper-bench", version, long_about = None)]
#[command(group = clap::ArgGroup::new("mode").required(true).multiple(true).args([
    "compare", "locks", "recipes", "redis", "etcd", "recovery", "snapshot_latency", "election_participant",
    "trace",
]))]
#[command(after_help = "Examples:\n  \
    lockkeeper-bench --compare --json bench.json\n  \
    lockkeeper-bench --compare --only zookeeper\n  \
    lockkeeper-bench --locks --json locks.json\n  \
    lockkeeper-bench --recipes --json recipes.json\n  \
    lockkeeper-bench --recovery 1000000 --recovery-peer\n  \
    lockkeeper-bench --snapshot-latency 1000000 --rate 5000\n  \
    lockkeeper-bench --redis --json redis.json\n  \
    lockkeeper-bench --etcd --json etcd.json\n  \
    lockkeeper-bench --trace --json trace.json")]
pub struct BenchArgs {
    /// Start Keeper and Apache ZooKeeper as child processes and compare them side by side.
    #[arg(long)]
    pub compare: bool,

    /// With --compare, measure only this server.
    #[arg(long, value_enum, requires = "compare")]
    pub only: Option<ServerKind>,

    /// The workload flags, shared with `lockkeeper bench --connect`.
    #[command(flatten)]
    pub load: LoadArgs,

    /// With --compare: fresh starts per server for the start-up figure (the median is reported).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..=100))]
    pub startup_trials: u16,

    /// With --compare: trials of every workload on each server, alternating between them
    /// (every other trial in reverse order); each figure is the median over the trials,
    /// printed with their range, and each ratio a ratio of medians.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u16).range(1..=100))]
    pub compare_trials: u16,

    /// Binary whose `serve` subcommand runs Keeper [default: `lockkeeper` next to this
    /// executable, else on PATH].
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

    /// Crash-recovery benchmark: start Keeper (`--sync always`, a snapshot every 3/4 of N txns),
    /// create N znodes, wait for the snapshot, SIGKILL it, restart it on the same data dir, and
    /// report the time to the first session and any znode that did not come back.
    #[arg(long, value_name = "N",
          value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    pub recovery: Option<u64>,

    /// With --recovery: also measure Apache ZooKeeper (forceSync as --zookeeper-force-sync, the
    /// same snapCount), for a ratio.
    #[arg(long, requires = "recovery")]
    pub recovery_peer: bool,

    /// Snapshot benchmark: start Keeper with N znodes, run a paced getData/setData mix, and
    /// compare p99 latency while Keeper writes a snapshot with p99 just before (--warmup, then
    /// --duration of baseline; sessions: the largest of --sessions, at most 8).
    #[arg(long, value_name = "N",
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
    /// The `--etcd` mode's flags (boxed for the same reason).
    #[command(flatten)]
    pub etcd_args: Box<etcd::EtcdArgs>,
    /// The `--recipes` mode's flags (boxed for the same reason).
    #[command(flatten)]
    pub recipes: Box<recipes::RecipeArgs>,
    /// The `--trace` mode's flags.
    #[command(flatten)]
    pub trace: trace::TraceArgs,
}

impl BenchArgs {
    /// The mode flags given, as typed.
    fn modes(&self) -> Vec<&'static str> {
        [
            ("--compare", self.compare),
            ("--locks", self.locks.locks),
            ("--recipes", self.recipes.recipes),
            ("--redis", self.redis_args.redis),
            ("--etcd", self.etcd_args.etcd),
            ("--trace", self.trace.trace),
            ("--recovery", self.recovery.is_some()),
            ("--snapshot-latency", self.snapshot_latency.is_some()),
            (
                "--election-participant",
                self.recipes.election_participant.is_some(),
            ),
        ]
        .into_iter()
        .filter_map(|(flag, given)| given.then_some(flag))
        .collect()
    }

    /// One mode per run, except that --recovery and --snapshot-latency may share one (a JSON
    /// document with a section for each). Checked here rather than by clap conflicts: clap
    /// lets a flag's `requires` go unchecked when what it requires conflicts with a flag given,
    /// so `--locks --recovery-peer` would parse.
    fn check_one_mode(&self) -> Result<(), clap::Error> {
        let modes = self.modes();
        if modes.len() < 2 || modes == ["--recovery", "--snapshot-latency"] {
            return Ok(());
        }
        Err(<BenchArgs as clap::CommandFactory>::command().error(
            clap::error::ErrorKind::ArgumentConflict,
            format!(
                "{} cannot be used with {}: one mode per run (only --recovery and \
                 --snapshot-latency may share one)",
                modes[0],
                modes[1..].join(", ")
            ),
        ))
    }

    /// Parses a command line as [`clap::Parser::try_parse_from`] does, then holds it to one
    /// mode per run.
    fn try_parse_checked<I, T>(args: I) -> Result<BenchArgs, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        let args = BenchArgs::try_parse_from(args)?;
        args.check_one_mode()?;
        Ok(args)
    }
}

fn main() -> ExitCode {
    let args = BenchArgs::try_parse_checked(std::env::args_os()).unwrap_or_else(|e| e.exit());
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| // The ZooKeeper client logs every connection at info.
                tracing_subscriber::EnvFilter::new("info,zookeeper_client=error")),
        )
        .with_writer(std::io::stderr)
        // Colour only on a terminal: in a log file escape codes split `key=value` apart.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    // Multi-threaded, and children are spawned from its threads: the parent-death signal is tied
    // to the thread that forks, and these live as long as the benchmark.
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("lockkeeper-bench: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lockkeeper-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Runs the benchmark described by `args` until it completes, fails, or is interrupted.
async fn run(args: BenchArgs) -> Result<(), BoxError> {
    tokio::select! {
        result = run_to_end(args) => result,
        signal = interrupted() => {
            // Dropping `run_to_end` has already killed any server it started.
            Err(format!("interrupted by {signal}").into())
        }
    }
}

async fn run_to_end(args: BenchArgs) -> Result<(), BoxError> {
    let load = &args.load;
    // Each mode points the plan at the server it started.
    let plan = load.plan(String::new(), None);
    let result = if let Some(spec) = &args.recipes.election_participant {
        recipes::participate(
            spec,
            args.recipes.recipe_session_timeout,
            load.connect_timeout,
        )
        .await
    } else if args.recipes.recipes {
        let settings = recipes::Settings::from_args(
            &args.recipes,
            launcher(&args)?,
            &args.locks.curator_classpath,
            load.duration,
            load.warmup,
            load.connect_timeout,
        );
        recipes::run(&settings).await
    } else if args.locks.locks {
        let settings = locks::Settings::from_args(
            &args.locks,
            launcher(&args)?,
            load.duration,
            load.warmup,
            load.connect_timeout,
        );
        locks::run(&settings).await
    } else if args.trace.trace {
        let settings = trace::Settings {
            launcher: launcher(&args)?,
            pairs: args.trace.trace_pairs,
            clients: usize::from(args.trace.trace_clients),
            trials: args.trace.trace_trials,
            limit: load.duration,
            connect_limit: load.connect_timeout,
        };
        trace::run(&settings).await
    } else if args.redis_args.redis {
        redis::run(&args.redis_args.settings(load)).await
    } else if args.etcd_args.etcd {
        etcd::run(&args.etcd_args.settings(load)).await
    } else if args.recovery.is_some() || args.snapshot_latency.is_some() {
        durability(&args, plan, launcher(&args)?).await
    } else {
        let launcher = launcher(&args)?;
        let settings = compare::Settings {
            plan,
            workloads: load.workload.clone(),
            sessions: load.session_counts(),
            servers: match args.only {
                Some(kind) => vec![kind],
                None => vec![ServerKind::Keeper, ServerKind::Zookeeper],
            },
            launcher,
            startup_trials: usize::from(args.startup_trials),
            workload_trials: usize::from(args.compare_trials),
            startup_limit: load.connect_timeout,
            rss_znodes: load.rss_znodes,
            populate_limit: Duration::from_secs(180),
        };
        compare::compare(&settings).await
    };
    match result {
        Ok(json) => write_json(load.json.as_ref(), &json),
        Err(e) => {
            if let Some(partial) = e.downcast_ref::<report::Partial>() {
                write_json(load.json.as_ref(), &partial.0)?;
            }
            Err(e)
        }
    }
}

/// How to start the servers, from the flags; asks the Keeper binary which flags it has.
fn launcher(args: &BenchArgs) -> Result<Launcher, BoxError> {
    let keeper_bin = match &args.keeper_bin {
        Some(path) => path.clone(),
        None => default_keeper_bin()?,
    };
    let keeper_flags = KeeperFlags::probe(&keeper_bin);
    Ok(Launcher {
        keeper_bin,
        zookeeper: lockkeeper_testkit::ZkJvm {
            java: args.java.clone(),
            classpath: args.zookeeper_classpath.clone(),
            options: args.zookeeper_jvm_opts.clone(),
        },
        zookeeper_force_sync: args.zookeeper_force_sync,
        keeper_flags,
    })
}

/// `lockkeeper` in the directory of this executable (cargo builds both into `target/<profile>/`,
/// and an install puts them side by side), else the first on `PATH`: the Keeper a user runs.
fn default_keeper_bin() -> Result<PathBuf, BoxError> {
    let beside = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join("lockkeeper")))
        .filter(|path| path.is_file());
    beside
        .or_else(|| lockkeeper_testkit::find_on_path("lockkeeper"))
        .ok_or_else(|| {
            "no `lockkeeper` binary next to lockkeeper-bench or on PATH: build it \
             (cargo build --release -p lockkeeper-cli) or name one with --keeper-bin"
                .into()
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
            if let Some(partial) = e.downcast_ref::<report::Partial>() {
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
            startup_limit: args.load.connect_timeout,
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
                .load
                .sessions
                .iter()
                .copied()
                .max()
                .map_or(4, |s| usize::from(s).min(8)),
            rate: args.rate,
            warmup: args.load.warmup,
            window: args.load.duration,
            populate_limit: args.populate_limit,
            startup_limit: args.load.connect_timeout,
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
        Err(Box::new(report::Partial(json, failures.join("; "))))
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

#[cfg(test)]
mod tests {
    use super::*;

    /// `lockkeeper-bench <args>` parsed as the command line would be.
    pub(super) fn parse(args: &[&str]) -> Result<BenchArgs, clap::Error> {
        BenchArgs::try_parse_checked(
            std::iter::once("lockkeeper-bench").chain(args.iter().copied()),
        )
    }

    /// The JSON report's field `key`, number and list (tests of every mode's report use them).
    pub(super) fn field<'a>(json: &'a Json, key: &str) -> &'a Json {
        match json {
            Json::Obj(fields) => fields
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v)
                .unwrap_or_else(|| panic!("no `{key}` in {}", json.render())),
            other => panic!("`{key}` asked of a non-object: {}", other.render()),
        }
    }

    pub(super) fn number(json: &Json, key: &str) -> f64 {
        match field(json, key) {
            Json::Num(n) => *n,
            other => panic!("`{key}` is not a number: {}", other.render()),
        }
    }

    pub(super) fn rows<'a>(json: &'a Json, key: &str) -> &'a [Json] {
        match field(json, key) {
            Json::Arr(rows) => rows,
            other => panic!("`{key}` is not a list: {}", other.render()),
        }
    }

    /// A launcher for tests that start Apache ZooKeeper from Debian's jar and never Keeper.
    pub(super) fn launcher() -> Launcher {
        Launcher {
            keeper_bin: "unused".into(),
            zookeeper: lockkeeper_testkit::ZkJvm {
                java: "java".into(),
                classpath: "/usr/share/java/zookeeper.jar".to_string(),
                options: Vec::new(),
            },
            zookeeper_force_sync: true,
            keeper_flags: Default::default(),
        }
    }

    #[test]
    fn a_mode_is_required_and_the_defaults_are_the_documented_ones() {
        let err = parse(&[]).expect_err("no mode");
        assert!(err.to_string().contains("--compare"), "{err}");
        let args = parse(&["--compare", "--duration", "500ms"]).expect("defaults parse");
        assert!(args.compare);
        assert_eq!(args.only, None);
        assert_eq!(args.load.duration, Duration::from_millis(500));
        assert_eq!(args.startup_trials, 3);
        assert_eq!(args.compare_trials, 5);
        assert!(parse(&["--compare", "--compare-trials", "0"]).is_err());
        assert!(args.zookeeper_force_sync);
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
        // A flag of one mode with another mode.
        for (flags, why) in [
            (
                &["--redis", "--only", "keeper"][..],
                "--only needs --compare",
            ),
            (
                &["--locks", "--recovery-peer"],
                "--recovery-peer needs --recovery",
            ),
            (
                &["--locks", "--redis-url", "redis://127.0.0.1:1"],
                "--redis-url needs --redis",
            ),
            (
                &["--redis", "--etcd-endpoint", "127.0.0.1:1"],
                "--etcd-endpoint needs --etcd",
            ),
        ] {
            let err = parse(flags).expect_err(why);
            assert!(err.to_string().contains("required"), "{why}: {err}");
        }
        // Loading a running server is `lockkeeper bench --connect`'s job.
        assert!(parse(&["--compare", "--connect", "127.0.0.1:1"]).is_err());
        assert!(parse(&["--compare", "--sessions", "0"]).is_err());
    }

    #[test]
    fn one_mode_per_run_except_recovery_with_snapshot_latency() {
        let modes: [&[&str]; 8] = [
            &["--compare"],
            &["--locks"],
            &["--recipes"],
            &["--redis"],
            &["--etcd"],
            &["--trace"],
            &["--recovery", "10"],
            &["--snapshot-latency", "10"],
        ];
        for (i, a) in modes.iter().enumerate() {
            assert!(parse(a).is_ok(), "{a:?} alone");
            for b in &modes[i + 1..] {
                let both: Vec<&str> = a.iter().chain(b.iter()).copied().collect();
                let pair = (a[0], b[0]);
                if pair == ("--recovery", "--snapshot-latency") {
                    assert!(parse(&both).is_ok(), "{both:?} share a run");
                } else {
                    let err = parse(&both).expect_err(&format!("{both:?} is two modes"));
                    assert!(
                        err.to_string()
                            .contains(&format!("{} cannot be used with {}", a[0], b[0])),
                        "{both:?}: {err}"
                    );
                }
            }
        }
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
        assert_eq!(parse(&["--compare"]).expect("defaults").rate, 5000.0);
        assert!(parse(&["--recovery-peer"]).is_err(), "needs --recovery");
        assert!(parse(&["--recovery", "10", "--compare"]).is_err());
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
        assert!(!parse(&["--compare"]).expect("defaults").redis_args.redis);
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
}
