//! Keeper's `/metrics` endpoint over raw HTTP: what it answers, and that scrapers cannot hold up
//! ZooKeeper clients.
//!
//! Keeper only: Apache ZooKeeper's Prometheus provider needs jars (the Prometheus Java client,
//! its Jetty servlet) that no package here ships, so there is no second server to compare
//! with. The names and types asserted are those of ZooKeeper's `PrometheusMetricsProvider`;
//! `crates/cli/tests/metrics.rs` parses a scrape under load with Prometheus' own Python parser
//! and checks it against `mntr`.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use lockkeeper_proto::request::CreateOp;
use lockkeeper_proto::{OpCode, PathWatchRequest, Request};
use lockkeeper_server::Server;
use lockkeeper_testkit::raw::{LIMIT, Raw, open_acl};
use lockkeeper_testkit::try_four_letter_word;
use lockkeeper_testkit::zk_metrics::{GAUGES, SUMMARIES};
use lockkeeper_testkit::{Keeper, http_exchange};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// The longest one HTTP exchange may take on a loaded machine.
const HTTP_LIMIT: Duration = Duration::from_secs(20);

async fn start(data: &std::path::Path) -> (Server, SocketAddr) {
    let mut server = Server::start(Keeper::test_config(data))
        .await
        .expect("start keeper");
    assert_eq!(server.metrics_addr(), None);
    let metrics = server
        .serve_metrics(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .expect("serve metrics");
    assert!(
        metrics.ip().is_loopback() && metrics.port() != 0,
        "bound {metrics}"
    );
    assert_eq!(server.metrics_addr(), Some(metrics));
    let again = server
        .serve_metrics(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await;
    assert!(again.is_err(), "a second endpoint: {again:?}");
    (server, metrics)
}

/// Sends `request` as is and returns everything the server sends back before it closes.
async fn http(addr: SocketAddr, request: &[u8]) -> String {
    let request = request.to_vec();
    tokio::task::spawn_blocking(move || http_exchange(addr, &request, HTTP_LIMIT))
        .await
        .expect("join the HTTP exchange")
}

fn status(answer: &str) -> &str {
    answer.lines().next().unwrap_or_default()
}

#[tokio::test]
async fn get_metrics_is_prometheus_text_and_everything_else_is_refused() {
    let data = tempfile::tempdir().expect("a data dir");
    let (server, metrics) = start(data.path()).await;

    let answer = http(metrics, b"GET /metrics HTTP/1.1\r\nHost: keeper\r\n\r\n").await;
    assert_eq!(status(&answer), "HTTP/1.1 200 OK", "{answer}");
    let (head, body) = answer.split_once("\r\n\r\n").expect("a head and a body");
    assert!(
        head.lines()
            .any(|l| l == "Content-Type: text/plain; version=0.0.4"),
        "{head}"
    );
    assert!(
        head.lines()
            .any(|l| l == format!("Content-Length: {}", body.len())),
        "{head}"
    );
    for name in GAUGES {
        assert!(
            body.lines().any(|l| l == format!("# TYPE {name} gauge")),
            "{name} is no gauge in\n{body}"
        );
    }
    for (name, quantiles) in SUMMARIES {
        assert!(
            body.lines().any(|l| l == format!("# TYPE {name} summary")),
            "{name} is no summary in\n{body}"
        );
        let found: Vec<&str> = body
            .lines()
            .filter_map(|l| l.strip_prefix(&format!("{name}{{quantile=\"")))
            .filter_map(|rest| rest.split('"').next())
            .collect();
        assert_eq!(found, quantiles, "{name}'s quantiles in\n{body}");
        for suffix in ["_sum", "_count"] {
            assert!(
                body.lines()
                    .any(|l| l.starts_with(&format!("{name}{suffix} "))),
                "no {name}{suffix} in\n{body}"
            );
        }
    }
    // A query string is allowed, as Prometheus may add one.
    let answer = http(metrics, b"GET /metrics?x=1 HTTP/1.0\r\n\r\n").await;
    assert_eq!(status(&answer), "HTTP/1.1 200 OK", "{answer}");

    for (request, expected) in [
        (&b"GET / HTTP/1.1\r\n\r\n"[..], "HTTP/1.1 404 Not Found"),
        (b"GET /metricsx HTTP/1.1\r\n\r\n", "HTTP/1.1 404 Not Found"),
        (
            b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
            "HTTP/1.1 405 Method Not Allowed",
        ),
        (b"garbage\r\n\r\n", "HTTP/1.1 400 Bad Request"),
        (b"GET /metrics SPDY/3\r\n\r\n", "HTTP/1.1 400 Bad Request"),
    ] {
        let answer = http(metrics, request).await;
        assert_eq!(
            status(&answer),
            expected,
            "{:?}",
            String::from_utf8_lossy(request)
        );
    }
    let mut huge = b"GET /metrics HTTP/1.1\r\nX-Filler: ".to_vec();
    huge.extend(std::iter::repeat_n(b'a', 16 << 10));
    huge.extend_from_slice(b"\r\n\r\n");
    let answer = http(metrics, &huge).await;
    assert_eq!(
        status(&answer),
        "HTTP/1.1 431 Request Header Fields Too Large"
    );
    server.shutdown().await;
}

/// Scrapers that connect and then stall, more of them than are served at once, hold up neither
/// ZooKeeper clients nor `mntr`; once they go, scrapes are answered again.
#[tokio::test]
async fn stalled_scrapers_do_not_hold_up_clients() {
    let data = tempfile::tempdir().expect("a data dir");
    let (server, metrics) = start(data.path()).await;
    let addr = server.local_addr();
    let mut stalled = Vec::new();
    for _ in 0..40 {
        let mut stream = TcpStream::connect(metrics)
            .await
            .expect("connect to /metrics");
        stream
            .write_all(b"GET /metr")
            .await
            .expect("half a request");
        stalled.push(stream);
    }
    let mut client = Raw::session(addr, "client beside stalled scrapers").await;
    let started = Instant::now();
    for i in 0..200 {
        let path = format!("/n{i}");
        let created = client
            .call(&Request::Create(CreateOp {
                op: OpCode::Create,
                path: path.clone(),
                data: None,
                acl: open_acl(),
                flags: 0,
                ttl: 0,
            }))
            .await;
        assert_eq!(created.err(), Some(0), "create {path}");
        let read = client
            .call(&Request::GetData(PathWatchRequest { path, watch: false }))
            .await;
        assert_eq!(read.err(), Some(0));
    }
    // Generous for a loaded machine; a client stuck behind the scrapers would wait for their
    // 30 s connection limit.
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "400 requests took {:?} beside stalled scrapers",
        started.elapsed()
    );
    let mntr = tokio::task::spawn_blocking(move || try_four_letter_word(addr, "mntr", LIMIT))
        .await
        .expect("join")
        .expect("mntr beside stalled scrapers");
    assert!(mntr.contains("zk_znode_count\t"), "{mntr}");
    drop(stalled);
    // The slots free up as the server sees the closes; bounded retries.
    let deadline = Instant::now() + HTTP_LIMIT;
    loop {
        let answer = http(metrics, b"GET /metrics HTTP/1.1\r\n\r\n").await;
        if status(&answer) == "HTTP/1.1 200 OK" {
            let nodes: f64 = answer
                .lines()
                .find_map(|l| l.strip_prefix("znode_count "))
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("no znode_count in {answer}"));
            assert!(nodes >= 200.0, "znode_count {nodes} after 200 creates");
            break;
        }
        assert!(Instant::now() < deadline, "no scrape answered: {answer:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    server.shutdown().await;
}

/// Without TLS files, metrics over TLS and a reload are refused, each saying what is missing.
#[tokio::test]
async fn tls_without_its_files_is_refused_and_named() {
    let data = tempfile::tempdir().unwrap();
    let mut server = Server::start(Keeper::test_config(data.path()))
        .await
        .expect("start keeper");
    let refused = server
        .serve_metrics_tls(SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .expect_err("metrics over TLS without files");
    assert_eq!(refused.kind(), std::io::ErrorKind::InvalidInput);
    assert!(refused.to_string().contains("--tls-cert"), "{refused}");
    assert_eq!(server.metrics_addr(), None);
    let reload = server.reload_tls().expect_err("a reload without files");
    assert_eq!(reload.kind(), std::io::ErrorKind::NotFound);
    server.shutdown().await;
}
