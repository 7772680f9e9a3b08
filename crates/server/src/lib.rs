//! Keeper: a coordination server that speaks the Apache ZooKeeper client protocol.
//!
//! The request pipeline, in ZooKeeper's words:
//!
//! ```text
//! connection (decode frame)
//!   -> core: dispatch -> prep (validate, ACL, build txn) -> log (append; the batch is handed
//!            to a log worker, which writes what is queued as a group and syncs it: on a
//!            multi-threaded runtime a task that does this on the core's own thread once the
//!            core yields, the thread's other tasks moved to another thread; elsewhere two
//!            threads, up to two groups' syncs in flight)
//!            -> apply (tree and sessions, fire watches) -> reply (queued on the outbox,
//!            stamped with the zxid it reveals)
//!   -> outbox (holds each message until the log is durable that far, then encodes it and
//!      writes it in request order: the log worker whose sync released it writes it, or the
//!      core at the end of its batch when it was sendable already; the connection's writer
//!      task takes what would hold them up: a full socket, a large backlog, a busy core's)
//! ```
//!
//! Each stage of that path is timed for every reply that waits for the log ([`trace`]; `mntr`'s
//! `lk_write_stage_*` keys).
//!
//! The connection task runs per client; dispatch, prep, log and apply run in the single core
//! task, which owns all state, so nothing waits for the disk there: replies wait in their
//! outboxes, and the durable mark ([`durable`]) lets them out. The state changes only through
//! [`apply::apply`], which recovery replays the log with.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! let config = lockkeeper_server::Config { listen: "127.0.0.1:0".parse().unwrap(), ..Default::default() };
//! let server = lockkeeper_server::Server::start(config).await?;
//! println!("ZooKeeper clients can connect to {}", server.local_addr());
//! server.shutdown().await;
//! # Ok(()) }
//! ```

pub mod acl;
pub mod apply;
pub mod config;
mod connection;
mod core;
pub mod datadir_lock;
pub mod durable;
pub mod four_letter;
pub mod log;
mod memory;
mod metrics;
mod metrics_http;
mod outbox;
pub mod path;
pub mod prep;
pub mod recovery;
mod reply;
pub mod session;
pub mod snapshot;
mod sync;
pub mod trace;
pub mod tree;
pub mod txn;
pub mod watch;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::{mpsc, watch as signal};
use tokio::task::{JoinHandle, JoinSet};

pub use crate::config::Config;
use crate::connection::ConnectionCtx;
use crate::core::Core;
use crate::datadir_lock::DataDirLock;

/// A running server. Dropping it stops it (abruptly); [`Server::shutdown`] stops it cleanly.
///
/// The server holds its data dir's lock until its core is gone: after [`Server::shutdown`]
/// returns, another server may start on the directory at once; after a drop, as soon as the
/// runtime has dropped the aborted core task.
pub struct Server {
    local_addr: SocketAddr,
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
        let listener = bind(config.listen, config.listen_backlog).map_err(|e| {
            std::io::Error::new(e.kind(), format!("cannot listen on {}: {e}", config.listen))
        })?;
        let local_addr = listener.local_addr()?;
        let config = Arc::new(Config {
            listen: local_addr,
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
        let accept = tokio::spawn(accept_loop(
            listener,
            config,
            core_tx,
            Shared {
                durable,
                packets_sent,
                stages,
            },
            shutdown_rx,
        ));
        tracing::info!(%local_addr, "keeper listening");
        Ok(Server {
            local_addr,
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

    /// Serves Prometheus metrics (`GET /metrics`, ZooKeeper's names) on `addr`, and only there,
    /// until the server stops; port 0 picks a free port. Returns the address bound.
    ///
    /// Separate from [`Config`] so that a server without metrics carries nothing for them.
    /// Errors: the endpoint is already served, or `addr` cannot be bound (named in the error).
    pub async fn serve_metrics(&mut self, addr: SocketAddr) -> std::io::Result<SocketAddr> {
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

/// Connections per client address, for maxClientCnxns. A std `Mutex`: it is held for a map
/// update only, never across an `.await`, so an async mutex would add cost and nothing else.
type PerIp = Arc<Mutex<HashMap<IpAddr, usize>>>;

/// Decrements the per-address count when a connection task ends, however it ends.
struct IpSlot {
    per_ip: PerIp,
    ip: IpAddr,
}

impl Drop for IpSlot {
    fn drop(&mut self) {
        let mut map = sync::lock(&self.per_ip);
        if let Some(n) = map.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                map.remove(&self.ip);
            }
        }
    }
}

/// What every connection gets a handle on: the durable mark that releases its replies, and the
/// server's count of packets written.
struct Shared {
    durable: Arc<durable::DurableMark>,
    packets_sent: Arc<AtomicU64>,
    /// Where the connections record the write path's stages.
    stages: Arc<trace::StageTimes>,
}

/// Binds `addr` with a listen backlog of `backlog` (tokio's `TcpListener::bind` always asks
/// for 128).
fn bind(addr: SocketAddr, backlog: u32) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    // As std and tokio do on Unix: a restarted server binds while old connections linger in
    // TIME_WAIT.
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(backlog)
}

async fn accept_loop(
    listener: TcpListener,
    config: Arc<Config>,
    core: mpsc::Sender<CoreMsg>,
    shared: Shared,
    mut shutdown: signal::Receiver<bool>,
) {
    let per_ip: PerIp = Arc::default();
    // Owning the connection tasks here means they are all aborted when this loop ends.
    let mut connections = JoinSet::new();
    let mut next_id: watch::ConnId = 1;
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            _ = shutdown.changed() => break,
        };
        let slot = {
            let mut map = sync::lock(&per_ip);
            let count = map.entry(peer.ip()).or_insert(0);
            if config.max_client_cnxns > 0 && *count >= config.max_client_cnxns {
                tracing::warn!(%peer, max = config.max_client_cnxns, "too many connections from this address; closing");
                drop(stream);
                continue;
            }
            *count += 1;
            IpSlot {
                per_ip: per_ip.clone(),
                ip: peer.ip(),
            }
        };
        let ctx = ConnectionCtx::new(
            next_id,
            peer,
            core.clone(),
            shared.durable.clone(),
            shared.packets_sent.clone(),
            shared.stages.clone(),
            &config,
        );
        next_id += 1;
        connections.spawn(async move {
            connection::serve(stream, ctx).await;
            drop(slot);
        });
    }
    connections.shutdown().await;
}

use crate::core::CoreMsg;
