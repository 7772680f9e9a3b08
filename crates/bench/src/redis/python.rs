//! The redis-py side of `lockkeeper-bench --redis`: runs the embedded Python script as a child
//! process and reads the flat JSON object of figures it prints.
//!
//! The script prints one object whose values are numbers or plain strings, so a small reader
//! here is enough (the CLI carries no JSON parser for one line it writes itself).

use std::process::Stdio;
use std::time::Duration;

use lockkeeper_testkit::die_with_parent;

use super::Settings;
use crate::BoxError;
use crate::stats::Json;

/// The script, embedded so the binary runs anywhere `python3` and redis-py are installed.
const SCRIPT: &str = include_str!("../redis_py.py");

/// What redis-py measured.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct PyFigures {
    pub version: String,
    pub uncontended_cycles: u64,
    pub uncontended_elapsed: Duration,
    pub uncontended_p50: Duration,
    pub uncontended_p99: Duration,
    pub acquisitions: u64,
    pub holder_changes: u64,
    pub contended_elapsed: Duration,
    pub wait_p50: Duration,
    pub wait_p99: Duration,
    pub wait_p999: Duration,
    pub wait_max: Duration,
}

impl PyFigures {
    pub(super) fn uncontended_per_sec(&self) -> f64 {
        self.uncontended_cycles as f64 / self.uncontended_elapsed.as_secs_f64().max(1e-9)
    }

    pub(super) fn contended_per_sec(&self) -> f64 {
        self.acquisitions as f64 / self.contended_elapsed.as_secs_f64().max(1e-9)
    }

    pub(super) fn changes_per_sec(&self) -> f64 {
        self.holder_changes as f64 / self.contended_elapsed.as_secs_f64().max(1e-9)
    }

    pub(super) fn json(&self) -> Json {
        let us = |d: Duration| Json::num(d.as_micros() as f64);
        Json::obj(vec![
            ("version", Json::Str(self.version.clone())),
            (
                "uncontended",
                Json::obj(vec![
                    ("cycles", Json::num(self.uncontended_cycles as f64)),
                    ("cycles_per_s", Json::num(self.uncontended_per_sec())),
                    ("p50_us", us(self.uncontended_p50)),
                    ("p99_us", us(self.uncontended_p99)),
                ]),
            ),
            (
                "contended",
                Json::obj(vec![
                    ("acquisitions", Json::num(self.acquisitions as f64)),
                    ("acquisitions_per_s", Json::num(self.contended_per_sec())),
                    ("holder_changes_per_s", Json::num(self.changes_per_sec())),
                    ("wait_p50_us", us(self.wait_p50)),
                    ("wait_p99_us", us(self.wait_p99)),
                    ("wait_p999_us", us(self.wait_p999)),
                    ("wait_max_us", us(self.wait_max)),
                ]),
            ),
        ])
    }

    /// Reads the script's output line.
    fn parse(line: &str) -> Result<PyFigures, String> {
        let fields = parse_flat_json(line)?;
        let text = |key: &str| -> Result<String, String> {
            match fields.iter().find(|(k, _)| k == key) {
                Some((_, Scalar::Str(s))) => Ok(s.clone()),
                _ => Err(format!("no string {key:?} in the redis-py output")),
            }
        };
        let num = |key: &str| -> Result<f64, String> {
            match fields.iter().find(|(k, _)| k == key) {
                Some((_, Scalar::Num(n))) if n.is_finite() && *n >= 0.0 => Ok(*n),
                _ => Err(format!("no number {key:?} in the redis-py output")),
            }
        };
        let count = |key: &str| num(key).map(|n| n as u64);
        let secs = |key: &str| num(key).map(Duration::from_secs_f64);
        let micros = |key: &str| num(key).map(|n| Duration::from_micros(n as u64));
        Ok(PyFigures {
            version: text("redis_py_version")?,
            uncontended_cycles: count("uncontended_cycles")?,
            uncontended_elapsed: secs("uncontended_elapsed_s")?,
            uncontended_p50: micros("uncontended_p50_us")?,
            uncontended_p99: micros("uncontended_p99_us")?,
            acquisitions: count("contended_acquisitions")?,
            holder_changes: count("contended_holder_changes")?,
            contended_elapsed: secs("contended_elapsed_s")?,
            wait_p50: micros("contended_wait_p50_us")?,
            wait_p99: micros("contended_wait_p99_us")?,
            wait_p999: micros("contended_wait_p999_us")?,
            wait_max: micros("contended_wait_max_us")?,
        })
    }
}

/// Runs the script against `url` with keys under `prefix`; bounded by a timeout well past the
/// time its two runs take.
pub(super) async fn run(
    settings: &Settings,
    url: &str,
    prefix: &str,
) -> Result<PyFigures, BoxError> {
    let mut command = std::process::Command::new(&settings.python);
    command
        .arg("-c")
        .arg(SCRIPT)
        .arg(url)
        .arg(prefix)
        .arg(settings.clients.to_string())
        .arg(settings.warmup.as_secs_f64().to_string())
        .arg(settings.duration.as_secs_f64().to_string())
        .arg(settings.hold.as_secs_f64().to_string())
        .arg(settings.max_ops.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    die_with_parent(&mut command);
    let mut command = tokio::process::Command::from(command);
    command.kill_on_drop(true);
    let child = command.spawn().map_err(|e| {
        format!(
            "cannot run {} for the redis-py side: {e}",
            settings.python.display()
        )
    })?;
    let limit = (settings.warmup + settings.duration) * 2 + Duration::from_secs(180);
    let output = tokio::time::timeout(limit, child.wait_with_output())
        .await
        .map_err(|_| format!("the redis-py side did not finish within {limit:?}"))??;
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() {
        let hint = if stderr.contains("No module named 'redis'") {
            " (install redis-py: python3 -m pip install redis; scripts/test does)"
        } else {
            ""
        };
        return Err(format!(
            "the redis-py side failed ({}){hint}:\n{}",
            output.status,
            stderr.trim_end()
        )
        .into());
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout.lines().last().unwrap_or_default();
    Ok(PyFigures::parse(line)?)
}

#[derive(Clone, Debug, PartialEq)]
enum Scalar {
    Num(f64),
    Str(String),
}

/// Parses `{"key": 1.5, "other": "text", ...}`: one object of numbers and strings without
/// escapes, which is all the script prints.
fn parse_flat_json(text: &str) -> Result<Vec<(String, Scalar)>, String> {
    let bad = || format!("not the flat JSON object expected from the redis-py side: {text:?}");
    let inner = text
        .trim()
        .strip_prefix('{')
        .and_then(|t| t.strip_suffix('}'))
        .ok_or_else(bad)?;
    let mut fields = Vec::new();
    let mut rest = inner.trim();
    while !rest.is_empty() {
        let (key, after) = quoted(rest).ok_or_else(bad)?;
        let after = after
            .trim_start()
            .strip_prefix(':')
            .ok_or_else(bad)?
            .trim_start();
        let (value, after) = if after.starts_with('"') {
            let (s, after) = quoted(after).ok_or_else(bad)?;
            (Scalar::Str(s.to_string()), after)
        } else {
            let end = after.find(',').unwrap_or(after.len());
            let number = after[..end].trim().parse::<f64>().map_err(|_| bad())?;
            (Scalar::Num(number), &after[end..])
        };
        fields.push((key.to_string(), value));
        let after = after.trim_start();
        rest = match after.strip_prefix(',') {
            Some(more) => more.trim_start(),
            None if after.is_empty() => after,
            None => return Err(bad()),
        };
    }
    Ok(fields)
}

/// A leading `"..."` (no escapes) and what follows it.
fn quoted(text: &str) -> Option<(&str, &str)> {
    let body = text.strip_prefix('"')?;
    let end = body.find('"')?;
    let content = &body[..end];
    (!content.contains('\\')).then_some((content, &body[end + 1..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_scripts_output() {
        let line = r#"{"redis_py_version": "8.1.0", "uncontended_cycles": 1200, "uncontended_elapsed_s": 1.5, "uncontended_p50_us": 950.5, "uncontended_p99_us": 2100.0, "contended_acquisitions": 800, "contended_holder_changes": 12, "contended_elapsed_s": 2.0, "contended_wait_samples": 810, "contended_wait_p50_us": 100.0, "contended_wait_p99_us": 200000.0, "contended_wait_p999_us": 1900000.0, "contended_wait_max_us": 2000000.0}"#;
        let figures = PyFigures::parse(line).expect("parses");
        assert_eq!(figures.version, "8.1.0");
        assert_eq!(figures.uncontended_cycles, 1200);
        assert_eq!(figures.uncontended_per_sec(), 800.0);
        assert_eq!(figures.uncontended_p50, Duration::from_micros(950));
        assert_eq!(figures.contended_per_sec(), 400.0);
        assert_eq!(figures.changes_per_sec(), 6.0);
        assert_eq!(figures.wait_p999, Duration::from_millis(1900));
    }

    #[test]
    fn refuses_anything_else() {
        for bad in [
            "",
            "Traceback (most recent call last):",
            "{\"a\": }",
            "{\"a\" 1}",
            "{\"a\": 1 \"b\": 2}",
            "{\"a\": \"x\\\"y\"}",
            "[1, 2]",
        ] {
            assert!(parse_flat_json(bad).is_err(), "{bad:?} accepted");
        }
        assert_eq!(parse_flat_json("{}"), Ok(vec![]));
        let missing = PyFigures::parse(r#"{"redis_py_version": "8.1.0"}"#);
        assert!(missing.unwrap_err().contains("uncontended_cycles"));
    }
}
