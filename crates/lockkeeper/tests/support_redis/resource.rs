//! A protected resource for mutual-exclusion tests, shared by tasks and by child processes.
//!
//! It listens on 127.0.0.1 and takes one line per request:
//! - `ENTER token` / `LEAVE`: a holder starts and ends its critical section. The resource
//!   counts overlaps (a second holder entering while one is inside) and fencing tokens that
//!   did not increase from one entry to the next.
//! - `WRITE token`: a fenced write, accepted (`OK`) only if the token is at least the highest
//!   accepted so far, else refused (`STALE`): the check a real resource makes.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

/// What the resource saw.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Stats {
    /// Critical sections entered.
    pub entries: u64,
    /// Entries made while another holder was inside.
    pub overlaps: u64,
    /// Entries whose token was not greater than the previous entry's.
    pub token_regressions: u64,
    /// Holders inside right now.
    pub inside: u64,
    /// Fenced writes accepted, with their tokens.
    pub accepted: Vec<u64>,
    /// Fenced writes refused as stale, with their tokens.
    pub refused: Vec<u64>,
    last_token: u64,
}

/// The resource's server side; stops accepting when dropped (connection threads end with
/// their clients).
pub(crate) struct Resource {
    addr: SocketAddr,
    stats: Arc<Mutex<Stats>>,
}

impl Resource {
    pub(crate) fn start() -> Resource {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind resource");
        let addr = listener.local_addr().expect("resource addr");
        let stats = Arc::new(Mutex::new(Stats::default()));
        let shared = Arc::clone(&stats);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                let stats = Arc::clone(&shared);
                std::thread::spawn(move || serve(stream, &stats));
            }
        });
        Resource { addr, stats }
    }

    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub(crate) fn stats(&self) -> Stats {
        self.stats.lock().expect("stats").clone()
    }
}

fn serve(stream: TcpStream, stats: &Mutex<Stats>) {
    let mut writer = stream.try_clone().expect("clone resource stream");
    for line in BufReader::new(stream).lines() {
        let Ok(line) = line else { return };
        let mut words = line.split_whitespace();
        let verb = words.next().unwrap_or("");
        let token: u64 = words.next().and_then(|t| t.parse().ok()).unwrap_or(0);
        let reply = {
            let mut s = stats.lock().expect("stats");
            match verb {
                "ENTER" => {
                    s.entries += 1;
                    if s.inside > 0 {
                        s.overlaps += 1;
                    }
                    if token <= s.last_token {
                        s.token_regressions += 1;
                    }
                    s.last_token = token;
                    s.inside += 1;
                    "OK"
                }
                "LEAVE" => {
                    s.inside = s.inside.saturating_sub(1);
                    "OK"
                }
                "WRITE" => {
                    if s.accepted.last().is_none_or(|highest| token >= *highest) {
                        s.accepted.push(token);
                        "OK"
                    } else {
                        s.refused.push(token);
                        "STALE"
                    }
                }
                _ => "ERR",
            }
        };
        if writer.write_all(format!("{reply}\n").as_bytes()).is_err() {
            return;
        }
    }
}

/// A holder's connection to the resource.
pub(crate) struct Client {
    reader: tokio::io::BufReader<tokio::net::tcp::OwnedReadHalf>,
    writer: tokio::net::tcp::OwnedWriteHalf,
}

impl Client {
    pub(crate) async fn connect(addr: SocketAddr) -> Client {
        let stream = tokio::net::TcpStream::connect(addr)
            .await
            .expect("connect to resource");
        let (read, writer) = stream.into_split();
        Client {
            reader: tokio::io::BufReader::new(read),
            writer,
        }
    }

    async fn request(&mut self, line: String) -> String {
        self.writer
            .write_all(format!("{line}\n").as_bytes())
            .await
            .expect("send to resource");
        let mut reply = String::new();
        self.reader
            .read_line(&mut reply)
            .await
            .expect("resource reply");
        reply.trim().to_string()
    }

    pub(crate) async fn enter(&mut self, token: u64) {
        assert_eq!(self.request(format!("ENTER {token}")).await, "OK");
    }

    pub(crate) async fn leave(&mut self) {
        assert_eq!(self.request("LEAVE".into()).await, "OK");
    }

    /// A fenced write: true if accepted, false if refused as stale.
    pub(crate) async fn write(&mut self, token: u64) -> bool {
        self.request(format!("WRITE {token}")).await == "OK"
    }
}
