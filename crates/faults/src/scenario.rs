//! Scenarios: one lock kind on one backend under one fault, run for a bounded time with a
//! fresh resource server and three client processes, giving one row of the table.
//!
//! Invariants:
//! - Every run is bounded: a warm-up of at most [`WARM_UP_LIMIT`], the fault (its own bounded
//!   length), then the rest of the scenario's length; clients are SIGKILLed at the end (and by
//!   the kernel if the orchestrator dies: they are spawned with `die_with_parent`).
//! - Only processes this run started are signalled, by PID.
//! - A scenario's seed is derived from the run's seed and the scenario's name, so
//!   `--seed N --only BACKEND/KIND/FAULT` replays it alone with the same client seeds.

use std::fmt;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use lockkeeper_testkit::{Proxy, die_with_parent};
use tokio::time::Instant;

use crate::backend::{Backend, BackendKind};
use crate::client::{ETCD_TTL, REDIS_LEASE, ZK_SESSION};
use crate::clock::{CLOCK_JUMP, FakeClock};
use crate::fences::{Fences, Stores};
use crate::kind::Kind;
use crate::process::{kill, pause, resume};
use crate::resource::{Counts, Resource};

/// Clients contending for the lock in each scenario.
pub(crate) const CLIENTS: usize = 3;
/// The longest wait for the first turns before the fault.
const WARM_UP_LIMIT: Duration = Duration::from_secs(20);
/// The longest wait for the lock to be granted again after a fault.
const RECOVERY_LIMIT: Duration = Duration::from_secs(40);
/// The longest wait for a client to be inside the resource, to pick it as the victim.
const HOLDER_WAIT: Duration = Duration::from_secs(10);

/// A fault injected once in a scenario.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fault {
    /// No fault: the baseline.
    None,
    /// The holder SIGSTOPped past its session or lease, then resumed.
    Pause,
    /// The holder SIGKILLed (and replaced by a new client).
    Kill,
    /// The holder cut from its server by its loopback proxy past its session or lease, then
    /// healed.
    Cut,
    /// The backend's server-side fault ([`Backend::server_fault`]).
    Server,
    /// The holder's wall clock stepped [`CLOCK_JUMP`] seconds ahead, and back after the
    /// outage (libfaketime; the monotonic clock is left alone, as NTP leaves it).
    ClientClock,
    /// Mixed: the holder paused as in [`Fault::Pause`], and the backend's server fault struck
    /// while it is stopped.
    PauseAndServer,
    /// The servers' wall clock stepped [`CLOCK_JUMP`] seconds ahead while a client holds the
    /// lock, and back after the outage ([`Backend::server_clock`]: on Redlock three of the
    /// five masters jump together).
    ServerClock,
    /// The holder's host silently partitioned from the server's for the outage (packets
    /// dropped both ways, connections left open), then healed; namespaced backends only.
    Partition,
    /// The holder's host hears nothing from the server's for the outage (the server still
    /// hears it), then healed; namespaced backends only.
    OneWay,
    /// The holder paused at the start of its turn, and it and the leading member cut from
    /// the other members (a minority with the old leader), until someone else entered; the
    /// holder then resumed on the minority side, and the partition healed a moment later.
    /// Backends whose servers elect a leader, on hosts of their own.
    MinorityLeader,
    /// Sentinel's master and the holder split from the replica, the other sentinels and the
    /// other clients (both ways, silently) until the majority's sentinels have promoted the
    /// replica and someone else holds the lock there; then healed. The holder is not
    /// paused: it goes on renewing and writing through the old master.
    SplitBrain,
    /// Every host, servers and clients, drops [`LOSS_PERCENT`] % of the packets it receives,
    /// at random, for [`LOSSY_FOR`]: a lossy network under everyone. Namespaced backends only.
    Lossy,
    /// The holder's proxy holds everything it relays, both ways, for [`SLOW_LATENCY`] plus up
    /// to [`SLOW_JITTER`], for as long as a pause: a slow link (what `netem delay` would do;
    /// this kernel has none). Backends with per-client proxies.
    Slow,
    /// Every host, servers and clients, holds each packet it receives from the others for
    /// [`SLOW_LATENCY`] plus up to [`SLOW_JITTER`] (an `NFQUEUE` delayer: [`crate::delay`]),
    /// for [`LOSSY_FOR`]: a slow network between the servers too. Namespaced backends only.
    SlowNetwork,
}

impl Fault {
    /// Whether the fault leaves a holder that writes after someone else took the lock: a
    /// process paused between its check and its write wakes into a stale write, which only a
    /// fence can stop. A row of such a fault that saw no stale attempt tested nothing.
    pub(crate) fn makes_zombies(self) -> bool {
        matches!(
            self,
            Fault::Pause | Fault::PauseAndServer | Fault::MinorityLeader
        )
    }

    /// The name in the table (the server fault is named by the backend).
    pub(crate) fn name(self, backend: BackendKind) -> &'static str {
        match self {
            Fault::None => "none",
            Fault::Pause => "holder-paused",
            Fault::Kill => "holder-killed",
            Fault::Cut => "holder-cut",
            Fault::Server => server_fault_name(backend),
            Fault::ClientClock => "holder-clock-jump",
            Fault::PauseAndServer => mixed_fault_name(backend),
            Fault::ServerClock => "server-clock-jump",
            Fault::Partition => "holder-partitioned",
            Fault::OneWay => "holder-deaf",
            Fault::MinorityLeader => "paused+leader-isolated",
            Fault::SplitBrain => "master-isolated",
            Fault::Lossy => "network-lossy-5%",
            Fault::Slow => "holder-slow-200ms",
            Fault::SlowNetwork => "network-slow-200ms",
        }
    }
}

fn mixed_fault_name(backend: BackendKind) -> &'static str {
    match backend {
        BackendKind::Keeper | BackendKind::KeeperNetns | BackendKind::Zookeeper => {
            "paused+server-restart"
        }
        BackendKind::Ensemble | BackendKind::EnsembleNetns => "paused+leader-kill",
        BackendKind::Redis => "paused+master-kill",
        BackendKind::Sentinel | BackendKind::SentinelNetns => "paused+failover",
        BackendKind::Redlock => "paused+majority-restart",
        BackendKind::Etcd => "paused+member-kill",
        BackendKind::EtcdCluster | BackendKind::EtcdClusterNetns => "paused+leader-kill",
    }
}

fn server_fault_name(backend: BackendKind) -> &'static str {
    match backend {
        BackendKind::Keeper | BackendKind::KeeperNetns | BackendKind::Zookeeper => "server-restart",
        BackendKind::Ensemble | BackendKind::EnsembleNetns => "leader-kill",
        BackendKind::Redis => "master-kill",
        BackendKind::Sentinel | BackendKind::SentinelNetns => "failover",
        BackendKind::Redlock => "majority-restart",
        BackendKind::Etcd => "member-kill",
        BackendKind::EtcdCluster | BackendKind::EtcdClusterNetns => "leader-kill",
    }
}

/// One scenario.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Scenario {
    /// The backend.
    pub backend: BackendKind,
    /// The lock kind.
    pub kind: Kind,
    /// The fault.
    pub fault: Fault,
}

impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{}/{}",
            self.backend,
            self.kind,
            self.fault.name(self.backend)
        )
    }
}

impl Scenario {
    /// Whether `pattern` (`BACKEND`, `BACKEND/KIND` or `BACKEND/KIND/FAULT`) selects it.
    pub(crate) fn matches(&self, pattern: &str) -> bool {
        let name = self.to_string();
        name == pattern || name.starts_with(&format!("{pattern}/"))
    }

    /// This scenario's seed under the run's `seed`: FNV-1a of the name, mixed with the seed.
    pub(crate) fn seed(&self, seed: u64) -> u64 {
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325 ^ seed;
        for byte in self.to_string().bytes() {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
        hash
    }

    /// How long the holder is kept paused or cut: past its session or lease.
    fn outage(&self) -> Duration {
        if self.backend.is_zookeeper() {
            ZK_SESSION + Duration::from_secs(2)
        } else if self.backend.is_etcd() {
            ETCD_TTL + Duration::from_secs(2)
        } else {
            REDIS_LEASE + Duration::from_millis(1500)
        }
    }
}

/// Every scenario of the full run, in table order.
pub(crate) fn all() -> Vec<Scenario> {
    let backends = [
        BackendKind::Keeper,
        BackendKind::KeeperNetns,
        BackendKind::Zookeeper,
        BackendKind::Ensemble,
        BackendKind::EnsembleNetns,
        BackendKind::Redis,
        BackendKind::Sentinel,
        BackendKind::SentinelNetns,
        BackendKind::Redlock,
        BackendKind::Etcd,
        BackendKind::EtcdCluster,
        BackendKind::EtcdClusterNetns,
    ];
    let mut scenarios = Vec::new();
    for backend in backends {
        // A Sentinel client learns the master's address from the sentinels, around any proxy.
        let cuttable = backend != BackendKind::Sentinel;
        // Client clock jumps on one backend of each family are enough: the library's clocks
        // are the same code everywhere.
        let client_clock = matches!(
            backend,
            BackendKind::Keeper | BackendKind::Redis | BackendKind::Redlock | BackendKind::Etcd
        );
        let faults = [
            Fault::None,
            Fault::Pause,
            Fault::Kill,
            Fault::Cut,
            Fault::Server,
            Fault::ClientClock,
            Fault::PauseAndServer,
            Fault::ServerClock,
            Fault::Partition,
            Fault::OneWay,
            Fault::MinorityLeader,
            Fault::SplitBrain,
            Fault::Lossy,
            Fault::Slow,
            Fault::SlowNetwork,
        ];
        for &kind in backend.kinds() {
            for fault in faults {
                // The counter's and the queue's clients run in this process: no pause, kill or
                // clock of theirs.
                if matches!(
                    kind,
                    Kind::AtomicLong
                        | Kind::Queue
                        | Kind::TwoPhase
                        | Kind::DoubleBarrier
                        | Kind::Cache
                ) && !matches!(fault, Fault::None | Fault::Cut | Fault::Server)
                {
                    continue;
                }
                // Namespaced hosts get the faults that are about the network, and a baseline,
                // a pause and a server restart to compare them with; only they get those.
                let network = matches!(
                    fault,
                    Fault::Partition
                        | Fault::OneWay
                        | Fault::MinorityLeader
                        | Fault::SplitBrain
                        | Fault::Lossy
                        | Fault::SlowNetwork
                );
                // Beside the network faults, a baseline: the other faults run on the loopback
                // twins of the namespaced backends.
                let compared = fault == Fault::None;
                if backend.is_netns() && !(network || compared) || !backend.is_netns() && network {
                    continue;
                }
                // The command and the second lease: the faults that differ for them (a
                // paused or killed process tree, a lapsed lease among two), not the clocks and
                // mixes the other kinds show on the same backends.
                let core = matches!(
                    fault,
                    Fault::None | Fault::Pause | Fault::Kill | Fault::Server
                ) || (kind == Kind::Semaphore2 && fault == Fault::Cut);
                // A slow link or network once per backend, on its first lock kind.
                let first_kind = kind == backend.kinds()[0];
                if (fault == Fault::Slow && (!cuttable || !first_kind))
                    || (fault == Fault::SlowNetwork && !first_kind)
                    || (matches!(kind, Kind::CliElect | Kind::Semaphore2) && !core)
                    || (fault == Fault::MinorityLeader && !backend.has_leader())
                    || (fault == Fault::SplitBrain && !backend.is_sentinel())
                    || (fault == Fault::Cut && !cuttable)
                    || (fault == Fault::ClientClock && !client_clock)
                    || (fault == Fault::ServerClock && !backend.has_server_clock())
                {
                    continue;
                }
                scenarios.push(Scenario {
                    backend,
                    kind,
                    fault,
                });
            }
        }
    }
    scenarios
}

/// The short run: the faults that decide the table's claims, on the cheapest backends.
pub(crate) fn short() -> Vec<Scenario> {
    let pick = [
        (BackendKind::Keeper, Kind::Mutex, Fault::Pause),
        (BackendKind::Keeper, Kind::Mutex, Fault::Kill),
        (BackendKind::Keeper, Kind::RwWrite, Fault::Cut),
        (BackendKind::Keeper, Kind::Semaphore, Fault::Server),
        (BackendKind::Zookeeper, Kind::Mutex, Fault::Pause),
        (BackendKind::Zookeeper, Kind::Leader, Fault::PauseAndServer),
        (BackendKind::Keeper, Kind::AtomicLong, Fault::Server),
        (BackendKind::Keeper, Kind::Queue, Fault::Cut),
        (BackendKind::Zookeeper, Kind::TwoPhase, Fault::Cut),
        (BackendKind::Keeper, Kind::DoubleBarrier, Fault::Cut),
        (BackendKind::Keeper, Kind::Cache, Fault::Cut),
        (BackendKind::KeeperNetns, Kind::Mutex, Fault::Partition),
        (BackendKind::Redis, Kind::Lease, Fault::Pause),
        (BackendKind::Redis, Kind::Reentrant, Fault::Server),
        (BackendKind::Redis, Kind::Lease, Fault::ClientClock),
        (BackendKind::Redis, Kind::Lease, Fault::ServerClock),
        (BackendKind::Sentinel, Kind::Lease, Fault::Server),
        (BackendKind::Redlock, Kind::Redlock, Fault::Server),
        (BackendKind::Etcd, Kind::Mutex, Fault::Pause),
    ];
    pick.into_iter()
        .map(|(backend, kind, fault)| Scenario {
            backend,
            kind,
            fault,
        })
        .collect()
}

/// One row of the table.
#[derive(Clone, Debug)]
pub(crate) struct Row {
    /// What ran.
    pub scenario: Scenario,
    /// Its seed.
    pub seed: u64,
    /// What the resource saw.
    pub counts: Counts,
    /// How long the scenario took, start to end.
    pub took: Duration,
    /// Whether the fault was injected: a holder fault needs a client inside the resource, and
    /// none may have been within [`HOLDER_WAIT`] (the table says so).
    pub struck: bool,
    /// What the fences' history checks found wrong (empty: every fence's accepted tokens rose
    /// and its store holds the last accepted write).
    pub fence_problems: Vec<String>,
    /// What the exclusion checker found in the resource's history (tokens of accepted writes
    /// going down, a leader's term not above the last).
    pub history_problems: Vec<String>,
    /// What the run adds that is not a problem (a queue's redeliveries, a counter's calls).
    pub notes: Vec<String>,
}

/// One client process and what the suite can do to it besides signals.
struct ClientProc {
    name: String,
    child: Child,
    /// Its own proxy in front of the backend's servers (to cut it alone).
    proxy: Option<Proxy>,
    /// Its own clock, in a scenario that steps one.
    clock: Option<FakeClock>,
}

/// The client processes of one scenario, SIGKILLed on drop.
struct Clients {
    procs: Vec<ClientProc>,
}

impl Clients {
    fn slot(&self, name: &str) -> Option<usize> {
        self.procs.iter().position(|p| p.name == name)
    }
}

impl Drop for Clients {
    fn drop(&mut self) {
        for proc in &mut self.procs {
            kill(&mut proc.child);
        }
    }
}

struct Spawner<'a> {
    exe: &'a std::path::Path,
    backend: &'a Backend,
    scenario: Scenario,
    lock: String,
    resource: std::net::SocketAddr,
    seed: u64,
    run_for: Duration,
    /// Where the clients' clock files live.
    dir: &'a std::path::Path,
}

impl Spawner<'_> {
    async fn spawn(&self, index: usize, generation: usize) -> ClientProc {
        // A client on a host of its own reaches the server directly; one on loopback through
        // a proxy of its own, to be cut off alone.
        let proxy = match self.backend.proxied_upstream() {
            Some(upstream) if self.backend.net().is_none() => Some(Proxy::start(&upstream).await),
            _ => None,
        };
        let name = format!("c{index}.{generation}");
        let seed = self.seed.wrapping_add((index * 1000 + generation) as u64);
        let mut command = Command::new(self.exe);
        command
            .arg("client")
            .arg("--backend")
            .arg(self.backend.endpoint(proxy.as_ref()))
            .arg("--kind")
            .arg(self.scenario.kind.name())
            .arg("--lock")
            .arg(&self.lock)
            .arg("--resource")
            .arg(self.resource.to_string())
            .arg("--name")
            .arg(&name)
            .arg("--seed")
            .arg(seed.to_string())
            .arg("--run-for-ms")
            .arg(self.run_for.as_millis().to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        if std::env::var_os("LOCKKEEPER_FAULTS_VERBOSE").is_none() {
            command.stderr(Stdio::null());
        }
        let clock = if self.scenario.fault == Fault::ClientClock {
            let clock = FakeClock::new(self.dir.join(format!("{name}.faketime")))
                .unwrap_or_else(|e| panic!("clock file for {name}: {e}"));
            clock
                .apply(&mut command)
                .unwrap_or_else(|e| panic!("{}: {e}", self.scenario));
            Some(clock)
        } else {
            None
        };
        if let Some(net) = self.backend.net() {
            net.enter(self.backend.client_host(index), &mut command)
                .unwrap_or_else(|e| panic!("{}: client {name}'s host: {e}", self.scenario));
        }
        die_with_parent(&mut command);
        let child = command
            .spawn()
            .unwrap_or_else(|e| panic!("spawn client {name} ({}): {e}", self.exe.display()));
        ClientProc {
            name,
            child,
            proxy,
            clock,
        }
    }
}

/// Waits (bounded) for a client to be inside the resource; its name.
async fn wait_holder(resource: &Resource) -> Option<String> {
    let deadline = Instant::now() + HOLDER_WAIT;
    while Instant::now() < deadline {
        if let Some(holder) = resource.holder().await {
            return Some(holder);
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    None
}

/// Waits (bounded) for a client to begin a turn, and names it: a holder struck at the start of
/// its turn still has all its writes to make, so a pause makes a zombie of it whenever the lock
/// passes on (struck at the end of its turn it might have none left).
async fn wait_new_holder(resource: &Resource) -> Option<String> {
    let deadline = Instant::now() + HOLDER_WAIT;
    let turns = resource.counts().await.turns;
    while Instant::now() < deadline {
        if resource.counts().await.turns > turns
            && let Some(holder) = resource.holder().await
        {
            return Some(holder);
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    None
}

/// A slow link's latency, each way ([`Fault::Slow`]), and its jitter: 150 to 250 ms, as
/// `netem delay 200ms 50ms` would hold packets.
const SLOW_LATENCY: Duration = Duration::from_millis(150);
const SLOW_JITTER: Duration = Duration::from_millis(100);

/// The share of packets a lossy network drops ([`Fault::Lossy`]), in percent.
const LOSS_PERCENT: u32 = 5;
/// How long the network is lossy.
const LOSSY_FOR: Duration = Duration::from_secs(8);

/// How long a holder resumed on a minority's side runs there before the partition heals.
const MINORITY_AWAKE: Duration = Duration::from_secs(2);

/// Cuts the leading member (or Sentinel's master, with the sentinel beside it) and client
/// slot `slot`'s host from every other host, servers and clients (both ways, silently),
/// leaving them a minority of two hosts; the hosts cut (to heal) and the leader's. Without a
/// leader found (an election under way) the holder alone is cut off.
async fn isolate_with_leader(
    backend: &Backend,
    scenario: Scenario,
    slot: usize,
) -> (Vec<usize>, Option<usize>) {
    let net = backend
        .net()
        .unwrap_or_else(|| panic!("{scenario}: a minority needs namespaced hosts"));
    let holder = backend.client_host(slot);
    let leader = backend.leader_host().await;
    if leader.is_none() {
        eprintln!("{scenario}: no leader found; the holder alone is cut off");
    }
    let mut isolated = vec![holder];
    isolated.extend(leader);
    for other in (0..net.hosts()).filter(|h| !isolated.contains(h)) {
        for &host in &isolated {
            net.cut(host, net.addr(other), false)
                .unwrap_or_else(|e| panic!("{scenario}: cut: {e}"));
        }
    }
    (isolated, leader)
}

/// Keeps a paused holder stopped until someone else has entered the resource after it
/// (bounded by [`RECOVERY_LIMIT`]): a zombie is a holder that wakes after the lock passed on,
/// and how long that takes past the outage depends on the server (a restarted one times
/// sessions anew). If nobody enters in time the row shows no stale attempt, and is vacuous.
async fn successor(resource: &Resource, paused: &str) {
    let deadline = Instant::now() + RECOVERY_LIMIT;
    // As many entered after it as the lock admits (one, or a semaphore's N).
    while resource.is_recent(paused).await && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The successor's first write lands before the zombie's.
    tokio::time::sleep(Duration::from_millis(200)).await;
}

/// Runs `scenario` on `backend` for about `length` (plus the fault's own length), its
/// resource's fences on `stores`.
pub(crate) async fn run(
    exe: &std::path::Path,
    backend: &mut Backend,
    stores: &Stores,
    scenario: Scenario,
    seed: u64,
    length: Duration,
) -> Row {
    match scenario.kind {
        Kind::AtomicLong => return crate::counter_run::run(backend, scenario, seed, length).await,
        Kind::Queue => return crate::queue_run::run(backend, scenario, seed, length).await,
        Kind::TwoPhase => {
            return crate::two_phase_run::run(backend, scenario, seed, length).await;
        }
        Kind::Cache => return crate::cache_run::run(backend, scenario, seed, length).await,
        Kind::DoubleBarrier => {
            return crate::barrier_run::run(backend, scenario, seed, length).await;
        }
        _ => {}
    }
    let started = Instant::now();
    let resource_id = format!(
        "{}-{}-{}-{seed:x}",
        scenario.backend,
        scenario.kind,
        scenario.fault.name(scenario.backend)
    );
    // On a ZooKeeper backend the ZooKeeper fence lives on the backend itself, reached
    // directly (no client's proxy), and checks each writer's lock node.
    let zk_backend = scenario
        .backend
        .is_zookeeper()
        .then(|| backend.proxied_upstream())
        .flatten();
    let fences = Fences::open(stores, &resource_id, zk_backend.as_deref())
        .await
        .unwrap_or_else(|e| panic!("{scenario}: {e}"));
    // Clients on hosts of their own reach the resource at the bridge's address.
    let resource_ip = backend.net().map_or(
        std::net::Ipv4Addr::LOCALHOST,
        super::netns::Net::bridge_addr,
    );
    let resource = Resource::start(fences, resource_ip, scenario.kind.holders())
        .await
        .unwrap_or_else(|e| panic!("bind the resource server on {resource_ip}: {e}"));
    let lock = if scenario.backend.is_zookeeper() {
        format!("/faults/{}-{seed:x}", scenario.kind)
    } else if scenario.backend.is_etcd() {
        format!("faults/{}-{seed:x}", scenario.kind)
    } else {
        format!("faults-{}-{seed:x}", scenario.kind)
    };
    let outage = scenario.outage();
    // Clients outlive the scenario's plan by a margin; they are killed at its end anyway.
    let run_for = WARM_UP_LIMIT + length + outage + Duration::from_secs(60);
    let mut clients = Clients { procs: Vec::new() };
    let mut notes = Vec::new();
    let mut paused = None;
    let mut struck = matches!(
        scenario.fault,
        Fault::None | Fault::Server | Fault::ServerClock | Fault::Lossy | Fault::SlowNetwork
    );
    let dir = tempfile::tempdir().expect("a temporary directory for the clients' clocks");
    {
        let spawner = Spawner {
            exe,
            backend,
            scenario,
            lock,
            resource: resource.addr(),
            seed,
            run_for,
            dir: dir.path(),
        };
        for index in 0..CLIENTS {
            clients.procs.push(spawner.spawn(index, 0).await);
        }
        // Warm-up: the clients connected and took turns.
        let warm = Instant::now() + WARM_UP_LIMIT;
        while resource.counts().await.turns < CLIENTS as u64 && Instant::now() < warm {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tokio::time::sleep(length / 4).await;
        if !matches!(
            scenario.fault,
            Fault::None | Fault::Server | Fault::ServerClock | Fault::Lossy | Fault::SlowNetwork
        ) {
            let victim = wait_new_holder(&resource).await;
            match victim.as_deref().and_then(|v| clients.slot(v)) {
                None => eprintln!("{scenario}: no holder to fault within {HOLDER_WAIT:?}"),
                Some(slot) => {
                    struck = true;
                    let proc = &mut clients.procs[slot];
                    match scenario.fault {
                        Fault::Pause => {
                            pause(proc.child.id());
                            tokio::time::sleep(outage).await;
                            successor(&resource, &proc.name).await;
                            resume(proc.child.id()).await;
                        }
                        Fault::PauseAndServer => {
                            // Resumed below, after the server fault (which needs the backend).
                            pause(proc.child.id());
                            paused = Some((proc.child.id(), proc.name.clone(), Instant::now()));
                        }
                        Fault::Kill => {
                            kill(&mut proc.child);
                            clients.procs[slot] = spawner.spawn(slot, 1).await;
                        }
                        Fault::Cut => {
                            if let Some(proxy) = &proc.proxy {
                                proxy.cut();
                                tokio::time::sleep(outage).await;
                                proxy.heal();
                            }
                        }
                        Fault::Slow => {
                            if let Some(proxy) = &proc.proxy {
                                proxy.set_latency(SLOW_LATENCY, SLOW_JITTER);
                                tokio::time::sleep(outage).await;
                                proxy.set_latency(Duration::ZERO, Duration::ZERO);
                            }
                        }
                        Fault::ClientClock => {
                            if let Some(clock) = &proc.clock {
                                let _ = clock.jump(CLOCK_JUMP);
                                tokio::time::sleep(outage).await;
                                let _ = clock.jump(0);
                            }
                        }
                        Fault::Partition | Fault::OneWay => {
                            let net = backend.net().unwrap_or_else(|| {
                                panic!("{scenario}: a partition needs namespaced hosts")
                            });
                            let one_way = scenario.fault == Fault::OneWay;
                            let host = backend.client_host(slot);
                            for server in 0..scenario.backend.server_hosts() {
                                net.cut(host, net.addr(server), one_way)
                                    .unwrap_or_else(|e| panic!("{scenario}: cut: {e}"));
                            }
                            tokio::time::sleep(outage).await;
                            net.heal(host)
                                .unwrap_or_else(|e| panic!("{scenario}: heal: {e}"));
                        }
                        Fault::MinorityLeader => {
                            pause(proc.child.id());
                            let (isolated, leader) =
                                isolate_with_leader(backend, scenario, slot).await;
                            tokio::time::sleep(outage).await;
                            successor(&resource, &proc.name).await;
                            resume(proc.child.id()).await;
                            // The holder wakes on the minority side and writes with its token.
                            tokio::time::sleep(MINORITY_AWAKE).await;
                            let leads = backend.leader_host().await;
                            if let Some(net) = backend.net() {
                                for host in isolated {
                                    net.heal(host)
                                        .unwrap_or_else(|e| panic!("{scenario}: heal: {e}"));
                                }
                            }
                            notes.push(match (leader, leads) {
                                (Some(old), Some(new)) if old != new => format!(
                                    "member {} isolated while leading; member {} led the majority",
                                    old + 1,
                                    new + 1
                                ),
                                (old, new) => format!(
                                    "leading member when isolated: {old:?}; before healing: {new:?} \
                                     (0-based)"
                                ),
                            });
                        }
                        Fault::SplitBrain => {
                            let (isolated, master) =
                                isolate_with_leader(backend, scenario, slot).await;
                            // Until the majority's sentinels promoted the replica and someone
                            // else holds the lock there, then a while with both sides writing.
                            tokio::time::sleep(outage).await;
                            successor(&resource, &proc.name).await;
                            tokio::time::sleep(MINORITY_AWAKE).await;
                            let majority = backend.leader_host().await;
                            if let Some(net) = backend.net() {
                                for host in isolated {
                                    net.heal(host)
                                        .unwrap_or_else(|e| panic!("{scenario}: heal: {e}"));
                                }
                            }
                            notes.push(format!(
                                "the master (host {master:?}) split off with the holder; the \
                                 majority's sentinels' master before healing: host {majority:?}"
                            ));
                        }
                        Fault::None
                        | Fault::Server
                        | Fault::ServerClock
                        | Fault::Lossy
                        | Fault::SlowNetwork => {
                            unreachable!("no victim for these")
                        }
                    }
                }
            }
        }
    }
    if let Some((pid, name, since)) = paused {
        backend.server_fault().await;
        tokio::time::sleep(outage.saturating_sub(since.elapsed())).await;
        successor(&resource, &name).await;
        resume(pid).await;
    }
    if matches!(scenario.fault, Fault::Server | Fault::ServerClock) {
        // Strike while someone holds the lock: a fault between turns tests nothing.
        if wait_holder(&resource).await.is_none() {
            eprintln!("{scenario}: no holder within {HOLDER_WAIT:?}; faulting anyway");
        }
        let struck = Instant::now();
        if scenario.fault == Fault::Server {
            backend.server_fault().await;
        } else {
            let clock = backend
                .server_clock()
                .unwrap_or_else(|| panic!("{scenario}: the backend has no server clock"));
            clock
                .jump(CLOCK_JUMP)
                .unwrap_or_else(|e| panic!("{scenario}: jump the server clock: {e}"));
            tokio::time::sleep(outage).await;
            clock
                .jump(0)
                .unwrap_or_else(|e| panic!("{scenario}: jump the server clock back: {e}"));
        }
        eprintln!(
            "{scenario}: server fault took {:.2} s",
            struck.elapsed().as_secs_f64()
        );
    }
    if scenario.fault == Fault::Lossy {
        let net = backend
            .net()
            .unwrap_or_else(|| panic!("{scenario}: a lossy network needs namespaced hosts"));
        let turns = resource.counts().await.turns;
        for host in 0..net.hosts() {
            net.lossy(host, LOSS_PERCENT)
                .unwrap_or_else(|e| panic!("{scenario}: lossy: {e}"));
        }
        tokio::time::sleep(LOSSY_FOR).await;
        for host in 0..net.hosts() {
            net.heal(host)
                .unwrap_or_else(|e| panic!("{scenario}: heal: {e}"));
        }
        notes.push(format!(
            "{} turns while every host dropped {LOSS_PERCENT} % of what it received",
            resource.counts().await.turns - turns
        ));
    }
    if scenario.fault == Fault::SlowNetwork {
        let net = backend
            .net()
            .unwrap_or_else(|| panic!("{scenario}: a slow network needs namespaced hosts"));
        let turns = resource.counts().await.turns;
        let mut delayers = Vec::new();
        for host in 0..net.hosts() {
            delayers.push(
                net.slow(host, exe, SLOW_LATENCY, SLOW_JITTER)
                    .unwrap_or_else(|e| panic!("{scenario}: slow: {e}")),
            );
        }
        tokio::time::sleep(LOSSY_FOR).await;
        for host in 0..net.hosts() {
            net.unslow(host)
                .unwrap_or_else(|e| panic!("{scenario}: unslow: {e}"));
        }
        for mut delayer in delayers {
            let _ = delayer.kill();
            let _ = delayer.wait();
        }
        notes.push(format!(
            "{} turns while every host held what it received {}-{} ms",
            resource.counts().await.turns - turns,
            SLOW_LATENCY.as_millis(),
            (SLOW_LATENCY + SLOW_JITTER).as_millis()
        ));
    }
    // The lock must come back: wait (bounded) for the next turn after the fault, so the
    // unavailability it caused is measured even when it outlasts the scenario's length.
    let after_fault = resource.counts().await.turns;
    let recovered = Instant::now() + RECOVERY_LIMIT;
    while resource.counts().await.turns == after_fault && Instant::now() < recovered {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(length - length / 4).await;
    drop(clients);
    Row {
        scenario,
        seed,
        counts: resource.counts().await,
        took: started.elapsed(),
        struck,
        fence_problems: resource.check_fences().await,
        history_problems: resource
            .check_history(
                scenario.kind.holders(),
                matches!(scenario.kind, Kind::Leader | Kind::CliElect),
            )
            .await,
        notes,
    }
}
