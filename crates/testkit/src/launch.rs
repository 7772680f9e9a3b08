//! Starting a server program on a free loopback port: the loop redis-server, PostgreSQL and the
//! fault-injection suite's Keeper process share.
//!
//! A free port is only free when it is picked; another process can take it before the server
//! binds. So the server is started, polled until it serves, and if it exited because the port
//! was taken (its log says so) it is started again on another port, a bounded number of times.
//! Any other failure is reported at once with the end of the server's log.

use std::fs;
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use crate::child::{kill_and_reap, tail};
use crate::ports::try_free_port;

/// How many ports are tried before giving up.
const ATTEMPTS: usize = 4;
/// How long a server may take to serve after it was spawned.
const TIMEOUT: Duration = Duration::from_secs(30);

/// What to start, for [`on_free_port`].
pub struct Launch<'a> {
    /// The server's name in errors (`"redis-server"`, `"PostgreSQL"`).
    pub name: &'a str,
    /// Where its stdout and stderr go; read back when it fails.
    pub log: &'a Path,
    /// Log texts that mean the port was taken, so another one is tried.
    pub port_taken: &'a [&'a str],
    /// What not serving in time is called in the error (`"no PONG"`, `"not ready"`).
    pub not_ready: &'a str,
}

/// Starts `command(port)` on a free port (its stdout and stderr sent to `launch.log`) until
/// `ready(port)` says it serves; the child and its port.
pub fn on_free_port(
    launch: &Launch<'_>,
    mut command: impl FnMut(u16) -> Command,
    ready: impl Fn(u16) -> bool,
) -> Result<(Child, u16), String> {
    let mut failures = Vec::new();
    for _ in 0..ATTEMPTS {
        let port = try_free_port().map_err(|e| e.to_string())?;
        match start(launch, port, command(port), &ready) {
            Ok(child) => return Ok((child, port)),
            Err(Failed::PortTaken) => failures.push(format!("port {port} was taken")),
            Err(Failed::Other(why)) => return Err(why),
        }
    }
    Err(format!(
        "{} did not start after {ATTEMPTS} attempts: {}",
        launch.name,
        failures.join("; ")
    ))
}

/// Starts `command` on `port`, which the server must have (a restart on the address clients
/// know), and waits until `ready(port)`; the child, or why it did not serve with its log's end.
pub fn on_port(
    launch: &Launch<'_>,
    port: u16,
    command: Command,
    ready: impl Fn(u16) -> bool,
) -> Result<Child, String> {
    start(launch, port, command, &ready).map_err(|failed| match failed {
        Failed::PortTaken => format!("{} on 127.0.0.1:{port}: the port is taken", launch.name),
        Failed::Other(why) => why,
    })
}

/// Why a start did not serve.
enum Failed {
    /// The log says the port was taken: another port may do.
    PortTaken,
    /// Anything else, said with the end of the log.
    Other(String),
}

fn start(
    launch: &Launch<'_>,
    port: u16,
    mut command: Command,
    ready: &impl Fn(u16) -> bool,
) -> Result<Child, Failed> {
    let (out, err) = fs::File::create(launch.log)
        .and_then(|log| Ok((log.try_clone()?, log)))
        .map_err(|e| {
            Failed::Other(format!(
                "create the {} log {}: {e}",
                launch.name,
                launch.log.display()
            ))
        })?;
    let mut child = command
        .stdout(out)
        .stderr(err)
        .spawn()
        .map_err(|e| Failed::Other(format!("spawn {:?}: {e}", command.get_program())))?;
    let started = Instant::now();
    let why = loop {
        if let Ok(Some(status)) = child.try_wait() {
            break format!("exited ({status})");
        }
        if ready(port) {
            return Ok(child);
        }
        if started.elapsed() > TIMEOUT {
            kill_and_reap(&mut child);
            break format!("{} within {TIMEOUT:?}", launch.not_ready);
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let log = fs::read_to_string(launch.log).unwrap_or_default();
    if launch.port_taken.iter().any(|taken| log.contains(taken)) {
        return Err(Failed::PortTaken);
    }
    Err(Failed::Other(format!(
        "{} on 127.0.0.1:{port} {why}; log:\n{}",
        launch.name,
        tail(&log, 40)
    )))
}
