//! `lockkeeper lock` as an operator runs it: the built binary as real processes against Keeper,
//! Apache ZooKeeper, redis-server (single and Sentinel) and Curator's `InterProcessMutex`.
//!
//! What is pinned: mutual exclusion among concurrent `lockkeeper lock` processes and Curator
//! holders (an O_EXCL marker file that two holders at once would collide on), that a holder
//! frozen past its session or lease has its command's whole process group stopped and exits 76
//! when it runs again, SIGKILL after `--kill-after` for a command that ignores SIGTERM, the
//! exit codes, signal forwarding, cooperative revocation and hold-without-command.
//!
//! Every wait is bounded: a process that does not finish in time is killed (by its PID) and the
//! test fails with what it printed.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

use lockkeeper_testkit::{
    ApacheZk, Keeper, RedisCluster, RedisSentinel, RedisServer, TestServer, backend_enabled, both,
    compile_java, curator_classpath, java,
};

const BIN: &str = env!("CARGO_BIN_EXE_lockkeeper");

/// How long any single `lockkeeper lock` run may take before the test gives up on it.
const RUN_LIMIT: Duration = Duration::from_secs(60);

/// `lockkeeper lock --backend URL ARGS...`, output piped.
fn lock_command(backend: &str, args: &[&str]) -> Command {
    let mut command = Command::new(BIN);
    command
        .arg("lock")
        .arg("--backend")
        .arg(backend)
        .args(args)
        .env_remove("LOCKKEEPER_BACKEND")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// Runs `lockkeeper lock` to its end within `limit`: its output.
fn run_lock(backend: &str, args: &[&str], limit: Duration) -> Output {
    let child = lock_command(backend, args)
        .spawn()
        .expect("start lockkeeper");
    finish(child, limit, &format!("lockkeeper lock {}", args.join(" ")))
}

/// Waits at most `limit` for `child`; kills it and fails the test past it.
fn finish(mut child: Child, limit: Duration, label: &str) -> Output {
    let deadline = Instant::now() + limit;
    loop {
        match child.try_wait().expect("wait for a child") {
            Some(_) => return child.wait_with_output().expect("collect output"),
            None if Instant::now() >= deadline => {
                let _ = child.kill();
                let output = child.wait_with_output().expect("collect output");
                panic!(
                    "{label}: still running after {limit:?}\n{}",
                    describe(&output)
                );
            }
            None => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

fn describe(output: &Output) -> String {
    format!(
        "status {:?}\n--- stdout:\n{}--- stderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

fn code(output: &Output) -> i32 {
    output
        .status
        .code()
        .unwrap_or_else(|| panic!("ended by a signal\n{}", describe(output)))
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn zk_url(server: &dyn lockkeeper_testkit::TestServer) -> String {
    format!("zk://{}", server.connect_string())
}

fn signal(pid: u32, signal: libc::c_int) {
    // SAFETY: kill(2) with plain integers, to a process this test started.
    assert_eq!(unsafe { libc::kill(pid as i32, signal) }, 0, "signal {pid}");
}

/// Whether `pid` is still a live process (a zombie is not: it has ended).
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat.rsplit_once(')').map(|(_, rest)| rest.trim_start());
            !matches!(state.and_then(|s| s.chars().next()), Some('Z' | 'X'))
        }
        Err(_) => false,
    }
}

/// Waits at most `limit` for `cond`.
fn eventually(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    cond()
}

/// The pid a command wrote to `file`, waiting at most 20 s for it to appear.
fn pid_in(file: &Path) -> u32 {
    let mut pid = None;
    let found = eventually(Duration::from_secs(20), || {
        pid = std::fs::read_to_string(file)
            .ok()
            .and_then(|text| text.trim().parse().ok());
        pid.is_some()
    });
    assert!(found, "no pid written to {}", file.display());
    pid.unwrap_or_default()
}

/// The shell command every contender runs under the lock: create the marker exclusively
/// (failing means another holder is inside: exit 99), append the fencing token, hold briefly,
/// remove the marker.
const CRITICAL_SECTION: &str = r#"if (set -C; : > "$1") 2>/dev/null; then
    echo "$LOCKKEEPER_FENCING_TOKEN" >> "$2"; sleep 0.02; rm -f "$1"
else exit 99; fi"#;

/// `processes` threads each running `lockkeeper lock NAME -- sh -c CRITICAL_SECTION` `rounds`
/// times: how many runs found another holder inside. Every run must end 0 or 99.
fn contend(backend: &str, name: &str, dir: &Path, processes: usize, rounds: usize) -> usize {
    let marker = dir.join("marker");
    let tokens = dir.join("tokens");
    let threads: Vec<_> = (0..processes)
        .map(|_| {
            let (backend, name) = (backend.to_string(), name.to_string());
            let (marker, tokens) = (marker.clone(), tokens.clone());
            std::thread::spawn(move || {
                let mut overlaps = 0;
                for _ in 0..rounds {
                    let args = [
                        "--timeout",
                        "50s",
                        &name,
                        "--",
                        "sh",
                        "-c",
                        CRITICAL_SECTION,
                        "sh",
                        marker.to_str().expect("utf-8 path"),
                        tokens.to_str().expect("utf-8 path"),
                    ];
                    let output = run_lock(&backend, &args, RUN_LIMIT);
                    match code(&output) {
                        0 => {}
                        99 => overlaps += 1,
                        _ => panic!("a contender failed\n{}", describe(&output)),
                    }
                }
                overlaps
            })
        })
        .collect();
    threads
        .into_iter()
        .map(|t| t.join().expect("contender thread"))
        .sum()
}

/// The tokens the contenders appended, in the order they held the lock.
fn tokens_in_order(dir: &Path) -> Vec<u64> {
    std::fs::read_to_string(dir.join("tokens"))
        .unwrap_or_default()
        .lines()
        .map(|line| line.parse().expect("a numeric fencing token"))
        .collect()
}

fn assert_strictly_increasing(tokens: &[u64], label: &str) {
    for pair in tokens.windows(2) {
        assert!(
            pair[0] < pair[1],
            "{label}: tokens not strictly increasing: {tokens:?}"
        );
    }
}

#[test]
fn six_processes_never_overlap_on_zookeeper_and_keeper() {
    for server in both() {
        let dir = tempfile::tempdir().expect("tempdir");
        let started = Instant::now();
        let overlaps = contend(&zk_url(&*server), "/locks/nightly", dir.path(), 6, 5);
        assert_eq!(overlaps, 0, "{}", server.name());
        let tokens = tokens_in_order(dir.path());
        assert_eq!(tokens.len(), 30, "{}", server.name());
        assert_strictly_increasing(&tokens, server.name());
        eprintln!(
            "{}: 30 runs of 6 processes in {:?}",
            server.name(),
            started.elapsed()
        );
    }
}

#[test]
fn six_processes_never_overlap_on_redis() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let started = Instant::now();
    let overlaps = contend(&redis.url(), "nightly", dir.path(), 6, 5);
    assert_eq!(overlaps, 0);
    let tokens = tokens_in_order(dir.path());
    assert_eq!(tokens.len(), 30);
    assert_strictly_increasing(&tokens, "redis");
    eprintln!("redis: 30 runs of 6 processes in {:?}", started.elapsed());
}

/// The Java programs in `tests/curator/`, compiled once per test process.
fn classes_dir() -> &'static Path {
    static CLASSES: OnceLock<PathBuf> = OnceLock::new();
    CLASSES.get_or_init(|| {
        compile_java(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/curator"),
            Path::new(env!("CARGO_TARGET_TMPDIR")),
            "cli-curator",
        )
    })
}

/// A Curator `InterProcessMutex` holder (`tests/curator/MutexHolder.java`), killed on drop.
struct CuratorHolder {
    child: Child,
    lines: Receiver<String>,
}

impl CuratorHolder {
    fn start(connect: &str, path: &str, rounds: usize, marker: &Path) -> CuratorHolder {
        let classpath = format!("{}:{}", classes_dir().display(), curator_classpath());
        let mut child = Command::new(java())
            .args(["-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"])
            .arg("-cp")
            .arg(classpath)
            .arg("MutexHolder")
            .args([connect, path, &rounds.to_string()])
            .arg(marker)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start java");
        let stdout = child.stdout.take().expect("piped stdout");
        let (sender, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        CuratorHolder { child, lines }
    }

    fn expect(&mut self, prefix: &str, limit: Duration) -> String {
        let line = self
            .lines
            .recv_timeout(limit)
            .unwrap_or_else(|e| panic!("Curator holder: no line within {limit:?}: {e}"));
        assert!(line.starts_with(prefix), "Curator holder said {line:?}");
        line
    }

    fn go(&mut self) {
        use std::io::Write;
        let stdin = self.child.stdin.as_mut().expect("piped stdin");
        writeln!(stdin, "go")
            .and_then(|()| stdin.flush())
            .expect("write go");
    }
}

impl Drop for CuratorHolder {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn curator_mutex_holders_and_lockkeeper_exclude_each_other() {
    for server in both() {
        let dir = tempfile::tempdir().expect("tempdir");
        let marker = dir.path().join("marker");
        let mut curators: Vec<CuratorHolder> = (0..2)
            .map(|_| CuratorHolder::start(&server.connect_string(), "/locks/mixed", 10, &marker))
            .collect();
        for curator in &mut curators {
            curator.expect("READY", Duration::from_secs(60));
        }
        for curator in &mut curators {
            curator.go();
        }
        let overlaps = contend(&zk_url(&*server), "/locks/mixed", dir.path(), 4, 5);
        assert_eq!(
            overlaps,
            0,
            "{}: lockkeeper saw a holder inside",
            server.name()
        );
        for curator in &mut curators {
            let done = curator.expect("DONE", Duration::from_secs(90));
            assert_eq!(
                done,
                "DONE 10 0",
                "{}: Curator saw a holder inside",
                server.name()
            );
        }
        assert_eq!(tokens_in_order(dir.path()).len(), 20, "{}", server.name());
    }
}

/// The command of the loss tests: writes its pid and a grandchild's, then waits for it.
const PARENT_OF_SLEEPER: &str =
    r#"echo $$ > "$1/child.pid"; sleep 300 & echo $! > "$1/grandchild.pid"; wait"#;

/// Freezes the holder past its session or lease, lets another process take the lock, thaws
/// it: its command and the command's own child must be gone, and it exits 76.
fn loss_by_freezing(backend: &str, name: &str, session_timeout: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let dir_arg = dir.path().to_str().expect("utf-8 path");
    let holder = lock_command(
        backend,
        &[
            "--session-timeout",
            session_timeout,
            "--kill-after",
            "3s",
            name,
            "--",
            "sh",
            "-c",
            PARENT_OF_SLEEPER,
            "sh",
            dir_arg,
        ],
    )
    .spawn()
    .expect("start the holder");
    let child = pid_in(&dir.path().join("child.pid"));
    let grandchild = pid_in(&dir.path().join("grandchild.pid"));
    signal(holder.id(), libc::SIGSTOP);
    // The other waits until the backend gives the frozen holder's lock away.
    let other = run_lock(
        backend,
        &["--timeout", "40s", name, "--", "true"],
        RUN_LIMIT,
    );
    assert_eq!(
        code(&other),
        0,
        "{backend}: the lock never came free\n{}",
        describe(&other)
    );
    assert!(
        alive(child),
        "{backend}: the command ended while its holder was frozen"
    );
    signal(holder.id(), libc::SIGCONT);
    let thawed = Instant::now();
    let output = finish(holder, Duration::from_secs(20), "the thawed holder");
    eprintln!(
        "{backend}: exited {:?} after SIGCONT: {}",
        thawed.elapsed(),
        stderr(&output).trim()
    );
    assert_eq!(code(&output), 76, "{backend}\n{}", describe(&output));
    assert!(stderr(&output).contains("lost"), "{}", describe(&output));
    // Both die of SIGTERM: no SIGKILL, and no waiting out the 3 s grace for them.
    assert!(
        stderr(&output).contains("the command was stopped, its exit code 143"),
        "{}",
        describe(&output)
    );
    assert!(thawed.elapsed() < Duration::from_secs(2), "{backend}");
    assert!(
        eventually(Duration::from_secs(2), || !alive(child)
            && !alive(grandchild)),
        "{backend}: child {child} alive {}, grandchild {grandchild} alive {}",
        alive(child),
        alive(grandchild)
    );
}

#[test]
fn a_holder_frozen_past_its_session_stops_its_command_on_zookeeper_and_keeper() {
    for server in both() {
        // Both test servers tick every 2 s, so 4 s is the shortest session they grant.
        loss_by_freezing(&zk_url(&*server), "/locks/frozen", "4s");
    }
}

#[test]
fn a_holder_frozen_past_its_lease_stops_its_command_on_redis() {
    let redis = RedisServer::start();
    loss_by_freezing(&redis.url(), "frozen", "2s");
}

/// A holder on `name` running `script`, once its command has written `child.pid` into `dir`.
fn holder_running(
    backend: &str,
    name: &str,
    dir: &Path,
    extra: &[&str],
    script: &str,
) -> (Child, u32) {
    let mut args = extra.to_vec();
    args.extend([
        name,
        "--",
        "sh",
        "-c",
        script,
        "sh",
        dir.to_str().expect("utf-8 path"),
    ]);
    let holder = lock_command(backend, &args)
        .spawn()
        .expect("start the holder");
    let child = pid_in(&dir.join("child.pid"));
    (holder, child)
}

/// The only holder node of the lock at `path`.
fn holder_node(
    session: &lockkeeper::zk::Session,
    rt: &tokio::runtime::Runtime,
    path: &str,
) -> String {
    let inspection = rt.block_on(session.inspect(path)).expect("inspect");
    let holders: Vec<_> = inspection.holders().map(|p| p.path.clone()).collect();
    assert_eq!(holders.len(), 1, "{holders:?}");
    holders[0].clone()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

#[test]
fn a_revocation_request_stops_the_command_and_releases() {
    let rt = runtime();
    for server in both() {
        let backend = zk_url(&*server);
        let dir = tempfile::tempdir().expect("tempdir");
        let script = r#"echo $$ > "$1/child.pid"; exec sleep 300"#;
        let (holder, child) = holder_running(&backend, "/locks/revoked", dir.path(), &[], script);
        let session = rt
            .block_on(lockkeeper::zk::Session::connect(&server.connect_string()))
            .expect("connect");
        let node = holder_node(&session, &rt, "/locks/revoked");
        assert!(
            rt.block_on(session.request_revocation(&node))
                .expect("revoke")
        );
        let output = finish(holder, Duration::from_secs(20), "the revoked holder");
        assert_eq!(
            code(&output),
            76,
            "{}\n{}",
            server.name(),
            describe(&output)
        );
        assert!(
            stderr(&output).contains("revocation requested"),
            "{}",
            describe(&output)
        );
        assert!(
            !alive(child),
            "{}: the command outlived the revocation",
            server.name()
        );
        let next = run_lock(
            &backend,
            &["--try", "/locks/revoked", "--", "true"],
            RUN_LIMIT,
        );
        assert_eq!(
            code(&next),
            0,
            "{}: not released\n{}",
            server.name(),
            describe(&next)
        );
        rt.block_on(session.close());
    }
}

#[test]
fn a_command_ignoring_sigterm_is_killed_after_kill_after() {
    let rt = runtime();
    for server in both() {
        let backend = zk_url(&*server);
        let dir = tempfile::tempdir().expect("tempdir");
        let script = r#"trap "" TERM; echo $$ > "$1/child.pid"; while :; do sleep 0.1; done"#;
        let (holder, child) = holder_running(
            &backend,
            "/locks/stubborn",
            dir.path(),
            &["--kill-after", "1500ms"],
            script,
        );
        let session = rt
            .block_on(lockkeeper::zk::Session::connect(&server.connect_string()))
            .expect("connect");
        let node = holder_node(&session, &rt, "/locks/stubborn");
        let asked = Instant::now();
        assert!(
            rt.block_on(session.request_revocation(&node))
                .expect("revoke")
        );
        let output = finish(holder, Duration::from_secs(20), "the stubborn holder");
        let took = asked.elapsed();
        assert_eq!(
            code(&output),
            76,
            "{}\n{}",
            server.name(),
            describe(&output)
        );
        assert!(stderr(&output).contains("SIGKILL"), "{}", describe(&output));
        assert!(
            took >= Duration::from_millis(1500),
            "{}: killed after {took:?}",
            server.name()
        );
        assert!(
            took < Duration::from_secs(10),
            "{}: killed after {took:?}",
            server.name()
        );
        assert!(
            !alive(child),
            "{}: the command survived SIGKILL",
            server.name()
        );
        rt.block_on(session.close());
    }
}

#[test]
fn sigterm_reaches_the_command_and_the_lock_is_released() {
    for server in both() {
        let backend = zk_url(&*server);
        let dir = tempfile::tempdir().expect("tempdir");
        // Exits 3 on SIGTERM, which must reach it through lockkeeper.
        let script = r#"trap 'echo TERM > "$1/got"; exit 3' TERM; echo $$ > "$1/child.pid"; while :; do sleep 0.1; done"#;
        let (holder, _child) = holder_running(&backend, "/locks/term", dir.path(), &[], script);
        signal(holder.id(), libc::SIGTERM);
        let output = finish(holder, Duration::from_secs(20), "the signalled holder");
        assert_eq!(code(&output), 3, "{}\n{}", server.name(), describe(&output));
        assert!(
            dir.path().join("got").is_file(),
            "{}: the trap did not run",
            server.name()
        );
        let next = run_lock(&backend, &["--try", "/locks/term", "--", "true"], RUN_LIMIT);
        assert_eq!(
            code(&next),
            0,
            "{}: not released\n{}",
            server.name(),
            describe(&next)
        );
    }
}

/// Starts `lockkeeper lock NAME` with no command and reads the token it prints.
fn hold(backend: &str, args: &[&str]) -> (Child, u64) {
    let mut holder = lock_command(backend, args)
        .spawn()
        .expect("start the holder");
    let stdout = holder.stdout.take().expect("piped stdout");
    let (sender, lines) = channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = sender.send(line);
    });
    let line = lines
        .recv_timeout(Duration::from_secs(30))
        .expect("the holder prints its token");
    let token = line
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("not a token: {line:?}"));
    (holder, token)
}

/// Exit codes and hold-without-command on one backend.
fn exit_codes(backend: &str, name: &str) {
    let passthrough = run_lock(backend, &[name, "--", "sh", "-c", "exit 7"], RUN_LIMIT);
    assert_eq!(
        code(&passthrough),
        7,
        "{backend}\n{}",
        describe(&passthrough)
    );
    let signalled = run_lock(backend, &[name, "--", "sh", "-c", "kill -9 $$"], RUN_LIMIT);
    assert_eq!(code(&signalled), 137, "{backend}\n{}", describe(&signalled));
    let missing = run_lock(backend, &[name, "--", "/nonexistent/command"], RUN_LIMIT);
    assert_eq!(code(&missing), 70, "{backend}\n{}", describe(&missing));
    assert!(
        stderr(&missing).contains("/nonexistent/command"),
        "{}",
        describe(&missing)
    );

    let (holder, token) = hold(backend, &[name]);
    assert!(token > 0, "{backend}: token {token}");
    let tried = run_lock(backend, &["--try", name, "--", "true"], RUN_LIMIT);
    assert_eq!(code(&tried), 75, "{backend}\n{}", describe(&tried));
    let started = Instant::now();
    let timed = run_lock(
        backend,
        &["--timeout", "700ms", name, "--", "true"],
        RUN_LIMIT,
    );
    assert_eq!(code(&timed), 75, "{backend}\n{}", describe(&timed));
    assert!(started.elapsed() >= Duration::from_millis(700), "{backend}");
    assert!(
        stderr(&timed).contains("not acquired within"),
        "{}",
        describe(&timed)
    );
    // A waiter interrupted while queued exits 128 + 2 and leaves no place behind: the `--try`
    // after the release below would find it ahead in the queue.
    let waiter = lock_command(backend, &[name, "--", "true"])
        .spawn()
        .expect("start a waiter");
    std::thread::sleep(Duration::from_secs(1));
    signal(waiter.id(), libc::SIGINT);
    let interrupted = finish(waiter, Duration::from_secs(20), "the interrupted waiter");
    assert_eq!(
        code(&interrupted),
        130,
        "{backend}\n{}",
        describe(&interrupted)
    );
    assert!(
        stderr(&interrupted).contains("interrupted while waiting"),
        "{}",
        describe(&interrupted)
    );
    signal(holder.id(), libc::SIGTERM);
    let held = finish(holder, Duration::from_secs(20), "the holder");
    assert_eq!(code(&held), 0, "{backend}\n{}", describe(&held));
    let after = run_lock(
        backend,
        &[
            "--try",
            name,
            "--",
            "sh",
            "-c",
            "echo $LOCKKEEPER_FENCING_TOKEN",
        ],
        RUN_LIMIT,
    );
    assert_eq!(
        code(&after),
        0,
        "{backend}: not released\n{}",
        describe(&after)
    );
    let next: u64 = String::from_utf8_lossy(&after.stdout)
        .trim()
        .parse()
        .expect("token");
    assert!(next > token, "{backend}: token {next} after {token}");
}

#[test]
fn exit_codes_on_zookeeper_and_keeper() {
    for server in both() {
        exit_codes(&zk_url(&*server), "/locks/codes");
    }
}

#[test]
fn exit_codes_on_redis() {
    let redis = RedisServer::start();
    exit_codes(&redis.url(), "codes");
}

#[test]
fn usage_errors_exit_64_and_an_unreachable_backend_69() {
    let limit = Duration::from_secs(20);
    let bad_flag = run_lock("zk://127.0.0.1:1", &["--no-such-flag", "/x"], limit);
    assert_eq!(code(&bad_flag), 64, "{}", describe(&bad_flag));
    for (url, says) in [
        ("zk://127.0.0.1:notaport", "not a port number"),
        ("127.0.0.1:2181", "no scheme"),
        ("http://127.0.0.1:80", "unknown scheme"),
        ("redis+sentinel://127.0.0.1:1", "master's name"),
    ] {
        let output = run_lock(url, &["/x", "--", "true"], limit);
        assert_eq!(code(&output), 64, "{url}\n{}", describe(&output));
        let text = stderr(&output);
        assert!(text.contains(says) && text.contains(url), "{url}: {text}");
        assert_eq!(
            text.trim().lines().count(),
            1,
            "{url}: not one line: {text}"
        );
    }
    let no_leases = run_lock("zk://127.0.0.1:1", &["--semaphore", "0", "/x"], limit);
    assert_eq!(code(&no_leases), 64, "{}", describe(&no_leases));

    let port = lockkeeper_testkit::free_port();
    for url in [
        format!("zk://127.0.0.1:{port}"),
        format!("redis://127.0.0.1:{port}"),
    ] {
        let started = Instant::now();
        let output = run_lock(
            &url,
            &["--connect-timeout", "1s", "/x", "--", "true"],
            limit,
        );
        let took = started.elapsed();
        assert_eq!(code(&output), 69, "{url}\n{}", describe(&output));
        assert!(
            stderr(&output).contains(&format!("127.0.0.1:{port}")),
            "{}",
            describe(&output)
        );
        assert!(took < Duration::from_secs(4), "{url}: took {took:?}");
    }
}

#[test]
fn a_bad_lock_path_is_a_usage_error() {
    for server in both() {
        let output = run_lock(
            &zk_url(&*server),
            &["locks/relative", "--", "true"],
            RUN_LIMIT,
        );
        assert_eq!(
            code(&output),
            64,
            "{}\n{}",
            server.name(),
            describe(&output)
        );
        assert!(
            stderr(&output).contains("locks/relative"),
            "{}",
            describe(&output)
        );
    }
}

/// `--semaphore 2` admits two holders and turns the third away; `--read` admits readers
/// together and turns a writer away.
fn shared_kinds(backend: &str, semaphore: &str, rw: &str) {
    let (first, _) = hold(backend, &["--semaphore", "2", semaphore]);
    let (second, _) = hold(backend, &["--semaphore", "2", semaphore]);
    let third = run_lock(
        backend,
        &["--try", "--semaphore", "2", semaphore, "--", "true"],
        RUN_LIMIT,
    );
    assert_eq!(code(&third), 75, "{backend}\n{}", describe(&third));
    for holder in [first, second] {
        signal(holder.id(), libc::SIGINT);
        let output = finish(holder, Duration::from_secs(20), "a lease holder");
        assert_eq!(code(&output), 0, "{backend}\n{}", describe(&output));
    }
    let (reader, _) = hold(backend, &["--read", rw]);
    let another = run_lock(backend, &["--try", "--read", rw, "--", "true"], RUN_LIMIT);
    assert_eq!(code(&another), 0, "{backend}\n{}", describe(&another));
    let writer = run_lock(backend, &["--try", "--write", rw, "--", "true"], RUN_LIMIT);
    assert_eq!(code(&writer), 75, "{backend}\n{}", describe(&writer));
    signal(reader.id(), libc::SIGTERM);
    let output = finish(reader, Duration::from_secs(20), "the reader");
    assert_eq!(code(&output), 0, "{backend}\n{}", describe(&output));
    let writer = run_lock(backend, &["--try", "--write", rw, "--", "true"], RUN_LIMIT);
    assert_eq!(code(&writer), 0, "{backend}\n{}", describe(&writer));
}

#[test]
fn semaphores_and_read_write_locks_on_zookeeper_and_keeper() {
    for server in both() {
        shared_kinds(&zk_url(&*server), "/semaphores/s", "/locks/rw");
    }
}

#[test]
fn semaphores_and_read_write_locks_on_redis() {
    let redis = RedisServer::start();
    shared_kinds(&redis.url(), "s", "rw");
}

#[test]
fn a_sentinel_backend_runs_the_command() {
    let set = RedisSentinel::start(1);
    let hosts: Vec<String> = set
        .sentinel_urls()
        .iter()
        .map(|url| {
            url.trim_start_matches("redis://")
                .trim_end_matches('/')
                .to_string()
        })
        .collect();
    let backend = format!("redis+sentinel://{}/{}", hosts.join(","), set.master_name());
    let script = "echo $LOCKKEEPER_LOCK $LOCKKEEPER_FENCING_TOKEN $LOCKKEEPER_BACKEND";
    let output = run_lock(&backend, &["nightly", "--", "sh", "-c", script], RUN_LIMIT);
    assert_eq!(code(&output), 0, "{}", describe(&output));
    let printed = String::from_utf8_lossy(&output.stdout).trim().to_string();
    let words: Vec<&str> = printed.split(' ').collect();
    assert_eq!(words.len(), 3, "{printed:?}");
    assert_eq!(words[0], "nightly");
    assert!(words[1].parse::<u64>().is_ok_and(|t| t > 0), "{printed:?}");
    assert_eq!(words[2], backend);
}

#[test]
fn a_cluster_backend_runs_the_command() {
    let cluster = RedisCluster::start();
    let hosts: Vec<String> = cluster
        .urls()
        .iter()
        .map(|url| {
            url.trim_start_matches("redis://")
                .trim_end_matches('/')
                .to_string()
        })
        .collect();
    let backend = format!("redis+cluster://{}", hosts.join(","));
    let script = "echo $LOCKKEEPER_FENCING_TOKEN";
    let first = run_lock(&backend, &["nightly", "--", "sh", "-c", script], RUN_LIMIT);
    assert_eq!(code(&first), 0, "{}", describe(&first));
    let (holder, token) = hold(&backend, &["nightly"]);
    let tried = run_lock(&backend, &["--try", "nightly", "--", "true"], RUN_LIMIT);
    assert_eq!(code(&tried), 75, "{}", describe(&tried));
    signal(holder.id(), libc::SIGINT);
    let output = finish(holder, Duration::from_secs(20), "the holder");
    assert_eq!(code(&output), 0, "{}", describe(&output));
    let before: u64 = String::from_utf8_lossy(&first.stdout)
        .trim()
        .parse()
        .expect("token");
    assert!(token > before, "token {token} after {before}");
}

/// A connection that drops and comes back to the same session is not a loss: the server is
/// restarted under a running command (sessions survive a restart of either server), and the
/// command runs on to its own end.
fn suspension_is_ridden_out(server: &mut dyn Restart) {
    let backend = format!("zk://{}", server.connect_string());
    let dir = tempfile::tempdir().expect("tempdir");
    let script = r#"echo $$ > "$1/child.pid"; while [ ! -e "$1/done" ]; do sleep 0.05; done"#;
    let (holder, child) = holder_running(
        &backend,
        "/locks/blip",
        dir.path(),
        &["--session-timeout", "20s"],
        script,
    );
    server.restart();
    // Time to notice the dropped connection and reconnect.
    std::thread::sleep(Duration::from_secs(2));
    if !alive(child) {
        let output = finish(holder, Duration::from_secs(30), "the holder");
        panic!(
            "{}: the command was stopped\n{}",
            server.name(),
            describe(&output)
        );
    }
    std::fs::write(dir.path().join("done"), b"").expect("write done");
    let output = finish(holder, Duration::from_secs(30), "the holder");
    assert_eq!(code(&output), 0, "{}\n{}", server.name(), describe(&output));
}

/// The servers whose restart keeps sessions.
trait Restart: TestServer {
    fn restart(&mut self);
}

impl Restart for Keeper {
    fn restart(&mut self) {
        Keeper::restart(self);
    }
}

impl Restart for ApacheZk {
    fn restart(&mut self) {
        ApacheZk::restart(self);
    }
}

#[test]
fn a_server_restart_under_the_command_is_not_a_loss() {
    if backend_enabled("keeper") {
        suspension_is_ridden_out(&mut Keeper::start());
    }
    if backend_enabled("zookeeper") {
        suspension_is_ridden_out(&mut ApacheZk::start());
    }
}

#[test]
fn a_lock_node_deleted_behind_the_holder_is_a_loss() {
    let rt = runtime();
    for server in both() {
        let backend = zk_url(&*server);
        let dir = tempfile::tempdir().expect("tempdir");
        let script = r#"echo $$ > "$1/child.pid"; exec sleep 300"#;
        let (holder, child) = holder_running(&backend, "/locks/deleted", dir.path(), &[], script);
        let session = rt
            .block_on(lockkeeper::zk::Session::connect(&server.connect_string()))
            .expect("connect");
        let node = holder_node(&session, &rt, "/locks/deleted");
        let client = session.client().expect("client");
        rt.block_on(client.delete(&node, None)).expect("delete");
        let deleted = Instant::now();
        let output = finish(holder, Duration::from_secs(20), "the holder");
        assert_eq!(
            code(&output),
            76,
            "{}\n{}",
            server.name(),
            describe(&output)
        );
        assert!(stderr(&output).contains("deleted"), "{}", describe(&output));
        assert!(
            deleted.elapsed() < Duration::from_secs(3),
            "{}",
            server.name()
        );
        assert!(
            !alive(child),
            "{}: the command outlived the loss",
            server.name()
        );
        rt.block_on(session.close());
    }
}
