//! The etcd session on a real single-member etcd: what it reports of its lease, renewals once
//! per third of the TTL, a lease revoked behind its back seen at the next renewal, `close()`
//! ending `lost()` at once, and the last handle's drop revoking the lease so its keys do not
//! outlive it by a TTL.
#![cfg(feature = "etcd")]

mod support_etcd;

use std::time::{Duration, Instant};

use lockkeeper::etcd::Session;
use lockkeeper_testkit::{Etcd, etcdctl};
use support_etcd::{keep_alives_received, keys, revoke_lease, session};

/// A session whose lease would outlive every wait below by far.
async fn long_session(etcd: &Etcd) -> Session {
    Session::builder(&etcd.endpoint())
        .ttl(Duration::from_secs(60))
        .connect()
        .await
        .expect("session")
}

#[tokio::test]
async fn a_session_reports_the_granted_ttl_and_its_endpoints() {
    let etcd = Etcd::start();
    let a = session(&etcd).await;
    assert_eq!(a.ttl(), Duration::from_secs(5), "the TTL etcd granted");
    assert_eq!(a.endpoints(), etcd.addr().to_string());
    assert!(a.is_alive());
    let text = format!("{a:?}");
    assert!(
        text.contains(&format!("{:x}", a.lease_id())),
        "Debug names the lease: {text}"
    );
}

#[tokio::test]
async fn a_session_renews_once_per_third_of_its_ttl() {
    let etcd = Etcd::start();
    let a = session(&etcd).await;
    let before = keep_alives_received(&etcd).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let renewals = keep_alives_received(&etcd).await - before;
    // A 5 s TTL renews every 1.67 s: two or three renewals in 4 s (more after a reconnect).
    assert!(
        (1..=6).contains(&renewals),
        "{renewals} renewals in 4 s of a 5 s lease"
    );
    assert!(a.is_alive());
}

/// A lease revoked behind the session (an operator, or etcd expiring it while the process was
/// paused) ends the session at the next renewal, whether that renewal is the one that opens
/// the renewal stream or one on a stream already open; not at the end of the TTL.
#[tokio::test]
async fn a_lease_revoked_behind_the_session_is_lost_at_the_next_renewal() {
    let etcd = Etcd::start();
    // Renewed every 10 s: the loss must come from etcd's answer, not from the 30 s deadline.
    let connect = || async {
        Session::builder(&etcd.endpoint())
            .ttl(Duration::from_secs(30))
            .connect()
            .await
            .expect("session")
    };
    // Revoked before its renewal task first runs (etcdctl holds this test's only thread).
    let opening = connect().await;
    revoke_lease(&etcd, &opening);
    // Revoked once its renewal stream is open and has renewed.
    let open = connect().await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    revoke_lease(&etcd, &open);
    for (which, session) in [("opening", &opening), ("open", &open)] {
        tokio::time::timeout(Duration::from_secs(20), session.lost())
            .await
            .unwrap_or_else(|_| {
                panic!("{which} stream: lost() at the first renewal after the revocation")
            });
        assert!(!session.is_alive(), "{which}");
    }
}

#[tokio::test]
async fn closing_ends_lost_at_once() {
    let etcd = Etcd::start();
    let a = long_session(&etcd).await;
    a.close().await.expect("close");
    assert!(!a.is_alive());
    assert!(a.valid_until().is_none());
    tokio::time::timeout(Duration::from_secs(10), a.lost())
        .await
        .expect("lost() resolves once the session is closed, not at the TTL's end");
}

#[tokio::test]
async fn the_last_handle_dropped_revokes_the_lease_and_its_keys_go() {
    let etcd = Etcd::start();
    let a = long_session(&etcd).await;
    let lease = format!("--lease={:x}", a.lease_id());
    etcdctl(&[etcd.endpoint()], &["put", &lease, "dropped/key", ""]).expect("etcdctl put");
    let b = a.clone();
    drop(a);
    assert_eq!(
        keys(&etcd, "dropped/"),
        vec!["dropped/key"],
        "a handle is left"
    );
    drop(b);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !keys(&etcd, "dropped/").is_empty() {
        assert!(
            Instant::now() < deadline,
            "the key outlived the session's last handle by 20 s (its lease's TTL is 60 s)"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
