//! Apache ZooKeeper 3.8 (Debian's jars) started as a child JVM for one test.
//!
//! Every instance gets its own temporary directory holding `zoo.cfg`, the data directory and the
//! server's log, listens on a free 127.0.0.1 port, and is killed (by its PID) when dropped. It is
//! the reference every Keeper behaviour is compared against, so it runs with the settings Keeper
//! defaults to in tests: TTL nodes enabled, containers reaped every second, all four-letter
//! words allowed.
//!
//! The pieces every ZooKeeper JVM of the test kit is made with live here too, so that a
//! standalone server and an ensemble member (`ensemble.rs`) differ only in their zoo.cfg's
//! last lines and their main class: the common zoo.cfg lines ([`ZkOptions::common_cfg`]),
//! the JVM's command line ([`ZkJvm`], which the benchmark starts its ZooKeeper with too),
//! the spawn under the orphan guard with its log ([`spawn_server`]), how a failed start is told apart from a
//! lost port race ([`exit_error`]), and whose server answers on a port ([`owner_of`]).

use std::ffi::OsString;
use std::fs;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::TestServer;
use crate::child::{guarded_command, kill_and_reap, read_from, tail};
use crate::fourlw::try_four_letter_word;
use crate::host::{Host, command_on};
use crate::ports::free_port;
use crate::tools::{SERVER_JARS, classpath_of, java};

/// How long a JVM gets to start listening. A cold JVM on a busy two-core machine can take
/// several seconds; this only bounds a start that is really stuck.
pub(crate) const START_TIMEOUT: Duration = Duration::from_secs(60);

/// How often a start is retried when another process took our port before ZooKeeper bound it.
pub(crate) const START_ATTEMPTS: usize = 4;

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
    /// A secure client port (`secureClientPort`, Netty, PEM files) beside the plain one.
    pub tls: Option<ZkTls>,
    /// A JAAS login configuration (`java.security.auth.login.config`) whose `Server` section
    /// lists SASL DIGEST-MD5 users; with it the `sasl` ACL scheme is on.
    pub jaas: Option<PathBuf>,
}

/// A test ZooKeeper's secure client port: what it presents and whom it admits.
#[derive(Clone, Debug)]
pub struct ZkTls {
    /// `ssl.keyStore.location`: the server's PKCS#8 key and certificate in one PEM file.
    pub keystore: PathBuf,
    /// `ssl.trustStore.location`: the CA (PEM) that signs client certificates.
    pub truststore: PathBuf,
    /// `ssl.clientAuth`: `need` (a client certificate required; its subject is the `x509` id)
    /// or `none`.
    pub client_auth: bool,
    /// The port; 0 picks a free one at start (see [`ApacheZk::secure_addr`]).
    pub port: u16,
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
            tls: None,
            jaas: None,
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
    pub fn start_with(mut opts: ZkOptions) -> ApacheZk {
        if let Some(tls) = opts.tls.as_mut().filter(|tls| tls.port == 0) {
            tls.port = free_port();
        }
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
                    failures.push(format!("port {port} was taken ({why})"));
                }
                Err(StartError::Failed(message)) => panic!("{message}"),
            }
        }
        panic!(
            "Apache ZooKeeper did not start after {START_ATTEMPTS} attempts: {}",
            failures.join("; ")
        );
    }

    /// The secure client port's address, when started with [`ZkOptions::tls`]; panics without.
    pub fn secure_addr(&self) -> SocketAddr {
        let tls = self.opts.tls.as_ref().expect("started with ZkOptions::tls");
        SocketAddr::from((Ipv4Addr::LOCALHOST, tls.port))
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
            let mut child = self
                .child
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            kill_and_reap(&mut child);
        }
        // The port was ours a moment ago; only retry on a bind race, never move to another port,
        // because clients reconnect to the address they know.
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            match launch(self.dir.path(), port, &self.opts) {
                Ok(child) => {
                    self.pid = child.id();
                    *self
                        .child
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner) = child;
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
        let mut child = self
            .child
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
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

/// The server's log (stdout and stderr) in its directory.
pub(crate) const LOG_FILE: &str = "zookeeper.log";

/// Why a ZooKeeper JVM did not come up.
pub(crate) enum StartError {
    /// Someone else bound the port between `free_port` and ZooKeeper's bind: try another.
    /// Carries what showed it, for the message if every attempt fails.
    PortTaken(String),
    /// Anything else; the message carries the log tail.
    Failed(String),
}

/// A ZooKeeper JVM's role: a standalone server or an ensemble member; it decides the main class
/// and, for tests, the heap. (Which server is under test, Keeper or ZooKeeper, is the bench's
/// `ServerKind`.)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ZkRole {
    /// `ZooKeeperServerMain`: one server, no quorum.
    Standalone,
    /// `QuorumPeerMain`: a member of an ensemble (zoo.cfg lists the servers, `data/myid` says
    /// which one this is). Three of them share two cores, so each gets a smaller heap.
    QuorumPeer,
}

impl ZkRole {
    /// The class whose `main` runs a server of this role.
    pub fn main_class(self) -> &'static str {
        match self {
            ZkRole::Standalone => "org.apache.zookeeper.server.ZooKeeperServerMain",
            ZkRole::QuorumPeer => "org.apache.zookeeper.server.quorum.QuorumPeerMain",
        }
    }

    fn test_heap(self) -> &'static str {
        match self {
            ZkRole::Standalone => "-Xmx512m",
            ZkRole::QuorumPeer => "-Xmx192m",
        }
    }
}

/// The JVM a ZooKeeper server runs in. Its [`args`](ZkJvm::args) are the one command line
/// every ZooKeeper is started with, by the tests (a small heap, a C1-only JIT, their `-D`
/// properties) and by the benchmark (the user's `java`, class path and options): `JAVA OPTIONS -cp CLASSPATH MAIN
/// zoo.cfg`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZkJvm {
    /// The `java` program.
    pub java: PathBuf,
    /// The class path holding the server's main class and its dependencies.
    pub classpath: String,
    /// JVM options placed before `-cp`: heap, JIT, `-D` properties.
    pub options: Vec<String>,
}

impl ZkJvm {
    /// What a test's ZooKeeper runs in: Debian's jars, a small heap and a C1-only JIT (tests
    /// need a few MB of data, and such a JVM starts faster and leaves the second core to the
    /// test itself), its log through `log4j` (a properties file), and the properties `opts`
    /// set.
    pub(crate) fn for_tests(role: ZkRole, opts: &ZkOptions, log4j: &Path) -> ZkJvm {
        let mut options: Vec<String> = [
            "-Xms32m",
            role.test_heap(),
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-Djava.net.preferIPv4Stack=true",
        ]
        .map(String::from)
        .into();
        options.extend([
            format!("-Dlog4j.configuration=file:{}", log4j.display()),
            format!("-Dzookeeper.extendedTypesEnabled={}", opts.extended_types),
            format!(
                "-Dznode.container.checkIntervalMs={}",
                opts.container_check_interval_ms
            ),
            "-Dzookeeper.admin.enableServer=false".to_string(),
        ]);
        if let Some(digest) = &opts.super_digest {
            options.push(format!(
                "-Dzookeeper.DigestAuthenticationProvider.superDigest={digest}"
            ));
        }
        if let Some(jaas) = &opts.jaas {
            options.push(format!(
                "-Djava.security.auth.login.config={}",
                jaas.display()
            ));
            options.push(
                "-Dzookeeper.authProvider.1=org.apache.zookeeper.server.auth.SASLAuthenticationProvider"
                    .into(),
            );
        }
        ZkJvm {
            java: java(),
            classpath: classpath_of(SERVER_JARS),
            options,
        }
    }

    /// The arguments after `java`: the options, `-cp` and the class path, `role`'s main class
    /// and the configuration file `cfg`.
    pub fn args(&self, role: ZkRole, cfg: &Path) -> Vec<OsString> {
        let mut args: Vec<OsString> = self.options.iter().map(OsString::from).collect();
        args.extend([
            "-cp".into(),
            self.classpath.clone().into(),
            role.main_class().into(),
            cfg.into(),
        ]);
        args
    }

    /// The whole command line as one string, for a report to say what ran.
    pub fn describe(&self, role: ZkRole, cfg: &Path) -> String {
        std::iter::once(self.java.as_os_str().to_owned())
            .chain(self.args(role, cfg))
            .map(|arg| arg.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// A ZooKeeper JVM just spawned: the child, and where its output for this run starts in the
/// log (a restart appends to the same file).
pub(crate) struct Spawned {
    pub child: Child,
    pub log_start: u64,
}

/// Writes `cfg` as `dir/zoo.cfg` (with the log4j configuration beside it) and spawns the JVM
/// under the orphan guard, its output appended to `dir/zookeeper.log`. The one way every
/// ZooKeeper JVM of the test kit is started, standalone or as an ensemble member.
pub(crate) fn spawn_server(
    dir: &Path,
    cfg: &str,
    opts: &ZkOptions,
    kind: ZkRole,
    extra_properties: &[String],
    host: Option<&Host>,
) -> Result<Spawned, StartError> {
    fs::create_dir_all(dir.join("data")).map_err(|e| StartError::Failed(format!("{e}")))?;
    let cfg_path = dir.join("zoo.cfg");
    let log4j_path = dir.join("log4j.properties");
    fs::write(&cfg_path, cfg)
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

    let mut jvm = ZkJvm::for_tests(kind, opts, &log4j_path);
    jvm.options.extend_from_slice(extra_properties);
    let (program, leading) = command_on(host, &jvm.java);
    let mut command = guarded_command(dir, program);
    command
        .args(leading)
        .current_dir(dir)
        .args(jvm.args(kind, &cfg_path))
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err);
    let child = command
        .spawn()
        .map_err(|e| StartError::Failed(format!("spawn {:?}: {e}", command.get_program())))?;
    Ok(Spawned { child, log_start })
}

/// The error for a JVM that exited during its start: a lost bind race (retry elsewhere) or a
/// failure with the log's tail.
pub(crate) fn exit_error(dir: &Path, log_start: u64, status: ExitStatus) -> StartError {
    let log_path = dir.join(LOG_FILE);
    let log = read_from(&log_path, log_start);
    if log.contains("Address already in use") || log.contains("BindException") {
        return StartError::PortTaken(format!("ZooKeeper exited: {}", tail(&log, 3)));
    }
    StartError::Failed(format!(
        "Apache ZooKeeper exited during start ({status}); log {}:\n{}",
        log_path.display(),
        tail(&log, 60)
    ))
}

/// Whose server answers on a port: told by the data directory `conf` names.
pub(crate) enum Owner {
    /// Ours: `conf` names our data directory.
    Ours,
    /// Another server's (another test grabbed the port first); carries its `conf`.
    Foreign(String),
    /// Cannot tell yet (not serving, no answer); carries what was seen.
    Unknown(String),
}

/// Asks the server at `addr` for its `conf` and compares its data directory with ours.
pub(crate) fn owner_of(addr: SocketAddr, data_dir: &Path) -> Owner {
    let expected = data_dir.display().to_string();
    match try_four_letter_word(addr, "conf", Duration::from_secs(5)) {
        Ok(conf) if conf.contains(&expected) => Owner::Ours,
        Ok(conf) if conf.contains("dataDir=") => Owner::Foreign(tail(&conf, 5)),
        Ok(conf) => Owner::Unknown(format!("conf -> {conf:?}")),
        Err(e) => Owner::Unknown(format!("conf -> {e}")),
    }
}

/// Starts the standalone JVM and waits until it is really serving on `port`.
fn launch(dir: &Path, port: u16, opts: &ZkOptions) -> Result<Child, StartError> {
    let data_dir = dir.join("data");
    let Spawned {
        mut child,
        log_start,
    } = spawn_server(
        dir,
        &opts.zoo_cfg(&data_dir, port),
        opts,
        ZkRole::Standalone,
        &[],
        None,
    )?;
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let started = Instant::now();
    let mut last_answer = String::from("(no answer yet)");
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Err(exit_error(dir, log_start, status)),
            Ok(None) => {}
            Err(e) => return Err(StartError::Failed(format!("wait for ZooKeeper: {e}"))),
        }
        if let Ok(answer) = try_four_letter_word(addr, "ruok", Duration::from_secs(2)) {
            last_answer = format!("ruok -> {answer:?}");
            if answer == "imok" {
                // `ruok` answers before the server serves requests; `conf` answers once it
                // does, and names the data directory, which tells whether the server on this
                // port is ours and not another test's that grabbed the port first.
                match owner_of(addr, &data_dir) {
                    Owner::Ours => return Ok(child),
                    Owner::Foreign(conf) => {
                        kill_and_reap(&mut child);
                        return Err(StartError::PortTaken(format!(
                            "another server answers: {conf}"
                        )));
                    }
                    Owner::Unknown(seen) => last_answer = seen,
                }
            }
        }
        if started.elapsed() > START_TIMEOUT {
            kill_and_reap(&mut child);
            let log_path = dir.join(LOG_FILE);
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
        let mut cfg = self.common_cfg(data_dir);
        cfg.push_str(&format!(
            "clientPort={port}\n\
             clientPortAddress=127.0.0.1\n\
             standaloneEnabled=true\n"
        ));
        if let Some(tls) = &self.tls {
            cfg.push_str(&format!(
                "secureClientPort={port}\n\
                 secureClientPortAddress=127.0.0.1\n\
                 serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory\n\
                 ssl.keyStore.location={keystore}\n\
                 ssl.keyStore.type=PEM\n\
                 ssl.trustStore.location={truststore}\n\
                 ssl.trustStore.type=PEM\n\
                 ssl.clientAuth={auth}\n",
                port = tls.port,
                keystore = tls.keystore.display(),
                truststore = tls.truststore.display(),
                auth = if tls.client_auth { "need" } else { "none" },
            ));
        }
        cfg
    }

    /// The lines every test ZooKeeper has, standalone or ensemble member: the tick, the data
    /// directory, the connection limit, no admin HTTP server, every four-letter word allowed,
    /// no purging, and the optional sync and snapshot settings. Where clients connect is
    /// left to the caller.
    pub(crate) fn common_cfg(&self, data_dir: &Path) -> String {
        let mut cfg = format!(
            "tickTime={tick}\n\
             dataDir={data}\n\
             maxClientCnxns={cnxns}\n\
             admin.enableServer=false\n\
             4lw.commands.whitelist=*\n\
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
    fn a_jvm_runs_options_then_class_path_then_the_roles_main_class() {
        let jvm = ZkJvm {
            java: PathBuf::from("/opt/java"),
            classpath: "a.jar:b.jar".to_string(),
            options: vec!["-Xmx1g".to_string()],
        };
        assert_eq!(
            jvm.describe(ZkRole::Standalone, Path::new("zoo.cfg")),
            "/opt/java -Xmx1g -cp a.jar:b.jar org.apache.zookeeper.server.ZooKeeperServerMain \
             zoo.cfg"
        );
        let args = jvm.args(ZkRole::QuorumPeer, Path::new("/d/zoo.cfg"));
        assert_eq!(
            args[3..],
            [
                OsString::from("org.apache.zookeeper.server.quorum.QuorumPeerMain"),
                OsString::from("/d/zoo.cfg")
            ]
        );
        let tests = ZkJvm::for_tests(
            ZkRole::QuorumPeer,
            &ZkOptions::default(),
            Path::new("/d/log4j.properties"),
        );
        assert!(tests.options.contains(&"-Xmx192m".to_string()), "{tests:?}");
        assert!(
            tests
                .options
                .contains(&"-Dlog4j.configuration=file:/d/log4j.properties".to_string()),
            "{tests:?}"
        );
    }

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
