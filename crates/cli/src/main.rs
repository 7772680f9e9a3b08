//! The `lockkeeper` command: run a Keeper server, measure one, and the operator's commands
//! (`lock`, `elect`, `inspect`, `revoke`) on any backend.
//!
//! `serve`, `verify` and `bench` exit 0 or 1. The operator commands exit with the codes in
//! [`exit`], which scripts match on; a usage error exits 64 for every subcommand.

mod backend;
mod bench;
#[cfg(test)]
mod documented;
mod elect;
mod exit;
mod inspect;
mod lock;
mod loss;
mod revoke;
mod run;
mod serve;
mod shell;
mod systemd;
mod verify;

use clap::{CommandFactory, Parser, Subcommand};

/// Distributed locks and coordination: a ZooKeeper-compatible server and tools around it.
#[derive(Parser, Debug)]
#[command(name = "lockkeeper", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run Keeper, a coordination server that ZooKeeper clients (Curator, kazoo, zkCli,
    /// zookeeper-client) connect to unchanged.
    Serve(serve::ServeArgs),
    /// Check a data directory offline (snapshots and transaction log), changing nothing.
    Verify(verify::VerifyArgs),
    /// Load-test any running ZooKeeper-protocol server (comparisons that start their own servers
    /// are lockkeeper-bench's).
    Bench(bench::BenchArgs),
    /// Run a command while holding a lock (or hold it until interrupted). Exit codes: the
    /// child's (128 + N when it died of signal N, or a wait was interrupted by signal N); 64
    /// usage; 69 backend unreachable (also when --timeout passed with it unreachable); 70
    /// internal failure; 75 not acquired (--try, --timeout); 76 the lock was lost, or its
    /// revocation requested, while the child ran.
    Lock(lock::LockArgs),
    /// Join a leader election and run a command while leader, or watch who leads (--listen).
    Elect(elect::ElectArgs),
    /// Show a lock's holders and waiters: owner session, age, fencing token, data, kind.
    Inspect(inspect::InspectArgs),
    /// Ask a lock's holder to release it, or with --force delete its node after a grace period.
    Revoke(revoke::RevokeArgs),
    /// Print a completion script for SHELL (bash, zsh, fish, elvish, powershell); e.g.
    /// `lockkeeper completions bash > /etc/bash_completion.d/lockkeeper`.
    Completions(shell::CompletionsArgs),
    /// Print the manual page lockkeeper(1), or with --dir write it and one page per subcommand.
    Man(shell::ManArgs),
}

fn main() -> std::process::ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // Help and version go to stdout and succeed; anything else is a usage error,
            // which the operator commands promise to report as 64 (clap's own code is 2).
            let _ = e.print();
            return if e.use_stderr() {
                exit::code(exit::USAGE)
            } else {
                std::process::ExitCode::SUCCESS
            };
        }
    };
    let cli = match cli.command {
        // Offline and synchronous: no logging setup or runtime needed.
        Command::Verify(args) => return verify::run(args),
        Command::Completions(args) => {
            return printed(shell::completions(
                &args,
                Cli::command(),
                &mut std::io::stdout(),
            ));
        }
        Command::Man(args) => {
            return printed(shell::man(&args, Cli::command(), &mut std::io::stdout()));
        }
        command => Cli { command },
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(
                |_| // The ZooKeeper client used by `bench` logs every connection at info.
                tracing_subscriber::EnvFilter::new("info,lockkeeper_zk_client=error"),
            ),
        )
        .with_writer(std::io::stderr)
        // Colour only on a terminal: in a log file escape codes split `key=value` apart.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("lockkeeper: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    runtime.block_on(async {
        let result = match cli.command {
            Command::Serve(args) => serve::run(args).await,
            // Reports its own errors: a mode that moved to lockkeeper-bench is a usage error.
            Command::Bench(args) => return bench::run(args).await,
            Command::Verify(_) | Command::Completions(_) | Command::Man(_) => Ok(()),
            // The operator commands report their own errors, each with its exit code.
            Command::Lock(args) => return lock::run(args).await,
            Command::Elect(args) => return elect::run(args).await,
            Command::Inspect(args) => return inspect::run(args).await,
            Command::Revoke(args) => return revoke::run(args).await,
        };
        match result {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("lockkeeper: {e}");
                std::process::ExitCode::FAILURE
            }
        }
    })
}

/// The exit of a command that only prints: 0, or 1 with the error (a closed pipe included).
fn printed(result: std::io::Result<()>) -> std::process::ExitCode {
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lockkeeper: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
