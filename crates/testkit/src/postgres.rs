//! PostgreSQL (Debian's `postgresql`) started for one test: `initdb` in a temporary directory,
//! then the server on a free loopback port, stopped on drop.
//!
//! Invariants: the server listens on 127.0.0.1 only (`listen_addresses`), its unix socket
//! lives in the temporary directory (never `/var/run/postgresql`), and it is stopped by its
//! PID. PostgreSQL refuses to run as root: when the tests run as root, `initdb` and the server
//! run as the `postgres` user the Debian package creates, which is given the directory.
//!
//! The server is the postmaster itself, spawned as our child, rather than daemonized by
//! `pg_ctl start`: that way its PID is the child's, it can be reaped, and the kernel's
//! parent-death signal stops it if the test process dies without dropping the handle (the
//! shell orphan guard of the other servers cannot watch a root parent from the `postgres`
//! user). Drop sends SIGQUIT, which is what `pg_ctl stop -m immediate` sends: the postmaster
//! stops its backends and exits at once; SIGKILL follows if it has not within 5 s.

use std::ffi::CString;
use std::fs;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::child::{die_with_parent, kill_and_reap};
use crate::launch::{self, Launch};
use crate::tools::find_on_path;

const LOG_FILE: &str = "postgres.log";

/// A running PostgreSQL server (superuser `postgres`, trust authentication on loopback),
/// stopped by its PID when dropped.
pub struct Postgres {
    child: Mutex<Child>,
    pid: u32,
    addr: SocketAddr,
    dir: TempDir,
}

impl Postgres {
    /// Runs `initdb` and starts the server on a free 127.0.0.1 port; returns once it accepts
    /// connections. Panics with the log when it cannot start.
    pub fn start() -> Postgres {
        Postgres::try_start().unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Postgres::start`], reporting failures instead of panicking.
    pub fn try_start() -> Result<Postgres, String> {
        let bin = bin_dir().ok_or(
            "no PostgreSQL server programs (initdb) in /usr/lib/postgresql/*/bin or on PATH: \
             install the Debian package `postgresql`",
        )?;
        let dir = tempfile::Builder::new()
            .prefix("lockkeeper-postgres-")
            .tempdir()
            .map_err(|e| format!("create a temporary directory for PostgreSQL: {e}"))?;
        let user = server_user()?;
        if let Some((uid, gid)) = user {
            chown(dir.path(), uid, gid)?;
        }
        let data = dir.path().join("data");
        let log_path = dir.path().join(LOG_FILE);

        let mut initdb = Command::new(bin.join("initdb"));
        initdb
            .arg("-D")
            .arg(&data)
            .args(["-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync"])
            .current_dir(dir.path())
            .stdin(Stdio::null());
        as_user(&mut initdb, user);
        let out = initdb
            .output()
            .map_err(|e| format!("run {}: {e}", bin.join("initdb").display()))?;
        if !out.status.success() {
            return Err(format!(
                "initdb failed ({}): {}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }

        let launch = Launch {
            name: "PostgreSQL",
            log: &log_path,
            port_taken: &["could not bind", "already in use"],
            not_ready: "not ready",
        };
        let command = |port: u16| {
            let mut command = Command::new(bin.join("postgres"));
            command
                .arg("-D")
                .arg(&data)
                .args(["-p", &port.to_string()])
                .args(["-c", "listen_addresses=127.0.0.1"])
                .arg("-c")
                .arg(format!("unix_socket_directories={}", dir.path().display()))
                // Tests need no durability from the database, only its semantics.
                .args(["-c", "fsync=off", "-c", "synchronous_commit=off"])
                .args(["-c", "full_page_writes=off", "-c", "max_connections=50"])
                .current_dir(dir.path())
                .stdin(Stdio::null());
            as_user(&mut command, user);
            die_with_parent(&mut command);
            command
        };
        let (child, port) = launch::on_free_port(&launch, command, |port| is_ready(&bin, port))?;
        Ok(Postgres {
            pid: child.id(),
            child: Mutex::new(child),
            addr: SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
            dir,
        })
    }

    /// The loopback address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// A libpq key-value connection string (user `postgres`, database `postgres`), the form
    /// `tokio_postgres::connect` takes.
    pub fn config(&self) -> String {
        format!(
            "host=127.0.0.1 port={} user=postgres dbname=postgres",
            self.port()
        )
    }

    /// The postmaster's PID, e.g. to pause it with SIGSTOP.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The temporary directory (data directory `data/`, the log, the unix socket).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Everything the server has logged so far.
    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.path().join(LOG_FILE)).unwrap_or_default()
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let mut child = self
            .child
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Ok(pid) = libc::pid_t::try_from(self.pid) {
            // SAFETY: kill(2) on our own child's PID, which is not reaped yet (so not reused).
            unsafe { libc::kill(pid, libc::SIGQUIT) };
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        kill_and_reap(&mut child);
    }
}

impl std::fmt::Debug for Postgres {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Postgres")
            .field("addr", &self.addr)
            .field("pid", &self.pid)
            .finish()
    }
}

/// The directory of the server programs: the newest `/usr/lib/postgresql/<version>/bin`
/// (Debian keeps them off PATH), else wherever `initdb` is on PATH.
fn bin_dir() -> Option<PathBuf> {
    let mut versions: Vec<(u32, PathBuf)> = fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").is_file().then_some((version, bin))
        })
        .collect();
    versions.sort();
    if let Some((_, bin)) = versions.pop() {
        return Some(bin);
    }
    let initdb = find_on_path("initdb")?;
    let initdb = fs::canonicalize(&initdb).unwrap_or(initdb);
    initdb.parent().map(Path::to_path_buf)
}

/// The `postgres` user's uid and gid when we run as root (PostgreSQL refuses root); `None`
/// when we are not root and run the server as ourselves.
fn server_user() -> Result<Option<(u32, u32)>, String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(None);
    }
    let name = CString::new("postgres").map_err(|e| e.to_string())?;
    // SAFETY: getpwnam with a NUL-terminated name; the record is read at once, before any
    // other call that could overwrite it.
    let entry = unsafe { libc::getpwnam(name.as_ptr()) };
    if entry.is_null() {
        return Err(
            "running as root, and there is no `postgres` user to run PostgreSQL as (PostgreSQL \
             refuses root): install the Debian package `postgresql`, which creates it"
                .into(),
        );
    }
    // SAFETY: non-null, just returned by getpwnam.
    let (uid, gid) = unsafe { ((*entry).pw_uid, (*entry).pw_gid) };
    Ok(Some((uid, gid)))
}

fn as_user(command: &mut Command, user: Option<(u32, u32)>) {
    use std::os::unix::process::CommandExt;
    if let Some((uid, gid)) = user {
        command.uid(uid).gid(gid);
    }
}

fn chown(path: &Path, uid: u32, gid: u32) -> Result<(), String> {
    std::os::unix::fs::chown(path, Some(uid), Some(gid))
        .map_err(|e| format!("give {} to the postgres user: {e}", path.display()))
}

/// Whether the server accepts connections on `port` (`pg_isready`, one second at most).
fn is_ready(bin: &Path, port: u16) -> bool {
    Command::new(bin.join("pg_isready"))
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-t", "1", "-q"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}
