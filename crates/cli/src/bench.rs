//! `lockkeeper bench --connect HOST:PORT`: load any ZooKeeper-protocol server that is already
//! running, like redis-benchmark does for Redis.
//!
//! The workloads (pipelined create+delete of ephemeral-sequential znodes, getData reads), the
//! driver and the figures come from `lockkeeper-load`, which the comparison harness
//! `lockkeeper-bench` shares, so a figure taken here means what the tables in docs/benchmarks.md
//! mean. This command starts no process: the modes that start peers (`--compare`, `--locks`,
//! `--recipes`, `--redis`, `--recovery`, `--snapshot-latency`) live in `lockkeeper-bench`, and
//! asking for one here is a usage error that names it.
//!
//! Everything the run creates is under `/lockkeeper-bench-<pid>-<random>` and removed at the end,
//! also after a failed run (not after Ctrl-C or SIGKILL).

use std::process::ExitCode;
use std::time::Duration;

use lockkeeper_load::stats::{self, Json};
use lockkeeper_load::workload::{Namespace, Plan, Workload};
use lockkeeper_load::{BoxError, LoadArgs, interrupted, procfs, write_json};

use crate::exit;

/// Load-test a running ZooKeeper-protocol server: throughput and latency quantiles per workload
/// and session count, and, given its PID, its CPU time per request and memory.
#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:\n  \
    lockkeeper bench --connect 127.0.0.1:2181\n  \
    lockkeeper bench --connect 127.0.0.1:2181 --workload get --sessions 1,4,16 --duration 10s\n  \
    lockkeeper bench --connect 127.0.0.1:2181 --server-pid \"$(pgrep -f 'lockkeeper serve')\"\n\n\
    Comparisons that start their own servers (Keeper against Apache ZooKeeper, Curator, redis-py)\n\
    are run by lockkeeper-bench (cargo run --release -p lockkeeper-bench -- --compare).")]
pub(crate) struct BenchArgs {
    /// Server to load, as host:port (any ZooKeeper-protocol server) [default: 127.0.0.1:2181].
    /// Everything is created under `/lockkeeper-bench-<pid>-<random>` and removed at the end
    /// (not after Ctrl-C).
    #[arg(long, value_name = "HOST:PORT")]
    pub connect: Option<String>,

    /// The workload flags, shared with `lockkeeper-bench`.
    #[command(flatten)]
    pub load: LoadArgs,

    /// PID of the server at --connect (on this machine), to report its CPU time per request and
    /// its memory with --rss-znodes znodes (deleted again afterwards).
    #[arg(long, value_name = "PID")]
    pub server_pid: Option<u32>,

    /// The modes that moved to `lockkeeper-bench`, accepted only to say so.
    #[command(flatten)]
    pub moved: Moved,
}

/// Flags of modes that start servers or peer programs. They are hidden: each only makes the
/// command fail with a pointer to `lockkeeper-bench`, instead of clap's bare "unexpected argument".
#[derive(clap::Args, Debug, Default)]
pub(crate) struct Moved {
    #[arg(long, hide = true)]
    compare: bool,
    #[arg(long, hide = true)]
    locks: bool,
    #[arg(long, hide = true)]
    recipes: bool,
    #[arg(long, hide = true)]
    redis: bool,
    #[arg(long, hide = true, value_name = "N", num_args = 0..=1, default_missing_value = "")]
    recovery: Option<String>,
    #[arg(long, hide = true, value_name = "N", num_args = 0..=1, default_missing_value = "")]
    snapshot_latency: Option<String>,
}

impl Moved {
    /// The first moved flag given, as typed.
    fn first(&self) -> Option<&'static str> {
        [
            (self.compare, "--compare"),
            (self.locks, "--locks"),
            (self.recipes, "--recipes"),
            (self.redis, "--redis"),
            (self.recovery.is_some(), "--recovery"),
            (self.snapshot_latency.is_some(), "--snapshot-latency"),
        ]
        .into_iter()
        .find_map(|(given, flag)| given.then_some(flag))
    }
}

/// Runs the benchmark described by `args` until it completes, fails, or is interrupted; reports
/// its own errors. Exits 0, 1 on a failed run, 64 for a mode that moved to `lockkeeper-bench`.
pub(crate) async fn run(args: BenchArgs) -> ExitCode {
    if let Some(flag) = args.moved.first() {
        eprintln!(
            "lockkeeper bench: {flag} starts its own servers and is run by lockkeeper-bench: \
             `lockkeeper-bench {flag} ...` (from a checkout: cargo run --release -p \
             lockkeeper-bench -- {flag} ...)"
        );
        return exit::code(exit::USAGE);
    }
    let result = tokio::select! {
        result = run_to_end(&args) => result,
        signal = interrupted() => Err(format!("interrupted by {signal}").into()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lockkeeper: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run_to_end(args: &BenchArgs) -> Result<(), BoxError> {
    let load = &args.load;
    let connect = args
        .connect
        .clone()
        .unwrap_or_else(|| "127.0.0.1:2181".to_string());
    let plan = load.plan(connect, args.server_pid);
    let json = against_server(
        &plan,
        &load.workload,
        &load.session_counts(),
        load.rss_znodes,
        args.server_pid,
    )
    .await?;
    write_json(load.json.as_ref(), &json)
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
        let before = procfs::rss_kib(pid)?;
        match namespace
            .populate(rss_znodes, 4, Duration::from_secs(180), plan, "")
            .await
        {
            Ok(_) => {
                tokio::time::sleep(Duration::from_millis(500)).await;
                let after = procfs::rss_kib(pid)?;
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
    fn parse(args: &[&str]) -> Result<BenchArgs, clap::Error> {
        Cli::try_parse_from(std::iter::once("bench").chain(args.iter().copied())).map(|c| c.bench)
    }

    #[test]
    fn the_server_and_its_pid_are_flags_of_their_own() {
        let args = parse(&[]).expect("defaults parse");
        assert_eq!((args.connect.as_deref(), args.server_pid), (None, None));
        assert_eq!(args.moved.first(), None);
        let args = parse(&[
            "--connect",
            "127.0.0.1:2281",
            "--server-pid",
            "42",
            "--sessions",
            "1,4",
        ])
        .expect("parse");
        assert_eq!(args.connect.as_deref(), Some("127.0.0.1:2281"));
        assert_eq!(args.server_pid, Some(42));
        assert_eq!(args.load.session_counts(), vec![1, 4]);
        // Flags of the moved modes other than the mode itself are clap's to refuse.
        assert!(parse(&["--compare", "--zookeeper-jvm-opt", "-Xmx1g"]).is_err());
        assert!(parse(&["--server-pid", "none"]).is_err());
    }

    #[tokio::test]
    async fn a_moved_mode_is_a_usage_error_that_names_lockkeeper_bench() {
        for flags in [
            &["--compare"][..],
            &["--locks"],
            &["--recipes"],
            &["--redis"],
            &["--recovery", "1000"],
            &["--recovery"],
            &["--snapshot-latency", "10"],
        ] {
            let args = parse(flags).expect("the moved flags parse, to be refused by name");
            assert_eq!(args.moved.first(), Some(flags[0]), "{flags:?}");
            // Refused before any connection: nothing listens on the default address here.
            let started = std::time::Instant::now();
            assert_eq!(run(args).await, exit::code(exit::USAGE), "{flags:?}");
            assert!(started.elapsed() < Duration::from_secs(5));
        }
    }

    #[tokio::test]
    async fn absent_server_fails_with_a_clear_message() {
        let port = lockkeeper_testkit::free_port();
        let args = parse(&[
            "--connect",
            &format!("127.0.0.1:{port}"),
            "--no-progress",
            "--connect-timeout",
            "20s",
        ])
        .expect("parse");
        let started = std::time::Instant::now();
        let err = run_to_end(&args).await.expect_err("nothing listens there");
        assert!(err.to_string().contains("cannot open a session"), "{err}");
        assert!(started.elapsed() < Duration::from_secs(15));
    }
}
