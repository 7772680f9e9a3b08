//! A loopback proxy that freezes one ZooKeeper client at a chosen request, for the two-phase
//! commit tests: the coordinator is stopped exactly between two of its steps (after it read a
//! vote, or just before its commit multi) while the test changes the votes, then thawed.
//!
//! Invariants: while frozen, no request of the client reaches the server except pings, which
//! pass so that its session and its connection stay alive however long the freeze lasts (the
//! test's pace never turns into a session expiry or a connection loss); requests held back are
//! sent in their order at the thaw. Answers and watch events from the server always pass. A
//! trigger fires once. The proxy binds 127.0.0.1 only and its tasks end when it is dropped.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lockkeeper_proto::OpCode;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

/// The bound on waiting for a trigger to fire.
const LIMIT: Duration = Duration::from_secs(60);

/// Where the client freezes.
#[derive(Clone, Debug)]
pub(crate) enum Trigger {
    /// Once the answer to its getData of this path has passed to the client: it has read the
    /// node, and nothing it does next reaches the server.
    AfterGetData(String),
    /// At its next multi, which is held back: everything it read before is read, and the write
    /// it decided on has not reached the server.
    AtMulti,
}

/// What the relays share.
struct Shared {
    trigger: Mutex<Option<Trigger>>,
    /// `true` while frozen.
    frozen: watch::Sender<bool>,
}

impl Shared {
    fn trigger(&self) -> Option<Trigger> {
        self.trigger
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Fires the trigger: freezes, and disarms it.
    fn fire(&self) {
        self.trigger
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        self.frozen.send_replace(true);
    }

    fn is_frozen(&self) -> bool {
        *self.frozen.borrow()
    }
}

/// The proxy; see the module docs.
pub(crate) struct Freezer {
    addr: std::net::SocketAddr,
    shared: Arc<Shared>,
    accept: JoinHandle<()>,
}

impl Freezer {
    /// Starts the proxy in front of the first server of the connect string `upstream` (one
    /// member is enough: the frozen client talks to that one alone).
    pub(crate) async fn start(upstream: &str) -> Freezer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the freezer");
        let addr = listener.local_addr().expect("the freezer's address");
        let shared = Arc::new(Shared {
            trigger: Mutex::new(None),
            frozen: watch::channel(false).0,
        });
        let upstream = upstream
            .split(',')
            .next()
            .unwrap_or(upstream)
            .trim()
            .to_owned();
        let accept = tokio::spawn({
            let shared = shared.clone();
            async move {
                // Aborted when the Freezer is dropped; each relay ends with its sockets.
                while let Ok((client, _)) = listener.accept().await {
                    let Ok(server) = tokio::net::TcpStream::connect(&upstream).await else {
                        continue;
                    };
                    tokio::spawn(relay(client, server, shared.clone()));
                }
            }
        });
        Freezer {
            addr,
            shared,
            accept,
        }
    }

    pub(crate) fn connect_string(&self) -> String {
        self.addr.to_string()
    }

    /// Arms `trigger` (replacing one not yet fired).
    pub(crate) fn arm(&self, trigger: Trigger) {
        *self
            .shared
            .trigger
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(trigger);
    }

    /// Waits (bounded) until the armed trigger has fired and the client is frozen.
    pub(crate) async fn frozen(&self) {
        let mut frozen = self.shared.frozen.subscribe();
        let waited = tokio::time::timeout(LIMIT, frozen.wait_for(|frozen| *frozen)).await;
        assert!(
            matches!(waited, Ok(Ok(_))),
            "the client never reached the trigger {:?}",
            self.shared.trigger()
        );
    }

    /// Lets the client go on: its held requests go to the server in their order.
    pub(crate) fn thaw(&self) {
        self.shared.frozen.send_replace(false);
    }
}

impl Drop for Freezer {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// Reads one frame (4-byte length, then the body); `None` at the end of the stream.
async fn read_frame(from: &mut OwnedReadHalf) -> Option<Vec<u8>> {
    let mut length = [0u8; 4];
    from.read_exact(&mut length).await.ok()?;
    let mut frame = length.to_vec();
    frame.resize(4 + u32::from_be_bytes(length) as usize, 0);
    from.read_exact(&mut frame[4..]).await.ok()?;
    Some(frame)
}

fn be_i32(bytes: &[u8], at: usize) -> Option<i32> {
    let field = bytes.get(at..at + 4)?;
    Some(i32::from_be_bytes([field[0], field[1], field[2], field[3]]))
}

/// A request frame's xid, op code, and the path its body starts with (a jute string, as in
/// getData and exists).
fn request(frame: &[u8]) -> Option<(i32, i32, Option<String>)> {
    let xid = be_i32(frame, 4)?;
    let op = be_i32(frame, 8)?;
    let path = be_i32(frame, 12)
        .and_then(|len| usize::try_from(len).ok())
        .and_then(|len| frame.get(16..16 + len))
        .and_then(|bytes| String::from_utf8(bytes.to_vec()).ok());
    Some((xid, op, path))
}

/// Relays one connection; the first frame each way is the handshake, which has no header.
async fn relay(client: tokio::net::TcpStream, server: tokio::net::TcpStream, shared: Arc<Shared>) {
    let (mut client_read, client_write) = client.into_split();
    let (server_read, mut server_write) = server.into_split();
    // The xid of the getData whose answer freezes the client.
    let awaited: Arc<Mutex<Option<i32>>> = Arc::new(Mutex::new(None));
    let answers = tokio::spawn(answers(
        server_read,
        client_write,
        shared.clone(),
        awaited.clone(),
    ));
    // Frames are read in a task of their own, so that waiting for one never loses a part read.
    let (frames_tx, mut frames) = mpsc::unbounded_channel();
    let reader = tokio::spawn(async move {
        while let Some(frame) = read_frame(&mut client_read).await {
            if frames_tx.send(frame).is_err() {
                break;
            }
        }
    });
    let mut thawed = shared.frozen.subscribe();
    let mut held: VecDeque<Vec<u8>> = VecDeque::new();
    let mut handshake = true;
    loop {
        tokio::select! {
            frame = frames.recv() => {
                let Some(frame) = frame else { break };
                let parsed = if handshake { None } else { request(&frame) };
                handshake = false;
                let is_ping = parsed.as_ref().is_some_and(|(_, op, _)| *op == OpCode::Ping as i32);
                if !is_ping && !shared.is_frozen() {
                    match (shared.trigger(), &parsed) {
                        (Some(Trigger::AtMulti), Some((_, op, _))) if *op == OpCode::Multi as i32 => {
                            shared.fire();
                        }
                        (Some(Trigger::AfterGetData(path)), Some((xid, op, Some(read))))
                            if *op == OpCode::GetData as i32 && *read == path =>
                        {
                            *awaited.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(*xid);
                        }
                        _ => {}
                    }
                }
                if is_ping || (!shared.is_frozen() && held.is_empty()) {
                    if server_write.write_all(&frame).await.is_err() {
                        break;
                    }
                } else {
                    held.push_back(frame);
                }
            }
            changed = thawed.changed(), if !held.is_empty() => {
                if changed.is_err() {
                    break;
                }
                if !shared.is_frozen() {
                    let mut failed = false;
                    while let Some(frame) = held.pop_front() {
                        if server_write.write_all(&frame).await.is_err() {
                            failed = true;
                            break;
                        }
                    }
                    if failed {
                        break;
                    }
                }
            }
        }
    }
    reader.abort();
    answers.abort();
}

/// Relays the server's frames to the client; the answer to the awaited getData freezes the
/// client before it passes, so the client cannot act on it before the freeze.
async fn answers(
    mut server_read: OwnedReadHalf,
    mut client_write: OwnedWriteHalf,
    shared: Arc<Shared>,
    awaited: Arc<Mutex<Option<i32>>>,
) {
    let mut handshake = true;
    while let Some(frame) = read_frame(&mut server_read).await {
        if !handshake {
            let xid = be_i32(&frame, 4);
            let mut awaited = awaited
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if xid.is_some() && *awaited == xid {
                awaited.take();
                shared.fire();
            }
        }
        handshake = false;
        if client_write.write_all(&frame).await.is_err() {
            break;
        }
    }
}
