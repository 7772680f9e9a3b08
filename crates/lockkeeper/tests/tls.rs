//! Locks over TLS with client certificates, on every backend: ZooKeeper's protocol to Keeper's
//! secure listener (whose `x509` ACL admits the certificate it names), `rediss://` to a
//! redis-server TLS port that requires client certificates, and `https://` to an etcd member
//! started with `--client-cert-auth`; and on each, a server signed by a CA the client does not
//! trust refused within the connect timeout, naming the address and the TLS reason.
//! Certificates are made at run time (`lockkeeper_tls::testing`).

use std::time::{Duration, Instant};

use lockkeeper::TlsFiles;
use lockkeeper::redis::{Redis, RedisOptions};
use lockkeeper_testkit::{Keeper, RedisServer, RedisTls};
use lockkeeper_tls::testing::{Issued, Pki};
use rcgen::DnType;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Far above the connect timeout: a refusal must come within that, not hang.
const LIMIT: Duration = Duration::from_secs(30);

fn client_files(trusted: &Pki, client: &Issued) -> TlsFiles {
    TlsFiles {
        ca: trusted.ca().to_owned(),
        cert: Some((client.cert.clone(), client.key.clone())),
    }
}

/// A refusal's error, checked to come within the connect timeout and to name `address` and a
/// TLS reason.
fn refused(what: &str, started: Instant, err: &lockkeeper::Error, address: &str, reason: &str) {
    let text = err.to_string();
    eprintln!("{what}: {text}");
    assert!(
        started.elapsed() < LIMIT,
        "{what}: took {:?}",
        started.elapsed()
    );
    assert!(
        text.contains(address),
        "{what}: the address is named: {text}"
    );
    assert!(text.contains(reason), "{what}: the TLS reason: {text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_protocol_mutex_over_tls_to_keeper() {
    use lockkeeper::zk::Session;
    let pki = Pki::new("test-ca");
    let keeper = Keeper::start_tls(pki.server_files("keeper", true));
    let secure = keeper.secure_addr();
    let alice = pki.client("alice", &[(DnType::CommonName, "alice")]);
    let session = Session::builder(&secure.to_string())
        .connection_timeout(CONNECT_TIMEOUT)
        .tls(client_files(&pki, &alice))
        .connect()
        .await
        .expect("a session over TLS");
    let mutex = session.mutex("/locks/tls").unwrap();
    let guard = mutex.lock().await.expect("lock over TLS");
    guard.release().await.expect("release over TLS");

    let other = Pki::new("other-ca");
    let started = Instant::now();
    let err = Session::builder(&secure.to_string())
        .connection_timeout(CONNECT_TIMEOUT)
        .tls(client_files(&other, &alice))
        .connect()
        .await
        .expect_err("a server signed by another CA");
    refused("zk", started, &err, &secure.to_string(), "UnknownIssuer");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rediss_lease_lock_with_client_certificates() {
    let pki = Pki::new("test-ca");
    let Issued { cert, key } = pki.server("redis");
    let redis = RedisServer::start_tls(RedisTls {
        cert,
        key,
        ca: pki.ca().to_owned(),
        auth_clients: true,
    });
    let alice = pki.client("alice", &[(DnType::CommonName, "alice")]);
    let options = || RedisOptions::new().connect_timeout(CONNECT_TIMEOUT);
    let client = Redis::connect_with(&redis.tls_url(), options().tls(client_files(&pki, &alice)))
        .await
        .expect("rediss:// with a client certificate");
    let lock = client.lease_lock("tls");
    let guard = lock.lock().await.expect("lock over TLS");
    assert!(lock.try_lock().await.expect("try_lock").is_none());
    guard.release().await.expect("release over TLS");

    let address = redis.tls_url().trim_start_matches("rediss://").to_owned();
    let other = Pki::new("other-ca");
    let started = Instant::now();
    let err = Redis::connect_with(
        &redis.tls_url(),
        options().tls(client_files(&other, &alice)),
    )
    .await
    .expect_err("a server signed by another CA");
    refused("redis", started, &err, &address, "UnknownIssuer");

    let plain = redis.addr().to_string();
    let started = Instant::now();
    let err = Redis::connect_with(
        &format!("rediss://{plain}"),
        options().tls(client_files(&pki, &alice)),
    )
    .await
    .expect_err("TLS to the plain-text port");
    refused("redis plain port", started, &err, &plain, "TLS");
}

#[cfg(feature = "etcd")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_https_mutex_with_client_certificates() {
    use lockkeeper::etcd::Session;
    use lockkeeper_testkit::{Etcd, EtcdTls};
    let pki = Pki::new("test-ca");
    let Issued { cert, key } = pki.server("etcd");
    let etcd = Etcd::start_tls(EtcdTls {
        cert,
        key,
        ca: pki.ca().to_owned(),
        client_cert_auth: true,
    });
    let alice = pki.client("alice", &[(DnType::CommonName, "alice")]);
    let session = Session::builder(&etcd.secure_endpoint())
        .connect_timeout(CONNECT_TIMEOUT)
        .tls(client_files(&pki, &alice))
        .connect()
        .await
        .expect("https:// with a client certificate");
    let mutex = session.mutex("tls").unwrap();
    let guard = mutex.lock().await.expect("lock over TLS");
    guard.release().await.expect("release over TLS");

    let address = etcd
        .secure_endpoint()
        .trim_start_matches("https://")
        .to_owned();
    let other = Pki::new("other-ca");
    let started = Instant::now();
    let err = Session::builder(&etcd.secure_endpoint())
        .connect_timeout(CONNECT_TIMEOUT)
        .tls(client_files(&other, &alice))
        .connect()
        .await
        .expect_err("a server signed by another CA");
    refused("etcd", started, &err, &address, "UnknownIssuer");

    let plain = etcd.addr().to_string();
    let started = Instant::now();
    let err = Session::builder(&format!("https://{plain}"))
        .connect_timeout(CONNECT_TIMEOUT)
        .tls(client_files(&pki, &alice))
        .connect()
        .await
        .expect_err("TLS to the plain-text port");
    refused("etcd plain port", started, &err, &plain, "TLS");
}
