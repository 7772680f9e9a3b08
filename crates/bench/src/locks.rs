//! `lockkeeper-bench --locks`: lockkeeper's ZooKeeper Mutex against Apache Curator's
//! `InterProcessMutex`, on Keeper and on Apache ZooKeeper, measured in one run.
//!
//! One run starts Keeper (`lockkeeper serve --sync always`) and Apache ZooKeeper (forceSync as
//! `--zookeeper-force-sync`, on by default) as child processes on free loopback ports, and one
//! JVM running Curator (see [`curator`]). Then, one measurement at a time and interleaved over the
//! four combinations (lockkeeper and Curator, each on Keeper and on ZooKeeper):
//!
//! 1. **uncontended** lock+release cycles per second on one session;
//! 2. **contended** handoffs per second with several sessions looping on one lock, with the wait
//!    for each grant (p50, p99, max) and fairness (longest wait over mean wait);
//! 3. **notifications per release** with many sessions on one lock, lockkeeper's herd-free
//!    Mutex against the naive SimpleLock, on both servers.
//!
//! Every figure is taken in each of `--lock-trials` trials (5 by default) and reported as the
//! median over a combination's trials with its range, and given as a ratio of medians against
//! Curator on ZooKeeper, the combination most Java services run today: only a ratio measured
//! in the same run on the same machine means anything elsewhere, and a median over alternating
//! trials is not one lucky trial.

mod curator;
mod measure;
mod report;

use std::time::Duration;

use super::BoxError;
use super::process::{Launcher, ServerKind};
use super::stats::Json;
use super::versus::{self, Client, Target, on_both_servers, runs};
use curator::CuratorJvm;
pub(crate) use measure::{
    ACQUIRE_LIMIT, Contended, LockKind, close_all, contend, open, open_all, open_many,
};
use report::Report;

/// Flags of the lock benchmark (`--duration`, `--warmup`, `--json` and the server flags of
/// `--compare` apply too).
#[derive(clap::Args, Debug, Clone)]
pub struct LockArgs {
    /// Lock benchmark: lockkeeper's Mutex against Curator's InterProcessMutex, on Keeper and on
    /// Apache ZooKeeper (both started here): uncontended cycles/s, contended handoffs/s with
    /// wait latency and fairness, and watch notifications per release (Mutex vs SimpleLock).
    /// Each measured run lasts at most --duration.
    #[arg(long)]
    pub locks: bool,

    /// With --locks: lock+release cycles of the uncontended run (and at most as many warm-up
    /// cycles, within --warmup).
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u32).range(1..))]
    pub lock_cycles: u32,

    /// With --locks: sessions contending for one lock in the handoff run.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u16).range(2..=256))]
    pub lock_clients: u16,

    /// With --locks: acquisitions per session in the handoff run.
    #[arg(long, default_value_t = 250, value_parser = clap::value_parser!(u32).range(1..))]
    pub lock_handoffs: u32,

    /// With --locks: sessions on one lock in the notification count.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u16).range(2..=1024))]
    pub lock_waiters: u16,

    /// With --locks: acquisitions per session in the notification count.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..))]
    pub lock_waiter_cycles: u32,

    /// With --locks: trials over the four client/server combinations, every other one in
    /// reverse order; each figure is the median of a combination's trials (printed with their
    /// range), and each ratio a ratio of medians.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub lock_trials: u32,

    /// With --locks or --recipes: class path with Curator 5 and the ZooKeeper client, for the
    /// Curator side.
    #[arg(long, value_name = "CLASSPATH", default_value_t = lockkeeper_testkit::curator_classpath_unchecked())]
    pub curator_classpath: String,
}

/// Everything one lock benchmark run needs.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    pub launcher: Launcher,
    pub curator_classpath: String,
    /// Bound on each measured run.
    pub limit: Duration,
    /// Bound on the warm-up before each uncontended run.
    pub warmup: Duration,
    pub cycles: u32,
    pub clients: usize,
    pub handoffs: u32,
    pub waiters: usize,
    pub waiter_cycles: u32,
    /// Trials over the combinations (see `--lock-trials`).
    pub trials: u32,
    /// Bound on a server's start and on opening a session.
    pub connect_limit: Duration,
}

impl Settings {
    pub(crate) fn from_args(
        args: &LockArgs,
        launcher: Launcher,
        limit: Duration,
        warmup: Duration,
        connect_limit: Duration,
    ) -> Settings {
        Settings {
            launcher,
            curator_classpath: args.curator_classpath.clone(),
            limit,
            warmup,
            cycles: args.lock_cycles,
            clients: usize::from(args.lock_clients),
            handoffs: args.lock_handoffs,
            waiters: usize::from(args.lock_waiters),
            waiter_cycles: args.lock_waiter_cycles,
            trials: args.lock_trials,
            connect_limit,
        }
    }

    /// Bound on the Curator JVM as a whole: every step of the run (per trial, two combinations
    /// each with a warm-up, an uncontended and a contended run), with room to spare.
    fn jvm_watchdog(&self) -> Duration {
        (self.limit + self.warmup) * 4 * self.trials + Duration::from_secs(600)
    }
}

/// Starts both servers, measures, prints the table and returns the JSON (or a
/// [`Partial`](super::report::Partial) carrying it when some figure could not be taken).
pub(crate) async fn run(settings: &Settings) -> Result<Json, BoxError> {
    println!(
        "lockkeeper-bench --locks: each measured run at most {}, sessions {} (handoffs), {} (notifications)",
        super::stats::fmt_duration(settings.limit),
        settings.clients,
        settings.waiters
    );
    let report = on_both_servers(
        &settings.launcher,
        settings.connect_limit,
        async |targets| measure(settings, targets).await,
    );
    report.await?.finish(settings)
}

/// Takes every figure against `targets` (one Keeper and one ZooKeeper) and prints each as it
/// comes. A figure that cannot be taken is recorded as an error; the others are still taken.
pub(crate) async fn measure(settings: &Settings, targets: &[Target]) -> Report {
    let mut report = Report::new(targets);
    let java = settings.launcher.java();
    let started = CuratorJvm::start(java, &settings.curator_classpath, settings.jvm_watchdog());
    let mut jvm = versus::curator(&mut report.record, started.await, CuratorJvm::describe);
    let connect = |kind| versus::connect(targets, kind);
    let limit = settings.limit;
    let connect_limit = settings.connect_limit;

    report.print_uncontended_header(settings);
    for (trial, combo, addr) in runs(settings.trials, targets) {
        let path = format!("/lockkeeper-bench/uncontended-{}-{trial}", combo.key());
        let result = match combo.client {
            Client::Lockkeeper => {
                measure::uncontended(
                    &addr,
                    &path,
                    settings.cycles,
                    settings.warmup,
                    settings.cycles,
                    limit,
                    connect_limit,
                )
                .await
            }
            Client::Curator => match jvm.as_mut() {
                Some(jvm) => {
                    jvm.uncontended(
                        &addr,
                        &path,
                        settings.cycles,
                        settings.warmup,
                        settings.cycles,
                        limit,
                    )
                    .await
                }
                None => Err("no Curator JVM".into()),
            },
        };
        report.add_uncontended(combo, trial, result);
    }

    report.print_contended_header(settings);
    for (trial, combo, addr) in runs(settings.trials, targets) {
        let path = format!("/lockkeeper-bench/contended-{}-{trial}", combo.key());
        let result = match combo.client {
            Client::Lockkeeper => {
                measure::contended(
                    &addr,
                    &path,
                    settings.clients,
                    settings.handoffs,
                    limit,
                    connect_limit,
                )
                .await
            }
            Client::Curator => match jvm.as_mut() {
                Some(jvm) => {
                    jvm.contended(&addr, &path, settings.clients, settings.handoffs, limit)
                        .await
                }
                None => Err("no Curator JVM".into()),
            },
        };
        report.add_contended(combo, trial, result);
    }

    report.print_herd_header(settings);
    for kind in [LockKind::Mutex, LockKind::Simple] {
        for server in [ServerKind::Keeper, ServerKind::Zookeeper] {
            let Some(addr) = connect(server) else {
                continue;
            };
            let path = format!(
                "/lockkeeper-bench/herd-{}-{}",
                kind.name().to_lowercase(),
                server.json_key()
            );
            let result = measure::herd(
                &addr,
                &path,
                kind,
                settings.waiters,
                settings.waiter_cycles,
                limit,
                connect_limit,
            )
            .await;
            report.add_herd(kind, server, result);
        }
    }

    if let Some(jvm) = jvm {
        jvm.stop().await;
    }
    report
}

#[cfg(test)]
mod tests {
    use super::super::process::ChildServer;
    use super::super::startup::first_session;
    use super::super::tests::{field, launcher, number, parse, rows};
    use super::*;
    use lockkeeper_testkit::{Keeper, TestServer};

    #[test]
    fn lock_flags_parse_and_exclude_the_other_modes() {
        let args = parse(&["--locks"]).expect("parse");
        assert!(args.locks.locks);
        assert_eq!(
            (
                args.locks.lock_cycles,
                args.locks.lock_clients,
                args.locks.lock_waiters
            ),
            (2000, 8, 32)
        );
        assert_eq!(args.locks.lock_trials, 5, "the median of at least 5 trials");
        assert_eq!(
            args.locks.curator_classpath,
            lockkeeper_testkit::curator_classpath_unchecked()
        );
        let args =
            parse(&["--locks", "--lock-clients", "4", "--lock-handoffs", "10"]).expect("parse");
        assert_eq!((args.locks.lock_clients, args.locks.lock_handoffs), (4, 10));
        assert!(!parse(&["--compare"]).expect("defaults").locks.locks);
        assert!(parse(&["--locks", "--compare"]).is_err());
        assert!(parse(&["--locks", "--recovery", "10"]).is_err());
        assert!(parse(&["--locks", "--lock-clients", "1"]).is_err());
        assert!(parse(&["--locks", "--lock-cycles", "0"]).is_err());
    }

    /// The whole lock benchmark in a tiny configuration, on an in-process Keeper and a child
    /// Apache ZooKeeper, with the real Curator JVM: every figure is taken and the JSON has its
    /// shape. Speed is not asserted.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn measures_every_combination_in_a_tiny_run() {
        let launcher = launcher();
        let keeper = Keeper::start();
        let mut zookeeper =
            ChildServer::spawn(ServerKind::Zookeeper, &launcher).expect("spawn ZooKeeper");
        first_session(&mut zookeeper, Duration::from_secs(120))
            .await
            .expect("ZooKeeper starts");
        let settings = Settings {
            launcher,
            curator_classpath: lockkeeper_testkit::curator_classpath_unchecked(),
            limit: Duration::from_secs(30),
            warmup: Duration::from_secs(5),
            cycles: 5,
            clients: 3,
            handoffs: 3,
            waiters: 4,
            waiter_cycles: 2,
            trials: 2,
            connect_limit: Duration::from_secs(60),
        };
        let targets = [
            Target {
                kind: ServerKind::Keeper,
                connect: keeper.connect_string(),
                command: "in-process".into(),
            },
            Target {
                kind: ServerKind::Zookeeper,
                connect: zookeeper.addr().to_string(),
                command: "child".into(),
            },
        ];
        let report = measure(&settings, &targets).await;
        let json = report.to_json(&settings);
        let uncontended = rows(&json, "uncontended");
        assert_eq!(uncontended.len(), 4 * 2, "{}", json.render());
        for row in uncontended {
            assert_eq!(number(row, "cycles"), 5.0, "{}", row.render());
            assert!(number(row, "cycles_per_sec") > 0.0, "{}", row.render());
        }
        let contended = rows(&json, "contended");
        assert_eq!(contended.len(), 4 * 2);
        for row in contended {
            assert_eq!(number(row, "handoffs"), 9.0, "{}", row.render());
            assert!(number(row, "handoffs_per_sec") > 0.0);
            assert!(number(row, "wait_max_us") >= number(row, "wait_p50_us"));
            assert!(number(row, "fairness") >= 1.0, "{}", row.render());
        }
        let herd = rows(&json, "notifications");
        assert_eq!(herd.len(), 4, "Mutex and SimpleLock on each server");
        for row in herd {
            assert_eq!(number(row, "releases"), 8.0, "{}", row.render());
            assert!(number(row, "per_release") >= 0.0, "{}", row.render());
        }
        // Every ratio is of medians against Curator on ZooKeeper's, which is 1 against itself.
        let medians = rows(&json, "medians");
        assert_eq!(medians.len(), 4);
        let baseline = medians
            .iter()
            .find(|r| {
                field(r, "client") == &Json::Str("curator".into())
                    && field(r, "server") == &Json::Str("zookeeper".into())
            })
            .expect("Curator on ZooKeeper");
        assert_eq!(number(baseline, "cycles_vs_curator_on_zookeeper"), 1.0);
        for row in medians {
            assert_eq!(number(field(row, "cycles_per_sec"), "trials"), 2.0);
            assert!(number(row, "cycles_vs_curator_on_zookeeper") > 0.0);
            assert!(number(row, "handoffs_vs_curator_on_zookeeper") > 0.0);
        }
        assert_eq!(rows(&json, "goals").len(), 6);
        assert!(
            report.record.errors.is_empty(),
            "{:?}",
            report.record.errors
        );
    }
}
