//! Dispatch: the core's entry. Each message from a connection (or the server) is taken in
//! arrival order; a request is checked against its session, then routed: a write to `write`
//! (prep -> log -> apply -> reply), anything else to `read`. Latency is recorded here, for both.

use std::time::Instant;

use lockkeeper_proto::*;

use super::{Core, CoreMsg};
use crate::core::reply::Body;
use crate::memory;

use crate::state::watch::ConnId;

impl Core {
    pub(super) fn handle(&mut self, msg: CoreMsg) {
        match msg {
            CoreMsg::Connect {
                conn,
                peer,
                x509,
                request,
                outbox,
            } => self.connect(conn, peer, x509, request, outbox),
            CoreMsg::Request {
                conn,
                xid,
                request,
                received,
            } => {
                // Cleared on every way out, so messages the core queues on its own (expiry,
                // the reaper) never carry a request's stamps.
                self.handling = Some((received, Instant::now()));
                self.session_request(conn, xid, request, received);
                self.handling = None;
            }
            CoreMsg::Malformed {
                conn,
                xid,
                err,
                close,
            } => {
                self.reply(conn, xid, self.state.last_zxid, err, Body::Empty);
                if close {
                    self.close(conn);
                }
            }
            CoreMsg::Disconnected { conn } => self.disconnect(conn),
            CoreMsg::Inspect(read) => read(&self.view()),
            CoreMsg::Stats { reply } => {
                let _ = reply.send(self.view().stats);
            }
        }
    }

    /// A request on a connection: checked against its session, then run.
    fn session_request(&mut self, conn: ConnId, xid: i32, request: Request, received: Instant) {
        self.counters.received += 1;
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        c.received += 1;
        // A connection whose session moved to a newer connection (or ended) must not act
        // for it: an ephemeral created with no session would outlive everyone.
        let Some(session) = c.session else {
            let zxid = self.state.last_zxid;
            return self.reply(conn, xid, zxid, ErrorCode::SessionMoved, Body::Empty);
        };
        // Requests pipelined behind a closeSession find their session gone.
        if self.state.sessions.get(session).is_none() {
            let zxid = self.state.last_zxid;
            return self.reply(conn, xid, zxid, ErrorCode::SessionExpired, Body::Empty);
        }
        self.state.sessions.touch(session, Instant::now());
        let write = request.is_write();
        self.request(conn, xid, request);
        self.record_latency(received, write);
    }

    /// Where a request goes: a write down the pipeline (prep, log, apply, reply), anything else
    /// to the reads, which answer at the last zxid.
    fn request(&mut self, conn: ConnId, xid: i32, request: Request) {
        if request.is_write() {
            return self.write_request(conn, xid, &request);
        }
        self.read_request(conn, xid, request);
    }

    /// Once a burst of connections and sessions has gone: shrinks the maps that held them and
    /// has malloc return the freed memory to the OS (see [`crate::memory`]).
    pub(super) fn release_memory_after_burst(&mut self) {
        if self.after_burst.due(Instant::now()) {
            memory::shrink(&mut self.conns);
            self.state.sessions.shrink();
            self.after_burst.trim();
        }
    }

    /// One latency feeds both `mntr`'s min/avg/max and the `readlatency`/`updatelatency`
    /// summaries, so the two views agree.
    fn record_latency(&mut self, received: Instant, write: bool) {
        let now = Instant::now();
        let took = now.saturating_duration_since(received);
        let summary = if write {
            &self.timings.update
        } else {
            &self.timings.read
        };
        summary.observe_at(took, now);
        let us = took.as_micros() as u64;
        let c = &mut self.counters;
        c.latency_min_us = if c.latency_count == 0 {
            us
        } else {
            c.latency_min_us.min(us)
        };
        c.latency_max_us = c.latency_max_us.max(us);
        c.latency_total_us += us;
        c.latency_count += 1;
    }
}
