//! Running `lockkeeper elect` as a child process: its stdout as lines, its stderr kept whole
//! (the messages name a loss's cause and why a wait ended), every wait bounded.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lockkeeper::zk::Session;

pub(crate) const LOCKKEEPER: &str = env!("CARGO_BIN_EXE_lockkeeper");
/// Bound on a JVM start, a participant joining, and a failover (a 4 s session expiring on a
/// loaded machine).
pub(crate) const LIMIT: Duration = Duration::from_secs(90);

/// A `lockkeeper` process with its stdout as lines and its stderr collected; SIGKILLed on drop
/// if still running.
pub(crate) struct Cli {
    child: Child,
    lines: Receiver<String>,
    /// Everything written to stderr so far (also echoed to the test's stderr, for its log).
    stderr: Arc<Mutex<String>>,
    /// The reader of stderr: awaited at the exit, so the last message is in [`Cli::stderr`].
    stderr_reader: Option<std::thread::JoinHandle<()>>,
}

impl Cli {
    pub(crate) fn spawn(args: &[&str], markers: &Path) -> Cli {
        let mut child = Command::new(LOCKKEEPER)
            .args(args)
            .env("MARKERS", markers)
            .env_remove("LOCKKEEPER_BACKEND")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start lockkeeper");
        let (sender, lines) = channel();
        let stdout = child.stdout.take().expect("piped stdout");
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let mut pipe = child.stderr.take().expect("piped stderr");
        let collected = Arc::clone(&stderr);
        let stderr_reader = std::thread::spawn(move || {
            let mut chunk = [0u8; 4096];
            while let Ok(n @ 1..) = pipe.read(&mut chunk) {
                let text = String::from_utf8_lossy(&chunk[..n]);
                eprint!("{text}");
                collected
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push_str(&text);
            }
        });
        Cli {
            child,
            lines,
            stderr,
            stderr_reader: Some(stderr_reader),
        }
    }

    pub(crate) fn signal(&self, signal: libc::c_int) {
        // SAFETY: kill(2) on the pid of a child this test started and has not reaped.
        unsafe { libc::kill(self.child.id() as libc::pid_t, signal) };
    }

    /// Waits (bounded) for the exit; its code.
    pub(crate) fn exit_code(&mut self, limit: Duration) -> Option<i32> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait for lockkeeper") {
                // Read the pipe to its end, so the stderr is whole; bounded, since a command
                // that outlives this process would hold the pipe open.
                if let Some(reader) = self.stderr_reader.take() {
                    let until = Instant::now() + Duration::from_secs(5);
                    while !reader.is_finished() && Instant::now() < until {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                }
                return status.code();
            }
            assert!(
                Instant::now() < deadline,
                "lockkeeper still running after {limit:?}\n--- stderr:\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// What the process wrote to stderr so far (all of it once [`Cli::exit_code`] returned).
    pub(crate) fn stderr(&self) -> String {
        self.stderr
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    pub(crate) fn line(&self, limit: Duration) -> String {
        self.lines
            .recv_timeout(limit)
            .unwrap_or_else(|e| panic!("no line from lockkeeper within {limit:?}: {e}"))
    }
}

impl Drop for Cli {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Waits until `check` is true, polling; panics with `what` after [`LIMIT`].
pub(crate) fn wait_until(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + LIMIT;
    while !check() {
        assert!(Instant::now() < deadline, "{what}: not within {LIMIT:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub(crate) fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// How many participants the election at `path` has, as the library lists them.
pub(crate) fn queued(rt: &tokio::runtime::Runtime, session: &Session, path: &str) -> usize {
    rt.block_on(session.inspect(path))
        .expect("inspect the election")
        .participants
        .len()
}

/// Waits (generously) until the election at `path` on the ZooKeeper `connect` has `n`
/// participants, with a session of its own.
pub(crate) fn wait_for_participants(connect: &str, path: &str, n: usize) {
    let rt = runtime();
    let session = rt.block_on(Session::connect(connect)).expect("connect");
    wait_until(&format!("{n} participants in {path}"), || {
        rt.block_on(session.inspect(path))
            .map(|inspection| inspection.participants.len() >= n)
            .unwrap_or(false)
    });
    rt.block_on(session.close());
}

/// Sends `signal` to `pid` (a server this test started).
pub(crate) fn signal(pid: u32, signal: libc::c_int) {
    // SAFETY: kill(2) with plain integers, to a process this test started.
    assert_eq!(unsafe { libc::kill(pid as i32, signal) }, 0, "signal {pid}");
}

/// Asserts that `text` (a process's stderr) contains every one of `want` and none of `not`.
pub(crate) fn assert_says(label: &str, text: &str, want: &[&str], not: &[&str]) {
    for w in want {
        assert!(text.contains(w), "{label}: does not say {w:?}\n{text}");
    }
    for n in not {
        assert!(!text.contains(n), "{label}: says {n:?}\n{text}");
    }
}
