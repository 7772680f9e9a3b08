//! The workload flags that every benchmark run shares, whichever binary runs it: how long, how
//! many sessions and requests in flight, which workloads, how big the znodes, where the JSON goes.
//!
//! `lockkeeper bench --connect` and `lockkeeper-bench --compare` flatten the same [`LoadArgs`], so
//! a figure taken against a running server and one taken in a comparison mean the same thing.

use std::path::PathBuf;
use std::time::Duration;

use crate::workload::{Plan, Workload};

/// How each measured run is shaped.
#[derive(clap::Args, Clone, Debug)]
pub struct LoadArgs {
    /// How long each measured run lasts (e.g. 500ms, 5s, 1m).
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub duration: Duration,

    /// Unmeasured warm-up before each run, so JIT compilers and caches are hot.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub warmup: Duration,

    /// Session counts to run each workload with, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,8",
          value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub sessions: Vec<u16>,

    /// Requests in flight per session.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u16).range(1..=4096))]
    pub pipeline: u16,

    /// Workloads to run, comma-separated.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "create-delete,get"
    )]
    pub workload: Vec<Workload>,

    /// Upper bound on requests in one run, whatever --duration says (a create+delete is two).
    #[arg(long, default_value_t = 5_000_000)]
    pub max_ops: u64,

    /// Data size in bytes of the znodes that are created and read.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(0..=1_000_000))]
    pub data_size: u32,

    /// Persistent znodes to create before the memory (RSS) figure; 0 skips it.
    #[arg(long, default_value_t = 100_000)]
    pub rss_znodes: u64,

    /// Bound on opening a session, and on a started server accepting its first one.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub connect_timeout: Duration,

    /// Also write the results as JSON to this file.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,

    /// Do not draw progress bars (they are drawn on stderr, and only on a terminal).
    #[arg(long)]
    pub no_progress: bool,
}

impl LoadArgs {
    /// The plan of runs against the server at `connect` (whose PID, when known, gives its CPU
    /// time per request).
    pub fn plan(&self, connect: String, server_pid: Option<u32>) -> Plan {
        Plan {
            connect,
            duration: self.duration,
            warmup: self.warmup,
            pipeline: usize::from(self.pipeline),
            max_requests: self.max_ops,
            data_size: self.data_size as usize,
            connect_timeout: self.connect_timeout,
            progress: !self.no_progress,
            server_pid,
        }
    }

    /// `--sessions` as counts.
    pub fn session_counts(&self) -> Vec<usize> {
        self.sessions.iter().map(|&s| usize::from(s)).collect()
    }
}

/// Parses `250ms`, `5s`, `1.5s`, `2m`, `1h`; a bare number is seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| c.is_ascii_alphabetic())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number
        .trim()
        .parse()
        .map_err(|_| format!("`{text}` is not a duration (try 500ms, 5s or 2m)"))?;
    let seconds = match unit {
        "" | "s" => value,
        "ms" => value / 1e3,
        "us" => value / 1e6,
        "m" | "min" => value * 60.0,
        "h" => value * 3600.0,
        _ => {
            return Err(format!(
                "unknown unit `{unit}` in `{text}` (use ms, s, m or h)"
            ));
        }
    };
    Duration::try_from_secs_f64(seconds).map_err(|_| format!("`{text}` is not a valid duration"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(clap::Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        load: LoadArgs,
    }

    fn parse(args: &[&str]) -> Result<LoadArgs, clap::Error> {
        Cli::try_parse_from(std::iter::once("bench").chain(args.iter().copied())).map(|c| c.load)
    }

    #[test]
    fn defaults_match_the_documented_ones() {
        let load = parse(&[]).expect("defaults parse");
        assert_eq!(load.sessions, vec![1, 8]);
        assert_eq!(load.session_counts(), vec![1, 8]);
        assert_eq!(load.pipeline, 64);
        assert_eq!(load.workload, vec![Workload::CreateDelete, Workload::Get]);
        assert_eq!(load.duration, Duration::from_secs(5));
        assert_eq!(load.warmup, Duration::from_secs(2));
        assert_eq!(load.max_ops, 5_000_000);
        assert_eq!(load.rss_znodes, 100_000);
        assert_eq!(load.data_size, 16);
        assert_eq!(load.connect_timeout, Duration::from_secs(30));
        assert!(load.json.is_none() && !load.no_progress);
    }

    #[test]
    fn lists_and_enums_parse_into_the_plan() {
        let load = parse(&[
            "--sessions",
            "1,4,16",
            "--workload",
            "get",
            "--duration",
            "500ms",
            "--pipeline",
            "8",
            "--no-progress",
        ])
        .expect("parse");
        assert_eq!(load.session_counts(), vec![1, 4, 16]);
        assert_eq!(load.workload, vec![Workload::Get]);
        let plan = load.plan("127.0.0.1:2281".into(), Some(42));
        assert_eq!(plan.connect, "127.0.0.1:2281");
        assert_eq!(plan.duration, Duration::from_millis(500));
        assert_eq!(plan.pipeline, 8);
        assert_eq!(plan.server_pid, Some(42));
        assert!(!plan.progress);
    }

    #[test]
    fn out_of_range_flags_are_refused() {
        assert!(parse(&["--sessions", "0"]).is_err());
        assert!(parse(&["--pipeline", "0"]).is_err());
        assert!(parse(&["--workload", "set"]).is_err());
        assert!(parse(&["--duration", "soon"]).is_err());
        assert!(parse(&["--data-size", "1000001"]).is_err());
    }

    #[test]
    fn durations_parse_in_common_units() {
        assert_eq!(parse_duration("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("3"), Ok(Duration::from_secs(3)));
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("-1s").is_err());
        assert!(parse_duration("s").is_err());
        assert!(parse_duration("inf").is_err());
        assert!(parse_duration("NaN").is_err());
    }
}
