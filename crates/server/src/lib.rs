//! Keeper: a coordination server that speaks the Apache ZooKeeper client protocol.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! let config = lockkeeper_server::Config { listen: "127.0.0.1:0".parse().unwrap(), ..Default::default() };
//! let server = lockkeeper_server::Server::start(config).await?;
//! println!("ZooKeeper clients can connect to {}", server.local_addr());
//! server.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! # The chain
//!
//! A request goes through the stages of ZooKeeper's chain of request processors, in this
//! order (wired in one place, [`Server::start`], as ZooKeeper's `setupRequestProcessors` does):
//!
//! ```text
//! net::connection (decode frame)
//!   -> core: dispatch -> write: prep (validate, ACL, build txn)
//!                             -> log (append; the batch is handed to a log worker, which
//!                                writes what is queued as a group and syncs it: on a
//!                                multi-threaded runtime a task that does this on the core's
//!                                own thread once the core yields, the thread's other tasks
//!                                moved to another thread; elsewhere two threads, up to two
//!                                groups' syncs in flight)
//!                             -> apply (tree and sessions, fire watches)
//!                             -> reply (queued on the outbox, stamped with the zxid it reveals)
//!          dispatch -> read -> reply (anything else, at the last zxid)
//!   -> net::outbox (holds each message until the log is durable that far, then encodes it and
//!      writes it in request order: the log worker whose sync released it writes it, or the
//!      core at the end of its batch when it was sendable already; the connection's writer
//!      task takes what would hold them up: a full socket, a large backlog, a busy core's)
//! ```
//!
//! The connection task runs per client; dispatch, prep, log and apply run in the single core
//! task, which owns all state, so nothing waits for the disk there: replies wait in their
//! outboxes, and the durable mark (`disk::durable`) lets them out. The state changes only
//! through `state::apply::apply`, which recovery replays the log with. Each stage of the
//! write path is timed for every reply that waits for the log (`trace`; `mntr`'s
//! `lk_write_stage_*` keys).
//!
//! # Layout
//!
//! Imports go one way, down this list: `net` → `core` → `state` and `disk` (and `disk` →
//! `state`); the leaves at the end are used by all and use only each other. Where a lower
//! stage hands work back up, it does so through a trait of its own that the upper one
//! implements: the core queues each message on its connection's outbox as a
//! `core::reply::ReplyQueue`, and the durable mark releases outboxes as `disk::durable`'s
//! `Waiter`.
//!
//! - `net`: the sockets. `accept` (the accept loop, maxClientCnxns), `connection` (one client:
//!   handshake, framing, decoding, its writer task), `outbox` (a connection's messages held
//!   until durable, then written in order), `socket` (a connection's two ends, plain or TLS),
//!   `tls` (the secure listener's reloadable files and handshake), `four_letter` (`ruok`,
//!   `mntr`, ...), `metrics_http` (`GET /metrics`, plain or TLS).
//! - `core`: the one task that owns the state. `dispatch` (the entry: session checks, routing,
//!   latency), `write` (zxid, prep, log, apply, the write's reply), `read` (the reads), `point`
//!   (the earliest state a read may show, so it need not wait for others' writes), `send`
//!   (queueing on outboxes), `reply` (what the core sends, its encoding, the `ReplyQueue` an
//!   outbox is to the core), `sessions` (connect, attach, expiry), `durability` (snapshots,
//!   the disk fault), `view` (what the four-letter words and `/metrics` read).
//! - `state`: what the server knows, no IO and no file format. `tree` (the znodes, and the
//!   capture a snapshot is taken from), `session`, `watch`, `acl`, `path`, `txn`, `prep`
//!   (request to txn), `apply` (the one apply).
//! - `disk`: the data dir and every file format. `log` (the txn log and its workers),
//!   `durable` (the durable mark, and the waiters it releases, known only by a trait),
//!   `snapshot` (the encoder and the background writer), [`recovery`] (rebuilding the state; also
//!   `lockkeeper verify`), [`datadir_lock`] (one server per data dir).
//! - Leaves: [`config`](Config), `metrics` (the counters, a connection's among them, and their Prometheus text), `trace`
//!   (the write path's stage timings), `memory` (giving memory back after a burst), `sync` (the
//!   one way to take a std mutex), `sasl` (SASL DIGEST-MD5: the users, one connection's
//!   exchange).
//!
//! # Public API
//!
//! [`Server`] and [`Config`] (with [`SyncMode`], [`ServerFiles`] for TLS and [`SaslUsers`]); for `lockkeeper verify` and the fault suite,
//! [`recovery`] (with the [`Txn`]s of [`recovery::history`]) and [`datadir_lock`]; for
//! `serve`'s checks of its options and the benchmarks, [`FOUR_LETTER_WORDS`] and [`Stage`];
//! with the `fuzzing` feature, `fuzzing` (the fuzz targets' entry points, not API). Everything
//! else is private to the crate.

#![warn(missing_docs)]

mod config;
mod core;
mod disk;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
mod memory;
mod metrics;
mod net;
mod sasl;
mod state;
mod sync;
mod trace;

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch as signal};
use tokio::task::JoinHandle;

pub use crate::config::{Config, SaslUsers, ServerFiles, SyncMode};
use crate::core::{Core, CoreMsg};
use crate::disk::datadir_lock::DataDirLock;
pub use crate::disk::{datadir_lock, recovery};
use crate::net::accept::{self, Shared};
pub use crate::net::four_letter::WORDS as FOUR_LETTER_WORDS;
use crate::net::metrics_http;
pub use crate::state::txn::Txn;
pub use crate::trace::Stage;

/// A running server. Dropping it stops it (abruptly); [`Server::shutdown`] stops it cleanly.
///
/// The server holds its data dir's lock until its core is gone: after [`Server::shutdown`]
/// returns, another server may start on the directory at once; after a drop, as soon as the
/// runtime has dropped the aborted core task.
pub struct Server {
    local_addr: SocketAddr,
    secure_addr: Option<SocketAddr>,
    /// The TLS files (`Config::tls`), for the secure listener and the metrics endpoint, and
    /// [`Server::reload_tls`].
    tls: Option<Arc<net::tls::Acceptor>>,
    metrics_addr: Option<SocketAddr>,
    metrics_source: MetricsSource,
    shutdown: signal::Sender<bool>,
    accept: Option<JoinHandle<()>>,
    metrics: Option<JoinHandle<()>>,
    core: Option<JoinHandle<()>>,
}

impl Server {
    /// Locks `config.data_dir`, binds `config.listen` (port 0 picks a free port), recovers the
    /// data dir and starts serving. Returns once the socket is listening, so a client may
    /// connect as soon as this returns.
    ///
    /// Errors name what failed: a data dir held by another server is `ResourceBusy` carrying a
    /// [`datadir_lock::InUse`] (the directory and the holder's pid); a data dir recovery refuses
    /// is `InvalidData`, naming the file and offset; a failed bind names the address.
    pub async fn start(config: Config) -> std::io::Result<Server> {
        config.validate()?;
        // The lock comes first: a second server on a held dir is refused before it binds a port
        // or reads (let alone repairs) a single file of the dir.
        let dir = config.data_dir.clone();
        let lock = tokio::task::spawn_blocking(move || DataDirLock::exclusive(&dir))
            .await
            .map_err(std::io::Error::other)??;
        let listener = accept::bind(config.listen, config.listen_backlog).map_err(|e| {
            std::io::Error::new(e.kind(), format!("cannot listen on {}: {e}", config.listen))
        })?;
        let local_addr = listener.local_addr()?;
        let tls = match &config.tls {
            Some(files) => Some(Arc::new(net::tls::Acceptor::new(files.clone())?)),
            None => None,
        };
        let secure = match (config.secure_listen, &tls) {
            (Some(addr), Some(acceptor)) => {
                let listener = accept::bind(addr, config.listen_backlog).map_err(|e| {
                    std::io::Error::new(e.kind(), format!("cannot listen on {addr}: {e}"))
                })?;
                Some((listener, acceptor.clone()))
            }
            _ => None,
        };
        let secure_addr = match &secure {
            Some((listener, _)) => Some(listener.local_addr()?),
            None => None,
        };
        let config = Arc::new(Config {
            listen: local_addr,
            secure_listen: secure_addr,
            ..config
        });
        let recovering = config.clone();
        let core = tokio::task::spawn_blocking(move || Core::recover(recovering, lock))
            .await
            .map_err(std::io::Error::other)?
            .map_err(|e| match e.kind() {
                // Recovery's own message names the file and offset.
                std::io::ErrorKind::InvalidData => e,
                kind => std::io::Error::new(
                    kind,
                    format!("data dir {}: {e}", config.data_dir.display()),
                ),
            })?;
        let durable = core.durable();
        let packets_sent = core.packets_sent();
        let timings = core.timings();
        let stages = timings.stages.clone();
        // Bounded, so a flood of requests pushes back on the connections that send them.
        let (core_tx, core_rx) = mpsc::channel(4096);
        let (shutdown, shutdown_rx) = signal::channel(false);
        let metrics_source = MetricsSource {
            core: core_tx.clone(),
            timings,
        };
        let core = tokio::spawn(core.run(core_rx, shutdown_rx.clone()));
        let accept = tokio::spawn(accept::accept_loop(
            listener,
            secure,
            config,
            core_tx,
            Shared {
                durable,
                packets_sent,
                stages,
            },
            shutdown_rx,
        ));
        tracing::info!(%local_addr, ?secure_addr, "keeper listening");
        Ok(Server {
            local_addr,
            secure_addr,
            tls,
            metrics_addr: None,
            metrics_source,
            shutdown,
            accept: Some(accept),
            metrics: None,
            core: Some(core),
        })
    }

    /// The address actually bound.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The secure listener's address, when [`Config::secure_listen`] started one.
    pub fn secure_addr(&self) -> Option<SocketAddr> {
        self.secure_addr
    }

    /// Reads the TLS certificate, key and client CA files again (what `lockkeeper serve` does
    /// on SIGHUP), for the secure listener and the metrics endpoint. Every later TLS handshake
    /// uses them; connections that are up keep theirs. Errors name the file and what is wrong
    /// with it, and leave the files in use as they were; without `Config::tls`, `NotFound`.
    pub fn reload_tls(&self) -> std::io::Result<()> {
        match &self.tls {
            Some(acceptor) => acceptor.reload(),
            None => Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "no TLS files (Config::tls): nothing to reload",
            )),
        }
    }

    /// Serves Prometheus metrics (`GET /metrics`, ZooKeeper's names) on `addr`, and only there,
    /// until the server stops; port 0 picks a free port. Returns the address bound.
    ///
    /// Separate from [`Config`] so that a server without metrics carries nothing for them.
    /// Errors: the endpoint is already served, or `addr` cannot be bound (named in the error).
    pub async fn serve_metrics(&mut self, addr: SocketAddr) -> std::io::Result<SocketAddr> {
        self.start_metrics(addr, None).await
    }

    /// [`Server::serve_metrics`] over TLS (HTTPS), with [`Config::tls`]'s certificate, key and
    /// client CA (a scraper must then present a certificate it signed), reloaded with them.
    /// `InvalidInput` without `Config::tls`.
    pub async fn serve_metrics_tls(&mut self, addr: SocketAddr) -> std::io::Result<SocketAddr> {
        let Some(tls) = self.tls.clone() else {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "metrics over TLS need the TLS files (Config::tls: --tls-cert and --tls-key)",
            ));
        };
        self.start_metrics(addr, Some(tls)).await
    }

    async fn start_metrics(
        &mut self,
        addr: SocketAddr,
        tls: Option<Arc<net::tls::Acceptor>>,
    ) -> std::io::Result<SocketAddr> {
        if let Some(bound) = self.metrics_addr {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                format!("metrics are already served on {bound}"),
            ));
        }
        let listener = TcpListener::bind(addr).await.map_err(|e| {
            std::io::Error::new(e.kind(), format!("cannot serve metrics on {addr}: {e}"))
        })?;
        let bound = listener.local_addr()?;
        let MetricsSource { core, timings } = &self.metrics_source;
        self.metrics = Some(tokio::spawn(metrics_http::serve(
            listener,
            tls,
            core.clone(),
            timings.clone(),
            self.shutdown.subscribe(),
        )));
        self.metrics_addr = Some(bound);
        tracing::info!(addr = %bound, "serving Prometheus metrics at /metrics");
        Ok(bound)
    }

    /// Where `GET /metrics` is served, once [`Server::serve_metrics`] has started it.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    /// Stops accepting, closes every connection and waits for the tasks to end.
    pub async fn shutdown(mut self) {
        let _ = self.shutdown.send(true);
        if let Some(accept) = self.accept.take() {
            let _ = accept.await;
        }
        if let Some(metrics) = self.metrics.take() {
            let _ = metrics.await;
        }
        if let Some(core) = self.core.take() {
            let _ = core.await;
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
        let tasks = [self.accept.take(), self.metrics.take(), self.core.take()];
        for task in tasks.into_iter().flatten() {
            task.abort();
        }
    }
}

/// What the metrics endpoint reads: the core, which answers with its `Stats`, and the timings.
struct MetricsSource {
    core: mpsc::Sender<CoreMsg>,
    timings: metrics::Timings,
}
