//! A client process killed with SIGKILL or frozen with SIGSTOP: its session must expire after
//! the negotiated timeout, taking its ephemerals with it, against Keeper and against Apache
//! ZooKeeper alike.
//!
//! A crashed client cannot say goodbye, so this is the path every lock and leader election
//! depends on to recover: the server alone notices the silence, expires the session and deletes
//! its ephemerals, and watchers hear NodeDeleted. Too early is as wrong as too late: a server
//! that deletes on TCP close, or counts the timeout short, breaks clients that merely
//! reconnect; one that never expires leaves a lock held forever.
//!
//! The holder is a small kazoo program (`clients/expiry/hold_ephemeral.py`) that keeps its
//! session alive with pings until killed (or paused with SIGSTOP, which leaves its connection
//! open). The watcher is the `zookeeper-client` crate.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use lockkeeper_testkit::{both, python3};
use zookeeper_client::{Client, EventType};

/// Both test servers tick every 2 s (see `lockkeeper_testkit`); expiry is checked per tick.
const TICK: Duration = Duration::from_millis(2000);

/// Allowance for a loaded machine on top of what the protocol permits.
const SLACK: Duration = Duration::from_secs(4);

/// The kazoo holder process; killed (by its PID) on drop if the test did not already.
struct Holder {
    child: Child,
    /// The holder's stdout, line by line.
    lines: mpsc::Receiver<String>,
    session_id: i64,
    granted: Duration,
}

impl Holder {
    /// Starts the holder, waits for its READY line, and returns it with the session it reported.
    fn start(connect: &str, paths: &[&str], requested: Duration, backend: &str) -> Holder {
        let script =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/expiry/hold_ephemeral.py");
        let mut child = Command::new(python3())
            .arg(&script)
            .arg(connect)
            .args(paths)
            .arg("--timeout")
            .arg(format!("{}", requested.as_secs_f64()))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the kazoo holder");
        let stdout = child.stdout.take().expect("piped stdout");
        let stderr = child.stderr.take().expect("piped stderr");
        // Stderr is drained in the background so kazoo's logging can never block the holder.
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                eprintln!("holder: {line}");
            }
        });
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut holder = Holder {
            child,
            lines: rx,
            session_id: 0,
            granted: Duration::ZERO,
        };
        let ready = holder.wait_for_line(
            |l| l.starts_with("READY "),
            Duration::from_secs(60),
            backend,
        );
        let (session_id, granted) = parse_ready(&ready)
            .unwrap_or_else(|| panic!("{backend}: unexpected holder output {ready:?}"));
        holder.session_id = session_id;
        holder.granted = granted;
        holder
    }

    /// Skips output lines until one matches `wanted`, which is returned; panics after `limit`.
    fn wait_for_line(
        &mut self,
        wanted: impl Fn(&str) -> bool,
        limit: Duration,
        backend: &str,
    ) -> String {
        let deadline = Instant::now() + limit;
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if wanted(&line) => return line,
                Ok(line) => seen.push(line),
                Err(e) => {
                    let status = self.child.try_wait();
                    panic!(
                        "{backend}: the holder did not print the expected line within {limit:?} \
                         ({e}; exit {status:?}); it printed {seen:?}"
                    )
                }
            }
        }
    }

    /// Sends `signal` (e.g. "STOP", "CONT") to the holder's PID only.
    fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.child.id().to_string())
            .status()
            .expect("run kill");
        assert!(
            status.success(),
            "kill -{signal} {} failed: {status}",
            self.child.id()
        );
    }

    /// SIGKILL, and reap, so the kernel closes its socket right away.
    fn kill(&mut self) {
        self.child.kill().expect("kill the holder");
        self.child.wait().expect("reap the holder");
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Parses `READY session=0x... timeout_ms=N`.
fn parse_ready(line: &str) -> Option<(i64, Duration)> {
    let mut words = line.split_whitespace();
    if words.next()? != "READY" {
        return None;
    }
    let session = words.next()?.strip_prefix("session=0x")?;
    let timeout = words.next()?.strip_prefix("timeout_ms=")?;
    let session = u64::from_str_radix(session, 16).ok()? as i64;
    let timeout = Duration::from_millis(timeout.parse().ok()?);
    Some((session, timeout))
}

/// How the holder falls silent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Silence {
    /// SIGKILL: the kernel closes its connection at once.
    Kill,
    /// SIGSTOP: the connection stays open but nothing is sent on it; only the server's session
    /// timer can notice. The holder is resumed afterwards and must learn its session is gone.
    Pause,
}

/// Runs the silence-and-expire scenario with the holder asking for `requested` and expecting
/// the server to grant `granted`.
async fn silent_client_expires(silence: Silence, requested: Duration, granted: Duration) {
    for server in both() {
        let backend = server.name();
        let connect = server.connect_string();
        let paths = ["/expiry/lock", "/expiry/deep/member"];
        let mut holder = Holder::start(&connect, &paths, requested, backend);
        assert_eq!(
            holder.granted, granted,
            "{backend}: negotiated session timeout"
        );

        let observer = tokio::time::timeout(Duration::from_secs(20), Client::connect(&connect))
            .await
            .expect("observer connects in time")
            .expect("observer connects");
        for path in paths {
            let stat = observer.check_stat(path).await.expect("exists");
            assert_eq!(
                stat.map(|s| s.ephemeral_owner),
                Some(holder.session_id),
                "{backend}: {path} is the holder's ephemeral"
            );
        }

        // While the process lives its pings keep the session: the nodes outlast the timeout.
        tokio::time::sleep(granted + TICK).await;
        for path in paths {
            assert!(
                observer.check_stat(path).await.expect("exists").is_some(),
                "{backend}: {path} vanished while its session was still pinging"
            );
        }

        let mut watches = Vec::new();
        for path in paths {
            let (stat, watch) = observer
                .check_and_watch_stat(path)
                .await
                .expect("set exists watch");
            assert!(
                stat.is_some(),
                "{backend}: {path} present before the holder fell silent"
            );
            watches.push((path, watch));
        }
        match silence {
            Silence::Kill => holder.kill(),
            Silence::Pause => holder.signal("STOP"),
        }
        let silent_since = Instant::now();

        let upper = granted + 2 * TICK + SLACK;
        // The holder pings every third of the timeout, so its last sign of life is at most that
        // long before it fell silent; half the timeout leaves room for jitter on both sides.
        let lower = granted / 2;
        for (path, watch) in watches {
            let event = tokio::time::timeout(upper + Duration::from_secs(5), watch.changed())
                .await
                .unwrap_or_else(|_| {
                    panic!(
                        "{backend}: {path} still there {:?} after the holder fell silent ({silence:?}) \
                         (session timeout {granted:?})",
                        silent_since.elapsed()
                    )
                });
            let elapsed = silent_since.elapsed();
            eprintln!(
                "{backend}: {path} deleted {elapsed:?} after {silence:?} (timeout {granted:?})"
            );
            assert_eq!(
                (event.event_type, event.path.as_str()),
                (EventType::NodeDeleted, path),
                "{backend}: watch event for {path}"
            );
            assert!(
                elapsed >= lower,
                "{backend}: {path} deleted {elapsed:?} after {silence:?}, before the session \
                 timeout ({granted:?}) could have passed"
            );
            assert!(
                elapsed <= upper,
                "{backend}: {path} deleted {elapsed:?} after {silence:?}; the session timeout is \
                 {granted:?}, so expiry must come within {upper:?}"
            );
        }
        assert_eq!(
            observer.check_stat("/expiry/lock").await.expect("exists"),
            None,
            "{backend}: the expired session's node is gone for readers too"
        );
        if silence == Silence::Pause {
            // Resumed, the holder finds its connection closed and its session expired.
            holder.signal("CONT");
            holder.wait_for_line(|l| l == "STATE LOST", Duration::from_secs(60), backend);
        }
        // The path is free again for a new owner.
        let eph =
            zookeeper_client::CreateMode::Ephemeral.with_acls(zookeeper_client::Acls::anyone_all());
        observer
            .create("/expiry/lock", b"next", &eph)
            .await
            .unwrap_or_else(|e| panic!("{backend}: re-create after expiry: {e}"));
    }
}

/// The minimum timeout on both servers: 2 ticks.
#[tokio::test]
async fn killed_client_session_expires_after_minimum_timeout() {
    silent_client_expires(
        Silence::Kill,
        Duration::from_millis(4000),
        Duration::from_millis(4000),
    )
    .await;
}

/// A longer timeout is honoured as granted, not cut to some server-side constant.
#[tokio::test]
async fn killed_client_session_expires_after_longer_timeout() {
    silent_client_expires(
        Silence::Kill,
        Duration::from_millis(8000),
        Duration::from_millis(8000),
    )
    .await;
}

/// A frozen client whose connection stays open expires just the same: expiry is the session
/// timer's job, not a side effect of the connection closing.
#[tokio::test]
async fn paused_client_session_expires_with_its_connection_open() {
    silent_client_expires(
        Silence::Pause,
        Duration::from_millis(4000),
        Duration::from_millis(4000),
    )
    .await;
}
