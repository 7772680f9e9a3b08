//! The persistent node against Keeper and Apache ZooKeeper, for what group membership (its
//! ephemeral user, tested in `tests/zk_member.rs`) does not reach: persistent nodes and their
//! adoption, and stopping cleanly in every state.

use std::time::Duration;

use lockkeeper_zk_client::{CreateMode, CreateOptions, Stat};
use tokio::time::Instant;

use super::PersistentNode;
use crate::zk::Session;

async fn read(session: &Session, path: &str) -> Option<(Vec<u8>, Stat)> {
    match session.client().unwrap().get_data(path).await {
        Ok(found) => Some(found),
        Err(lockkeeper_zk_client::Error::NoNode) => None,
        Err(err) => panic!("read {path}: {err}"),
    }
}

/// Waits (bounded) until `path` holds `data` (or is gone, for `None`).
async fn becomes(session: &Session, path: &str, data: Option<&[u8]>) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let now = read(session, path).await.map(|(data, _)| data);
        if now.as_deref() == data {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{path} is {now:?}, want {data:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn session(connect: &str) -> Session {
    Session::builder(connect)
        .session_timeout(Duration::from_secs(4))
        .connect()
        .await
        .unwrap()
}

/// A persistent node found on the path is adopted (our data written over it), re-created when
/// deleted, and deleted for good by `delete`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_persistent_node_is_adopted_kept_and_deleted() {
    for server in lockkeeper_testkit::both() {
        eprintln!("--- against {}", server.name());
        let s = session(&server.connect_string()).await;
        let other = session(&server.connect_string()).await;
        let path = "/persistent/adopted/node";
        let options = CreateOptions::new(CreateMode::Persistent);
        let client = other.client().unwrap();
        client.mkdir("/persistent/adopted", &options).await.unwrap();
        client.create(path, b"left over", &options).await.unwrap();

        let node = PersistentNode::create(&s, path, b"ours".to_vec(), false)
            .await
            .unwrap();
        assert!(node.is_present());
        let (data, stat) = read(&other, path).await.unwrap();
        assert_eq!((data.as_slice(), stat.ephemeral_owner), (&b"ours"[..], 0));

        client.delete(path, None).await.unwrap();
        becomes(&other, path, Some(b"ours")).await;
        node.set_data(b"newer".to_vec()).await.unwrap();
        assert_eq!(read(&other, path).await.unwrap().0, b"newer");

        node.delete().await.unwrap();
        assert!(read(&other, path).await.is_none());
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(
            read(&other, path).await.is_none(),
            "re-created after delete"
        );
    }
}

/// Dropping the handle deletes the node in the background, and nothing re-creates it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_node_is_deleted_and_stays_deleted() {
    for server in lockkeeper_testkit::both() {
        eprintln!("--- against {}", server.name());
        let s = session(&server.connect_string()).await;
        let path = "/persistent/dropped";
        let node = PersistentNode::create(&s, path, b"x".to_vec(), true)
            .await
            .unwrap();
        assert_eq!(
            read(&s, path).await.unwrap().1.ephemeral_owner,
            s.session_id()
        );
        drop(node);
        becomes(&s, path, None).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(read(&s, path).await.is_none(), "re-created after drop");
    }
}

/// A handle stopped while it waits out someone else's node leaves that node alone, and does
/// not create its own when that node goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_stopped_while_waiting_is_never_created() {
    for server in lockkeeper_testkit::both() {
        eprintln!("--- against {}", server.name());
        let s = session(&server.connect_string()).await;
        let other = session(&server.connect_string()).await;
        let path = "/persistent/waiting";
        let client = other.client().unwrap();
        let ephemeral = CreateOptions::new(CreateMode::Ephemeral);
        client
            .mkdir("/persistent", &CreateOptions::new(CreateMode::Persistent))
            .await
            .unwrap();
        client.create(path, b"theirs", &ephemeral).await.unwrap();

        let node = PersistentNode::create(&s, path, b"ours".to_vec(), true)
            .await
            .unwrap();
        assert!(!node.is_present());
        node.delete().await.unwrap();
        assert_eq!(read(&s, path).await.unwrap().0, b"theirs");

        client.delete(path, None).await.unwrap();
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(read(&s, path).await.is_none(), "created after delete");
    }
}
