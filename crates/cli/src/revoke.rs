//! `lockkeeper revoke` (being built).

use std::process::ExitCode;

/// Arguments of `lockkeeper revoke`.
#[derive(clap::Args, Debug)]
pub struct RevokeArgs {
    #[command(flatten)]
    backend: crate::backend::BackendArgs,
    /// The lock path on ZooKeeper backends, the lock name on Redis.
    name: String,
}

/// Runs the command.
pub async fn run(args: RevokeArgs) -> ExitCode {
    eprintln!(
        "lockkeeper revoke: not available yet ({} on {})",
        args.name, args.backend.backend
    );
    crate::exit::code(crate::exit::SOFTWARE)
}
