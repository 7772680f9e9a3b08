//! Restart after kill -9 with 100,000 znodes and live ephemeral sessions.
//!
//! The znodes are written pipelined with a snapshot every 20,000 txns, so recovery goes through
//! a snapshot (possibly one the kill interrupted) and the log after it, and must bring back all
//! of them with their data. Three sessions hold ephemerals when the server dies. Sessions are
//! durable state: two of them reconnect after the restart with their session id and password
//! and must find their ephemerals and carry on; the third never comes back, and its ephemerals
//! must go once its timeout has run out, counted from the restart: the server was down for a
//! while, and a session cannot be blamed for the silence of a dead server.

mod support;

use std::time::{Duration, Instant};

use futures::StreamExt;
use zookeeper_client::{Acls, Client, CreateMode, SessionInfo};

use support::{KeeperProcess, OP_LIMIT, connect, epoch, read_nodes, snapshots, within};

const NODES: usize = 100_000;
const PARENTS: usize = 10;
/// Writes in flight at once while loading.
const PIPELINE: usize = 512;
/// Session timeout the ephemeral holders ask for (the server's default 2 s tick allows 4..40 s).
const SESSION_TIMEOUT: Duration = Duration::from_secs(6);
/// How long the server stays dead. Longer than the slack allowed on expiry, so a server that
/// counted the silence before the crash would expire the lost session visibly too early.
const DOWNTIME: Duration = Duration::from_secs(3);
/// Ephemerals per holding session.
const EPHEMERALS: usize = 5;

fn node_path(i: usize) -> String {
    format!("/bulk/p{}/n{i:06}", i % PARENTS)
}

fn node_data(i: usize) -> Vec<u8> {
    format!("znode {i} of {NODES}").into_bytes()
}

fn persistent() -> zookeeper_client::CreateOptions<'static> {
    CreateMode::Persistent.with_acls(Acls::anyone_all())
}

fn ephemeral() -> zookeeper_client::CreateOptions<'static> {
    CreateMode::Ephemeral.with_acls(Acls::anyone_all())
}

/// A session holding ephemerals: what it takes to re-attach to it and what it owns.
struct Holder {
    name: &'static str,
    session: SessionInfo,
    paths: Vec<String>,
}

/// Opens a session that holds ephemerals. Its client is detached, so dropping it never closes
/// the session.
async fn holder(addr: &str, name: &'static str) -> (Client, Holder) {
    let client = within(
        "connect",
        OP_LIMIT,
        Client::connector()
            .with_session_timeout(SESSION_TIMEOUT)
            .with_detached()
            .connect(addr),
    )
    .await
    .unwrap_or_else(|e| panic!("connect holder {name}: {e}"));
    assert_eq!(
        client.session_timeout(),
        SESSION_TIMEOUT,
        "the server should grant the {SESSION_TIMEOUT:?} the holders ask for"
    );
    let mut paths = Vec::new();
    for i in 0..EPHEMERALS {
        let path = format!("/eph/{name}-{i}");
        within(
            "create",
            OP_LIMIT,
            client.create(&path, name.as_bytes(), &ephemeral()),
        )
        .await
        .unwrap_or_else(|e| panic!("create {path}: {e}"));
        paths.push(path);
    }
    let session = client.session().clone();
    (
        client,
        Holder {
            name,
            session,
            paths,
        },
    )
}

/// Re-attaches to the session `name` held before the crash, on the restarted server.
async fn reattach(addr: &str, name: &str, session: &SessionInfo) -> Client {
    let client = within(
        "reconnect",
        OP_LIMIT,
        Client::connector()
            .with_session(session.clone())
            .with_session_timeout(SESSION_TIMEOUT)
            .with_detached()
            .connect(addr),
    )
    .await
    .unwrap_or_else(|e| {
        panic!(
            "session {name} ({:#x}) could not re-attach after the restart: {e}",
            session.id().0
        )
    });
    assert_eq!(client.session_id(), session.id());
    client
}

/// Polls `paths` until every one is gone; returns when that was seen, relative to `since`.
/// Panics if they were already gone at the first look or do not go within `limit`.
async fn wait_until_gone(
    client: &Client,
    paths: &[String],
    since: Instant,
    limit: Duration,
) -> Duration {
    let mut first_look = true;
    loop {
        let mut present = 0;
        for path in paths {
            if within("exists", OP_LIMIT, client.check_stat(path))
                .await
                .unwrap_or_else(|e| panic!("exists {path}: {e}"))
                .is_some()
            {
                present += 1;
            }
        }
        let elapsed = since.elapsed();
        if present == 0 {
            assert!(
                !first_look,
                "the lost session's ephemerals were already gone {elapsed:?} after the restart: \
                 lost in recovery, or expired for the time the server was down"
            );
            return elapsed;
        }
        first_look = false;
        assert!(
            elapsed < limit,
            "the lost session's ephemerals ({present} of {}) are still there {elapsed:?} after \
             the restart; its timeout is {SESSION_TIMEOUT:?}",
            paths.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hundred_thousand_znodes_and_live_ephemerals_survive_kill_9() {
    let data = tempfile::Builder::new()
        .prefix("lockkeeper-restart-")
        .tempdir()
        .expect("temporary data dir");
    let flags = ["--snap-count", "20000"];
    let mut server = KeeperProcess::start(data.path(), &flags);
    let addr = server.connect_string();
    let writer = connect(&addr).await;
    for parent in std::iter::once("/bulk".to_string())
        .chain((0..PARENTS).map(|p| format!("/bulk/p{p}")))
        .chain(std::iter::once("/eph".to_string()))
    {
        within(
            "create",
            OP_LIMIT,
            writer.create(&parent, b"", &persistent()),
        )
        .await
        .unwrap_or_else(|e| panic!("create {parent}: {e}"));
    }
    let loading = Instant::now();
    let writer_ref = &writer;
    let max_zxid = futures::stream::iter(0..NODES)
        .map(|i| async move {
            let path = node_path(i);
            let (stat, _) = within(
                "create",
                OP_LIMIT,
                writer_ref.create(&path, &node_data(i), &persistent()),
            )
            .await
            .unwrap_or_else(|e| panic!("create {path}: {e}"));
            stat.czxid
        })
        .buffer_unordered(PIPELINE)
        .fold(0i64, |max, zxid| async move { max.max(zxid) })
        .await;
    eprintln!("{NODES} znodes created in {:?}", loading.elapsed());

    let (a_client, a) = holder(&addr, "kept-a").await;
    let (b_client, b) = holder(&addr, "kept-b").await;
    let (c_client, c) = holder(&addr, "lost-c").await;
    // Recovery must go through a snapshot, not the log alone.
    let deadline = Instant::now() + Duration::from_secs(30);
    while snapshots(data.path()).is_empty() {
        assert!(
            Instant::now() < deadline,
            "no snapshot after {NODES} txns with --snap-count 20000"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    server.kill9();
    let old_addr = server.addr();
    drop(writer);
    // Every holder's client goes away: the lost one for good, the kept ones come back below
    // under their session ids (a client left running would keep retrying the old address).
    drop((a_client, b_client, c_client));
    tokio::time::sleep(DOWNTIME).await;

    let mut server = KeeperProcess::start(data.path(), &flags);
    if server.addr() == old_addr {
        // A stray client of the old run could re-attach to the lost session: move away.
        server.kill9();
        server = KeeperProcess::start(data.path(), &flags);
    }
    let restarted = server.ready_at;
    let addr = server.connect_string();
    eprintln!(
        "recovered and serving {:?} after the restart began ({DOWNTIME:?} down before it)",
        restarted - server.spawned_at
    );
    let a_client = reattach(&addr, a.name, &a.session).await;
    let b_client = reattach(&addr, b.name, &b.session).await;

    let observer = connect(&addr).await;
    let expiry = {
        let observer = &observer;
        let c_paths = &c.paths;
        async move { wait_until_gone(observer, c_paths, restarted, SESSION_TIMEOUT * 4).await }
    };
    let reader = connect(&addr).await;
    let check_all = async {
        let paths: Vec<String> = (0..NODES).map(node_path).collect();
        let found = read_nodes(&reader, &paths, 512).await;
        let mut missing = Vec::new();
        for (i, node) in found.into_iter().enumerate() {
            match node {
                None => missing.push(node_path(i)),
                Some((data, _)) => assert_eq!(data, node_data(i), "{} data", node_path(i)),
            }
        }
        assert!(
            missing.is_empty(),
            "{} of {NODES} znodes lost in the restart, e.g. {:?}",
            missing.len(),
            &missing[..missing.len().min(10)]
        );
    };
    let (expired_after, ()) = tokio::join!(expiry, check_all);
    eprintln!("the lost session's ephemerals went {expired_after:?} after the restart");
    // Deleted no earlier than the timeout (less a little: "serving" is printed just after the
    // server's clock starts) and not long after: ZooKeeper expires within a tick or two.
    assert!(
        expired_after >= SESSION_TIMEOUT - Duration::from_millis(1500),
        "the lost session expired {expired_after:?} after the restart, before its \
         {SESSION_TIMEOUT:?} timeout counted from recovery"
    );
    assert!(
        expired_after <= SESSION_TIMEOUT + Duration::from_secs(10),
        "the lost session expired only {expired_after:?} after the restart (timeout \
         {SESSION_TIMEOUT:?})"
    );

    // The re-attached sessions outlive their own timeout after the restart, ephemerals intact.
    let settle = (restarted + SESSION_TIMEOUT * 2).saturating_duration_since(Instant::now());
    tokio::time::sleep(settle).await;
    for (holder, client) in [(&a, &a_client), (&b, &b_client)] {
        let name = holder.name;
        for (path, node) in holder
            .paths
            .iter()
            .zip(read_nodes(&observer, &holder.paths, 8).await)
        {
            let (data, stat) = node.unwrap_or_else(|| {
                panic!("{path} of re-attached session {name} is gone after the restart")
            });
            assert_eq!(data, name.as_bytes());
            assert_eq!(
                stat.ephemeral_owner,
                client.session_id().0,
                "{path} belongs to its session"
            );
        }
        let path = format!("/eph/{name}-after-restart");
        let (stat, _) = within("create", OP_LIMIT, client.create(&path, b"", &ephemeral()))
            .await
            .unwrap_or_else(|e| panic!("re-attached session {name} cannot write: {e}"));
        assert!(
            stat.czxid > max_zxid && epoch(stat.czxid) > epoch(max_zxid),
            "zxid {:#x} after the restart is not beyond {max_zxid:#x} in a new epoch",
            stat.czxid
        );
    }
    let (children, _) = within("children", OP_LIMIT, observer.get_children("/eph"))
        .await
        .expect("list /eph");
    assert!(
        children.iter().all(|c| !c.starts_with("lost-c")),
        "the lost session's ephemerals came back: {children:?}"
    );
}
