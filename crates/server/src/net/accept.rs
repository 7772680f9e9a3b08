//! The accept loop: takes each client's socket, from the plain listener or the secure one, and
//! starts its connection task, holding to maxClientCnxns per address over both (a connection
//! past it is closed at once, unanswered).
//!
//! The connection tasks are owned here, so they all end when the loop does (at shutdown).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::{mpsc, watch as signal};
use tokio::task::JoinSet;

use crate::config::Config;
use crate::core::CoreMsg;
use crate::disk::durable::DurableMark;
use crate::net::connection::{self, ConnectionCtx};
use crate::net::tls::Acceptor;
use crate::state::watch::ConnId;
use crate::sync;
use crate::trace::StageTimes;

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
pub(crate) struct Shared {
    pub durable: Arc<DurableMark>,
    pub packets_sent: Arc<AtomicU64>,
    /// Where the connections record the write path's stages.
    pub stages: Arc<StageTimes>,
}

/// Binds `addr` with a listen backlog of `backlog` (tokio's `TcpListener::bind` always asks
/// for 128).
pub(crate) fn bind(addr: SocketAddr, backlog: u32) -> std::io::Result<TcpListener> {
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

pub(crate) async fn accept_loop(
    listener: TcpListener,
    secure: Option<(TcpListener, Arc<Acceptor>)>,
    config: Arc<Config>,
    core: mpsc::Sender<CoreMsg>,
    shared: Shared,
    mut shutdown: signal::Receiver<bool>,
) {
    let per_ip: PerIp = Arc::default();
    // Owning the connection tasks here means they are all aborted when this loop ends.
    let mut connections = JoinSet::new();
    let mut next_id: ConnId = 1;
    loop {
        let secure_accept = async {
            match &secure {
                Some((listener, acceptor)) => (listener.accept().await, Some(acceptor.clone())),
                None => std::future::pending().await,
            }
        };
        let (stream, peer, tls) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => (stream, peer, None),
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
            (accepted, tls) = secure_accept => match accepted {
                Ok((stream, peer)) => (stream, peer, tls),
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
            connection::serve(stream, ctx, tls).await;
            drop(slot);
        });
    }
    connections.shutdown().await;
}
