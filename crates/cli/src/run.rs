//! Running a command as a supervised child: what `lockkeeper lock` and `lockkeeper elect` do
//! while they hold a lock or lead.
//!
//! [`supervise`] starts the command in a process group of its own, passes the signals an
//! operator sends (SIGINT, SIGTERM, SIGHUP) on to that whole group, and waits for one of two
//! endings: the child exits, or the `lost` future resolves (the lock is gone). On loss the
//! whole group is asked to stop with SIGTERM and, whatever is left of it after the grace
//! period, is killed with SIGKILL, so no process of the command keeps working on what the lock
//! protected once someone else may hold it.
//!
//! Invariants:
//! - the child is its own process group's leader (pgid = its pid), so a signal to `-pid`
//!   reaches it and everything it started that did not leave the group on purpose;
//! - after a loss, `supervise` returns only once the child has been reaped and its group is
//!   empty or has been sent SIGKILL;
//! - the child's exit status maps to one exit code: its own code, or 128 + N when signal N
//!   ended it, as shells report it.

mod child;
mod signals;
mod status;

use std::ffi::OsString;
use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::Failure;
use child::Group;

pub(crate) use signals::Signals;

/// How a supervised command ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The child ended on its own (perhaps after a forwarded signal): its exit code, 128 + N
    /// if signal N ended it.
    Exited(u8),
    /// `lost` resolved while the child ran, with this reason; its group was stopped.
    Stopped {
        reason: String,
        /// The child's own exit code, as for [`Outcome::Exited`].
        child: u8,
        /// Whether SIGKILL was needed: something in the group outlived SIGTERM by `kill_after`.
        killed: bool,
    },
}

/// Says on stderr why a stopped command was stopped, in the one form `lock` and `elect` share
/// (`lockkeeper COMMAND: NAME: REASON; the command was stopped, its exit code N`), so that an
/// operator reading either command's log sees a loss the same way.
pub(crate) fn report_stopped(command: &str, name: &str, reason: &str, child: u8, killed: bool) {
    let how = if killed {
        "killed (SIGKILL after --kill-after)"
    } else {
        "stopped"
    };
    eprintln!(
        "lockkeeper {command}: {name}: {reason}; the command was {how}, its exit code {child}"
    );
}

/// Runs `argv` with `env` added to this process's environment, in a new process group; see
/// the module docs. `lost` resolves with a one-line reason when the child must stop.
///
/// A command that cannot be started is a [`Failure`] with exit code 70 naming it and why.
pub(crate) async fn supervise(
    argv: &[OsString],
    env: &[(&str, String)],
    kill_after: Duration,
    lost: impl Future<Output = String>,
) -> Result<Outcome, Failure> {
    // Handlers first: a signal that arrives between the spawn and their registration would
    // otherwise end this process with its default action and leave the child running.
    let mut forwarded = Signals::new()?;
    let mut child = child::spawn(argv, env)?;
    let group = child.group();
    tokio::pin!(lost);
    let reason = loop {
        tokio::select! {
            status = child.wait() => return Ok(Outcome::Exited(status)),
            reason = &mut lost => break reason,
            sig = forwarded.recv() => group.signal(sig),
        }
    };
    let (child, killed) = stop(&mut child, &group, kill_after).await;
    Ok(Outcome::Stopped {
        reason,
        child,
        killed,
    })
}

/// SIGTERM (and SIGCONT, so that stopped members can act on it) to the group; SIGKILL to
/// whatever of it is left after `kill_after`. Gives the child's exit code and whether SIGKILL
/// was sent.
async fn stop(child: &mut child::Running, group: &Group, kill_after: Duration) -> (u8, bool) {
    let deadline = Instant::now() + kill_after;
    group.signal(libc::SIGTERM);
    group.signal(libc::SIGCONT);
    let exited = tokio::time::timeout_at(deadline, child.wait()).await.ok();
    // The leader is reaped: the group exists while any of its descendants still runs.
    while exited.is_some() && !group.is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    if exited.is_some() && group.is_empty() {
        return (exited.unwrap_or_default(), false);
    }
    group.signal(libc::SIGKILL);
    let code = match exited {
        Some(code) => code,
        None => child.wait().await,
    };
    (code, true)
}
