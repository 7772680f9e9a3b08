//! A real Apache ZooKeeper ensemble: three (or any odd number of) JVMs, for tests
//! of what clients and recipes do when members crash, the leader among them.
//!
//! Each member has its own directory under the ensemble's temporary directory (`zoo.cfg`,
//! `data/myid`, `data/`, `zookeeper.log`) and three free ports: client, peer and election,
//! written as `server.N=IP:PEER:ELECTION;IP:CLIENT` in every member's zoo.cfg. The IP is
//! 127.0.0.1, or with [`ZkEnsemble::start_on`] the address of the member's own [`Host`] (a
//! network namespace), so that a test can cut members apart silently. The JVMs are the ones [`ApacheZk`](crate::ApacheZk) starts (`zk.rs` builds both),
//! run as quorum peers.
//!
//! Invariants:
//! - A member keeps its ports and its data directory for the ensemble's life: a restart is the
//!   same server coming back, as after a crash, and clients find it where they knew it.
//! - The ensemble is *ready* (after [`ZkEnsemble::start`]) when every member answers `srvr`
//!   with `Mode: leader` or `Mode: follower` and exactly one says leader; a restarted member is
//!   back when it says one of those again. Every wait is bounded and panics with each
//!   member's log.
//! - Killing is SIGKILL to the member's own PID, then reaping it; dropping the ensemble kills
//!   every member, and the orphan guard kills them if the test process dies first.
//! - Elections are fast: a short tick, small init and sync limits, and election notifications
//!   capped at one second apart, so a lost leader is replaced within a few seconds.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::child::{kill_and_reap, read_from, tail};
use crate::fourlw::try_four_letter_word;
use crate::host::Host;
use crate::ports::free_port;
use crate::zk::{
    LOG_FILE, Owner, START_ATTEMPTS, START_TIMEOUT, Spawned, StartError, ZkOptions, ZkRole,
    exit_error, owner_of, spawn_server,
};

/// The tick of an ensemble's members unless told otherwise: session timeouts may then be
/// 0.6 s to 6 s (2 to 20 ticks), and the limits below are a few seconds.
pub const ENSEMBLE_TICK_MS: u64 = 300;

/// `initLimit`, in ticks: how long followers may take to connect to a new leader and sync.
/// Generous enough for cold JVMs sharing two cores.
const INIT_LIMIT: u32 = 20;

/// `syncLimit`, in ticks: how far a follower may lag before the leader drops it. A crashed
/// member's sockets close at once, so this only bounds a hung one.
const SYNC_LIMIT: u32 = 10;

/// How long a (re)started member or a new leader may take before the test is failed.
const QUORUM_TIMEOUT: Duration = Duration::from_secs(60);

/// What a member says it is (its `srvr` answer's `Mode:` line), or that it is not running.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemberMode {
    /// The ensemble's leader: every write goes through it.
    Leader,
    /// A follower serving clients.
    Follower,
    /// Running, but not serving: electing, syncing, without a quorum, or still starting.
    NotServing,
    /// Killed (and not restarted).
    Down,
}

impl MemberMode {
    /// Whether a member in this mode serves clients.
    pub fn is_serving(self) -> bool {
        matches!(self, MemberMode::Leader | MemberMode::Follower)
    }
}

/// One member's fixed identity: its myid, ports and directory.
struct Member {
    /// ZooKeeper's server id (`myid`): the index plus one.
    id: usize,
    /// Its own network namespace, or `None` on loopback.
    host: Option<Host>,
    client: u16,
    peer: u16,
    election: u16,
    dir: PathBuf,
    /// The running JVM; `None` while killed.
    child: Mutex<Option<Running>>,
}

struct Running {
    child: Child,
    pid: u32,
    log_start: u64,
}

impl Member {
    fn ip(&self) -> Ipv4Addr {
        self.host
            .as_ref()
            .map_or(Ipv4Addr::LOCALHOST, |host| host.ip)
    }

    fn addr(&self) -> SocketAddr {
        SocketAddr::from((self.ip(), self.client))
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Option<Running>> {
        self.child
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A running ZooKeeper ensemble on loopback, stopped when dropped. All methods take `&self`
/// (members are locked one at a time), so tests can share it across threads and kill one
/// member while another thread asks who leads.
pub struct ZkEnsemble {
    members: Vec<Member>,
    opts: ZkOptions,
    dir: TempDir,
}

impl ZkEnsemble {
    /// Starts `size` members (3 for the usual ensemble; an odd number, at least 3) with
    /// [`ensemble_options`] and waits until one leads and the others follow.
    pub fn start(size: usize) -> ZkEnsemble {
        ZkEnsemble::start_with(size, ensemble_options())
    }

    /// Starts `size` members with `opts` (its tick included) and waits until one leads and the
    /// others follow. Panics with every member's log when that does not happen in time.
    pub fn start_with(size: usize, opts: ZkOptions) -> ZkEnsemble {
        ZkEnsemble::start_placed(vec![None; size], opts)
    }

    /// Starts one member on each of `hosts` (network namespaces the caller made, at least 3
    /// and an odd number), with [`ensemble_options`]; as [`start`](ZkEnsemble::start)
    /// otherwise. Clients reach member `i` at `hosts[i].ip`.
    pub fn start_on(hosts: Vec<Host>) -> ZkEnsemble {
        ZkEnsemble::start_placed(hosts.into_iter().map(Some).collect(), ensemble_options())
    }

    fn start_placed(hosts: Vec<Option<Host>>, opts: ZkOptions) -> ZkEnsemble {
        let size = hosts.len();
        assert!(
            size >= 3 && size % 2 == 1,
            "an ensemble needs an odd number of members, at least 3; asked for {size}"
        );
        let mut failures = Vec::new();
        for _ in 0..START_ATTEMPTS {
            let ensemble = ZkEnsemble::spawn_all(&hosts, opts.clone());
            match ensemble.await_ready() {
                Ok(()) => return ensemble,
                // Dropping the ensemble kills the members that did start.
                Err(StartError::PortTaken(why)) => failures.push(why),
                Err(StartError::Failed(message)) => panic!("{message}"),
            }
        }
        panic!(
            "the ZooKeeper ensemble did not start after {START_ATTEMPTS} attempts: {}",
            failures.join("; ")
        );
    }

    /// Lays out the members on fresh ports and spawns every JVM without waiting in between.
    fn spawn_all(hosts: &[Option<Host>], opts: ZkOptions) -> ZkEnsemble {
        let size = hosts.len();
        let dir = tempfile::Builder::new()
            .prefix("lockkeeper-zk-ensemble-")
            .tempdir()
            .expect("create a temporary directory for the ZooKeeper ensemble");
        let members: Vec<Member> = (0..size)
            .map(|index| Member {
                id: index + 1,
                host: hosts[index].clone(),
                client: free_port(),
                peer: free_port(),
                election: free_port(),
                dir: dir.path().join(format!("member-{}", index + 1)),
                child: Mutex::new(None),
            })
            .collect();
        let ensemble = ZkEnsemble { members, opts, dir };
        for index in 0..size {
            // Spawning fails only when the files cannot be written or java cannot be run: no
            // retry helps. Lost port races show later, as members exiting (`await_ready`).
            if let Err(StartError::Failed(message) | StartError::PortTaken(message)) =
                ensemble.spawn_member(index)
            {
                panic!("ZooKeeper ensemble member {}: {message}", index + 1);
            }
        }
        ensemble
    }

    /// Writes member `index`'s configuration and myid and spawns its JVM.
    fn spawn_member(&self, index: usize) -> Result<(), StartError> {
        let member = &self.members[index];
        let data_dir = member.data_dir();
        std::fs::create_dir_all(&data_dir)
            .and_then(|()| std::fs::write(data_dir.join("myid"), format!("{}\n", member.id)))
            .map_err(|e| StartError::Failed(format!("write {}/myid: {e}", data_dir.display())))?;
        let Spawned { child, log_start } = spawn_server(
            &member.dir,
            &self.member_cfg(&data_dir),
            &self.opts,
            ZkRole::QuorumPeer,
            // A member looking for peers asks again at least every second (ZooKeeper's
            // default backs off to a minute), and gives up on a silent peer after a second.
            &[
                "-Dzookeeper.fastleader.maxNotificationInterval=1000".into(),
                "-Dzookeeper.cnxTimeout=1000".into(),
            ],
            member.host.as_ref(),
        )?;
        let pid = child.id();
        *member.slot() = Some(Running {
            child,
            pid,
            log_start,
        });
        Ok(())
    }

    /// A member's zoo.cfg: the common lines, the limits, and every member's ports.
    fn member_cfg(&self, data_dir: &Path) -> String {
        let mut cfg = self.opts.common_cfg(data_dir);
        cfg.push_str(&format!(
            "initLimit={INIT_LIMIT}\nsyncLimit={SYNC_LIMIT}\nstandaloneEnabled=false\n\
             reconfigEnabled=false\n"
        ));
        for member in &self.members {
            cfg.push_str(&format!(
                "server.{}={ip}:{}:{};{ip}:{}\n",
                member.id,
                member.peer,
                member.election,
                member.client,
                ip = member.ip()
            ));
        }
        cfg
    }

    /// Waits until every member serves, exactly one as leader, and each is ours.
    fn await_ready(&self) -> Result<(), StartError> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            for index in 0..self.members.len() {
                self.check_alive(index)?;
            }
            let modes = self.modes();
            if modes.iter().all(|m| m.is_serving())
                && modes.iter().filter(|m| **m == MemberMode::Leader).count() == 1
            {
                // Serving on our ports; `conf` names the data directory, which tells our
                // server from another test's that took the port first.
                let mut all_ours = true;
                for member in &self.members {
                    match owner_of(member.addr(), &member.data_dir()) {
                        Owner::Ours => {}
                        Owner::Foreign(conf) => {
                            return Err(StartError::PortTaken(format!(
                                "another server answers on {}: {conf}",
                                member.addr()
                            )));
                        }
                        // Not answering `conf` this moment: ask again.
                        Owner::Unknown(_) => all_ours = false,
                    }
                }
                if all_ours {
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                return Err(StartError::Failed(format!(
                    "the ZooKeeper ensemble did not elect a leader within {START_TIMEOUT:?} \
                     (modes {modes:?})\n{}",
                    self.logs()
                )));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// An error if member `index` was started and has exited on its own.
    fn check_alive(&self, index: usize) -> Result<(), StartError> {
        let member = &self.members[index];
        let mut slot = member.slot();
        let Some(running) = slot.as_mut() else {
            return Ok(());
        };
        match running.child.try_wait() {
            Ok(Some(status)) => {
                let error = exit_error(&member.dir, running.log_start, status);
                *slot = None;
                Err(match error {
                    StartError::PortTaken(why) => {
                        StartError::PortTaken(format!("member {}: {why}", member.id))
                    }
                    StartError::Failed(message) => {
                        StartError::Failed(format!("member {}: {message}", member.id))
                    }
                })
            }
            Ok(None) => Ok(()),
            Err(e) => Err(StartError::Failed(format!(
                "wait for member {}: {e}",
                member.id
            ))),
        }
    }

    /// How many members the ensemble has.
    pub fn size(&self) -> usize {
        self.members.len()
    }

    /// The connect string naming every member: `IP:A,IP:B,IP:C`.
    pub fn connect_string(&self) -> String {
        self.members
            .iter()
            .map(|m| m.addr().to_string())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The connect string of member `index` alone (`IP:PORT`).
    pub fn member_connect(&self, index: usize) -> String {
        self.member(index).addr().to_string()
    }

    /// The client address of member `index`.
    pub fn member_addr(&self, index: usize) -> SocketAddr {
        self.member(index).addr()
    }

    /// The PID of member `index`'s JVM, `None` while it is killed.
    pub fn pid(&self, index: usize) -> Option<u32> {
        self.member(index).slot().as_ref().map(|r| r.pid)
    }

    /// What member `index` says it is now (one `srvr`, bounded by two seconds).
    pub fn mode(&self, index: usize) -> MemberMode {
        let member = self.member(index);
        if member.slot().is_none() {
            return MemberMode::Down;
        }
        match try_four_letter_word(member.addr(), "srvr", Duration::from_secs(2)) {
            Ok(answer) => parse_mode(&answer),
            Err(_) => MemberMode::NotServing,
        }
    }

    /// Every member's [`mode`](ZkEnsemble::mode), in member order.
    pub fn modes(&self) -> Vec<MemberMode> {
        (0..self.members.len()).map(|i| self.mode(i)).collect()
    }

    /// The member that leads now, if one says so.
    pub fn try_leader(&self) -> Option<usize> {
        (0..self.members.len()).find(|&i| self.mode(i) == MemberMode::Leader)
    }

    /// The member that leads: waits (bounded) until there is a quorum with a leader.
    pub fn leader(&self) -> usize {
        self.wait_for_quorum(QUORUM_TIMEOUT)
    }

    /// Waits until a majority of the members serve and one of them leads; returns the leader.
    /// Panics with every member's log after `within`.
    pub fn wait_for_quorum(&self, within: Duration) -> usize {
        let deadline = Instant::now() + within;
        loop {
            let modes = self.modes();
            let serving = modes.iter().filter(|m| m.is_serving()).count();
            let leader = modes.iter().position(|m| *m == MemberMode::Leader);
            if let Some(leader) = leader
                && serving * 2 > modes.len()
            {
                return leader;
            }
            assert!(
                Instant::now() < deadline,
                "no quorum with a leader within {within:?} (modes {modes:?})\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until member `index` serves (leads or follows); returns its mode. Panics with
    /// every member's log after `within`, or at once if the member exited on its own.
    pub fn wait_serving(&self, index: usize, within: Duration) -> MemberMode {
        let deadline = Instant::now() + within;
        loop {
            if let Err(StartError::Failed(message) | StartError::PortTaken(message)) =
                self.check_alive(index)
            {
                panic!("{message}");
            }
            let mode = self.mode(index);
            if mode.is_serving() {
                return mode;
            }
            assert!(
                Instant::now() < deadline,
                "member {} did not serve within {within:?} (it is {mode:?}; modes {:?})\n{}",
                index + 1,
                self.modes(),
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Kills member `index` (SIGKILL, a crash) and reaps it. Killing a killed member does
    /// nothing.
    pub fn kill(&self, index: usize) {
        if let Some(mut running) = self.member(index).slot().take() {
            kill_and_reap(&mut running.child);
        }
    }

    /// Kills the current leader (waiting, bounded, for there to be one); returns its index.
    pub fn kill_leader(&self) -> usize {
        let leader = self.leader();
        self.kill(leader);
        leader
    }

    /// Starts member `index` again (killing it first if it runs) on the same ports with the
    /// same data directory, and waits until it has rejoined as follower or leader. Rejoining
    /// needs a quorum: restart enough members for one before expecting this to return.
    pub fn restart(&self, index: usize) {
        self.restart_no_wait(index);
        self.wait_serving(index, QUORUM_TIMEOUT);
    }

    /// Like [`restart`](ZkEnsemble::restart), without waiting for it to rejoin: for bringing
    /// back two members of a three-member ensemble that has lost its quorum.
    pub fn restart_no_wait(&self, index: usize) {
        self.kill(index);
        // The same ports and data directory: clients and peers know these. ZooKeeper binds
        // with SO_REUSEADDR, so the ports a killed member just held are free for it at once;
        // a member that cannot start anyway exits, which `wait_serving` reports with its log.
        if let Err(StartError::PortTaken(why) | StartError::Failed(why)) = self.spawn_member(index)
        {
            panic!("ZooKeeper ensemble member {} restart: {why}", index + 1);
        }
    }

    /// Everything member `index` has logged so far (across its restarts).
    pub fn log(&self, index: usize) -> String {
        std::fs::read_to_string(self.member(index).dir.join(LOG_FILE)).unwrap_or_default()
    }

    /// The ensemble's directory (one `member-N/` per member).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Member `index`'s data directory (`dataDir`, holding `myid`).
    pub fn data_dir(&self, index: usize) -> PathBuf {
        self.member(index).data_dir()
    }

    /// The tail of every member's log since its latest start, for panic messages.
    fn logs(&self) -> String {
        self.members
            .iter()
            .map(|member| {
                let start = member.slot().as_ref().map_or(0, |r| r.log_start);
                let log = read_from(&member.dir.join(LOG_FILE), start);
                format!(
                    "--- member {} (client {}, peer {}, election {}) log:\n{}",
                    member.id,
                    member.client,
                    member.peer,
                    member.election,
                    tail(&log, 25)
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn member(&self, index: usize) -> &Member {
        self.members.get(index).unwrap_or_else(|| {
            panic!(
                "no member {index}: the ensemble has members 0..{}",
                self.members.len()
            )
        })
    }
}

/// As a [`TestServer`](crate::TestServer), the ensemble is reached through all its members;
/// `addr()` is the first member's (for tests that open a raw connection to one server).
impl crate::TestServer for ZkEnsemble {
    fn addr(&self) -> SocketAddr {
        self.member_addr(0)
    }
    fn connect_string(&self) -> String {
        ZkEnsemble::connect_string(self)
    }
    fn name(&self) -> &'static str {
        "ensemble"
    }
}

impl Drop for ZkEnsemble {
    fn drop(&mut self) {
        for index in 0..self.members.len() {
            self.kill(index);
        }
    }
}

impl std::fmt::Debug for ZkEnsemble {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZkEnsemble")
            .field("connect", &self.connect_string())
            .field("dir", &self.dir.path())
            .finish()
    }
}

/// The options an ensemble starts with by default: [`ZkOptions::default`] with the short
/// tick of [`ENSEMBLE_TICK_MS`].
pub fn ensemble_options() -> ZkOptions {
    ZkOptions {
        tick_time_ms: ENSEMBLE_TICK_MS,
        ..ZkOptions::default()
    }
}

/// The mode in a `srvr` answer; a member that is not serving answers without a `Mode:` line.
fn parse_mode(srvr: &str) -> MemberMode {
    let mode = srvr
        .lines()
        .find_map(|line| line.strip_prefix("Mode:"))
        .map(str::trim);
    match mode {
        Some("leader") => MemberMode::Leader,
        Some("follower") => MemberMode::Follower,
        _ => MemberMode::NotServing,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_come_from_srvr() {
        assert_eq!(
            parse_mode("Zookeeper version: 3.8.0\nLatency min/avg/max: 0/0.0/0\nMode: leader\n"),
            MemberMode::Leader
        );
        assert_eq!(
            parse_mode("Mode: follower\nNode count: 5\n"),
            MemberMode::Follower
        );
        assert_eq!(
            parse_mode("This ZooKeeper instance is not currently serving requests\n"),
            MemberMode::NotServing
        );
        assert_eq!(parse_mode("Mode: standalone\n"), MemberMode::NotServing);
    }
}
