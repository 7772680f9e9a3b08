//! Shared by the ZooKeeper recipe tests: run one test body against every backend, and small
//! observation helpers.
#![allow(dead_code)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
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

/// A loopback proxy in front of a server that can cut the network: while cut it closes every
/// connection through it and every new one at once, as a partition does. A session connected
/// through it stops pinging, so the server expires it after its timeout, the way a real
/// partition (or a long pause) expires a lock holder.
pub struct Partition {
    addr: std::net::SocketAddr,
    cut: Arc<AtomicBool>,
    relays: Arc<StdMutex<Vec<tokio::task::JoinHandle<()>>>>,
    accept: tokio::task::JoinHandle<()>,
}

impl Partition {
    /// Starts the proxy in front of `upstream` ("127.0.0.1:PORT").
    pub async fn start(upstream: &str) -> Partition {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the proxy");
        let addr = listener.local_addr().expect("proxy address");
        let cut = Arc::new(AtomicBool::new(false));
        let relays = Arc::new(StdMutex::new(Vec::new()));
        let upstream = upstream.to_owned();
        let accept = tokio::spawn({
            let cut = cut.clone();
            let relays = relays.clone();
            async move {
                // Ends with the test: the task is aborted when the Partition is dropped.
                while let Ok((mut client, _)) = listener.accept().await {
                    if cut.load(Ordering::SeqCst) {
                        continue; // dropped: closed at once
                    }
                    let Ok(mut server) = tokio::net::TcpStream::connect(&upstream).await else {
                        continue;
                    };
                    let relay = tokio::spawn(async move {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    });
                    relays.lock().unwrap().push(relay);
                }
            }
        });
        Partition {
            addr,
            cut,
            relays,
            accept,
        }
    }

    /// The connect string through the proxy.
    pub fn connect_string(&self) -> String {
        self.addr.to_string()
    }

    /// Cuts the network: every connection through the proxy closes, new ones are refused.
    pub fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        for relay in self.relays.lock().unwrap().drain(..) {
            relay.abort();
        }
    }

    /// Lets connections through again.
    pub fn heal(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }
}

impl Drop for Partition {
    fn drop(&mut self) {
        self.accept.abort();
        for relay in self.relays.lock().unwrap().drain(..) {
            relay.abort();
        }
    }
}

/// Waits (bounded) until `session` reports `state`.
pub async fn wait_state(session: &Session, state: lockkeeper::zk::ConnectionState) {
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
