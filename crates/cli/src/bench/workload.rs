//! The load itself: what each workload sends, and the pipelined driver that sends it.
//!
//! Every workload runs over the ZooKeeper client protocol through the `zookeeper-client` crate,
//! so the same bytes go to Keeper and to Apache ZooKeeper. Each session keeps a bounded window of
//! requests in flight (pipelining: the client writes a request as soon as it is issued and replies
//! come back in order), which is how a busy application uses one session and what a server must
//! be good at. Every loop stops at a deadline *and* at a request budget, whichever comes first,
//! and the wait for the last replies is bounded too.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tokio::task::JoinSet;
use zookeeper_client as zk;

use super::BoxError;
use super::process;
use super::stats::{self, RunStats};

/// How long replies may keep arriving after a run's deadline before the run is declared stuck.
const DRAIN_GRACE: Duration = Duration::from_secs(30);

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

/// Opens one session, failing fast and clearly when nothing answers at `connect`.
pub async fn open_session(connect: &str, timeout: Duration) -> Result<zk::Client, BoxError> {
    let connector = zk::Client::connector()
        .with_session_timeout(SESSION_TIMEOUT)
        .with_fail_eagerly();
    match tokio::time::timeout(timeout, connector.connect(connect)).await {
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

/// Closes a session and waits, briefly, until the server has answered the close. A server that
/// is killed right after then leaves no client retrying in the background.
pub async fn close_session(client: zk::Client) {
    let mut state = client.state_watcher();
    drop(client);
    let closed = async {
        loop {
            match state.changed().await {
                zk::SessionState::Closed
                | zk::SessionState::Expired
                | zk::SessionState::AuthFailed => {
                    break;
                }
                _ => {}
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(2), closed).await;
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

/// One request (or request pair) a session can issue. `index` is unique within a run and
/// numbers the znodes of the bulk-creation steps.
#[derive(Debug)]
enum Op {
    CreateDelete { prefix: String },
    Get { path: String },
    CreatePersistent { prefix: String },
    Delete { prefix: String },
}

impl Op {
    /// Requests one op sends; the budget and the throughput count requests.
    fn requests(&self) -> u64 {
        match self {
            Op::CreateDelete { .. } => 2,
            _ => 1,
        }
    }

    fn describe(&self) -> &'static str {
        match self {
            Op::CreateDelete { .. } => "create/delete of an ephemeral-sequential znode",
            Op::Get { .. } => "getData",
            Op::CreatePersistent { .. } => "create of a persistent znode",
            Op::Delete { .. } => "delete",
        }
    }
}

/// Latencies of the requests of one op.
struct Sample {
    first: Duration,
    second: Option<Duration>,
}

const EPHEMERAL_SEQUENTIAL: zk::CreateOptions<'static> =
    zk::CreateMode::EphemeralSequential.with_acls(zk::Acls::anyone_all());
const PERSISTENT: zk::CreateOptions<'static> =
    zk::CreateMode::Persistent.with_acls(zk::Acls::anyone_all());

/// Issues `op` and waits for its replies. The clock starts before the call because the client
/// writes the request during the call, not when the future is first polled.
async fn perform(
    client: &zk::Client,
    op: &Op,
    data: &[u8],
    index: u64,
) -> Result<Sample, zk::Error> {
    let start = Instant::now();
    match op {
        Op::CreateDelete { prefix } => {
            let (_, sequence) = client.create(prefix, data, &EPHEMERAL_SEQUENTIAL).await?;
            let created = Instant::now();
            let path = format!("{prefix}{sequence}");
            client.delete(&path, None).await?;
            Ok(Sample {
                first: created - start,
                second: Some(created.elapsed()),
            })
        }
        Op::Get { path } => {
            client.get_data(path).await?;
            Ok(Sample {
                first: start.elapsed(),
                second: None,
            })
        }
        Op::CreatePersistent { prefix } => {
            client
                .create(&format!("{prefix}{index:010}"), data, &PERSISTENT)
                .await?;
            Ok(Sample {
                first: start.elapsed(),
                second: None,
            })
        }
        Op::Delete { prefix } => {
            client.delete(&format!("{prefix}{index:010}"), None).await?;
            Ok(Sample {
                first: start.elapsed(),
                second: None,
            })
        }
    }
}

/// State shared by the sessions of one run.
struct Shared {
    /// Requests handed out so far (may run past `max`: a refused claim still counts).
    issued: AtomicU64,
    max: u64,
    /// Requests answered so far, for the progress bar.
    completed: AtomicU64,
}

impl Shared {
    /// Claims budget for one op; returns its index, or `None` when the budget is spent.
    fn claim(&self, requests: u64) -> Option<u64> {
        let before = self.issued.fetch_add(requests, Ordering::Relaxed);
        (before + requests <= self.max).then_some(before / requests)
    }
}

/// What one session achieved.
struct Tally {
    requests: u64,
    latency: Histogram<u64>,
}

/// Keeps up to `window` ops in flight on `client` until `deadline` or the shared budget ends,
/// then collects the outstanding replies. The first failed request ends the session's run: a
/// benchmark whose requests fail measures nothing worth printing.
async fn drive_session(
    client: zk::Client,
    op: Arc<Op>,
    data: Arc<[u8]>,
    window: usize,
    deadline: Instant,
    shared: Arc<Shared>,
) -> Result<Tally, String> {
    let mut latency = stats::new_histogram();
    let mut requests = 0u64;
    let per_op = op.requests();
    let mut in_flight = FuturesUnordered::new();
    let mut open = true;
    loop {
        while open && in_flight.len() < window {
            if Instant::now() >= deadline {
                open = false;
                break;
            }
            match shared.claim(per_op) {
                Some(index) => in_flight.push(perform(&client, &op, &data, index)),
                None => open = false,
            }
        }
        match in_flight.next().await {
            None => break,
            Some(Ok(sample)) => {
                stats::record(&mut latency, sample.first);
                if let Some(second) = sample.second {
                    stats::record(&mut latency, second);
                }
                requests += per_op;
                shared.completed.fetch_add(per_op, Ordering::Relaxed);
            }
            Some(Err(e)) => return Err(format!("{} failed: {e}", op.describe())),
        }
    }
    Ok(Tally { requests, latency })
}

/// What the progress bar measures progress against.
#[derive(Clone, Copy)]
enum Goal {
    Time(Duration),
    Requests(u64),
}

/// Aborts the progress ticker however the run ends.
struct Ticker(tokio::task::JoinHandle<()>, ProgressBar);

impl Drop for Ticker {
    fn drop(&mut self) {
        self.0.abort();
        self.1.finish_and_clear();
    }
}

fn start_ticker(enabled: bool, label: String, goal: Goal, shared: Arc<Shared>) -> Ticker {
    let len = match goal {
        Goal::Time(d) => u64::try_from(d.as_millis()).unwrap_or(u64::MAX),
        Goal::Requests(n) => n,
    };
    // indicatif also hides itself when stderr is not a terminal.
    let bar = if enabled {
        ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr_with_hz(10))
    } else {
        ProgressBar::hidden()
    };
    let style = ProgressStyle::with_template("{prefix} {msg} [{wide_bar}]")
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
    bar.set_style(style);
    bar.set_prefix(label);
    let ticking = bar.clone();
    let started = Instant::now();
    let handle = tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        loop {
            tick.tick().await;
            let done = shared.completed.load(Ordering::Relaxed);
            let elapsed = started.elapsed();
            let position = match goal {
                Goal::Time(_) => u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
                Goal::Requests(_) => done,
            };
            ticking.set_position(position.min(len));
            let rate = done as f64 / elapsed.as_secs_f64().max(1e-3);
            ticking.set_message(format!("{done} requests {rate:.0}/s"));
        }
    });
    Ticker(handle, bar)
}

/// Raw outcome of [`drive`].
struct Driven {
    requests: u64,
    elapsed: Duration,
    latency: Histogram<u64>,
}

/// Runs `op` on every client at once for `duration` or `max` requests, whichever ends first.
async fn drive(
    clients: &[zk::Client],
    op: Op,
    data: &[u8],
    window: usize,
    duration: Duration,
    max: u64,
    progress: (bool, String, Goal),
) -> Result<Driven, BoxError> {
    let op = Arc::new(op);
    let data: Arc<[u8]> = Arc::from(data);
    let shared = Arc::new(Shared {
        issued: AtomicU64::new(0),
        max,
        completed: AtomicU64::new(0),
    });
    let (enabled, label, goal) = progress;
    let _ticker = start_ticker(enabled, label, goal, shared.clone());
    let start = Instant::now();
    let deadline = start + duration;
    // A JoinSet aborts its tasks when dropped, so an interrupted run leaves no load behind.
    let mut sessions = JoinSet::new();
    for client in clients {
        sessions.spawn(drive_session(
            client.clone(),
            op.clone(),
            data.clone(),
            window,
            deadline,
            shared.clone(),
        ));
    }
    let hard_stop = tokio::time::Instant::from_std(deadline + DRAIN_GRACE);
    let mut latency = stats::new_histogram();
    let mut requests = 0;
    loop {
        let joined = match tokio::time::timeout_at(hard_stop, sessions.join_next()).await {
            Ok(Some(joined)) => joined,
            Ok(None) => break,
            Err(_) => {
                return Err(format!(
                    "replies still missing {} after the run's end: the server stalled",
                    stats::fmt_duration(DRAIN_GRACE)
                )
                .into());
            }
        };
        let tally = joined.map_err(|e| format!("session task ended abnormally: {e}"))??;
        latency
            .add(&tally.latency)
            .map_err(|e| format!("merging latency histograms: {e}"))?;
        requests += tally.requests;
    }
    Ok(Driven {
        requests,
        elapsed: start.elapsed(),
        latency,
    })
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
            .create(&root, &[], &PERSISTENT)
            .await
            .map_err(|e| format!("creating {root}: {e}"))?;
        admin
            .create(&format!("{root}/get"), &data, &PERSISTENT)
            .await
            .map_err(|e| format!("creating {root}/get: {e}"))?;
        Ok(Namespace {
            admin,
            root,
            populated: 0,
        })
    }

    /// The persistent znode everything else lives under.
    #[cfg(test)]
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
        let cpu_before = plan.server_pid.and_then(|pid| process::cpu_time(pid).ok());
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
        let cpu_after = plan.server_pid.and_then(|pid| process::cpu_time(pid).ok());
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
            .create(&parent, &[], &PERSISTENT)
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
                    tokio::time::sleep(Duration::from_millis(50)).await
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

    #[test]
    fn budget_claims_stop_at_the_maximum_and_number_ops() {
        let shared = Shared {
            issued: AtomicU64::new(0),
            max: 5,
            completed: AtomicU64::new(0),
        };
        // Pairs of requests: indices 0 and 1 fit (4 requests), a third pair would make 6 > 5.
        assert_eq!(shared.claim(2), Some(0));
        assert_eq!(shared.claim(2), Some(1));
        assert_eq!(shared.claim(2), None);
        assert_eq!(shared.claim(2), None);
    }

    #[test]
    fn single_request_claims_are_contiguous() {
        let shared = Shared {
            issued: AtomicU64::new(0),
            max: 3,
            completed: AtomicU64::new(0),
        };
        let got: Vec<_> = (0..5).map(|_| shared.claim(1)).collect();
        assert_eq!(got, vec![Some(0), Some(1), Some(2), None, None]);
    }

    #[tokio::test]
    async fn nothing_listening_is_a_quick_clear_error() {
        let port = super::super::process::free_port().expect("free port");
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
        let dir = tempfile::tempdir().expect("tempdir");
        let config = lockkeeper_server::Config {
            listen: "127.0.0.1:0".parse().expect("addr"),
            data_dir: dir.path().join("data"),
            ..Default::default()
        };
        let server = lockkeeper_server::Server::start(config)
            .await
            .expect("start keeper");
        let plan = quick_plan(server.local_addr().to_string());
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
        server.shutdown().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_run_is_bounded_by_its_request_budget() {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = lockkeeper_server::Config {
            listen: "127.0.0.1:0".parse().expect("addr"),
            data_dir: dir.path().join("data"),
            ..Default::default()
        };
        let server = lockkeeper_server::Server::start(config)
            .await
            .expect("start keeper");
        let mut plan = quick_plan(server.local_addr().to_string());
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
        server.shutdown().await;
    }
}
