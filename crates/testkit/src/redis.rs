//! redis-server (Debian's) started for one test on a free loopback port, for the Redis lock
//! family. No persistence: a test's keys live as long as its server.

use std::fs;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use tempfile::TempDir;

use crate::child::{guarded_command, kill_and_reap};
use crate::launch::{self, Launch};
use crate::tools::find_on_path;

const LOG_FILE: &str = "redis.log";

/// A running redis-server, killed (by its PID) when dropped.
pub struct RedisServer {
    child: Mutex<Child>,
    pid: u32,
    addr: SocketAddr,
    /// The TLS port's address, when started with [`RedisServer::start_tls`].
    tls_addr: Option<SocketAddr>,
    dir: TempDir,
}

/// What a TLS port of a test redis-server presents and whom it admits (PEM files).
#[derive(Debug, Clone)]
pub struct RedisTls {
    pub cert: std::path::PathBuf,
    pub key: std::path::PathBuf,
    /// The CA that signs client certificates (and that redis-server needs in any case).
    pub ca: std::path::PathBuf,
    /// `tls-auth-clients`: clients must present a certificate `ca` signed.
    pub auth_clients: bool,
}

impl RedisServer {
    /// Starts redis-server on a free 127.0.0.1 port; returns once it answers `PING`. Panics
    /// with the server's log when it cannot start.
    pub fn start() -> RedisServer {
        RedisServer::try_start().unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`RedisServer::start`] for programs that report failures instead of panicking (the
    /// benchmark): the error names the missing program, or carries the server's log.
    pub fn try_start() -> Result<RedisServer, String> {
        RedisServer::launch(None)
    }

    /// [`RedisServer::start`] with a TLS port beside the plain one (the plain one answers the
    /// readiness `PING`): [`RedisServer::tls_url`].
    pub fn start_tls(tls: RedisTls) -> RedisServer {
        RedisServer::launch(Some(tls)).unwrap_or_else(|e| panic!("{e}"))
    }

    fn launch(tls: Option<RedisTls>) -> Result<RedisServer, String> {
        let program = find_on_path("redis-server")
            .ok_or("no `redis-server` on PATH: install the Debian package `redis-server`")?;
        let dir = tempfile::Builder::new()
            .prefix("lockkeeper-redis-")
            .tempdir()
            .map_err(|e| format!("create a temporary directory for redis-server: {e}"))?;
        let log_path = dir.path().join(LOG_FILE);
        // A second free port for TLS; the plain port is the one `on_free_port` retries.
        let tls_port = tls.as_ref().map(|_| crate::ports::free_port());
        let launch = Launch {
            name: "redis-server",
            log: &log_path,
            port_taken: &["Address already in use"],
            not_ready: "no PONG",
        };
        let command = |port: u16| {
            let mut command = guarded_command(dir.path(), &program);
            command
                .current_dir(dir.path())
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .arg("--dir")
                .arg(dir.path())
                // No snapshots or append-only file: tests need no durability from Redis.
                .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
                // Keep the command line (it names our directory) for the orphan guard.
                .args(["--set-proc-title", "no", "--protected-mode", "yes"])
                .stdin(Stdio::null());
            if let (Some(tls), Some(tls_port)) = (&tls, tls_port) {
                command
                    .args(["--tls-port", &tls_port.to_string()])
                    .arg("--tls-cert-file")
                    .arg(&tls.cert)
                    .arg("--tls-key-file")
                    .arg(&tls.key)
                    .arg("--tls-ca-cert-file")
                    .arg(&tls.ca)
                    .args([
                        "--tls-auth-clients",
                        if tls.auth_clients { "yes" } else { "no" },
                    ]);
            }
            command
        };
        let ready = |port: u16| ping(SocketAddr::from((Ipv4Addr::LOCALHOST, port)));
        let (child, port) = launch::on_free_port(&launch, command, ready)?;
        Ok(RedisServer {
            pid: child.id(),
            child: Mutex::new(child),
            addr: SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
            tls_addr: tls_port.map(|port| SocketAddr::from((Ipv4Addr::LOCALHOST, port))),
            dir,
        })
    }

    /// The loopback address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `redis://127.0.0.1:PORT`, the form Redis clients take.
    pub fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }

    /// `rediss://127.0.0.1:PORT`, the TLS port of [`RedisServer::start_tls`]; panics without
    /// one.
    pub fn tls_url(&self) -> String {
        format!(
            "rediss://{}",
            self.tls_addr.expect("started with start_tls")
        )
    }

    /// The PID of redis-server, e.g. to pause it with SIGSTOP in a fault-injection test.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The server's working directory (holding its log).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Everything the server has logged so far.
    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.path().join(LOG_FILE)).unwrap_or_default()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let mut child = self
            .child
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        kill_and_reap(&mut child);
    }
}

impl std::fmt::Debug for RedisServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisServer")
            .field("addr", &self.addr)
            .field("pid", &self.pid)
            .finish()
    }
}

/// Whether a Redis server answers `PING` with `+PONG` at `addr` within a second.
fn ping(addr: SocketAddr) -> bool {
    let attempt = || -> std::io::Result<bool> {
        let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
        stream.set_read_timeout(Some(Duration::from_secs(1)))?;
        stream.write_all(b"PING\r\n")?;
        let mut answer = [0u8; 7];
        stream.read_exact(&mut answer)?;
        Ok(&answer == b"+PONG\r\n")
    };
    attempt().unwrap_or(false)
}
