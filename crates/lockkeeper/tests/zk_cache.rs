//! The watched-configuration cache against Keeper and Apache ZooKeeper: it follows creates,
//! updates and deletes from other sessions, ends equal to a fresh read of the tree with the
//! events of each node in version order, and stays so through a server restart and a session
//! expiry.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use lockkeeper::Error;
use lockkeeper::zk::{Cache, CacheEvent, CacheEvents, CachedNode, ConnectionState, Session};
use lockkeeper_testkit::{ApacheZk, Keeper, TestServer, backend_enabled};
use lockkeeper_zk_client::{CreateMode, CreateOptions};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use support::{Partition, for_each_backend, session, wait_state};
use tokio::time::Instant;

/// Creates `path` (and its missing parents) holding `data`.
async fn create(session: &Session, path: &str, data: &[u8]) {
    let client = session.client().expect("client");
    let options = CreateOptions::new(CreateMode::Persistent);
    if let Some(i) = path.rfind('/').filter(|i| *i > 0) {
        let _ = client.mkdir(&path[..i], &options).await;
    }
    client
        .create(path, data, &options)
        .await
        .unwrap_or_else(|err| panic!("create {path}: {err}"));
}

/// Waits (bounded) for the next event.
async fn next(events: &mut CacheEvents) -> CacheEvent {
    events
        .next_timeout(Duration::from_secs(20))
        .await
        .expect("a valid timeout")
        .expect("an event within 20 s")
}

#[tokio::test]
async fn a_tree_cache_follows_creates_changes_and_deletes() {
    for_each_backend(|connect| async move {
        let writer = session(&connect).await;
        let reader = session(&connect).await;
        create(&writer, "/config/db", b"one").await;
        let cache = reader.tree_cache("/config").await.expect("tree cache");
        assert_eq!(cache.get("/config/db").expect("cached").data, b"one");
        assert_eq!(cache.children("/config").len(), 1);
        let mut events = cache.events();

        let client = writer.client().unwrap();
        client.set_data("/config/db", b"two", None).await.unwrap();
        match next(&mut events).await {
            CacheEvent::Changed { path, old, node } => {
                assert_eq!(path, "/config/db");
                assert_eq!(
                    (old.data.as_slice(), node.data.as_slice()),
                    (&b"one"[..], &b"two"[..])
                );
            }
            other => panic!("{other:?}"),
        }
        create(&writer, "/config/db/replica", b"r").await;
        match next(&mut events).await {
            CacheEvent::Created { path, node } => {
                assert_eq!(
                    (path.as_str(), node.data.as_slice()),
                    ("/config/db/replica", &b"r"[..])
                );
            }
            other => panic!("{other:?}"),
        }
        client.delete("/config/db/replica", None).await.unwrap();
        match next(&mut events).await {
            CacheEvent::Deleted { path, old } => {
                assert_eq!(
                    (path.as_str(), old.data.as_slice()),
                    ("/config/db/replica", &b"r"[..])
                );
            }
            other => panic!("{other:?}"),
        }
        // The parent's stat follows its children, so the view equals a fresh read.
        wait_equal(&cache, &writer, "/config").await;
        cache.close().await;
        assert!(
            events.next().await.is_none(),
            "the stream ends with the cache"
        );
    })
    .await;
}

#[tokio::test]
async fn a_node_cache_sees_a_node_that_does_not_exist_yet() {
    for_each_backend(|connect| async move {
        let writer = session(&connect).await;
        let reader = session(&connect).await;
        let cache = reader.node_cache("/later").await.expect("node cache");
        assert!(cache.get("/later").is_none());
        let mut events = cache.replay();
        assert!(matches!(next(&mut events).await, CacheEvent::Initialized));
        create(&writer, "/later", b"here").await;
        match next(&mut events).await {
            CacheEvent::Created { path, node } => {
                assert_eq!(
                    (path.as_str(), node.data.as_slice()),
                    ("/later", &b"here"[..])
                );
            }
            other => panic!("{other:?}"),
        }
        // A child is not the node cache's business.
        create(&writer, "/later/child", b"").await;
        writer
            .client()
            .unwrap()
            .delete("/later/child", None)
            .await
            .unwrap();
        writer
            .client()
            .unwrap()
            .delete("/later", None)
            .await
            .unwrap();
        match next(&mut events).await {
            CacheEvent::Deleted { path, .. } => assert_eq!(path, "/later"),
            other => panic!("{other:?}"),
        }
        assert_eq!(cache.snapshot().len(), 0);
    })
    .await;
}

/// Reads `root` and everything below it with a plain client.
async fn read_tree(session: &Session, root: &str) -> BTreeMap<String, CachedNode> {
    let client = session.client().expect("client");
    let mut tree = BTreeMap::new();
    let mut pending = vec![root.to_owned()];
    while let Some(path) = pending.pop() {
        let (data, stat) = match client.get_data(&path).await {
            Ok(found) => found,
            Err(lockkeeper_zk_client::Error::NoNode) => continue,
            Err(err) => panic!("read {path}: {err}"),
        };
        match client.list_children(&path).await {
            Ok(children) => pending.extend(children.into_iter().map(|c| {
                if path == "/" {
                    format!("/{c}")
                } else {
                    format!("{path}/{c}")
                }
            })),
            Err(lockkeeper_zk_client::Error::NoNode) => {}
            Err(err) => panic!("list {path}: {err}"),
        }
        tree.insert(path, CachedNode { data, stat });
    }
    tree
}

/// Waits (bounded) until the cache equals a fresh read of `root`.
async fn wait_equal(cache: &Cache, session: &Session, root: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let fresh = read_tree(session, root).await;
        let cached = cache.snapshot();
        if fresh == cached {
            return;
        }
        if Instant::now() >= deadline {
            let differ: Vec<&String> = fresh
                .keys()
                .chain(cached.keys())
                .filter(|p| fresh.get(*p) != cached.get(*p))
                .collect();
            panic!("the cache differs from a fresh read at {differ:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn bad_input_is_refused_by_name() {
    for_each_backend(|connect| async move {
        let session = session(&connect).await;
        for path in ["", "config", "config/db", "/config/", "/a//b", "/a/../b"] {
            for cache in [
                session.tree_cache(path).await,
                session.node_cache(path).await,
            ] {
                match cache {
                    Err(Error::InvalidArgument(message)) => {
                        assert!(message.contains(&format!("{path:?}")), "{message}");
                    }
                    other => panic!("{path:?}: {other:?}"),
                }
            }
        }
        let cache = session
            .tree_cache("/")
            .await
            .expect("the root can be cached");
        let mut events = cache.events();
        match events.next_timeout(Duration::ZERO).await {
            Err(Error::InvalidArgument(message)) => {
                assert!(
                    message.contains("timeout") && message.contains("\"/\""),
                    "{message}"
                );
            }
            other => panic!("{other:?}"),
        }
    })
    .await;
}

/// The paths the random changes touch: four directories under `/t` and four nodes in each.
fn random_path(rng: &mut StdRng) -> String {
    let dir = rng.gen_range(0..4);
    if rng.gen_bool(0.25) {
        format!("/t/d{dir}")
    } else {
        format!("/t/d{dir}/n{}", rng.gen_range(0..4))
    }
}

/// Makes `ops` random creates, updates and deletes under `/t` from `writer`. Failures are part
/// of the game (a node that exists, is missing or has children; a server that is restarting):
/// the cache is compared with what the tree holds in the end, not with what was attempted.
async fn churn(writer: Session, seed: u64, ops: usize) {
    let mut rng = StdRng::seed_from_u64(seed);
    let options = CreateOptions::new(CreateMode::Persistent);
    for i in 0..ops {
        let path = random_path(&mut rng);
        let data = format!("{seed}-{i}").into_bytes();
        let Ok(client) = writer.client() else {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        };
        let op = async {
            match rng.gen_range(0..3) {
                0 => {
                    if let Err(lockkeeper_zk_client::Error::NoNode) =
                        client.create(&path, &data, &options).await
                    {
                        let _ = client.mkdir(&path, &options).await;
                    }
                }
                1 => {
                    let _ = client.set_data(&path, &data, None).await;
                }
                _ => {
                    let _ = client.delete(&path, None).await;
                }
            }
        };
        if tokio::time::timeout(Duration::from_secs(5), op)
            .await
            .is_err()
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Two sessions make `ops` changes between them, concurrently.
async fn churn_both(a: &Session, b: &Session, seed: u64, ops: usize) {
    let first = tokio::spawn(churn(a.clone(), seed, ops / 2));
    let second = tokio::spawn(churn(b.clone(), seed + 1, ops - ops / 2));
    first.await.expect("writer a");
    second.await.expect("writer b");
}

/// Replays `events` over `start` and checks that each is consistent with what came before:
/// a creation of a missing node with a later incarnation than any before it, a change of the
/// same incarnation to a later version, a deletion of the version held. Returns the replayed
/// view and how many rebuilds were announced.
fn replay(
    start: BTreeMap<String, CachedNode>,
    events: &mut CacheEvents,
) -> (BTreeMap<String, CachedNode>, usize) {
    let version = |node: &CachedNode| (node.stat.czxid, node.stat.mzxid);
    let mut nodes = start;
    let mut last_czxid: BTreeMap<String, i64> = nodes
        .iter()
        .map(|(p, n)| (p.clone(), n.stat.czxid))
        .collect();
    let mut rebuilds = 0;
    let mut count = 0;
    while let Some(event) = events.try_next() {
        count += 1;
        match event {
            CacheEvent::Created { path, node } => {
                assert!(!nodes.contains_key(&path), "created twice: {path}");
                let before = last_czxid.get(&path).copied().unwrap_or(i64::MIN);
                assert!(
                    node.stat.czxid > before,
                    "{path}: an older incarnation came back"
                );
                last_czxid.insert(path.clone(), node.stat.czxid);
                nodes.insert(path, node);
            }
            CacheEvent::Changed { path, old, node } => {
                let held = nodes
                    .get(&path)
                    .unwrap_or_else(|| panic!("changed unknown {path}"));
                assert_eq!(
                    version(held),
                    version(&old),
                    "{path}: changed from another version"
                );
                assert_eq!(held.data, old.data, "{path}");
                assert_eq!(
                    node.stat.czxid, old.stat.czxid,
                    "{path}: a change across incarnations"
                );
                assert!(
                    node.stat.mzxid > old.stat.mzxid,
                    "{path}: a change to an older version"
                );
                nodes.insert(path, node);
            }
            CacheEvent::Deleted { path, old } => {
                let held = nodes
                    .remove(&path)
                    .unwrap_or_else(|| panic!("deleted unknown {path}"));
                assert_eq!(
                    version(&held),
                    version(&old),
                    "{path}: deleted another version"
                );
            }
            CacheEvent::Rebuilt => rebuilds += 1,
            CacheEvent::Initialized => panic!("Initialized on a live stream"),
        }
    }
    eprintln!("{count} events, {rebuilds} rebuilds");
    (nodes, rebuilds)
}

/// The cache ends equal to a fresh read, and its events replayed over the first snapshot
/// lead to the same view.
async fn check_converged(
    cache: &Cache,
    fresh_from: &Session,
    start: BTreeMap<String, CachedNode>,
    events: &mut CacheEvents,
) -> usize {
    wait_equal(cache, fresh_from, "/t").await;
    let (replayed, rebuilds) = replay(start, events);
    let cached = cache.snapshot();
    let strip = |tree: &BTreeMap<String, CachedNode>| -> Vec<(String, Vec<u8>, i64, i64)> {
        tree.iter()
            .map(|(p, n)| (p.clone(), n.data.clone(), n.stat.czxid, n.stat.mzxid))
            .collect()
    };
    assert_eq!(
        strip(&replayed),
        strip(&cached),
        "the events do not add up to the view"
    );
    rebuilds
}

const OPS: usize = 1_000;

#[tokio::test]
async fn a_thousand_random_changes_end_in_a_cache_equal_to_the_tree() {
    for_each_backend(|connect| async move {
        let (a, b, reader) = (
            session(&connect).await,
            session(&connect).await,
            session(&connect).await,
        );
        create(&a, "/t", b"").await;
        let cache = reader.tree_cache("/t").await.expect("tree cache");
        let (start, mut events) = cache.snapshot_and_events();
        let started = Instant::now();
        churn_both(&a, &b, 7, OPS).await;
        check_converged(&cache, &a, start, &mut events).await;
        eprintln!("{OPS} changes and convergence in {:?}", started.elapsed());
    })
    .await;
}

/// A server that can be restarted in place, with the same address and data.
enum Restartable {
    Keeper(Keeper),
    ZooKeeper(ApacheZk),
}

impl Restartable {
    fn all() -> Vec<Restartable> {
        let mut servers = Vec::new();
        if backend_enabled("keeper") {
            servers.push(Restartable::Keeper(Keeper::start()));
        }
        if backend_enabled("zookeeper") {
            servers.push(Restartable::ZooKeeper(ApacheZk::start()));
        }
        servers
    }

    fn server(&self) -> &dyn TestServer {
        match self {
            Restartable::Keeper(keeper) => keeper,
            Restartable::ZooKeeper(zk) => zk,
        }
    }

    fn restart(&mut self) {
        match self {
            Restartable::Keeper(keeper) => keeper.restart(),
            Restartable::ZooKeeper(zk) => zk.restart(),
        }
    }
}

#[tokio::test]
async fn the_cache_stays_equal_to_the_tree_through_a_server_restart() {
    for mut server in Restartable::all() {
        eprintln!("--- against {}", server.server().name());
        let connect = server.server().connect_string();
        let (a, b, reader) = (
            session(&connect).await,
            session(&connect).await,
            session(&connect).await,
        );
        create(&a, "/t", b"").await;
        let cache = reader.tree_cache("/t").await.expect("tree cache");
        let (start, mut events) = cache.snapshot_and_events();
        churn_both(&a, &b, 11, OPS / 2).await;
        let mut states = reader.states();
        server.restart();
        // The writers change the tree while the reader may still be reconnecting.
        churn_both(&a, &b, 13, OPS / 2).await;
        let rebuilds = check_converged(&cache, &a, start, &mut events).await;
        assert!(rebuilds >= 1, "no rebuild after the restart");
        let mut seen = Vec::new();
        while let Ok(Some(state)) = tokio::time::timeout(Duration::ZERO, states.next()).await {
            seen.push(state);
        }
        assert!(seen.contains(&ConnectionState::Reconnected), "{seen:?}");
    }
}

#[tokio::test]
async fn the_cache_is_rebuilt_in_a_new_session_after_an_expiry() {
    for_each_backend(|connect| async move {
        let (a, b) = (session(&connect).await, session(&connect).await);
        create(&a, "/t", b"").await;
        let partition = Partition::start(&connect).await;
        let reader = session(&partition.connect_string()).await;
        // The reader's own ephemeral node goes with its session.
        reader
            .client()
            .unwrap()
            .create("/t/mine", b"", &CreateOptions::new(CreateMode::Ephemeral))
            .await
            .expect("ephemeral");
        let cache = reader.tree_cache("/t").await.expect("tree cache");
        assert!(cache.get("/t/mine").is_some());
        let (start, mut events) = cache.snapshot_and_events();
        churn_both(&a, &b, 17, OPS / 2).await;
        let first_session = reader.session_id();
        partition.cut();
        churn_both(&a, &b, 19, OPS / 4).await;
        wait_state(&reader, ConnectionState::Lost).await;
        // Served from memory meanwhile: stale, but whole.
        assert!(cache.get("/t").is_some());
        partition.heal();
        wait_state(&reader, ConnectionState::Reconnected).await;
        assert_ne!(reader.session_id(), first_session, "a new session");
        churn_both(&a, &b, 23, OPS / 4).await;
        // The client gives a silent session up before the server expires it; the node goes
        // when the server gets there.
        let deadline = Instant::now() + Duration::from_secs(20);
        while cache.get("/t/mine").is_some() {
            assert!(
                Instant::now() < deadline,
                "the expired session's node is still cached"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let rebuilds = check_converged(&cache, &a, start, &mut events).await;
        assert!(rebuilds >= 1, "no rebuild in the new session");
    })
    .await;
}

/// A restart loses what changed while the client was away (ZOOKEEPER-4698): the cache reads
/// its view again after reconnecting.
#[tokio::test]
async fn changes_after_a_restart_reach_the_cache() {
    for mut server in Restartable::all() {
        eprintln!("--- against {}", server.server().name());
        let connect = server.server().connect_string();
        let (writer, reader) = (session(&connect).await, session(&connect).await);
        create(&writer, "/w/x", b"0").await;
        let cache = reader.tree_cache("/w").await.expect("tree cache");
        let mut events = cache.events();
        server.restart();
        loop {
            if let CacheEvent::Rebuilt = next(&mut events).await {
                break;
            }
        }
        let client = writer.client().unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while let Err(err) = client.set_data("/w/x", b"1", None).await {
            assert!(
                Instant::now() < deadline,
                "the writer never got through: {err}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        match next(&mut events).await {
            CacheEvent::Changed { path, node, .. } => {
                assert_eq!((path.as_str(), node.data.as_slice()), ("/w/x", &b"1"[..]));
            }
            other => panic!("{other:?}"),
        }
    }
}

#[tokio::test]
async fn a_cache_in_a_chroot_sees_paths_relative_to_it() {
    for_each_backend(|connect| async move {
        let root = session(&connect).await;
        let chrooted = session(&format!("{connect}/app")).await;
        let cache = chrooted.tree_cache("/config").await.expect("tree cache");
        let mut events = cache.events();
        create(&root, "/app/config/db", b"url").await;
        loop {
            match next(&mut events).await {
                CacheEvent::Created { path, .. } if path == "/config/db" => break,
                CacheEvent::Created { path, .. } if path == "/config" => {}
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(cache.get("/config/db").expect("cached").data, b"url");
        assert_eq!(
            cache
                .children("/config")
                .into_iter()
                .map(|(name, _)| name)
                .collect::<Vec<_>>(),
            ["db"]
        );
    })
    .await;
}
