//! A holder paused (SIGSTOP) past its lease TTL: etcd expires the lease and grants the lock to
//! the next holder with a higher fencing token; the resumed holder's `lost()` has fired and
//! `is_held()` is false at its first check. That its late write is then refused by real fences
//! (Redis, SQLite, PostgreSQL) is `fence/lost_holders.rs`'s etcd case.
#![cfg(feature = "etcd")]

use std::time::{Duration, Instant};

use lockkeeper::FencingToken;
use lockkeeper::etcd::Session;
use lockkeeper_testkit::Etcd;
use lockkeeper_testkit::test_child::{self, ChildProcess};

const TTL: Duration = Duration::from_secs(2);

/// The child's part: lock, report the token, check every 20 ms; after a gap longer than the
/// TTL (the parent stopped us), `lost()` must have fired and `is_held()` be false. Exit code 0
/// when the guard knew it lost.
async fn paused_holder() {
    let endpoint = std::env::var("ETCD_ENDPOINT").expect("ETCD_ENDPOINT");
    let out = std::env::var("HOLDER_OUT").expect("HOLDER_OUT");
    let session = Session::builder(&endpoint)
        .ttl(TTL)
        .connect()
        .await
        .expect("connect");
    let guard = session
        .mutex("account")
        .expect("mutex")
        .lock()
        .await
        .expect("lock");
    let token = guard.fencing_token();
    std::fs::write(&out, format!("token {token}\n")).expect("write");
    let mut before = Instant::now();
    let give_up = before + Duration::from_secs(60);
    while Instant::now() < give_up {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let gap = before.elapsed();
        before = Instant::now();
        if gap > TTL {
            let held = guard.is_held();
            let lost = tokio::time::timeout(Duration::from_millis(100), guard.lost())
                .await
                .is_ok();
            eprintln!("after a {gap:?} pause: is_held={held} lost={lost}");
            std::process::exit(if !held && lost && guard.valid_until().is_none() {
                0
            } else {
                3
            });
        }
        assert!(guard.is_held(), "held before the pause");
    }
    std::process::exit(4);
}

fn read_token(text: &str, prefix: &str) -> Option<FencingToken> {
    text.lines()
        .find_map(|line| line.strip_prefix(prefix)?.trim().parse().ok())
        .map(FencingToken::new)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_holder_knows_it_lost_and_the_next_token_is_higher() {
    if test_child::role().is_some() {
        return paused_holder().await;
    }
    let etcd = Etcd::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("holder");
    let mut child = ChildProcess::spawn(
        "a_paused_holder_knows_it_lost_and_the_next_token_is_higher",
        "holder",
        &[
            ("ETCD_ENDPOINT", etcd.addr().to_string()),
            ("HOLDER_OUT", out.display().to_string()),
        ],
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let old = loop {
        let text = std::fs::read_to_string(&out).unwrap_or_default();
        if let Some(token) = read_token(&text, "token ") {
            break token;
        }
        assert!(Instant::now() < deadline, "the child never took the lock");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    child.signal("STOP");
    let stopped = Instant::now();
    let session = Session::builder(&etcd.addr().to_string())
        .ttl(TTL)
        .connect()
        .await
        .expect("connect");
    let next = session
        .mutex("account")
        .expect("mutex")
        .lock_timeout(Duration::from_secs(20))
        .await
        .expect("lock_timeout")
        .expect("granted once the stopped holder's lease expired");
    assert!(
        stopped.elapsed() >= TTL / 2,
        "granted only after the lease ran out"
    );
    assert!(
        next.fencing_token() > old,
        "the next holder's token is higher"
    );
    tokio::time::sleep(TTL).await;
    child.signal("CONT");
    assert!(
        tokio::task::spawn_blocking(move || child.wait_success(Duration::from_secs(30)))
            .await
            .expect("join"),
        "the resumed holder believed it still held the lock (see its stderr)"
    );
    assert!(next.is_held());
    next.release().await.expect("release");
}
