//! What the command says, where a vaguer sentence misled: a hung Redis is not "not a Redis
//! server"; a `--session-timeout` the server raised is said once, with the value in force; a
//! holder's node names its host and pid; a full semaphore says its leases are all taken.

use lockkeeper::zk::Session;
use lockkeeper_testkit::{RedisServer, both};

use crate::support::{
    RUN_LIMIT, assert_code, assert_said, describe, hold, run_expecting, run_lock, runtime, signal,
    stderr, stop, zk_url,
};

#[test]
fn a_hung_redis_is_said_to_give_no_answer_to_ping() {
    let redis = RedisServer::start();
    signal(redis.pid(), libc::SIGSTOP);
    let output = std::panic::catch_unwind(|| {
        run_lock(
            &redis.url(),
            &["--connect-timeout", "1s", "hung", "--", "true"],
            RUN_LIMIT,
        )
    });
    signal(redis.pid(), libc::SIGCONT);
    let output = output.unwrap_or_else(|panic| std::panic::resume_unwind(panic));
    assert_code(&output, 69, "a hung redis");
    assert_said(&output, "no answer to PING within 1s");
    assert!(
        !stderr(&output).contains("not a Redis server"),
        "{}",
        describe(&output)
    );
}

#[test]
fn a_session_timeout_the_server_raises_is_said_once_with_the_value_used() {
    for server in both() {
        // Both test servers tick every 2 s: the shortest session they grant is 4 s.
        let output = run_expecting(
            &zk_url(&*server),
            &["--session-timeout", "1s", "/locks/short", "--", "true"],
            0,
            server.name(),
        );
        let text = stderr(&output);
        assert_eq!(
            text.matches("--session-timeout 1s").count(),
            1,
            "{}: {text}",
            server.name()
        );
        assert!(text.contains("granted 4s"), "{}: {text}", server.name());
    }
}

#[test]
fn a_holder_node_names_its_host_and_pid() {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .expect("hostname")
        .trim()
        .to_owned();
    let rt = runtime();
    for server in both() {
        let (holder, _) = hold(&zk_url(&*server), &["/locks/whose"]);
        let session = rt
            .block_on(Session::connect(&server.connect_string()))
            .expect("connect");
        let inspection = rt
            .block_on(session.inspect("/locks/whose"))
            .expect("inspect");
        let data: Vec<_> = inspection.holders().map(|p| p.data.clone()).collect();
        assert_eq!(
            data,
            [format!("lockkeeper {host}:{}", holder.id())],
            "{}",
            server.name()
        );
        rt.block_on(session.close());
        assert_code(&stop(holder, libc::SIGTERM, "the holder"), 0, server.name());
    }
}

/// `--try` and `--timeout` on a semaphore whose leases are all held say so, not "held by
/// someone else" (which reads as one holder).
fn full_semaphore(backend: &str, name: &str) {
    let (holder, _) = hold(backend, &["--semaphore", "1", name]);
    let tried = run_expecting(
        backend,
        &["--try", "--semaphore", "1", name, "--", "true"],
        75,
        backend,
    );
    assert_said(&tried, "all 1 leases are taken");
    let waited = run_expecting(
        backend,
        &["--timeout", "500ms", "--semaphore", "1", name, "--", "true"],
        75,
        backend,
    );
    assert_said(&waited, "not acquired within 500ms: all 1 leases are taken");
    assert_code(&stop(holder, libc::SIGTERM, "the holder"), 0, backend);
}

#[test]
fn a_full_semaphore_says_its_leases_are_taken() {
    for server in both() {
        full_semaphore(&zk_url(&*server), "/semaphores/full");
    }
    let redis = RedisServer::start();
    full_semaphore(&redis.url(), "full");
}
