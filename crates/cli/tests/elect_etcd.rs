//! `lockkeeper elect --backend etcd://...` as operators run it, against a real etcd member and
//! `etcdctl elect` (Debian's `etcd-client`): one leader at a time among command participants,
//! the next one taking over with a higher token when the leader resigns; `--listen` naming
//! lockkeeper's and etcdctl's leaders alike; a lockkeeper participant waiting behind an
//! `etcdctl elect` leader until it goes; `--once` exiting 76 when its lease is lost under it.
//! Every wait is bounded; every process is SIGKILLed on drop if it still runs.
#![cfg(feature = "etcd")]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

use lockkeeper_testkit::{Etcd, die_with_parent, find_on_path};

const LOCKKEEPER: &str = env!("CARGO_BIN_EXE_lockkeeper");
/// Bound on any one expected line or exit.
const LIMIT: Duration = Duration::from_secs(30);

/// A process with its stdout as lines; SIGKILLed on drop if still running.
struct Proc {
    child: Child,
    lines: Receiver<String>,
    label: String,
}

impl Proc {
    fn spawn(mut command: Command, label: &str) -> Proc {
        die_with_parent(&mut command);
        let mut child = command
            .env_remove("LOCKKEEPER_BACKEND")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("start {label}: {e}"));
        let (sender, lines) = channel();
        let stdout = child.stdout.take().expect("piped stdout");
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if sender.send(line).is_err() {
                    return;
                }
            }
        });
        Proc {
            child,
            lines,
            label: label.to_owned(),
        }
    }

    fn elect(url: &str, args: &[&str], label: &str) -> Proc {
        let mut command = Command::new(LOCKKEEPER);
        command.args(["elect", "--backend", url]).args(args);
        Proc::spawn(command, label)
    }

    /// The next line, within [`LIMIT`].
    fn line(&self) -> String {
        self.lines
            .recv_timeout(LIMIT)
            .unwrap_or_else(|_| panic!("{}: no line within {LIMIT:?}", self.label))
    }

    /// Whether a line comes within `wait`.
    fn quiet_for(&self, wait: Duration) -> bool {
        self.lines.recv_timeout(wait).is_err()
    }

    fn signal(&self, sig: libc::c_int) {
        // SAFETY: kill(2) with plain integers, to a process this test started.
        unsafe {
            libc::kill(self.child.id() as i32, sig);
        }
    }

    /// Its exit code, waiting at most [`LIMIT`].
    fn exit_code(&mut self) -> i32 {
        let deadline = Instant::now() + LIMIT;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status.code().unwrap_or(-1);
            }
            assert!(
                Instant::now() < deadline,
                "{}: still running after {LIMIT:?}",
                self.label
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
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
    let alpha = Proc::elect(&url, &["--id", "alpha", "svc"], "alpha");
    let (id, first) = leader_line(&alpha.line());
    assert_eq!(id, "alpha");
    let listener = Proc::elect(&url, &["--listen", "svc"], "listener");
    assert_eq!(leader_line(&listener.line()), ("alpha".to_owned(), first));
    let beta = Proc::elect(&url, &["--id", "beta", "svc"], "beta");
    assert!(
        beta.quiet_for(Duration::from_secs(1)),
        "beta led while alpha did"
    );
    alpha.signal(libc::SIGTERM);
    let (id, second) = leader_line(&beta.line());
    assert_eq!(id, "beta");
    assert!(second > first, "tokens grow: {second} after {first}");
    assert_eq!(leader_line(&listener.line()), ("beta".to_owned(), second));
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
    let gamma = Proc::spawn(command, "etcdctl elect");
    assert!(gamma.line().starts_with("shared/"), "etcdctl was elected");
    let listener = Proc::elect(&url, &["--listen", "shared"], "listener");
    let (id, token) = leader_line(&listener.line());
    assert_eq!(id, "gamma", "--listen names etcdctl's leader");
    // A lockkeeper participant waits behind etcdctl's leader, runs once it is gone.
    let mut delta = Proc::elect(
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
        delta.quiet_for(Duration::from_secs(1)),
        "delta ran while etcdctl led"
    );
    gamma.signal(libc::SIGINT); // etcdctl resigns on SIGINT
    let ran = delta.line();
    let ran_with: u64 = ran
        .strip_prefix("ran ")
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("not the command's line: {ran:?}"));
    assert!(
        ran_with > token,
        "delta's token {ran_with} after etcdctl's {token}"
    );
    assert_eq!(delta.exit_code(), 0, "the command's own exit code");
    assert_eq!(
        leader_line(&listener.line()),
        ("delta".to_owned(), ran_with)
    );
}

#[test]
fn once_exits_76_when_the_lease_is_lost_under_the_leader() {
    let etcd = Etcd::start();
    let url = format!("etcd://{}", etcd.addr());
    let mut leader = Proc::elect(
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
    assert_eq!(leader.line(), "leading");
    // Frozen past its 2 s lease: etcd expires it; thawed, the participant finds it lost.
    leader.signal(libc::SIGSTOP);
    std::thread::sleep(Duration::from_secs(4));
    leader.signal(libc::SIGCONT);
    assert_eq!(leader.exit_code(), 76);
}
