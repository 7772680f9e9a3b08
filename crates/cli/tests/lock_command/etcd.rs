//! `lockkeeper lock --backend etcd://...` against a real etcd member (testkit's, on loopback
//! ports): concurrent commands exclude each other with strictly increasing fencing tokens;
//! `etcdctl lock NAME -- CMD` and this command exclude each other on one name (the same key
//! layout); a holder frozen past its lease has its command stopped and exits 76; an etcd that
//! does not answer is exit 69 naming the address, within the connect timeout; `--semaphore N`,
//! `--read` and `--write` keep their meaning on etcd.

use std::path::Path;
use std::time::{Duration, Instant};

use lockkeeper_testkit::{Etcd, etcdctl};

use crate::exclusion::{assert_strictly_increasing, contend, tokens_in_order};
use crate::loss::loss_by_freezing;
use crate::support::{RUN_LIMIT, assert_code, assert_said, describe, hold, run_lock, stop};

fn etcd_url(etcd: &Etcd) -> String {
    format!("etcd://{}", etcd.addr())
}

#[test]
fn four_processes_never_overlap_on_etcd() {
    let etcd = Etcd::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let started = Instant::now();
    let overlaps = contend(&etcd_url(&etcd), "nightly", dir.path(), 4, 5);
    assert_eq!(overlaps, 0);
    let tokens = tokens_in_order(dir.path());
    assert_eq!(tokens.len(), 20);
    assert_strictly_increasing(&tokens, "etcd");
    eprintln!("etcd: 20 runs of 4 processes in {:?}", started.elapsed());
}

/// What `etcdctl lock` runs: the same marker as the lockkeeper contenders, but an overlap is
/// written to a file (etcdctl's own exit status would hide which failure it was).
const ETCDCTL_SECTION: &str = r#"if (set -C; : > "$1") 2>/dev/null; then
    sleep 0.02; rm -f "$1"
else echo overlap >> "$2"; fi"#;

/// `rounds` runs of `etcdctl lock NAME -- sh -c ETCDCTL_SECTION` one after the other.
fn etcdctl_rounds(endpoint: String, name: &'static str, dir: &Path, rounds: usize) {
    let marker = dir.join("marker");
    let overlaps = dir.join("etcdctl-overlaps");
    let (marker, overlaps) = (
        marker.to_str().expect("utf-8 path").to_string(),
        overlaps.to_str().expect("utf-8 path").to_string(),
    );
    for _ in 0..rounds {
        let args = [
            "lock",
            name,
            "--",
            "sh",
            "-c",
            ETCDCTL_SECTION,
            "sh",
            &marker,
            &overlaps,
        ];
        etcdctl(std::slice::from_ref(&endpoint), &args).expect("etcdctl lock");
    }
}

#[test]
fn etcdctl_lock_and_lockkeeper_exclude_each_other() {
    let etcd = Etcd::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let etcdctl_side = {
        let (endpoint, dir) = (etcd.endpoint(), dir.path().to_path_buf());
        std::thread::spawn(move || etcdctl_rounds(endpoint, "shared", &dir, 10))
    };
    let overlaps = contend(&etcd_url(&etcd), "shared", dir.path(), 3, 5);
    etcdctl_side.join().expect("the etcdctl side");
    assert_eq!(overlaps, 0, "lockkeeper found etcdctl's holder inside");
    let etcdctl_overlaps =
        std::fs::read_to_string(dir.path().join("etcdctl-overlaps")).unwrap_or_default();
    assert!(
        etcdctl_overlaps.is_empty(),
        "etcdctl found lockkeeper's holder inside: {etcdctl_overlaps}"
    );
    assert_eq!(tokens_in_order(dir.path()).len(), 15);

    // The same key, seen from both sides: while lockkeeper holds NAME, its key is the one
    // `etcdctl lock NAME` would wait behind (NAME/<lease in hex>), and --try elsewhere is 75.
    let url = etcd_url(&etcd);
    let (holder, token) = hold(&url, &["held"]);
    let keys = etcdctl(
        &[etcd.endpoint()],
        &["get", "--prefix", "held/", "--keys-only"],
    )
    .expect("etcdctl get");
    assert_eq!(keys.lines().filter(|l| !l.is_empty()).count(), 1, "{keys}");
    let other = run_lock(&url, &["--try", "held", "--", "true"], RUN_LIMIT);
    assert_code(&other, 75, "--try while another process holds it");
    // `etcdctl lock held` waits behind lockkeeper's holder and gets the lock once it releases.
    let waiter = {
        let endpoint = etcd.endpoint();
        std::thread::spawn(move || {
            etcdctl(&[endpoint], &["lock", "held", "--", "true"]).expect("etcdctl lock");
            Instant::now()
        })
    };
    std::thread::sleep(Duration::from_secs(1));
    assert!(
        !waiter.is_finished(),
        "etcdctl lock went past lockkeeper's holder"
    );
    let released = Instant::now();
    let output = stop(holder, libc::SIGTERM, "the holder");
    assert_code(&output, 0, "released on SIGTERM");
    let granted = waiter.join().expect("the etcdctl waiter");
    assert!(
        granted >= released,
        "etcdctl was granted before the release"
    );
    // And the other way round: while `etcdctl lock` holds a name, lockkeeper's --try is 75.
    let inside = dir.path().join("etcdctl-inside");
    let etcdctl_holder = {
        let (endpoint, inside) = (etcd.endpoint(), inside.clone());
        std::thread::spawn(move || {
            let inside = inside.to_str().expect("utf-8 path").to_string();
            let args = [
                "lock",
                "held2",
                "--",
                "sh",
                "-c",
                r#": > "$1"; sleep 2"#,
                "sh",
                &inside,
            ];
            etcdctl(&[endpoint], &args).expect("etcdctl lock");
        })
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while !inside.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(inside.exists(), "etcdctl never held held2");
    let other = run_lock(&url, &["--try", "held2", "--", "true"], RUN_LIMIT);
    assert_code(&other, 75, "--try while etcdctl holds it");
    etcdctl_holder.join().expect("the etcdctl holder");
    let next = hold(&url, &["held"]);
    assert!(next.1 > token, "tokens grow: {} after {token}", next.1);
    stop(next.0, libc::SIGTERM, "the second holder");
}

#[test]
fn a_holder_frozen_past_its_lease_stops_its_command_on_etcd() {
    let etcd = Etcd::start();
    loss_by_freezing(&etcd_url(&etcd), "frozen", "3s");
}

#[test]
fn an_unreachable_etcd_is_69_naming_the_address_in_bounded_time() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    let url = format!("etcd://127.0.0.1:{port}");
    let started = Instant::now();
    let output = run_lock(
        &url,
        &["--connect-timeout", "1s", "nightly", "--", "true"],
        RUN_LIMIT,
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}\n{}",
        started.elapsed(),
        describe(&output)
    );
    assert_code(&output, 69, "nothing listens");
    assert_said(&output, &format!("127.0.0.1:{port}"));
}

#[test]
fn a_path_in_the_url_is_a_usage_error() {
    let output = run_lock(
        "etcd://127.0.0.1:2379/locks",
        &["x", "--", "true"],
        RUN_LIMIT,
    );
    assert_code(&output, 64, "a path after the hosts");
    assert_said(&output, "etcd://127.0.0.1:2379/locks");
}

#[test]
fn semaphore_and_read_write_locks_on_etcd() {
    let etcd = Etcd::start();
    let url = etcd_url(&etcd);
    // Two of two permits held: a third --try is 75; after one goes, it gets in.
    let (first, a) = hold(&url, &["--semaphore", "2", "permits"]);
    let (second, b) = hold(&url, &["--semaphore", "2", "permits"]);
    assert_ne!(a, b, "each permit has its own token");
    let third = run_lock(
        &url,
        &["--semaphore", "2", "--try", "permits", "--", "true"],
        RUN_LIMIT,
    );
    assert_code(&third, 75, "a third permit of two");
    assert_code(
        &stop(first, libc::SIGTERM, "first permit"),
        0,
        "first permit",
    );
    let third = run_lock(
        &url,
        &["--semaphore", "2", "--try", "permits", "--", "true"],
        RUN_LIMIT,
    );
    assert_code(&third, 0, "a permit came free");
    stop(second, libc::SIGTERM, "second permit");
    // Readers share; a writer excludes readers, and the other way round.
    let (reader, _) = hold(&url, &["--read", "catalog"]);
    let reader2 = run_lock(
        &url,
        &["--read", "--try", "catalog", "--", "true"],
        RUN_LIMIT,
    );
    assert_code(&reader2, 0, "a second reader");
    let writer = run_lock(
        &url,
        &["--write", "--try", "catalog", "--", "true"],
        RUN_LIMIT,
    );
    assert_code(&writer, 75, "a writer while a reader holds");
    stop(reader, libc::SIGTERM, "the reader");
    let (writer, _) = hold(&url, &["--write", "catalog"]);
    let reader = run_lock(
        &url,
        &["--read", "--try", "catalog", "--", "true"],
        RUN_LIMIT,
    );
    assert_code(&reader, 75, "a reader while a writer holds");
    stop(writer, libc::SIGTERM, "the writer");
}
