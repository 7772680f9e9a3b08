//! Probing an address that a client library failed to connect to, to say why.
//!
//! Client libraries reduce a failed connection to what they saw last ("timeout", "broken
//! pipe"), which names neither the address nor the cause. When connecting fails, the backend
//! dials the address itself with these helpers and asks it the first question of its own
//! protocol: the answer tells a port where nothing listens from a host that does not answer,
//! and both from a server of the wrong kind. Every step is bounded by the caller's deadline, so
//! the diagnosis never outlasts the connection timeout it explains.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::error::ConnectCause;

/// How many bytes of a wrong answer to keep for the error message.
const SHOWN: usize = 48;

/// Opens a TCP connection to `address` (`host:port`) before `deadline`.
pub(crate) async fn dial(
    address: &str,
    deadline: Instant,
    limit: Duration,
) -> Result<TcpStream, ConnectCause> {
    match tokio::time::timeout_at(deadline, TcpStream::connect(address)).await {
        Ok(Ok(stream)) => Ok(stream),
        Ok(Err(err)) if err.kind() == std::io::ErrorKind::ConnectionRefused => {
            Err(ConnectCause::Refused)
        }
        Ok(Err(err)) => Err(ConnectCause::Other(err.to_string())),
        Err(_) => Err(ConnectCause::TimedOut(limit)),
    }
}

/// What a server said to a question: its first bytes, or that it said nothing.
pub(crate) enum Answer {
    /// At least `want` bytes (or fewer, if it closed after them).
    Bytes(Vec<u8>),
    /// It closed the connection without sending anything.
    Closed,
}

/// Sends `question` on `stream` and reads until `want` bytes came, the peer closed, or the
/// deadline passed.
pub(crate) async fn ask(
    stream: &mut TcpStream,
    question: &[u8],
    want: usize,
    deadline: Instant,
    limit: Duration,
) -> Result<Answer, ConnectCause> {
    let exchange = async {
        stream.write_all(question).await?;
        let mut answer = Vec::with_capacity(want);
        let mut chunk = [0u8; 256];
        while answer.len() < want {
            let n = stream.read(&mut chunk).await?;
            if n == 0 {
                break;
            }
            answer.extend_from_slice(&chunk[..n]);
        }
        Ok::<_, std::io::Error>(answer)
    };
    match tokio::time::timeout_at(deadline, exchange).await {
        Ok(Ok(answer)) if answer.is_empty() => Ok(Answer::Closed),
        Ok(Ok(answer)) => Ok(Answer::Bytes(answer)),
        // A reset is a close with prejudice: the peer would not talk to us.
        Ok(Err(err)) if is_reset(&err) => Ok(Answer::Closed),
        Ok(Err(err)) => Err(ConnectCause::Other(err.to_string())),
        Err(_) => Err(ConnectCause::NoAnswer(limit)),
    }
}

fn is_reset(err: &std::io::Error) -> bool {
    matches!(
        err.kind(),
        std::io::ErrorKind::ConnectionReset
            | std::io::ErrorKind::BrokenPipe
            | std::io::ErrorKind::ConnectionAborted
    )
}

/// The first bytes of a wrong answer, printable: text as text, anything else escaped.
pub(crate) fn shown(bytes: &[u8]) -> String {
    let cut = &bytes[..bytes.len().min(SHOWN)];
    let mut text: String = cut.escape_ascii().to_string();
    if bytes.len() > SHOWN {
        text.push_str("...");
    }
    format!("it answered \"{text}\"")
}

/// One cause for a list of addresses: the cause itself for one address, each one for several.
pub(crate) fn combine(mut causes: Vec<(String, ConnectCause)>) -> ConnectCause {
    if causes.len() == 1 {
        return causes.remove(0).1;
    }
    ConnectCause::Each(causes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrong_answers_are_shown_escaped_and_cut() {
        assert_eq!(
            shown(b"HTTP/1.1 400\r\n"),
            "it answered \"HTTP/1.1 400\\r\\n\""
        );
        let long = vec![b'x'; 100];
        assert!(shown(&long).ends_with("...\""));
    }

    #[tokio::test]
    async fn a_closed_port_is_refused() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap().to_string();
        drop(listener);
        let limit = Duration::from_secs(2);
        let dialled = dial(&address, Instant::now() + limit, limit).await;
        assert_eq!(dialled.err(), Some(ConnectCause::Refused));
    }
}
