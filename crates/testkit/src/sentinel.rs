//! Redis Sentinel on random loopback ports (or, with [`RedisSentinel::start_on`], on hosts of
//! their own: network namespaces the caller made, so a test can split the master from the
//! rest): one master, one replica and one to three sentinels monitoring them, for testing the
//! locks through a Sentinel-aware client and across a failover.
//!
//! Handed out only once it is fully formed (the replica in sync, every sentinel aware of the
//! replica and of every other sentinel), because a failover asked of a half-formed set either
//! fails ("no good replica") or cannot be authorized (a sentinel needs votes from a majority of
//! the sentinels it knows). `down-after-milliseconds` is generous so that a loaded test machine
//! does not trigger a failover nobody asked for.

use std::fs;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::child::{kill_and_reap, tail};
use crate::host::Host;
use crate::ports::free_port;
use crate::redis_node::{NodeOptions, RedisNode, SpawnError, spawn_redis_with};
use crate::resp::{self, Reply};

const START_ATTEMPTS: usize = 4;
const READY_TIMEOUT: Duration = Duration::from_secs(90);
const COMMAND_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a master must be silent before a sentinel calls it down.
const DOWN_AFTER_MS: u64 = 5000;

struct SentinelProcess {
    child: Mutex<Child>,
    ip: Ipv4Addr,
    port: u16,
    dir: PathBuf,
}

/// A master, a replica and 1-3 sentinels on 127.0.0.1 monitoring them under
/// [`master_name`](Self::master_name); every process is killed (by PID) when dropped.
///
/// ```no_run
/// use lockkeeper_testkit::RedisSentinel;
/// let set = RedisSentinel::start(3);
/// let sentinels = set.sentinel_urls(); // what a Sentinel-aware client is given
/// let before = set.current_master();
/// let after = set.failover(); // SENTINEL FAILOVER, waits until every sentinel agrees
/// assert_ne!(before, after);
/// # let _ = sentinels;
/// ```
pub struct RedisSentinel {
    nodes: Vec<RedisNode>,
    sentinels: Vec<SentinelProcess>,
    name: String,
    _dir: TempDir,
}

impl RedisSentinel {
    /// Starts a master, a replica of it, and `sentinels` sentinels (1 to 3) with a quorum of a
    /// majority of them; returns once the set is fully formed.
    pub fn start(sentinels: usize) -> RedisSentinel {
        RedisSentinel::start_placed(None, None, vec![None; sentinels])
    }

    /// [`start`](RedisSentinel::start) with the master on `master`, the replica on `replica`
    /// and one sentinel on each of `sentinels` (hosts may be shared: a sentinel beside each
    /// data node is Sentinel's usual layout).
    pub fn start_on(master: Host, replica: Host, sentinels: Vec<Host>) -> RedisSentinel {
        RedisSentinel::start_placed(
            Some(master),
            Some(replica),
            sentinels.into_iter().map(Some).collect(),
        )
    }

    fn start_placed(
        master: Option<Host>,
        replica: Option<Host>,
        sentinel_hosts: Vec<Option<Host>>,
    ) -> RedisSentinel {
        let sentinels = sentinel_hosts.len();
        assert!(
            (1..=3).contains(&sentinels),
            "1 to 3 sentinels, not {sentinels}"
        );
        let dir = tempfile::Builder::new()
            .prefix("lockkeeper-redis-sentinel-")
            .tempdir()
            .expect("create a temporary directory for Sentinel");
        let placed = |host: Option<Host>| match host {
            Some(host) => NodeOptions::new().on(host),
            None => NodeOptions::new(),
        };
        let master = RedisNode::start_with(placed(master));
        let replica = RedisNode::start_with(
            placed(replica)
                .arg("--replicaof")
                .arg(master.addr().ip().to_string())
                .arg(master.addr().port().to_string()),
        );
        let name = "lockkeeper-master".to_string();
        let quorum = sentinels / 2 + 1;
        let sentinels = sentinel_hosts
            .into_iter()
            .enumerate()
            .map(|(i, host)| {
                start_sentinel(
                    &dir.path().join(format!("sentinel-{i}")),
                    &name,
                    master.addr(),
                    quorum,
                    host,
                )
            })
            .collect();
        let set = RedisSentinel {
            nodes: vec![master, replica],
            sentinels,
            name,
            _dir: dir,
        };
        set.wait_formed();
        set
    }

    /// The name the sentinels monitor the master under (what a Sentinel client asks for).
    pub fn master_name(&self) -> &str {
        &self.name
    }

    /// `redis://IP:PORT` of every sentinel.
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinel_addrs()
            .iter()
            .map(|addr| format!("redis://{addr}"))
            .collect()
    }

    /// The address of every sentinel.
    pub fn sentinel_addrs(&self) -> Vec<SocketAddr> {
        self.sentinels
            .iter()
            .map(|s| SocketAddr::from((s.ip, s.port)))
            .collect()
    }

    /// The two data nodes: at start, `[0]` is the master and `[1]` its replica.
    pub fn nodes(&self) -> &[RedisNode] {
        &self.nodes
    }

    /// The master's address as the first sentinel that answers reports it.
    pub fn current_master(&self) -> SocketAddr {
        self.sentinel_addrs()
            .iter()
            .find_map(|&sentinel| self.master_seen_by(sentinel))
            .expect("no sentinel reports a master")
    }

    /// Asks a sentinel to fail over (`SENTINEL FAILOVER`: no agreement needed, the replica is
    /// promoted at once) and waits until every sentinel reports the new master, the new master
    /// says it is one, and the old master has been turned into its replica. Returns the new
    /// master's address.
    ///
    /// Until that last step the old master still accepts writes (Sentinel demotes it a moment
    /// after promoting the replica), and whatever a client writes there in the gap is thrown
    /// away when it starts replicating; waiting for it keeps tests out of that gap.
    pub fn failover(&self) -> SocketAddr {
        let before = self.current_master();
        let reply = resp::command(
            self.sentinel_addrs()[0],
            &["SENTINEL", "FAILOVER", &self.name],
            COMMAND_TIMEOUT,
        )
        .expect("SENTINEL FAILOVER");
        assert_eq!(reply, Reply::Status("OK".into()), "SENTINEL FAILOVER");
        let after = self.wait_for_new_master(before);
        let started = Instant::now();
        while role(before).as_deref() != Some("slave") {
            assert!(
                started.elapsed() < READY_TIMEOUT,
                "the old master {before} was not turned into a replica within {READY_TIMEOUT:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        after
    }

    /// Kills the current master with SIGKILL and waits until the sentinels agree it is down
    /// and have promoted the replica (takes `down-after-milliseconds`, 5 s, plus an election).
    /// Returns the new master's address.
    pub fn kill_master(&self) -> SocketAddr {
        let before = self.current_master();
        let node = self
            .nodes
            .iter()
            .find(|n| n.addr() == before)
            .expect("the master is one of our nodes");
        node.kill();
        self.wait_for_new_master(before)
    }

    /// Waits until every sentinel reports a master other than `old` and that node reports
    /// `role:master`.
    pub fn wait_for_new_master(&self, old: SocketAddr) -> SocketAddr {
        let started = Instant::now();
        loop {
            let seen: Vec<Option<SocketAddr>> = self
                .sentinel_addrs()
                .iter()
                .map(|&s| self.master_seen_by(s))
                .collect();
            if let Some(Some(new)) = seen.first()
                && *new != old
                && seen.iter().all(|s| *s == Some(*new))
                && role(*new).as_deref() == Some("master")
            {
                return *new;
            }
            assert!(
                started.elapsed() < READY_TIMEOUT,
                "no failover from {old} within {READY_TIMEOUT:?} (sentinels see {seen:?}); \
                 first sentinel's log:\n{}",
                self.sentinel_log(0)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The log of sentinel `index`.
    pub fn sentinel_log(&self, index: usize) -> String {
        tail(
            &fs::read_to_string(self.sentinels[index].dir.join("sentinel.log")).unwrap_or_default(),
            40,
        )
    }

    /// The master as a majority of the sentinels report it now, if a majority agrees: during
    /// a partition, the majority side's view (a sentinel cut off with the old master still
    /// names it).
    pub fn master_by_majority(&self) -> Option<SocketAddr> {
        let seen: Vec<SocketAddr> = self
            .sentinel_addrs()
            .into_iter()
            .filter_map(|sentinel| self.master_seen_by(sentinel))
            .collect();
        let majority = self.sentinels.len() / 2 + 1;
        seen.iter()
            .copied()
            .find(|master| seen.iter().filter(|m| *m == master).count() >= majority)
    }

    fn master_seen_by(&self, sentinel: SocketAddr) -> Option<SocketAddr> {
        let reply = resp::command(
            sentinel,
            &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", &self.name],
            COMMAND_TIMEOUT,
        )
        .ok()?;
        let Reply::Array(parts) = reply else {
            return None;
        };
        let host = parts.first()?.text()?;
        let port: u16 = parts.get(1)?.text()?.parse().ok()?;
        format!("{host}:{port}").parse().ok()
    }

    fn wait_formed(&self) {
        let started = Instant::now();
        let others = self.sentinels.len() - 1;
        loop {
            let replica_synced = info_replication(self.nodes[1].addr())
                .is_some_and(|info| resp::info_field(&info, "master_link_status") == Some("up"));
            let sentinels_ready = self.sentinel_addrs().iter().all(|&s| {
                count(s, &["SENTINEL", "REPLICAS", &self.name]) == Some(1)
                    && count(s, &["SENTINEL", "SENTINELS", &self.name]) == Some(others)
            });
            if replica_synced && sentinels_ready {
                return;
            }
            assert!(
                started.elapsed() < READY_TIMEOUT,
                "Sentinel set not formed within {READY_TIMEOUT:?} (replica synced: \
                 {replica_synced}); first sentinel's log:\n{}",
                self.sentinel_log(0)
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for RedisSentinel {
    fn drop(&mut self) {
        // Sentinels first, so that they do not react to the data nodes going away.
        for sentinel in &self.sentinels {
            kill_and_reap(
                &mut sentinel
                    .child
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner),
            );
        }
        // The nodes are killed by their own Drop.
    }
}

impl std::fmt::Debug for RedisSentinel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisSentinel")
            .field("name", &self.name)
            .field("nodes", &self.nodes)
            .field("sentinels", &self.sentinel_addrs())
            .finish()
    }
}

fn start_sentinel(
    dir: &Path,
    name: &str,
    master: SocketAddr,
    quorum: usize,
    host: Option<Host>,
) -> SentinelProcess {
    let options = match host {
        Some(host) => NodeOptions::new().on(host),
        None => NodeOptions::new(),
    };
    let ip = options.ip();
    fs::create_dir_all(dir).expect("create a sentinel directory");
    let config = dir.join("sentinel.conf");
    let log = dir.join("sentinel.log");
    let mut failures = Vec::new();
    for _ in 0..START_ATTEMPTS {
        let port = free_port();
        // Sentinel rewrites this file as it learns (replicas, other sentinels, epochs).
        let text = format!(
            "port {port}\n\
             bind {ip}\n\
             protected-mode {protected}\n\
             daemonize no\n\
             set-proc-title no\n\
             dir {dir}\n\
             sentinel resolve-hostnames no\n\
             sentinel monitor {name} {mip} {mport} {quorum}\n\
             sentinel down-after-milliseconds {name} {DOWN_AFTER_MS}\n\
             sentinel failover-timeout {name} 20000\n\
             sentinel parallel-syncs {name} 1\n",
            dir = dir.display(),
            protected = if ip.is_loopback() { "yes" } else { "no" },
            mip = master.ip(),
            mport = master.port(),
        );
        fs::write(&config, text).expect("write sentinel.conf");
        let args = vec![config.display().to_string(), "--sentinel".to_string()];
        match spawn_redis_with(dir, &args, &options, port, &log) {
            Ok(child) => {
                return SentinelProcess {
                    child: Mutex::new(child),
                    ip,
                    port,
                    dir: dir.to_path_buf(),
                };
            }
            Err(SpawnError::PortTaken) => failures.push(format!("port {port} was taken")),
            Err(SpawnError::Failed(why)) => panic!("sentinel on port {port}: {why}"),
        }
    }
    panic!(
        "a sentinel did not start after {START_ATTEMPTS} attempts: {}",
        failures.join("; ")
    );
}

fn info_replication(addr: SocketAddr) -> Option<String> {
    let reply = resp::command(addr, &["INFO", "replication"], COMMAND_TIMEOUT).ok()?;
    reply.text().map(str::to_string)
}

/// `role` from `INFO replication` of the node at `addr`.
fn role(addr: SocketAddr) -> Option<String> {
    let info = info_replication(addr)?;
    resp::info_field(&info, "role").map(str::to_string)
}

/// How many entries an array reply has.
fn count(addr: SocketAddr, args: &[&str]) -> Option<usize> {
    match resp::command(addr, args, COMMAND_TIMEOUT).ok()? {
        Reply::Array(items) => Some(items.len()),
        _ => None,
    }
}
