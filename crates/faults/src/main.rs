//! `lockkeeper-faults`: the fault-injection suite.
//!
//! Without a subcommand it is the orchestrator: for each scenario (backend x lock kind x
//! fault) it starts the backend (once per backend), a resource server and three client
//! processes (this binary's `client` subcommand), injects the fault, and prints one row of the
//! table. With `client` it is one of those clients; with `keeper`, the Keeper server the suite
//! SIGKILLs and restarts.
//!
//! Invariants: every run is bounded in time (scenario length plus the fault's own bounded
//! length, warm-up bounded); the run's seed is printed first, and `--seed N --only PATTERN`
//! replays a scenario with the same client seeds; only 127.0.0.1 is bound; only processes the
//! run started are signalled.

mod admission;
mod backend;
mod barrier_run;
mod cache_run;
mod check;
mod cli_client;
mod client;
mod clock;
mod counter_run;
mod delay;
mod fences;
mod keeper_proc;
mod kind;
mod netns;
mod process;
mod queue_run;
mod recipes;
mod report;
mod resource;
mod scenario;
mod shim;
mod two_phase_run;
mod verdict;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

use crate::backend::Backend;
use crate::kind::{Endpoint, Kind};

#[derive(Parser, Debug)]
#[command(
    name = "lockkeeper-faults",
    about = "Fault injection on every lock backend"
)]
struct Cli {
    /// Every scenario, 5 s each plus the fault's own length (the default is the short run: a
    /// few scenarios, 2 s each).
    #[arg(long)]
    full: bool,
    /// The run's seed (random when absent; printed either way).
    #[arg(long)]
    seed: Option<u64>,
    /// Only the scenarios named BACKEND, BACKEND/LOCK or BACKEND/LOCK/FAULT (repeatable), from
    /// the full list.
    #[arg(long)]
    only: Vec<String>,
    /// Each scenario's length in seconds before the fault's own length (overrides the
    /// default of --full or the short run).
    #[arg(long)]
    length: Option<u64>,
    /// Also write the results as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Sub>,
}

#[derive(Subcommand, Debug)]
enum Sub {
    /// One lock client (started by the orchestrator).
    Client {
        /// zk://..., redis://..., redis+sentinel://MASTER@..., redlock://..., etcd://...
        #[arg(long)]
        backend: String,
        /// mutex, rwlock-write, semaphore-1, leader, lease-lock, reentrant, redlock
        #[arg(long)]
        kind: String,
        /// The lock's name (a path on ZooKeeper).
        #[arg(long)]
        lock: String,
        /// The resource server, 127.0.0.1:PORT.
        #[arg(long)]
        resource: SocketAddr,
        /// This client's name at the resource.
        #[arg(long)]
        name: String,
        /// Seeds the sleeps between writes.
        #[arg(long)]
        seed: u64,
        /// Stop after this many milliseconds.
        #[arg(long)]
        run_for_ms: u64,
    },
    /// One leader's work under `lockkeeper elect` (started by a `cli-elect` client through
    /// it): enter the resource with `LOCKKEEPER_FENCING_TOKEN`, write, exit.
    Term {
        /// The resource server, IP:PORT.
        #[arg(long)]
        resource: SocketAddr,
        /// The client's name at the resource.
        #[arg(long)]
        name: String,
        /// Seeds the sleeps between writes.
        #[arg(long)]
        seed: u64,
    },
    /// Holds the packets of a netfilter queue for a latency, then lets them through (started
    /// by the orchestrator inside a host's namespace, for a slow network).
    Delay {
        /// The netfilter queue number.
        #[arg(long, default_value_t = 0)]
        queue: u16,
        /// Milliseconds each packet is held.
        #[arg(long)]
        latency_ms: u64,
        /// Up to this many milliseconds more, at random.
        #[arg(long, default_value_t = 0)]
        jitter_ms: u64,
    },
    /// Prints the table of runs' `--json` files (their rows one after another), as docs/safety.md
    /// shows it.
    Report {
        /// The `--json` files of runs.
        #[arg(required = true)]
        json: Vec<PathBuf>,
    },
    /// Keeper as a process of its own, so its server fault is a SIGKILL (started by the
    /// orchestrator; runs until killed).
    Keeper {
        /// 127.0.0.1:PORT.
        #[arg(long)]
        listen: SocketAddr,
        /// The data directory (transaction log and snapshots).
        #[arg(long)]
        data_dir: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("lockkeeper-faults: tokio runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    match cli.command {
        Some(Sub::Client {
            backend,
            kind,
            lock,
            resource,
            name,
            seed,
            run_for_ms,
        }) => {
            let args = match (Endpoint::parse(&backend), Kind::parse(&kind)) {
                (Ok(endpoint), Ok(kind)) => client::ClientArgs {
                    endpoint,
                    kind,
                    lock,
                    resource,
                    name,
                    seed,
                    run_for: Duration::from_millis(run_for_ms),
                },
                (Err(err), _) | (_, Err(err)) => {
                    eprintln!("lockkeeper-faults client: {err}");
                    return ExitCode::from(64);
                }
            };
            match runtime.block_on(client::run(args)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(err) => {
                    eprintln!("lockkeeper-faults client: {err}");
                    ExitCode::FAILURE
                }
            }
        }
        Some(Sub::Term {
            resource,
            name,
            seed,
        }) => match runtime.block_on(cli_client::term(resource, &name, seed)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(err) => {
                eprintln!("lockkeeper-faults term: {err}");
                ExitCode::FAILURE
            }
        },
        Some(Sub::Delay {
            queue,
            latency_ms,
            jitter_ms,
        }) => match delay::run(
            queue,
            Duration::from_millis(latency_ms),
            Duration::from_millis(jitter_ms),
        ) {
            Ok(()) => ExitCode::SUCCESS,
            Err(err) => {
                eprintln!("lockkeeper-faults delay: queue {queue}: {err}");
                ExitCode::FAILURE
            }
        },
        Some(Sub::Keeper { listen, data_dir }) => {
            match runtime.block_on(keeper_proc::serve(listen, data_dir)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(err) => {
                    eprintln!("lockkeeper-faults keeper: {err}");
                    ExitCode::FAILURE
                }
            }
        }
        Some(Sub::Report { json }) => {
            let mut rows = Vec::new();
            for path in &json {
                let parsed = std::fs::read_to_string(path)
                    .map_err(|e| e.to_string())
                    .and_then(|text| {
                        serde_json::from_str::<serde_json::Value>(&text).map_err(|e| e.to_string())
                    });
                match parsed {
                    Ok(run) => match run["rows"].as_array() {
                        Some(more) => rows.extend(more.iter().cloned()),
                        None => {
                            eprintln!("{}: no \"rows\" array: not a --json file", path.display());
                            return ExitCode::from(65);
                        }
                    },
                    Err(err) => {
                        eprintln!("{}: {err}", path.display());
                        return ExitCode::from(66);
                    }
                }
            }
            print!("{}", report::markdown(&rows));
            ExitCode::SUCCESS
        }
        None => {
            // The fences' own stores, one set for the whole run (each scenario has its own
            // resource), started from this long-lived thread: a server's parent-death signal
            // is tied to the thread that spawned it.
            let stores = fences::Stores::start();
            runtime.block_on(orchestrate(cli, &stores))
        }
    }
}

async fn orchestrate(cli: Cli, stores: &fences::Stores) -> ExitCode {
    let seed = cli.seed.unwrap_or_else(rand::random);
    let scenarios = if !cli.only.is_empty() {
        let picked: Vec<_> = scenario::all()
            .into_iter()
            .filter(|s| cli.only.iter().any(|p| s.matches(p)))
            .collect();
        if picked.is_empty() {
            let names: Vec<String> = scenario::all().iter().map(ToString::to_string).collect();
            eprintln!(
                "--only {:?} names no scenario; they are:\n{}",
                cli.only,
                names.join("\n")
            );
            return ExitCode::from(64);
        }
        picked
    } else if cli.full {
        scenario::all()
    } else {
        scenario::short()
    };
    // Namespaced rows need CAP_NET_ADMIN: said once, and skipped (never passed) without it.
    let scenarios = if scenarios.iter().any(|s| s.backend.is_netns()) {
        match netns::Net::create(0) {
            Ok(_) => scenarios,
            Err(err) => {
                println!(
                    "network namespaces cannot be created here ({err}): the {} rows are skipped",
                    scenarios.iter().filter(|s| s.backend.is_netns()).count()
                );
                scenarios
                    .into_iter()
                    .filter(|s| !s.backend.is_netns())
                    .collect()
            }
        }
    } else {
        scenarios
    };
    // The `cli-elect` rows run the `lockkeeper` binary: said once, and skipped without it.
    let scenarios = if scenarios.iter().any(|s| s.kind == Kind::CliElect)
        && cli_client::lockkeeper_binary().is_none()
    {
        println!(
            "no `lockkeeper` binary beside this one (cargo build -p lockkeeper-cli, with the \
             same profile): the {} cli-elect rows are skipped",
            scenarios
                .iter()
                .filter(|s| s.kind == Kind::CliElect)
                .count()
        );
        scenarios
            .into_iter()
            .filter(|s| s.kind != Kind::CliElect)
            .collect()
    } else {
        scenarios
    };
    let length = Duration::from_secs(cli.length.unwrap_or(if cli.full { 5 } else { 2 }));
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(err) => {
            eprintln!("lockkeeper-faults: where is this binary? {err}");
            return ExitCode::FAILURE;
        }
    };
    println!(
        "seed {seed}: {} scenarios of {length:?} each (replay one with --seed {seed} --only BACKEND/LOCK/FAULT)",
        scenarios.len()
    );
    let mut rows = Vec::new();
    let mut backend: Option<Backend> = None;
    for scenario in scenarios {
        // One backend per run of consecutive scenarios on it (the list is grouped by backend).
        if backend.as_ref().map(Backend::kind) != Some(scenario.backend) {
            drop(backend.take());
            backend = Some(Backend::start(scenario.backend, &exe).await);
        }
        let Some(current) = backend.as_mut() else {
            unreachable!("started above")
        };
        let scenario_seed = scenario.seed(seed);
        let row = scenario::run(&exe, current, stores, scenario, scenario_seed, length).await;
        let stale = &row.counts.stale;
        println!(
            "{scenario}: {} operations, {} overlaps, stale writes {} attempted ({} careful), {} refused, {} accepted by local/redis/pg/sqlite/zk, {:.1} s max unavailable: {} (seed {scenario_seed}, {:.1} s)",
            row.counts.turns,
            row.counts.overlaps,
            stale.attempted,
            stale.attempted_careful,
            stale.refused,
            if row.counts.fenced {
                format!("{:?}", stale.accepted)
            } else {
                "n/a".into()
            },
            row.counts.max_gap.as_secs_f64(),
            verdict::judge(&row).word(),
            row.took.as_secs_f64()
        );
        for note in &row.notes {
            println!("{scenario}: {note}");
        }
        rows.push(row);
    }
    drop(backend);
    print!("\n{}", report::table(&rows));
    if let Some(path) = cli.json {
        let text = report::json(seed, &rows).to_string();
        if let Err(err) = std::fs::write(&path, text) {
            eprintln!("--json {}: {err}", path.display());
            return ExitCode::FAILURE;
        }
    }
    let failed: Vec<String> = rows
        .iter()
        .filter_map(|row| {
            let verdict = verdict::judge(row);
            verdict
                .fails()
                .then(|| format!("{}: {}", row.scenario, verdict.word()))
        })
        .collect();
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        eprintln!(
            "lockkeeper-faults: {} of {} scenarios failed:\n{}",
            failed.len(),
            rows.len(),
            failed.join("\n")
        );
        ExitCode::FAILURE
    }
}
