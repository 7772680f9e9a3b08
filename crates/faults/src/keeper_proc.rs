//! Keeper as a process of its own (this binary's `keeper` subcommand), so the suite's server
//! fault on Keeper is a SIGKILL, as it is on Apache ZooKeeper and redis-server, and not an
//! orderly in-process shutdown.
//!
//! Invariants:
//! - The server keeps its defaults where they matter to a crash: `--sync always` (every
//!   acknowledged write is on disk before the reply), 2 s ticks.
//! - A restart reuses the port and the data directory, so clients reconnect to the same address
//!   and find the state the killed server had acknowledged.
//! - The process dies with the orchestrator (`die_with_parent`) and is SIGKILLed and reaped on
//!   drop; only this PID is ever signalled. The kernel ties that parent-death signal to the
//!   spawning *thread*, so start and restart must be called from a thread that lives as long as
//!   the program, never from `spawn_blocking`.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use lockkeeper_server::Config;
use lockkeeper_testkit::{Launch, die_with_parent, on_free_port, on_port, try_four_letter_word};
use tempfile::TempDir;

use crate::netns::Net;
use crate::shim::ServerClock;

/// What the `keeper` subcommand prints once it serves.
const SERVING: &str = "lockkeeper-faults keeper serving on";

/// The configuration the `keeper` subcommand serves with.
pub(crate) fn config(listen: SocketAddr, data_dir: PathBuf) -> Config {
    Config {
        listen,
        data_dir,
        tick_time: Duration::from_millis(2000),
        four_letter_words: vec!["*".to_string()],
        ..Config::default()
    }
}

/// Runs Keeper until the process is killed (the `keeper` subcommand).
pub(crate) async fn serve(listen: SocketAddr, data_dir: PathBuf) -> Result<(), String> {
    let server = lockkeeper_server::Server::start(config(listen, data_dir.clone()))
        .await
        .map_err(|e| format!("Keeper on {listen} ({}): {e}", data_dir.display()))?;
    println!("{SERVING} {}", server.local_addr());
    // Only a signal ends it: the suite's fault is SIGKILL, its end of run SIGKILL too.
    std::future::pending::<()>().await;
    Ok(())
}

/// A Keeper child process on a loopback port, or on a host of its own.
pub(crate) struct KeeperProcess {
    exe: PathBuf,
    /// The wall clock it follows, across restarts too.
    clock: Option<ServerClock>,
    /// The namespace it runs in and its host there; `None`: loopback.
    host: Option<(Arc<Net>, usize)>,
    data: TempDir,
    port: u16,
    child: Child,
}

/// The port Keeper listens on in a namespace of its own (where every port is free).
const NETNS_PORT: u16 = 2181;

/// The server's log and data directory, inside the process's temporary directory.
const LOG: &str = "keeper.log";
const DATA: &str = "data";

/// How testkit's launcher starts and watches it.
fn launch(log: &Path) -> Launch<'_> {
    Launch {
        name: "Keeper",
        log,
        port_taken: &["Address already in use"],
        not_ready: "no imok",
    }
}

fn is_serving(ip: Ipv4Addr, port: u16) -> bool {
    let addr = SocketAddr::new(IpAddr::V4(ip), port);
    try_four_letter_word(addr, "ruok", Duration::from_millis(500))
        .is_ok_and(|answer| answer == "imok")
}

impl KeeperProcess {
    /// Starts `exe keeper` on a free port and a fresh data directory, following `clock` if
    /// given; returns once it serves.
    pub(crate) fn start(exe: &Path, clock: Option<ServerClock>) -> Result<KeeperProcess, String> {
        let (data, log, store) = data_dir()?;
        let (child, port) = on_free_port(
            &launch(&log),
            |port| command(exe, clock.as_ref(), None, port, &store),
            |port| is_serving(Ipv4Addr::LOCALHOST, port),
        )?;
        Ok(KeeperProcess {
            exe: exe.to_path_buf(),
            clock,
            host: None,
            data,
            port,
            child,
        })
    }

    /// Starts `exe keeper` in `host`'s namespace of `net`, on its address; returns once it
    /// serves.
    pub(crate) fn start_in(
        exe: &Path,
        net: Arc<Net>,
        host: usize,
    ) -> Result<KeeperProcess, String> {
        let (data, log, store) = data_dir()?;
        let placed = Some((net.clone(), host));
        let ip = net.addr(host);
        let child = on_port(
            &launch(&log),
            NETNS_PORT,
            command(exe, None, placed.as_ref(), NETNS_PORT, &store),
            |port| is_serving(ip, port),
        )?;
        Ok(KeeperProcess {
            exe: exe.to_path_buf(),
            clock: None,
            host: placed,
            data,
            port: NETNS_PORT,
            child,
        })
    }

    /// The server's data directory (its transaction log and snapshots).
    pub(crate) fn data_dir(&self) -> PathBuf {
        self.data.path().join(DATA)
    }

    /// `IP:PORT`: loopback, or the address of its host.
    pub(crate) fn connect_string(&self) -> String {
        format!("{}:{}", self.ip(), self.port)
    }

    fn ip(&self) -> Ipv4Addr {
        self.host
            .as_ref()
            .map_or(Ipv4Addr::LOCALHOST, |(net, host)| net.addr(*host))
    }

    /// SIGKILLs the server and starts it again on the same port and data directory; returns
    /// once it serves.
    pub(crate) fn kill_and_restart(&mut self) -> Result<(), String> {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let log = self.data.path().join(LOG);
        let command = command(
            &self.exe,
            self.clock.as_ref(),
            self.host.as_ref(),
            self.port,
            &self.data.path().join(DATA),
        );
        let ip = self.ip();
        self.child = on_port(&launch(&log), self.port, command, |port| {
            is_serving(ip, port)
        })?;
        Ok(())
    }
}

/// A fresh temporary directory for one Keeper process: the directory, its log and its data
/// directory.
fn data_dir() -> Result<(TempDir, PathBuf, PathBuf), String> {
    let data = tempfile::Builder::new()
        .prefix("lockkeeper-faults-keeper-")
        .tempdir()
        .map_err(|e| format!("a data directory for Keeper: {e}"))?;
    let (log, store) = (data.path().join(LOG), data.path().join(DATA));
    Ok((data, log, store))
}

fn command(
    exe: &Path,
    clock: Option<&ServerClock>,
    host: Option<&(Arc<Net>, usize)>,
    port: u16,
    data_dir: &Path,
) -> Command {
    let mut command = Command::new(exe);
    if let Some(clock) = clock {
        clock.apply(&mut command);
    }
    let ip = host.map_or(Ipv4Addr::LOCALHOST, |(net, host)| net.addr(*host));
    if let Some((net, host)) = host
        && let Err(err) = net.enter(*host, &mut command)
    {
        // The launcher reports the spawn failing; say why first.
        eprintln!("Keeper's namespace: {err}");
    }
    command
        .arg("keeper")
        .arg("--listen")
        .arg(format!("{ip}:{port}"))
        .arg("--data-dir")
        .arg(data_dir)
        .stdin(Stdio::null());
    die_with_parent(&mut command);
    command
}

impl Drop for KeeperProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
