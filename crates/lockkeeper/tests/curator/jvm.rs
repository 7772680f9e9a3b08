//! The Java side of the Curator interop tests: compiling the programs in this directory and
//! talking to the JVMs that run them.
//!
//! The sources are compiled once per test process into the cargo target's temporary directory,
//! keyed by a hash of the sources, so that test processes running at the same time share one
//! copy (or race harmlessly: each compiles into a staging directory and renames it into place).
//! A JVM speaks in lines: the test writes commands to its stdin and reads its stdout line by line
//! through a channel, so every wait has a deadline and a silent JVM fails the test instead of
//! hanging it. Everything a JVM printed, stderr included, goes into the failure message.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use lockkeeper_testkit::{compile_java, curator_classpath, java};

/// Where the Java sources live: next to this file.
fn sources_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/curator")
}

/// The compiled programs; compiled on first use.
fn classes_dir() -> &'static Path {
    static CLASSES: OnceLock<PathBuf> = OnceLock::new();
    CLASSES.get_or_init(|| {
        compile_java(
            &sources_dir(),
            Path::new(env!("CARGO_TARGET_TMPDIR")),
            "zk-curator",
        )
    })
}

/// A running Java program, killed on drop if it is still running.
pub(crate) struct Jvm {
    label: String,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    transcript: Arc<Mutex<String>>,
}

impl Jvm {
    /// Starts `class` with `args`, stdin and stdout piped.
    pub(crate) fn spawn(class: &str, args: &[&str]) -> Jvm {
        let classpath = format!("{}:{}", classes_dir().display(), curator_classpath());
        let mut child = Command::new(java())
            .args(["-Xmx192m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"])
            .arg("-Djava.net.preferIPv4Stack=true")
            .arg("-cp")
            .arg(classpath)
            .arg(class)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start java");
        let transcript = Arc::new(Mutex::new(String::new()));
        let (sender, lines) = channel();
        let stdout = child.stdout.take().expect("piped stdout");
        let log = Arc::clone(&transcript);
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                log.lock()
                    .expect("transcript")
                    .push_str(&format!("{line}\n"));
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        let mut stderr = child.stderr.take().expect("piped stderr");
        let log = Arc::clone(&transcript);
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text);
            log.lock()
                .expect("transcript")
                .push_str(&format!("--- stderr:\n{text}"));
        });
        Jvm {
            label: format!("{class} {}", args.join(" ")),
            stdin: child.stdin.take(),
            child,
            lines,
            transcript,
        }
    }

    /// Everything the program printed so far, for assertion messages.
    pub(crate) fn transcript(&self) -> String {
        format!(
            "--- {}:\n{}",
            self.label,
            self.transcript.lock().expect("transcript")
        )
    }

    /// The next line the program prints, waiting at most `limit`; panics on silence or exit.
    pub(crate) fn next_line(&mut self, limit: Duration) -> String {
        match self.lines.recv_timeout(limit) {
            Ok(line) => line,
            Err(RecvTimeoutError::Timeout) => {
                panic!("no output within {limit:?}\n{}", self.transcript())
            }
            Err(RecvTimeoutError::Disconnected) => {
                // Give the stderr reader a moment to collect the reason.
                std::thread::sleep(Duration::from_millis(200));
                panic!("the JVM ended early\n{}", self.transcript())
            }
        }
    }

    /// The next line if the program prints one within `wait`, else `None` (it is still busy).
    pub(crate) fn line_within(&mut self, wait: Duration) -> Option<String> {
        match self.lines.recv_timeout(wait) {
            Ok(line) => Some(line),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => {
                std::thread::sleep(Duration::from_millis(200));
                panic!("the JVM ended early\n{}", self.transcript())
            }
        }
    }

    /// Skips lines until one equals `expected`, waiting at most `limit` in all.
    pub(crate) fn expect_line(&mut self, expected: &str, limit: Duration) {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if self.next_line(left.max(Duration::from_millis(1))) == expected {
                return;
            }
        }
    }

    /// Writes one line to the program's stdin.
    pub(crate) fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin still open");
        writeln!(stdin, "{line}")
            .and_then(|()| stdin.flush())
            .unwrap_or_else(|e| panic!("write {line:?} to the JVM: {e}\n{}", self.transcript()));
    }

    /// Sends a command and returns the one line that answers it.
    pub(crate) fn request(&mut self, command: &str, limit: Duration) -> String {
        self.send(command);
        self.next_line(limit)
    }

    /// Closes the program's stdin and waits until it exits (at most `limit`).
    pub(crate) fn finish(mut self, limit: Duration) -> Finished {
        self.stdin = None;
        let deadline = Instant::now() + limit;
        let mut rest = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => rest.push(line),
                Err(RecvTimeoutError::Disconnected) => break,
                Err(RecvTimeoutError::Timeout) => {
                    panic!("still running after {limit:?}\n{}", self.transcript())
                }
            }
        }
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("poll the JVM") {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "closed its output but did not exit\n{}",
                self.transcript()
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        // The stderr reader ends with the process; give it a moment to file what it read.
        std::thread::sleep(Duration::from_millis(50));
        Finished {
            success: status.success(),
            lines: rest,
            transcript: self.transcript(),
        }
    }
}

/// What a program that exited left behind.
pub(crate) struct Finished {
    /// Whether it exited with status 0.
    pub success: bool,
    /// The lines it printed after those already read with [`Jvm::next_line`].
    pub lines: Vec<String>,
    /// Everything it printed, stderr included.
    pub transcript: String,
}

impl Drop for Jvm {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
