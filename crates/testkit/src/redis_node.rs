//! A redis-server that a test can crash and bring back on the same port and data directory.
//!
//! [`RedisServer`](crate::RedisServer) is the throwaway server most tests want. Fault-injection
//! tests (Redlock's crash-restart scenario, failover) need more: kill a node the way a power cut
//! would (SIGKILL, nothing flushed that was not flushed already), start it again where clients
//! expect it, and choose whether it kept its data: without persistence it comes back empty;
//! with `appendonly yes` + `appendfsync always` it replays every acknowledged write.
//!
//! The process helpers here ([`spawn_redis`]) are shared with the cluster and Sentinel set-ups.

use std::ffi::OsString;
use std::fs;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::child::{guarded_command, kill_and_reap, tail};
use crate::host::{Host, command_on};
use crate::ports::free_port;
use crate::resp::{self, Reply};
use crate::tools::find_on_path;

const START_TIMEOUT: Duration = Duration::from_secs(30);
const START_ATTEMPTS: usize = 4;
const LOG_FILE: &str = "redis.log";

/// How a [`RedisNode`] keeps its data across a crash.
///
/// ```
/// use lockkeeper_testkit::NodeOptions;
/// let durable = NodeOptions::new().durable(true).arg("--maxmemory").arg("64mb");
/// assert!(durable.is_durable());
/// ```
#[derive(Clone, Debug, Default)]
pub struct NodeOptions {
    durable: bool,
    /// A host of its own (a network namespace), or `None` on loopback.
    host: Option<Host>,
    args: Vec<String>,
    env: Vec<(OsString, OsString)>,
}

impl NodeOptions {
    /// No persistence (`--save "" --appendonly no`), like [`RedisServer`](crate::RedisServer).
    pub fn new() -> NodeOptions {
        NodeOptions::default()
    }

    /// `true`: `--appendonly yes --appendfsync always`, so every write the server acknowledged
    /// is on disk and survives SIGKILL; `false` (the default): nothing is persisted.
    pub fn durable(mut self, durable: bool) -> NodeOptions {
        self.durable = durable;
        self
    }

    /// One more command-line argument for redis-server (e.g. `--cluster-enabled`, `yes`).
    pub fn arg(mut self, arg: impl Into<String>) -> NodeOptions {
        self.args.push(arg.into());
        self
    }

    /// One more environment variable for redis-server, kept across restarts: how a test
    /// preloads a library into the server (e.g. the fault suite's wall-clock shim).
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> NodeOptions {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Runs the node on `host` (a network namespace the caller made), listening on its
    /// address instead of 127.0.0.1.
    pub fn on(mut self, host: Host) -> NodeOptions {
        self.host = Some(host);
        self
    }

    /// The address a server with these options listens on.
    pub(crate) fn ip(&self) -> Ipv4Addr {
        self.host
            .as_ref()
            .map_or(Ipv4Addr::LOCALHOST, |host| host.ip)
    }

    /// Whether writes survive a crash.
    pub fn is_durable(&self) -> bool {
        self.durable
    }

    fn persistence_args(&self) -> Vec<String> {
        let args: &[&str] = if self.durable {
            &[
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
            ]
        } else {
            &["--save", "", "--appendonly", "no"]
        };
        args.iter().map(ToString::to_string).collect()
    }
}

/// A redis-server on a fixed loopback port and data directory that can be killed and
/// restarted; killed (by its PID) when dropped.
///
/// ```no_run
/// use lockkeeper_testkit::{NodeOptions, RedisNode};
/// let node = RedisNode::start_with(NodeOptions::new().durable(true));
/// // ... write through node.url() ...
/// node.kill(); // a crash: SIGKILL
/// node.restart(); // same port, same directory: the append-only file is replayed
/// ```
pub struct RedisNode {
    child: Mutex<Option<Child>>,
    port: u16,
    dir: TempDir,
    options: NodeOptions,
}

impl RedisNode {
    /// Starts a node without persistence on a free 127.0.0.1 port.
    pub fn start() -> RedisNode {
        RedisNode::start_with(NodeOptions::new())
    }

    /// Starts a node with `options` on a free 127.0.0.1 port; returns once it answers `PING`.
    pub fn start_with(options: NodeOptions) -> RedisNode {
        let dir = tempfile::Builder::new()
            .prefix("lockkeeper-redis-node-")
            .tempdir()
            .expect("create a temporary directory for redis-server");
        let mut failures = Vec::new();
        for _ in 0..START_ATTEMPTS {
            let port = free_port();
            let args = node_args(port, dir.path(), &options);
            let log = dir.path().join(LOG_FILE);
            match spawn_redis_with(dir.path(), &args, &options, port, &log) {
                Ok(child) => {
                    return RedisNode {
                        child: Mutex::new(Some(child)),
                        port,
                        dir,
                        options,
                    };
                }
                Err(SpawnError::PortTaken) => failures.push(format!("port {port} was taken")),
                Err(SpawnError::Failed(why)) => panic!("redis-server on port {port}: {why}"),
            }
        }
        panic!(
            "redis-server did not start after {START_ATTEMPTS} attempts: {}",
            failures.join("; ")
        );
    }

    /// Kills the server with SIGKILL (a crash: no shutdown save, no flush) and reaps it.
    /// Does nothing if it is not running.
    pub fn kill(&self) {
        if let Some(mut child) = self.lock_child().take() {
            kill_and_reap(&mut child);
        }
    }

    /// Kills the server if it runs, then starts it again on the same port and directory with
    /// the same options; returns once it answers `PING`. A durable node has replayed its
    /// append-only file by then (Redis answers `-LOADING` until it has, not `PONG`).
    pub fn restart(&self) {
        self.kill();
        let args = node_args(self.port, self.dir.path(), &self.options);
        let log = self.dir.path().join(LOG_FILE);
        let started = Instant::now();
        // The port was ours a moment ago; retry briefly in case the kernel is slow to free it.
        loop {
            match spawn_redis_with(self.dir.path(), &args, &self.options, self.port, &log) {
                Ok(child) => {
                    *self.lock_child() = Some(child);
                    return;
                }
                Err(SpawnError::PortTaken) if started.elapsed() < START_TIMEOUT => {
                    std::thread::sleep(Duration::from_millis(200));
                }
                Err(SpawnError::PortTaken) => {
                    panic!(
                        "port {} stayed taken; cannot restart redis-server",
                        self.port
                    )
                }
                Err(SpawnError::Failed(why)) => {
                    panic!("restarting redis-server on port {}: {why}", self.port)
                }
            }
        }
    }

    /// Whether the server process is running (it was started and not killed).
    pub fn is_running(&self) -> bool {
        let mut guard = self.lock_child();
        match guard.as_mut() {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// The address it listens on (the same across restarts): loopback, or its host's.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from((self.options.ip(), self.port))
    }

    /// `redis://IP:PORT`.
    pub fn url(&self) -> String {
        format!("redis://{}", self.addr())
    }

    /// The PID of the running redis-server, `None` while it is killed.
    pub fn pid(&self) -> Option<u32> {
        self.lock_child().as_ref().map(Child::id)
    }

    /// Its data directory (append-only files, the log), kept across restarts.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Everything the server has logged, over all its runs.
    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.path().join(LOG_FILE)).unwrap_or_default()
    }

    /// Sends one command (see [`resp::command`]) to the node, for checks and set-up in tests.
    pub fn command(&self, args: &[&str]) -> std::io::Result<Reply> {
        resp::command(self.addr(), args, Duration::from_secs(10))
    }

    fn lock_child(&self) -> std::sync::MutexGuard<'_, Option<Child>> {
        self.child
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Drop for RedisNode {
    fn drop(&mut self) {
        self.kill();
    }
}

impl std::fmt::Debug for RedisNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisNode")
            .field("addr", &self.addr())
            .field("pid", &self.pid())
            .field("durable", &self.options.durable)
            .finish()
    }
}

fn node_args(port: u16, dir: &Path, options: &NodeOptions) -> Vec<String> {
    let mut args = base_args(port, dir, options.ip());
    args.extend(options.persistence_args());
    args.extend(options.args.iter().cloned());
    args
}

/// The arguments every test redis-server gets: bound to `ip` only (loopback, or a host's
/// address: protected mode, which refuses every address but loopback when there is no
/// password, is then off), in the foreground, data and log in `dir`, and its command line
/// left alone (it names `dir`, which the orphan guard checks before killing a left-over
/// server).
pub(crate) fn base_args(port: u16, dir: &Path, ip: Ipv4Addr) -> Vec<String> {
    vec![
        "--port".into(),
        port.to_string(),
        "--bind".into(),
        ip.to_string(),
        "--dir".into(),
        dir.display().to_string(),
        "--daemonize".into(),
        "no".into(),
        "--set-proc-title".into(),
        "no".into(),
        "--protected-mode".into(),
        if ip.is_loopback() { "yes" } else { "no" }.into(),
    ]
}

/// Why [`spawn_redis`] failed.
#[derive(Debug)]
pub(crate) enum SpawnError {
    /// Someone else bound the port first: try another one.
    PortTaken,
    /// Anything else, with the log's tail.
    Failed(String),
}

/// The redis-server program, or a panic naming the package that has it.
pub(crate) fn redis_server_program() -> PathBuf {
    find_on_path("redis-server").unwrap_or_else(|| {
        panic!("no `redis-server` on PATH: install the Debian package `redis-server`")
    })
}

/// Starts `redis-server ARGS` under the orphan guard (`marker` must appear in `args`), its
/// output appended to `log_path`, and waits until `port` answers `PING` with `PONG`.
pub(crate) fn spawn_redis(
    marker: &Path,
    args: &[String],
    port: u16,
    log_path: &Path,
) -> Result<Child, SpawnError> {
    spawn_redis_with(marker, args, &NodeOptions::new(), port, log_path)
}

/// [`spawn_redis`] on `options`' host, with its environment variables for the server (its
/// other options are in `args` already).
pub(crate) fn spawn_redis_with(
    marker: &Path,
    args: &[String],
    options: &NodeOptions,
    port: u16,
    log_path: &Path,
) -> Result<Child, SpawnError> {
    let program = redis_server_program();
    let offset = fs::metadata(log_path).map(|m| m.len()).unwrap_or(0);
    let log = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log_path)
        .expect("open the redis log");
    let (program, leading) = command_on(options.host.as_ref(), program);
    let mut command = guarded_command(marker, program);
    command
        .current_dir(marker)
        .args(leading)
        .args(args)
        .envs(options.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("dup the redis log"))
        .stderr(log);
    let mut child = command.spawn().expect("spawn redis-server");
    let addr = SocketAddr::from((options.ip(), port));
    let started = Instant::now();
    let why = loop {
        if let Ok(Some(status)) = child.try_wait() {
            break format!("exited ({status})");
        }
        // `-LOADING` while a durable node replays its file: keep waiting.
        if answers_as(addr, child.id()) {
            return Ok(child);
        }
        if started.elapsed() > START_TIMEOUT {
            kill_and_reap(&mut child);
            break format!("no PONG within {START_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(25));
    };
    let log = crate::child::read_from(log_path, offset);
    if log.contains("Address already in use") {
        Err(SpawnError::PortTaken)
    } else {
        Err(SpawnError::Failed(format!(
            "{why}; log:\n{}",
            tail(&log, 40)
        )))
    }
}

/// Whether the server at `addr` is up (answers `PING` with `PONG`, not `-LOADING`) and is the
/// process `pid`, not some other server that bound the port first.
pub(crate) fn answers_as(addr: SocketAddr, pid: u32) -> bool {
    let timeout = Duration::from_secs(1);
    let Ok(Reply::Status(pong)) = resp::command(addr, &["PING"], timeout) else {
        return false;
    };
    if pong != "PONG" {
        return false;
    }
    let Ok(info) = resp::command(addr, &["INFO", "server"], timeout) else {
        return false;
    };
    info.text()
        .and_then(|text| resp::info_field(text, "process_id"))
        .is_some_and(|id| id.trim() == pid.to_string())
}
