//! The exit codes scripts match on: the command's own (7, 128 + N), 70 for a command that
//! cannot start, 75 for a lock not acquired (`--try`, `--timeout`), 130 for a wait interrupted
//! by SIGINT, 64 for a usage error (flags, URLs, paths), 69 for a backend that does not answer;
//! and hold-without-command, which prints the fencing token and holds until signalled.

use std::time::{Duration, Instant};

use lockkeeper_testkit::{RedisServer, both};

use crate::support::{
    RUN_LIMIT, assert_code, assert_said, hold, lock_command, printed_token, run_expecting,
    run_lock, stderr, stop, zk_url,
};

/// Exit codes and hold-without-command on one backend.
fn exit_codes(backend: &str, name: &str) {
    run_expecting(backend, &[name, "--", "sh", "-c", "exit 7"], 7, backend);
    run_expecting(
        backend,
        &[name, "--", "sh", "-c", "kill -9 $$"],
        137,
        backend,
    );
    let missing = run_expecting(backend, &[name, "--", "/nonexistent/command"], 70, backend);
    assert_said(&missing, "/nonexistent/command");

    let (holder, token) = hold(backend, &[name]);
    assert!(token > 0, "{backend}: token {token}");
    run_expecting(backend, &["--try", name, "--", "true"], 75, backend);
    let started = Instant::now();
    let timed = run_expecting(
        backend,
        &["--timeout", "700ms", name, "--", "true"],
        75,
        backend,
    );
    assert!(started.elapsed() >= Duration::from_millis(700), "{backend}");
    assert_said(&timed, "not acquired within");
    // A zero timeout is a try, not a usage error.
    run_expecting(
        backend,
        &["--timeout", "0s", name, "--", "true"],
        75,
        backend,
    );
    // A waiter interrupted while queued exits 128 + 2 and leaves no place behind: the `--try`
    // after the release below would find it ahead in the queue.
    let waiter = lock_command(backend, &[name, "--", "true"])
        .spawn()
        .expect("start a waiter");
    std::thread::sleep(Duration::from_secs(1));
    let interrupted = stop(waiter, libc::SIGINT, "the interrupted waiter");
    assert_code(&interrupted, 130, backend);
    assert_said(&interrupted, "interrupted while waiting");
    let held = stop(holder, libc::SIGTERM, "the holder");
    assert_code(&held, 0, backend);
    let after = run_expecting(
        backend,
        &[
            "--try",
            name,
            "--",
            "sh",
            "-c",
            "echo $LOCKKEEPER_FENCING_TOKEN",
        ],
        0,
        &format!("{backend}: not released"),
    );
    let next = printed_token(&after);
    assert!(next > token, "{backend}: token {next} after {token}");
}

#[test]
fn exit_codes_on_zookeeper_and_keeper() {
    for server in both() {
        exit_codes(&zk_url(&*server), "/locks/codes");
    }
}

#[test]
fn exit_codes_on_redis() {
    let redis = RedisServer::start();
    exit_codes(&redis.url(), "codes");
}

#[test]
fn usage_errors_exit_64_and_an_unreachable_backend_69() {
    let limit = Duration::from_secs(20);
    let bad_flag = run_lock("zk://127.0.0.1:1", &["--no-such-flag", "/x"], limit);
    assert_code(&bad_flag, 64, "");
    for (url, says) in [
        ("zk://127.0.0.1:notaport", "not a port number"),
        ("127.0.0.1:2181", "no scheme"),
        ("http://127.0.0.1:80", "unknown scheme"),
        ("redis+sentinel://127.0.0.1:1", "master's name"),
    ] {
        let output = run_lock(url, &["/x", "--", "true"], limit);
        assert_code(&output, 64, url);
        let text = stderr(&output);
        assert!(text.contains(says) && text.contains(url), "{url}: {text}");
        assert_eq!(
            text.trim().lines().count(),
            1,
            "{url}: not one line: {text}"
        );
    }
    let no_leases = run_lock("zk://127.0.0.1:1", &["--semaphore", "0", "/x"], limit);
    assert_code(&no_leases, 64, "");

    let port = lockkeeper_testkit::free_port();
    for url in [
        format!("zk://127.0.0.1:{port}"),
        format!("redis://127.0.0.1:{port}"),
    ] {
        let started = Instant::now();
        let output = run_lock(
            &url,
            &["--connect-timeout", "1s", "/x", "--", "true"],
            limit,
        );
        let took = started.elapsed();
        assert_code(&output, 69, &url);
        assert_said(&output, &format!("127.0.0.1:{port}"));
        assert!(took < Duration::from_secs(4), "{url}: took {took:?}");
    }
}

#[test]
fn a_bad_lock_path_is_a_usage_error() {
    for server in both() {
        let output = run_lock(
            &zk_url(&*server),
            &["locks/relative", "--", "true"],
            RUN_LIMIT,
        );
        assert_code(&output, 64, server.name());
        assert_said(&output, "locks/relative");
    }
}
