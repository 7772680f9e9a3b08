//! Send: every message a connection gets (replies, watch events, the
//! connect response) is queued on its outbox here, stamped with the zxid it reveals, and held
//! there until the log is durable that far. At the end of each batch (after the log's flush,
//! so the log has its group first) the core writes what is already sendable (or, when busy, has the
//! connections' writer tasks write it); the log worker whose sync releases the rest writes that.

use lockkeeper_proto::*;

use std::time::Instant;

use super::Core;
use super::reply::{Body, Message, Outgoing, Refused};
use crate::state::watch::{ConnId, Fired};
use crate::trace::RequestStamps;

impl Core {
    /// Queues a message for `conn`, never waiting. A connection that has gone away is simply
    /// skipped: its Disconnected message is already on its way to the core. One whose queue
    /// would pass `max_queued_bytes` is closed (its writer drops what is queued and ends, and
    /// its Disconnected follows); its session is left alone.
    pub(super) fn send(&mut self, conn: ConnId, message: Message, close: bool) {
        self.send_at(conn, message, close, self.state.last_zxid);
    }

    /// [`Core::send`] for a message that reveals the state at `visible_at`, which is at most the
    /// last zxid and at least what this connection has already been shown.
    pub(super) fn send_at(&mut self, conn: ConnId, message: Message, close: bool, visible_at: i64) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        c.seen = c.seen.max(visible_at);
        let durable = *self.durable_rx.borrow();
        // Only what must wait for the log is traced: the rest never meets the log's stages.
        let stamps =
            self.handling
                .filter(|_| visible_at > durable.zxid)
                .map(|(received, taken)| RequestStamps {
                    received,
                    taken,
                    queued: Instant::now(),
                });
        let outgoing = Outgoing {
            message,
            visible_at,
            faults: durable.faults,
            close,
            stamps,
        };
        match c.outbox.push(outgoing) {
            Ok(()) => {
                if !c.unflushed {
                    c.unflushed = true;
                    self.unflushed.push(conn);
                }
            }
            Err(Refused::Overflow {
                queued_bytes,
                message_bytes,
            }) => {
                tracing::warn!(
                    peer = %c.peer,
                    session = format_args!("{:#x}", c.session.unwrap_or_default()),
                    queued_bytes,
                    message_bytes,
                    max_queued_bytes = self.config.max_queued_bytes,
                    "client is not reading its replies; closing its connection (the session stays)"
                );
            }
            Err(Refused::Closing) => {}
        }
    }

    /// Writes what the batch queued and the log already lets out; the rest waits on the
    /// durable mark, whose publication writes it. When the core is `busy` (it has a backlog of
    /// requests), the connections' writer tasks write instead, in parallel with the core: a
    /// reply then costs a wake-up, but the core's next batch does not wait for the sockets.
    pub(super) fn flush_outboxes(&mut self, busy: bool) {
        for conn in self.unflushed.drain(..) {
            if let Some(c) = self.conns.get_mut(&conn) {
                c.unflushed = false;
                if busy {
                    c.outbox.hand_to_writer();
                } else {
                    c.outbox.flush();
                }
            }
        }
    }

    /// A reply whose header carries `zxid`, revealing the last zxid.
    pub(super) fn reply(&mut self, conn: ConnId, xid: i32, zxid: i64, err: ErrorCode, body: Body) {
        let header = ReplyHeader {
            xid,
            zxid,
            err: err.code(),
        };
        self.send(conn, Message::Reply { header, body }, false);
    }

    /// A reply that shows the state at `point` (see `point`): its header carries that zxid.
    pub(super) fn reply_at(
        &mut self,
        conn: ConnId,
        xid: i32,
        point: i64,
        err: ErrorCode,
        body: Body,
    ) {
        let header = ReplyHeader {
            xid,
            zxid: point,
            err: err.code(),
        };
        self.send_at(conn, Message::Reply { header, body }, false, point);
    }

    /// Asks a connection's writer to close after what is already queued.
    pub(super) fn close(&mut self, conn: ConnId) {
        self.send(conn, Message::Text(String::new()), true);
    }

    pub(super) fn deliver(&mut self, fired: Vec<Fired>) {
        for Fired { conn, event, path } in fired {
            let header = ReplyHeader {
                xid: XID_NOTIFICATION,
                zxid: -1,
                err: 0,
            };
            let body = Body::Event(WatcherEvent {
                event_type: event.code(),
                state: KeeperState::SyncConnected.code(),
                path,
            });
            self.send(conn, Message::Reply { header, body }, false);
        }
    }
}
