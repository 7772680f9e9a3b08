//! kazoo, the Python ZooKeeper client, and its recipes against Keeper and Apache ZooKeeper.
//!
//! Each test runs one script from `tests/clients/kazoo/` (`python3 SCRIPT.py HOST:PORT`) against
//! every backend of `testkit::both()`; the last runs kazoo's own SASL digest and TLS tests
//! against Keeper. The scripts hold the checks (mutual exclusion, leader
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

/// kazoo's own tests, unmodified, from the installed package: its SASL DIGEST-MD5 tests
/// (`kazoo/tests/test_sasl.py`, the legacy `auth_data` form and `sasl_options`: a right password
/// whose `sasl` ACL shuts out an unauthenticated client, a bad user refused with
/// AuthFailedError) and its TLS client test (`test_client.py::TestSSLClient`), run by pytest
/// against one Keeper through `keeper_cluster.py`, which stands in for kazoo's ZooKeeper
/// harness. The Keeper has kazoo's harness's JAAS users, and a secure listener that requires
/// a client certificate the test CA signed.
#[test]
fn kazoos_own_sasl_digest_and_tls_client_tests() {
    use lockkeeper_server::SaslUsers;
    use lockkeeper_testkit::{Keeper, free_port};
    use lockkeeper_tls::testing::Pki;
    require_kazoo();
    for module in ["puresasl", "pytest"] {
        let found = Command::new(python3())
            .args(["-c", &format!("import {module}")])
            .status()
            .expect("run python3");
        assert!(
            found.success(),
            "python3 cannot import {module}: scripts/test installs it (pip install pure-sasl pytest)"
        );
    }
    let pki = Pki::new("kazoo-test-ca");
    let client = pki.client("client", &[(rcgen::DnType::CommonName, "client")]);
    let dir = tempfile::tempdir().unwrap();
    let jaas = r#"Server {
        org.apache.zookeeper.server.auth.DigestLoginModule required
        user_super="super_secret"
        user_jaasuser="jaas_password";
    };"#;
    let keeper = Keeper::start_configured(|config| {
        config.secure_listen = Some(std::net::SocketAddr::from(([127, 0, 0, 1], free_port())));
        config.tls = Some(pki.server_files("keeper", true));
        config.sasl_users = Some(SaslUsers::from_jaas(jaas, "Server").unwrap());
    });
    let secure = keeper.secure_addr();
    let output = Command::new(python3())
        .args([
            "-m",
            "pytest",
            "-p",
            "keeper_cluster",
            "-q",
            "-rs",
            "--pyargs",
        ])
        .args(["kazoo.tests.test_sasl", "kazoo.tests.test_client"])
        .args(["-k", "DigestAuthentication or TestSSLClient"])
        .env("PYTHONPATH", scripts_dir())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("KEEPER_ADDRESS", keeper.connect_string())
        .env("KEEPER_SECURE_ADDRESS", secure.to_string())
        .env("KEEPER_TLS_CA", pki.ca())
        .env("KEEPER_TLS_CLIENT_CERT", &client.cert)
        .env("KEEPER_TLS_CLIENT_KEY", &client.key)
        // kazoo's tests ask the server's version with `envi` unless told it.
        .env("CI", "true")
        .env("ZOOKEEPER_VERSION", "3.8.0")
        .current_dir(dir.path())
        .output()
        .expect("run pytest");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    println!("{text}");
    assert!(output.status.success(), "kazoo's tests failed:\n{text}");
    // Four SASL digest tests and one TLS test, none skipped.
    assert!(text.contains("5 passed"), "not all five ran:\n{text}");
    assert!(!text.contains("skipped"), "a test was skipped:\n{text}");
}
