//! Crash tests: Keeper killed with SIGKILL at random moments under concurrent write load, then
//! restarted on the same data directory, must show every acknowledged write and nothing partial.
//!
//! Several sessions write at once (plain and sequential creates, versioned setData, multis of
//! 2-3 creates), so many writes share each group commit and a kill lands between the log write,
//! the fdatasync and the replies. Every reply received is recorded; after the restart the
//! recorded history is checked against what the server shows: acknowledged creates present with
//! their data, acknowledged versions not rolled back, each multi all-or-nothing, and new zxids
//! beyond any seen before (in a new epoch). Snapshot frequency and retention are drawn per
//! cycle, so kills also land during snapshots and recovery runs through snapshot plus log.
//!
//! Reproducible: the seed is printed and `LOCKKEEPER_CRASH_SEED` replays it (the kill moments
//! and operation mix, not the machine's timing). `LOCKKEEPER_CRASH_CYCLES` (default 12) and
//! `LOCKKEEPER_CRASH_SECS` (default 60) bound the run; raise them for a longer soak.

mod support;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use zookeeper_client::{Acls, Client, CreateMode, MultiWriteResult};

use support::{KeeperProcess, OP_LIMIT, connect, epoch, read_nodes, seeded_rng, verify, within};

const SEED_ENV: &str = "LOCKKEEPER_CRASH_SEED";
const CYCLES_ENV: &str = "LOCKKEEPER_CRASH_CYCLES";
const SECS_ENV: &str = "LOCKKEEPER_CRASH_SECS";

/// Concurrent writing sessions.
const WRITERS: u64 = 4;

/// What the clients were told, collected while they write.
#[derive(Debug, Default, Clone)]
struct History {
    /// Acknowledged creates (plain and sequential, under the name the server gave): their data.
    /// These nodes are never written again.
    created: BTreeMap<String, Vec<u8>>,
    /// Nodes written with versioned setData: the highest acknowledged version and its data.
    versioned: BTreeMap<String, (i32, Vec<u8>)>,
    /// Every multi sent, acknowledged or not.
    multis: Vec<MultiAttempt>,
    /// The highest zxid any acknowledged write reported.
    max_zxid: i64,
    /// Acknowledged writes, for the summary.
    acknowledged: u64,
}

#[derive(Debug, Clone)]
struct MultiAttempt {
    paths: Vec<String>,
    data: Vec<Vec<u8>>,
    acknowledged: bool,
}

/// A node as read back after recovery.
#[derive(Debug, Clone, PartialEq)]
struct Found {
    data: Vec<u8>,
    version: i32,
    mzxid: i64,
}

impl History {
    /// Every path whose state after recovery says something about durability.
    fn paths(&self) -> Vec<String> {
        let mut paths: Vec<String> = self.created.keys().cloned().collect();
        paths.extend(self.versioned.keys().cloned());
        for multi in &self.multis {
            paths.extend(multi.paths.iter().cloned());
        }
        paths.sort();
        paths.dedup();
        paths
    }

    /// The ways `state` (path -> node, None if absent) contradicts this history; empty when
    /// recovery kept every promise.
    fn check(&self, state: &BTreeMap<String, Option<Found>>) -> Vec<String> {
        let mut violations = Vec::new();
        let lookup = |path: &str| state.get(path).cloned().flatten();
        for (path, data) in &self.created {
            match lookup(path) {
                None => violations.push(format!("acknowledged create of {path} is lost")),
                Some(found) if &found.data != data => violations.push(format!(
                    "{path}: data {:?}, acknowledged {:?}",
                    String::from_utf8_lossy(&found.data),
                    String::from_utf8_lossy(data)
                )),
                Some(_) => {}
            }
        }
        for (path, (version, data)) in &self.versioned {
            match lookup(path) {
                None => violations.push(format!(
                    "{path} (acknowledged at version {version}) is lost"
                )),
                Some(found) if found.version < *version => violations.push(format!(
                    "{path}: version {} after recovery, {version} was acknowledged",
                    found.version
                )),
                Some(found) if found.version == *version && &found.data != data => {
                    violations.push(format!(
                        "{path}: version {version} holds {:?}, acknowledged {:?}",
                        String::from_utf8_lossy(&found.data),
                        String::from_utf8_lossy(data)
                    ));
                }
                Some(_) => {}
            }
        }
        for multi in &self.multis {
            let present: Vec<&String> =
                multi.paths.iter().filter(|p| lookup(p).is_some()).collect();
            if !present.is_empty() && present.len() != multi.paths.len() {
                violations.push(format!(
                    "multi {:?} is partly visible: only {present:?} exist",
                    multi.paths
                ));
            }
            if multi.acknowledged {
                for (path, data) in multi.paths.iter().zip(&multi.data) {
                    match lookup(path) {
                        None => violations.push(format!("{path} of an acknowledged multi is lost")),
                        Some(found) if &found.data != data => violations.push(format!(
                            "{path} of an acknowledged multi holds {:?}, not {:?}",
                            String::from_utf8_lossy(&found.data),
                            String::from_utf8_lossy(data)
                        )),
                        Some(_) => {}
                    }
                }
            }
        }
        violations
    }
}

fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(text) => text
            .trim()
            .parse()
            .unwrap_or_else(|e| panic!("{name}={text:?}: {e}")),
        Err(_) => default,
    }
}

fn persistent() -> zookeeper_client::CreateOptions<'static> {
    CreateMode::Persistent.with_acls(Acls::anyone_all())
}

fn sequential() -> zookeeper_client::CreateOptions<'static> {
    CreateMode::PersistentSequential.with_acls(Acls::anyone_all())
}

/// Data that names its writer and step, plus random filler so equal lengths do not hide a
/// mix-up.
fn payload(rng: &mut StdRng, tag: &str) -> Vec<u8> {
    let filler: String = (0..rng.gen_range(0..48))
        .map(|_| rng.gen_range(b'a'..=b'z') as char)
        .collect();
    format!("{tag}:{filler}").into_bytes()
}

/// One writing session: an endless mix of operations under `base` until an error. Every reply
/// is recorded in `history` in the same poll that received it. Returns the error that ended it
/// and whether the crash had already been started when it arrived (an error before the kill is
/// a failure of its own).
async fn writer(
    client: Client,
    base: String,
    mut rng: StdRng,
    history: Arc<Mutex<History>>,
    killing: Arc<AtomicBool>,
) -> (String, bool) {
    let record = |f: &mut dyn FnMut(&mut History)| {
        let mut h = history
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&mut h);
        h.acknowledged += 1;
    };
    let versioned_path = format!("{base}/v");
    let mut version = -1;
    for step in 0u64.. {
        let op = if version < 0 { 2 } else { rng.gen_range(0..4) };
        let outcome: Result<(), String> = match op {
            0 => {
                let path = format!("{base}/p{step}");
                let data = payload(&mut rng, &path);
                match within(
                    "create",
                    OP_LIMIT,
                    client.create(&path, &data, &persistent()),
                )
                .await
                {
                    Ok((stat, _)) => {
                        record(&mut |h| {
                            h.created.insert(path.clone(), data.clone());
                            h.max_zxid = h.max_zxid.max(stat.mzxid);
                        });
                        Ok(())
                    }
                    Err(e) => Err(format!("create {path}: {e}")),
                }
            }
            1 => {
                let prefix = format!("{base}/s-");
                let data = payload(&mut rng, &format!("{prefix}{step}"));
                match within(
                    "create",
                    OP_LIMIT,
                    client.create(&prefix, &data, &sequential()),
                )
                .await
                {
                    Ok((stat, sequence)) => {
                        let path = format!("{prefix}{sequence}");
                        record(&mut |h| {
                            h.created.insert(path.clone(), data.clone());
                            h.max_zxid = h.max_zxid.max(stat.mzxid);
                        });
                        Ok(())
                    }
                    Err(e) => Err(format!("create {prefix}: {e}")),
                }
            }
            2 => {
                let data = payload(&mut rng, &format!("{versioned_path}@{}", version + 1));
                let result = if version < 0 {
                    within(
                        "create",
                        OP_LIMIT,
                        client.create(&versioned_path, &data, &persistent()),
                    )
                    .await
                    .map(|(stat, _)| stat)
                } else {
                    within(
                        "set_data",
                        OP_LIMIT,
                        client.set_data(&versioned_path, &data, Some(version)),
                    )
                    .await
                };
                match result {
                    Ok(stat) => {
                        version = stat.version;
                        record(&mut |h| {
                            h.versioned
                                .insert(versioned_path.clone(), (stat.version, data.clone()));
                            h.max_zxid = h.max_zxid.max(stat.mzxid);
                        });
                        Ok(())
                    }
                    Err(e) => Err(format!("write {versioned_path} at version {version}: {e}")),
                }
            }
            _ => {
                let count = rng.gen_range(2..=3);
                let paths: Vec<String> =
                    (0..count).map(|k| format!("{base}/m{step}-{k}")).collect();
                let data: Vec<Vec<u8>> = paths.iter().map(|p| payload(&mut rng, p)).collect();
                let index = {
                    let mut h = history
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    h.multis.push(MultiAttempt {
                        paths: paths.clone(),
                        data: data.clone(),
                        acknowledged: false,
                    });
                    h.multis.len() - 1
                };
                let mut multi = client.new_multi_writer();
                for (path, data) in paths.iter().zip(&data) {
                    multi
                        .add_create(path, data, &persistent())
                        .expect("a valid create in a multi");
                }
                match within("multi", OP_LIMIT, multi.commit()).await {
                    Ok(results) => {
                        record(&mut |h| {
                            h.multis[index].acknowledged = true;
                            for result in &results {
                                if let MultiWriteResult::Create { stat, .. } = result {
                                    h.max_zxid = h.max_zxid.max(stat.mzxid);
                                }
                            }
                        });
                        Ok(())
                    }
                    Err(e) => Err(format!("multi {paths:?}: {e}")),
                }
            }
        };
        if let Err(e) = outcome {
            return (e, killing.load(Ordering::SeqCst));
        }
    }
    unreachable!("the step counter does not run out")
}

/// Reads back everything the history mentions and checks it; then writes a marker whose zxid
/// must be beyond every zxid seen so far, in a newer epoch than the previous run's. Returns the
/// marker's epoch.
async fn check_recovery(
    client: &Client,
    history: &mut History,
    cycle: u64,
    previous_epoch: Option<i64>,
    seed: u64,
) -> i64 {
    let paths = history.paths();
    let found = read_nodes(client, &paths, 256).await;
    let state: BTreeMap<String, Option<Found>> = paths
        .into_iter()
        .zip(found)
        .map(|(path, node)| {
            let node = node.map(|(data, stat)| Found {
                data,
                version: stat.version,
                mzxid: stat.mzxid,
            });
            (path, node)
        })
        .collect();
    let violations = history.check(&state);
    assert!(
        violations.is_empty(),
        "after restart {cycle} (seed {SEED_ENV}={seed}), {} violation(s):\n{}",
        violations.len(),
        violations
            .iter()
            .take(30)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    let max_observed = state
        .values()
        .flatten()
        .map(|f| f.mzxid)
        .max()
        .unwrap_or(0)
        .max(history.max_zxid);
    let marker = format!("/crash-restart-{cycle}");
    let (stat, _) = within(
        "create marker",
        OP_LIMIT,
        client.create(&marker, b"restart", &persistent()),
    )
    .await
    .unwrap_or_else(|e| panic!("create {marker} after restart {cycle}: {e}"));
    assert!(
        stat.czxid > max_observed,
        "after restart {cycle}: new zxid {:#x} is not beyond {max_observed:#x} seen before \
         (seed {seed})",
        stat.czxid
    );
    if let Some(previous) = previous_epoch {
        assert!(
            epoch(stat.czxid) > previous,
            "after restart {cycle}: zxid {:#x} is in epoch {}, the previous run wrote in epoch \
             {previous}; the epoch must move on at every start (seed {seed})",
            stat.czxid,
            epoch(stat.czxid)
        );
    }
    history.created.insert(marker, b"restart".to_vec());
    history.max_zxid = history.max_zxid.max(stat.czxid);
    epoch(stat.czxid)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_survive_kill_9_under_load() {
    let (seed, mut rng) = seeded_rng(SEED_ENV);
    let max_cycles = env_u64(CYCLES_ENV, 12);
    let budget = Duration::from_secs(env_u64(SECS_ENV, 60));
    let data = tempfile::Builder::new()
        .prefix("lockkeeper-crash-")
        .tempdir()
        .expect("temporary data dir");
    let began = Instant::now();
    let mut history = History::default();
    let mut previous_epoch = None;
    let mut kills = 0u64;
    for cycle in 0u64.. {
        let snap_count = rng.gen_range(100..=3000u64).to_string();
        let snap_retain = rng.gen_range(1..=3u64).to_string();
        let mut server = KeeperProcess::start(
            data.path(),
            &["--snap-count", &snap_count, "--snap-retain", &snap_retain],
        );
        let recovered_in = server.ready_at - server.spawned_at;
        let checking = Instant::now();
        let checker = connect(&server.connect_string()).await;
        previous_epoch =
            Some(check_recovery(&checker, &mut history, cycle, previous_epoch, seed).await);
        eprintln!(
            "start {cycle}: recovered in {recovered_in:?}, {} paths checked in {:?}",
            history.paths().len(),
            checking.elapsed()
        );
        if cycle >= max_cycles || began.elapsed() >= budget {
            drop(checker);
            server.kill9();
            break;
        }
        // Each cycle writes under a parent of its own, so paths never collide across cycles.
        let base = format!("/crash-{cycle}");
        within(
            "create",
            OP_LIMIT,
            checker.create(&base, b"", &persistent()),
        )
        .await
        .unwrap_or_else(|e| panic!("create {base}: {e}"));
        history.created.insert(base.clone(), Vec::new());
        let shared = Arc::new(Mutex::new(std::mem::take(&mut history)));
        let killing = Arc::new(AtomicBool::new(false));
        let mut writers = Vec::new();
        for w in 0..WRITERS {
            let dir = format!("{base}/w{w}");
            within("create", OP_LIMIT, checker.create(&dir, b"", &persistent()))
                .await
                .unwrap_or_else(|e| panic!("create {dir}: {e}"));
            shared
                .lock()
                .expect("history")
                .created
                .insert(dir.clone(), Vec::new());
            let client = connect(&server.connect_string()).await;
            let writer_rng = StdRng::seed_from_u64(seed ^ (cycle << 16) ^ w);
            writers.push(tokio::spawn(writer(
                client,
                dir,
                writer_rng,
                Arc::clone(&shared),
                Arc::clone(&killing),
            )));
        }
        let before = shared.lock().expect("history").acknowledged;
        let delay = Duration::from_millis(rng.gen_range(50..1500));
        tokio::time::sleep(delay).await;
        killing.store(true, Ordering::SeqCst);
        server.kill9();
        kills += 1;
        let stopping = Instant::now();
        for handle in writers {
            let abort = handle.abort_handle();
            match tokio::time::timeout(Duration::from_secs(10), handle).await {
                Ok(Ok((error, after_kill))) => assert!(
                    after_kill,
                    "cycle {cycle}: a write failed before the server was killed: {error} \
                     (seed {seed})"
                ),
                Ok(Err(join)) => panic!("cycle {cycle}: a writer panicked: {join}"),
                // Stuck in the client's reconnect loop: what it had not received is not
                // acknowledged, and what it had is already recorded.
                Err(_) => abort.abort(),
            }
        }
        let stopped_in = stopping.elapsed();
        drop(checker);
        history = std::mem::take(&mut *shared.lock().expect("history"));
        eprintln!(
            "cycle {cycle}: killed after {delay:?} with {} writes acknowledged in the cycle \
             (snap-count {snap_count}, snap-retain {snap_retain}); writers stopped in \
             {stopped_in:?}",
            history.acknowledged - before
        );
        let verdict = verify(data.path());
        assert_eq!(
            verdict.code,
            Some(0),
            "cycle {cycle}: `lockkeeper verify` of a data dir left by kill -9 must pass \
             (a torn tail at most); it said:\n{}",
            verdict.text()
        );
    }
    eprintln!(
        "{kills} kills in {:?}; {} writes acknowledged, {} multis sent; seed {SEED_ENV}={seed}",
        began.elapsed(),
        history.acknowledged,
        history.multis.len()
    );
    assert!(kills >= 2, "too few crash cycles to mean anything: {kills}");
    assert!(
        history.acknowledged >= 100,
        "the writers made too little progress ({} acknowledged writes) for the test to mean \
         anything",
        history.acknowledged
    );
}

/// The checker itself must catch each kind of broken promise, or the crash test could pass
/// against a server that loses writes.
#[test]
fn checker_catches_each_kind_of_lost_or_partial_write() {
    let mut history = History::default();
    history.created.insert("/a".into(), b"a1".to_vec());
    history
        .created
        .insert("/s-0000000007".into(), b"s".to_vec());
    history.versioned.insert("/v".into(), (3, b"v3".to_vec()));
    history.multis.push(MultiAttempt {
        paths: vec!["/m1".into(), "/m2".into()],
        data: vec![b"m1".to_vec(), b"m2".to_vec()],
        acknowledged: true,
    });
    history.multis.push(MultiAttempt {
        paths: vec!["/n1".into(), "/n2".into(), "/n3".into()],
        data: vec![b"n1".to_vec(), b"n2".to_vec(), b"n3".to_vec()],
        acknowledged: false,
    });
    let node = |data: &[u8], version: i32| {
        Some(Found {
            data: data.to_vec(),
            version,
            mzxid: 1,
        })
    };
    let mut faithful: BTreeMap<String, Option<Found>> = BTreeMap::new();
    faithful.insert("/a".into(), node(b"a1", 0));
    faithful.insert("/s-0000000007".into(), node(b"s", 0));
    faithful.insert("/v".into(), node(b"v3", 3));
    faithful.insert("/m1".into(), node(b"m1", 0));
    faithful.insert("/m2".into(), node(b"m2", 0));
    for n in ["/n1", "/n2", "/n3"] {
        faithful.insert(n.into(), None);
    }
    assert_eq!(history.check(&faithful), Vec::<String>::new());
    assert_eq!(history.paths().len(), 8);

    // Also faithful: an unacknowledged multi that did commit, whole; a later, unacknowledged
    // setData that reached the log.
    let mut also = faithful.clone();
    for n in ["/n1", "/n2", "/n3"] {
        also.insert(n.into(), node(n.as_bytes(), 0));
    }
    also.insert("/v".into(), node(b"v4", 4));
    assert_eq!(history.check(&also), Vec::<String>::new());

    let broken: Vec<(&str, Option<Found>)> = vec![
        ("/a", None),
        ("/a", node(b"a0", 0)),
        ("/s-0000000007", None),
        ("/v", None),
        ("/v", node(b"v2", 2)),
        ("/v", node(b"other", 3)),
        ("/m2", None),
        ("/m1", node(b"m-other", 0)),
        ("/n2", node(b"n2", 0)),
    ];
    for (path, state) in broken {
        let mut damaged = faithful.clone();
        damaged.insert(path.into(), state.clone());
        let violations = history.check(&damaged);
        assert!(
            !violations.is_empty(),
            "the checker missed {path} recovered as {state:?}"
        );
    }
    // A path the server was never asked about counts as absent.
    let mut missing = faithful.clone();
    missing.remove("/m1");
    assert!(!history.check(&missing).is_empty());
}
