//! A connection Keeper has closed does not outlive a peer that stopped reading.
//!
//! Keeper only: it is about what the server holds, not about the protocol. A raw client with a
//! small receive buffer opens a session, watches `/` recursively and then neither reads nor
//! pings, like a frozen process whose kernel still answers. A second client creates and deletes
//! nodes with long names until events wait in Keeper's socket buffer for that connection. The
//! silent session then expires and Keeper closes the connection behind what is queued; since
//! the peer takes nothing, the connection must be reset within `close_linger`, not held for ever,
//! while Keeper goes on serving the other client.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use lockkeeper_proto::{Jute, OpCode, Reader, ReplyHeader, XID_NOTIFICATION, XID_PING};
use lockkeeper_testkit::raw::{Next, Raw};
use lockkeeper_testkit::{Keeper, TestServer, try_four_letter_word, within};
use zookeeper_client::{Acls, Client, CreateMode};

/// The longest any single server interaction may take. Generous: the machine is shared.
const LIMIT: Duration = Duration::from_secs(20);
/// Short ticks, so the silent session expires within a second.
const TICK: Duration = Duration::from_millis(100);
/// The silent session's timeout (10 ticks): it is kept alive by pings while the socket fills.
const SILENT_TIMEOUT_MS: i32 = 1000;
/// How long the closed connection may wait for its peer in this test.
const LINGER: Duration = Duration::from_millis(1000);
/// The silent client's receive buffer (the kernel doubles it).
const RECEIVE_BUFFER: u32 = 4096;
/// Node name length: each create and delete sends the watcher an event of about this size.
const NAME_LEN: usize = 900;
/// At most this many nodes are created to fill the socket (about 18 MB of events).
const MAX_NODES: usize = 10_000;
/// Nodes created between two looks at `cons`.
const CHECK_EVERY: usize = 20;
/// Packets Keeper must hold for the watcher, beyond what its socket took, before it stops.
const MIN_QUEUED: u64 = 50;
/// Rounds the slow peer reads everything in, a pause before each: enough that the pauses after
/// the close add up to well over `LINGER`.
const ROUNDS: usize = 10;

/// Keeper's end of a connection, as `/proc/net/tcp` shows it.
#[derive(Debug)]
struct ServerEnd {
    /// TCP state, as the kernel numbers it (1 established, 5 fin-wait-2, ...).
    state: u8,
    /// The socket's inode: 0 once no descriptor refers to it (the kernel alone finishes it).
    inode: u64,
}

/// The socket whose local end is `local` and remote end is `remote`, if the kernel still has it.
fn socket(local: SocketAddr, remote: SocketAddr) -> Option<ServerEnd> {
    let table = std::fs::read_to_string("/proc/net/tcp").expect("read /proc/net/tcp");
    let port = |field: &str| {
        let (_, port) = field.split_once(':')?;
        u16::from_str_radix(port, 16).ok()
    };
    table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 10
            || port(fields[1]) != Some(local.port())
            || port(fields[2]) != Some(remote.port())
        {
            return None;
        }
        Some(ServerEnd {
            state: u8::from_str_radix(fields[3], 16).ok()?,
            inode: fields[9].parse().ok()?,
        })
    })
}

/// The packets Keeper holds for the connection from `peer` that its socket has not taken, from
/// `cons` (`None` once the connection is not listed).
async fn queued_for(server: SocketAddr, peer: SocketAddr) -> Option<u64> {
    let cons = tokio::task::spawn_blocking(move || try_four_letter_word(server, "cons", LIMIT))
        .await
        .expect("join cons")
        .expect("cons");
    let line = cons
        .lines()
        .find(|line| line.contains(&format!(":{}[", peer.port())))?;
    lockkeeper_testkit::cons_field(line, "queued")
}

/// A watcher connection Keeper holds events for that its socket would not take, from a
/// session that from now on neither reads nor pings.
struct Stuck {
    keeper: Keeper,
    _data: tempfile::TempDir,
    silent: Raw,
    peer: SocketAddr,
    /// The writer's session, still served.
    zk: Client,
    /// Nodes created and deleted: each fired two events at the watcher.
    nodes: usize,
}

impl Stuck {
    async fn new() -> Stuck {
        let data = tempfile::tempdir().expect("temporary data directory");
        let keeper = Keeper::start_with(lockkeeper_server::Config {
            tick_time: TICK,
            close_linger: LINGER,
            ..Keeper::test_config(data.path())
        });
        let server = keeper.addr();
        let mut silent =
            Raw::watching_everything(server, "silent watcher", RECEIVE_BUFFER, SILENT_TIMEOUT_MS)
                .await;
        let peer = silent.local_addr();
        let open = socket(server, peer);
        assert!(
            open.as_ref()
                .is_some_and(|end| end.state == 1 && end.inode != 0),
            "Keeper's end of {peer} in /proc/net/tcp: {open:?}"
        );

        // From here the watcher reads nothing.
        let zk = within(LIMIT, "connect", Client::connect(&keeper.connect_string()))
            .await
            .expect("connect");
        let name = "x".repeat(NAME_LEN);
        let mut nodes = 0;
        let mut queued = 0;
        // Until Keeper holds events the socket to the watcher would not take (a few more than
        // the publication of the last write may still hold back).
        while queued < MIN_QUEUED && nodes < MAX_NODES {
            for _ in 0..CHECK_EVERY {
                // The watcher pings (unanswered, unread), so its session lasts until then.
                silent
                    .send_request(XID_PING, OpCode::Ping.code(), &[])
                    .await
                    .expect("the watcher's ping sent");
                create(&zk, &format!("/n{nodes:05}{name}"), true).await;
                nodes += 1;
            }
            queued = queued_for(server, peer)
                .await
                .expect("the watcher's connection in cons");
        }
        assert!(
            queued >= MIN_QUEUED,
            "after {nodes} nodes Keeper holds {queued} packets for {peer}: its socket took the rest"
        );
        Stuck {
            keeper,
            _data: data,
            silent,
            peer,
            zk,
            nodes,
        }
    }

    /// Keeper's end of the watcher's connection once no descriptor holds it (or it is gone),
    /// or as it still is after `within`.
    async fn released_within(&self, within: Duration) -> Option<ServerEnd> {
        let deadline = Instant::now() + within;
        loop {
            let end = socket(self.keeper.addr(), self.peer);
            if end.as_ref().is_none_or(|end| end.inode == 0) || Instant::now() >= deadline {
                return end;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Creates `path` (and deletes it again when `delete`).
async fn create(zk: &Client, path: &str, delete: bool) {
    let persistent = CreateMode::Persistent.with_acls(Acls::anyone_all());
    within(
        LIMIT,
        format!("create {path}"),
        zk.create(path, b"", &persistent),
    )
    .await
    .unwrap_or_else(|e| panic!("create {path}: {e}"));
    if delete {
        within(LIMIT, format!("delete {path}"), zk.delete(path, None))
            .await
            .unwrap_or_else(|e| panic!("delete {path}: {e}"));
    }
}

/// The silent session has expired (it expires within about a tick after its timeout), so
/// Keeper has closed the connection behind what is queued.
async fn wait_for_expiry() {
    tokio::time::sleep(expiry()).await;
}

/// By when the silent session has expired, counted from its last ping.
fn expiry() -> Duration {
    Duration::from_millis(SILENT_TIMEOUT_MS as u64) + 4 * TICK
}

#[tokio::test]
async fn a_closed_connection_whose_peer_reads_nothing_is_reset_after_close_linger() {
    let stuck = Stuck::new().await;
    wait_for_expiry().await;
    // A connection still held well after `LINGER` is held for ever.
    let allowed = LINGER + Duration::from_secs(5);
    let last = stuck.released_within(allowed).await;
    assert!(
        last.as_ref().is_none_or(|end| end.inode == 0),
        "Keeper still holds its end of {} {allowed:?} after the session expired: {last:?}",
        stuck.peer
    );
    // Everyone else is still served.
    create(&stuck.zk, "/after", false).await;
}

#[tokio::test]
async fn a_closed_connection_whose_peer_reads_slowly_gets_every_event_first() {
    let mut stuck = Stuck::new().await;
    // The peer now reads a little at a time, pausing for most of `LINGER` in between, while its
    // session expires (it no longer pings): each pause is shorter than `LINGER`, all of them
    // after the close together much longer.
    let pause = LINGER * 3 / 5;
    // Each event carries a path of about `NAME_LEN` bytes, plus headers.
    let round_bytes = (2 * stuck.nodes * (NAME_LEN + 40) / ROUNDS).max(16 << 10);
    let started = Instant::now();
    let deadline = started + LIMIT;
    let mut events = 0;
    let mut pauses = 0;
    'reading: while Instant::now() < deadline {
        let mut read = 0;
        while read < round_bytes {
            match stuck.silent.next(Duration::from_millis(100)).await {
                Next::Frame(frame) => {
                    read += frame.len();
                    let header = ReplyHeader::read(&mut Reader::new(frame))
                        .expect("a reply header in every frame");
                    events += usize::from(header.xid == XID_NOTIFICATION);
                }
                Next::Closed => break 'reading,
                Next::Silent => break,
            }
        }
        tokio::time::sleep(pause).await;
        pauses += 1;
    }
    assert_eq!(
        events,
        2 * stuck.nodes,
        "events the slow peer read before Keeper closed the connection ({pauses} pauses of \
         {pause:?} in {:?})",
        started.elapsed()
    );
    // The session is gone after its timeout and a tick; what came after that is the test.
    assert!(
        started.elapsed() > expiry() + 2 * LINGER,
        "the peer read everything within {:?}: too little was queued to test the linger",
        started.elapsed()
    );
    let last = stuck.released_within(Duration::from_secs(5)).await;
    assert!(
        last.as_ref().is_none_or(|end| end.inode == 0),
        "Keeper still holds its end of {} after writing everything: {last:?}",
        stuck.peer
    );
    create(&stuck.zk, "/after", false).await;
}
