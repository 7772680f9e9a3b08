//! Connection: the first and last stage of the pipeline for one client socket.
//!
//! The reader half peeks at the first four bytes (a four-letter word or a frame length), reads
//! the connect request, then decodes frames into requests for the core. The writer half takes
//! the core's replies in order, holds each until the state it reveals is durable, encodes them
//! and writes them in batches. Bad input closes this connection only; the core and every other
//! session carry on.
//!
//! The core never waits for the writer: replies wait in the connection's [`Outbox`], bounded in
//! bytes. When the core finds the bound passed, the writer stops wherever it is (typically
//! blocked on a full socket), drops everything queued and resets the connection; the reader then
//! sees the writer gone and reports the disconnect, so the session stays and may re-attach.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use lockkeeper_proto::{
    ConnectRequest, DecodeError, ErrorCode, FrameError, Jute, Reader, Request, RequestHeader,
    XID_PING, decode_frame,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::{mpsc, oneshot, watch};

use crate::config::Config;
use crate::core::CoreMsg;
use crate::four_letter;
use crate::log::Durable;
use crate::outbox::{self, Batch, Inbox, Outbox};
use crate::reply::Outgoing;
use crate::trace::{Reaction, RequestStamps, StageTimes, SyncStamps};
use crate::watch::ConnId;

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

pub struct ConnectionCtx {
    pub id: ConnId,
    pub peer: SocketAddr,
    pub core: mpsc::Sender<CoreMsg>,
    pub durable: watch::Receiver<Durable>,
    pub max_frame: usize,
    pub handshake_timeout: std::time::Duration,
    pub max_queued_bytes: u64,
    /// Packets written by every connection of the server.
    pub packets_sent: Arc<AtomicU64>,
    /// Where this connection records the write path's stages.
    pub stages: Arc<StageTimes>,
    /// This connection's `reaction`: its writer notes events written, its reader the next
    /// request.
    pub reaction: Arc<Reaction>,
}

impl ConnectionCtx {
    pub fn new(
        id: ConnId,
        peer: SocketAddr,
        core: mpsc::Sender<CoreMsg>,
        durable: watch::Receiver<Durable>,
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
            packets_sent,
            stages,
            reaction: Arc::default(),
        }
    }
}

/// Serves one client until it disconnects, misbehaves or the core closes it.
pub async fn serve(stream: TcpStream, ctx: ConnectionCtx) {
    let _ = stream.set_nodelay(true);
    let (mut reader, writer) = stream.into_split();
    let mut buf = BytesMut::with_capacity(4096);
    let result = match tokio::time::timeout(
        ctx.handshake_timeout,
        handshake(&mut reader, writer, &mut buf, &ctx),
    )
    .await
    {
        Err(_) => Err(Closed::HandshakeTimeout),
        Ok(Err(e)) => Err(e),
        Ok(Ok(None)) => Ok(()),
        Ok(Ok(Some(writer_done))) => read_requests(&mut reader, &mut buf, &ctx, writer_done).await,
    };
    match result {
        Ok(()) | Err(Closed::Eof) | Err(Closed::Shutdown) => {
            tracing::trace!(peer = %ctx.peer, "connection closed")
        }
        Err(e) => tracing::debug!(peer = %ctx.peer, error = %e, "connection closed"),
    }
    let _ = ctx.core.send(CoreMsg::Disconnected { conn: ctx.id }).await;
}

/// Reads until `buf` holds at least `n` bytes.
async fn fill(reader: &mut OwnedReadHalf, buf: &mut BytesMut, n: usize) -> Result<(), Closed> {
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
    reader: &mut OwnedReadHalf,
    mut writer: OwnedWriteHalf,
    buf: &mut BytesMut,
    ctx: &ConnectionCtx,
) -> Result<Option<oneshot::Receiver<()>>, Closed> {
    fill(reader, buf, 4).await?;
    if let Some(word) = four_letter::is_four_letter_word(&buf[..4]) {
        let (reply, answer) = oneshot::channel();
        ctx.core
            .send(CoreMsg::FourLetter {
                word: word.to_string(),
                reply,
            })
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
    let (outbox, inbox): (Outbox, Inbox) =
        outbox::channel(ctx.max_queued_bytes, ctx.packets_sent.clone());
    let (done_tx, done_rx) = oneshot::channel();
    let durable = ctx.durable.clone();
    let peer = ctx.peer;
    let tracer = Tracer {
        stages: ctx.stages.clone(),
        reaction: ctx.reaction.clone(),
        waited: None,
        event: false,
    };
    tokio::spawn(async move {
        if let Err(e) = write_replies(writer, inbox, durable, tracer).await {
            tracing::debug!(%peer, error = %e, "writer ended");
        }
        let _ = done_tx.send(());
    });
    let msg = CoreMsg::Connect {
        conn: ctx.id,
        peer: ctx.peer,
        request,
        outbox,
    };
    ctx.core.send(msg).await.map_err(|_| Closed::Shutdown)?;
    Ok(Some(done_rx))
}

async fn next_frame(
    reader: &mut OwnedReadHalf,
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
    reader: &mut OwnedReadHalf,
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

/// Runs the writer until the queue ends or the core gives up on this connection (its queue
/// passed the bound): then it stops at once, even in the middle of a write to a full socket,
/// and resets the connection, so what was queued is freed here and in the kernel.
async fn write_replies(
    mut writer: OwnedWriteHalf,
    mut inbox: Inbox,
    durable: watch::Receiver<Durable>,
    mut tracer: Tracer,
) -> std::io::Result<()> {
    let stats = inbox.stats();
    tokio::select! {
        written = write_in_order(&mut writer, &mut inbox, durable, &mut tracer) => written,
        () = stats.overflowed() => {
            // A reset rather than a FIN: the peer is not reading, and a FIN would wait behind
            // the unsent bytes in the socket buffer for as long as it keeps not reading.
            let _ = writer.as_ref().set_zero_linger();
            Ok(())
        }
    }
}

/// Writes replies in order, in batches, each only once the zxid it reveals is durable.
async fn write_in_order(
    writer: &mut OwnedWriteHalf,
    inbox: &mut Inbox,
    mut durable: watch::Receiver<Durable>,
    tracer: &mut Tracer,
) -> std::io::Result<()> {
    // Grown on first use: an idle connection holds no buffer.
    let mut out = Vec::new();
    let mut batch = Batch::default();
    while let Some(first) = inbox.recv().await {
        let mut next = Some(first);
        while let Some(queued) = next.take().or_else(|| inbox.try_recv()) {
            let msg = &queued.outgoing;
            if durable.borrow().zxid < msg.visible_at {
                // Send what is already allowed out, then wait for the log to catch up.
                flush(writer, &mut out, inbox, &mut batch, tracer).await?;
                let reached = durable
                    .wait_for(|d| d.zxid >= msg.visible_at || d.faults != msg.faults)
                    .await
                    .map(|d| *d);
                if !matches!(reached, Ok(d) if d.zxid >= msg.visible_at) {
                    // The disk failed first: this may reveal state that never became durable.
                    return Ok(());
                }
            }
            if msg.stamps.is_some() {
                tracer.took(msg, &durable.borrow());
            }
            tracer.event |= msg.is_event();
            msg.message.encode(&mut out);
            batch.add(&queued);
            if msg.close {
                flush(writer, &mut out, inbox, &mut batch, tracer).await?;
                writer.shutdown().await?;
                return Ok(());
            }
            if out.len() >= WRITE_BATCH {
                flush(writer, &mut out, inbox, &mut batch, tracer).await?;
            }
        }
        flush(writer, &mut out, inbox, &mut batch, tracer).await?;
        if out.capacity() > 4 * WRITE_BATCH {
            // One huge reply must not pin its buffer for the connection's whole life.
            out = Vec::new();
        }
    }
    Ok(())
}

/// Bytes encoded before they are written out, unless the queue runs dry first.
const WRITE_BATCH: usize = 64 * 1024;

/// Writes what is encoded and counts its messages as sent.
async fn flush(
    writer: &mut OwnedWriteHalf,
    out: &mut Vec<u8>,
    inbox: &Inbox,
    batch: &mut Batch,
    tracer: &mut Tracer,
) -> std::io::Result<()> {
    if !out.is_empty() {
        tracer.sending(Instant::now());
        writer.write_all(out).await?;
        out.clear();
    }
    inbox.written(std::mem::take(batch));
    tracer.written(Instant::now());
    Ok(())
}

/// The writer's part of the `trace` module: the reply that last waited for the log, until the
/// write that sends it, and whether a watch event is among what is being written.
struct Tracer {
    stages: Arc<StageTimes>,
    reaction: Arc<Reaction>,
    /// The stamps of the reply that waited, the log's sync that released it, when it woke.
    waited: Option<(RequestStamps, SyncStamps, Instant)>,
    /// A watch event is encoded and not yet written.
    event: bool,
}

impl Tracer {
    /// The writer took `msg`, which was queued before the log was durable that far, and sees
    /// `durable` (now past it, whether the writer had to wait or not). Keeps its stamps, the
    /// first such message's of a write, if that sync is the one that covered it: a later mark
    /// would charge this reply for another batch's stages.
    fn took(&mut self, msg: &Outgoing, durable: &Durable) {
        let woke = Instant::now();
        if let (None, Some(request), Some(sync)) = (self.waited, msg.stamps, durable.sync)
            && sync.after < msg.visible_at
        {
            self.waited = Some((request, sync, woke));
        }
    }

    /// What was encoded goes to the socket now. A watch event among it is noted before the
    /// write: the client may read it and send its next request before the write returns here,
    /// and the reader must then find the note.
    fn sending(&mut self, at: Instant) {
        if std::mem::take(&mut self.event) {
            self.reaction.event_written(&self.stages, at);
        }
    }

    /// What was encoded is on the socket at `at`.
    fn written(&mut self, at: Instant) {
        if let Some((request, sync, woke)) = self.waited.take() {
            self.stages.record_reply(&request, &sync, woke, at);
        }
    }
}
