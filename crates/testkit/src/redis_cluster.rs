//! A three-master Redis Cluster on random loopback ports, for testing the locks through a
//! cluster client (keys of one lock must share a hash slot, or their scripts are refused).
//!
//! Each master gets its own client port and cluster-bus port (both picked free; Redis 7's
//! `--cluster-port` means the bus need not be `port + 10000`), then `redis-cli --cluster
//! create` assigns the 16384 slots and the cluster is handed out once every node reports
//! `cluster_state:ok` and knows all the others. No replicas, no persistence.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::child::{kill_and_reap, tail};
use crate::ports::free_port;
use crate::redis_node::{SpawnError, base_args, spawn_redis};
use crate::resp::{self, Reply};
use crate::tools::find_on_path;

const MASTERS: usize = 3;
const START_ATTEMPTS: usize = 4;
const READY_TIMEOUT: Duration = Duration::from_secs(60);
const COMMAND_TIMEOUT: Duration = Duration::from_secs(10);

struct Master {
    child: Mutex<Child>,
    port: u16,
}

/// Three Redis Cluster masters on 127.0.0.1 sharing the 16384 slots; every process is killed
/// (by PID) when this is dropped.
///
/// ```no_run
/// use lockkeeper_testkit::RedisCluster;
/// let cluster = RedisCluster::start();
/// let seeds = cluster.urls(); // ["redis://127.0.0.1:PORT", ...], any one is a seed
/// let slot = cluster.keyslot("{orders}:lock");
/// assert_eq!(slot, cluster.keyslot("{orders}:fence"));
/// # let _ = seeds;
/// ```
pub struct RedisCluster {
    masters: Vec<Master>,
    dir: TempDir,
}

impl RedisCluster {
    /// Starts three masters, joins them into one cluster, and waits until it serves every slot.
    pub fn start() -> RedisCluster {
        let dir = tempfile::Builder::new()
            .prefix("lockkeeper-redis-cluster-")
            .tempdir()
            .expect("create a temporary directory for the cluster");
        let masters = (0..MASTERS)
            .map(|i| start_master(&dir.path().join(format!("node-{i}"))))
            .collect();
        let cluster = RedisCluster { masters, dir };
        cluster.create();
        cluster.wait_ready();
        cluster
    }

    /// `redis://127.0.0.1:PORT` of every master, the seeds a cluster client takes.
    pub fn urls(&self) -> Vec<String> {
        self.addrs()
            .iter()
            .map(|addr| format!("redis://{addr}"))
            .collect()
    }

    /// The client address of every master.
    pub fn addrs(&self) -> Vec<SocketAddr> {
        self.masters
            .iter()
            .map(|m| SocketAddr::from((Ipv4Addr::LOCALHOST, m.port)))
            .collect()
    }

    /// The PIDs of the masters, in the order of [`addrs`](Self::addrs).
    pub fn pids(&self) -> Vec<u32> {
        self.masters
            .iter()
            .map(|m| {
                m.child
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .id()
            })
            .collect()
    }

    /// The hash slot of `key` as the cluster computes it (`CLUSTER KEYSLOT`).
    pub fn keyslot(&self, key: &str) -> u16 {
        match self.command(0, &["CLUSTER", "KEYSLOT", key]) {
            Reply::Int(slot) => u16::try_from(slot).expect("a slot fits in u16"),
            other => panic!("CLUSTER KEYSLOT {key}: {other:?}"),
        }
    }

    /// The master that serves `key`'s slot, as `CLUSTER SLOTS` says.
    pub fn master_for(&self, key: &str) -> SocketAddr {
        let slot = i64::from(self.keyslot(key));
        let Reply::Array(ranges) = self.command(0, &["CLUSTER", "SLOTS"]) else {
            panic!("CLUSTER SLOTS did not answer an array");
        };
        for range in ranges {
            let Reply::Array(fields) = range else {
                continue;
            };
            let (Some(Reply::Int(first)), Some(Reply::Int(last)), Some(Reply::Array(master))) =
                (fields.first(), fields.get(1), fields.get(2))
            else {
                continue;
            };
            if (*first..=*last).contains(&slot)
                && let Some(Reply::Int(port)) = master.get(1)
            {
                let port = u16::try_from(*port).expect("a port fits in u16");
                return SocketAddr::from((Ipv4Addr::LOCALHOST, port));
            }
        }
        panic!("no master serves slot {slot}");
    }

    /// Sends one command to master `index` (0..3) and returns its reply; panics if the node
    /// does not answer.
    pub fn command(&self, index: usize, args: &[&str]) -> Reply {
        let addr = self.addrs()[index];
        resp::command(addr, args, COMMAND_TIMEOUT)
            .unwrap_or_else(|e| panic!("{args:?} to cluster node {addr}: {e}"))
    }

    /// The directory holding each node's `node-N/` (nodes.conf and log).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    fn create(&self) {
        let cli = find_on_path("redis-cli").unwrap_or_else(|| {
            panic!("no `redis-cli` on PATH: install the Debian package `redis-tools`")
        });
        let mut command = Command::new(cli);
        command.arg("--cluster").arg("create");
        for addr in self.addrs() {
            command.arg(addr.to_string());
        }
        let output = command
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .expect("run redis-cli --cluster create");
        let text = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success() && text.contains("All 16384 slots covered"),
            "redis-cli --cluster create failed ({}):\n{text}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }

    fn wait_ready(&self) {
        let started = Instant::now();
        let known = MASTERS.to_string();
        loop {
            let ready = (0..MASTERS).all(|i| {
                let Ok(reply) =
                    resp::command(self.addrs()[i], &["CLUSTER", "INFO"], COMMAND_TIMEOUT)
                else {
                    return false;
                };
                let info = reply.text().unwrap_or_default();
                resp::info_field(info, "cluster_state") == Some("ok")
                    && resp::info_field(info, "cluster_known_nodes") == Some(known.as_str())
            });
            if ready {
                return;
            }
            assert!(
                started.elapsed() < READY_TIMEOUT,
                "the cluster did not reach cluster_state:ok within {READY_TIMEOUT:?}; last log:\n{}",
                tail(
                    &std::fs::read_to_string(self.dir.path().join("node-0/redis.log"))
                        .unwrap_or_default(),
                    30
                )
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for master in &self.masters {
            kill_and_reap(
                &mut master
                    .child
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner),
            );
        }
    }
}

impl std::fmt::Debug for RedisCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisCluster")
            .field("addrs", &self.addrs())
            .finish()
    }
}

fn start_master(dir: &Path) -> Master {
    std::fs::create_dir_all(dir).expect("create a cluster node directory");
    let mut failures = Vec::new();
    for _ in 0..START_ATTEMPTS {
        let port = free_port();
        let bus_port = free_port();
        let mut args = base_args(port, dir, std::net::Ipv4Addr::LOCALHOST);
        args.extend(
            [
                "--cluster-enabled",
                "yes",
                "--cluster-port",
                &bus_port.to_string(),
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                "5000",
                "--save",
                "",
                "--appendonly",
                "no",
            ]
            .map(String::from),
        );
        match spawn_redis(dir, &args, port, &dir.join("redis.log")) {
            Ok(child) => {
                return Master {
                    child: Mutex::new(child),
                    port,
                };
            }
            Err(SpawnError::PortTaken) => {
                failures.push(format!("port {port} or {bus_port} was taken"));
                // A failed start may have written nodes.conf for the old ports.
                let _ = std::fs::remove_file(dir.join("nodes.conf"));
            }
            Err(SpawnError::Failed(why)) => panic!("cluster node on port {port}: {why}"),
        }
    }
    panic!(
        "a cluster node did not start after {START_ATTEMPTS} attempts: {}",
        failures.join("; ")
    );
}
