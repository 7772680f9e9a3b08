//! One server per data directory: a second `lockkeeper serve` on a data dir a live server holds
//! exits at once, naming the directory and the holder's pid, and changes nothing in it, while
//! the first carries on serving; a server killed with SIGKILL leaves nothing locked, so the next
//! one starts at once with the data; `lockkeeper verify` on a live data dir says it is in use
//! (exit 3) instead of reading a log that is being written.

mod support;

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use zookeeper_client::{Acls, Client, CreateMode};

use support::{KeeperProcess, OP_LIMIT, connect, verify, within};

/// How long a refused start may take. It needs no recovery and no network, only a process start
/// and one read of the lock file; the rest is room for a loaded machine.
const REFUSAL_LIMIT: Duration = Duration::from_secs(10);

fn persistent() -> zookeeper_client::CreateOptions<'static> {
    CreateMode::Persistent.with_acls(Acls::anyone_all())
}

async fn create(client: &Client, path: &str) {
    within(
        "create",
        OP_LIMIT,
        client.create(path, path.as_bytes(), &persistent()),
    )
    .await
    .unwrap_or_else(|e| panic!("create {path}: {e}"));
}

async fn assert_exists(client: &Client, path: &str) {
    let (data, _) = within("get_data", OP_LIMIT, client.get_data(path))
        .await
        .unwrap_or_else(|e| panic!("get_data {path}: {e}"));
    assert_eq!(data, path.as_bytes(), "data of {path}");
}

/// Every file of `dir` with its length, modification time and contents' checksum: what a
/// refused server must leave exactly as it found it.
fn dir_state(dir: &Path) -> Vec<(String, u64, SystemTime, u32)> {
    let mut files: Vec<_> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("list {}: {e}", dir.display()))
        .map(|entry| {
            let entry = entry.expect("directory entry");
            let meta = entry.metadata().expect("metadata");
            let bytes = fs::read(entry.path()).expect("read a data dir file");
            (
                entry.file_name().to_string_lossy().into_owned(),
                meta.len(),
                meta.modified().expect("mtime"),
                support::crc32c(&bytes),
            )
        })
        .collect();
    files.sort();
    files
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_server_is_refused_and_a_killed_one_leaves_nothing_locked() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("data");
    let mut first = KeeperProcess::start(&dir, &[]);
    let client = connect(&first.connect_string()).await;
    create(&client, "/before").await;

    let before = dir_state(&dir);
    let started = Instant::now();
    let failure = match KeeperProcess::try_start(&dir, &[]) {
        Ok(second) => panic!(
            "a second server started on {} (at {}) while pid {} serves it",
            dir.display(),
            second.addr(),
            first.pid()
        ),
        Err(failure) => failure,
    };
    let took = started.elapsed();
    let code = failure.status.and_then(|s| s.code());
    assert!(
        matches!(code, Some(c) if c != 0),
        "the refused server must exit non-zero; {failure}"
    );
    let expected = format!(
        "data dir {} is in use by another lockkeeper server (pid {})",
        dir.display(),
        first.pid()
    );
    assert!(
        failure.stderr.contains(&expected),
        "stderr must say `{expected}`; {failure}"
    );
    assert!(
        took < REFUSAL_LIMIT,
        "the refusal took {took:?}, more than {REFUSAL_LIMIT:?}"
    );
    assert_eq!(
        dir_state(&dir),
        before,
        "the refused server changed the data dir"
    );

    // The first server never noticed.
    create(&client, "/after-refusal").await;
    assert_exists(&client, "/before").await;
    drop(client);

    first.kill9();
    let started = Instant::now();
    let third = KeeperProcess::try_start(&dir, &[]).unwrap_or_else(|failure| {
        panic!("a server on the dir of a killed one must start at once: {failure}")
    });
    eprintln!(
        "restart after kill -9: serving {:?} after spawn",
        third.ready_at - started
    );
    let client = connect(&third.connect_string()).await;
    assert_exists(&client, "/before").await;
    assert_exists(&client, "/after-refusal").await;
    create(&client, "/after-restart").await;
    let lock = fs::read_to_string(dir.join("lock")).expect("read the lock file");
    assert_eq!(
        lock.trim(),
        third.pid().to_string(),
        "the lock file names its holder"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_refuses_a_live_data_dir_with_exit_3() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("data");
    let mut server = KeeperProcess::start(&dir, &[]);
    let client = connect(&server.connect_string()).await;
    create(&client, "/node").await;
    drop(client);

    let live = verify(&dir);
    assert_eq!(live.code, Some(3), "verify on a live data dir: {live:?}");
    let text = live.text();
    assert!(
        text.contains(&format!(
            "data dir {} is in use by another lockkeeper server (pid {})",
            dir.display(),
            server.pid()
        )),
        "verify must name the directory and the server's pid: {text}"
    );
    assert!(
        !text.contains("OK:"),
        "verify must not report on a log being written: {text}"
    );

    server.terminate(Duration::from_secs(30));
    let stopped = verify(&dir);
    assert_eq!(
        stopped.code,
        Some(0),
        "verify after the server stopped: {stopped:?}"
    );
}
