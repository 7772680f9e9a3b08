//! The library-free synchronous client of `--trace`: ZooKeeper's wire protocol spoken with
//! blocking reads and writes on one socket, so a create+delete pair costs Keeper's write path,
//! the kernel's loopback and a few µs of encoding, and nothing else.
//!
//! Beside the same pairs through `zookeeper-client` (whose socket is driven by a reactor thread
//! and whose requests pass through a session task) it separates what Keeper takes from what the
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

use super::PairTimes;

/// The largest reply frame accepted (ZooKeeper's default `jute.maxbuffer`).
const MAX_FRAME: usize = 0xfffff;
/// The session timeout asked for: longer than any run.
const SESSION_TIMEOUT_MS: i32 = 30_000;
/// Untimed pairs first, as the library run has.
const WARM_UP_PAIRS: u32 = 50;
/// The node each pair creates and deletes.
const PATH: &str = "/trace-wire";

/// A connected session that has done its untimed pairs: ready for [`Wire::pairs`].
pub(super) fn warmed_up(addr: SocketAddr, op_limit: Duration) -> Result<Wire, BoxError> {
    let mut wire = Wire::connect(addr, op_limit)?;
    for _ in 0..WARM_UP_PAIRS {
        wire.pair()?;
    }
    Ok(wire)
}

/// Which request of a pair.
#[derive(Clone, Copy)]
enum Half {
    Create,
    Delete,
}

/// A session on a blocking socket, with the pair's two requests built once.
pub(super) struct Wire {
    addr: SocketAddr,
    stream: TcpStream,
    /// Bytes read but not yet taken as a frame.
    buf: BytesMut,
    next_xid: i32,
    /// The request being sent, reused.
    out: Vec<u8>,
    create: CreateRequest,
    delete: PathVersionRequest,
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

    fn pair(&mut self) -> Result<(), BoxError> {
        self.call(Half::Create)?;
        self.call(Half::Delete)
    }

    fn connect(addr: SocketAddr, op_limit: Duration) -> Result<Wire, BoxError> {
        let failed =
            |what: &str, e: std::io::Error| format!("library-free client: {what} {addr}: {e}");
        let stream =
            TcpStream::connect_timeout(&addr, op_limit).map_err(|e| failed("connect to", e))?;
        // As ZooKeeper's Java client does: a request is one small write, sent at once.
        stream
            .set_nodelay(true)
            .map_err(|e| failed("TCP_NODELAY on", e))?;
        stream
            .set_read_timeout(Some(op_limit))
            .map_err(|e| failed("read timeout on", e))?;
        stream
            .set_write_timeout(Some(op_limit))
            .map_err(|e| failed("write timeout on", e))?;
        let mut wire = Wire {
            addr,
            stream,
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
        };
        wire.out.clear();
        encode_frame(&mut wire.out, |out| {
            ConnectRequest::new_session(SESSION_TIMEOUT_MS).write(out);
        });
        wire.send()?;
        wire.frame()?;
        Ok(wire)
    }

    /// Sends the pair's create or delete and waits for its Ok reply.
    fn call(&mut self, half: Half) -> Result<(), BoxError> {
        let op = match half {
            Half::Create => OpCode::Create,
            Half::Delete => OpCode::Delete,
        };
        let xid = self.next_xid;
        self.next_xid += 1;
        self.out.clear();
        encode_frame(&mut self.out, |out| {
            RequestHeader { xid, op: op.code() }.write(out);
            match half {
                Half::Create => self.create.write(out),
                Half::Delete => self.delete.write(out),
            }
        });
        self.send()?;
        let header = ReplyHeader::read(&mut Reader::new(self.frame()?)).map_err(|e| {
            format!(
                "library-free client: undecodable reply from {}: {e}",
                self.addr
            )
        })?;
        if header.xid != xid || header.err != 0 {
            return Err(format!(
                "library-free client: {op:?} (xid {xid}) to {} answered xid {} error {}",
                self.addr, header.xid, header.err
            )
            .into());
        }
        Ok(())
    }

    fn send(&mut self) -> Result<(), BoxError> {
        self.stream
            .write_all(&self.out)
            .map_err(|e| format!("library-free client: write to {}: {e}", self.addr).into())
    }

    /// The next whole frame from the server.
    fn frame(&mut self) -> Result<Bytes, BoxError> {
        loop {
            match decode_frame(&mut self.buf, MAX_FRAME) {
                Ok(Some(frame)) => return Ok(frame),
                Ok(None) => {}
                Err(e) => {
                    return Err(
                        format!("library-free client: bad frame from {}: {e}", self.addr).into(),
                    );
                }
            }
            let mut chunk = [0u8; 4096];
            let n = self
                .stream
                .read(&mut chunk)
                .map_err(|e| format!("library-free client: read from {}: {e}", self.addr))?;
            if n == 0 {
                return Err(
                    format!("library-free client: {} closed the connection", self.addr).into(),
                );
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}
