//! The library-free synchronous clients of `--trace`: ZooKeeper's wire protocol spoken on one
//! socket, each request answered before the next, so a create+delete pair costs Keeper's write
//! path, the kernel's loopback and a few µs of encoding, and nothing else.
//!
//! Two transports share the protocol ([`Protocol`]: the requests built once, the xids, the
//! reply checks): [`Wire`] blocks in its reads and writes on a thread of its own, and
//! [`TaskWire`] awaits a tokio socket in a task, as any tokio client does. Beside the same pairs
//! through `zookeeper-client` and `lockkeeper-zk-client` (whose replies pass through a session
//! task) they separate what Keeper takes, what a tokio socket's wake-ups take, and what the
//! client library takes. Every read and write is bounded by the op limit; any error, a reply to
//! another xid or a non-Ok reply ends the run with an error naming the address.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use lockkeeper_load::BoxError;
use lockkeeper_proto::{
    ConnectRequest, CreateRequest, Jute, OpCode, PathVersionRequest, Reader, ReplyHeader,
    RequestHeader, decode_frame, encode_frame, open_acl,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::PairTimes;

/// The largest reply frame accepted (ZooKeeper's default `jute.maxbuffer`).
const MAX_FRAME: usize = 0xfffff;
/// The session timeout asked for: longer than any run.
const SESSION_TIMEOUT_MS: i32 = 30_000;
/// Untimed pairs first, as the library run has.
const WARM_UP_PAIRS: u32 = 50;
/// The node each pair creates and deletes.
const PATH: &str = "/trace-wire";

/// A connected session on a blocking socket that has done its untimed pairs: ready for
/// [`Wire::pairs`].
pub(super) fn warmed_up(addr: SocketAddr, op_limit: Duration) -> Result<Wire, BoxError> {
    let mut wire = Wire::connect(addr, op_limit)?;
    for _ in 0..WARM_UP_PAIRS {
        wire.call(Half::Create)?;
        wire.call(Half::Delete)?;
    }
    Ok(wire)
}

/// [`warmed_up`] on a tokio socket, in the calling task: ready for [`TaskWire::pairs`].
pub(super) async fn warmed_up_in_task(
    addr: SocketAddr,
    op_limit: Duration,
) -> Result<TaskWire, BoxError> {
    let mut wire = TaskWire::connect(addr, op_limit).await?;
    for _ in 0..WARM_UP_PAIRS {
        wire.call(Half::Create).await?;
        wire.call(Half::Delete).await?;
    }
    Ok(wire)
}

/// Which request of a pair.
#[derive(Clone, Copy)]
enum Half {
    Create,
    Delete,
}

/// What both transports share: the session's frames, built here and checked here.
struct Protocol {
    addr: SocketAddr,
    /// Bytes read but not yet taken as a frame.
    buf: BytesMut,
    next_xid: i32,
    /// The frame being sent, reused.
    out: Vec<u8>,
    create: CreateRequest,
    delete: PathVersionRequest,
}

impl Protocol {
    fn new(addr: SocketAddr) -> Protocol {
        Protocol {
            addr,
            buf: BytesMut::with_capacity(4096),
            next_xid: 1,
            out: Vec::with_capacity(256),
            create: CreateRequest {
                path: PATH.into(),
                data: Some(Bytes::from_static(b"x")),
                acl: open_acl(),
                flags: 0,
            },
            delete: PathVersionRequest {
                path: PATH.into(),
                version: -1,
            },
        }
    }

    /// The session request, into `out`.
    fn hello(&mut self) {
        self.out.clear();
        encode_frame(&mut self.out, |out| {
            ConnectRequest::new_session(SESSION_TIMEOUT_MS).write(out);
        });
    }

    /// The pair's create or delete, into `out`; its xid.
    fn request(&mut self, half: Half) -> i32 {
        let xid = self.next_xid;
        self.next_xid += 1;
        self.out.clear();
        encode_frame(&mut self.out, |out| {
            RequestHeader {
                xid,
                op: op_of(half).code(),
            }
            .write(out);
            match half {
                Half::Create => self.create.write(out),
                Half::Delete => self.delete.write(out),
            }
        });
        xid
    }

    /// The next whole frame in what was read, if there is one.
    fn frame(&mut self) -> Result<Option<Bytes>, BoxError> {
        decode_frame(&mut self.buf, MAX_FRAME)
            .map_err(|e| format!("library-free client: bad frame from {}: {e}", self.addr).into())
    }

    /// Checks that `frame` is the Ok reply to `xid`, the pair's `half`.
    fn check(&self, frame: Bytes, xid: i32, half: Half) -> Result<(), BoxError> {
        let header = ReplyHeader::read(&mut Reader::new(frame)).map_err(|e| {
            format!(
                "library-free client: undecodable reply from {}: {e}",
                self.addr
            )
        })?;
        if header.xid != xid || header.err != 0 {
            return Err(format!(
                "library-free client: {:?} (xid {xid}) to {} answered xid {} error {}",
                op_of(half),
                self.addr,
                header.xid,
                header.err
            )
            .into());
        }
        Ok(())
    }

    fn failed(&self, what: &str, e: std::io::Error) -> BoxError {
        format!("library-free client: {what} {}: {e}", self.addr).into()
    }

    fn closed(&self) -> BoxError {
        format!("library-free client: {} closed the connection", self.addr).into()
    }
}

fn op_of(half: Half) -> OpCode {
    match half {
        Half::Create => OpCode::Create,
        Half::Delete => OpCode::Delete,
    }
}

/// A session on a blocking socket.
pub(super) struct Wire {
    stream: TcpStream,
    protocol: Protocol,
}

impl Wire {
    /// `pairs` create+delete pairs of `/trace-wire` (for at most `limit`), each op answered
    /// before the next is sent.
    pub(super) fn pairs(&mut self, pairs: u32, limit: Duration) -> Result<PairTimes, BoxError> {
        let mut times = PairTimes::new();
        let started = Instant::now();
        while times.count() < u64::from(pairs) && started.elapsed() < limit {
            let t0 = Instant::now();
            self.call(Half::Create)?;
            let t1 = Instant::now();
            self.call(Half::Delete)?;
            times.record(t0, t1, Instant::now());
        }
        Ok(times)
    }

    fn connect(addr: SocketAddr, op_limit: Duration) -> Result<Wire, BoxError> {
        let protocol = Protocol::new(addr);
        let stream = TcpStream::connect_timeout(&addr, op_limit)
            .map_err(|e| protocol.failed("connect to", e))?;
        // As ZooKeeper's Java client does: a request is one small write, sent at once.
        stream
            .set_nodelay(true)
            .map_err(|e| protocol.failed("TCP_NODELAY on", e))?;
        stream
            .set_read_timeout(Some(op_limit))
            .map_err(|e| protocol.failed("read timeout on", e))?;
        stream
            .set_write_timeout(Some(op_limit))
            .map_err(|e| protocol.failed("write timeout on", e))?;
        let mut wire = Wire { stream, protocol };
        wire.protocol.hello();
        wire.send()?;
        wire.frame()?;
        Ok(wire)
    }

    /// Sends the pair's create or delete and waits for its Ok reply.
    fn call(&mut self, half: Half) -> Result<(), BoxError> {
        let xid = self.protocol.request(half);
        self.send()?;
        let frame = self.frame()?;
        self.protocol.check(frame, xid, half)
    }

    fn send(&mut self) -> Result<(), BoxError> {
        self.stream
            .write_all(&self.protocol.out)
            .map_err(|e| self.protocol.failed("write to", e))
    }

    /// The next whole frame from the server.
    fn frame(&mut self) -> Result<Bytes, BoxError> {
        loop {
            if let Some(frame) = self.protocol.frame()? {
                return Ok(frame);
            }
            let mut chunk = [0u8; 4096];
            let n = self
                .stream
                .read(&mut chunk)
                .map_err(|e| self.protocol.failed("read from", e))?;
            if n == 0 {
                return Err(self.protocol.closed());
            }
            self.protocol.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

/// A session on a tokio socket, driven by the task that calls it: each reply wakes that task
/// through the runtime's reactor, with no other task between them.
pub(super) struct TaskWire {
    stream: tokio::net::TcpStream,
    protocol: Protocol,
    op_limit: Duration,
}

impl TaskWire {
    /// [`Wire::pairs`], awaited.
    pub(super) async fn pairs(
        &mut self,
        pairs: u32,
        limit: Duration,
    ) -> Result<PairTimes, BoxError> {
        let mut times = PairTimes::new();
        let started = Instant::now();
        while times.count() < u64::from(pairs) && started.elapsed() < limit {
            let t0 = Instant::now();
            self.call(Half::Create).await?;
            let t1 = Instant::now();
            self.call(Half::Delete).await?;
            times.record(t0, t1, Instant::now());
        }
        Ok(times)
    }

    async fn connect(addr: SocketAddr, op_limit: Duration) -> Result<TaskWire, BoxError> {
        let protocol = Protocol::new(addr);
        let stream = tokio::time::timeout(op_limit, tokio::net::TcpStream::connect(addr))
            .await
            .map_err(|_| {
                format!("library-free client: no connection to {addr} within {op_limit:?}")
            })?
            .map_err(|e| protocol.failed("connect to", e))?;
        stream
            .set_nodelay(true)
            .map_err(|e| protocol.failed("TCP_NODELAY on", e))?;
        let mut wire = TaskWire {
            stream,
            protocol,
            op_limit,
        };
        wire.protocol.hello();
        wire.exchange().await?;
        Ok(wire)
    }

    async fn call(&mut self, half: Half) -> Result<(), BoxError> {
        let xid = self.protocol.request(half);
        let frame = self.exchange().await?;
        self.protocol.check(frame, xid, half)
    }

    /// Sends the frame in `out` and reads the next whole frame, within the op limit.
    async fn exchange(&mut self) -> Result<Bytes, BoxError> {
        let (stream, protocol) = (&mut self.stream, &mut self.protocol);
        let exchange = async {
            stream
                .write_all(&protocol.out)
                .await
                .map_err(|e| protocol.failed("write to", e))?;
            loop {
                if let Some(frame) = protocol.frame()? {
                    return Ok(frame);
                }
                let n = stream
                    .read_buf(&mut protocol.buf)
                    .await
                    .map_err(|e| protocol.failed("read from", e))?;
                if n == 0 {
                    return Err(protocol.closed());
                }
            }
        };
        match tokio::time::timeout(self.op_limit, exchange).await {
            Ok(answered) => answered,
            Err(_) => Err(format!(
                "library-free client: no reply from {} within {:?}",
                self.protocol.addr, self.op_limit
            )
            .into()),
        }
    }
}
