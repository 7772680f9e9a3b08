//! `lockkeeper elect --backend etcd://...` as operators run it, against a real etcd member and
//! `etcdctl elect` (Debian's `etcd-client`): one leader at a time among command participants,
//! the next one taking over with a higher token when the leader resigns; `--listen` naming
//! lockkeeper's and etcdctl's leaders alike; a lockkeeper participant waiting behind an
//! `etcdctl elect` leader until it goes; `--once` exiting 76 when its lease is lost under it;
//! `--timeout` and `--try` ending with 75 behind a leader and `--timeout` with 69 naming the
//! backend when etcd is frozen or killed during the wait, by the deadline plus a bounded
//! withdrawal and close (durations asserted only as loose upper bounds).
//! Every wait is bounded; every process is SIGKILLed on drop if it still runs.
#![cfg(feature = "etcd")]

use std::panic::AssertUnwindSafe;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use lockkeeper_testkit::{Etcd, LinePeer, die_with_parent, etcdctl, find_on_path};

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

/// The waiters' `--timeout`.
const TIMEOUT: Duration = Duration::from_secs(3);

/// How far past its `--timeout` a waiter may end: the withdrawal (about a second), closing
/// the session (bounded by `--release-timeout`, 2 s) and a loaded machine's slack.
const MARGIN: Duration = Duration::from_secs(5);

/// `lockkeeper elect --backend URL --id waiter ARGS NAME -- true`, stderr piped.
fn waiter(url: &str, args: &[&str], name: &str) -> Child {
    let mut command = Command::new(LOCKKEEPER);
    die_with_parent(&mut command);
    command
        .args(["elect", "--backend", url, "--id", "waiter"])
        .args(args)
        .args([name, "--", "true"])
        .env_remove("LOCKKEEPER_BACKEND")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    command.spawn().expect("start lockkeeper elect")
}

/// Waits at most [`LIMIT`] for `child` (killing it past that): its exit code and stderr.
fn finish(mut child: Child, label: &str) -> (Option<i32>, String) {
    let deadline = Instant::now() + LIMIT;
    while child.try_wait().expect("wait for lockkeeper").is_none() {
        if Instant::now() >= deadline {
            let _ = child.kill();
            let output = child.wait_with_output().expect("collect output");
            panic!(
                "{label}: still running after {LIMIT:?}\n{}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let output = child.wait_with_output().expect("collect output");
    let text = String::from_utf8_lossy(&output.stderr).into_owned();
    eprintln!("{label}: {text}");
    (output.status.code(), text)
}

/// Waits (generously) until the election `name` has `n` candidates' keys.
fn candidates(etcd: &Etcd, name: &str, n: usize) {
    let deadline = Instant::now() + LIMIT;
    loop {
        let keys = etcdctl(
            &[etcd.endpoint()],
            &["get", "--prefix", "--keys-only", &format!("{name}/")],
        )
        .unwrap_or_default();
        if keys.lines().filter(|l| !l.trim().is_empty()).count() >= n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{n} candidates in {name}: not within {LIMIT:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_timeout_or_try_behind_a_leader_is_75_on_etcd() {
    let etcd = Etcd::start();
    let url = format!("etcd://{}", etcd.addr());
    let mut alpha = elect(&url, &["--id", "alpha", "held"], "alpha");
    assert_eq!(leader_line(&alpha.next_line(LIMIT)).0, "alpha");

    let started = Instant::now();
    let (code, text) = finish(waiter(&url, &["--timeout", "3s"], "held"), "--timeout");
    let took = started.elapsed();
    assert_eq!(code, Some(75), "--timeout behind a leader\n{text}");
    assert!(
        text.contains(&url) && text.contains("not leading within 3s: someone else leads"),
        "{text}"
    );
    assert!(
        took >= TIMEOUT && took < TIMEOUT + MARGIN,
        "took {took:?}\n{text}"
    );

    let (code, text) = finish(waiter(&url, &["--try"], "held"), "--try");
    assert_eq!(code, Some(75), "--try behind a leader\n{text}");
    assert!(text.contains("someone else leads"), "{text}");

    // Neither left its candidacy behind; once alpha resigns, --try leads and runs `true`.
    candidates(&etcd, "held", 1);
    alpha.signal("TERM");
    assert_eq!(alpha.wait_exit(LIMIT).code(), Some(0));
    let (code, text) = finish(waiter(&url, &["--try"], "held"), "--try alone");
    assert_eq!(code, Some(0), "--try with nobody leading\n{text}");
}

/// A leader and a `--timeout 3s` waiter on `name`; `fault` takes etcd away during the wait;
/// the waiter must end with 69 naming the backend, by the deadline plus [`MARGIN`].
fn unavailable_at_the_deadline(etcd: &Etcd, name: &str, label: &str, fault: impl FnOnce()) {
    let url = format!("etcd://{}", etcd.addr());
    let mut alpha = elect(&url, &["--id", "alpha", name], "alpha");
    assert_eq!(leader_line(&alpha.next_line(LIMIT)).0, "alpha");
    let started = Instant::now();
    let waiting = waiter(&url, &["--timeout", "3s"], name);
    candidates(etcd, name, 2);
    fault();
    let (code, text) = finish(waiting, label);
    let took = started.elapsed();
    eprintln!("{label}: exited {code:?} after {took:?}");
    assert_eq!(code, Some(69), "{label}: etcd gone at --timeout\n{text}");
    assert!(
        text.contains(&url) && text.contains("unreachable") && !text.contains("someone else"),
        "{label}: the message names neither the backend nor the cause\n{text}"
    );
    assert!(took < TIMEOUT + MARGIN, "{label}: took {took:?}\n{text}");
}

#[test]
fn a_timeout_is_69_by_its_deadline_when_etcd_is_frozen() {
    let etcd = Etcd::start();
    let pid = etcd.pid().expect("etcd runs");
    let signal = |sig| {
        // SAFETY: kill(2) with plain integers, to the etcd this test started.
        assert_eq!(
            unsafe { libc::kill(pid as libc::pid_t, sig) },
            0,
            "signal etcd"
        );
    };
    let result = std::panic::catch_unwind(AssertUnwindSafe(|| {
        unavailable_at_the_deadline(&etcd, "frozen", "etcd frozen", || signal(libc::SIGSTOP));
    }));
    signal(libc::SIGCONT);
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

#[test]
fn a_timeout_is_69_by_its_deadline_when_etcd_is_killed() {
    let etcd = Etcd::start();
    unavailable_at_the_deadline(&etcd, "killed", "etcd killed", || etcd.kill());
}
