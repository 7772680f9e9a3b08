//! `lockkeeper inspect` (being built).

use std::process::ExitCode;

/// Arguments of `lockkeeper inspect`.
#[derive(clap::Args, Debug)]
pub struct InspectArgs {
    #[command(flatten)]
    backend: crate::backend::BackendArgs,
    /// The lock path on ZooKeeper backends, the lock name on Redis.
    name: String,
}

/// Runs the command.
pub async fn run(args: InspectArgs) -> ExitCode {
    eprintln!(
        "lockkeeper inspect: not available yet ({} on {})",
        args.name, args.backend.backend
    );
    crate::exit::code(crate::exit::SOFTWARE)
}
