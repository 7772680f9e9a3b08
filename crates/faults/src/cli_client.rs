//! The `cli-elect` client: the `lockkeeper elect` command as a service runs it, its leader's
//! work a child process that writes to the resource with the term's fencing token.
//!
//! The client process (this binary's `client --kind cli-elect`) runs `lockkeeper elect
//! --backend URL --id NAME --session-timeout 4s PATH -- <this binary> term ...` again and
//! again until `--run-for` passes. While it leads, `elect` runs the `term` subcommand with
//! `LOCKKEEPER_FENCING_TOKEN` and `LOCKKEEPER_LEADER_NODE` in its environment; `term` enters
//! the resource with that token (and node, for the ZooKeeper fence), makes its writes with seeded small sleeps, exits and ends, which ends `elect`'s
//! term (it resigns) and the loop starts the next candidacy. When leadership is lost, `elect`
//! stops `term`'s process group itself. The orchestrator pauses or kills the client's whole
//! process tree (`elect` and `term` with it), so a paused leader wakes as a real one would:
//! its writer may write once more before `elect` notices the loss and stops it.
//!
//! `term` cannot ask whether it still leads (the command has only its token), so each of its
//! lines says `held`: what the command believes.
//!
//! Invariants: the `lockkeeper` binary is the one beside this one (the orchestrator skips the
//! rows when it is missing); every child dies with its parent (`die_with_parent`); every wait
//! is bounded by `--run-for`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::time::Instant;

use crate::client::{ClientArgs, ResourceConn, WRITES, ZK_SESSION};
use crate::kind::Endpoint;

/// The `lockkeeper` binary the clients run: beside this one (`cargo build -p lockkeeper-cli`
/// puts it there), if it is there.
pub(crate) fn lockkeeper_binary() -> Option<PathBuf> {
    let path = std::env::current_exe().ok()?.with_file_name("lockkeeper");
    path.is_file().then_some(path)
}

/// Runs `lockkeeper elect` candidacies one after another until `args.run_for` passes.
pub(crate) async fn run(args: ClientArgs) -> Result<(), String> {
    let lockkeeper = lockkeeper_binary().ok_or("no `lockkeeper` binary beside this one")?;
    let exe = std::env::current_exe().map_err(|e| format!("this binary: {e}"))?;
    let backend = match &args.endpoint {
        Endpoint::Zk(hosts) => format!("zk://{hosts}"),
        other => return Err(format!("cli-elect runs on ZooKeeper, not {other:?}")),
    };
    let deadline = Instant::now() + args.run_for;
    let mut term = 0u64;
    while Instant::now() < deadline {
        term += 1;
        let mut command = tokio::process::Command::new(&lockkeeper);
        command
            .arg("elect")
            .arg("--backend")
            .arg(&backend)
            .arg("--id")
            .arg(&args.name)
            .arg("--session-timeout")
            .arg(format!("{}s", ZK_SESSION.as_secs()))
            .arg(&args.lock)
            .arg("--")
            .arg(&exe)
            .arg("term")
            .arg("--resource")
            .arg(args.resource.to_string())
            .arg("--name")
            .arg(&args.name)
            .arg("--seed")
            .arg(args.seed.wrapping_add(term).to_string())
            .stdin(Stdio::null())
            .kill_on_drop(true);
        lockkeeper_testkit::die_with_parent(command.as_std_mut());
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, command.status()).await {
            Ok(Ok(status)) if !status.success() => {
                eprintln!("{}: lockkeeper elect: {status}", args.name);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Ok(Ok(_)) => {}
            Ok(Err(err)) => return Err(format!("run {}: {err}", lockkeeper.display())),
            Err(_) => break,
        }
    }
    Ok(())
}

/// One leader's work, run by `lockkeeper elect`: enter the resource with the term's token,
/// write [`WRITES`] times, exit. A refused write ends it early (a newer leader wrote).
pub(crate) async fn term(resource: SocketAddr, name: &str, seed: u64) -> Result<(), String> {
    let token = std::env::var("LOCKKEEPER_FENCING_TOKEN")
        .map_err(|_| "no LOCKKEEPER_FENCING_TOKEN: run by `lockkeeper elect`".to_owned())?;
    token
        .parse::<u64>()
        .map_err(|_| format!("LOCKKEEPER_FENCING_TOKEN {token:?} is not a number"))?;
    // The latch node, for the ZooKeeper fence's check that the writer still has it.
    let node = std::env::var("LOCKKEEPER_LEADER_NODE").unwrap_or_else(|_| "-".to_owned());
    let mut rng = StdRng::seed_from_u64(seed);
    let mut resource = ResourceConn::connect(resource).await?;
    let line = |verb: &str| format!("{verb} {name} {token} {node} held");
    if resource.call(&line("enter")).await? == "ok" {
        for _ in 0..WRITES {
            // A pause anywhere here wakes into the next write with the token it had.
            tokio::time::sleep(Duration::from_millis(rng.gen_range(20..150))).await;
            if resource.call(&line("write")).await? != "ok" {
                break;
            }
        }
    }
    resource.call(&format!("exit {name}")).await?;
    Ok(())
}
