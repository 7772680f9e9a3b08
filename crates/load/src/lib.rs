//! The load generator shared by `lockkeeper bench --connect` (in the installed command) and the
//! comparison harness `lockkeeper-bench`: the workloads, the pipelined driver that sends them over
//! the ZooKeeper client protocol, the figures and how they are printed and written as JSON, and
//! the `/proc` readings of a server's memory and CPU time.
//!
//! Nothing here starts a process: whatever server is measured was started by someone else (the
//! operator, or `lockkeeper-bench`). Every run is bounded by a deadline and a request budget, and
//! every wait for a server by a timeout.

pub mod args;
pub mod driver;
pub mod procfs;
pub mod stats;
pub mod workload;

use std::path::PathBuf;

use stats::Json;

pub use args::{LoadArgs, parse_duration};

/// Error type of the benchmarks: messages are written for the person at the terminal.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Writes `json` to `path` when one was given (`--json`), and says where on stderr.
pub fn write_json(path: Option<&PathBuf>, json: &Json) -> Result<(), BoxError> {
    if let Some(path) = path {
        std::fs::write(path, json.render())
            .map_err(|e| format!("writing {}: {e}", path.display()))?;
        eprintln!("results written to {}", path.display());
    }
    Ok(())
}

/// Resolves on Ctrl-C, SIGTERM or SIGHUP with the signal's name.
pub async fn interrupted() -> &'static str {
    async fn ctrl_c() {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        async fn wait(kind: SignalKind) {
            match signal(kind) {
                Ok(mut s) => {
                    s.recv().await;
                }
                Err(_) => std::future::pending::<()>().await,
            }
        }
        tokio::select! {
            _ = ctrl_c() => "Ctrl-C",
            _ = wait(SignalKind::terminate()) => "SIGTERM",
            _ = wait(SignalKind::hangup()) => "SIGHUP",
        }
    }
    #[cfg(not(unix))]
    {
        ctrl_c().await;
        "Ctrl-C"
    }
}
