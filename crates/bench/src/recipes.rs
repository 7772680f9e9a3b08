//! `lockkeeper-bench --recipes`: lockkeeper's leader latch, atomic long and distributed queue
//! against Apache Curator's `LeaderLatch`, `DistributedAtomicLong` and `DistributedQueue`, on
//! Keeper and on Apache ZooKeeper, in one run.
//!
//! Like `--locks` (whose servers, Curator JVM plumbing and comparisons it shares, see
//! [`super::versus`] and [`super::jvm`]), one run starts Keeper (`--sync always`) and Apache
//! ZooKeeper as child processes on free loopback ports, then measures:
//!
//! 1. **counter increments/s**: several sessions incrementing one counter, all four
//!    client/server combinations interleaved over trials; the counter's final value must equal
//!    the increments counted, or the run fails;
//! 2. **queue items/s**: producers putting items into one queue while consumers take them at
//!    least once (see [`queue`]), all four combinations; every item must be consumed exactly
//!    once, or the run fails;
//! 3. **resign handoff**: the leader of an election gives leadership up and queues again at the
//!    back, the next participant is granted; handoffs/s and the time from the resign to the
//!    next grant, all four combinations;
//! 4. **election failover**: every participant is a process of its own (this binary in a hidden
//!    mode, or a JVM per Curator participant); the leader's process is SIGKILLed and the time
//!    until another participant reports leadership is taken on this process's clock. Its floor
//!    is the session timeout (the server notices a dead client only when its session expires),
//!    so each failover is reported with its excess over the negotiated timeout.
//!
//! The counter, queue and handoff trials follow one unmeasured run of each combination (bounded by
//! `--warmup`): a fresh server's first writes and a cold JVM are slower, whoever comes first.
//! Each of their figures is the median over a combination's `--recipe-trials` trials (5 by
//! default), printed with its range, and each ratio against Curator on ZooKeeper a ratio of
//! medians, so that no single trial decides a comparison.
//! Every loop is bounded in count and in time, every process the run starts is killed by its PID
//! on every way out, and every address is 127.0.0.1.

mod curator;
mod failover;
pub(crate) mod measure;
mod queue;
mod report;

use std::time::Duration;

use super::BoxError;
use super::jvm::Classes;
use super::process::{Launcher, ServerKind};
use super::stats::{Json, fmt_duration};
use super::versus::{self, Client, Combo, Target, on_both_servers, runs};
use curator::CuratorRecipeJvm;
use queue::Shape;
use report::Report;

pub(crate) use failover::participate;

/// Flags of the recipe benchmark (`--duration`, `--json`, `--java`, `--curator-classpath` and
/// the server flags of `--compare` apply too).
#[derive(clap::Args, Debug, Clone)]
pub struct RecipeArgs {
    /// Recipe benchmark: lockkeeper's leader latch, atomic long and distributed queue against
    /// Curator's LeaderLatch, DistributedAtomicLong and DistributedQueue, on Keeper and on Apache
    /// ZooKeeper (both started here): counter increments/s, queue items/s, leadership handoffs
    /// on resign, and election failover after SIGKILL of the leader's process. Each measured
    /// counter, queue or handoff run lasts at most --duration (a queue run then drains what was
    /// produced).
    #[arg(long)]
    pub recipes: bool,

    /// With --recipes: session timeout asked for by every election participant, on both sides.
    /// Apache ZooKeeper grants at least 2 ticks (its default tickTime of 2 s makes that 4 s), so
    /// a shorter one would not be the same on both servers.
    #[arg(long, default_value = "4s", value_parser = super::parse_duration)]
    pub recipe_session_timeout: Duration,

    /// With --recipes: leader processes killed per failover combination.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(0..=1000))]
    pub failovers: u32,

    /// With --recipes: participant processes in each failover election (one is replaced after
    /// each failover, so the line never runs dry).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(2..=64))]
    pub election_participants: u16,

    /// With --recipes: measure failover on all four client/server combinations, not only
    /// lockkeeper on Keeper and Curator on ZooKeeper.
    #[arg(long)]
    pub failover_all: bool,

    /// With --recipes: sessions in the resign-handoff election.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(2..=256))]
    pub handoff_participants: u16,

    /// With --recipes: handoffs per resign-handoff run.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..))]
    pub handoffs: u32,

    /// With --recipes: sessions incrementing the one counter.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..=256))]
    pub counter_sessions: u16,

    /// With --recipes: what an increment that lost to a concurrent one does, the same on both
    /// sides: `spin` tries again at once, up to 10,000 tries (no sleep, so the figure is the
    /// clients' and servers' speed, not a sleep schedule); `backoff` tries again after a
    /// jittered sleep from 5 ms doubling to at most 500 ms, 20 tries in all (lockkeeper's
    /// default; Curator's ExponentialBackoffRetry(5, 19, 500)).
    #[arg(long, value_enum, default_value = "spin")]
    pub counter_retry: CounterRetry,

    /// With --recipes: increments per session in each counter run.
    #[arg(long, default_value_t = 250, value_parser = clap::value_parser!(u32).range(1..))]
    pub increments: u32,

    /// With --recipes: sessions putting items into the queue in each queue run.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub queue_producers: u16,

    /// With --recipes: sessions consuming the queue's items (at least once) in each queue run.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub queue_consumers: u16,

    /// With --recipes: items per queue run, over all producers.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u32).range(1..))]
    pub queue_items: u32,

    /// With --recipes: trials of the counter, queue and handoff runs over the four combinations,
    /// every other one in reverse order; each figure is the median of a combination's trials
    /// (printed with their range), and each ratio a ratio of medians.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub recipe_trials: u32,

    /// Internal: one election participant of the failover runs (CONNECT PATH ID WATCHDOG_SECS);
    /// prints `SESSION <ms>`, then `LEADER <fencing token>` when granted, then waits for stdin
    /// to close.
    #[arg(long, hide = true, num_args = 4,
          value_names = ["CONNECT", "PATH", "ID", "WATCHDOG_SECS"],
          )]
    pub election_participant: Option<Vec<String>>,
}

/// How a counter increment that lost to a concurrent one is tried again (see `--counter-retry`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum CounterRetry {
    Backoff,
    Spin,
}

impl CounterRetry {
    pub fn name(self) -> &'static str {
        match self {
            CounterRetry::Backoff => "backoff",
            CounterRetry::Spin => "spin",
        }
    }
}

/// Everything one recipe benchmark run needs.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    pub launcher: Launcher,
    pub curator_classpath: String,
    /// Bound on each counter and handoff run, and on the producing of each queue run.
    pub limit: Duration,
    /// Bound on the unmeasured run of each combination before the trials (0: none).
    pub warmup: Duration,
    pub session_timeout: Duration,
    pub failovers: u32,
    pub election_participants: usize,
    pub failover_combos: Vec<Combo>,
    pub handoff_participants: usize,
    pub handoffs: u32,
    pub counter_sessions: usize,
    pub counter_retry: CounterRetry,
    pub increments: u32,
    pub queue: Shape,
    pub trials: u32,
    /// Bound on a server's start and on opening a session.
    pub connect_limit: Duration,
}

impl Settings {
    pub(crate) fn from_args(
        args: &RecipeArgs,
        launcher: Launcher,
        curator_classpath: &str,
        limit: Duration,
        warmup: Duration,
        connect_limit: Duration,
    ) -> Settings {
        Settings {
            launcher,
            curator_classpath: curator_classpath.to_string(),
            limit,
            warmup,
            session_timeout: args.recipe_session_timeout,
            failovers: args.failovers,
            election_participants: usize::from(args.election_participants),
            failover_combos: if args.failover_all {
                Combo::ALL.to_vec()
            } else {
                FAILOVER_COMBOS.to_vec()
            },
            handoff_participants: usize::from(args.handoff_participants),
            handoffs: args.handoffs,
            counter_sessions: usize::from(args.counter_sessions),
            counter_retry: args.counter_retry,
            increments: args.increments,
            queue: Shape {
                producers: usize::from(args.queue_producers),
                consumers: usize::from(args.queue_consumers),
                items: args.queue_items,
            },
            trials: args.recipe_trials,
            connect_limit,
        }
    }

    /// Bound on the Curator command JVM as a whole: every run, with room to spare.
    fn jvm_watchdog(&self) -> Duration {
        (self.limit * 6 * self.trials + self.warmup * 12) + Duration::from_secs(600)
    }

    /// Bound on any one failover: expiry takes the session timeout plus at most a server tick
    /// or check interval; three timeouts and half a minute leave room for a loaded machine.
    fn failover_limit(&self) -> Duration {
        self.session_timeout * 3 + Duration::from_secs(30)
    }
}

/// The failover combinations measured by default: the two the target compares.
const FAILOVER_COMBOS: [Combo; 2] = [
    Combo::new(Client::Lockkeeper, ServerKind::Keeper),
    Combo::BASELINE,
];

/// The Java program, carried by the binary.
const SOURCE: &str = include_str!("CuratorRecipeBench.java");
const CLASS: &str = "CuratorRecipeBench";

/// Starts both servers, measures, prints the tables and returns the JSON (or a
/// [`Partial`](super::report::Partial) carrying it when some figure could not be taken).
pub(crate) async fn run(settings: &Settings) -> Result<Json, BoxError> {
    println!(
        "lockkeeper-bench --recipes: counter, queue and handoff runs at most {} each; {} \
         failovers per side with a {} session timeout",
        fmt_duration(settings.limit),
        settings.failovers,
        fmt_duration(settings.session_timeout)
    );
    let report = on_both_servers(
        &settings.launcher,
        settings.connect_limit,
        async |targets| measure(settings, targets).await,
    );
    report.await?.finish(settings)
}

/// Takes every figure against `targets` (one Keeper and one ZooKeeper), printing each as it
/// comes. A figure that cannot be taken is recorded as an error; the others are still taken.
pub(crate) async fn measure(settings: &Settings, targets: &[Target]) -> Report {
    let mut report = Report::new(targets);
    let java = settings.launcher.java();
    let compiled = Classes::compile(java, &settings.curator_classpath, CLASS, SOURCE).await;
    let classes = compiled.map_err(|e| report.record.errors.push(format!("Curator: {e}")));
    let mut jvm = match &classes {
        Ok(classes) => {
            let started = CuratorRecipeJvm::start(java, classes, settings.jvm_watchdog()).await;
            versus::curator(&mut report.record, started, CuratorRecipeJvm::describe)
        }
        Err(()) => None,
    };
    let connect = |kind| versus::connect(targets, kind);
    let s = settings;

    // One unmeasured run of each combination first (bounded by --warmup): the first writes to
    // a fresh server and the first calls into a cold JVM are slower, whoever makes them.
    if !s.warmup.is_zero() {
        for combo in Combo::ALL {
            let Some(addr) = connect(combo.server) else {
                continue;
            };
            let run = Run::new(s, combo, &addr, "warmup".into(), s.warmup);
            let counter = counter_run(&run, jvm.as_mut()).await;
            let queue = queue_run(&run, jvm.as_mut()).await;
            let handoff = handoff_run(&run, jvm.as_mut()).await;
            if let Err(e) = counter.and(queue.map(drop)).and(handoff.map(drop)) {
                println!("warm-up, {}: {e}", combo.label());
            }
        }
    }

    report.print_counter_header(s);
    for (trial, combo, addr) in runs(s.trials, targets) {
        let run = Run::new(s, combo, &addr, trial.to_string(), s.limit);
        let result = counter_run(&run, jvm.as_mut()).await;
        report.add_counter(combo, trial, result);
    }

    report.print_queue_header(s);
    for (trial, combo, addr) in runs(s.trials, targets) {
        let run = Run::new(s, combo, &addr, trial.to_string(), s.limit);
        let result = queue_run(&run, jvm.as_mut()).await;
        report.add_queue(combo, trial, result);
    }

    report.print_handoff_header(s);
    for (trial, combo, addr) in runs(s.trials, targets) {
        let run = Run::new(s, combo, &addr, trial.to_string(), s.limit);
        let result = handoff_run(&run, jvm.as_mut()).await;
        report.add_handoff(combo, trial, result);
    }
    if let Some(jvm) = jvm {
        jvm.stop().await;
    }

    if s.failovers > 0 {
        report.print_failover_header(s);
        failover::measure(s, targets, classes.as_ref().ok(), &mut report).await;
    }
    report
}

/// One run of one combination: its settings, its server, its name among the runs (a trial's
/// number, or `warmup`), and its bound.
struct Run<'a> {
    settings: &'a Settings,
    combo: Combo,
    addr: &'a str,
    name: String,
    limit: Duration,
}

impl<'a> Run<'a> {
    fn new(
        settings: &'a Settings,
        combo: Combo,
        addr: &'a str,
        name: String,
        limit: Duration,
    ) -> Run<'a> {
        Run {
            settings,
            combo,
            addr,
            name,
            limit,
        }
    }

    /// A fresh path for a `recipe` run, of its own for every combination and run.
    fn path(&self, recipe: &str) -> String {
        format!(
            "/lockkeeper-bench/{recipe}-{}-{}",
            self.combo.key(),
            self.name
        )
    }
}

/// One counter run of `combo` on a fresh counter, bounded by `limit`, its final value checked.
async fn counter_run(
    run: &Run<'_>,
    jvm: Option<&mut CuratorRecipeJvm>,
) -> Result<measure::Increments, BoxError> {
    let s = run.settings;
    let path = run.path("counter");
    let (sessions, increments, retry) = (s.counter_sessions, s.increments, s.counter_retry);
    let result = match (run.combo.client, jvm) {
        (Client::Lockkeeper, _) => {
            measure::counter(
                run.addr,
                &path,
                sessions,
                increments,
                retry,
                run.limit,
                s.connect_limit,
            )
            .await
        }
        (Client::Curator, Some(jvm)) => {
            jvm.counter(run.addr, &path, sessions, increments, retry, run.limit)
                .await
        }
        (Client::Curator, None) => Err("no Curator JVM".into()),
    };
    measure::check_counter(run.addr, &path, result?, s.connect_limit).await
}

/// One queue run of `combo` on a fresh queue, producing for at most `limit`; every item must
/// be consumed exactly once.
async fn queue_run(
    run: &Run<'_>,
    jvm: Option<&mut CuratorRecipeJvm>,
) -> Result<queue::Queued, BoxError> {
    let s = run.settings;
    let path = run.path("queue");
    match (run.combo.client, jvm) {
        (Client::Lockkeeper, _) => {
            queue::run(run.addr, &path, s.queue, run.limit, s.connect_limit).await
        }
        (Client::Curator, Some(jvm)) => jvm.queue(run.addr, &path, s.queue, run.limit).await,
        (Client::Curator, None) => Err("no Curator JVM".into()),
    }
}

/// One resign-handoff run of `combo` in a fresh election, bounded by `limit`.
async fn handoff_run(
    run: &Run<'_>,
    jvm: Option<&mut CuratorRecipeJvm>,
) -> Result<measure::Handoffs, BoxError> {
    let s = run.settings;
    let path = run.path("handoff");
    let (participants, handoffs) = (s.handoff_participants, s.handoffs);
    match (run.combo.client, jvm) {
        (Client::Lockkeeper, _) => {
            measure::handoff(
                run.addr,
                &path,
                participants,
                handoffs,
                run.limit,
                s.connect_limit,
            )
            .await
        }
        (Client::Curator, Some(jvm)) => {
            jvm.handoff(run.addr, &path, participants, handoffs, run.limit)
                .await
        }
        (Client::Curator, None) => Err("no Curator JVM".into()),
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::super::tests::{launcher, parse};
    use super::*;
    use lockkeeper_testkit::curator_classpath_unchecked;

    /// Settings for tests that only need their shape.
    pub(crate) fn settings() -> Settings {
        let args = parse(&["--recipes"]).expect("parse");
        Settings::from_args(
            &args.recipes,
            launcher(),
            &curator_classpath_unchecked(),
            Duration::from_secs(5),
            Duration::from_secs(2),
            Duration::from_secs(30),
        )
    }

    #[test]
    fn recipe_flags_parse_and_exclude_the_other_modes() {
        let args = parse(&["--recipes"]).expect("parse");
        let r = &args.recipes;
        assert!(r.recipes);
        assert_eq!(r.recipe_session_timeout, Duration::from_secs(4));
        assert_eq!((r.failovers, r.election_participants), (10, 3));
        assert_eq!((r.counter_sessions, r.increments), (8, 250));
        assert_eq!(r.counter_retry, CounterRetry::Spin);
        assert_eq!(
            (r.queue_producers, r.queue_consumers, r.queue_items),
            (4, 4, 2000)
        );
        assert_eq!((r.handoff_participants, r.handoffs), (3, 200));
        assert_eq!(r.recipe_trials, 5, "the median of at least 5 trials");
        assert!(!r.failover_all);
        assert_eq!(r.election_participant, None);
        let args = parse(&[
            "--recipes",
            "--failovers",
            "2",
            "--recipe-session-timeout",
            "6s",
            "--failover-all",
            "--counter-retry",
            "backoff",
        ])
        .expect("parse");
        assert_eq!(args.recipes.counter_retry, CounterRetry::Backoff);
        assert_eq!(args.recipes.failovers, 2);
        assert_eq!(args.recipes.recipe_session_timeout, Duration::from_secs(6));
        assert!(args.recipes.failover_all);
        assert!(!parse(&["--compare"]).expect("defaults").recipes.recipes);
        assert!(parse(&["--recipes", "--locks"]).is_err());
        assert!(parse(&["--recipes", "--compare"]).is_err());
        assert!(parse(&["--recipes", "--election-participants", "1"]).is_err());
        assert!(parse(&["--recipes", "--counter-sessions", "0"]).is_err());
        assert!(parse(&["--recipes", "--queue-items", "0"]).is_err());
        assert!(parse(&["--recipes", "--queue-consumers", "0"]).is_err());
        let args = parse(&[
            "--election-participant",
            "127.0.0.1:2181",
            "/e",
            "p-1",
            "60",
        ])
        .expect("parse");
        assert_eq!(
            args.recipes.election_participant.as_deref(),
            Some(&["127.0.0.1:2181", "/e", "p-1", "60"].map(String::from)[..])
        );
        assert!(parse(&["--election-participant", "127.0.0.1:2181", "/e"]).is_err());
    }

    #[test]
    fn failover_combos_default_to_the_two_compared() {
        let s = settings();
        assert_eq!(s.failover_combos, FAILOVER_COMBOS.to_vec());
        assert!(s.failover_limit() >= s.session_timeout * 2);
        let all = parse(&["--recipes", "--failover-all"]).expect("parse");
        let s = Settings::from_args(
            &all.recipes,
            launcher(),
            &curator_classpath_unchecked(),
            Duration::from_secs(5),
            Duration::from_secs(2),
            Duration::from_secs(30),
        );
        assert_eq!(s.failover_combos.len(), 4);
    }
}
