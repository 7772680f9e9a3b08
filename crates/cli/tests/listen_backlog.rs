//! `--listen-backlog`: how many connections the kernel completes and holds for Keeper before it
//! accepts them. Checked the only way that shows the real backlog: freeze the server (SIGSTOP)
//! so nothing is accepted, and count the connections the kernel still completes; a connection
//! past the backlog gets no answer to its SYN and times out. Bad values are refused by name.

mod support;

use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use support::KeeperProcess;

/// How long one connect may take before it counts as refused (its SYN was dropped; the client
/// would retransmit after a second).
const CONNECT_LIMIT: Duration = Duration::from_millis(300);

/// While the server is frozen, opens up to `attempts` connections and returns how many the
/// kernel completed, stopping after the first few that time out.
fn connections_held_while_frozen(server: &KeeperProcess, attempts: usize) -> usize {
    server.signal(libc::SIGSTOP);
    let mut held = Vec::new();
    let mut timed_out = 0;
    for _ in 0..attempts {
        match TcpStream::connect_timeout(&server.addr(), CONNECT_LIMIT) {
            Ok(stream) => held.push(stream),
            Err(_) => {
                timed_out += 1;
                if timed_out == 3 {
                    break;
                }
            }
        }
    }
    server.signal(libc::SIGCONT);
    eprintln!(
        "a frozen server's kernel completed {} connections",
        held.len()
    );
    held.len()
}

fn somaxconn() -> usize {
    std::fs::read_to_string("/proc/sys/net/core/somaxconn")
        .expect("read net.core.somaxconn")
        .trim()
        .parse()
        .expect("somaxconn is a number")
}

fn assert_serves(addr: SocketAddr) {
    assert_eq!(lockkeeper_testkit::four_letter_word(addr, "ruok"), "imok");
}

#[test]
#[ignore = "load-sensitive: the kernel's accept queue under a busy machine; run with --ignored"]
fn a_small_backlog_holds_that_many_connections_and_no_more() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let server = KeeperProcess::start(&tmp.path().join("data"), &["--listen-backlog", "8"]);
    let held = connections_held_while_frozen(&server, 40);
    // Linux completes one more than the backlog before the accept queue counts as full.
    assert!(
        (8..=10).contains(&held),
        "with --listen-backlog 8 the kernel held {held} connections of a frozen server"
    );
    assert_serves(server.addr());
}

#[test]
#[ignore = "load-sensitive: the kernel's accept queue under a busy machine; run with --ignored"]
fn the_default_backlog_holds_a_connection_storm() {
    // More than tokio's own 128, within the kernel's cap.
    let storm = 300.min(somaxconn());
    let tmp = tempfile::tempdir().expect("temp dir");
    let server = KeeperProcess::start(&tmp.path().join("data"), &[]);
    let held = connections_held_while_frozen(&server, storm);
    assert_eq!(
        held, storm,
        "the default backlog must hold {storm} connections of a frozen server"
    );
    assert_serves(server.addr());
}

#[test]
fn bad_backlogs_are_refused_by_name() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("data");
    for bad in ["0", "-1", "65536", "many"] {
        let flag = format!("--listen-backlog={bad}");
        let failure = match KeeperProcess::try_start(&dir, &[&flag]) {
            Ok(server) => panic!(
                "--listen-backlog {bad} was accepted; serving on {}",
                server.addr()
            ),
            Err(failure) => failure,
        };
        assert_eq!(
            failure.status.and_then(|s| s.code()),
            Some(64),
            "usage errors exit 64 (EX_USAGE), as every lockkeeper command's do; {failure}"
        );
        assert!(
            failure
                .stderr
                .contains(&format!("invalid value '{bad}' for '--listen-backlog")),
            "the refusal must name the flag and the value; {failure}"
        );
    }
}
