//! Bad input to the etcd backend gets a clear error naming what was wrong, in bounded time:
//! unreachable endpoints, a zero TTL or timeout, empty names, zero permits and durations.
#![cfg(feature = "etcd")]

use std::time::{Duration, Instant};

use lockkeeper::LockOptions;
use lockkeeper::etcd::Session;
use lockkeeper::{ConnectCause, Error};
use lockkeeper_testkit::Etcd;

fn invalid(result: lockkeeper::Result<impl std::fmt::Debug>, mentions: &str) {
    match result {
        Err(Error::InvalidArgument(text)) => {
            assert!(
                text.contains(mentions),
                "{text:?} should mention {mentions:?}"
            );
        }
        other => panic!("expected InvalidArgument mentioning {mentions:?}, got {other:?}"),
    }
}

#[tokio::test]
async fn unreachable_endpoints_fail_in_bounded_time_naming_the_address() {
    // Nothing listens: refused, at once.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let closed_addr = closed.local_addr().expect("addr").to_string();
    drop(closed);
    let started = Instant::now();
    let err = Session::builder(&closed_addr)
        .connect_timeout(Duration::from_secs(2))
        .connect()
        .await
        .expect_err("nothing listens");
    // The diagnosis included: within the timeout, with a little slack for scheduling.
    assert!(
        started.elapsed() < Duration::from_millis(2300),
        "took {:?}",
        started.elapsed()
    );
    match &err {
        Error::Connect { address, cause } => {
            assert_eq!(address, &closed_addr);
            assert_eq!(cause, &ConnectCause::Refused);
        }
        other => panic!("expected Connect, got {other:?}"),
    }
    assert!(err.to_string().contains(&closed_addr), "{err}");

    // Something accepts the connection but never answers: bounded by the connect timeout.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let silent_addr = silent.local_addr().expect("addr").to_string();
    let both = format!("{closed_addr},{silent_addr}");
    let started = Instant::now();
    let err = Session::builder(&both)
        .connect_timeout(Duration::from_secs(1))
        .connect()
        .await
        .expect_err("nobody answers");
    assert!(
        started.elapsed() < Duration::from_millis(1300),
        "took {:?}",
        started.elapsed()
    );
    let text = err.to_string();
    assert!(
        text.contains(&closed_addr) && text.contains(&silent_addr),
        "{text}"
    );
    assert!(matches!(err, Error::Connect { .. }), "{err:?}");
    drop(silent);
}

#[tokio::test]
async fn bad_settings_and_names_are_refused() {
    invalid(Session::connect("").await, "\"\"");
    invalid(Session::connect("127.0.0.1").await, "host:port");
    invalid(Session::connect("https://127.0.0.1:2379").await, "TLS");
    invalid(
        Session::builder("127.0.0.1:2379")
            .ttl(Duration::ZERO)
            .connect()
            .await,
        "ttl",
    );
    invalid(
        Session::builder("127.0.0.1:2379")
            .connect_timeout(Duration::ZERO)
            .connect()
            .await,
        "connect_timeout",
    );

    let etcd = Etcd::start();
    let session = Session::builder(&etcd.addr().to_string())
        .ttl(Duration::from_secs(5))
        .connect()
        .await
        .expect("connect");
    invalid(session.mutex(""), "lock name");
    invalid(session.rw_lock(""), "read-write lock name");
    invalid(session.semaphore("", 2), "semaphore name");
    invalid(session.semaphore("pool", 0), "\"pool\"");
    invalid(session.election(""), "election name");
    let mutex = session.mutex("jobs").expect("mutex");
    invalid(
        mutex
            .clone()
            .with_options(LockOptions::new().max_hold(Duration::ZERO)),
        "max_hold for the etcd lock \"jobs\"",
    );
    invalid(
        mutex
            .clone()
            .with_options(LockOptions::new().lock_delay(Duration::ZERO)),
        "lock_delay",
    );
    // Lock-delay is the queue locks': asked of a semaphore or an election, refused by name.
    let delay = LockOptions::new().lock_delay(Duration::from_secs(1));
    invalid(
        session
            .semaphore("pool", 2)
            .expect("semaphore")
            .with_options(delay),
        "lock_delay is not an option of the etcd semaphore \"pool\"",
    );
    invalid(
        session
            .election("leader")
            .expect("election")
            .with_options(delay),
        "lock_delay is not an option of the etcd election \"leader\"",
    );
    invalid(mutex.lock_timeout(Duration::ZERO).await, "timeout");
    invalid(session.inspect("", None).await, "lock name");
    invalid(session.inspect("pool", Some(0)).await, "\"pool\"");
    // Nothing was left behind by the refusals.
    let guard = mutex.try_lock().await.expect("try_lock").expect("free");
    guard.release().await.expect("release");
    session.close().await.expect("close");
    assert!(!session.is_alive());
    assert!(matches!(session.close().await, Err(Error::SessionLost)));
    assert!(matches!(mutex.lock().await, Err(Error::SessionLost)));
}
