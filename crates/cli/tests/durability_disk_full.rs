//! Disk full: Keeper on a small tmpfs is written to until the disk runs out. No write may be
//! acknowledged that is not on disk; the server turns read-only (writes answered NotReadOnly,
//! `mntr` says `read-only`) while still serving reads; once space returns it takes writes
//! again; and after kill -9 and a restart everything acknowledged is there.
//!
//! The filesystem is a tmpfs mounted by the test (we run as root in CI). A ballast file fills
//! all but a little of it once the server runs, whatever the server preallocated, so the next
//! writes hit ENOSPC; deleting the ballast gives the space back. If mounting is not permitted
//! (no root, no tmpfs), the test says why and passes without testing: that is the only way it
//! can pass without running.

mod support;

use std::ffi::CString;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use zookeeper_client::{Acls, Client, CreateMode, Error};

use support::{KeeperProcess, OP_LIMIT, mntr_state, read_nodes, wait_server_state, within};

/// The tmpfs: small, so filling it is quick; big enough for the server to start.
const TMPFS_SIZE: &str = "16m";
const TMPFS_BYTES: u64 = 16 << 20;
/// Space left free next to the ballast once the server runs.
const HEADROOM: u64 = 1536 << 10;
/// Node data size: a few hundred writes fill the headroom.
const VALUE_LEN: usize = 16 << 10;
/// Writes in flight while filling.
const PIPELINE: usize = 16;

/// One write while filling the disk: path, data, and its outcome (None: never sent, because
/// an earlier write had already failed).
type Attempt = (String, Vec<u8>, Option<Result<(), Error>>);

/// A tmpfs mounted for the test; unmounted (and its mount point removed) on drop.
struct Tmpfs {
    dir: PathBuf,
}

impl Tmpfs {
    fn mount() -> Result<Tmpfs, String> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let dir = std::env::temp_dir().join(format!(
            "lockkeeper-diskfull-{}-{nanos}",
            std::process::id()
        ));
        fs::create_dir_all(&dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
        let output = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={TMPFS_SIZE}"), "tmpfs"])
            .arg(&dir)
            .output();
        match output {
            Ok(out) if out.status.success() => Ok(Tmpfs { dir }),
            Ok(out) => {
                let _ = fs::remove_dir(&dir);
                Err(format!(
                    "mount -t tmpfs failed ({}): {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim()
                ))
            }
            Err(e) => {
                let _ = fs::remove_dir(&dir);
                Err(format!("cannot run mount: {e}"))
            }
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // The server must be gone first (it holds files open); retry briefly, then detach.
        for _ in 0..20 {
            if Command::new("umount")
                .arg(&self.dir)
                .status()
                .is_ok_and(|s| s.success())
            {
                let _ = fs::remove_dir(&self.dir);
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        let _ = fs::remove_dir(&self.dir);
    }
}

/// Free bytes on the filesystem holding `path`.
fn free_bytes(path: &Path) -> u64 {
    let c_path = CString::new(path.as_os_str().as_bytes()).expect("path without NUL");
    // SAFETY: statvfs writes into the zeroed struct we own, from a NUL-terminated path.
    let mut stats: libc::statvfs = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::statvfs(c_path.as_ptr(), &mut stats) };
    assert_eq!(rc, 0, "statvfs {}", path.display());
    stats.f_bavail as u64 * stats.f_frsize as u64
}

fn persistent() -> zookeeper_client::CreateOptions<'static> {
    CreateMode::Persistent.with_acls(Acls::anyone_all())
}

fn value(i: usize) -> Vec<u8> {
    let mut data = format!("node {i}:").into_bytes();
    data.resize(VALUE_LEN, b'a' + (i % 26) as u8);
    data
}

/// A session with a long timeout, so the read-only period cannot expire it.
async fn session(addr: &str) -> Client {
    within(
        "connect",
        OP_LIMIT,
        Client::connector()
            .with_session_timeout(Duration::from_secs(30))
            .connect(addr),
    )
    .await
    .unwrap_or_else(|e| panic!("connect to {addr}: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_disk_turns_keeper_read_only_and_loses_nothing() {
    let tmpfs = match Tmpfs::mount() {
        Ok(tmpfs) => tmpfs,
        Err(why) => {
            eprintln!("SKIPPED: the disk-full test needs a tmpfs it can mount: {why}");
            return;
        }
    };
    let data_dir = tmpfs.dir.join("data");
    fs::create_dir(&data_dir).expect("create the data dir");
    let mut server = KeeperProcess::start(&data_dir, &[]);
    let addr = server.connect_string();
    let writer = session(&addr).await;
    // A session that only reads, opened before the fault: reconnecting it needs no new
    // session txn, which a read-only server could not log.
    let reader = session(&addr).await;
    let mut acknowledged: Vec<(String, Vec<u8>)> = Vec::new();
    within("create", OP_LIMIT, writer.create("/df", b"", &persistent()))
        .await
        .expect("create /df");
    acknowledged.push(("/df".into(), Vec::new()));

    let ballast = tmpfs.dir.join("ballast");
    let ballast_len = free_bytes(&tmpfs.dir).saturating_sub(HEADROOM);
    fs::write(&ballast, vec![0u8; ballast_len as usize]).expect("write the ballast");
    eprintln!(
        "ballast {} KiB; {} KiB left free",
        ballast_len >> 10,
        free_bytes(&tmpfs.dir) >> 10
    );

    // Fill: every acknowledged create must be on this small disk. Writes stop being issued
    // once one fails; those already in flight finish either way.
    let failed = AtomicBool::new(false);
    let max_writes = (TMPFS_BYTES as usize / VALUE_LEN) * 2;
    let results: Vec<Attempt> = futures::stream::iter(0..max_writes)
        .map(|i| {
            let failed = &failed;
            let writer = &writer;
            async move {
                let path = format!("/df/n{i:05}");
                let data = value(i);
                if failed.load(Ordering::SeqCst) {
                    return (path, data, None);
                }
                let result = match tokio::time::timeout(
                    OP_LIMIT,
                    writer.create(&path, &data, &persistent()),
                )
                .await
                {
                    Ok(r) => r.map(|_| ()),
                    Err(_) => panic!("create {path} neither succeeded nor failed in {OP_LIMIT:?}"),
                };
                if result.is_err() {
                    failed.store(true, Ordering::SeqCst);
                }
                (path, data, Some(result))
            }
        })
        .buffered(PIPELINE)
        .collect()
        .await;
    let mut errors = Vec::new();
    for (path, data, result) in results {
        match result {
            Some(Ok(())) => acknowledged.push((path, data)),
            Some(Err(e)) => errors.push((path, e)),
            None => {}
        }
    }
    let acked_bytes: usize = acknowledged.iter().map(|(_, d)| d.len()).sum();
    eprintln!(
        "{} writes acknowledged ({} KiB) before the disk filled; {} failed: {:?}",
        acknowledged.len(),
        acked_bytes >> 10,
        errors.len(),
        errors.iter().take(5).collect::<Vec<_>>()
    );
    assert!(
        !errors.is_empty(),
        "{max_writes} writes of {VALUE_LEN} bytes all acknowledged on a {TMPFS_SIZE} tmpfs: \
         the log cannot hold them"
    );
    assert!(
        (acked_bytes as u64) < TMPFS_BYTES,
        "{acked_bytes} bytes acknowledged, more than the {TMPFS_SIZE} disk holds"
    );
    for (path, e) in &errors {
        assert!(
            refused_or_lost(e),
            "a write refused for a full disk must fail with NotReadOnly (or a connection loss \
             for one in flight): {path}: {e:?}"
        );
    }

    let mntr_addr = server.addr();
    let state = tokio::task::spawn_blocking(move || {
        wait_server_state(mntr_addr, "read-only", Duration::from_secs(20))
    })
    .await
    .expect("mntr poller");
    assert!(
        state.is_ok(),
        "mntr must say zk_server_state read-only while the disk is full; last answer: {}",
        state.unwrap_err()
    );
    let srvr = lockkeeper_testkit::four_letter_word(mntr_addr, "srvr");
    assert!(
        srvr.contains("Mode: read-only"),
        "srvr must say Mode: read-only:\n{srvr}"
    );

    // Writes are refused, with the error a read-only ZooKeeper server gives.
    let refused = within(
        "create while full",
        OP_LIMIT,
        writer.create("/df/while-full", b"x", &persistent()),
    )
    .await;
    assert!(
        matches!(refused, Err(Error::NotReadOnly)),
        "a write while the disk is full must fail with NotReadOnly, got {refused:?}"
    );
    // Reads of durable state keep working.
    let paths: Vec<String> = acknowledged.iter().map(|(p, _)| p.clone()).collect();
    for ((path, data), found) in acknowledged
        .iter()
        .zip(read_nodes(&reader, &paths, 64).await)
    {
        let (found, _) = found
            .unwrap_or_else(|| panic!("{path} was acknowledged but cannot be read while full"));
        assert!(
            &found == data,
            "{path} reads other data while the disk is full"
        );
    }
    // A new session while read-only: not pinned by the spec; said, not asserted.
    match tokio::time::timeout(
        Duration::from_secs(10),
        Client::connector().with_fail_eagerly().connect(&addr),
    )
    .await
    {
        Ok(Ok(client)) => eprintln!(
            "a new session opened while read-only: {:#x}",
            client.session_id().0
        ),
        Ok(Err(e)) => eprintln!("a new session could not open while read-only: {e}"),
        Err(_) => eprintln!("a new session did not open within 10 s while read-only"),
    }

    // Space comes back: writes must be taken again within a bounded time.
    fs::remove_file(&ballast).expect("delete the ballast");
    let freed = Instant::now();
    let mut attempt = 0;
    loop {
        let path = format!("/df/after-{attempt}");
        let result = tokio::time::timeout(
            Duration::from_secs(5),
            writer.create(&path, b"after", &persistent()),
        )
        .await;
        match result {
            Ok(Ok(_)) => {
                acknowledged.push((path, b"after".to_vec()));
                break;
            }
            Ok(Err(e)) if refused_or_lost(&e) => {}
            Err(_) => {}
            Ok(Err(e)) => panic!("write after space came back: {path}: {e:?}"),
        }
        assert!(
            freed.elapsed() < Duration::from_secs(30),
            "writes still refused 30 s after the disk had space again"
        );
        attempt += 1;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    eprintln!(
        "writes taken again {:?} after space came back",
        freed.elapsed()
    );
    let answer = lockkeeper_testkit::four_letter_word(mntr_addr, "mntr");
    assert_eq!(
        mntr_state(&answer).as_deref(),
        Some("standalone"),
        "mntr once writes are taken again:\n{answer}"
    );
    for i in 0..20 {
        let path = format!("/df/later-{i}");
        within(
            "create",
            OP_LIMIT,
            writer.create(&path, &value(i), &persistent()),
        )
        .await
        .unwrap_or_else(|e| panic!("create {path} after recovery: {e}"));
        acknowledged.push((path, value(i)));
    }

    // A crash now, and everything acknowledged (before, during and after) is there.
    drop((writer, reader));
    server.kill9();
    let server = KeeperProcess::start(&data_dir, &[]);
    let client = session(&server.connect_string()).await;
    let paths: Vec<String> = acknowledged.iter().map(|(p, _)| p.clone()).collect();
    let mut lost = Vec::new();
    for ((path, data), found) in acknowledged
        .iter()
        .zip(read_nodes(&client, &paths, 64).await)
    {
        match found {
            Some((found, _)) if &found == data => {}
            Some(_) => lost.push(format!("{path} (other data)")),
            None => lost.push(path.clone()),
        }
    }
    assert!(
        lost.is_empty(),
        "{} of {} acknowledged writes lost after the disk filled and kill -9: {:?}",
        lost.len(),
        acknowledged.len(),
        &lost[..lost.len().min(10)]
    );
    let gone = within("exists", OP_LIMIT, client.check_stat("/df/while-full")).await;
    assert!(
        matches!(gone, Ok(None)),
        "the write refused while full exists after restart: {gone:?}"
    );
    drop(client);
    drop(server);
    drop(tmpfs);
}

/// A write Keeper refused while read-only, or one lost with its connection. A request being
/// written as Keeper resets the connection comes back as the socket's error (`Custom`, e.g. a
/// broken pipe): a connection loss too, as lockkeeper's `Error::is_connection_loss` counts it.
fn refused_or_lost(e: &Error) -> bool {
    matches!(
        e,
        Error::NotReadOnly | Error::ConnectionLoss | Error::Custom(_)
    )
}
