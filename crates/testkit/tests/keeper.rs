//! The in-process Keeper test server starts from sync and async tests, listens on loopback,
//! and stops on drop.

use std::net::TcpStream;
use std::time::Duration;

use lockkeeper_testkit::{Keeper, TestServer, four_letter_word};

#[test]
fn starts_from_a_sync_test_and_stops_on_drop() {
    let keeper = Keeper::start();
    assert_eq!(keeper.name(), "keeper");
    assert!(keeper.addr().ip().is_loopback());
    assert_ne!(
        keeper.addr().port(),
        0,
        "addr() must be the bound port, not the configured 0"
    );
    assert_eq!(
        keeper.connect_string(),
        format!("127.0.0.1:{}", keeper.addr().port())
    );
    assert_eq!(four_letter_word(keeper.addr(), "ruok"), "imok");
    let addr = keeper.addr();
    let data_dir = keeper.data_dir().to_path_buf();
    drop(keeper);
    assert!(
        TcpStream::connect_timeout(&addr, Duration::from_secs(2)).is_err(),
        "Keeper still listens on {addr} after drop"
    );
    assert!(
        !data_dir.exists(),
        "temporary data dir {} left behind",
        data_dir.display()
    );
}

#[tokio::test]
async fn starts_from_a_current_thread_tokio_test() {
    let keeper = Keeper::start();
    let stream = tokio::time::timeout(
        Duration::from_secs(10),
        tokio::net::TcpStream::connect(keeper.addr()),
    )
    .await
    .expect("connect within 10 s")
    .expect("Keeper accepts a connection");
    drop(stream);
}

#[test]
fn restart_keeps_the_address() {
    let mut keeper = Keeper::start();
    let addr = keeper.addr();
    keeper.restart();
    assert_eq!(keeper.addr(), addr);
    assert_eq!(four_letter_word(keeper.addr(), "ruok"), "imok");
}

/// A data dir belongs to one server at a time, even within one process: a second server on a
/// running Keeper's dir is refused, naming the dir and the pid; a restart releases the old
/// server's hold before the new one starts, and a stopped Keeper leaves the dir free.
#[tokio::test]
async fn a_data_dir_is_held_by_one_server_and_released_by_restart_and_stop() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let config = Keeper::test_config(tmp.path());
    let mut keeper = Keeper::start_with(config.clone());

    let refused = lockkeeper_server::Server::start(config.clone()).await;
    let e = refused
        .err()
        .expect("a second server on a held data dir must be refused");
    assert_eq!(e.kind(), std::io::ErrorKind::ResourceBusy, "{e}");
    assert_eq!(
        e.to_string(),
        format!(
            "data dir {} is in use by another lockkeeper server (pid {})",
            tmp.path().display(),
            std::process::id()
        )
    );

    keeper.restart();
    assert_eq!(four_letter_word(keeper.addr(), "ruok"), "imok");
    assert!(
        lockkeeper_server::Server::start(config.clone())
            .await
            .is_err()
    );

    keeper.stop();
    let server = lockkeeper_server::Server::start(config)
        .await
        .expect("a stopped Keeper leaves its data dir free");
    server.shutdown().await;
}
