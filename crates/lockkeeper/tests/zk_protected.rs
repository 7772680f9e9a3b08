//! Requests whose answers are lost: the connection drops after the server has applied a
//! request but before the answer arrives.
//!
//! - Protected creation: the create cannot be retried blindly (that would queue a second node
//!   and orphan the first until the session ends); the recipe must find its node again by the
//!   uuid in its name.
//! - Release: the delete went through, its answer died, and the retry finds no node. That is
//!   a successful release, not `NotHeld` (nothing else touched the lock).
//!
//! - A create lost on its way: the server never saw it, the search by uuid finds nothing, and
//!   the create is sent once more.
//!
//! A loopback proxy between the client and the server forwards everything until it sees the
//! first request of the armed kind, forwards that one (or, for a request lost on its way, does
//! not), and then cuts the connection before any answer gets back. The client reconnects
//! through the proxy with the same session.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use lockkeeper::zk::{LockGuard, Session};
use support::{children, for_each_backend, session};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// ZooKeeper opcodes for create and create2.
const CREATE_OPS: &[i32] = &[1, 15];
/// ZooKeeper's delete opcode.
const DELETE_OPS: &[i32] = &[2];

/// What the proxy does with the request it cuts at.
#[derive(Clone, Copy)]
enum Cut {
    /// Forwards it, then cuts: the server applies it and its answer is lost.
    AfterIt,
    /// Cuts without forwarding it: the server never sees it.
    BeforeIt,
    /// As `BeforeIt`, at every such request for as long as it is armed.
    BeforeEach,
}

/// Starts the proxy in front of `upstream`; returns its address. `armed` cuts the connection
/// at the next request with one of the opcodes `ops`, once.
async fn cutting_proxy(
    upstream: String,
    armed: Arc<AtomicBool>,
    ops: &'static [i32],
    how: Cut,
) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        // Bounded: a test opens only a handful of connections.
        for _ in 0..32 {
            let Ok((client, _)) = listener.accept().await else {
                return;
            };
            let Ok(server) = TcpStream::connect(&upstream).await else {
                return;
            };
            tokio::spawn(relay(client, server, armed.clone(), ops, how));
        }
    });
    addr.to_string()
}

async fn relay(
    client: TcpStream,
    server: TcpStream,
    armed: Arc<AtomicBool>,
    ops: &[i32],
    how: Cut,
) {
    let (mut client_rx, mut client_tx) = client.into_split();
    let (mut server_rx, mut server_tx) = server.into_split();
    let cut = Arc::new(AtomicBool::new(false));
    let answers_cut = cut.clone();
    let answers = tokio::spawn(async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match server_rx.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            if answers_cut.load(Ordering::SeqCst) || client_tx.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    });
    let mut first = true;
    loop {
        let mut len = [0u8; 4];
        if client_rx.read_exact(&mut len).await.is_err() {
            break;
        }
        let size = i32::from_be_bytes(len);
        if !(0..=1 << 20).contains(&size) {
            break;
        }
        let mut frame = vec![0u8; size as usize];
        if client_rx.read_exact(&mut frame).await.is_err() {
            break;
        }
        // The first frame is the connect request, which has no request header.
        let opcode = (!first && frame.len() >= 8)
            .then(|| i32::from_be_bytes(frame[4..8].try_into().unwrap()));
        first = false;
        let cutting = opcode.is_some_and(|op| ops.contains(&op))
            && match how {
                Cut::BeforeEach => armed.load(Ordering::SeqCst),
                Cut::AfterIt | Cut::BeforeIt => armed.swap(false, Ordering::SeqCst),
            };
        if cutting {
            // Nothing the server says from now on reaches the client.
            cut.store(true, Ordering::SeqCst);
            if let Cut::BeforeIt | Cut::BeforeEach = how {
                break;
            }
        }
        if server_tx.write_all(&len).await.is_err() || server_tx.write_all(&frame).await.is_err() {
            break;
        }
        if cutting {
            // Give the server time to apply the create, then drop both sides.
            tokio::time::sleep(Duration::from_millis(300)).await;
            break;
        }
    }
    answers.abort();
}

/// An observer session straight to the server, the lock directory `path` made through it (so
/// that the creates the proxy sees are the lock node's own), and a session through a proxy that
/// cuts as `how` says at the next create once armed (it starts disarmed).
async fn behind_a_create_cutter(
    connect: &str,
    path: &str,
    how: Cut,
) -> (Session, Session, Arc<AtomicBool>) {
    let observer = session(connect).await;
    let persistent =
        lockkeeper_zk_client::CreateOptions::new(lockkeeper_zk_client::CreateMode::Persistent);
    observer
        .client()
        .unwrap()
        .mkdir(path, &persistent)
        .await
        .unwrap_or_else(|e| panic!("mkdir {path}: {e}"));
    let armed = Arc::new(AtomicBool::new(false));
    let proxy = cutting_proxy(connect.to_owned(), armed.clone(), CREATE_OPS, how).await;
    (observer, session(&proxy).await, armed)
}

/// `session`'s lock of the mutex at `path`, within a minute.
async fn lock_within_a_minute(session: &Session, path: &str) -> lockkeeper::Result<LockGuard> {
    tokio::time::timeout(Duration::from_secs(60), session.mutex(path).unwrap().lock())
        .await
        .expect("the lock ends within a minute")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_create_whose_answer_is_lost_is_found_again_by_uuid() {
    for_each_backend(|connect| async move {
        if support::is_ensemble(&connect) {
            eprintln!("skipped on an ensemble: the cutting proxy relays one server");
            return;
        }
        let path = "/locks/protected";
        let (observer, through_proxy, armed) =
            behind_a_create_cutter(&connect, path, Cut::AfterIt).await;
        armed.store(true, Ordering::SeqCst);
        let session_id = through_proxy.session_id();
        let guard = lock_within_a_minute(&through_proxy, path)
            .await
            .expect("granted after the reconnection");
        assert!(
            !armed.load(Ordering::SeqCst),
            "the proxy never saw the create"
        );
        assert_eq!(
            through_proxy.session_id(),
            session_id,
            "the session survived the cut"
        );
        let nodes = children(&observer, path).await;
        assert_eq!(nodes.len(), 1, "a second node was created: {nodes:?}");
        assert_eq!(format!("{path}/{}", nodes[0]), guard.node());
        guard.release().await.unwrap();
        assert!(children(&observer, path).await.is_empty());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_create_lost_on_its_way_is_sent_once_more() {
    for_each_backend(|connect| async move {
        if support::is_ensemble(&connect) {
            eprintln!("skipped on an ensemble: the cutting proxy relays one server");
            return;
        }
        let path = "/locks/lost-create";
        let (observer, through_proxy, armed) =
            behind_a_create_cutter(&connect, path, Cut::BeforeIt).await;
        armed.store(true, Ordering::SeqCst);
        let guard = lock_within_a_minute(&through_proxy, path)
            .await
            .expect("the create is sent again after it was lost");
        assert!(
            !armed.load(Ordering::SeqCst),
            "the proxy never saw the create"
        );
        let nodes = children(&observer, path).await;
        assert_eq!(nodes.len(), 1, "one node: {nodes:?}");
        assert_eq!(format!("{path}/{}", nodes[0]), guard.node());
        guard.release().await.unwrap();
    })
    .await;
}

/// A create lost on its way every time is given up after the session's retry policy's
/// attempts, with the last loss as the error, and leaves no node.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_create_lost_every_time_exhausts_the_retries() {
    for_each_backend(|connect| async move {
        if support::is_ensemble(&connect) {
            eprintln!("skipped on an ensemble: the cutting proxy relays one server");
            return;
        }
        let path = "/locks/always-lost";
        let (observer, through_proxy, armed) =
            behind_a_create_cutter(&connect, path, Cut::BeforeEach).await;
        armed.store(true, Ordering::SeqCst);
        match lock_within_a_minute(&through_proxy, path).await {
            Err(lockkeeper::Error::RetriesExhausted { attempts, .. }) => {
                assert!(attempts > 1, "given up after {attempts} attempt(s)");
            }
            other => panic!("every create lost: {other:?}"),
        }
        assert!(children(&observer, path).await.is_empty(), "no node left");
    })
    .await;
}

/// A session through a proxy that cuts the connection at the next delete once armed, and an
/// observer session straight to the server.
async fn behind_a_delete_cutter(connect: &str) -> (Session, Session, Arc<AtomicBool>) {
    let armed = Arc::new(AtomicBool::new(false));
    let proxy = cutting_proxy(connect.to_owned(), armed.clone(), DELETE_OPS, Cut::AfterIt).await;
    (session(connect).await, session(&proxy).await, armed)
}

/// Runs `release` with the proxy armed: the delete reaches the server, its answer does not.
async fn release_cut<F: Future<Output = lockkeeper::Result<()>>>(armed: &AtomicBool, release: F) {
    armed.store(true, Ordering::SeqCst);
    let released = tokio::time::timeout(Duration::from_secs(60), release)
        .await
        .expect("the release finishes after the reconnection");
    assert!(
        !armed.load(Ordering::SeqCst),
        "the proxy never saw the delete"
    );
    assert!(
        released.is_ok(),
        "a release whose answer was lost is not NotHeld: {released:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_mutex_release_whose_answer_is_lost_is_a_release() {
    for_each_backend(|connect| async move {
        if support::is_ensemble(&connect) {
            eprintln!("skipped on an ensemble: the cutting proxy relays one server");
            return;
        }
        let path = "/locks/lost-release";
        let (observer, through_proxy, armed) = behind_a_delete_cutter(&connect).await;
        let session_id = through_proxy.session_id();
        let guard = through_proxy.mutex(path).unwrap().lock().await.unwrap();
        release_cut(&armed, guard.release()).await;
        assert_eq!(
            through_proxy.session_id(),
            session_id,
            "the session survived the cut"
        );
        assert!(
            children(&observer, path).await.is_empty(),
            "the node is gone"
        );
        // A node really deleted behind the holder's back is still NotHeld.
        let guard = through_proxy.mutex(path).unwrap().lock().await.unwrap();
        observer
            .client()
            .unwrap()
            .delete(guard.node(), None)
            .await
            .unwrap();
        assert!(matches!(
            guard.release().await,
            Err(lockkeeper::Error::NotHeld)
        ));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_simple_lock_and_a_semaphore_release_whose_answer_is_lost_is_a_release() {
    for_each_backend(|connect| async move {
        if support::is_ensemble(&connect) {
            eprintln!("skipped on an ensemble: the cutting proxy relays one server");
            return;
        }
        let (observer, through_proxy, armed) = behind_a_delete_cutter(&connect).await;
        let simple = through_proxy.simple_lock("/locks/lost-simple").unwrap();
        let guard = simple.lock().await.unwrap();
        release_cut(&armed, guard.release()).await;
        assert!(children(&observer, "/locks/lost-simple").await.is_empty());

        let semaphore = through_proxy.semaphore("/semaphores/lost", 3).unwrap();
        let leases = semaphore.acquire(2).await.unwrap();
        release_cut(&armed, leases.release()).await;
        assert!(
            children(&observer, "/semaphores/lost/leases")
                .await
                .is_empty()
        );

        let rw = through_proxy.rw_lock("/locks/lost-rw").unwrap();
        let guard = rw.write().await.unwrap();
        release_cut(&armed, guard.release()).await;
        assert!(children(&observer, "/locks/lost-rw").await.is_empty());
    })
    .await;
}
