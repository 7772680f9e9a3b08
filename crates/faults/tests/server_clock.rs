//! The wall-clock shim on real programs: a redis-server whose clock jumps forward expires a
//! key early (Redis 7.0 times expiry with the wall clock) while an unjumped server keeps it;
//! the monotonic clocks never move; the jump survives a restart of the node.

// The suite's binary owns the module; the test compiles the same file.
#[path = "../src/shim.rs"]
mod shim;

use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use lockkeeper_testkit::resp::Reply;
use lockkeeper_testkit::{NodeOptions, RedisNode};

use shim::{OFFSET_FILE_ENV, ServerClock, build_shim};

const JUMP: i64 = 60;

fn real_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("the clock is after 1970")
        .as_secs_f64()
}

/// The server's wall clock in seconds, from `TIME`.
fn server_time(node: &RedisNode) -> f64 {
    match node.command(&["TIME"]).expect("TIME") {
        Reply::Array(parts) => match parts.as_slice() {
            [Reply::Bulk(secs), Reply::Bulk(micros)] => {
                secs.parse::<f64>().expect("TIME seconds")
                    + micros.parse::<f64>().expect("TIME microseconds") / 1e6
            }
            other => panic!("TIME answered {other:?}"),
        },
        other => panic!("TIME answered {other:?}"),
    }
}

/// Polls (every 50 ms, at most `limit`) until the server's clock is `offset` seconds from
/// real time, give or take a second; returns how long that took.
fn wait_for_offset(node: &RedisNode, offset: i64, limit: Duration) -> Duration {
    let started = Instant::now();
    loop {
        let seen = server_time(node) - real_now();
        if (seen - offset as f64).abs() < 1.0 {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < limit,
            "the server's clock is {seen:.1} s from real time, not {offset} s, after {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn clock_in(dir: &tempfile::TempDir) -> ServerClock {
    ServerClock::new(dir.path().join("offset")).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn a_forward_jump_expires_a_ttl_key_early_on_the_jumped_server_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = clock_in(&dir);
    let jumped = RedisNode::start_with(clock.node_options(NodeOptions::new()));
    let plain = RedisNode::start();
    for node in [&jumped, &plain] {
        let set = node
            .command(&["SET", "k", "v", "PX", "30000"])
            .expect("SET");
        assert_eq!(set, Reply::Status("OK".into()));
    }
    wait_for_offset(&jumped, 0, Duration::from_secs(1));

    clock.jump(JUMP).expect("jump");
    let started = Instant::now();
    let mut polls = 0;
    loop {
        polls += 1;
        let reply = jumped
            .command(&["GET", "k"])
            .expect("GET on the jumped server");
        if reply == Reply::Nil {
            break;
        }
        assert_eq!(reply, Reply::Bulk("v".into()));
        assert!(
            started.elapsed() < Duration::from_secs(3) && polls < 100,
            "the key outlived a {JUMP} s jump for {:?}",
            started.elapsed()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let gone_after = started.elapsed();
    assert_eq!(
        plain
            .command(&["GET", "k"])
            .expect("GET on the plain server"),
        Reply::Bulk("v".into()),
        "the unjumped server lost the key"
    );
    let seen = server_time(&jumped) - real_now();
    assert!(
        (seen - JUMP as f64).abs() < 1.0,
        "the jumped server's clock is {seen:.2} s ahead"
    );
    eprintln!("key gone {gone_after:?} after the jump; server clock {seen:.2} s ahead");

    clock.jump(0).expect("jump back");
    let back_after = wait_for_offset(&jumped, 0, Duration::from_secs(3));
    eprintln!("clock back to real time {back_after:?} after the jump back");
    assert_eq!(
        jumped.command(&["PING"]).expect("PING"),
        Reply::Status("PONG".into())
    );
    let set = jumped
        .command(&["SET", "x", "y", "PX", "30000"])
        .expect("SET");
    assert_eq!(set, Reply::Status("OK".into()));
    match jumped.command(&["PTTL", "x"]).expect("PTTL") {
        Reply::Int(ttl) => assert!(
            (25_000..=30_000).contains(&ttl),
            "a fresh 30 s key has PTTL {ttl} ms"
        ),
        other => panic!("PTTL answered {other:?}"),
    }
}

#[test]
fn a_restarted_node_still_follows_the_clock() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = clock_in(&dir);
    let node = RedisNode::start_with(clock.node_options(NodeOptions::new()));
    clock.jump(-JUMP).expect("jump");
    wait_for_offset(&node, -JUMP, Duration::from_secs(3));
    node.restart();
    // A fresh process reads the file at its first clock call: no wait needed.
    wait_for_offset(&node, -JUMP, Duration::from_millis(1));
}

/// What a Python process under the clock sees: wall (REALTIME), REALTIME_COARSE (5),
/// MONOTONIC and BOOTTIME (7), in seconds.
fn clocks_under(clock: &ServerClock) -> [f64; 4] {
    let mut python = Command::new("python3");
    python.args([
        "-c",
        "import time; print(time.time(), time.clock_gettime(5), \
         time.clock_gettime(time.CLOCK_MONOTONIC), time.clock_gettime(7))",
    ]);
    clock.apply(&mut python);
    let output = python.output().expect("run python3");
    assert!(output.status.success(), "python3: {output:?}");
    let text = String::from_utf8(output.stdout).expect("python3 prints text");
    let values: Vec<f64> = text
        .split_whitespace()
        .map(|v| v.parse().expect("a number"))
        .collect();
    values.try_into().expect("four clocks")
}

fn raw_clock(id: libc::clockid_t) -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    assert_eq!(unsafe { libc::clock_gettime(id, &mut ts) }, 0);
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

#[test]
fn only_the_wall_clocks_move() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = clock_in(&dir);
    clock.jump(JUMP).expect("jump");
    let (mono_before, boot_before, wall_before) = (
        raw_clock(libc::CLOCK_MONOTONIC),
        raw_clock(libc::CLOCK_BOOTTIME),
        real_now(),
    );
    let [wall, coarse, mono, boot] = clocks_under(&clock);
    let (mono_after, boot_after, wall_after) = (
        raw_clock(libc::CLOCK_MONOTONIC),
        raw_clock(libc::CLOCK_BOOTTIME),
        real_now(),
    );
    // The coarse clock lags by up to a tick (a few ms).
    let shifted = (wall_before + JUMP as f64 - 0.05)..=(wall_after + JUMP as f64);
    assert!(
        shifted.contains(&wall),
        "REALTIME {wall} not in {shifted:?}"
    );
    assert!(
        shifted.contains(&coarse),
        "REALTIME_COARSE {coarse} not in {shifted:?}"
    );
    assert!(
        (mono_before..=mono_after).contains(&mono),
        "MONOTONIC {mono} moved (real {mono_before}..{mono_after})"
    );
    assert!(
        (boot_before..=boot_after).contains(&boot),
        "BOOTTIME {boot} moved (real {boot_before}..{boot_after})"
    );

    // A malformed file is ignored: a fresh process stays on real time.
    std::fs::write(dir.path().join("offset"), "sixty\n").expect("write");
    let before = real_now();
    let [wall, ..] = clocks_under(&clock);
    assert!(
        (before..=real_now()).contains(&wall),
        "a malformed file moved the clock to {wall} (real {before})"
    );
}

#[test]
fn a_failed_build_names_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("gone");
    let error = build_shim(&missing).expect_err("no such directory");
    assert!(error.contains("gone/wallclock.c"), "{error}");
    assert_eq!(OFFSET_FILE_ENV, "LOCKKEEPER_WALLCLOCK_FILE");
}
