//! Outbox: one connection's messages on their way from the core to its socket, held until the
//! log is durable as far as each reveals, bounded in bytes.
//!
//! Whoever makes a message sendable writes it, with a non-blocking write on the socket:
//! - the core, at the end of each batch, writes what is sendable by then (a read's reply, an
//!   event that reveals nothing new, what the log made durable meanwhile), unless it has a
//!   backlog: then the connection's writer task writes it, beside the core;
//! - a log worker, when it publishes a durable mark, writes what that mark released (a write's
//!   reply, the events the write fired; see [`crate::disk::durable`]).
//!
//! So a reply leaves on the thread that last held it back, and no other thread is woken to send
//! it. What would need waiting, or hold the core or a log worker up, is left to the connection's
//! writer task: a full socket, more than [`INLINE_BYTES`] at once, a busy core's replies, the
//! shutdown after a close, a connection the core gave up on.
//!
//! The core must never wait for a connection: it owns every session, and one client that stops
//! reading its socket would stall them all. So the core never waits on a socket; instead each
//! connection may hold at most `max_queued_bytes` (see [`crate::Config::max_queued_bytes`]) of
//! messages queued but not yet written. A message that would pass the bound closes the
//! connection instead: its writer stops at once, without writing what is queued, and resets the
//! connection. The session behind it is left alone and may re-attach on a new connection, as
//! after any disconnect; its pending replies are lost like on any connection loss.
//!
//! Invariants:
//! - **In order, whole, once**: messages are encoded and written under the outbox's lock, in
//!   the order queued; one the mark does not yet release holds back every message behind it.
//! - **Never ahead of the disk**: a message is written only once the durable mark reaches its
//!   `visible_at`. If a disk fault came first, the state it reveals may never be durable: the
//!   connection ends instead, and nothing queued is written.
//! - **Never forgotten**: an outbox whose first message waits for the mark is on the mark's
//!   waiting list, so the publication that releases it writes it.
//! - **Counted**: `queued_*` counts what the core has queued and nobody has yet written to the
//!   socket (including what waits for the log and what is encoded but not yet written);
//!   `sent_*` what was written. Both are counted in packets (close markers are not packets) and
//!   in [`Outgoing::memory`] bytes, so `cons` and `mntr` say what really happened, and the
//!   bound applies to memory.
//! - A connection always accepts one message whatever its size when nothing else is queued, so
//!   a bound smaller than the largest reply never makes a connection unusable.
//! - **A panic costs one connection**: one while a message is encoded ends that connection, as a
//!   failed write does, and the thread that was writing (the core, a log worker) goes on.

use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;

use tokio::sync::Notify;

use crate::core::reply::{Message, Outgoing, Refused, ReplyQueue};
use crate::disk::durable::{Durable, DurableMark, Verdict, Waiter};
use crate::metrics::ConnStats;
use crate::net::socket::WriteHalf;
use crate::sync::lock;
use crate::trace::SendTrace;

/// Bytes encoded before they are written out, unless the queue runs dry first.
const WRITE_BATCH: usize = 64 * 1024;
/// Bytes the core or a log worker writes to one connection at a time; the writer task writes
/// the rest, so a big backlog on one connection does not hold up the core or the log.
const INLINE_BYTES: usize = 4 * WRITE_BATCH;

/// The core's end of one connection's outbox. Dropping it (the core let go of the connection,
/// or the core itself is gone) closes the connection once what is queued has been written.
pub(crate) struct Outbox(Arc<Shared>);

/// The connection's writer task's end: what needs waiting for.
pub(crate) struct WriterEnd(Arc<Shared>);

struct Shared {
    socket: WriteHalf,
    mark: Arc<DurableMark>,
    limit: u64,
    stats: ConnStats,
    /// Packets written by every connection of the server (`mntr`'s zk_packets_sent).
    server_sent: Arc<AtomicU64>,
    /// Wakes the connection's writer task: something needs waiting for, or the connection ends.
    writer: Notify,
    state: Mutex<State>,
}

struct State {
    queue: VecDeque<Queued>,
    /// Encoded messages not yet written: `out[written..]` is still to go.
    out: Vec<u8>,
    written: usize,
    /// What the messages in `out` were counted as.
    encoded: Counted,
    /// On the mark's waiting list.
    waiting: bool,
    /// Set once nothing more will be written after `out`.
    end: Option<End>,
    /// The core has queued a close, or let go of the connection: what is queued is all the
    /// peer has left to read, and the writer task waits for it only so long (see
    /// [`crate::Config::close_linger`]).
    closing: bool,
    /// Bytes written to the socket so far, so the writer task can tell a peer that reads
    /// slowly from one that reads nothing.
    total_written: u64,
    trace: SendTrace,
}

/// A message with what it was counted as.
struct Queued {
    outgoing: Outgoing,
    counted: Counted,
}

#[derive(Debug, Default, Clone, Copy)]
struct Counted {
    bytes: u64,
    packets: u64,
}

impl Counted {
    fn add(&mut self, other: Counted) {
        self.bytes += other.bytes;
        self.packets += other.packets;
    }
}

/// Why nothing more is written.
#[derive(Debug)]
enum End {
    /// A close was taken: once `out` is written, the connection's write side shuts.
    Close,
    /// What the next message reveals may never be durable (a disk fault, or the log stopped).
    Lost,
    /// Writing failed: the socket refused a write, encoding a message panicked, or the peer
    /// took nothing for `close_linger` after the close.
    Broken(io::ErrorKind, String),
    /// The core gave up on the connection (its queue passed the bound).
    Overflow,
}

/// What the writer task does next, after [`WriterEnd::pump`].
#[derive(Debug)]
pub(crate) enum Next {
    /// Nothing sendable is left to write: wait to be woken.
    Idle,
    /// More is sendable than one pump of the core or a log worker writes: pump again.
    More,
    /// The socket took no more: wait until it is writable, then pump again.
    SocketFull,
    /// Everything up to a close is written: shut the write side down and end.
    Shutdown,
    /// End now, writing nothing more: `Ok` after a disk fault, the error of a failed write.
    Stop(io::Result<()>),
    /// The core gave up on the connection: reset it and end.
    Reset,
}

/// An outbox writing to `socket`, releasing messages as `mark` moves, holding at most `limit`
/// bytes: the core's end and the writer task's. `trace` records the stages of what it writes,
/// `server_sent` counts the packets every outbox of the server has written.
pub(crate) fn new(
    socket: WriteHalf,
    mark: Arc<DurableMark>,
    limit: u64,
    server_sent: Arc<AtomicU64>,
    trace: SendTrace,
) -> (Outbox, WriterEnd) {
    let shared = Arc::new(Shared {
        socket,
        mark,
        limit,
        stats: ConnStats::default(),
        server_sent,
        writer: Notify::new(),
        state: Mutex::new(State {
            queue: VecDeque::new(),
            // Grown on first use: an idle connection holds no buffer.
            out: Vec::new(),
            written: 0,
            encoded: Counted::default(),
            waiting: false,
            end: None,
            closing: false,
            total_written: 0,
            trace,
        }),
    });
    (Outbox(shared.clone()), WriterEnd(shared))
}

impl ReplyQueue for Outbox {
    fn stats(&self) -> &ConnStats {
        &self.0.stats
    }

    /// Queues `outgoing` unless that would pass the bound; never waits for the socket (at
    /// most for another thread's pump: non-blocking writes of up to [`INLINE_BYTES`]). What is
    /// queued is written by the next [`Outbox::flush`] or by the publication of the durable mark
    /// that releases it.
    fn push(&self, outgoing: Outgoing) -> Result<(), Refused> {
        let shared = &*self.0;
        let mut state = lock(&shared.state);
        if state.end.is_some() {
            return Err(Refused::Closing);
        }
        let stats = &shared.stats;
        let bytes = outgoing.memory() as u64;
        let queued_bytes = stats.queued_bytes.load(Ordering::Acquire);
        if queued_bytes > 0 && queued_bytes + bytes > shared.limit {
            end_now(&mut state, stats, End::Overflow);
            drop(state);
            shared.writer.notify_one();
            return Err(Refused::Overflow {
                queued_bytes,
                message_bytes: bytes,
            });
        }
        enqueue(&mut state, stats, outgoing, bytes);
        Ok(())
    }

    /// Writes what is sendable now; leaves to the writer task what needs waiting for.
    fn flush(&self) {
        self.0.flush();
    }

    /// Has the connection's writer task write what is sendable, on its own thread; when
    /// nothing is sendable yet, only puts the outbox on the mark's waiting list (the
    /// publication that releases it writes it, with no task to wake).
    fn hand_to_writer(&self) {
        let shared = &self.0;
        let mut state = lock(&shared.state);
        if state.end.is_none() && state.written == state.out.len() {
            match shared.judge_next(&mut state) {
                None | Some((Verdict::Wait, _)) => return,
                Some(_) => {}
            }
        }
        drop(state);
        shared.writer.notify_one();
    }
}

impl Drop for Outbox {
    /// The core sends nothing more: close after what is queued, whatever the bound.
    fn drop(&mut self) {
        let mut state = lock(&self.0.state);
        if state.end.is_none() {
            let mark = self.0.mark.get();
            let outgoing = Outgoing {
                message: Message::Text(String::new()),
                // Behind everything queued, so at most what they reveal.
                visible_at: 0,
                faults: mark.faults,
                close: true,
                stamps: None,
            };
            let bytes = outgoing.memory() as u64;
            enqueue(&mut state, &self.0.stats, outgoing, bytes);
        }
        drop(state);
        self.0.flush();
    }
}

impl WriterEnd {
    /// Writes what is sendable, up to [`INLINE_BYTES`] (see [`Shared::pump`]: the core and the
    /// log workers wait for the outbox's lock meanwhile), and says what to do next.
    pub(crate) fn pump(&self) -> Next {
        self.0.pump(INLINE_BYTES)
    }

    /// Writing cannot go on (waiting for the socket failed, or the peer took nothing for
    /// `close_linger` after the close): nothing more is written, and what is queued is dropped.
    pub(crate) fn broken(&self, error: &io::Error) {
        let mut state = lock(&self.0.state);
        // An end already set (a close, a lost session) is what the connection ends with.
        let end = state
            .end
            .take()
            .unwrap_or_else(|| End::Broken(error.kind(), error.to_string()));
        end_now(&mut state, &self.0.stats, end);
    }

    /// Waits until the writer task is woken: by a pump that left it something to wait for, or
    /// by the core giving up on the connection.
    pub(crate) async fn woken(&self) {
        self.0.writer.notified().await;
    }

    /// How far the peer has got, once the core has closed the connection (or let go of it)
    /// behind what is queued; `None` before. Progress is the bytes written to the socket so
    /// far, and the bytes the kernel still holds for the peer (unsent or unacknowledged; `None`
    /// if it will not say). Either moves while the peer reads: the second also while the socket
    /// drains a large send buffer's worth before it reports writable again.
    pub(crate) fn closed_progress(&self) -> Option<(u64, Option<u64>)> {
        let written = {
            let state = lock(&self.0.state);
            if !state.closing {
                return None;
            }
            state.total_written
        };
        let mut held: libc::c_int = 0;
        // SAFETY: the descriptor belongs to the socket this outbox owns, open while it lives;
        // TIOCOUTQ (SIOCOUTQ for TCP) writes one int.
        let rc = unsafe {
            libc::ioctl(
                std::os::fd::AsRawFd::as_raw_fd(self.0.socket.tcp()),
                libc::TIOCOUTQ,
                &mut held,
            )
        };
        Some((written, (rc == 0).then_some(held as u64)))
    }

    /// Waits until the socket may take more.
    pub(crate) async fn writable(&self) -> io::Result<()> {
        self.0.socket.writable().await
    }

    /// Shuts the write side down after the last message (the peer reads an end of stream).
    pub(crate) async fn shutdown(&self) -> io::Result<()> {
        self.0.socket.shutdown().await
    }

    /// Resets the connection: the peer is not reading, and a FIN would wait behind the unsent
    /// bytes in the socket buffer for as long as it keeps not reading.
    pub(crate) fn reset(&self) {
        let socket = socket2::SockRef::from(self.0.socket.tcp());
        let _ = socket.set_linger(Some(std::time::Duration::ZERO));
        let _ = socket.shutdown(std::net::Shutdown::Both);
    }
}

/// An outbox on the durable mark's waiting list, which holds it weakly: a connection nobody
/// else holds any more has nothing left to send.
impl Waiter for Shared {
    /// The durable mark took this outbox off its waiting list: write what it released.
    fn released(self: Arc<Self>) {
        let next = {
            let mut state = lock(&self.state);
            state.waiting = false;
            self.pump_locked(&mut state, INLINE_BYTES)
        };
        self.after_pump(next);
    }
}

impl Shared {
    fn flush(self: &Arc<Self>) {
        let next = self.pump(INLINE_BYTES);
        self.after_pump(next);
    }

    /// After a pump by the core or a log worker: what needs waiting for goes to the writer task.
    fn after_pump(&self, next: Next) {
        if !matches!(next, Next::Idle) {
            self.writer.notify_one();
        }
    }

    /// Encodes and writes every message the durable mark lets out, in order, until none is
    /// left, the socket is full or about `budget` bytes are written; puts the outbox on the
    /// mark's waiting list when the next message waits for the log. Never waits.
    fn pump(self: &Arc<Self>, budget: usize) -> Next {
        self.pump_locked(&mut lock(&self.state), budget)
    }

    /// [`Shared::pump`] with the outbox's lock already held.
    fn pump_locked(self: &Arc<Self>, state: &mut State, budget: usize) -> Next {
        let mut spent = 0;
        loop {
            if spent >= budget && state.end.is_none() {
                return Next::More;
            }
            if state.end.is_none() {
                self.encode_sendable(state);
            }
            if state.written == state.out.len() {
                // What a TLS session took but the socket did not is not written yet.
                if matches!(state.end, None | Some(End::Close)) {
                    match self.socket.try_flush() {
                        Ok(()) => {}
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                            return Next::SocketFull;
                        }
                        Err(e) => {
                            end_now(state, &self.stats, End::Broken(e.kind(), e.to_string()));
                            continue;
                        }
                    }
                }
                return match &state.end {
                    None => Next::Idle,
                    Some(End::Close) => Next::Shutdown,
                    Some(End::Lost) => Next::Stop(Ok(())),
                    Some(End::Broken(kind, error)) => {
                        Next::Stop(Err(io::Error::new(*kind, error.clone())))
                    }
                    Some(End::Overflow) => Next::Reset,
                };
            }
            state.trace.sending(Instant::now());
            match self.socket.try_write(&state.out[state.written..]) {
                Ok(n) => {
                    state.written += n;
                    state.total_written += n as u64;
                    spent += n;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Next::SocketFull,
                Err(e) => {
                    end_now(state, &self.stats, End::Broken(e.kind(), e.to_string()));
                    continue;
                }
            }
            if state.written == state.out.len() {
                self.sent(state);
            }
        }
    }

    /// Moves messages the mark lets out from the queue into `out`, up to a write's worth.
    fn encode_sendable(self: &Arc<Self>, state: &mut State) {
        while state.out.len() - state.written < WRITE_BATCH {
            let mark = match self.judge_next(state) {
                None | Some((Verdict::Wait, _)) => return,
                Some((Verdict::Drop, _)) => {
                    state.end = Some(End::Lost);
                    drop_queue(state, &self.stats);
                    return;
                }
                Some((Verdict::Send, mark)) => mark,
            };
            let Some(Queued { outgoing, counted }) = state.queue.pop_front() else {
                return;
            };
            // Counted as encoded first, so that a panic below drops it with the rest.
            state.encoded.add(counted);
            // Encoding runs on the core or a log worker, which write for every connection: a
            // bug that panics in one message must not take that thread with it (the core owns
            // every session, a log worker every sync). Caught here, under the outbox's lock, so
            // no half-encoded frame is ever visible: the connection ends as after a failed write.
            let encoded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                state.trace.took(
                    outgoing.stamps,
                    outgoing.visible_at,
                    mark.sync,
                    outgoing.is_event(),
                );
                outgoing.message.encode(&mut state.out);
            }));
            if encoded.is_err() {
                tracing::error!("encoding a message for a connection panicked: closing it");
                let end = End::Broken(
                    io::ErrorKind::Other,
                    "encoding a message panicked".to_string(),
                );
                end_now(state, &self.stats, end);
                return;
            }
            if outgoing.close {
                state.end = Some(End::Close);
                drop_queue(state, &self.stats);
                return;
            }
        }
    }

    /// The mark's verdict on the first queued message (`None` when nothing is queued), with the
    /// mark it was judged by. A message that waits puts the outbox on the mark's waiting list,
    /// judged again under the list's lock, which the publisher takes too.
    fn judge_next(self: &Arc<Self>, state: &mut State) -> Option<(Verdict, Durable)> {
        let next = state.queue.front()?;
        let (visible_at, faults) = (next.outgoing.visible_at, next.outgoing.faults);
        let mark = self.mark.get();
        let verdict = mark.verdict(visible_at, faults);
        if verdict != Verdict::Wait || state.waiting {
            return Some((verdict, mark));
        }
        let verdict = self
            .mark
            .wait(Arc::downgrade(self) as Weak<dyn Waiter>, visible_at, faults);
        state.waiting = verdict == Verdict::Wait;
        Some((verdict, self.mark.get()))
    }

    /// Everything in `out` is on the socket: count it as sent.
    fn sent(&self, state: &mut State) {
        let stats = &self.stats;
        let counted = std::mem::take(&mut state.encoded);
        uncount(stats, counted);
        stats.sent_bytes.fetch_add(counted.bytes, Ordering::AcqRel);
        stats
            .sent_packets
            .fetch_add(counted.packets, Ordering::AcqRel);
        self.server_sent
            .fetch_add(counted.packets, Ordering::Relaxed);
        state.trace.written(Instant::now());
        state.written = 0;
        if state.out.capacity() > 4 * WRITE_BATCH {
            // One huge reply must not pin its buffer for the connection's whole life.
            state.out = Vec::new();
        } else {
            state.out.clear();
        }
    }
}

/// Drops every message still queued (nothing more is written): they no longer count as queued.
/// Ends the connection with `end` at once: what is encoded and queued is dropped, not written.
fn end_now(state: &mut State, stats: &ConnStats, end: End) {
    state.end = Some(end);
    drop_encoded(state, stats);
    drop_queue(state, stats);
}

fn drop_queue(state: &mut State, stats: &ConnStats) {
    let mut dropped = Counted::default();
    for queued in state.queue.drain(..) {
        dropped.add(queued.counted);
    }
    uncount(stats, dropped);
}

/// Drops what is encoded and not yet written (the connection ends without writing it).
fn drop_encoded(state: &mut State, stats: &ConnStats) {
    state.out = Vec::new();
    state.written = 0;
    uncount(stats, std::mem::take(&mut state.encoded));
}

/// Queues `outgoing` (which holds `bytes` of memory) behind what is there, counted as queued
/// (a close marker is no packet).
fn enqueue(state: &mut State, stats: &ConnStats, outgoing: Outgoing, bytes: u64) {
    let counted = Counted {
        bytes,
        packets: u64::from(outgoing.is_packet()),
    };
    stats
        .queued_bytes
        .fetch_add(counted.bytes, Ordering::AcqRel);
    stats
        .queued_packets
        .fetch_add(counted.packets, Ordering::AcqRel);
    state.closing |= outgoing.close;
    state.queue.push_back(Queued { outgoing, counted });
}

fn uncount(stats: &ConnStats, dropped: Counted) {
    stats
        .queued_bytes
        .fetch_sub(dropped.bytes, Ordering::AcqRel);
    stats
        .queued_packets
        .fetch_sub(dropped.packets, Ordering::AcqRel);
}

#[cfg(test)]
impl WriterEnd {
    /// Takes every queued message off without writing it (tests that drive the core by hand).
    pub(crate) fn take_queued(&self) -> Vec<Outgoing> {
        let mut state = lock(&self.0.state);
        let mut taken = Counted::default();
        let messages = state
            .queue
            .drain(..)
            .map(|q| {
                taken.add(q.counted);
                q.outgoing
            })
            .collect();
        uncount(&self.0.stats, taken);
        messages
    }
}

/// Outboxes on real loopback connections, for tests.
#[cfg(test)]
pub(crate) mod testing {
    use super::*;
    use tokio::net::{TcpListener, TcpStream};

    /// An outbox writing to one end of a new loopback connection (its two ends), and the
    /// client's end of the connection.
    pub(crate) async fn pair(mark: Arc<DurableMark>, limit: u64) -> (Outbox, WriterEnd, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let client = TcpStream::connect(listener.local_addr().expect("address"))
            .await
            .expect("connect");
        let (server, _) = listener.accept().await.expect("accept");
        let (_, write) = crate::net::socket::Socket::Plain(server).split();
        let trace = SendTrace::new(Arc::default(), Arc::default());
        let (outbox, writer) = new(write, mark, limit, Arc::default(), trace);
        (outbox, writer, client)
    }
}

#[cfg(test)]
mod tests {
    use super::testing::pair;
    use super::*;
    use crate::core::reply::{Body, Message};
    use lockkeeper_proto::ReplyHeader;
    use std::time::Duration;
    use tokio::io::AsyncReadExt;
    use tokio::net::TcpStream;

    /// A watch event on `path`, revealing the state at `visible_at`.
    fn event(path: &str, visible_at: i64) -> Outgoing {
        Outgoing {
            message: Message::Reply {
                header: ReplyHeader {
                    xid: -1,
                    zxid: -1,
                    err: 0,
                },
                body: Body::Path(path.to_string()),
            },
            visible_at,
            faults: 0,
            close: false,
            stamps: None,
        }
    }

    fn encoded(messages: &[Outgoing]) -> Vec<u8> {
        let mut out = Vec::new();
        for m in messages {
            m.message.encode(&mut out);
        }
        out
    }

    /// Reads exactly `n` bytes, or fails after a few seconds.
    async fn read_n(client: &mut TcpStream, n: usize) -> Vec<u8> {
        let mut got = vec![0; n];
        tokio::time::timeout(Duration::from_secs(5), client.read_exact(&mut got))
            .await
            .expect("the bytes arrive in time")
            .expect("read");
        got
    }

    /// Whether anything arrives within 100 ms.
    async fn nothing_arrives(client: &mut TcpStream) -> bool {
        let mut byte = [0u8; 1];
        tokio::time::timeout(Duration::from_millis(100), client.read(&mut byte))
            .await
            .is_err()
    }

    fn queued_packets(outbox: &Outbox) -> u64 {
        outbox.stats().queued_packets.load(Ordering::Acquire)
    }

    fn sent_packets(outbox: &Outbox) -> u64 {
        outbox.stats().sent_packets.load(Ordering::Acquire)
    }

    /// A message whose encoding panics, revealing the state at `visible_at`.
    fn panics(visible_at: i64) -> Outgoing {
        Outgoing {
            message: Message::Text(crate::core::reply::ENCODE_PANICS.to_string()),
            ..event("/", visible_at)
        }
    }

    #[tokio::test]
    async fn a_panic_while_encoding_ends_that_connection_and_the_publication_writes_the_next() {
        let mark = DurableMark::new(10);
        let (broken, broken_writer, _broken_client) = pair(mark.clone(), 1 << 20).await;
        let (fine, _fine_writer, mut fine_client) = pair(mark.clone(), 1 << 20).await;
        broken.push(event("/before", 20)).unwrap();
        broken.push(panics(20)).unwrap();
        broken.push(event("/after", 20)).unwrap();
        fine.push(event("/b", 20)).unwrap();
        // Both wait for the mark, the broken one first on its list.
        broken.flush();
        fine.flush();
        // The log worker's part: publishing writes both; the panic stays inside the first.
        mark.publish(|d| d.zxid = 20).write();
        let want = encoded(&[event("/b", 20)]);
        assert_eq!(read_n(&mut fine_client, want.len()).await, want);
        match broken_writer.pump() {
            Next::Stop(Err(e)) => assert!(e.to_string().contains("panicked"), "{e}"),
            other => panic!("the broken connection's writer was told {other:?}"),
        }
        assert_eq!(queued_packets(&broken), 0, "what it had queued is dropped");
        assert_eq!(
            broken.stats().queued_bytes.load(Ordering::Acquire),
            0,
            "and uncounted, the message that panicked too"
        );
        assert_eq!(broken.push(event("/later", 20)), Err(Refused::Closing));
        // The core's part: its flush does not panic either.
        let (core_side, core_writer, _client) = pair(mark.clone(), 1 << 20).await;
        core_side.push(panics(20)).unwrap();
        core_side.flush();
        assert!(matches!(core_writer.pump(), Next::Stop(Err(_))));
        assert_eq!(core_side.stats().queued_bytes.load(Ordering::Acquire), 0);
    }

    #[tokio::test]
    async fn a_flush_writes_what_the_mark_lets_out_and_counts_it_sent() {
        let mark = DurableMark::new(10);
        let (outbox, _writer, mut client) = pair(mark, 1 << 20).await;
        let messages = [event("/a", 5), event("/b", 10)];
        let one = messages[0].memory() as u64;
        for m in [event("/a", 5), event("/b", 10)] {
            outbox.push(m).unwrap();
        }
        assert_eq!(queued_packets(&outbox), 2);
        assert_eq!(outbox.stats().queued_bytes.load(Ordering::Acquire), 2 * one);
        outbox.flush();
        let want = encoded(&messages);
        assert_eq!(read_n(&mut client, want.len()).await, want);
        assert_eq!(queued_packets(&outbox), 0);
        assert_eq!(outbox.stats().queued_bytes.load(Ordering::Acquire), 0);
        assert_eq!(sent_packets(&outbox), 2);
        assert_eq!(outbox.stats().sent_bytes.load(Ordering::Acquire), 2 * one);
    }

    #[tokio::test]
    async fn a_message_waits_for_the_mark_and_holds_back_what_follows_until_its_publication() {
        let mark = DurableMark::new(10);
        let (outbox, _writer, mut client) = pair(mark.clone(), 1 << 20).await;
        let messages = [event("/a", 10), event("/b", 12), event("/c", 11)];
        for m in [event("/a", 10), event("/b", 12), event("/c", 11)] {
            outbox.push(m).unwrap();
        }
        outbox.flush();
        let first = encoded(&messages[..1]);
        assert_eq!(read_n(&mut client, first.len()).await, first);
        assert!(
            nothing_arrives(&mut client).await,
            "/b waits for 12, /c behind it"
        );
        assert_eq!(queued_packets(&outbox), 2);

        mark.publish(|d| d.zxid = 11).write();
        assert!(nothing_arrives(&mut client).await, "11 releases neither");
        mark.publish(|d| d.zxid = 12).write();
        let rest = encoded(&messages[1..]);
        assert_eq!(read_n(&mut client, rest.len()).await, rest);
        assert_eq!((queued_packets(&outbox), sent_packets(&outbox)), (0, 3));
    }

    #[tokio::test]
    async fn a_disk_fault_before_the_mark_drops_what_waits_and_ends_the_connection() {
        let mark = DurableMark::new(10);
        let (outbox, writer, mut client) = pair(mark.clone(), 1 << 20).await;
        outbox.push(event("/a", 10)).unwrap();
        outbox.push(event("/b", 11)).unwrap();
        outbox.flush();
        mark.publish(Durable::fault).write();
        let first = encoded(&[event("/a", 10)]);
        assert_eq!(read_n(&mut client, first.len()).await, first);
        assert!(matches!(writer.pump(), Next::Stop(Ok(()))));
        assert!(
            nothing_arrives(&mut client).await,
            "/b may reveal lost state"
        );
        assert_eq!(queued_packets(&outbox), 0, "what was dropped is not queued");
        assert_eq!(outbox.push(event("/c", 10)), Err(Refused::Closing));
    }

    #[tokio::test]
    async fn the_bound_refuses_a_message_and_resets_but_one_big_message_always_fits() {
        let mark = DurableMark::new(0);
        let one = event("/x", 1).memory() as u64;
        let (outbox, _writer, _client) = pair(mark.clone(), 16).await;
        outbox.push(event(&"x".repeat(1000), 1)).unwrap();
        assert!(one > 16, "the estimate counts more than the path: {one}");

        let (outbox, writer, _client) = pair(mark, 3 * one).await;
        for _ in 0..3 {
            outbox.push(event("/x", 1)).unwrap();
        }
        match outbox.push(event("/x", 1)) {
            Err(Refused::Overflow {
                queued_bytes,
                message_bytes,
            }) => assert_eq!((queued_bytes, message_bytes), (3 * one, one)),
            other => panic!("expected an overflow, got {other:?}"),
        }
        assert_eq!(outbox.push(event("/y", 1)), Err(Refused::Closing));
        assert_eq!(queued_packets(&outbox), 0, "everything queued is dropped");
        assert!(matches!(writer.pump(), Next::Reset));
        tokio::time::timeout(Duration::from_secs(5), writer.woken())
            .await
            .expect("the writer task is woken for the reset");
    }

    #[tokio::test]
    async fn a_full_socket_is_left_to_the_writer_task_and_everything_arrives_in_order() {
        let mark = DurableMark::new(0);
        let (outbox, writer, mut client) = pair(mark, 64 << 20).await;
        let big = "x".repeat(60_000);
        let messages: Vec<Outgoing> = (0..200).map(|_| event(&big, 0)).collect();
        let want = encoded(&messages);
        for m in messages {
            outbox.push(m).unwrap();
        }
        // Each pump writes at most INLINE_BYTES; 12 MB do not fit in a socket nobody reads.
        let mut pumps = 0;
        let next = loop {
            pumps += 1;
            match writer.pump() {
                Next::More if pumps < 1000 => continue,
                next => break next,
            }
        };
        assert!(
            matches!(next, Next::SocketFull),
            "{next:?} after {pumps} pumps"
        );
        assert!(pumps > 1, "one pump stops at INLINE_BYTES");
        let task = tokio::spawn(async move {
            loop {
                match writer.pump() {
                    Next::Idle => return,
                    Next::More => tokio::task::yield_now().await,
                    Next::SocketFull => writer.writable().await.expect("writable"),
                    other => panic!("unexpected {other:?}"),
                }
            }
        });
        assert_eq!(read_n(&mut client, want.len()).await, want);
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("the writer finishes")
            .expect("no panic");
        assert_eq!((queued_packets(&outbox), sent_packets(&outbox)), (0, 200));
    }

    #[tokio::test]
    async fn a_close_writes_what_came_before_then_shuts_down() {
        let mark = DurableMark::new(0);
        let (outbox, writer, mut client) = pair(mark, 1 << 20).await;
        outbox.push(event("/a", 0)).unwrap();
        let mut close = event("/b", 0);
        close.close = true;
        outbox.push(close).unwrap();
        assert!(matches!(writer.pump(), Next::Shutdown));
        writer.shutdown().await.expect("shutdown");
        let want = encoded(&[event("/a", 0), event("/b", 0)]);
        let mut got = Vec::new();
        tokio::time::timeout(Duration::from_secs(5), client.read_to_end(&mut got))
            .await
            .expect("end of stream in time")
            .expect("read");
        assert_eq!(got, want);
        assert_eq!(outbox.push(event("/c", 0)), Err(Refused::Closing));
    }

    #[tokio::test]
    async fn dropping_the_core_end_closes_after_what_is_queued_even_when_it_waits_for_the_mark() {
        let mark = DurableMark::new(10);
        let (outbox, writer, mut client) = pair(mark.clone(), 1 << 20).await;
        outbox.push(event("/a", 11)).unwrap();
        drop(outbox);
        assert!(
            matches!(writer.pump(), Next::Idle),
            "/a and the close wait for 11"
        );
        assert!(nothing_arrives(&mut client).await);
        mark.publish(|d| d.zxid = 11).write();
        assert!(matches!(writer.pump(), Next::Shutdown));
        writer.shutdown().await.expect("shutdown");
        let mut got = Vec::new();
        tokio::time::timeout(Duration::from_secs(5), client.read_to_end(&mut got))
            .await
            .expect("end of stream in time")
            .expect("read");
        assert_eq!(got, encoded(&[event("/a", 11)]));
    }

    #[tokio::test]
    async fn a_stopped_log_ends_what_waits_for_it_and_the_mark_does_not_keep_it_alive() {
        let mark = DurableMark::new(10);
        let (outbox, writer, mut client) = pair(mark.clone(), 1 << 20).await;
        outbox.push(event("/a", 11)).unwrap();
        outbox.flush();
        mark.publish(|d| d.stopped = true).write();
        assert!(matches!(writer.pump(), Next::Stop(Ok(()))));
        assert!(nothing_arrives(&mut client).await);

        let (outbox, writer, _client) = pair(mark.clone(), 1 << 20).await;
        let weak = Arc::downgrade(&writer.0);
        outbox.push(event("/a", 12)).unwrap();
        outbox.flush();
        drop((outbox, writer));
        assert!(weak.upgrade().is_none(), "the waiting list holds it weakly");
    }

    /// Whether the writer task would be woken within 100 ms.
    async fn writer_woken(writer: &WriterEnd) -> bool {
        tokio::time::timeout(Duration::from_millis(100), writer.woken())
            .await
            .is_ok()
    }

    #[tokio::test]
    async fn a_busy_core_wakes_the_writer_only_for_what_is_sendable() {
        let mark = DurableMark::new(10);
        let (outbox, writer, mut client) = pair(mark.clone(), 1 << 20).await;
        outbox.push(event("/a", 11)).unwrap();
        outbox.hand_to_writer();
        assert!(
            !writer_woken(&writer).await,
            "/a waits for the log: no task to wake"
        );
        mark.publish(|d| d.zxid = 11).write();
        let a = encoded(&[event("/a", 11)]);
        assert_eq!(
            read_n(&mut client, a.len()).await,
            a,
            "the publication wrote it"
        );

        outbox.push(event("/b", 11)).unwrap();
        outbox.hand_to_writer();
        assert!(
            writer_woken(&writer).await,
            "/b is sendable: the writer writes it"
        );
        assert!(matches!(writer.pump(), Next::Idle));
        let b = encoded(&[event("/b", 11)]);
        assert_eq!(read_n(&mut client, b.len()).await, b);
    }
}
