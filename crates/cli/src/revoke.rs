//! `lockkeeper revoke NAME`: take a lock away from its holder, for operators.
//!
//! On ZooKeeper, cooperatively by default: every holder's node gets Curator's `__REVOKE__`
//! request ([`Session::request_revocation`]), which a lockkeeper holder (and the `lock`
//! command, which then stops its command) or a Curator holder that called `makeRevocable`
//! acts on; nothing happens to a holder that does not listen (kazoo's never do). `--force`
//! asks the same way, waits `--grace` for the holder to let go, then deletes its node
//! ([`Session::revoke`]): the next waiter is granted at once, and the old holder's fencing
//! token is lower than the next one's, which is what protects the resource from a holder that
//! is paused or partitioned and does not know yet.
//!
//! On Redis no holder listens for requests, so only `--force` exists: every holder the
//! library's inspection finds under the name (lease or reentrant lock, read-write lock readers
//! or writer, semaphore permits) is given the grace period, then its hold is removed if, and
//! only if, the same holder still has it ([`lockkeeper::redis::Redis::revoke`]), so a lock
//! released and taken again meanwhile is left alone.
//!
//! A semaphore lease is not asked cooperatively: no lease holder listens for requests, so the
//! request would be reported "requested" and ignored while it overwrote the lease's data.
//! That is a usage error that changes nothing; `--force` deletes the lease, and a `lockkeeper
//! lock --semaphore` holder then loses it and stops its command (exit 76).
//!
//! Invariants: nothing is changed before the target is known and allowed (a leader latch's or
//! a simple lock's node, whose data is its owner's identity, is never rewritten, nor is a
//! semaphore lease's without `--force`); every node acted on is printed with what happened
//! to it.

use std::process::ExitCode;
use std::time::Duration;

use futures::future::join_all;
use lockkeeper::zk::{NodeKind, Participant, Revoked, Session};

use crate::backend::{Backend, DEFAULT_SESSION_TIMEOUT, Failure, Handle, parse_duration};
use crate::inspect::LockTarget;

const AFTER_HELP: &str = "\
Cooperative (default, ZooKeeper only): the holder is asked to release; lockkeeper holders and
Curator holders that called makeRevocable listen, others (kazoo) do not.
--force: ask, wait --grace (default 10s) for a release, then delete the holder's node (Redis: its
key, only if it still names the same holder). The old holder's fencing token is then stale.

Semaphore leases are not asked: their holders do not listen; use --force.

Exit codes: 0 done (or nobody held it); 64 usage, nothing changed (also: cooperative revoke on
Redis or of a semaphore lease, an unknown --node, a leader latch or simple lock); 69 backend
unreachable; 70 unexpected backend error.";

const NO_COOPERATIVE_ON_REDIS: &str = "cooperative revocation is not available on Redis (no \
     holder listens for requests); use --force [--grace D] to delete the holder's key";

/// Arguments of `lockkeeper revoke`.
#[derive(clap::Args, Debug)]
#[command(after_help = AFTER_HELP)]
pub(crate) struct RevokeArgs {
    #[command(flatten)]
    target: LockTarget,
    /// Delete the holder's node (Redis: key) if it has not released after --grace.
    #[arg(long)]
    force: bool,
    /// With --force: how long the holder has to release before its node is deleted.
    #[arg(long, value_name = "D", default_value = "10s", value_parser = parse_duration,
          requires = "force")]
    grace: Duration,
    /// Revoke only this node (its name as `inspect` shows it, or its full path) when several
    /// hold (readers, semaphore leases).
    #[arg(long, value_name = "NODE")]
    node: Option<String>,
}

/// Runs the command.
pub(crate) async fn run(args: RevokeArgs) -> ExitCode {
    match revoke(&args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => failure.report("revoke"),
    }
}

async fn revoke(args: &RevokeArgs) -> Result<(), Failure> {
    // Refused before dialling: a usage error, whether or not the server answers.
    match Backend::parse(&args.target.backend.backend)? {
        etcd @ Backend::Etcd { .. } => return Err(not_on_etcd(&etcd)),
        Backend::Zk { .. } => {}
        _ if !args.force => return Err(Failure::usage(NO_COOPERATIVE_ON_REDIS)),
        _ => {}
    }
    let (backend, handle) = args.target.backend.connect(DEFAULT_SESSION_TIMEOUT).await?;
    let what = format!("{} on {backend}", args.target.name);
    match handle {
        Handle::Zk(session) => {
            let result = zk(&session, args, &what).await;
            session.close().await;
            result
        }
        Handle::Redis(redis) => {
            if !args.force {
                return Err(Failure::usage(NO_COOPERATIVE_ON_REDIS));
            }
            if args.node.is_some() || args.target.max_leases.is_some() {
                return Err(Failure::usage(
                    "--node and --max-leases are for ZooKeeper backends",
                ));
            }
            redis_force(&redis, &args.target.name, args.grace)
                .await
                .map_err(|e| Failure::from_lib(&what, e))
        }
        #[cfg(feature = "etcd")]
        Handle::Etcd(_) => unreachable!("etcd backends are refused before connecting"),
    }
}

/// The usage error for an etcd backend: etcd has no request-to-release protocol to send, and
/// a forced release is one `etcdctl del` away.
fn not_on_etcd(backend: &Backend) -> Failure {
    Failure::usage(format!(
        "`lockkeeper revoke` is not supported on etcd backends yet ({backend}); \
         `lockkeeper inspect` names a holder's key and `etcdctl del KEY` deletes it"
    ))
}

async fn zk(session: &Session, args: &RevokeArgs, what: &str) -> Result<(), Failure> {
    let inspection = args.target.inspect_zk(session, what).await?;
    let targets: Vec<&Participant> = match &args.node {
        Some(node) => {
            let found = inspection
                .participants
                .iter()
                .find(|p| p.name == *node || p.path == *node);
            vec![found.ok_or_else(|| {
                Failure::usage(format!(
                    "--node {node:?}: no such node under {}; `lockkeeper inspect {}` lists them",
                    args.target.name, args.target.name
                ))
            })?]
        }
        None => inspection
            .holders()
            // A semaphore's internal lock is not a lease: revoking it takes nothing away.
            .filter(|p| !p.name.starts_with("locks/"))
            .collect(),
    };
    if targets.is_empty() {
        let hint = if inspection.participants.is_empty() {
            ""
        } else {
            " (a semaphore's leases need --max-leases N to be told holding, or name one with --node)"
        };
        println!(
            "{}: nobody holds it; nothing revoked{hint}",
            args.target.name
        );
        return Ok(());
    }
    for target in &targets {
        // Nobody holding a lease listens for a request (`lock --semaphore`, Curator's
        // InterProcessSemaphoreV2, kazoo's Semaphore): it would be "requested" and ignored,
        // and it would overwrite the lease node's data (its owner's identity) for nothing.
        if !args.force && matches!(target.kind, NodeKind::Lease | NodeKind::KazooLease) {
            return Err(Failure::usage(format!(
                "{}: a semaphore lease's holder does not listen for revocation requests, so \
                 asking would change nothing but the lease's data; nothing was changed. Use \
                 --force [--grace D] to delete the lease (its holder, if lockkeeper lock, stops \
                 its command and exits 76)",
                target.path
            )));
        }
        if matches!(target.kind, NodeKind::Latch | NodeKind::Simple) {
            return Err(Failure::usage(format!(
                "{}: a {} node's data is its owner's identity, which a revocation request \
                 would overwrite; it cannot be revoked",
                target.path, target.kind
            )));
        }
    }
    let revocations = targets.iter().map(|target| async move {
        let result = if args.force {
            session.revoke(&target.path, args.grace).await.map(|r| match r {
                Revoked::AlreadyGone => "already gone: nobody held through it".to_owned(),
                Revoked::Released => "released by its holder within the grace period".to_owned(),
                Revoked::Deleted => format!(
                    "deleted after the {:?} grace period; its holder's fencing token {} is now stale",
                    args.grace, target.fencing_token
                ),
            })
        } else {
            session.request_revocation(&target.path).await.map(|written| {
                if !written {
                    "already gone: nobody held through it".to_owned()
                } else if matches!(
                    target.kind,
                    NodeKind::KazooLock | NodeKind::KazooRead | NodeKind::KazooLease
                ) {
                    "revocation requested (kazoo holders do not listen: use --force)".to_owned()
                } else {
                    "revocation requested; the holder decides".to_owned()
                }
            })
        };
        (target, result)
    });
    let mut failure = None;
    for (target, result) in join_all(revocations).await {
        match result {
            Ok(done) => println!(
                "{} ({} {}, session {}): {done}",
                target.path,
                target.state,
                target.kind,
                target.session_hex()
            ),
            Err(err) => {
                let f = Failure::from_lib(&target.path, err);
                eprintln!("lockkeeper revoke: {}", f.message);
                failure.get_or_insert(f);
            }
        }
    }
    failure.map_or(Ok(()), Err)
}

/// Redis `--force`: the holders as inspected, each given the grace period (ended early by
/// its release), then removed if the same holder still has it.
async fn redis_force(
    redis: &lockkeeper::redis::Redis,
    name: &str,
    grace: Duration,
) -> lockkeeper::Result<()> {
    use lockkeeper::redis::Revoked;
    let inspection = redis.inspect(name).await?;
    let holders: Vec<_> = inspection.holders().collect();
    if holders.is_empty() {
        println!("{name}: nobody holds it; nothing revoked");
        return Ok(());
    }
    let revocations = holders
        .iter()
        .map(|holder| async move { (holder, redis.revoke(name, holder, grace).await) });
    let mut failure = None;
    for (holder, result) in join_all(revocations).await {
        let done = match result {
            Ok(Revoked::Deleted) => format!(
                "deleted after the {grace:?} grace period; its fencing token {} is now stale",
                holder.fencing_token.map_or_else(
                    || format!("(at most {})", token_or_dash(holder.latest_token)),
                    |t| t.to_string()
                )
            ),
            Ok(Revoked::AlreadyGone | Revoked::Released) => {
                "released (or expired) within the grace period: left alone".to_owned()
            }
            Ok(other) => format!("{other:?}"),
            Err(err) => {
                eprintln!(
                    "lockkeeper revoke: {} ({} held by {}): {err}",
                    holder.key, holder.kind, holder.owner
                );
                failure.get_or_insert(err);
                continue;
            }
        };
        println!(
            "{} ({} {} held by {}): {done}",
            holder.key, holder.state, holder.kind, holder.owner
        );
    }
    failure.map_or(Ok(()), Err)
}

fn token_or_dash(token: Option<lockkeeper::FencingToken>) -> String {
    token.map_or_else(|| "-".to_owned(), |t| t.to_string())
}
