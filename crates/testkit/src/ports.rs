//! Free loopback ports for servers started by tests.
//!
//! A test server is handed a port number and binds it itself (Apache ZooKeeper reads its port
//! from zoo.cfg), and a restart binds the same number again, because clients reconnect to the
//! address they know. So the port must stay ours while the server is down, and two things could
//! take it meanwhile: the kernel, which hands ports of its ephemeral range to every bind of port
//! 0 and to every outgoing connection (test clients make thousands), and another test process
//! picking the same number (nextest runs each test in a process of its own).
//!
//! Hence:
//! - ports come from below the ephemeral range (`/proc/sys/net/ipv4/ip_local_port_range`), which
//!   the kernel never picks on its own, from [`LOWEST`] up;
//! - a process reserves a port by holding a write lock on the byte at that offset of one file
//!   its user's test processes share (`{LOCK_FILE}-{uid}.lock` in the temporary directory), for
//!   as long as it lives: the kernel drops the lock when the process ends, however it ends, and
//!   other processes skip a locked port;
//! - within a process, a port handed out once is never handed out again;
//! - a port is also checked bindable, as programs that know nothing of the lock may use it.
//!
//! Where the ephemeral range leaves no room below it, ports come from the kernel (bind port 0),
//! with the reservation above still taken. Where the lock file cannot be opened or locked (not
//! Linux, a kernel without open file description locks), ports are not reserved across
//! processes, and the first call says so on stderr.

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io;
use std::net::{Ipv4Addr, TcpListener};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

/// The lowest port handed out: above the registered ports most services listen on.
const LOWEST: u16 = 20_000;
/// Fewer ports than this below the ephemeral range: use the kernel's picks instead.
const MIN_RANGE: u16 = 1_000;
/// The file whose bytes reserve ports, in the temporary directory, with the user's id after it
/// (another user's file in a shared `/tmp` may not be ours to open).
const LOCK_FILE: &str = "lockkeeper-testkit-ports";
/// Candidates tried before giving up.
const TRIES: usize = 4096;

/// Ports this process handed out.
static HANDED_OUT: Mutex<Option<HashSet<u16>>> = Mutex::new(None);
/// The open lock file, `None` where ports are not reserved across processes; never closed, so
/// the reservations last as long as the process.
static RESERVATIONS: OnceLock<Option<File>> = OnceLock::new();
/// Where the next search starts, so that each call goes on from the last.
static CURSOR: AtomicUsize = AtomicUsize::new(0);

/// A port on 127.0.0.1 that is free, reserved for this process and not handed out by it before.
/// Panics when none can be found, which on a working machine does not happen.
pub fn free_port() -> u16 {
    try_free_port().unwrap_or_else(|e| panic!("{e}"))
}

/// [`free_port`] for programs that report failures instead of panicking (the benchmark).
pub fn try_free_port() -> io::Result<u16> {
    let reservations = reservations();
    let below_ephemeral = ephemeral_start()
        .filter(|start| start.saturating_sub(LOWEST) >= MIN_RANGE)
        .map(|start| (LOWEST, start));
    // Each process starts somewhere else, so that processes starting together do not all try
    // the same ports first.
    let _ = CURSOR.compare_exchange(
        0,
        std::process::id() as usize * 7919,
        Ordering::Relaxed,
        Ordering::Relaxed,
    );
    for _ in 0..TRIES {
        let port = match below_ephemeral {
            Some((low, high)) => {
                let next = CURSOR.fetch_add(1, Ordering::Relaxed);
                low + (next % usize::from(high - low)) as u16
            }
            None => kernel_pick()?,
        };
        // A number tried before, reserved by another process or bound by some program: a
        // later try gets another.
        if first_time(port) && reserve(reservations, port) && bindable(port) {
            return Ok(port);
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AddrNotAvailable,
        format!("no free port on 127.0.0.1 after {TRIES} tries"),
    ))
}

/// The shared lock file, opened once per process; `None` (said once on stderr) if it cannot
/// be, or if this system has no open file description locks.
fn reservations() -> Option<&'static File> {
    RESERVATIONS
        .get_or_init(|| {
            // SAFETY: getuid cannot fail and touches no memory of ours.
            let uid = unsafe { libc::getuid() };
            let path: PathBuf = std::env::temp_dir().join(format!("{LOCK_FILE}-{uid}.lock"));
            let opened = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&path)
                .map_err(|e| e.to_string())
                .and_then(|file| match try_lock(&file, 0) {
                    Ok(_) => Ok(file),
                    Err(e) => Err(e.to_string()),
                });
            match opened {
                Ok(file) => Some(file),
                Err(e) => {
                    eprintln!(
                        "lockkeeper-testkit: test ports are not reserved across processes \
                         ({}: {e})",
                        path.display()
                    );
                    None
                }
            }
        })
        .as_ref()
}

/// Takes the write lock on byte `port` of the lock file; false when another process holds
/// it. Without a lock file every port counts as reserved here (and only the checks of this
/// process and the bind remain).
fn reserve(file: Option<&File>, port: u16) -> bool {
    match file {
        // An error now, after the lock worked at the opening, is as good as "held elsewhere":
        // another number is tried.
        Some(file) => try_lock(file, port).unwrap_or(false),
        None => true,
    }
}

/// The write lock on byte `offset` of `file`: an open file description's lock
/// (`F_OFD_SETLK`), held until the file is closed, which this process never does, and not
/// handed to the programs it starts. `Ok(false)` when another description holds it.
#[cfg(target_os = "linux")]
fn try_lock(file: &File, offset: u16) -> io::Result<bool> {
    // SAFETY: an all-zero `flock` is a valid value (OFD locks need `l_pid` zero); the fields
    // that matter are set below.
    let mut lock: libc::flock = unsafe { std::mem::zeroed() };
    lock.l_type = libc::F_WRLCK as _;
    lock.l_whence = libc::SEEK_SET as _;
    lock.l_start = libc::off_t::from(offset);
    lock.l_len = 1;
    // SAFETY: a valid descriptor and a pointer to an initialised `flock` that outlives the call.
    let done = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &lock) };
    if done == 0 {
        return Ok(true);
    }
    let err = io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::EAGAIN | libc::EACCES) => Ok(false),
        _ => Err(io::Error::new(
            err.kind(),
            format!("lock byte {offset} of the test port reservations: {err}"),
        )),
    }
}

#[cfg(not(target_os = "linux"))]
fn try_lock(_file: &File, _offset: u16) -> io::Result<bool> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "open file description locks are Linux's",
    ))
}

/// Records `port` as handed out by this process; false if it already was.
fn first_time(port: u16) -> bool {
    HANDED_OUT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .get_or_insert_with(HashSet::new)
        .insert(port)
}

fn bindable(port: u16) -> bool {
    TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok()
}

/// A port the kernel picks for a bind of port 0.
fn kernel_pick() -> io::Result<u16> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .map_err(|e| io::Error::new(e.kind(), format!("bind 127.0.0.1:0 for a free port: {e}")))?;
    Ok(listener.local_addr()?.port())
}

/// The first port of the kernel's ephemeral range, if the kernel says.
fn ephemeral_start() -> Option<u16> {
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
    range.split_whitespace().next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_distinct_bindable_and_outside_the_ephemeral_range() {
        let ports: Vec<u16> = (0..50).map(|_| free_port()).collect();
        let distinct: HashSet<u16> = ports.iter().copied().collect();
        assert_eq!(
            distinct.len(),
            ports.len(),
            "a port was handed out twice: {ports:?}"
        );
        if let Some(start) = ephemeral_start().filter(|s| s.saturating_sub(LOWEST) >= MIN_RANGE) {
            assert!(
                ports.iter().all(|&p| (LOWEST..start).contains(&p)),
                "ports outside {LOWEST}..{start}: {ports:?}"
            );
        }
        // The last one is very likely still free: bind it as a server would.
        let last = *ports.last().expect("50 ports");
        TcpListener::bind((Ipv4Addr::LOCALHOST, last)).expect("a fresh free port binds");
    }

    /// Reservations exclude each other: a port this process holds is refused to another
    /// holder, and a port another holder took is refused to this process.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_port_reserved_by_one_holder_is_refused_to_another() {
        let port = free_port();
        let mine = reservations().expect("ports are reserved on Linux");
        // A second open file description stands in for another process: OFD locks conflict
        // between descriptions as they do between processes.
        let other = OpenOptions::new()
            .read(true)
            .write(true)
            .open(format!("/proc/self/fd/{}", mine.as_raw_fd()))
            .expect("open the lock file again");
        assert!(
            !try_lock(&other, port).expect("try the lock"),
            "port {port} was reserved twice"
        );
        // The other way round: the first byte the other holder can take (other test processes
        // may hold some) is then refused to this process.
        let taken = (LOWEST..u16::MAX)
            .find(|&p| try_lock(&other, p).expect("try the lock"))
            .expect("a byte nobody holds");
        assert!(
            !reserve(Some(mine), taken),
            "port {taken}, held by another description, was reserved again"
        );
    }
}
