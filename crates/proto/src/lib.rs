//! The ZooKeeper client wire protocol, as spoken by Apache ZooKeeper 3.8 and its clients.
//!
//! This crate is the bottom of Keeper's pipeline: bytes off a socket become [`frame`]s, a frame
//! becomes a [`RequestHeader`] plus a typed [`Request`], and a reply goes back the other way. It
//! knows nothing about sessions or the data tree, so the same types serve the server, the
//! benchmark client and tests that speak raw protocol.
//!
//! Field order and types follow `zookeeper.jute`; the encoding is jute's binary archive
//! (big-endian integers, length-prefixed buffers and strings, `-1` for null).

#![warn(missing_docs)]

pub mod codes;
pub mod frame;
pub mod jute;
pub mod path;
pub mod records;
pub mod request;
pub mod sasl;

pub use codes::{
    AddWatchMode, CreateMode, ErrorCode, EventType, KeeperState, OpCode, WatcherType, perms,
};
pub use frame::{FrameError, decode_frame, encode_frame};
pub use jute::{DecodeError, Jute, Reader};
pub use records::*;
pub use request::{MultiOp, ReadOp, Request};

/// The reply xid of a watch notification.
pub const XID_NOTIFICATION: i32 = -1;
/// The xid clients use for pings, echoed in the reply.
pub const XID_PING: i32 = -2;
/// The xid clients use for `auth` packets.
pub const XID_AUTH: i32 = -4;
/// The xid clients use for `setWatches` on reconnect.
pub const XID_SET_WATCHES: i32 = -8;
