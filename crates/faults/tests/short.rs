//! The short fault-injection run (`lockkeeper-faults` without `--full`), as part of the test
//! suite: it must finish, and its table must show what the suite exists to show.
//!
//! Asserted per row: operations happened; the run judged no row a violation or vacuous (it
//! exits nonzero otherwise); on the consensus backends (Keeper, Apache ZooKeeper, etcd) no
//! fence accepted a stale write under any fault; a holder paused past its session or lease
//! wakes into stale writes (it checked `is_held()` before it was stopped), which every one of
//! the five fences refuses on every backend with tokens, and is overlapped (the unfenced
//! resource saw two holders: the reason fencing exists); a holder SIGKILLed, cut off, or
//! silently partitioned (network namespaces, packets dropped) on ZooKeeper keeps the lock until
//! its session expires (a connection closing ends no session), so the lock is unavailable for
//! about the session timeout, and a partitioned one is never overlapped (its local deadline
//! ends its hold first); a Redis server's clock jumping ahead expires the lease early, but the
//! fences still accept nothing stale (the tokens come from a counter); the `AtomicLong`
//! clients' history across a server restart is linearizable; tree caches and name watches
//! agree with the server once a watcher cut off past its session is back.

use std::process::Command;

use serde_json::Value;

fn run_short() -> Vec<Value> {
    let dir = tempfile::tempdir().expect("temporary directory");
    let json = dir.path().join("faults.json");
    let output = Command::new(env!("CARGO_BIN_EXE_lockkeeper-faults"))
        .arg("--json")
        .arg(&json)
        .output()
        .expect("run lockkeeper-faults");
    let stdout = String::from_utf8_lossy(&output.stdout);
    println!("{stdout}");
    assert!(
        output.status.success(),
        "lockkeeper-faults failed: {}\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.starts_with("seed "),
        "the seed comes first: {stdout}"
    );
    let text = std::fs::read_to_string(&json).expect("the --json file");
    let report: Value = serde_json::from_str(&text).expect("--json is JSON");
    report["rows"].as_array().expect("rows").clone()
}

fn number(row: &Value, field: &str) -> u64 {
    row[field]
        .as_u64()
        .unwrap_or_else(|| panic!("{field} in {row}"))
}

#[test]
fn short_run_shows_fencing_holds_on_zookeeper_and_etcd() {
    let rows = run_short();
    assert!(rows.len() >= 5, "the short run has its scenarios: {rows:?}");
    let mut zookeeper_rows = 0;
    let mut etcd_rows = 0;
    for row in &rows {
        let backend = row["backend"].as_str().expect("backend");
        let fault = row["fault"].as_str().expect("fault");
        let stale = &row["stale"];
        assert!(number(row, "operations") >= 3, "no operations: {row}");
        assert_eq!(
            row["struck"],
            Value::Bool(true),
            "the fault was injected: {row}"
        );
        let lock = row["lock"].as_str().expect("lock");
        if matches!(
            lock,
            "atomic-long" | "queue" | "two-phase" | "double-barrier" | "tree-cache"
        ) {
            // Not locks: their histories went through the linearizability, queue, two-phase
            // commit, barrier and cache checkers, with nothing found.
            assert!(
                row["history_problems"]
                    .as_array()
                    .is_some_and(Vec::is_empty),
                "{row}"
            );
            assert_eq!(row["verdict"], "pass", "{row}");
            if lock == "two-phase" {
                // Checked against the votes that stood at each decision, in the server's log.
                let note = row["notes"][0].as_str().unwrap_or_default();
                let read = note
                    .split("read from the server's log for ")
                    .nth(1)
                    .and_then(|rest| rest.split(' ').next())
                    .and_then(|n| n.parse::<u64>().ok());
                assert!(read.is_some_and(|n| n > 0), "standing votes: {row}");
            }
            continue;
        } else if matches!(
            backend,
            "keeper" | "keeper-netns" | "zookeeper" | "etcd" | "etcd-3"
        ) {
            if backend.starts_with("etcd") {
                etcd_rows += 1;
            } else {
                zookeeper_rows += 1;
            }
            let accepted = stale["accepted"]
                .as_object()
                .unwrap_or_else(|| panic!("tokens on {backend}: {row}"));
            assert!(
                accepted.values().all(|n| n.as_u64() == Some(0)),
                "stale write accepted: {row}"
            );
        }
        if fault == "holder-paused" {
            assert!(
                number(row, "overlaps") >= 1,
                "the paused holder was overlapped: {row}"
            );
            assert!(
                number(stale, "attempted") >= 1,
                "the paused holder woke into a stale write: {row}"
            );
            if let Some(by_fence) = stale["accepted"].as_object() {
                assert_eq!(by_fence.len(), 5, "five fences: {row}");
                for (fence, accepted) in by_fence {
                    assert_eq!(
                        accepted.as_u64(),
                        Some(0),
                        "{fence} accepted a stale write: {row}"
                    );
                }
                assert_eq!(
                    number(stale, "refused"),
                    number(stale, "attempted"),
                    "every stale write refused: {row}"
                );
            }
        }
        assert!(
            matches!(row["verdict"].as_str(), Some("pass" | "expected")),
            "verdict: {row}"
        );
        if fault == "holder-killed" && matches!(backend, "keeper" | "zookeeper") {
            assert_eq!(
                number(row, "overlaps"),
                0,
                "a killed holder writes nothing: {row}"
            );
        }
        if fault == "server-clock-jump"
            && let Some(accepted) = stale["accepted"].as_object()
        {
            // The lease expires early, but the token counter does not care about clocks.
            assert!(
                accepted.values().all(|n| n.as_u64() == Some(0)),
                "fenced: {row}"
            );
        }
        let zookeeper = matches!(backend, "keeper" | "keeper-netns" | "zookeeper");
        if zookeeper && matches!(fault, "holder-partitioned") {
            // Packets dropped, connections open: the holder's local deadline ends its hold
            // before the server expires its session and lets the next one in.
            assert_eq!(number(row, "overlaps"), 0, "no second holder: {row}");
        }
        if zookeeper && matches!(fault, "holder-killed" | "holder-cut" | "holder-partitioned") {
            assert!(
                number(row, "max_unavailable_ms") >= 3000,
                "the lost holder's session keeps the lock until it expires: {row}"
            );
        }
    }
    assert!(zookeeper_rows >= 3, "Keeper and ZooKeeper rows: {rows:?}");
    assert!(
        rows.iter().any(|r| r["fault"] == "holder-partitioned"),
        "a namespace partition row: {rows:?}"
    );
    assert!(etcd_rows >= 1, "an etcd row: {rows:?}");
}
