//! Why connecting to Redis failed, named with the address.
//!
//! The client library's error for a server that is not Redis is whatever the socket did next
//! ("broken pipe", a parse error), and a refused connection names no address. When connecting
//! fails, the address is asked Redis's simplest question, `PING`, on a connection of our own:
//! `+PONG` means Redis is there and the library's error stands; an error reply (`-NOAUTH`,
//! `-DENIED`) means Redis refused us; anything else means it is not Redis; silence is said as
//! such (a hung Redis is silent too).

use std::time::Duration;

use redis::RedisError;
use tokio::time::Instant;

use crate::error::{ConnectCause, Error};
use crate::probe::{Answer, ask, dial, shown};

/// The error for a failed connection to the server at `address`, with the cause a probe finds
/// before `deadline`; `limit` is the connection timeout the caller was given.
pub(crate) async fn connect_error(
    address: &str,
    err: RedisError,
    deadline: Instant,
    limit: Duration,
) -> Error {
    let cause = if err.is_connection_refusal() {
        ConnectCause::Refused
    } else {
        probe(address, &err, deadline, limit).await
    };
    Error::Connect {
        address: address.to_owned(),
        cause,
    }
}

/// The error for a failed connection to a set of servers (a cluster's seeds, the Sentinels),
/// from the library's error alone.
pub(crate) fn connect_error_of_many(
    addresses: &[String],
    err: RedisError,
    limit: Duration,
) -> Error {
    let cause = if err.is_connection_refusal() {
        ConnectCause::Refused
    } else if err.is_timeout() {
        ConnectCause::TimedOut(limit)
    } else {
        ConnectCause::Other(err.to_string())
    };
    Error::Connect {
        address: addresses.join(","),
        cause,
    }
}

async fn probe(
    address: &str,
    err: &RedisError,
    deadline: Instant,
    limit: Duration,
) -> ConnectCause {
    let mut stream = match dial(address, deadline, limit).await {
        Ok(stream) => stream,
        Err(cause) => return cause,
    };
    match ask(&mut stream, b"PING\r\n", 7, deadline, limit).await {
        Ok(Answer::Bytes(answer)) if answer.starts_with(b"+PONG") => {
            ConnectCause::Other(err.to_string())
        }
        Ok(Answer::Bytes(answer)) if answer.starts_with(b"-") => {
            let line = answer.split(|&b| b == b'\r').next().unwrap_or(&answer);
            ConnectCause::Rejected(String::from_utf8_lossy(&line[1..]).into_owned())
        }
        Ok(Answer::Bytes(answer)) => ConnectCause::NotRedis(shown(&answer)),
        Ok(Answer::Closed) => {
            ConnectCause::NotRedis("it closed the connection without answering PING".into())
        }
        // Silence is not an answer: a hung (stopped, overloaded) Redis is silent too, and
        // calling it "not a Redis server" sends the operator to check the wrong port.
        Err(ConnectCause::NoAnswer(_)) => ConnectCause::Other(format!(
            "connected, but no answer to PING within {limit:?} (a hung server, or not Redis)"
        )),
        Err(cause) => cause,
    }
}
