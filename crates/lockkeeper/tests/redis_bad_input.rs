//! Wrong arguments are refused before anything is sent, and a server that is not Redis is an
//! error, not a hang.

mod support_redis;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::Duration;

use lockkeeper::Error;
use lockkeeper::LockOptions;
use lockkeeper::redis::{Redis, RedisOptions};
use lockkeeper_testkit::RedisServer;
use support_redis::{connect, raw};

fn invalid<T: std::fmt::Debug>(result: lockkeeper::Result<T>, what: &str) {
    match result {
        Err(Error::InvalidArgument(message)) => assert!(!message.is_empty()),
        other => panic!("{what}: expected InvalidArgument, got {other:?}"),
    }
}

#[tokio::test]
async fn lease_lock_arguments_are_checked_before_sending() {
    let server = RedisServer::start();
    let redis = connect(&server).await;
    let mut raw = raw(&server).await;
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut raw)
        .await
        .expect("CONFIG RESETSTAT");

    invalid(redis.lease_lock("").lock().await, "empty name");
    invalid(redis.lease_lock("").try_lock().await, "empty name");
    invalid(redis.lease_lock("a}b").try_lock().await, "brace in name");
    invalid(
        redis
            .lease_lock("x")
            .with_options(LockOptions::new().lease(Duration::ZERO)),
        "zero lease",
    );
    invalid(
        redis
            .lease_lock("x")
            .with_options(LockOptions::new().lease(Duration::from_micros(500))),
        "sub-millisecond lease",
    );
    invalid(
        redis
            .lease_lock("x")
            .with_options(LockOptions::new().watchdog(Duration::ZERO)),
        "zero watchdog lease",
    );
    invalid(
        redis
            .lease_lock("x")
            .with_options(LockOptions::new().max_hold(Duration::ZERO)),
        "zero max hold",
    );
    invalid(
        redis.lease_lock("x").lock_timeout(Duration::ZERO).await,
        "zero timeout",
    );
    invalid(redis.lease_lock("").is_locked().await, "empty name");
    invalid(redis.lease_lock("").force_unlock().await, "empty name");
    invalid(redis.with_owner_id(""), "empty owner id");

    // None of the refused calls reached the server: no script, no subscription, no EXISTS.
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut raw)
        .await
        .expect("INFO");
    for command in ["eval", "evalsha", "subscribe", "exists", "del"] {
        assert!(
            !stats.contains(&format!("cmdstat_{command}:")),
            "{command} was sent: {stats}"
        );
    }

    let mut guard = redis.lease_lock("x").lock().await.expect("lock");
    invalid(guard.extend(Duration::ZERO).await, "zero extend");
    guard.release().await.expect("release");
}

#[tokio::test]
async fn connect_arguments_are_checked() {
    invalid(Redis::connect("").await, "empty url");
    invalid(
        Redis::connect_with(
            "redis://127.0.0.1:1",
            RedisOptions::new().watchdog_timeout(Duration::ZERO),
        )
        .await,
        "zero watchdog timeout",
    );
    invalid(
        Redis::connect_with(
            "redis://127.0.0.1:1",
            RedisOptions::new().connect_timeout(Duration::ZERO),
        )
        .await,
        "zero connect timeout",
    );
    invalid(
        Redis::connect_with("redis://127.0.0.1:1", RedisOptions::new().key_prefix("a{b")).await,
        "brace in prefix",
    );
    let no_nodes: [&str; 0] = [];
    invalid(
        Redis::connect_cluster(&no_nodes, RedisOptions::new()).await,
        "no cluster nodes",
    );
    invalid(
        Redis::connect_sentinel(&no_nodes, "mymaster", RedisOptions::new()).await,
        "no sentinels",
    );
    invalid(
        Redis::connect_sentinel(&["redis://127.0.0.1:1"], "", RedisOptions::new()).await,
        "empty master name",
    );
    match Redis::connect("not a url").await {
        Err(Error::Redis(_)) => {}
        other => panic!("a malformed URL is a Redis client error, got {other:?}"),
    }
}

/// A listener that answers every connection with `reply` (then keeps it open) or, with `None`,
/// with silence.
fn fake_server(reply: Option<&'static [u8]>) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            std::thread::spawn(move || {
                let mut buf = [0u8; 1024];
                let _ = stream.set_read_timeout(Some(Duration::from_secs(60)));
                if let Some(reply) = reply {
                    let _ = stream.read(&mut buf);
                    let _ = stream.write_all(reply);
                }
                // Hold the connection open until the client gives up.
                while matches!(stream.read(&mut buf), Ok(n) if n > 0) {}
            });
        }
    });
    addr
}

#[tokio::test]
async fn a_server_that_is_not_redis_is_an_error() {
    let garbage = fake_server(Some(b"HTTP/1.1 400 Bad Request\r\n\r\n\x00\xff garbage"));
    let options = RedisOptions::new()
        .connect_timeout(Duration::from_secs(3))
        .response_timeout(Duration::from_secs(3));
    let outcome = tokio::time::timeout(
        Duration::from_secs(30),
        Redis::connect_with(&format!("redis://{garbage}"), options),
    )
    .await
    .expect("connecting to garbage must not hang");
    match outcome {
        Err(Error::Connect { address, .. }) => assert_eq!(address, garbage.to_string()),
        other => panic!("expected Error::Connect, got {other:?}"),
    }
}

#[tokio::test]
async fn a_silent_server_is_an_error_after_the_connect_timeout() {
    let silent = fake_server(None);
    let options = RedisOptions::new()
        .connect_timeout(Duration::from_secs(1))
        .response_timeout(Duration::from_secs(1));
    let outcome = tokio::time::timeout(
        Duration::from_secs(30),
        Redis::connect_with(&format!("redis://{silent}"), options),
    )
    .await
    .expect("connecting to a silent port must not hang");
    assert!(
        matches!(outcome, Err(Error::Connect { .. })),
        "expected Error::Connect, got {outcome:?}"
    );
}

#[tokio::test]
async fn nothing_listening_is_an_error() {
    let port = lockkeeper_testkit::free_port();
    let outcome = tokio::time::timeout(
        Duration::from_secs(30),
        Redis::connect(&format!("redis://127.0.0.1:{port}")),
    )
    .await
    .expect("must not hang");
    assert!(matches!(outcome, Err(Error::Connect { .. })), "{outcome:?}");
}
