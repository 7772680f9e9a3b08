//! The view: what the four-letter words and `/metrics` read of the core, and nothing else.
//!
//! Taken in the core's task when a word or a scrape asks, so it is consistent: every number
//! in one answer comes from the same moment. `mntr`, `srvr` and `/metrics` all format its
//! [`Stats`], so those views cannot drift apart.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::Ordering;

use super::{Connection, Core};
use crate::config::Config;
use crate::metrics::Stats;
use crate::state::session::Sessions;
use crate::state::watch::{ConnId, Watches};
use crate::trace::StageTimes;

pub(crate) struct View<'c> {
    pub config: &'c Config,
    pub stats: Stats,
    /// The newest zxid handed out.
    pub last_zxid: i64,
    /// Whether writes are refused (the disk fails).
    pub read_only: bool,
    pub conns: &'c HashMap<ConnId, Connection>,
    pub sessions: &'c Sessions,
    pub watches: &'c Watches,
    /// Where durable replies spend their time (`mntr`'s `lk_write_stage_*` keys).
    pub stages: &'c StageTimes,
    /// The log's fdatasyncs so far: replies released by one sync share it, so a workload's
    /// syncs per operation say how many the stages' `fdatasync` time really is.
    pub log_syncs: u64,
    /// The log's groups taken after a thread hand-off (see `disk/log/workers.rs`): what a
    /// group's path pays besides its write and sync.
    pub log_handoffs: u64,
    core: &'c Core,
}

impl View<'_> {
    /// The p50 of the log's recent fdatasyncs (`fsynctime`'s window), in µs; `None` when none
    /// is recent. Computed when asked: only `mntr` shows it.
    pub(crate) fn log_sync_p50_us(&self) -> Option<u64> {
        self.core.timings.fsync.recent_quantile_us(0.5)
    }

    /// The sessions that own ephemerals, with their paths (`dump`).
    pub(crate) fn ephemerals(&self) -> impl Iterator<Item = (&i64, &BTreeSet<String>)> {
        self.core.state.tree.sessions_with_ephemerals()
    }
}

impl Core {
    pub(crate) fn view(&self) -> View<'_> {
        let c = &self.counters;
        let stats = Stats {
            server_state: if self.read_only.is_some() {
                "read-only"
            } else {
                "standalone"
            },
            avg_latency: c.average_latency_ms(),
            min_latency: c.latency_min_us / 1000,
            max_latency: c.latency_max_us / 1000,
            packets_received: c.received,
            packets_sent: c.sent.load(Ordering::Relaxed),
            num_alive_connections: self.conns.len(),
            outstanding_requests: 0,
            znode_count: self.state.tree.len(),
            watch_count: self.watches.count(),
            ephemerals_count: self.state.tree.ephemeral_count(),
            approximate_data_size: self.state.tree.approximate_data_size() as u64,
            uptime: self.started.elapsed().as_millis() as u64,
            global_sessions: self.state.sessions.len(),
        };
        View {
            config: &self.config,
            stats,
            last_zxid: self.state.last_zxid,
            read_only: self.read_only.is_some(),
            conns: &self.conns,
            sessions: &self.state.sessions,
            watches: &self.watches,
            stages: &self.timings.stages,
            log_syncs: self.timings.fsync.count(),
            log_handoffs: self.log.handoffs(),
            core: self,
        }
    }

    /// Puts the core in the state a failing disk leaves it in, for the words' tests.
    #[cfg(test)]
    pub(crate) fn set_read_only_for_test(&mut self) {
        self.read_only = Some((1, std::time::Instant::now()));
    }
}
