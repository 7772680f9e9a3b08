//! Every example under `examples/` runs as its documentation says, against real servers: each
//! is started as a process (the binary `cargo test` built beside this test), with the arguments
//! its doc comment shows, and must print what a user would be told to expect and exit 0 (or,
//! for the ones that run until interrupted, stop cleanly on SIGINT).
//!
//! The examples are built by `cargo test --workspace` and `cargo nextest run --workspace`
//! (examples are part of their default targets). A lone `cargo test --test examples` does not
//! build them: this test then says to run `cargo build -p lockkeeper --examples --all-features`.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use lockkeeper_testkit::{Keeper, TestServer};

/// Generous: on a loaded machine an example may take its time, never forever.
const WAIT: Duration = Duration::from_secs(120);

/// The example's binary, next to the test binaries (`target/<profile>/examples/NAME`).
fn binary(name: &str) -> PathBuf {
    let test = std::env::current_exe().expect("the test's own path");
    let profile = test
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps");
    let path = profile.join("examples").join(name);
    assert!(
        path.exists(),
        "{} is not built: run `cargo build -p lockkeeper --examples --all-features` (or the \
         whole workspace's tests, which build it)",
        path.display()
    );
    path
}

/// A running example: its output lines as they come, and the process.
struct Example {
    name: String,
    child: Child,
    lines: Receiver<String>,
    seen: Vec<String>,
}

impl Example {
    fn start(name: &str, args: &[&str]) -> Example {
        let mut command = Command::new(binary(name));
        command
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        lockkeeper_testkit::die_with_parent(&mut command);
        let mut child = command
            .spawn()
            .unwrap_or_else(|e| panic!("start {name}: {e}"));
        let (sender, lines) = mpsc::channel();
        for pipe in [
            Box::new(child.stdout.take().expect("stdout")) as Box<dyn std::io::Read + Send>,
            Box::new(child.stderr.take().expect("stderr")),
        ] {
            let sender = sender.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                    if sender.send(line).is_err() {
                        break;
                    }
                }
            });
        }
        Example {
            name: format!("{name} {}", args.join(" ")),
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Waits for a line containing `needle`; panics with everything seen if none comes.
    fn expect(&mut self, needle: &str) -> String {
        let deadline = Instant::now() + WAIT;
        if let Some(line) = self.seen.iter().find(|line| line.contains(needle)) {
            return line.clone();
        }
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if line.contains(needle) {
                        return line;
                    }
                }
                Err(_) => panic!(
                    "{}: no line with {needle:?}; it printed:\n{}",
                    self.name,
                    self.seen.join("\n")
                ),
            }
        }
    }

    /// Waits for the process to end (bounded) and returns its status and every line it printed.
    fn finish(mut self) -> (ExitStatus, Vec<String>) {
        let deadline = Instant::now() + WAIT;
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                break status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!(
                    "{} did not end; it printed:\n{}",
                    self.name,
                    self.seen.join("\n")
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        // The pipes close with the process: collect what is still in flight.
        while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(5)) {
            self.seen.push(line);
        }
        (status, self.seen)
    }

    /// Waits for a successful end and returns the output.
    fn succeed(self) -> Vec<String> {
        let name = self.name.clone();
        let (status, lines) = self.finish();
        assert!(
            status.success(),
            "{name}: {status}; it printed:\n{}",
            lines.join("\n")
        );
        lines
    }

    /// Sends SIGINT (Ctrl-C), as the example's user would, and expects a clean end.
    fn interrupt(self) -> Vec<String> {
        // Our own child, not yet reaped: its pid is still its own.
        lockkeeper_testkit::send_signal(self.child.id(), "INT");
        self.succeed()
    }
}

fn contains(lines: &[String], needle: &str) -> bool {
    lines.iter().any(|line| line.contains(needle))
}

#[test]
fn zk_mutex_runs_one_copy_at_a_time() {
    let keeper = Keeper::start();
    let connect = keeper.connect_string();
    let mut first = Example::start("zk_mutex", &[&connect]);
    first.expect("step 1/5");
    let mut second = Example::start("zk_mutex", &[&connect]);
    second.expect("busy; waiting behind");
    let first = first.succeed();
    let second = second.succeed();
    assert!(contains(&first, "released") && contains(&second, "step 5/5"));
}

#[test]
fn zk_fence_refuses_the_old_holders_late_write() {
    let keeper = Keeper::start();
    let lines = Example::start("zk_fence", &[&keeper.connect_string()]).succeed();
    assert!(
        contains(&lines, "local fence refused the old holder's write"),
        "{lines:?}"
    );
    assert!(contains(&lines, "ZooKeeper fence refused"), "{lines:?}");
    assert!(contains(&lines, "balance is 100"), "{lines:?}");
}

#[test]
fn zk_election_leads_and_leaves_on_ctrl_c() {
    let keeper = Keeper::start();
    let connect = keeper.connect_string();
    let mut leader = Example::start("zk_election", &["replica-a", &connect]);
    leader.expect("replica-a: leading, fencing token");
    let mut follower = Example::start("zk_election", &["replica-b", &connect]);
    follower.expect("replica-a leads now; queueing");
    assert!(contains(&leader.interrupt(), "left the election"));
    follower.expect("replica-b: leading, fencing token");
    follower.interrupt();
}

#[test]
fn zk_group_sees_a_member_join_and_leave() {
    let keeper = Keeper::start();
    let connect = keeper.connect_string();
    let mut a = Example::start("zk_group", &["worker-a", &connect]);
    a.expect("joined");
    let mut b = Example::start("zk_group", &["worker-b", &connect]);
    b.expect("member worker-a");
    a.expect("+ worker-b joined");
    b.interrupt();
    a.expect("- worker-b left");
    a.interrupt();
}

#[test]
fn zk_config_registers_and_follows_its_peer() {
    let keeper = Keeper::start();
    let connect = keeper.connect_string();
    let mut a = Example::start("zk_config", &[&connect, "a", "10.0.0.7:8080"]);
    a.expect("registered /examples/services/a at 10.0.0.7:8080");
    let mut b = Example::start("zk_config", &[&connect, "b", "10.0.0.8:8080"]);
    b.expect("registered /examples/services/b");
    a.expect("peer b is now at 10.0.0.8:8080");
    b.interrupt();
    a.interrupt();
}

#[test]
fn zk_counter_hands_out_order_numbers() {
    let keeper = Keeper::start();
    let lines = Example::start("zk_counter", &[&keeper.connect_string()]).succeed();
    assert!(contains(&lines, "order number 1"), "{lines:?}");
    assert!(contains(&lines, "workers"), "{lines:?}");
}

#[test]
fn zk_barrier_lets_a_round_through_together() {
    let keeper = Keeper::start();
    let connect = keeper.connect_string();
    let workers: Vec<Example> = (0..2)
        .map(|_| Example::start("zk_barrier", &["2", &connect]))
        .collect();
    for worker in workers {
        let lines = worker.succeed();
        assert!(contains(&lines, "everyone has finished"), "{lines:?}");
    }
}

#[test]
fn zk_queue_handles_every_job() {
    let keeper = Keeper::start();
    let lines = Example::start("zk_queue", &[&keeper.connect_string()]).succeed();
    assert!(
        contains(&lines, "refused once, back to the end"),
        "{lines:?}"
    );
    assert!(contains(&lines, "handled"), "{lines:?}");
}

#[test]
fn zk_two_phase_commits_when_both_sites_vote_commit() {
    let keeper = Keeper::start();
    let connect = keeper.connect_string();
    let mut east = Example::start(
        "zk_two_phase",
        &["site", "east", "commit", "tx-1", &connect],
    );
    let mut west = Example::start(
        "zk_two_phase",
        &["site", "west", "commit", "tx-1", &connect],
    );
    east.expect("waiting for tx-1");
    west.expect("waiting for tx-1");
    let coordinator = Example::start(
        "zk_two_phase",
        &["coordinator", "east,west", "tx-1", &connect],
    )
    .succeed();
    assert!(contains(&coordinator, "decided: commit"), "{coordinator:?}");
    for site in [east, west] {
        let lines = site.succeed();
        assert!(contains(&lines, ": commit"), "{lines:?}");
    }
}

#[test]
fn zk_revoke_asks_a_holder_to_let_go() {
    let keeper = Keeper::start();
    let connect = keeper.connect_string();
    let mut holder = Example::start("zk_revoke", &["hold", "5", &connect]);
    holder.expect("holding");
    let asker = Example::start("zk_revoke", &["ask", "5", &connect]).succeed();
    assert!(contains(&asker, "asked"), "{asker:?}");
    holder.expect("asked to give the lock up: releasing");
    holder.succeed();
}

#[test]
fn zk_multi_lock_transfers_both_ways_without_deadlock() {
    let keeper = Keeper::start();
    let connect = keeper.connect_string();
    let one = Example::start("zk_multi_lock", &["alice", "bob", &connect]);
    let other = Example::start("zk_multi_lock", &["bob", "alice", &connect]);
    one.succeed();
    other.succeed();
}

#[test]
fn redis_lock_runs_one_copy_at_a_time() {
    let redis = lockkeeper_testkit::RedisServer::start();
    let url = redis.url();
    let mut first = Example::start("redis_lock", &[&url]);
    first.expect("step 1/5");
    let mut second = Example::start("redis_lock", &[&url]);
    second.expect("busy; waiting for the release");
    first.succeed();
    let second = second.succeed();
    assert!(contains(&second, "released"), "{second:?}");
}

#[test]
fn redis_contention_reports_both_clients_waits() {
    // It starts its own redis-server; 3 rounds of 1 ms holds keep it short.
    let lines = Example::start("redis_contention", &["3", "1"]).succeed();
    // 8 contenders x 3 rounds on each side.
    for side in ["lockkeeper lease lock", "redis-py Lock (polling)"] {
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with(side) && l.contains(" n=24 ")),
            "{side}: {lines:?}"
        );
    }
    assert!(
        contains(&lines, "p99.9 wait: redis-py / lockkeeper ="),
        "{lines:?}"
    );
}

#[cfg(feature = "etcd")]
#[test]
fn etcd_mutex_takes_and_releases_its_lock() {
    let etcd = lockkeeper_testkit::Etcd::start();
    let lines = Example::start("etcd_mutex", &[&etcd.endpoint()]).succeed();
    assert!(contains(&lines, "released"), "{lines:?}");
}

/// An example added without a test here would go unrun: each one's name must be started above.
#[test]
fn every_example_is_run_here() {
    // This file with its whitespace removed, so a call rustfmt split over lines still reads
    // `Example::start("name"`.
    let this: String = include_str!("examples.rs")
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/examples");
    let mut unrun = Vec::new();
    for entry in std::fs::read_dir(dir).expect("the examples directory") {
        let path = entry.expect("an examples entry").path();
        let Some(name) = path.file_stem().and_then(|n| n.to_str()) else {
            continue;
        };
        if !this.contains(&format!("Example::start(\"{name}\"")) {
            unrun.push(name.to_string());
        }
    }
    assert!(unrun.is_empty(), "examples no test runs: {unrun:?}");
}
