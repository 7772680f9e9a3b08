//! Election failover of `bench --recipes`: the leader's *process* is SIGKILLed and the time until
//! another participant reports leadership is taken.
//!
//! Every participant is a process of its own: this binary in the hidden `--election-participant`
//! mode ([`participate`]) for lockkeeper, one JVM per participant for Curator. Each prints
//! `SESSION <negotiated timeout ms>`, then `LEADER` when granted, on its stdout; a reader task per
//! process stamps every line with this process's clock as it arrives, so both sides are timed by
//! the same clock, from just before the kill to the receipt of the next `LEADER`. A killed client
//! is noticed by the server only when its session expires, so the negotiated session timeout is
//! the floor of every failover and each is reported with its excess over it.
//!
//! Invariants: before each kill every participant has its node in the election (so the line
//! never runs dry and a replacement's start-up is not measured); the killed leader is replaced
//! after the next grant; every wait is bounded; every process is killed by its PID when its
//! handle drops, and dies with this process (parent-death signal); only 127.0.0.1 is used.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::{Duration, Instant};

use lockkeeper_testkit::die_with_parent;
use lockkeeper_zk_client as zk;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::mpsc;

use super::Settings;
use super::report::Report;
use crate::BoxError;
use crate::jvm::{Classes, StderrTail};
use crate::stats::Json;
use crate::versus::{Client, Combo, Target};
use crate::workload::{close_session, open_session};

/// One failover: from the kill to the next grant, and the killed leader's session timeout.
#[derive(Clone, Debug)]
pub(crate) struct Failover {
    pub took: Duration,
    pub floor: Duration,
}

impl Failover {
    /// How far above the session timeout the next grant came, in seconds (negative would mean
    /// the server expired the session early).
    pub(crate) fn excess_secs(&self) -> f64 {
        // In whole nanoseconds first, so that 4.9 s - 4 s is 0.9 and not 0.9000000000000004.
        (self.took.as_nanos() as i128 - self.floor.as_nanos() as i128) as f64 / 1e9
    }
}

/// Runs the failovers of every combination of `settings.failover_combos`, one failover of each
/// in turn, so that drift during the run does not favour one side.
pub(super) async fn measure(
    settings: &Settings,
    targets: &[Target],
    classes: Option<&Classes>,
    report: &mut Report,
) {
    let mut elections = Vec::new();
    for &combo in &settings.failover_combos {
        let Some(target) = targets.iter().find(|t| t.kind == combo.server) else {
            continue;
        };
        match Election::open(combo, &target.connect, settings, classes).await {
            Ok(election) => elections.push(election),
            Err(e) => report.add_failover(combo, 0, Err(e)),
        }
    }
    for round in 0..settings.failovers {
        let mut survivors = Vec::with_capacity(elections.len());
        for mut election in elections {
            let result = election.failover().await;
            let failed = result.is_err();
            report.add_failover(election.combo, round, result);
            if failed {
                // Its participants are in an unknown state: stop measuring this combination.
                election.close().await;
            } else {
                survivors.push(election);
            }
        }
        elections = survivors;
    }
    for election in elections {
        election.close().await;
    }
}

/// What a participant process said, stamped when it arrived.
enum Said {
    Line(String),
    Closed,
}

/// One participant process.
struct Participant {
    child: Child,
    /// Kept open: a participant ends when its stdin closes.
    _stdin: Option<ChildStdin>,
    stderr: StderrTail,
    /// The session timeout its server granted, once it said.
    timeout: Option<Duration>,
}

/// One election of participant processes on one server.
struct Election<'a> {
    combo: Combo,
    connect: String,
    path: String,
    settings: &'a Settings,
    classes: Option<&'a Classes>,
    participants: BTreeMap<usize, Participant>,
    next_id: usize,
    leader: Option<usize>,
    said_tx: mpsc::UnboundedSender<(usize, Instant, Said)>,
    said: mpsc::UnboundedReceiver<(usize, Instant, Said)>,
    /// A session of the benchmark's own, to see the election's nodes.
    admin: zk::Client,
}

impl<'a> Election<'a> {
    /// Starts the participants and waits for the first leader.
    async fn open(
        combo: Combo,
        connect: &str,
        settings: &'a Settings,
        classes: Option<&'a Classes>,
    ) -> Result<Election<'a>, BoxError> {
        let admin = open_session(connect, settings.connect_limit).await?;
        let (said_tx, said) = mpsc::unbounded_channel();
        let mut election = Election {
            combo,
            connect: connect.to_string(),
            path: format!("/lockkeeper-bench/election-{}", combo.key()),
            settings,
            classes,
            participants: BTreeMap::new(),
            next_id: 0,
            leader: None,
            said_tx,
            said,
            admin,
        };
        let started = async {
            for _ in 0..settings.election_participants {
                election.spawn()?;
            }
            let limit = settings.connect_limit + settings.failover_limit();
            let (first, _) = election.next_leader(limit, None).await?;
            election.leader = Some(first);
            Ok::<_, BoxError>(())
        }
        .await;
        match started {
            Ok(()) => Ok(election),
            Err(e) => {
                election.close().await;
                Err(e)
            }
        }
    }

    /// Starts one more participant, which joins at the back of the line.
    fn spawn(&mut self) -> Result<(), BoxError> {
        let id = self.next_id;
        self.next_id += 1;
        let name = format!("participant-{id}");
        let watchdog = self.watchdog().as_secs().max(1).to_string();
        let timeout_ms = self.settings.session_timeout.as_millis().to_string();
        let mut command = match self.combo.client {
            Client::Lockkeeper => {
                let exe = std::env::current_exe()
                    .map_err(|e| format!("cannot locate the lockkeeper-bench binary: {e}"))?;
                let mut command = Command::new(exe);
                command
                    .arg("--recipe-session-timeout")
                    .arg(format!("{timeout_ms}ms"))
                    .arg("--election-participant")
                    .args([&self.connect, &self.path, &name, &watchdog])
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .kill_on_drop(true);
                if std::env::var_os("RUST_LOG").is_none() {
                    command.env("RUST_LOG", "warn");
                }
                die_with_parent(command.as_std_mut());
                command
            }
            Client::Curator => {
                let classes = self.classes.ok_or("no compiled Curator program")?;
                let args = [
                    "participant".to_string(),
                    self.connect.clone(),
                    self.path.clone(),
                    name,
                    timeout_ms,
                    watchdog,
                ];
                classes.command(self.settings.launcher.java(), &args)
            }
        };
        let mut child = command
            .spawn()
            .map_err(|e| format!("cannot start a {} participant: {e}", self.combo.label()))?;
        let stdin = child.stdin.take();
        let stdout = child
            .stdout
            .take()
            .ok_or("no stdout pipe from a participant")?;
        let stderr = StderrTail::collect(&mut child);
        let tx = self.said_tx.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if tx.send((id, Instant::now(), Said::Line(line))).is_err() {
                    return;
                }
            }
            let _ = tx.send((id, Instant::now(), Said::Closed));
        });
        self.participants.insert(
            id,
            Participant {
                child,
                _stdin: stdin,
                stderr,
                timeout: None,
            },
        );
        Ok(())
    }

    /// Bound on a participant's whole life: the run, with room to spare.
    fn watchdog(&self) -> Duration {
        let s = self.settings;
        (s.failover_limit() + s.connect_limit) * (s.failovers + 1) * s.failover_combos.len() as u32
            + Duration::from_secs(600)
    }

    /// Reads what the participants say until one reports leadership; returns it and when its
    /// line arrived. `killed` is the participant whose end is expected.
    async fn next_leader(
        &mut self,
        limit: Duration,
        killed: Option<usize>,
    ) -> Result<(usize, Instant), BoxError> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let Ok(said) = tokio::time::timeout_at(deadline, self.said.recv()).await else {
                return Err(format!(
                    "{}: no participant became leader within {limit:?}",
                    self.combo.label()
                )
                .into());
            };
            let Some((id, at, said)) = said else {
                return Err("the participants' channel closed".into());
            };
            if Some(id) == killed {
                continue;
            }
            let Some(participant) = self.participants.get_mut(&id) else {
                continue;
            };
            match said {
                Said::Line(line) => {
                    if let Some(ms) = line.strip_prefix("SESSION ") {
                        let ms: u64 = ms
                            .trim()
                            .parse()
                            .map_err(|_| format!("participant {id}: bad line {line:?}"))?;
                        participant.timeout = Some(Duration::from_millis(ms));
                    } else if line.starts_with("LEADER") {
                        return Ok((id, at));
                    } else if line.starts_with("ERROR") {
                        return Err(participant
                            .stderr
                            .failure(&format!("{} participant {id}: {line}", self.combo.label())));
                    }
                }
                Said::Closed => {
                    let status = participant.child.try_wait().ok().flatten();
                    return Err(participant.stderr.failure(&format!(
                        "{} participant {id} ended unexpectedly ({})",
                        self.combo.label(),
                        status.map_or("still running".into(), |s| s.to_string())
                    )));
                }
            }
        }
    }

    /// Waits until every participant has its node in the election.
    async fn all_joined(&self, limit: Duration) -> Result<(), BoxError> {
        let deadline = Instant::now() + limit;
        loop {
            let joined =
                match tokio::time::timeout(limit, self.admin.list_children(&self.path)).await {
                    Ok(Ok(children)) => children.len(),
                    Ok(Err(zk::Error::NoNode)) => 0,
                    Ok(Err(e)) => return Err(format!("listing {}: {e}", self.path).into()),
                    Err(_) => return Err(format!("listing {}: no answer", self.path).into()),
                };
            if joined == self.participants.len() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "{}: {joined} of {} participants joined {} within {limit:?}",
                    self.combo.label(),
                    self.participants.len(),
                    self.path
                )
                .into());
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Kills the leader's process and times the next grant; then replaces the killed one.
    async fn failover(&mut self) -> Result<Failover, BoxError> {
        self.all_joined(self.settings.connect_limit).await?;
        let leader = self.leader.take().ok_or("no leader to kill")?;
        let mut killed = self
            .participants
            .remove(&leader)
            .ok_or("the leader's process is gone")?;
        let floor = killed
            .timeout
            .ok_or("the leader never said its session timeout")?;
        let before_kill = Instant::now();
        // SIGKILL to exactly this PID: no shutdown code runs, as in a crash.
        killed.child.start_kill()?;
        let (next, granted_at) = self
            .next_leader(self.settings.failover_limit(), Some(leader))
            .await?;
        let _ = tokio::time::timeout(Duration::from_secs(10), killed.child.wait()).await;
        self.leader = Some(next);
        self.spawn()?;
        Ok(Failover {
            took: granted_at - before_kill,
            floor,
        })
    }

    /// Kills every participant (by PID) and closes the benchmark's own session.
    async fn close(mut self) {
        for participant in self.participants.values_mut() {
            let _ = participant.child.start_kill();
        }
        for participant in self.participants.values_mut() {
            let _ = tokio::time::timeout(Duration::from_secs(10), participant.child.wait()).await;
        }
        close_session(self.admin).await;
    }
}

/// The hidden `--election-participant CONNECT PATH ID WATCHDOG_SECS` mode: joins the election
/// at PATH with lockkeeper's leader latch, prints `SESSION <ms>` and `LEADER <fencing token>`,
/// and stays leader until stdin closes (or the process is killed, which is the point).
pub(crate) async fn participate(
    spec: &[String],
    session_timeout: Duration,
    connect_limit: Duration,
) -> Result<Json, BoxError> {
    let [connect, path, id, watchdog] = spec else {
        return Err("--election-participant takes CONNECT PATH ID WATCHDOG_SECS".into());
    };
    let watchdog: u64 = watchdog.parse().map_err(|_| {
        format!("--election-participant: WATCHDOG_SECS `{watchdog}` is not a number")
    })?;
    let run = async {
        let builder = lockkeeper::zk::Session::builder(connect).session_timeout(session_timeout);
        let session = tokio::time::timeout(connect_limit, builder.connect())
            .await
            .map_err(|_| format!("no session with {connect} within {connect_limit:?}"))??;
        println!("SESSION {}", session.session_timeout().as_millis());
        let latch = session.leader_latch(path, id)?;
        let leadership = latch.lead().await?;
        println!("LEADER {}", leadership.fencing_token());
        let mut stdin = tokio::io::stdin();
        let mut buf = [0u8; 256];
        while stdin.read(&mut buf).await? > 0 {}
        leadership.resign().await?;
        session.close().await;
        Ok::<_, BoxError>(())
    };
    match tokio::time::timeout(Duration::from_secs(watchdog), run).await {
        Ok(result) => result.map(|()| Json::Null),
        Err(_) => {
            eprintln!("election participant {id}: watchdog: no end after {watchdog} s");
            // A blocking read of stdin would keep the runtime from shutting down.
            std::process::exit(3)
        }
    }
}
