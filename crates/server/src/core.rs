//! The core: the one task that owns the data tree, the sessions and the watches.
//!
//! Connections send it decoded requests; it runs them strictly in arrival order and queues each
//! reply on the connection's outbox. Its files read as the pipeline, one way:
//!
//! ```text
//! dispatch -> write: prep -> log -> apply -> reply     (a write, at one zxid)
//! dispatch -> read -> reply                            (anything else, at the last zxid;
//!                                                       point: getChildren, getData and exists
//!                                                       at the earliest point they show)
//! ```
//!
//! with `sessions` (connect, attach, expiry), `durability` (snapshots, the disk fault), `view`
//! (what the four-letter words and `/metrics` read), `send` (queueing each message on its
//! connection's outbox) and `reply` (what a message is, its encoding, and the `ReplyQueue`
//! an outbox is to the core) beside them. The fields are private to this module: the rest of the
//! server reaches the core through its messages and its view. Owning all state in one task
//! gives ZooKeeper's total order for free and needs no locks; the expensive parts (socket IO,
//! encoding, decoding) run in the connection tasks in parallel.
//!
//! The core calls down into `state` (prep, apply) and `disk` (the log, snapshots, recovery);
//! nothing there calls back up into it or into `net`, and the core knows `net` only through
//! the `ReplyQueue` a connection hands it.

mod dispatch;
mod durability;
mod point;
mod read;
pub(crate) mod reply;
mod send;
mod sessions;
mod view;
mod write;

pub(crate) use view::View;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use lockkeeper_proto::*;
use tokio::sync::{mpsc, oneshot, watch};

use crate::config::Config;
use crate::disk::datadir_lock::DataDirLock;
use crate::disk::durable::{Durable, DurableMark};
use crate::disk::log::{LogEvent, TxnLog};
use crate::disk::recovery;
use crate::disk::snapshot;
use crate::memory::AfterBurst;
use crate::metrics::{Stats, Timings};
use crate::state::acl::AuthIds;
use crate::state::apply::State;
use crate::state::watch::{ConnId, Watches};
use reply::ReplyQueue;

/// What connections (and the server) tell the core.
pub(crate) enum CoreMsg {
    Connect {
        conn: ConnId,
        peer: SocketAddr,
        /// The subject of the client's certificate, on the secure port (the `x509` id).
        x509: Option<String>,
        request: ConnectRequest,
        outbox: Box<dyn ReplyQueue>,
    },
    Request {
        conn: ConnId,
        xid: i32,
        request: Request,
        received: Instant,
    },
    /// A request that did not decode: answered with `err`, in order, then the connection is
    /// closed if `close` (ZooKeeper drops a client that sends an unknown opcode).
    Malformed {
        conn: ConnId,
        xid: i32,
        err: ErrorCode,
        close: bool,
    },
    Disconnected {
        conn: ConnId,
    },
    /// Reads the core's [`View`] in its task, so every number read comes from one moment
    /// (a four-letter word: `net::four_letter` formats it, the core knows no words).
    Inspect(Box<dyn FnOnce(&View<'_>) + Send>),
    /// A scrape of `/metrics` asks for the numbers `mntr` shows.
    Stats {
        reply: oneshot::Sender<Stats>,
    },
}

pub(crate) struct Connection {
    /// Also counts what is queued for the connection and what its writer has written.
    pub outbox: Box<dyn ReplyQueue>,
    pub peer: SocketAddr,
    pub session: Option<i64>,
    pub auth: AuthIds,
    /// Where the connection's SASL exchange stands.
    pub sasl: crate::sasl::Exchange,
    pub received: u64,
    /// The newest zxid any message queued for this connection reveals: a later reply never
    /// reveals less (see `point`).
    pub seen: i64,
    /// Something was queued for it since the core last flushed its outbox.
    pub unflushed: bool,
}

/// Request counters and latency, for `srvr`, `stat` and `mntr`.
#[derive(Default)]
pub(crate) struct Counters {
    pub received: u64,
    /// Packets written to sockets, by every connection's outbox.
    pub sent: Arc<AtomicU64>,
    pub latency_min_us: u64,
    pub latency_max_us: u64,
    pub latency_total_us: u64,
    pub latency_count: u64,
}

pub(crate) struct Core {
    config: Arc<Config>,
    /// What txns change: the tree, the sessions, the last zxid. Changed only by
    /// [`crate::state::apply::apply`], and (in place) by a reload after a disk fault.
    state: State,
    watches: Watches,
    /// What reads at a point must not leave out (see `point`).
    unhidable: point::Unhidable,
    conns: HashMap<ConnId, Connection>,
    /// Connections with messages queued since the end of the last batch, flushed after it.
    unflushed: Vec<ConnId>,
    /// The epoch of zxids this run hands out (one more than the newest recovered).
    epoch: i64,
    log: TxnLog,
    durable_rx: watch::Receiver<Durable>,
    log_events: mpsc::UnboundedReceiver<LogEvent>,
    snapshots: snapshot::SnapshotWriter,
    txns_since_snapshot: u64,
    /// Set while the disk fails: the zxid the log resumes at once it works again, and when the
    /// fault happened (the first probe waits a second).
    read_only: Option<(i64, Instant)>,
    counters: Counters,
    /// The timing summaries of `/metrics` (the log and snapshot writers record theirs).
    timings: Timings,
    /// While a request is handled: when its frame was decoded and when the core took it. Every
    /// message queued meanwhile carries them (see [`crate::trace`]).
    handling: Option<(Instant, Instant)>,
    started: Instant,
    /// Departures counted so that the memory a burst of them freed goes back to the OS.
    after_burst: AfterBurst,
    /// Held for as long as the core exists. Declared last, so it is dropped (and released)
    /// after the log writer and the snapshot writer above have finished with the directory.
    _data_dir_lock: DataDirLock,
}

/// A batch of more messages (requests, connects, disconnects) than this means the core has a
/// backlog: it leaves the writing of the replies it made sendable to the connections' writer
/// tasks, which run beside it, rather than write them itself (see `reply`).
const BUSY_BATCH: usize = 32;

pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

impl Counters {
    pub(crate) fn average_latency_ms(&self) -> f64 {
        if self.latency_count == 0 {
            return 0.0;
        }
        self.latency_total_us as f64 / self.latency_count as f64 / 1000.0
    }
}

impl Core {
    /// Rebuilds the state from `config.data_dir` and starts the log and snapshot writers.
    /// Takes the data dir's lock, so nothing can be read or repaired without holding it.
    /// Blocking (it reads the whole data dir): run it off the async runtime.
    pub(crate) fn recover(config: Arc<Config>, lock: DataDirLock) -> std::io::Result<Core> {
        let started = Instant::now();
        let recovered =
            recovery::recover(&config.data_dir, recovery::Mode::Repair).map_err(|e| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!(
                        "{e}; check it with `lockkeeper verify {}`",
                        config.data_dir.display()
                    ),
                )
            })?;
        let (log_events_tx, log_events) = mpsc::unbounded_channel();
        let log = TxnLog::open(
            &config.data_dir,
            config.sync,
            config.follow_window,
            recovered.last_zxid,
            log_events_tx,
        )?;
        let snapshots = snapshot::spawn_writer(config.data_dir.clone(), config.snap_retain)?;
        let snapshot_zxid = recovered.snapshot_zxid;
        let replayed = recovered.replayed;
        let mut state = recovered.into_state();
        state.resume(
            config.min_session_timeout(),
            config.max_session_timeout(),
            Instant::now(),
        );
        let epoch = (state.last_zxid >> 32) + 1;
        tracing::info!(
            nodes = state.tree.len(),
            sessions = state.sessions.len(),
            snapshot = ?snapshot_zxid.map(|z| format!("{z:#x}")),
            replayed,
            last_zxid = format_args!("{:#x}", state.last_zxid),
            epoch,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "recovered data dir"
        );
        let durable_rx = log.durable().subscribe();
        let timings = Timings::new(log.fsync_time(), snapshots.snapshot_time());
        Ok(Core {
            config,
            state,
            watches: Watches::default(),
            unhidable: point::Unhidable::default(),
            conns: HashMap::new(),
            unflushed: Vec::new(),
            epoch,
            log,
            durable_rx,
            log_events,
            snapshots,
            txns_since_snapshot: 0,
            read_only: None,
            counters: Counters::default(),
            timings,
            handling: None,
            started: Instant::now(),
            after_burst: AfterBurst::default(),
            _data_dir_lock: lock,
        })
    }

    /// The log's durable mark, which releases every connection's replies.
    pub(crate) fn durable(&self) -> Arc<DurableMark> {
        self.log.durable()
    }

    pub(crate) fn timings(&self) -> Timings {
        self.timings.clone()
    }

    /// Runs until `rx` closes or `shutdown` flips. Messages are taken in batches so one log flush
    /// covers every write that arrived together (group commit).
    pub(crate) async fn run(
        mut self,
        mut rx: mpsc::Receiver<CoreMsg>,
        mut shutdown: watch::Receiver<bool>,
    ) {
        let mut expiry = tokio::time::interval(self.config.expiry_check_interval());
        let mut reaper = tokio::time::interval(self.config.container_check_interval);
        expiry.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        reaper.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // While the disk fails, it is probed once a second.
        let mut probe = tokio::time::interval(durability::PROBE_INTERVAL);
        probe.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut pace = tokio::time::interval(durability::SNAPSHOT_PACE);
        pace.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut batch = Vec::with_capacity(256);
        loop {
            let mut handled = 0;
            let walking = self.state.tree.capturing() && !self.state.tree.capture_walked();
            let finishing = self.state.tree.capture_walked();
            tokio::select! {
                n = rx.recv_many(&mut batch, 256) => {
                    if n == 0 {
                        break;
                    }
                    handled = n;
                    for msg in batch.drain(..) {
                        self.handle(msg);
                    }
                }
                Some(event) = self.log_events.recv() => self.on_log_event(event),
                _ = expiry.tick(), if self.read_only.is_none() => {
                    self.expire_sessions();
                    self.release_memory_after_burst();
                }
                _ = reaper.tick(), if self.read_only.is_none() => self.reap_containers(),
                _ = probe.tick(), if self.read_only.is_some() => self.probe_disk(),
                // A snapshot walks the tree a chunk per turn, between batches of requests.
                _ = pace.tick(), if walking => self.snapshot_step(),
                _ = self.durable_rx.changed(), if finishing => self.snapshot_step(),
                _ = shutdown.changed() => break,
            }
            self.maybe_start_snapshot();
            self.log.flush();
            self.flush_outboxes(handled > BUSY_BATCH);
        }
    }

    /// Packets written to sockets so far, by every connection (`mntr`, `srvr`).
    pub(crate) fn packets_sent(&self) -> Arc<AtomicU64> {
        self.counters.sent.clone()
    }
}
