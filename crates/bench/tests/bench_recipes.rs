//! `lockkeeper-bench --recipes` in a tiny configuration, so that the benchmark keeps working: it
//! starts Keeper and Apache ZooKeeper, runs Curator's side in JVMs, takes every figure on all
//! four client/server combinations (counter values checked, every queue item consumed exactly
//! once), kills an election leader's
//! process on each side, writes the JSON, and leaves no process behind. Speed is not asserted
//! (the machine is shared).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const LOCKKEEPER_BENCH: &str = env!("CARGO_BIN_EXE_lockkeeper-bench");

/// Every number stored under `key` in `json`, in order; a spread (`{ "median": .. }`, in the
/// `medians` rows) under the same key is left out.
fn numbers(json: &str, key: &str) -> Vec<f64> {
    let quoted = format!("\"{key}\":");
    json.match_indices(&quoted)
        .map(|(at, _)| json[at + quoted.len()..].trim_start())
        .filter(|rest| !rest.starts_with('{'))
        .map(|rest| {
            let end = rest.find([',', '\n', '}']).unwrap_or(rest.len());
            rest[..end]
                .trim()
                .parse()
                .unwrap_or_else(|_| panic!("{key} is not a number: {:?}", &rest[..end]))
        })
        .collect()
}

/// PIDs of live processes whose working directory is `dir`: the benchmark's children inherit
/// it, so any found after the benchmark ended were left behind.
fn processes_in(dir: &Path) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(std::result::Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd == dir))
        .collect()
}

#[test]
fn a_tiny_run_measures_every_combination_and_leaves_nothing_running() {
    let dir = tempfile::tempdir().expect("tempdir");
    let json_path = dir.path().join("recipes.json");
    let output = Command::new(LOCKKEEPER_BENCH)
        .current_dir(dir.path())
        .args([
            "--recipes",
            "--duration",
            "5s",
            "--recipe-trials",
            "1",
            "--counter-sessions",
            "3",
            "--increments",
            "4",
            "--queue-producers",
            "4",
            "--queue-consumers",
            "4",
            "--queue-items",
            "12",
            "--handoff-participants",
            "2",
            "--handoffs",
            "3",
            "--failovers",
            "1",
            "--election-participants",
            "2",
            "--no-progress",
            "--json",
        ])
        .arg(&json_path)
        .output()
        .expect("run lockkeeper-bench");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "bench failed ({}):\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("targets:"), "{stdout}");

    let json = std::fs::read_to_string(&json_path).expect("the JSON was written");
    // Four combinations, one trial each; every counter ended at exactly the increments counted
    // (the run fails otherwise), here all 3 x 4 of them.
    assert_eq!(numbers(&json, "increments"), vec![12.0; 4], "{json}");
    // Four producers and four consumers on each combination's queue: all 12 items came through,
    // each exactly once (the run fails otherwise).
    assert_eq!(numbers(&json, "items"), vec![12.0; 4], "{json}");
    assert_eq!(numbers(&json, "consumers"), vec![4.0; 4], "{json}");
    for rate in numbers(&json, "items_per_sec") {
        assert!(rate > 0.0, "{json}");
    }
    // Each combination's medians over its trials, with the range.
    assert!(json.contains("\"medians\""), "{json}");
    let handoffs = numbers(&json, "handoffs");
    assert_eq!(handoffs, vec![3.0; 4], "{json}");
    for mean in numbers(&json, "handoff_mean_ms") {
        assert!(mean > 0.0, "{json}");
    }
    // One failover on each default side: lockkeeper on Keeper and Curator on ZooKeeper. The
    // next leader cannot come before the dead one's session could expire: a session is timed
    // from the client's last message, which is at most about a third of the timeout old.
    let took = numbers(&json, "took_s");
    let floors = numbers(&json, "session_timeout_s");
    assert_eq!((took.len(), floors.len()), (2, 2), "{json}");
    for (took, floor) in took.iter().zip(&floors) {
        assert!(*floor >= 4.0, "the servers granted less than asked: {json}");
        assert!(*took > floor / 2.0, "a failover before expiry: {json}");
        assert!(*took < floor * 3.0 + 30.0, "{json}");
    }
    assert_eq!(numbers(&json, "failovers"), vec![1.0, 1.0], "{json}");
    assert!(json.contains("\"errors\": []"), "{json}");

    // The participants and JVMs died with the run (the parent-death signal is asynchronous).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = processes_in(dir.path());
        if left.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "processes left behind: {left:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_bad_participant_spec_is_refused_by_name() {
    let output = Command::new(LOCKKEEPER_BENCH)
        .args(["--election-participant", "127.0.0.1:1", "/e", "p", "soon"])
        .output()
        .expect("run lockkeeper-bench");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("WATCHDOG_SECS `soon`"), "{stderr}");
}
