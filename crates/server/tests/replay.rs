//! Replay differential: a log replayed into a fresh state rebuilds exactly the live state.
//!
//! For each seed, an in-process Keeper with its own data dir runs a seeded random sequence of
//! writes: creates of every kind (persistent, sequential, ephemeral, container, TTL), setData,
//! delete (right and wrong versions, so some fail and use a zxid without a txn), multis (some
//! of which fail whole), and sessions opened with ephemerals then closed or left to expire. A
//! small snap count makes snapshots happen while the tree changes, so recovery starts from a
//! snapshot and replays the log after it. Then the live state is read (every node's data and
//! stat through a client, sessions and ephemerals through `dump`, the last zxid through
//! `srvr`), the server shuts down, and the data dir is recovered as `lockkeeper verify` does;
//! the two must be equal.
//!
//! This test is Keeper's own: Apache ZooKeeper's data dir is not Keeper's, so there is nothing
//! to replay it into. Reaping is timer driven, so it is off (the interval is an hour): nothing
//! may change the state between reading it and shutting down.
//!
//! Environment: `LOCKKEEPER_REPLAY_SEED=<n>` runs only that seed (each seed is printed);
//! `LOCKKEEPER_REPLAY_OPS=<n>` sets the operations per seed (default 300).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use bytes::Bytes;
use lockkeeper_proto::request::CreateOp;
use lockkeeper_proto::{OpCode, Request};
use lockkeeper_server::recovery::{self, Mode, Recovered};
use lockkeeper_server::{Config, Server};
use lockkeeper_testkit::four_letter_word;
use lockkeeper_testkit::raw::{Raw, open_acl};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use zookeeper_client::{Acls, Client, CreateMode, Stat};

const SEEDS: [u64; 3] = [1, 7, 0x5eed];
const DEFAULT_OPS: usize = 300;
/// Paths are drawn from a small universe so that operations collide (fail, nest, delete).
const NAMES: [&str; 4] = ["a", "b", "c", "d"];
/// The server's tick: sessions may ask for 2 to 20 ticks, so an abandoned one expires fast.
const TICK: Duration = Duration::from_millis(200);
/// The longest any one wait of the test may take.
const LIMIT: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replaying_the_log_rebuilds_the_live_state() {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let seeds = match var("LOCKKEEPER_REPLAY_SEED") {
        Some(seed) => vec![seed.parse().expect("LOCKKEEPER_REPLAY_SEED is a u64")],
        None => SEEDS.to_vec(),
    };
    let ops = var("LOCKKEEPER_REPLAY_OPS")
        .map(|n| n.parse().expect("LOCKKEEPER_REPLAY_OPS is a count"))
        .unwrap_or(DEFAULT_OPS);
    for seed in seeds {
        println!("replay seed {seed} ({ops} operations)");
        run(seed, ops).await;
    }
}

/// The live state as clients see it.
struct Live {
    /// Every node: its data and its stat.
    nodes: BTreeMap<String, (Vec<u8>, [i64; 11])>,
    dump: String,
    zxid: i64,
}

async fn run(seed: u64, ops: usize) {
    let dir = tempfile::tempdir().expect("a data dir");
    let config = Config {
        listen: "127.0.0.1:0".parse().expect("an address"),
        data_dir: dir.path().to_path_buf(),
        tick_time: TICK,
        container_check_interval: Duration::from_secs(3600),
        four_letter_words: vec!["dump".into()],
        snap_count: 40,
        ..Config::default()
    };
    let server = Server::start(config).await.expect("start Keeper");
    let addr = server.local_addr();
    let connect = addr.to_string();
    let mut clients = Vec::new();
    for _ in 0..2 {
        let client = tokio::time::timeout(LIMIT, Client::connect(&connect))
            .await
            .expect("connect within the limit")
            .expect("connect");
        clients.push(client);
    }
    let mut rng = StdRng::seed_from_u64(seed);
    let started = Instant::now();
    let (mut closed, mut expired) = (0, 0);
    for step in 0..ops {
        assert!(
            started.elapsed() < LIMIT * 6,
            "seed {seed}: {step} operations took too long"
        );
        let client = &clients[rng.gen_range(0..clients.len())];
        let ended = tokio::time::timeout(LIMIT, operation(&mut rng, client, addr))
            .await
            .unwrap_or_else(|_| panic!("seed {seed}: operation {step} hung"));
        match ended {
            Some(Ended::Closed) => closed += 1,
            Some(Ended::Expired) => expired += 1,
            None => {}
        }
    }
    // A rejected write uses a zxid and logs nothing; one that succeeds last makes the newest
    // zxid handed out the newest logged, which replay must reach.
    let last = CreateMode::Persistent.with_acls(Acls::anyone_all());
    clients[0]
        .create("/last", b"", &last)
        .await
        .expect("create /last");
    let live = read_live(&clients[0], addr).await;
    // Stopped before the clients go, so their sessions' closes are not logged after the read.
    server.shutdown().await;
    drop(clients);
    let recovered = recovery::recover(dir.path(), Mode::Check)
        .unwrap_or_else(|e| panic!("seed {seed}: recovery refused the data dir: {e}"));
    assert!(
        recovered.snapshot_zxid.is_some() && recovered.replayed > 0,
        "seed {seed}: recovery should start from a snapshot and replay the log after it"
    );
    compare(seed, &live, &recovered);
    println!(
        "seed {seed}: {} nodes, {} sessions, {closed} sessions closed and {expired} expired, \
         snapshot at {:#x}, {} txns replayed after it, in {:?}",
        live.nodes.len(),
        recovered.sessions.len(),
        recovered.snapshot_zxid.unwrap_or_default(),
        recovered.replayed,
        started.elapsed()
    );
}

fn path(rng: &mut StdRng) -> String {
    let depth = rng.gen_range(1..=2);
    (0..depth).fold(String::new(), |mut p, _| {
        p.push('/');
        p.push_str(NAMES[rng.gen_range(0..NAMES.len())]);
        p
    })
}

fn data(rng: &mut StdRng) -> Vec<u8> {
    let len = rng.gen_range(0..8);
    (0..len).map(|_| rng.r#gen::<u8>()).collect()
}

fn mode(rng: &mut StdRng) -> zookeeper_client::CreateOptions<'static> {
    let mode = match rng.gen_range(0..6) {
        0 | 1 => CreateMode::Persistent,
        2 => CreateMode::PersistentSequential,
        3 => CreateMode::Ephemeral,
        4 => CreateMode::EphemeralSequential,
        _ => CreateMode::Container,
    };
    let options = mode.with_acls(Acls::anyone_all());
    if rng.gen_range(0..8) == 0 && matches!(mode, CreateMode::Persistent) {
        options.with_ttl(Duration::from_secs(3600))
    } else {
        options
    }
}

/// One random write. Failures (no node, node exists, bad version) are part of the sequence:
/// each uses a zxid and changes nothing, which replay must agree with.
async fn operation(rng: &mut StdRng, client: &Client, addr: std::net::SocketAddr) -> Option<Ended> {
    match rng.gen_range(0..20) {
        0..=7 => {
            let p = path(rng);
            let _ = client.create(&p, &data(rng), &mode(rng)).await;
        }
        8..=11 => {
            let versioned = rng.gen_bool(0.5);
            let version = versioned.then(|| rng.gen_range(0..3));
            let _ = client.set_data(&path(rng), &data(rng), version).await;
        }
        12..=14 => {
            let versioned = rng.gen_bool(0.5);
            let version = versioned.then(|| rng.gen_range(0..3));
            let _ = client.delete(&path(rng), version).await;
        }
        15..=17 => {
            let mut writer = client.new_multi_writer();
            for _ in 0..rng.gen_range(1..4) {
                let p = path(rng);
                let added = match rng.gen_range(0..4) {
                    0 => writer.add_create(&p, &data(rng), &mode(rng)).map(|_| ()),
                    1 => writer.add_set_data(&p, &data(rng), None),
                    2 => writer.add_delete(&p, None),
                    _ => writer.add_check_version(&p, rng.gen_range(0..2)),
                };
                let _ = added;
            }
            let _ = writer.commit().await;
        }
        _ => return Some(session(rng, addr).await),
    }
    None
}

/// A session of its own: opened, given ephemerals, then closed or abandoned to expire. Either
/// way the test waits until it has ended, so nothing happens behind the read at the end.
async fn session(rng: &mut StdRng, addr: std::net::SocketAddr) -> Ended {
    let timeout_ms = (TICK * 2).as_millis() as i32;
    let mut raw = Raw::open(addr, "replay session").await;
    let id = raw
        .handshake(timeout_ms)
        .await
        .expect("the server answers the handshake")
        .session_id;
    for _ in 0..rng.gen_range(0..3) {
        let sequential = rng.gen_range(0..2);
        let request = Request::Create(CreateOp {
            op: OpCode::Create,
            path: format!("{}/e-", path(rng)),
            data: Some(Bytes::from(data(rng))),
            acl: open_acl(),
            flags: 1 | sequential << 1,
            ttl: 0,
        });
        let _ = raw.call(&request).await;
    }
    let ended = if rng.gen_range(0..2) == 0 {
        let _ = raw.call(&Request::CloseSession).await;
        Ended::Closed
    } else {
        Ended::Expired
    };
    drop(raw);
    let deadline = Instant::now() + LIMIT;
    while four_letter_word(addr, "dump").contains(&format!("{id:#x}\t")) {
        assert!(
            Instant::now() < deadline,
            "session {id:#x} did not end in time"
        );
        tokio::time::sleep(TICK / 4).await;
    }
    ended
}

/// How an operation's own session ended, if it opened one.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Ended {
    Closed,
    Expired,
}

async fn read_live(client: &Client, addr: std::net::SocketAddr) -> Live {
    let mut nodes = BTreeMap::new();
    let mut pending = vec!["/".to_string()];
    while let Some(p) = pending.pop() {
        let (data, stat) = client.get_data(&p).await.expect("read a node");
        for child in client.list_children(&p).await.expect("list a node") {
            pending.push(if p == "/" {
                format!("/{child}")
            } else {
                format!("{p}/{child}")
            });
        }
        nodes.insert(p, (data, client_stat(&stat)));
    }
    let srvr = four_letter_word(addr, "srvr");
    let zxid = srvr
        .lines()
        .find_map(|l| l.strip_prefix("Zxid: 0x"))
        .and_then(|z| i64::from_str_radix(z.trim(), 16).ok())
        .unwrap_or_else(|| panic!("srvr names no zxid: {srvr}"));
    Live {
        nodes,
        dump: four_letter_word(addr, "dump"),
        zxid,
    }
}

/// A stat's eleven fields as numbers, in wire order; the client's and the server's `Stat` are
/// two types with the same fields.
macro_rules! stat_fields {
    ($s:expr) => {{
        let s = $s;
        [
            s.czxid,
            s.mzxid,
            s.ctime,
            s.mtime,
            s.version.into(),
            s.cversion.into(),
            s.aversion.into(),
            s.ephemeral_owner,
            s.data_length.into(),
            s.num_children.into(),
            s.pzxid,
        ]
    }};
}

fn client_stat(s: &Stat) -> [i64; 11] {
    stat_fields!(s)
}

fn server_stat(s: &lockkeeper_proto::Stat) -> [i64; 11] {
    stat_fields!(s)
}

/// `dump` as the server writes it, made from the recovered sessions and ephemerals.
fn dump_of(recovered: &Recovered) -> String {
    let mut out = String::from("SessionTracker dump:\n");
    let mut sessions: Vec<_> = recovered.sessions.iter().collect();
    sessions.sort_by_key(|s| s.id);
    let _ = writeln!(out, "Global Sessions({}):", sessions.len());
    for s in sessions {
        let _ = writeln!(out, "{:#x}\t{}ms", s.id, s.timeout.as_millis());
    }
    out.push_str("ephemeral nodes dump:\n");
    let mut owners: Vec<_> = recovered.tree.sessions_with_ephemerals().collect();
    owners.sort_by_key(|(id, _)| **id);
    let _ = writeln!(out, "Sessions with Ephemerals ({}):", owners.len());
    for (id, paths) in owners {
        let _ = writeln!(out, "{id:#x}:");
        for p in paths {
            let _ = writeln!(out, "\t{p}");
        }
    }
    out
}

fn compare(seed: u64, live: &Live, recovered: &Recovered) {
    assert_eq!(
        recovered.last_zxid, live.zxid,
        "seed {seed}: the last zxid replayed is not the live one"
    );
    assert_eq!(
        recovered.tree.len(),
        live.nodes.len(),
        "seed {seed}: the recovered tree has another node count"
    );
    for (p, (data, stat)) in &live.nodes {
        let node = recovered
            .tree
            .get(p)
            .unwrap_or_else(|| panic!("seed {seed}: {p} is live but not recovered"));
        let recovered_data = node.data.as_deref().unwrap_or_default();
        assert_eq!(recovered_data, &data[..], "seed {seed}: data of {p}");
        assert_eq!(server_stat(&node.stat()), *stat, "seed {seed}: stat of {p}");
    }
    assert_eq!(
        dump_of(recovered),
        live.dump,
        "seed {seed}: sessions or ephemerals differ"
    );
}
