//! kazoo, the Python ZooKeeper client, and its recipes against Keeper and Apache ZooKeeper.
//!
//! Each test runs one script from `tests/clients/kazoo/` (`python3 SCRIPT.py HOST:PORT`) against
//! every backend of `testkit::both()`. The scripts hold the checks (mutual exclusion, leader
//! hand-over, barriers, FIFO queues, watches, ephemerals, transactions, session expiry of a
//! frozen lock holder) and exit non-zero when one fails; every wait in them is bounded and a
//! hard alarm ends them if something hangs.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use lockkeeper_testkit::{TestServer, both, python3};

/// Above the scripts' own hard limit (240 s), so that a hung script reports its stacks itself.
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(300);

fn scripts_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/kazoo")
}

/// Fails with a clear message when kazoo is missing, instead of a Python import traceback.
fn require_kazoo() {
    let status = Command::new(python3())
        .args(["-c", "import kazoo"])
        .status()
        .expect("run python3");
    assert!(
        status.success(),
        "python3 cannot import kazoo: run `python3 -m pip install kazoo` (scripts/test does)"
    );
}

/// Runs `script` against `server`; panics with everything the script printed unless it exits 0
/// and says it finished.
fn run_script(script: &str, server: &dyn TestServer) {
    let backend = server.name();
    let dir = tempfile::tempdir().expect("tempdir for the script's output");
    let out_path = dir.path().join("output.txt");
    let out = fs::File::create(&out_path).expect("create the output file");
    let started = Instant::now();
    let mut child = Command::new(python3())
        .arg(scripts_dir().join(script))
        .arg(server.connect_string())
        .current_dir(scripts_dir())
        // Keep the source tree free of __pycache__, and see output up to a crash.
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("PYTHONUNBUFFERED", "1")
        .stdout(out.try_clone().expect("dup the output file"))
        .stderr(out)
        .spawn()
        .expect("start python3");
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for python3") {
            break status;
        }
        if started.elapsed() > SCRIPT_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "[{backend}] {script} still running after {SCRIPT_TIMEOUT:?}; output:\n{}",
                fs::read_to_string(&out_path).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let output = fs::read_to_string(&out_path).unwrap_or_default();
    assert!(
        status.success() && output.contains("\nOK in "),
        "[{backend}] {script} failed ({status}) after {:?}; output:\n{output}",
        started.elapsed()
    );
    println!("[{backend}] {script}:\n{output}");
}

fn run_against_both(script: &str) {
    require_kazoo();
    for server in both() {
        run_script(script, server.as_ref());
    }
}

#[test]
fn kazoo_crud_watches_ephemerals_transactions() {
    run_against_both("crud_watches.py");
}

#[test]
fn kazoo_lock_readwrite_lock_and_semaphore() {
    run_against_both("locks.py");
}

#[test]
fn kazoo_election_hands_over_when_the_leader_stops() {
    run_against_both("election.py");
}

#[test]
fn kazoo_barrier_and_double_barrier() {
    run_against_both("barriers.py");
}

#[test]
fn kazoo_queue_and_locking_queue() {
    run_against_both("queues.py");
}

#[test]
fn kazoo_session_expiry_frees_a_paused_holders_lock() {
    run_against_both("session_expiry.py");
}
