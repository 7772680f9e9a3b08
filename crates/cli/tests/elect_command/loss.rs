//! A leader whose server freezes under its running command (SIGSTOP by the server's PID): the
//! term ends once the connection is suspended (the server unanswered), or at the latest when
//! the server has gone unheard for the session timeout; the command is stopped, and `--once`
//! exits 76 with a message naming that cause (not a pause of its own, not a deletion), in
//! bounded time.
//!
//! Durations are asserted only as loose upper bounds.

use std::panic::AssertUnwindSafe;
use std::time::{Duration, Instant};

use lockkeeper_testkit::{ApacheZk, TestServer, backend_enabled};

use crate::keeper_process::KeeperProcess;
use crate::support::{Cli, LIMIT, assert_says, read, signal, wait_until};

/// The leader's `--session-timeout`: the shortest both test servers grant (two 2 s ticks).
const SESSION: Duration = Duration::from_secs(4);

/// Leads at `path` on `backend` with a command, freezes the server (`pid`), and checks how the
/// leader ends.
fn a_frozen_server_ends_the_term(backend: &str, pid: u32, label: &str) {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut leader = Cli::spawn(
        &[
            "elect",
            "--backend",
            backend,
            "--once",
            "--id",
            "frozen",
            "--session-timeout",
            "4s",
            "--kill-after",
            "1s",
            "/elect/frozen",
            "--",
            "sh",
            "-c",
            r#"echo $$ > "$MARKERS/child.pid"; exec sleep 300"#,
        ],
        dir.path(),
    );
    wait_until(&format!("{label}: the leader's command runs"), || {
        !read(&dir.path().join("child.pid")).trim().is_empty()
    });
    signal(pid, libc::SIGSTOP);
    let stopped = Instant::now();
    let code = std::panic::catch_unwind(AssertUnwindSafe(|| leader.exit_code(LIMIT)));
    let took = stopped.elapsed();
    signal(pid, libc::SIGCONT);
    let code = code.unwrap_or_else(|panic| std::panic::resume_unwind(panic));
    let text = leader.stderr();
    eprintln!("{label}: exited {code:?} {took:?} after SIGSTOP");
    assert_eq!(code, Some(76), "{label}: --once after the loss\n{text}");
    // The term ends at the suspension (the server unanswered) or, on a slow machine, at the
    // local deadline (unheard for the session timeout): either names the server as the cause.
    assert!(
        text.contains("server did not answer") || text.contains("server was not heard from"),
        "{label}: the server is not named as the cause\n{text}"
    );
    assert_says(
        label,
        &text,
        &["leadership lost"],
        &["paused for", "deleted"],
    );
    // The session timeout, the command's stop (1 s at most), resigning and closing (2 s each
    // at most, --release-timeout) and a loaded machine's slack.
    let bound = SESSION + Duration::from_secs(1 + 2 + 2) + Duration::from_secs(8);
    assert!(
        took < bound,
        "{label}: exited {took:?} after SIGSTOP\n{text}"
    );
}

#[test]
fn a_leader_whose_keeper_freezes_exits_76_naming_the_server_unheard() {
    if !backend_enabled("keeper") {
        return;
    }
    let dir = tempfile::tempdir().expect("data dir");
    let keeper = KeeperProcess::start(dir.path(), &[]);
    let backend = format!("zk://{}", keeper.connect_string());
    a_frozen_server_ends_the_term(&backend, keeper.pid(), "keeper frozen");
}

#[test]
fn a_leader_whose_zookeeper_freezes_exits_76_naming_the_server_unheard() {
    if !backend_enabled("zookeeper") {
        return;
    }
    let zk = ApacheZk::start();
    let backend = format!("zk://{}", zk.connect_string());
    a_frozen_server_ends_the_term(&backend, zk.pid(), "zookeeper frozen");
}
