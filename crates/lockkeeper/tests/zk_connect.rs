//! Connecting fails within the connection timeout and says where and why: nothing listening,
//! a server that is not ZooKeeper, a server that never answers. The defaults are tested, not
//! only tuned values, because the defaults are what a new user meets first.

use std::time::{Duration, Instant};

use lockkeeper::zk::{RetryPolicy, Session};
use lockkeeper::{ConnectCause, Error};
use lockkeeper_testkit::TestServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// The default connection timeout, and what a call may take beyond it on a busy machine.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
const SLACK: Duration = Duration::from_millis(1500);

/// `127.0.0.1:PORT` where nothing listens.
fn closed_port() -> String {
    format!("127.0.0.1:{}", lockkeeper_testkit::free_port())
}

/// A fake server on loopback that answers every connection with `answer` (or nothing, and
/// keeps the socket open, when `answer` is empty). Ends with the test's runtime.
async fn fake_server(answer: &'static [u8]) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = listener.local_addr().expect("address").to_string();
    tokio::spawn(async move {
        // Bounded: a connect attempt opens a handful of connections.
        for _ in 0..64 {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut buf = [0u8; 256];
                let _ = socket.read(&mut buf).await;
                if answer.is_empty() {
                    tokio::time::sleep(Duration::from_secs(60)).await;
                } else {
                    let _ = socket.write_all(answer).await;
                }
            });
        }
    });
    address
}

/// Connects with default settings; the error and how long it took.
async fn connect_default(connect: &str) -> (Error, Duration) {
    let started = Instant::now();
    let err = Session::connect(connect)
        .await
        .expect_err("connecting must fail");
    (err, started.elapsed())
}

fn cause_at(err: &Error, address: &str) -> ConnectCause {
    match err {
        Error::Connect { address: at, cause } => {
            assert_eq!(at, address, "the error names the address dialled: {err}");
            assert!(err.to_string().contains(address), "{err}");
            cause.clone()
        }
        other => panic!("want Error::Connect naming {address}, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_port_fails_within_the_default_timeout_saying_refused() {
    let address = closed_port();
    let (err, took) = connect_default(&address).await;
    assert_eq!(cause_at(&err, &address), ConnectCause::Refused, "{err}");
    assert!(err.to_string().contains("refused"), "{err}");
    assert!(took < DEFAULT_TIMEOUT + SLACK, "took {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_is_not_zookeeper_is_named_as_such_at_once() {
    let address = fake_server(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n").await;
    let (err, took) = connect_default(&address).await;
    match cause_at(&err, &address) {
        ConnectCause::NotZooKeeper(what) => assert!(what.contains("HTTP/1.1 400"), "{what}"),
        other => panic!("want NotZooKeeper, got {other:?}"),
    }
    // Waiting cannot turn it into ZooKeeper, so it does not wait for the timeout. (Trying it
    // again until the timeout would still end a last pause of up to half a second early, so
    // "before the timeout" alone could not tell the two apart: it ends within its first half.)
    assert!(took < DEFAULT_TIMEOUT / 2, "took {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_server_is_not_zookeeper() {
    let redis = lockkeeper_testkit::RedisServer::start();
    let address = redis
        .url()
        .trim_start_matches("redis://")
        .trim_end_matches('/')
        .to_owned();
    let (err, took) = connect_default(&address).await;
    // Redis reads a command up to a line end, which ZooKeeper's binary handshake lacks: it
    // stays silent, and the message says so.
    let cause = cause_at(&err, &address);
    assert!(matches!(cause, ConnectCause::NoAnswer(_)), "{err}");
    assert!(
        err.to_string().contains("no answer to the handshake"),
        "{err}"
    );
    assert!(took < DEFAULT_TIMEOUT + SLACK, "took {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_server_fails_at_the_timeout_saying_it_did_not_answer() {
    let address = fake_server(b"").await;
    let (err, took) = connect_default(&address).await;
    assert!(
        matches!(cause_at(&err, &address), ConnectCause::NoAnswer(_)),
        "{err}"
    );
    assert!(took < DEFAULT_TIMEOUT + SLACK, "took {took:?}");
    assert!(took >= DEFAULT_TIMEOUT - SLACK, "gave up early: {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_connection_timeout_bounds_the_whole_connect_whatever_the_retry_policy() {
    let address = closed_port();
    let started = Instant::now();
    let err = Session::builder(&address)
        .connection_timeout(Duration::from_secs(1))
        .retry_policy(RetryPolicy::never())
        .connect()
        .await
        .expect_err("nothing listens");
    assert_eq!(cause_at(&err, &address), ConnectCause::Refused);
    let took = started.elapsed();
    assert!(took < Duration::from_secs(1) + SLACK, "took {took:?}");
    // The default retry policy does not multiply it either.
    let started = Instant::now();
    let err = Session::builder(&address)
        .connection_timeout(Duration::from_secs(1))
        .connect()
        .await
        .expect_err("nothing listens");
    assert_eq!(cause_at(&err, &address), ConnectCause::Refused);
    assert!(started.elapsed() < Duration::from_secs(1) + SLACK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_host_of_an_ensemble_string_is_named_with_its_cause() {
    let closed = closed_port();
    let http = fake_server(b"HTTP/1.1 400 Bad Request\r\n\r\n").await;
    let started = Instant::now();
    let err = Session::builder(&format!("{closed},{http}/app"))
        .connection_timeout(Duration::from_secs(2))
        .connect()
        .await
        .expect_err("no ZooKeeper among them");
    assert!(started.elapsed() < Duration::from_secs(2) + SLACK);
    let Error::Connect {
        address,
        cause: ConnectCause::Each(each),
    } = &err
    else {
        panic!("want one cause per host: {err:?}");
    };
    assert_eq!(address, &format!("{closed},{http}"));
    assert_eq!(each[0], (closed.clone(), ConnectCause::Refused));
    assert!(
        matches!(&each[1], (at, ConnectCause::NotZooKeeper(_)) if *at == http),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_server_connects_and_a_bad_connect_string_is_an_argument_error() {
    let keeper = lockkeeper_testkit::Keeper::start();
    let session = Session::connect(&keeper.connect_string())
        .await
        .expect("connects");
    session.close().await;
    assert!(matches!(
        Session::connect("127.0.0.1:2181,,127.0.0.1:2182").await,
        Err(Error::InvalidArgument(_))
    ));
    // Refused before anything is dialled, naming the setting.
    let zero = Session::builder(&keeper.connect_string())
        .connection_timeout(Duration::ZERO)
        .connect()
        .await;
    match zero {
        Err(Error::InvalidArgument(what)) => assert!(what.contains("connection"), "{what}"),
        other => panic!("a zero connection timeout must be refused: {other:?}"),
    }
    assert!(matches!(
        Session::connect("127.0.0.1:notaport").await,
        Err(Error::InvalidArgument(_) | Error::Connect { .. })
    ));
}
