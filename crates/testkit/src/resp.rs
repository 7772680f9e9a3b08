//! A blocking, one-command-at-a-time Redis client for test set-up: enough RESP2 to ask a
//! server `PING`, `CLUSTER INFO`, `INFO replication` or `SENTINEL ...` and read the answer.
//!
//! Test support must not depend on the client library under test: a bug there would then hide
//! itself in the harness. This speaks the wire format directly (it is small) and is used only
//! while servers are being started, checked or broken, never as a load generator.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// One RESP2 reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// `+OK` and other simple strings.
    Status(String),
    /// `-ERR ...`: the server refused the command (not an I/O failure).
    Error(String),
    /// `:42`.
    Int(i64),
    /// `$n` bulk string (lossily decoded as UTF-8: test replies are text).
    Bulk(String),
    /// `$-1` or `*-1`.
    Nil,
    /// `*n` array.
    Array(Vec<Reply>),
}

impl Reply {
    /// The text of a status or bulk reply; `None` for anything else.
    pub fn text(&self) -> Option<&str> {
        match self {
            Reply::Status(s) | Reply::Bulk(s) => Some(s),
            _ => None,
        }
    }
}

/// Sends `args` as one command to the server at `addr` on a fresh connection and returns its
/// reply. Every step is bounded by `timeout`; an unreachable or silent server is an `Err`.
pub fn command(addr: SocketAddr, args: &[&str], timeout: Duration) -> std::io::Result<Reply> {
    let mut stream = TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    let mut request = format!("*{}\r\n", args.len());
    for arg in args {
        request.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
    }
    stream.write_all(request.as_bytes())?;
    read_reply(&mut BufReader::new(stream))
}

fn read_reply(reader: &mut impl BufRead) -> std::io::Result<Reply> {
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Err(invalid("connection closed before a reply"));
    }
    let line = line.trim_end_matches(['\r', '\n']);
    let (kind, rest) = line.split_at(line.len().min(1));
    let number = || rest.parse::<i64>().map_err(|_| invalid(line));
    match kind {
        "+" => Ok(Reply::Status(rest.to_string())),
        "-" => Ok(Reply::Error(rest.to_string())),
        ":" => Ok(Reply::Int(number()?)),
        "$" => {
            let len = number()?;
            if len < 0 {
                return Ok(Reply::Nil);
            }
            let mut body = vec![0u8; len as usize + 2];
            reader.read_exact(&mut body)?;
            body.truncate(len as usize);
            Ok(Reply::Bulk(String::from_utf8_lossy(&body).into_owned()))
        }
        "*" => {
            let len = number()?;
            if len < 0 {
                return Ok(Reply::Nil);
            }
            (0..len)
                .map(|_| read_reply(reader))
                .collect::<Result<Vec<_>, _>>()
                .map(Reply::Array)
        }
        _ => Err(invalid(line)),
    }
}

fn invalid(what: &str) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!("not a RESP reply: {what:?}"),
    )
}

/// The value of `field` in an `INFO`-style text (`field:value` lines).
pub fn info_field<'a>(info: &'a str, field: &str) -> Option<&'a str> {
    info.lines().find_map(|line| {
        line.trim_end()
            .strip_prefix(field)
            .and_then(|rest| rest.strip_prefix(':'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(wire: &str) -> Reply {
        read_reply(&mut BufReader::new(wire.as_bytes())).expect("parses")
    }

    #[test]
    fn parses_every_reply_kind() {
        assert_eq!(parse("+PONG\r\n"), Reply::Status("PONG".into()));
        assert_eq!(parse("-ERR no\r\n"), Reply::Error("ERR no".into()));
        assert_eq!(parse(":-3\r\n"), Reply::Int(-3));
        assert_eq!(parse("$5\r\na\r\nbc\r\n"), Reply::Bulk("a\r\nbc".into()));
        assert_eq!(parse("$-1\r\n"), Reply::Nil);
        assert_eq!(
            parse("*2\r\n$1\r\nx\r\n*1\r\n:1\r\n"),
            Reply::Array(vec![
                Reply::Bulk("x".into()),
                Reply::Array(vec![Reply::Int(1)])
            ])
        );
        assert!(read_reply(&mut BufReader::new("?\r\n".as_bytes())).is_err());
        assert!(read_reply(&mut BufReader::new("$3\r\nab".as_bytes())).is_err());
    }

    #[test]
    fn finds_info_fields() {
        let info = "# Cluster\r\ncluster_state:ok\r\ncluster_slots_assigned:16384\r\n";
        assert_eq!(info_field(info, "cluster_state"), Some("ok"));
        assert_eq!(info_field(info, "cluster_slots_assigned"), Some("16384"));
        assert_eq!(info_field(info, "cluster"), None);
    }
}
