//! The machinery of the zkCli interop test: building a script cut into sections, running
//! `zkCli.sh` on it with a bound on time, and parsing what it printed.

use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt::Debug;
use std::fs;
use std::process::Command;
use std::time::{Duration, Instant};

use base64::Engine;
use lockkeeper_testkit::zkcli;
use sha1::{Digest, Sha1};

/// A whole zkCli run: JVM start plus a few hundred commands. Generous, as the machine is shared.
pub(crate) const RUN_TIMEOUT: Duration = Duration::from_secs(180);

pub(crate) const MARK: &str = "/zkcli-mark-";

/// The id a `digest` ACL names for `user:password`: `user:base64(sha1("user:password"))`.
pub(crate) fn digest_id(user: &str, password: &str) -> String {
    let hash = Sha1::digest(format!("{user}:{password}").as_bytes());
    format!(
        "{user}:{}",
        base64::engine::general_purpose::STANDARD.encode(hash)
    )
}

/// A zkCli script under construction, cut into named sections.
#[derive(Default)]
pub(crate) struct Script {
    lines: Vec<String>,
}

impl Script {
    pub(crate) fn section(&mut self, name: &str) -> &mut Self {
        self.lines.push(format!("stat {MARK}{name}"));
        self
    }
    pub(crate) fn cmd(&mut self, line: impl Into<String>) -> &mut Self {
        self.lines.push(line.into());
        self
    }
    pub(crate) fn text(&self) -> String {
        let mut text = self.lines.join("\n");
        text.push_str("\nquit\n");
        text
    }
}

/// zkCli's output, split into sections (watch notifications and blank lines removed) and the
/// ordered list of watch notifications.
pub(crate) struct Transcript {
    pub raw: String,
    sections: HashMap<String, Vec<String>>,
    pub events: Vec<String>,
}

impl Transcript {
    pub(crate) fn parse(raw: String) -> Transcript {
        let mut sections: HashMap<String, Vec<String>> = HashMap::new();
        let mut events = Vec::new();
        let mut current: Option<String> = None;
        let marker_prefix = format!("Node does not exist: {MARK}");
        for line in raw.lines() {
            if let Some(name) = line.strip_prefix(&marker_prefix) {
                current = Some(name.to_string());
                sections.entry(name.to_string()).or_default();
                continue;
            }
            if let Some(event) = line.strip_prefix("WatchedEvent ") {
                events.push(event.to_string());
                continue;
            }
            if line == "WATCHER::" || line.trim().is_empty() || line.starts_with("SLF4J:") {
                continue;
            }
            if let Some(name) = &current {
                sections
                    .get_mut(name)
                    .expect("section inserted when its marker was seen")
                    .push(line.to_string());
            }
        }
        Transcript {
            raw,
            sections,
            events,
        }
    }

    pub(crate) fn section(&self, name: &str) -> &[String] {
        self.sections
            .get(name)
            .map(Vec::as_slice)
            .unwrap_or_else(|| {
                panic!(
                    "zkCli output has no section {name:?}; whole output:\n{}",
                    self.raw
                )
            })
    }

    /// The section with times, zxids and session ids masked, for comparison with a literal.
    pub(crate) fn masked(&self, name: &str) -> Vec<String> {
        self.section(name).iter().map(|l| mask(l)).collect()
    }

    /// Watch notifications about nodes (connection-state events left out).
    pub(crate) fn node_events(&self) -> Vec<String> {
        self.events
            .iter()
            .filter(|e| !e.contains("type:None"))
            .cloned()
            .collect()
    }
}

/// Replaces what differs run to run (times, zxids, session ids) by placeholders.
pub(crate) fn mask(line: &str) -> String {
    for field in ["ctime", "mtime"] {
        if line.starts_with(&format!("{field} = ")) {
            return format!("{field} = <time>");
        }
    }
    for field in ["cZxid", "mZxid", "pZxid"] {
        if line.starts_with(&format!("{field} = 0x")) {
            return format!("{field} = <zxid>");
        }
    }
    if let Some(owner) = line.strip_prefix("ephemeralOwner = ")
        && owner != "0x0"
    {
        return "ephemeralOwner = <session>".into();
    }
    line.to_string()
}

/// The masked lines zkCli prints for a stat.
pub(crate) fn stat(
    cversion: u32,
    data_version: u32,
    acl_version: u32,
    owner: &str,
    data_length: u32,
    num_children: u32,
) -> Vec<String> {
    vec![
        "cZxid = <zxid>".into(),
        "ctime = <time>".into(),
        "mZxid = <zxid>".into(),
        "mtime = <time>".into(),
        "pZxid = <zxid>".into(),
        format!("cversion = {cversion}"),
        format!("dataVersion = {data_version}"),
        format!("aclVersion = {acl_version}"),
        format!("ephemeralOwner = {owner}"),
        format!("dataLength = {data_length}"),
        format!("numChildren = {num_children}"),
    ]
}

pub(crate) fn lines(literal: &[&str]) -> Vec<String> {
    literal.iter().map(ToString::to_string).collect()
}

pub(crate) fn concat(parts: Vec<Vec<String>>) -> Vec<String> {
    parts.into_iter().flatten().collect()
}

/// A zxid printed by a stat line (`cZxid = 0x1f`) in the section, by position among those lines.
pub(crate) fn zxids(section: &[String], field: &str) -> Vec<u64> {
    section
        .iter()
        .filter_map(|l| l.strip_prefix(&format!("{field} = 0x")))
        .map(|hex| u64::from_str_radix(hex, 16).expect("zxid is hex"))
        .collect()
}

/// Runs zkCli against `connect` with `script` on its standard input; returns everything it
/// printed (stdout and stderr interleaved in the order written).
pub(crate) fn run_zkcli(connect: &str, script: &str) -> String {
    let dir = tempfile::tempdir().expect("tempdir for the zkCli run");
    let input_path = dir.path().join("commands.txt");
    let output_path = dir.path().join("output.txt");
    fs::write(&input_path, script).expect("write the zkCli script");
    let output = fs::File::create(&output_path).expect("create the zkCli output file");
    let mut child = Command::new(zkcli())
        .args(["-server", connect])
        // A C1-only JIT starts faster; the run is short.
        .env(
            "CLIENT_JVMFLAGS",
            "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
        )
        .stdin(fs::File::open(&input_path).expect("open the zkCli script"))
        .stdout(output.try_clone().expect("dup the output file"))
        .stderr(output)
        .spawn()
        .expect("start zkCli.sh");
    let started = Instant::now();
    loop {
        match child.try_wait().expect("wait for zkCli") {
            Some(_) => break,
            None if started.elapsed() > RUN_TIMEOUT => {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "zkCli against {connect} still running after {RUN_TIMEOUT:?}; output so far:\n{}",
                    fs::read_to_string(&output_path).unwrap_or_default()
                );
            }
            None => std::thread::sleep(Duration::from_millis(50)),
        }
    }
    fs::read_to_string(&output_path).expect("read the zkCli output")
}

/// The transcript with zxids replaced by their rank of first appearance (so "the same zxid as
/// before" and "a new, later zxid" survive) and times and session ids masked: what two servers
/// that assign zxids from different starting points must still agree on.
pub(crate) fn zxid_shape(t: &Transcript, names: &[&str]) -> Vec<String> {
    let mut ranks: HashMap<String, usize> = HashMap::new();
    let mut out = Vec::new();
    for name in names {
        out.push(format!("## {name}"));
        for line in t.section(name) {
            let zxid = ["cZxid", "mZxid", "pZxid"]
                .iter()
                .find_map(|f| line.strip_prefix(&format!("{f} = ")).map(|v| (f, v)));
            match zxid {
                Some((field, value)) => {
                    let next = ranks.len();
                    let rank = *ranks.entry(value.to_string()).or_insert(next);
                    out.push(format!("{field} = z{rank}"));
                }
                None => out.push(mask(line)),
            }
        }
    }
    out
}

/// Collects every failed check of one backend's transcript, so that one run reports all the
/// differences at once instead of stopping at the first.
pub(crate) struct Findings {
    backend: &'static str,
    failures: RefCell<Vec<String>>,
}

impl Findings {
    pub(crate) fn new(backend: &'static str) -> Findings {
        Findings {
            backend,
            failures: RefCell::new(Vec::new()),
        }
    }

    pub(crate) fn eq<T: PartialEq + Debug>(&self, what: &str, actual: T, expected: T) {
        if actual != expected {
            self.failures.borrow_mut().push(format!(
                "{what}:\n    actual:   {actual:?}\n    expected: {expected:?}"
            ));
        }
    }

    pub(crate) fn that(&self, condition: bool, what: String) {
        if !condition {
            self.failures.borrow_mut().push(what);
        }
    }

    /// Panics listing every failure, followed by zkCli's whole output.
    pub(crate) fn finish(self, raw: &str) {
        let failures = self.failures.into_inner();
        if !failures.is_empty() {
            panic!(
                "[{}] {} zkCli check(s) failed:\n- {}\n\nwhole zkCli output:\n{raw}",
                self.backend,
                failures.len(),
                failures.join("\n- ")
            );
        }
    }
}
