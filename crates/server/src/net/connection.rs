//! Connection: the first and last stage of the pipeline for one client socket.
//!
//! The reader half peeks at the first four bytes (a four-letter word or a frame length), reads
//! the connect request, then decodes frames into requests for the core. Replies leave through
//! the connection's [`Outbox`](outbox::Outbox), written by whoever made them sendable (the core, or the log
//! thread whose sync made them durable); the connection's writer task does what needs waiting
//! or would hold them up: it finishes a write the full socket did not take, writes a large
//! backlog and what a busy core leaves it, shuts the socket down after a close, and resets a
//! connection the core gave up on (its queue passed the bound). Bad input
//! closes this connection only; the core and every other session carry on.
//!
//! When the writer task ends, the reader sees it gone and reports the disconnect, so the session
//! stays and may re-attach.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use lockkeeper_proto::{
    ConnectRequest, DecodeError, ErrorCode, FrameError, Jute, Reader, Request, RequestHeader,
    XID_PING, decode_frame,
};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};

use crate::config::Config;
use crate::core::CoreMsg;
use crate::disk::durable::DurableMark;
use crate::net::four_letter;
use crate::net::outbox::{self, Next, WriterEnd};
use crate::net::socket::{ReadHalf, Socket, WriteHalf};
use crate::net::tls;
use crate::state::watch::ConnId;
use crate::trace::{Reaction, SendTrace, StageTimes};

/// Why a connection ended early; logged, never sent.
#[derive(Debug, thiserror::Error)]
enum Closed {
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    #[error("bad frame: {0}")]
    Frame(#[from] FrameError),
    #[error("bad connect request: {0}")]
    Connect(DecodeError),
    #[error("bad request header: {0}")]
    Header(DecodeError),
    #[error("no connect request within the handshake timeout")]
    HandshakeTimeout,
    #[error("peer closed")]
    Eof,
    #[error("server is shutting down")]
    Shutdown,
}

pub(crate) struct ConnectionCtx {
    pub id: ConnId,
    pub peer: SocketAddr,
    pub core: mpsc::Sender<CoreMsg>,
    /// The log's durable mark, which releases this connection's replies.
    pub durable: Arc<DurableMark>,
    pub max_frame: usize,
    pub handshake_timeout: std::time::Duration,
    pub max_queued_bytes: u64,
    /// How long a closed connection waits for a peer that reads nothing (see
    /// [`Config::close_linger`]).
    pub close_linger: Duration,
    /// Packets written by every connection of the server.
    pub packets_sent: Arc<AtomicU64>,
    /// Where this connection records the write path's stages.
    pub stages: Arc<StageTimes>,
    /// This connection's `reaction`: whoever writes a watch event to it notes the write, its
    /// reader the next request.
    pub reaction: Arc<Reaction>,
}

impl ConnectionCtx {
    pub(crate) fn new(
        id: ConnId,
        peer: SocketAddr,
        core: mpsc::Sender<CoreMsg>,
        durable: Arc<DurableMark>,
        packets_sent: Arc<AtomicU64>,
        stages: Arc<StageTimes>,
        config: &Config,
    ) -> Self {
        ConnectionCtx {
            id,
            peer,
            core,
            durable,
            max_frame: config.jute_maxbuffer,
            handshake_timeout: config.handshake_timeout,
            max_queued_bytes: config.max_queued_bytes,
            close_linger: config.close_linger,
            packets_sent,
            stages,
            reaction: Arc::default(),
        }
    }
}

/// Serves one client until it disconnects, misbehaves or the core closes it; with `tls`, over
/// TLS from its first byte. The TLS and ZooKeeper handshakes share one `handshake_timeout`.
pub(crate) async fn serve(stream: TcpStream, ctx: ConnectionCtx, tls: Option<Arc<tls::Acceptor>>) {
    let _ = stream.set_nodelay(true);
    let deadline = tokio::time::Instant::now() + ctx.handshake_timeout;
    let (socket, x509) = match tls {
        None => (Socket::Plain(stream), None),
        Some(acceptor) => match tokio::time::timeout_at(deadline, acceptor.accept(stream)).await {
            Ok(Ok((stream, x509))) => (Socket::Tls(Box::new(stream)), x509),
            Ok(Err(e)) => {
                tracing::warn!(peer = %ctx.peer, error = %e, "secure port: connection refused");
                return;
            }
            Err(_) => {
                tracing::warn!(peer = %ctx.peer, timeout = ?ctx.handshake_timeout, "secure port: no TLS handshake within the handshake timeout");
                return;
            }
        },
    };
    let (mut reader, writer) = socket.split();
    let mut buf = BytesMut::with_capacity(4096);
    let result = match tokio::time::timeout_at(
        deadline,
        handshake(&mut reader, writer, &mut buf, &ctx, x509),
    )
    .await
    {
        Err(_) => Err(Closed::HandshakeTimeout),
        Ok(Err(e)) => Err(e),
        Ok(Ok(None)) => Ok(()),
        Ok(Ok(Some(writer_done))) => read_requests(&mut reader, &mut buf, &ctx, writer_done).await,
    };
    match result {
        Ok(()) | Err(Closed::Eof | Closed::Shutdown) => {
            tracing::trace!(peer = %ctx.peer, "connection closed");
        }
        Err(e) => tracing::debug!(peer = %ctx.peer, error = %e, "connection closed"),
    }
    let _ = ctx.core.send(CoreMsg::Disconnected { conn: ctx.id }).await;
}

/// Reads until `buf` holds at least `n` bytes.
async fn fill(reader: &mut ReadHalf, buf: &mut BytesMut, n: usize) -> Result<(), Closed> {
    while buf.len() < n {
        if reader.read_buf(buf).await? == 0 {
            return Err(Closed::Eof);
        }
    }
    Ok(())
}

/// Answers a four-letter word (returns `None`), or reads the connect request, hands the core
/// this connection's outbox and starts the writer (returns a signal that fires when it ends).
async fn handshake(
    reader: &mut ReadHalf,
    mut writer: WriteHalf,
    buf: &mut BytesMut,
    ctx: &ConnectionCtx,
    x509: Option<String>,
) -> Result<Option<oneshot::Receiver<()>>, Closed> {
    fill(reader, buf, 4).await?;
    if let Some(word) = four_letter::is_four_letter_word(&buf[..4]) {
        let (reply, answer) = oneshot::channel();
        ctx.core
            .send(CoreMsg::Inspect(Box::new(move |view| {
                let _ = reply.send(four_letter::answer(view, word));
            })))
            .await
            .map_err(|_| Closed::Shutdown)?;
        let text = answer.await.map_err(|_| Closed::Shutdown)?;
        writer.write_all(text.as_bytes()).await?;
        writer.shutdown().await?;
        return Ok(None);
    }
    let frame = next_frame(reader, buf, ctx.max_frame).await?;
    // Read, not decode: bytes after the record are ignored, as ZooKeeper ignores them.
    let request = ConnectRequest::read(&mut Reader::new(frame)).map_err(Closed::Connect)?;
    let (outbox, writer) = outbox::new(
        writer,
        ctx.durable.clone(),
        ctx.max_queued_bytes,
        ctx.packets_sent.clone(),
        SendTrace::new(ctx.stages.clone(), ctx.reaction.clone()),
    );
    let (done_tx, done_rx) = oneshot::channel();
    let peer = ctx.peer;
    let close_linger = ctx.close_linger;
    tokio::spawn(async move {
        if let Err(e) = write_replies(writer, close_linger).await {
            tracing::debug!(%peer, error = %e, "writer ended");
        }
        let _ = done_tx.send(());
    });
    let msg = CoreMsg::Connect {
        conn: ctx.id,
        peer: ctx.peer,
        x509,
        request,
        outbox: Box::new(outbox),
    };
    ctx.core.send(msg).await.map_err(|_| Closed::Shutdown)?;
    Ok(Some(done_rx))
}

async fn next_frame(
    reader: &mut ReadHalf,
    buf: &mut BytesMut,
    max: usize,
) -> Result<Bytes, Closed> {
    loop {
        if let Some(frame) = decode_frame(buf, max)? {
            return Ok(frame);
        }
        if reader.read_buf(buf).await? == 0 {
            return Err(Closed::Eof);
        }
    }
}

/// Decodes frames into requests until the peer goes, a frame is unreadable, or the writer ends
/// (the core closed the connection: session closed, expired or moved).
async fn read_requests(
    reader: &mut ReadHalf,
    buf: &mut BytesMut,
    ctx: &ConnectionCtx,
    mut writer_done: oneshot::Receiver<()>,
) -> Result<(), Closed> {
    loop {
        while let Some(frame) = decode_frame(buf, ctx.max_frame)? {
            let received = Instant::now();
            let mut r = Reader::new(frame);
            let header = RequestHeader::read(&mut r).map_err(Closed::Header)?;
            if header.xid != XID_PING {
                ctx.reaction.request_received(&ctx.stages, received);
            }
            let body = r.rest();
            let msg = match Request::decode(header.op, body) {
                Ok(request) => CoreMsg::Request {
                    conn: ctx.id,
                    xid: header.xid,
                    request,
                    received,
                },
                Err(DecodeError::UnknownOpCode(op)) => {
                    tracing::debug!(peer = %ctx.peer, op, "unknown opcode");
                    CoreMsg::Malformed {
                        conn: ctx.id,
                        xid: header.xid,
                        err: ErrorCode::Unimplemented,
                        close: true,
                    }
                }
                Err(e) => {
                    tracing::debug!(peer = %ctx.peer, op = header.op, error = %e, "undecodable request");
                    CoreMsg::Malformed {
                        conn: ctx.id,
                        xid: header.xid,
                        err: ErrorCode::MarshallingError,
                        close: false,
                    }
                }
            };
            ctx.core.send(msg).await.map_err(|_| Closed::Shutdown)?;
        }
        tokio::select! {
            read = reader.read_buf(buf) => {
                if read? == 0 {
                    return Err(Closed::Eof);
                }
            }
            _ = &mut writer_done => return Ok(()),
        }
    }
}

/// The connection's writer task: does what the outbox's writers could not do without waiting,
/// until the connection ends. Ends at once, even in the middle of a write to a full socket, when
/// the core gives up on the connection, and resets it, so what was queued is freed here and in
/// the kernel.
///
/// Once the core has closed the connection, nothing else bounds a peer that stops reading: its
/// session is gone, so it neither expires nor queues past the bound. From the close on, the task
/// waits at most `close_linger` for the peer to make progress (the socket takes a byte, or the
/// kernel's queue for the peer shrinks), and then resets the connection.
async fn write_replies(outbox: WriterEnd, close_linger: Duration) -> std::io::Result<()> {
    // Since when the peer of a closed connection has made no progress, and where it stood then.
    let mut stalled: Option<(Instant, (u64, Option<u64>))> = None;
    loop {
        match outbox.pump() {
            Next::Idle => outbox.woken().await,
            Next::More => tokio::task::yield_now().await,
            Next::SocketFull => {
                let progress = outbox.closed_progress();
                if let Some(progress) = progress
                    && stalled.is_none_or(|(_, at)| at != progress)
                {
                    stalled = Some((Instant::now(), progress));
                }
                let give_up = stalled.map(|(since, _)| since + close_linger);
                tokio::select! {
                    // A socket that became writable wins over a deadline that passed meanwhile.
                    biased;
                    writable = outbox.writable() => {
                        if let Err(e) = writable {
                            outbox.broken(&e);
                            return Err(e);
                        }
                    }
                    // The core gave up on the connection meanwhile: the next pump says so.
                    () = outbox.woken() => {}
                    () = tokio::time::sleep_until(give_up.unwrap_or_else(Instant::now).into()), if give_up.is_some() => {
                        if outbox.closed_progress() != progress {
                            // The peer read meanwhile: wait again, from now.
                            continue;
                        }
                        let e = std::io::Error::new(
                            std::io::ErrorKind::TimedOut,
                            format!(
                                "the connection was closed and the peer read nothing for {close_linger:?}"
                            ),
                        );
                        outbox.broken(&e);
                        outbox.reset();
                        return Err(e);
                    }
                }
            }
            // With TLS the shutdown sends close_notify, which a peer that reads nothing never
            // takes: bounded as the rest of a closed connection is.
            Next::Shutdown => {
                return match tokio::time::timeout(close_linger, outbox.shutdown()).await {
                    Ok(done) => done,
                    Err(_) => {
                        outbox.reset();
                        Err(std::io::Error::new(
                            std::io::ErrorKind::TimedOut,
                            format!("the peer took no close_notify for {close_linger:?}"),
                        ))
                    }
                };
            }
            Next::Stop(result) => return result,
            Next::Reset => {
                outbox.reset();
                return Ok(());
            }
        }
    }
}
