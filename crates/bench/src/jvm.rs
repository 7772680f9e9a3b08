//! Java programs the benchmark carries (the Curator sides of `--locks` and `--recipes`): compiled
//! at run time with javac against Debian's jars, each together with `CuratorBenchSupport.java`
//! (the command loop, watchdog and sessions they share), run as child JVMs that take commands on
//! stdin and answer on stdout, one line at a time; the answers' `RESULT key=value ...` and
//! `<PREFIX> <us> <us> ...` lines are read here.
//!
//! Invariants: every JVM is killed, by its PID, when its handle drops and when this process dies
//! (the parent-death signal); every read is bounded in time; a failure carries the end of the
//! JVM's stderr, which is where a Java exception says what went wrong.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use super::BoxError;
use lockkeeper_testkit::{die_with_parent, javac_command};

/// Bound on compiling a program and on a JVM's start.
pub(crate) const START_LIMIT: Duration = Duration::from_secs(120);

/// What every program shares, compiled with each (the programs extend this class).
const SUPPORT_CLASS: &str = "CuratorBenchSupport";
const SUPPORT_SOURCE: &str = include_str!("CuratorBenchSupport.java");

/// A program compiled into a temporary directory, which lives as long as this value.
pub(crate) struct Classes {
    classpath: String,
    class: &'static str,
    _dir: tempfile::TempDir,
}

impl Classes {
    /// Compiles `source` (the public class `class`) and the shared support class with the
    /// `javac` next to `java`.
    pub(crate) async fn compile(
        java: &Path,
        classpath: &str,
        class: &'static str,
        source: &str,
    ) -> Result<Classes, BoxError> {
        let dir = tempfile::Builder::new()
            .prefix("lockkeeper-bench-java-")
            .tempdir()?;
        let mut files = Vec::new();
        for (name, text) in [(class, source), (SUPPORT_CLASS, SUPPORT_SOURCE)] {
            let file = dir.path().join(format!("{name}.java"));
            std::fs::write(&file, text)?;
            files.push(file);
        }
        let javac = javac_next_to(java);
        let compiled = tokio::time::timeout(
            START_LIMIT,
            Command::from(javac_command(&javac, dir.path(), classpath, &files))
                .kill_on_drop(true)
                .output(),
        )
        .await
        .map_err(|_| "javac did not finish within 2 minutes")?
        .map_err(|e| format!("cannot run {}: {e} (install a JDK)", javac.display()))?;
        if !compiled.status.success() {
            return Err(format!(
                "javac could not compile {class} ({}); is Curator at {classpath}? \
                 (Debian: libcurator-recipes-java, libslf4j-java)\n{}",
                compiled.status,
                String::from_utf8_lossy(&compiled.stderr)
            )
            .into());
        }
        Ok(Classes {
            classpath: format!("{}:{classpath}", dir.path().display()),
            class,
            _dir: dir,
        })
    }

    /// `java -cp <classes and jars> <class> <args>` with piped stdio, dying with this process
    /// and killed when its `Child` drops.
    pub(crate) fn command(&self, java: &Path, args: &[String]) -> Command {
        let mut command = Command::new(java);
        command
            .arg("-Djava.net.preferIPv4Stack=true")
            .arg("-cp")
            .arg(&self.classpath)
            .arg(self.class)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        die_with_parent(command.as_std_mut());
        command
    }

    /// The command line of [`Classes::command`] without its arguments, for the report.
    pub(crate) fn describe(&self, java: &Path) -> String {
        format!("{} -cp {} {}", java.display(), self.classpath, self.class)
    }
}

/// The end of a child's stderr, collected in the background so the pipe never fills.
#[derive(Clone, Default)]
pub(crate) struct StderrTail(Arc<StdMutex<String>>);

impl StderrTail {
    /// Starts collecting `child`'s stderr (if it is piped).
    pub(crate) fn collect(child: &mut Child) -> StderrTail {
        let tail = StderrTail::default();
        if let Some(mut pipe) = child.stderr.take() {
            let sink = Arc::clone(&tail.0);
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                while let Ok(n) = pipe.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    if let Ok(mut text) = sink.lock() {
                        text.push_str(&String::from_utf8_lossy(&buf[..n]));
                        // Only the end is ever shown: keep memory bounded on a chatty child.
                        if text.len() > 64 * 1024 {
                            let cut = text.len() - 32 * 1024;
                            let cut = (cut..text.len())
                                .find(|&i| text.is_char_boundary(i))
                                .unwrap_or(text.len());
                            text.drain(..cut);
                        }
                    }
                }
            });
        }
        tail
    }

    /// `what`, followed by the last lines the child wrote to stderr, if any.
    pub(crate) fn failure(&self, what: &str) -> BoxError {
        let text = self.0.lock().map(|s| s.clone()).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail = &lines[lines.len().saturating_sub(15)..];
        if tail.is_empty() {
            what.to_string().into()
        } else {
            format!("{what}; its stderr:\n{}", tail.join("\n")).into()
        }
    }
}

/// A running JVM that answers commands: each command is one line, each answer is result lines
/// ending with `END`, or an `ERROR <reason>` line.
pub(crate) struct Jvm {
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
    stderr: StderrTail,
}

impl Jvm {
    /// Starts `classes` with `args` and waits (bounded) for its `READY` line.
    pub(crate) async fn start(
        java: &Path,
        classes: &Classes,
        args: &[String],
    ) -> Result<Jvm, BoxError> {
        let mut child = classes
            .command(java, args)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", java.display()))?;
        let stdin = child.stdin.take().ok_or("no stdin pipe to the JVM")?;
        let stdout = child.stdout.take().ok_or("no stdout pipe from the JVM")?;
        let stderr = StderrTail::collect(&mut child);
        let mut jvm = Jvm {
            child,
            stdin,
            lines: BufReader::new(stdout).lines(),
            stderr,
        };
        let ready = jvm.next_line(START_LIMIT).await?;
        if ready != "READY" {
            return Err(jvm.failure(&format!("expected READY, got {ready:?}")));
        }
        Ok(jvm)
    }

    /// Sends one command and collects its answer up to `END`; an `ERROR` line fails it.
    pub(crate) async fn exchange(
        &mut self,
        command: &str,
        limit: Duration,
    ) -> Result<Vec<String>, BoxError> {
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
            Ok(Ok(None)) => Err(self.failure("the JVM exited")),
            Ok(Err(e)) => Err(self.failure(&format!("reading from the JVM: {e}"))),
            Err(_) => Err(self.failure(&format!("no answer from the JVM within {limit:?}"))),
        }
    }

    /// An error carrying `what` and the end of the JVM's stderr.
    pub(crate) fn failure(&self, what: &str) -> BoxError {
        self.stderr.failure(what)
    }

    /// The `key=value` words of the `RESULT` line of an answer.
    pub(crate) fn result<'a>(&self, lines: &'a [String]) -> Result<Fields<'a>, BoxError> {
        let line = lines
            .iter()
            .find_map(|l| l.strip_prefix("RESULT "))
            .ok_or_else(|| self.failure(&format!("no RESULT line in {lines:?}")))?;
        Ok(Fields {
            words: line
                .split_whitespace()
                .filter_map(|word| word.split_once('='))
                .collect(),
            stderr: self.stderr.clone(),
        })
    }

    /// The microsecond values of every `<prefix> <us> <us> ...` line of an answer, in order
    /// (`WAITS`, `GAPS`: one per event, so the caller checks their count against the result's).
    pub(crate) fn micros(&self, lines: &[String], prefix: &str) -> Result<Vec<Duration>, BoxError> {
        let mut values = Vec::new();
        for line in lines.iter().filter_map(|l| l.strip_prefix(prefix)) {
            for word in line.split_whitespace() {
                let us: u64 = word.parse().map_err(|_| {
                    self.failure(&format!("bad {} value {word:?}", prefix.to_lowercase()))
                })?;
                values.push(Duration::from_micros(us));
            }
        }
        Ok(values)
    }

    /// Asks the JVM to end and waits briefly; it is killed on drop if it does not.
    pub(crate) async fn stop(mut self) {
        let _ = self.stdin.write_all(b"quit\n").await;
        let _ = self.stdin.flush().await;
        let _ = tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await;
    }
}

/// The `key=value` words of a `RESULT` line.
pub(crate) struct Fields<'a> {
    words: Vec<(&'a str, &'a str)>,
    stderr: StderrTail,
}

impl Fields<'_> {
    /// The whole number under `key`, or an error naming it.
    pub(crate) fn number(&self, key: &str) -> Result<u64, BoxError> {
        self.words
            .iter()
            .find(|(k, _)| *k == key)
            .and_then(|(_, v)| v.parse().ok())
            .ok_or_else(|| {
                self.stderr
                    .failure(&format!("no number `{key}=` in {:?}", self.words))
            })
    }

    /// The microseconds under `key`, as a duration.
    pub(crate) fn micros(&self, key: &str) -> Result<Duration, BoxError> {
        self.number(key).map(Duration::from_micros)
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
