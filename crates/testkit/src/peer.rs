//! A child process spoken to in lines: a Curator program on a JVM, a kazoo script, a
//! `lockkeeper inspect --watch`. The test writes a line to its stdin and waits, under a bound,
//! for the line it prints next.
//!
//! Invariants:
//! - every wait is bounded and names the peer (its label) when it fails: a silent or ended
//!   peer fails the test with a message, never hangs it;
//! - stdout is read by a thread of its own into a channel, so a peer that prints more than the
//!   pipe holds never blocks on a test that is not reading yet;
//! - the process is killed and reaped when the handle is dropped, also when the test panics.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, TryRecvError, channel};
use std::time::{Duration, Instant};

/// A running line-driven child process; see the module docs.
pub struct LinePeer {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    label: String,
}

impl LinePeer {
    /// Starts `command` with its stdin and stdout piped (stderr as the command set it, the
    /// test's own by default). `label` names the peer in failure messages.
    pub fn spawn(command: &mut Command, label: impl Into<String>) -> LinePeer {
        let label = label.into();
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("start {label}: {e}"));
        let stdout = child.stdout.take().expect("piped stdout");
        let stdin = child.stdin.take().expect("piped stdin");
        let (sender, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        LinePeer {
            child,
            stdin,
            lines,
            label,
        }
    }

    /// The peer's process id, to signal it.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The peer's exit status if it has ended (reaping it), `None` while it runs: for a test
    /// that stops the peer with a signal and checks how it ended.
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        self.child
            .try_wait()
            .unwrap_or_else(|e| panic!("wait for {}: {e}", self.label))
    }

    /// Writes `line` and a newline to the peer's stdin, flushed.
    pub fn send(&mut self, line: &str) {
        writeln!(self.stdin, "{line}")
            .and_then(|()| self.stdin.flush())
            .unwrap_or_else(|e| panic!("write {line:?} to {}: {e}", self.label));
    }

    /// Sends the signal named `signal` (`INT`, `TERM`, `STOP`, ...) to the peer only.
    pub fn signal(&self, signal: &str) {
        crate::child::send_signal(self.pid(), signal);
    }

    /// Waits at most `limit` for the peer to end (blocking this thread); its status.
    pub fn wait_exit(&mut self, limit: Duration) -> ExitStatus {
        crate::child::wait_bounded(&mut self.child, limit)
            .unwrap_or_else(|| panic!("{}: still running after {limit:?}", self.label))
    }

    /// The next line if the peer prints one within `limit`, `None` if it stays quiet that long
    /// (blocking this thread). Panics if the peer has ended.
    pub fn line_within(&mut self, limit: Duration) -> Option<String> {
        match self.lines.recv_timeout(limit) {
            Ok(line) => Some(line),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => panic!("{}: ended", self.label),
        }
    }

    /// The next line the peer prints, waiting at most `limit` (blocking this thread).
    pub fn next_line(&mut self, limit: Duration) -> String {
        self.line_within(limit)
            .unwrap_or_else(|| panic!("{}: no line within {limit:?}", self.label))
    }

    /// The next line, which must start with `prefix`, waiting at most `limit`.
    pub fn expect(&mut self, prefix: &str, limit: Duration) -> String {
        let line = self.next_line(limit);
        assert!(
            line.starts_with(prefix),
            "{} said {line:?}, expected {prefix:?}…",
            self.label
        );
        line
    }

    /// [`LinePeer::next_line`] for async tests: polls instead of blocking, so the runtime's
    /// other tasks (a session's heartbeats, say) run meanwhile.
    pub async fn next_line_async(&mut self, limit: Duration) -> String {
        self.line_within_async(limit)
            .await
            .unwrap_or_else(|| panic!("{}: no line within {limit:?}", self.label))
    }

    /// [`LinePeer::line_within`] for async tests (polls, as [`LinePeer::next_line_async`]).
    pub async fn line_within_async(&mut self, limit: Duration) -> Option<String> {
        let deadline = Instant::now() + limit;
        loop {
            match self.lines.try_recv() {
                Ok(line) => return Some(line),
                Err(TryRecvError::Empty) => {}
                Err(TryRecvError::Disconnected) => panic!("{}: ended", self.label),
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for LinePeer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
