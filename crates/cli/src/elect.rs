//! `lockkeeper elect NAME [-- CMD [ARGS...]]`: stand in a leader election and run a command
//! while leader; or, with `--listen`, watch who leads.
//!
//! The election is the library's [`LeaderLatch`] (Curator's `LeaderLatch` layout: Curator and
//! lockkeeper participants share one election at NAME). While this participant leads, CMD runs
//! under [`run::supervise`] with `LOCKKEEPER_FENCING_TOKEN` (the term's token),
//! `LOCKKEEPER_LEADER_ID`, `LOCKKEEPER_BACKEND` and `LOCKKEEPER_LEADER_NODE` (the term's latch
//! node) in its environment; when leadership is lost
//! its process group is stopped (SIGTERM, SIGKILL after `--kill-after`) and the participant
//! queues again with a fresh node (so the next term's token is higher), or exits 76 with
//! `--once`. A CMD that ends on its own ends the command with its exit code, resigning first.
//! Without CMD it leads until SIGINT or SIGTERM, printing `leader ID token N` when it starts.
//! `--timeout D` bounds each wait to lead (the library's timed wait: over by D plus about a
//! second to withdraw the candidacy) and `--try` does not wait; either way, not leading is 75
//! only when the backend said someone else leads, and 69 when it could not be heard, as for
//! `lock`.
//!
//! Invariants:
//! - CMD starts only once the term is confirmed (the latch reads its own node back as owned
//!   by its session), and never runs in two terms at once: a term's CMD is stopped and reaped
//!   before the participant queues again;
//! - `--listen` never creates a node: it reads the election and prints one line per change
//!   of leader (`leader ID token N`, `no leader`), from a persistent watch set before each
//!   read, and reads again after a reconnect, since a new session has no watches.
//!
//! On an `etcd://` backend (with the `etcd` feature) the election is etcd's (see [`etcd`]);
//! Redis has no election recipe here, so a Redis backend is a usage error.

use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Duration;

use lockkeeper::FencingToken;
use lockkeeper::zk::{Candidate, LeaderLatch, Session};
use lockkeeper_zk_client::{AddWatchMode, EventType};
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::time::Instant;

use crate::backend::{Backend, BackendArgs, Failure, Handle, connection_back, parse_duration};
use crate::exit;
use crate::loss;
use crate::run::{self, Outcome};

#[cfg(feature = "etcd")]
mod etcd;

const AFTER_HELP: &str = "\
Exit codes:
  the command's own   it ran to its end while leader (128 + N when signal N ended it)
  0                   interrupted (SIGINT, SIGTERM) while waiting, leading without a command,
                      or listening
  64                  usage: a bad flag, backend URL or path; a Redis backend
  69                  the backend could not be reached within --connect-timeout, or stopped
                      answering while waiting (also when --timeout passed with it
                      unreachable: never 75)
  70                  internal failure (the command could not be started, ...)
  75                  not leading: --try found someone else leading, or --timeout passed
                      with someone else leading; the wait ends by --timeout plus at most a
                      second to withdraw
  76                  --once: leadership was lost while the command ran; it was stopped
                      (the message names the cause)

Resigning and closing on the way out take at most --release-timeout (default 2s) together.

The command gets LOCKKEEPER_FENCING_TOKEN, LOCKKEEPER_LEADER_ID, LOCKKEEPER_BACKEND and, on
ZooKeeper, LOCKKEEPER_LEADER_NODE (the term's latch node).";

/// Arguments of `lockkeeper elect`.
#[derive(clap::Args, Debug)]
#[command(after_help = AFTER_HELP)]
pub(crate) struct ElectArgs {
    #[command(flatten)]
    backend: BackendArgs,
    /// This participant's id, as Curator's getLeader() and --listen show it (default:
    /// hostname:pid).
    #[arg(long, value_name = "ID", conflicts_with = "listen")]
    id: Option<String>,
    /// After leadership is lost, exit 76 instead of queueing again.
    #[arg(long, conflicts_with = "listen")]
    once: bool,
    /// Wait at most this long to lead (e.g. 30s, 5m), each time it waits; someone else still
    /// leading then: exit 75.
    #[arg(long, value_name = "D", value_parser = parse_duration, conflicts_with = "listen")]
    timeout: Option<Duration>,
    /// Do not wait: lead only if nobody leads now, else exit 75 at once.
    #[arg(long = "try", conflicts_with_all = ["timeout", "listen"])]
    try_lead: bool,
    /// Join nothing: print one line per change of leader (`leader ID token N`, `no leader`)
    /// until SIGINT or SIGTERM.
    #[arg(long)]
    listen: bool,
    /// After leadership is lost, how long the command's process group has between SIGTERM
    /// and SIGKILL.
    #[arg(long, value_name = "D", default_value = "5s", value_parser = parse_duration)]
    kill_after: Duration,
    /// How long resigning and closing the session may take on the way out, together; past it
    /// lockkeeper goes on (or exits), saying the resignation was not confirmed (the server
    /// then ends the term when the session or lease ends).
    #[arg(long, value_name = "D", default_value = "2s", value_parser = parse_duration)]
    release_timeout: Duration,
    /// How long this participant may go unheard before the server ends its session and so
    /// its leadership (the server may bound it); on etcd, the lease's TTL.
    #[arg(long, value_name = "D", default_value = "10s", value_parser = parse_duration)]
    session_timeout: Duration,
    /// The election path (/services/billing/leader); on etcd, the election's name (the key
    /// prefix `etcdctl elect NAME` uses).
    name: String,
    /// The command to run while leader; without it, lead until SIGINT or SIGTERM.
    #[arg(last = true, value_name = "CMD", conflicts_with = "listen")]
    command: Vec<OsString>,
}

/// How long each wait to lead may take.
#[derive(Clone, Copy, Debug)]
enum Wait {
    Forever,
    Try,
    Within(Duration),
}

impl ElectArgs {
    fn wait(&self) -> Wait {
        match (self.try_lead, self.timeout) {
            (true, _) => Wait::Try,
            // As for `lock`: a zero timeout does not wait at all.
            (_, Some(d)) if d.is_zero() => Wait::Try,
            (_, Some(d)) => Wait::Within(d),
            _ => Wait::Forever,
        }
    }
}

/// The backend said someone else leads: says so and gives exit 75.
fn not_leading(what: &str, wait: Wait) -> u8 {
    let why = match wait {
        Wait::Within(d) => format!("not leading within {d:?}: someone else leads"),
        _ => "someone else leads".to_owned(),
    };
    eprintln!("lockkeeper elect: {what}: {why}");
    exit::NOT_ACQUIRED
}

/// A wait to lead that failed. The answer a cron wrapper acts on: when the backend could not
/// be heard, not "someone else leads" (75) but 69, saying so.
fn wait_failed(what: &str, wait: Wait, err: lockkeeper::Error) -> Failure {
    let cause = err.to_string();
    let mut failure = Failure::from_lib(what, err);
    if failure.code == exit::UNAVAILABLE {
        let within = match wait {
            Wait::Within(d) => format!(" within {d:?}"),
            Wait::Try | Wait::Forever => String::new(),
        };
        failure.message =
            format!("{what}: not leading{within}: the backend is unreachable: {cause}");
    }
    failure
}

/// Runs the command.
pub(crate) async fn run(args: ElectArgs) -> ExitCode {
    match elect(args).await {
        Ok(code) => exit::code(code),
        Err(failure) => failure.report("elect"),
    }
}

async fn elect(args: ElectArgs) -> Result<u8, Failure> {
    let mut interrupts = Interrupts::new()?;
    // Refused before dialling: a usage error, whether or not the Redis answers.
    let parsed = Backend::parse(&args.backend.backend)?;
    #[cfg(feature = "etcd")]
    if matches!(parsed, Backend::Etcd { .. }) {
        return etcd::elect(&args, &mut interrupts).await;
    }
    if !matches!(parsed, Backend::Zk { .. } | Backend::Etcd { .. }) {
        return Err(Failure::usage(format!(
            "elect works on ZooKeeper (zk://) and etcd (etcd://) backends; {parsed} has no \
             leader election"
        )));
    }
    let (backend, handle) = args.backend.connect(args.session_timeout).await?;
    let Handle::Zk(session) = handle else {
        return Err(Failure::usage(format!(
            "{backend} is not a ZooKeeper backend"
        )));
    };
    let what = format!("{} on {backend}", args.name);
    let id = args.id.clone().unwrap_or_else(default_id);
    let latch = session
        .leader_latch(&args.name, &id)
        .map_err(|e| Failure::from_lib(&what, e))?;
    let way_out = WayOut::new(args.release_timeout);
    let result = if args.listen {
        listen(&session, &latch, &what, &mut interrupts).await
    } else {
        lead(&session, &latch, &args, &what, &mut interrupts, &way_out).await
    };
    // Polled once even when it runs out, so the session always ends on our side.
    if tokio::time::timeout_at(way_out.deadline(), session.close())
        .await
        .is_err()
    {
        eprintln!(
            "lockkeeper elect: closing the session was not confirmed within {:?} \
             (--release-timeout); the server ends it a session timeout later",
            args.release_timeout
        );
    }
    result
}

/// Leads, runs the command, re-queues; see the module docs.
async fn lead(
    session: &Session,
    latch: &LeaderLatch,
    args: &ElectArgs,
    what: &str,
    interrupts: &mut Interrupts,
    way_out: &WayOut,
) -> Result<u8, Failure> {
    let name = latch.path();
    let id = latch.id();
    let wait = args.wait();
    loop {
        let deadline = match wait {
            Wait::Within(d) => Some(Instant::now() + d),
            Wait::Forever | Wait::Try => None,
        };
        let leadership = loop {
            let left = deadline.map(|at| at.saturating_duration_since(Instant::now()));
            let attempt = async {
                match (wait, left) {
                    // A session lost while queued leaves no time to queue in the next one.
                    (_, Some(left)) if left.is_zero() => Err(lockkeeper::Error::SessionLost),
                    (_, Some(left)) => latch.lead_timeout(left).await,
                    (Wait::Try, _) => latch.try_lead().await,
                    _ => latch.lead().await.map(Some),
                }
            };
            let attempt = tokio::select! {
                attempt = attempt => attempt,
                () = interrupts.recv() => return Ok(0),
            };
            match attempt {
                Ok(Some(leadership)) => break leadership,
                Ok(None) => return Ok(not_leading(what, wait)),
                // The session ended while queued: the node went with it; queue in the next
                // one, within what is left of the wait (none left: it ends below, 69).
                Err(lockkeeper::Error::SessionLost)
                    if !matches!(wait, Wait::Try) && !left.is_some_and(|l| l.is_zero()) => {}
                Err(err) => return Err(wait_failed(what, wait, err)),
            }
        };
        let term = ZkTerm {
            leadership,
            session: session.clone(),
        };
        let served = serve_term(term, args, interrupts, way_out, (name, id), "queues again");
        if let Some(code) = served.await? {
            return Ok(code);
        }
    }
}

/// A term of leadership as `elect` serves it, on ZooKeeper and on etcd alike.
trait Term {
    fn fencing_token(&self) -> FencingToken;
    /// Resolves when the term is lost.
    fn lost(&self) -> impl Future<Output = ()> + Send;
    /// The instant until which the term is certainly still held, as far as this process knows.
    fn valid_until(&self) -> Option<Instant>;
    /// Why the term was lost, from what was observed up to the loss (see [`crate::loss`]).
    fn cause(&self, observed: &loss::Observed) -> impl Future<Output = String> + Send;
    /// Gives the leadership up cleanly (best effort, reported on stderr).
    fn resign(self, name: &str) -> impl Future<Output = ()> + Send;
    /// The term's latch node, where the backend has one (ZooKeeper), for the command's
    /// environment.
    fn node(&self) -> Option<&str>;
}

/// A ZooKeeper term, with the session it was granted in (to ask after the node at a loss).
struct ZkTerm {
    leadership: lockkeeper::zk::Leadership,
    session: Session,
}

impl Term for ZkTerm {
    fn fencing_token(&self) -> FencingToken {
        self.leadership.fencing_token()
    }

    fn node(&self) -> Option<&str> {
        Some(self.leadership.node())
    }

    fn lost(&self) -> impl Future<Output = ()> + Send {
        let term = self.leadership.term();
        async move { term.lost().await }
    }

    fn valid_until(&self) -> Option<Instant> {
        self.leadership.valid_until()
    }

    async fn cause(&self, observed: &loss::Observed) -> String {
        let local = observed.local_cause(
            "ZooKeeper session",
            "the server was not heard from for the session timeout",
        );
        let cause = match local {
            Some(cause) => cause,
            None => {
                let node = self.leadership.node().to_owned();
                loss::zk_cause(&self.session, &node, self.fencing_token()).await
            }
        };
        format!("leadership lost: {cause}")
    }

    async fn resign(self, name: &str) {
        if let Err(err) = self.leadership.resign().await {
            eprintln!("lockkeeper elect: resigning {name}: {err}");
        }
    }
}

/// Serves one term: announces it, then waits for its loss (no command) or runs the command
/// under [`run::supervise`] until it exits or the loss stops it. `Some(code)` ends `elect`
/// with that exit code; `None` means lost: take part again (`again` says how, on stderr).
async fn serve_term<T: Term>(
    leadership: T,
    args: &ElectArgs,
    interrupts: &mut Interrupts,
    way_out: &WayOut,
    (name, id): (&str, &str),
    again: &str,
) -> Result<Option<u8>, Failure> {
    let token = leadership.fencing_token();
    eprintln!("lockkeeper elect: {id} leads {name} with fencing token {token}");
    if args.command.is_empty() {
        println!("leader {id} token {token}");
        let lost = loss::observe(
            leadership.lost(),
            || leadership.valid_until(),
            tokio::time::Instant::now(),
        );
        let observed = tokio::select! {
            observed = lost => observed,
            () = interrupts.recv() => {
                resign(leadership, name, way_out).await;
                return Ok(Some(0));
            }
        };
        let cause = leadership.cause(&observed).await;
        eprintln!("lockkeeper elect: {id} lost the leadership of {name}: {cause}");
        return Ok(args.once.then_some(exit::LOST));
    }
    let mut env = vec![
        ("LOCKKEEPER_FENCING_TOKEN", token.to_string()),
        ("LOCKKEEPER_LEADER_ID", id.to_owned()),
        // As given (not the canonical form), so the command can connect with it too.
        ("LOCKKEEPER_BACKEND", args.backend.backend.clone()),
    ];
    // The term's latch node, for a ZooKeeper fence that checks the writer still has it.
    if let Some(node) = leadership.node() {
        env.push(("LOCKKEEPER_LEADER_NODE", node.to_owned()));
    }
    let since = tokio::time::Instant::now();
    let lost = async {
        let observed = loss::observe(leadership.lost(), || leadership.valid_until(), since).await;
        leadership.cause(&observed).await
    };
    // The command gets the operator's signals while it runs, not this loop.
    match run::supervise(&args.command, &env, args.kill_after, lost).await {
        Ok(Outcome::Exited(code)) => {
            resign(leadership, name, way_out).await;
            Ok(Some(code))
        }
        Ok(Outcome::Stopped {
            reason,
            child,
            killed,
        }) => {
            run::report_stopped("elect", name, &reason, child, killed);
            drop(leadership);
            if args.once {
                return Ok(Some(exit::LOST));
            }
            eprintln!("lockkeeper elect: {id} {again} for {name}");
            Ok(None)
        }
        Err(failure) => {
            resign(leadership, name, way_out).await;
            Err(failure)
        }
    }
}

/// The one deadline of the way out (`--release-timeout`): it starts when the first step of the
/// way out (the resignation, or the close when there is none) starts, and bounds the
/// resignation and the close together, so a backend that stopped answering holds the exit up
/// no longer than the flag says.
struct WayOut {
    limit: Duration,
    started: std::sync::OnceLock<Instant>,
}

impl WayOut {
    fn new(limit: Duration) -> WayOut {
        WayOut {
            limit,
            started: std::sync::OnceLock::new(),
        }
    }

    /// The way out's deadline, starting it now if it has not started.
    fn deadline(&self) -> Instant {
        *self.started.get_or_init(Instant::now) + self.limit
    }

    /// The limit, for messages.
    fn limit(&self) -> Duration {
        self.limit
    }
}

/// Resigns within the way out's deadline: a backend that stopped answering must not hold the
/// exit up; the term then ends with the session or lease.
async fn resign<T: Term>(leadership: T, name: &str, way_out: &WayOut) {
    if tokio::time::timeout_at(way_out.deadline(), leadership.resign(name))
        .await
        .is_err()
    {
        eprintln!(
            "lockkeeper elect: resigning {name}: the resignation was not confirmed within \
             {:?} (--release-timeout); the term ends when the session or lease does",
            way_out.limit()
        );
    }
}

/// Prints one line per change of leader; see the module docs.
async fn listen(
    session: &Session,
    latch: &LeaderLatch,
    what: &str,
    interrupts: &mut Interrupts,
) -> Result<u8, Failure> {
    let mut states = session.states();
    // (node, token) of the leader last printed; `Some(None)` once "no leader" was printed.
    let mut shown: Option<Option<String>> = None;
    loop {
        let client = session.client().map_err(|e| Failure::from_lib(what, e))?;
        let watch = tokio::select! {
            w = client.watch(latch.path(), AddWatchMode::Persistent) => w.ok(),
            () = interrupts.recv() => return Ok(0),
        };
        if let Some(mut watch) = watch {
            loop {
                let leader = tokio::select! {
                    l = latch.leader() => l,
                    () = interrupts.recv() => return Ok(0),
                };
                match leader {
                    Ok(leader) => {
                        let node = leader.as_ref().map(|l| l.node.clone());
                        if shown.as_ref() != Some(&node) {
                            println!("{}", line(leader.as_ref()));
                            shown = Some(node);
                        }
                    }
                    Err(err) if is_connection(&err) => break,
                    Err(err) => return Err(Failure::from_lib(what, err)),
                }
                let event = tokio::select! {
                    event = watch.changed() => event,
                    () = interrupts.recv() => return Ok(0),
                };
                if event.event_type == EventType::Session {
                    break;
                }
            }
        }
        // Wait for the connection (or a new session) to be back, then watch and read again.
        tokio::select! {
            back = connection_back(session, &mut states, what) => back?,
            () = interrupts.recv() => return Ok(0),
        }
    }
}

/// `leader ID token N`, or `no leader`.
fn line(leader: Option<&Candidate>) -> String {
    match leader {
        Some(l) => format!("leader {} token {}", l.id, l.fencing_token),
        None => "no leader".to_owned(),
    }
}

/// Errors that a reconnect cures: read again once connected.
fn is_connection(err: &lockkeeper::Error) -> bool {
    matches!(
        err,
        lockkeeper::Error::SessionLost
            | lockkeeper::Error::RetriesExhausted { .. }
            | lockkeeper::Error::Zk(
                lockkeeper_zk_client::Error::ConnectionLoss(_)
                    | lockkeeper_zk_client::Error::SessionExpired
            )
    )
}

/// `hostname:pid`, what Curator users often pass as the id.
fn default_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_owned());
    format!("{host}:{}", std::process::id())
}

/// SIGINT and SIGTERM while no command runs: they end this process cleanly (a queued node is
/// withdrawn, a leadership resigned).
struct Interrupts {
    int: Signal,
    term: Signal,
}

impl Interrupts {
    fn new() -> Result<Interrupts, Failure> {
        let install = |kind| {
            signal(kind)
                .map_err(|e| Failure::software(format!("cannot install signal handlers: {e}")))
        };
        Ok(Interrupts {
            int: install(SignalKind::interrupt())?,
            term: install(SignalKind::terminate())?,
        })
    }

    async fn recv(&mut self) {
        tokio::select! {
            _ = self.int.recv() => {}
            _ = self.term.recv() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(clap::Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        elect: ElectArgs,
    }

    /// The resignation and the close share one deadline: the second step of the way out gets
    /// what the first left, not a limit of its own.
    #[tokio::test]
    async fn the_way_out_has_one_deadline() {
        let limit = Duration::from_secs(2);
        let way_out = WayOut::new(limit);
        let first = way_out.deadline();
        let step = Duration::from_millis(50);
        tokio::time::sleep(step).await;
        assert_eq!(
            way_out.deadline(),
            first,
            "the deadline moved with the second step"
        );
        assert!(first.saturating_duration_since(Instant::now()) <= limit - step);
    }

    fn wait_of(args: &[&str]) -> Wait {
        Cli::try_parse_from(args).expect("parse").elect.wait()
    }

    #[test]
    fn the_wait_follows_the_flags() {
        assert!(matches!(wait_of(&["elect", "/e"]), Wait::Forever));
        assert!(matches!(wait_of(&["elect", "--try", "/e"]), Wait::Try));
        assert!(matches!(
            wait_of(&["elect", "--timeout", "3s", "/e"]),
            Wait::Within(d) if d == Duration::from_secs(3)
        ));
        // As `lock --timeout 0`: no wait at all.
        assert!(matches!(
            wait_of(&["elect", "--timeout", "0s", "/e"]),
            Wait::Try
        ));
    }

    #[test]
    fn contradictory_flags_are_refused() {
        for args in [
            &["elect", "--try", "--timeout", "1s", "/e"][..],
            &["elect", "--listen", "--timeout", "1s", "/e"],
            &["elect", "--listen", "--try", "/e"],
            &["elect", "--timeout", "soon", "/e"],
        ] {
            assert!(Cli::try_parse_from(args).is_err(), "{args:?} accepted");
        }
    }
}
