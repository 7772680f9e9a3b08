//! Log, the core's side: zxids are handed out here and every txn is appended to the log
//! before it is applied. The append only queues it: the flush at the end of each batch hands
//! the batch to the log writer (group commit), and replies wait for its sync in the writers.

use super::{Core, now_ms};
use crate::txn::Txn;

impl Core {
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
}
