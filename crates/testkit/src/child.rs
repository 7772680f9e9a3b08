//! Server processes (ZooKeeper's JVM, redis-server) started for a test and never left behind.
//!
//! A server is killed and reaped when its handle is dropped; if the test process dies first
//! (a runner killing a test that timed out runs no destructor), a watcher kills it instead.
//! Programs that time their children's start (the benchmark) use [`die_with_parent`] instead of
//! the watcher: the kernel's parent-death signal adds no shell in front of the child.

use std::ffi::OsStr;
use std::fs;
use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

/// Kills the server if the test process dies without dropping its handle (a test killed by a
/// timeout, say), so that no ZooKeeper outlives its test run. A watcher polls every second that
/// the test process (the shell's parent) is alive; once it is gone, and only if the PID still
/// belongs to our server (its command line names our directory, `$1`), it kills it. The watcher
/// ends on its own when the server ends first.
const ORPHAN_GUARD: &str = r#"
parent=$PPID
me=$$
marker=$1
shift
(
    while kill -0 "$parent" 2>/dev/null && kill -0 "$me" 2>/dev/null; do sleep 1; done
    if kill -0 "$me" 2>/dev/null && grep -qaF "$marker" "/proc/$me/cmdline" 2>/dev/null; then
        kill -9 "$me"
    fi
) </dev/null >/dev/null 2>&1 &
exec "$@"
"#;

/// A command that runs `program` (add its arguments) under the orphan guard. The spawned
/// child's PID is the program's own: the wrapping shell `exec`s it. `marker` must appear in
/// the program's command line (the server's temporary directory does).
pub(crate) fn guarded_command(marker: &Path, program: impl AsRef<OsStr>) -> Command {
    let mut command = Command::new("sh");
    command
        .arg("-c")
        .arg(ORPHAN_GUARD)
        .arg("sh")
        .arg(marker)
        .arg(program);
    command
}

/// Asks the kernel to SIGKILL the child when the thread that spawns it exits, however it exits
/// (SIGKILL included), so that no server or peer program outlives the process that started it.
///
/// Linux ties the signal to the spawning *thread*: spawn from threads that live as long as the
/// program (a runtime's main or worker threads), never from a `spawn_blocking` thread, which is
/// retired when idle. Elsewhere this does nothing, and drop handlers are the only guard.
#[cfg(target_os = "linux")]
pub fn die_with_parent(command: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the forked child before exec and only calls prctl(2), which is
    // async-signal-safe; it allocates nothing and takes no lock.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Does nothing off Linux (there is no parent-death signal); drop handlers still kill.
#[cfg(not(target_os = "linux"))]
pub fn die_with_parent(_command: &mut Command) {}

/// Sends the signal named `signal` (`STOP`, `INT`, ...) to the process `pid` only, with
/// kill(1); panics if it cannot.
pub fn send_signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{signal} {pid}");
}

/// Waits at most `limit` for `child` to exit, polling; its status, `None` if it still runs.
pub(crate) fn wait_bounded(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait child") {
            return Some(status);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

pub(crate) fn kill_and_reap(child: &mut Child) {
    // `Child::kill` signals exactly this PID; an already-exited child is not an error here.
    let _ = child.kill();
    let _ = child.wait();
}

pub(crate) fn read_from(path: &Path, offset: u64) -> String {
    let mut text = Vec::new();
    if let Ok(mut file) = fs::File::open(path) {
        use std::io::{Seek, SeekFrom};
        let _ = file.seek(SeekFrom::Start(offset));
        let _ = file.read_to_end(&mut text);
    }
    String::from_utf8_lossy(&text).into_owned()
}

pub(crate) fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
