//! Real etcd servers for tests: one member ([`Etcd`]) or a cluster ([`EtcdCluster`]) on
//! 127.0.0.1 (or, with [`EtcdCluster::start_on`], each member on a [`Host`] of its own: a
//! network namespace the caller made), each member a child `etcd` process that a test can
//! SIGKILL and start again.
//!
//! Each member has a free client port and a free peer port, a data directory under the
//! cluster's temporary directory and a log (`<name>.log`, appended over its runs). Every member
//! is started with `--initial-cluster` naming all members' loopback peer URLs, and with short
//! Raft timings ([`HEARTBEAT_MS`], [`ELECTION_MS`]) so a lost leader is replaced in about a
//! second.
//!
//! Invariants:
//! - Only 127.0.0.1 (or the member's host address) is listened on: client and peer URLs are
//!   that address, and etcd 3.4 opens no other listener unless `--listen-metrics-urls` is
//!   given (it is not).
//! - A member keeps its ports and data directory for the cluster's life: a restart is the same
//!   member coming back after a crash, with what it had made durable.
//! - A member is *ready* when `GET /health` on its client port answers `"health":"true"`,
//!   which etcd says only once the member knows a leader. [`EtcdCluster::leader`] is the member
//!   that itself reports being the leader (`/v3/maintenance/status` on the HTTP gateway). Every
//!   wait is bounded and fails naming the address and the end of the member's log.
//! - Killing is SIGKILL to the member's own PID, then reaping it; dropping kills every member,
//!   and the orphan guard kills them if the test process dies first.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::child::{die_with_parent, guarded_command, kill_and_reap, read_from, tail};
use crate::host::{Host, command_on};
use crate::http::try_http_exchange;
use crate::ports::free_port;
use crate::tools::find_on_path;

/// Raft heartbeat interval given to every member, in milliseconds (etcd's default is 100).
pub const HEARTBEAT_MS: u64 = 50;
/// Raft election timeout given to every member, in milliseconds (etcd's default is 1000).
pub const ELECTION_MS: u64 = 500;
/// How long a member may take to serve, or a cluster to elect a leader.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How many sets of ports are tried when another process takes one first.
const START_ATTEMPTS: usize = 4;
/// How long [`etcdctl`] may run.
const ETCDCTL_TIMEOUT: Duration = Duration::from_secs(30);
/// What etcd logs when a port it should listen on is taken.
const PORT_TAKEN: &str = "address already in use";

/// One member's fixed identity and its running process.
struct Member {
    name: String,
    /// Its own network namespace, or `None` on loopback.
    host: Option<Host>,
    client: u16,
    peer: u16,
    /// The TLS client port, for a cluster started with TLS.
    secure: Option<u16>,
    data_dir: PathBuf,
    log: PathBuf,
    /// The running etcd and where its log began for this run; `None` while killed.
    child: Mutex<Option<(Child, u64)>>,
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

    fn endpoint(&self) -> String {
        format!("http://{}", self.addr())
    }

    /// `https://IP:PORT`, for a cluster started with TLS.
    fn secure_endpoint(&self) -> Option<String> {
        self.secure
            .map(|port| format!("https://{}:{port}", self.ip()))
    }

    fn peer_url(&self) -> String {
        format!("http://{}:{}", self.ip(), self.peer)
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Option<(Child, u64)>> {
        self.child
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn pid(&self) -> Option<u32> {
        self.slot().as_ref().map(|(child, _)| child.id())
    }

    fn kill(&self) {
        if let Some((mut child, _)) = self.slot().take() {
            kill_and_reap(&mut child);
        }
    }

    /// The log of the current (or last) run, for error messages.
    fn log_tail(&self) -> String {
        let start = self.slot().as_ref().map_or(0, |(_, start)| *start);
        tail(&read_from(&self.log, start), 30)
    }
}

/// What the TLS client URLs of a test etcd present and whom they admit (PEM files).
#[derive(Debug, Clone)]
pub struct EtcdTls {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// `--trusted-ca-file`: the CA that signs client certificates.
    pub ca: PathBuf,
    /// `--client-cert-auth`: clients of the TLS URL must present a certificate `ca` signed.
    pub client_cert_auth: bool,
}

/// Why a member did not come up.
enum StartError {
    /// Another process bound one of its ports first: try other ports.
    PortTaken(String),
    Failed(String),
}

/// A running etcd cluster on loopback (usually three members), stopped when dropped. Methods
/// take `&self`, so a test may kill a member on one thread while another asks who leads.
pub struct EtcdCluster {
    members: Vec<Member>,
    /// What the members' TLS client ports present and whom they admit.
    tls: Option<EtcdTls>,
    /// Holds every member's data and log; the orphan guard's marker.
    dir: TempDir,
}

impl EtcdCluster {
    /// Starts `size` members and waits (bounded) until each serves and one leads. Panics with
    /// the failing member's address and log.
    pub fn start(size: usize) -> EtcdCluster {
        EtcdCluster::try_start(size).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`EtcdCluster::start`], returning the failure instead of panicking.
    pub fn try_start(size: usize) -> Result<EtcdCluster, String> {
        EtcdCluster::try_start_placed(vec![None; size], None)
    }

    /// Starts one member on each of `hosts` (network namespaces the caller made); as
    /// [`start`](EtcdCluster::start) otherwise. Clients reach member `i` at `hosts[i].ip`.
    pub fn start_on(hosts: Vec<Host>) -> EtcdCluster {
        EtcdCluster::try_start_placed(hosts.into_iter().map(Some).collect(), None)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    fn try_start_placed(
        hosts: Vec<Option<Host>>,
        tls: Option<EtcdTls>,
    ) -> Result<EtcdCluster, String> {
        let size = hosts.len();
        if size == 0 {
            return Err("an etcd cluster needs at least one member; asked for size 0".into());
        }
        let mut failures = Vec::new();
        for _ in 0..START_ATTEMPTS {
            let cluster = EtcdCluster::lay_out(&hosts, tls.clone())?;
            let mut started = Ok(());
            for index in 0..size {
                started = cluster.spawn(index);
                if started.is_err() {
                    break;
                }
            }
            let ready = started.and_then(|()| {
                (0..size).try_for_each(|index| cluster.await_healthy(index))?;
                cluster.try_leader().map(drop)
            });
            match ready {
                Ok(()) => return Ok(cluster),
                // Dropping the cluster kills the members that did start.
                Err(StartError::PortTaken(why)) => failures.push(why),
                Err(StartError::Failed(why)) => return Err(why),
            }
        }
        Err(format!(
            "the etcd cluster did not start after {START_ATTEMPTS} attempts: {}",
            failures.join("; ")
        ))
    }

    fn lay_out(hosts: &[Option<Host>], tls: Option<EtcdTls>) -> Result<EtcdCluster, String> {
        let dir = tempfile::Builder::new()
            .prefix("lockkeeper-etcd-")
            .tempdir()
            .map_err(|e| format!("create a temporary directory for etcd: {e}"))?;
        let members = hosts
            .iter()
            .enumerate()
            .map(|(index, host)| {
                let name = format!("m{index}");
                Member {
                    host: host.clone(),
                    data_dir: dir.path().join(&name),
                    log: dir.path().join(format!("{name}.log")),
                    name,
                    client: free_port(),
                    peer: free_port(),
                    secure: tls.as_ref().map(|_| free_port()),
                    child: Mutex::new(None),
                }
            })
            .collect();
        Ok(EtcdCluster { members, tls, dir })
    }

    /// The client endpoints, `http://IP:PORT`, in member order (fixed for the cluster's
    /// life, whether a member runs or not).
    pub fn endpoints(&self) -> Vec<String> {
        self.members.iter().map(Member::endpoint).collect()
    }

    /// Member `index`'s client address.
    pub fn addr(&self, index: usize) -> SocketAddr {
        self.member(index).addr()
    }

    /// How many members the cluster has (running or not).
    pub fn size(&self) -> usize {
        self.members.len()
    }

    /// The PID of member `index`'s etcd, `None` while it is killed.
    pub fn pid(&self, index: usize) -> Option<u32> {
        self.member(index).pid()
    }

    /// Kills member `index` with SIGKILL (a crash) and reaps it; nothing if it is not running.
    pub fn kill(&self, index: usize) {
        self.member(index).kill();
    }

    /// Kills member `index` if it runs, starts it again on the same ports and data, and waits
    /// (bounded) until it serves, which means it has rejoined and knows a leader.
    pub fn restart(&self, index: usize) {
        self.kill(index);
        let member = self.member(index);
        let started = Instant::now();
        loop {
            // The ports were the member's a moment ago: a brief retry covers a slow release.
            match self.spawn(index).and_then(|()| self.await_healthy(index)) {
                Ok(()) => return,
                Err(StartError::PortTaken(_)) if started.elapsed() < READY_TIMEOUT => {
                    member.kill();
                    std::thread::sleep(Duration::from_millis(200));
                }
                Err(StartError::PortTaken(why) | StartError::Failed(why)) => {
                    panic!("restarting etcd member {}: {why}", member.name)
                }
            }
        }
    }

    /// The index of the member that leads, waiting (bounded) until a running member says it
    /// is the leader. Panics with every member's log when none does in time.
    pub fn leader(&self) -> usize {
        match self.try_leader() {
            Ok(index) => index,
            Err(StartError::PortTaken(why) | StartError::Failed(why)) => panic!("{why}"),
        }
    }

    /// The member that reports itself the leader now (each running member asked once), if
    /// any: no wait for an election. During a partition an isolated leader may still say so
    /// until its election timeout passes.
    pub fn try_leader_now(&self) -> Option<usize> {
        self.members.iter().position(|member| {
            member.pid().is_some()
                && http(member.addr(), "POST", "/v3/maintenance/status", "{}")
                    .is_some_and(|status| reports_itself_leader(&status))
        })
    }

    /// Kills the current leader and returns its index.
    pub fn kill_leader(&self) -> usize {
        let leader = self.leader();
        self.kill(leader);
        leader
    }

    fn member(&self, index: usize) -> &Member {
        self.members.get(index).unwrap_or_else(|| {
            panic!(
                "no etcd member {index}: the cluster has {}",
                self.members.len()
            )
        })
    }

    fn try_leader(&self) -> Result<usize, StartError> {
        let started = Instant::now();
        while started.elapsed() < READY_TIMEOUT {
            for (index, member) in self.members.iter().enumerate() {
                if member.pid().is_none() {
                    continue;
                }
                let Some(status) = http(member.addr(), "POST", "/v3/maintenance/status", "{}")
                else {
                    continue;
                };
                if reports_itself_leader(&status) {
                    return Ok(index);
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let logs: Vec<String> = self
            .members
            .iter()
            .map(|m| format!("--- {} ({}):\n{}", m.name, m.addr(), m.log_tail()))
            .collect();
        Err(StartError::Failed(format!(
            "no etcd member reported being the leader within {READY_TIMEOUT:?}; logs:\n{}",
            logs.join("\n")
        )))
    }

    /// Spawns member `index`'s etcd under the orphan guard, without waiting.
    fn spawn(&self, index: usize) -> Result<(), StartError> {
        let member = self.member(index);
        let program = find_on_path("etcd").ok_or_else(|| {
            StartError::Failed("no `etcd` on PATH: install the Debian package `etcd-server`".into())
        })?;
        let log_start = std::fs::metadata(&member.log).map_or(0, |m| m.len());
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&member.log)
            .and_then(|log| Ok((log.try_clone()?, log)));
        let (out, err) = log.map_err(|e| {
            StartError::Failed(format!("open the etcd log {}: {e}", member.log.display()))
        })?;
        let initial_cluster: Vec<String> = self
            .members
            .iter()
            .map(|m| format!("{}={}", m.name, m.peer_url()))
            .collect();
        let (program, leading) = command_on(member.host.as_ref(), program);
        let mut command: Command = guarded_command(self.dir.path(), program);
        // The plain URL stays for the readiness checks; with TLS, a second one beside it.
        let client_urls = match member.secure_endpoint() {
            Some(secure) => format!("{},{secure}", member.endpoint()),
            None => member.endpoint(),
        };
        if let Some(tls) = &self.tls {
            command
                .arg("--cert-file")
                .arg(&tls.cert)
                .arg("--key-file")
                .arg(&tls.key)
                .arg("--trusted-ca-file")
                .arg(&tls.ca)
                .arg(format!("--client-cert-auth={}", tls.client_cert_auth));
        }
        command
            .args(leading)
            .arg("--name")
            .arg(&member.name)
            .arg("--data-dir")
            .arg(&member.data_dir)
            .args(["--listen-client-urls", &client_urls])
            .args(["--advertise-client-urls", &client_urls])
            .args(["--listen-peer-urls", &member.peer_url()])
            .args(["--initial-advertise-peer-urls", &member.peer_url()])
            .args(["--initial-cluster", &initial_cluster.join(",")])
            // Ignored once the data directory exists, so a restart rejoins the same cluster.
            .args(["--initial-cluster-state", "new"])
            .args(["--initial-cluster-token", "lockkeeper-test"])
            .args(["--heartbeat-interval", &HEARTBEAT_MS.to_string()])
            .args(["--election-timeout", &ELECTION_MS.to_string()])
            .args(["--logger", "zap", "--log-outputs", "stderr"])
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        let child = command.spawn().map_err(|e| {
            StartError::Failed(format!("spawn etcd for {}: {e}", member.endpoint()))
        })?;
        *member.slot() = Some((child, log_start));
        Ok(())
    }

    /// Waits until member `index` answers `/health` with `"health":"true"`, or fails with its
    /// address and log (as [`StartError::PortTaken`] when the log says a port was taken).
    fn await_healthy(&self, index: usize) -> Result<(), StartError> {
        let member = self.member(index);
        let started = Instant::now();
        let why = loop {
            if let Some((child, _)) = member.slot().as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    break format!("exited ({status})");
                }
            } else {
                break "was killed while starting".into();
            }
            if http(member.addr(), "GET", "/health", "")
                .is_some_and(|body| body.contains(r#""health":"true""#))
            {
                return Ok(());
            }
            if started.elapsed() > READY_TIMEOUT {
                break format!("not healthy within {READY_TIMEOUT:?}");
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let log = member.log_tail();
        let message = format!(
            "etcd member {} on {} (peer {}) {why}; log:\n{log}",
            member.name,
            member.addr(),
            member.peer_url()
        );
        if log.contains(PORT_TAKEN) {
            Err(StartError::PortTaken(message))
        } else {
            Err(StartError::Failed(message))
        }
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for member in &self.members {
            member.kill();
        }
    }
}

impl std::fmt::Debug for EtcdCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdCluster")
            .field("endpoints", &self.endpoints())
            .finish()
    }
}

/// A single etcd member on 127.0.0.1 that a test can crash and restart on the same port and
/// data; killed (by its PID) when dropped.
///
/// ```no_run
/// use lockkeeper_testkit::{Etcd, etcdctl};
/// let etcd = Etcd::start();
/// etcdctl(&[etcd.endpoint()], &["put", "k", "v"]).unwrap();
/// etcd.kill(); // SIGKILL
/// etcd.restart(); // same port, same data directory
/// assert_eq!(etcdctl(&[etcd.endpoint()], &["get", "k", "--print-value-only"]).unwrap(), "v\n");
/// ```
#[derive(Debug)]
pub struct Etcd {
    cluster: EtcdCluster,
}

impl Etcd {
    /// Starts one member on free loopback ports; returns once it serves. Panics naming the
    /// address and the end of etcd's log when it does not.
    pub fn start() -> Etcd {
        Etcd::try_start().unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Etcd::start`], returning the failure instead of panicking.
    pub fn try_start() -> Result<Etcd, String> {
        EtcdCluster::try_start(1).map(|cluster| Etcd { cluster })
    }

    /// [`Etcd::start`] with a TLS client URL beside the plain one (which the readiness checks
    /// use): [`Etcd::secure_endpoint`].
    pub fn start_tls(tls: EtcdTls) -> Etcd {
        EtcdCluster::try_start_placed(vec![None], Some(tls))
            .map(|cluster| Etcd { cluster })
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// `http://127.0.0.1:PORT`, the same across restarts.
    pub fn endpoint(&self) -> String {
        self.cluster.members[0].endpoint()
    }

    /// `https://127.0.0.1:PORT`, the TLS client URL of [`Etcd::start_tls`]; panics without one.
    pub fn secure_endpoint(&self) -> String {
        self.cluster.members[0]
            .secure_endpoint()
            .expect("started with start_tls")
    }

    /// The client address (the same across restarts).
    pub fn addr(&self) -> SocketAddr {
        self.cluster.addr(0)
    }

    /// The PID of the running etcd, `None` while it is killed.
    pub fn pid(&self) -> Option<u32> {
        self.cluster.pid(0)
    }

    /// Kills etcd with SIGKILL (a crash) and reaps it; nothing if it is not running.
    pub fn kill(&self) {
        self.cluster.kill(0);
    }

    /// Kills etcd if it runs and starts it again on the same ports and data; returns once it
    /// serves.
    pub fn restart(&self) {
        self.cluster.restart(0);
    }
}

/// Runs `etcdctl --endpoints ENDPOINTS ARGS` (API v3) and returns its stdout, or an error with
/// its exit status and stderr; killed after 30 s so a test cannot hang on it, and when the
/// test process dies.
pub fn etcdctl(endpoints: &[String], args: &[&str]) -> Result<String, String> {
    let program = find_on_path("etcdctl")
        .ok_or("no `etcdctl` on PATH: install the Debian package `etcd-client`")?;
    let shown = format!(
        "etcdctl --endpoints {} {}",
        endpoints.join(","),
        args.join(" ")
    );
    let dir = tempfile::Builder::new()
        .prefix("lockkeeper-etcdctl-")
        .tempdir()
        .map_err(|e| format!("{shown}: create a temporary directory: {e}"))?;
    // Output goes to files, not pipes: nothing can block on a full pipe while we poll.
    let (out_path, err_path) = (dir.path().join("out"), dir.path().join("err"));
    let files = std::fs::File::create(&out_path)
        .and_then(|out| Ok((out, std::fs::File::create(&err_path)?)));
    let (out, err) = files.map_err(|e| format!("{shown}: create output files: {e}"))?;
    let mut command = Command::new(program);
    // The calling thread waits for etcdctl, so it outlives it unless the test process dies:
    // then the kernel kills etcdctl too (a waiting `etcdctl lock` would otherwise linger).
    die_with_parent(&mut command);
    let mut child = command
        .env("ETCDCTL_API", "3")
        .arg("--endpoints")
        .arg(endpoints.join(","))
        .args(args)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .map_err(|e| format!("{shown}: spawn: {e}"))?;
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() < ETCDCTL_TIMEOUT => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Ok(None) => {
                kill_and_reap(&mut child);
                return Err(format!("{shown}: still running after {ETCDCTL_TIMEOUT:?}"));
            }
            Err(e) => {
                kill_and_reap(&mut child);
                return Err(format!("{shown}: wait: {e}"));
            }
        }
    };
    let stdout = read_from(&out_path, 0);
    if status.success() {
        Ok(stdout)
    } else {
        Err(format!(
            "{shown}: {status}; stderr:\n{}",
            read_from(&err_path, 0)
        ))
    }
}

/// One HTTP/1.0 request to `addr`, the response body when it answers 200 within a second; `None`
/// otherwise (not up yet, or not healthy): callers poll.
fn http(addr: SocketAddr, method: &str, path: &str, body: &str) -> Option<String> {
    let request = format!(
        "{method} {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let answer = try_http_exchange(addr, request.as_bytes(), Duration::from_secs(1)).ok()?;
    let (head, body) = answer.split_once("\r\n\r\n")?;
    let status = head.lines().next()?.split(' ').nth(1)?;
    (status == "200").then(|| body.to_string())
}

/// Whether a member's `/v3/maintenance/status` answer names the member itself as the leader
/// (`header.member_id == leader`; the gateway writes 64-bit IDs as strings).
fn reports_itself_leader(status: &str) -> bool {
    let Ok(status) = serde_json::from_str::<serde_json::Value>(status) else {
        return false;
    };
    let me = &status["header"]["member_id"];
    !me.is_null() && *me == status["leader"]
}

#[cfg(test)]
mod tests {
    use super::reports_itself_leader;

    #[test]
    fn the_leader_is_the_member_that_names_itself() {
        assert!(reports_itself_leader(
            r#"{"header":{"member_id":"42"},"leader":"42","raftTerm":"7"}"#
        ));
        assert!(!reports_itself_leader(
            r#"{"header":{"member_id":"42"},"leader":"7"}"#
        ));
        assert!(!reports_itself_leader(r#"{"header":{},"leader":"7"}"#));
        assert!(!reports_itself_leader(r#"{"leader":""}"#));
        assert!(!reports_itself_leader("not json"));
    }
}
