//! Apache ZooKeeper 3.8 (Debian's jars) started as a child JVM for one test.
//!
//! Every instance gets its own temporary directory holding `zoo.cfg`, the data directory and the
//! server's log, listens on a free 127.0.0.1 port, and is killed (by its PID) when dropped. It is
//! the reference every Keeper behaviour is compared against, so it runs with the settings Keeper
//! defaults to in tests: TTL nodes enabled, containers reaped every second, all four-letter
//! words allowed.

use std::fs;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::TestServer;
use crate::child::{guarded_command, kill_and_reap, read_from, tail};
use crate::fourlw::try_four_letter_word;
use crate::ports::free_port;
use crate::tools::{SERVER_JARS, classpath_of, java};

/// How long a JVM gets to start listening. A cold JVM on a busy two-core machine can take
/// several seconds; this only bounds a start that is really stuck.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// How often a start is retried when another process took our port before ZooKeeper bound it.
const START_ATTEMPTS: usize = 4;

/// The settings of a test ZooKeeper that tests change.
#[derive(Clone, Debug)]
pub struct ZkOptions {
    /// `tickTime`: the unit of session timeouts (negotiated between 2 and 20 ticks).
    pub tick_time_ms: u64,
    /// `zookeeper.extendedTypesEnabled`: TTL nodes are refused unless this is on.
    pub extended_types: bool,
    /// `znode.container.checkIntervalMs`: how often empty containers and expired TTL nodes are
    /// reaped. ZooKeeper's default is a minute; tests want a second.
    pub container_check_interval_ms: u64,
    /// `maxClientCnxns`: connections allowed from one address (0 = unlimited).
    pub max_client_cnxns: u32,
    /// `zookeeper.DigestAuthenticationProvider.superDigest`, e.g. `super:<base64 sha1>`.
    pub super_digest: Option<String>,
    /// `forceSync`: fsync the transaction log before replying. ZooKeeper's default (`true`) is
    /// left out of zoo.cfg; the benchmark turns it off to measure ZooKeeper without fsync.
    pub force_sync: bool,
    /// `snapCount`: transactions between snapshots; `None` keeps ZooKeeper's default.
    pub snap_count: Option<u64>,
}

impl Default for ZkOptions {
    fn default() -> Self {
        ZkOptions {
            tick_time_ms: 2000,
            extended_types: true,
            container_check_interval_ms: 1000,
            max_client_cnxns: 60,
            super_digest: None,
            force_sync: true,
            snap_count: None,
        }
    }
}

/// A running Apache ZooKeeper server (standalone), stopped when dropped.
pub struct ApacheZk {
    child: Mutex<Child>,
    pid: u32,
    addr: SocketAddr,
    opts: ZkOptions,
    dir: TempDir,
}

impl ApacheZk {
    /// Starts ZooKeeper with [`ZkOptions::default`]; returns once it answers `ruok`.
    pub fn start() -> ApacheZk {
        ApacheZk::start_with(ZkOptions::default())
    }

    /// Starts ZooKeeper with `opts`; returns once it answers `ruok`. Panics with the server's
    /// log when it cannot start.
    pub fn start_with(opts: ZkOptions) -> ApacheZk {
        let dir = tempfile::Builder::new()
            .prefix("lockkeeper-zk-")
            .tempdir()
            .expect("create a temporary directory for ZooKeeper");
        let mut failures = Vec::new();
        for _ in 0..START_ATTEMPTS {
            let port = free_port();
            match launch(dir.path(), port, &opts) {
                Ok(child) => {
                    let pid = child.id();
                    return ApacheZk {
                        child: Mutex::new(child),
                        pid,
                        addr: SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
                        opts,
                        dir,
                    };
                }
                Err(StartError::PortTaken(why)) => {
                    failures.push(format!("port {port} was taken ({why})"))
                }
                Err(StartError::Failed(message)) => panic!("{message}"),
            }
        }
        panic!(
            "Apache ZooKeeper did not start after {START_ATTEMPTS} attempts: {}",
            failures.join("; ")
        );
    }

    /// The PID of the JVM, e.g. to pause it with SIGSTOP in a fault-injection test.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The options it was started with.
    pub fn options(&self) -> &ZkOptions {
        &self.opts
    }

    /// The directory holding `zoo.cfg`, `data/` and `zookeeper.log`.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Where the server keeps its snapshots and transaction logs (`dataDir`).
    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// Everything the server has logged so far.
    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.path().join(LOG_FILE)).unwrap_or_default()
    }

    /// Kills the server (SIGKILL: a crash, nothing flushed beyond what ZooKeeper already
    /// synced) and starts it again on the same port with the same data directory, as a
    /// restart-durability test needs. Sessions survive if they reconnect within their timeout.
    pub fn restart(&mut self) {
        let port = self.addr.port();
        {
            let mut child = self.child.lock().unwrap_or_else(|p| p.into_inner());
            kill_and_reap(&mut child);
        }
        // The port was ours a moment ago; only retry on a bind race, never move to another port,
        // because clients reconnect to the address they know.
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            match launch(self.dir.path(), port, &self.opts) {
                Ok(child) => {
                    self.pid = child.id();
                    *self.child.lock().unwrap_or_else(|p| p.into_inner()) = child;
                    return;
                }
                Err(StartError::PortTaken(_)) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(500));
                }
                Err(StartError::PortTaken(why)) => {
                    panic!(
                        "ZooKeeper restart: port {port} stayed taken for {START_TIMEOUT:?}: {why}"
                    )
                }
                Err(StartError::Failed(message)) => panic!("ZooKeeper restart: {message}"),
            }
        }
    }
}

impl TestServer for ApacheZk {
    fn addr(&self) -> SocketAddr {
        self.addr
    }
    fn connect_string(&self) -> String {
        self.addr.to_string()
    }
    fn name(&self) -> &'static str {
        "zookeeper"
    }
}

impl Drop for ApacheZk {
    fn drop(&mut self) {
        let mut child = self.child.lock().unwrap_or_else(|p| p.into_inner());
        kill_and_reap(&mut child);
    }
}

impl std::fmt::Debug for ApacheZk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApacheZk")
            .field("addr", &self.addr)
            .field("pid", &self.pid)
            .field("dir", &self.dir.path())
            .finish()
    }
}

const LOG_FILE: &str = "zookeeper.log";

enum StartError {
    /// Someone else bound the port between `free_port` and ZooKeeper's bind: try another.
    /// Carries what showed it, for the message if every attempt fails.
    PortTaken(String),
    /// Anything else; the message carries the log tail.
    Failed(String),
}

/// Writes the configuration, starts the JVM and waits until it is really serving on `port`.
fn launch(dir: &Path, port: u16, opts: &ZkOptions) -> Result<Child, StartError> {
    let data_dir = dir.join("data");
    fs::create_dir_all(&data_dir).map_err(|e| StartError::Failed(format!("{e}")))?;
    let cfg_path = dir.join("zoo.cfg");
    let log4j_path = dir.join("log4j.properties");
    fs::write(&cfg_path, opts.zoo_cfg(&data_dir, port))
        .and_then(|()| fs::write(&log4j_path, LOG4J_PROPERTIES))
        .map_err(|e| StartError::Failed(format!("write ZooKeeper config: {e}")))?;
    let log_path = dir.join(LOG_FILE);
    let log = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(|e| StartError::Failed(format!("open {}: {e}", log_path.display())))?;
    let log_err = log
        .try_clone()
        .map_err(|e| StartError::Failed(format!("dup log file: {e}")))?;
    let log_start = log.metadata().map(|m| m.len()).unwrap_or(0);

    let mut command = guarded_command(dir, java());
    command
        .current_dir(dir)
        // Small and quick to start: tests need a few MB of data, and a C1-only JIT starts
        // faster and leaves the second core to the test itself.
        .args([
            "-Xms32m",
            "-Xmx512m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
        ])
        .arg("-Djava.net.preferIPv4Stack=true")
        .arg(format!(
            "-Dlog4j.configuration=file:{}",
            log4j_path.display()
        ))
        .arg(format!(
            "-Dzookeeper.extendedTypesEnabled={}",
            opts.extended_types
        ))
        .arg(format!(
            "-Dznode.container.checkIntervalMs={}",
            opts.container_check_interval_ms
        ))
        .arg("-Dzookeeper.admin.enableServer=false");
    if let Some(digest) = &opts.super_digest {
        command.arg(format!(
            "-Dzookeeper.DigestAuthenticationProvider.superDigest={digest}"
        ));
    }
    command
        .arg("-cp")
        .arg(classpath_of(SERVER_JARS))
        .arg("org.apache.zookeeper.server.ZooKeeperServerMain")
        .arg(&cfg_path)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err);
    let mut child = command
        .spawn()
        .map_err(|e| StartError::Failed(format!("spawn {:?}: {e}", command.get_program())))?;

    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let expected_data_dir = data_dir.display().to_string();
    let started = Instant::now();
    let mut last_answer = String::from("(no answer yet)");
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                let log = read_from(&log_path, log_start);
                if log.contains("Address already in use") || log.contains("BindException") {
                    return Err(StartError::PortTaken(format!(
                        "ZooKeeper exited: {}",
                        tail(&log, 3)
                    )));
                }
                return Err(StartError::Failed(format!(
                    "Apache ZooKeeper exited during start ({status}); log {}:\n{}",
                    log_path.display(),
                    tail(&log, 60)
                )));
            }
            Ok(None) => {}
            Err(e) => return Err(StartError::Failed(format!("wait for ZooKeeper: {e}"))),
        }
        if let Ok(answer) = try_four_letter_word(addr, "ruok", Duration::from_secs(2)) {
            last_answer = format!("ruok -> {answer:?}");
            if answer == "imok" {
                // Make sure the server answering is ours and not another test's that grabbed
                // the port: `conf` names its data directory.
                // `ruok` answers before the server serves requests; `conf` answers once it
                // does, and names the data directory, which tells whether the server on this
                // port is ours and not another test's that grabbed the port first.
                match try_four_letter_word(addr, "conf", Duration::from_secs(5)) {
                    Ok(conf) if conf.contains(&expected_data_dir) => return Ok(child),
                    Ok(conf) if conf.contains("dataDir=") => {
                        kill_and_reap(&mut child);
                        return Err(StartError::PortTaken(format!(
                            "another server answers: {}",
                            tail(&conf, 5)
                        )));
                    }
                    Ok(conf) => last_answer = format!("conf -> {conf:?}"),
                    Err(e) => last_answer = format!("conf -> {e}"),
                }
            }
        }
        if started.elapsed() > START_TIMEOUT {
            kill_and_reap(&mut child);
            let log = read_from(&log_path, log_start);
            return Err(StartError::Failed(format!(
                "Apache ZooKeeper did not answer `ruok` on {addr} within {START_TIMEOUT:?} \
                 (last: {last_answer}); log {}:\n{}",
                log_path.display(),
                tail(&log, 60)
            )));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

impl ZkOptions {
    /// A standalone zoo.cfg for these options: `dataDir`, loopback only on `port`, no admin HTTP
    /// server, every four-letter word allowed. Tests and the benchmark both write this one.
    pub fn zoo_cfg(&self, data_dir: &Path, port: u16) -> String {
        let mut cfg = format!(
            "tickTime={tick}\n\
             dataDir={data}\n\
             clientPort={port}\n\
             clientPortAddress=127.0.0.1\n\
             maxClientCnxns={cnxns}\n\
             admin.enableServer=false\n\
             4lw.commands.whitelist=*\n\
             standaloneEnabled=true\n\
             autopurge.purgeInterval=0\n",
            tick = self.tick_time_ms,
            data = data_dir.display(),
            cnxns = self.max_client_cnxns,
        );
        if !self.force_sync {
            cfg.push_str("forceSync=no\n");
        }
        if let Some(n) = self.snap_count {
            cfg.push_str(&format!("snapCount={n}\n"));
        }
        cfg
    }
}

/// Everything to the console (which is the log file): INFO is enough to see why a start
/// failed, and the test's own output stays clean.
const LOG4J_PROPERTIES: &str = "\
log4j.rootLogger=INFO, CONSOLE
log4j.appender.CONSOLE=org.apache.log4j.ConsoleAppender
log4j.appender.CONSOLE.layout=org.apache.log4j.PatternLayout
log4j.appender.CONSOLE.layout.ConversionPattern=%d{ISO8601} [%t] %-5p %c{1} - %m%n
";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zoo_cfg_binds_loopback_on_the_given_port() {
        let opts = ZkOptions::default();
        let cfg = opts.zoo_cfg(Path::new("/tmp/x"), 4242);
        assert!(cfg.contains("clientPort=4242\n"));
        assert!(cfg.contains("clientPortAddress=127.0.0.1\n"));
        assert!(cfg.contains("dataDir=/tmp/x\n"));
        assert!(cfg.contains("maxClientCnxns=60\n"));
        assert!(
            !cfg.contains("forceSync"),
            "the default (yes) is left to ZooKeeper"
        );
        assert!(
            !cfg.contains("snapCount"),
            "ZooKeeper's default unless asked"
        );
        let tuned = ZkOptions {
            force_sync: false,
            snap_count: Some(750),
            ..ZkOptions::default()
        };
        let cfg = tuned.zoo_cfg(Path::new("/tmp/x"), 4242);
        assert!(cfg.contains("forceSync=no\n"), "{cfg}");
        assert!(cfg.contains("snapCount=750\n"), "{cfg}");
    }
}
