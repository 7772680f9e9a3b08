//! The bytes a counter node holds, as Curator and kazoo write them.
//!
//! - `SharedCount` (and kazoo's `Counter(support_curator=True)`): a signed 32-bit integer,
//!   4 bytes big-endian (Java's `ByteBuffer.putInt`, Python's `struct.pack(">i")`).
//! - `DistributedAtomicLong`: a signed 64-bit integer, 8 bytes big-endian (`putLong`).
//!
//! An empty node has no value yet (kazoo's `ensure_path` makes one; so does any tool that
//! creates the path bare): the caller decides what it reads as. Any other length is refused
//! with an error naming the path and the bytes found. Curator is laxer here: it reads the first
//! 4 or 8 bytes of a longer node and ignores the rest, which would turn a foreign value into a
//! plausible-looking number; refusing is the only answer that cannot mislead.

use crate::error::{Error, Result};

/// Reads a `SharedCount` node: `None` if it is empty.
pub(super) fn decode_i32(path: &str, data: &[u8]) -> Result<Option<i32>> {
    match data {
        [] => Ok(None),
        &[a, b, c, d] => Ok(Some(i32::from_be_bytes([a, b, c, d]))),
        other => Err(corrupt(
            path,
            other,
            "a SharedCount holds 4 (a big-endian i32)",
        )),
    }
}

/// Reads a `DistributedAtomicLong` node: `None` if it is empty.
pub(super) fn decode_i64(path: &str, data: &[u8]) -> Result<Option<i64>> {
    match <[u8; 8]>::try_from(data) {
        Ok(bytes) => Ok(Some(i64::from_be_bytes(bytes))),
        Err(_) if data.is_empty() => Ok(None),
        Err(_) => Err(corrupt(
            path,
            data,
            "a DistributedAtomicLong holds 8 (a big-endian i64)",
        )),
    }
}

pub(super) fn encode_i32(value: i32) -> [u8; 4] {
    value.to_be_bytes()
}

pub(super) fn encode_i64(value: i64) -> [u8; 8] {
    value.to_be_bytes()
}

/// The error for a node that holds something else: it names the path, the length and (the
/// start of) the bytes, so that whoever wrote them can be found.
fn corrupt(path: &str, data: &[u8], expected: &str) -> Error {
    const SHOWN: usize = 16;
    let mut bytes: Vec<String> = data
        .iter()
        .take(SHOWN)
        .map(|b| format!("0x{b:02x}"))
        .collect();
    if data.len() > SHOWN {
        bytes.push("...".into());
    }
    Error::Corrupt {
        path: path.to_owned(),
        why: format!(
            "the counter node holds {} bytes [{}]; {expected}, or none before the first write",
            data.len(),
            bytes.join(", ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_at_the_edges() {
        for value in [0, 1, -1, i32::MAX, i32::MIN] {
            assert_eq!(decode_i32("/c", &encode_i32(value)).unwrap(), Some(value));
        }
        for value in [0, 1, -1, i64::MAX, i64::MIN] {
            assert_eq!(decode_i64("/c", &encode_i64(value)).unwrap(), Some(value));
        }
    }

    #[test]
    fn big_endian_and_signed_as_java_writes_them() {
        // ByteBuffer.putInt(-2) and putLong(258).
        assert_eq!(encode_i32(-2), [0xff, 0xff, 0xff, 0xfe]);
        assert_eq!(encode_i64(258), [0, 0, 0, 0, 0, 0, 1, 2]);
    }

    #[test]
    fn empty_is_no_value() {
        assert_eq!(decode_i32("/c", &[]).unwrap(), None);
        assert_eq!(decode_i64("/c", &[]).unwrap(), None);
    }

    #[test]
    fn up_to_sixteen_bytes_are_shown_whole() {
        let err = decode_i32("/c", &[9u8; 16]).unwrap_err().to_string();
        assert!(err.contains("0x09]"), "all sixteen, no ellipsis: {err}");
        let err = decode_i32("/c", &[9u8; 17]).unwrap_err().to_string();
        assert!(
            err.contains("0x09, ...]"),
            "the first sixteen, then an ellipsis: {err}"
        );
    }

    #[test]
    fn other_lengths_name_the_path_and_the_bytes() {
        let long = [7u8; 20];
        for data in [&[1u8][..], &[1, 2, 3], &[1, 2, 3, 4, 5], &long] {
            let err = decode_i32("/counters/a", data).unwrap_err().to_string();
            assert!(err.starts_with("/counters/a: "), "{err}");
            assert!(
                err.contains(&format!("holds {} bytes", data.len())),
                "{err}"
            );
        }
        let err = decode_i64("/counters/b", &[0, 0, 0, 1])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("/counters/b: the counter node holds 4 bytes [0x00, 0x00, 0x00, 0x01]"),
            "{err}"
        );
        let err = decode_i64("/counters/b", &long).unwrap_err().to_string();
        assert!(err.contains("holds 20 bytes") && err.ends_with("...]; a DistributedAtomicLong holds 8 (a big-endian i64), or none before the first write"), "{err}");
    }
}
