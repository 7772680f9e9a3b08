//! A client that stops reading its socket cannot make Keeper hold its replies without limit.
//!
//! A raw client (with a small receive buffer, so the kernel absorbs little) opens a session,
//! adds a persistent-recursive watch on `/`, then stops reading while it keeps pinging. A
//! zookeeper-client session meanwhile creates many small nodes, each of which fires an event at
//! the watcher, and deletes each again at once, so the data tree stays small and Keeper's RSS
//! measures the queue rather than the data. Keeper must close the watcher's connection once its
//! queue passes `--max-queued-bytes`, keep its session (it re-attaches with its id and
//! password), serve the writer throughout, and keep its RSS bounded.
//!
//! The work is sized from the bound, not from the machine's speed: the flood plans enough
//! creates that an unbounded queue would hold twice what the memory check allows, and stops
//! starting new ones as soon as the server has cut the watcher off. Once cut off, the watcher's
//! session lives only on its timeout until it re-attaches, so the time from the cut-off to the
//! re-attach is a handful of round trips however slow the machine is, never the rest of a
//! flood.
//!
//! One test uses a small bound, one the default; every loop is bounded in count and time.

mod support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use futures::StreamExt;
use lockkeeper_proto::{Jute, OpCode, Request, XID_PING};
use lockkeeper_testkit::raw::{LIMIT, Raw, SESSION_TIMEOUT_MS};
use tokio::sync::oneshot;
use zookeeper_client::{Acls, CreateMode};

use support::{KeeperProcess, OP_LIMIT, connect, within};

/// The slow client's receive buffer (the kernel doubles it).
const RECEIVE_BUFFER: u32 = 4096;
/// Writes the writer keeps in flight.
const IN_FLIGHT: usize = 128;
/// The most the whole flood may take: a stuck watcher must not slow the writer down to a crawl.
const FLOOD_LIMIT: Duration = Duration::from_secs(120);
/// Growth of Keeper's RSS allowed on top of the bound: the log writer's and the writer
/// client's buffers, allocator slack. A queue without a bound grows past it in both tests.
const MEMORY_SLACK_KIB: u64 = 8 * 1024;
/// How often the slow client pings, well inside its session timeout.
const PING_EVERY: Duration = Duration::from_millis(500);

/// What the server logs when it cuts a connection off for not reading.
const CUT_OFF: &str = "is not reading its replies";
/// The parent of the flood's nodes.
const FLOOD_DIR: &str = "/flood";

/// What the writer does: at most `nodes` creates, each deleted again, with names of `name_len`
/// bytes; it starts no more once the watcher is cut off.
struct Flood {
    nodes: usize,
    name_len: usize,
}

impl Flood {
    /// Enough creates that, were the watcher never cut off, their events (two per node, each
    /// holding at least its path) would queue twice what the memory check allows above the
    /// bound: so a server without the bound fails the test however fast it is.
    fn sized_for(bound: u64, name_len: usize) -> Flood {
        let unbounded = 2 * (bound + MEMORY_SLACK_KIB * 1024);
        let per_node = 2 * (FLOOD_DIR.len() + 1 + name_len) as u64;
        Flood {
            nodes: unbounded.div_ceil(per_node) as usize,
            name_len,
        }
    }

    fn path(&self, i: usize) -> String {
        let name = format!("n{i:08}-");
        format!(
            "{FLOOD_DIR}/{name}{}",
            "x".repeat(self.name_len - name.len())
        )
    }
}

/// A raw session with a persistent-recursive watch on `/`, which from now on reads nothing.
async fn stuck_watcher(addr: SocketAddr) -> Raw {
    Raw::watching_everything(addr, "slow watcher", RECEIVE_BUFFER, SESSION_TIMEOUT_MS).await
}

/// Keeps the watcher's session alive by pinging, never reading, until told to stop; hands the
/// connection back with the error that ended the pinging, if one did (the server's reset).
fn keep_pinging(
    mut raw: Raw,
) -> (
    oneshot::Sender<()>,
    tokio::task::JoinHandle<(Raw, Option<std::io::Error>)>,
) {
    let (stop, mut stopped) = oneshot::channel();
    let task = tokio::spawn(async move {
        let deadline = Instant::now() + FLOOD_LIMIT + LIMIT;
        while Instant::now() < deadline {
            tokio::select! {
                _ = &mut stopped => break,
                () = tokio::time::sleep(PING_EVERY) => {}
            }
            if let Err(e) = raw.send_request(XID_PING, OpCode::Ping.code(), &[]).await {
                return (raw, Some(e));
            }
        }
        (raw, None)
    });
    (stop, task)
}

/// Runs the flood from one zookeeper-client session, starting no more creates once
/// `cut_off()` says the watcher is cut off; returns how many nodes it created (and deleted) and
/// how long that took.
async fn flood(
    connect_string: &str,
    flood: &Flood,
    cut_off: impl Fn() -> bool,
) -> (usize, Duration) {
    let client = connect(connect_string).await;
    let persistent = CreateMode::Persistent.with_acls(Acls::anyone_all());
    within(
        "create",
        OP_LIMIT,
        client.create(FLOOD_DIR, b"", &persistent),
    )
    .await
    .expect("create the flood's parent");
    let started = Instant::now();
    let client = &client;
    let persistent = &persistent;
    // Checked before each create is started; those in flight finish (a create's node is always
    // deleted again).
    let done = futures::stream::iter(0..flood.nodes)
        .take_while(|_| std::future::ready(!cut_off()))
        .map(|i| async move {
            let path = flood.path(i);
            within("create", OP_LIMIT, client.create(&path, b"x", persistent))
                .await
                .unwrap_or_else(|e| panic!("create {path}: {e}"));
            within("delete", OP_LIMIT, client.delete(&path, None))
                .await
                .unwrap_or_else(|e| panic!("delete {path}: {e}"));
        })
        .buffer_unordered(IN_FLIGHT)
        .count();
    let nodes = within("the flood", FLOOD_LIMIT, done).await;
    (nodes, started.elapsed())
}

/// Whether the server's `cons` lists the connection from `client`.
fn cons_lists(server: SocketAddr, client: SocketAddr) -> bool {
    lockkeeper_testkit::four_letter_word(server, "cons").contains(&format!(" /{client}["))
}

/// Runs the whole scenario against a server started with `extra` flags whose bound is `bound`,
/// flooding with names of `name_len` bytes.
async fn slow_watcher_is_cut_off(extra: &[&str], bound: u64, name_len: usize) {
    let plan = Flood::sized_for(bound, name_len);
    let tmp = tempfile::tempdir().expect("temp dir");
    let server = KeeperProcess::start(&tmp.path().join("data"), extra);
    let addr = server.addr();
    let watcher = stuck_watcher(addr).await;
    let (session_id, passwd) = (watcher.session_id, watcher.passwd.clone());
    let watcher_addr = watcher.local_addr();
    assert!(cons_lists(addr, watcher_addr), "cons must list the watcher");
    let (rss_before, _) = server.memory_kib();

    let (stop, pinger) = keep_pinging(watcher);
    let (nodes, took) = flood(&server.connect_string(), &plan, || {
        server.stderr_text().contains(CUT_OFF)
    })
    .await;
    let (rss_after, peak) = server.memory_kib();
    // The events the flood fired at the watcher.
    let events = 2 * nodes;
    eprintln!(
        "{nodes} of at most {} creates and deletes of {}-byte names in {took:?}; keeper RSS \
         {rss_before} KiB before, {rss_after} KiB after, peak {peak} KiB; bound {bound} bytes",
        plan.nodes, plan.name_len
    );

    // The server said why it closed the connection.
    let log = server.stderr_containing(CUT_OFF, LIMIT);
    assert!(
        log.contains(CUT_OFF),
        "the server must log why it closed the watcher; log:\n{}",
        support::tail(&log, 30)
    );
    let deadline = Instant::now() + LIMIT;
    while cons_lists(addr, watcher_addr) {
        assert!(
            Instant::now() < deadline,
            "cons still lists the slow watcher {LIMIT:?} after the flood"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = stop.send(());
    let (mut watcher, _ping_error) = pinger.await.expect("pinger task");
    let frames = watcher
        .closed_within(LIMIT, "its queue passed the bound")
        .await;
    assert!(
        frames.len() < events,
        "the watcher was sent {} frames for the {events} events fired at it; it should have been \
         cut off",
        frames.len()
    );

    // The session outlived its connection.
    let (mut again, response) = Raw::reattach(addr, "slow watcher again", session_id, passwd).await;
    let response = response.expect("re-attach refused: the server closed the connection");
    assert_eq!(
        (response.session_id, response.timeout > 0),
        (session_id, true),
        "the slow watcher's session did not survive: {response:?}"
    );
    again.ping().await;

    // Memory: the queue may hold `bound`; without one, it would have held every event.
    let unbounded_kib = (2 * plan.nodes * (plan.name_len + 200) / 1024) as u64;
    let allowed_kib = bound / 1024 + MEMORY_SLACK_KIB;
    assert!(
        peak.saturating_sub(rss_before) < allowed_kib,
        "keeper grew from {rss_before} KiB to a peak of {peak} KiB, more than {allowed_kib} KiB \
         (a queue without a bound would hold about {unbounded_kib} KiB of events)"
    );
    assert!(took < FLOOD_LIMIT);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_bound_cuts_off_a_watcher_that_stopped_reading() {
    const BOUND: u64 = 256 << 10;
    slow_watcher_is_cut_off(&["--max-queued-bytes", &BOUND.to_string()], BOUND, 500).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_bound_cuts_off_a_watcher_that_stopped_reading() {
    let bound = lockkeeper_server::Config::default().max_queued_bytes;
    slow_watcher_is_cut_off(&[], bound, 2_000).await;
}

/// `cons` says how many packets wait for a connection that does not read and how many were
/// written; once it reads them all, `sent` is exactly what it read, as are `Sent:` in `stat` and
/// `zk_packets_sent` in `mntr`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cons_counts_what_waits_and_what_was_written() {
    /// Pipelined reads of the node, 8 MiB in all: far more than the socket buffers hold.
    const READS: usize = 32;
    let tmp = tempfile::tempdir().expect("temp dir");
    let server = KeeperProcess::start(&tmp.path().join("data"), &[]);
    let addr = server.addr();
    let mut raw = Raw::open_with_receive_buffer(addr, "reader", RECEIVE_BUFFER).await;
    raw.handshake(SESSION_TIMEOUT_MS)
        .await
        .expect("the server closed the handshake");
    let create = Request::Create(lockkeeper_proto::request::CreateOp {
        op: OpCode::Create,
        path: "/big".into(),
        data: Some(vec![7u8; 256 << 10].into()),
        acl: lockkeeper_testkit::raw::open_acl(),
        flags: 0,
        ttl: -1,
    });
    assert_eq!(raw.call(&create).await.err(), Some(0));
    let mut xids = Vec::new();
    for _ in 0..READS {
        let xid = raw.xid();
        let body = lockkeeper_proto::PathWatchRequest {
            path: "/big".into(),
            watch: false,
        }
        .encode();
        raw.send_request(xid, OpCode::GetData.code(), &body)
            .await
            .expect("send getData");
        xids.push(xid);
    }
    // Connect response, create reply, then one reply per read.
    let total = 2 + READS as u64;
    let me = raw.local_addr();
    let line = |answer: &str| {
        answer
            .lines()
            .find(|l| l.contains(&format!(" /{me}[")))
            .map(str::to_string)
            .unwrap_or_else(|| panic!("cons does not list {me}:\n{answer}"))
    };
    let deadline = Instant::now() + LIMIT;
    let stuck = loop {
        let cons = line(&lockkeeper_testkit::four_letter_word(addr, "cons"));
        let (queued, sent) = (field(&cons, "queued"), field(&cons, "sent"));
        if queued > 0 && queued + sent == total {
            break (queued, sent);
        }
        assert!(
            Instant::now() < deadline,
            "cons never showed all {total} packets produced with some waiting: {cons}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    eprintln!(
        "while the reader is stuck: queued={} sent={}",
        stuck.0, stuck.1
    );
    assert!(stuck.1 >= 2, "the handshake and the create were written");

    for xid in xids {
        assert_eq!(raw.answer(xid).await.err(), Some(0), "getData xid {xid}");
    }
    let deadline = Instant::now() + LIMIT;
    loop {
        let cons = line(&lockkeeper_testkit::four_letter_word(addr, "cons"));
        if (field(&cons, "queued"), field(&cons, "sent")) == (0, total) {
            assert_eq!(field(&cons, "recved"), total, "{cons}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "after reading all {total} packets, cons says {cons}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mntr = lockkeeper_testkit::four_letter_word(addr, "mntr");
    assert!(
        mntr.contains(&format!("zk_packets_sent\t{total}\n")),
        "mntr must count the {total} packets written:\n{mntr}"
    );
    let stat = lockkeeper_testkit::four_letter_word(addr, "stat");
    assert!(
        stat.contains(&format!("Sent: {total}\n")),
        "stat must count the {total} packets written:\n{stat}"
    );
}

/// The number after `name=` in a `cons` line.
fn field(line: &str, name: &str) -> u64 {
    lockkeeper_testkit::cons_field(line, name)
        .unwrap_or_else(|| panic!("no number after {name}= in {line}"))
}
