//! Mutual exclusion between real processes: concurrent `lockkeeper lock` runs and Curator
//! `InterProcessMutex` holders around one O_EXCL marker file, and fencing tokens that grow
//! strictly in the order the lock was held.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use lockkeeper_testkit::{LinePeer, RedisServer, both, compile_java, curator_classpath, java};

use crate::support::{RUN_LIMIT, code, describe, run_lock, zk_url};

/// The shell command every contender runs under the lock: create the marker exclusively
/// (failing means another holder is inside: exit 99), append the fencing token, hold briefly,
/// remove the marker.
pub(crate) const CRITICAL_SECTION: &str = r#"if (set -C; : > "$1") 2>/dev/null; then
    echo "$LOCKKEEPER_FENCING_TOKEN" >> "$2"; sleep 0.02; rm -f "$1"
else exit 99; fi"#;

/// `processes` threads each running `lockkeeper lock NAME -- sh -c CRITICAL_SECTION` `rounds`
/// times: how many runs found another holder inside. Every run must end 0 or 99.
pub(crate) fn contend(
    backend: &str,
    name: &str,
    dir: &Path,
    processes: usize,
    rounds: usize,
) -> usize {
    let marker = dir.join("marker");
    let tokens = dir.join("tokens");
    let threads: Vec<_> = (0..processes)
        .map(|_| {
            let (backend, name) = (backend.to_string(), name.to_string());
            let (marker, tokens) = (marker.clone(), tokens.clone());
            std::thread::spawn(move || {
                let mut overlaps = 0;
                for _ in 0..rounds {
                    let args = [
                        "--timeout",
                        "50s",
                        &name,
                        "--",
                        "sh",
                        "-c",
                        CRITICAL_SECTION,
                        "sh",
                        marker.to_str().expect("utf-8 path"),
                        tokens.to_str().expect("utf-8 path"),
                    ];
                    let output = run_lock(&backend, &args, RUN_LIMIT);
                    match code(&output) {
                        0 => {}
                        99 => overlaps += 1,
                        _ => panic!("a contender failed\n{}", describe(&output)),
                    }
                }
                overlaps
            })
        })
        .collect();
    threads
        .into_iter()
        .map(|t| t.join().expect("contender thread"))
        .sum()
}

/// The tokens the contenders appended, in the order they held the lock.
pub(crate) fn tokens_in_order(dir: &Path) -> Vec<u64> {
    std::fs::read_to_string(dir.join("tokens"))
        .unwrap_or_default()
        .lines()
        .map(|line| line.parse().expect("a numeric fencing token"))
        .collect()
}

pub(crate) fn assert_strictly_increasing(tokens: &[u64], label: &str) {
    for pair in tokens.windows(2) {
        assert!(
            pair[0] < pair[1],
            "{label}: tokens not strictly increasing: {tokens:?}"
        );
    }
}

#[test]
fn six_processes_never_overlap_on_zookeeper_and_keeper() {
    for server in both() {
        let dir = tempfile::tempdir().expect("tempdir");
        let started = Instant::now();
        let overlaps = contend(&zk_url(&*server), "/locks/nightly", dir.path(), 6, 5);
        assert_eq!(overlaps, 0, "{}", server.name());
        let tokens = tokens_in_order(dir.path());
        assert_eq!(tokens.len(), 30, "{}", server.name());
        assert_strictly_increasing(&tokens, server.name());
        eprintln!(
            "{}: 30 runs of 6 processes in {:?}",
            server.name(),
            started.elapsed()
        );
    }
}

#[test]
fn six_processes_never_overlap_on_redis() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let started = Instant::now();
    let overlaps = contend(&redis.url(), "nightly", dir.path(), 6, 5);
    assert_eq!(overlaps, 0);
    let tokens = tokens_in_order(dir.path());
    assert_eq!(tokens.len(), 30);
    assert_strictly_increasing(&tokens, "redis");
    eprintln!("redis: 30 runs of 6 processes in {:?}", started.elapsed());
}

/// The Java programs in `tests/curator/`, compiled once per test process.
fn classes_dir() -> &'static Path {
    static CLASSES: OnceLock<PathBuf> = OnceLock::new();
    CLASSES.get_or_init(|| {
        compile_java(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/curator"),
            Path::new(env!("CARGO_TARGET_TMPDIR")),
            "cli-curator",
        )
    })
}

/// A Curator `InterProcessMutex` holder (`tests/curator/MutexHolder.java`), killed on drop:
/// says `READY`, takes the lock `rounds` times on `go`, then says `DONE ROUNDS OVERLAPS`.
fn curator_holder(connect: &str, path: &str, rounds: usize, marker: &Path) -> LinePeer {
    let classpath = format!("{}:{}", classes_dir().display(), curator_classpath());
    LinePeer::spawn(
        Command::new(java())
            .args(["-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"])
            .arg("-cp")
            .arg(classpath)
            .arg("MutexHolder")
            .args([connect, path, &rounds.to_string()])
            .arg(marker),
        "Curator holder",
    )
}

#[test]
fn curator_mutex_holders_and_lockkeeper_exclude_each_other() {
    for server in both() {
        let dir = tempfile::tempdir().expect("tempdir");
        let marker = dir.path().join("marker");
        let mut curators: Vec<LinePeer> = (0..2)
            .map(|_| curator_holder(&server.connect_string(), "/locks/mixed", 10, &marker))
            .collect();
        for curator in &mut curators {
            curator.expect("READY", Duration::from_secs(60));
        }
        for curator in &mut curators {
            curator.send("go");
        }
        let overlaps = contend(&zk_url(&*server), "/locks/mixed", dir.path(), 4, 5);
        assert_eq!(
            overlaps,
            0,
            "{}: lockkeeper saw a holder inside",
            server.name()
        );
        for curator in &mut curators {
            let done = curator.expect("DONE", Duration::from_secs(90));
            assert_eq!(
                done,
                "DONE 10 0",
                "{}: Curator saw a holder inside",
                server.name()
            );
        }
        assert_eq!(tokens_in_order(dir.path()).len(), 20, "{}", server.name());
    }
}
