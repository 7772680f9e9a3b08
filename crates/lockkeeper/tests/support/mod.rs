//! Shared by the ZooKeeper recipe tests: run one test body against every backend, and small
//! observation helpers.
#![allow(dead_code)]

use std::time::Duration;

use lockkeeper::zk::Session;
use lockkeeper_testkit::{TestServer, both};
use tokio::time::Instant;

/// Runs `body` once per backend (Keeper, Apache ZooKeeper), with the connect string; a
/// failure names the backend.
pub async fn for_each_backend<F, Fut>(body: F)
where
    F: Fn(String) -> Fut,
    Fut: Future<Output = ()>,
{
    for server in both() {
        let name = server.name();
        eprintln!("--- against {name}");
        body(server.connect_string()).await;
        drop::<Box<dyn TestServer>>(server);
    }
}

/// A session with a short timeout (the test servers' minimum is 4 s).
pub async fn session(connect: &str) -> Session {
    Session::builder(connect)
        .session_timeout(Duration::from_secs(4))
        .connect()
        .await
        .expect("connect a session")
}

/// The children of `path` (empty if it does not exist).
pub async fn children(session: &Session, path: &str) -> Vec<String> {
    match session.client().expect("client").list_children(path).await {
        Ok(children) => children,
        Err(zookeeper_client::Error::NoNode) => Vec::new(),
        Err(err) => panic!("list {path}: {err}"),
    }
}

/// Waits (bounded) until `path` has exactly `count` children; returns them.
pub async fn wait_children(session: &Session, path: &str, count: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let now = children(session, path).await;
        if now.len() == count {
            return now;
        }
        assert!(
            Instant::now() < deadline,
            "{path} has {} children, want {count}: {now:?}",
            now.len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Ends `session` on the server as if it had expired: another connection takes the session
/// over with its id and password and closes it. The session's client then hears "expired" the
/// next time it talks to the server.
pub async fn expire(session: &Session, connect: &str) {
    let client = session.client().expect("client");
    let mut attempts = 0;
    // A loaded JVM can be slow to revalidate a session: try a few times before failing.
    let thief = loop {
        attempts += 1;
        let taking = zookeeper_client::Client::connector()
            .with_session_timeout(client.session_timeout())
            .with_connection_timeout(Duration::from_secs(10))
            .with_session(client.session().clone())
            .connect(connect)
            .await;
        match taking {
            Ok(thief) => break thief,
            Err(err) if attempts < 5 => eprintln!("taking the session over: {err}; again"),
            Err(err) => panic!("take the session over: {err}"),
        }
    };
    drop(thief);
}

/// Whether `name` is a Curator protected sequential node: `_c_{uuid}-{marker}{10 digits}`.
pub fn curator_name(name: &str, marker: &str) -> bool {
    let Some(rest) = name.strip_prefix("_c_") else {
        return false;
    };
    let (uuid, rest) = rest.split_at(rest.len().min(36));
    let uuid_ok = uuid.len() == 36
        && uuid.char_indices().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == '-',
            _ => c.is_ascii_hexdigit(),
        });
    let Some(sequence) = rest.strip_prefix('-').and_then(|r| r.strip_prefix(marker)) else {
        return false;
    };
    uuid_ok && sequence.len() == 10 && sequence.bytes().all(|b| b.is_ascii_digit())
}
