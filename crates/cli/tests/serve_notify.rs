//! `lockkeeper serve` under systemd's `Type=notify`: started with `NOTIFY_SOCKET`, it sends
//! `READY=1` once it serves clients and `STOPPING=1` when SIGTERM begins its shutdown, on a
//! socket named by a path or (Linux) by an abstract name; a socket nobody listens on is logged
//! and otherwise ignored.

mod support;

use std::ffi::OsStr;
use std::os::unix::net::UnixDatagram;
use std::time::Duration;

use lockkeeper_testkit::try_four_letter_word;
use support::KeeperProcess;

/// Generous: a loaded machine may take its time to start a server, never forever.
const WAIT: Duration = Duration::from_secs(60);

fn receive(socket: &UnixDatagram) -> String {
    let mut buffer = [0u8; 256];
    let n = socket
        .recv(&mut buffer)
        .unwrap_or_else(|e| panic!("no notification within {WAIT:?}: {e}"));
    String::from_utf8_lossy(&buffer[..n]).into_owned()
}

/// Starts Keeper with `NOTIFY_SOCKET=name`, checks READY=1 comes once it answers `ruok`, then
/// STOPPING=1 after SIGTERM, and that it exits cleanly.
fn ready_then_stopping(socket: &UnixDatagram, name: &OsStr) {
    socket.set_read_timeout(Some(WAIT)).expect("read timeout");
    let dir = tempfile::tempdir().expect("temp dir");
    let mut keeper = KeeperProcess::try_start_with_env(
        &dir.path().join("data"),
        &[],
        &[("NOTIFY_SOCKET", name)],
    )
    .unwrap_or_else(|failure| panic!("start keeper: {failure}"));
    assert_eq!(receive(socket), "READY=1");
    // Ready means serving: a client gets its answer.
    let answer = try_four_letter_word(keeper.addr(), "ruok", WAIT).expect("ruok");
    assert_eq!(answer, "imok");
    let status = keeper.terminate(WAIT).expect("keeper exits after SIGTERM");
    assert!(status.success(), "exit {status:?}");
    assert_eq!(receive(socket), "STOPPING=1");
}

#[test]
fn a_path_socket_hears_ready_and_stopping() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("notify.sock");
    let socket = UnixDatagram::bind(&path).expect("bind the notify socket");
    ready_then_stopping(&socket, path.as_os_str());
}

#[cfg(target_os = "linux")]
#[test]
fn an_abstract_socket_hears_ready_and_stopping() {
    use std::os::linux::net::SocketAddrExt;
    let name = format!("lockkeeper-notify-test-{}", std::process::id());
    let address =
        std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).expect("address");
    let socket = UnixDatagram::bind_addr(&address).expect("bind the abstract socket");
    ready_then_stopping(&socket, OsStr::new(&format!("@{name}")));
}

/// A `NOTIFY_SOCKET` nobody listens on is logged and otherwise ignored: the server serves.
#[test]
fn a_notify_socket_nobody_listens_on_is_logged_and_the_server_serves() {
    let dir = tempfile::tempdir().expect("temp dir");
    let missing = dir.path().join("nobody.sock");
    let mut keeper = KeeperProcess::try_start_with_env(
        &dir.path().join("data"),
        &[],
        &[("NOTIFY_SOCKET", missing.as_os_str())],
    )
    .unwrap_or_else(|failure| panic!("start keeper: {failure}"));
    let said = keeper.stderr_containing("cannot tell systemd READY=1", WAIT);
    assert!(
        said.contains("cannot tell systemd READY=1") && said.contains("nobody.sock"),
        "{said}"
    );
    let answer = try_four_letter_word(keeper.addr(), "ruok", WAIT).expect("ruok");
    assert_eq!(answer, "imok");
    let status = keeper.terminate(WAIT).expect("keeper exits after SIGTERM");
    assert!(status.success(), "exit {status:?}");
}
