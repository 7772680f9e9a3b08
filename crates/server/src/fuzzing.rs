//! The fuzz targets' entry points: each takes any bytes and runs one of the server's decoders
//! on them the way the server does. Whatever the bytes, each must return, and never panic,
//! hang or allocate without bound: what arrives from the network or the disk is untrusted.
//!
//! `fuzz/` (a cargo-fuzz crate outside the workspace) runs them under libFuzzer; the corpus
//! it keeps (`fuzz/corpus/<target>/`) and every input that once failed
//! (`fuzz/regressions/<target>/`) are replayed through [`run`] by an ordinary test
//! (`tests/fuzz_corpus.rs`), so no fuzzer is needed to check them.
//!
//! Behind the `fuzzing` feature: these are test entry points, not API.

use bytes::{Bytes, BytesMut};
use lockkeeper_proto::{ConnectRequest, Jute, Reader, Request, RequestHeader, decode_frame};

use crate::disk::log::{RECORD_HEADER_LEN, SEGMENT_HEADER_LEN, SEGMENT_MAGIC};
use crate::disk::{recovery, snapshot};
use crate::net::four_letter;

/// Every target, by the name its fuzz binary and corpus directory have.
pub const TARGETS: [&str; 8] = [
    "frame",
    "connect",
    "request",
    "session",
    "log_segment",
    "snapshot",
    "four_letter",
    "sasl",
];

/// The largest frame the targets accept: the server's default `jute.maxbuffer`, so frames near
/// the limit are decoded as the server would, and no input makes a bigger buffer.
const MAX_FRAME: usize = 1 << 20;

/// Every opcode a request may carry, and some it may not (the decoder must refuse those).
const OPCODES: [i32; 31] = [
    0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 100, 101, 102,
    103, 104, 105, 106, 107, -11,
];

/// Runs `target` on `data`; `false` if there is no such target.
pub fn run(target: &str, data: &[u8]) -> bool {
    match target {
        "frame" => frame(data),
        "connect" => connect(data),
        "request" => request(data),
        "session" => session(data),
        "log_segment" => log_segment(data),
        "snapshot" => snapshot(data),
        "four_letter" => four_letter(data),
        "sasl" => sasl(data),
        _ => return false,
    }
    true
}

/// The length-prefixed framing: as many frames as the bytes hold.
pub fn frame(data: &[u8]) {
    let mut buf = BytesMut::from(data);
    while let Ok(Some(_)) = decode_frame(&mut buf, MAX_FRAME) {}
}

/// A connect request's body, read as the handshake reads it (trailing bytes ignored).
pub fn connect(data: &[u8]) {
    let _ = ConnectRequest::read(&mut Reader::new(Bytes::copy_from_slice(data)));
}

/// One request body, decoded by the opcode the first byte picks (so every decoder is reached
/// at once, not only after the fuzzer guesses a 4-byte opcode).
pub fn request(data: &[u8]) {
    let Some((&pick, body)) = data.split_first() else {
        return;
    };
    let op = OPCODES[usize::from(pick) % OPCODES.len()];
    let _ = Request::decode(op, Bytes::copy_from_slice(body));
}

/// A connection's whole byte stream as the connection task reads it: a four-letter word, or a
/// connect frame and then request frames, each a header and a body decoded by its opcode.
pub fn session(data: &[u8]) {
    if data.len() >= 4 && four_letter::is_four_letter_word(&data[..4]).is_some() {
        return;
    }
    let mut buf = BytesMut::from(data);
    let Ok(Some(first)) = decode_frame(&mut buf, MAX_FRAME) else {
        return;
    };
    if ConnectRequest::read(&mut Reader::new(first)).is_err() {
        return;
    }
    while let Ok(Some(frame)) = decode_frame(&mut buf, MAX_FRAME) {
        let mut r = Reader::new(frame);
        let Ok(header) = RequestHeader::read(&mut r) else {
            return;
        };
        let _ = Request::decode(header.op, r.rest());
    }
}

/// A log segment, two ways (the first byte picks): the bytes as a whole segment file, which
/// mostly exercises the header, framing and torn-tail checks; or the bytes as records' payloads
/// (each a `u16` length and that many bytes) under a valid header with valid checksums, which
/// reaches the txn decoder behind them. Both as the last segment and as an earlier one.
pub fn log_segment(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let bytes = if mode & 1 == 0 {
        rest.to_vec()
    } else {
        let mut segment = Vec::with_capacity(rest.len() + 64);
        segment.extend_from_slice(SEGMENT_MAGIC);
        segment.extend_from_slice(&1u32.to_be_bytes());
        segment.extend_from_slice(&[0; 4]);
        debug_assert_eq!(segment.len() as u64, SEGMENT_HEADER_LEN);
        let mut payloads = rest;
        while let [a, b, tail @ ..] = payloads {
            let len = usize::from(u16::from_be_bytes([*a, *b])).min(tail.len());
            let (payload, after) = tail.split_at(len);
            let mut header = [0u8; RECORD_HEADER_LEN];
            header[..4].copy_from_slice(&(payload.len() as u32).to_be_bytes());
            header[4..].copy_from_slice(&crc32c::crc32c(payload).to_be_bytes());
            segment.extend_from_slice(&header);
            segment.extend_from_slice(payload);
            payloads = after;
        }
        segment
    };
    for is_last in [true, false] {
        recovery::scan_bytes(&bytes, is_last);
    }
}

/// A snapshot's body (after its magic), with a valid checksum appended so that the parser
/// behind the checksum is reached; and the bytes as a whole file, unchanged.
pub fn snapshot(data: &[u8]) {
    let _ = snapshot::load_bytes(data);
    let mut file = Vec::with_capacity(data.len() + 12);
    file.extend_from_slice(snapshot::SNAPSHOT_MAGIC);
    file.extend_from_slice(data);
    let crc = crc32c::crc32c(&file);
    file.extend_from_slice(&crc.to_be_bytes());
    let _ = snapshot::load_bytes(&file);
}

/// A SASL DIGEST-MD5 digest-response, after the challenge, as a connection's exchange checks
/// it against a server's users.
pub fn sasl(data: &[u8]) {
    let users = crate::sasl::SaslUsers::new([("jaasuser", "jaas_password")]);
    let mut exchange = crate::sasl::Exchange::default();
    let _ = exchange.step(b"", Some(&users));
    let _ = exchange.step(data, Some(&users));
}

/// The first bytes of a connection, checked for a four-letter word as the handshake does.
pub fn four_letter(data: &[u8]) {
    if let Some(first) = data.get(..4) {
        let _ = four_letter::is_four_letter_word(first);
    }
}
