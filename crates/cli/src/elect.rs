//! `lockkeeper elect` (being built).

use std::process::ExitCode;

/// Arguments of `lockkeeper elect`.
#[derive(clap::Args, Debug)]
pub struct ElectArgs {
    #[command(flatten)]
    backend: crate::backend::BackendArgs,
    /// The lock path on ZooKeeper backends, the lock name on Redis.
    name: String,
}

/// Runs the command.
pub async fn run(args: ElectArgs) -> ExitCode {
    eprintln!(
        "lockkeeper elect: not available yet ({} on {})",
        args.name, args.backend.backend
    );
    crate::exit::code(crate::exit::SOFTWARE)
}
