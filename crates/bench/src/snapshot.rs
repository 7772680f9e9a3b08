//! `lockkeeper-bench --snapshot-latency N`: request latency while Keeper writes a snapshot of N
//! znodes, against the latency just before, in the same run.
//!
//! Keeper starts with N znodes created and `--snap-count` set so that the snapshot begins a known
//! number of writes into a steady, paced getData/setData mix (see [`super::paced`]): the writes
//! before it make the baseline window, then the snapshot is written while the mix goes on. A
//! thread polls the data directory every millisecond for `snapshot.<zxid>.tmp` to appear and for
//! the renamed `snapshot.<zxid>` to take its place; each request is then counted as before,
//! during (its send-to-reply interval overlaps the snapshot) or after. The server is never
//! restarted: the snapshot measured is the background one a running server takes.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use super::BoxError;
use super::datadir::{DataFile, Layout};
use super::paced::{self, Pace, Progress, Sample, WRITE_EVERY};
use super::process::{ChildServer, Launcher, ServerKind, ServerOptions};
use super::startup::first_session;
use super::stats::{self, Json};
use super::workload::{Namespace, Plan, close_session, open_session};

/// Sessions creating the znodes.
const POPULATE_SESSIONS: usize = 4;

/// How long the mix goes on after the snapshot is complete.
const TAIL: Duration = Duration::from_secs(1);

/// How often the data directory is looked at.
const POLL: Duration = Duration::from_millis(1);

/// The target: p99 while a snapshot is written at most this many times the p99 without one.
const TARGET_RATIO: f64 = 2.0;

/// What `--snapshot-latency` does, from the command line.
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    pub znodes: u64,
    pub plan: Plan,
    pub launcher: Launcher,
    pub sessions: usize,
    /// Requests per second of the mix, over all sessions.
    pub rate: f64,
    /// Start of the mix left out of every window.
    pub warmup: Duration,
    /// Length of the baseline window before the snapshot.
    pub window: Duration,
    pub populate_limit: Duration,
    pub startup_limit: Duration,
    /// Bound on the snapshot: on waiting for it to begin (past when it is due) and to end.
    pub snapshot_limit: Duration,
}

impl Settings {
    /// setData requests of the warm-up and the baseline window.
    fn baseline_writes(&self) -> u64 {
        (self.rate / WRITE_EVERY as f64 * (self.warmup + self.window).as_secs_f64()).ceil() as u64
    }

    /// The snapshot interval: the population, the baseline writes, and room for the txns the
    /// benchmark's own sessions make (create and close of a session are txns too). The exact
    /// remainder is computed from the zxid once the znodes exist.
    fn snap_count(&self) -> u64 {
        self.znodes + self.baseline_writes() + 64 + 2 * (POPULATE_SESSIONS + self.sessions) as u64
    }
}

/// Latencies of one window, all requests and by kind.
pub(crate) struct Window {
    pub all: Histogram<u64>,
    pub reads: Histogram<u64>,
    pub writes: Histogram<u64>,
}

impl Window {
    fn new() -> Window {
        Window {
            all: stats::new_histogram(),
            reads: stats::new_histogram(),
            writes: stats::new_histogram(),
        }
    }

    fn record(&mut self, s: &Sample) {
        let d = Duration::from_micros(s.latency_us);
        stats::record(&mut self.all, d);
        stats::record(
            if s.write {
                &mut self.writes
            } else {
                &mut self.reads
            },
            d,
        );
    }

    fn p99(&self) -> Option<f64> {
        (!self.all.is_empty()).then(|| self.all.value_at_quantile(0.99) as f64)
    }
}

/// The mix cut at the snapshot.
pub(crate) struct Windows {
    pub before: Window,
    pub during: Window,
    pub after: Window,
}

/// Sorts the samples into windows. Requests sent during the warm-up are left out. With a
/// snapshot `(begin, end)` (microseconds since the run's origin), a request whose interval from
/// send to reply overlaps it counts as during; without one, everything counts as before.
pub(crate) fn classify(
    samples: &[Sample],
    warmup_us: u64,
    snapshot: Option<(u64, u64)>,
) -> Windows {
    let mut w = Windows {
        before: Window::new(),
        during: Window::new(),
        after: Window::new(),
    };
    for s in samples.iter().filter(|s| s.sent_us >= warmup_us) {
        let window = match snapshot {
            None => &mut w.before,
            Some((begin, _)) if s.done_us() < begin => &mut w.before,
            Some((_, end)) if s.sent_us > end => &mut w.after,
            Some(_) => &mut w.during,
        };
        window.record(s);
    }
    w
}

/// Width of the time slices in which the slowest moments of the run are looked for.
const SLICE: Duration = Duration::from_millis(25);

/// One stretch of the run where requests were slow: where it was relative to the snapshot's
/// start (by send time), and the worst latency of the requests sent in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Slice {
    pub offset_ms: i64,
    pub max_us: u64,
    pub requests: u64,
}

/// The `n` slices of width `slice` with the highest worst latency, after the warm-up. Knowing
/// *when* requests stalled (as the snapshot starts, while the tree is walked, when the file is
/// synced) says more about the cause than a quantile does.
pub(crate) fn slowest_slices(
    samples: &[Sample],
    warmup_us: u64,
    begin_us: u64,
    slice: Duration,
    n: usize,
) -> Vec<Slice> {
    let width = (slice.as_micros() as i64).max(1);
    let mut slices: std::collections::BTreeMap<i64, Slice> = std::collections::BTreeMap::new();
    for s in samples.iter().filter(|s| s.sent_us >= warmup_us) {
        let offset = (s.sent_us as i64 - begin_us as i64).div_euclid(width) * width / 1000;
        let entry = slices.entry(offset).or_insert(Slice {
            offset_ms: offset,
            max_us: 0,
            requests: 0,
        });
        entry.max_us = entry.max_us.max(s.latency_us);
        entry.requests += 1;
    }
    let mut worst: Vec<Slice> = slices.into_values().collect();
    worst.sort_by(|a, b| b.max_us.cmp(&a.max_us).then(a.offset_ms.cmp(&b.offset_ms)));
    worst.truncate(n);
    worst
}

/// What the watcher saw of the first new snapshot.
#[derive(Clone, Debug, Default)]
pub(crate) struct Observed {
    pub began: Option<Instant>,
    pub ended: Option<Instant>,
    pub snapshot: Option<DataFile>,
    /// A `.tmp` file was seen (otherwise the snapshot was written between two polls).
    pub saw_partial: bool,
    pub problem: Option<String>,
}

impl Observed {
    /// Takes in one poll of the directory. `known` are the snapshots that existed beforehand,
    /// `previous` the time of the poll before, when nothing had happened yet.
    fn observe(&mut self, layout: &Layout, known: &[i64], now: Instant, previous: Instant) {
        if self.ended.is_some() {
            return;
        }
        let partial = !layout.partial_snapshots.is_empty();
        let new = layout
            .snapshots
            .iter()
            .rev()
            .find(|s| !known.contains(&s.zxid))
            .copied();
        if self.began.is_none() {
            if partial {
                self.began = Some(now);
                self.saw_partial = true;
            } else if new.is_some() {
                self.began = Some(previous);
            }
        }
        if self.began.is_some() && !partial {
            if let Some(s) = new {
                self.ended = Some(now);
                self.snapshot = Some(s);
            } else if self.saw_partial {
                self.ended = Some(now);
                self.problem = Some("the snapshot's .tmp file went away without a snapshot".into());
            }
        }
    }
}

/// A thread polling a data directory until the first new snapshot is complete; stopped and
/// joined on drop.
struct SnapshotWatch {
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<Observed>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl SnapshotWatch {
    fn start(dir: PathBuf, known: Vec<i64>, deadline: Instant) -> std::io::Result<SnapshotWatch> {
        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new(Observed::default()));
        let thread = {
            let (stop, seen) = (stop.clone(), seen.clone());
            std::thread::Builder::new()
                .name("snapshot-watch".into())
                .spawn(move || {
                    let mut previous = Instant::now();
                    while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                        let now = Instant::now();
                        let done = match Layout::scan(&dir) {
                            Ok(layout) => {
                                let mut seen = seen
                                    .lock()
                                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                                seen.observe(&layout, &known, now, previous);
                                seen.ended.is_some()
                            }
                            Err(e) => {
                                let mut seen = seen
                                    .lock()
                                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                                seen.problem = Some(format!("reading {}: {e}", dir.display()));
                                true
                            }
                        };
                        if done {
                            break;
                        }
                        previous = now;
                        std::thread::sleep(POLL);
                    }
                })?
        };
        Ok(SnapshotWatch {
            stop,
            seen,
            thread: Some(thread),
        })
    }

    fn seen(&self) -> Observed {
        self.seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

impl Drop for SnapshotWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Everything the benchmark found.
pub(crate) struct Report {
    pub command: String,
    pub snap_count: Option<u64>,
    pub populate: Option<Duration>,
    /// setData requests expected before the snapshot, from the zxid once the znodes existed.
    pub writes_due: Option<u64>,
    /// setData requests answered when the snapshot was first seen.
    pub writes_at_begin: Option<u64>,
    pub observed: Observed,
    pub origin: Option<Instant>,
    pub windows: Option<Windows>,
    pub fell_behind: u64,
    /// The slowest moments of the run, relative to the snapshot's start.
    pub slowest: Vec<Slice>,
    pub notes: Vec<String>,
}

impl Report {
    fn snapshot_time(&self) -> Option<Duration> {
        Some(self.observed.ended? - self.observed.began?)
    }

    fn ratio(&self) -> Option<f64> {
        let w = self.windows.as_ref()?;
        stats::ratio(w.during.p99(), w.before.p99())
    }
}

/// Runs the benchmark, prints it and returns its JSON; fails when no snapshot could be measured.
pub(crate) async fn run(settings: &Settings) -> Result<Json, BoxError> {
    let mut report = Report {
        command: settings.launcher.describe(ServerKind::Keeper),
        snap_count: settings
            .launcher
            .keeper_flags
            .snap_count
            .then(|| settings.snap_count()),
        populate: None,
        writes_due: None,
        writes_at_begin: None,
        observed: Observed::default(),
        origin: None,
        windows: None,
        fell_behind: 0,
        slowest: Vec::new(),
        notes: Vec::new(),
    };
    println!(
        "snapshot latency: Keeper with {} znodes of {} bytes; {} sessions send {:.0} requests/s \
         (1 setData in {WRITE_EVERY}, the rest getData, on random znodes)",
        settings.znodes, settings.plan.data_size, settings.sessions, settings.rate
    );
    println!("Keeper: {}", report.command);
    match report.snap_count {
        Some(s) => println!(
            "Keeper: --snap-count {s}: the first snapshot begins about {} writes into the mix",
            s - settings.znodes
        ),
        None => report.notes.push(
            "this Keeper build has no --snap-count flag (no snapshots): only the baseline is \
             measured"
                .into(),
        ),
    }
    let outcome = measure(settings, &mut report).await;
    print_report(settings, &report);
    let json = to_json(settings, &report);
    let mut failures: Vec<String> = Vec::new();
    if let Err(e) = outcome {
        failures.push(e.to_string());
    }
    if report.observed.ended.is_none() {
        failures.push("no snapshot was measured".into());
    }
    if let Some(problem) = &report.observed.problem {
        failures.push(problem.clone());
    }
    super::report::json_or_partial(json, &failures, "Keeper error: ")
}

async fn measure(settings: &Settings, report: &mut Report) -> Result<(), BoxError> {
    let options = ServerOptions {
        snap_count: report.snap_count,
        ..ServerOptions::default()
    };
    let mut server = ChildServer::spawn_with(ServerKind::Keeper, &settings.launcher, &options)?;
    first_session(&mut server, settings.startup_limit).await?;
    let mut plan = settings.plan.clone();
    plan.connect = server.addr().to_string();
    plan.server_pid = Some(server.pid());
    let mut namespace = Namespace::create(&plan).await?;
    let root = namespace.root().to_string();
    let populated = namespace
        .populate(
            settings.znodes,
            POPULATE_SESSIONS,
            settings.populate_limit,
            &plan,
            "Keeper ",
        )
        .await;
    let result = match populated {
        Ok(d) => {
            report.populate = Some(d);
            println!(
                "Keeper: created {} znodes in {}",
                settings.znodes,
                stats::fmt_duration(d)
            );
            mix(settings, report, &server, &plan, &root).await
        }
        Err(e) => Err(e),
    };
    namespace.close().await;
    result
}

/// Runs the paced mix on the populated server until the snapshot is over (or cannot be waited
/// for any longer) and sorts its latencies into windows.
async fn mix(
    settings: &Settings,
    report: &mut Report,
    server: &ChildServer,
    plan: &Plan,
    root: &str,
) -> Result<(), BoxError> {
    let before = Layout::scan(server.data_dir())
        .map_err(|e| format!("reading {}: {e}", server.data_dir().display()))?;
    if let Some(s) = before.newest_snapshot() {
        report.notes.push(format!(
            "a snapshot (0x{:x}) already existed before the mix; only a new one is measured",
            s.zxid
        ));
    }
    let known: Vec<i64> = before.snapshots.iter().map(|s| s.zxid).collect();

    let mut clients = Vec::new();
    for _ in 0..settings.sessions {
        match open_session(&plan.connect, plan.connect_timeout).await {
            Ok(c) => clients.push(c),
            Err(e) => {
                futures::future::join_all(clients.into_iter().map(close_session)).await;
                return Err(e);
            }
        }
    }
    // The zxid counter says how many txns this run of the server has made, so how many more
    // writes are due before the snapshot.
    let data = vec![b'x'; plan.data_size];
    let marker = format!("{root}/get");
    let due = match clients[0].set_data(&marker, &data, None).await {
        Ok(stat) => report
            .snap_count
            .map(|s| s.saturating_sub((stat.mzxid & 0xffff_ffff) as u64)),
        Err(e) => {
            futures::future::join_all(clients.into_iter().map(close_session)).await;
            return Err(format!("setData {marker}: {e}").into());
        }
    };
    report.writes_due = due;
    let write_rate = settings.rate / WRITE_EVERY as f64;
    let expected = match due {
        Some(d) => Duration::from_secs_f64(d as f64 / write_rate),
        None => settings.warmup + settings.window,
    };
    let give_up_waiting = Instant::now() + expected * 2 + settings.snapshot_limit;
    let hard_deadline = give_up_waiting + settings.snapshot_limit + TAIL;
    let watch = SnapshotWatch::start(server.data_dir().to_path_buf(), known, hard_deadline)?;

    let pace = Pace {
        rate: settings.rate,
        prefix: format!("{root}/mem/z-"),
        keys: settings.znodes,
        data,
        deadline: hard_deadline,
    };
    let progress = Arc::new(Progress::default());
    println!(
        "Keeper: mix running; snapshot due after {} writes (about {})",
        due.map_or("-".into(), |d| d.to_string()),
        stats::fmt_duration(expected)
    );
    let started = Instant::now();
    let paced = {
        let run = paced::run(&clients, &pace, progress.clone());
        tokio::pin!(run);
        loop {
            tokio::select! {
                done = &mut run => break done,
                _ = tokio::time::sleep(Duration::from_millis(20)) => {}
            }
            if progress.stop.load(Ordering::Relaxed) {
                // Sending has stopped; the outstanding replies are coming in.
                continue;
            }
            let seen = watch.seen();
            let now = Instant::now();
            if seen.began.is_some() && report.writes_at_begin.is_none() {
                report.writes_at_begin = Some(progress.writes.load(Ordering::Relaxed));
            }
            let stop = match (seen.began, seen.ended) {
                (_, Some(ended)) => now >= ended + TAIL,
                (Some(began), None) => {
                    let over = now >= began + settings.snapshot_limit;
                    if over {
                        report.notes.push(format!(
                            "the snapshot was still being written after {}",
                            stats::fmt_duration(settings.snapshot_limit)
                        ));
                    }
                    over
                }
                (None, None) if report.snap_count.is_none() => {
                    now >= started + settings.warmup + settings.window
                }
                (None, None) => {
                    let over = now >= give_up_waiting;
                    if over {
                        report.notes.push(format!(
                            "no snapshot began within {} of the mix ({} writes answered, {} due)",
                            stats::fmt_duration(now - started),
                            progress.writes.load(Ordering::Relaxed),
                            due.map_or("-".into(), |d| d.to_string())
                        ));
                    }
                    over
                }
            };
            if stop {
                progress.stop.store(true, Ordering::Relaxed);
            }
        }
    };
    futures::future::join_all(clients.into_iter().map(close_session)).await;
    report.observed = watch.seen();
    drop(watch);
    report.fell_behind = progress.fell_behind.load(Ordering::Relaxed);
    let paced = paced?;
    report.origin = Some(paced.origin);
    let at = |t: Instant| t.saturating_duration_since(paced.origin).as_micros() as u64;
    let snapshot = match (report.observed.began, report.observed.ended) {
        (Some(b), Some(e)) => Some((at(b), at(e))),
        // Still in progress at the end: everything from its start on counts as during.
        (Some(b), None) => Some((at(b), u64::MAX)),
        _ => None,
    };
    let warmup_us = settings.warmup.as_micros() as u64;
    if let Some((begin, _)) = snapshot
        && begin < warmup_us + settings.window.as_micros() as u64 / 2
    {
        report.notes.push(format!(
            "the snapshot began {} into the mix, before half the baseline window: the baseline \
             is short",
            stats::fmt_duration(Duration::from_micros(begin))
        ));
    }
    report.windows = Some(classify(&paced.samples, warmup_us, snapshot));
    if let Some((begin, _)) = snapshot {
        report.slowest = slowest_slices(&paced.samples, warmup_us, begin, SLICE, 3);
    }
    if report.fell_behind > 0 {
        report.notes.push(format!(
            "sessions had {} requests outstanding and sent late {} times: the server did not \
             keep up with {:.0} requests/s",
            paced::MAX_IN_FLIGHT,
            report.fell_behind,
            settings.rate
        ));
    }
    Ok(())
}

fn print_report(settings: &Settings, report: &Report) {
    let o = &report.observed;
    if let (Some(began), Some(origin)) = (o.began, report.origin) {
        println!(
            "Keeper: snapshot began {} into the mix{}{}",
            stats::fmt_duration(began.saturating_duration_since(origin)),
            report
                .writes_at_begin
                .map_or(String::new(), |w| format!(", after {w} writes")),
            report
                .writes_due
                .map_or(String::new(), |d| format!(" ({d} due)")),
        );
    }
    if let (Some(time), Some(file)) = (report.snapshot_time(), o.snapshot) {
        println!(
            "Keeper: snapshot 0x{:x} of {} written in {}{}",
            file.zxid,
            stats::fmt_kib(file.bytes.div_ceil(1024)),
            stats::fmt_duration(time),
            if o.saw_partial {
                ""
            } else {
                " (between two polls: no .tmp file seen)"
            }
        );
    }
    if let Some(w) = &report.windows {
        println!();
        println!(
            "{:<32} {:>9} {:>9} {:>9} {:>9} {:>9} {:>10} {:>10}",
            "window", "requests", "p50", "p99", "p99.9", "max", "p99 reads", "p99 writes"
        );
        for (label, window) in [
            ("before the snapshot", &w.before),
            ("while the snapshot is written", &w.during),
            ("after the snapshot", &w.after),
        ] {
            let q = |h: &Histogram<u64>, q: f64| {
                if h.is_empty() {
                    "-".to_string()
                } else {
                    stats::fmt_duration(Duration::from_micros(h.value_at_quantile(q)))
                }
            };
            println!(
                "{:<32} {:>9} {:>9} {:>9} {:>9} {:>9} {:>10} {:>10}",
                label,
                window.all.len(),
                q(&window.all, 0.5),
                q(&window.all, 0.99),
                q(&window.all, 0.999),
                q(&window.all, 1.0),
                q(&window.reads, 0.99),
                q(&window.writes, 0.99),
            );
        }
        if let Some(ratio) = report.ratio() {
            println!(
                "p99 while the snapshot of {} znodes is written / p99 before: {} (target at \
                 most {TARGET_RATIO}x: {})",
                settings.znodes,
                stats::fmt_ratio(w.during.p99(), w.before.p99()),
                if ratio <= TARGET_RATIO {
                    "met"
                } else {
                    "MISSED"
                }
            );
        }
    }
    if !report.slowest.is_empty() {
        let slices: Vec<String> = report
            .slowest
            .iter()
            .map(|s| {
                format!(
                    "{:+}ms (max {})",
                    s.offset_ms,
                    stats::fmt_duration(Duration::from_micros(s.max_us))
                )
            })
            .collect();
        println!(
            "slowest {} slices, by send time from the snapshot's start (it took {}): {}",
            stats::fmt_duration(SLICE),
            report
                .snapshot_time()
                .map_or("-".to_string(), stats::fmt_duration),
            slices.join(", ")
        );
    }
    for note in &report.notes {
        println!("note: {note}");
    }
}

fn window_json(w: &Window) -> Json {
    let q = |h: &Histogram<u64>, q: f64| {
        Json::opt_num((!h.is_empty()).then(|| h.value_at_quantile(q) as f64))
    };
    Json::obj(vec![
        ("requests", Json::Num(w.all.len() as f64)),
        ("p50_us", q(&w.all, 0.5)),
        ("p99_us", q(&w.all, 0.99)),
        ("p999_us", q(&w.all, 0.999)),
        ("max_us", q(&w.all, 1.0)),
        ("reads_p99_us", q(&w.reads, 0.99)),
        ("writes_p99_us", q(&w.writes, 0.99)),
    ])
}

fn to_json(settings: &Settings, report: &Report) -> Json {
    let o = &report.observed;
    let since = |t: Option<Instant>| {
        Json::opt_num(
            t.zip(report.origin)
                .map(|(t, origin)| t.saturating_duration_since(origin).as_secs_f64()),
        )
    };
    let windows = report.windows.as_ref();
    Json::obj(vec![
        ("command", Json::Str(report.command.clone())),
        ("znodes", Json::Num(settings.znodes as f64)),
        ("data_size", Json::num(settings.plan.data_size as u32)),
        ("sessions", Json::num(settings.sessions as u32)),
        ("rate_per_sec", Json::num(settings.rate)),
        ("write_every", Json::Num(WRITE_EVERY as f64)),
        ("warmup_s", Json::num(settings.warmup.as_secs_f64())),
        (
            "snap_count",
            Json::opt_num(report.snap_count.map(|s| s as f64)),
        ),
        (
            "populate_s",
            Json::opt_num(report.populate.map(|d| d.as_secs_f64())),
        ),
        (
            "writes_due",
            Json::opt_num(report.writes_due.map(|w| w as f64)),
        ),
        (
            "writes_at_begin",
            Json::opt_num(report.writes_at_begin.map(|w| w as f64)),
        ),
        ("snapshot_began_s", since(o.began)),
        ("snapshot_ended_s", since(o.ended)),
        (
            "snapshot_us",
            Json::opt_num(report.snapshot_time().map(|d| d.as_micros() as f64)),
        ),
        (
            "snapshot_bytes",
            Json::opt_num(o.snapshot.map(|s| s.bytes as f64)),
        ),
        (
            "snapshot_zxid",
            Json::opt_num(o.snapshot.map(|s| s.zxid as f64)),
        ),
        (
            "before",
            windows.map_or(Json::Null, |w| window_json(&w.before)),
        ),
        (
            "during",
            windows.map_or(Json::Null, |w| window_json(&w.during)),
        ),
        (
            "after",
            windows.map_or(Json::Null, |w| window_json(&w.after)),
        ),
        (
            "p99_ratio_during_over_before",
            Json::opt_num(report.ratio()),
        ),
        ("target_ratio", Json::num(TARGET_RATIO)),
        ("fell_behind", Json::Num(report.fell_behind as f64)),
        (
            "slowest_slices",
            Json::Arr(
                report
                    .slowest
                    .iter()
                    .map(|s| {
                        Json::obj(vec![
                            ("offset_ms", Json::Num(s.offset_ms as f64)),
                            ("max_us", Json::Num(s.max_us as f64)),
                            ("requests", Json::Num(s.requests as f64)),
                        ])
                    })
                    .collect(),
            ),
        ),
        (
            "notes",
            Json::Arr(report.notes.iter().map(|n| Json::Str(n.clone())).collect()),
        ),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(sent_us: u64, latency_us: u64, write: bool) -> Sample {
        Sample {
            sent_us,
            latency_us,
            write,
        }
    }

    #[test]
    fn samples_fall_into_the_window_they_overlap() {
        let samples = [
            sample(10, 5, false),     // warm-up: left out
            sample(100, 50, true),    // before
            sample(900, 200, false),  // sent before, answered during
            sample(1500, 100, true),  // during
            sample(1990, 500, false), // sent during, answered after
            sample(2100, 10, false),  // after
        ];
        let w = classify(&samples, 50, Some((1000, 2000)));
        assert_eq!(w.before.all.len(), 1);
        assert_eq!(w.before.writes.len(), 1);
        assert_eq!(w.during.all.len(), 3);
        assert_eq!(w.during.writes.len(), 1);
        assert_eq!(w.during.reads.len(), 2);
        assert_eq!(w.during.all.max(), 500);
        assert_eq!(w.after.all.len(), 1);
        let none = classify(&samples, 50, None);
        assert_eq!(none.before.all.len(), 5);
        assert!(none.during.all.is_empty());
        assert_eq!(none.during.p99(), None);
    }

    #[test]
    fn the_slowest_slices_are_found_relative_to_the_snapshot() {
        let samples = [
            sample(100, 90_000, false),      // warm-up: left out, however slow
            sample(10_000, 1_000, false),    // slice -25ms from a begin at 30ms
            sample(30_000, 50_000, true),    // slice 0
            sample(54_999, 2_000, false),    // slice 0
            sample(55_000, 20_000, false),   // slice +25ms
            sample(1_030_000, 7_000, false), // slice +1000ms
        ];
        let worst = slowest_slices(&samples, 1_000, 30_000, Duration::from_millis(25), 3);
        assert_eq!(
            worst,
            vec![
                Slice {
                    offset_ms: 0,
                    max_us: 50_000,
                    requests: 2
                },
                Slice {
                    offset_ms: 25,
                    max_us: 20_000,
                    requests: 1
                },
                Slice {
                    offset_ms: 1000,
                    max_us: 7_000,
                    requests: 1
                },
            ]
        );
        let all = slowest_slices(&samples, 1_000, 30_000, Duration::from_millis(25), 10);
        assert_eq!(all.len(), 4);
        assert_eq!(all[3].offset_ms, -25);
    }

    #[test]
    fn the_watcher_sees_a_snapshot_begin_and_end() {
        let t0 = Instant::now();
        let t = |ms| t0 + Duration::from_millis(ms);
        let file = |zxid| DataFile { zxid, bytes: 10 };
        let known = [5];
        let mut o = Observed::default();
        let idle = Layout {
            snapshots: vec![file(5)],
            ..Layout::default()
        };
        o.observe(&idle, &known, t(1), t(0));
        assert!(o.began.is_none());
        let writing = Layout {
            snapshots: vec![file(5)],
            partial_snapshots: vec![file(90)],
            ..Layout::default()
        };
        o.observe(&writing, &known, t(2), t(1));
        assert_eq!(o.began, Some(t(2)));
        o.observe(&writing, &known, t(3), t(2));
        assert!(o.ended.is_none());
        let done = Layout {
            snapshots: vec![file(5), file(90)],
            ..Layout::default()
        };
        o.observe(&done, &known, t(700), t(3));
        assert_eq!(o.ended, Some(t(700)));
        assert_eq!(o.snapshot, Some(file(90)));
        assert!(o.saw_partial && o.problem.is_none());

        // Written entirely between two polls: it began after the earlier one.
        let mut quick = Observed::default();
        quick.observe(&done, &known, t(9), t(8));
        assert_eq!((quick.began, quick.ended), (Some(t(8)), Some(t(9))));
        assert!(!quick.saw_partial);

        // A .tmp that disappears without a snapshot is a problem, not a snapshot.
        let mut failed = Observed::default();
        failed.observe(&writing, &known, t(2), t(1));
        failed.observe(&idle, &known, t(3), t(2));
        assert!(failed.ended.is_some() && failed.snapshot.is_none());
        assert!(failed.problem.is_some());
    }

    #[test]
    fn the_snapshot_is_due_after_the_baseline_writes() {
        let settings = Settings {
            znodes: 1_000_000,
            plan: Plan {
                connect: String::new(),
                duration: Duration::from_secs(5),
                warmup: Duration::from_secs(2),
                pipeline: 64,
                max_requests: 1,
                data_size: 16,
                connect_timeout: Duration::from_secs(30),
                progress: false,
                server_pid: None,
            },
            launcher: crate::tests::launcher(),
            sessions: 4,
            rate: 4000.0,
            warmup: Duration::from_secs(1),
            window: Duration::from_secs(5),
            populate_limit: Duration::from_secs(60),
            startup_limit: Duration::from_secs(60),
            snapshot_limit: Duration::from_secs(60),
        };
        // 1000 writes/s for 6 s.
        assert_eq!(settings.baseline_writes(), 6000);
        let s = settings.snap_count();
        assert!(s > 1_006_000 && s < 1_006_200, "{s}");
    }
}
