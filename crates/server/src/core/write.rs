//! The write: one request, in one straight line at one zxid, the way ZooKeeper's chain of
//! request processors runs it (`PrepRequestProcessor` -> `SyncRequestProcessor` ->
//! `FinalRequestProcessor`):
//!
//! - **zxid**: handed out here, `epoch << 32 | counter`, so zxids keep increasing across
//!   restarts. A rejected write still uses its zxid (the log skips it), as ZooKeeper's do.
//! - **prep**: which prep check (`state::prep`) a write request gets, with the connection's
//!   session and auth; the txn it makes, or the error.
//! - **log**: the txn is appended to the log before it is applied. The append only queues it:
//!   the flush at the end of each batch hands the batch to the log writer (group commit), and
//!   replies wait for its sync in the outboxes.
//! - **apply**: the state changes through `state::apply::apply` (the function recovery replays
//!   with), then the watches its triggers match fire, filtered by ACL.
//! - **reply**: made from what apply returned, and queued (see `send`) to wait for the log.
//!
//! Writes the server makes itself (session creation and expiry, the container reaper) take the
//! same path from the log on.

use std::time::Instant;

use lockkeeper_proto::*;

use super::{Core, now_ms};
use crate::core::reply::{Body, Message, MultiResult};
use crate::state::apply::{self, Applied};
use crate::state::prep::{self, Ctx, Rejected};
use crate::state::txn::{Txn, TxnResult};
use crate::state::watch::ConnId;

impl Core {
    /// A write, in one straight line at one zxid: prep decides the txn (or the error), the log
    /// takes it, apply changes the state and fires watches, the reply goes on the outbox.
    pub(super) fn write_request(&mut self, conn: ConnId, xid: i32, request: &Request) {
        if self.read_only.is_some() {
            let zxid = self.state.last_zxid;
            return self.reply(conn, xid, zxid, ErrorCode::NotReadOnly, Body::Empty);
        }
        let zxid = self.next_zxid();
        let txn = match self.prepare(conn, request) {
            Some(Ok(txn)) => txn,
            Some(Err(rejected)) => {
                self.log.skip(zxid);
                return self.reject(conn, xid, zxid, rejected);
            }
            None => return,
        };
        let time = self.log_txn(zxid, &txn);
        let result = self.apply_at(zxid, time, &txn);
        self.reply_to_write(conn, xid, zxid, request, result);
    }

    /// A write the server makes itself (sessions, the reaper): log and apply at a new zxid.
    pub(super) fn write_txn(&mut self, txn: Txn) -> TxnResult {
        let zxid = self.next_zxid();
        let time = self.log_txn(zxid, &txn);
        self.apply_at(zxid, time, &txn)
    }

    pub(super) fn reap_containers(&mut self) {
        for path in self.state.tree.reapable(now_ms()) {
            tracing::debug!(%path, "removing empty container or expired TTL node");
            self.write_txn(Txn::Delete { path });
        }
    }

    /// The next zxid: `epoch << 32 | counter`, so zxids keep increasing across restarts.
    pub(super) fn next_zxid(&mut self) -> i64 {
        if self.state.last_zxid >> 32 < self.epoch {
            self.state.last_zxid = self.epoch << 32;
        }
        self.state.last_zxid += 1;
        self.state.last_zxid
    }

    /// Appends `txn` at `zxid`; returns the time (ms) it is logged with, which apply uses too.
    pub(super) fn log_txn(&mut self, zxid: i64, txn: &Txn) -> i64 {
        let time = now_ms();
        self.log.append(zxid, time, txn);
        self.txns_since_snapshot += 1;
        time
    }

    /// The txn `request` makes, or why it is refused; `None` if the connection has gone.
    pub(super) fn prepare(&self, conn: ConnId, request: &Request) -> Option<Result<Txn, Rejected>> {
        let c = self.conns.get(&conn)?;
        let session_id = c.session.unwrap_or_default();
        let ctx = Ctx {
            session_id,
            auth: &c.auth,
        };
        let tree = &self.state.tree;
        Some(match request {
            Request::Create(op) => prep::create(tree, &ctx, op).map_err(Rejected::Op),
            Request::Delete(req) => prep::delete(tree, &ctx, req).map_err(Rejected::Op),
            Request::SetData(req) => prep::set_data(tree, &ctx, req).map_err(Rejected::Op),
            Request::SetAcl(req) => prep::set_acl(tree, &ctx, req).map_err(Rejected::Op),
            Request::Multi(ops) => prep::multi(tree, &ctx, ops),
            Request::CloseSession => Ok(Txn::CloseSession { session_id }),
            _ => Err(Rejected::Op(ErrorCode::Unimplemented)),
        })
    }

    /// Answers a refused write: its error, or a multi's result per op.
    pub(super) fn reject(&mut self, conn: ConnId, xid: i32, zxid: i64, rejected: Rejected) {
        match rejected {
            Rejected::Op(code) => self.reply(conn, xid, zxid, code, Body::Empty),
            Rejected::Multi(codes) => {
                let results = codes.into_iter().map(MultiResult::Error).collect();
                self.reply(conn, xid, zxid, ErrorCode::Ok, Body::Multi(results));
            }
        }
    }

    /// Applies a logged txn, fires its watches, returns what it did.
    pub(super) fn apply_at(&mut self, zxid: i64, time: i64, txn: &Txn) -> TxnResult {
        let Applied { result, triggers } = apply::apply(&mut self.state, txn, zxid, time);
        let durable = self.durable_rx.borrow().zxid;
        self.unhidable.note(zxid, txn, &triggers, durable);
        if matches!(txn, Txn::CloseSession { .. }) {
            self.after_burst.departed(Instant::now());
        }
        let mut fired = Vec::new();
        let mut matched = Vec::new();
        for t in triggers {
            self.watches.trigger(&t.path, t.event, &mut matched);
            // The watches are used up either way; only watchers who may read the node hear of it.
            let conns = &self.conns;
            fired.extend(matched.drain(..).filter(|f| {
                conns
                    .get(&f.conn)
                    .is_some_and(|c| c.auth.check(&t.acl, perms::READ).is_ok())
            }));
        }
        if !fired.is_empty() {
            // Whoever this wakes may write at once: the log gives them a moment (see its doc).
            self.log.woke_watchers();
        }
        self.deliver(fired);
        result
    }

    /// The reply to a write that was applied, made from what apply returned.
    pub(super) fn reply_to_write(
        &mut self,
        conn: ConnId,
        xid: i32,
        zxid: i64,
        request: &Request,
        result: TxnResult,
    ) {
        let body = match (request, result) {
            (Request::Create(op), TxnResult::Created { path, stat }) => {
                if op.op == OpCode::Create {
                    Body::Path(path)
                } else {
                    Body::PathStat { path, stat }
                }
            }
            (Request::Multi(ops), TxnResult::Multi(results)) => Body::Multi(
                ops.iter()
                    .zip(results)
                    .map(|(op, result)| match (op, result) {
                        (MultiOp::Create(c), TxnResult::Created { path, stat }) => {
                            MultiResult::Created {
                                op: c.op,
                                path,
                                stat,
                            }
                        }
                        (_, TxnResult::DataSet(stat)) => MultiResult::DataSet(stat),
                        (_, TxnResult::Deleted) => MultiResult::Deleted,
                        _ => MultiResult::Checked,
                    })
                    .collect(),
            ),
            (_, TxnResult::DataSet(stat) | TxnResult::AclSet(stat)) => Body::Stat(stat),
            _ => Body::Empty,
        };
        let close = matches!(request, Request::CloseSession);
        let header = ReplyHeader { xid, zxid, err: 0 };
        self.send(conn, Message::Reply { header, body }, close);
    }
}
