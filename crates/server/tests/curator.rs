//! Apache Curator 5.4 (Debian's jars) against Keeper and against Apache ZooKeeper.
//!
//! Curator is the client most Java services use, and its recipes lean on exactly the parts of the
//! protocol that are easy to get subtly wrong: sequential naming and ordering (locks, latches,
//! semaphores), container parents, ephemeral cleanup, one-shot and persistent watches (caches,
//! barriers). The recipes themselves are unmodified Curator; the small Java programs in
//! `clients/curator/` drive them and check what they observe, printing one `PASS name` or
//! `FAIL name: reason` line. Each check runs against every backend of `both()` with the same
//! expectations.
//!
//! The Java sources are compiled once per test run into the cargo target directory (keyed by a
//! hash of the sources, so concurrent test processes share or race harmlessly), then run with
//! `java -cp`. Every JVM has its own watchdog, and this side kills it if it outlives that.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use lockkeeper_testkit::{
    TestServer, both, compile_java, curator_classpath, java, java_classpath, java_jar,
};

/// Where the Java sources live, next to this file.
fn sources_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/curator")
}

/// Compiles the checks once per process; later calls reuse the result.
fn classes_dir() -> &'static Path {
    static CLASSES: OnceLock<PathBuf> = OnceLock::new();
    CLASSES.get_or_init(|| {
        compile_java(
            &sources_dir(),
            Path::new(env!("CARGO_TARGET_TMPDIR")),
            "curator",
        )
    })
}

/// A running check JVM whose output is collected on background threads (so a chatty JVM never
/// blocks on a full pipe), killed on drop if still running.
struct Check {
    label: String,
    child: Child,
    stdout: Option<JoinHandle<String>>,
    stderr: Option<JoinHandle<String>>,
}

/// What a finished check printed.
struct Finished {
    label: String,
    status: String,
    success: bool,
    stdout: String,
    stderr: String,
}

impl Finished {
    fn transcript(&self) -> String {
        format!(
            "--- {} ({}) stdout:\n{}\n--- stderr:\n{}",
            self.label, self.status, self.stdout, self.stderr
        )
    }
}

fn drain(mut pipe: impl Read + Send + 'static) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = pipe.read_to_end(&mut bytes);
        String::from_utf8_lossy(&bytes).into_owned()
    })
}

impl Check {
    /// Starts `class` with the server's connect string followed by `args`; Curator's own log is
    /// discarded.
    fn spawn(server: &dyn TestServer, class: &str, args: &[&str]) -> Check {
        Check::spawn_on(server, class, args, &curator_classpath())
    }

    /// Like [`Check::spawn`], with Curator's log written to stderr (slf4j-simple at INFO), for
    /// a check about what Curator logs.
    fn spawn_logging(server: &dyn TestServer, class: &str, args: &[&str]) -> Check {
        let jars = format!(
            "{}:{}",
            java_classpath(),
            java_jar("slf4j-simple", "libslf4j-java").display()
        );
        Check::spawn_on(server, class, args, &jars)
    }

    /// Starts `class` on the compiled checks followed by `jars` (the client and one slf4j
    /// binding: the binding decides whether Curator's log is seen).
    fn spawn_on(server: &dyn TestServer, class: &str, args: &[&str], jars: &str) -> Check {
        let classpath = format!("{}:{jars}", classes_dir().display());
        let mut child = Command::new(java())
            .args(["-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"])
            .arg("-Djava.net.preferIPv4Stack=true")
            .arg("-cp")
            .arg(classpath)
            .arg(class)
            .arg(server.connect_string())
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start java");
        let stdout = child.stdout.take().map(drain);
        let stderr = child.stderr.take().map(drain);
        Check {
            label: format!("{class} {} on {}", args.join(" "), server.name()),
            child,
            stdout,
            stderr,
        }
    }

    /// Waits up to `limit` (the JVM's own watchdog should fire first), then kills it.
    fn finish(mut self, limit: Duration) -> Finished {
        let started = Instant::now();
        let status = loop {
            match self.child.try_wait().expect("poll the check JVM") {
                Some(status) => break format!("{status}"),
                None if started.elapsed() > limit => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    break format!("killed after {limit:?} without finishing");
                }
                None => std::thread::sleep(Duration::from_millis(50)),
            }
        };
        let success = self
            .child
            .try_wait()
            .ok()
            .flatten()
            .is_some_and(|s| s.success())
            && !status.starts_with("killed");
        let stdout = self.stdout.take().map(join_text).unwrap_or_default();
        let stderr = self.stderr.take().map(join_text).unwrap_or_default();
        Finished {
            label: self.label.clone(),
            status,
            success,
            stdout,
            stderr,
        }
    }
}

fn join_text(handle: JoinHandle<String>) -> String {
    handle
        .join()
        .unwrap_or_else(|_| "(output reader panicked)".into())
}

impl Drop for Check {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// How long this side waits for one check JVM: beyond every check's own watchdog.
const JVM_LIMIT: Duration = Duration::from_secs(240);

/// Asserts the check exited 0 with its `PASS name` line and no `FAIL` line.
fn assert_passed(done: &Finished, name: &str) {
    let pass_line = format!("PASS {name}");
    assert!(
        done.success
            && done.stdout.lines().any(|l| l.trim() == pass_line)
            && !done.stdout.lines().any(|l| l.starts_with("FAIL")),
        "Curator check `{name}` did not pass\n{}",
        done.transcript()
    );
}

/// Runs one check to completion against one server and asserts it passed.
fn run_check(server: &dyn TestServer, class: &str, name: &str, args: &[&str]) {
    let done = Check::spawn(server, class, args).finish(JVM_LIMIT);
    assert_passed(&done, name);
}

/// InterProcessMutex, contended from two JVMs with three sessions each: an ephemeral "holder"
/// marker that must never exist twice and a read-sleep-write counter that must not lose an
/// update prove that one session at a time holds the lock, and every round completes, so every
/// contender got its turn.
#[test]
fn mutex_excludes_contenders_across_jvms() {
    const JVMS: usize = 2;
    const THREADS: usize = 3;
    const ROUNDS: usize = 8;
    for server in both() {
        let server = server.as_ref();
        let threads = THREADS.to_string();
        let rounds = ROUNDS.to_string();
        let contenders: Vec<Check> = (0..JVMS)
            .map(|_| {
                Check::spawn(
                    server,
                    "MutexCheck",
                    &["contend", "/locks/shared", &threads, &rounds],
                )
            })
            .collect();
        for contender in contenders {
            assert_passed(&contender.finish(JVM_LIMIT), "mutex-contend");
        }
        let expected = (JVMS * THREADS * ROUNDS).to_string();
        run_check(
            server,
            "MutexCheck",
            "mutex-verify",
            &["verify", "/locks/shared", &expected],
        );
    }
}

/// InterProcessMutex re-entrancy: the holder re-acquires, the lock stays held until the last
/// release, a timed-out waiter leaves no node, and a release without holding is refused.
#[test]
fn mutex_is_reentrant() {
    for server in both() {
        run_check(
            server.as_ref(),
            "MutexCheck",
            "mutex-reentrant",
            &["reentrant", "/locks/reentrant"],
        );
    }
}

/// LeaderLatch: four sessions, exactly one leader at a time, all agree who it is, and closing
/// the leader's latch hands leadership to another until none is left.
#[test]
fn leader_latch_elects_exactly_one_leader() {
    for server in both() {
        run_check(
            server.as_ref(),
            "LeaderLatchCheck",
            "leader-latch",
            &["/election/latch", "4"],
        );
    }
}

/// CuratorCache sees another session's creates, updates and deletes in order, with their data,
/// and converges after a burst of changes.
#[test]
fn curator_cache_follows_changes_in_order() {
    for server in both() {
        run_check(
            server.as_ref(),
            "CacheCheck",
            "curator-cache",
            &["/cache/root"],
        );
    }
}

/// InterProcessReadWriteLock: shared readers, exclusive writer, a waiting writer admitted once
/// readers leave, and downgrade from write to read.
#[test]
fn read_write_lock_shares_reads_and_excludes_writes() {
    for server in both() {
        run_check(
            server.as_ref(),
            "ReadWriteLockCheck",
            "read-write-lock",
            &["/locks/rw"],
        );
    }
}

/// InterProcessSemaphoreV2 with two leases: a full semaphore refuses, a returned lease admits a
/// waiter, and four contending sessions never exceed two holders.
#[test]
fn semaphore_v2_bounds_holders() {
    for server in both() {
        run_check(
            server.as_ref(),
            "SemaphoreCheck",
            "semaphore-v2",
            &["/semaphores/two"],
        );
    }
}

/// DistributedBarrier holds waiters until removed; DistributedDoubleBarrier lets members enter
/// and leave only together.
#[test]
fn barriers_hold_until_released() {
    for server in both() {
        run_check(server.as_ref(), "BarrierCheck", "barriers", &["/barriers"]);
    }
}

/// Persistent and persistent-recursive watches (addWatch, ZooKeeper 3.6+): every change below a
/// recursive watch in order, only direct changes for a plain persistent one, and silence after
/// removal.
#[test]
fn persistent_watches_fire_until_removed() {
    for server in both() {
        run_check(
            server.as_ref(),
            "PersistentWatcherCheck",
            "persistent-watch",
            &["/watched"],
        );
    }
}

/// Curator's EnsembleTracker (on in every Curator 5.4 client) reads `/zookeeper/config` with
/// getConfig at start and on each connect and parses it as properties: the check does a few
/// operations with Curator's log on and finds no error in it. Null config data made every client
/// log "Background exception was not retry-able" with a NullPointerException ("buf" is null).
#[test]
fn ensemble_tracker_logs_no_error() {
    for server in both() {
        let done =
            Check::spawn_logging(server.as_ref(), "EnsembleTrackerCheck", &[]).finish(JVM_LIMIT);
        assert_passed(&done, "ensemble-tracker");
        for needle in ["\"buf\" is null", "NullPointerException", "not retry-able"] {
            assert!(
                !done.stdout.contains(needle) && !done.stderr.contains(needle),
                "Curator's output contains {needle:?}\n{}",
                done.transcript()
            );
        }
        assert!(
            done.stderr.contains("New config event received"),
            "Curator's log does not show the ensemble tracker's work (is slf4j-simple on the \
             classpath?)\n{}",
            done.transcript()
        );
    }
}
