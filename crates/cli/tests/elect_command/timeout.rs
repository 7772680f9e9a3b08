//! `elect --timeout D` and `--try` as `lock` has them: the wait to lead ends by D (plus about
//! a second to withdraw and the bounded close), with 75 only when the server said someone else
//! leads, and 69 naming the backend when the server is gone at D (killed or frozen by its PID),
//! which a cron wrapper must not read as "someone else is on it". A waiter that gives up
//! leaves no node in the election.
//!
//! Durations are asserted only as loose upper bounds: generous for a loaded machine, far below
//! what an unbounded wait takes (forever, behind a leader that stays).

use std::panic::AssertUnwindSafe;
use std::time::{Duration, Instant};

use lockkeeper::zk::Session;
use lockkeeper_testkit::{ApacheZk, TestServer, backend_enabled, both};

use crate::keeper_process::KeeperProcess;
use crate::support::{Cli, LIMIT, assert_says, queued, runtime, signal, wait_for_participants};

/// The waiter's `--timeout`.
const TIMEOUT: Duration = Duration::from_secs(3);

/// How far past its `--timeout` the waiter may end: the withdrawal (about a second), closing
/// the session (bounded by `--release-timeout`, 2 s) and a loaded machine's slack.
const MARGIN: Duration = Duration::from_secs(5);

/// `lockkeeper elect` leading `path` on `backend` without a command, once it says it leads.
fn leader(backend: &str, path: &str) -> Cli {
    let leader = Cli::spawn(
        &["elect", "--backend", backend, "--id", "first", path],
        std::path::Path::new("/"),
    );
    let line = leader.line(LIMIT);
    assert!(line.starts_with("leader first token "), "{line}");
    leader
}

/// `lockkeeper elect --id second ARGS PATH -- true` on `backend`.
fn waiter(backend: &str, args: &[&str], path: &str) -> Cli {
    let mut all = vec!["elect", "--backend", backend, "--id", "second"];
    all.extend(args);
    all.extend([path, "--", "true"]);
    Cli::spawn(&all, std::path::Path::new("/"))
}

#[test]
fn a_timeout_or_try_behind_a_leader_is_75_and_leaves_no_node() {
    let rt = runtime();
    for server in both() {
        let name = server.name();
        let backend = format!("zk://{}", server.connect_string());
        let path = "/elect/timeout";
        let mut first = leader(&backend, path);

        let started = Instant::now();
        let mut timed = waiter(&backend, &["--timeout", "3s"], path);
        let code = timed.exit_code(LIMIT);
        let took = started.elapsed();
        let text = timed.stderr();
        assert_eq!(code, Some(75), "{name}: --timeout behind a leader\n{text}");
        assert_says(
            name,
            &text,
            &[&backend, "not leading within 3s: someone else leads"],
            &[],
        );
        assert!(took >= TIMEOUT, "{name}: gave up after {took:?}\n{text}");
        assert!(took < TIMEOUT + MARGIN, "{name}: took {took:?}\n{text}");

        let mut tried = waiter(&backend, &["--try"], path);
        let code = tried.exit_code(LIMIT);
        let text = tried.stderr();
        assert_eq!(code, Some(75), "{name}: --try behind a leader\n{text}");
        assert_says(name, &text, &["someone else leads"], &["within"]);

        // Neither waiter left a node behind: the leader's is the only one.
        let session = rt
            .block_on(Session::connect(&server.connect_string()))
            .expect("connect");
        assert_eq!(
            queued(&rt, &session, path),
            1,
            "{name}: waiters' nodes left"
        );
        rt.block_on(session.close());

        // Once nobody leads, --try leads and runs the command (`true`: exit 0).
        first.signal(libc::SIGTERM);
        assert_eq!(
            first.exit_code(LIMIT),
            Some(0),
            "{name}: the leader resigns"
        );
        let mut free = waiter(&backend, &["--try"], path);
        let code = free.exit_code(LIMIT);
        assert_eq!(
            code,
            Some(0),
            "{name}: --try with nobody leading\n{}",
            free.stderr()
        );
    }
}

/// The waiter ended within its timeout plus [`MARGIN`] of `started`, with 69 naming the
/// backend and the cause.
fn assert_unavailable_in_time(mut waiter: Cli, started: Instant, backend: &str, label: &str) {
    let code = waiter.exit_code(LIMIT);
    let took = started.elapsed();
    let text = waiter.stderr();
    eprintln!("{label}: exited {code:?} after {took:?}");
    assert_eq!(
        code,
        Some(69),
        "{label}: the backend is gone at --timeout\n{text}"
    );
    assert_says(
        label,
        &text,
        &[backend, "unreachable"],
        &["someone else leads"],
    );
    assert!(took < TIMEOUT + MARGIN, "{label}: took {took:?}\n{text}");
}

/// A leader at `path` and a `--timeout 3s` waiter queued behind it; when the waiter started.
fn leader_and_waiter(backend: &str, connect: &str, path: &str) -> (Cli, Cli, Instant) {
    let first = leader(backend, path);
    let started = Instant::now();
    let second = waiter(backend, &["--timeout", "3s"], path);
    wait_for_participants(connect, path, 2);
    (first, second, started)
}

#[test]
fn a_timeout_is_69_by_its_deadline_when_keeper_is_killed() {
    if !backend_enabled("keeper") {
        return;
    }
    let dir = tempfile::tempdir().expect("data dir");
    let mut keeper = KeeperProcess::start(dir.path(), &[]);
    let backend = format!("zk://{}", keeper.connect_string());
    let (_first, second, started) =
        leader_and_waiter(&backend, &keeper.connect_string(), "/elect/killed");
    keeper.kill9();
    assert_unavailable_in_time(second, started, &backend, "keeper killed");
}

#[test]
fn a_timeout_is_69_by_its_deadline_when_zookeeper_is_frozen() {
    if !backend_enabled("zookeeper") {
        return;
    }
    let zk = ApacheZk::start();
    let backend = format!("zk://{}", zk.connect_string());
    let (_first, second, started) =
        leader_and_waiter(&backend, &zk.connect_string(), "/elect/frozen-wait");
    signal(zk.pid(), libc::SIGSTOP);
    let result = std::panic::catch_unwind(AssertUnwindSafe(|| {
        assert_unavailable_in_time(second, started, &backend, "zookeeper frozen");
    }));
    signal(zk.pid(), libc::SIGCONT);
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}
