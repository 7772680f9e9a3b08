//! Inspection of lock paths against Keeper and Apache ZooKeeper.
//!
//! Each test builds a real queue (with lockkeeper's recipes, or with Curator-named nodes
//! created by plain client sessions, the way Curator's read-write lock and
//! semaphore lay them out) and checks that inspection lists every participant in queue order,
//! with the right kind, owner session, fencing token and holds/waits verdict. Bad paths are
//! refused, a missing path is empty, and nodes vanishing while an inspection runs never fail it.
//!
//! Every test body runs against each backend of `both()`; every wait is bounded by [`LIMIT`].

use std::future::Future;
use std::time::Duration;

use lockkeeper::Error;
use lockkeeper::zk::{Layout, LockGuard, NodeKind, Session, State, inspect, inspect_semaphore};
use lockkeeper_testkit::both;
use lockkeeper_zk_client::{Client, CreateMode, CreateOptions};
use tokio::time::Instant;

/// The longest any single step may take. Generous: the machine is shared and loaded.
const LIMIT: Duration = Duration::from_secs(60);

struct Backend {
    connect: String,
    name: &'static str,
}

impl Backend {
    async fn within<T>(&self, what: &str, fut: impl Future<Output = T>) -> T {
        lockkeeper_testkit::within(LIMIT, format!("{}: {what}", self.name), fut).await
    }

    async fn session(&self) -> Session {
        self.within("connect", Session::connect(&self.connect))
            .await
            .unwrap_or_else(|e| panic!("{}: connect: {e}", self.name))
    }

    async fn client(&self) -> Client {
        self.within("connect", Client::connect(&self.connect))
            .await
            .unwrap_or_else(|e| panic!("{}: connect: {e}", self.name))
    }

    /// Waits until the inspection of `path` lists `count` participants; returns it.
    async fn wait_participants(
        &self,
        session: &Session,
        path: &str,
        count: usize,
    ) -> lockkeeper::zk::Inspection {
        let deadline = Instant::now() + LIMIT;
        loop {
            let inspection = self.within("inspect", session.inspect(path)).await.unwrap();
            if inspection.participants.len() == count {
                return inspection;
            }
            assert!(
                Instant::now() < deadline,
                "{}: want {count} participants:\n{inspection}",
                self.name
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

async fn each_backend<F, Fut>(body: F)
where
    F: Fn(Backend) -> Fut,
    Fut: Future<Output = ()>,
{
    let servers = both();
    assert!(!servers.is_empty(), "no backend selected");
    for server in &servers {
        eprintln!("--- against {}", server.name());
        body(Backend {
            connect: server.connect_string(),
            name: server.name(),
        })
        .await;
    }
}

fn persistent() -> CreateOptions {
    CreateOptions::new(CreateMode::Persistent)
}

/// Creates `{dir}/{prefix}{sequence}` as Curator would (ephemeral, sequential) in `client`'s
/// session; returns the node's name.
async fn curator_node(client: &Client, dir: &str, prefix: &str) -> String {
    let options = CreateOptions::new(CreateMode::EphemeralSequential);
    client.mkdir(dir, &persistent()).await.unwrap();
    let (_, path) = client
        .create(&format!("{dir}/{prefix}"), b"curator", &options)
        .await
        .unwrap();
    path.rsplit('/').next().unwrap().to_owned()
}

/// A mutex queue of three sessions: the first holds, the others wait in arrival order, each
/// with its own session id and the fencing token its guard has; after a release the next one
/// holds. The table shows the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutex_queue_in_order_with_sessions() {
    each_backend(|b| async move {
        let path = "/inspect/mutex";
        let sessions = [b.session().await, b.session().await, b.session().await];
        let observer = b.session().await;
        let guard = b
            .within("lock", sessions[0].mutex(path).unwrap().lock())
            .await;
        let guard = guard.unwrap();
        let mut waiters = Vec::new();
        for (i, session) in sessions.iter().enumerate().skip(1) {
            let mutex = session.mutex(path).unwrap();
            waiters.push(tokio::spawn(async move { mutex.lock().await }));
            // One at a time, so the queue order is known.
            b.wait_participants(&observer, path, i + 1).await;
        }

        let inspection = b.within("inspect", inspect(&observer, path)).await.unwrap();
        assert_eq!(inspection.layout, Layout::Lock, "{}", b.name);
        let owners: Vec<i64> = inspection
            .participants
            .iter()
            .map(|p| p.session_id)
            .collect();
        let expected: Vec<i64> = sessions.iter().map(Session::session_id).collect();
        assert_eq!(owners, expected, "{}:\n{inspection}", b.name);
        let states: Vec<State> = inspection.participants.iter().map(|p| p.state).collect();
        assert_eq!(
            states,
            [State::Holds, State::Waits, State::Waits],
            "{}",
            b.name
        );
        let holder = &inspection.participants[0];
        assert_eq!(holder.path, guard.node());
        assert_eq!(holder.fencing_token, guard.fencing_token());
        assert_eq!(holder.name, guard.node().rsplit('/').next().unwrap());
        for pair in inspection.participants.windows(2) {
            assert!(pair[0].sequence < pair[1].sequence, "{}", b.name);
            assert!(pair[0].fencing_token < pair[1].fencing_token, "{}", b.name);
        }
        for participant in &inspection.participants {
            assert_eq!(participant.kind, NodeKind::Mutex);
            assert!(
                participant.data.starts_with("lockkeeper ")
                    && participant
                        .data
                        .ends_with(&format!(":{}", std::process::id())),
                "{participant:?}"
            );
            assert!(
                participant.age < Duration::from_secs(600),
                "{participant:?}"
            );
        }
        let table = inspection.to_string();
        eprintln!("{table}");
        assert!(table.contains("1 holding, 2 waiting"), "{table}");
        for session in &sessions {
            assert!(
                table.contains(&format!("0x{:016x}", session.session_id())),
                "{table}"
            );
        }
        assert_eq!(
            table.lines().count(),
            2 + 3,
            "title, header, one line each:\n{table}"
        );

        b.within("release", guard.release()).await.unwrap();
        let next: LockGuard = b
            .within("next holder", &mut waiters[0])
            .await
            .unwrap()
            .unwrap();
        let inspection = b.wait_participants(&observer, path, 2).await;
        let seen: Vec<(i64, State)> = inspection
            .participants
            .iter()
            .map(|p| (p.session_id, p.state))
            .collect();
        assert_eq!(
            seen,
            [
                (sessions[1].session_id(), State::Holds),
                (sessions[2].session_id(), State::Waits)
            ],
            "{}",
            b.name
        );
        assert_eq!(inspection.holders().next().unwrap().path, next.node());
        b.within("release", next.release()).await.unwrap();
        let last = b
            .within("last holder", &mut waiters[1])
            .await
            .unwrap()
            .unwrap();
        b.within("release", last.release()).await.unwrap();
    })
    .await;
}

/// A read-write queue made of Curator-named nodes from four sessions, created with uuids in
/// the reverse of their sequence order: reads before the first write hold, the write and every
/// read after it wait. A stray persistent child is listed last and not judged. A queue that
/// starts with a write: the write holds, the read behind it waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_write_queue_follows_the_rwlock_rules() {
    each_backend(|b| async move {
        let dir = "/inspect/rw";
        let clients = [
            b.client().await,
            b.client().await,
            b.client().await,
            b.client().await,
        ];
        let markers = [
            "_c_ffff-__READ__",
            "_c_eeee-__READ__",
            "_c_dddd-__WRIT__",
            "_c_cccc-__READ__",
        ];
        let mut names = Vec::new();
        for (client, marker) in clients.iter().zip(markers) {
            names.push(curator_node(client, dir, marker).await);
        }
        clients[0]
            .create(&format!("{dir}/config"), b"x", &persistent())
            .await
            .unwrap();
        let observer = b.session().await;
        let inspection = b.within("inspect", observer.inspect(dir)).await.unwrap();
        let seen: Vec<(&str, NodeKind, State, i64)> = inspection
            .participants
            .iter()
            .map(|p| (p.name.as_str(), p.kind, p.state, p.session_id))
            .collect();
        let sid = |i: usize| clients[i].session_id();
        assert_eq!(
            seen,
            [
                (names[0].as_str(), NodeKind::Read, State::Holds, sid(0)),
                (names[1].as_str(), NodeKind::Read, State::Holds, sid(1)),
                (names[2].as_str(), NodeKind::Write, State::Waits, sid(2)),
                (names[3].as_str(), NodeKind::Read, State::Waits, sid(3)),
                ("config", NodeKind::Other, State::Unknown, 0),
            ],
            "{}:\n{inspection}",
            b.name
        );
        let table = inspection.to_string();
        eprintln!("{table}");
        assert!(table.contains("2 holding, 2 waiting"), "{table}");
        assert!(table.contains("write") && table.contains("read"), "{table}");

        let dir = "/inspect/rw-writer-first";
        let write = curator_node(&clients[0], dir, "_c_bbbb-__WRIT__").await;
        let read = curator_node(&clients[1], dir, "_c_aaaa-__READ__").await;
        let inspection = b.within("inspect", observer.inspect(dir)).await.unwrap();
        let seen: Vec<(&str, State)> = inspection
            .participants
            .iter()
            .map(|p| (p.name.as_str(), p.state))
            .collect();
        assert_eq!(
            seen,
            [
                (write.as_str(), State::Holds),
                (read.as_str(), State::Waits)
            ],
            "{}",
            b.name
        );
    })
    .await;
}

/// A Curator semaphore layout: without the limit, leases are listed but not judged; with it,
/// the first `max` leases hold and the rest wait. The internal lock's queue follows the leases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphore_leases_with_and_without_the_limit() {
    each_backend(|b| async move {
        let dir = "/inspect/sem";
        let clients = [b.client().await, b.client().await, b.client().await];
        let mut leases = Vec::new();
        for client in &clients {
            leases.push(curator_node(client, &format!("{dir}/leases"), "_c_9-lease-").await);
        }
        let mut locks = Vec::new();
        for client in &clients[1..] {
            locks.push(curator_node(client, &format!("{dir}/locks"), "_c_1-lock-").await);
        }
        let observer = b.session().await;

        let unknown = b.within("inspect", inspect(&observer, dir)).await.unwrap();
        assert_eq!(unknown.layout, Layout::Semaphore { max_leases: None });
        let seen: Vec<(String, NodeKind, State)> = unknown
            .participants
            .iter()
            .map(|p| (p.name.clone(), p.kind, p.state))
            .collect();
        let expected = vec![
            (
                format!("leases/{}", leases[0]),
                NodeKind::Lease,
                State::Unknown,
            ),
            (
                format!("leases/{}", leases[1]),
                NodeKind::Lease,
                State::Unknown,
            ),
            (
                format!("leases/{}", leases[2]),
                NodeKind::Lease,
                State::Unknown,
            ),
            (format!("locks/{}", locks[0]), NodeKind::Mutex, State::Holds),
            (format!("locks/{}", locks[1]), NodeKind::Mutex, State::Waits),
        ];
        assert_eq!(seen, expected, "{}:\n{unknown}", b.name);

        let known = b
            .within("inspect", inspect_semaphore(&observer, dir, 2))
            .await
            .unwrap();
        assert_eq!(
            known.layout,
            Layout::Semaphore {
                max_leases: Some(2)
            }
        );
        let states: Vec<State> = known.participants.iter().map(|p| p.state).collect();
        assert_eq!(
            states,
            [
                State::Holds,
                State::Holds,
                State::Waits,
                State::Holds,
                State::Waits
            ],
            "{}:\n{known}",
            b.name
        );
        let owners: Vec<i64> = known.participants[..3]
            .iter()
            .map(|p| p.session_id)
            .collect();
        let expected: Vec<i64> = clients
            .iter()
            .map(lockkeeper_zk_client::Client::session_id)
            .collect();
        assert_eq!(owners, expected, "{}", b.name);
        assert!(
            known.to_string().contains("semaphore of 2 leases"),
            "{known}"
        );
        assert!(matches!(
            inspect_semaphore(&observer, dir, 0).await,
            Err(Error::InvalidArgument(_))
        ));
    })
    .await;
}

/// A `SimpleLock`'s single node is shown as the holder, with its session and token.
#[tokio::test]
async fn simple_lock_holder() {
    each_backend(|b| async move {
        let (holder, observer) = (b.session().await, b.session().await);
        let lock = holder.simple_lock("/inspect/simple").unwrap();
        let guard = b.within("lock", lock.lock()).await.unwrap();
        let inspection = b
            .within("inspect", observer.inspect("/inspect/simple"))
            .await
            .unwrap();
        assert_eq!(
            inspection.participants.len(),
            1,
            "{}:\n{inspection}",
            b.name
        );
        let node = &inspection.participants[0];
        assert_eq!(
            (node.kind, node.state, node.session_id, node.sequence),
            (NodeKind::Simple, State::Holds, holder.session_id(), None),
            "{}",
            b.name
        );
        assert_eq!(node.fencing_token, guard.fencing_token());
        b.within("release", guard.release()).await.unwrap();
    })
    .await;
}

/// A path that does not exist is an empty inspection; invalid paths are refused.
#[tokio::test]
async fn missing_path_is_empty_and_bad_paths_are_refused() {
    each_backend(|b| async move {
        let session = b.session().await;
        let inspection = b
            .within("inspect", inspect(&session, "/inspect/nothing/here"))
            .await
            .unwrap();
        assert_eq!(inspection.layout, Layout::Missing, "{}", b.name);
        assert!(inspection.is_empty());
        assert!(
            inspection.to_string().contains("no such node"),
            "{inspection}"
        );
        let sem = b
            .within(
                "inspect",
                inspect_semaphore(&session, "/inspect/nothing", 3),
            )
            .await
            .unwrap();
        assert_eq!(sem.layout, Layout::Missing, "{}", b.name);
        for path in [
            "",
            "relative",
            "/",
            "/trailing/",
            "/a//b",
            "/a/../b",
            "/zookeeper",
        ] {
            assert!(
                matches!(
                    inspect(&session, path).await,
                    Err(Error::InvalidArgument(_))
                ),
                "{}: {path:?}",
                b.name
            );
            assert!(
                matches!(
                    inspect_semaphore(&session, path, 1).await,
                    Err(Error::InvalidArgument(_))
                ),
                "{}: {path:?}",
                b.name
            );
        }
    })
    .await;
}

/// Waiters come and go (giving up after a moment) while inspections run back to back: nodes
/// listed and then deleted before their stats are read are skipped, never an error, and every
/// inspection's queue has exactly one holder, the session holding the lock throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_churn_never_fails_an_inspection() {
    const CHURN: usize = 150;
    each_backend(|b| async move {
        let path = "/inspect/churn";
        let (holder, observer) = (b.session().await, b.session().await);
        let guard = b
            .within("lock", holder.mutex(path).unwrap().lock())
            .await
            .unwrap();
        let churner = {
            let client = b.client().await;
            tokio::spawn(async move {
                let options = CreateOptions::new(CreateMode::EphemeralSequential);
                for _ in 0..CHURN {
                    let (_, created) = client
                        .create(&format!("{path}/_c_5-lock-"), b"", &options)
                        .await
                        .unwrap();
                    // Long enough to be listed, short enough to vanish mid-inspection.
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    client.delete(&created, None).await.unwrap();
                }
            })
        };
        let deadline = Instant::now() + LIMIT;
        let mut inspections = 0;
        let mut with_waiter = 0;
        while !churner.is_finished() {
            assert!(Instant::now() < deadline, "{}: churn did not end", b.name);
            let inspection = b
                .within("inspect", inspect(&observer, path))
                .await
                .unwrap_or_else(|e| panic!("{}: inspection {inspections}: {e}", b.name));
            inspections += 1;
            let holders: Vec<i64> = inspection.holders().map(|p| p.session_id).collect();
            assert_eq!(holders, [holder.session_id()], "{}:\n{inspection}", b.name);
            if inspection.participants.len() > 1 {
                with_waiter += 1;
            }
        }
        churner.await.unwrap();
        eprintln!(
            "{}: {inspections} inspections, {with_waiter} saw a waiter",
            b.name
        );
        assert!(inspections > 0, "{}", b.name);
        b.within("release", guard.release()).await.unwrap();
    })
    .await;
}
