//! The `lockkeeper` command: run a Keeper server, or measure one.

mod bench;
mod serve;
mod verify;

use clap::{Parser, Subcommand};

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
    /// Load-test any ZooKeeper-protocol server, or compare Keeper with Apache ZooKeeper.
    Bench(bench::BenchArgs),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let cli = match cli.command {
        // Offline and synchronous: no logging setup or runtime needed.
        Command::Verify(args) => return verify::run(args),
        command => Cli { command },
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(
                |_| // The ZooKeeper client used by `bench` logs every connection at info.
                tracing_subscriber::EnvFilter::new("info,zookeeper_client=error"),
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
    let result = runtime.block_on(async {
        match cli.command {
            Command::Serve(args) => serve::run(args).await,
            Command::Bench(args) => bench::run(args).await,
            Command::Verify(_) => Ok(()),
        }
    });
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lockkeeper: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
