//! `lockkeeper inspect` and `lockkeeper revoke --force` on Redis locks of every kind, as
//! operators run them (the built binary) against a real `redis-server`: semaphore permits held
//! by two `lockkeeper lock --semaphore 2` processes and a third one waiting, read-write locks
//! held by readers (and a writer waiting) or by a writer.
//!
//! Each test checks what the command printed against what the holders know of themselves, and
//! what a forced revocation did on the holder's side (its command sees the loss and exits, the
//! permits or keys are gone). Every wait is for a condition, bounded by a generous deadline.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::channel;
use std::time::{Duration, Instant};

use lockkeeper::redis::Redis;
use lockkeeper_testkit::RedisServer;
use serde_json::Value;

const LOCKKEEPER: &str = env!("CARGO_BIN_EXE_lockkeeper");
/// Bound on one command run and on any condition a test waits for.
const LIMIT: Duration = Duration::from_secs(60);

/// What one run of the command left: exit code, stdout, stderr.
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs `lockkeeper ARGS` to its end (bounded by [`LIMIT`]).
fn lockkeeper(args: &[&str]) -> Run {
    let mut child = Command::new(LOCKKEEPER)
        .args(args)
        .env_remove("LOCKKEEPER_BACKEND")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start lockkeeper");
    let deadline = Instant::now() + LIMIT;
    while child.try_wait().expect("wait for lockkeeper").is_none() {
        if Instant::now() >= deadline {
            let _ = child.kill();
            panic!("lockkeeper {args:?} still running after {LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let output = child.wait_with_output().expect("lockkeeper's output");
    Run {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// `inspect --json NAME`, parsed.
fn inspect_json(backend: &str, name: &str) -> Value {
    let run = lockkeeper(&["inspect", "--backend", backend, "--json", name]);
    assert_eq!(run.code, Some(0), "inspect --json: {}", run.stderr);
    serde_json::from_str(run.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {}", run.stdout))
}

fn count(json: &Value, field: &str) -> usize {
    json[field].as_array().map_or(0, Vec::len)
}

/// Waits (bounded) until `inspect --json NAME` satisfies `cond`; the last inspection.
fn inspect_until(backend: &str, name: &str, what: &str, cond: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + LIMIT;
    loop {
        let json = inspect_json(backend, name);
        if cond(&json) {
            return json;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not within {LIMIT:?}: {json}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `lockkeeper lock --backend URL ARGS` with no command: it holds until stopped.
fn holder(backend: &str, args: &[&str]) -> Child {
    Command::new(LOCKKEEPER)
        .arg("lock")
        .arg("--backend")
        .arg(backend)
        .args(args)
        .env_remove("LOCKKEEPER_BACKEND")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the holder")
}

/// The fencing token a holder prints once it holds (waits at most [`LIMIT`]).
fn printed_token(holder: &mut Child) -> u64 {
    let stdout = holder.stdout.take().expect("piped stdout");
    let (sender, lines) = channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = sender.send(line);
    });
    let line = lines
        .recv_timeout(LIMIT)
        .expect("the holder prints its token");
    line.trim()
        .parse()
        .unwrap_or_else(|_| panic!("not a token: {line:?}"))
}

/// Waits (bounded) for `holder` to exit: its exit code.
fn exits(holder: &mut Child, what: &str) -> Option<i32> {
    let deadline = Instant::now() + LIMIT;
    loop {
        if let Some(status) = holder.try_wait().expect("wait for the holder") {
            return status.code();
        }
        assert!(Instant::now() < deadline, "{what}: still running");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Stops a holder that is still running (test clean-up).
struct Stop(Vec<Child>);

impl Drop for Stop {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[test]
fn two_semaphore_holders_and_a_waiter_are_shown_and_forced() {
    let server = RedisServer::start();
    let backend = server.url();
    let mut first = holder(&backend, &["--semaphore", "2", "sem"]);
    let a = printed_token(&mut first);
    let mut second = holder(&backend, &["--semaphore", "2", "sem"]);
    let b = printed_token(&mut second);
    let mut stop = Stop(vec![first, second]);

    let json = inspect_json(&backend, "sem");
    assert_eq!(count(&json, "holders"), 2, "both permit holders: {json}");
    for held in json["holders"].as_array().into_iter().flatten() {
        assert_eq!(held["kind"], "permit", "{json}");
        assert_eq!(held["key"], "lockkeeper:semaphore:{sem}", "{json}");
        assert!(held["ttl_ms"].as_i64().is_some_and(|ms| ms > 0), "{json}");
    }
    assert_eq!(json["kinds"], serde_json::json!(["semaphore"]), "{json}");
    // A permit's own token is not kept on the server; the counter's last one bounds it.
    assert_eq!(json["holders"][0]["latest_token"], a.max(b), "{json}");
    assert_eq!(json["holders"][0]["token"], Value::Null, "{json}");
    let table = lockkeeper(&["inspect", "--backend", &backend, "sem"]);
    assert_eq!(table.code, Some(0), "{}", table.stderr);
    assert!(table.stdout.contains("2 holding"), "{}", table.stdout);
    assert_eq!(
        table.stdout.matches("permit").count(),
        2,
        "{}",
        table.stdout
    );

    // A third holder waits: it is in the semaphore's waiting line.
    stop.0.push(holder(&backend, &["--semaphore", "2", "sem"]));
    let json = inspect_until(&backend, "sem", "the third holder waits", |j| {
        count(j, "waiters") == 1
    });
    assert_eq!(json["waiters"][0]["kind"], "permit", "{json}");
    assert_eq!(count(&json, "holders"), 2, "{json}");

    // Forced: both holders lose their permits and stop; the waiter gets one.
    let forced = lockkeeper(&[
        "revoke",
        "--backend",
        &backend,
        "--force",
        "--grace",
        "100ms",
        "sem",
    ]);
    assert_eq!(forced.code, Some(0), "{}", forced.stderr);
    assert_eq!(
        forced.stdout.matches("deleted after").count(),
        2,
        "{}",
        forced.stdout
    );
    assert!(!forced.stdout.contains("nobody holds"), "{}", forced.stdout);
    assert_ne!(exits(&mut stop.0[0], "the first holder"), Some(0));
    assert_ne!(exits(&mut stop.0[1], "the second holder"), Some(0));
    let json = inspect_until(&backend, "sem", "the waiter holds", |j| {
        count(j, "holders") == 1 && count(j, "waiters") == 0
    });
    assert_eq!(json["holders"][0]["kind"], "permit", "{json}");
}

#[test]
fn rwlock_readers_and_a_waiting_writer_are_shown_and_forced() {
    let server = RedisServer::start();
    let backend = server.url();
    let mut reader = holder(&backend, &["--read", "rw"]);
    printed_token(&mut reader);
    let mut stop = Stop(vec![reader]);
    let mut other = holder(&backend, &["--read", "rw"]);
    printed_token(&mut other);
    stop.0.push(other);
    let mut writer = holder(&backend, &["--write", "rw"]);
    let json = inspect_until(&backend, "rw", "the writer waits", |j| {
        count(j, "waiters") == 1
    });
    assert_eq!(count(&json, "holders"), 2, "{json}");
    assert_eq!(json["holders"][0]["kind"], "read", "{json}");
    assert_eq!(json["waiters"][0]["kind"], "write", "{json}");
    assert_eq!(json["kinds"], serde_json::json!(["rwlock"]), "{json}");

    let forced = lockkeeper(&[
        "revoke",
        "--backend",
        &backend,
        "--force",
        "--grace",
        "100ms",
        "rw",
    ]);
    assert_eq!(forced.code, Some(0), "{}", forced.stderr);
    assert_eq!(
        forced.stdout.matches("deleted after").count(),
        2,
        "{}",
        forced.stdout
    );
    assert_ne!(exits(&mut stop.0[0], "the first reader"), Some(0));
    assert_ne!(exits(&mut stop.0[1], "the second reader"), Some(0));
    // The writer gets the lock; revoking it takes it away too.
    let token = printed_token(&mut writer);
    stop.0.push(writer);
    let json = inspect_until(&backend, "rw", "the writer holds", |j| {
        count(j, "holders") == 1
    });
    assert_eq!(json["holders"][0]["kind"], "write", "{json}");
    assert_eq!(json["holders"][0]["token"], token, "{json}");
    let forced = lockkeeper(&[
        "revoke",
        "--backend",
        &backend,
        "--force",
        "--grace",
        "100ms",
        "rw",
    ]);
    assert_eq!(forced.code, Some(0), "{}", forced.stderr);
    assert!(forced.stdout.contains("deleted after"), "{}", forced.stdout);
    assert_ne!(exits(&mut stop.0[2], "the writer"), Some(0));
    inspect_until(&backend, "rw", "nobody holds", |j| count(j, "holders") == 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reentrant_holder_is_shown_with_its_count() {
    let server = RedisServer::start();
    let backend = server.url();
    let redis = Redis::connect(&server.url()).await.expect("connect");
    let lock = redis.reentrant_lock("re");
    let outer = lock.lock().await.expect("lock");
    let inner = lock.lock().await.expect("re-enter");
    let json = tokio::task::spawn_blocking({
        let backend = backend.clone();
        move || inspect_json(&backend, "re")
    })
    .await
    .expect("inspect");
    assert_eq!(count(&json, "holders"), 1, "{json}");
    assert_eq!(json["holders"][0]["kind"], "reentrant", "{json}");
    assert_eq!(json["holders"][0]["value"], redis.owner_id(), "{json}");
    assert_eq!(json["holders"][0]["count"], 2, "{json}");
    assert_eq!(json["holders"][0]["token"], outer.fencing_token().get());
    inner.release().await.expect("release");
    outer.release().await.expect("release");
}
