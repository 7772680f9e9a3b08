//! Connecting to something that is not a usable Redis fails within the connect timeout, with
//! an error that names the address dialled and says what was found there.
//!
//! The client library alone reports a refused port without its address and a server of the
//! wrong kind as whatever its socket did next ("broken pipe", a parse error, a timeout), so an
//! operator who pointed the URL at the wrong port cannot tell what happened. `Redis::connect`
//! probes the address when connecting fails and returns `Error::Connect { address, cause }`.
//! Each case here uses the default options (5 s connect timeout, which bounds the diagnosis
//! too) unless it says otherwise, measures how long the call took, and checks the variant, the
//! exact `host:port` and the Display text. Every server is on 127.0.0.1: a closed port, a fake
//! HTTP server, the in-process Keeper (ZooKeeper protocol), a silent server, and a real
//! redis-server that requires a password.

mod support_redis;

use std::time::{Duration, Instant};

use lockkeeper::redis::{Redis, RedisOptions};
use lockkeeper::{ConnectCause, Error};
use lockkeeper_testkit::{Keeper, RedisServer, TestServer};
use support_redis::raw;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

/// The default connect timeout of `RedisOptions`.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
/// What a connect may take past its timeout (scheduling on a busy 2-core machine).
const SLACK: Duration = Duration::from_millis(1500);
/// A hang is a failure, not a stuck test: no connect may take longer than this.
const HANG: Duration = Duration::from_secs(30);
/// How many connections a fake server accepts (the library retries, then the probe dials).
const FAKE_CONNECTIONS: usize = 16;
/// How long a fake server keeps one connection at most.
const FAKE_CONNECTION_LIFETIME: Duration = Duration::from_secs(20);
/// What the fake HTTP server answers to anything.
const HTTP_400: &[u8] = b"HTTP/1.1 400 Bad Request\r\n\r\n";

/// How a failed connect came out.
struct Failure {
    address: String,
    cause: ConnectCause,
    display: String,
    took: Duration,
}

/// Connects to `url` (with `options`, or the defaults through `Redis::connect`) and returns the
/// `Error::Connect` it must fail with, and how long it took; anything else panics.
async fn connect_failure(url: &str, options: Option<RedisOptions>) -> Failure {
    let started = Instant::now();
    let connecting = async {
        match options {
            Some(options) => Redis::connect_with(url, options).await,
            None => Redis::connect(url).await,
        }
    };
    let result = tokio::time::timeout(HANG, connecting)
        .await
        .unwrap_or_else(|_| panic!("connecting to {url} hung for {HANG:?}"));
    let took = started.elapsed();
    match result {
        Err(err @ Error::Connect { .. }) => {
            let display = err.to_string();
            let Error::Connect { address, cause } = err else {
                unreachable!("matched Error::Connect above");
            };
            eprintln!("{url}: {display} (after {took:?})");
            Failure {
                address,
                cause,
                display,
                took,
            }
        }
        other => panic!("connecting to {url}: expected Error::Connect, got {other:?}"),
    }
}

/// Asserts that the connect finished within `timeout` plus the slack.
fn assert_bounded(failure: &Failure, timeout: Duration) {
    assert!(
        failure.took <= timeout + SLACK,
        "the connect took {:?}, more than its {timeout:?} timeout plus {SLACK:?}: {}",
        failure.took,
        failure.display
    );
}

/// `127.0.0.1:PORT` where nothing listens.
fn closed_port() -> String {
    format!("127.0.0.1:{}", lockkeeper_testkit::free_port())
}

/// A TCP server on 127.0.0.1 that hands each connection (at most [`FAKE_CONNECTIONS`], each
/// for at most [`FAKE_CONNECTION_LIFETIME`]) to `handle`; stopped, connections and all, when
/// dropped.
struct FakeServer {
    address: String,
    task: JoinHandle<()>,
}

impl FakeServer {
    async fn start<F, Fut>(handle: F) -> FakeServer
    where
        F: Fn(TcpStream) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1:0 for a fake server");
        let address = listener
            .local_addr()
            .expect("local address of the fake server")
            .to_string();
        let task = tokio::spawn(async move {
            // Aborting this task drops the set, which aborts every connection's task.
            let mut connections = JoinSet::new();
            for _ in 0..FAKE_CONNECTIONS {
                let Ok((stream, _)) = listener.accept().await else {
                    break;
                };
                connections.spawn(tokio::time::timeout(
                    FAKE_CONNECTION_LIFETIME,
                    handle(stream),
                ));
            }
            drop(listener);
            while connections.join_next().await.is_some() {}
        });
        FakeServer { address, task }
    }

    fn url(&self) -> String {
        format!("redis://{}", self.address)
    }
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Reads and discards until the peer closes (or the connection's lifetime ends).
async fn drain(stream: &mut TcpStream) {
    let mut buf = [0u8; 1024];
    while matches!(stream.read(&mut buf).await, Ok(n) if n > 0) {}
}

/// An HTTP server that does not understand anything: any input gets a 400, then it closes.
async fn answer_http_400(mut stream: TcpStream) {
    let mut buf = [0u8; 1024];
    if matches!(stream.read(&mut buf).await, Ok(n) if n > 0) {
        let _ = stream.write_all(HTTP_400).await;
    }
    let _ = stream.shutdown().await;
    // Keep reading until the client closes, so that our close is a FIN, not a reset that
    // could discard the answer.
    drain(&mut stream).await;
}

/// A server that accepts, reads, and never says anything.
async fn stay_silent(mut stream: TcpStream) {
    drain(&mut stream).await;
}

#[tokio::test]
async fn a_closed_port_is_refused_and_named() {
    let address = closed_port();
    let failure = connect_failure(&format!("redis://{address}"), None).await;
    assert_eq!(failure.address, address);
    assert_eq!(failure.cause, ConnectCause::Refused);
    assert_eq!(
        failure.display,
        format!("cannot connect to {address}: connection refused (nothing listens there)")
    );
    // Refused is known at once: no waiting out the timeout.
    assert!(
        failure.took < DEFAULT_TIMEOUT / 2,
        "a refused connect took {:?}",
        failure.took
    );
}

#[tokio::test]
async fn a_closed_port_is_refused_within_a_short_connect_timeout() {
    let address = closed_port();
    let timeout = Duration::from_secs(1);
    let failure = connect_failure(
        &format!("redis://{address}"),
        Some(RedisOptions::new().connect_timeout(timeout)),
    )
    .await;
    assert_bounded(&failure, timeout);
    assert_eq!(failure.address, address);
    assert_eq!(failure.cause, ConnectCause::Refused);
    assert_eq!(
        failure.display,
        format!("cannot connect to {address}: connection refused (nothing listens there)")
    );
}

#[tokio::test]
async fn an_http_server_is_not_redis_and_its_answer_is_quoted() {
    let server = FakeServer::start(answer_http_400).await;
    let failure = connect_failure(&server.url(), None).await;
    assert_bounded(&failure, DEFAULT_TIMEOUT);
    assert_eq!(failure.address, server.address);
    let ConnectCause::NotRedis(text) = &failure.cause else {
        panic!("expected NotRedis, got {:?}", failure.cause);
    };
    assert!(
        text.contains("HTTP/1.1 400"),
        "the cause should quote the HTTP answer: {text:?}"
    );
    assert_eq!(
        failure.display,
        format!(
            "cannot connect to {}: not a Redis server: {text}",
            server.address
        )
    );
}

#[tokio::test]
async fn a_zookeeper_server_is_not_redis() {
    let keeper = Keeper::start();
    let address = keeper.connect_string();
    let failure = connect_failure(&format!("redis://{address}"), None).await;
    assert_bounded(&failure, DEFAULT_TIMEOUT);
    assert_eq!(failure.address, address);
    // Keeper reads `PING\r\n` as a frame length it refuses, and hangs up without a word.
    assert_eq!(
        failure.cause,
        ConnectCause::NotRedis("it closed the connection without answering PING".into())
    );
    assert_eq!(
        failure.display,
        format!(
            "cannot connect to {address}: not a Redis server: \
             it closed the connection without answering PING"
        )
    );
}

#[tokio::test]
async fn a_silent_server_fails_within_the_timeout() {
    let server = FakeServer::start(stay_silent).await;
    let failure = connect_failure(&server.url(), None).await;
    assert_bounded(&failure, DEFAULT_TIMEOUT);
    assert_eq!(failure.address, server.address);
    assert_eq!(
        failure.cause,
        ConnectCause::Other(
            "connected, but no answer to PING within 5s (a hung server, or not Redis)".into()
        )
    );
    // Silence is not evidence of another kind of server: a hung Redis is silent too.
    assert_eq!(
        failure.display,
        format!(
            "cannot connect to {}: connected, but no answer to PING within 5s (a hung server, \
             or not Redis)",
            server.address
        )
    );
}

#[tokio::test]
async fn a_redis_that_requires_a_password_rejects_us() {
    // RedisServer takes no extra configuration (and RedisNode's readiness check expects a
    // PONG), so the password is set on the running server over an already open connection.
    let server = RedisServer::start();
    let mut admin = raw(&server).await;
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("requirepass")
        .arg("lockkeeper-test-secret")
        .query_async(&mut admin)
        .await
        .expect("CONFIG SET requirepass");
    let address = server.addr().to_string();
    let failure = connect_failure(&server.url(), None).await;
    assert_bounded(&failure, DEFAULT_TIMEOUT);
    assert_eq!(failure.address, address);
    let ConnectCause::Rejected(text) = &failure.cause else {
        panic!("expected Rejected, got {:?}", failure.cause);
    };
    assert!(text.starts_with("NOAUTH"), "Redis's own answer: {text:?}");
    assert_eq!(
        failure.display,
        format!("cannot connect to {address}: the server refused the connection: {text}")
    );
}
