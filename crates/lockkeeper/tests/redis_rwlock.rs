//! The read-write lock: readers share, a writer excludes, writers are preferred, and a reader
//! cannot hold past its lease.

mod support_redis;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use lockkeeper::Error;
use lockkeeper::LockOptions;
use lockkeeper::redis::RwMode;
use lockkeeper_testkit::RedisServer;
use support_redis::{connect, eventually};

#[tokio::test]
async fn readers_share_and_a_writer_excludes() {
    let server = RedisServer::start();
    let a = connect(&server).await.rw_lock("catalog");
    let b = connect(&server).await.rw_lock("catalog");

    let r1 = a.read().await.expect("read");
    let r2 = b
        .try_read()
        .await
        .expect("try_read")
        .expect("readers share");
    assert_eq!(r1.mode(), RwMode::Read);
    assert!(r2.fencing_token() > r1.fencing_token());
    assert_eq!(a.readers().await.expect("readers"), 2);
    assert!(
        b.try_write().await.expect("try_write").is_none(),
        "readers hold it"
    );
    assert!(
        !a.is_write_locked().await.expect("is_write_locked"),
        "a failed try_write leaves nothing"
    );
    r1.release().await.expect("release");
    assert!(
        b.try_write().await.expect("try_write").is_none(),
        "one reader left"
    );
    r2.release().await.expect("release");

    let w = b.try_write().await.expect("try_write").expect("free");
    assert_eq!(w.mode(), RwMode::Write);
    assert!(a.is_write_locked().await.expect("is_write_locked"));
    assert!(
        a.try_read().await.expect("try_read").is_none(),
        "the writer excludes readers"
    );
    assert!(
        a.try_write().await.expect("try_write").is_none(),
        "and writers"
    );
    let token = w.fencing_token();
    w.release().await.expect("release");
    let r3 = a.try_read().await.expect("try_read").expect("free again");
    assert!(r3.fencing_token() > token);
    r3.release().await.expect("release");
}

#[tokio::test]
async fn a_waiting_writer_holds_new_readers_back() {
    let server = RedisServer::start();
    let lock = connect(&server).await.rw_lock("prefer-writers");
    let writer_lock = connect(&server).await.rw_lock("prefer-writers");
    let first_reader = lock.read().await.expect("read");
    let writer = tokio::spawn(async move {
        writer_lock
            .write_timeout(Duration::from_secs(60))
            .await
            .expect("write_timeout")
            .expect("acquired once the reader left")
    });
    let probe = lock.clone();
    eventually(
        Duration::from_secs(20),
        "a new reader is refused while the writer waits",
        || {
            let probe = probe.clone();
            async move {
                match probe.try_read().await.expect("try_read") {
                    Some(guard) => {
                        guard.release().await.expect("release");
                        false
                    }
                    None => true,
                }
            }
        },
    )
    .await;
    first_reader.release().await.expect("release");
    let w = tokio::time::timeout(Duration::from_secs(30), writer)
        .await
        .expect("writer acquires")
        .expect("writer task");
    assert!(lock.try_read().await.expect("try_read").is_none());
    w.release().await.expect("release");
    let reader = lock
        .read_timeout(Duration::from_secs(10))
        .await
        .expect("read_timeout")
        .expect("readers welcome once the writer is done");
    reader.release().await.expect("release");
}

#[tokio::test]
async fn a_writer_that_gives_up_withdraws_its_mark() {
    let server = RedisServer::start();
    let lock = connect(&server).await.rw_lock("withdrawn");
    let reader = lock.read().await.expect("read");
    let gave_up = lock
        .write_timeout(Duration::from_millis(300))
        .await
        .expect("write_timeout");
    assert!(gave_up.is_none());
    // The mark would live 3 s on its own; the withdrawal frees readers well before.
    let probe = lock.clone();
    eventually(Duration::from_secs(2), "a new reader is admitted", || {
        let probe = probe.clone();
        async move {
            match probe.try_read().await.expect("try_read") {
                Some(guard) => {
                    guard.release().await.expect("release");
                    true
                }
                None => false,
            }
        }
    })
    .await;
    reader.release().await.expect("release");
}

#[tokio::test]
async fn a_reader_cannot_hold_past_its_lease() {
    let server = RedisServer::start();
    let redis = connect(&server).await;
    let short = redis
        .rw_lock("leases")
        .with_options(LockOptions::new().lease(Duration::from_millis(300)))
        .unwrap();
    let long = connect(&server).await.rw_lock("leases");
    let expiring = short.read().await.expect("read");
    let lasting = long.read().await.expect("read");
    assert_eq!(long.readers().await.expect("readers"), 2);
    tokio::time::timeout(Duration::from_secs(5), expiring.lost())
        .await
        .expect("the short lease ends");
    // The other reader keeps the set alive, but the expired one no longer counts...
    eventually(Duration::from_secs(5), "the expired reader is gone", || {
        let long = long.clone();
        async move { long.readers().await.expect("readers") == 1 }
    })
    .await;
    assert!(!expiring.is_held());
    assert!(matches!(expiring.release().await, Err(Error::NotHeld)));
    lasting.release().await.expect("release");

    // ...and an expired reader alone does not keep a writer out.
    let stuck = short.read().await.expect("read");
    let started = tokio::time::Instant::now();
    let w = long
        .write_timeout(Duration::from_secs(20))
        .await
        .expect("write_timeout")
        .expect("the reader's lease ran out");
    assert!(started.elapsed() < Duration::from_secs(15));
    assert!(matches!(stuck.release().await, Err(Error::NotHeld)));
    w.release().await.expect("release");
}

#[tokio::test]
async fn readers_and_writers_under_contention_never_overlap_wrongly() {
    let server = RedisServer::start();
    let readers_inside = Arc::new(AtomicU64::new(0));
    let writers_inside = Arc::new(AtomicU64::new(0));
    let max_readers = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for task in 0..6 {
        let lock = connect(&server).await.rw_lock("mixed");
        let (readers_inside, writers_inside, max_readers) = (
            Arc::clone(&readers_inside),
            Arc::clone(&writers_inside),
            Arc::clone(&max_readers),
        );
        tasks.push(tokio::spawn(async move {
            for round in 0..12 {
                if task < 2 && round % 2 == 0 {
                    let w = lock
                        .write_timeout(Duration::from_secs(60))
                        .await
                        .expect("write")
                        .expect("writer acquires");
                    assert_eq!(
                        writers_inside.fetch_add(1, Ordering::SeqCst),
                        0,
                        "two writers"
                    );
                    assert_eq!(
                        readers_inside.load(Ordering::SeqCst),
                        0,
                        "writer with readers"
                    );
                    tokio::time::sleep(Duration::from_millis(3)).await;
                    writers_inside.fetch_sub(1, Ordering::SeqCst);
                    w.release().await.expect("release");
                } else {
                    let r = lock
                        .read_timeout(Duration::from_secs(60))
                        .await
                        .expect("read")
                        .expect("reader acquires");
                    let inside = readers_inside.fetch_add(1, Ordering::SeqCst) + 1;
                    max_readers.fetch_max(inside, Ordering::SeqCst);
                    assert_eq!(
                        writers_inside.load(Ordering::SeqCst),
                        0,
                        "reader with a writer"
                    );
                    tokio::time::sleep(Duration::from_millis(3)).await;
                    readers_inside.fetch_sub(1, Ordering::SeqCst);
                    r.release().await.expect("release");
                }
            }
        }));
    }
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(120), task)
            .await
            .expect("tasks finish")
            .expect("task");
    }
    assert!(max_readers.load(Ordering::SeqCst) >= 1);
}
