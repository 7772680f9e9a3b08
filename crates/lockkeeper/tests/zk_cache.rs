//! The watched-configuration cache against Keeper and Apache ZooKeeper: it follows creates,
//! updates and deletes from other sessions, ends equal to a fresh read of the tree with the
//! events of each node in version order, and stays so through a server restart and a session
//! expiry.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use lockkeeper::Error;
use lockkeeper::zk::{Cache, CacheEvent, CacheEvents, CachedNode, Session};
use support::{for_each_backend, session};
use tokio::time::Instant;
use zookeeper_client::{Acls, CreateMode};

/// Creates `path` (and its missing parents) holding `data`.
async fn create(session: &Session, path: &str, data: &[u8]) {
    let client = session.client().expect("client");
    let options = CreateMode::Persistent.with_acls(Acls::anyone_all());
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
                )
            }
            other => panic!("{other:?}"),
        }
        client.delete("/config/db/replica", None).await.unwrap();
        match next(&mut events).await {
            CacheEvent::Deleted { path, old } => {
                assert_eq!(
                    (path.as_str(), old.data.as_slice()),
                    ("/config/db/replica", &b"r"[..])
                )
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
                )
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
            Err(zookeeper_client::Error::NoNode) => continue,
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
            Err(zookeeper_client::Error::NoNode) => {}
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
                        assert!(message.contains(&format!("{path:?}")), "{message}")
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
                )
            }
            other => panic!("{other:?}"),
        }
    })
    .await;
}
