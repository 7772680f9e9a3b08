//! What a loss does to the command, and what is not a loss. A lock lost while the command runs
//! (the holder frozen past its session or lease, a revocation request, its node deleted)
//! stops the command's whole process group, SIGKILL after `--kill-after` for what ignores
//! SIGTERM, and exits 76; an operator's SIGTERM reaches the command; a server restart that
//! keeps the session lets the command run on.

use std::time::{Duration, Instant};

use lockkeeper_testkit::{ApacheZk, Keeper, RedisServer, TestServer, backend_enabled, both, resp};

use crate::support::{
    RUN_LIMIT, STOP_LIMIT, alive, assert_code, assert_released, assert_said, describe, eventually,
    finish, holder_running, pid_in, run_lock, runtime, session_and_holder, signal, stderr, stop,
    zk_url,
};

/// The command of the freezing tests: writes its pid and a grandchild's, then waits for it.
const PARENT_OF_SLEEPER: &str =
    r#"echo $$ > "$1/child.pid"; sleep 300 & echo $! > "$1/grandchild.pid"; wait"#;

/// A command that writes its pid and then sleeps until it is stopped.
const SLEEPER: &str = r#"echo $$ > "$1/child.pid"; exec sleep 300"#;

/// Freezes the holder past its session or lease, lets another process take the lock, thaws
/// it: its command and the command's own child must be gone, and it exits 76.
pub(crate) fn loss_by_freezing(backend: &str, name: &str, session_timeout: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let extra = ["--session-timeout", session_timeout, "--kill-after", "3s"];
    let (holder, child) = holder_running(backend, name, dir.path(), &extra, PARENT_OF_SLEEPER);
    let grandchild = pid_in(&dir.path().join("grandchild.pid"));
    signal(holder.id(), libc::SIGSTOP);
    // The other waits until the backend gives the frozen holder's lock away.
    let other = run_lock(
        backend,
        &["--timeout", "40s", name, "--", "true"],
        RUN_LIMIT,
    );
    assert_code(&other, 0, &format!("{backend}: the lock never came free"));
    assert!(
        alive(child),
        "{backend}: the command ended while its holder was frozen"
    );
    signal(holder.id(), libc::SIGCONT);
    let thawed = Instant::now();
    let output = finish(holder, STOP_LIMIT, "the thawed holder");
    eprintln!(
        "{backend}: exited {:?} after SIGCONT: {}",
        thawed.elapsed(),
        stderr(&output).trim()
    );
    assert_code(&output, 76, backend);
    assert_said(&output, "lost");
    // The cause, not a list of possible ones: this process was paused past its deadline.
    assert_said(
        &output,
        "local deadline passed: this process was paused for",
    );
    assert!(
        !stderr(&output).contains("deleted"),
        "{}",
        describe(&output)
    );
    // Both die of SIGTERM: no SIGKILL, and no waiting out the 3 s grace for them.
    assert_said(&output, "the command was stopped, its exit code 143");
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

/// On Redis the message names what became of the lease key: deleted behind the holder, or
/// deleted and taken by another holder. (The renewal finds the key not ours; the command asks
/// the server what it holds now.)
#[test]
fn a_redis_key_deleted_or_taken_behind_the_holder_is_named() {
    let redis = RedisServer::start();
    let cases = [
        (
            "deleted",
            "redis.call('DEL', KEYS[1])",
            "was deleted (an operator's DEL",
        ),
        (
            "taken",
            "redis.call('DEL', KEYS[1]); redis.call('SET', KEYS[1], 'another', 'PX', 60000)",
            "and another holder has it now",
        ),
    ];
    for (name, script, said) in cases {
        let dir = tempfile::tempdir().expect("tempdir");
        let extra = ["--session-timeout", "3s"];
        let (holder, child) = holder_running(&redis.url(), name, dir.path(), &extra, SLEEPER);
        let key = format!("lockkeeper:lease:{{{name}}}");
        resp::command(
            redis.addr(),
            &["EVAL", script, "1", &key],
            Duration::from_secs(10),
        )
        .expect("change the key behind the holder");
        let output = finish(holder, STOP_LIMIT, "the holder");
        assert_code(&output, 76, name);
        assert_said(&output, &format!("the lock key {key} "));
        assert_said(&output, said);
        assert!(!alive(child), "{name}: the command outlived the loss");
    }
}

#[test]
fn a_revocation_request_stops_the_command_and_releases() {
    let rt = runtime();
    for server in both() {
        let backend = zk_url(&*server);
        let dir = tempfile::tempdir().expect("tempdir");
        let (holder, child) = holder_running(&backend, "/locks/revoked", dir.path(), &[], SLEEPER);
        let (session, node) = session_and_holder(&rt, &*server, "/locks/revoked");
        assert!(
            rt.block_on(session.request_revocation(&node))
                .expect("revoke")
        );
        let output = finish(holder, STOP_LIMIT, "the revoked holder");
        assert_code(&output, 76, server.name());
        assert_said(&output, "revocation requested");
        assert!(
            !alive(child),
            "{}: the command outlived the revocation",
            server.name()
        );
        assert_released(&backend, "/locks/revoked", server.name());
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
        let (session, node) = session_and_holder(&rt, &*server, "/locks/stubborn");
        let asked = Instant::now();
        assert!(
            rt.block_on(session.request_revocation(&node))
                .expect("revoke")
        );
        let output = finish(holder, STOP_LIMIT, "the stubborn holder");
        let took = asked.elapsed();
        assert_code(&output, 76, server.name());
        assert_said(&output, "SIGKILL");
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
        let output = stop(holder, libc::SIGTERM, "the signalled holder");
        assert_code(&output, 3, server.name());
        assert!(
            dir.path().join("got").is_file(),
            "{}: the trap did not run",
            server.name()
        );
        assert_released(&backend, "/locks/term", server.name());
    }
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
    assert_code(&output, 0, server.name());
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
        let (holder, child) = holder_running(&backend, "/locks/deleted", dir.path(), &[], SLEEPER);
        let (session, node) = session_and_holder(&rt, &*server, "/locks/deleted");
        let client = session.client().expect("client");
        rt.block_on(client.delete(&node, None)).expect("delete");
        let deleted = Instant::now();
        let output = finish(holder, STOP_LIMIT, "the holder");
        assert_code(&output, 76, server.name());
        // The cause, and only it: not a pause, not an expiry.
        assert_said(
            &output,
            &format!("the lock node {node} was deleted by another client"),
        );
        // Nor a failed release: after the loss there is nothing left to release.
        let text = stderr(&output);
        assert!(
            !text.contains("paused") && !text.contains("expired") && !text.contains("releasing"),
            "{}: {text}",
            server.name()
        );
        // A loose bound: the deletion's notification, SIGTERM to the command, the exit.
        assert!(
            deleted.elapsed() < Duration::from_secs(10),
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

/// A node of the holder's name created anew by someone else in the same transaction as the
/// delete: the message says the node was replaced, not merely deleted, and not that it is
/// "still there".
#[test]
fn a_lock_node_replaced_behind_the_holder_is_named_as_replaced() {
    let rt = runtime();
    for server in both() {
        let backend = zk_url(&*server);
        let dir = tempfile::tempdir().expect("tempdir");
        let (holder, child) = holder_running(&backend, "/locks/replaced", dir.path(), &[], SLEEPER);
        let (session, node) = session_and_holder(&rt, &*server, "/locks/replaced");
        let client = session.client().expect("client");
        let mut multi = client.multi();
        multi.add_delete(&node, None).expect("delete op");
        multi
            .add_create(
                &node,
                b"someone else",
                &lockkeeper_zk_client::CreateOptions::new(
                    lockkeeper_zk_client::CreateMode::Ephemeral,
                ),
            )
            .expect("create op");
        rt.block_on(multi.commit()).expect("replace the node");
        let output = finish(holder, STOP_LIMIT, "the holder");
        assert_code(&output, 76, server.name());
        assert_said(
            &output,
            &format!("the lock node {node} was deleted and created anew by another session"),
        );
        let text = stderr(&output);
        assert!(!text.contains("still there"), "{}: {text}", server.name());
        assert!(
            !alive(child),
            "{}: the command outlived the loss",
            server.name()
        );
        rt.block_on(session.close());
    }
}

/// A pause of this process that ended long before the loss does not explain it: the holder is
/// stopped for a moment (well within its session), resumed, and only seconds later is its node
/// deleted; the message names the deletion, not the pause.
#[test]
fn an_old_pause_is_not_named_as_the_cause_of_a_later_loss() {
    let rt = runtime();
    let server = Keeper::start();
    let backend = zk_url(&server);
    let dir = tempfile::tempdir().expect("tempdir");
    let (holder, child) = holder_running(&backend, "/locks/old-pause", dir.path(), &[], SLEEPER);
    let (session, node) = session_and_holder(&rt, &server, "/locks/old-pause");
    // Longer than what counts as a pause (1 s), far shorter than the 10 s session.
    // Slept on the runtime, so that the observing session keeps up its pings meanwhile.
    signal(holder.id(), libc::SIGSTOP);
    rt.block_on(async { tokio::time::sleep(Duration::from_millis(1500)).await });
    signal(holder.id(), libc::SIGCONT);
    // Past the window in which a pause still explains a loss (5 s).
    rt.block_on(async { tokio::time::sleep(Duration::from_secs(7)).await });
    let client = session.client().expect("client");
    rt.block_on(client.delete(&node, None)).expect("delete");
    let output = finish(holder, STOP_LIMIT, "the holder");
    assert_code(&output, 76, "keeper");
    assert_said(
        &output,
        &format!("the lock node {node} was deleted by another client"),
    );
    let text = stderr(&output);
    assert!(!text.contains("paused"), "{text}");
    assert!(!alive(child), "the command outlived the loss");
    rt.block_on(session.close());
}

/// `lockkeeper revoke` with `args`, to its end within [`STOP_LIMIT`].
fn revoke(backend: &str, args: &[&str]) -> std::process::Output {
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_lockkeeper"))
        .arg("revoke")
        .arg("--backend")
        .arg(backend)
        .args(args)
        .env_remove("LOCKKEEPER_BACKEND")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start lockkeeper revoke");
    finish(child, STOP_LIMIT, "lockkeeper revoke")
}

/// A semaphore lease's holder does not listen for revocation requests, so a cooperative
/// revoke is refused (64) and changes nothing: the lease's data stays its owner's and the
/// command runs on. `--force` deletes the lease, and the holder stops its command (76).
/// Before, the request was printed as "revocation requested", overwrote the lease node's data
/// with `__REVOKE__`, and was ignored.
#[test]
fn a_semaphore_lease_is_not_asked_but_can_be_forced() {
    let rt = runtime();
    for server in both() {
        let backend = zk_url(&*server);
        let dir = tempfile::tempdir().expect("tempdir");
        let path = "/semaphores/revoked";
        let (holder, child) =
            holder_running(&backend, path, dir.path(), &["--semaphore", "2"], SLEEPER);
        let session = rt
            .block_on(lockkeeper::zk::Session::connect(&server.connect_string()))
            .expect("connect");
        let leases = |session: &lockkeeper::zk::Session| {
            let inspection = rt.block_on(session.inspect(path)).expect("inspect");
            inspection
                .participants
                .iter()
                .filter(|p| p.kind == lockkeeper::zk::NodeKind::Lease)
                .map(|p| (p.path.clone(), p.data.clone()))
                .collect::<Vec<_>>()
        };
        let before = leases(&session);
        assert_eq!(before.len(), 1, "{}: {before:?}", server.name());
        let asked = revoke(&backend, &["--max-leases", "2", path]);
        assert_code(&asked, 64, server.name());
        assert_said(&asked, "--force");
        assert_eq!(
            leases(&session),
            before,
            "{}: the lease changed",
            server.name()
        );
        std::thread::sleep(Duration::from_millis(500));
        assert!(alive(child), "{}: the command was stopped", server.name());

        let forced = revoke(
            &backend,
            &["--force", "--grace", "1s", "--max-leases", "2", path],
        );
        assert_code(&forced, 0, server.name());
        let output = finish(holder, STOP_LIMIT, "the forced lease holder");
        assert_code(&output, 76, server.name());
        assert_said(&output, "was deleted");
        assert!(
            !alive(child),
            "{}: the command outlived its lease",
            server.name()
        );
        rt.block_on(session.close());
    }
}
