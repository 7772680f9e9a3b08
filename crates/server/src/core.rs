//! The core: the one task that owns the data tree, the sessions and the watches.
//!
//! Connections send it decoded requests; it runs them strictly in arrival order through the
//! pipeline's middle stages (prep, log, apply) and queues each reply on the connection's outbox.
//! Owning all state in one task gives ZooKeeper's total order for free and needs no locks; the
//! expensive parts (socket IO, encoding, decoding) run in the connection tasks in parallel.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use lockkeeper_proto::*;
use tokio::sync::{mpsc, oneshot, watch};

use crate::acl::AuthIds;
use crate::apply::{self, Applied, State};
use crate::config::Config;
use crate::datadir_lock::DataDirLock;
use crate::log::{Durable, LogEvent, TxnLog};
use crate::memory::{self, AfterBurst};
use crate::metrics::{Stats, Timings};
use crate::outbox::{Outbox, Refused};
use crate::prep::{self, Ctx, Rejected};
use crate::recovery;
use crate::reply::{Body, Message, MultiResult, Outgoing};
use crate::snapshot;
use crate::txn::{Txn, TxnResult};
use crate::watch::{ConnId, Fired, Watches};

/// What connections (and the server) tell the core.
pub enum CoreMsg {
    Connect {
        conn: ConnId,
        peer: SocketAddr,
        request: ConnectRequest,
        outbox: Outbox,
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
    FourLetter {
        word: String,
        reply: oneshot::Sender<String>,
    },
    /// A scrape of `/metrics` asks for the numbers `mntr` shows.
    Stats {
        reply: oneshot::Sender<Stats>,
    },
}

pub(crate) struct Connection {
    /// Also counts what is queued for the connection and what its writer has written.
    pub outbox: Outbox,
    pub peer: SocketAddr,
    pub session: Option<i64>,
    pub auth: AuthIds,
    pub received: u64,
}

/// Request counters and latency, for `srvr`, `stat` and `mntr`.
#[derive(Default)]
pub(crate) struct Counters {
    pub received: u64,
    /// Packets written to sockets, by every connection's writer.
    pub sent: Arc<AtomicU64>,
    pub latency_min_us: u64,
    pub latency_max_us: u64,
    pub latency_total_us: u64,
    pub latency_count: u64,
}

pub struct Core {
    pub(crate) config: Arc<Config>,
    /// What txns change: the tree, the sessions, the last zxid. Changed only by
    /// [`apply::apply`], and (in place) by a reload after a disk fault.
    pub(crate) state: State,
    pub(crate) watches: Watches,
    pub(crate) conns: HashMap<ConnId, Connection>,
    /// The epoch of zxids this run hands out (one more than the newest recovered).
    pub(crate) epoch: i64,
    pub(crate) log: TxnLog,
    pub(crate) durable_rx: watch::Receiver<Durable>,
    pub(crate) log_events: mpsc::UnboundedReceiver<LogEvent>,
    pub(crate) snapshots: snapshot::SnapshotWriter,
    pub(crate) txns_since_snapshot: u64,
    /// Set while the disk fails: the zxid the log resumes at once it works again, and when the
    /// fault happened (the first probe waits a second).
    pub(crate) read_only: Option<(i64, Instant)>,
    pub(crate) counters: Counters,
    /// The timing summaries of `/metrics` (the log and snapshot writers record theirs).
    pub(crate) timings: Timings,
    pub(crate) started: Instant,
    /// Departures counted so that the memory a burst of them freed goes back to the OS.
    pub(crate) after_burst: AfterBurst,
    /// Held for as long as the core exists. Declared last, so it is dropped (and released)
    /// after the log writer and the snapshot writer above have finished with the directory.
    _data_dir_lock: DataDirLock,
}

pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

impl Counters {
    pub fn average_latency_ms(&self) -> f64 {
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
    pub fn recover(config: Arc<Config>, lock: DataDirLock) -> std::io::Result<Core> {
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
        let durable_rx = log.durable();
        let timings = Timings::new(log.fsync_time(), snapshots.snapshot_time());
        Ok(Core {
            config,
            state,
            watches: Watches::default(),
            conns: HashMap::new(),
            epoch,
            log,
            durable_rx,
            log_events,
            snapshots,
            txns_since_snapshot: 0,
            read_only: None,
            counters: Counters::default(),
            timings,
            started: Instant::now(),
            after_burst: AfterBurst::default(),
            _data_dir_lock: lock,
        })
    }

    pub fn durable(&self) -> watch::Receiver<Durable> {
        self.log.durable()
    }

    pub(crate) fn timings(&self) -> Timings {
        self.timings.clone()
    }

    /// Runs until `rx` closes or `shutdown` flips. Messages are taken in batches so one log flush
    /// covers every write that arrived together (group commit).
    pub async fn run(
        mut self,
        mut rx: mpsc::Receiver<CoreMsg>,
        mut shutdown: watch::Receiver<bool>,
    ) {
        let mut expiry = tokio::time::interval(self.config.expiry_check_interval());
        let mut reaper = tokio::time::interval(self.config.container_check_interval);
        expiry.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        reaper.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // While the disk fails, it is probed once a second.
        let mut probe = tokio::time::interval(crate::durability::PROBE_INTERVAL);
        probe.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut pace = tokio::time::interval(crate::durability::SNAPSHOT_PACE);
        pace.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut batch = Vec::with_capacity(256);
        loop {
            let walking = self.state.tree.capturing() && !self.state.tree.capture_walked();
            let finishing = self.state.tree.capture_walked();
            tokio::select! {
                n = rx.recv_many(&mut batch, 256) => {
                    if n == 0 {
                        break;
                    }
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
        }
    }

    fn handle(&mut self, msg: CoreMsg) {
        match msg {
            CoreMsg::Connect {
                conn,
                peer,
                request,
                outbox,
            } => self.connect(conn, peer, request, outbox),
            CoreMsg::Request {
                conn,
                xid,
                request,
                received,
            } => {
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
            CoreMsg::FourLetter { word, reply } => {
                let _ = reply.send(crate::four_letter::answer(self, &word));
            }
            CoreMsg::Stats { reply } => {
                let _ = reply.send(Stats::of(self));
            }
        }
    }

    /// Once a burst of connections and sessions has gone: shrinks the maps that held them and
    /// has malloc return the freed memory to the OS (see [`crate::memory`]).
    fn release_memory_after_burst(&mut self) {
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

    /// The next zxid: `epoch << 32 | counter`, so zxids keep increasing across restarts.
    pub(crate) fn next_zxid(&mut self) -> i64 {
        if self.state.last_zxid >> 32 < self.epoch {
            self.state.last_zxid = self.epoch << 32;
        }
        self.state.last_zxid += 1;
        self.state.last_zxid
    }

    /// Queues a message for `conn`, never waiting. A connection that has gone away is simply
    /// skipped: its Disconnected message is already on its way to the core. One whose queue
    /// would pass `max_queued_bytes` is closed (its writer drops what is queued and ends, and
    /// its Disconnected follows); its session is left alone.
    pub(crate) fn send(&mut self, conn: ConnId, message: Message, close: bool) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        let outgoing = Outgoing {
            message,
            visible_at: self.state.last_zxid,
            faults: self.durable_rx.borrow().faults,
            close,
        };
        if let Err(Refused::Overflow {
            queued_bytes,
            message_bytes,
        }) = c.outbox.push(outgoing)
        {
            tracing::warn!(
                peer = %c.peer,
                session = format_args!("{:#x}", c.session.unwrap_or_default()),
                queued_bytes,
                message_bytes,
                max_queued_bytes = self.config.max_queued_bytes,
                "client is not reading its replies; closing its connection (the session stays)"
            );
        }
    }

    /// Packets written to sockets so far, by every connection (`mntr`, `srvr`).
    pub(crate) fn packets_sent(&self) -> Arc<AtomicU64> {
        self.counters.sent.clone()
    }

    pub(crate) fn reply(&mut self, conn: ConnId, xid: i32, zxid: i64, err: ErrorCode, body: Body) {
        let header = ReplyHeader {
            xid,
            zxid,
            err: err.code(),
        };
        self.send(conn, Message::Reply { header, body }, false);
    }

    /// Asks a connection's writer to close after what is already queued.
    pub(crate) fn close(&mut self, conn: ConnId) {
        self.send(conn, Message::Text(String::new()), true);
    }

    /// Logs and applies a txn at a new zxid, fires its watches, returns what it did.
    pub(crate) fn write_txn(&mut self, txn: Txn) -> TxnResult {
        let zxid = self.next_zxid();
        self.apply_at(zxid, txn)
    }

    fn apply_at(&mut self, zxid: i64, txn: Txn) -> TxnResult {
        let time = now_ms();
        self.log.append(zxid, time, &txn);
        self.txns_since_snapshot += 1;
        let Applied { result, triggers } = apply::apply(&mut self.state, &txn, zxid, time);
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

    pub(crate) fn deliver(&mut self, fired: Vec<Fired>) {
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

    fn reap_containers(&mut self) {
        for path in self.state.tree.reapable(now_ms()) {
            tracing::debug!(%path, "removing empty container or expired TTL node");
            self.write_txn(Txn::Delete { path });
        }
    }

    /// Write requests: prep, then log and apply, then reply, all at one zxid.
    pub(crate) fn write_request(&mut self, conn: ConnId, xid: i32, request: &Request) {
        if self.read_only.is_some() {
            let zxid = self.state.last_zxid;
            return self.reply(conn, xid, zxid, ErrorCode::NotReadOnly, Body::Empty);
        }
        let zxid = self.next_zxid();
        let Some(c) = self.conns.get(&conn) else {
            return;
        };
        let session_id = c.session.unwrap_or_default();
        let ctx = Ctx {
            session_id,
            auth: &c.auth,
        };
        let prepared = match request {
            Request::Create(op) => prep::create(&self.state.tree, &ctx, op).map_err(Rejected::Op),
            Request::Delete(req) => prep::delete(&self.state.tree, &ctx, req).map_err(Rejected::Op),
            Request::SetData(req) => {
                prep::set_data(&self.state.tree, &ctx, req).map_err(Rejected::Op)
            }
            Request::SetAcl(req) => {
                prep::set_acl(&self.state.tree, &ctx, req).map_err(Rejected::Op)
            }
            Request::Multi(ops) => prep::multi(&self.state.tree, &ctx, ops),
            Request::CloseSession => Ok(Txn::CloseSession { session_id }),
            _ => Err(Rejected::Op(ErrorCode::Unimplemented)),
        };
        let txn = match prepared {
            Ok(txn) => txn,
            Err(Rejected::Op(code)) => {
                self.log.skip(zxid);
                return self.reply(conn, xid, zxid, code, Body::Empty);
            }
            Err(Rejected::Multi(codes)) => {
                self.log.skip(zxid);
                let results = codes.into_iter().map(MultiResult::Error).collect();
                return self.reply(conn, xid, zxid, ErrorCode::Ok, Body::Multi(results));
            }
        };
        let result = self.apply_at(zxid, txn);
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
