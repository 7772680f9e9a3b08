//! A raw ZooKeeper protocol connection, for sending a server bytes no real client would send,
//! or for a client that stops reading.
//!
//! Real clients validate paths, never announce a 2 GiB frame, never stop half-way through one
//! and always read their socket, so tests of those cases speak the wire protocol themselves:
//! frames are built with `lockkeeper-proto`'s records (or by hand, when the point is that they
//! are wrong), and every read is bounded, reporting a closed connection or a silent server as an
//! outcome the test can assert on instead of a hang.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use lockkeeper_proto::{
    AddWatchMode, AddWatchRequest, ConnectRequest, ConnectResponse, Jute, ReplyHeader, Request,
    RequestHeader, decode_frame, encode_frame,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long any single reply the test expects may take. Generous: the machine is shared and a
/// JVM answers its first requests slowly; this only turns a hang into a failure.
pub const LIMIT: Duration = Duration::from_secs(20);

/// ZooKeeper's default `jute.maxbuffer`: the largest frame a server accepts.
pub const MAX_FRAME: usize = 0xfffff;

/// The session timeout test sessions ask for: 20 ticks of 2 s, the longest both servers grant,
/// so a session outlives every stretch of a test in which it is not used.
pub const SESSION_TIMEOUT_MS: i32 = 40_000;

/// What a bounded read ended with.
#[derive(Debug)]
pub enum Next {
    /// One whole frame from the server.
    Frame(Bytes),
    /// The server closed the connection (EOF or reset).
    Closed,
    /// Nothing complete arrived in time; the connection is still open.
    Silent,
}

/// The answer to one request: a reply, or the connection closed instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// The reply's error code (0 for Ok) and body.
    Reply { err: i32, body: Bytes },
    /// The server closed the connection without replying to this request.
    Closed,
}

impl Answer {
    /// The error code of a reply, or `None` if the connection was closed instead.
    pub fn err(&self) -> Option<i32> {
        match self {
            Answer::Reply { err, .. } => Some(*err),
            Answer::Closed => None,
        }
    }
}

/// One TCP connection to a server, with an optional session on it.
pub struct Raw {
    stream: TcpStream,
    buf: BytesMut,
    next_xid: i32,
    /// The session established by [`Raw::handshake`] (0 before).
    pub session_id: i64,
    pub passwd: Bytes,
    /// Who this connection is in assertion messages, e.g. `"zookeeper bystander"`.
    pub label: String,
}

impl Raw {
    /// Opens a TCP connection and sends nothing.
    pub async fn open(addr: SocketAddr, label: impl Into<String>) -> Raw {
        let label = label.into();
        Raw::try_open(addr, label.clone())
            .await
            .unwrap_or_else(|e| panic!("{label}: TCP connect to {addr}: {e}"))
    }

    /// Like [`Raw::open`], returning the error. A server that closes a connection the moment
    /// it accepts it (the per-address limit) can make the connect itself report the reset.
    pub async fn try_open(addr: SocketAddr, label: impl Into<String>) -> std::io::Result<Raw> {
        let stream = tokio::time::timeout(LIMIT, TcpStream::connect(addr))
            .await
            .map_err(|_| {
                std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out")
            })??;
        stream.set_nodelay(true)?;
        Ok(Raw {
            stream,
            buf: BytesMut::with_capacity(4096),
            next_xid: 1,
            session_id: 0,
            passwd: Bytes::new(),
            label: label.into(),
        })
    }

    /// Opens a TCP connection whose receive buffer is `bytes` (the kernel doubles it and stops
    /// autotuning it), so that once the test stops reading, the server's replies back up into
    /// the server after a few kilobytes instead of the megabytes loopback autotuning allows.
    pub async fn open_with_receive_buffer(
        addr: SocketAddr,
        label: impl Into<String>,
        bytes: u32,
    ) -> Raw {
        let label = label.into();
        let connect = async {
            let socket = if addr.is_ipv4() {
                tokio::net::TcpSocket::new_v4()?
            } else {
                tokio::net::TcpSocket::new_v6()?
            };
            socket.set_recv_buffer_size(bytes)?;
            let stream = tokio::time::timeout(LIMIT, socket.connect(addr))
                .await
                .map_err(|_| {
                    std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out")
                })??;
            stream.set_nodelay(true)?;
            Ok::<_, std::io::Error>(stream)
        };
        let stream = connect
            .await
            .unwrap_or_else(|e| panic!("{label}: TCP connect to {addr}: {e}"));
        Raw {
            stream,
            buf: BytesMut::with_capacity(4096),
            next_xid: 1,
            session_id: 0,
            passwd: Bytes::new(),
            label,
        }
    }

    /// A new session of `timeout_ms` with a persistent-recursive watch on `/`, over a connection
    /// whose receive buffer is `bytes` (see [`Raw::open_with_receive_buffer`]): every change
    /// fires an event at it, so a test that stops reading makes events back up in the server.
    pub async fn watching_everything(
        addr: SocketAddr,
        label: impl Into<String>,
        bytes: u32,
        timeout_ms: i32,
    ) -> Raw {
        let mut raw = Raw::open_with_receive_buffer(addr, label, bytes).await;
        raw.new_session(timeout_ms).await;
        let answer = raw
            .call(&Request::AddWatch(AddWatchRequest {
                path: "/".into(),
                mode: AddWatchMode::PersistentRecursive.code(),
            }))
            .await;
        assert_eq!(
            answer.err(),
            Some(0),
            "{}: addWatch on /: {answer:?}",
            raw.label
        );
        raw
    }

    /// Opens a connection and establishes a new session on it; panics if the server refuses.
    pub async fn session(addr: SocketAddr, label: impl Into<String>) -> Raw {
        let mut raw = Raw::open(addr, label).await;
        raw.new_session(SESSION_TIMEOUT_MS).await;
        raw
    }

    /// Establishes a new session of `timeout_ms` on this connection; panics if the server
    /// closes the handshake or refuses the session.
    pub async fn new_session(&mut self, timeout_ms: i32) -> ConnectResponse {
        let response = self
            .handshake(timeout_ms)
            .await
            .unwrap_or_else(|| panic!("{}: the server closed the handshake", self.label));
        assert!(
            response.timeout > 0 && response.session_id != 0,
            "{}: session refused: {response:?}",
            self.label
        );
        response
    }

    /// Opens a connection and establishes a session that expires `timeout_ms` after its last
    /// request. A refusal is retried until [`LIMIT`]: a server frees the per-address connection
    /// slot of a closed connection only once it has noticed the close.
    pub async fn session_eventually(
        addr: SocketAddr,
        label: impl Into<String>,
        timeout_ms: i32,
    ) -> Raw {
        let label = label.into();
        let deadline = tokio::time::Instant::now() + LIMIT;
        loop {
            if let Ok(mut raw) = Raw::try_open(addr, label.clone()).await
                && let Some(response) = raw.handshake(timeout_ms).await
            {
                assert!(
                    response.timeout > 0,
                    "{label}: session refused: {response:?}"
                );
                return raw;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{label}: every connection was closed before its handshake for {LIMIT:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Opens a connection and asks to re-attach to `session_id` with `passwd`.
    pub async fn reattach(
        addr: SocketAddr,
        label: impl Into<String>,
        session_id: i64,
        passwd: Bytes,
    ) -> (Raw, Option<ConnectResponse>) {
        let mut raw = Raw::open(addr, label).await;
        let request = ConnectRequest {
            protocol_version: 0,
            last_zxid_seen: 0,
            timeout: SESSION_TIMEOUT_MS,
            session_id,
            passwd,
            read_only: Some(false),
        };
        let response = raw.connect_with(&request).await;
        (raw, response)
    }

    /// Sends a connect request for a new session and reads the answer; `None` if the server
    /// closed the connection instead.
    pub async fn handshake(&mut self, timeout_ms: i32) -> Option<ConnectResponse> {
        self.connect_with(&ConnectRequest::new_session(timeout_ms))
            .await
    }

    /// Sends `request` as the connection's first frame and reads the connect response; `None`
    /// if the server closed the connection instead. Remembers the session it grants.
    pub async fn connect_with(&mut self, request: &ConnectRequest) -> Option<ConnectResponse> {
        let mut frame = Vec::new();
        encode_frame(&mut frame, |out| request.write(out));
        if self.send(&frame).await.is_err() {
            return None;
        }
        match self.next(LIMIT).await {
            Next::Frame(body) => {
                let response = ConnectResponse::decode(body).unwrap_or_else(|e| {
                    panic!("{}: undecodable connect response: {e}", self.label)
                });
                if response.timeout > 0 {
                    self.session_id = response.session_id;
                    self.passwd = response.passwd.clone();
                }
                Some(response)
            }
            Next::Closed => None,
            Next::Silent => panic!("{}: no connect response within {LIMIT:?}", self.label),
        }
    }

    /// This end's address: how the server's `cons` names the connection.
    pub fn local_addr(&self) -> SocketAddr {
        self.stream
            .local_addr()
            .unwrap_or_else(|e| panic!("{}: local address: {e}", self.label))
    }

    /// Writes `bytes` as they are. An error means the server has already closed the connection.
    pub async fn send(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        tokio::time::timeout(LIMIT, self.stream.write_all(bytes))
            .await
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "write timed out"))?
    }

    /// Sends one request frame: header (`xid`, `op`) then `body`, exactly as given.
    pub async fn send_request(&mut self, xid: i32, op: i32, body: &[u8]) -> std::io::Result<()> {
        self.send(&request_frame(xid, op, body)).await
    }

    /// A fresh xid for a request sent with [`Raw::send_request`].
    pub fn xid(&mut self) -> i32 {
        let xid = self.next_xid;
        self.next_xid += 1;
        xid
    }

    /// Sends `op` with `body` under a fresh xid and waits for its reply (or the close).
    pub async fn call_raw(&mut self, op: i32, body: &[u8]) -> Answer {
        let xid = self.xid();
        if self.send_request(xid, op, body).await.is_err() {
            return Answer::Closed;
        }
        self.answer(xid).await
    }

    /// Sends a well-formed request and waits for its reply (or the close).
    pub async fn call(&mut self, request: &Request) -> Answer {
        let mut body = Vec::new();
        request.encode_body(&mut body);
        self.call_raw(request.op_code().code(), &body).await
    }

    /// Waits for the reply with `xid`, skipping watch notifications; panics if the server stays
    /// silent for [`LIMIT`] or answers another xid.
    pub async fn answer(&mut self, xid: i32) -> Answer {
        loop {
            match self.next(LIMIT).await {
                Next::Frame(frame) => {
                    let mut reader = lockkeeper_proto::Reader::new(frame);
                    let header = ReplyHeader::read(&mut reader).unwrap_or_else(|e| {
                        panic!("{}: undecodable reply header: {e}", self.label)
                    });
                    if header.xid == lockkeeper_proto::XID_NOTIFICATION {
                        continue;
                    }
                    assert_eq!(
                        header.xid, xid,
                        "{}: reply to xid {} while waiting for {xid}",
                        self.label, header.xid
                    );
                    return Answer::Reply {
                        err: header.err,
                        body: reader.rest(),
                    };
                }
                Next::Closed => return Answer::Closed,
                Next::Silent => panic!("{}: no reply to xid {xid} within {LIMIT:?}", self.label),
            }
        }
    }

    /// A ping, which must be answered Ok on this very connection.
    pub async fn ping(&mut self) {
        let xid = lockkeeper_proto::XID_PING;
        self.send_request(xid, lockkeeper_proto::OpCode::Ping.code(), &[])
            .await
            .unwrap_or_else(|e| panic!("{}: ping not sent: {e}", self.label));
        match self.answer(xid).await {
            Answer::Reply { err: 0, .. } => {}
            other => panic!("{}: ping answered {other:?}", self.label),
        }
    }

    /// Reads until one whole frame arrives, the server closes, or `within` passes.
    pub async fn next(&mut self, within: Duration) -> Next {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            // Replies are never larger than the server's own frame limit plus headers.
            match decode_frame(&mut self.buf, 4 * MAX_FRAME) {
                Ok(Some(frame)) => return Next::Frame(frame),
                Ok(None) => {}
                Err(e) => panic!("{}: the server sent a bad frame: {e}", self.label),
            }
            match tokio::time::timeout_at(deadline, self.stream.read_buf(&mut self.buf)).await {
                Err(_) => return Next::Silent,
                Ok(Ok(0) | Err(_)) => return Next::Closed,
                Ok(Ok(_)) => {}
            }
        }
    }

    /// Waits up to `within` for the server to close the connection and returns the frames it
    /// sent first; panics if it is still open by then.
    pub async fn closed_within(&mut self, within: Duration, why: &str) -> Vec<Bytes> {
        let deadline = tokio::time::Instant::now() + within;
        let mut frames = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match self.next(left).await {
                Next::Frame(frame) => frames.push(frame),
                Next::Closed => return frames,
                Next::Silent => panic!(
                    "{}: still open {within:?} after {why} (frames received: {})",
                    self.label,
                    frames.len()
                ),
            }
        }
    }

    /// Reads raw bytes until the server closes; for the plain-text four-letter words.
    pub async fn read_to_close(&mut self, within: Duration) -> Vec<u8> {
        let mut text = self.buf.split().to_vec();
        let read = tokio::time::timeout(within, self.stream.read_to_end(&mut text)).await;
        match read {
            Err(_) => panic!("{}: still open after {within:?}", self.label),
            // A reset after the answer still ends the answer.
            Ok(_) => text,
        }
    }
}

/// One whole request frame: length prefix, header (`xid`, `op`), then `body` as given.
pub fn request_frame(xid: i32, op: i32, body: &[u8]) -> Vec<u8> {
    let mut frame = Vec::new();
    encode_frame(&mut frame, |out| {
        RequestHeader { xid, op }.write(out);
        out.extend_from_slice(body);
    });
    frame
}

/// The ACL `world:anyone` with every permission, ZooKeeper's OPEN_ACL_UNSAFE.
pub use lockkeeper_proto::open_acl;
