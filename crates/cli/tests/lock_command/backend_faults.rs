//! What the command answers when the backend itself misbehaves while it waits: a server killed
//! (SIGKILL) or frozen (SIGSTOP) by its PID. A `--timeout D` wait must end by D (plus a bounded
//! withdrawal and close), and an unreachable backend at the end is exit 69 naming the backend
//! and the cause, never 75 ("someone else has it"), which a cron wrapper reads as "skip".
//!
//! Durations are asserted only as loose upper bounds: generous enough for a loaded machine,
//! far below what an unbounded withdrawal takes (10 s and more).

use std::process::Child;
use std::time::{Duration, Instant};

use lockkeeper::redis::Redis;
use lockkeeper::zk::Session;
use lockkeeper_testkit::{ApacheZk, RedisServer, backend_enabled};

use crate::keeper_process::KeeperProcess;
use crate::support::{
    RUN_LIMIT, assert_code, describe, eventually, finish, hold, lock_command, runtime, signal,
    stderr,
};

/// The waiter's `--timeout`.
const TIMEOUT: Duration = Duration::from_secs(3);

/// How far past its `--timeout` the waiter may end: the withdrawal (about a second), closing
/// the connection (bounded by `--release-timeout`, 2 s) and a loaded machine's slack. The
/// unbounded code took 10 to 17 s from the start.
const MARGIN: Duration = Duration::from_secs(5);

/// Waits (generously) until a second participant queues on the ZooKeeper lock `path`.
fn zk_waiter_queued(connect: &str, path: &str) {
    let rt = runtime();
    let session = rt.block_on(Session::connect(connect)).expect("connect");
    let queued = eventually(Duration::from_secs(30), || {
        rt.block_on(session.inspect(path))
            .map(|inspection| inspection.participants.len() >= 2)
            .unwrap_or(false)
    });
    rt.block_on(session.close());
    assert!(queued, "the waiter never queued on {path}");
}

/// Waits (generously) until a waiter is in the line of the Redis lease lock `name`.
fn redis_waiter_queued(url: &str, name: &str) {
    let rt = runtime();
    let redis = rt.block_on(Redis::connect(url)).expect("connect");
    let line = format!("lockkeeper:lease:{{{name}}}:line");
    let queued = eventually(Duration::from_secs(30), || {
        rt.block_on(redis.command::<i64>(redis::cmd("EXISTS").arg(&line)))
            .map(|n| n == 1)
            .unwrap_or(false)
    });
    rt.block_on(redis.close());
    assert!(queued, "the waiter never joined the line of {name}");
}

/// Starts a holder of `name` and a `--timeout 3s` waiter behind it; `queued` waits until the
/// waiter is in line. Returns the holder, the waiter and when the waiter started.
fn holder_and_waiter(backend: &str, name: &str, queued: impl FnOnce()) -> (Child, Child, Instant) {
    let (holder, _) = hold(backend, &[name]);
    let started = Instant::now();
    let waiter = lock_command(backend, &["--timeout", "3s", name, "--", "true"])
        .spawn()
        .expect("start the waiter");
    queued();
    (holder, waiter, started)
}

/// The waiter ended within its timeout plus [`MARGIN`], with 69 naming the backend and why.
fn assert_unavailable_in_time(waiter: Child, started: Instant, backend: &str, label: &str) {
    let output = finish(waiter, RUN_LIMIT, label);
    let took = started.elapsed();
    eprintln!("{label}: exited after {took:?}: {}", stderr(&output).trim());
    assert_code(&output, 69, label);
    let text = stderr(&output);
    assert!(
        text.contains(backend) && text.contains("unreachable"),
        "{label}: the message names neither the backend nor the cause\n{}",
        describe(&output)
    );
    assert!(
        took < TIMEOUT + MARGIN,
        "{label}: took {took:?} with --timeout {TIMEOUT:?}\n{}",
        describe(&output)
    );
}

#[test]
fn a_timeout_ends_by_its_deadline_when_keeper_is_killed() {
    if !backend_enabled("keeper") {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let mut keeper = KeeperProcess::start(dir.path(), &[]);
    let backend = format!("zk://{}", keeper.connect_string());
    let (mut holder, waiter, started) = holder_and_waiter(&backend, "/locks/killed", || {
        zk_waiter_queued(&keeper.connect_string(), "/locks/killed");
    });
    keeper.kill9();
    assert_unavailable_in_time(waiter, started, &backend, "keeper killed");
    let _ = holder.kill();
    let _ = holder.wait();
}

#[test]
fn a_timeout_ends_by_its_deadline_when_zookeeper_is_frozen() {
    if !backend_enabled("zookeeper") {
        return;
    }
    let zk = ApacheZk::start();
    let backend = format!(
        "zk://{}",
        lockkeeper_testkit::TestServer::connect_string(&zk)
    );
    let connect = lockkeeper_testkit::TestServer::connect_string(&zk);
    let (mut holder, waiter, started) = holder_and_waiter(&backend, "/locks/frozen", || {
        zk_waiter_queued(&connect, "/locks/frozen");
    });
    signal(zk.pid(), libc::SIGSTOP);
    let result = std::panic::catch_unwind(|| {
        assert_unavailable_in_time(waiter, started, &backend, "zookeeper frozen");
    });
    signal(zk.pid(), libc::SIGCONT);
    let _ = holder.kill();
    let _ = holder.wait();
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

#[test]
fn a_timeout_ends_by_its_deadline_when_redis_is_frozen() {
    let redis = RedisServer::start();
    let backend = redis.url();
    let (mut holder, waiter, started) = holder_and_waiter(&backend, "frozen", || {
        redis_waiter_queued(&backend, "frozen");
    });
    signal(redis.pid(), libc::SIGSTOP);
    let result = std::panic::catch_unwind(|| {
        assert_unavailable_in_time(waiter, started, &backend, "redis frozen");
    });
    signal(redis.pid(), libc::SIGCONT);
    let _ = holder.kill();
    let _ = holder.wait();
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

/// A holder whose server freezes under its running command: the loss is seen within the
/// session timeout (or lease), named as a local deadline passed with the server unheard, and
/// the way out (release, close) is bounded by `--release-timeout` (2 s), after which the exit
/// says the release was not confirmed (`unconfirmed`: on Redis the lease may still be on the
/// server; a ZooKeeper guard past its deadline has nothing left to release). Before, the
/// release's retries and the Redis close's three response timeouts kept the process 15 to
/// 23 s.
fn exit_after_a_frozen_server(
    backend: &str,
    name: &str,
    session_timeout: Duration,
    pid: u32,
    unconfirmed: bool,
) {
    let dir = tempfile::tempdir().expect("tempdir");
    let timeout = format!("{}s", session_timeout.as_secs());
    let (holder, _child) = crate::support::holder_running(
        backend,
        name,
        dir.path(),
        &["--session-timeout", &timeout],
        r#"echo $$ > "$1/child.pid"; exec sleep 300"#,
    );
    signal(pid, libc::SIGSTOP);
    let stopped = Instant::now();
    let output = std::panic::catch_unwind(|| finish(holder, RUN_LIMIT, "the holder"));
    let took = stopped.elapsed();
    signal(pid, libc::SIGCONT);
    let output = output.unwrap_or_else(|panic| std::panic::resume_unwind(panic));
    eprintln!(
        "{backend}: exited {took:?} after SIGSTOP: {}",
        stderr(&output).trim()
    );
    assert_code(&output, 76, backend);
    let text = stderr(&output);
    assert!(
        text.contains("local deadline passed"),
        "{backend}: the cause is not named\n{}",
        describe(&output)
    );
    assert_eq!(
        text.contains("not confirmed"),
        unconfirmed,
        "{backend}: whether the release was confirmed\n{}",
        describe(&output)
    );
    assert!(
        !text.contains("paused for"),
        "{backend}: {}",
        describe(&output)
    );
    // The loss within the session timeout, 2 s for the way out, and a loaded machine's slack.
    let limit = session_timeout + Duration::from_secs(2) + Duration::from_secs(4);
    assert!(
        took < limit,
        "{backend}: exited {took:?} after SIGSTOP\n{}",
        describe(&output)
    );
}

#[test]
fn the_exit_after_a_frozen_zookeeper_is_bounded() {
    if !backend_enabled("zookeeper") {
        return;
    }
    let zk = ApacheZk::start();
    let backend = format!(
        "zk://{}",
        lockkeeper_testkit::TestServer::connect_string(&zk)
    );
    // 4 s: the shortest session the test server grants (two ticks of 2 s).
    exit_after_a_frozen_server(
        &backend,
        "/locks/hung",
        Duration::from_secs(4),
        zk.pid(),
        false,
    );
}

#[test]
fn the_exit_after_a_frozen_redis_is_bounded() {
    let redis = RedisServer::start();
    exit_after_a_frozen_server(
        &redis.url(),
        "hung",
        Duration::from_secs(2),
        redis.pid(),
        true,
    );
}
