//! One contention run: Curator sessions in two JVMs and lockkeeper sessions in the test process
//! take one lock over and over, each holding the marker directory while it holds the lock.
//!
//! A gate holder (a lockkeeper session of the test) takes the lock first, so that every
//! contender of both languages queues up behind it; once all are queued it lets go. The fair
//! queue then hands the lock across the languages in arrival order, instead of one side
//! finishing before the other has started, and the holder log shows that they took turns.

use std::sync::Arc;
use std::time::Duration;

use lockkeeper::zk::{LockGuard, Session};
use lockkeeper_testkit::TestServer;

use crate::jvm::Jvm;
use crate::markers::MarkerDir;
use crate::zk::{JVM_START, connect, lock_nodes, runtime, wait_for_nodes};

/// Curator JVMs per run, each with [`JVM_SESSIONS`] sessions.
const JVMS: usize = 2;
const JVM_SESSIONS: usize = 2;
/// lockkeeper sessions per run.
const RUST_SESSIONS: usize = 3;
/// Acquisitions per contender.
const ITERATIONS: usize = 10;
/// How long a holder keeps the resource: long enough that a second holder would overlap.
const HOLD: Duration = Duration::from_millis(3);
/// Bound on one acquisition, and on a whole run (beyond the Java watchdog of 400 s).
const ACQUIRE_LIMIT: Duration = Duration::from_secs(120);
const RUN_LIMIT: Duration = Duration::from_secs(420);

/// Which recipe the run contends for.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Kind {
    /// InterProcessMutex / Mutex: every holder is a writer.
    Mutex,
    /// InterProcessReadWriteLock / RwLock: a write every third iteration, reads otherwise.
    ReadWrite,
}

impl Kind {
    fn arg(self) -> &'static str {
        match self {
            Kind::Mutex => "mutex",
            Kind::ReadWrite => "rw",
        }
    }

    /// Whether contender `index` writes on iteration `i` (`Contender.java` has the same rule).
    fn writes(self, index: usize, i: usize) -> bool {
        self == Kind::Mutex || (index + i) % 3 == 0
    }
}

/// What one contender reports.
#[derive(Debug)]
struct Tally {
    who: String,
    completed: usize,
    violations: usize,
}

/// Parses `DONE <who> completed=<n> violations=<m>`.
fn parse_done(line: &str) -> Option<Tally> {
    let mut words = line.strip_prefix("DONE ")?.split(' ');
    let who = words.next()?.to_string();
    let completed = words.next()?.strip_prefix("completed=")?.parse().ok()?;
    let violations = words.next()?.strip_prefix("violations=")?.parse().ok()?;
    Some(Tally {
        who,
        completed,
        violations,
    })
}

/// Takes the lock of `kind` at `path` as a writer, bounded by [`ACQUIRE_LIMIT`].
async fn take(session: &Session, kind: Kind, path: &str, write: bool) -> LockGuard {
    let lock = async {
        match (kind, write) {
            (Kind::Mutex, _) => session.mutex(path)?.lock().await,
            (Kind::ReadWrite, true) => session.rw_lock(path)?.write().await,
            (Kind::ReadWrite, false) => session.rw_lock(path)?.read().await,
        }
    };
    tokio::time::timeout(ACQUIRE_LIMIT, lock)
        .await
        .unwrap_or_else(|_| panic!("no {kind:?} lock on {path} within {ACQUIRE_LIMIT:?}"))
        .unwrap_or_else(|e| panic!("{kind:?} lock on {path}: {e}"))
}

/// One lockkeeper contender: [`ITERATIONS`] acquisitions, each holding the marker directory
/// for [`HOLD`].
async fn rust_contender(
    session: Session,
    kind: Kind,
    path: String,
    markers: Arc<MarkerDir>,
    index: usize,
) -> Tally {
    let who = format!("rust-{index}");
    let mut tally = Tally {
        who: who.clone(),
        completed: 0,
        violations: 0,
    };
    for i in 0..ITERATIONS {
        let write = kind.writes(index, i);
        let guard = take(&session, kind, &path, write).await;
        tally.violations += if write {
            markers.as_writer(&who, HOLD).await
        } else {
            markers.as_reader(&who, HOLD).await
        };
        guard.release().await.expect("release");
        tally.completed += 1;
    }
    session.close().await;
    tally
}

/// Curator and lockkeeper contenders on one lock of `kind` at once, on `server`: no overlap,
/// every contender finishes, the languages take turns, and no lock node is left.
pub(crate) fn contend(server: &dyn TestServer, kind: Kind) {
    let on = server.name();
    let markers = Arc::new(MarkerDir::new(&format!("{}-{on}", kind.arg())));
    let path = format!("/interop/{}", kind.arg());
    let connect_string = server.connect_string();
    let marker_path = markers.path().display().to_string();
    let (sessions, iterations) = (JVM_SESSIONS.to_string(), ITERATIONS.to_string());
    let hold = HOLD.as_millis().to_string();
    let mut jvms: Vec<Jvm> = (0..JVMS)
        .map(|j| {
            let label = format!("curator{j}");
            let args = [
                connect_string.as_str(),
                kind.arg(),
                &path,
                &marker_path,
                &sessions,
                &iterations,
                &hold,
                &label,
            ];
            Jvm::spawn("Contender", &args)
        })
        .collect();
    let rt = runtime();
    let rust_sessions: Vec<Session> = (0..RUST_SESSIONS)
        .map(|_| rt.block_on(connect(server)))
        .collect();
    for jvm in &mut jvms {
        jvm.expect_line("READY", JVM_START);
    }

    let (gate, gate_guard) = rt.block_on(async {
        let gate = connect(server).await;
        let guard = take(&gate, kind, &path, true).await;
        (gate, guard)
    });
    for jvm in &mut jvms {
        jvm.send("go");
    }
    // Offsets keep the read/write mix of the Rust contenders apart from the Java ones.
    let tasks: Vec<_> = rust_sessions
        .into_iter()
        .enumerate()
        .map(|(i, session)| {
            let markers = Arc::clone(&markers);
            rt.spawn(rust_contender(
                session,
                kind,
                path.clone(),
                markers,
                JVM_SESSIONS + i,
            ))
        })
        .collect();
    let contenders = JVMS * JVM_SESSIONS + RUST_SESSIONS;
    rt.block_on(wait_for_nodes(server, &path, contenders + 1));
    rt.block_on(gate_guard.release()).expect("open the gate");
    let mut all: Vec<Tally> = rt.block_on(async {
        let mut tallies = Vec::new();
        for task in tasks {
            let tally = tokio::time::timeout(RUN_LIMIT, task)
                .await
                .expect("lockkeeper contenders finish in time")
                .expect("lockkeeper contender task");
            tallies.push(tally);
        }
        tallies
    });
    for jvm in jvms {
        let done = jvm.finish(RUN_LIMIT);
        assert!(
            done.success && done.lines.iter().any(|l| l == "PASS contend"),
            "a Curator contender failed on {on}\n{}",
            done.transcript
        );
        let java: Vec<Tally> = done.lines.iter().filter_map(|l| parse_done(l)).collect();
        assert_eq!(
            java.len(),
            JVM_SESSIONS,
            "one DONE line per Curator session\n{}",
            done.transcript
        );
        all.extend(java);
    }

    assert_eq!(all.len(), contenders);
    let violations: usize = all.iter().map(|t| t.violations).sum();
    assert_eq!(
        violations, 0,
        "{kind:?}: holders overlapped on {on}: {all:?}"
    );
    for tally in &all {
        assert_eq!(
            tally.completed, ITERATIONS,
            "{} on {on} did not finish its iterations",
            tally.who
        );
    }
    assert_eq!(markers.leftovers(), Vec::<String>::new(), "markers left");
    let holders = markers.holders();
    assert_eq!(holders.len(), contenders * ITERATIONS, "{holders:?}");
    let turns = holders
        .windows(2)
        .filter(|pair| pair[0].starts_with("rust") != pair[1].starts_with("rust"))
        .count();
    assert!(
        turns > 0,
        "the languages never took turns on {on}: {holders:?}"
    );
    rt.block_on(gate.close());
    let left = rt.block_on(lock_nodes(server, &path));
    assert!(left.is_empty(), "lock nodes left on {on}: {left:?}");
}
