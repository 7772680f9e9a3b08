//! The workloads and the znodes they work on: sessions, the benchmark's namespace on the server,
//! the measured runs, bulk creation for the memory figure, and clean-up.
//!
//! Every workload runs over the ZooKeeper client protocol through the `zookeeper-client` crate,
//! so the same bytes go to Keeper and to Apache ZooKeeper; [`super::driver`] sends them.

use std::time::{Duration, Instant};

use lockkeeper_zk_client as zk;

use super::BoxError;
use super::driver::{Goal, Op, drive, persistent};
use super::procfs;
use super::stats::{self, RunStats};

/// Session timeout asked of the server; long enough that a loaded machine does not expire a
/// benchmark session, short enough that a crashed run's ephemerals go away soon.
const SESSION_TIMEOUT: Duration = Duration::from_secs(10);

/// A workload selectable with `--workload`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Workload {
    /// Create an ephemeral-sequential znode, then delete it (a lock acquire/release pair); both
    /// requests are writes and both are timed.
    CreateDelete,
    /// getData of one existing znode: the read path.
    Get,
}

impl Workload {
    pub fn name(self) -> &'static str {
        match self {
            Workload::CreateDelete => "create-delete",
            Workload::Get => "get",
        }
    }
}

/// Settings shared by every run against one server.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Connect string of the server, `host:port`.
    pub connect: String,
    pub duration: Duration,
    pub warmup: Duration,
    /// Requests in flight per session.
    pub pipeline: usize,
    /// Request budget of one run, whatever its duration.
    pub max_requests: u64,
    /// Data size of the znodes the workloads create and read.
    pub data_size: usize,
    /// Bound on opening a session.
    pub connect_timeout: Duration,
    pub progress: bool,
    /// PID of the server, when known (it runs on this machine), for its CPU time.
    pub server_pid: Option<u32>,
}

/// Opens one session within `timeout`; the error names the address and what answered there.
pub async fn open_session(connect: &str, timeout: Duration) -> Result<zk::Client, BoxError> {
    // Nothing listening at a benchmark's target is a mistake to report at once.
    let connector = zk::Client::connector()
        .session_timeout(SESSION_TIMEOUT)
        .connection_timeout(timeout)
        .one_round(true);
    // The client's own bound is the connection timeout; this one only backs it up.
    match tokio::time::timeout(timeout + Duration::from_secs(1), connector.connect(connect)).await
    {
        Ok(Ok(client)) => Ok(client),
        Ok(Err(e)) => Err(format!(
            "cannot open a session with {connect}: {e} (is a ZooKeeper-protocol server listening there?)"
        )
        .into()),
        Err(_) => Err(format!(
            "no session with {connect} within {}: the server accepts connections but does not \
             answer the handshake",
            stats::fmt_duration(timeout)
        )
        .into()),
    }
}

/// Closes a session; returns once the server has answered the close (the client gives it 2 s).
/// A server that is killed right after then leaves no client retrying in the background.
pub async fn close_session(client: zk::Client) {
    client.close().await;
}

async fn close_sessions(clients: Vec<zk::Client>) {
    futures::future::join_all(clients.into_iter().map(close_session)).await;
}

async fn open_sessions(
    connect: &str,
    count: usize,
    timeout: Duration,
) -> Result<Vec<zk::Client>, BoxError> {
    let opening = (0..count).map(|_| open_session(connect, timeout));
    futures::future::try_join_all(opening).await
}

/// The znodes of one benchmark against one server, all under a persistent root with a unique
/// name, so that runs never collide with each other or with the server's other users.
pub struct Namespace {
    admin: zk::Client,
    root: String,
    /// Persistent znodes created under `{root}/mem` for the memory figure, removed by `remove`.
    populated: u64,
}

impl Namespace {
    pub async fn create(plan: &Plan) -> Result<Namespace, BoxError> {
        let admin = open_session(&plan.connect, plan.connect_timeout).await?;
        let root = format!(
            "/lockkeeper-bench-{}-{:08x}",
            std::process::id(),
            rand::random::<u32>()
        );
        let data = vec![b'x'; plan.data_size];
        admin
            .create(&root, &[], &persistent())
            .await
            .map_err(|e| format!("creating {root}: {e}"))?;
        admin
            .create(&format!("{root}/get"), &data, &persistent())
            .await
            .map_err(|e| format!("creating {root}/get: {e}"))?;
        Ok(Namespace {
            admin,
            root,
            populated: 0,
        })
    }

    /// The persistent znode everything else lives under.
    pub fn root(&self) -> &str {
        &self.root
    }

    /// Warms up, then measures `workload` with `sessions` sessions.
    pub async fn run(
        &self,
        workload: Workload,
        sessions: usize,
        plan: &Plan,
        label: &str,
    ) -> Result<RunStats, BoxError> {
        let clients = open_sessions(&plan.connect, sessions, plan.connect_timeout).await?;
        let op = || match workload {
            Workload::CreateDelete => Op::CreateDelete {
                prefix: format!("{}/cd-", self.root),
            },
            Workload::Get => Op::Get {
                path: format!("{}/get", self.root),
            },
        };
        let data = vec![b'x'; plan.data_size];
        let title = format!("{label}{} x{sessions}", workload.name());
        if !plan.warmup.is_zero() {
            drive(
                &clients,
                op(),
                &data,
                plan.pipeline,
                plan.warmup,
                plan.max_requests,
                (
                    plan.progress,
                    format!("{title} warm-up"),
                    Goal::Time(plan.warmup),
                ),
            )
            .await?;
        }
        let cpu_before = plan.server_pid.and_then(|pid| procfs::cpu_time(pid).ok());
        let driven = drive(
            &clients,
            op(),
            &data,
            plan.pipeline,
            plan.duration,
            plan.max_requests,
            (plan.progress, title, Goal::Time(plan.duration)),
        )
        .await;
        let cpu_after = plan.server_pid.and_then(|pid| procfs::cpu_time(pid).ok());
        close_sessions(clients).await;
        let driven = driven?;
        Ok(RunStats {
            workload,
            sessions,
            pipeline: plan.pipeline,
            requests: driven.requests,
            elapsed: driven.elapsed,
            latency: driven.latency,
            server_cpu: match (cpu_before, cpu_after) {
                (Some(before), Some(after)) => Some(after.saturating_sub(before)),
                _ => None,
            },
        })
    }

    /// Creates `count` persistent znodes of `plan.data_size` bytes under `{root}/mem`, pipelined
    /// over `sessions` sessions, within `limit`. Returns how long it took.
    pub async fn populate(
        &mut self,
        count: u64,
        sessions: usize,
        limit: Duration,
        plan: &Plan,
        label: &str,
    ) -> Result<Duration, BoxError> {
        let parent = format!("{}/mem", self.root);
        self.admin
            .create(&parent, &[], &persistent())
            .await
            .map_err(|e| format!("creating {parent}: {e}"))?;
        let clients = open_sessions(&plan.connect, sessions, plan.connect_timeout).await?;
        let data = vec![b'x'; plan.data_size];
        let driven = drive(
            &clients,
            Op::CreatePersistent {
                prefix: format!("{parent}/z-"),
            },
            &data,
            plan.pipeline,
            limit,
            count,
            (
                plan.progress,
                format!("{label}create {count} znodes"),
                Goal::Requests(count),
            ),
        )
        .await;
        close_sessions(clients).await;
        let driven = driven?;
        self.populated = driven.requests;
        if driven.requests < count {
            return Err(format!(
                "created only {} of {count} znodes within {}",
                driven.requests,
                stats::fmt_duration(limit)
            )
            .into());
        }
        Ok(driven.elapsed)
    }

    /// Deletes everything the benchmark created; best effort, bounded in time. Only needed on a
    /// server the benchmark does not own.
    pub async fn remove(self, plan: &Plan) -> Result<(), BoxError> {
        let parent = format!("{}/mem", self.root);
        if self.populated > 0 {
            let clients = open_sessions(&plan.connect, 4, plan.connect_timeout).await?;
            let driven = drive(
                &clients,
                Op::Delete {
                    prefix: format!("{parent}/z-"),
                },
                &[],
                plan.pipeline,
                Duration::from_secs(120),
                self.populated,
                (
                    plan.progress,
                    "removing benchmark znodes".to_string(),
                    Goal::Requests(self.populated),
                ),
            )
            .await;
            close_sessions(clients).await;
            driven?;
        }
        for path in [parent, format!("{}/get", self.root)] {
            match self.admin.delete(&path, None).await {
                Ok(()) | Err(zk::Error::NoNode) => {}
                Err(e) => return Err(format!("deleting {path}: {e}").into()),
            }
        }
        // Ephemerals of sessions that just closed may linger for a moment.
        let deadline = Instant::now() + Duration::from_secs(15);
        let removed = loop {
            match self.admin.delete(&self.root, None).await {
                Ok(()) | Err(zk::Error::NoNode) => break Ok(()),
                Err(zk::Error::NotEmpty) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => break Err(format!("deleting {}: {e}", self.root).into()),
            }
        };
        close_session(self.admin).await;
        removed
    }

    /// Closes the namespace's own session, leaving its znodes in place (for a server about to be
    /// stopped anyway).
    pub async fn close(self) {
        close_session(self.admin).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockkeeper_testkit::{Keeper, TestServer};

    #[tokio::test]
    async fn nothing_listening_is_a_quick_clear_error() {
        let port = lockkeeper_testkit::free_port();
        let started = Instant::now();
        let err = open_session(&format!("127.0.0.1:{port}"), Duration::from_secs(20))
            .await
            .expect_err("no server there");
        assert!(
            err.to_string().contains("cannot open a session"),
            "unexpected error: {err}"
        );
        assert!(started.elapsed() < Duration::from_secs(15));
    }

    fn quick_plan(connect: String) -> Plan {
        Plan {
            connect,
            duration: Duration::from_millis(300),
            warmup: Duration::from_millis(50),
            pipeline: 16,
            max_requests: 1_000_000,
            data_size: 16,
            connect_timeout: Duration::from_secs(30),
            progress: false,
            server_pid: Some(std::process::id()),
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn workloads_run_and_clean_up_on_an_in_process_keeper() {
        let server = Keeper::start();
        let plan = quick_plan(server.connect_string());
        let mut namespace = Namespace::create(&plan).await.expect("namespace");
        let root = namespace.root().to_string();

        let writes = namespace
            .run(Workload::CreateDelete, 2, &plan, "")
            .await
            .expect("create-delete run");
        assert!(writes.requests > 0);
        assert_eq!(
            writes.requests % 2,
            0,
            "a create always comes with its delete"
        );
        assert_eq!(
            writes.latency.len(),
            writes.requests,
            "one latency per request"
        );
        assert_eq!(writes.sessions, 2);
        // The in-process server is this test process, so its CPU time is known and non-zero.
        assert!(writes.server_cpu.expect("cpu time") > Duration::ZERO);

        let reads = namespace
            .run(Workload::Get, 1, &plan, "")
            .await
            .expect("get run");
        assert!(reads.requests > 0);
        assert_eq!(reads.latency.len(), reads.requests);

        let probe = open_session(&plan.connect, plan.connect_timeout)
            .await
            .expect("probe");
        namespace
            .populate(500, 2, Duration::from_secs(60), &plan, "")
            .await
            .expect("populate");
        let children = probe
            .list_children(&format!("{root}/mem"))
            .await
            .expect("list populated znodes");
        assert_eq!(children.len(), 500);
        let (data, _) = probe
            .get_data(&format!("{root}/mem/z-0000000499"))
            .await
            .expect("last populated znode");
        assert_eq!(data.len(), 16);

        namespace.remove(&plan).await.expect("remove");
        assert_eq!(probe.check_stat(&root).await.expect("exists"), None);
        close_session(probe).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_run_is_bounded_by_its_request_budget() {
        let server = Keeper::start();
        let mut plan = quick_plan(server.connect_string());
        // A budget this small ends the run long before its (long) deadline.
        plan.duration = Duration::from_secs(60);
        plan.warmup = Duration::ZERO;
        plan.max_requests = 100;
        let namespace = Namespace::create(&plan).await.expect("namespace");
        let started = Instant::now();
        let stats = namespace
            .run(Workload::Get, 4, &plan, "")
            .await
            .expect("run");
        assert_eq!(stats.requests, 100);
        assert!(started.elapsed() < Duration::from_secs(30));
        namespace.remove(&plan).await.expect("remove");
    }
}
