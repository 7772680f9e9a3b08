//! lockkeeper and Apache Curator 5.4 sharing one lock, against Keeper and Apache ZooKeeper.
//!
//! lockkeeper's `Mutex` and `RwLock` lay out their nodes as Curator's `InterProcessMutex` and
//! `InterProcessReadWriteLock` do, so that a Java service and a Rust service can guard one
//! resource with one lock. These tests hold that claim to account with unmodified Curator from
//! Debian's jars, driven by the small Java programs in `curator/`:
//!
//! - **contention**: Curator sessions in two JVMs and lockkeeper sessions in this process take
//!   the same lock over and over, each holding a shared resource (a marker directory, see
//!   `curator/markers.rs`) that records every overlap; no overlap, every contender finishes its
//!   iterations, and no lock node is left behind;
//! - **layout**: step by step, each side sees the other's holder (a try fails), waiters of each
//!   side are woken by the other side's release, and read locks are shared across the languages
//!   while write locks exclude.
//!
//! Every check runs against each backend of `both()`.

#[path = "curator/jvm.rs"]
mod jvm;
#[path = "curator/markers.rs"]
mod markers;

use std::sync::Arc;
use std::time::Duration;

use jvm::Jvm;
use lockkeeper::zk::Session;
use lockkeeper_testkit::{TestServer, both};
use markers::MarkerDir;

/// Curator JVMs per contention test, each with [`JVM_SESSIONS`] sessions.
const JVMS: usize = 2;
const JVM_SESSIONS: usize = 2;
/// lockkeeper sessions per contention test.
const RUST_SESSIONS: usize = 3;
/// Acquisitions per contender.
const ITERATIONS: usize = 10;
/// How long a holder keeps the resource: long enough that a second holder would overlap.
const HOLD: Duration = Duration::from_millis(3);

/// Bound on a JVM's start (a cold JVM on a loaded two-core machine is slow).
const JVM_START: Duration = Duration::from_secs(120);
/// Bound on a whole contention run, beyond the Java watchdog (400 s).
const RUN_LIMIT: Duration = Duration::from_secs(420);
/// Bound on one step of the layout checks.
const STEP: Duration = Duration::from_secs(60);

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

async fn connect(server: &dyn TestServer) -> Session {
    tokio::time::timeout(STEP, Session::connect(&server.connect_string()))
        .await
        .unwrap_or_else(|_| panic!("no session with {} within {STEP:?}", server.name()))
        .unwrap_or_else(|e| panic!("connect to {}: {e}", server.name()))
}

/// The children of `path` as a plain ZooKeeper client sees them; none if the node is gone (a
/// container parent is reaped once empty).
async fn lock_nodes(server: &dyn TestServer, path: &str) -> Vec<String> {
    let client = zookeeper_client::Client::connect(&server.connect_string())
        .await
        .expect("plain ZooKeeper client");
    match client.list_children(path).await {
        Ok(children) => children,
        Err(zookeeper_client::Error::NoNode) => Vec::new(),
        Err(e) => panic!("list {path} on {}: {e}", server.name()),
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Mutex,
    ReadWrite,
}

impl Kind {
    fn arg(self) -> &'static str {
        match self {
            Kind::Mutex => "mutex",
            Kind::ReadWrite => "rw",
        }
    }

    /// Whether contender `index` writes on iteration `i` (the Java side uses the same rule).
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

/// One lockkeeper contender: `ITERATIONS` acquisitions of the lock at `path`, each holding the
/// marker directory for [`HOLD`].
async fn rust_contender(
    session: Session,
    kind: Kind,
    path: String,
    markers: Arc<MarkerDir>,
    index: usize,
    who: String,
) -> Tally {
    let mut tally = Tally {
        who: who.clone(),
        completed: 0,
        violations: 0,
    };
    let limit = Duration::from_secs(120);
    match kind {
        Kind::Mutex => {
            let mutex = session.mutex(&path).expect("mutex");
            for i in 0..ITERATIONS {
                let guard = tokio::time::timeout(limit, mutex.lock())
                    .await
                    .unwrap_or_else(|_| panic!("{who}: no lock within {limit:?} (iteration {i})"))
                    .expect("lock");
                tally.violations += markers.as_writer(&who, HOLD).await;
                guard.release().await.expect("release");
                tally.completed += 1;
            }
        }
        Kind::ReadWrite => {
            let rw = session.rw_lock(&path).expect("rw lock");
            for i in 0..ITERATIONS {
                if kind.writes(index, i) {
                    let guard = tokio::time::timeout(limit, rw.write())
                        .await
                        .unwrap_or_else(|_| panic!("{who}: no write lock (iteration {i})"))
                        .expect("write lock");
                    tally.violations += markers.as_writer(&who, HOLD).await;
                    guard.release().await.expect("release the write lock");
                } else {
                    let guard = tokio::time::timeout(limit, rw.read())
                        .await
                        .unwrap_or_else(|_| panic!("{who}: no read lock (iteration {i})"))
                        .expect("read lock");
                    tally.violations += markers.as_reader(&who, HOLD).await;
                    guard.release().await.expect("release the read lock");
                }
                tally.completed += 1;
            }
        }
    }
    tally
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

/// Curator and lockkeeper contenders on one lock of `kind` at once, on `server`.
fn contend(server: &dyn TestServer, kind: Kind) {
    let markers = Arc::new(MarkerDir::new(&format!("{}-{}", kind.arg(), server.name())));
    let path = format!("/interop/{}", kind.arg());
    let connect = server.connect_string();
    let marker_path = markers.path().display().to_string();
    let sessions = JVM_SESSIONS.to_string();
    let iterations = ITERATIONS.to_string();
    let hold = HOLD.as_millis().to_string();
    let mut jvms: Vec<Jvm> = (0..JVMS)
        .map(|j| {
            let label = format!("curator{j}");
            Jvm::spawn(
                "Contender",
                &[
                    &connect,
                    kind.arg(),
                    &path,
                    &marker_path,
                    &sessions,
                    &iterations,
                    &hold,
                    &label,
                ],
            )
        })
        .collect();
    let rt = runtime();
    let rust_sessions: Vec<Session> = (0..RUST_SESSIONS)
        .map(|_| rt.block_on(connect(server)))
        .collect();
    for jvm in &mut jvms {
        jvm.expect_line("READY", JVM_START);
    }

    // Start both sides together: Curator on `go`, lockkeeper right after.
    for jvm in &mut jvms {
        jvm.send("go");
    }
    let tasks: Vec<_> = rust_sessions
        .into_iter()
        .enumerate()
        .map(|(i, session)| {
            // Offsets keep the read/write mix of the Rust contenders apart from the Java ones.
            rt.spawn(rust_contender(
                session,
                kind,
                path.clone(),
                Arc::clone(&markers),
                JVM_SESSIONS + i,
                format!("rust-{i}"),
            ))
        })
        .collect();
    let tallies: Vec<Tally> = rt.block_on(async {
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

    let mut all = tallies;
    for jvm in jvms {
        let done = jvm.finish(RUN_LIMIT);
        assert!(
            done.success && done.lines.iter().any(|l| l == "PASS contend"),
            "a Curator contender failed on {}\n{}",
            server.name(),
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

    assert_eq!(all.len(), JVMS * JVM_SESSIONS + RUST_SESSIONS);
    let violations: usize = all.iter().map(|t| t.violations).sum();
    assert_eq!(
        violations,
        0,
        "{:?} lock on {}: holders overlapped: {all:?}",
        kind,
        server.name()
    );
    for tally in &all {
        assert_eq!(
            tally.completed,
            ITERATIONS,
            "{} on {} did not finish its iterations",
            tally.who,
            server.name()
        );
    }
    assert_eq!(markers.leftovers(), Vec::<String>::new(), "markers left");
    let left = rt.block_on(lock_nodes(server, &path));
    assert!(
        left.is_empty(),
        "lock nodes left on {}: {left:?}",
        server.name()
    );
}

/// Curator's InterProcessMutex and lockkeeper's Mutex, contending from two JVMs and this
/// process at once, never hold the lock together.
#[test]
fn mutex_excludes_curator_and_lockkeeper_contenders() {
    for server in both() {
        contend(server.as_ref(), Kind::Mutex);
    }
}

/// Curator's InterProcessReadWriteLock and lockkeeper's RwLock, mixing reads and writes from
/// two JVMs and this process: a writer never overlaps anybody.
#[test]
fn rw_lock_excludes_curator_and_lockkeeper_contenders() {
    for server in both() {
        contend(server.as_ref(), Kind::ReadWrite);
    }
}

/// Step by step: each side's holder keeps the other side out, each side's waiter is woken by
/// the other side's release, and nothing is left on the server.
#[test]
fn mutex_layout_is_shared_with_curator() {
    for server in both() {
        let server = server.as_ref();
        let path = "/interop/layout-mutex";
        let mut curator = Jvm::spawn("Driver", &[&server.connect_string()]);
        curator.expect_line("READY", JVM_START);
        let rt = runtime();
        let session = rt.block_on(connect(server));
        let mutex = session.mutex(path).expect("mutex");
        let on = server.name();

        // Curator holds: lockkeeper is kept out.
        assert_eq!(
            curator.request(&format!("acquire mutex {path}"), STEP),
            "OK true"
        );
        assert!(
            rt.block_on(mutex.try_lock()).expect("try_lock").is_none(),
            "lockkeeper took the mutex Curator holds, on {on}"
        );
        assert!(
            rt.block_on(mutex.lock_timeout(Duration::from_millis(200)))
                .expect("lock_timeout")
                .is_none(),
            "lockkeeper's lock_timeout got the mutex Curator holds, on {on}"
        );

        // A lockkeeper waiter (a session of its own) is woken by Curator's release.
        let other = rt.block_on(connect(server));
        let waiter = rt.spawn(async move {
            let mutex = other.mutex(path)?;
            let guard = mutex.lock().await?;
            guard.release().await
        });
        std::thread::sleep(Duration::from_millis(300));
        assert!(
            !waiter.is_finished(),
            "the waiter got the lock while Curator held it, on {on}"
        );
        assert_eq!(
            curator.request(&format!("release mutex {path}"), STEP),
            "OK"
        );
        rt.block_on(async { tokio::time::timeout(STEP, waiter).await })
            .expect("the lockkeeper waiter woke after Curator's release")
            .expect("waiter task")
            .expect("lock");

        // lockkeeper holds: Curator is kept out, and its waiter wakes on lockkeeper's release.
        let guard = rt
            .block_on(mutex.try_lock())
            .expect("try_lock")
            .expect("the mutex is free again");
        assert_eq!(
            curator.request(&format!("try mutex {path}"), STEP),
            "OK false",
            "Curator took the mutex lockkeeper holds, on {on}"
        );
        curator.send(&format!("acquire mutex {path}"));
        std::thread::sleep(Duration::from_millis(300));
        rt.block_on(guard.release()).expect("release");
        assert_eq!(
            curator.next_line(STEP),
            "OK true",
            "Curator's waiter, on {on}"
        );
        assert_eq!(
            curator.request(&format!("release mutex {path}"), STEP),
            "OK"
        );
        assert_eq!(
            curator.request(&format!("try mutex {path}"), STEP),
            "OK true"
        );
        assert_eq!(
            curator.request(&format!("release mutex {path}"), STEP),
            "OK"
        );

        assert_eq!(curator.request("quit", STEP), "BYE");
        let left = rt.block_on(lock_nodes(server, path));
        assert!(left.is_empty(), "lock nodes left on {on}: {left:?}");
    }
}

/// Read locks are shared across the languages and write locks exclude, both ways.
#[test]
fn rw_lock_layout_is_shared_with_curator() {
    for server in both() {
        let server = server.as_ref();
        let path = "/interop/layout-rw";
        let mut curator = Jvm::spawn("Driver", &[&server.connect_string()]);
        curator.expect_line("READY", JVM_START);
        let rt = runtime();
        let session = rt.block_on(connect(server));
        let rw = session.rw_lock(path).expect("rw lock");
        let on = server.name();
        let mut ask = |command: &str| curator.request(&format!("{command} {path}"), STEP);

        // Curator reads: lockkeeper may read too, but not write.
        assert_eq!(ask("acquire read"), "OK true");
        let read = rt
            .block_on(rw.try_read())
            .expect("try_read")
            .unwrap_or_else(|| panic!("a read lock was refused beside Curator's reader, on {on}"));
        assert!(
            rt.block_on(rw.try_write()).expect("try_write").is_none(),
            "lockkeeper wrote beside Curator's reader, on {on}"
        );
        rt.block_on(read.release()).expect("release read");
        assert_eq!(ask("release read"), "OK");

        // Curator writes: lockkeeper can neither read nor write.
        assert_eq!(ask("acquire write"), "OK true");
        assert!(
            rt.block_on(rw.try_read()).expect("try_read").is_none(),
            "lockkeeper read beside Curator's writer, on {on}"
        );
        assert!(
            rt.block_on(rw.try_write()).expect("try_write").is_none(),
            "lockkeeper wrote beside Curator's writer, on {on}"
        );
        assert_eq!(ask("release write"), "OK");

        // lockkeeper writes: Curator can neither read nor write.
        let write = rt
            .block_on(rw.try_write())
            .expect("try_write")
            .expect("the lock is free");
        assert_eq!(
            ask("try read"),
            "OK false",
            "Curator read beside lockkeeper's writer, on {on}"
        );
        assert_eq!(
            ask("try write"),
            "OK false",
            "Curator wrote beside lockkeeper's writer, on {on}"
        );
        rt.block_on(write.release()).expect("release write");

        // lockkeeper reads: Curator may read too, but not write.
        let read = rt
            .block_on(rw.try_read())
            .expect("try_read")
            .expect("the lock is free");
        assert_eq!(
            ask("try read"),
            "OK true",
            "Curator's read refused beside lockkeeper's reader, on {on}"
        );
        assert_eq!(ask("release read"), "OK");
        assert_eq!(
            ask("try write"),
            "OK false",
            "Curator wrote beside lockkeeper's reader, on {on}"
        );
        rt.block_on(read.release()).expect("release read");
        assert_eq!(ask("try write"), "OK true");
        assert_eq!(ask("release write"), "OK");

        assert_eq!(curator.request("quit", STEP), "BYE");
        let left = rt.block_on(lock_nodes(server, path));
        assert!(left.is_empty(), "lock nodes left on {on}: {left:?}");
    }
}
