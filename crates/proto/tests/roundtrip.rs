//! Property tests: every record survives encode→decode unchanged, and no byte string makes the
//! decoder panic (it is fed straight from the network).

use bytes::Bytes;
use lockkeeper_proto::request::CreateOp;
use lockkeeper_proto::*;
use proptest::prelude::*;

fn path() -> impl Strategy<Value = String> {
    "(/[a-z0-9_-]{1,8}){1,4}"
}

fn data() -> impl Strategy<Value = Option<Bytes>> {
    proptest::option::of(proptest::collection::vec(any::<u8>(), 0..64).prop_map(Bytes::from))
}

fn acl() -> impl Strategy<Value = Acl> {
    (0..32i32, "world|digest|ip|auth", "[a-z:0-9.=/+]{0,20}").prop_map(|(perms, scheme, id)| Acl {
        perms,
        id: Id { scheme, id },
    })
}

fn stat() -> impl Strategy<Value = Stat> {
    (any::<[i64; 5]>(), any::<[i32; 5]>(), any::<i64>()).prop_map(|(l, i, pzxid)| Stat {
        czxid: l[0],
        mzxid: l[1],
        ctime: l[2],
        mtime: l[3],
        version: i[0],
        cversion: i[1],
        aversion: i[2],
        ephemeral_owner: l[4],
        data_length: i[3],
        num_children: i[4],
        pzxid,
    })
}

fn create_op() -> impl Strategy<Value = CreateOp> {
    let ops = prop_oneof![
        Just(OpCode::Create),
        Just(OpCode::Create2),
        Just(OpCode::CreateContainer),
        Just(OpCode::CreateTtl)
    ];
    (
        ops,
        path(),
        data(),
        proptest::collection::vec(acl(), 0..3),
        0..7i32,
        1..100_000i64,
    )
        .prop_map(|(op, path, data, acl, flags, ttl)| CreateOp {
            op,
            path,
            data,
            acl,
            flags,
            ttl: if op == OpCode::CreateTtl { ttl } else { 0 },
        })
}

fn multi_op() -> impl Strategy<Value = MultiOp> {
    prop_oneof![
        create_op().prop_map(MultiOp::Create),
        (path(), any::<i32>())
            .prop_map(|(path, version)| MultiOp::Delete(PathVersionRequest { path, version })),
        (path(), data(), any::<i32>()).prop_map(|(path, data, version)| MultiOp::SetData(
            SetDataRequest {
                path,
                data,
                version
            }
        )),
        (path(), any::<i32>())
            .prop_map(|(path, version)| MultiOp::Check(PathVersionRequest { path, version })),
    ]
}

fn request() -> impl Strategy<Value = Request> {
    prop_oneof![
        create_op().prop_map(Request::Create),
        (path(), any::<bool>())
            .prop_map(|(path, watch)| Request::GetData(PathWatchRequest { path, watch })),
        (path(), any::<bool>())
            .prop_map(|(path, watch)| Request::Exists(PathWatchRequest { path, watch })),
        (path(), data(), any::<i32>()).prop_map(|(path, data, version)| Request::SetData(
            SetDataRequest {
                path,
                data,
                version
            }
        )),
        (path(), proptest::collection::vec(acl(), 0..3), any::<i32>())
            .prop_map(|(path, acl, version)| Request::SetAcl(SetAclRequest { path, acl, version })),
        proptest::collection::vec(multi_op(), 0..6).prop_map(Request::Multi),
        (path(), any::<bool>()).prop_map(|(path, watch)| Request::MultiRead(vec![
            ReadOp::GetData(PathWatchRequest {
                path: path.clone(),
                watch
            }),
            ReadOp::GetChildren(PathWatchRequest { path, watch: false }),
        ])),
        (
            any::<i64>(),
            proptest::collection::vec(path(), 0..3),
            proptest::collection::vec(path(), 0..3)
        )
            .prop_map(|(relative_zxid, a, b)| Request::SetWatches(SetWatches2 {
                relative_zxid,
                data_watches: a.clone(),
                exist_watches: b.clone(),
                child_watches: a,
                persistent_watches: b,
                persistent_recursive_watches: vec![],
            })),
        (path(), 0..2i32)
            .prop_map(|(path, mode)| Request::AddWatch(AddWatchRequest { path, mode })),
        ("[a-z]{1,8}", data()).prop_map(|(scheme, auth)| Request::Auth(AuthPacket {
            auth_type: 0,
            scheme,
            auth: auth.unwrap_or_default()
        })),
        Just(Request::Ping),
        Just(Request::WhoAmI),
    ]
}

proptest! {
    #[test]
    fn requests_round_trip(req in request()) {
        let mut body = Vec::new();
        req.encode_body(&mut body);
        let decoded = Request::decode(req.op_code().code(), Bytes::from(body)).unwrap();
        prop_assert_eq!(decoded, req);
    }

    #[test]
    fn records_round_trip(s in stat(), p in path(), d in data(), acls in proptest::collection::vec(acl(), 0..4)) {
        let get = GetDataResponse { data: d.clone(), stat: s.clone() };
        prop_assert_eq!(GetDataResponse::decode(Bytes::from(get.encode())).unwrap(), get);
        let c2 = Create2Response { path: p.clone(), stat: s.clone() };
        prop_assert_eq!(Create2Response::decode(Bytes::from(c2.encode())).unwrap(), c2);
        let ga = GetAclResponse { acl: acls, stat: s };
        prop_assert_eq!(GetAclResponse::decode(Bytes::from(ga.encode())).unwrap(), ga);
        let ev = WatcherEvent { event_type: 4, state: 3, path: p };
        prop_assert_eq!(WatcherEvent::decode(Bytes::from(ev.encode())).unwrap(), ev);
    }

    #[test]
    fn connect_request_round_trips_with_and_without_read_only(
        timeout in any::<i32>(), sid in any::<i64>(), zxid in any::<i64>(), ro in proptest::option::of(any::<bool>()),
        passwd in proptest::collection::vec(any::<u8>(), 0..=16),
    ) {
        let req = ConnectRequest { protocol_version: 0, last_zxid_seen: zxid, timeout, session_id: sid, passwd: Bytes::from(passwd), read_only: ro };
        prop_assert_eq!(ConnectRequest::decode(Bytes::from(req.encode())).unwrap(), req);
    }

    #[test]
    fn arbitrary_bytes_never_panic_the_decoder(op in -12i32..110, body in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = Request::decode(op, Bytes::from(body.clone()));
        let _ = ConnectRequest::decode(Bytes::from(body));
    }
}

#[test]
fn a_vector_count_larger_than_the_frame_fails_without_allocating() {
    let mut body = Vec::new();
    "/a".to_string().write(&mut body);
    0x7fff_ffffi32.write(&mut body); // ACL count: 2^31-1 entries claimed, none present
    let err = Request::decode(OpCode::SetAcl.code(), Bytes::from(body)).unwrap_err();
    assert!(matches!(err, DecodeError::Truncated { .. }), "{err:?}");
}

#[test]
fn unknown_opcodes_are_errors_and_trailing_bytes_are_ignored() {
    assert_eq!(
        Request::decode(999, Bytes::new()),
        Err(DecodeError::UnknownOpCode(999))
    );
    let mut body = PathRequest { path: "/a".into() }.encode();
    body.extend_from_slice(b"junk");
    assert_eq!(
        Request::decode(OpCode::Sync.code(), Bytes::from(body)),
        Ok(Request::Sync(PathRequest { path: "/a".into() }))
    );
}

#[test]
fn invalid_utf8_decodes_as_replacement_characters() {
    let mut body = Vec::new();
    Bytes::from_static(b"/bad\xff").write(&mut body);
    false.write(&mut body);
    let Ok(Request::GetData(req)) = Request::decode(OpCode::GetData.code(), Bytes::from(body))
    else {
        panic!("getData with a non-UTF-8 path must decode");
    };
    assert_eq!(req.path, "/bad\u{fffd}");
}
