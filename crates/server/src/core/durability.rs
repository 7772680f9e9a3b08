//! The core's side of durability: when to take snapshots, and what to do when the disk fails.
//!
//! On a failed write or sync, memory may hold txns that never reached the disk (the core applies
//! before the log syncs, and only replies wait). So the core throws its state away and reloads
//! what is durable, closes every connection (their pending requests see a connection loss, never
//! a false success), and serves reads only. Once a probe write and sync succeed, writes resume
//! in a new epoch.

use std::time::{Duration, Instant};

use super::{Core, point};
use crate::disk::log::LogEvent;
use crate::disk::recovery;
use crate::disk::snapshot::{Encoder, SnapshotMsg};
use crate::state::session::SessionRecord;
use crate::state::tree::NodeSink;
use crate::state::txn::Txn;
use crate::state::watch::Watches;

/// Nodes a snapshot records per tick of its pacing timer. The walk is paced rather than run flat
/// out: on a small machine a flat-out walk (and the writer thread behind it) takes the CPU that
/// requests need. 250 nodes a millisecond writes a million-node snapshot in about four seconds.
const SNAPSHOT_CHUNK: usize = 250;
/// How often a failing disk is probed.
pub(crate) const PROBE_INTERVAL: Duration = Duration::from_secs(1);
/// How often the walk takes its next chunk.
pub(crate) const SNAPSHOT_PACE: Duration = Duration::from_millis(1);

impl Core {
    /// Starts a snapshot once enough txns have been logged since the last one.
    pub(super) fn maybe_start_snapshot(&mut self) {
        if self.txns_since_snapshot < self.config.snap_count
            || self.state.tree.capturing()
            || self.read_only.is_some()
        {
            return;
        }
        self.txns_since_snapshot = 0;
        // The log rolls here, so the segments before the snapshot can be purged later.
        self.log.roll();
        let sessions: Vec<SessionRecord> = self
            .state
            .sessions
            .iter()
            .map(|s| SessionRecord {
                id: s.id,
                timeout_ms: s.timeout.as_millis() as i32,
                passwd: s.passwd,
            })
            .collect();
        let zxid = self.state.last_zxid;
        tracing::info!(
            zxid = format_args!("{zxid:#x}"),
            nodes = self.state.tree.len(),
            "starting snapshot"
        );
        let mut encoder = Encoder::new(zxid, &sessions, &self.state.tree.acls());
        let header = encoder.take_bytes();
        self.state.tree.start_capture(zxid, Box::new(encoder));
        let _ = self.snapshots.send(SnapshotMsg::Start { zxid });
        let _ = self.snapshots.send(SnapshotMsg::Chunk(header));
    }

    /// Walks one more chunk, or finishes once the walk is done and the log has caught up.
    pub(super) fn snapshot_step(&mut self) {
        if !self.state.tree.capture_walked() {
            let bytes = self.state.tree.capture_step(SNAPSHOT_CHUNK);
            let _ = self.snapshots.send(SnapshotMsg::Chunk(bytes));
        }
        // A snapshot must not hold state the log could still lose: wait for the log.
        if self.state.tree.capture_walked() && self.log.durable_zxid() >= self.capture_zxid() {
            let bytes = self.state.tree.finish_capture();
            let _ = self.snapshots.send(SnapshotMsg::Finish(bytes));
        }
    }

    fn capture_zxid(&self) -> i64 {
        // Only called while a capture exists; its zxid is at most the last zxid handed out.
        self.state
            .tree
            .capture_zxid()
            .unwrap_or(self.state.last_zxid)
    }

    pub(super) fn on_log_event(&mut self, event: LogEvent) {
        match event {
            LogEvent::Failed(error) => self.enter_read_only(&error),
            LogEvent::StillFailing(error) => {
                tracing::warn!(%error, "disk still failing; writes stay refused");
            }
            LogEvent::Resumed => self.leave_read_only(),
        }
    }

    fn enter_read_only(&mut self, error: &str) {
        tracing::error!(%error, "disk fault: reloading durable state, closing connections, refusing writes until the disk recovers");
        self.log.abandon_pending();
        // Only what the mark covers: the log cuts off the rest when it resumes (see
        // `recover_through`), and while read-only nothing past the mark could be revealed.
        let durable = self.log.durable_zxid();
        let recovered = match recovery::recover_through(
            &self.config.data_dir,
            recovery::Mode::Check,
            durable,
        ) {
            Ok(recovered) => recovered,
            Err(e) => {
                // Memory is ahead of a disk that cannot even be read back: nothing safe to serve.
                tracing::error!(error = %e, "cannot reload durable state after a disk fault; stopping");
                std::process::exit(70);
            }
        };
        // The same rebuilding a start does, so the reloaded sessions are what a restart gives.
        self.state = recovered.into_state();
        self.state.resume(
            self.config.min_session_timeout(),
            self.config.max_session_timeout(),
            Instant::now(),
        );
        self.conns.clear();
        self.watches = Watches::default();
        // What it noted was about txns the reload has just undone.
        self.unhidable = point::Unhidable::default();
        self.txns_since_snapshot = 0;
        self.epoch += 1;
        self.read_only = Some((self.epoch << 32 | 1, Instant::now()));
    }

    pub(super) fn probe_disk(&mut self) {
        if let Some((next_zxid, since)) = self.read_only
            && since.elapsed() >= PROBE_INTERVAL
        {
            self.log.resume(next_zxid);
        }
    }

    fn leave_read_only(&mut self) {
        self.read_only = None;
        tracing::warn!("disk recovered: accepting writes again");
        // Sessions created while read-only exist only in memory: log them now.
        let unlogged: Vec<(i64, i32, [u8; 16])> = self
            .state
            .sessions
            .iter()
            .filter(|s| !s.logged)
            .map(|s| (s.id, s.timeout.as_millis() as i32, s.passwd))
            .collect();
        for (session_id, timeout_ms, passwd) in unlogged {
            self.write_txn(Txn::CreateSession {
                session_id,
                timeout_ms,
                passwd,
            });
        }
    }
}
