//! The metric names Apache ZooKeeper's `PrometheusMetricsProvider` exports that Keeper's
//! `/metrics` must carry too, with their types: the facts the scrape tests check a scrape
//! against, kept in one place so that every such test expects the same names.

/// ZooKeeper's gauges, as its Prometheus provider names them.
pub const GAUGES: [&str; 13] = [
    "znode_count",
    "watch_count",
    "ephemerals_count",
    "approximate_data_size",
    "num_alive_connections",
    "outstanding_requests",
    "avg_latency",
    "min_latency",
    "max_latency",
    "packets_received",
    "packets_sent",
    "global_sessions",
    "uptime",
];
/// ZooKeeper's summaries, each with the quantiles it exports.
pub const SUMMARIES: [(&str, &[&str]); 4] = [
    ("fsynctime", &["0.5"]),
    ("snapshottime", &["0.5"]),
    ("readlatency", &["0.5", "0.9", "0.99"]),
    ("updatelatency", &["0.5", "0.9", "0.99"]),
];
