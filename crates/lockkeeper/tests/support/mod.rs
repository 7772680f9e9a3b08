//! Shared by the ZooKeeper recipe tests: run one test body against every backend, and small
//! observation helpers.
#![allow(dead_code)]

use std::time::Duration;

use lockkeeper::zk::Session;
use lockkeeper_testkit::{TestServer, both};
use tokio::time::Instant;

/// Runs `body` once per backend (Keeper, Apache ZooKeeper), with the connect string; a
/// failure names the backend.
pub(crate) async fn for_each_backend<F, Fut>(body: F)
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

/// Whether `connect` names several servers: the opt-in ensemble run
/// (`LOCKKEEPER_TEST_BACKENDS=ensemble`). A test whose fault needs one server (a proxy that
/// cuts a single connection at a chosen request) skips it, saying so.
pub(crate) fn is_ensemble(connect: &str) -> bool {
    connect.contains(',')
}

/// A session with a short timeout (the test servers' minimum is 4 s).
pub(crate) async fn session(connect: &str) -> Session {
    Session::builder(connect)
        .session_timeout(Duration::from_secs(4))
        .connect()
        .await
        .expect("connect a session")
}

/// Creates `path` (persistent) with an ACL that lets anyone read it and nobody create under it.
#[allow(dead_code)] // not every test binary uses it
pub(crate) async fn read_only_dir(session: &Session, path: &str) {
    dir_with_perms(session, path, lockkeeper_zk_client::perms::READ).await;
}

/// Creates the persistent node `path` whose ACL gives anyone `perms` and nothing else.
#[allow(dead_code)] // not every test binary uses it
pub(crate) async fn dir_with_perms(session: &Session, path: &str, perms: i32) {
    let acl = vec![lockkeeper_zk_client::Acl {
        perms,
        id: lockkeeper_zk_client::Id {
            scheme: "world".into(),
            id: "anyone".into(),
        },
    }];
    let options =
        lockkeeper_zk_client::CreateOptions::new(lockkeeper_zk_client::CreateMode::Persistent)
            .with_acl(acl);
    session
        .client()
        .expect("client")
        .create(path, b"", &options)
        .await
        .unwrap_or_else(|e| panic!("create {path} with perms {perms}: {e}"));
}

/// The children of `path` (empty if it does not exist).
pub(crate) async fn children(session: &Session, path: &str) -> Vec<String> {
    match session.client().expect("client").list_children(path).await {
        Ok(children) => children,
        Err(lockkeeper_zk_client::Error::NoNode) => Vec::new(),
        Err(err) => panic!("list {path}: {err}"),
    }
}

/// Waits (bounded) until `path` has exactly `count` children; returns them.
pub(crate) async fn wait_children(session: &Session, path: &str, count: usize) -> Vec<String> {
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

/// The loopback partition proxy (`cut`, `heal`, `connect_string`), under the name the tests
/// use for it (not every test binary uses it).
#[allow(unused_imports)]
pub(crate) use lockkeeper_testkit::Proxy as Partition;

/// Waits (bounded) until `session` reports `state`.
pub(crate) async fn wait_state(session: &Session, state: lockkeeper::zk::ConnectionState) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while session.state() != state {
        assert!(
            Instant::now() < deadline,
            "{state:?} never came: {:?}",
            session.state()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Whether `name` is a Curator protected sequential node: `_c_{uuid}-{marker}{10 digits}`.
pub(crate) fn curator_name(name: &str, marker: &str) -> bool {
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

/// A session with a long timeout, so that no ping falls into a window whose requests a test
/// counts.
pub(crate) async fn long_session(connect: &str) -> Session {
    Session::builder(connect)
        .session_timeout(Duration::from_secs(30))
        .connect()
        .await
        .expect("connect")
}

/// Requests the server has read from `session`'s connection, from `cons` (Keeper and
/// ZooKeeper both print `recved=N` and `sid=0x...` per connection).
pub(crate) fn requests_received(connect: &str, session: &Session) -> u64 {
    let addr = connect.parse().expect("a single host:port");
    let sid = format!("sid=0x{:x}", session.session_id());
    let cons = lockkeeper_testkit::four_letter_word(addr, "cons");
    let line = cons
        .lines()
        .find(|line| line.contains(&sid))
        .unwrap_or_else(|| panic!("no connection with {sid} in cons:\n{cons}"));
    lockkeeper_testkit::cons_field(line, "recved")
        .unwrap_or_else(|| panic!("no recved=N in {line}"))
}

/// Waits until the server holds `count` watches (`wchs`).
pub(crate) async fn wait_watches(connect: &str, count: usize) {
    let addr = connect.parse().expect("a single host:port");
    lockkeeper_testkit::within(Duration::from_secs(10), format!("{count} watches"), async {
        loop {
            let total =
                tokio::task::spawn_blocking(move || lockkeeper_testkit::total_watches(addr))
                    .await
                    .expect("wchs");
            if total == count {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
}
