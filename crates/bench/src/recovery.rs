//! `lockkeeper-bench --recovery N`: how long a server takes to come back after a crash with N
//! znodes on disk, and whether every acknowledged znode came back.
//!
//! The server runs as a child process with every write synced (Keeper `--sync always`, ZooKeeper
//! `forceSync=yes`) and a snapshot interval of 3/4 of N txns, so that after N creates its data
//! directory holds one snapshot of about 3/4 of the znodes and a log tail with the rest: recovery
//! then exercises both the snapshot load and the log replay, as after a real crash. The benchmark
//! waits until that snapshot is complete, kills the server with SIGKILL (no shutdown code runs),
//! starts it again on the same directory, and measures from spawn to the first accepted session,
//! the same figure as a fresh start in `--compare`. Then it counts the znodes that are back.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use lockkeeper_zk_client as zk;
use rand::Rng;

use super::BoxError;
use super::datadir::{self, DataFile, Layout};
use super::process::{ChildServer, Launcher, ServerKind, ServerOptions};
use super::startup::first_session;
use super::stats::{self, Json};
use super::workload::{Namespace, Plan, close_session, open_session};

/// Sessions creating the znodes.
const POPULATE_SESSIONS: usize = 4;

/// Znodes read back after the restart, besides the count of the parent's children.
const SAMPLE: usize = 1000;

/// What `--recovery` does, from the command line.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    pub znodes: u64,
    pub plan: Plan,
    pub launcher: Launcher,
    /// Also measure Apache ZooKeeper, for a ratio.
    pub peer: bool,
    pub populate_limit: Duration,
    /// Bound on each start, from spawn to first session (recovery included).
    pub startup_limit: Duration,
    /// Bound on waiting for the snapshot once the znodes exist.
    pub snapshot_limit: Duration,
}

/// Snapshot interval that leaves one snapshot at about 3/4 of `znodes` creates and a quarter of
/// them in the log after it.
pub(crate) fn snap_count_for(znodes: u64) -> u64 {
    (znodes / 4 * 3 + znodes % 4 * 3 / 4).max(2)
}

/// What came back after the restart.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Check {
    /// Children of the parent of the znodes, `None` when the parent itself is gone.
    pub children: Option<i64>,
    /// Znodes read back individually, and how many of those were missing or had other data.
    pub sampled: u64,
    pub sampled_missing: u64,
    pub sampled_wrong_data: u64,
    /// One missing path, for the message.
    pub example_missing: Option<String>,
}

impl Check {
    /// Acknowledged znodes that did not come back, as far as the check can tell.
    pub(crate) fn missing(&self, created: u64) -> u64 {
        match self.children {
            None => created,
            Some(n) => created.saturating_sub(u64::try_from(n).unwrap_or(0)),
        }
        .max(self.sampled_missing)
    }
}

/// Everything measured on one server.
pub(crate) struct Report {
    pub kind: ServerKind,
    pub command: String,
    pub snap_count: u64,
    /// `--snap-count` could not be passed (a Keeper build without it).
    pub snap_count_ignored: bool,
    pub empty_start: Option<Duration>,
    pub populate: Option<Duration>,
    pub created: u64,
    /// zxid of the last create, from the parent's pzxid.
    pub last_zxid: Option<i64>,
    pub snapshot: Option<DataFile>,
    pub layout: Option<Layout>,
    pub recovery: Option<Duration>,
    pub check: Option<Check>,
    pub errors: Vec<String>,
}

impl Report {
    fn new(kind: ServerKind, settings: &Settings) -> Report {
        Report {
            kind,
            command: settings.launcher.describe(kind),
            snap_count: snap_count_for(settings.znodes),
            snap_count_ignored: kind == ServerKind::Keeper
                && !settings.launcher.keeper_flags.snap_count,
            empty_start: None,
            populate: None,
            created: 0,
            last_zxid: None,
            snapshot: None,
            layout: None,
            recovery: None,
            check: None,
            errors: Vec::new(),
        }
    }

    /// Creates in the log after the snapshot, which recovery replays (sessions' own txns aside).
    pub(crate) fn log_tail_creates(&self) -> Option<i64> {
        datadir::txns_between(self.snapshot?.zxid, self.last_zxid?)
    }

    pub(crate) fn missing(&self) -> Option<u64> {
        self.check.as_ref().map(|c| c.missing(self.created))
    }
}

/// Runs the recovery benchmark on Keeper (and ZooKeeper with `peer`), prints it, and returns
/// its JSON. Fails (after printing) if a server lost acknowledged znodes or a step failed.
pub(crate) async fn run(settings: &Settings) -> Result<Json, BoxError> {
    let mut kinds = vec![ServerKind::Keeper];
    if settings.peer {
        kinds.push(ServerKind::Zookeeper);
    }
    println!(
        "recovery: {} znodes of {} bytes, snapshot every {} txns, then SIGKILL and restart",
        settings.znodes,
        settings.plan.data_size,
        snap_count_for(settings.znodes)
    );
    let mut reports = Vec::new();
    for kind in kinds {
        let mut report = Report::new(kind, settings);
        println!("{kind}: {}", report.command);
        if report.snap_count_ignored {
            println!(
                "{kind}: this build has no --snap-count flag (no snapshots, no log): \
                 expect everything to be lost at the restart"
            );
        }
        if let Err(e) = measure(settings, &mut report).await {
            report.errors.push(e.to_string());
        }
        reports.push(report);
    }
    print_table(settings, &reports);
    let json = to_json(settings, &reports);
    let mut failures = Vec::new();
    for r in &reports {
        for e in &r.errors {
            failures.push(format!("{} error: {e}", r.kind));
        }
        if let Some(missing) = r.missing().filter(|&m| m > 0) {
            failures.push(format!(
                "{}: {missing} of {} acknowledged znodes missing after the restart",
                r.kind, r.created
            ));
        }
    }
    super::report::json_or_partial(json, &failures, "")
}

async fn measure(settings: &Settings, report: &mut Report) -> Result<(), BoxError> {
    let kind = report.kind;
    let options = ServerOptions {
        snap_count: Some(report.snap_count),
        ..ServerOptions::default()
    };
    let mut server = ChildServer::spawn_with(kind, &settings.launcher, &options)?;
    let empty = first_session(&mut server, settings.startup_limit).await?;
    report.empty_start = Some(empty);
    println!(
        "{kind}: start on an empty data dir: {}",
        stats::fmt_duration(empty)
    );

    let mut plan = settings.plan.clone();
    plan.connect = server.addr().to_string();
    plan.server_pid = Some(server.pid());
    let mut namespace = Namespace::create(&plan).await?;
    let root = namespace.root().to_string();
    let parent = format!("{root}/mem");
    let probe = open_session(&plan.connect, plan.connect_timeout).await?;
    let before = probe
        .check_stat(&root)
        .await
        .map_err(|e| format!("stat {root}: {e}"))?
        .ok_or_else(|| format!("{root} vanished"))?
        .czxid;

    let populated = namespace
        .populate(
            settings.znodes,
            POPULATE_SESSIONS,
            settings.populate_limit,
            &plan,
            &format!("{kind} "),
        )
        .await;
    let populate = match populated {
        Ok(d) => d,
        Err(e) => {
            close_session(probe).await;
            namespace.close().await;
            return Err(e);
        }
    };
    report.populate = Some(populate);
    report.created = settings.znodes;
    println!(
        "{kind}: created {} znodes in {} ({:.0}/s)",
        settings.znodes,
        stats::fmt_duration(populate),
        settings.znodes as f64 / populate.as_secs_f64().max(1e-6)
    );
    let stat = probe
        .check_stat(&parent)
        .await
        .map_err(|e| format!("stat {parent}: {e}"))?;
    report.last_zxid = stat.map(|s| s.pzxid);
    close_session(probe).await;
    namespace.close().await;

    if report.snap_count_ignored {
        report.layout = Layout::scan(server.data_dir()).ok();
    } else {
        match wait_for_snapshot(&server, before, settings.snapshot_limit).await {
            Ok((snapshot, layout)) => {
                println!(
                    "{kind}: snapshot {} ({}) complete; data dir: snapshots {}, logs {} \
                     (log files are preallocated)",
                    fmt_zxid(snapshot.zxid),
                    fmt_bytes(snapshot.bytes),
                    fmt_bytes(layout.snapshot_bytes()),
                    fmt_bytes(layout.log_bytes())
                );
                report.snapshot = Some(snapshot);
                report.layout = Some(layout);
            }
            // Recovery from the log alone is still worth measuring; say why it is not the mix.
            Err(e) => {
                report.errors.push(e.to_string());
                report.layout = Layout::scan(server.data_dir()).ok();
            }
        }
    }

    server.crash_and_restart()?;
    let recovery = first_session(&mut server, settings.startup_limit).await?;
    report.recovery = Some(recovery);
    println!(
        "{kind}: SIGKILL, restart on the same data dir: first session after {}",
        stats::fmt_duration(recovery)
    );

    let check = check(
        &server.addr().to_string(),
        &parent,
        settings.znodes,
        &vec![b'x'; settings.plan.data_size],
        plan.connect_timeout,
    )
    .await?;
    match check.missing(settings.znodes) {
        0 => println!(
            "{kind}: all {} znodes back ({} read back and compared)",
            settings.znodes, check.sampled
        ),
        missing => println!(
            "{kind}: {missing} of {} acknowledged znodes MISSING after the restart ({}; {} of \
             {} sampled znodes missing, {} with other data{})",
            settings.znodes,
            match check.children {
                Some(n) => format!("{parent} has {n} children"),
                None => format!("{parent} itself is gone"),
            },
            check.sampled_missing,
            check.sampled,
            check.sampled_wrong_data,
            check
                .example_missing
                .as_deref()
                .map_or(String::new(), |p| format!(", e.g. {p}"))
        ),
    }
    report.check = Some(check);
    Ok(())
}

/// Waits until a complete snapshot taken after `after` exists, no snapshot is being written and
/// the file's size has stopped changing (ZooKeeper may write its snapshot in place).
async fn wait_for_snapshot(
    server: &ChildServer,
    after: i64,
    limit: Duration,
) -> Result<(DataFile, Layout), BoxError> {
    let deadline = Instant::now() + limit;
    let mut last: Option<DataFile> = None;
    loop {
        let layout = Layout::scan(server.data_dir())
            .map_err(|e| format!("reading {}: {e}", server.data_dir().display()))?;
        let newest = layout.newest_snapshot().filter(|s| s.zxid > after);
        if let Some(snapshot) = newest
            && layout.partial_snapshots.is_empty()
            && last == Some(snapshot)
        {
            return Ok((snapshot, layout));
        }
        last = newest;
        if Instant::now() >= deadline {
            return Err(format!(
                "no complete snapshot after {} (newest: {}); measuring recovery anyway",
                stats::fmt_duration(limit),
                layout
                    .newest_snapshot()
                    .map_or("none".to_string(), |s| fmt_zxid(s.zxid))
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Counts the children of `parent` and reads back a sample of `{parent}/z-<index>` for index in
/// `0..created`: the last ones (the log tail, where a loss would be), the first ones, and a
/// random spread.
pub(crate) async fn check(
    connect: &str,
    parent: &str,
    created: u64,
    data: &[u8],
    timeout: Duration,
) -> Result<Check, BoxError> {
    let client = open_session(connect, timeout).await?;
    let result = tokio::time::timeout(timeout, check_with(&client, parent, created, data)).await;
    close_session(client).await;
    match result {
        Ok(check) => check,
        Err(_) => Err(format!(
            "reading the znodes back took more than {}",
            stats::fmt_duration(timeout)
        )
        .into()),
    }
}

async fn check_with(
    client: &zk::Client,
    parent: &str,
    created: u64,
    data: &[u8],
) -> Result<Check, BoxError> {
    let mut check = Check {
        children: match client.check_stat(parent).await {
            Ok(stat) => stat.map(|s| i64::from(s.num_children)),
            Err(e) => return Err(format!("stat {parent}: {e}").into()),
        },
        ..Check::default()
    };
    let indices: BTreeSet<u64> = if created <= SAMPLE as u64 {
        (0..created).collect()
    } else {
        let mut chosen: BTreeSet<u64> = (created - 100..created).chain(0..10).collect();
        let mut rng = rand::thread_rng();
        // Bounded: with more candidates than SAMPLE, each draw is new with probability > 0.
        for _ in 0..SAMPLE * 100 {
            if chosen.len() >= SAMPLE {
                break;
            }
            chosen.insert(rng.gen_range(0..created));
        }
        chosen
    };
    let mut reads: FuturesUnordered<_> = indices
        .iter()
        .map(|i| {
            let path = format!("{parent}/z-{i:010}");
            let read = client.get_data(&path);
            async move { (path, read.await) }
        })
        .collect();
    while let Some((path, result)) = reads.next().await {
        check.sampled += 1;
        match result {
            Ok((got, _)) if got == data => {}
            Ok(_) => check.sampled_wrong_data += 1,
            Err(zk::Error::NoNode) => {
                check.sampled_missing += 1;
                if check.example_missing.is_none() {
                    check.example_missing = Some(path);
                }
            }
            Err(e) => return Err(format!("getData {path}: {e}").into()),
        }
    }
    Ok(check)
}

fn fmt_zxid(zxid: i64) -> String {
    format!("0x{zxid:x}")
}

fn fmt_bytes(bytes: u64) -> String {
    stats::fmt_kib(bytes.div_ceil(1024))
}

/// One line of the table: label, unit, Keeper's value, ZooKeeper's.
type Row = (String, Unit, (Option<f64>, Option<f64>));

fn print_table(settings: &Settings, reports: &[Report]) {
    let keeper = reports.iter().find(|r| r.kind == ServerKind::Keeper);
    let zookeeper = reports.iter().find(|r| r.kind == ServerKind::Zookeeper);
    let both = |f: &dyn Fn(&Report) -> Option<f64>| (keeper.and_then(f), zookeeper.and_then(f));
    let micros = |d: Option<Duration>| d.map(|d| d.as_micros() as f64);
    let rows: Vec<Row> = vec![
        (
            "start on an empty data dir".into(),
            Unit::Micros,
            both(&|r| micros(r.empty_start)),
        ),
        (
            format!("create {} znodes", settings.znodes),
            Unit::Micros,
            both(&|r| micros(r.populate)),
        ),
        (
            "snapshot size".into(),
            Unit::Bytes,
            both(&|r| r.snapshot.map(|s| s.bytes as f64)),
        ),
        (
            "creates in the log after the snapshot".into(),
            Unit::Count,
            both(&|r| r.log_tail_creates().map(|n| n as f64)),
        ),
        (
            "data dir size (log files preallocated)".into(),
            Unit::Bytes,
            both(&|r| {
                r.layout
                    .as_ref()
                    .map(|l| (l.snapshot_bytes() + l.log_bytes()) as f64)
            }),
        ),
        (
            "recovery: restart to first session".into(),
            Unit::Micros,
            both(&|r| micros(r.recovery)),
        ),
        (
            "znodes missing after the restart".into(),
            Unit::Count,
            both(&|r| r.missing().map(|m| m as f64)),
        ),
    ];
    println!();
    println!(
        "{:<44} {:>12} {:>12} {:>17}",
        "recovery figure", "Keeper", "ZooKeeper", "Keeper/ZooKeeper"
    );
    for (label, unit, (k, z)) in &rows {
        println!(
            "{:<44} {:>12} {:>12} {:>17}",
            label,
            unit.show(*k),
            unit.show(*z),
            stats::fmt_ratio(*k, *z)
        );
    }
    if let Some((report, recovery)) = keeper.and_then(|r| Some((r, r.recovery?))) {
        let target = Duration::from_secs(2);
        let assessment = if settings.znodes < 1_000_000 {
            "not assessed, fewer than 1M znodes"
        } else if recovery <= target && report.missing() == Some(0) {
            "met"
        } else {
            "MISSED"
        };
        match report.missing() {
            Some(0) => println!(
                "Keeper recovered {} znodes in {} (target: within {} for 1M znodes: {assessment})",
                settings.znodes,
                stats::fmt_duration(recovery),
                stats::fmt_duration(target),
            ),
            missing => println!(
                "Keeper restarted in {} but did not recover its znodes ({} missing; target: all \
                 of 1M within {}: {assessment})",
                stats::fmt_duration(recovery),
                missing.map_or("unknown".to_string(), |m| m.to_string()),
                stats::fmt_duration(target),
            ),
        }
    }
}

#[derive(Clone, Copy)]
enum Unit {
    Micros,
    Bytes,
    Count,
}

impl Unit {
    fn show(self, v: Option<f64>) -> String {
        match (v, self) {
            (None, _) => "-".into(),
            (Some(v), Unit::Micros) => stats::fmt_duration(Duration::from_micros(v as u64)),
            (Some(v), Unit::Bytes) => fmt_bytes(v as u64),
            (Some(v), Unit::Count) => format!("{v:.0}"),
        }
    }
}

fn to_json(settings: &Settings, reports: &[Report]) -> Json {
    let us = |d: Option<Duration>| Json::opt_num(d.map(|d| d.as_micros() as f64));
    let servers = reports
        .iter()
        .map(|r| {
            let check = r.check.as_ref();
            let body = Json::obj(vec![
                ("command", Json::Str(r.command.clone())),
                ("snap_count", Json::Num(r.snap_count as f64)),
                (
                    "snap_count_ignored",
                    Json::Str(r.snap_count_ignored.to_string()),
                ),
                ("empty_start_us", us(r.empty_start)),
                (
                    "populate_s",
                    Json::opt_num(r.populate.map(|d| d.as_secs_f64())),
                ),
                ("created", Json::Num(r.created as f64)),
                ("last_zxid", Json::opt_num(r.last_zxid.map(|z| z as f64))),
                (
                    "snapshot_zxid",
                    Json::opt_num(r.snapshot.map(|s| s.zxid as f64)),
                ),
                (
                    "snapshot_bytes",
                    Json::opt_num(r.snapshot.map(|s| s.bytes as f64)),
                ),
                (
                    "log_bytes",
                    Json::opt_num(r.layout.as_ref().map(|l| l.log_bytes() as f64)),
                ),
                (
                    "snapshots_bytes",
                    Json::opt_num(r.layout.as_ref().map(|l| l.snapshot_bytes() as f64)),
                ),
                (
                    "log_tail_creates",
                    Json::opt_num(r.log_tail_creates().map(|n| n as f64)),
                ),
                ("recovery_us", us(r.recovery)),
                (
                    "children_after_restart",
                    Json::opt_num(check.and_then(|c| c.children).map(|n| n as f64)),
                ),
                ("sampled", Json::opt_num(check.map(|c| c.sampled as f64))),
                (
                    "sampled_missing",
                    Json::opt_num(check.map(|c| c.sampled_missing as f64)),
                ),
                (
                    "sampled_wrong_data",
                    Json::opt_num(check.map(|c| c.sampled_wrong_data as f64)),
                ),
                ("missing", Json::opt_num(r.missing().map(|m| m as f64))),
                (
                    "errors",
                    Json::Arr(r.errors.iter().map(|e| Json::Str(e.clone())).collect()),
                ),
            ]);
            (r.kind.json_key().to_string(), body)
        })
        .collect();
    let recovery = |kind| {
        reports
            .iter()
            .find(|r| r.kind == kind)
            .and_then(|r| r.recovery)
            .map(|d| d.as_secs_f64())
    };
    Json::obj(vec![
        ("znodes", Json::Num(settings.znodes as f64)),
        ("data_size", Json::num(settings.plan.data_size as u32)),
        (
            "snap_count",
            Json::Num(snap_count_for(settings.znodes) as f64),
        ),
        ("servers", Json::Obj(servers)),
        (
            "recovery_ratio_keeper_over_zookeeper",
            Json::opt_num(stats::ratio(
                recovery(ServerKind::Keeper),
                recovery(ServerKind::Zookeeper),
            )),
        ),
    ])
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::workload::Plan;
    use lockkeeper_testkit::{Keeper, TestServer};

    #[test]
    fn snap_count_leaves_a_quarter_in_the_log() {
        assert_eq!(snap_count_for(1_000_000), 750_000);
        assert_eq!(snap_count_for(1000), 750);
        assert_eq!(snap_count_for(7), 5);
        assert_eq!(snap_count_for(1), 2, "ZooKeeper's floor");
    }

    #[test]
    fn missing_counts_the_parent_sample_and_absence() {
        let mut c = Check {
            children: Some(900),
            sampled: 100,
            sampled_missing: 3,
            ..Check::default()
        };
        assert_eq!(c.missing(1000), 100);
        c.children = Some(1000);
        // The count looks complete, but a sampled znode is gone (another took its place).
        assert_eq!(c.missing(1000), 3);
        c.children = None;
        assert_eq!(c.missing(1000), 1000);
    }

    fn quick_plan(connect: String) -> Plan {
        Plan {
            connect,
            duration: Duration::from_millis(300),
            warmup: Duration::ZERO,
            pipeline: 16,
            max_requests: 1_000_000,
            data_size: 16,
            connect_timeout: Duration::from_secs(60),
            progress: false,
            server_pid: None,
        }
    }

    /// A server that has lost everything (here: a fresh one) is reported as such, not crashed on.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn znodes_absent_after_a_restart_are_counted() {
        let server = Keeper::start();
        let plan = quick_plan(server.connect_string());
        let mut namespace = Namespace::create(&plan).await.expect("namespace");
        namespace
            .populate(300, 2, Duration::from_secs(60), &plan, "")
            .await
            .expect("populate");
        let parent = format!("{}/mem", namespace.root());
        let data = vec![b'x'; 16];
        let all = check(&plan.connect, &parent, 300, &data, Duration::from_secs(60))
            .await
            .expect("check");
        assert_eq!(all.children, Some(300));
        assert_eq!(
            all.sampled, 300,
            "fewer than the sample size: all read back"
        );
        assert_eq!(all.missing(300), 0);

        // Claiming more znodes than exist: the extra ones are missing, and found so.
        let short = check(&plan.connect, &parent, 400, &data, Duration::from_secs(60))
            .await
            .expect("check");
        assert_eq!(short.missing(400), 100);
        assert_eq!(
            short.sampled_missing, 100,
            "the last 100 are always sampled"
        );
        assert!(short.example_missing.is_some());
        // Other data than was written is noticed.
        let other = check(&plan.connect, &parent, 300, b"y", Duration::from_secs(60))
            .await
            .expect("check");
        assert_eq!(other.sampled_wrong_data, 300);
        // And a parent that does not exist at all means everything is missing.
        let gone = check(
            &plan.connect,
            "/no-such-parent",
            50,
            &data,
            Duration::from_secs(60),
        )
        .await
        .expect("check");
        assert_eq!(gone.children, None);
        assert_eq!(gone.missing(50), 50);
        namespace.remove(&plan).await.expect("remove");
    }

    /// The whole path on Apache ZooKeeper, whose log and snapshots are known to work: a small
    /// data set, a snapshot, SIGKILL, a restart that brings back every znode.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn apache_zookeeper_recovers_everything_after_sigkill() {
        let settings = Settings {
            znodes: 4000,
            plan: quick_plan(String::new()),
            launcher: crate::tests::launcher(),
            peer: true,
            populate_limit: Duration::from_secs(120),
            startup_limit: Duration::from_secs(60),
            snapshot_limit: Duration::from_secs(60),
        };
        let mut report = Report::new(ServerKind::Zookeeper, &settings);
        measure(&settings, &mut report)
            .await
            .expect("recovery measured");
        assert!(report.errors.is_empty(), "{:?}", report.errors);
        let snapshot = report.snapshot.expect("a snapshot was taken");
        assert!(snapshot.bytes > 0);
        let tail = report.log_tail_creates().expect("same epoch");
        assert!(tail < 4000, "log tail of {tail} creates");
        assert!(report.recovery.expect("recovered") > Duration::ZERO);
        let check = report.check.as_ref().expect("checked");
        assert_eq!(check.children, Some(4000));
        assert_eq!(report.missing(), Some(0));
        let json = to_json(&settings, std::slice::from_ref(&report)).render();
        assert!(json.contains("\"missing\": 0"), "{json}");
    }
}
