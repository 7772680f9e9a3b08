//! Apply, the core's side: the state changes through [`crate::apply::apply`] (the function
//! recovery replays with), then the watches its triggers match fire, filtered by ACL.

use std::time::Instant;

use lockkeeper_proto::perms;

use super::Core;
use crate::apply::{self, Applied};
use crate::txn::{Txn, TxnResult};

impl Core {
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
        self.deliver(fired);
        result
    }
}
