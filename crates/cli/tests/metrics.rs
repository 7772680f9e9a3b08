//! `lockkeeper serve --metrics-listen`: `/metrics` scraped while clients load the server parses
//! with Prometheus' own text parser (Python's `prometheus_client`, which `scripts/test`
//! installs) into ZooKeeper's metric names and types, and agrees with `mntr`.
//!
//! Keeper only: Apache ZooKeeper's Prometheus provider needs jars no package here ships.
//! Agreement is checked twice. During the load, each scrape is bracketed by two `mntr`s, so every
//! counter that only grows (packets, uptime) must lie between them. Once every client has gone
//! nothing changes but the uptime, so each gauge must equal its `mntr` line exactly.

mod support;

use std::collections::HashMap;
use std::io::Write;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use lockkeeper_testkit::zk_metrics::{GAUGES, SUMMARIES};
use lockkeeper_testkit::{free_port, http_exchange, try_four_letter_word};
use zookeeper_client::{Acls, CreateMode};

use support::{KeeperProcess, OP_LIMIT, connect, within};

/// Clients loading the server, and how long they do.
const CLIENTS: usize = 4;
const LOAD_TIME: Duration = Duration::from_secs(4);
/// Each client's operations are bounded in count as well as time.
const MAX_ROUNDS: usize = 5_000;
/// A snapshot every this many transactions, so `snapshottime` has observations.
const SNAP_COUNT: &str = "500";
/// Scrapes taken during the load.
const SCRAPES: usize = 5;

/// Runs Prometheus' parser on the text and prints one line per sample:
/// family, type, sample name, labels (k=v, comma-separated), value.
const PARSE: &str = r#"
import sys
from prometheus_client.parser import text_string_to_metric_families
for family in text_string_to_metric_families(sys.stdin.read()):
    for s in family.samples:
        labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
        print(f"{family.name}\t{family.type}\t{s.name}\t{labels}\t{s.value!r}")
"#;

/// One parsed sample.
#[derive(Debug, Clone)]
struct Sample {
    family: String,
    kind: String,
    name: String,
    labels: String,
    value: f64,
}

/// A scrape as Prometheus' parser read it.
struct Scrape {
    samples: Vec<Sample>,
}

impl Scrape {
    fn value(&self, name: &str, labels: &str) -> f64 {
        self.samples
            .iter()
            .find(|s| s.name == name && s.labels == labels)
            .map(|s| s.value)
            .unwrap_or_else(|| panic!("no sample {name}{{{labels}}} in {:#?}", self.samples))
    }

    fn gauge(&self, name: &str) -> f64 {
        self.value(name, "")
    }

    /// Every metric has ZooKeeper's type and, for summaries, its quantiles, `_count`, `_sum`.
    fn check_layout(&self) {
        for name in GAUGES {
            let kinds: Vec<&str> = self
                .samples
                .iter()
                .filter(|s| s.family == name)
                .map(|s| s.kind.as_str())
                .collect();
            assert_eq!(kinds, ["gauge"], "{name}");
        }
        for (name, quantiles) in SUMMARIES {
            let family: Vec<&Sample> = self.samples.iter().filter(|s| s.family == name).collect();
            assert!(family.iter().all(|s| s.kind == "summary"), "{family:?}");
            let found: Vec<String> = family
                .iter()
                .filter(|s| s.name == name)
                .map(|s| s.labels.clone())
                .collect();
            let wanted: Vec<String> = quantiles.iter().map(|q| format!("quantile={q}")).collect();
            assert_eq!(found, wanted, "{name}'s quantiles");
            let count = self.value(&format!("{name}_count"), "");
            let sum = self.value(&format!("{name}_sum"), "");
            assert!(
                count >= 0.0 && sum >= 0.0,
                "{name}: count {count}, sum {sum}"
            );
        }
    }
}

/// `GET /metrics` over plain HTTP/1.1, bounded; the body once the status and type are right.
fn scrape_text(addr: SocketAddr) -> String {
    let answer = http_exchange(
        addr,
        b"GET /metrics HTTP/1.1\r\nHost: keeper\r\nAccept: text/plain\r\n\r\n",
        OP_LIMIT,
    );
    let (head, body) = answer
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no HTTP head in {answer:?}"));
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    assert!(
        head.lines()
            .any(|l| l == "Content-Type: text/plain; version=0.0.4"),
        "{head}"
    );
    body.to_string()
}

/// Parses `text` with `prometheus_client`, bounded in time.
fn parse(text: &str) -> Scrape {
    let mut child = Command::new("python3")
        .args(["-c", PARSE])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run python3 (scripts/test installs it with prometheus_client)");
    child
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(text.as_bytes())
        .expect("write the scrape to the parser");
    let deadline = Instant::now() + OP_LIMIT;
    while child.try_wait().expect("poll the parser").is_none() {
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the Prometheus parser did not finish within {OP_LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let output = child.wait_with_output().expect("the parser's output");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "prometheus_client refused the scrape: {}\n{text}",
        String::from_utf8_lossy(&output.stderr)
    );
    let samples = stdout
        .lines()
        .map(|line| {
            let f: Vec<&str> = line.split('\t').collect();
            assert_eq!(f.len(), 5, "parser line {line:?}");
            Sample {
                family: f[0].into(),
                kind: f[1].into(),
                name: f[2].into(),
                labels: f[3].into(),
                value: f[4]
                    .parse()
                    .unwrap_or_else(|e| panic!("value in {line:?}: {e}")),
            }
        })
        .collect();
    Scrape { samples }
}

/// `mntr` as a map from key (without `zk_`) to value.
fn mntr(addr: SocketAddr) -> HashMap<String, String> {
    let answer = try_four_letter_word(addr, "mntr", OP_LIMIT)
        .unwrap_or_else(|e| panic!("mntr from {addr}: {e}"));
    answer
        .lines()
        .filter_map(|l| l.split_once('\t'))
        .map(|(k, v)| (k.trim_start_matches("zk_").to_string(), v.to_string()))
        .collect()
}

fn number(mntr: &HashMap<String, String>, key: &str) -> f64 {
    mntr.get(key)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no number {key} in mntr {mntr:?}"))
}

/// A scrape between two `mntr`s (off the runtime: all three block).
async fn bracketed(
    server: SocketAddr,
    metrics: SocketAddr,
) -> (HashMap<String, String>, Scrape, HashMap<String, String>) {
    tokio::task::spawn_blocking(move || {
        let before = mntr(server);
        let scrape = parse(&scrape_text(metrics));
        let after = mntr(server);
        (before, scrape, after)
    })
    .await
    .expect("join the scrape")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scrape_under_load_parses_and_agrees_with_mntr() {
    let data = tempfile::tempdir().expect("a data dir");
    let metrics_addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let metrics_flag = metrics_addr.to_string();
    let keeper = KeeperProcess::start(
        data.path(),
        &[
            "--metrics-listen",
            &metrics_flag,
            "--snap-count",
            SNAP_COUNT,
        ],
    );
    let server = keeper.addr();
    let connect_string = keeper.connect_string();

    // The load: each client creates, reads (with a watch), updates and deletes its own nodes,
    // and holds one ephemeral.
    let stop = Arc::new(AtomicBool::new(false));
    let writes = Arc::new(AtomicU64::new(0));
    let reads = Arc::new(AtomicU64::new(0));
    let persistent = CreateMode::Persistent.with_acls(Acls::anyone_all());
    let ephemeral = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
    let mut load = Vec::new();
    for c in 0..CLIENTS {
        let client = connect(&connect_string).await;
        let (stop, writes, reads) = (stop.clone(), writes.clone(), reads.clone());
        let (persistent, ephemeral) = (persistent.clone(), ephemeral.clone());
        load.push(tokio::spawn(async move {
            within(
                "ephemeral",
                OP_LIMIT,
                client.create(&format!("/e{c}"), b"", &ephemeral),
            )
            .await
            .expect("create an ephemeral");
            let started = Instant::now();
            for round in 0..MAX_ROUNDS {
                if stop.load(Ordering::Relaxed) || started.elapsed() > LOAD_TIME * 3 {
                    break;
                }
                let path = format!("/c{c}-{}", round % 50);
                let op = async {
                    let _ = client.create(&path, b"value", &persistent).await;
                    let _ = client.get_and_watch_data(&path).await;
                    let _ = client.set_data(&path, b"other value", None).await;
                    if round % 3 == 0 {
                        let _ = client.delete(&path, None).await;
                    }
                };
                within("a load round", OP_LIMIT, op).await;
                writes.fetch_add(if round % 3 == 0 { 3 } else { 2 }, Ordering::Relaxed);
                reads.fetch_add(1, Ordering::Relaxed);
            }
            client
        }));
    }

    // Scrapes during the load.
    let mut last_received = 0.0;
    let load_started = Instant::now();
    for i in 0..SCRAPES {
        tokio::time::sleep(LOAD_TIME / (SCRAPES as u32 + 1)).await;
        let (before, scrape, after) = bracketed(server, metrics_addr).await;
        scrape.check_layout();
        for key in ["packets_received", "packets_sent", "uptime"] {
            let (low, value, high) = (number(&before, key), scrape.gauge(key), number(&after, key));
            assert!(
                low <= value && value <= high,
                "scrape {i}: {key} {value} not within mntr's {low}..{high}"
            );
        }
        let received = scrape.gauge("packets_received");
        assert!(received >= last_received, "packets_received went back");
        last_received = received;
    }
    assert!(
        load_started.elapsed() < LOAD_TIME * 3,
        "scrapes under load took {:?}",
        load_started.elapsed()
    );
    stop.store(true, Ordering::Relaxed);
    let mut clients = Vec::new();
    for task in load {
        clients.push(task.await.expect("a load client"));
    }
    let (writes, reads) = (
        writes.load(Ordering::Relaxed),
        reads.load(Ordering::Relaxed),
    );
    assert!(writes > 0 && reads > 0, "no load ran");

    // Quiet, the sessions still open: pings may come and go, but the tree and the sessions
    // do not change, so those gauges equal mntr's exactly.
    let (before, scrape, after) = bracketed(server, metrics_addr).await;
    for key in [
        "znode_count",
        "watch_count",
        "ephemerals_count",
        "approximate_data_size",
        "num_alive_connections",
        "outstanding_requests",
        "global_sessions",
    ] {
        assert_eq!(number(&before, key), number(&after, key), "{key} changed");
        assert_eq!(scrape.gauge(key), number(&before, key), "{key}");
    }
    assert_eq!(scrape.gauge("ephemerals_count"), CLIENTS as f64);
    assert_eq!(scrape.gauge("global_sessions"), CLIENTS as f64);
    assert_eq!(scrape.gauge("num_alive_connections"), CLIENTS as f64);

    // Every request's latency went into mntr's average and into one of the two summaries.
    let count = |name: &str| scrape.value(&format!("{name}_count"), "");
    assert!(
        count("updatelatency") >= writes as f64,
        "updatelatency_count {} < {writes} writes sent",
        count("updatelatency")
    );
    assert!(
        count("readlatency") >= reads as f64,
        "readlatency_count {} < {reads} reads sent",
        count("readlatency")
    );
    let (before, quiet, after) = {
        drop(clients);
        // Every session closes: then nothing changes but the uptime.
        let deadline = Instant::now() + OP_LIMIT;
        loop {
            let m = tokio::task::spawn_blocking(move || mntr(server))
                .await
                .expect("join mntr");
            if number(&m, "global_sessions") == 0.0 && number(&m, "num_alive_connections") == 0.0 {
                break;
            }
            assert!(Instant::now() < deadline, "sessions still open: {m:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        bracketed(server, metrics_addr).await
    };
    quiet.check_layout();
    for key in GAUGES {
        let value = quiet.gauge(key);
        match key {
            "uptime" => assert!(number(&before, key) <= value && value <= number(&after, key)),
            // mntr prints the average to four decimals.
            "avg_latency" => assert!(
                (value - number(&before, key)).abs() <= 0.00005 + 1e-9,
                "avg_latency {value} vs mntr {}",
                number(&before, key)
            ),
            _ => assert_eq!(value, number(&before, key), "{key}"),
        }
    }
    let count = |name: &str| quiet.value(&format!("{name}_count"), "");
    let sum = |name: &str| quiet.value(&format!("{name}_sum"), "");
    let requests = count("readlatency") + count("updatelatency");
    let mean = (sum("readlatency") + sum("updatelatency")) / requests;
    assert!(
        (mean - quiet.gauge("avg_latency")).abs() < 1e-6,
        "summaries' mean {mean} ms vs avg_latency {}",
        quiet.gauge("avg_latency")
    );
    for name in ["readlatency", "updatelatency"] {
        let q = |q: &str| quiet.value(name, &format!("quantile={q}"));
        assert!(
            0.0 <= q("0.5") && q("0.5") <= q("0.9") && q("0.9") <= q("0.99"),
            "{name}: {} {} {}",
            q("0.5"),
            q("0.9"),
            q("0.99")
        );
    }
    // Keeper runs with --sync always: every write batch was fsynced.
    assert!(count("fsynctime") > 0.0, "no fsync recorded");
    assert!(quiet.value("fsynctime", "quantile=0.5") >= 0.0);

    // More than SNAP_COUNT writes were made, so a snapshot was taken; it may still be finishing.
    if writes > 2 * SNAP_COUNT.parse::<u64>().expect("a number") {
        let deadline = Instant::now() + OP_LIMIT;
        loop {
            let scrape = tokio::task::spawn_blocking(move || parse(&scrape_text(metrics_addr)))
                .await
                .expect("join the scrape");
            if scrape.value("snapshottime_count", "") >= 1.0 {
                assert!(scrape.value("snapshottime", "quantile=0.5") > 0.0);
                break;
            }
            assert!(
                Instant::now() < deadline,
                "no snapshot recorded after {writes} writes"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    eprintln!(
        "{writes} writes and {reads} reads by {CLIENTS} clients; {requests} requests timed, \
         mean {mean:.3} ms"
    );
    drop(keeper);
}
