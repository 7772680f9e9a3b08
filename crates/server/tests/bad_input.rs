//! The bad-input contract of Keeper, tested over raw TCP against Keeper and Apache ZooKeeper.
//!
//! The contract: oversized frames, garbage, unknown opcodes, half-sent frames, invalid paths,
//! bad create modes and ACLs, failed authentication, wrong session passwords, too many
//! connections from one address, four-letter words that are not allowed and connections that
//! never say anything: the offending connection gets ZooKeeper's error or is closed, and the
//! server and every other session carry on with nothing acknowledged lost.
//!
//! Every test runs the same body against each backend of `both()`; ZooKeeper 3.8 is the
//! reference for which error code a request gets and whether its connection survives. Each test
//! starts a [`Bystander`] session before the abuse and checks afterwards that it is still
//! connected, reads back what it was told was written, and can still write.
//!
//! Every wait is bounded: a read by [`LIMIT`], a whole backend run by [`BACKEND_LIMIT`].

#[path = "bad_input/bystander.rs"]
mod bystander;

use std::future::Future;
use std::time::Duration;

use bytes::Bytes;
use lockkeeper_proto::request::CreateOp;
use lockkeeper_proto::{
    Acl, AuthPacket, ConnectRequest, ErrorCode, Id, Jute, MultiOp, OpCode, PathRequest,
    PathVersionRequest, PathWatchRequest, ReadOp, Request, SetAclRequest, SetDataRequest, XID_AUTH,
    encode_frame, perms,
};
use lockkeeper_server::Config;
use lockkeeper_testkit::{Keeper, TestServer, backend_enabled, both};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use bystander::Bystander;
use lockkeeper_testkit::raw::{Answer, LIMIT, MAX_FRAME, Next, Raw, open_acl, request_frame};

/// The most one backend's part of a test may take, waits for server-side timeouts included.
const BACKEND_LIMIT: Duration = Duration::from_secs(240);

/// How long a connection that sent nothing may live: ZooKeeper's
/// `zookeeper.nio.sessionlessCnxnTimeout` and Keeper's `handshake_timeout`, both 10 s, plus
/// room for a loaded machine.
const HANDSHAKE_CLOSE_LIMIT: Duration = Duration::from_secs(45);

/// How long a server may take to close a connection it has decided to close. ZooKeeper closes
/// in milliseconds; this only absorbs a loaded machine.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// The shortest session timeout both servers grant (2 ticks of 2 s); for throwaway sessions.
const SHORT_SESSION_MS: i32 = 4_000;

/// Connections ZooKeeper and Keeper allow from one address by default (`maxClientCnxns`).
const MAX_CLIENT_CNXNS: usize = 60;

fn code(err: ErrorCode) -> Option<i32> {
    Some(err.code())
}

/// Runs one backend's part of a test, failing it (naming the backend) if it takes too long.
async fn bounded<T>(backend: &str, fut: impl Future<Output = T>) -> T {
    lockkeeper_testkit::within(BACKEND_LIMIT, backend, fut).await
}

fn create(op: OpCode, path: &str, acl: Vec<Acl>, flags: i32, ttl: i64) -> Request {
    Request::Create(CreateOp {
        op,
        path: path.to_string(),
        data: Some(Bytes::from_static(b"data")),
        acl,
        flags,
        ttl,
    })
}

fn exists(path: &str) -> Request {
    Request::Exists(PathWatchRequest {
        path: path.to_string(),
        watch: false,
    })
}

/// The connection closes without a reply, and the session behind it is still there: a new
/// connection re-attaches to it with its password.
async fn assert_closed_and_session_survives(conn: &mut Raw, addr: std::net::SocketAddr, why: &str) {
    let frames = conn.closed_within(LIMIT, why).await;
    assert!(
        frames.is_empty(),
        "{}: {why}: expected no more frames before the close, got {frames:?}",
        conn.label
    );
    let label = format!("{} re-attaching after {why}", conn.label);
    let (mut again, response) =
        Raw::reattach(addr, label, conn.session_id, conn.passwd.clone()).await;
    let response = response.unwrap_or_else(|| panic!("{}: refused", again.label));
    assert_eq!(
        (response.session_id, response.timeout > 0),
        (conn.session_id, true),
        "{}: the session did not survive: {response:?}",
        again.label
    );
    again.ping().await;
}

// ---------------------------------------------------------------------------------------------
// Framing
// ---------------------------------------------------------------------------------------------

/// A length prefix above jute.maxbuffer closes the connection from the prefix alone (the body is
/// never sent, so a server that waited for it would stay silent); exactly jute.maxbuffer is
/// read and served.
#[tokio::test]
async fn oversized_frames_close_the_connection_without_waiting_for_the_body() {
    for server in both() {
        let (addr, backend) = (server.addr(), server.name());
        bounded(backend, async {
            let mut bystander = Bystander::start(addr, backend).await;
            for len in [MAX_FRAME as i32 + 1, 0x0100_0000, i32::MAX] {
                let mut conn = Raw::open(addr, format!("{backend} connect frame of {len}")).await;
                conn.send(&len.to_be_bytes()).await.expect("send a prefix");
                let frames = conn.closed_within(LIMIT, "an oversized prefix").await;
                assert!(frames.is_empty(), "{backend}: answered {frames:?}");

                let mut conn = Raw::session(addr, format!("{backend} frame of {len}")).await;
                conn.send(&len.to_be_bytes()).await.expect("send a prefix");
                assert_closed_and_session_survives(&mut conn, addr, "an oversized prefix").await;
            }

            // The largest legal frame: an exists request whose path fills jute.maxbuffer.
            let mut conn = Raw::session(addr, format!("{backend} frame at the limit")).await;
            let path_len = MAX_FRAME - 8 - 4 - 1; // header, string length, watch flag
            let body = PathWatchRequest {
                path: format!("/{}", "x".repeat(path_len - 1)),
                watch: false,
            }
            .encode();
            let frame = request_frame(7, OpCode::Exists.code(), &body);
            assert_eq!(frame.len(), 4 + MAX_FRAME);
            conn.send(&frame).await.expect("send the largest frame");
            assert_eq!(conn.answer(7).await.err(), code(ErrorCode::NoNode));
            conn.ping().await;

            bystander.check("oversized frames").await;
        })
        .await;
    }
}

#[tokio::test]
async fn negative_frame_lengths_close_the_connection() {
    for server in both() {
        let (addr, backend) = (server.addr(), server.name());
        bounded(backend, async {
            let mut bystander = Bystander::start(addr, backend).await;
            for len in [-1i32, -4, i32::MIN] {
                let mut conn = Raw::open(addr, format!("{backend} connect length {len}")).await;
                conn.send(&len.to_be_bytes()).await.expect("send a prefix");
                let frames = conn.closed_within(LIMIT, "a negative prefix").await;
                assert!(frames.is_empty(), "{backend}: answered {frames:?}");

                let mut conn = Raw::session(addr, format!("{backend} length {len}")).await;
                conn.send(&len.to_be_bytes()).await.expect("send a prefix");
                assert_closed_and_session_survives(&mut conn, addr, "a negative prefix").await;
            }
            bystander.check("negative frame lengths").await;
        })
        .await;
    }
}

/// A first frame that is not a connect request: closed, no session, no answer.
#[tokio::test]
async fn a_garbage_connect_request_closes_the_connection() {
    let valid = ConnectRequest::new_session(30_000).encode();
    let with_passwd_len = |len: i32| {
        let mut body = valid[..24].to_vec(); // protocol version, zxid, timeout, session id
        body.extend_from_slice(&len.to_be_bytes());
        body.extend_from_slice(&[0; 16]);
        body
    };
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("an empty frame", Vec::new()),
        ("five bytes of text", b"hello".to_vec()),
        ("a connect request cut short", valid[..20].to_vec()),
        (
            "a password longer than the frame",
            with_passwd_len(0x7fff_ffff),
        ),
        ("a password of length -2", with_passwd_len(-2)),
    ];
    for server in both() {
        let (addr, backend) = (server.addr(), server.name());
        bounded(backend, async {
            let mut bystander = Bystander::start(addr, backend).await;
            for (what, body) in &cases {
                let mut conn = Raw::open(addr, format!("{backend} connect with {what}")).await;
                let mut frame = Vec::new();
                encode_frame(&mut frame, |out| out.extend_from_slice(body));
                conn.send(&frame).await.expect("send a connect frame");
                let frames = conn.closed_within(LIMIT, what).await;
                assert!(frames.is_empty(), "{backend}: {what} answered {frames:?}");
            }
            bystander.check("garbage connect requests").await;
        })
        .await;
    }
}

/// Random bytes (seeded) after a valid handshake: the first four are read as a length that no
/// server accepts, so the connection is closed; any reply sent before is an error.
#[tokio::test]
async fn random_garbage_after_the_handshake_closes_the_connection() {
    for server in both() {
        let (addr, backend) = (server.addr(), server.name());
        bounded(backend, async {
            let mut bystander = Bystander::start(addr, backend).await;
            for seed in 0..16u64 {
                let mut rng = StdRng::seed_from_u64(seed);
                let garbage: Vec<u8> = (0..8192).map(|_| rng.r#gen()).collect();
                let mut conn = Raw::session(addr, format!("{backend} garbage seed {seed}")).await;
                // The server may close while we are still writing; that is an outcome, not an
                // error of the test.
                let _ = conn.send(&garbage).await;
                let frames = conn.closed_within(LIMIT, "random garbage").await;
                for frame in frames {
                    let err = i32::from_be_bytes(frame[12..16].try_into().expect("a reply"));
                    assert_ne!(err, 0, "{backend}: seed {seed}: garbage answered Ok");
                }
            }
            bystander.check("random garbage").await;
        })
        .await;
    }
}

// ---------------------------------------------------------------------------------------------
// Half-sent frames
// ---------------------------------------------------------------------------------------------

/// Connections that send part of a frame and go away: nothing stays behind. More of them than
/// the per-address limit, one after another, each of which must get a session: a server that
/// leaked a connection slot per abandoned frame would refuse the 61st.
#[tokio::test]
async fn half_sent_frames_then_disconnect_leave_nothing_behind() {
    for server in both() {
        let (addr, backend) = (server.addr(), server.name());
        bounded(backend, async {
            let mut bystander = Bystander::start(addr, backend).await;
            let request = request_frame(1, OpCode::GetData.code(), &{
                PathWatchRequest {
                    path: "/bystander".into(),
                    watch: false,
                }
                .encode()
            });
            for i in 0..2 * MAX_CLIENT_CNXNS {
                let label = format!("{backend} half frame {i}");
                let mut conn = Raw::session_eventually(addr, label, SHORT_SESSION_MS).await;
                // Cut at every position: inside the prefix, the header and the body.
                let cut = 1 + i % (request.len() - 1);
                conn.send(&request[..cut]).await.expect("send half a frame");
                drop(conn);
            }
            // Half a connect request, then gone.
            for cut in [2usize, 6, 20] {
                let mut conn = Raw::open(addr, format!("{backend} half connect")).await;
                let mut frame = Vec::new();
                encode_frame(&mut frame, |out| {
                    out.extend_from_slice(&[0; 44]);
                });
                conn.send(&frame[..cut])
                    .await
                    .expect("send half a connect request");
            }
            let mut fresh =
                Raw::session_eventually(addr, format!("{backend} after"), SHORT_SESSION_MS).await;
            fresh.ping().await;
            bystander.check("half-sent frames and disconnects").await;
        })
        .await;
    }
}

/// A connection stuck half-way through a frame must not stall anyone else: while it sits there
/// the bystander and brand-new sessions are served. It is not kept forever either: its session
/// gets no heartbeat, expires, and the connection is closed.
#[tokio::test]
async fn a_half_sent_frame_then_silence_does_not_stall_others() {
    for server in both() {
        let (addr, backend) = (server.addr(), server.name());
        bounded(backend, async {
            let mut bystander = Bystander::start(addr, backend).await;
            let label = format!("{backend} silent half frame");
            let mut stuck = Raw::session_eventually(addr, label, SHORT_SESSION_MS).await;
            let frame = request_frame(1, OpCode::Exists.code(), &exists_body("/bystander"));
            stuck.send(&frame[..frame.len() - 3]).await.expect("send");

            let mut pre_handshake = Raw::open(addr, format!("{backend} silent half connect")).await;
            pre_handshake
                .send(&44i32.to_be_bytes())
                .await
                .expect("send");

            let mut others = 0;
            let deadline = tokio::time::Instant::now() + HANDSHAKE_CLOSE_LIMIT;
            let (mut stuck_closed, mut pre_closed) = (false, false);
            while !(stuck_closed && pre_closed) {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "{backend}: still open after {HANDSHAKE_CLOSE_LIMIT:?}: \
                     half frame {}, half connect {}",
                    !stuck_closed,
                    !pre_closed
                );
                bystander.ping("a silent half-sent frame").await;
                let label = format!("{backend} newcomer {others}");
                let mut newcomer = Raw::session_eventually(addr, label, SHORT_SESSION_MS).await;
                newcomer.ping().await;
                others += 1;
                if !stuck_closed {
                    stuck_closed = closed_now(&mut stuck, Duration::from_millis(500)).await;
                }
                if !pre_closed {
                    pre_closed = closed_now(&mut pre_handshake, Duration::from_millis(500)).await;
                }
            }
            bystander.check("a silent half-sent frame").await;
        })
        .await;
    }
}

/// Whether `conn` is closed by the server within `within` (it must send nothing meanwhile).
async fn closed_now(conn: &mut Raw, within: Duration) -> bool {
    match conn.next(within).await {
        Next::Closed => true,
        Next::Silent => false,
        Next::Frame(frame) => panic!("{}: unexpected frame {frame:?}", conn.label),
    }
}

fn exists_body(path: &str) -> Vec<u8> {
    PathWatchRequest {
        path: path.into(),
        watch: false,
    }
    .encode()
}

// ---------------------------------------------------------------------------------------------
// Requests the server cannot serve
// ---------------------------------------------------------------------------------------------

/// ZooKeeper answers an opcode it does not know with Unimplemented (-6) on the request's xid and
/// then closes the connection (its `UnimplementedRequestProcessor`), the session staying alive.
/// Notification (0) and Error (-1) are not requests, and get the same. Every opcode is tried
/// and all differences are reported together.
#[tokio::test]
async fn an_unknown_opcode_is_answered_unimplemented_then_the_connection_closed() {
    for server in both() {
        let (addr, backend) = (server.addr(), server.name());
        bounded(backend, async {
            let mut bystander = Bystander::start(addr, backend).await;
            let mut differences = Vec::new();
            for op in [999, 10, 23, 200, -2, -100, i32::MAX, i32::MIN, 0, -1] {
                let mut conn = Raw::session(addr, format!("{backend} opcode {op}")).await;
                let answer = conn.call_raw(op, &[]).await;
                let closed = answer == Answer::Closed || closed_now(&mut conn, CLOSE_GRACE).await;
                if (answer.err(), closed) != (code(ErrorCode::Unimplemented), true) {
                    let connection = if closed { "closed" } else { "kept open" };
                    differences.push(format!("opcode {op}: {answer:?}, connection {connection}"));
                }
                // Only the connection goes: the session is still there to re-attach to.
                let label = format!("{backend} re-attaching after opcode {op}");
                let (mut again, response) =
                    Raw::reattach(addr, label, conn.session_id, conn.passwd.clone()).await;
                let response = response.expect("the session can be re-attached");
                assert_eq!(
                    response.session_id, conn.session_id,
                    "{backend}: {response:?}"
                );
                again.ping().await;
            }
            assert!(
                differences.is_empty(),
                "{backend}: expected Unimplemented (-6), then the connection closed:\n{}",
                differences.join("\n")
            );
            bystander.check("unknown opcodes").await;
        })
        .await;
    }
}

/// A known opcode whose body does not decode: MarshallingError (-5) on that request, and the
/// connection stays usable.
#[tokio::test]
async fn a_known_opcode_with_an_undecodable_body_is_a_marshalling_error() {
    let mut huge_string = 0x7fff_ffffi32.to_be_bytes().to_vec();
    huge_string.extend_from_slice(b"/a");
    let mut huge_acl = "/h".to_string().encode();
    huge_acl.extend_from_slice(&(-1i32).to_be_bytes()); // null data
    huge_acl.extend_from_slice(&0x1000_0000i32.to_be_bytes()); // ACL count
    let mut bad_multi = Vec::new();
    lockkeeper_proto::MultiHeader {
        op: OpCode::Create.code(),
        done: false,
        err: -1,
    }
    .write(&mut bad_multi);
    bad_multi.extend_from_slice(&"/m".to_string().encode()); // then nothing
    let cases: Vec<(&str, OpCode, Vec<u8>)> = vec![
        ("getData with a path cut short", OpCode::GetData, {
            let mut body = 10i32.to_be_bytes().to_vec();
            body.extend_from_slice(b"/a");
            body
        }),
        ("getData without its watch flag", OpCode::GetData, {
            "/bystander".to_string().encode()
        }),
        ("getData with a 2 GiB path", OpCode::GetData, huge_string),
        ("exists with half a length", OpCode::Exists, vec![0, 0]),
        ("create with only a path", OpCode::Create, {
            "/t".to_string().encode()
        }),
        ("create with 2^28 ACL entries", OpCode::Create, huge_acl),
        ("setData without data", OpCode::SetData, {
            "/bystander".to_string().encode()
        }),
        ("delete without a version", OpCode::Delete, {
            "/bystander".to_string().encode()
        }),
        ("multi cut inside an op", OpCode::Multi, bad_multi),
        (
            "createSession after the handshake",
            OpCode::CreateSession,
            Vec::new(),
        ),
    ];
    for server in both() {
        let (addr, backend) = (server.addr(), server.name());
        bounded(backend, async {
            let mut bystander = Bystander::start(addr, backend).await;
            let mut conn = Raw::session(addr, format!("{backend} undecodable bodies")).await;
            for (what, op, body) in &cases {
                let answer = conn.call_raw(op.code(), body).await;
                assert_eq!(
                    answer.err(),
                    code(ErrorCode::MarshallingError),
                    "{backend}: {what} answered {answer:?}"
                );
                conn.ping().await;
            }
            bystander.check("undecodable request bodies").await;
        })
        .await;
    }
}

/// ZooKeeper reads the fields a request has and ignores whatever follows them in the frame (jute
/// records are read field by field; nothing checks for leftovers), so a request followed by
/// junk is served as if the junk were not there. Every case is tried and all differences are
/// reported together.
#[tokio::test]
async fn bytes_after_a_complete_request_are_ignored() {
    const JUNK: &[u8] = b"junk after the record";
    let with_junk = |request: Request| {
        let mut body = Vec::new();
        request.encode_body(&mut body);
        body.extend_from_slice(JUNK);
        (request.op_code(), body)
    };
    let cases = vec![
        with_junk(create(OpCode::Create, "/trailing", open_acl(), 0, 0)),
        with_junk(exists("/trailing")),
        with_junk(Request::GetData(PathWatchRequest {
            path: "/trailing".into(),
            watch: false,
        })),
        with_junk(Request::SetData(SetDataRequest {
            path: "/trailing".into(),
            data: Some(Bytes::from_static(b"new")),
            version: -1,
        })),
        with_junk(Request::GetChildren(PathWatchRequest {
            path: "/".into(),
            watch: false,
        })),
        with_junk(Request::Delete(PathVersionRequest {
            path: "/trailing".into(),
            version: -1,
        })),
    ];
    for server in both() {
        let (addr, backend) = (server.addr(), server.name());
        bounded(backend, async {
            let mut bystander = Bystander::start(addr, backend).await;
            let mut differences = Vec::new();
            let mut conn = Raw::session(addr, format!("{backend} trailing bytes")).await;
            for (op, body) in &cases {
                match conn.call_raw(op.code(), body).await {
                    Answer::Reply { err: 0, .. } => {}
                    Answer::Closed => {
                        differences.push(format!("{op:?}: connection closed"));
                        let label = format!("{backend} trailing bytes after {op:?}");
                        conn = Raw::session(addr, label).await;
                    }
                    other => differences.push(format!("{op:?}: {other:?}")),
                }
            }
            // A connect request followed by junk is a connect request too.
            let mut connect = ConnectRequest {
                protocol_version: 0,
                last_zxid_seen: 0,
                timeout: SHORT_SESSION_MS,
                session_id: 0,
                passwd: Bytes::from_static(&[0; 16]),
                read_only: Some(false),
            }
            .encode();
            connect.extend_from_slice(JUNK);
            let mut frame = Vec::new();
            encode_frame(&mut frame, |out| out.extend_from_slice(&connect));
            let mut fresh = Raw::open(addr, format!("{backend} connect with junk")).await;
            fresh.send(&frame).await.expect("send a connect request");
            match fresh.next(LIMIT).await {
                Next::Frame(_) => fresh.ping().await,
                other => differences.push(format!("connect request: {other:?}")),
            }
            assert!(
                differences.is_empty(),
                "{backend}: expected each request served as if the junk were absent:\n{}",
                differences.join("\n")
            );
            conn.ping().await;
            bystander.check("trailing bytes").await;
        })
        .await;
    }
}

// ---------------------------------------------------------------------------------------------
// Invalid arguments
// ---------------------------------------------------------------------------------------------

/// Invalid paths get exactly ZooKeeper's codes, and the connection stays usable. ZooKeeper
/// validates the path of writes (BadArguments, -8), except that create looks up the parent
/// first (NoNode, -101, when "everything before the last slash" does not exist) and delete only
/// rejects what it cannot split; reads just look the path up (NoNode), except exists, which
/// refuses a NUL. A sequential create appends ten digits before validating, so "/." becomes the
/// valid "/.0000000001" and succeeds.
#[tokio::test]
async fn invalid_paths_get_zookeepers_error_codes() {
    const OK: i32 = 0;
    const BAD: i32 = ErrorCode::BadArguments.code();
    const NONODE: i32 = ErrorCode::NoNode.code();
    // path, create, sequential create, delete, setData, getData, exists, getChildren, setACL
    let table: &[(&str, [i32; 8])] = &[
        ("a", [BAD, BAD, BAD, BAD, NONODE, NONODE, NONODE, BAD]),
        (
            "/a/",
            [NONODE, NONODE, NONODE, BAD, NONODE, NONODE, NONODE, BAD],
        ),
        ("//", [BAD, BAD, NONODE, BAD, NONODE, NONODE, NONODE, BAD]),
        ("//a", [BAD, BAD, NONODE, BAD, NONODE, NONODE, NONODE, BAD]),
        (
            "/a//b",
            [NONODE, NONODE, NONODE, BAD, NONODE, NONODE, NONODE, BAD],
        ),
        (
            "/a/./b",
            [NONODE, NONODE, NONODE, BAD, NONODE, NONODE, NONODE, BAD],
        ),
        (
            "/a/../b",
            [NONODE, NONODE, NONODE, BAD, NONODE, NONODE, NONODE, BAD],
        ),
        ("/.", [BAD, OK, NONODE, BAD, NONODE, NONODE, NONODE, BAD]),
        ("/..", [BAD, OK, NONODE, BAD, NONODE, NONODE, NONODE, BAD]),
        ("/a\u{0}b", [BAD, BAD, BAD, BAD, NONODE, BAD, NONODE, BAD]),
        (
            "/a\u{1}b",
            [BAD, BAD, NONODE, BAD, NONODE, NONODE, NONODE, BAD],
        ),
        (
            "/\u{85}",
            [BAD, BAD, NONODE, BAD, NONODE, NONODE, NONODE, BAD],
        ),
        (
            "/\u{e000}",
            [BAD, BAD, NONODE, BAD, NONODE, NONODE, NONODE, BAD],
        ),
        (
            "/\u{fff5}",
            [BAD, BAD, NONODE, BAD, NONODE, NONODE, NONODE, BAD],
        ),
    ];
    // Every edge of PathUtils.validatePath's refused ranges (as Java chars: controls
    // \u0001-\u001F, DEL and C1 \u007F-\u009F, surrogates and private use \uD800-\uF8FF,
    // specials \uFFF0-\uFFFF), and characters outside the Basic Multilingual Plane, which Java
    // holds as surrogate pairs: all get the codes of any other refused character.
    let refused = [
        "/\u{1f}",
        "/\u{7f}",
        "/\u{9f}",
        "/\u{f8ff}",
        "/\u{fff0}",
        "/\u{fffd}",
        "/\u{ffff}",
        "/\u{10000}",
        "/lock\u{1f512}",
        "/\u{10ffff}",
    ]
    .map(|p| (p, [BAD, BAD, NONODE, BAD, NONODE, NONODE, NONODE, BAD]));
    let table: Vec<_> = table.iter().copied().chain(refused).collect();
    for server in both() {
        let (addr, backend) = (server.addr(), server.name());
        bounded(backend, async {
            let mut bystander = Bystander::start(addr, backend).await;
            let mut conn = Raw::session(addr, format!("{backend} invalid paths")).await;
            for (path, expected) in &table {
                let got = path_codes(&mut conn, path).await;
                assert_eq!(
                    got, *expected,
                    "{backend}: {path:?}: codes for create, sequential create, delete, setData, \
                     getData, exists, getChildren, setACL"
                );
            }
            conn.ping().await;
            bystander.check("invalid paths").await;
        })
        .await;
    }
}

/// The codes of the eight operations of [`invalid_paths_get_zookeepers_error_codes`] on `path`.
async fn path_codes(conn: &mut Raw, path: &str) -> [i32; 8] {
    let p = path.to_string();
    let requests = [
        create(OpCode::Create, path, open_acl(), 0, 0),
        create(OpCode::Create, path, open_acl(), 2, 0),
        Request::Delete(PathVersionRequest {
            path: p.clone(),
            version: -1,
        }),
        Request::SetData(SetDataRequest {
            path: p.clone(),
            data: Some(Bytes::new()),
            version: -1,
        }),
        Request::GetData(PathWatchRequest {
            path: p.clone(),
            watch: false,
        }),
        exists(path),
        Request::GetChildren(PathWatchRequest {
            path: p.clone(),
            watch: false,
        }),
        Request::SetAcl(SetAclRequest {
            path: p,
            acl: open_acl(),
            version: -1,
        }),
    ];
    let mut codes = [0; 8];
    for (slot, request) in codes.iter_mut().zip(&requests) {
        let answer = conn.call(request).await;
        *slot = answer
            .err()
            .unwrap_or_else(|| panic!("{}: {request:?} closed the connection", conn.label));
    }
    codes
}

/// The characters just outside each refused range (space, NBSP, the last character before the
/// surrogates, the first after the private use area, the last before the specials) are valid:
/// a node named by each is created and deleted on both servers.
#[tokio::test]
async fn characters_next_to_the_refused_ranges_are_accepted() {
    for server in both() {
        let (addr, backend) = (server.addr(), server.name());
        bounded(backend, async {
            let mut conn = Raw::session(addr, format!("{backend} edge characters")).await;
            for path in ["/\u{20}", "/\u{a0}", "/\u{d7ff}", "/\u{f900}", "/\u{ffef}"] {
                let created = conn
                    .call(&create(OpCode::Create, path, open_acl(), 0, 0))
                    .await;
                assert_eq!(created.err(), Some(0), "{backend}: create {path:?}");
                let deleted = conn
                    .call(&Request::Delete(PathVersionRequest {
                        path: path.to_string(),
                        version: -1,
                    }))
                    .await;
                assert_eq!(deleted.err(), Some(0), "{backend}: delete {path:?}");
            }
        })
        .await;
    }
}

/// ZooKeeper keeps the root under the key "" as well as "/", so reads of the empty path see the
/// root; writes to it are BadArguments like any invalid path.
#[tokio::test]
async fn the_empty_path_reads_as_the_root_and_cannot_be_written() {
    const OK: i32 = 0;
    const BAD: i32 = ErrorCode::BadArguments.code();
    for server in both() {
        let (addr, backend) = (server.addr(), server.name());
        bounded(backend, async {
            let mut bystander = Bystander::start(addr, backend).await;
            let mut conn = Raw::session(addr, format!("{backend} empty path")).await;
            let got = path_codes(&mut conn, "").await;
            assert_eq!(
                got,
                [BAD, BAD, BAD, BAD, OK, OK, OK, BAD],
                "{backend}: \"\": codes for create, sequential create, delete, setData, getData, \
                 exists, getChildren, setACL"
            );
            conn.ping().await;
            bystander.check("the empty path").await;
        })
        .await;
    }
}

/// A path that is not UTF-8. ZooKeeper decodes it leniently (each bad byte becomes U+FFFD), so
/// a create or setData is refused by path validation (U+FFFD is a forbidden character:
/// BadArguments), and delete and the reads find no such node (NoNode); the connection stays
/// usable. Every operation is tried and all differences are reported together.
#[tokio::test]
async fn a_path_that_is_not_utf8_is_an_invalid_path() {
    // Encoded with a stand-in of the same length, whose bytes are then made invalid UTF-8.
    const STAND_IN: &str = "/bad~~name";
    const INVALID: &[u8] = b"/bad\xff\xfename";
    let p = || STAND_IN.to_string();
    let cases: Vec<(Request, ErrorCode)> = vec![
        (
            create(OpCode::Create, STAND_IN, open_acl(), 0, 0),
            ErrorCode::BadArguments,
        ),
        (
            Request::SetData(SetDataRequest {
                path: p(),
                data: Some(Bytes::new()),
                version: -1,
            }),
            ErrorCode::BadArguments,
        ),
        (
            Request::Delete(PathVersionRequest {
                path: p(),
                version: -1,
            }),
            ErrorCode::NoNode,
        ),
        (
            Request::GetData(PathWatchRequest {
                path: p(),
                watch: false,
            }),
            ErrorCode::NoNode,
        ),
        (exists(STAND_IN), ErrorCode::NoNode),
        (
            Request::GetChildren(PathWatchRequest {
                path: p(),
                watch: false,
            }),
            ErrorCode::NoNode,
        ),
    ];
    for server in both() {
        let (addr, backend) = (server.addr(), server.name());
        bounded(backend, async {
            let mut bystander = Bystander::start(addr, backend).await;
            let mut conn = Raw::session(addr, format!("{backend} non-UTF-8 path")).await;
            let mut differences = Vec::new();
            for (request, expected) in &cases {
                let mut body = Vec::new();
                request.encode_body(&mut body);
                // The path is the first field: its 4-byte length, then its bytes.
                assert_eq!(&body[4..4 + INVALID.len()], STAND_IN.as_bytes());
                body[4..4 + INVALID.len()].copy_from_slice(INVALID);
                let op = request.op_code();
                let answer = conn.call_raw(op.code(), &body).await;
                if answer.err() != code(*expected) {
                    differences.push(format!("{op:?}: expected {expected:?}, got {answer:?}"));
                }
                if answer == Answer::Closed {
                    conn = Raw::session(addr, format!("{backend} non-UTF-8 after {op:?}")).await;
                }
            }
            assert!(
                differences.is_empty(),
                "{backend}: a non-UTF-8 path:\n{}",
                differences.join("\n")
            );
            conn.ping().await;
            bystander.check("non-UTF-8 paths").await;
        })
        .await;
    }
}

/// Unknown create flags, and TTLs out of range or on the wrong mode: BadArguments, nothing
/// created, connection usable.
#[tokio::test]
async fn a_create_with_an_unknown_mode_or_a_bad_ttl_is_bad_arguments() {
    let max_ttl = (1i64 << 40) - 1; // EphemeralType.TTL's maximum
    let cases: Vec<(&str, OpCode, i32, i64)> = vec![
        ("flags 7", OpCode::Create, 7, 0),
        ("flags 99", OpCode::Create, 99, 0),
        ("flags -1", OpCode::Create, -1, 0),
        ("flags i32::MIN", OpCode::Create, i32::MIN, 0),
        ("create2 with flags 7", OpCode::Create2, 7, 0),
        ("createTTL with flags 7", OpCode::CreateTtl, 7, 1000),
        ("createTTL with ttl 0", OpCode::CreateTtl, 5, 0),
        ("createTTL with ttl -5", OpCode::CreateTtl, 5, -5),
        (
            "createTTL with ttl i64::MIN",
            OpCode::CreateTtl,
            5,
            i64::MIN,
        ),
        (
            "createTTL beyond the maximum",
            OpCode::CreateTtl,
            5,
            max_ttl + 1,
        ),
        ("sequential createTTL with ttl 0", OpCode::CreateTtl, 6, 0),
        ("createTTL of a persistent node", OpCode::CreateTtl, 0, 1000),
        ("createTTL of an ephemeral node", OpCode::CreateTtl, 1, 1000),
        ("a TTL mode through plain create", OpCode::Create, 5, 0),
    ];
    for server in both() {
        let (addr, backend) = (server.addr(), server.name());
        bounded(backend, async {
            let mut bystander = Bystander::start(addr, backend).await;
            let mut conn = Raw::session(addr, format!("{backend} bad create modes")).await;
            for (i, (what, op, flags, ttl)) in cases.iter().enumerate() {
                let path = format!("/mode-{i}");
                let answer = conn
                    .call(&create(*op, &path, open_acl(), *flags, *ttl))
                    .await;
                assert_eq!(
                    answer.err(),
                    code(ErrorCode::BadArguments),
                    "{backend}: {what} answered {answer:?}"
                );
                let answer = conn.call(&exists(&path)).await;
                assert_eq!(answer.err(), code(ErrorCode::NoNode), "{backend}: {what}");
            }
            // The same connection still creates a good TTL node.
            let answer = conn
                .call(&create(
                    OpCode::CreateTtl,
                    "/mode-ok",
                    open_acl(),
                    5,
                    max_ttl,
                ))
                .await;
            assert_eq!(answer.err(), code(ErrorCode::Ok), "{backend}: {answer:?}");
            bystander.check("bad create modes").await;
        })
        .await;
    }
}

/// ACL lists that grant nobody anything valid: InvalidACL (-114) on create and setACL; the node
/// is not created and an existing node keeps its ACL.
#[tokio::test]
async fn invalid_acls_are_refused() {
    let entry = |scheme: &str, id: &str| Acl {
        perms: perms::ALL,
        id: Id {
            scheme: scheme.into(),
            id: id.into(),
        },
    };
    let cases: Vec<(&str, Vec<Acl>)> = vec![
        ("an empty ACL", Vec::new()),
        ("an unknown scheme", vec![entry("foo", "bar")]),
        (
            "world with an id other than anyone",
            vec![entry("world", "nobody")],
        ),
        ("digest without user:hash", vec![entry("digest", "nocolon")]),
        ("ip that is not an address", vec![entry("ip", "300.1.1.1")]),
        ("auth without authenticated ids", vec![entry("auth", "")]),
        ("a good entry then an unknown scheme", {
            let mut acl = open_acl();
            acl.push(entry("foo", "bar"));
            acl
        }),
    ];
    for server in both() {
        let (addr, backend) = (server.addr(), server.name());
        bounded(backend, async {
            let mut bystander = Bystander::start(addr, backend).await;
            let mut conn = Raw::session(addr, format!("{backend} invalid ACLs")).await;
            let target = "/acl-target";
            let answer = conn
                .call(&create(OpCode::Create, target, open_acl(), 0, 0))
                .await;
            assert_eq!(answer.err(), code(ErrorCode::Ok), "{backend}: {answer:?}");
            let acl_before = conn
                .call(&Request::GetAcl(PathRequest {
                    path: target.into(),
                }))
                .await;
            for (i, (what, acl)) in cases.iter().enumerate() {
                let path = format!("/acl-{i}");
                let answer = conn
                    .call(&create(OpCode::Create, &path, acl.clone(), 0, 0))
                    .await;
                assert_eq!(
                    answer.err(),
                    code(ErrorCode::InvalidAcl),
                    "{backend}: create with {what} answered {answer:?}"
                );
                let answer = conn.call(&exists(&path)).await;
                assert_eq!(answer.err(), code(ErrorCode::NoNode), "{backend}: {what}");
                let answer = conn
                    .call(&Request::SetAcl(SetAclRequest {
                        path: target.into(),
                        acl: acl.clone(),
                        version: -1,
                    }))
                    .await;
                assert_eq!(
                    answer.err(),
                    code(ErrorCode::InvalidAcl),
                    "{backend}: setACL with {what} answered {answer:?}"
                );
            }
            let acl_after = conn
                .call(&Request::GetAcl(PathRequest {
                    path: target.into(),
                }))
                .await;
            assert_eq!(
                acl_after, acl_before,
                "{backend}: a refused setACL changed the node"
            );
            bystander.check("invalid ACLs").await;
        })
        .await;
    }
}

// ---------------------------------------------------------------------------------------------
// Authentication and sessions
// ---------------------------------------------------------------------------------------------

/// An auth packet with a scheme the server has no provider for: AuthFailed (-115) on xid -4,
/// then the connection is closed. Only the connection: the session can be re-attached.
#[tokio::test]
async fn auth_with_an_unknown_scheme_fails_and_closes_the_connection() {
    for server in both() {
        let (addr, backend) = (server.addr(), server.name());
        bounded(backend, async {
            let mut bystander = Bystander::start(addr, backend).await;
            for scheme in ["foo", "", "world", "super", "sasl"] {
                let mut conn = Raw::session(addr, format!("{backend} auth {scheme:?}")).await;
                let packet = AuthPacket {
                    auth_type: 0,
                    scheme: scheme.into(),
                    auth: Bytes::from_static(b"user:password"),
                };
                conn.send_request(XID_AUTH, OpCode::Auth.code(), &packet.encode())
                    .await
                    .expect("send an auth packet");
                let answer = conn.answer(XID_AUTH).await;
                assert_eq!(
                    answer.err(),
                    code(ErrorCode::AuthFailed),
                    "{backend}: auth with scheme {scheme:?} answered {answer:?}"
                );
                assert_closed_and_session_survives(&mut conn, addr, "a failed auth").await;
            }
            bystander.check("failed auth").await;
        })
        .await;
    }
}

/// A connect request naming a session with the wrong password (or a session that never
/// existed): a ConnectResponse with timeout 0, session 0 and a zero password, then the close.
/// The session itself is untouched: its owner re-attaches with the right password and finds its
/// ephemeral node.
///
/// ZooKeeper 3.8 also closes the connection the named session is on *before* checking the
/// password (`processConnectRequest` closes the old connection of a re-attaching session first),
/// so anyone who learns a session id can disconnect its owner (who then reconnects).
/// Keeper checks the password first and leaves the owner's connection alone, which is what the
/// contract asks of every other session; this is the one expectation that differs by backend.
#[tokio::test]
async fn reattach_with_a_wrong_password_is_refused() {
    for server in both() {
        let (addr, backend) = (server.addr(), server.name());
        bounded(backend, async {
            let mut bystander = Bystander::start(addr, backend).await;
            let mut owner = Raw::session(addr, format!("{backend} session owner")).await;
            let answer = owner
                .call(&create(OpCode::Create, "/owned", open_acl(), 1, 0))
                .await;
            assert_eq!(answer.err(), code(ErrorCode::Ok), "{backend}: {answer:?}");

            let mut wrong = owner.passwd.to_vec();
            wrong[0] ^= 0xff;
            let impostors = [
                ("a wrong password", owner.session_id, Bytes::from(wrong)),
                (
                    "a short password",
                    owner.session_id,
                    Bytes::from_static(b"pw"),
                ),
                (
                    "an unknown session",
                    owner.session_id ^ 0x5555,
                    owner.passwd.clone(),
                ),
            ];
            for (what, session_id, passwd) in impostors {
                let label = format!("{backend} re-attach with {what}");
                let (mut conn, response) = Raw::reattach(addr, label, session_id, passwd).await;
                let response =
                    response.unwrap_or_else(|| panic!("{backend}: {what}: closed unanswered"));
                assert_eq!(
                    (response.timeout, response.session_id, &response.passwd[..]),
                    (0, 0, &[0u8; 16][..]),
                    "{backend}: {what}: {response:?}"
                );
                let frames = conn.closed_within(LIMIT, what).await;
                assert!(frames.is_empty(), "{backend}: {what}: then sent {frames:?}");
            }

            if backend == "zookeeper" {
                // ZooKeeper's quirk described above.
                let frames = owner
                    .closed_within(LIMIT, "impostors named its session")
                    .await;
                assert!(frames.is_empty(), "{backend}: owner got {frames:?}");
            } else {
                owner.ping().await;
            }
            let label = format!("{backend} session owner again");
            let (mut again, response) =
                Raw::reattach(addr, label, owner.session_id, owner.passwd.clone()).await;
            let response = response.expect("the owner re-attaches");
            assert_eq!(
                response.session_id, owner.session_id,
                "{backend}: {response:?}"
            );
            let answer = again.call(&exists("/owned")).await;
            assert_eq!(
                answer.err(),
                code(ErrorCode::Ok),
                "{backend}: ephemeral gone"
            );
            bystander
                .check("re-attach attempts with wrong passwords")
                .await;
        })
        .await;
    }
}

/// The 61st connection from one address is closed before its handshake is answered; the 60
/// already open are unaffected; once some close, new ones are accepted again.
#[tokio::test]
async fn connections_beyond_the_per_address_limit_are_closed() {
    for server in both() {
        let (addr, backend) = (server.addr(), server.name());
        bounded(backend, async {
            let mut bystander = Bystander::start(addr, backend).await;
            // The bystander is one of the 60.
            let mut open = Vec::new();
            for i in 1..MAX_CLIENT_CNXNS {
                let label = format!("{backend} connection {i}");
                open.push(Raw::session_eventually(addr, label, SHORT_SESSION_MS).await);
            }
            for attempt in 0..3 {
                let label = format!("{backend} extra {attempt}");
                let response = match Raw::try_open(addr, label).await {
                    Ok(mut extra) => extra.handshake(SHORT_SESSION_MS).await,
                    // Closed so fast that the connect itself saw the reset.
                    Err(_) => None,
                };
                assert!(
                    response.is_none(),
                    "{backend}: connection {} from one address got {response:?}",
                    MAX_CLIENT_CNXNS + 1
                );
            }
            for conn in &mut open {
                conn.ping().await;
            }
            bystander.ping("a full connection table").await;

            open.truncate(open.len() - 5);
            let mut fresh = Vec::new();
            for i in 0..5 {
                let label = format!("{backend} replacement {i}");
                fresh.push(Raw::session_eventually(addr, label, SHORT_SESSION_MS).await);
            }
            for conn in open.iter_mut().chain(&mut fresh) {
                conn.ping().await;
            }
            bystander.check("too many connections").await;
        })
        .await;
    }
}

// ---------------------------------------------------------------------------------------------
// Connections that do not speak the protocol
// ---------------------------------------------------------------------------------------------

/// Four bytes that are no four-letter word the server knows are a frame length, and "abcd" is
/// far above jute.maxbuffer: closed, no answer.
#[tokio::test]
async fn an_unknown_four_letter_word_is_closed_unanswered() {
    for server in both() {
        let (addr, backend) = (server.addr(), server.name());
        bounded(backend, async {
            let mut bystander = Bystander::start(addr, backend).await;
            for word in ["abcd", "RUOK", "xyzw"] {
                let mut conn = Raw::open(addr, format!("{backend} word {word}")).await;
                conn.send(word.as_bytes()).await.expect("send a word");
                let answer = conn.read_to_close(LIMIT).await;
                assert!(answer.is_empty(), "{backend}: {word} answered {answer:?}");
            }
            bystander.check("unknown four-letter words").await;
        })
        .await;
    }
}

/// A known word that is not in `4lw.commands.whitelist` gets ZooKeeper's refusal text and the
/// close, except `srvr`, which ZooKeeper always answers (its `zkServer.sh status` needs it).
/// The test ZooKeeper of `lockkeeper-testkit` allows every word, so this runs against Keeper
/// only; Apache ZooKeeper 3.8 with `4lw.commands.whitelist=ruok` answers `dump` with exactly
/// the text asserted here.
#[tokio::test]
async fn a_four_letter_word_outside_the_whitelist_is_refused() {
    if !backend_enabled("keeper") {
        return;
    }
    let data = tempfile::tempdir().expect("a data directory");
    let config = Config {
        four_letter_words: vec!["ruok".into()],
        ..Keeper::test_config(data.path())
    };
    let keeper = Keeper::start_with(config);
    let (addr, backend) = (keeper.addr(), keeper.name());
    bounded(backend, async {
        let mut bystander = Bystander::start(addr, backend).await;
        for word in ["dump", "conf", "stat"] {
            let mut conn = Raw::open(addr, format!("{backend} word {word}")).await;
            conn.send(word.as_bytes()).await.expect("send a word");
            let answer = conn.read_to_close(LIMIT).await;
            assert_eq!(
                String::from_utf8_lossy(&answer),
                format!("{word} is not executed because it is not in the whitelist.\n"),
                "{backend}: {word}"
            );
        }
        let mut conn = Raw::open(addr, format!("{backend} word ruok")).await;
        conn.send(b"ruok").await.expect("send a word");
        assert_eq!(conn.read_to_close(LIMIT).await, b"imok");
        let mut conn = Raw::open(addr, format!("{backend} word srvr")).await;
        conn.send(b"srvr").await.expect("send a word");
        let answer = String::from_utf8_lossy(&conn.read_to_close(LIMIT).await).into_owned();
        assert!(
            answer.starts_with("Zookeeper version:"),
            "{backend}: srvr is answered whatever the whitelist, got {answer:?}"
        );
        bystander.check("refused four-letter words").await;
    })
    .await;
}

/// `isro` answers "rw" (no newline) from a server that takes writes, and then closes, on both
/// servers. ZooKeeper allows it whatever `4lw.commands.whitelist` says once read-only mode is
/// enabled (clients in read-only mode use it to find a writable server); Keeper, which turns
/// read-only when its disk fails, always allows it, as a Keeper whose whitelist is only `ruok`
/// shows.
#[tokio::test]
async fn isro_answers_rw_whatever_the_whitelist() {
    let data = tempfile::tempdir().expect("a data directory");
    let mut servers = both();
    if backend_enabled("keeper") {
        let config = Config {
            four_letter_words: vec!["ruok".into()],
            ..Keeper::test_config(data.path())
        };
        servers.push(Box::new(Keeper::start_with(config)));
    }
    for server in servers {
        let (addr, backend) = (server.addr(), server.name());
        bounded(backend, async {
            let mut conn = Raw::open(addr, format!("{backend} isro")).await;
            conn.send(b"isro").await.expect("send isro");
            let answer = conn.read_to_close(LIMIT).await;
            assert_eq!(String::from_utf8_lossy(&answer), "rw", "{backend}: isro");
        })
        .await;
    }
}

/// Many connections that connect and go away without a word, then a batch that stays silent:
/// the server keeps serving throughout, closes the silent ones itself once the handshake
/// timeout passes, and then accepts new connections again.
#[tokio::test]
async fn connections_that_never_send_a_connect_request_are_dropped() {
    for server in both() {
        let (addr, backend) = (server.addr(), server.name());
        bounded(backend, async {
            let mut bystander = Bystander::start(addr, backend).await;
            for round in 0..5 {
                // Under the per-address limit even with the previous round not yet closed on
                // the server's side (ZooKeeper frees a dropped connection's slot a little
                // after the client has gone).
                let batch: Vec<Raw> = futures_join(
                    (0..MAX_CLIENT_CNXNS / 3)
                        .map(|i| Raw::open(addr, format!("{backend} vanishing {round}/{i}"))),
                )
                .await;
                drop(batch);
                bystander.ping("connections vanishing").await;
            }
            let mut silent =
                futures_join((0..30).map(|i| Raw::open(addr, format!("{backend} silent {i}"))))
                    .await;
            let deadline = tokio::time::Instant::now() + HANDSHAKE_CLOSE_LIMIT;
            while !silent.is_empty() {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "{backend}: {} silent connections still open after {HANDSHAKE_CLOSE_LIMIT:?}",
                    silent.len()
                );
                bystander.ping("silent connections").await;
                let mut still_open = Vec::new();
                for mut conn in silent {
                    if !closed_now(&mut conn, Duration::from_millis(20)).await {
                        still_open.push(conn);
                    }
                }
                silent = still_open;
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            let mut fresh =
                Raw::session_eventually(addr, format!("{backend} after"), SHORT_SESSION_MS).await;
            fresh.ping().await;
            bystander.check("connections without a handshake").await;
        })
        .await;
    }
}

/// Awaits all of `futures` concurrently (tokio has no join_all of its own).
async fn futures_join<T: Send + 'static>(
    futures: impl Iterator<Item = impl Future<Output = T> + Send + 'static>,
) -> Vec<T> {
    let handles: Vec<_> = futures.map(tokio::spawn).collect();
    let mut out = Vec::with_capacity(handles.len());
    for handle in handles {
        out.push(handle.await.expect("a spawned connection task"));
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Mutated requests, and durability
// ---------------------------------------------------------------------------------------------

/// Well-formed requests with seeded random damage to their bodies (bytes changed, cut short,
/// junk appended): every one is answered with a code ZooKeeper has, or its connection is
/// closed; the server never stalls or dies.
#[tokio::test]
async fn damaged_requests_are_answered_or_closed() {
    for server in both() {
        let (addr, backend) = (server.addr(), server.name());
        bounded(backend, async {
            let mut bystander = Bystander::start(addr, backend).await;
            send_damaged_requests(addr, backend, &mut bystander, 0x10c4_4ee9, 300).await;
            bystander.check("damaged requests").await;
        })
        .await;
    }
}

/// "Nothing acknowledged is lost", across bad input of every kind and a restart: the
/// bystander's acknowledged writes are read back from a new session after the server restarts
/// (ZooKeeper is killed with SIGKILL; Keeper is stopped and started on the same data directory).
#[tokio::test]
async fn acknowledged_writes_survive_bad_input_and_a_restart() {
    for backend in ["keeper", "zookeeper"] {
        if !backend_enabled(backend) {
            continue;
        }
        let mut server = Restartable::start(backend);
        let addr = server.addr();
        let bystander = bounded(backend, async {
            let mut bystander = Bystander::start(addr, backend).await;
            let mut garbage = Raw::session(addr, format!("{backend} garbage")).await;
            let _ = garbage.send(&[0xa5; 64]).await;
            garbage.closed_within(LIMIT, "garbage").await;
            let mut half = Raw::session(addr, format!("{backend} half frame")).await;
            half.send(&request_frame(1, OpCode::Create.code(), &[0; 32])[..20])
                .await
                .expect("send half a frame");
            drop(half);
            let mut unknown = Raw::session(addr, format!("{backend} unknown opcode")).await;
            unknown.call_raw(999, &[]).await;
            send_damaged_requests(addr, backend, &mut bystander, 7, 60).await;
            bystander.check("bad input before a restart").await;
            bystander
        })
        .await;
        server.restart();
        let after = "bad input and a restart";
        bounded(backend, bystander.verify_from(addr, after)).await;
    }
}

/// Sends `count` damaged requests (seeded by `seed`) on sessions of their own, asserting each
/// is answered with a known code or its connection closed, the bystander pinging in between.
async fn send_damaged_requests(
    addr: std::net::SocketAddr,
    backend: &str,
    bystander: &mut Bystander,
    seed: u64,
    count: usize,
) {
    let mut conn = Raw::session(addr, format!("{backend} damaged requests")).await;
    for path in ["/fuzz", "/fuzz/a", "/fuzz/b"] {
        let answer = conn
            .call(&create(OpCode::Create, path, open_acl(), 0, 0))
            .await;
        assert_eq!(answer.err(), code(ErrorCode::Ok), "{backend}: {answer:?}");
    }
    let templates = fuzz_templates();
    let mut rng = StdRng::seed_from_u64(seed);
    let (mut replies, mut closes) = (0, 0);
    for i in 0..count {
        let request = &templates[i % templates.len()];
        let mut body = Vec::new();
        request.encode_body(&mut body);
        damage(&mut body, &mut rng);
        let xid = conn.xid();
        let answer = match conn
            .send_request(xid, request.op_code().code(), &body)
            .await
        {
            Ok(()) => conn.answer(xid).await,
            Err(_) => Answer::Closed,
        };
        match answer {
            Answer::Reply { err, .. } => {
                replies += 1;
                assert!(
                    ErrorCode::try_from(err).is_ok(),
                    "{backend}: damaged {:?} got the unknown code {err}",
                    request.op_code()
                );
            }
            Answer::Closed => {
                closes += 1;
                let label = format!("{backend} damaged requests after {i}");
                conn = Raw::session_eventually(addr, label, SHORT_SESSION_MS).await;
            }
        }
        if i % 50 == 0 {
            bystander.ping("damaged requests").await;
        }
    }
    assert!(replies > 0, "{backend}: no damaged request was answered");
    eprintln!("{backend}: {count} damaged requests: {replies} answered, {closes} closed");
}

/// A server that can be restarted on the same address and data directory.
enum Restartable {
    Keeper(Keeper),
    Zk(lockkeeper_testkit::ApacheZk),
}

impl Restartable {
    fn start(backend: &str) -> Restartable {
        match backend {
            "keeper" => Restartable::Keeper(Keeper::start()),
            _ => Restartable::Zk(lockkeeper_testkit::ApacheZk::start()),
        }
    }

    fn addr(&self) -> std::net::SocketAddr {
        match self {
            Restartable::Keeper(k) => k.addr(),
            Restartable::Zk(z) => z.addr(),
        }
    }

    fn restart(&mut self) {
        match self {
            Restartable::Keeper(k) => k.restart(),
            Restartable::Zk(z) => z.restart(),
        }
    }
}

/// Requests whose bodies the fuzz test damages: every decoder shape (strings, buffers, ACL
/// vectors, multi headers), all under /fuzz so that no damage can reach the bystander's nodes.
fn fuzz_templates() -> Vec<Request> {
    let path = |p: &str| p.to_string();
    vec![
        create(OpCode::Create, "/fuzz/n", open_acl(), 0, 0),
        create(OpCode::Create2, "/fuzz/s-", open_acl(), 3, 0),
        create(OpCode::CreateTtl, "/fuzz/t", open_acl(), 5, 60_000),
        create(OpCode::CreateContainer, "/fuzz/c", open_acl(), 4, 0),
        Request::Delete(PathVersionRequest {
            path: path("/fuzz/n"),
            version: -1,
        }),
        Request::SetData(SetDataRequest {
            path: path("/fuzz/a"),
            data: Some(Bytes::from_static(b"fuzzed")),
            version: -1,
        }),
        Request::GetData(PathWatchRequest {
            path: path("/fuzz/a"),
            watch: true,
        }),
        exists("/fuzz/none"),
        Request::GetChildren2(PathWatchRequest {
            path: path("/fuzz"),
            watch: false,
        }),
        Request::GetAcl(PathRequest {
            path: path("/fuzz/b"),
        }),
        Request::Multi(vec![
            MultiOp::Create(CreateOp {
                op: OpCode::Create,
                path: path("/fuzz/m"),
                data: Some(Bytes::from_static(b"m")),
                acl: open_acl(),
                flags: 0,
                ttl: 0,
            }),
            MultiOp::Check(PathVersionRequest {
                path: path("/fuzz/b"),
                version: -1,
            }),
            MultiOp::SetData(SetDataRequest {
                path: path("/fuzz/m"),
                data: Some(Bytes::from_static(b"n")),
                version: -1,
            }),
            MultiOp::Delete(PathVersionRequest {
                path: path("/fuzz/m"),
                version: -1,
            }),
        ]),
        Request::MultiRead(vec![
            ReadOp::GetData(PathWatchRequest {
                path: path("/fuzz/a"),
                watch: false,
            }),
            ReadOp::GetChildren(PathWatchRequest {
                path: path("/fuzz"),
                watch: false,
            }),
        ]),
        Request::GetAllChildrenNumber(PathRequest {
            path: path("/fuzz"),
        }),
    ]
}

/// One to four random changes: overwrite a byte, cut the body short, or append junk.
fn damage(body: &mut Vec<u8>, rng: &mut StdRng) {
    for _ in 0..rng.gen_range(1..=4) {
        match rng.gen_range(0..4) {
            0 | 1 if !body.is_empty() => {
                let at = rng.gen_range(0..body.len());
                body[at] = rng.r#gen();
            }
            2 if !body.is_empty() => {
                let len = rng.gen_range(0..body.len());
                body.truncate(len);
            }
            _ => {
                let junk: Vec<u8> = (0..rng.gen_range(1..16)).map(|_| rng.r#gen()).collect();
                body.extend_from_slice(&junk);
            }
        }
    }
}

/// checkWatches and removeWatches name a watcher type: ZooKeeper 3.8 knows Children, Data and
/// Any there and answers any other number (the persistent kinds' 4 and 5 included) with
/// MarshallingError, leaving the watch and the connection as they were.
#[tokio::test]
async fn unknown_watcher_types_in_check_and_remove_watches_are_marshalling_errors() {
    use lockkeeper_proto::{AddWatchRequest, PathWatcherTypeRequest};
    let watcher = |watcher_type: i32| PathWatcherTypeRequest {
        path: "/w".into(),
        watcher_type,
    };
    for server in both() {
        let (addr, backend) = (server.addr(), server.name());
        bounded(backend, async {
            let mut bystander = Bystander::start(addr, backend).await;
            let mut conn = Raw::session(addr, format!("{backend} watcher types")).await;
            let answer = conn
                .call(&create(OpCode::Create, "/w", open_acl(), 0, 0))
                .await;
            assert_eq!(answer.err(), code(ErrorCode::Ok), "{backend}: {answer:?}");
            let add = Request::AddWatch(AddWatchRequest {
                path: "/w".into(),
                mode: 0,
            });
            assert_eq!(
                conn.call(&add).await.err(),
                code(ErrorCode::Ok),
                "{backend}"
            );
            for t in [4, 5, 0, 9, -1] {
                for request in [
                    Request::CheckWatches(watcher(t)),
                    Request::RemoveWatches(watcher(t)),
                ] {
                    let answer = conn.call(&request).await;
                    assert_eq!(
                        answer.err(),
                        code(ErrorCode::MarshallingError),
                        "{backend}: {request:?} answered {answer:?}"
                    );
                }
            }
            let check_any = Request::CheckWatches(watcher(3));
            let answer = conn.call(&check_any).await;
            assert_eq!(
                answer.err(),
                code(ErrorCode::Ok),
                "{backend}: the watch stays"
            );
            let answer = conn.call(&Request::RemoveWatches(watcher(3))).await;
            assert_eq!(
                answer.err(),
                code(ErrorCode::Ok),
                "{backend}: Any removes it"
            );
            let answer = conn.call(&check_any).await;
            assert_eq!(answer.err(), code(ErrorCode::NoWatcher), "{backend}: gone");
            bystander.check("unknown watcher types").await;
        })
        .await;
    }
}
