//! Inspection of the nodes real Curator and kazoo recipes write, against Keeper and Apache
//! ZooKeeper: Curator's `LeaderLatch`, `InterProcessMutex`, read-write lock and
//! `InterProcessSemaphoreV2` (the Java program `curator/Layouts.java`), and kazoo's `Lock`,
//! `ReadLock`/`WriteLock` and `Semaphore` (the Python program [`KAZOO`] below). Each client
//! queues participants one at a time, each with a session of its own; the test waits until the
//! queue shows them all, then checks layout, kinds, order, verdicts, owners and data.

mod support;

#[allow(dead_code)]
#[path = "curator/jvm.rs"]
mod jvm;

use std::process::Command;
use std::time::Duration;

use jvm::Jvm;
use lockkeeper::zk::{Inspection, Layout, NodeKind, Session, State};
use lockkeeper_testkit::{LinePeer, python3};
use support::for_each_backend;
use tokio::time::Instant;

/// Bound on a JVM's or Python's start, and on a participant appearing in its queue.
const LIMIT: Duration = Duration::from_secs(120);

/// kazoo participants on command: `READY` once started, then per line `lock|read|write PATH ID`
/// or `sem PATH ID MAX`, each answered `OK` at once while its acquisition blocks on a thread
/// with a client of its own. Ends on `quit` or the end of stdin; a hard alarm ends a hung run.
const KAZOO: &str = r#"
import signal, sys, threading
from kazoo.client import KazooClient

signal.alarm(240)
connect = sys.argv[1]
print("READY", flush=True)

def hold(kind, path, ident, extra):
    client = KazooClient(hosts=connect, timeout=10)
    client.start(timeout=30)
    if kind == "lock":
        recipe = client.Lock(path, ident)
    elif kind == "read":
        recipe = client.ReadLock(path, ident)
    elif kind == "write":
        recipe = client.WriteLock(path, ident)
    else:
        recipe = client.Semaphore(path, ident, max_leases=int(extra[0]))
    recipe.acquire(timeout=200)

for line in sys.stdin:
    words = line.split()
    if not words or words[0] == "quit":
        break
    threading.Thread(target=hold, args=(words[0], words[1], words[2], words[3:]), daemon=True).start()
    print("OK", flush=True)
"#;

/// A running kazoo program ([`KAZOO`]), killed on drop.
struct Kazoo(LinePeer);

impl Kazoo {
    fn start(connect: &str) -> Kazoo {
        let mut peer = LinePeer::spawn(
            Command::new(python3())
                .args(["-c", KAZOO, connect])
                .env("PYTHONDONTWRITEBYTECODE", "1"),
            "kazoo (is kazoo installed?)",
        );
        assert_eq!(peer.next_line(LIMIT), "READY");
        Kazoo(peer)
    }

    fn request(&mut self, command: &str) {
        self.0.send(command);
        assert_eq!(self.0.next_line(LIMIT), "OK", "kazoo refused {command:?}");
    }
}

/// Waits until the inspection of `path` lists `count` participants, and returns it.
async fn wait_participants(session: &Session, path: &str, count: usize) -> Inspection {
    wait_participants_with(session, path, count, "").await
}

/// As [`wait_participants`], and one of them carries `id` in its data.
async fn wait_participants_with(
    session: &Session,
    path: &str,
    count: usize,
    id: &str,
) -> Inspection {
    let deadline = Instant::now() + LIMIT;
    loop {
        let inspection = session.inspect(path).await.expect("inspect");
        // The newest participant must be among them: a kazoo semaphore member holds the
        // internal lock for a moment after taking its lease, which would count twice.
        let newest_there = inspection.participants.iter().any(|p| p.data.contains(id));
        if inspection.participants.len() == count && newest_there {
            return inspection;
        }
        assert!(
            Instant::now() < deadline,
            "{path}: want {count} participants, {id} among them\n{inspection}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Each participant's (kind, state, data), in queue order, and checks that every one has an
/// owner session of its own.
fn summary(inspection: &Inspection) -> Vec<(NodeKind, State, &str)> {
    let mut sessions: Vec<i64> = inspection
        .participants
        .iter()
        .map(|p| p.session_id)
        .collect();
    assert!(
        sessions.iter().all(|s| *s != 0),
        "ephemeral nodes\n{inspection}"
    );
    sessions.sort_unstable();
    sessions.dedup();
    assert_eq!(
        sessions.len(),
        inspection.participants.len(),
        "one session each\n{inspection}"
    );
    inspection
        .participants
        .iter()
        .map(|p| (p.kind, p.state, p.data.as_str()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kazoo_locks_and_semaphore() {
    for_each_backend(|connect| async move {
        let session = support::session(&connect).await;
        let mut kazoo = Kazoo::start(&connect);

        // Lock: the first in line holds, the second waits.
        for (n, id) in ["k-a", "k-b"].iter().enumerate() {
            kazoo.request(&format!("lock /layouts/kazoo-lock {id}"));
            wait_participants_with(&session, "/layouts/kazoo-lock", n + 1, id).await;
        }
        let lock = session.inspect("/layouts/kazoo-lock").await.unwrap();
        assert_eq!(lock.layout, Layout::Lock);
        assert_eq!(
            summary(&lock),
            [
                (NodeKind::KazooLock, State::Holds, "k-a"),
                (NodeKind::KazooLock, State::Waits, "k-b"),
            ],
            "\n{lock}"
        );
        assert!(lock.to_string().contains("kazoo-lock"), "{lock}");

        // Read-write: two readers share, a writer waits for them, a later reader for it.
        let steps = [
            ("read", "r-1"),
            ("read", "r-2"),
            ("write", "w-1"),
            ("read", "r-3"),
        ];
        for (n, (kind, id)) in steps.iter().enumerate() {
            kazoo.request(&format!("{kind} /layouts/kazoo-rw {id}"));
            wait_participants_with(&session, "/layouts/kazoo-rw", n + 1, id).await;
        }
        let rw = session.inspect("/layouts/kazoo-rw").await.unwrap();
        assert_eq!(
            summary(&rw),
            [
                (NodeKind::KazooRead, State::Holds, "r-1"),
                (NodeKind::KazooRead, State::Holds, "r-2"),
                (NodeKind::KazooLock, State::Waits, "w-1"),
                (NodeKind::KazooRead, State::Waits, "r-3"),
            ],
            "\n{rw}"
        );

        // Semaphore of 2: two leases hold, the third waits in the sibling lock queue.
        for (n, id) in ["s-1", "s-2", "s-3"].iter().enumerate() {
            kazoo.request(&format!("sem /layouts/kazoo-sem {id} 2"));
            wait_participants_with(&session, "/layouts/kazoo-sem", n + 1, id).await;
        }
        let sem = session.inspect("/layouts/kazoo-sem").await.unwrap();
        assert_eq!(
            sem.layout,
            Layout::KazooSemaphore {
                max_leases: Some(2)
            }
        );
        let mut leases = summary(&sem);
        leases[..2].sort_by_key(|(_, _, data)| data.to_string());
        assert_eq!(
            leases,
            [
                (NodeKind::KazooLease, State::Holds, "s-1"),
                (NodeKind::KazooLease, State::Holds, "s-2"),
                // kazoo's semaphore hands its lock the identifier as bytes, which the lock
                // writes through str(): the waiter's data is Python's repr of them.
                (NodeKind::KazooLock, State::Waits, "b's-3'"),
            ],
            "\n{sem}"
        );
        assert!(
            sem.participants[2]
                .name
                .starts_with("../kazoo-sem-__lock__/"),
            "\n{sem}"
        );
        assert_eq!(sem.holders().count(), 2);
        assert!(
            sem.to_string().contains("kazoo semaphore of 2 leases"),
            "{sem}"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curator_latch_mutex_rwlock_and_semaphore() {
    for_each_backend(|connect| async move {
        let session = support::session(&connect).await;
        let mut curator = Jvm::spawn("Layouts", &[&connect]);
        assert_eq!(
            curator.next_line(LIMIT),
            "READY",
            "{}",
            curator.transcript()
        );
        let mut step = async |command: &str, path: &str, count: usize| {
            assert_eq!(curator.request(command, LIMIT), "OK", "{command}");
            wait_participants(&session, path, count).await
        };

        // LeaderLatch, with a lockkeeper participant in the same election.
        step("latch /layouts/latch c-1", "/layouts/latch", 1).await;
        let ours = session.leader_latch("/layouts/latch", "lk-1").unwrap();
        let queued = tokio::spawn(async move { ours.lead().await.map(|l| l.node().to_owned()) });
        wait_participants(&session, "/layouts/latch", 2).await;
        step("latch /layouts/latch c-2", "/layouts/latch", 3).await;
        let latch = session.inspect("/layouts/latch").await.unwrap();
        assert_eq!(latch.layout, Layout::Election);
        assert_eq!(
            summary(&latch),
            [
                (NodeKind::Latch, State::Holds, "c-1"),
                (NodeKind::Latch, State::Waits, "lk-1"),
                (NodeKind::Latch, State::Waits, "c-2"),
            ],
            "\n{latch}"
        );
        assert!(latch.to_string().contains("(election)"), "{latch}");
        queued.abort();

        // Mutex: holder and waiter.
        step("mutex /layouts/mutex", "/layouts/mutex", 1).await;
        step("mutex /layouts/mutex", "/layouts/mutex", 2).await;
        let mutex = session.inspect("/layouts/mutex").await.unwrap();
        let states: Vec<_> = summary(&mutex)
            .into_iter()
            .map(|(k, s, _)| (k, s))
            .collect();
        assert_eq!(
            states,
            [
                (NodeKind::Mutex, State::Holds),
                (NodeKind::Mutex, State::Waits)
            ],
            "\n{mutex}"
        );

        // Read-write lock: a reader holds, a writer waits behind it.
        step("read /layouts/rw", "/layouts/rw", 1).await;
        step("write /layouts/rw", "/layouts/rw", 2).await;
        let rw = session.inspect("/layouts/rw").await.unwrap();
        let states: Vec<_> = summary(&rw).into_iter().map(|(k, s, _)| (k, s)).collect();
        assert_eq!(
            states,
            [
                (NodeKind::Read, State::Holds),
                (NodeKind::Write, State::Waits)
            ],
            "\n{rw}"
        );

        // Semaphore of 1: one lease holds; a second participant's lease waits.
        step("lease /layouts/sem 1", "/layouts/sem", 1).await;
        let deadline = Instant::now() + LIMIT;
        assert_eq!(curator.request("lease /layouts/sem 1", LIMIT), "OK");
        let sem = loop {
            let sem = session.inspect_semaphore("/layouts/sem", 1).await.unwrap();
            if sem.waiters().count() >= 1 {
                break sem;
            }
            assert!(Instant::now() < deadline, "no waiter\n{sem}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert_eq!(
            sem.layout,
            Layout::Semaphore {
                max_leases: Some(1)
            }
        );
        let leases: Vec<_> = sem
            .participants
            .iter()
            .filter(|p| p.kind == NodeKind::Lease)
            .map(|p| p.state)
            .collect();
        assert_eq!(leases[0], State::Holds, "\n{sem}");
        assert_eq!(
            sem.holders().filter(|p| p.kind == NodeKind::Lease).count(),
            1
        );
        curator.request("quit", LIMIT);
    })
    .await;
}
