//! The other lock kinds and backends: `--semaphore N` and `--read`/`--write` admit and turn
//! away as their recipes do; Sentinel and Cluster URLs run the command with the lock's
//! environment (name, fencing token, backend as given).

use lockkeeper_testkit::{RedisCluster, RedisSentinel, RedisServer, both};

use crate::support::{
    RUN_LIMIT, assert_code, hold, printed_token, run_expecting, run_lock, stop, zk_url,
};

/// `--semaphore 2` admits two holders and turns the third away; `--read` admits readers
/// together and turns a writer away.
fn shared_kinds(backend: &str, semaphore: &str, rw: &str) {
    let (first, _) = hold(backend, &["--semaphore", "2", semaphore]);
    let (second, _) = hold(backend, &["--semaphore", "2", semaphore]);
    run_expecting(
        backend,
        &["--try", "--semaphore", "2", semaphore, "--", "true"],
        75,
        backend,
    );
    for holder in [first, second] {
        let output = stop(holder, libc::SIGINT, "a lease holder");
        assert_code(&output, 0, backend);
    }
    let (reader, _) = hold(backend, &["--read", rw]);
    run_expecting(backend, &["--try", "--read", rw, "--", "true"], 0, backend);
    run_expecting(
        backend,
        &["--try", "--write", rw, "--", "true"],
        75,
        backend,
    );
    let output = stop(reader, libc::SIGTERM, "the reader");
    assert_code(&output, 0, backend);
    run_expecting(backend, &["--try", "--write", rw, "--", "true"], 0, backend);
}

#[test]
fn semaphores_and_read_write_locks_on_zookeeper_and_keeper() {
    for server in both() {
        shared_kinds(&zk_url(&*server), "/semaphores/s", "/locks/rw");
    }
}

#[test]
fn semaphores_and_read_write_locks_on_redis() {
    let redis = RedisServer::start();
    shared_kinds(&redis.url(), "s", "rw");
}

/// `host:port` of each `redis://host:port/` URL, for a multi-host backend URL.
fn hosts(urls: &[String]) -> String {
    urls.iter()
        .map(|url| url.trim_start_matches("redis://").trim_end_matches('/'))
        .collect::<Vec<_>>()
        .join(",")
}

#[test]
fn a_sentinel_backend_runs_the_command() {
    let set = RedisSentinel::start(1);
    let backend = format!(
        "redis+sentinel://{}/{}",
        hosts(&set.sentinel_urls()),
        set.master_name()
    );
    let script = "echo $LOCKKEEPER_LOCK $LOCKKEEPER_FENCING_TOKEN $LOCKKEEPER_BACKEND";
    let output = run_expecting(&backend, &["nightly", "--", "sh", "-c", script], 0, "");
    let printed = String::from_utf8_lossy(&output.stdout).trim().to_string();
    let words: Vec<&str> = printed.split(' ').collect();
    assert_eq!(words.len(), 3, "{printed:?}");
    assert_eq!(words[0], "nightly");
    assert!(words[1].parse::<u64>().is_ok_and(|t| t > 0), "{printed:?}");
    assert_eq!(words[2], backend);
}

#[test]
fn a_cluster_backend_runs_the_command() {
    let cluster = RedisCluster::start();
    let backend = format!("redis+cluster://{}", hosts(&cluster.urls()));
    let script = "echo $LOCKKEEPER_FENCING_TOKEN";
    let first = run_lock(&backend, &["nightly", "--", "sh", "-c", script], RUN_LIMIT);
    assert_code(&first, 0, "");
    let (holder, token) = hold(&backend, &["nightly"]);
    run_expecting(&backend, &["--try", "nightly", "--", "true"], 75, "");
    let output = stop(holder, libc::SIGINT, "the holder");
    assert_code(&output, 0, "");
    let before = printed_token(&first);
    assert!(token > before, "token {token} after {before}");
}
