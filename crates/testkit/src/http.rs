//! One HTTP exchange as a scraper makes it: the request bytes sent as given (well-formed or
//! not), everything the server answers read until it closes.
//!
//! Invariants: the whole exchange is bounded by one deadline (connect, send and every read),
//! and a failure names the address; nothing here interprets the answer, so a test asserts on
//! exactly what the server sent.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// Sends `request` to `addr` as is and returns what the server sends back before it closes the
/// connection, within `limit` overall. Blocking: async tests run it with `spawn_blocking`, so
/// an in-process server keeps running meanwhile. Panics naming the address if the exchange
/// fails; [`try_http_exchange`] returns the failure instead.
pub fn http_exchange(addr: SocketAddr, request: &[u8], limit: Duration) -> String {
    try_http_exchange(addr, request, limit).unwrap_or_else(|e| panic!("{e}"))
}

/// Like [`http_exchange`], for callers that poll a server that may not be up yet: the failure
/// (not reachable, no answer within `limit`, not UTF-8) is returned, naming the address.
pub fn try_http_exchange(
    addr: SocketAddr,
    request: &[u8],
    limit: Duration,
) -> Result<String, String> {
    let deadline = Instant::now() + limit;
    let left = || {
        deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
            .ok_or_else(|| format!("no answer from {addr} within {limit:?}"))
    };
    let mut stream = TcpStream::connect_timeout(&addr, left()?)
        .map_err(|e| format!("connect to {addr}: {e}"))?;
    stream
        .set_write_timeout(Some(left()?))
        .and_then(|()| stream.write_all(request))
        .map_err(|e| format!("send the request to {addr}: {e}"))?;
    let mut answer = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        stream
            .set_read_timeout(Some(left()?))
            .map_err(|e| format!("a read timeout for {addr}: {e}"))?;
        match stream.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => answer.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("read the answer from {addr}: {e}")),
        }
    }
    String::from_utf8(answer).map_err(|e| format!("the answer of {addr} is not UTF-8: {e}"))
}
