//! Naming a backend: `--backend URL` or `LOCKKEEPER_BACKEND`, shared by every operator command.

/// The backend option every operator command flattens into its arguments.
#[derive(clap::Args, Debug, Clone)]
pub struct BackendArgs {
    /// The coordination backend: zk://host:port[,host:port...][/chroot], redis://host:port,
    /// redis+sentinel://host:port[,host:port...]/MASTER, redis+cluster://host:port[,...].
    #[arg(
        long,
        env = "LOCKKEEPER_BACKEND",
        default_value = "zk://127.0.0.1:2181"
    )]
    pub backend: String,
}
