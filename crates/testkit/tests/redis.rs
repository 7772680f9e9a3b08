//! The redis-server test server starts, answers, and is gone after drop.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use lockkeeper_testkit::RedisServer;

/// Sends one inline command and reads one reply (enough for short answers).
fn inline(addr: std::net::SocketAddr, command: &str) -> String {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("read timeout");
    stream
        .write_all(format!("{command}\r\n").as_bytes())
        .expect("send");
    let mut buf = [0u8; 256];
    let n = stream.read(&mut buf).expect("reply");
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[test]
fn starts_serves_and_is_killed_on_drop() {
    let redis = RedisServer::start();
    assert!(redis.addr().ip().is_loopback());
    assert_eq!(
        redis.url(),
        format!("redis://127.0.0.1:{}", redis.addr().port())
    );
    assert_eq!(inline(redis.addr(), "SET k v"), "+OK\r\n");
    assert_eq!(inline(redis.addr(), "GET k"), "$1\r\nv\r\n");
    assert_eq!(
        inline(redis.addr(), "CONFIG GET save"),
        "*2\r\n$4\r\nsave\r\n$0\r\n\r\n"
    );
    let other = RedisServer::start();
    assert_ne!(other.addr(), redis.addr());
    assert_eq!(
        inline(other.addr(), "GET k"),
        "$-1\r\n",
        "servers share no data"
    );

    let pid = redis.pid();
    let addr = redis.addr();
    assert_eq!(
        std::fs::read_to_string(format!("/proc/{pid}/comm")).expect("comm"),
        "redis-server\n",
        "pid() must be redis-server itself"
    );
    drop(redis);
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "redis-server {pid} still running"
    );
    assert!(
        TcpStream::connect_timeout(&addr, Duration::from_secs(2)).is_err(),
        "something still listens on {addr}"
    );
}
