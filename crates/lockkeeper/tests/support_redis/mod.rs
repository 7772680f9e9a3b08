//! Shared helpers of the Redis lock tests: a handle on a fresh redis-server, and a protected
//! resource that counts overlapping holders and checks fencing tokens. (Child processes come
//! from `lockkeeper_testkit::test_child`, shared with the ZooKeeper tests.)
#![allow(dead_code)] // each test binary uses its own subset

pub(crate) mod resource;

use std::time::Duration;

use lockkeeper::redis::{Redis, RedisOptions};
use lockkeeper_testkit::RedisServer;

/// A handle on `server` with default options.
pub(crate) async fn connect(server: &RedisServer) -> Redis {
    Redis::connect(&server.url())
        .await
        .expect("connect to redis-server")
}

/// A handle on `server` with `options`.
pub(crate) async fn connect_with(server: &RedisServer, options: RedisOptions) -> Redis {
    Redis::connect_with(&server.url(), options)
        .await
        .expect("connect to redis-server")
}

/// A plain connection for looking at keys behind the library's back.
pub(crate) async fn raw(server: &RedisServer) -> redis::aio::MultiplexedConnection {
    redis::Client::open(server.url())
        .expect("redis url")
        .get_multiplexed_async_connection()
        .await
        .expect("raw connection")
}

/// `PTTL key` on a raw connection.
pub(crate) async fn pttl(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> i64 {
    redis::cmd("PTTL")
        .arg(key)
        .query_async(conn)
        .await
        .expect("PTTL")
}

/// Whether `key` exists.
pub(crate) async fn exists(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> bool {
    let n: i64 = redis::cmd("EXISTS")
        .arg(key)
        .query_async(conn)
        .await
        .expect("EXISTS");
    n == 1
}

/// Waits (bounded) until `check` returns true; panics with `what` otherwise.
pub(crate) async fn eventually<F, Fut>(limit: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if check().await {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {limit:?} waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
