//! `lockkeeper lock` (being built).

use std::process::ExitCode;

/// Arguments of `lockkeeper lock`.
#[derive(clap::Args, Debug)]
pub struct LockArgs {
    #[command(flatten)]
    backend: crate::backend::BackendArgs,
    /// The lock path on ZooKeeper backends, the lock name on Redis.
    name: String,
}

/// Runs the command.
pub async fn run(args: LockArgs) -> ExitCode {
    eprintln!(
        "lockkeeper lock: not available yet ({} on {})",
        args.name, args.backend.backend
    );
    crate::exit::code(crate::exit::SOFTWARE)
}
