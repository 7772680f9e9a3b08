//! Child server processes for `lockkeeper-bench --compare`.
//!
//! Both servers under comparison run as plain child processes so that the figures describe what a
//! user gets from a shell: Keeper is the installed `lockkeeper serve` (the binary next to this one,
//! or `--keeper-bin`), Apache ZooKeeper is `ZooKeeperServerMain` on the jars Debian installs,
//! started with the test kit's command line ([`ZkJvm`]) and zoo.cfg ([`ZkOptions`]) but the
//! user's JVM options instead of the tests' small heap. Each
//! gets a free loopback port and a temporary directory of its own (data, config, log), and each
//! is killed, by its PID, when its handle drops, so no exit path of the benchmark leaves a server
//! behind.

use std::fmt;
use std::fs;
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Instant;

use lockkeeper_load::procfs::rss_kib;
use lockkeeper_testkit::{ZkJvm, ZkOptions, ZkRole, die_with_parent, try_free_port};

/// Which server a child process runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ServerKind {
    /// lockkeeper's own coordination server (`lockkeeper serve`).
    Keeper,
    /// Apache ZooKeeper, standalone, from the Debian packages.
    Zookeeper,
}

impl ServerKind {
    /// Name used in tables and JSON keys.
    pub fn name(self) -> &'static str {
        match self {
            ServerKind::Keeper => "Keeper",
            ServerKind::Zookeeper => "ZooKeeper",
        }
    }

    pub fn json_key(self) -> &'static str {
        match self {
            ServerKind::Keeper => "keeper",
            ServerKind::Zookeeper => "zookeeper",
        }
    }
}

impl fmt::Display for ServerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How to launch each server; filled from the command-line flags.
#[derive(Clone, Debug)]
pub(crate) struct Launcher {
    /// The binary whose `serve` subcommand runs Keeper.
    pub keeper_bin: PathBuf,
    /// The JVM ZooKeeper runs in: the `java` program, the class path holding
    /// `ZooKeeperServerMain`, and the user's JVM options (testkit's command line, without the
    /// tests' heap and JIT settings).
    pub zookeeper: ZkJvm,
    /// ZooKeeper's `forceSync`: fsync the transaction log before replying (its default).
    pub zookeeper_force_sync: bool,
    /// Which durability flags the Keeper binary understands (see [`KeeperFlags::probe`]).
    pub keeper_flags: KeeperFlags,
}

/// The durability flags of `lockkeeper serve`, as far as the binary at hand knows them.
///
/// The benchmark asks for `--sync always` explicitly, so that write figures are those of a server
/// that syncs every acknowledged write whatever the default becomes; and `--snap-count` for the
/// recovery and snapshot benchmarks. A build from before the transaction log has neither flag and
/// would refuse to start with them, so the flags are only passed when `serve --help` lists them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct KeeperFlags {
    /// `--sync always|none`.
    pub sync: bool,
    /// `--snap-count N`.
    pub snap_count: bool,
}

impl KeeperFlags {
    /// Runs `BIN serve --help` (bounded in time) and reads the flags off its output. Any failure
    /// means "no such flags": the start-up that follows reports a broken binary clearly enough.
    pub(crate) fn probe(bin: &Path) -> KeeperFlags {
        let child = Command::new(bin)
            .args(["serve", "--help"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn();
        let Ok(mut child) = child else {
            return KeeperFlags::default();
        };
        let deadline = Instant::now() + std::time::Duration::from_secs(20);
        loop {
            match child.try_wait() {
                Ok(Some(_)) => break,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return KeeperFlags::default();
                }
            }
        }
        let mut help = String::new();
        if let Some(mut out) = child.stdout.take() {
            use std::io::Read;
            let _ = out.read_to_string(&mut help);
        }
        KeeperFlags::from_help(&help)
    }

    fn from_help(help: &str) -> KeeperFlags {
        let has = |flag: &str| {
            help.split(|c: char| c.is_whitespace() || c == ',' || c == '=' || c == '[')
                .any(|word| word == flag)
        };
        KeeperFlags {
            sync: has("--sync"),
            snap_count: has("--snap-count"),
        }
    }
}

/// Per-start settings beyond the command-line flags of the benchmark.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ServerOptions {
    /// Txns between snapshots: Keeper's `--snap-count`, ZooKeeper's `snapCount`.
    pub snap_count: Option<u64>,
    /// Keeper only: `--sync none` instead of `--sync always`, for what a write costs besides
    /// its sync.
    pub unsynced: bool,
}

impl Launcher {
    /// The `java` program every JVM of the run starts with: ZooKeeper's and the Curator side's.
    pub(crate) fn java(&self) -> &Path {
        &self.zookeeper.java
    }

    /// A short description of the command line, printed so a reader knows what was measured.
    pub(crate) fn describe(&self, kind: ServerKind) -> String {
        match kind {
            ServerKind::Keeper => format!(
                "{} serve --listen 127.0.0.1:PORT --data-dir DIR{}",
                self.keeper_bin.display(),
                if self.keeper_flags.sync {
                    " --sync always"
                } else {
                    " (this build has no --sync flag: in memory only)"
                }
            ),
            ServerKind::Zookeeper => format!(
                "{} (standalone, forceSync={})",
                self.zookeeper
                    .describe(ZkRole::Standalone, Path::new("zoo.cfg")),
                if self.zookeeper_force_sync {
                    "yes"
                } else {
                    "no"
                }
            ),
        }
    }
}

/// A running server process; killed and reaped on drop.
pub(crate) struct ChildServer {
    kind: ServerKind,
    child: Child,
    addr: SocketAddr,
    spawned_at: Instant,
    data_dir: PathBuf,
    log_path: PathBuf,
    launcher: Launcher,
    options: ServerOptions,
    /// Kept so the directory outlives the process that writes into it; removed on drop.
    dir: tempfile::TempDir,
}

impl ChildServer {
    /// Starts `kind` on a free 127.0.0.1 port in a fresh temporary directory.
    ///
    /// Returns as soon as the process exists; whether it accepts sessions is the caller's to
    /// find out (that wait is one of the figures the benchmark reports).
    pub(crate) fn spawn(kind: ServerKind, launcher: &Launcher) -> io::Result<ChildServer> {
        ChildServer::spawn_with(kind, launcher, &ServerOptions::default())
    }

    /// [`ChildServer::spawn`] with per-start settings.
    pub(crate) fn spawn_with(
        kind: ServerKind,
        launcher: &Launcher,
        options: &ServerOptions,
    ) -> io::Result<ChildServer> {
        let dir = tempfile::Builder::new()
            .prefix(&format!("lockkeeper-bench-{}-", kind.json_key()))
            .tempdir()?;
        let data_dir = dir.path().join("data");
        fs::create_dir_all(&data_dir)?;
        let log_path = dir.path().join("server.log");
        let (child, addr, spawned_at) =
            launch(kind, launcher, options, dir.path(), &data_dir, &log_path)?;
        Ok(ChildServer {
            kind,
            child,
            addr,
            spawned_at,
            data_dir,
            log_path,
            launcher: launcher.clone(),
            options: options.clone(),
            dir,
        })
    }

    /// Kills the server with SIGKILL, as a crash or power cut would stop it (no shutdown code
    /// runs), then starts it again on the same data directory and a fresh port. Returns as soon
    /// as the new process exists; `spawned_at` and `addr` now describe it.
    pub(crate) fn crash_and_restart(&mut self) -> io::Result<()> {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let (child, addr, spawned_at) = launch(
            self.kind,
            &self.launcher,
            &self.options,
            self.dir.path(),
            &self.data_dir,
            &self.log_path,
        )?;
        self.child = child;
        self.addr = addr;
        self.spawned_at = spawned_at;
        Ok(())
    }

    pub(crate) fn kind(&self) -> ServerKind {
        self.kind
    }

    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The instant just before the process was spawned: the origin of the start-up figure.
    pub(crate) fn spawned_at(&self) -> Instant {
        self.spawned_at
    }

    /// `Some(status)` once the process has exited (it should not, while we use it).
    pub(crate) fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// The last `lines` lines of the server's own output, for error messages.
    pub(crate) fn log_tail(&self, lines: usize) -> String {
        let text = fs::read_to_string(&self.log_path).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Resident set size of the server process, in KiB.
    pub(crate) fn rss_kib(&self) -> io::Result<u64> {
        rss_kib(self.pid())
    }

    /// Total size of the files in the server's data directory. Zero after writes means the
    /// server kept them in memory only, which matters when comparing write throughput.
    pub(crate) fn data_dir_bytes(&self) -> io::Result<u64> {
        tree_bytes(&self.data_dir)
    }

    /// The server's data directory (ZooKeeper keeps its files in `version-2/` below it).
    pub(crate) fn data_dir(&self) -> &Path {
        &self.data_dir
    }
}

/// Spawns one server process on a free port; its output is appended to `log_path`.
fn launch(
    kind: ServerKind,
    launcher: &Launcher,
    options: &ServerOptions,
    dir: &Path,
    data_dir: &Path,
    log_path: &Path,
) -> io::Result<(Child, SocketAddr, Instant)> {
    let port = try_free_port()?;
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let log = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log_path)?;

    let mut cmd = match kind {
        ServerKind::Keeper => {
            let mut cmd = Command::new(&launcher.keeper_bin);
            cmd.arg("serve")
                .arg("--listen")
                .arg(addr.to_string())
                .arg("--data-dir")
                .arg(data_dir);
            if launcher.keeper_flags.sync {
                let sync = if options.unsynced { "none" } else { "always" };
                cmd.args(["--sync", sync]);
            }
            if let (Some(n), true) = (options.snap_count, launcher.keeper_flags.snap_count) {
                cmd.arg("--snap-count").arg(n.to_string());
            }
            // Logging at info level per request would be measured as server cost; the JVM
            // side runs with a no-op logger, so keep Keeper quiet too unless asked otherwise.
            if std::env::var_os("RUST_LOG").is_none() {
                cmd.env("RUST_LOG", "warn");
            }
            cmd
        }
        ServerKind::Zookeeper => {
            let cfg = dir.join("zoo.cfg");
            fs::write(
                &cfg,
                zoo_cfg(data_dir, port, launcher.zookeeper_force_sync, options),
            )?;
            let mut cmd = Command::new(&launcher.zookeeper.java);
            cmd.args(launcher.zookeeper.args(ZkRole::Standalone, &cfg));
            cmd
        }
    };
    cmd.current_dir(dir)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    die_with_parent(&mut cmd);

    let spawned_at = Instant::now();
    let child = cmd.spawn().map_err(|e| {
        let program = match kind {
            ServerKind::Keeper => launcher.keeper_bin.display().to_string(),
            ServerKind::Zookeeper => launcher.zookeeper.java.display().to_string(),
        };
        io::Error::new(e.kind(), format!("cannot start {kind} ({program}): {e}"))
    })?;
    Ok((child, addr, spawned_at))
}

fn tree_bytes(dir: &Path) -> io::Result<u64> {
    let mut total = 0;
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        if kind.is_dir() {
            total += tree_bytes(&entry.path())?;
        } else if kind.is_file() {
            total += entry.metadata()?.len();
        }
    }
    Ok(total)
}

impl Drop for ChildServer {
    fn drop(&mut self) {
        // `Child::kill` signals exactly this PID (SIGKILL); reaping avoids leaving a zombie.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The zoo.cfg of a benchmarked ZooKeeper: testkit's standalone loopback configuration with
/// ZooKeeper's own defaults (2 s ticks, 60 connections per address) but for `forceSync` and
/// `snapCount`, which the benchmark sets from its flags.
fn zoo_cfg(data_dir: &Path, port: u16, force_sync: bool, options: &ServerOptions) -> String {
    ZkOptions {
        force_sync,
        snap_count: options.snap_count,
        ..ZkOptions::default()
    }
    .zoo_cfg(data_dir, port)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn zoo_cfg_carries_the_flags_and_zookeepers_defaults() {
        let none = ServerOptions::default();
        let cfg = zoo_cfg(Path::new("/tmp/x"), 4242, true, &none);
        assert!(cfg.contains("clientPort=4242\n"), "{cfg}");
        assert!(cfg.contains("tickTime=2000\n"), "{cfg}");
        assert!(cfg.contains("maxClientCnxns=60\n"), "{cfg}");
        assert!(
            !cfg.contains("forceSync") && !cfg.contains("snapCount"),
            "{cfg}"
        );
        let snap = ServerOptions {
            snap_count: Some(750),
            ..ServerOptions::default()
        };
        let cfg = zoo_cfg(Path::new("/tmp/x"), 4242, false, &snap);
        assert!(cfg.contains("forceSync=no\n"), "{cfg}");
        assert!(cfg.contains("snapCount=750\n"), "{cfg}");
    }

    /// A launcher whose "Keeper" is a shell script, so process handling is tested without
    /// depending on either real server.
    pub(crate) fn script_launcher(dir: &Path, body: &str) -> Launcher {
        use std::os::unix::fs::PermissionsExt;
        let script = dir.join("fake-server");
        fs::write(&script, format!("#!/bin/sh\n{body}\n")).expect("write script");
        fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).expect("chmod");
        Launcher {
            keeper_bin: script,
            zookeeper: ZkJvm {
                java: PathBuf::from("java"),
                classpath: String::new(),
                options: Vec::new(),
            },
            zookeeper_force_sync: true,
            keeper_flags: KeeperFlags::default(),
        }
    }

    /// Spawns, retrying on ETXTBSY: a fork in another test thread may briefly hold the freshly
    /// written script open.
    pub(crate) fn spawn_script(launcher: &Launcher) -> ChildServer {
        spawn_script_with(launcher, &ServerOptions::default())
    }

    /// [`spawn_script`] with per-start settings.
    fn spawn_script_with(launcher: &Launcher, options: &ServerOptions) -> ChildServer {
        for _ in 0..100 {
            match ChildServer::spawn_with(ServerKind::Keeper, launcher, options) {
                Ok(server) => return server,
                Err(e) if e.kind() == io::ErrorKind::ExecutableFileBusy => {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                Err(e) => panic!("spawn: {e}"),
            }
        }
        panic!("script stayed busy");
    }

    #[test]
    fn keeper_flags_are_read_off_the_help_text() {
        let old = "Options:\n      --listen <LISTEN>  Address\n      --data-dir <DATA_DIR>\n";
        assert_eq!(KeeperFlags::from_help(old), KeeperFlags::default());
        let new = "Options:\n      --sync <SYNC>  [default: always] [possible values: always, \
                   none]\n      --snap-count <SNAP_COUNT>  Txns between snapshots\n";
        assert_eq!(
            KeeperFlags::from_help(new),
            KeeperFlags {
                sync: true,
                snap_count: true
            }
        );
        // A flag merely mentioned inside another's name does not count.
        assert!(!KeeperFlags::from_help("--sync-interval <MS>").sync);
    }

    #[test]
    fn keeper_flags_of_a_binary_come_from_serve_help() {
        let dir = tempfile::tempdir().expect("tempdir");
        let launcher = script_launcher(
            dir.path(),
            "[ \"$1 $2\" = \"serve --help\" ] && echo '  --sync <SYNC>'; exit 0",
        );
        let flags = probe_retrying(&launcher.keeper_bin);
        assert!(flags.sync && !flags.snap_count, "{flags:?}");
        assert_eq!(
            KeeperFlags::probe(&dir.path().join("missing")),
            KeeperFlags::default()
        );
    }

    /// The probe of a freshly written script, retried while another test's fork holds it open.
    fn probe_retrying(bin: &Path) -> KeeperFlags {
        for _ in 0..100 {
            let flags = KeeperFlags::probe(bin);
            if flags != KeeperFlags::default() {
                return flags;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        KeeperFlags::default()
    }

    #[test]
    fn a_crashed_server_restarts_on_the_same_data_dir() {
        let dir = tempfile::tempdir().expect("tempdir");
        // Records each start in the data dir (the argument after --data-dir), then idles.
        let launcher = script_launcher(
            dir.path(),
            "while [ \"$1\" != --data-dir ]; do shift; done; echo start >> \"$2/starts\"; \
             exec sleep 60",
        );
        let mut server = spawn_script(&launcher);
        let first = (server.pid(), server.addr());
        let starts = server.data_dir().join("starts");
        let wait_for = |lines: usize| {
            let deadline = Instant::now() + std::time::Duration::from_secs(20);
            while fs::read_to_string(&starts)
                .unwrap_or_default()
                .lines()
                .count()
                < lines
            {
                assert!(Instant::now() < deadline, "the script did not start");
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        };
        wait_for(1);
        server.crash_and_restart().expect("restart");
        wait_for(2);
        assert_ne!(server.pid(), first.0);
        assert!(
            !Path::new(&format!("/proc/{}", first.0)).exists(),
            "old one reaped"
        );
        assert!(server.exited().is_none());
        let pid = server.pid();
        drop(server);
        assert!(!Path::new(&format!("/proc/{pid}")).exists());
    }

    #[test]
    fn keeper_is_told_to_sync_every_write_unless_asked_for_an_unsynced_one() {
        let dir = tempfile::tempdir().expect("tempdir");
        // Writes the arguments after the data dir into the data dir, then idles.
        let mut launcher = script_launcher(
            dir.path(),
            "while [ \"$1\" != --data-dir ]; do shift; done; d=$2; shift 2; \
             echo \"$*\" > \"$d/args.tmp\"; mv \"$d/args.tmp\" \"$d/args\"; exec sleep 60",
        );
        launcher.keeper_flags.sync = true;
        for (unsynced, expected) in [(false, "--sync always"), (true, "--sync none")] {
            let options = ServerOptions {
                unsynced,
                ..ServerOptions::default()
            };
            let server = spawn_script_with(&launcher, &options);
            let args = server.data_dir().join("args");
            let deadline = Instant::now() + std::time::Duration::from_secs(10);
            while !args.exists() && Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            let written = fs::read_to_string(&args).expect("the script wrote its arguments");
            assert_eq!(written.trim(), expected, "unsynced: {unsynced}");
        }
    }

    #[test]
    fn dropping_a_child_server_kills_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let launcher = script_launcher(dir.path(), "exec sleep 60");
        let mut server = spawn_script(&launcher);
        let pid = server.pid();
        assert!(
            server.exited().is_none(),
            "the fake server should still run"
        );
        assert!(server.rss_kib().expect("rss of a live child") > 0);
        assert_eq!(server.data_dir_bytes().expect("data dir"), 0);
        fs::create_dir_all(server.data_dir.join("log")).expect("mkdir");
        fs::write(server.data_dir.join("log/1"), [0u8; 100]).expect("write");
        fs::write(server.data_dir.join("snap"), [0u8; 23]).expect("write");
        assert_eq!(server.data_dir_bytes().expect("data dir"), 123);
        drop(server);
        // Killed and reaped: the PID no longer names a process (not even a zombie).
        assert!(!Path::new(&format!("/proc/{pid}")).exists());
    }

    #[test]
    fn a_server_that_exits_is_noticed_and_its_output_kept() {
        let dir = tempfile::tempdir().expect("tempdir");
        let launcher = script_launcher(dir.path(), "echo \"args: $*\"; exit 3");
        let mut server = spawn_script(&launcher);
        let deadline = Instant::now() + std::time::Duration::from_secs(20);
        let status = loop {
            if let Some(status) = server.exited() {
                break status;
            }
            assert!(Instant::now() < deadline, "fake server did not exit");
            std::thread::sleep(std::time::Duration::from_millis(5));
        };
        assert_eq!(status.code(), Some(3));
        let tail = server.log_tail(5);
        assert!(tail.contains("args: serve --listen 127.0.0.1:"), "{tail}");
        assert!(tail.contains("--data-dir"), "{tail}");
    }
}
