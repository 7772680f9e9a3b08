//! Apache Curator's `InterProcessMutex`, measured from a JVM the benchmark starts.
//!
//! The benchmark binary carries `CuratorLockBench.java` (included at compile time), so
//! `lockkeeper bench --locks` needs only a JDK and Debian's Curator jars: it compiles the program
//! with javac into a temporary directory and runs one JVM for the whole run. Commands go to the
//! JVM's stdin and results come back on its stdout, one line each (see the Java file), every
//! exchange bounded in time. The JVM is killed when its handle drops, when this process dies (the
//! parent-death signal), and by its own watchdog.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use super::measure::{Contended, Uncontended};
use crate::bench::BoxError;
use crate::bench::process::die_with_parent;

/// The Java program, carried by the binary.
const SOURCE: &str = include_str!("../CuratorLockBench.java");
const CLASS: &str = "CuratorLockBench";

/// Debian's Curator 5 and ZooKeeper client jars, with a logger that discards (Curator would
/// otherwise warn that it has none).
pub const DEFAULT_CLASSPATH: &str = "/usr/share/java/curator-recipes.jar:\
    /usr/share/java/curator-framework.jar:/usr/share/java/curator-client.jar:\
    /usr/share/java/zookeeper.jar:/usr/share/java/zookeeper-jute.jar:/usr/share/java/guava.jar:\
    /usr/share/java/slf4j-api.jar:/usr/share/java/slf4j-nop.jar";

/// Bound on compiling the program and on the JVM's start.
const START_LIMIT: Duration = Duration::from_secs(120);

/// The running JVM.
pub struct CuratorJvm {
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
    stderr: Arc<StdMutex<String>>,
    command: String,
    /// Holds the compiled class for as long as the JVM runs.
    _classes: tempfile::TempDir,
}

impl CuratorJvm {
    /// Compiles the program and starts it with `java`, ending itself after `watchdog`.
    pub async fn start(
        java: &Path,
        classpath: &str,
        watchdog: Duration,
    ) -> Result<CuratorJvm, BoxError> {
        let classes = tempfile::Builder::new()
            .prefix("lockkeeper-bench-curator-")
            .tempdir()?;
        let source = classes.path().join(format!("{CLASS}.java"));
        std::fs::write(&source, SOURCE)?;
        let javac = javac_next_to(java);
        let compiled = tokio::time::timeout(
            START_LIMIT,
            Command::new(&javac)
                .args(["-nowarn", "-encoding", "UTF-8", "-d"])
                .arg(classes.path())
                .arg("-cp")
                .arg(classpath)
                .arg(&source)
                .stdin(Stdio::null())
                .kill_on_drop(true)
                .output(),
        )
        .await
        .map_err(|_| "javac did not finish within 2 minutes")?
        .map_err(|e| format!("cannot run {}: {e} (install a JDK)", javac.display()))?;
        if !compiled.status.success() {
            return Err(format!(
                "javac could not compile the Curator benchmark ({}); is Curator at {classpath}? \
                 (Debian: libcurator-recipes-java, libslf4j-java)\n{}",
                compiled.status,
                String::from_utf8_lossy(&compiled.stderr)
            )
            .into());
        }

        let full_classpath = format!("{}:{classpath}", classes.path().display());
        let mut command = Command::new(java);
        command
            .arg("-Djava.net.preferIPv4Stack=true")
            .arg("-cp")
            .arg(&full_classpath)
            .arg(CLASS)
            .arg(watchdog.as_secs().max(1).to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        die_with_parent(command.as_std_mut());
        let mut child = command
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", java.display()))?;
        let stdin = child.stdin.take().ok_or("no stdin pipe to the JVM")?;
        let stdout = child.stdout.take().ok_or("no stdout pipe from the JVM")?;
        let stderr = Arc::new(StdMutex::new(String::new()));
        if let Some(mut pipe) = child.stderr.take() {
            let sink = Arc::clone(&stderr);
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                while let Ok(n) = pipe.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    if let Ok(mut text) = sink.lock() {
                        text.push_str(&String::from_utf8_lossy(&buf[..n]));
                    }
                }
            });
        }
        let mut jvm = CuratorJvm {
            child,
            stdin,
            lines: BufReader::new(stdout).lines(),
            stderr,
            command: format!(
                "{} -cp {full_classpath} {CLASS} (Curator InterProcessMutex)",
                java.display()
            ),
            _classes: classes,
        };
        let ready = jvm.next_line(START_LIMIT).await?;
        if ready != "READY" {
            return Err(jvm.failure(&format!("expected READY, got {ready:?}")));
        }
        Ok(jvm)
    }

    /// The command line, printed so a reader knows what was measured.
    pub fn describe(&self) -> &str {
        &self.command
    }

    /// Up to `cycles` acquire+release cycles on one session, or until `limit` passed, after
    /// up to `warmup_cycles` unmeasured ones within `warmup`.
    pub async fn uncontended(
        &mut self,
        connect: &str,
        path: &str,
        warmup_cycles: u32,
        warmup: Duration,
        cycles: u32,
        limit: Duration,
    ) -> Result<Uncontended, BoxError> {
        let command = format!(
            "uncontended {connect} {path} {warmup_cycles} {} {cycles} {}",
            warmup.as_millis(),
            limit.as_millis()
        );
        let lines = self
            .exchange(&command, warmup + limit * 2 + START_LIMIT)
            .await?;
        let (cycles, elapsed) = self.result(&lines)?;
        Ok(Uncontended { cycles, elapsed })
    }

    /// `clients` sessions on one lock, each looping acquire -> release up to `cycles` times or
    /// until `limit` passed.
    pub async fn contended(
        &mut self,
        connect: &str,
        path: &str,
        clients: usize,
        cycles: u32,
        limit: Duration,
    ) -> Result<Contended, BoxError> {
        let lines = self
            .exchange(
                &format!(
                    "contended {connect} {path} {clients} {cycles} {}",
                    limit.as_millis()
                ),
                limit * 2 + START_LIMIT,
            )
            .await?;
        let mut waits = Vec::new();
        for line in lines.iter().filter_map(|l| l.strip_prefix("WAITS")) {
            for word in line.split_whitespace() {
                let us: u64 = word
                    .parse()
                    .map_err(|_| self.failure(&format!("bad wait {word:?}")))?;
                waits.push(Duration::from_micros(us));
            }
        }
        let (handoffs, elapsed) = self.result(&lines)?;
        if handoffs != waits.len() as u64 {
            return Err(self.failure(&format!(
                "{handoffs} handoffs but {} waits reported",
                waits.len()
            )));
        }
        Ok(Contended::from_waits(clients, &waits, elapsed))
    }

    /// Parses `RESULT cycles=<n> elapsed_us=<us>`.
    fn result(&self, lines: &[String]) -> Result<(u64, Duration), BoxError> {
        let parsed = lines.iter().find_map(|line| {
            let mut words = line.strip_prefix("RESULT ")?.split(' ');
            let cycles = words.next()?.strip_prefix("cycles=")?.parse().ok()?;
            let us = words.next()?.strip_prefix("elapsed_us=")?.parse().ok()?;
            Some((cycles, Duration::from_micros(us)))
        });
        parsed.ok_or_else(|| self.failure(&format!("no RESULT line in {lines:?}")))
    }

    /// Sends one command and collects its answer up to `END`; an `ERROR` line fails it.
    async fn exchange(&mut self, command: &str, limit: Duration) -> Result<Vec<String>, BoxError> {
        self.stdin
            .write_all(format!("{command}\n").as_bytes())
            .await?;
        self.stdin.flush().await?;
        let deadline = tokio::time::Instant::now() + limit;
        let mut answer = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let line = self.next_line(left).await?;
            if line == "END" {
                break;
            }
            if let Some(reason) = line.strip_prefix("ERROR ") {
                return Err(self.failure(&format!("Curator: {reason}")));
            }
            answer.push(line);
        }
        Ok(answer)
    }

    async fn next_line(&mut self, limit: Duration) -> Result<String, BoxError> {
        match tokio::time::timeout(limit, self.lines.next_line()).await {
            Ok(Ok(Some(line))) => Ok(line),
            Ok(Ok(None)) => Err(self.failure("the Curator JVM exited")),
            Ok(Err(e)) => Err(self.failure(&format!("reading from the Curator JVM: {e}"))),
            Err(_) => Err(self.failure(&format!("no answer within {limit:?}"))),
        }
    }

    /// An error carrying `what` and the end of the JVM's stderr.
    fn failure(&self, what: &str) -> BoxError {
        let stderr = self.stderr.lock().map(|s| s.clone()).unwrap_or_default();
        let tail: Vec<&str> = stderr.lines().rev().take(15).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        if tail.is_empty() {
            what.to_string().into()
        } else {
            format!("{what}; JVM stderr:\n{}", tail.join("\n")).into()
        }
    }

    /// Asks the JVM to end and waits briefly; it is killed on drop if it does not.
    pub async fn stop(mut self) {
        let _ = self.stdin.write_all(b"quit\n").await;
        let _ = self.stdin.flush().await;
        let _ = tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await;
    }
}

/// `javac` from the same JDK as `java` when `java` is a path, else `javac` from `PATH`.
fn javac_next_to(java: &Path) -> PathBuf {
    match java.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => {
            let candidate = dir.join("javac");
            if candidate.is_file() {
                return candidate;
            }
            PathBuf::from("javac")
        }
        _ => PathBuf::from("javac"),
    }
}
