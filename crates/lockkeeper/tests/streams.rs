//! Every event type is a `futures::Stream` that yields what its `next()` does: a tree cache's
//! events, a group's membership changes, a watched name's addresses, a shared count's values
//! and a session's connection states (and, with the `etcd` feature, an election's leaders),
//! each read here through `StreamExt` only, against Keeper and Apache ZooKeeper.

mod support;
#[cfg(feature = "etcd")]
mod support_etcd;

use std::time::Duration;

use futures_util::{Stream, StreamExt};
use lockkeeper::zk::client::{CreateMode, CreateOptions};
use lockkeeper::zk::{CacheEvent, ConnectionState, MemberEvent, Registration};
use support::{for_each_backend, session};
use tokio::time::timeout;

/// Generous: each item follows a write this test just made.
const PATIENCE: Duration = Duration::from_secs(30);

/// The stream's next item, which must come.
async fn next<S: Stream + Unpin>(what: &str, stream: &mut S) -> S::Item {
    timeout(PATIENCE, stream.next())
        .await
        .unwrap_or_else(|_| panic!("{what}: nothing within {PATIENCE:?}"))
        .unwrap_or_else(|| panic!("{what}: the stream ended"))
}

#[tokio::test]
async fn every_zookeeper_event_type_is_a_stream() {
    for_each_backend(|connect| async move {
        let s = session(&connect).await;

        // A tree cache: Created events, then Initialized, then the change.
        let persistent = CreateOptions::new(CreateMode::Persistent);
        let client = s.client().expect("client");
        client
            .create("/streams", b"", &persistent)
            .await
            .expect("create");
        let cache = s.tree_cache("/streams").await.expect("cache");
        let mut events = cache.replay();
        loop {
            if matches!(next("cache", &mut events).await, CacheEvent::Initialized) {
                break;
            }
        }
        client
            .create("/streams/a", b"1", &persistent)
            .await
            .expect("create");
        let mut created =
            (&mut events).filter(|e| std::future::ready(matches!(e, CacheEvent::Created { .. })));
        match timeout(PATIENCE, created.next()).await.expect("in time") {
            Some(CacheEvent::Created { path, .. }) => assert_eq!(path, "/streams/a"),
            other => panic!("cache: {other:?}"),
        }

        // A group's view: a member joining.
        let group = s.group("/streams-group").expect("group");
        let mut view = group.watch().await.expect("view");
        let member = group.join("m1", b"x".to_vec()).await.expect("join");
        match next("group", &mut view).await {
            MemberEvent::Joined { id, .. } => assert_eq!(id, "m1"),
            other => panic!("group: {other:?}"),
        }
        member.leave().await.expect("leave");

        // A watched name: registered, then gone.
        let mut name = s.watch_name("/streams-name").await.expect("watch name");
        let registered = s
            .register("/streams-name", "10.0.0.1:80", Registration::Ephemeral)
            .await
            .expect("register");
        assert_eq!(
            next("name", &mut name).await.as_deref(),
            Some("10.0.0.1:80")
        );
        registered.unregister().await.expect("unregister");
        assert_eq!(next("name", &mut name).await, None, "removed");

        // A shared count: each new value.
        let count = s.shared_count("/streams-count", 0).await.expect("count");
        let mut changes = count.changes();
        count.store(7).await.expect("store");
        assert_eq!(next("count", &mut changes).await.value, 7);

        // A session's states: Closed, then the end of the stream.
        let states = s.states();
        s.close().await;
        let rest: Vec<ConnectionState> = timeout(PATIENCE, states.collect())
            .await
            .expect("the states end after the close");
        assert_eq!(rest.last(), Some(&ConnectionState::Closed), "{rest:?}");
    })
    .await;
}

#[cfg(feature = "etcd")]
#[tokio::test]
async fn an_etcd_election_observer_is_a_stream() {
    let etcd = lockkeeper_testkit::Etcd::start();
    let s = support_etcd::session(&etcd).await;
    let election = s.election("streams").expect("election");
    let mut leaders = election.observe();
    let first = election.campaign("a").await.expect("campaign");
    let leader = next("observer", &mut leaders).await.expect("leader");
    assert_eq!(leader.value, b"a");
    first.proclaim("b").await.expect("proclaim");
    let leader = next("observer", &mut leaders).await.expect("leader");
    assert_eq!(leader.value, b"b");
}
