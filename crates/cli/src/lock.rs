//! `lockkeeper lock NAME [-- CMD [ARGS...]]`: run a command while holding a lock, or hold it
//! until interrupted.
//!
//! The lock is a [`Mutex`](lockkeeper::zk::Mutex) on ZooKeeper (Curator's
//! `InterProcessMutex` layout, so Curator holders and this command exclude each other), a
//! [`LeaseLock`](lockkeeper::redis::LeaseLock) on Redis, and on etcd the Mutex with the layout
//! of `etcdctl lock` (so `etcdctl lock NAME` and this command exclude each other); `--semaphore
//! N` takes one of N leases, `--read` / `--write` one side of a read-write lock. The command runs under
//! [`run::supervise`], which stops its whole process group when the lock is lost.
//!
//! Invariants:
//! - the command is started only once the lock is granted, and while it runs, the lock being
//!   lost (session expired or paused past its deadline, lease not renewed, node deleted, or a
//!   revocation requested) stops it before this process exits 76;
//! - every exit code is one of [`crate::exit`]'s or the command's own, so a cron wrapper can
//!   tell "someone else has it" (75) from "the backend is down" (69) from the job's failure;
//! - a wait interrupted by SIGINT, SIGTERM or SIGHUP leaves no waiting node or place in line
//!   behind: the acquisition is dropped (cancel-safe) and the session closed before exiting.

use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Duration;

use std::any::Any;

use lockkeeper::redis::LeaseGuard;
use lockkeeper::{FencingToken, Guard, Lock, LockOptions};
use tokio::time::Instant;

use crate::backend::{BackendArgs, Failure, Handle, parse_duration};
use crate::exit;
use crate::loss;
use crate::run::{self, Outcome, Signals};

const EXIT_CODES: &str = "\
Exit codes:
  the command's own   it ran to its end (128 + N when signal N ended it)
  64                  usage: a bad flag, backend URL or name
  69                  the backend could not be reached within --connect-timeout, or stopped
                      answering (also when --timeout passed with it unreachable: never 75)
  70                  internal failure (the command could not be started, ...)
  75                  not acquired: --try found the lock held (a semaphore's leases all
                      taken), or --timeout passed with it held; the wait ends by --timeout
                      plus at most a second to withdraw
  76                  the lock was lost (or its revocation requested) while the command ran;
                      the command's process group was stopped; the message names the cause
  128 + N             signal N (SIGINT, SIGTERM, SIGHUP) ended the wait for the lock
  0                   without a command: released after SIGINT or SIGTERM

Releasing and closing on the way out take at most --release-timeout (default 2s); past it
lockkeeper exits anyway and says the release was not confirmed.
SIGINT, SIGTERM and SIGHUP are passed on to the command's process group.
The command gets LOCKKEEPER_FENCING_TOKEN, LOCKKEEPER_LOCK and LOCKKEEPER_BACKEND.";

/// Arguments of `lockkeeper lock`.
#[derive(clap::Args, Debug)]
#[command(after_help = EXIT_CODES)]
pub(crate) struct LockArgs {
    #[command(flatten)]
    backend: BackendArgs,
    /// Take one of N leases of a semaphore instead of the lock (every user of NAME must pass
    /// the same N).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..),
          conflicts_with_all = ["read", "write"])]
    semaphore: Option<u32>,
    /// Take the read side of a read-write lock (shared with other readers).
    #[arg(long, conflicts_with = "write")]
    read: bool,
    /// Take the write side of a read-write lock (excludes readers and writers).
    #[arg(long)]
    write: bool,
    /// Wait at most this long for the lock (e.g. 30s, 5m); not acquired: exit 75.
    #[arg(long, value_name = "D", value_parser = parse_duration)]
    timeout: Option<Duration>,
    /// Do not wait: if the lock is held, exit 75 at once.
    #[arg(long = "try", conflicts_with = "timeout")]
    try_lock: bool,
    /// After the lock is lost, how long the command's process group has between SIGTERM and
    /// SIGKILL.
    #[arg(long, value_name = "D", default_value = "5s", value_parser = parse_duration)]
    kill_after: Duration,
    /// How long releasing the lock and closing the connection may take on the way out, all
    /// told; past it lockkeeper exits anyway, saying the release was not confirmed (the
    /// backend then frees the lock when the session or lease ends).
    #[arg(long, value_name = "D", default_value = "2s", value_parser = parse_duration)]
    release_timeout: Duration,
    /// How long this holder may go unheard before the backend gives its lock away: the
    /// ZooKeeper session timeout (the server may bound it), the Redis lease, renewed every
    /// third of it, or the etcd lease's TTL, likewise.
    #[arg(long, value_name = "D", default_value = "10s", value_parser = parse_duration)]
    session_timeout: Duration,
    /// The lock path on ZooKeeper backends (/locks/nightly), the lock name on Redis and etcd
    /// (on etcd, the key prefix `etcdctl lock NAME` uses).
    name: String,
    /// The command to run while holding the lock; without it, hold until SIGINT or SIGTERM.
    #[arg(last = true, value_name = "CMD")]
    command: Vec<OsString>,
}

/// Which lock of NAME to take.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Exclusive,
    Semaphore(u32),
    Read,
    Write,
}

/// How long to wait for it.
#[derive(Clone, Copy, Debug)]
enum Wait {
    Forever,
    Try,
    Within(Duration),
}

/// Runs the command.
pub(crate) async fn run(args: LockArgs) -> ExitCode {
    match lock(args).await {
        Ok(code) => exit::code(code),
        Err(failure) => failure.report("lock"),
    }
}

async fn lock(args: LockArgs) -> Result<u8, Failure> {
    let kind = match (args.semaphore, args.read, args.write) {
        (Some(n), _, _) => Kind::Semaphore(n),
        (None, true, _) => Kind::Read,
        (None, _, true) => Kind::Write,
        _ => Kind::Exclusive,
    };
    let wait = match (args.try_lock, args.timeout) {
        (true, _) => Wait::Try,
        (_, Some(d)) if d.is_zero() => Wait::Try,
        (_, Some(d)) => Wait::Within(d),
        _ => Wait::Forever,
    };
    let name = args.name.as_str();
    let mut interrupts = Signals::new()?;
    let (backend, handle) = args.backend.connect(args.session_timeout).await?;
    let acquired = tokio::select! {
        acquired = acquire(&handle, name, kind, wait) => acquired,
        sig = interrupts.recv() => {
            // The acquisition is dropped, which withdraws it; on ZooKeeper, closing ends the
            // session, and its waiting node with it, before this process exits.
            eprintln!("lockkeeper lock: interrupted while waiting for {name}");
            close(&handle, Instant::now() + args.release_timeout).await;
            return Ok(128 + sig as u8);
        }
    };
    let guard = match acquired {
        Ok(Some(guard)) => guard,
        Ok(None) => {
            // The backend answered: what it said, in the lock's own terms.
            let taken = match kind {
                Kind::Semaphore(n) => format!("all {n} leases are taken"),
                _ => "held by someone else".to_owned(),
            };
            let why = match wait {
                Wait::Within(d) => format!("not acquired within {d:?}: {taken}"),
                _ => taken,
            };
            eprintln!("lockkeeper lock: {name} on {backend}: {why}");
            close(&handle, Instant::now() + args.release_timeout).await;
            return Ok(exit::NOT_ACQUIRED);
        }
        Err(err) => {
            close(&handle, Instant::now() + args.release_timeout).await;
            let what = format!("{name} on {backend}");
            let cause = err.to_string();
            let mut failure = Failure::from_lib(&what, err);
            // The answer a cron wrapper acts on: not "someone else has it" (75), but a backend
            // that could not say either way.
            if let (exit::UNAVAILABLE, Wait::Within(d)) = (failure.code, wait) {
                failure.message = format!(
                    "{what}: not acquired within {d:?}: the backend is unreachable: {cause}"
                );
            }
            return Err(failure);
        }
    };
    let token = token_of(guard.as_ref());
    let code = if args.command.is_empty() {
        hold(guard.as_ref(), &handle, name, token, &mut interrupts).await
    } else {
        drop(interrupts);
        let env = [
            ("LOCKKEEPER_FENCING_TOKEN", token.to_string()),
            ("LOCKKEEPER_LOCK", name.to_string()),
            ("LOCKKEEPER_BACKEND", args.backend.backend.clone()),
        ];
        // Watching starts now, before the command does: a pause while it starts counts.
        let lost = lost(guard.as_ref(), &handle, name, tokio::time::Instant::now());
        let outcome = run::supervise(&args.command, &env, args.kill_after, lost).await;
        match outcome {
            Ok(Outcome::Exited(code)) => code,
            Ok(Outcome::Stopped {
                reason,
                child,
                killed,
            }) => {
                run::report_stopped("lock", name, &reason, child, killed);
                exit::LOST
            }
            Err(failure) => {
                eprintln!("lockkeeper lock: {}", failure.message);
                failure.code
            }
        }
    };
    // One deadline for the way out: a backend that stopped answering must not keep the
    // process (and whoever waits for its exit code) for retries and response timeouts.
    let until = Instant::now() + args.release_timeout;
    match tokio::time::timeout_at(until, guard.release()).await {
        Ok(Ok(())) => {}
        // After a loss there is nothing left to release, and the loss was reported. (A loss
        // just as the command ended is not hidden: its release error is printed below.)
        Ok(Err(lockkeeper::Error::NotHeld)) if code == exit::LOST => {}
        Ok(Err(err)) => eprintln!("lockkeeper lock: releasing {name}: {err}"),
        Err(_) => eprintln!(
            "lockkeeper lock: releasing {name} on {backend}: the release was not confirmed \
             within {:?} (--release-timeout); the backend frees the lock when this session or \
             lease ends",
            args.release_timeout
        ),
    }
    close(&handle, until).await;
    Ok(code)
}

/// Holds without a command: prints the token, waits for SIGINT/SIGTERM (exit 0) or the loss
/// (exit 76).
async fn hold(
    guard: &dyn Guard,
    handle: &Handle,
    name: &str,
    token: FencingToken,
    interrupts: &mut Signals,
) -> u8 {
    println!("{token}");
    eprintln!(
        "lockkeeper lock: holding {name} with fencing token {token}; SIGINT or SIGTERM releases it"
    );
    tokio::select! {
        reason = lost(guard, handle, name, tokio::time::Instant::now()) => {
            eprintln!("lockkeeper lock: {name}: {reason}");
            exit::LOST
        }
        _ = interrupts.recv() => 0,
    }
}

/// Ends the connection to the backend before the process exits, giving up at `until` (the
/// `--release-timeout` deadline of the way out) with a line saying what was not confirmed.
///
/// On ZooKeeper, closing the session deletes every node it still has (a withdrawn waiter's
/// included) at once, rather than a session timeout later: `Session::close` returns once the
/// server has ended the session. The Redis locks clean up an abandoned wait (its place in line,
/// an acquisition whose answer came too late) in background tasks, which the end of the process
/// would cut short, leaving a dead place at the head of the line that turns `--try` callers
/// away until it lapses: `Redis::close` waits for them.
///
/// On etcd, closing revokes the session's lease, which deletes a withdrawn waiter's key at once
/// rather than a TTL later.
async fn close(handle: &Handle, until: Instant) {
    let closing = async {
        match handle {
            Handle::Zk(session) => {
                session.close().await;
                true
            }
            Handle::Redis(redis) => redis.close().await,
            #[cfg(feature = "etcd")]
            Handle::Etcd(session) => match session.close().await {
                // A lost session has nothing left to close; the loss was reported.
                Ok(()) | Err(lockkeeper::Error::SessionLost) => true,
                Err(err) => {
                    eprintln!("lockkeeper lock: closing the etcd session: {err}");
                    true
                }
            },
        }
    };
    // Polled once even past `until`, so the local part of closing (ending the session on our
    // side) always happens.
    if !matches!(tokio::time::timeout_at(until, closing).await, Ok(true)) {
        eprintln!(
            "lockkeeper lock: closing the connection to the backend was not confirmed by the \
             --release-timeout deadline; what it still held goes when its session or lease ends"
        );
    }
}

/// The lock of NAME that `kind` names, on `handle`'s backend.
///
/// The ZooKeeper locks are taken with `keep_through_suspension()`: a cron job killed by every
/// network blip would be worse than the risk it avoids, so a suspended connection is ridden out
/// for as long as the session certainly still lives on the server. If the same session comes
/// back in that time, the lock was never lost; a session that ended, a deadline passed (a
/// process paused past it) or a deleted node is a loss at once.
fn lock_of(handle: &Handle, name: &str, kind: Kind) -> lockkeeper::Result<Box<dyn Lock>> {
    Ok(match (handle, kind) {
        (Handle::Zk(session), Kind::Exclusive) => Box::new(
            session
                .mutex(name)?
                .with_options(LockOptions::new().keep_through_suspension())?,
        ),
        (Handle::Zk(session), Kind::Read) => Box::new(
            session
                .rw_lock(name)?
                .with_options(LockOptions::new().keep_through_suspension())?
                .read_lock(),
        ),
        (Handle::Zk(session), Kind::Write) => Box::new(
            session
                .rw_lock(name)?
                .with_options(LockOptions::new().keep_through_suspension())?
                .write_lock(),
        ),
        (Handle::Zk(session), Kind::Semaphore(n)) => Box::new(
            session
                .semaphore(name, n)?
                .with_options(LockOptions::new().keep_through_suspension())?,
        ),
        (Handle::Redis(redis), Kind::Exclusive) => Box::new(redis.lease_lock(name)),
        (Handle::Redis(redis), Kind::Read) => Box::new(redis.rw_lock(name).read_lock()),
        (Handle::Redis(redis), Kind::Write) => Box::new(redis.rw_lock(name).write_lock()),
        (Handle::Redis(redis), Kind::Semaphore(n)) => Box::new(redis.semaphore(name, n)),
        #[cfg(feature = "etcd")]
        (Handle::Etcd(session), Kind::Exclusive) => Box::new(session.mutex(name)?),
        #[cfg(feature = "etcd")]
        (Handle::Etcd(session), Kind::Read) => Box::new(session.rw_lock(name)?.read_lock()),
        #[cfg(feature = "etcd")]
        (Handle::Etcd(session), Kind::Write) => Box::new(session.rw_lock(name)?.write_lock()),
        #[cfg(feature = "etcd")]
        (Handle::Etcd(session), Kind::Semaphore(n)) => {
            let permits = usize::try_from(n).unwrap_or(usize::MAX);
            Box::new(session.semaphore(name, permits)?)
        }
    })
}

/// Takes the lock of NAME within `wait`; `None` if it was not granted in time.
async fn acquire(
    handle: &Handle,
    name: &str,
    kind: Kind,
    wait: Wait,
) -> lockkeeper::Result<Option<Box<dyn Guard>>> {
    let lock = lock_of(handle, name, kind)?;
    match wait {
        Wait::Forever => lock.lock().await.map(Some),
        Wait::Try => lock.try_lock().await,
        Wait::Within(d) => lock.lock_timeout(d).await,
    }
}

/// The fencing token the command gets: every lock this command takes has one (Redlock, the
/// one lock without, is not among them).
fn token_of(guard: &dyn Guard) -> FencingToken {
    guard.fencing_token().unwrap_or(FencingToken::new(0))
}

/// Resolves when the command must stop, with why: the cause established as [`crate::loss`]
/// describes.
async fn lost(
    guard: &dyn Guard,
    handle: &Handle,
    name: &str,
    since: tokio::time::Instant,
) -> String {
    let observed = tokio::select! {
        observed = loss::observe(guard.lost(), || guard.valid_until(), since) => observed,
        () = guard.revocation_requested() => {
            return "revocation requested (lockkeeper revoke, or a Curator Revoker): giving the \
                    lock up"
                .into();
        }
    };
    cause(guard, &observed, handle, name).await
}

/// Why the lock was lost, from what was observed up to the loss and, when that does not tell,
/// the backend's answer about the node or key.
async fn cause(
    guard: &dyn Guard,
    observed: &loss::Observed,
    handle: &Handle,
    name: &str,
) -> String {
    const REDIS_UNHEARD: &str =
        "Redis did not answer the lease's renewals in time (lease not renewed)";
    match handle {
        Handle::Zk(session) => {
            let local = observed.local_cause(
                "ZooKeeper session",
                "the server was not heard from for the session timeout",
            );
            if let Some(cause) = local {
                return format!("{cause}: the lock is lost");
            }
            // One lock node: a mutex's or a side's, or the one lease taken of a semaphore.
            loss::zk_cause(session, &guard.held_as(), token_of(guard)).await
        }
        Handle::Redis(redis) => {
            if let Some(cause) = observed.local_cause("Redis lease", REDIS_UNHEARD) {
                return format!("{cause}: the lock is lost");
            }
            match (guard as &dyn Any).downcast_ref::<LeaseGuard>() {
                Some(lease) => redis_cause(redis, name, lease.token()).await,
                None => "lease not renewed: Redis refused the renewal (the key was deleted, or \
                         expired and was taken): the lock is lost"
                    .into(),
            }
        }
        #[cfg(feature = "etcd")]
        Handle::Etcd(_) => observed
            .local_cause(
                "etcd lease",
                "etcd did not answer the lease's keep-alives in time (lease not renewed)",
            )
            .map(|cause| format!("{cause}: the lock is lost"))
            .unwrap_or_else(|| {
                "the etcd lease expired or could not be renewed, or the lock key was deleted: \
                 the lock is lost"
                    .into()
            }),
    }
}

/// Why a Redis lease lock whose deadline had not passed was lost: asks the server (within
/// [`loss::ASK_LIMIT`]) what its key holds now.
async fn redis_cause(redis: &lockkeeper::redis::Redis, name: &str, token: &str) -> String {
    let lock = redis.lease_lock(name);
    let key = lock.key();
    let mut get = redis::cmd("GET");
    get.arg(key);
    let get = redis.command::<Option<String>>(&get);
    match tokio::time::timeout(loss::ASK_LIMIT, get).await {
        Ok(Ok(None)) => format!(
            "the lock key {key} was deleted (an operator's DEL, `lockkeeper revoke --force`, \
             force_unlock): the lock is lost"
        ),
        Ok(Ok(Some(holder))) if holder != token => format!(
            "the lock key {key} was deleted or expired, and another holder has it now: the lock \
             is lost"
        ),
        Ok(Ok(Some(_))) => "lease not renewed in time (the key is still ours on the server, \
                            but its renewal was not confirmed): the lock is given up"
            .into(),
        Ok(Err(err)) => format!("lease not renewed: Redis answered {err}: the lock is lost"),
        Err(_) => format!(
            "lease not renewed: Redis did not answer within {:?} (unreachable): the lock is lost",
            loss::ASK_LIMIT
        ),
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::backend::DEFAULT_SESSION_TIMEOUT;

    #[derive(clap::Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        lock: LockArgs,
    }

    #[test]
    fn defaults() {
        let cli = Cli::try_parse_from(["lock", "/locks/nightly", "--", "./nightly.sh", "-v"])
            .expect("parse");
        assert_eq!(cli.lock.session_timeout, DEFAULT_SESSION_TIMEOUT);
        assert_eq!(cli.lock.kill_after, Duration::from_secs(5));
        assert_eq!(cli.lock.command, ["./nightly.sh", "-v"]);
        assert!(!cli.lock.try_lock && cli.lock.timeout.is_none());
    }

    #[test]
    fn contradictory_flags_are_refused() {
        for args in [
            &["lock", "--try", "--timeout", "1s", "/x"][..],
            &["lock", "--read", "--write", "/x"],
            &["lock", "--semaphore", "2", "--read", "/x"],
            &["lock", "--semaphore", "0", "/x"],
            &["lock", "--timeout", "soon", "/x"],
            &["lock"],
        ] {
            assert!(Cli::try_parse_from(args).is_err(), "{args:?} accepted");
        }
    }
}
