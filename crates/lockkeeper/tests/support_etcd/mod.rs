//! What the etcd tests share: a session with a short lease on a member or a cluster, and the
//! keys under a prefix as etcdctl sees them.

#![allow(dead_code)] // each test file uses its own part

use std::time::Duration;

use lockkeeper::etcd::Session;
use lockkeeper_testkit::{Etcd, etcdctl};

/// A session on `endpoints` (comma-separated) with a 5 s lease, so a lost one shows quickly.
pub(crate) async fn session_on(endpoints: &str) -> Session {
    Session::builder(endpoints)
        .ttl(Duration::from_secs(5))
        .connect()
        .await
        .unwrap_or_else(|e| panic!("connect to {endpoints}: {e}"))
}

/// A session on the single member `etcd`.
pub(crate) async fn session(etcd: &Etcd) -> Session {
    session_on(&etcd.addr().to_string()).await
}

/// The keys under `prefix`, as etcdctl lists them.
pub(crate) fn keys(etcd: &Etcd, prefix: &str) -> Vec<String> {
    etcdctl(
        &[etcd.endpoint()],
        &["get", "--prefix", "--keys-only", prefix],
    )
    .expect("etcdctl get")
    .lines()
    .filter(|l| !l.is_empty())
    .map(str::to_owned)
    .collect()
}

/// Revokes `session`'s lease with etcdctl, behind the session's back: its keys go at once, as
/// when a holder's process dies and its lease runs out.
pub(crate) fn revoke_lease(etcd: &Etcd, session: &Session) {
    etcdctl(
        &[etcd.endpoint()],
        &["lease", "revoke", &format!("{:x}", session.lease_id())],
    )
    .unwrap_or_else(|e| panic!("etcdctl lease revoke {:x}: {e}", session.lease_id()));
}

/// Range (read) requests etcd has started serving so far: its own gRPC counter.
pub(crate) async fn ranges_served(etcd: &Etcd) -> u64 {
    grpc_counter(etcd, "grpc_server_started_total{", "method=\"Range\"").await
}

/// Lease renewals etcd has received so far (messages on `LeaseKeepAlive` streams).
pub(crate) async fn keep_alives_received(etcd: &Etcd) -> u64 {
    grpc_counter(
        etcd,
        "grpc_server_msg_received_total{",
        "method=\"LeaseKeepAlive\"",
    )
    .await
}

/// The sum of etcd's metric lines that start with `metric` and mention `label`.
async fn grpc_counter(etcd: &Etcd, metric: &'static str, label: &'static str) -> u64 {
    let addr = etcd.addr();
    let text = tokio::task::spawn_blocking(move || {
        lockkeeper_testkit::http_exchange(
            addr,
            b"GET /metrics HTTP/1.0\r\nHost: etcd\r\n\r\n",
            Duration::from_secs(10),
        )
    })
    .await
    .expect("read etcd's metrics");
    text.lines()
        .filter(|l| l.starts_with(metric) && l.contains(label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}
