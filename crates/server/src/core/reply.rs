//! Reply: what the core sends back to a connection, how it is encoded on the wire, and the
//! queue it goes on ([`ReplyQueue`]).
//!
//! The core decides *what* to send; the connection's outbox (`net::outbox`, which implements
//! [`ReplyQueue`]) encodes it when it goes to the socket. Every message carries the zxid of
//! the newest state it may reveal; the outbox holds it back until that zxid is durable. The
//! types live here, with the core that makes them, so that the core needs nothing of `net`.
//!
//! [`Outgoing::memory`] estimates what a queued message holds, for the per-connection bound on
//! queued replies.

use bytes::Bytes;
use lockkeeper_proto::request::MULTI_END;
use lockkeeper_proto::*;

use crate::metrics::ConnStats;
use crate::trace::RequestStamps;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum MultiResult {
    Created {
        op: OpCode,
        path: String,
        stat: Stat,
    },
    Deleted,
    DataSet(Stat),
    Checked,
    Error(ErrorCode),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ReadResult {
    Children(Vec<String>),
    Data { data: Option<Bytes>, stat: Stat },
    Error(ErrorCode),
}

/// The body that follows a reply header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Body {
    Empty,
    Stat(Stat),
    Path(String),
    PathStat {
        path: String,
        stat: Stat,
    },
    Data {
        data: Option<Bytes>,
        stat: Stat,
    },
    Children(Vec<String>),
    ChildrenStat {
        children: Vec<String>,
        stat: Stat,
    },
    Acl {
        acl: Vec<Acl>,
        stat: Stat,
    },
    Count(i32),
    /// addWatch answers with an ErrorResponse record carrying 0.
    Code(i32),
    Multi(Vec<MultiResult>),
    MultiRead(Vec<ReadResult>),
    WhoAmI(Vec<ClientInfo>),
    Event(WatcherEvent),
    /// A SASL step's token; sent even with an error (a null token then).
    Sasl(Option<Bytes>),
}

#[derive(Debug)]
pub(crate) enum Message {
    /// The answer to the connect request: no reply header.
    Connect(ConnectResponse),
    Reply {
        header: ReplyHeader,
        body: Body,
    },
    /// Four-letter-word output: raw text, no framing.
    Text(String),
}

/// One message for a connection, as queued on its outbox.
#[derive(Debug)]
pub(crate) struct Outgoing {
    pub message: Message,
    /// The outbox holds it until this zxid is durable.
    pub visible_at: i64,
    /// Disk faults seen when it was queued: if another happens before `visible_at` is durable,
    /// the state it reveals may never be, so the connection is closed instead.
    pub faults: u64,
    /// Close the connection after writing this message.
    pub close: bool,
    /// When the request this message answers (or whose write fired it) was decoded, taken by
    /// the core and this message queued; `None` for what no request caused. See [`crate::trace`].
    pub stamps: Option<RequestStamps>,
}

impl Outgoing {
    /// An estimate of the memory this message holds while it waits in a connection's queue:
    /// its inline size (what a queue slot holds) plus the heap it owns, by capacity, not by
    /// encoded length. Node data counts in full even though it is shared with the data tree:
    /// once the node changes or goes, the queued reply is what keeps the old data alive.
    /// Allocator overhead (a few words per allocation) is not counted.
    pub(crate) fn memory(&self) -> usize {
        std::mem::size_of::<Outgoing>() + self.message.heap()
    }

    /// Whether this is a packet on the wire, counted in `cons` and `mntr`; a close marker is not.
    pub(crate) fn is_packet(&self) -> bool {
        !matches!(self.message, Message::Text(_))
    }

    /// Whether this is a watch event (for `reaction` in [`crate::trace`]).
    pub(crate) fn is_event(&self) -> bool {
        matches!(&self.message, Message::Reply { header, .. } if header.xid == XID_NOTIFICATION)
    }
}

/// Heap bytes owned by a string or a vector of records (by capacity), for [`Outgoing::memory`].
fn vec_heap<T>(v: &Vec<T>, each: impl Fn(&T) -> usize) -> usize {
    v.capacity() * std::mem::size_of::<T>() + v.iter().map(each).sum::<usize>()
}

fn id_heap(id: &Id) -> usize {
    id.scheme.capacity() + id.id.capacity()
}

impl Message {
    fn heap(&self) -> usize {
        match self {
            Message::Connect(response) => response.passwd.len(),
            Message::Reply { body, .. } => body.heap(),
            Message::Text(text) => text.capacity(),
        }
    }

    /// Appends this message, framed, to `out`.
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Message::Connect(response) => encode_frame(out, |b| response.write(b)),
            Message::Reply { header, body } => encode_frame(out, |b| {
                header.write(b);
                // ZooKeeper's clients ignore the body of an error reply; send none, but for a
                // SASL step's, which ZooKeeper sends and its Java client reads.
                if header.err == 0 || matches!(body, Body::Sasl(_)) {
                    body.write(b);
                }
            }),
            Message::Text(text) => {
                #[cfg(test)]
                assert_ne!(text, ENCODE_PANICS, "a message whose encoding panics");
                out.extend_from_slice(text.as_bytes());
            }
        }
    }
}

/// A text message whose encoding panics, for tests of what a panic while writing costs.
#[cfg(test)]
pub(crate) const ENCODE_PANICS: &str = "\0this message panics when encoded";

impl Body {
    fn heap(&self) -> usize {
        let data = |d: &Option<Bytes>| d.as_ref().map_or(0, Bytes::len);
        match self {
            Body::Empty | Body::Stat(_) | Body::Count(_) | Body::Code(_) => 0,
            Body::Path(path) | Body::PathStat { path, .. } => path.capacity(),
            Body::Data { data: d, .. } => data(d),
            Body::Children(children) | Body::ChildrenStat { children, .. } => {
                vec_heap(children, String::capacity)
            }
            Body::Acl { acl, .. } => vec_heap(acl, |a| id_heap(&a.id)),
            Body::Multi(results) => vec_heap(results, |r| match r {
                MultiResult::Created { path, .. } => path.capacity(),
                _ => 0,
            }),
            Body::MultiRead(results) => vec_heap(results, |r| match r {
                ReadResult::Children(children) => vec_heap(children, String::capacity),
                ReadResult::Data { data: d, .. } => data(d),
                ReadResult::Error(_) => 0,
            }),
            Body::WhoAmI(infos) => {
                vec_heap(infos, |i| i.auth_scheme.capacity() + i.user.capacity())
            }
            Body::Event(event) => event.path.capacity(),
            Body::Sasl(token) => data(token),
        }
    }

    fn write(&self, b: &mut Vec<u8>) {
        match self {
            Body::Empty => {}
            Body::Stat(stat) => stat.write(b),
            Body::Path(path) => path.write(b),
            Body::PathStat { path, stat } => {
                path.write(b);
                stat.write(b);
            }
            Body::Data { data, stat } => {
                data.write(b);
                stat.write(b);
            }
            Body::Children(children) => children.write(b),
            Body::ChildrenStat { children, stat } => {
                children.write(b);
                stat.write(b);
            }
            Body::Acl { acl, stat } => {
                acl.write(b);
                stat.write(b);
            }
            Body::Count(n) | Body::Code(n) => n.write(b),
            Body::Multi(results) => {
                for result in results {
                    write_multi_result(result, b);
                }
                MULTI_END.write(b);
            }
            Body::MultiRead(results) => {
                for result in results {
                    match result {
                        ReadResult::Children(children) => {
                            MultiHeader {
                                op: OpCode::GetChildren.code(),
                                done: false,
                                err: 0,
                            }
                            .write(b);
                            children.write(b);
                        }
                        ReadResult::Data { data, stat } => {
                            MultiHeader {
                                op: OpCode::GetData.code(),
                                done: false,
                                err: 0,
                            }
                            .write(b);
                            data.write(b);
                            stat.write(b);
                        }
                        ReadResult::Error(code) => write_error_result(*code, b),
                    }
                }
                MULTI_END.write(b);
            }
            Body::WhoAmI(infos) => infos.write(b),
            Body::Event(event) => event.write(b),
            Body::Sasl(token) => token.write(b),
        }
    }
}

fn write_multi_result(result: &MultiResult, b: &mut Vec<u8>) {
    let header = |op: OpCode| MultiHeader {
        op: op.code(),
        done: false,
        err: 0,
    };
    match result {
        MultiResult::Created { op, path, stat } => {
            // ZooKeeper 3.8 answers create and create2 inside a multi with the path alone,
            // labelled create, and container and TTL creates with path and stat, labelled create2.
            if matches!(op, OpCode::Create | OpCode::Create2) {
                header(OpCode::Create).write(b);
                path.write(b);
            } else {
                header(OpCode::Create2).write(b);
                path.write(b);
                stat.write(b);
            }
        }
        MultiResult::Deleted => header(OpCode::Delete).write(b),
        MultiResult::DataSet(stat) => {
            header(OpCode::SetData).write(b);
            stat.write(b);
        }
        MultiResult::Checked => header(OpCode::Check).write(b),
        MultiResult::Error(code) => write_error_result(*code, b),
    }
}

fn write_error_result(code: ErrorCode, b: &mut Vec<u8>) {
    MultiHeader {
        op: OpCode::Error.code(),
        done: false,
        err: code.code(),
    }
    .write(b);
    ErrorResponse { err: code.code() }.write(b);
}

/// Why a message was not queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// This message would have passed the bound: the connection is being closed now.
    Overflow {
        queued_bytes: u64,
        message_bytes: u64,
    },
    /// The connection is being closed (or its writer has ended).
    Closing,
}

/// A connection's queue of outgoing messages, as the core uses it; `net::outbox::Outbox`
/// implements it. The core hands each message over and never waits on the socket: the queue
/// holds every message until the state it reveals is durable, then writes them in order.
/// Dropping it closes the connection once what is queued has been written.
pub(crate) trait ReplyQueue: Send {
    /// The connection's counters (`cons`), read without the queue's lock.
    fn stats(&self) -> &ConnStats;

    /// Queues `outgoing` unless that would pass the connection's bound on queued bytes
    /// ([`Refused::Overflow`]: the connection is closed now) or the connection is closing
    /// ([`Refused::Closing`]). Never waits for the socket.
    fn push(&self, outgoing: Outgoing) -> Result<(), Refused>;

    /// Writes what is sendable now, on the caller's thread; leaves the rest to the
    /// connection's writer task.
    fn flush(&self);

    /// Has the connection's writer task write what is sendable, on its own thread.
    fn hand_to_writer(&self);
}
