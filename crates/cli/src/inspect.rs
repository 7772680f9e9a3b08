//! `lockkeeper inspect NAME`: who holds a lock and who waits, for operators.
//!
//! On ZooKeeper it prints the library's inspection ([`lockkeeper::zk::inspect`]): holders and
//! waiters in queue order with owner session, age, fencing token, data and kind, for every
//! layout the library knows (lockkeeper's, Curator's and kazoo's locks, semaphores and leader
//! latches). On Redis it prints the library's inspection of every lock kind of that name
//! (`lockkeeper::redis::Redis::inspect`): lease, reentrant and read-write locks and semaphores,
//! their holders and waiters. On etcd it prints the library's inspection of the keys under `NAME/`
//! (`lockkeeper::etcd::Session::inspect`). `--json` prints one JSON object instead of the table ([`json`]).
//!
//! `--watch` (ZooKeeper) redraws on every change under the lock path: a persistent recursive
//! watch on the path (and on a kazoo semaphore's sibling lock), set *before* each generation's
//! first inspection so no change between the two is missed, and set again after the
//! connection comes back, since a new session has no watches. It runs until SIGINT or SIGTERM
//! and then exits 0. It only reads; it never changes the lock.

pub(crate) mod json;

use std::process::ExitCode;

use lockkeeper::zk::{Inspection, Session};
use lockkeeper_zk_client::{AddWatchMode, EventType};
use tokio::signal::unix::{SignalKind, signal};

use crate::backend::{BackendArgs, DEFAULT_SESSION_TIMEOUT, Failure, Handle, connection_back};

const AFTER_HELP: &str = "\
ZooKeeper: NAME is the lock path; every layout of lockkeeper, Curator and kazoo is read
(mutex, read-write lock, simple lock, semaphore, leader latch). Redis: NAME is the lock name;
every kind's keys are read at once (lease, reentrant, read-write lock, semaphore: holders and
waiters). etcd: NAME is the lock name; the keys under NAME/
are read (mutex, election and etcdctl lock/elect keys, read-write lock, semaphore).

Exit codes: 0 shown; 64 usage; 69 backend unreachable; 70 unexpected backend error.";

/// Arguments of `lockkeeper inspect`.
#[derive(clap::Args, Debug)]
#[command(after_help = AFTER_HELP)]
pub(crate) struct InspectArgs {
    #[command(flatten)]
    target: LockTarget,
    /// Print one JSON object (one per line with --watch) instead of the table.
    #[arg(long)]
    json: bool,
    /// Redraw on every change of the lock until SIGINT or SIGTERM (ZooKeeper only).
    #[arg(long)]
    watch: bool,
}

/// What `inspect` and `revoke` act on: a lock on a backend, and the one fact about it that the
/// server does not store.
#[derive(clap::Args, Debug)]
pub(crate) struct LockTarget {
    #[command(flatten)]
    pub backend: BackendArgs,
    /// The lease limit of a Curator or lockkeeper semaphore at NAME, so that its holding leases
    /// can be told from waiting ones (it is not stored on the server).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_leases: Option<u32>,
    /// The lock path on ZooKeeper backends, the lock name on Redis and etcd.
    pub name: String,
}

impl LockTarget {
    /// The lock's participants on ZooKeeper, a semaphore's read with `--max-leases` when given;
    /// a failure names `what` (the lock and the backend).
    pub(crate) async fn inspect_zk(
        &self,
        session: &Session,
        what: &str,
    ) -> Result<Inspection, Failure> {
        let inspection = match self.max_leases {
            Some(max) => session.inspect_semaphore(&self.name, max).await,
            None => session.inspect(&self.name).await,
        };
        inspection.map_err(|e| Failure::from_lib(what, e))
    }
}

/// Runs the command.
pub(crate) async fn run(args: InspectArgs) -> ExitCode {
    match inspect(&args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => failure.report("inspect"),
    }
}

async fn inspect(args: &InspectArgs) -> Result<(), Failure> {
    let (backend, handle) = args.target.backend.connect(DEFAULT_SESSION_TIMEOUT).await?;
    let what = format!("{} on {backend}", args.target.name);
    match handle {
        Handle::Zk(session) => {
            let result = if args.watch {
                watch(&session, args, &what).await
            } else {
                let inspection = args.target.inspect_zk(&session, &what).await?;
                print(args, &inspection);
                Ok(())
            };
            session.close().await;
            result
        }
        Handle::Redis(redis) => {
            if args.watch || args.target.max_leases.is_some() {
                return Err(Failure::usage(
                    "--watch and --max-leases are for ZooKeeper backends; on Redis, run \
                     inspect again to see a change",
                ));
            }
            let inspection = redis
                .inspect(&args.target.name)
                .await
                .map_err(|e| Failure::from_lib(&what, e))?;
            if args.json {
                println!("{}", json::redis(&inspection));
            } else {
                println!("{inspection}");
            }
            Ok(())
        }
        #[cfg(feature = "etcd")]
        Handle::Etcd(session) => {
            let inspected = if args.watch {
                Err(Failure::usage(
                    "--watch is for ZooKeeper backends; on etcd, run inspect again to see a \
                     change",
                ))
            } else {
                session
                    .inspect(&args.target.name, args.target.max_leases)
                    .await
                    .map_err(|e| Failure::from_lib(&what, e))
            };
            let _ = session.close().await;
            let inspection = inspected?;
            if args.json {
                println!("{}", json::etcd(&inspection));
            } else {
                println!("{inspection}");
            }
            Ok(())
        }
    }
}

fn print(args: &InspectArgs, inspection: &Inspection) {
    if args.json {
        println!("{}", json::zk(inspection));
    } else {
        println!("{inspection}");
    }
}

/// Redraws on every change until SIGINT or SIGTERM; see the module docs.
async fn watch(session: &Session, args: &InspectArgs, what: &str) -> Result<(), Failure> {
    let mut int = signal(SignalKind::interrupt())
        .map_err(|e| Failure::software(format!("cannot install signal handlers: {e}")))?;
    let mut term = signal(SignalKind::terminate())
        .map_err(|e| Failure::software(format!("cannot install signal handlers: {e}")))?;
    let mut states = session.states();
    let terminal = std::io::IsTerminal::is_terminal(&std::io::stdout());
    // A kazoo semaphore queues its waiters beside the path, not under it.
    let sibling = format!("{}-__lock__", args.target.name);
    loop {
        // Watches first, then the inspection: a change in between fires the watch.
        let client = session.client().map_err(|e| Failure::from_lib(what, e))?;
        let watches = async {
            let under = client
                .watch(&args.target.name, AddWatchMode::PersistentRecursive)
                .await?;
            let beside = client
                .watch(&sibling, AddWatchMode::PersistentRecursive)
                .await?;
            Ok::<_, lockkeeper_zk_client::Error>((under, beside))
        };
        let watches = tokio::select! {
            w = watches => w.ok(),
            _ = int.recv() => return Ok(()),
            _ = term.recv() => return Ok(()),
        };
        if let Some((mut under, mut beside)) = watches {
            loop {
                let inspection = tokio::select! {
                    i = args.target.inspect_zk(session, what) => i?,
                    _ = int.recv() => return Ok(()),
                    _ = term.recv() => return Ok(()),
                };
                if terminal && !args.json {
                    // Clear the screen and go home: a redraw, not a scroll.
                    print!("\x1b[H\x1b[2J");
                }
                print(args, &inspection);
                if !args.json {
                    println!();
                }
                let event = tokio::select! {
                    event = under.changed() => event,
                    event = beside.changed() => event,
                    _ = int.recv() => return Ok(()),
                    _ = term.recv() => return Ok(()),
                };
                if event.event_type == EventType::Session {
                    // Disconnected or expired: wait for the session to be back, below.
                    break;
                }
            }
        }
        // No watch could be set, or the connection went: wait until it is back (or a new
        // session replaced it), then set the watches again and redraw.
        tokio::select! {
            back = connection_back(session, &mut states, what) => back?,
            _ = int.recv() => return Ok(()),
            _ = term.recv() => return Ok(()),
        }
    }
}
