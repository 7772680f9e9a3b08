//! A loopback proxy for the counter tests that drops a connection right after a write request
//! has left for the server, so that the write's outcome is unknown to the client.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

/// Not armed.
const IDLE: u8 = 0;
/// The next write reaches the server; its answer does not reach the client.
const AFTER: u8 = 1;
/// The next write is dropped before it reaches the server.
const BEFORE: u8 = 2;

/// A loopback proxy that, when armed, lets the next write request (create or setData) through
/// to the server and then closes the connection before the answer can come back: the write
/// is in the server's hands, and its outcome is unknown to the client. Armed with
/// [`arm_before`](WriteCutter::arm_before), it drops the write instead, and the server never
/// sees it.
pub(crate) struct WriteCutter {
    addr: std::net::SocketAddr,
    armed: Arc<AtomicU8>,
    accept: tokio::task::JoinHandle<()>,
}

impl WriteCutter {
    pub(crate) async fn start(upstream: &str) -> WriteCutter {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the proxy");
        let addr = listener.local_addr().expect("proxy address");
        let armed = Arc::new(AtomicU8::new(IDLE));
        let upstream = upstream.to_owned();
        let accept = tokio::spawn({
            let armed = armed.clone();
            async move {
                // Aborted when the WriteCutter is dropped; the relays end with their sockets.
                while let Ok((client, _)) = listener.accept().await {
                    let Ok(server) = tokio::net::TcpStream::connect(&upstream).await else {
                        continue;
                    };
                    tokio::spawn(relay(client, server, armed.clone()));
                }
            }
        });
        WriteCutter {
            addr,
            armed,
            accept,
        }
    }

    pub(crate) fn connect_string(&self) -> String {
        self.addr.to_string()
    }

    pub(crate) fn arm(&self) {
        self.armed.store(AFTER, Ordering::SeqCst);
    }

    /// Cuts at the next write without sending it: the request is lost, not its answer.
    pub(crate) fn arm_before(&self) {
        self.armed.store(BEFORE, Ordering::SeqCst);
    }

    /// Whether the armed cut has happened.
    pub(crate) fn fired(&self) -> bool {
        self.armed.load(Ordering::SeqCst) == IDLE
    }
}

impl Drop for WriteCutter {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// Relays one connection frame by frame (4-byte length, then the request: xid, op code);
/// the first frame is the handshake, which has no op code.
async fn relay(client: tokio::net::TcpStream, server: tokio::net::TcpStream, armed: Arc<AtomicU8>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    const WRITES: [i32; 3] = [
        lockkeeper_proto::OpCode::Create as i32,
        lockkeeper_proto::OpCode::Create2 as i32,
        lockkeeper_proto::OpCode::SetData as i32,
    ];
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let answers =
        tokio::spawn(async move { tokio::io::copy(&mut server_read, &mut client_write).await });
    let mut handshake = true;
    loop {
        let mut length = [0u8; 4];
        if client_read.read_exact(&mut length).await.is_err() {
            break;
        }
        let mut frame = vec![0u8; u32::from_be_bytes(length) as usize];
        if client_read.read_exact(&mut frame).await.is_err() {
            break;
        }
        let op = frame
            .get(4..8)
            .map(|b| i32::from_be_bytes([b[0], b[1], b[2], b[3]]));
        let is_write = !handshake && op.is_some_and(|op| WRITES.contains(&op));
        handshake = false;
        if is_write
            && armed
                .compare_exchange(BEFORE, IDLE, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
        {
            // The request goes no further; the server never hears of it.
            break;
        }
        if server_write.write_all(&length).await.is_err()
            || server_write.write_all(&frame).await.is_err()
        {
            break;
        }
        if is_write
            && armed
                .compare_exchange(AFTER, IDLE, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
        {
            // The request is on its way to the server; its answer will find no one.
            break;
        }
    }
    answers.abort();
}
