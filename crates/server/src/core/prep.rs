//! Prep, the core's side: which prep check a write request gets, with the connection's
//! session and auth. A rejected write still uses its zxid (the log skips it), as ZooKeeper's do.

use lockkeeper_proto::*;

use super::Core;
use crate::prep::{self, Ctx, Rejected};
use crate::reply::{Body, MultiResult};
use crate::txn::Txn;
use crate::watch::ConnId;

impl Core {
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
}
