//! The loopback partition proxy: a TCP relay in front of a server that can cut the network.
//!
//! Invariants: while cut, every relayed connection is closed and every new one is closed at
//! once (a partition as the client sees it: the peer is gone, reconnecting fails); after
//! `heal` new connections go through. It binds 127.0.0.1 only and its tasks end when it is
//! dropped, so a test leaves nothing behind.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::task::JoinHandle;

/// A loopback proxy in front of a server. A ZooKeeper session connected through it stops
/// pinging while it is cut, so the server expires it after its timeout, the way a real
/// partition (or a long pause) expires a lock holder; a Redis client loses its connection and
/// its lease runs out.
pub struct Proxy {
    addr: SocketAddr,
    cut: Arc<AtomicBool>,
    relays: Arc<Mutex<Vec<JoinHandle<()>>>>,
    accept: JoinHandle<()>,
}

impl Proxy {
    /// Starts the proxy in front of `upstream` ("127.0.0.1:PORT"). Must be called within a
    /// tokio runtime, which runs the relays.
    pub async fn start(upstream: &str) -> Proxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the proxy");
        let addr = listener.local_addr().expect("proxy address");
        let cut = Arc::new(AtomicBool::new(false));
        let relays: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::new(Mutex::new(Vec::new()));
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
        Proxy {
            addr,
            cut,
            relays,
            accept,
        }
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The connect string through the proxy, `"127.0.0.1:PORT"`.
    pub fn connect_string(&self) -> String {
        self.addr.to_string()
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

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.abort_relays();
    }
}

impl std::fmt::Debug for Proxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proxy")
            .field("addr", &self.addr)
            .field("cut", &self.is_cut())
            .finish()
    }
}
