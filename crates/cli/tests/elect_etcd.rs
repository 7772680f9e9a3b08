//! `lockkeeper elect --backend etcd://...` as operators run it, against a real etcd member and
//! `etcdctl elect` (Debian's `etcd-client`): one leader at a time among command participants,
//! the next one taking over with a higher token when the leader resigns; `--listen` naming
//! lockkeeper's and etcdctl's leaders alike; a lockkeeper participant waiting behind an
//! `etcdctl elect` leader until it goes; `--once` exiting 76 when its lease is lost under it.
//! Every wait is bounded; every process is SIGKILLed on drop if it still runs.
#![cfg(feature = "etcd")]

use std::process::Command;
use std::time::Duration;

use lockkeeper_testkit::{Etcd, LinePeer, die_with_parent, find_on_path};

const LOCKKEEPER: &str = env!("CARGO_BIN_EXE_lockkeeper");
/// Bound on any one expected line or exit.
const LIMIT: Duration = Duration::from_secs(30);

/// `lockkeeper elect --backend URL ARGS`, its stdout read as lines; SIGKILLed on drop.
fn elect(url: &str, args: &[&str], label: &str) -> LinePeer {
    let mut command = Command::new(LOCKKEEPER);
    die_with_parent(&mut command);
    command
        .args(["elect", "--backend", url])
        .args(args)
        .env_remove("LOCKKEEPER_BACKEND");
    LinePeer::spawn(&mut command, label)
}

/// `leader ID token N` split into its id and token.
fn leader_line(line: &str) -> (String, u64) {
    let parts: Vec<&str> = line.split(' ').collect();
    match parts.as_slice() {
        ["leader", id, "token", token] => (
            (*id).to_owned(),
            token
                .parse()
                .unwrap_or_else(|_| panic!("token in {line:?}")),
        ),
        _ => panic!("not a leader line: {line:?}"),
    }
}

#[test]
fn one_leader_at_a_time_and_the_next_takes_over_with_a_higher_token() {
    let etcd = Etcd::start();
    let url = format!("etcd://{}", etcd.addr());
    let mut alpha = elect(&url, &["--id", "alpha", "svc"], "alpha");
    let (id, first) = leader_line(&alpha.next_line(LIMIT));
    assert_eq!(id, "alpha");
    let mut listener = elect(&url, &["--listen", "svc"], "listener");
    assert_eq!(
        leader_line(&listener.next_line(LIMIT)),
        ("alpha".to_owned(), first)
    );
    let mut beta = elect(&url, &["--id", "beta", "svc"], "beta");
    assert!(
        beta.line_within(Duration::from_secs(1)).is_none(),
        "beta led while alpha did"
    );
    alpha.signal("TERM");
    let (id, second) = leader_line(&beta.next_line(LIMIT));
    assert_eq!(id, "beta");
    assert!(second > first, "tokens grow: {second} after {first}");
    assert_eq!(
        leader_line(&listener.next_line(LIMIT)),
        ("beta".to_owned(), second)
    );
}

#[test]
fn etcdctl_elect_and_lockkeeper_share_one_election() {
    let Some(etcdctl) = find_on_path("etcdctl") else {
        panic!("no etcdctl on PATH: install the Debian package etcd-client");
    };
    let etcd = Etcd::start();
    let url = format!("etcd://{}", etcd.addr());
    // etcdctl campaigns first and leads (it prints the key and its value when elected).
    let mut command = Command::new(etcdctl);
    command.env("ETCDCTL_API", "3").args([
        "--endpoints",
        &etcd.endpoint(),
        "elect",
        "shared",
        "gamma",
    ]);
    die_with_parent(&mut command);
    let mut gamma = LinePeer::spawn(&mut command, "etcdctl elect");
    assert!(
        gamma.next_line(LIMIT).starts_with("shared/"),
        "etcdctl was elected"
    );
    let mut listener = elect(&url, &["--listen", "shared"], "listener");
    let (id, token) = leader_line(&listener.next_line(LIMIT));
    assert_eq!(id, "gamma", "--listen names etcdctl's leader");
    // A lockkeeper participant waits behind etcdctl's leader, runs once it is gone.
    let mut delta = elect(
        &url,
        &[
            "--id",
            "delta",
            "shared",
            "--",
            "sh",
            "-c",
            "echo ran $LOCKKEEPER_FENCING_TOKEN; sleep 0.5",
        ],
        "delta",
    );
    assert!(
        delta.line_within(Duration::from_secs(1)).is_none(),
        "delta ran while etcdctl led"
    );
    gamma.signal("INT"); // etcdctl resigns on SIGINT
    let ran = delta.next_line(LIMIT);
    let ran_with: u64 = ran
        .strip_prefix("ran ")
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("not the command's line: {ran:?}"));
    assert!(
        ran_with > token,
        "delta's token {ran_with} after etcdctl's {token}"
    );
    assert_eq!(
        delta.wait_exit(LIMIT).code(),
        Some(0),
        "the command's own exit code"
    );
    assert_eq!(
        leader_line(&listener.next_line(LIMIT)),
        ("delta".to_owned(), ran_with)
    );
}

#[test]
fn once_exits_76_when_the_lease_is_lost_under_the_leader() {
    let etcd = Etcd::start();
    let url = format!("etcd://{}", etcd.addr());
    let mut leader = elect(
        &url,
        &[
            "--id",
            "frozen",
            "--once",
            "--session-timeout",
            "2s",
            "--kill-after",
            "1s",
            "svc",
            "--",
            "sh",
            "-c",
            "echo leading; exec sleep 300",
        ],
        "leader",
    );
    assert_eq!(leader.next_line(LIMIT), "leading");
    // Frozen past its 2 s lease: etcd expires it; thawed, the participant finds it lost.
    leader.signal("STOP");
    std::thread::sleep(Duration::from_secs(4));
    leader.signal("CONT");
    assert_eq!(leader.wait_exit(LIMIT).code(), Some(76));
}
