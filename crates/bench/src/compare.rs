//! `lockkeeper-bench --compare`: Keeper and Apache ZooKeeper measured in the same run, on the
//! same machine, by the same client, and printed side by side as ratios Keeper/ZooKeeper.
//!
//! Each server is started as a child process and goes through the same steps: time from spawn to
//! the first accepted session (several fresh starts, the median reported), every workload in
//! several trials (each figure the median over them, printed with its range), then resident
//! memory after bulk creating persistent znodes. Only one server is under load at any moment,
//! and the steps alternate between the servers, every other trial in reverse order (see
//! [`measure_all`]).
//!
//! Ratios rather than absolute numbers are the claim, because only a ratio measured in one run
//! on one machine means anything elsewhere.

use std::time::Duration;

use super::BoxError;
use super::process::{ChildServer, Launcher, ServerKind};
use super::report::{Partial, Spread};
use super::startup::first_session;
use super::stats::{self, Json, RunStats};
use super::workload::{Namespace, Plan, Workload};

/// What `--compare` does besides the workloads, from the command line.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    pub plan: Plan,
    pub workloads: Vec<Workload>,
    pub sessions: Vec<usize>,
    pub servers: Vec<ServerKind>,
    pub launcher: Launcher,
    pub startup_trials: usize,
    /// Trials of every workload on every server; each figure is the median over them.
    pub workload_trials: usize,
    /// Bound on one server's start-up, from spawn to first session.
    pub startup_limit: Duration,
    pub rss_znodes: u64,
    /// Bound on creating the `rss_znodes` znodes.
    pub populate_limit: Duration,
}

/// Sessions used to create the znodes of the memory figure.
const POPULATE_SESSIONS: usize = 4;

/// Everything measured on one server. A figure that could not be taken is `None` (or an `Err`
/// run) and the reason is in `errors`, so one failing step does not hide the others.
pub(crate) struct ServerReport {
    pub kind: ServerKind,
    pub command: String,
    pub startup: Vec<Duration>,
    pub rss_idle_kib: Option<u64>,
    pub rss_loaded_kib: Option<u64>,
    /// RSS with the znodes once garbage is collected: after `jcmd PID GC.run` on a JVM, a
    /// second later on Keeper (which has no collector; the figure is taken the same way).
    pub rss_collected_kib: Option<u64>,
    pub populate_time: Option<Duration>,
    /// Bytes in the data directory once every write was answered.
    pub data_dir_bytes: Option<u64>,
    pub runs: Vec<(Workload, usize, Result<RunStats, String>)>,
    pub errors: Vec<String>,
}

impl ServerReport {
    fn new(kind: ServerKind, command: String) -> ServerReport {
        ServerReport {
            kind,
            command,
            startup: Vec::new(),
            rss_idle_kib: None,
            rss_loaded_kib: None,
            rss_collected_kib: None,
            populate_time: None,
            data_dir_bytes: None,
            runs: Vec::new(),
            errors: Vec::new(),
        }
    }

    /// The spread over the trials of `figure` of the runs of `workload` with `sessions`.
    fn spread(
        &self,
        workload: Workload,
        sessions: usize,
        figure: impl Fn(&RunStats) -> Option<f64>,
    ) -> Option<Spread> {
        Spread::of(
            self.runs
                .iter()
                .filter(|(w, s, _)| *w == workload && *s == sessions)
                .filter_map(|(_, _, r)| r.as_ref().ok())
                .filter_map(figure),
        )
    }

    fn startup_median(&self) -> Option<Duration> {
        stats::median(&self.startup)
    }
}

/// One server under comparison while it is being measured.
struct Contender {
    report: ServerReport,
    server: Option<ChildServer>,
    namespace: Option<Namespace>,
    plan: Plan,
}

impl Contender {
    /// Records an error that makes this server's remaining figures impossible.
    fn fail(&mut self, error: String) {
        self.report.errors.push(error);
        self.namespace = None;
        self.server = None;
    }
}

/// Takes every figure on every server in `settings.servers`.
///
/// Steps are interleaved (start-up trial 1 of each server, then trial 2, ...; each workload on
/// each server in turn), so that a change in the machine's load during the benchmark, such as
/// another process compiling, weighs on both sides alike instead of on whichever ran at that
/// moment. While one server is measured the other is up but idle. An error that makes a server's
/// remaining figures impossible (it does not start) is recorded and that server sits out the rest.
async fn measure_all(settings: &Settings) -> Vec<ServerReport> {
    let mut contenders: Vec<Contender> = settings
        .servers
        .iter()
        .map(|&kind| {
            let report = ServerReport::new(kind, settings.launcher.describe(kind));
            println!("{kind}: {}", report.command);
            Contender {
                report,
                server: None,
                namespace: None,
                plan: settings.plan.clone(),
            }
        })
        .collect();

    // Fresh processes with fresh data directories. Each is stopped right after its figure,
    // except in the last trial, whose servers stay up for the rest.
    println!();
    let trials = settings.startup_trials.max(1);
    for trial in 0..trials {
        for c in &mut contenders {
            if !c.report.errors.is_empty() {
                continue;
            }
            let kind = c.report.kind;
            let mut child = match ChildServer::spawn(kind, &settings.launcher) {
                Ok(child) => child,
                Err(e) => {
                    c.fail(e.to_string());
                    continue;
                }
            };
            match first_session(&mut child, settings.startup_limit).await {
                Ok(d) => {
                    println!(
                        "{kind}: start to first session, trial {}: {}",
                        trial + 1,
                        stats::fmt_duration(d)
                    );
                    c.report.startup.push(d);
                    if trial + 1 == trials {
                        c.server = Some(child);
                    }
                }
                Err(e) => c.fail(e.to_string()),
            }
        }
    }

    // Let a freshly started JVM finish its start-up allocations before the idle figure.
    tokio::time::sleep(Duration::from_millis(500)).await;
    for c in &mut contenders {
        let Some(server) = &c.server else { continue };
        c.report.rss_idle_kib = take_rss(server, &mut c.report.errors);
        c.plan.connect = server.addr().to_string();
        c.plan.server_pid = Some(server.pid());
        match Namespace::create(&c.plan).await {
            Ok(ns) => c.namespace = Some(ns),
            Err(e) => c.fail(e.to_string()),
        }
    }

    if contenders.iter().any(|c| c.namespace.is_some()) {
        println!("\n{:<10} {}", "server", stats::run_header());
    }
    for trial in 0..settings.workload_trials.max(1) {
        for &workload in &settings.workloads {
            for &sessions in &settings.sessions {
                if trial % 2 == 1 {
                    contenders.reverse();
                }
                run_on_each(&mut contenders, workload, sessions).await;
                if trial % 2 == 1 {
                    contenders.reverse();
                }
            }
        }
    }

    println!();
    for c in &mut contenders {
        let (Some(server), Some(namespace)) = (&c.server, &mut c.namespace) else {
            continue;
        };
        let kind = c.report.kind;
        if settings.rss_znodes > 0 {
            let populated = namespace
                .populate(
                    settings.rss_znodes,
                    POPULATE_SESSIONS,
                    settings.populate_limit,
                    &c.plan,
                    &format!("{kind} "),
                )
                .await;
            match populated {
                Ok(d) => {
                    c.report.populate_time = Some(d);
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    c.report.rss_loaded_kib = take_rss(server, &mut c.report.errors);
                    if kind == ServerKind::Zookeeper
                        && let Err(e) = full_gc(server.pid()).await
                    {
                        c.report.errors.push(e);
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    c.report.rss_collected_kib = take_rss(server, &mut c.report.errors);
                }
                Err(e) => c.report.errors.push(e.to_string()),
            }
        }
        match server.data_dir_bytes() {
            Ok(bytes) => c.report.data_dir_bytes = Some(bytes),
            Err(e) => c
                .report
                .errors
                .push(format!("reading {kind}'s data directory: {e}")),
        }
        println!(
            "{kind}: RSS {} after start, {} with {} znodes of {} bytes ({} after a full GC)",
            c.report.rss_idle_kib.map_or("-".into(), stats::fmt_kib),
            c.report.rss_loaded_kib.map_or("-".into(), stats::fmt_kib),
            settings.rss_znodes,
            c.plan.data_size,
            c.report
                .rss_collected_kib
                .map_or("-".into(), stats::fmt_kib),
        );
        // The server and its data directory go away here; nothing to clean up remotely.
        if let Some(namespace) = c.namespace.take() {
            namespace.close().await;
        }
        c.server = None;
    }
    contenders.into_iter().map(|c| c.report).collect()
}

/// One run of `workload` with `sessions` on each contender in turn, in the order given.
async fn run_on_each(contenders: &mut [Contender], workload: Workload, sessions: usize) {
    for c in contenders {
        let Some(namespace) = &c.namespace else {
            continue;
        };
        let kind = c.report.kind;
        let result = namespace
            .run(workload, sessions, &c.plan, &format!("{kind} "))
            .await;
        match &result {
            Ok(s) => println!("{:<10} {}", kind.name(), stats::run_row(s)),
            Err(e) => println!(
                "{:<10} {:<16} {:>8}  error: {e}",
                kind.name(),
                workload.name(),
                sessions
            ),
        }
        c.report
            .runs
            .push((workload, sessions, result.map_err(|e| e.to_string())));
    }
}

/// Asks the JVM at `pid` for a full collection (`jcmd PID GC.run`, which runs `System.gc()`;
/// G1 then gives the freed heap back to the OS), bounded in time.
async fn full_gc(pid: u32) -> Result<(), String> {
    let run = tokio::process::Command::new("jcmd")
        .arg(pid.to_string())
        .arg("GC.run")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .output();
    match tokio::time::timeout(Duration::from_secs(60), run).await {
        Err(_) => Err(format!("jcmd {pid} GC.run took over 60 s")),
        Ok(Err(e)) => Err(format!("jcmd {pid} GC.run: {e} (jcmd comes with the JDK)")),
        Ok(Ok(out)) if !out.status.success() => Err(format!(
            "jcmd {pid} GC.run: {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )),
        Ok(Ok(_)) => Ok(()),
    }
}

fn take_rss(server: &ChildServer, errors: &mut Vec<String>) -> Option<u64> {
    match server.rss_kib() {
        Ok(kib) => Some(kib),
        Err(e) => {
            errors.push(format!("reading RSS of {}: {e}", server.kind()));
            None
        }
    }
}

/// Runs the comparison and prints it; returns the JSON document for `--json`.
pub(crate) async fn compare(settings: &Settings) -> Result<Json, BoxError> {
    let reports = measure_all(settings).await;
    let keeper = reports.iter().find(|r| r.kind == ServerKind::Keeper);
    let zookeeper = reports.iter().find(|r| r.kind == ServerKind::Zookeeper);
    let rows = figures(settings, keeper, zookeeper);

    // A table of dashes only hides the errors below it.
    if rows
        .iter()
        .any(|r| r.keeper.is_some() || r.zookeeper.is_some())
    {
        println!();
        println!(
            "\nmedian (min–max) over {} trials of each workload",
            settings.workload_trials.max(1)
        );
        println!(
            "{:<44} {:>26} {:>26} {:>17}",
            "figure", "Keeper", "ZooKeeper", "Keeper/ZooKeeper"
        );
        for row in &rows {
            println!(
                "{:<44} {:>26} {:>26} {:>17}",
                row.label,
                row.show(row.keeper),
                row.show(row.zookeeper),
                stats::fmt_ratio(row.median(row.keeper), row.median(row.zookeeper))
            );
        }
    }
    let mut failed = false;
    for report in &reports {
        for e in &report.errors {
            failed = true;
            eprintln!("{} error: {e}", report.kind);
        }
        for (w, s, r) in &report.runs {
            if let Err(e) = r {
                failed = true;
                eprintln!("{} error in {} x{s}: {e}", report.kind, w.name());
            }
        }
    }

    let notes = caveats(&reports);
    for note in &notes {
        println!("note: {note}");
    }

    let json = to_json(settings, &reports, &rows, &notes);
    if failed {
        // Still hand back the JSON of what was measured, then report failure.
        return Err(Box::new(Partial::new(json)));
    }
    Ok(json)
}

/// Conditions under which a ratio would mislead, stated next to the figures.
fn caveats(reports: &[ServerReport]) -> Vec<String> {
    let mut notes = Vec::new();
    for r in reports {
        let wrote = r.populate_time.is_some()
            || r.runs.iter().any(|(w, _, run)| {
                *w == Workload::CreateDelete && run.as_ref().is_ok_and(|s| s.requests > 0)
            });
        if wrote && r.data_dir_bytes == Some(0) {
            notes.push(format!(
                "{} wrote nothing to its data directory, so its writes were not durable: write \
                 figures are not like for like with a server that logs them to disk",
                r.kind
            ));
        }
    }
    notes
}

/// How a figure's values are shown.
#[derive(Clone, Copy)]
enum Unit {
    Micros,
    /// Fractional microseconds of CPU time.
    CpuMicros,
    Rate,
    Kib,
}

/// One line of the side-by-side table: each server's figure over its trials (one value for
/// the figures taken once, or already a median, as the start-up time).
struct Figure {
    label: String,
    key: String,
    unit: Unit,
    keeper: Option<Spread>,
    zookeeper: Option<Spread>,
}

impl Figure {
    fn median(&self, v: Option<Spread>) -> Option<f64> {
        v.map(|s| s.median)
    }

    fn value(&self, v: f64) -> String {
        match self.unit {
            Unit::Micros => stats::fmt_duration(Duration::from_micros(v as u64)),
            Unit::CpuMicros => format!("{v:.1}us"),
            Unit::Rate => format!("{v:.0}/s"),
            Unit::Kib => stats::fmt_kib(v as u64),
        }
    }

    /// The median, and the range when there were several trials.
    fn show(&self, v: Option<Spread>) -> String {
        match v {
            None => "-".to_string(),
            Some(s) if s.n == 1 => self.value(s.median),
            Some(s) => s.fmt(|v| self.value(v)),
        }
    }
}

/// A figure taken once.
fn once(v: Option<f64>) -> Option<Spread> {
    v.and_then(|v| Spread::of([v]))
}

fn figures(
    settings: &Settings,
    keeper: Option<&ServerReport>,
    zookeeper: Option<&ServerReport>,
) -> Vec<Figure> {
    let both =
        |f: &dyn Fn(&ServerReport) -> Option<Spread>| (keeper.and_then(f), zookeeper.and_then(f));
    let mut rows = Vec::new();
    let mut push =
        |label: String, key: String, unit: Unit, (k, z): (Option<Spread>, Option<Spread>)| {
            rows.push(Figure {
                label,
                key,
                unit,
                keeper: k,
                zookeeper: z,
            });
        };
    push(
        format!(
            "start to first session (median of {})",
            settings.startup_trials.max(1)
        ),
        "start_to_first_session_us".into(),
        Unit::Micros,
        both(&|r| once(r.startup_median().map(|d| d.as_micros() as f64))),
    );
    for &w in &settings.workloads {
        for &s in &settings.sessions {
            let name = format!("{} x{s}", w.name());
            push(
                format!("{name}: ops/s"),
                format!("{name} ops_per_sec"),
                Unit::Rate,
                both(&|r| r.spread(w, s, |x| Some(x.ops_per_sec()))),
            );
            push(
                format!("{name}: p99 latency"),
                format!("{name} p99_us"),
                Unit::Micros,
                both(&|r| r.spread(w, s, |x| Some(x.quantile(0.99).as_micros() as f64))),
            );
            push(
                format!("{name}: server CPU per request"),
                format!("{name} server_cpu_us_per_request"),
                Unit::CpuMicros,
                both(&|r| r.spread(w, s, RunStats::server_cpu_us_per_request)),
            );
        }
    }
    push(
        "RSS after start".into(),
        "rss_idle_kib".into(),
        Unit::Kib,
        both(&|r| once(r.rss_idle_kib.map(|v| v as f64))),
    );
    push(
        format!(
            "RSS with {} znodes of {} B",
            settings.rss_znodes, settings.plan.data_size
        ),
        "rss_loaded_kib".into(),
        Unit::Kib,
        both(&|r| once(r.rss_loaded_kib.map(|v| v as f64))),
    );
    push(
        format!(
            "RSS with {} znodes of {} B, after a full GC",
            settings.rss_znodes, settings.plan.data_size
        ),
        "rss_collected_kib".into(),
        Unit::Kib,
        both(&|r| once(r.rss_collected_kib.map(|v| v as f64))),
    );
    rows
}

fn to_json(
    settings: &Settings,
    reports: &[ServerReport],
    rows: &[Figure],
    notes: &[String],
) -> Json {
    let plan = &settings.plan;
    let servers = reports
        .iter()
        .map(|r| {
            let runs = r
                .runs
                .iter()
                .map(|(w, s, res)| match res {
                    Ok(stats) => stats::run_json(stats),
                    Err(e) => Json::obj(vec![
                        ("workload", Json::Str(w.name().into())),
                        ("sessions", Json::num(*s as u32)),
                        ("error", Json::Str(e.clone())),
                    ]),
                })
                .collect();
            let body = Json::obj(vec![
                ("command", Json::Str(r.command.clone())),
                (
                    "start_to_first_session_us",
                    Json::Arr(
                        r.startup
                            .iter()
                            .map(|d| Json::Num(d.as_micros() as f64))
                            .collect(),
                    ),
                ),
                (
                    "start_to_first_session_median_us",
                    Json::opt_num(r.startup_median().map(|d| d.as_micros() as f64)),
                ),
                (
                    "rss_idle_kib",
                    Json::opt_num(r.rss_idle_kib.map(|v| v as f64)),
                ),
                (
                    "rss_loaded_kib",
                    Json::opt_num(r.rss_loaded_kib.map(|v| v as f64)),
                ),
                (
                    "populate_s",
                    Json::opt_num(r.populate_time.map(|d| d.as_secs_f64())),
                ),
                (
                    "data_dir_bytes",
                    Json::opt_num(r.data_dir_bytes.map(|v| v as f64)),
                ),
                ("runs", Json::Arr(runs)),
                (
                    "errors",
                    Json::Arr(r.errors.iter().map(|e| Json::Str(e.clone())).collect()),
                ),
            ]);
            (r.kind.json_key().to_string(), body)
        })
        .collect();
    let ratios = rows
        .iter()
        .map(|f| {
            (
                f.key.clone(),
                Json::opt_num(stats::ratio(f.median(f.keeper), f.median(f.zookeeper))),
            )
        })
        .collect();
    Json::obj(vec![
        (
            "command",
            Json::Str(std::env::args().collect::<Vec<_>>().join(" ")),
        ),
        (
            "settings",
            Json::obj(vec![
                ("duration_s", Json::num(plan.duration.as_secs_f64())),
                ("warmup_s", Json::num(plan.warmup.as_secs_f64())),
                ("pipeline", Json::num(plan.pipeline as u32)),
                ("max_ops", Json::Num(plan.max_requests as f64)),
                ("data_size", Json::num(plan.data_size as u32)),
                ("rss_znodes", Json::Num(settings.rss_znodes as f64)),
                ("startup_trials", Json::num(settings.startup_trials as u32)),
                (
                    "workload_trials",
                    Json::num(settings.workload_trials as u32),
                ),
                (
                    "zookeeper_force_sync",
                    Json::Str(
                        if settings.launcher.zookeeper_force_sync {
                            "yes"
                        } else {
                            "no"
                        }
                        .into(),
                    ),
                ),
                (
                    "cpus",
                    Json::num(
                        std::thread::available_parallelism().map_or(0, std::num::NonZero::get)
                            as u32,
                    ),
                ),
            ]),
        ),
        ("servers", Json::Obj(servers)),
        ("ratios_keeper_over_zookeeper", Json::Obj(ratios)),
        (
            "notes",
            Json::Arr(notes.iter().map(|n| Json::Str(n.clone())).collect()),
        ),
    ])
}

#[cfg(test)]
mod tests {

    use super::*;

    /// The whole `--compare` path on Apache ZooKeeper (Debian's jars and Java, which the test
    /// script installs), with tiny durations.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn measures_apache_zookeeper_end_to_end() {
        let settings = Settings {
            plan: Plan {
                connect: String::new(),
                duration: Duration::from_millis(300),
                warmup: Duration::from_millis(100),
                pipeline: 16,
                max_requests: 1_000_000,
                data_size: 16,
                connect_timeout: Duration::from_secs(60),
                progress: false,
                server_pid: None,
            },
            workloads: vec![Workload::CreateDelete, Workload::Get],
            sessions: vec![2],
            servers: vec![ServerKind::Zookeeper],
            launcher: crate::tests::launcher(),
            startup_trials: 1,
            workload_trials: 2,
            startup_limit: Duration::from_secs(60),
            rss_znodes: 1000,
            populate_limit: Duration::from_secs(60),
        };
        let mut reports = measure_all(&settings).await;
        assert_eq!(reports.len(), 1);
        let report = reports.remove(0);
        assert!(report.errors.is_empty(), "{:?}", report.errors);
        assert_eq!(report.startup.len(), 1);
        assert!(report.startup[0] > Duration::ZERO);
        assert_eq!(report.runs.len(), 4, "two trials of two workloads");
        for (workload, sessions, run) in &report.runs {
            let run = run.as_ref().expect("run succeeded");
            assert_eq!((*workload, *sessions), (run.workload, run.sessions));
            assert!(run.requests > 0, "{} made no requests", workload.name());
            assert_eq!(run.latency.len(), run.requests);
            assert!(run.server_cpu.expect("server CPU") > Duration::ZERO);
        }
        assert!(report.rss_idle_kib.expect("idle RSS") > 1024);
        assert!(report.rss_loaded_kib.expect("loaded RSS") > 1024);
        // After `jcmd GC.run` the JVM still holds its heap's live part and its own code.
        assert!(report.rss_collected_kib.expect("RSS after a full GC") > 1024);
        assert!(report.populate_time.is_some());
        // ZooKeeper logs every write: its data directory cannot be empty after them.
        assert!(report.data_dir_bytes.expect("data dir size") > 0);
        assert!(caveats(std::slice::from_ref(&report)).is_empty());

        // The side-by-side figures use what was measured, and no ratio without Keeper.
        let rows = figures(&settings, None, Some(&report));
        assert_eq!(rows.len(), 1 + 2 * 3 + 3);
        assert!(
            rows.iter()
                .all(|f| f.zookeeper.is_some() && f.keeper.is_none())
        );
        let ops = rows
            .iter()
            .find(|f| f.key == "create-delete x2 ops_per_sec")
            .and_then(|f| f.zookeeper)
            .expect("create-delete ops/s");
        assert_eq!(ops.n, 2, "the median of both trials");
        let json = to_json(&settings, std::slice::from_ref(&report), &rows, &[]).render();
        assert!(json.contains("\"zookeeper\""), "{json}");
        assert!(
            json.contains("\"create-delete x2 ops_per_sec\": null"),
            "{json}"
        );
    }

    #[test]
    fn a_server_that_wrote_nothing_to_disk_is_called_out() {
        let mut latency = stats::new_histogram();
        stats::record(&mut latency, Duration::from_micros(10));
        let run = RunStats {
            workload: Workload::CreateDelete,
            sessions: 1,
            pipeline: 1,
            requests: 1,
            elapsed: Duration::from_secs(1),
            latency,
            server_cpu: None,
        };
        let mut report = ServerReport::new(ServerKind::Keeper, "keeper".into());
        report.runs.push((Workload::CreateDelete, 1, Ok(run)));
        report.data_dir_bytes = Some(0);
        let notes = caveats(std::slice::from_ref(&report));
        assert_eq!(notes.len(), 1);
        assert!(notes[0].starts_with("Keeper wrote nothing"), "{}", notes[0]);
        report.data_dir_bytes = Some(4096);
        assert!(caveats(std::slice::from_ref(&report)).is_empty());
    }
}
