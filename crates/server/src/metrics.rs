//! Keeper's numbers: the counters and timings that `mntr`, `srvr` and `/metrics` report, and
//! their Prometheus text. A leaf: it knows no other part of the server but [`crate::trace`]'s
//! stage timings, so the log, the snapshots, the core and the endpoint all record here.
//!
//! [`Stats`] (taken by the core's view) is the one place the server's counters are read: `mntr`,
//! `srvr` and `/metrics` all format the same `Stats`, so the views cannot drift apart.
//! [`Summary`] records the timings ZooKeeper exports as Prometheus summaries (`fsynctime`,
//! `snapshottime`, `readlatency`, `updatelatency`).
//!
//! Invariant: **ZooKeeper's layout.** Names, types and quantiles are those of ZooKeeper's
//! `PrometheusMetricsProvider` (gauges from `ZooKeeperServer.registerMetrics`, summaries from
//! `ServerMetrics`), with the metric's name as its help text as ZooKeeper does, so its
//! dashboards and alerts work unchanged. The text is written by the `prometheus` crate; the
//! endpoint that serves it is `net::metrics_http`.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use prometheus::TextEncoder;
use prometheus::proto::{Gauge, LabelPair, Metric, MetricFamily, MetricType, Quantile};

use crate::sync::lock;
use crate::trace::{Stage, StageTimes};

/// A summary's quantiles cover the observations of the last one or two of these windows
/// (ZooKeeper rotates its quantile sketches every 60 s); its count and sum cover all time.
const WINDOW: Duration = Duration::from_secs(60);

/// What is counted for one connection, read by `cons` without taking its outbox's lock.
#[derive(Debug, Default)]
pub(crate) struct ConnStats {
    pub queued_packets: AtomicU64,
    pub queued_bytes: AtomicU64,
    pub sent_packets: AtomicU64,
    pub sent_bytes: AtomicU64,
}

/// The server's state as `mntr` and `/metrics` report it. Times are in milliseconds.
#[derive(Debug, Clone)]
pub(crate) struct Stats {
    /// `standalone`, or `read-only` while the disk fails and writes are refused.
    pub server_state: &'static str,
    pub avg_latency: f64,
    pub min_latency: u64,
    pub max_latency: u64,
    pub packets_received: u64,
    pub packets_sent: u64,
    pub num_alive_connections: usize,
    /// Always 0: the core answers each request as it takes it from its queue, and a request
    /// still in that queue has not been counted as received.
    pub outstanding_requests: u64,
    pub znode_count: usize,
    pub watch_count: usize,
    pub ephemerals_count: usize,
    pub approximate_data_size: u64,
    pub uptime: u64,
    pub global_sessions: usize,
}

impl Stats {
    /// ZooKeeper's gauges, in `registerMetrics`' order.
    fn gauges(&self) -> [(&'static str, f64); 13] {
        [
            ("avg_latency", self.avg_latency),
            ("max_latency", self.max_latency as f64),
            ("min_latency", self.min_latency as f64),
            ("packets_received", self.packets_received as f64),
            ("packets_sent", self.packets_sent as f64),
            ("num_alive_connections", self.num_alive_connections as f64),
            ("outstanding_requests", self.outstanding_requests as f64),
            ("uptime", self.uptime as f64),
            ("znode_count", self.znode_count as f64),
            ("watch_count", self.watch_count as f64),
            ("ephemerals_count", self.ephemerals_count as f64),
            ("approximate_data_size", self.approximate_data_size as f64),
            ("global_sessions", self.global_sessions as f64),
        ]
    }
}

/// ZooKeeper's `DetailLevel.BASIC` summaries report the median only.
const BASIC: &[f64] = &[0.5];
/// `DetailLevel.ADVANCED` ones the median, 90th and 99th percentiles.
const ADVANCED: &[f64] = &[0.5, 0.9, 0.99];

/// A timing summary: count and sum since start, quantiles over the recent windows. Recorded
/// in microseconds, exported in milliseconds (ZooKeeper's unit) with the fractions kept.
///
/// Shared between the thread that observes (the core, the log writer, the snapshot writer)
/// and the scrape; the lock is held for an update of a few counters, never across IO.
pub(crate) struct Summary {
    name: &'static str,
    quantiles: &'static [f64],
    state: Mutex<Windows>,
}

struct Windows {
    count: u64,
    sum_us: u64,
    current: Histogram<u64>,
    previous: Histogram<u64>,
    current_since: Instant,
}

/// What a scrape reads of a [`Summary`].
struct SummaryValue {
    count: u64,
    sum_ms: f64,
    /// (quantile, milliseconds); NaN when no observation is recent, as Prometheus clients do.
    quantiles: Vec<(f64, f64)>,
}

impl Summary {
    fn new(name: &'static str, quantiles: &'static [f64]) -> Summary {
        // Microseconds from 1 µs to an hour, to two significant digits (1 % error at most).
        let histogram = || {
            Histogram::new_with_bounds(1, 3_600_000_000, 2)
                .expect("constant histogram bounds are valid")
        };
        Summary {
            name,
            quantiles,
            state: Mutex::new(Windows {
                count: 0,
                sum_us: 0,
                current: histogram(),
                previous: histogram(),
                current_since: Instant::now(),
            }),
        }
    }

    /// ZooKeeper's `fsynctime`: each fdatasync of the transaction log.
    pub(crate) fn fsync_time() -> Arc<Summary> {
        Arc::new(Summary::new("fsynctime", BASIC))
    }

    /// ZooKeeper's `snapshottime`: each snapshot, from its start to its file being in place.
    pub(crate) fn snapshot_time() -> Arc<Summary> {
        Arc::new(Summary::new("snapshottime", BASIC))
    }

    pub(crate) fn observe(&self, took: Duration) {
        self.observe_at(took, Instant::now());
    }

    /// Records `took`, ending at `now` (a caller that has just read the clock passes it).
    pub(crate) fn observe_at(&self, took: Duration, now: Instant) {
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        let mut w = lock(&self.state);
        w.rotate(now);
        w.count += 1;
        w.sum_us = w.sum_us.saturating_add(us);
        w.current.saturating_record(us.max(1));
    }

    fn value(&self) -> SummaryValue {
        self.value_at(Instant::now())
    }

    /// Observations since start (for `fsynctime`: the log's syncs, which `mntr` reports too).
    pub(crate) fn count(&self) -> u64 {
        lock(&self.state).count
    }

    /// The `q` quantile of the observations the quantiles cover (the last one or two
    /// windows), in microseconds; `None` when none is recent.
    pub(crate) fn recent_quantile_us(&self, q: f64) -> Option<u64> {
        let mut w = lock(&self.state);
        w.rotate(Instant::now());
        let recent = w.recent();
        (!recent.is_empty()).then(|| recent.value_at_quantile(q))
    }

    fn value_at(&self, now: Instant) -> SummaryValue {
        let mut w = lock(&self.state);
        w.rotate(now);
        let recent = w.recent();
        let quantiles = self
            .quantiles
            .iter()
            .map(|&q| {
                let ms = if recent.is_empty() {
                    f64::NAN
                } else {
                    recent.value_at_quantile(q) as f64 / 1000.0
                };
                (q, ms)
            })
            .collect();
        SummaryValue {
            count: w.count,
            sum_ms: w.sum_us as f64 / 1000.0,
            quantiles,
        }
    }
}

impl Windows {
    /// The observations of the current and the previous window.
    fn recent(&self) -> Histogram<u64> {
        let mut recent = self.previous.clone();
        // Same bounds, so adding cannot fail.
        let _ = recent.add(&self.current);
        recent
    }

    /// Starts a new window once the current one is [`WINDOW`] old; what is older than the
    /// previous window is forgotten.
    fn rotate(&mut self, now: Instant) {
        let age = now.saturating_duration_since(self.current_since);
        if age < WINDOW {
            return;
        }
        if age < 2 * WINDOW {
            std::mem::swap(&mut self.current, &mut self.previous);
        } else {
            self.previous.reset();
        }
        self.current.reset();
        self.current_since = now;
    }
}

/// The four timing summaries: the core's read and update latencies, the log's syncs and the
/// snapshots. Cloning shares them.
#[derive(Clone)]
pub(crate) struct Timings {
    pub fsync: Arc<Summary>,
    pub snapshot: Arc<Summary>,
    /// Requests that change nothing (reads, pings, watch and auth requests), as ZooKeeper
    /// counts every request without a transaction.
    pub read: Arc<Summary>,
    /// Write requests, refused ones included, as ZooKeeper counts every request that carries
    /// a transaction (an error is one).
    pub update: Arc<Summary>,
    /// Where durable replies spend their time (Keeper's own, not ZooKeeper's; see
    /// [`crate::trace`]), recorded by the connection tasks.
    pub stages: Arc<StageTimes>,
}

impl Timings {
    pub(crate) fn new(fsync: Arc<Summary>, snapshot: Arc<Summary>) -> Timings {
        Timings {
            fsync,
            snapshot,
            read: Arc::new(Summary::new("readlatency", ADVANCED)),
            update: Arc::new(Summary::new("updatelatency", ADVANCED)),
            stages: Arc::default(),
        }
    }

    fn all(&self) -> [&Summary; 4] {
        [&self.fsync, &self.snapshot, &self.read, &self.update]
    }
}

/// The Prometheus text (format 0.0.4) of `stats` and `timings`.
pub(crate) fn render(stats: &Stats, timings: &Timings) -> String {
    let mut families = Vec::with_capacity(17);
    for (name, value) in stats.gauges() {
        let mut gauge = Gauge::default();
        gauge.set_value(value);
        families.push(family(name, MetricType::GAUGE, Metric::from_gauge(gauge)));
    }
    for summary in timings.all() {
        let value = summary.value();
        let mut s = prometheus::proto::Summary::default();
        s.set_sample_count(value.count);
        s.set_sample_sum(value.sum_ms);
        s.set_quantile(
            value
                .quantiles
                .into_iter()
                .map(|(q, ms)| {
                    let mut quantile = Quantile::default();
                    quantile.set_quantile(q);
                    quantile.set_value(ms);
                    quantile
                })
                .collect(),
        );
        let mut metric = Metric::default();
        metric.set_summary(s);
        families.push(family(summary.name, MetricType::SUMMARY, metric));
    }
    families.extend(stage_families(&timings.stages));
    let mut text = String::new();
    // Encoding fails only on a family without a name or a metric, and each has both.
    if let Err(e) = TextEncoder::new().encode_utf8(&families, &mut text) {
        tracing::error!(error = %e, "cannot encode metrics");
    }
    text
}

/// The trace's stages as two families labelled `stage`: `lk_write_stage_us` (a summary with
/// count and sum, no quantiles: the means are what the stages are read for) and
/// `lk_write_stage_max_us` (a gauge). Microseconds, as the `mntr` keys.
fn stage_families(stages: &StageTimes) -> [MetricFamily; 2] {
    let values = stages.values();
    let labelled = |stage: Stage, mut metric: Metric| {
        let mut label = LabelPair::default();
        label.set_name("stage".to_string());
        label.set_value(stage.name().to_string());
        metric.set_label(vec![label]);
        metric
    };
    let mut sums = family("lk_write_stage_us", MetricType::SUMMARY, Metric::default());
    sums.set_help(
        "time durable replies spend in each stage of Keeper's write path, in microseconds"
            .to_string(),
    );
    sums.set_metric(
        values
            .iter()
            .map(|v| {
                let mut s = prometheus::proto::Summary::default();
                s.set_sample_count(v.count);
                s.set_sample_sum(v.sum_us);
                let mut metric = Metric::default();
                metric.set_summary(s);
                labelled(v.stage, metric)
            })
            .collect(),
    );
    let mut maxima = family(
        "lk_write_stage_max_us",
        MetricType::GAUGE,
        Metric::default(),
    );
    maxima.set_help(
        "the longest time one durable reply spent in each stage, in microseconds".to_string(),
    );
    maxima.set_metric(
        values
            .iter()
            .map(|v| {
                let mut gauge = Gauge::default();
                gauge.set_value(v.max_us);
                labelled(v.stage, Metric::from_gauge(gauge))
            })
            .collect(),
    );
    [sums, maxima]
}

fn family(name: &str, kind: MetricType, metric: Metric) -> MetricFamily {
    let mut family = MetricFamily::default();
    family.set_name(name.to_string());
    family.set_help(name.to_string());
    family.set_field_type(kind);
    family.set_metric(vec![metric]);
    family
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summaries_keep_all_time_counts_and_recent_quantiles() {
        let s = Summary::new("readlatency", ADVANCED);
        let start = Instant::now();
        for ms in 1..=100 {
            s.observe_at(Duration::from_millis(ms), start);
        }
        let v = s.value();
        assert_eq!(v.count, 100);
        assert!((v.sum_ms - 5050.0).abs() < 1e-9, "{}", v.sum_ms);
        let q: Vec<f64> = v.quantiles.iter().map(|&(q, _)| q).collect();
        assert_eq!(q, [0.5, 0.9, 0.99]);
        for (q, ms) in v.quantiles {
            let want = q * 100.0;
            assert!((ms - want).abs() <= want * 0.02 + 1.0, "q{q}: {ms} ms");
        }
        // Two windows later the old observations no longer count for the quantiles.
        s.observe_at(Duration::from_micros(250), start + 2 * WINDOW);
        s.observe_at(Duration::from_micros(250), start + 3 * WINDOW + WINDOW / 2);
        let v = s.value_at(start + 3 * WINDOW + WINDOW / 2);
        assert_eq!(v.count, 102);
        for (_, ms) in v.quantiles {
            assert!((ms - 0.25).abs() < 0.01, "{ms} ms");
        }
    }

    #[test]
    fn an_empty_summary_reports_nan_quantiles() {
        let v = Summary::new("fsynctime", BASIC).value();
        assert_eq!(v.count, 0);
        assert_eq!(v.quantiles.len(), 1);
        assert!(v.quantiles[0].1.is_nan());
    }

    #[test]
    fn rendered_text_has_zookeepers_names_and_types() {
        let stats = Stats {
            server_state: "standalone",
            avg_latency: 0.5,
            min_latency: 0,
            max_latency: 3,
            packets_received: 10,
            packets_sent: 9,
            num_alive_connections: 1,
            outstanding_requests: 0,
            znode_count: 5,
            watch_count: 2,
            ephemerals_count: 1,
            approximate_data_size: 42,
            uptime: 1000,
            global_sessions: 1,
        };
        let timings = Timings::new(Summary::fsync_time(), Summary::snapshot_time());
        timings.update.observe(Duration::from_millis(2));
        let text = render(&stats, &timings);
        for line in [
            "# TYPE znode_count gauge",
            "znode_count 5",
            "approximate_data_size 42",
            "avg_latency 0.5",
            "# TYPE updatelatency summary",
            "updatelatency_count 1",
            "# TYPE fsynctime summary",
            "fsynctime{quantile=\"0.5\"} NaN",
            "fsynctime_count 0",
        ] {
            assert!(text.lines().any(|l| l == line), "no {line:?} in\n{text}");
        }
        assert!(text.contains("updatelatency{quantile=\"0.99\"} "), "{text}");
        timings
            .stages
            .record(Stage::Fdatasync, Duration::from_micros(120));
        let text = render(&stats, &timings);
        for line in [
            "# TYPE lk_write_stage_us summary",
            "lk_write_stage_us_sum{stage=\"fdatasync\"} 120",
            "lk_write_stage_us_count{stage=\"fdatasync\"} 1",
            "lk_write_stage_us_count{stage=\"reaction\"} 0",
            "# TYPE lk_write_stage_max_us gauge",
            "lk_write_stage_max_us{stage=\"fdatasync\"} 120",
        ] {
            assert!(text.lines().any(|l| l == line), "no {line:?} in\n{text}");
        }
        assert!(!text.contains("fsynctime{quantile=\"0.9\"}"), "{text}");
    }
}
