//! Figures of a benchmark run and how they are printed: latency histograms, the per-run table,
//! human-readable durations and sizes, and a small JSON writer for `--json`.
//!
//! JSON is written by hand because the output is a handful of numbers and fixed names; a string
//! escaper covers the only free text (error messages and command lines).

use std::fmt::Write as _;
use std::time::Duration;

use hdrhistogram::Histogram;

use super::workload::Workload;

/// Latencies are kept in microseconds from 1 µs to 60 s with three significant digits: finer than
/// any loopback round trip needs, and enough range for a stalled fsync.
pub fn new_histogram() -> Histogram<u64> {
    // The bounds are constants that satisfy hdrhistogram's preconditions (low >= 1, high >= 2 *
    // low, sigfig <= 5), so construction cannot fail.
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("valid histogram bounds")
}

/// Records one request latency.
pub fn record(hist: &mut Histogram<u64>, latency: Duration) {
    let us = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
    hist.saturating_record(us.max(1));
}

/// The outcome of one measured run: one workload, a number of sessions, a time window.
#[derive(Clone, Debug)]
pub struct RunStats {
    pub workload: Workload,
    pub sessions: usize,
    pub pipeline: usize,
    /// Completed requests (a create and its delete are two).
    pub requests: u64,
    /// From the first request sent to the last reply received.
    pub elapsed: Duration,
    pub latency: Histogram<u64>,
    /// CPU time (user + system) the server process used during the measured window, when its
    /// PID is known. Per request, it shows the server's cost even where the load generator,
    /// sharing the machine, is what limits throughput.
    pub server_cpu: Option<Duration>,
}

impl RunStats {
    pub fn ops_per_sec(&self) -> f64 {
        let secs = self.elapsed.as_secs_f64();
        if secs > 0.0 {
            self.requests as f64 / secs
        } else {
            0.0
        }
    }

    /// Server CPU time per request, in microseconds.
    pub fn server_cpu_us_per_request(&self) -> Option<f64> {
        let cpu = self.server_cpu?;
        (self.requests > 0).then(|| cpu.as_secs_f64() * 1e6 / self.requests as f64)
    }

    /// Latency at quantile `q` (0.5 = p50, 0.999 = p99.9).
    pub fn quantile(&self, q: f64) -> Duration {
        Duration::from_micros(self.latency.value_at_quantile(q))
    }
}

/// The per-run table header, aligned with [`run_row`].
pub fn run_header() -> String {
    format!(
        "{:<16} {:>8} {:>8} {:>10} {:>11} {:>9} {:>9} {:>9} {:>13}",
        "workload",
        "sessions",
        "pipeline",
        "requests",
        "ops/s",
        "p50",
        "p99",
        "p99.9",
        "server-cpu"
    )
}

pub fn run_row(s: &RunStats) -> String {
    format!(
        "{:<16} {:>8} {:>8} {:>10} {:>11.0} {:>9} {:>9} {:>9} {:>13}",
        s.workload.name(),
        s.sessions,
        s.pipeline,
        s.requests,
        s.ops_per_sec(),
        fmt_duration(s.quantile(0.5)),
        fmt_duration(s.quantile(0.99)),
        fmt_duration(s.quantile(0.999)),
        s.server_cpu_us_per_request()
            .map_or("-".to_string(), |us| format!("{us:.1}us/req")),
    )
}

/// `842us`, `2.41ms`, `1.20s`: short and unambiguous at any scale a benchmark meets.
/// `count` per second of `elapsed` (0 for no time at all).
pub fn rate(count: u64, elapsed: Duration) -> f64 {
    let secs = elapsed.as_secs_f64();
    if secs > 0.0 { count as f64 / secs } else { 0.0 }
}

pub fn fmt_duration(d: Duration) -> String {
    let us = d.as_micros();
    if us < 1_000 {
        format!("{us}us")
    } else if us < 1_000_000 {
        format!("{:.2}ms", us as f64 / 1e3)
    } else {
        format!("{:.2}s", us as f64 / 1e6)
    }
}

/// `512 KiB`, `61.3 MiB`, `1.20 GiB`.
pub fn fmt_kib(kib: u64) -> String {
    if kib < 1024 {
        format!("{kib} KiB")
    } else if kib < 1024 * 1024 {
        format!("{:.1} MiB", kib as f64 / 1024.0)
    } else {
        format!("{:.2} GiB", kib as f64 / (1024.0 * 1024.0))
    }
}

/// `a / b` as a ratio string, `3.41x` or `0.031x`; `-` when either side is missing or `b` is 0.
pub fn fmt_ratio(a: Option<f64>, b: Option<f64>) -> String {
    match ratio(a, b) {
        Some(r) if r >= 10.0 => format!("{r:.1}x"),
        Some(r) if r >= 0.1 => format!("{r:.2}x"),
        Some(r) => format!("{r:.4}x"),
        None => "-".to_string(),
    }
}

pub fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 && a.is_finite() && b.is_finite() => Some(a / b),
        _ => None,
    }
}

/// Median of a non-empty list of durations (the lower middle for even counts).
pub fn median(values: &[Duration]) -> Option<Duration> {
    let mut sorted = values.to_vec();
    sorted.sort();
    sorted.get(sorted.len().saturating_sub(1) / 2).copied()
}

/// A minimal JSON value, enough for the benchmark report.
#[derive(Clone, Debug, PartialEq)]
pub enum Json {
    Null,
    Num(f64),
    Str(String),
    Arr(Vec<Json>),
    Obj(Vec<(String, Json)>),
}

impl Json {
    pub fn obj(fields: Vec<(&str, Json)>) -> Json {
        Json::Obj(
            fields
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
        )
    }

    pub fn num<T: Into<f64>>(v: T) -> Json {
        Json::Num(v.into())
    }

    pub fn opt_num(v: Option<f64>) -> Json {
        v.map_or(Json::Null, Json::Num)
    }

    /// Pretty-printed with two-space indentation, ending in a newline.
    pub fn render(&self) -> String {
        let mut out = String::new();
        self.write(&mut out, 0);
        out.push('\n');
        out
    }

    fn write(&self, out: &mut String, indent: usize) {
        match self {
            Json::Null => out.push_str("null"),
            // JSON has no NaN or infinity; a non-finite figure is reported as unknown.
            Json::Num(n) if !n.is_finite() => out.push_str("null"),
            Json::Num(n) if n.fract() == 0.0 && n.abs() < 9.0e15 => {
                let _ = write!(out, "{}", *n as i64);
            }
            Json::Num(n) => {
                let _ = write!(out, "{n}");
            }
            Json::Str(s) => write_json_string(out, s),
            Json::Arr(items) if items.is_empty() => out.push_str("[]"),
            Json::Arr(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    out.push_str(if i == 0 { "\n" } else { ",\n" });
                    push_indent(out, indent + 1);
                    item.write(out, indent + 1);
                }
                out.push('\n');
                push_indent(out, indent);
                out.push(']');
            }
            Json::Obj(fields) if fields.is_empty() => out.push_str("{}"),
            Json::Obj(fields) => {
                out.push('{');
                for (i, (k, v)) in fields.iter().enumerate() {
                    out.push_str(if i == 0 { "\n" } else { ",\n" });
                    push_indent(out, indent + 1);
                    write_json_string(out, k);
                    out.push_str(": ");
                    v.write(out, indent + 1);
                }
                out.push('\n');
                push_indent(out, indent);
                out.push('}');
            }
        }
    }
}

fn push_indent(out: &mut String, indent: usize) {
    for _ in 0..indent {
        out.push_str("  ");
    }
}

fn write_json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// One run as JSON: counts, throughput and latency quantiles in microseconds.
pub fn run_json(s: &RunStats) -> Json {
    Json::obj(vec![
        ("workload", Json::Str(s.workload.name().to_string())),
        ("sessions", Json::num(s.sessions as u32)),
        ("pipeline", Json::num(s.pipeline as u32)),
        ("requests", Json::Num(s.requests as f64)),
        ("elapsed_s", Json::num(s.elapsed.as_secs_f64())),
        ("ops_per_sec", Json::num(s.ops_per_sec())),
        ("p50_us", Json::Num(s.latency.value_at_quantile(0.5) as f64)),
        (
            "p99_us",
            Json::Num(s.latency.value_at_quantile(0.99) as f64),
        ),
        (
            "p999_us",
            Json::Num(s.latency.value_at_quantile(0.999) as f64),
        ),
        ("max_us", Json::Num(s.latency.max() as f64)),
        (
            "server_cpu_us_per_request",
            Json::opt_num(s.server_cpu_us_per_request()),
        ),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(latencies_us: &[u64], elapsed: Duration) -> RunStats {
        let mut latency = new_histogram();
        for &us in latencies_us {
            record(&mut latency, Duration::from_micros(us));
        }
        RunStats {
            workload: Workload::Get,
            sessions: 8,
            pipeline: 64,
            requests: latencies_us.len() as u64,
            elapsed,
            latency,
            server_cpu: Some(Duration::from_millis(3)),
        }
    }

    #[test]
    fn throughput_and_quantiles_follow_the_samples() {
        let samples: Vec<u64> = (1..=1000).collect();
        let s = stats(&samples, Duration::from_millis(500));
        assert!((s.ops_per_sec() - 2000.0).abs() < 1e-6);
        // Three significant digits: p50 of 1..=1000 µs is 500 µs, p99 is 990 µs.
        assert_eq!(s.quantile(0.5), Duration::from_micros(500));
        assert_eq!(s.quantile(0.99), Duration::from_micros(990));
        assert_eq!(s.quantile(1.0), Duration::from_micros(1000));
        // 3 ms of server CPU over 1000 requests.
        let per_request = s.server_cpu_us_per_request().expect("cpu known");
        assert!((per_request - 3.0).abs() < 1e-9, "{per_request}");
    }

    #[test]
    fn zero_latency_is_recorded_as_one_microsecond_and_zero_time_gives_zero_rate() {
        let s = stats(&[0], Duration::ZERO);
        assert_eq!(s.latency.len(), 1);
        assert_eq!(s.quantile(0.5), Duration::from_micros(1));
        assert_eq!(s.ops_per_sec(), 0.0);
    }

    #[test]
    fn run_row_lines_up_with_header() {
        let s = stats(&[100, 200, 300], Duration::from_secs(1));
        let header = run_header();
        let row = run_row(&s);
        assert_eq!(header.len(), row.len(), "{header}\n{row}");
        assert!(row.starts_with("get "));
        assert!(row.contains(" 3 "), "{row}");
        assert!(row.ends_with("1000.0us/req"), "{row}");
    }

    #[test]
    fn durations_sizes_and_ratios_are_human_readable() {
        assert_eq!(fmt_duration(Duration::from_micros(842)), "842us");
        assert_eq!(fmt_duration(Duration::from_micros(2_410)), "2.41ms");
        assert_eq!(fmt_duration(Duration::from_millis(1_200)), "1.20s");
        assert_eq!(fmt_kib(512), "512 KiB");
        assert_eq!(fmt_kib(62_771), "61.3 MiB");
        assert_eq!(fmt_ratio(Some(341.0), Some(100.0)), "3.41x");
        assert_eq!(fmt_ratio(Some(31.0), Some(1000.0)), "0.0310x");
        assert_eq!(fmt_ratio(Some(1.0), Some(0.0)), "-");
        assert_eq!(fmt_ratio(None, Some(1.0)), "-");
        assert_eq!(ratio(Some(3.0), Some(2.0)), Some(1.5));
    }

    #[test]
    fn median_picks_the_middle() {
        let ms = Duration::from_millis;
        assert_eq!(median(&[ms(9), ms(1), ms(5)]), Some(ms(5)));
        assert_eq!(median(&[ms(4), ms(2)]), Some(ms(2)));
        assert_eq!(median(&[]), None);
    }

    #[test]
    fn json_escapes_and_nests() {
        let v = Json::obj(vec![
            ("name", Json::Str("a \"quoted\"\\path\n\u{1}".to_string())),
            ("n", Json::num(3u32)),
            ("x", Json::num(0.5)),
            ("none", Json::opt_num(None)),
            ("nan", Json::Num(f64::NAN)),
            ("list", Json::Arr(vec![Json::Null, Json::Arr(vec![])])),
        ]);
        let text = v.render();
        assert_eq!(
            text,
            "{\n  \"name\": \"a \\\"quoted\\\"\\\\path\\n\\u0001\",\n  \"n\": 3,\n  \"x\": 0.5,\n  \
             \"none\": null,\n  \"nan\": null,\n  \"list\": [\n    null,\n    []\n  ]\n}\n"
        );
    }

    #[test]
    fn run_json_carries_the_quantiles() {
        let s = stats(&[100, 200, 300, 400], Duration::from_secs(2));
        let Json::Obj(fields) = run_json(&s) else {
            panic!("object expected")
        };
        let get = |k: &str| fields.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        assert_eq!(get("requests"), Some(Json::Num(4.0)));
        assert_eq!(get("ops_per_sec"), Some(Json::Num(2.0)));
        assert_eq!(get("max_us"), Some(Json::Num(400.0)));
        assert_eq!(get("workload"), Some(Json::Str("get".into())));
    }
}
