//! The ZooKeeper side of the Curator interop tests: a runtime, lockkeeper sessions, and a plain
//! ZooKeeper client's view of a lock's nodes.

use std::time::Duration;

use lockkeeper::zk::Session;
use lockkeeper_testkit::TestServer;

/// Bound on a JVM's start (a cold JVM on a loaded two-core machine is slow), and on every
/// contender of a run getting into the queue.
pub(crate) const JVM_START: Duration = Duration::from_secs(120);
/// Bound on one step of a check.
pub(crate) const STEP: Duration = Duration::from_secs(60);

pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// A lockkeeper session with `server`, bounded by [`STEP`].
pub(crate) async fn connect(server: &dyn TestServer) -> Session {
    tokio::time::timeout(STEP, Session::connect(&server.connect_string()))
        .await
        .unwrap_or_else(|_| panic!("no session with {} within {STEP:?}", server.name()))
        .unwrap_or_else(|e| panic!("connect to {}: {e}", server.name()))
}

async fn plain_client(server: &dyn TestServer) -> lockkeeper_zk_client::Client {
    tokio::time::timeout(
        STEP,
        lockkeeper_zk_client::Client::connect(&server.connect_string()),
    )
    .await
    .expect("plain ZooKeeper client connects in time")
    .expect("plain ZooKeeper client")
}

/// The children of `path` as a plain ZooKeeper client sees them; none if the node is gone (a
/// container parent is reaped once empty).
pub(crate) async fn lock_nodes(server: &dyn TestServer, path: &str) -> Vec<String> {
    match plain_client(server).await.list_children(path).await {
        Ok(children) => children,
        Err(lockkeeper_zk_client::Error::NoNode) => Vec::new(),
        Err(e) => panic!("list {path} on {}: {e}", server.name()),
    }
}

/// Waits (bounded by [`JVM_START`]) until the lock at `path` has `count` nodes.
pub(crate) async fn wait_for_nodes(server: &dyn TestServer, path: &str, count: usize) {
    let client = plain_client(server).await;
    let deadline = tokio::time::Instant::now() + JVM_START;
    loop {
        let nodes = client.list_children(path).await.unwrap_or_default();
        if nodes.len() == count {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} of {count} lock nodes on {} after {JVM_START:?}: {nodes:?}",
            nodes.len(),
            server.name()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
