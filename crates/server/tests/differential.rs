//! Differential test: Keeper against Apache ZooKeeper on the same seeded random operations.
//!
//! For each seed, a generator (`differential/generate.rs`) draws operations over four sessions on a
//! small path universe (creates of every node kind, deletes and setData with right and wrong
//! versions, reads, ACLs with world/digest/ip/auth, multi and multiRead, getEphemerals,
//! getAllChildrenNumber, sync, addauth, whoami, one-shot watches, session close) and both
//! servers run each operation in lockstep, one request at a time, so both see the same order.
//! Every answer is normalized (`differential/compare.rs` says what is ignored and why: times,
//! session ids, absolute zxids, child order) and compared, along with the watch events each
//! session received; each seed ends with a full dump of the tree. The first difference fails
//! the test with the seed, the operation and both answers, then the failing sequence is shrunk
//! by replaying subsets of it under fresh chroots on the same two servers.
//!
//! Environment:
//! * `LOCKKEEPER_DIFF_SEED=<n>`: run only that seed (to reproduce a failure).
//! * `LOCKKEEPER_DIFF_OPS=<n>`: operations per seed (default 400).
//! * `LOCKKEEPER_DIFF_SELFCHECK=1`: compare Apache ZooKeeper with a second Apache ZooKeeper
//!   instead of Keeper; it must always pass, which proves the comparison is not too strict.
//! * `LOCKKEEPER_DIFF_SKIP=tag,tag`: never draw operations with these tags (see [`tags`]), to
//!   look past a known difference. The tag `auth` also keeps every session unauthenticated.
//! * `LOCKKEEPER_DIFF_ALLOW=name,name`: accept these known differences (see `run::Options`):
//!   `multi-create-stat` (a create inside a multi answered with a stat, which Apache ZooKeeper
//!   3.8 omits), `owner-marker` (a container or TTL marker shown as ephemeralOwner, where
//!   ZooKeeper shows 0).
//! * `LOCKKEEPER_DIFF_TRACE=1`: print every operation and the reference answer.
//! * `LOCKKEEPER_DIFF_SHRINK=0`: do not shrink a failure.

#[path = "differential/client.rs"]
mod client;
#[path = "differential/compare.rs"]
mod compare;
#[path = "differential/generate.rs"]
mod generate;
#[path = "differential/ops.rs"]
mod ops;
#[path = "differential/run.rs"]
mod run;
#[path = "differential/shrink.rs"]
mod shrink;

use std::time::{Duration, Instant};

use compare::{Step, difference, show_step};
use generate::Generator;
use lockkeeper_testkit::{ApacheZk, Keeper, TestServer, ZkOptions};
use ops::{AclChoice, NodeKind, Op, ReadOp, SubOp};
use run::{Backend, Options};
use zookeeper_client::{Acls, Client, CreateMode};

/// The seeds every run covers. The first runs at the real root, the others each in a chroot of
/// their own on the same two servers.
const SEEDS: [u64; 5] = [1, 2, 3, 0x5eed, 20240601];

const DEFAULT_OPS: usize = 400;

/// Container and TTL reaping is timer driven, which no operation sequence can order against;
/// both servers get an interval far longer than a run so that nothing is reaped.
const REAP_INTERVAL: Duration = Duration::from_secs(3600);

/// The known differences `LOCKKEEPER_DIFF_ALLOW` can name.
const ALLOWANCES: [&str; 2] = ["multi-create-stat", "owner-marker"];

struct Settings {
    seeds: Vec<u64>,
    ops: usize,
    selfcheck: bool,
    skip: Vec<String>,
    allow: Vec<String>,
    trace: bool,
    shrink: bool,
}

impl Settings {
    fn from_env() -> Settings {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let seeds = match var("LOCKKEEPER_DIFF_SEED") {
            Some(seed) => vec![seed.parse().expect("LOCKKEEPER_DIFF_SEED is a u64")],
            None => SEEDS.to_vec(),
        };
        let ops = var("LOCKKEEPER_DIFF_OPS")
            .map(|n| n.parse().expect("LOCKKEEPER_DIFF_OPS is a count"))
            .unwrap_or(DEFAULT_OPS);
        let skip = var("LOCKKEEPER_DIFF_SKIP")
            .map(|s| s.split(',').map(|t| t.trim().to_string()).collect())
            .unwrap_or_default();
        let allow: Vec<String> = var("LOCKKEEPER_DIFF_ALLOW")
            .map(|s| s.split(',').map(|t| t.trim().to_string()).collect())
            .unwrap_or_default();
        for name in &allow {
            assert!(
                ALLOWANCES.contains(&name.as_str()),
                "LOCKKEEPER_DIFF_ALLOW names {name:?}; known: {ALLOWANCES:?}"
            );
        }
        Settings {
            allow,
            seeds,
            ops,
            selfcheck: var("LOCKKEEPER_DIFF_SELFCHECK").is_some_and(|v| v != "0"),
            skip,
            trace: var("LOCKKEEPER_DIFF_TRACE").is_some_and(|v| v != "0"),
            shrink: var("LOCKKEEPER_DIFF_SHRINK").is_none_or(|v| v != "0"),
        }
    }
}

/// Tags of an operation, for `LOCKKEEPER_DIFF_SKIP`: its name, `root` if it touches `/`,
/// `ttl`, `container`, `sequential`, `ephemeral` if it creates such a node, `acl` if it sets
/// an ACL other than world:anyone:ALL, `auth` for addauth, `multi-special-create` for a multi
/// that creates a container or TTL node.
fn tags(op: &Op) -> Vec<&'static str> {
    let mut tags = Vec::new();
    let kind = |k: NodeKind, tags: &mut Vec<&'static str>| match k {
        NodeKind::Ttl => tags.push("ttl"),
        NodeKind::TtlSequential => tags.extend(["ttl", "sequential"]),
        NodeKind::Container => tags.push("container"),
        NodeKind::PersistentSequential => tags.push("sequential"),
        NodeKind::EphemeralSequential => tags.extend(["ephemeral", "sequential"]),
        NodeKind::Ephemeral => tags.push("ephemeral"),
        NodeKind::Persistent => {}
    };
    let mut paths: Vec<&str> = Vec::new();
    let name = match op {
        Op::Create {
            path, kind: k, acl, ..
        } => {
            kind(*k, &mut tags);
            if *acl != AclChoice::AnyoneAll {
                tags.push("acl");
            }
            paths.push(path);
            "create"
        }
        Op::Delete { path, .. } => {
            paths.push(path);
            "delete"
        }
        Op::SetData { path, .. } => {
            paths.push(path);
            "setData"
        }
        Op::GetData { path, .. } => {
            paths.push(path);
            "getData"
        }
        Op::Exists { path, .. } => {
            paths.push(path);
            "exists"
        }
        Op::ListChildren { path, .. } | Op::GetChildren { path, .. } => {
            paths.push(path);
            "getChildren"
        }
        Op::GetAcl { path, .. } => {
            paths.push(path);
            "getAcl"
        }
        Op::SetAcl { path, .. } => {
            paths.push(path);
            tags.push("acl");
            "setAcl"
        }
        Op::Multi { ops, .. } => {
            for sub in ops {
                match sub {
                    SubOp::Create { path, kind: k, .. } => {
                        kind(*k, &mut tags);
                        if matches!(
                            k,
                            NodeKind::Container | NodeKind::Ttl | NodeKind::TtlSequential
                        ) {
                            tags.push("multi-special-create");
                        }
                        paths.push(path);
                    }
                    SubOp::Delete { path, .. }
                    | SubOp::SetData { path, .. }
                    | SubOp::Check { path, .. } => paths.push(path),
                }
            }
            "multi"
        }
        Op::MultiRead { ops, .. } => {
            for read in ops {
                match read {
                    ReadOp::GetData(path) | ReadOp::GetChildren(path) => paths.push(path),
                }
            }
            "multiRead"
        }
        Op::GetEphemerals { .. } => "getEphemerals",
        Op::AllChildrenNumber { path, .. } => {
            paths.push(path);
            "getAllChildrenNumber"
        }
        Op::Sync { path, .. } => {
            paths.push(path);
            "sync"
        }
        Op::AddAuth { .. } => {
            tags.push("auth");
            "addauth"
        }
        Op::WhoAmI { .. } => "whoami",
        Op::Watch { path, .. } => {
            paths.push(path);
            "watch"
        }
        Op::AddWatch { path, .. } => {
            paths.push(path);
            "addWatch"
        }
        Op::CloseSession { .. } => "close",
        Op::Dump => "dump",
    };
    tags.push(name);
    if paths.contains(&"/") {
        tags.push("root");
    }
    tags
}

/// The first difference of a run.
struct Mismatch {
    /// The operations up to and including the one that differed.
    ops: Vec<Op>,
    /// What the reference server answered to each of them.
    reference: Vec<Step>,
    /// The other server's answer to the last one.
    other: Step,
    why: String,
}

/// Whether the generator may hand `op` to the servers.
///
/// At the real root (`top_level`) the root's ACL is left alone: a random setAcl there could
/// lock every later run out of creating its chroot.
fn allowed(settings: &Settings, top_level: bool, op: &Op) -> bool {
    if top_level && matches!(op, Op::SetAcl { path, .. } if path == "/") {
        return false;
    }
    !tags(op)
        .iter()
        .any(|t| settings.skip.iter().any(|s| s == t))
}

/// Draws and runs `count` operations (then a dump) for `seed` on both backends in lockstep.
async fn lockstep(
    settings: &Settings,
    seed: u64,
    top_level: bool,
    a: &mut Backend,
    b: &mut Backend,
) -> Result<(), Mismatch> {
    let mut generator = Generator::new(seed);
    let mut ops = Vec::new();
    let mut reference = Vec::new();
    for index in 0..=settings.ops {
        let op = if index == settings.ops {
            Op::Dump
        } else {
            loop {
                let op = generator.next_op();
                if allowed(settings, top_level, &op) {
                    break op;
                }
            }
        };
        let step_a = a.step(index, &op).await;
        let step_b = b.step(index, &op).await;
        if settings.trace {
            eprintln!("seed {seed} #{index} {op}\n    -> {}", show_step(&step_a));
        }
        generator.observe(&op, &step_a.outcome);
        let why = difference(&step_a, &step_b);
        ops.push(op);
        reference.push(step_a);
        if let Some(why) = why {
            return Err(Mismatch {
                ops,
                reference,
                other: step_b,
                why,
            });
        }
    }
    Ok(())
}

/// The two servers under comparison: the reference (always Apache ZooKeeper) and the other.
struct Pair {
    reference: ApacheZk,
    other: Box<dyn TestServer>,
    /// Keeper's data directory, kept alive as long as the server.
    _data: Option<tempfile::TempDir>,
    /// Each chroot made for a run gets a fresh name.
    chroots: usize,
    options: Options,
}

impl Pair {
    fn start(settings: &Settings) -> Pair {
        let allowed = |name: &str| settings.allow.iter().any(|a| a == name);
        let options = Options {
            authenticate: !settings.skip.iter().any(|t| t == "auth"),
            multi_create_stats: !allowed("multi-create-stat"),
            owner_markers: !allowed("owner-marker"),
        };
        let zk_options = ZkOptions {
            container_check_interval_ms: REAP_INTERVAL.as_millis() as u64,
            max_client_cnxns: 0,
            ..ZkOptions::default()
        };
        let reference = ApacheZk::start_with(zk_options.clone());
        if settings.selfcheck {
            let other = Box::new(ApacheZk::start_with(zk_options));
            return Pair {
                reference,
                other,
                _data: None,
                chroots: 0,
                options,
            };
        }
        let data = tempfile::Builder::new()
            .prefix("lockkeeper-differential-")
            .tempdir()
            .expect("create Keeper's data directory");
        let mut config = Keeper::test_config(data.path());
        config.container_check_interval = REAP_INTERVAL;
        config.max_client_cnxns = 10_000;
        Pair {
            reference,
            other: Box::new(Keeper::start_with(config)),
            _data: Some(data),
            chroots: 0,
            options,
        }
    }

    fn other_name(&self) -> &'static str {
        if self.other.name() == "zookeeper" {
            "zookeeper#2"
        } else {
            self.other.name()
        }
    }

    /// Opens both backends, at the real root or under a fresh chroot made on both servers.
    async fn open(&mut self, label: &str, chroot: bool) -> (Backend, Backend) {
        let suffix = if chroot {
            self.chroots += 1;
            let node = format!("/{label}-{}", self.chroots);
            for server in [&self.reference as &dyn TestServer, self.other.as_ref()] {
                let admin = Client::connect(&server.connect_string())
                    .await
                    .unwrap_or_else(|e| panic!("connect to {}: {e}", server.name()));
                admin
                    .create(
                        &node,
                        b"",
                        &CreateMode::Persistent.with_acls(Acls::anyone_all()),
                    )
                    .await
                    .unwrap_or_else(|e| panic!("create chroot {node} on {}: {e}", server.name()));
            }
            node
        } else {
            String::new()
        };
        let a = Backend::open(
            "zookeeper",
            format!("{}{suffix}", self.reference.connect_string()),
            !chroot,
            self.options,
        )
        .await
        .unwrap_or_else(|e| panic!("open sessions on zookeeper: {e}"));
        let b = Backend::open(
            self.other_name(),
            format!("{}{suffix}", self.other.connect_string()),
            !chroot,
            self.options,
        )
        .await
        .unwrap_or_else(|e| {
            // The same sessions (connect, then addauth) just worked on Apache ZooKeeper.
            panic!(
                "{} differs from Apache ZooKeeper before the first operation: opening the \
                 sessions ZooKeeper accepted failed: {e}",
                self.other_name()
            )
        });
        (a, b)
    }
}

#[test]
fn keeper_answers_like_apache_zookeeper() {
    let settings = Settings::from_env();
    let mut pair = Pair::start(&settings);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("build the test's tokio runtime");
    let other = pair.other_name();
    let failure = runtime.block_on(async {
        for (i, &seed) in settings.seeds.iter().enumerate() {
            let started = Instant::now();
            let (mut a, mut b) = pair.open(&format!("seed-{seed}"), i > 0).await;
            let result = lockstep(&settings, seed, i == 0, &mut a, &mut b).await;
            a.close().await;
            b.close().await;
            match result {
                Ok(()) => eprintln!(
                    "seed {seed}: {} operations agree with {other} ({:.1?})",
                    settings.ops,
                    started.elapsed()
                ),
                Err(mismatch) => {
                    let shrunk = if settings.shrink {
                        match shrink::shrink(&mut pair, &mismatch.ops).await {
                            Some(ops) => Some(shrink::show_replay(&mut pair, &ops).await),
                            None => None,
                        }
                    } else {
                        None
                    };
                    return Some(shrink::report(&settings, seed, other, &mismatch, shrunk));
                }
            }
        }
        None
    });
    drop(runtime);
    if let Some(failure) = failure {
        panic!("{failure}");
    }
}
