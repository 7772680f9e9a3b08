//! The loopback partition proxy: a TCP relay in front of a server that can cut the network.
//!
//! Invariants: while cut, every relayed connection is closed and every new one is closed at
//! once (a partition as the client sees it: the peer is gone, reconnecting fails); after
//! `heal` new connections go through. It binds 127.0.0.1 only and its tasks end when it is
//! dropped, so a test leaves nothing behind.
//!
//! In front of an ensemble (a connect string of several servers) it relays each server on a
//! port of its own and cuts them all at once: the client is partitioned from the whole
//! ensemble, as a client host losing its network would be.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::task::JoinHandle;

/// A loopback proxy in front of a server. A ZooKeeper session connected through it stops
/// pinging while it is cut, so the server expires it after its timeout, the way a real
/// partition (or a long pause) expires a lock holder; a Redis client loses its connection and
/// its lease runs out.
pub struct Proxy {
    /// One listening address per upstream server, in the connect string's order.
    addrs: Vec<SocketAddr>,
    cut: Arc<AtomicBool>,
    relays: Arc<Mutex<Vec<JoinHandle<()>>>>,
    accepts: Vec<JoinHandle<()>>,
}

impl Proxy {
    /// Starts the proxy in front of `upstream`: one server ("127.0.0.1:PORT") or an
    /// ensemble's connect string ("127.0.0.1:P1,127.0.0.1:P2,..."). Must be called within a
    /// tokio runtime, which runs the relays.
    pub async fn start(upstream: &str) -> Proxy {
        let cut = Arc::new(AtomicBool::new(false));
        let relays: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::new(Mutex::new(Vec::new()));
        let mut addrs = Vec::new();
        let mut accepts = Vec::new();
        for server in upstream.split(',').map(str::trim) {
            let (addr, accept) = relay(server, &cut, &relays).await;
            addrs.push(addr);
            accepts.push(accept);
        }
        Proxy {
            addrs,
            cut,
            relays,
            accepts,
        }
    }

    /// The address clients connect to (the first server's, in front of an ensemble).
    pub fn addr(&self) -> SocketAddr {
        self.addrs[0]
    }

    /// The connect string through the proxy: `"127.0.0.1:PORT"`, one per upstream server.
    pub fn connect_string(&self) -> String {
        let addrs: Vec<String> = self.addrs.iter().map(SocketAddr::to_string).collect();
        addrs.join(",")
    }

    /// Cuts the network: every connection through the proxy closes, new ones are refused.
    pub fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        self.abort_relays();
    }

    /// Lets connections through again.
    pub fn heal(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }

    /// Whether the proxy is cut.
    pub fn is_cut(&self) -> bool {
        self.cut.load(Ordering::SeqCst)
    }

    fn abort_relays(&self) {
        let mut relays = self.relays.lock().unwrap_or_else(|p| p.into_inner());
        for relay in relays.drain(..) {
            relay.abort();
        }
    }
}

/// Listens on a free loopback port and relays each connection to `upstream` unless cut.
async fn relay(
    upstream: &str,
    cut: &Arc<AtomicBool>,
    relays: &Arc<Mutex<Vec<JoinHandle<()>>>>,
) -> (SocketAddr, JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the proxy");
    let addr = listener.local_addr().expect("proxy address");
    let upstream = upstream.to_owned();
    let accept = tokio::spawn({
        let cut = cut.clone();
        let relays = relays.clone();
        async move {
            // Ends with the proxy: the task is aborted on drop.
            while let Ok((mut client, _)) = listener.accept().await {
                if cut.load(Ordering::SeqCst) {
                    continue; // dropped: closed at once
                }
                let Ok(mut server) = tokio::net::TcpStream::connect(&upstream).await else {
                    continue;
                };
                let relay = tokio::spawn(async move {
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                });
                let mut relays = relays.lock().unwrap_or_else(|p| p.into_inner());
                relays.retain(|r| !r.is_finished());
                relays.push(relay);
            }
        }
    });
    (addr, accept)
}

impl Drop for Proxy {
    fn drop(&mut self) {
        for accept in &self.accepts {
            accept.abort();
        }
        self.abort_relays();
    }
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy")
            .field("addrs", &self.addrs)
            .field("cut", &self.is_cut())
            .finish()
    }
}
