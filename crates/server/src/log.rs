//! The log stage of the pipeline: where a txn becomes durable before anyone may see it.
//!
//! The core appends every txn here before applying it, and calls [`TxnLog::flush`] at the end of
//! each batch of requests; replies and watch events wait (in the connection writers) until the
//! durable zxid published here reaches the state they reveal. This build keeps the tree in
//! memory only, so a flush makes the batch "durable" at once; the on-disk log with group commit
//! replaces the body of these three methods without changing their callers.

use tokio::sync::watch;

use crate::txn::Txn;

pub struct TxnLog {
    last_appended: i64,
    durable: watch::Sender<i64>,
}

impl TxnLog {
    pub fn in_memory(last_zxid: i64) -> TxnLog {
        TxnLog {
            last_appended: last_zxid,
            durable: watch::Sender::new(last_zxid),
        }
    }

    /// Queues `txn` at `zxid` for the log.
    pub fn append(&mut self, zxid: i64, _time: i64, _txn: &Txn) {
        self.last_appended = zxid;
    }

    /// Records a zxid that has nothing to log (a rejected write still consumes a zxid, as in
    /// ZooKeeper), so the durable mark can pass it.
    pub fn skip(&mut self, zxid: i64) {
        self.last_appended = zxid;
    }

    /// Ends a batch: everything appended so far is to become durable.
    pub fn flush(&mut self) {
        self.durable.send_if_modified(|durable| {
            let changed = *durable != self.last_appended;
            *durable = self.last_appended;
            changed
        });
    }

    /// The durable zxid, watched by connection writers.
    pub fn durable(&self) -> watch::Receiver<i64> {
        self.durable.subscribe()
    }
}
