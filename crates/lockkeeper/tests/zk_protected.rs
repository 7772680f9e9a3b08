//! Protected creation: the connection drops after the server has created a waiter's lock node
//! but before the answer arrives. The create cannot be retried blindly (that would queue a
//! second node and orphan the first until the session ends); the recipe must find its node
//! again by the uuid in its name.
//!
//! A loopback proxy between the client and the server forwards everything until it sees the
//! first create request, forwards that one, and then cuts the connection before any answer
//! gets back. The client reconnects through the proxy with the same session.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use support::{children, for_each_backend, session};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// ZooKeeper opcodes for create and create2.
const CREATE_OPS: [i32; 2] = [1, 15];

/// Starts the proxy in front of `upstream`; returns its address. `armed` cuts the connection
/// at the next create request, once.
async fn cutting_proxy(upstream: String, armed: Arc<AtomicBool>) -> String {
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
            tokio::spawn(relay(client, server, armed.clone()));
        }
    });
    addr.to_string()
}

async fn relay(client: TcpStream, server: TcpStream, armed: Arc<AtomicBool>) {
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
        let cutting = opcode.is_some_and(|op| CREATE_OPS.contains(&op))
            && armed.swap(false, Ordering::SeqCst);
        if cutting {
            // Nothing the server says from now on reaches the client.
            cut.store(true, Ordering::SeqCst);
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

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_create_whose_answer_is_lost_is_found_again_by_uuid() {
    for_each_backend(|connect| async move {
        let path = "/locks/protected";
        let observer = session(&connect).await;
        // The lock directory exists, so the first create seen is the lock node's own.
        observer
            .client()
            .unwrap()
            .mkdir(
                path,
                &zookeeper_client::CreateMode::Persistent
                    .with_acls(zookeeper_client::Acls::anyone_all()),
            )
            .await
            .unwrap();
        let armed = Arc::new(AtomicBool::new(true));
        let proxy = cutting_proxy(connect.clone(), armed.clone()).await;
        let through_proxy = session(&proxy).await;
        let session_id = through_proxy.session_id();
        let guard = tokio::time::timeout(
            Duration::from_secs(60),
            through_proxy.mutex(path).unwrap().lock(),
        )
        .await
        .expect("granted after the reconnection")
        .unwrap();
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
