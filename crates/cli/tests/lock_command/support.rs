//! Running `lockkeeper lock` as a child process and reading how it ended: every wait here is
//! bounded, and every failed assertion shows what the process printed.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc::channel;
use std::time::{Duration, Instant};

use lockkeeper::zk::Session;
use lockkeeper_testkit::TestServer;

const BIN: &str = env!("CARGO_BIN_EXE_lockkeeper");

/// How long any single `lockkeeper lock` run may take before the test gives up on it.
pub(crate) const RUN_LIMIT: Duration = Duration::from_secs(60);

/// How long a holder asked to stop (signalled, revoked, lost) may take to exit.
pub(crate) const STOP_LIMIT: Duration = Duration::from_secs(20);

/// `lockkeeper lock --backend URL ARGS...`, output piped.
pub(crate) fn lock_command(backend: &str, args: &[&str]) -> Command {
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
pub(crate) fn run_lock(backend: &str, args: &[&str], limit: Duration) -> Output {
    let child = lock_command(backend, args)
        .spawn()
        .expect("start lockkeeper");
    finish(child, limit, &format!("lockkeeper lock {}", args.join(" ")))
}

/// Runs `lockkeeper lock` to its end within [`RUN_LIMIT`] and asserts its exit code.
pub(crate) fn run_expecting(backend: &str, args: &[&str], want: i32, label: &str) -> Output {
    let output = run_lock(backend, args, RUN_LIMIT);
    assert_code(&output, want, label);
    output
}

/// `--try NAME -- true` succeeds: whoever held `name` has released it.
pub(crate) fn assert_released(backend: &str, name: &str, label: &str) {
    run_expecting(
        backend,
        &["--try", name, "--", "true"],
        0,
        &format!("{label}: not released"),
    );
}

/// Waits at most `limit` for `child`; kills it and fails the test past it.
pub(crate) fn finish(mut child: Child, limit: Duration, label: &str) -> Output {
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

/// Sends `sig` to a running holder and waits (within [`STOP_LIMIT`]) for it to end.
pub(crate) fn stop(holder: Child, sig: libc::c_int, label: &str) -> Output {
    signal(holder.id(), sig);
    finish(holder, STOP_LIMIT, label)
}

pub(crate) fn describe(output: &Output) -> String {
    format!(
        "status {:?}\n--- stdout:\n{}--- stderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

pub(crate) fn code(output: &Output) -> i32 {
    output
        .status
        .code()
        .unwrap_or_else(|| panic!("ended by a signal\n{}", describe(output)))
}

/// Asserts the exit code, with `label` and everything the process printed on failure.
pub(crate) fn assert_code(output: &Output, want: i32, label: &str) {
    assert_eq!(code(output), want, "{label}\n{}", describe(output));
}

pub(crate) fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Asserts that the process said `text` on stderr.
pub(crate) fn assert_said(output: &Output, text: &str) {
    assert!(stderr(output).contains(text), "{}", describe(output));
}

/// The number the process printed on stdout (a fencing token).
pub(crate) fn printed_token(output: &Output) -> u64 {
    String::from_utf8_lossy(&output.stdout)
        .trim()
        .parse()
        .expect("token")
}

pub(crate) fn zk_url(server: &dyn TestServer) -> String {
    format!("zk://{}", server.connect_string())
}

pub(crate) fn signal(pid: u32, signal: libc::c_int) {
    // SAFETY: kill(2) with plain integers, to a process this test started.
    assert_eq!(unsafe { libc::kill(pid as i32, signal) }, 0, "signal {pid}");
}

/// Whether `pid` is still a live process (a zombie is not: it has ended).
pub(crate) fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            let state = stat.rsplit_once(')').map(|(_, rest)| rest.trim_start());
            !matches!(state.and_then(|s| s.chars().next()), Some('Z' | 'X'))
        }
        Err(_) => false,
    }
}

/// Waits at most `limit` for `cond`.
pub(crate) fn eventually(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
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
pub(crate) fn pid_in(file: &Path) -> u32 {
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

/// A holder on `name` running `script`, once its command has written `child.pid` into `dir`.
pub(crate) fn holder_running(
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

/// Starts `lockkeeper lock NAME` with no command and reads the token it prints.
pub(crate) fn hold(backend: &str, args: &[&str]) -> (Child, u64) {
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

pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// A library session on `server` and the only holder node of the lock at `path`, for a test
/// that acts on the holder from the side (revokes it, deletes its node).
pub(crate) fn session_and_holder(
    rt: &tokio::runtime::Runtime,
    server: &dyn TestServer,
    path: &str,
) -> (Session, String) {
    let session = rt
        .block_on(Session::connect(&server.connect_string()))
        .expect("connect");
    let inspection = rt.block_on(session.inspect(path)).expect("inspect");
    let holders: Vec<_> = inspection.holders().map(|p| p.path.clone()).collect();
    assert_eq!(holders.len(), 1, "{holders:?}");
    let node = holders[0].clone();
    (session, node)
}
