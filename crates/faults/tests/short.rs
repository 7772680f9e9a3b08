//! The short fault-injection run (`lockkeeper-faults` without `--full`), as part of the test
//! suite: it must finish, and its table must show what the suite exists to show.
//!
//! Asserted per row: operations happened; on the consensus backends (Keeper, Apache ZooKeeper,
//! etcd) the fence accepted no stale write under any fault; a holder paused past its session or lease
//! is overlapped (the unfenced resource saw two holders: the reason fencing exists) while the
//! fence still accepted nothing stale; a holder SIGKILLed or cut off on ZooKeeper keeps the lock
//! until its session expires (a connection closing ends no session), so the lock is
//! unavailable for about the session timeout; a Redis server's clock jumping ahead expires the
//! lease early, but the fence still accepts nothing stale (the tokens come from a counter).

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
        assert!(number(row, "operations") >= 3, "no operations: {row}");
        assert_eq!(
            row["struck"],
            Value::Bool(true),
            "the fault was injected: {row}"
        );
        if matches!(backend, "keeper" | "zookeeper" | "etcd" | "etcd-3") {
            if backend.starts_with("etcd") {
                etcd_rows += 1;
            } else {
                zookeeper_rows += 1;
            }
            assert_eq!(
                number(row, "stale_accepted"),
                0,
                "stale write accepted: {row}"
            );
        }
        if fault == "holder-paused" {
            assert!(
                number(row, "overlaps") >= 1,
                "the paused holder was overlapped: {row}"
            );
            if row["stale_accepted"].is_u64() {
                assert_eq!(number(row, "stale_accepted"), 0, "fenced: {row}");
            }
        }
        if fault == "holder-killed" && matches!(backend, "keeper" | "zookeeper") {
            assert_eq!(
                number(row, "overlaps"),
                0,
                "a killed holder writes nothing: {row}"
            );
        }
        if fault == "server-clock-jump" && row["stale_accepted"].is_u64() {
            // The lease expires early, but the token counter does not care about clocks.
            assert_eq!(number(row, "stale_accepted"), 0, "fenced: {row}");
        }
        let zookeeper = matches!(backend, "keeper" | "zookeeper");
        if zookeeper && matches!(fault, "holder-killed" | "holder-cut") {
            assert!(
                number(row, "max_unavailable_ms") >= 3000,
                "the lost holder's session keeps the lock until it expires: {row}"
            );
        }
    }
    assert!(zookeeper_rows >= 3, "Keeper and ZooKeeper rows: {rows:?}");
    assert!(etcd_rows >= 1, "an etcd row: {rows:?}");
}
