//! Keeper: a coordination server that speaks the Apache ZooKeeper client protocol.
//!
//! (API pinned; implementation in progress.)

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// How a Keeper server is run. `Config::default()` is what `lockkeeper serve` uses.
#[derive(Debug, Clone)]
pub struct Config {
    pub listen: SocketAddr,
    pub data_dir: PathBuf,
    pub tick_time: Duration,
    pub max_client_cnxns: usize,
    pub jute_maxbuffer: usize,
    pub container_check_interval: Duration,
    pub four_letter_words: Vec<String>,
    pub super_digest: Option<String>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: "127.0.0.1:2181".parse().expect("literal address"),
            data_dir: PathBuf::from("lockkeeper-data"),
            tick_time: Duration::from_millis(2000),
            max_client_cnxns: 60,
            jute_maxbuffer: 0xfffff,
            container_check_interval: Duration::from_secs(60),
            four_letter_words: vec!["*".into()],
            super_digest: None,
        }
    }
}

/// A running server. Dropping it stops it.
pub struct Server {
    local_addr: SocketAddr,
}

impl Server {
    /// Binds `config.listen` (port 0 picks a free port) and starts serving.
    pub async fn start(config: Config) -> std::io::Result<Server> {
        let _ = config;
        todo!("in progress")
    }
    /// The address actually bound.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }
    /// Stops accepting, closes every connection, waits for the tasks to end.
    pub async fn shutdown(self) {}
}
