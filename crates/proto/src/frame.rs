//! Length-prefixed framing: every message on a ZooKeeper connection is a big-endian `i32` length
//! followed by that many bytes.
//!
//! The maximum is checked on the *prefix*, before the body arrives, so a client that announces a
//! 2 GiB frame is refused without the server buffering anything.

use bytes::{Buf, Bytes, BytesMut};

/// Why a length prefix was refused; the connection that sent it is closed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// The announced length is above the configured maximum (ZooKeeper's `jute.maxbuffer`).
    #[error("frame of {len} bytes exceeds the maximum of {max}")]
    TooLarge {
        /// The announced length.
        len: usize,
        /// The largest length accepted.
        max: usize,
    },
    /// The announced length is negative.
    #[error("negative frame length {0}")]
    NegativeLength(i32),
}

/// Takes one complete frame off the front of `buf`, or returns `None` if more bytes are needed.
pub fn decode_frame(buf: &mut BytesMut, max_len: usize) -> Result<Option<Bytes>, FrameError> {
    let Some(prefix) = buf.get(..4) else {
        return Ok(None);
    };
    let len = i32::from_be_bytes([prefix[0], prefix[1], prefix[2], prefix[3]]);
    if len < 0 {
        return Err(FrameError::NegativeLength(len));
    }
    let len = len as usize;
    if len > max_len {
        return Err(FrameError::TooLarge { len, max: max_len });
    }
    if buf.len() < 4 + len {
        buf.reserve(4 + len - buf.len());
        return Ok(None);
    }
    buf.advance(4);
    Ok(Some(buf.split_to(len).freeze()))
}

/// Appends one frame to `out`: writes the body with `body`, then patches the length in front.
pub fn encode_frame(out: &mut Vec<u8>, body: impl FnOnce(&mut Vec<u8>)) {
    let start = out.len();
    out.extend_from_slice(&[0; 4]);
    body(out);
    let len = i32::try_from(out.len() - start - 4).unwrap_or(i32::MAX);
    out[start..start + 4].copy_from_slice(&len.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_for_a_whole_frame_then_yields_it() {
        let mut wire = Vec::new();
        encode_frame(&mut wire, |b| b.extend_from_slice(b"hello"));
        let mut buf = BytesMut::from(&wire[..6]);
        assert_eq!(decode_frame(&mut buf, 100), Ok(None));
        buf.extend_from_slice(&wire[6..]);
        assert_eq!(
            decode_frame(&mut buf, 100).unwrap().unwrap(),
            Bytes::from_static(b"hello")
        );
        assert!(buf.is_empty());
    }

    #[test]
    fn refuses_oversized_and_negative_lengths_from_the_prefix_alone() {
        let mut buf = BytesMut::from(&0x0010_0000i32.to_be_bytes()[..]);
        assert_eq!(
            decode_frame(&mut buf, 0xfffff),
            Err(FrameError::TooLarge {
                len: 0x10_0000,
                max: 0xfffff
            })
        );
        let mut buf = BytesMut::from(&(-5i32).to_be_bytes()[..]);
        assert_eq!(
            decode_frame(&mut buf, 10),
            Err(FrameError::NegativeLength(-5))
        );
    }
}
