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
//!
//! It can also slow the network down ([`Proxy::set_latency`]): each chunk read from either
//! side is held for the latency (plus a random jitter) before it is written on, in order, as
//! a slow link (`netem delay`, which this kernel lacks) would deliver it. And it can hold the
//! server's replies back ([`Proxy::hold_replies`]) while requests still arrive: a request is
//! carried out and its answer is late, as when the return path stalls. Or it can take new
//! connections and say nothing on them ([`Proxy::silence_new_connections`]), as a server still
//! starting may: accepted, never read, never answered.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::Rng;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// A loopback proxy in front of a server. A ZooKeeper session connected through it stops
/// pinging while it is cut, so the server expires it after its timeout, the way a real
/// partition (or a long pause) expires a lock holder; a Redis client loses its connection and
/// its lease runs out.
pub struct Proxy {
    /// One listening address per upstream server, in the connect string's order.
    addrs: Vec<SocketAddr>,
    cut: Arc<AtomicBool>,
    /// The added latency and its jitter, in microseconds (0: relayed at once).
    latency: Arc<Latency>,
    /// Whether what the servers send is held back (see [`Proxy::hold_replies`]).
    replies_held: Arc<watch::Sender<bool>>,
    /// New connections are held silent (see [`Proxy::silence_new_connections`]).
    silent: Arc<Silent>,
    relays: Arc<Mutex<Vec<JoinHandle<()>>>>,
    accepts: Vec<JoinHandle<()>>,
}

/// The silent mode's switch, and the connections it holds (closed with the proxy).
#[derive(Default)]
struct Silent {
    on: AtomicBool,
    held: Mutex<Vec<tokio::net::TcpStream>>,
    count: AtomicUsize,
}

impl Proxy {
    /// Starts the proxy in front of `upstream`: one server ("127.0.0.1:PORT") or an
    /// ensemble's connect string ("127.0.0.1:P1,127.0.0.1:P2,..."). Must be called within a
    /// tokio runtime, which runs the relays.
    pub async fn start(upstream: &str) -> Proxy {
        let cut = Arc::new(AtomicBool::new(false));
        let latency = Arc::new(Latency::default());
        let replies_held = Arc::new(watch::Sender::new(false));
        let silent = Arc::new(Silent::default());
        let relays: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::new(Mutex::new(Vec::new()));
        let mut addrs = Vec::new();
        let mut accepts = Vec::new();
        for server in upstream.split(',').map(str::trim) {
            let (addr, accept) =
                relay(server, &cut, &latency, &replies_held, &silent, &relays).await;
            addrs.push(addr);
            accepts.push(accept);
        }
        Proxy {
            addrs,
            cut,
            latency,
            replies_held,
            silent,
            relays,
            accepts,
        }
    }

    /// From now on, accepts each new connection and holds it open without a byte either way
    /// (the server never hears of it), until [`relay_new_connections`]. Connections already
    /// relayed go on.
    ///
    /// [`relay_new_connections`]: Proxy::relay_new_connections
    pub fn silence_new_connections(&self) {
        self.silent.on.store(true, Ordering::SeqCst);
    }

    /// Relays new connections again; the silent ones stay held until the proxy is dropped.
    pub fn relay_new_connections(&self) {
        self.silent.on.store(false, Ordering::SeqCst);
    }

    /// How many connections have been held silent so far.
    pub fn silenced(&self) -> usize {
        self.silent.count.load(Ordering::SeqCst)
    }

    /// Holds back everything the servers send from now on, on every connection, until
    /// [`let_replies_through`](Proxy::let_replies_through); what clients send still arrives.
    /// A request is then carried out while its answer (and any event after it) is late.
    pub fn hold_replies(&self) {
        self.replies_held.send_replace(true);
    }

    /// Delivers the held replies, in order, and relays the servers' bytes at once again.
    pub fn let_replies_through(&self) {
        self.replies_held.send_replace(false);
    }

    /// Holds every chunk relayed from now on, either way, for `latency` plus a random jitter
    /// of up to `jitter` (in order: a chunk never overtakes the one before it). Zero for both
    /// relays at once again.
    pub fn set_latency(&self, latency: Duration, jitter: Duration) {
        self.latency
            .base
            .store(latency.as_micros() as u64, Ordering::SeqCst);
        self.latency
            .jitter
            .store(jitter.as_micros() as u64, Ordering::SeqCst);
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
        let mut relays = self
            .relays
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for relay in relays.drain(..) {
            relay.abort();
        }
    }
}

/// The latency a proxy adds, read as each chunk arrives.
#[derive(Default)]
struct Latency {
    base: AtomicU64,
    jitter: AtomicU64,
}

impl Latency {
    /// How long a chunk read now is held.
    fn draw(&self) -> Duration {
        let base = self.base.load(Ordering::SeqCst);
        let jitter = self.jitter.load(Ordering::SeqCst);
        let extra = if jitter == 0 {
            0
        } else {
            rand::thread_rng().gen_range(0..=jitter)
        };
        Duration::from_micros(base + extra)
    }
}

/// Listens on a free loopback port and relays each connection to `upstream` unless cut.
async fn relay(
    upstream: &str,
    cut: &Arc<AtomicBool>,
    latency: &Arc<Latency>,
    replies_held: &Arc<watch::Sender<bool>>,
    silent: &Arc<Silent>,
    relays: &Arc<Mutex<Vec<JoinHandle<()>>>>,
) -> (SocketAddr, JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the proxy");
    let addr = listener.local_addr().expect("proxy address");
    let upstream = upstream.to_owned();
    let accept = tokio::spawn({
        let cut = cut.clone();
        let latency = latency.clone();
        let replies_held = replies_held.clone();
        let silent = silent.clone();
        let relays = relays.clone();
        async move {
            // Ends with the proxy: the task is aborted on drop.
            while let Ok((client, _)) = listener.accept().await {
                if cut.load(Ordering::SeqCst) {
                    continue; // dropped: closed at once
                }
                if silent.on.load(Ordering::SeqCst) {
                    silent
                        .held
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .push(client);
                    silent.count.fetch_add(1, Ordering::SeqCst);
                    continue;
                }
                let Ok(server) = tokio::net::TcpStream::connect(&upstream).await else {
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                let (client_read, client_write) = client.into_split();
                let (server_read, server_write) = server.into_split();
                let latency = latency.clone();
                let replies_held = replies_held.subscribe();
                let relay = tokio::spawn(async move {
                    // Each direction until its reader ends, passing the end on: the
                    // connection closes when both have (a half-close stays one).
                    tokio::join!(
                        pump(client_read, server_write, latency.clone(), None),
                        pump(server_read, client_write, latency, Some(replies_held))
                    );
                });
                let mut relays = relays
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                relays.retain(|r| !r.is_finished());
                relays.push(relay);
            }
        }
    });
    (addr, accept)
}

/// Relays `from` to `to`, each chunk held for the latency drawn when it was read, and while
/// `held` (when given) says so; in order. Returns when `from` ends (after passing the end on)
/// or either side fails.
async fn pump(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    latency: Arc<Latency>,
    mut held: Option<watch::Receiver<bool>>,
) {
    // Chunks in flight, each with when it may be written; at most 64 (then reading waits).
    let (sender, mut receiver) = mpsc::channel::<(Instant, Option<Vec<u8>>)>(64);
    let reader = async move {
        let mut buf = vec![0u8; 16 * 1024];
        let mut last = Instant::now();
        loop {
            let read = from.read(&mut buf).await;
            // Never before the chunk ahead of it: a link delivers in order.
            let due = (Instant::now() + latency.draw()).max(last);
            last = due;
            let chunk = match read {
                Ok(0) | Err(_) => None,
                Ok(n) => Some(buf[..n].to_vec()),
            };
            let end = chunk.is_none();
            if sender.send((due, chunk)).await.is_err() || end {
                return;
            }
        }
    };
    let writer = async move {
        while let Some((due, chunk)) = receiver.recv().await {
            tokio::time::sleep_until(due).await;
            if let Some(held) = held.as_mut()
                && held.wait_for(|held| !held).await.is_err()
            {
                return; // the proxy is gone
            }
            match chunk {
                Some(bytes) => {
                    if to.write_all(&bytes).await.is_err() {
                        return;
                    }
                }
                None => {
                    let _ = to.shutdown().await;
                    return;
                }
            }
        }
    };
    tokio::join!(reader, writer);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// An echo server on loopback; its address.
    async fn echo() -> SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let (mut read, mut write) = stream.split();
                    let _ = tokio::io::copy(&mut read, &mut write).await;
                });
            }
        });
        addr
    }

    #[tokio::test]
    async fn latency_holds_each_chunk_both_ways_and_keeps_the_order() {
        let proxy = Proxy::start(&echo().await.to_string()).await;
        let mut stream = tokio::net::TcpStream::connect(proxy.addr()).await.unwrap();
        let latency = Duration::from_millis(100);
        proxy.set_latency(latency, Duration::from_millis(20));
        let sent = Instant::now();
        for i in 0..20u8 {
            stream.write_all(&[i]).await.unwrap();
        }
        let mut got = vec![0u8; 20];
        stream.read_exact(&mut got).await.unwrap();
        // Held on the way there and on the way back: never sooner than twice the latency.
        assert!(sent.elapsed() >= 2 * latency, "{:?}", sent.elapsed());
        assert_eq!(got, (0..20).collect::<Vec<u8>>(), "in order");
        // Back to relaying at once; a half-close still reaches the server, and its reply back.
        proxy.set_latency(Duration::ZERO, Duration::ZERO);
        stream.write_all(b"end").await.unwrap();
        stream.shutdown().await.unwrap();
        let mut rest = Vec::new();
        stream.read_to_end(&mut rest).await.unwrap();
        assert_eq!(rest, b"end");
    }

    #[tokio::test]
    async fn held_replies_come_late_and_in_order_while_requests_arrive() {
        // A server that counts what arrives and echoes it.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let upstream = listener.local_addr().unwrap();
        let (arrived, mut arrivals) = mpsc::unbounded_channel::<u8>();
        tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut byte = [0u8; 1];
            while stream.read_exact(&mut byte).await.is_ok() {
                arrived.send(byte[0]).unwrap();
                stream.write_all(&byte).await.unwrap();
            }
        });
        let proxy = Proxy::start(&upstream.to_string()).await;
        let mut stream = tokio::net::TcpStream::connect(proxy.addr()).await.unwrap();
        proxy.hold_replies();
        for i in 0..5u8 {
            stream.write_all(&[i]).await.unwrap();
            assert_eq!(arrivals.recv().await, Some(i), "the request arrives");
        }
        let mut got = [0u8; 1];
        let early = tokio::time::timeout(Duration::from_millis(300), stream.read(&mut got)).await;
        assert!(early.is_err(), "no reply while held: {early:?}");
        proxy.let_replies_through();
        let mut got = vec![0u8; 5];
        stream.read_exact(&mut got).await.unwrap();
        assert_eq!(got, (0..5).collect::<Vec<u8>>(), "every reply, in order");
    }
}
