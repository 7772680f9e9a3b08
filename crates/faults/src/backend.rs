//! The backends the suite runs against, started by testkit on loopback ports, and the
//! server-side faults each supports.
//!
//! Invariants: one backend value owns its servers and stops them on drop; every blocking
//! testkit call (start, kill, restart, failover) runs on a blocking thread so the resource
//! server and the proxies keep running meanwhile; every backend but Sentinel is reached through
//! a per-client [`Proxy`] (relaying every member or master) so one client can be cut off alone.

use std::fmt;

use std::path::Path;

use lockkeeper_testkit::{
    ApacheZk, Etcd, EtcdCluster, Host, NodeOptions, Proxy, RedisNode, RedisSentinel, TestServer,
    ZkEnsemble,
};

use std::sync::Arc;

use crate::keeper_proc::KeeperProcess;
use crate::kind::Kind;
use crate::netns::Net;
use crate::scenario::CLIENTS;
use crate::shim::ServerClock;

/// A backend of the suite.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum BackendKind {
    /// Keeper, a process of its own (this binary's `keeper` subcommand).
    Keeper,
    /// Keeper on a host of its own (a network namespace), each client on another, so faults
    /// can drop packets silently ([`crate::netns`]).
    KeeperNetns,
    /// One Apache ZooKeeper server.
    Zookeeper,
    /// A three-member Apache ZooKeeper ensemble.
    Ensemble,
    /// The ensemble with each member and each client on a host of its own, so members can be
    /// cut apart (a leader left in a minority) as well as clients from them.
    EnsembleNetns,
    /// One redis-server with `appendonly yes`, `appendfsync always`.
    Redis,
    /// A master, a replica and three sentinels (no persistence: Sentinel's usual setup).
    Sentinel,
    /// Sentinel's set on hosts of its own: the master with a sentinel, the replica with a
    /// sentinel, a third sentinel alone; and each client on a host of its own, so the master
    /// can be split from the rest with a client (split brain).
    SentinelNetns,
    /// Five independent redis-server masters without persistence.
    Redlock,
    /// One etcd member (testkit's: its data on disk, fsynced as etcd always does).
    Etcd,
    /// A three-member etcd cluster.
    EtcdCluster,
    /// The etcd cluster with each member and each client on a host of its own, so members
    /// can be cut apart (a leader left in a minority) as well as clients from them.
    EtcdClusterNetns,
}

impl BackendKind {
    /// The table and `--only` name.
    pub(crate) fn name(self) -> &'static str {
        match self {
            BackendKind::Keeper => "keeper",
            BackendKind::KeeperNetns => "keeper-netns",
            BackendKind::Zookeeper => "zookeeper",
            BackendKind::Ensemble => "zk-ensemble",
            BackendKind::EnsembleNetns => "zk-ensemble-netns",
            BackendKind::Redis => "redis-aof",
            BackendKind::Sentinel => "redis-sentinel",
            BackendKind::SentinelNetns => "redis-sentinel-netns",
            BackendKind::Redlock => "redlock-5",
            BackendKind::Etcd => "etcd",
            BackendKind::EtcdCluster => "etcd-3",
            BackendKind::EtcdClusterNetns => "etcd-3-netns",
        }
    }

    /// Whether it is Keeper or ZooKeeper: locks are paths, held by sessions of
    /// [`ZK_SESSION`](crate::client::ZK_SESSION).
    pub(crate) fn is_zookeeper(self) -> bool {
        matches!(
            self,
            BackendKind::Keeper
                | BackendKind::KeeperNetns
                | BackendKind::Zookeeper
                | BackendKind::Ensemble
                | BackendKind::EnsembleNetns
        )
    }

    /// Whether its servers and clients are hosts of their own (network namespaces).
    pub(crate) fn is_netns(self) -> bool {
        matches!(
            self,
            BackendKind::KeeperNetns
                | BackendKind::EnsembleNetns
                | BackendKind::EtcdClusterNetns
                | BackendKind::SentinelNetns
        )
    }

    /// How many hosts its servers take (hosts `0..n`; client slot `i` is host `n + i`), on a
    /// namespaced backend.
    pub(crate) fn server_hosts(self) -> usize {
        match self {
            BackendKind::EnsembleNetns
            | BackendKind::EtcdClusterNetns
            | BackendKind::SentinelNetns => ENSEMBLE_SIZE,
            _ => 1,
        }
    }

    /// Whether its servers elect a leader (Raft, ZAB) that a partition can leave in a
    /// minority.
    pub(crate) fn has_leader(self) -> bool {
        matches!(
            self,
            BackendKind::EnsembleNetns | BackendKind::EtcdClusterNetns
        )
    }

    /// Whether it is Sentinel's set, whose master a partition can split from the rest.
    pub(crate) fn is_sentinel(self) -> bool {
        matches!(self, BackendKind::Sentinel | BackendKind::SentinelNetns)
    }

    /// Whether it is etcd: locks are key prefixes, held by leases of
    /// [`ETCD_TTL`](crate::client::ETCD_TTL).
    pub(crate) fn is_etcd(self) -> bool {
        matches!(
            self,
            BackendKind::Etcd | BackendKind::EtcdCluster | BackendKind::EtcdClusterNetns
        )
    }

    /// Whether its servers run with a jumpable wall clock (the suite's server clock jump):
    /// Keeper, the AOF redis-server, and three of the five Redlock masters. Sentinel's nodes
    /// are started by testkit without that hook, and Apache ZooKeeper times sessions with the
    /// JVM's monotonic clock as Keeper does, which Keeper's row shows.
    pub(crate) fn has_server_clock(self) -> bool {
        matches!(
            self,
            BackendKind::Keeper | BackendKind::Redis | BackendKind::Redlock
        )
    }

    /// The lock kinds that run on it.
    pub(crate) fn kinds(self) -> &'static [Kind] {
        match self {
            BackendKind::Keeper | BackendKind::Zookeeper => &[
                Kind::Mutex,
                Kind::RwWrite,
                Kind::Semaphore,
                Kind::Semaphore2,
                Kind::Leader,
                Kind::AtomicLong,
                Kind::Queue,
                Kind::TwoPhase,
                Kind::DoubleBarrier,
                Kind::Cache,
                Kind::CliElect,
            ],
            BackendKind::Ensemble => &[Kind::Mutex, Kind::RwWrite, Kind::Semaphore, Kind::Leader],
            BackendKind::KeeperNetns
            | BackendKind::EnsembleNetns
            | BackendKind::EtcdClusterNetns => &[Kind::Mutex, Kind::Leader],
            BackendKind::Redis | BackendKind::Sentinel => &[Kind::Lease, Kind::Reentrant],
            // The split brain is the master's, whichever lock the client holds.
            BackendKind::SentinelNetns => &[Kind::Lease],
            BackendKind::Redlock => &[Kind::Redlock],
            BackendKind::Etcd => &[
                Kind::Mutex,
                Kind::RwWrite,
                Kind::Semaphore,
                Kind::Semaphore2,
                Kind::Leader,
            ],
            BackendKind::EtcdCluster => {
                &[Kind::Mutex, Kind::RwWrite, Kind::Semaphore, Kind::Leader]
            }
        }
    }
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

enum Servers {
    Keeper(KeeperProcess),
    KeeperNetns(KeeperProcess),
    Zookeeper(ApacheZk),
    Ensemble(ZkEnsemble),
    Redis(RedisNode),
    Sentinel(RedisSentinel),
    Redlock(Vec<RedisNode>),
    Etcd(Etcd),
    EtcdCluster(EtcdCluster),
}

/// Running servers of one backend.
pub(crate) struct Backend {
    kind: BackendKind,
    servers: Servers,
    /// The clock the servers follow, where [`BackendKind::has_server_clock`]; its directory
    /// holds the compiled shim and the offset file.
    clock: Option<(ServerClock, tempfile::TempDir)>,
    /// The hosts, for a namespaced backend: the servers' first
    /// ([`BackendKind::server_hosts`]), then one per client slot. Declared after `servers`,
    /// so the servers stop before their namespaces go.
    net: Option<Arc<Net>>,
}

/// Members of the ZooKeeper ensembles.
const ENSEMBLE_SIZE: usize = 3;

/// Runs a blocking testkit call off the async threads.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    match tokio::task::spawn_blocking(f).await {
        Ok(value) => value,
        Err(err) => std::panic::resume_unwind(err.into_panic()),
    }
}

impl Backend {
    /// Starts the servers (blocking work on a blocking thread); `exe` is this binary, whose
    /// `keeper` subcommand is the Keeper server.
    pub(crate) async fn start(kind: BackendKind, exe: &Path) -> Backend {
        let clock = kind.has_server_clock().then(|| {
            let dir = tempfile::Builder::new()
                .prefix("lockkeeper-faults-clock-")
                .tempdir()
                .unwrap_or_else(|e| panic!("a directory for {kind}'s server clock: {e}"));
            let clock = ServerClock::new(dir.path().join("wallclock"))
                .unwrap_or_else(|e| panic!("{kind}'s server clock: {e}"));
            (clock, dir)
        });
        // A namespaced backend's hosts: its servers' first, then one per client slot.
        let net = kind.is_netns().then(|| {
            Arc::new(
                Net::create(kind.server_hosts() + CLIENTS)
                    .unwrap_or_else(|e| panic!("{kind}'s network namespaces: {e}")),
            )
        });
        let servers_on = |net: &Option<Arc<Net>>| -> Vec<Host> {
            let net = net.as_ref().expect("a namespaced backend has hosts");
            (0..kind.server_hosts())
                .map(|host| net.host(host))
                .collect()
        };
        let servers = match kind {
            BackendKind::KeeperNetns => {
                let hosts = net.clone().expect("a namespaced backend has hosts");
                let keeper = KeeperProcess::start_in(exe, hosts, 0)
                    .unwrap_or_else(|e| panic!("start Keeper in its namespace: {e}"));
                Servers::KeeperNetns(keeper)
            }
            // Spawned from this (long-lived) thread: its parent-death signal is tied to the
            // spawning thread, and blocking threads are retired when idle. Keeper serves within
            // milliseconds, so the wait blocks little.
            BackendKind::Keeper => Servers::Keeper(
                KeeperProcess::start(exe, clock.as_ref().map(|(c, _)| c.clone()))
                    .unwrap_or_else(|e| panic!("start Keeper: {e}")),
            ),
            BackendKind::EnsembleNetns => {
                let members = servers_on(&net);
                blocking(move || Servers::Ensemble(ZkEnsemble::start_on(members))).await
            }
            BackendKind::EtcdClusterNetns => {
                let members = servers_on(&net);
                blocking(move || Servers::EtcdCluster(EtcdCluster::start_on(members))).await
            }
            // The master and the replica each with a sentinel beside it, a third one alone.
            BackendKind::SentinelNetns => {
                let hosts = servers_on(&net);
                let (master, replica) = (hosts[0].clone(), hosts[1].clone());
                blocking(move || Servers::Sentinel(RedisSentinel::start_on(master, replica, hosts)))
                    .await
            }
            _ => {
                let follower = clock.as_ref().map(|(c, _)| c.clone());
                blocking(move || Backend::start_blocking(kind, follower)).await
            }
        };
        Backend {
            kind,
            servers,
            clock,
            net,
        }
    }

    /// The hosts of a namespaced backend (the servers' first, then the clients').
    pub(crate) fn net(&self) -> Option<&Net> {
        self.net.as_deref()
    }

    /// The host of client slot `slot`, on a namespaced backend.
    pub(crate) fn client_host(&self, slot: usize) -> usize {
        self.kind.server_hosts() + slot
    }

    /// The host of the member that leads now, or of Sentinel's master (asked of the servers,
    /// bounded), on a namespaced backend that has one.
    pub(crate) async fn leader_host(&self) -> Option<usize> {
        // Each member asked in turn (`srvr`, or etcd's status): quick, but blocking.
        match &self.servers {
            Servers::Ensemble(ensemble) => tokio::task::block_in_place(|| ensemble.try_leader()),
            Servers::EtcdCluster(cluster) => {
                tokio::task::block_in_place(|| cluster.try_leader_now())
            }
            // The master, as a majority of the sentinels see it, by its address.
            Servers::Sentinel(set) => {
                let net = self.net.as_ref()?;
                let master = tokio::task::block_in_place(|| set.master_by_majority())?;
                (0..self.kind.server_hosts()).find(|&host| net.addr(host) == master.ip())
            }
            _ => None,
        }
    }

    /// Starts the servers testkit guards itself (they outlive no test process); the Redis
    /// masters that follow a server clock follow `clock`.
    fn start_blocking(kind: BackendKind, clock: Option<ServerClock>) -> Servers {
        let options = |options: NodeOptions| match &clock {
            Some(clock) => clock.node_options(options),
            None => options,
        };
        match kind {
            BackendKind::Keeper
            | BackendKind::KeeperNetns
            | BackendKind::EnsembleNetns
            | BackendKind::EtcdClusterNetns
            | BackendKind::SentinelNetns => {
                unreachable!("started on the caller's thread")
            }
            BackendKind::Zookeeper => Servers::Zookeeper(ApacheZk::start()),
            BackendKind::Ensemble => Servers::Ensemble(ZkEnsemble::start(3)),
            BackendKind::Redis => Servers::Redis(RedisNode::start_with(options(
                NodeOptions::new().durable(true),
            ))),
            BackendKind::Sentinel => Servers::Sentinel(RedisSentinel::start(3)),
            BackendKind::Etcd => Servers::Etcd(Etcd::start()),
            BackendKind::EtcdCluster => Servers::EtcdCluster(EtcdCluster::start(3)),
            // The first three follow the clock: a majority whose clocks jump together.
            BackendKind::Redlock => Servers::Redlock(
                (0..5)
                    .map(|i| {
                        if i < 3 {
                            RedisNode::start_with(options(NodeOptions::new()))
                        } else {
                            RedisNode::start()
                        }
                    })
                    .collect(),
            ),
        }
    }

    /// Which backend this is.
    pub(crate) fn kind(&self) -> BackendKind {
        self.kind
    }

    /// The servers a per-client proxy stands in front of (a connect string: every member or
    /// master), so one client can be cut off alone; `None` for Sentinel, whose clients learn
    /// the master's address from the sentinels and so would go around a proxy.
    pub(crate) fn proxied_upstream(&self) -> Option<String> {
        match &self.servers {
            Servers::Keeper(k) | Servers::KeeperNetns(k) => Some(k.connect_string()),
            Servers::Zookeeper(z) => Some(z.connect_string()),
            Servers::Ensemble(e) => Some(e.connect_string()),
            Servers::Redis(r) => Some(r.addr().to_string()),
            Servers::Redlock(nodes) => Some(
                nodes
                    .iter()
                    .map(|n| n.addr().to_string())
                    .collect::<Vec<_>>()
                    .join(","),
            ),
            Servers::Etcd(e) => Some(e.addr().to_string()),
            Servers::EtcdCluster(c) => Some(
                (0..c.size())
                    .map(|i| c.addr(i).to_string())
                    .collect::<Vec<_>>()
                    .join(","),
            ),
            Servers::Sentinel(_) => None,
        }
    }

    /// The `--backend` argument for a client, through `proxy` when given.
    pub(crate) fn endpoint(&self, proxy: Option<&Proxy>) -> String {
        let hosts = proxy
            .map(Proxy::connect_string)
            .or_else(|| self.proxied_upstream());
        match &self.servers {
            Servers::Keeper(_)
            | Servers::KeeperNetns(_)
            | Servers::Zookeeper(_)
            | Servers::Ensemble(_) => {
                format!("zk://{}", hosts.unwrap_or_default())
            }
            Servers::Redis(_) => format!("redis://{}", hosts.unwrap_or_default()),
            Servers::Redlock(_) => format!("redlock://{}", hosts.unwrap_or_default()),
            Servers::Etcd(_) | Servers::EtcdCluster(_) => {
                format!("etcd://{}", hosts.unwrap_or_default())
            }
            Servers::Sentinel(s) => {
                let hosts: Vec<String> =
                    s.sentinel_addrs().iter().map(ToString::to_string).collect();
                format!("redis+sentinel://{}@{}", s.master_name(), hosts.join(","))
            }
        }
    }

    /// The server's transaction log, the server's own order of events, which a checker may
    /// read: Keeper's, or one Apache ZooKeeper's (not an ensemble's: no one member's log is
    /// the whole order a checker would need across a leader change).
    pub(crate) fn server_history(
        &self,
    ) -> Option<Result<Vec<(i64, lockkeeper_server::Txn)>, String>> {
        match &self.servers {
            Servers::Keeper(k) | Servers::KeeperNetns(k) => {
                Some(lockkeeper_server::recovery::history(&k.data_dir()).map_err(|e| e.to_string()))
            }
            Servers::Zookeeper(z) => Some(crate::check::zk_log::history(
                &z.dir().join("data").join("version-2"),
            )),
            _ => None,
        }
    }

    /// The clock the servers follow, if the backend has one.
    pub(crate) fn server_clock(&self) -> Option<&ServerClock> {
        self.clock.as_ref().map(|(clock, _)| clock)
    }

    /// Injects the server-side fault and recovers from it: Keeper or ZooKeeper SIGKILLed and
    /// restarted on its data; the
    /// ensemble's leader SIGKILLed and restarted; the Redis master SIGKILLed and restarted on
    /// its append-only file; a Sentinel failover (SENTINEL FAILOVER: the replica, which may
    /// lag, is promoted); three of the five Redlock masters SIGKILLed and restarted empty (no
    /// persistence), a majority forgetting every lock at once; the one etcd member SIGKILLed
    /// and restarted on its data; the etcd cluster's leader SIGKILLed and restarted (the
    /// others elect a new leader meanwhile).
    pub(crate) async fn server_fault(&mut self) {
        if let Servers::Keeper(k) | Servers::KeeperNetns(k) = &mut self.servers {
            // On this thread, as in `start`.
            k.kill_and_restart()
                .unwrap_or_else(|e| panic!("server fault: {e}"));
            return;
        }
        // Move the servers onto a blocking thread and back.
        let servers = std::mem::replace(&mut self.servers, Servers::Redlock(Vec::new()));
        self.servers = blocking(move || {
            let mut servers = servers;
            match &mut servers {
                Servers::Keeper(_) | Servers::KeeperNetns(_) => {
                    unreachable!("faulted on the caller's thread")
                }
                Servers::Zookeeper(z) => z.restart(),
                Servers::Ensemble(e) => {
                    let leader = e.kill_leader();
                    e.restart(leader);
                }
                Servers::Redis(r) => r.restart(),
                Servers::Sentinel(s) => {
                    s.failover();
                }
                Servers::Etcd(e) => e.restart(),
                Servers::EtcdCluster(c) => {
                    let leader = c.kill_leader();
                    c.restart(leader);
                }
                Servers::Redlock(nodes) => {
                    // All three down first, so no vote can land between the restarts.
                    for node in nodes.iter().take(3) {
                        node.kill();
                    }
                    for node in nodes.iter().take(3) {
                        node.restart();
                    }
                }
            }
            servers
        })
        .await;
    }
}
