//! `lockkeeper serve --secure-listen`: TLS beside the plain listener, client certificates
//! required by `--tls-client-ca`, the files reloaded on SIGHUP without dropping sessions (and
//! kept when the new ones do not load), and a plain-text client on the secure port refused with
//! a log line that says so, promptly.

mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use lockkeeper_tls::testing::{Issued, Pki};
use lockkeeper_tls::{ClientFiles, ServerName, Stream, x509_id};
use lockkeeper_zk_client::{Client, CreateMode, CreateOptions};
use rcgen::DnType;

use support::KeeperProcess;

const LIMIT: Duration = Duration::from_secs(60);

/// Copies `issued` to the files the server is pointed at, as a renewal would.
fn install(issued: &Issued, cert: &Path, key: &Path) {
    std::fs::copy(&issued.cert, cert).unwrap();
    std::fs::copy(&issued.key, key).unwrap();
}

/// The subject of the certificate the secure listener presents now.
async fn presented(pki: &Pki, client: &Issued, addr: std::net::SocketAddr) -> String {
    let files = ClientFiles {
        ca: pki.ca().to_owned(),
        cert: Some((client.cert.clone(), client.key.clone())),
    };
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = ServerName::try_from("localhost").unwrap();
    let stream = Stream::connect(files.config().unwrap(), name, tcp)
        .await
        .expect("a TLS handshake with the secure listener");
    x509_id(&stream.peer_certificates()[0]).unwrap()
}

fn files(dir: &Path) -> (PathBuf, PathBuf) {
    (dir.join("server.pem"), dir.join("server.key"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_files_reload_on_sighup_and_sessions_stay() {
    let pki = Pki::new("test-ca");
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = files(dir.path());
    install(&pki.server("first"), &cert, &key);
    let data = tempfile::tempdir().unwrap();
    let keeper = KeeperProcess::start(
        data.path(),
        &[
            "--secure-listen",
            "127.0.0.1:0",
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
            "--tls-client-ca",
            pki.ca().to_str().unwrap(),
        ],
    );
    let secure = keeper.secure_addr();
    let alice = pki.client("alice", &[(DnType::CommonName, "alice")]);
    assert_eq!(presented(&pki, &alice, secure).await, "CN=first");

    let client = Client::connector()
        .tls(ClientFiles {
            ca: pki.ca().to_owned(),
            cert: Some((alice.cert.clone(), alice.key.clone())),
        })
        .connect(&format!("localhost:{}", secure.port()))
        .await
        .expect("a session over TLS");
    client
        .create("/before", b"x", &CreateOptions::new(CreateMode::Ephemeral))
        .await
        .expect("create over TLS");
    let session = client.session_id();

    // A renewal: new files, then SIGHUP. New handshakes get them; the session goes on.
    install(&pki.server("second"), &cert, &key);
    keeper.signal(libc::SIGHUP);
    keeper.stderr_containing("reloaded", LIMIT);
    assert_eq!(presented(&pki, &alice, secure).await, "CN=second");
    assert_eq!(client.get_data("/before").await.expect("read").0, b"x");
    assert_eq!(client.session_id(), session);

    // A renewal that does not load (a key cut short): refused, named, and the files in use stay.
    std::fs::write(&key, "-----BEGIN PRIVATE KEY-----\nAAAA\n").unwrap();
    keeper.signal(libc::SIGHUP);
    let log = keeper.stderr_containing("not reloaded", LIMIT);
    assert!(log.contains("server.key"), "the file is named:\n{log}");
    assert_eq!(presented(&pki, &alice, secure).await, "CN=second");
    client.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_text_client_on_the_secure_port_is_refused_promptly_and_logged() {
    let pki = Pki::new("test-ca");
    let Issued { cert, key } = pki.server("keeper");
    let data = tempfile::tempdir().unwrap();
    let keeper = KeeperProcess::start(
        data.path(),
        &[
            "--secure-listen",
            "127.0.0.1:0",
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ],
    );
    let started = Instant::now();
    let refused = Client::connector()
        .connection_timeout(Duration::from_secs(5))
        .one_round(true)
        .connect(&keeper.secure_addr().to_string())
        .await
        .expect_err("a plain-text session on the secure port");
    assert!(started.elapsed() < LIMIT, "took {:?}", started.elapsed());
    let log = keeper.stderr_containing("does not speak TLS", LIMIT);
    assert!(
        log.contains("does not speak TLS"),
        "the server's log says what happened ({refused}):\n{log}"
    );
    // The plain listener is unaffected.
    let plain = Client::connect(&keeper.connect_string())
        .await
        .expect("plain");
    plain.close().await;
}

/// `GET /metrics` over TLS to `addr`, presenting `client` if given: the whole answer, or the
/// TLS error.
async fn scrape(
    pki: &Pki,
    client: Option<&Issued>,
    addr: std::net::SocketAddr,
) -> std::io::Result<String> {
    let files = ClientFiles {
        ca: pki.ca().to_owned(),
        cert: client.map(|c| (c.cert.clone(), c.key.clone())),
    };
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let name = ServerName::try_from("localhost").unwrap();
    let stream = Stream::connect(files.config().unwrap(), name, tcp).await?;
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await?;
    let mut answer = bytes::BytesMut::new();
    while stream.read_buf(&mut answer).await? > 0 {}
    Ok(String::from_utf8_lossy(&answer).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_over_tls_answer_only_a_scraper_with_a_certificate() {
    let pki = Pki::new("test-ca");
    let Issued { cert, key } = pki.server("keeper");
    let data = tempfile::tempdir().unwrap();
    let metrics = std::net::SocketAddr::from(([127, 0, 0, 1], lockkeeper_testkit::free_port()));
    let keeper = KeeperProcess::start(
        data.path(),
        &[
            "--metrics-listen",
            &metrics.to_string(),
            "--metrics-tls",
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
            "--tls-client-ca",
            pki.ca().to_str().unwrap(),
        ],
    );
    let scraper = pki.client("prometheus", &[(DnType::CommonName, "prometheus")]);
    let answer = scrape(&pki, Some(&scraper), metrics)
        .await
        .expect("a scrape over TLS");
    assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
    assert!(answer.contains("znode_count"), "{answer}");

    let refused = scrape(&pki, None, metrics).await;
    assert!(
        refused.is_err(),
        "a scraper without a certificate: {refused:?}"
    );
    // Plain HTTP gets no answer: the endpoint speaks TLS only, and logs why.
    let mut plain = tokio::net::TcpStream::connect(metrics).await.unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut plain, b"GET /metrics HTTP/1.1\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(
        LIMIT,
        tokio::io::AsyncReadExt::read_to_end(&mut plain, &mut answer),
    )
    .await;
    assert!(!String::from_utf8_lossy(&answer).contains("200 OK"));
    let log = keeper.stderr_containing("metrics: connection refused", LIMIT);
    assert!(log.contains("metrics: connection refused"), "{log}");
}

#[test]
fn a_secure_listener_needs_its_files_and_names_the_one_it_cannot_use() {
    let data = tempfile::tempdir().unwrap();
    let failure = KeeperProcess::try_start(data.path(), &["--secure-listen", "127.0.0.1:0"])
        .err()
        .expect("--secure-listen without a certificate");
    assert!(failure.stderr.contains("--tls-cert"), "{failure}");
    let missing = data.path().join("missing.pem");
    let failure = KeeperProcess::try_start(
        data.path(),
        &[
            "--secure-listen",
            "127.0.0.1:0",
            "--tls-cert",
            missing.to_str().unwrap(),
            "--tls-key",
            missing.to_str().unwrap(),
        ],
    )
    .err()
    .expect("a certificate file that is not there");
    assert!(failure.stderr.contains("missing.pem"), "{failure}");
}
