//! The ZooKeeper four-letter words (`ruok`, `srvr`, `mntr`, `stat`, ...).
//!
//! They are sent raw, without the 4-byte length prefix of ordinary requests; the server answers
//! in plain text and closes the connection, so the answer is everything read until EOF.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// Sends `word` (e.g. `"ruok"`) to the server at `addr` and returns its whole answer.
///
/// Panics if the server cannot be reached or does not answer within 10 seconds; use
/// [`try_four_letter_word`] to get the error instead.
pub fn four_letter_word(addr: SocketAddr, word: &str) -> String {
    try_four_letter_word(addr, word, Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("four-letter word {word:?} to {addr}: {e}"))
}

/// Like [`four_letter_word`], returning the I/O error (refused, timed out, ...) instead of
/// panicking. Every step is bounded by `timeout`.
pub fn try_four_letter_word(
    addr: SocketAddr,
    word: &str,
    timeout: Duration,
) -> std::io::Result<String> {
    let mut stream = TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    stream.write_all(word.as_bytes())?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer)?;
    Ok(String::from_utf8_lossy(&answer).into_owned())
}

/// The server's count of watches, from `wchs` (Keeper and ZooKeeper both answer
/// `Total watches:N`). Panics, naming the answer, if it has no count.
pub fn total_watches(addr: SocketAddr) -> usize {
    let answer = four_letter_word(addr, "wchs");
    answer
        .lines()
        .find_map(|line| line.strip_prefix("Total watches:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no watch count in the wchs answer of {addr}: {answer:?}"))
}

/// The number after `name=` in one connection's line of a `cons` answer (`queued`, `recved`,
/// `sent`, ...), or `None` when the line has no such number.
pub fn cons_field(line: &str, name: &str) -> Option<u64> {
    let (_, rest) = line.split_once(&format!("{name}="))?;
    rest.split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}
