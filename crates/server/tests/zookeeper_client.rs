//! The Rust `zookeeper-client` crate (0.11) against Keeper and against Apache ZooKeeper.
//!
//! Each test is what a Rust service does with the crate: create every kind of node, read and
//! write with versions, watch (one-shot, persistent, recursive), run transactions, read
//! atomically, authenticate with digest ACLs, and re-attach to a session. Every test body runs
//! against each backend of `both()` with the same assertions, so a difference between Keeper and
//! ZooKeeper fails here with the backend's name in the message.
//!
//! Every wait on the server is bounded by [`LIMIT`]; a missing reply or event fails the test
//! instead of hanging it.

use std::future::Future;
use std::time::Duration;

use base64::Engine as _;
use lockkeeper_testkit::both;
use sha1::{Digest, Sha1};
use zookeeper_client::{
    Acl, Acls, AddWatchMode, AuthUser, Client, CreateMode, Error, EventType, MultiReadResult,
    MultiWriteError, MultiWriteResult, OneshotWatcher, Permission, PersistentWatcher, Stat,
};

/// The longest any single server interaction may take. Generous: the machine is shared.
const LIMIT: Duration = Duration::from_secs(20);

/// How long to listen for an event that must not come.
const QUIET: Duration = Duration::from_millis(500);

/// One backend under test: its connect string and its name for assertion messages.
struct Backend {
    connect: String,
    name: &'static str,
}

impl Backend {
    /// Awaits `fut`, failing the test (naming the backend and `what`) if it takes over [`LIMIT`].
    async fn within<T>(&self, what: &str, fut: impl Future<Output = T>) -> T {
        lockkeeper_testkit::within(LIMIT, format!("{}: {what}", self.name), fut).await
    }

    /// A new session with the crate's defaults.
    async fn client(&self) -> Client {
        self.within("connect", Client::connect(&self.connect))
            .await
            .unwrap_or_else(|e| panic!("{}: connect to {}: {e}", self.name, self.connect))
    }

    /// The next node event of a persistent watch, skipping session-state notifications.
    async fn next_event(&self, watcher: &mut PersistentWatcher, what: &str) -> (EventType, String) {
        loop {
            let event = self.within(what, watcher.changed()).await;
            if event.event_type != EventType::Session {
                return (event.event_type, event.path);
            }
        }
    }

    /// Asserts a persistent watch delivers nothing more for [`QUIET`].
    async fn assert_quiet(&self, watcher: &mut PersistentWatcher, why: &str) {
        let deadline = tokio::time::Instant::now() + QUIET;
        loop {
            match tokio::time::timeout_at(deadline, watcher.changed()).await {
                Err(_) => return,
                Ok(event) if event.event_type == EventType::Session => continue,
                Ok(event) => panic!("{}: unexpected event {event:?} ({why})", self.name),
            }
        }
    }

    /// The one event a one-shot watch delivers.
    async fn fired(&self, watcher: OneshotWatcher, what: &str) -> (EventType, String) {
        let event = self.within(what, watcher.changed()).await;
        (event.event_type, event.path)
    }
}

/// Runs `body` once per backend of `both()`, each on a freshly started server.
async fn each_backend<F, Fut>(body: F)
where
    F: Fn(Backend) -> Fut,
    Fut: Future<Output = ()>,
{
    let servers = both();
    assert!(!servers.is_empty(), "no backend selected");
    for server in &servers {
        body(Backend {
            connect: server.connect_string(),
            name: server.name(),
        })
        .await;
    }
}

fn persistent() -> zookeeper_client::CreateOptions<'static> {
    CreateMode::Persistent.with_acls(Acls::anyone_all())
}

/// `base64(sha1("user:password"))`, the id a digest ACL names.
fn digest(user: &str, password: &str) -> String {
    let hash = Sha1::digest(format!("{user}:{password}").as_bytes());
    format!(
        "{user}:{}",
        base64::engine::general_purpose::STANDARD.encode(hash)
    )
}

fn sorted(mut names: Vec<String>) -> Vec<String> {
    names.sort();
    names
}

/// Every CreateMode, including container and TTL, with the stat each must carry: owner for
/// ephemerals, the marker owners for containers and TTL nodes, sequence numbers taken from the
/// parent's cversion with ten-digit padding.
#[tokio::test]
async fn create_with_every_mode() {
    each_backend(|b| async move {
        let zk = b.client().await;
        let sid = zk.session_id().0;
        let (stat, seq) = b
            .within(
                "create persistent",
                zk.create("/modes", b"root", &persistent()),
            )
            .await
            .expect("create persistent");
        assert_eq!(stat.version, 0, "{}", b.name);
        assert_eq!(stat.ephemeral_owner, 0, "{}", b.name);
        assert_eq!(stat.data_length, 4, "{}", b.name);
        assert_eq!(stat.czxid, stat.mzxid, "{}", b.name);
        assert_eq!(
            seq.into_i64(),
            -1,
            "{}: non-sequential create has no sequence",
            b.name
        );

        // One plain child first, so the sequence counter (the parent's cversion) is at 1.
        b.within(
            "create child",
            zk.create("/modes/plain", b"", &persistent()),
        )
        .await
        .expect("create plain child");
        let ps = CreateMode::PersistentSequential.with_acls(Acls::anyone_all());
        let (_, s1) = b
            .within("persistent sequential", zk.create("/modes/seq-", b"a", &ps))
            .await
            .expect("create persistent sequential");
        let (_, s2) = b
            .within("persistent sequential", zk.create("/modes/seq-", b"b", &ps))
            .await
            .expect("create persistent sequential");
        assert_eq!(
            s1.into_i64(),
            1,
            "{}: first sequence after one child",
            b.name
        );
        assert_eq!(s2.into_i64(), 2, "{}", b.name);
        assert_eq!(s1.to_string(), "0000000001", "{}", b.name);

        let eph = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
        let (stat, _) = b
            .within("create ephemeral", zk.create("/modes/eph", b"e", &eph))
            .await
            .expect("create ephemeral");
        assert_eq!(stat.ephemeral_owner, sid, "{}: ephemeral owner", b.name);
        let es = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());
        let (stat, s3) = b
            .within("ephemeral sequential", zk.create("/modes/eseq-", b"", &es))
            .await
            .expect("create ephemeral sequential");
        assert_eq!(stat.ephemeral_owner, sid, "{}", b.name);
        assert_eq!(
            s3.into_i64(),
            4,
            "{}: sequence counts every child create",
            b.name
        );
        assert_eq!(
            b.within(
                "create under ephemeral",
                zk.create("/modes/eph/x", b"", &persistent())
            )
            .await,
            Err(Error::NoChildrenForEphemerals),
            "{}",
            b.name
        );

        let container = CreateMode::Container.with_acls(Acls::anyone_all());
        let (stat, _) = b
            .within("create container", zk.create("/modes/box", b"", &container))
            .await
            .expect("create container");
        // ZooKeeper marks containers and TTL nodes in ephemeralOwner internally but shows
        // clients 0 there (ZOOKEEPER-2901), in create replies and in later reads alike.
        assert_eq!(
            stat.ephemeral_owner, 0,
            "{}: container owner in create",
            b.name
        );
        let stored = zk.check_stat("/modes/box").await.expect("exists");
        assert_eq!(stored, Some(stat), "{}: container stat on read", b.name);

        let ttl = persistent().with_ttl(Duration::from_secs(3600));
        let (stat, _) = b
            .within("create ttl", zk.create("/modes/ttl", b"t", &ttl))
            .await
            .expect("create TTL node");
        assert_eq!(
            stat.ephemeral_owner, 0,
            "{}: TTL node owner in create",
            b.name
        );
        let stored = zk.check_stat("/modes/ttl").await.expect("exists");
        assert_eq!(stored, Some(stat), "{}: TTL node stat on read", b.name);
        let ttl_seq = CreateMode::PersistentSequential
            .with_acls(Acls::anyone_all())
            .with_ttl(Duration::from_secs(3600));
        let (_, s4) = b
            .within(
                "create ttl sequential",
                zk.create("/modes/tseq-", b"", &ttl_seq),
            )
            .await
            .expect("create TTL sequential node");
        assert_eq!(s4.into_i64(), 7, "{}", b.name);

        let (children, stat) = b
            .within("get_children", zk.get_children("/modes"))
            .await
            .expect("get_children");
        assert_eq!(
            sorted(children),
            vec![
                "box",
                "eph",
                "eseq-0000000004",
                "plain",
                "seq-0000000001",
                "seq-0000000002",
                "tseq-0000000007",
                "ttl"
            ],
            "{}",
            b.name
        );
        assert_eq!(stat.num_children, 8, "{}", b.name);
        assert_eq!(stat.cversion, 8, "{}", b.name);
    })
    .await;
}

/// Containers are reaped once their last child goes; TTL nodes once unmodified for their TTL;
/// a container that never had a child stays.
#[tokio::test]
async fn containers_and_ttl_nodes_are_reaped() {
    each_backend(|b| async move {
        let zk = b.client().await;
        let container = CreateMode::Container.with_acls(Acls::anyone_all());
        b.within("create container", zk.create("/box", b"", &container))
            .await
            .expect("create container");
        b.within(
            "create empty container",
            zk.create("/never-filled", b"", &container),
        )
        .await
        .expect("create container");
        b.within("create child", zk.create("/box/item", b"", &persistent()))
            .await
            .expect("create container child");
        let ttl = persistent().with_ttl(Duration::from_millis(500));
        b.within("create ttl", zk.create("/short-lived", b"", &ttl))
            .await
            .expect("create TTL node");
        b.within("delete child", zk.delete("/box/item", None))
            .await
            .expect("delete container child");

        // The reaper runs every second on both test servers; allow many rounds.
        let deadline = tokio::time::Instant::now() + LIMIT;
        loop {
            let boxed = zk.check_stat("/box").await.expect("exists /box");
            let ttl = zk.check_stat("/short-lived").await.expect("exists ttl");
            if boxed.is_none() && ttl.is_none() {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{}: not reaped within {LIMIT:?}: container {}, ttl node {}",
                b.name,
                boxed.is_some(),
                ttl.is_some()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        assert!(
            zk.check_stat("/never-filled")
                .await
                .expect("exists")
                .is_some(),
            "{}: a container that never had children was reaped",
            b.name
        );
    })
    .await;
}

/// Data and versions: conditional set and delete, BadVersion, NoNode, NodeExists, NotEmpty, and
/// exists() answering with the same stat as getData.
#[tokio::test]
async fn data_versions_and_errors() {
    each_backend(|b| async move {
        let zk = b.client().await;
        b.within("create", zk.create("/v", b"one", &persistent()))
            .await
            .expect("create /v");
        let (data, stat) = b.within("get", zk.get_data("/v")).await.expect("get /v");
        assert_eq!(data, b"one", "{}", b.name);
        assert_eq!(stat.version, 0, "{}", b.name);

        let s1 = b
            .within("set v0", zk.set_data("/v", b"two", Some(0)))
            .await
            .expect("set with the current version");
        assert_eq!(s1.version, 1, "{}", b.name);
        assert!(s1.mzxid > stat.mzxid, "{}: mzxid must grow", b.name);
        assert_eq!(s1.czxid, stat.czxid, "{}", b.name);
        assert_eq!(s1.data_length, 3, "{}", b.name);
        assert_eq!(
            b.within("stale set", zk.set_data("/v", b"x", Some(0)))
                .await,
            Err(Error::BadVersion),
            "{}",
            b.name
        );
        let s2 = b
            .within("unconditional set", zk.set_data("/v", b"three", None))
            .await
            .expect("set without version");
        assert_eq!(s2.version, 2, "{}", b.name);
        let exists = b
            .within("exists", zk.check_stat("/v"))
            .await
            .expect("exists /v");
        assert_eq!(
            exists,
            Some(s2),
            "{}: exists() stat equals the last set's",
            b.name
        );
        assert_eq!(
            b.within("exists missing", zk.check_stat("/missing")).await,
            Ok(None),
            "{}",
            b.name
        );
        assert_eq!(
            b.within("get missing", zk.get_data("/missing")).await,
            Err(Error::NoNode),
            "{}",
            b.name
        );
        assert_eq!(
            b.within("set missing", zk.set_data("/missing", b"", None))
                .await,
            Err(Error::NoNode),
            "{}",
            b.name
        );
        assert_eq!(
            b.within("create again", zk.create("/v", b"", &persistent()))
                .await
                .map(|_| ()),
            Err(Error::NodeExists),
            "{}",
            b.name
        );
        assert_eq!(
            b.within("create orphan", zk.create("/no/parent", b"", &persistent()))
                .await
                .map(|_| ()),
            Err(Error::NoNode),
            "{}",
            b.name
        );

        b.within("create child", zk.create("/v/c", b"", &persistent()))
            .await
            .expect("create /v/c");
        assert_eq!(
            b.within("delete non-empty", zk.delete("/v", None)).await,
            Err(Error::NotEmpty),
            "{}",
            b.name
        );
        assert_eq!(
            b.within("delete wrong version", zk.delete("/v/c", Some(3)))
                .await,
            Err(Error::BadVersion),
            "{}",
            b.name
        );
        b.within("delete child", zk.delete("/v/c", Some(0)))
            .await
            .expect("delete with the current version");
        assert_eq!(
            b.within("delete again", zk.delete("/v/c", None)).await,
            Err(Error::NoNode),
            "{}",
            b.name
        );
        let (children, parent) = b
            .within("children of /v", zk.get_children("/v"))
            .await
            .expect("children");
        assert!(children.is_empty(), "{}", b.name);
        assert_eq!(parent.num_children, 0, "{}", b.name);
        assert_eq!(parent.cversion, 2, "{}: one create and one delete", b.name);
        assert!(
            parent.pzxid > s2.mzxid,
            "{}: pzxid follows child changes",
            b.name
        );
        b.within("delete /v", zk.delete("/v", Some(2)))
            .await
            .expect("delete /v");
    })
    .await;
}

/// One-shot watches: data, exist and child watches fire once each with the right event type
/// and path, and the event reaches the client before the reply that reveals the change.
#[tokio::test]
async fn oneshot_watches_fire_with_the_right_event() {
    each_backend(|b| async move {
        let watcher_zk = b.client().await;
        let writer = b.client().await;

        // Exist watch on a missing node: NodeCreated.
        let (stat, created) = b
            .within("exists watch", watcher_zk.check_and_watch_stat("/w"))
            .await
            .expect("check_and_watch_stat");
        assert_eq!(stat, None, "{}", b.name);
        b.within("create", writer.create("/w", b"1", &persistent()))
            .await
            .expect("create /w");
        assert_eq!(
            b.fired(created, "exists watch").await,
            (EventType::NodeCreated, "/w".to_string()),
            "{}",
            b.name
        );

        // Data watch: NodeDataChanged, delivered before the reply to a read that sees the change.
        let (_, _, changed) = b
            .within("data watch", watcher_zk.get_and_watch_data("/w"))
            .await
            .expect("get_and_watch_data");
        b.within("set", writer.set_data("/w", b"2", None))
            .await
            .expect("set /w");
        let (data, _) = b
            .within("read after set", watcher_zk.get_data("/w"))
            .await
            .expect("get /w");
        assert_eq!(data, b"2", "{}", b.name);
        let event = tokio::time::timeout(Duration::ZERO, changed.changed())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "{}: a read saw the new data before the watch event arrived",
                    b.name
                )
            });
        assert_eq!(
            (event.event_type, event.path.as_str()),
            (EventType::NodeDataChanged, "/w"),
            "{}",
            b.name
        );

        // Child watch: NodeChildrenChanged on the parent.
        let (children, kids) = b
            .within("child watch", watcher_zk.list_and_watch_children("/w"))
            .await
            .expect("list_and_watch_children");
        assert!(children.is_empty(), "{}", b.name);
        b.within("create child", writer.create("/w/k", b"", &persistent()))
            .await
            .expect("create /w/k");
        assert_eq!(
            b.fired(kids, "child watch").await,
            (EventType::NodeChildrenChanged, "/w".to_string()),
            "{}",
            b.name
        );

        // Data, exist and child watches on the same node all see its deletion as NodeDeleted.
        let (_, _, data_w) = b
            .within("data watch", watcher_zk.get_and_watch_data("/w/k"))
            .await
            .expect("watch data");
        let (_, exist_w) = b
            .within("exists watch", watcher_zk.check_and_watch_stat("/w/k"))
            .await
            .expect("watch exists");
        let (_, child_w) = b
            .within("child watch", watcher_zk.list_and_watch_children("/w/k"))
            .await
            .expect("watch children");
        let (_, _, parent_w) = b
            .within(
                "parent child watch",
                watcher_zk.get_and_watch_children("/w"),
            )
            .await
            .expect("watch parent's children");
        b.within("delete", writer.delete("/w/k", None))
            .await
            .expect("delete /w/k");
        for (watch, what) in [(data_w, "data"), (exist_w, "exists"), (child_w, "child")] {
            assert_eq!(
                b.fired(watch, what).await,
                (EventType::NodeDeleted, "/w/k".to_string()),
                "{}: {what} watch on a deleted node",
                b.name
            );
        }
        assert_eq!(
            b.fired(parent_w, "parent child watch").await,
            (EventType::NodeChildrenChanged, "/w".to_string()),
            "{}",
            b.name
        );

        // A watch on a node that then gets an unrelated sibling change does not fire.
        let (_, _, quiet) = b
            .within("data watch", watcher_zk.get_and_watch_data("/w"))
            .await
            .expect("watch /w");
        b.within(
            "create sibling",
            writer.create("/other", b"", &persistent()),
        )
        .await
        .expect("create /other");
        assert!(
            tokio::time::timeout(QUIET, quiet.changed()).await.is_err(),
            "{}: a data watch fired for a change elsewhere",
            b.name
        );
    })
    .await;
}

/// Persistent watches keep firing: a plain one sees its node's data and children changes and
/// deletion; a recursive one sees creates, changes and deletes anywhere below, and no
/// NodeChildrenChanged.
#[tokio::test]
async fn persistent_and_recursive_watches() {
    each_backend(|b| async move {
        let watcher_zk = b.client().await;
        let recursive_zk = b.client().await;
        let writer = b.client().await;
        b.within("create", writer.create("/p", b"", &persistent()))
            .await
            .expect("create /p");

        let mut plain = b
            .within(
                "add persistent watch",
                watcher_zk.watch("/p", AddWatchMode::Persistent),
            )
            .await
            .expect("watch persistent");
        let mut deep = b
            .within(
                "add recursive watch",
                recursive_zk.watch("/p", AddWatchMode::PersistentRecursive),
            )
            .await
            .expect("watch recursive");

        for (path, data) in [("/p/a", "1"), ("/p/a/b", "2")] {
            b.within(
                "create",
                writer.create(path, data.as_bytes(), &persistent()),
            )
            .await
            .expect("create");
        }
        b.within("set", writer.set_data("/p/a/b", b"3", None))
            .await
            .expect("set");
        b.within("set", writer.set_data("/p", b"r", None))
            .await
            .expect("set");
        b.within("delete", writer.delete("/p/a/b", None))
            .await
            .expect("delete");
        b.within("delete", writer.delete("/p/a", None))
            .await
            .expect("delete");

        let expected_deep = [
            (EventType::NodeCreated, "/p/a"),
            (EventType::NodeCreated, "/p/a/b"),
            (EventType::NodeDataChanged, "/p/a/b"),
            (EventType::NodeDataChanged, "/p"),
            (EventType::NodeDeleted, "/p/a/b"),
            (EventType::NodeDeleted, "/p/a"),
        ];
        for (i, (kind, path)) in expected_deep.into_iter().enumerate() {
            assert_eq!(
                b.next_event(&mut deep, "recursive watch event").await,
                (kind, path.to_string()),
                "{}: recursive watch event #{i}",
                b.name
            );
        }
        b.assert_quiet(&mut deep, "recursive watch after the last change")
            .await;

        let expected_plain = [
            (EventType::NodeChildrenChanged, "/p"),
            (EventType::NodeDataChanged, "/p"),
            (EventType::NodeChildrenChanged, "/p"),
        ];
        for (i, (kind, path)) in expected_plain.into_iter().enumerate() {
            assert_eq!(
                b.next_event(&mut plain, "persistent watch event").await,
                (kind, path.to_string()),
                "{}: persistent watch event #{i}",
                b.name
            );
        }
        b.assert_quiet(&mut plain, "persistent watch ignores grandchildren")
            .await;

        // A persistent watch outlives the deletion of its node and sees it come back.
        b.within("delete /p", writer.delete("/p", None))
            .await
            .expect("delete /p");
        assert_eq!(
            b.next_event(&mut plain, "deletion").await,
            (EventType::NodeDeleted, "/p".to_string()),
            "{}",
            b.name
        );
        assert_eq!(
            b.next_event(&mut deep, "deletion").await,
            (EventType::NodeDeleted, "/p".to_string()),
            "{}",
            b.name
        );
        b.within("create /p", writer.create("/p", b"", &persistent()))
            .await
            .expect("recreate /p");
        assert_eq!(
            b.next_event(&mut plain, "re-creation").await,
            (EventType::NodeCreated, "/p".to_string()),
            "{}",
            b.name
        );
        assert_eq!(
            b.next_event(&mut deep, "re-creation").await,
            (EventType::NodeCreated, "/p".to_string()),
            "{}",
            b.name
        );
    })
    .await;
}

/// Multi: all-or-nothing, with one result per operation in order; a failing operation is
/// reported by index and nothing of the transaction is applied. MultiRead reports errors per
/// operation.
#[tokio::test]
async fn multi_and_multi_read() {
    each_backend(|b| async move {
        let zk = b.client().await;
        b.within("create", zk.create("/m", b"0", &persistent()))
            .await
            .expect("create /m");
        b.within("create", zk.create("/m/old", b"", &persistent()))
            .await
            .expect("create /m/old");

        let mut writer = zk.new_multi_writer();
        writer.add_check_version("/m", 0).expect("check");
        writer
            .add_create("/m/new", b"n", &persistent())
            .expect("create");
        writer
            .add_create(
                "/m/s-",
                b"",
                &CreateMode::PersistentSequential.with_acls(Acls::anyone_all()),
            )
            .expect("create sequential");
        writer.add_set_data("/m", b"1", Some(0)).expect("set");
        writer.add_delete("/m/old", None).expect("delete");
        let results = b
            .within("multi", writer.commit())
            .await
            .expect("a valid multi commits");
        assert_eq!(results.len(), 5, "{}: one result per op", b.name);
        assert_eq!(results[0], MultiWriteResult::Check, "{}", b.name);
        match &results[1] {
            // The stat of a create inside a multi is not checked: ZooKeeper 3.8 answers the
            // plain create opcode without one (ZOOKEEPER-4026), so clients cannot rely on it.
            MultiWriteResult::Create { path, .. } => assert_eq!(path, "/m/new", "{}", b.name),
            other => panic!("{}: expected a create result, got {other:?}", b.name),
        }
        match &results[2] {
            // Two children existed before it (old) and one created in this txn (new).
            MultiWriteResult::Create { path, .. } => {
                assert_eq!(path, "/m/s-0000000002", "{}", b.name);
            }
            other => panic!("{}: expected a create result, got {other:?}", b.name),
        }
        let set_stat = match &results[3] {
            MultiWriteResult::SetData { stat } => *stat,
            other => panic!("{}: expected a setData result, got {other:?}", b.name),
        };
        assert_eq!(set_stat.version, 1, "{}", b.name);
        // Each result shows the node as of its own op: /m/old is not yet deleted at the set.
        assert_eq!(
            (set_stat.num_children, set_stat.cversion),
            (3, 3),
            "{}: setData result inside the multi",
            b.name
        );
        assert_eq!(results[4], MultiWriteResult::Delete, "{}", b.name);
        // All ops of one transaction share one zxid.
        let (_, new_stat) = b.within("get", zk.get_data("/m/new")).await.expect("get");
        assert_eq!(
            new_stat.czxid, set_stat.mzxid,
            "{}: one zxid per multi",
            b.name
        );

        // A failing op aborts everything before and after it.
        let mut writer = zk.new_multi_writer();
        writer
            .add_create("/m/should-not-exist", b"", &persistent())
            .expect("create");
        writer.add_set_data("/m", b"x", Some(0)).expect("stale set");
        writer.add_delete("/m/new", None).expect("delete");
        assert_eq!(
            b.within("failing multi", writer.commit()).await,
            Err(MultiWriteError::OperationFailed {
                index: 1,
                source: Error::BadVersion
            }),
            "{}",
            b.name
        );
        assert_eq!(
            zk.check_stat("/m/should-not-exist").await,
            Ok(None),
            "{}: a failed multi applied its first op",
            b.name
        );
        assert!(
            zk.check_stat("/m/new").await.expect("exists").is_some(),
            "{}: a failed multi applied its last op",
            b.name
        );
        let (data, stat) = zk.get_data("/m").await.expect("get /m");
        assert_eq!(
            (data.as_slice(), stat.version),
            (&b"1"[..], 1),
            "{}",
            b.name
        );

        let mut writer = zk.new_multi_writer();
        writer.add_delete("/m/absent", None).expect("delete");
        assert_eq!(
            b.within("multi on a missing node", writer.commit()).await,
            Err(MultiWriteError::OperationFailed {
                index: 0,
                source: Error::NoNode
            }),
            "{}",
            b.name
        );

        let (_, final_stat) = zk.get_data("/m").await.expect("get /m");
        assert_eq!(
            (final_stat.num_children, final_stat.cversion),
            (2, 4),
            "{}: /m after the multi",
            b.name
        );
        let mut reader = zk.new_multi_reader();
        reader.add_get_data("/m").expect("get");
        reader.add_get_children("/m").expect("children");
        reader.add_get_data("/m/absent").expect("get missing");
        let results = b
            .within("multi read", reader.commit())
            .await
            .expect("multi read");
        assert_eq!(results.len(), 3, "{}", b.name);
        match &results[0] {
            MultiReadResult::Data { data, stat } => {
                assert_eq!(data, b"1", "{}", b.name);
                assert_eq!(*stat, final_stat, "{}", b.name);
            }
            other => panic!("{}: expected data, got {other:?}", b.name),
        }
        match &results[1] {
            MultiReadResult::Children { children } => assert_eq!(
                sorted(children.clone()),
                vec!["new", "s-0000000002"],
                "{}",
                b.name
            ),
            other => panic!("{}: expected children, got {other:?}", b.name),
        }
        match &results[2] {
            MultiReadResult::Error { err } => assert_eq!(*err, Error::NoNode, "{}", b.name),
            other => panic!("{}: expected NoNode, got {other:?}", b.name),
        }
    })
    .await;
}

/// getEphemerals lists only this session's ephemerals under a prefix; getAllChildrenNumber
/// counts every descendant.
#[tokio::test]
async fn ephemerals_and_descendant_counts() {
    each_backend(|b| async move {
        let mine = b.client().await;
        let theirs = b.client().await;
        let eph = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
        for path in ["/e", "/e/x", "/e/x/y", "/f"] {
            b.within("create", mine.create(path, b"", &persistent()))
                .await
                .expect("create");
        }
        for path in ["/e/mine1", "/e/x/mine2", "/f/mine3"] {
            b.within("create ephemeral", mine.create(path, b"", &eph))
                .await
                .expect("create ephemeral");
        }
        b.within(
            "create their ephemeral",
            theirs.create("/e/theirs", b"", &eph),
        )
        .await
        .expect("create ephemeral");

        let under_e = b
            .within("getEphemerals /e", mine.list_ephemerals("/e"))
            .await
            .expect("list_ephemerals");
        assert_eq!(
            sorted(under_e),
            vec!["/e/mine1", "/e/x/mine2"],
            "{}",
            b.name
        );
        let all = b
            .within("getEphemerals /", mine.list_ephemerals("/"))
            .await
            .expect("list_ephemerals");
        assert_eq!(
            sorted(all),
            vec!["/e/mine1", "/e/x/mine2", "/f/mine3"],
            "{}",
            b.name
        );
        let theirs_list = b
            .within("their getEphemerals", theirs.list_ephemerals("/"))
            .await
            .expect("list_ephemerals");
        assert_eq!(theirs_list, vec!["/e/theirs"], "{}", b.name);

        // /e has x, x/y, mine1, x/mine2, theirs.
        assert_eq!(
            b.within("count /e", mine.count_descendants_number("/e"))
                .await,
            Ok(5),
            "{}",
            b.name
        );
        assert_eq!(
            b.within("count leaf", mine.count_descendants_number("/e/x/y"))
                .await,
            Ok(0),
            "{}",
            b.name
        );
        assert_eq!(
            b.within("count missing", mine.count_descendants_number("/nope"))
                .await,
            Err(Error::NoNode),
            "{}",
            b.name
        );
    })
    .await;
}

/// Digest ACLs: a creator-only node is readable by its creator's identity only; a read-only
/// node refuses writes; whoAmI lists the session's identities.
#[tokio::test]
async fn digest_acls_and_whoami() {
    each_backend(|b| async move {
        let alice = b.client().await;
        let stranger = b.client().await;
        let bob = b.client().await;
        let alice_again = b.client().await;

        let anonymous = b
            .within("whoami", stranger.list_auth_users())
            .await
            .expect("whoami");
        assert_eq!(
            anonymous,
            vec![AuthUser::new("ip", "127.0.0.1")],
            "{}",
            b.name
        );

        // Without an identity, "creator" ACLs cannot be resolved.
        assert_eq!(
            b.within(
                "create creator-only unauthenticated",
                stranger.create(
                    "/nobody",
                    b"",
                    &CreateMode::Persistent.with_acls(Acls::creator_all())
                )
            )
            .await
            .map(|_| ()),
            Err(Error::InvalidAcl),
            "{}",
            b.name
        );

        b.within("auth alice", alice.auth("digest", b"alice:secret"))
            .await
            .expect("digest auth");
        b.within("auth bob", bob.auth("digest", b"bob:other"))
            .await
            .expect("digest auth");
        b.within(
            "auth alice again",
            alice_again.auth("digest", b"alice:secret"),
        )
        .await
        .expect("digest auth");
        let who = b
            .within("whoami", alice.list_auth_users())
            .await
            .expect("whoami");
        assert!(
            who.contains(&AuthUser::new("digest", "alice")),
            "{}: whoami after digest auth: {who:?}",
            b.name
        );
        assert!(
            who.contains(&AuthUser::new("ip", "127.0.0.1")),
            "{}",
            b.name
        );

        b.within(
            "create creator-only",
            alice.create(
                "/secret",
                b"s",
                &CreateMode::Persistent.with_acls(Acls::creator_all()),
            ),
        )
        .await
        .expect("create with creator ACL");
        // Reading an ACL needs READ or ADMIN on the node (since ZooKeeper 3.5.5).
        assert_eq!(
            b.within("getAcl denied", stranger.get_acl("/secret"))
                .await
                .map(|_| ()),
            Err(Error::NoAuth),
            "{}: getAcl without permission",
            b.name
        );
        let (acl, _) = b
            .within("getAcl", alice.get_acl("/secret"))
            .await
            .expect("getAcl by the creator");
        assert_eq!(
            acl,
            vec![Acl::new(
                Permission::ALL,
                zookeeper_client::AuthId::new("digest", &digest("alice", "secret"))
            )],
            "{}",
            b.name
        );
        assert_eq!(
            b.within("alice reads", alice.get_data("/secret"))
                .await
                .map(|(d, _)| d),
            Ok(b"s".to_vec()),
            "{}",
            b.name
        );
        assert_eq!(
            b.within(
                "same identity, other session",
                alice_again.get_data("/secret")
            )
            .await
            .map(|(d, _)| d),
            Ok(b"s".to_vec()),
            "{}",
            b.name
        );
        for (who, client) in [("anonymous", &stranger), ("bob", &bob)] {
            assert_eq!(
                b.within("read denied", client.get_data("/secret"))
                    .await
                    .map(|_| ()),
                Err(Error::NoAuth),
                "{}: {who} read a creator-only node",
                b.name
            );
            assert_eq!(
                b.within("write denied", client.set_data("/secret", b"x", None))
                    .await
                    .map(|_| ()),
                Err(Error::NoAuth),
                "{}: {who} wrote a creator-only node",
                b.name
            );
            assert_eq!(
                b.within(
                    "create denied",
                    client.create("/secret/c", b"", &persistent())
                )
                .await
                .map(|_| ()),
                Err(Error::NoAuth),
                "{}: {who} created under a creator-only node",
                b.name
            );
        }

        // An explicit digest ACL given by someone else: bob may read only.
        let bob_reads = [Acl::new(
            Permission::READ,
            zookeeper_client::AuthId::new("digest", &digest("bob", "other")),
        )];
        b.within(
            "create with explicit digest ACL",
            stranger.create(
                "/for-bob",
                b"b",
                &CreateMode::Persistent.with_acls(Acls::new(&bob_reads)),
            ),
        )
        .await
        .expect("create with an explicit digest ACL");
        assert!(bob.get_data("/for-bob").await.is_ok(), "{}", b.name);
        assert_eq!(
            bob.set_data("/for-bob", b"x", None).await.map(|_| ()),
            Err(Error::NoAuth),
            "{}",
            b.name
        );
        assert_eq!(
            alice.get_data("/for-bob").await.map(|_| ()),
            Err(Error::NoAuth),
            "{}",
            b.name
        );

        // World read-only.
        b.within(
            "create read-only",
            stranger.create(
                "/ro",
                b"r",
                &CreateMode::Persistent.with_acls(Acls::anyone_read()),
            ),
        )
        .await
        .expect("create read-only");
        assert!(alice.get_data("/ro").await.is_ok(), "{}", b.name);
        assert_eq!(
            stranger.set_data("/ro", b"x", None).await.map(|_| ()),
            Err(Error::NoAuth),
            "{}",
            b.name
        );
        // ACL changes need ADMIN, which a read-only ACL does not give.
        assert_eq!(
            stranger
                .set_acl("/ro", &Acls::anyone_all(), None)
                .await
                .map(|_| ()),
            Err(Error::NoAuth),
            "{}",
            b.name
        );
        // Deleting a child needs DELETE on the parent; "/" is open, so this works.
        b.within("delete /ro", stranger.delete("/ro", None))
            .await
            .expect("delete a read-only leaf from an open parent");
    })
    .await;
}

/// sync answers for existing and missing paths alike (it orders, it does not read).
#[tokio::test]
async fn sync_orders_without_reading() {
    each_backend(|b| async move {
        let zk = b.client().await;
        let writer = b.client().await;
        b.within("create", writer.create("/s", b"1", &persistent()))
            .await
            .expect("create /s");
        b.within("sync", zk.sync("/s")).await.expect("sync /s");
        assert_eq!(
            zk.get_data("/s").await.map(|(d, _)| d),
            Ok(b"1".to_vec()),
            "{}",
            b.name
        );
        b.within("sync missing", zk.sync("/not-there"))
            .await
            .expect("sync of a missing path");
    })
    .await;
}

/// Session timeouts are negotiated into 2..20 ticks (2 s ticks on both test servers).
#[tokio::test]
async fn session_timeout_is_negotiated() {
    each_backend(|b| async move {
        for (asked, granted) in [(1_000u64, 4_000u64), (10_000, 10_000), (100_000, 40_000)] {
            let zk = b
                .within(
                    "connect",
                    Client::connector()
                        .with_session_timeout(Duration::from_millis(asked))
                        .connect(&b.connect),
                )
                .await
                .expect("connect");
            assert_eq!(
                zk.session_timeout(),
                Duration::from_millis(granted),
                "{}: asked for {asked} ms",
                b.name
            );
        }
    })
    .await;
}

/// A detached session outlives its client: a new connection re-attaches with the session id
/// and password, still owns its ephemerals, and closing it removes them; a closed session cannot
/// be re-attached.
#[tokio::test]
async fn session_reattach_keeps_ephemerals() {
    each_backend(|b| async move {
        let observer = b.client().await;
        let first = b
            .within(
                "connect detached",
                Client::connector()
                    .with_session_timeout(Duration::from_secs(20))
                    .with_detached()
                    .connect(&b.connect),
            )
            .await
            .expect("connect");
        let session = first.session().clone();
        let sid = first.session_id();
        let eph = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
        b.within("create ephemeral", first.create("/mine", b"", &eph))
            .await
            .expect("create ephemeral");
        drop(first);

        let again = b
            .within(
                "re-attach",
                Client::connector()
                    .with_session(session.clone())
                    .connect(&b.connect),
            )
            .await
            .expect("re-attach to a live session");
        assert_eq!(again.session_id(), sid, "{}", b.name);
        let stat: Option<Stat> = again.check_stat("/mine").await.expect("exists");
        assert_eq!(
            stat.map(|s| s.ephemeral_owner),
            Some(sid.0),
            "{}: the ephemeral survived the re-attach",
            b.name
        );
        let (_, gone) = b
            .within("exists watch", observer.check_and_watch_stat("/mine"))
            .await
            .expect("watch /mine");
        drop(again);
        assert_eq!(
            b.fired(gone, "ephemeral removal on close").await,
            (EventType::NodeDeleted, "/mine".to_string()),
            "{}",
            b.name
        );
        let expired = b
            .within(
                "re-attach a closed session",
                Client::connector()
                    .with_session(session)
                    .connect(&b.connect),
            )
            .await;
        assert_eq!(
            expired.map(|c| c.session_id()),
            Err(Error::SessionExpired),
            "{}",
            b.name
        );
    })
    .await;
}
