//! Differential test: reads of `/zookeeper/config` (what `getConfig` asks for) and of the other
//! nodes every server starts with, against Keeper and Apache ZooKeeper over the raw protocol.
//!
//! ZooKeeper's `getConfig` is a getData of `/zookeeper/config` (opcode 4, never chrooted), and
//! clients hand its bytes straight to a parser: Curator's `EnsembleTracker` feeds them to
//! `Properties.load`, which throws on null data. A standalone ZooKeeper starts that node, like
//! `/`, `/zookeeper` and `/zookeeper/quota`, with an empty byte array, which the wire carries as
//! length 0; null would be length -1. High-level clients map both to an empty vector, so only the
//! raw reply tells them apart: these tests decode it and compare the data (null or not, and its
//! bytes) and the stat of both servers, fresh and after the client's own writes elsewhere.

use bytes::Bytes;
use lockkeeper_proto::request::CreateOp;
use lockkeeper_proto::{
    GetDataResponse, Jute, OpCode, PathWatchRequest, Request, StatResponse, open_acl,
};
use lockkeeper_testkit::raw::{Answer, Raw};
use lockkeeper_testkit::{ApacheZk, Keeper, TestServer};

/// The nodes a fresh standalone server holds before any client writes.
const SPECIAL: [&str; 4] = ["/", "/zookeeper", "/zookeeper/quota", "/zookeeper/config"];

/// What a read of one node answered: the error code, and for Ok the data and stat decoded.
#[derive(Debug, PartialEq, Eq)]
enum Read {
    Data(GetDataResponse),
    Stat(StatResponse),
    Error(i32),
}

/// Sends a getData (`exists == false`) or exists for `path`, as a client's `getConfig` does
/// when `path` is `/zookeeper/config`, and decodes the answer.
async fn read(raw: &mut Raw, path: &str, watch: bool, exists: bool) -> Read {
    let request = PathWatchRequest {
        path: path.into(),
        watch,
    };
    let request = if exists {
        Request::Exists(request)
    } else {
        Request::GetData(request)
    };
    let label = raw.label.clone();
    match raw.call(&request).await {
        Answer::Reply { err: 0, body } if exists => Read::Stat(
            StatResponse::decode(body)
                .unwrap_or_else(|e| panic!("{label}: undecodable exists reply for {path}: {e}")),
        ),
        Answer::Reply { err: 0, body } => Read::Data(
            GetDataResponse::decode(body)
                .unwrap_or_else(|e| panic!("{label}: undecodable getData reply for {path}: {e}")),
        ),
        Answer::Reply { err, .. } => Read::Error(err),
        Answer::Closed => panic!("{label}: connection closed instead of answering {path}"),
    }
}

/// Both servers, fresh, with one raw session on each (ZooKeeper first).
async fn sessions() -> (ApacheZk, Keeper, Raw, Raw) {
    let zookeeper = ApacheZk::start();
    let keeper = Keeper::start();
    let zk = Raw::session(zookeeper.addr(), "zookeeper").await;
    let kp = Raw::session(keeper.addr(), "keeper").await;
    (zookeeper, keeper, zk, kp)
}

/// Every read of `paths`, as getData with and without a watch and as exists, answers the same
/// on both servers.
async fn assert_same_reads(zk: &mut Raw, kp: &mut Raw, paths: &[&str], when: &str) {
    for path in paths {
        for (watch, exists) in [(false, false), (true, false), (false, true)] {
            let what = if exists { "exists" } else { "getData" };
            let reference = read(zk, path, watch, exists).await;
            let keeper = read(kp, path, watch, exists).await;
            assert!(
                matches!(reference, Read::Data(_) | Read::Stat(_)),
                "{when}: Apache ZooKeeper refused {what} {path} (watch {watch}): {reference:?}"
            );
            assert_eq!(
                keeper, reference,
                "{when}: {what} {path} (watch {watch}): Keeper (left) answers unlike Apache \
                 ZooKeeper (right)"
            );
        }
    }
}

/// `getConfig` on a fresh standalone server: ZooKeeper answers an empty, non-null byte array
/// with an all-zero stat but for aversion -1 (its ACL was set once, without a transaction);
/// Keeper must answer the very same, and so must the reads of the other nodes it starts with.
#[tokio::test]
async fn get_config_answers_like_zookeeper() {
    let (_zookeeper, _keeper, mut zk, mut kp) = sessions().await;

    let config = read(&mut zk, "/zookeeper/config", true, false).await;
    let Read::Data(reference) = &config else {
        panic!("Apache ZooKeeper refused getConfig: {config:?}");
    };
    assert_eq!(
        reference.data,
        Some(Bytes::new()),
        "a standalone Apache ZooKeeper 3.8 answers getConfig with empty data; the premise of \
         this test changed"
    );
    let keeper = read(&mut kp, "/zookeeper/config", true, false).await;
    assert_eq!(
        keeper, config,
        "getConfig: Keeper (left) answers unlike Apache ZooKeeper (right); null data (None) \
         makes Curator's EnsembleTracker throw"
    );

    assert_same_reads(&mut zk, &mut kp, &SPECIAL, "fresh servers").await;
}

/// The special nodes still read alike once a client has written elsewhere: creating a child of
/// `/` moves the root's cversion and pzxid on both, and leaves the data of every special node,
/// `/zookeeper/config` included, as it was.
#[tokio::test]
async fn special_nodes_read_like_zookeeper_after_writes() {
    let (_zookeeper, _keeper, mut zk, mut kp) = sessions().await;
    for raw in [&mut zk, &mut kp] {
        let create = Request::Create(CreateOp {
            op: OpCode::Create,
            path: "/app".into(),
            data: Some(Bytes::from_static(b"x")),
            acl: open_acl(),
            flags: 0,
            ttl: 0,
        });
        let label = raw.label.clone();
        let answer = raw.call(&create).await;
        assert_eq!(answer.err(), Some(0), "{label}: create /app: {answer:?}");
    }
    let (Read::Stat(zk_root), Read::Stat(kp_root)) = (
        read(&mut zk, "/", false, true).await,
        read(&mut kp, "/", false, true).await,
    ) else {
        panic!("exists / refused");
    };
    // Absolute zxids are not compared elsewhere either: ZooKeeper logs the session's creation
    // as a transaction, so its pzxid may run ahead. The rest must match.
    assert_eq!(
        (kp_root.stat.cversion, kp_root.stat.num_children),
        (zk_root.stat.cversion, zk_root.stat.num_children),
        "the root's cversion and children after one create: Keeper (left), ZooKeeper (right)"
    );
    assert_same_reads(
        &mut zk,
        &mut kp,
        &["/zookeeper", "/zookeeper/quota", "/zookeeper/config"],
        "after a create",
    )
    .await;
}
