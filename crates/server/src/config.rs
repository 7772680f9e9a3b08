//! Server configuration: what `lockkeeper serve` flags set, with ZooKeeper's defaults.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

pub use lockkeeper_tls::ServerFiles;

pub use crate::sasl::SaslUsers;

/// When the transaction log is synced to disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SyncMode {
    /// Every acknowledged write has been fdatasync'ed (many writes share one sync).
    #[default]
    Always,
    /// Writes reach the OS but are never synced: they survive a crash of Keeper, not of the
    /// machine. For throwaway test servers.
    None,
}

/// How a Keeper server is run. `Config::default()` is what `lockkeeper serve` uses.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where to listen; port 0 picks a free port (see `Server::local_addr`).
    pub listen: SocketAddr,
    /// The directory holding the transaction log, snapshots and the lock file.
    pub data_dir: PathBuf,
    /// ZooKeeper's tickTime: the unit of session timeouts (negotiated into 2..20 ticks).
    pub tick_time: Duration,
    /// Overrides the 2-tick lower bound of negotiated session timeouts.
    pub min_session_timeout: Option<Duration>,
    /// Overrides the 20-tick upper bound of negotiated session timeouts.
    pub max_session_timeout: Option<Duration>,
    /// Most concurrent connections from one IP address (0: no limit). ZooKeeper's maxClientCnxns.
    pub max_client_cnxns: usize,
    /// Largest frame accepted (jute.maxbuffer); a larger one closes the connection.
    pub jute_maxbuffer: usize,
    /// How often empty containers and expired TTL nodes are removed.
    pub container_check_interval: Duration,
    /// Four-letter words that may run ("*" for all), ZooKeeper's 4lw.commands.whitelist;
    /// `isro` runs in any case (see [`Config::four_letter_word_allowed`]).
    pub four_letter_words: Vec<String>,
    /// `super:<base64 sha1>` digest of a user that passes every ACL check.
    pub super_digest: Option<String>,
    /// How long a new connection may take to send its connect request.
    pub handshake_timeout: Duration,
    /// When the log is synced to disk, and so when writes are acknowledged.
    pub sync: SyncMode,
    /// How long after a write whose watch events woke someone the log waits for the woken to
    /// write, so that the write after it and theirs share one sync (a lock handoff's two
    /// writes, the releaser's re-queue and the next holder's release, then take one sync
    /// instead of two). Paid only by a write that follows a waking one when nobody woken
    /// writes; zero never waits.
    pub follow_window: Duration,
    /// A snapshot starts after this many txns (ZooKeeper's snapCount).
    pub snap_count: u64,
    /// Snapshots kept (with the logs needed to recover from the oldest of them).
    pub snap_retain: usize,
    /// The most memory one connection's queued replies and watch events may hold before the
    /// connection is closed; its session survives and may re-attach. Counted per message as
    /// its inline size plus the heap it owns (strings and vectors by capacity, node data in
    /// full even when shared with the tree), not its encoded length; allocator overhead is not
    /// counted.
    ///
    /// The default, 16 MiB, is sized from both ends. The queue only grows while the core answers
    /// faster than the socket drains, so a client that reads keeps at most what it asked for at
    /// once plus its watch events in flight; a reply holds at most about `jute_maxbuffer` of node
    /// data (1 MiB), so 16 MiB lets a client pipeline 16 reads of the largest nodes. A client
    /// that stops reading is cut off at 16 MiB instead of growing without limit, so 100 such
    /// connections hold at most 1.6 GiB, and 300 (five addresses at maxClientCnxns) 4.8 GiB.
    pub max_queued_bytes: u64,
    /// How long a connection the server has closed (its session closed, expired or moved, or
    /// its peer half-closed) waits for a peer that reads nothing before it resets the
    /// connection. Until then the replies queued before the close are still written, as long
    /// as the peer takes some of them; without this bound a client that stopped reading (a
    /// frozen process whose kernel still answers) would hold the connection open for ever,
    /// since its session is gone and nothing else ends it.
    pub close_linger: Duration,
    /// The listen backlog (ZooKeeper's clientPortListenBacklog): connections the kernel
    /// completes and holds before Keeper accepts them. The kernel caps it at
    /// `net.core.somaxconn`. The default, 1024, absorbs a reconnect storm of hundreds of clients
    /// where tokio's 128 would drop SYNs and make clients wait for a retransmit (1 s, then 3 s).
    pub listen_backlog: u32,
    /// Where to listen for TLS clients (ZooKeeper's secureClientPort), beside `listen`; port 0
    /// picks a free port (see `Server::secure_addr`). Needs `tls`.
    pub secure_listen: Option<SocketAddr>,
    /// The users SASL DIGEST-MD5 authenticates (the `sasl` ACL scheme); without them, a SASL
    /// exchange fails with `AuthFailed`.
    pub sasl_users: Option<SaslUsers>,
    /// The certificate, key and client CA of the secure listener and of the metrics endpoint
    /// over TLS (`Server::serve_metrics_tls`); reloaded by `Server::reload_tls`.
    pub tls: Option<ServerFiles>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 2181)),
            data_dir: PathBuf::from("lockkeeper-data"),
            tick_time: Duration::from_millis(2000),
            min_session_timeout: None,
            max_session_timeout: None,
            max_client_cnxns: 60,
            jute_maxbuffer: 0xfffff,
            container_check_interval: Duration::from_secs(60),
            four_letter_words: ["srvr", "stat", "ruok", "mntr"].map(String::from).to_vec(),
            super_digest: None,
            handshake_timeout: Duration::from_secs(10),
            sync: SyncMode::Always,
            follow_window: Duration::from_micros(400),
            snap_count: 100_000,
            snap_retain: 3,
            max_queued_bytes: 16 << 20,
            close_linger: Duration::from_secs(10),
            listen_backlog: 1024,
            secure_listen: None,
            tls: None,
            sasl_users: None,
        }
    }
}

impl Config {
    /// The shortest session timeout a client is granted: the override, or 2 ticks.
    pub fn min_session_timeout(&self) -> Duration {
        self.min_session_timeout.unwrap_or(self.tick_time * 2)
    }

    /// The longest session timeout a client is granted: the override, or 20 ticks (never
    /// below the minimum).
    pub fn max_session_timeout(&self) -> Duration {
        self.max_session_timeout
            .unwrap_or(self.tick_time * 20)
            .max(self.min_session_timeout())
    }

    /// Sessions are checked for expiry several times a tick, so one expires within a small
    /// fraction of a tick after its deadline.
    pub fn expiry_check_interval(&self) -> Duration {
        (self.tick_time / 4).clamp(Duration::from_millis(10), Duration::from_millis(500))
    }

    /// Refuses settings no server can run with, naming the field.
    pub fn validate(&self) -> std::io::Result<()> {
        let invalid = |what: &str| Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, what));
        if self.listen_backlog == 0 {
            return invalid("listen_backlog must be at least 1");
        }
        if self.max_queued_bytes == 0 {
            return invalid("max_queued_bytes must be at least 1");
        }
        if self.secure_listen.is_some() && self.tls.is_none() {
            return invalid("secure_listen needs tls: a certificate and its key");
        }
        Ok(())
    }

    /// Two words are allowed whatever the list says, as ZooKeeper allows them: `isro`, which
    /// ZooKeeper allows whenever read-only mode is enabled (a client connected to a read-only
    /// server asks `isro` of the others to find one that takes writes, and Keeper can turn
    /// read-only at any time, when its disk fails), and `srvr`, which ZooKeeper always allows
    /// because its own `zkServer.sh status` depends on it.
    pub fn four_letter_word_allowed(&self, word: &str) -> bool {
        matches!(word, "isro" | "srvr")
            || self.four_letter_words.iter().any(|w| w == "*" || w == word)
    }
}
