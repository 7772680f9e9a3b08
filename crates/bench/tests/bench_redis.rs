//! `lockkeeper-bench --redis` in a tiny configuration, so that the benchmark keeps working:
//! both clients produce figures, the JSON has every section, and nothing is left in a Redis
//! the benchmark was pointed at. Speed is not asserted (the machine is shared).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use lockkeeper_testkit::RedisServer;

const LOCKKEEPER_BENCH: &str = env!("CARGO_BIN_EXE_lockkeeper-bench");

/// The number after the last of `path`'s keys, each searched for after the one before.
fn number_at(json: &str, path: &[&str]) -> f64 {
    let mut at = 0;
    for key in path {
        let quoted = format!("\"{key}\":");
        at += json[at..]
            .find(&quoted)
            .unwrap_or_else(|| panic!("no {quoted} after byte {at} in:\n{json}"))
            + quoted.len();
    }
    let rest = json[at..].trim_start();
    let end = rest.find([',', '\n', '}']).unwrap_or(rest.len());
    rest[..end]
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("{path:?} is not a number: {:?}", &rest[..end]))
}

fn dbsize(redis: &RedisServer) -> String {
    let mut stream =
        TcpStream::connect_timeout(&redis.addr(), Duration::from_secs(10)).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    stream.write_all(b"DBSIZE\r\n").expect("send");
    let mut reply = [0u8; 32];
    let n = stream.read(&mut reply).expect("reply");
    String::from_utf8_lossy(&reply[..n]).into_owned()
}

fn bench(extra: &[&str]) -> std::process::Output {
    Command::new(LOCKKEEPER_BENCH)
        .args([
            "--redis",
            "--duration",
            "300ms",
            "--warmup",
            "0s",
            "--max-ops",
            "40",
            "--redis-clients",
            "3",
            "--no-progress",
        ])
        .args(extra)
        .output()
        .expect("run lockkeeper-bench")
}

#[test]
fn a_tiny_run_measures_both_clients_and_cleans_up() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let json_path = dir.path().join("redis.json");
    let output = bench(&[
        "--redis-url",
        &redis.url(),
        "--json",
        json_path.to_str().expect("utf-8 path"),
    ]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "bench failed ({}):\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("redis-py"), "{stdout}");
    assert!(stdout.contains("targets:"), "{stdout}");

    let json = std::fs::read_to_string(&json_path).expect("the JSON was written");
    for path in [
        &["lockkeeper", "uncontended_lock", "cycles"][..],
        &["lockkeeper", "uncontended_try_lock", "cycles"],
        &["lockkeeper", "contended", "acquisitions"],
        &["redis_py", "uncontended", "cycles"],
        &["redis_py", "contended", "acquisitions"],
    ] {
        let value = number_at(&json, path);
        assert!(value >= 1.0, "{path:?} = {value}");
        assert!(
            value <= 40.0,
            "{path:?} = {value}: --max-ops 40 not honoured"
        );
    }
    assert!(number_at(&json, &["ratios", "uncontended_cycles"]) > 0.0);
    // Only its own keys were written, and all of them (fencing counters too) removed.
    assert_eq!(dbsize(&redis), ":0\r\n");
}

#[test]
fn a_missing_python_is_reported_clearly() {
    let redis = RedisServer::start();
    let output = bench(&[
        "--redis-url",
        &redis.url(),
        "--python",
        "/nonexistent/python3",
    ]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("/nonexistent/python3"), "{stderr}");
    assert_eq!(
        dbsize(&redis),
        ":0\r\n",
        "keys left behind after a failed run"
    );
}
