//! Shared support for the durability tests: Keeper as a real child process that can be killed
//! with SIGKILL, offline readers of the data directory's files, and ZooKeeper client helpers.
//!
//! The durability tests must crash the server the way a power cut or an OOM kill would, so
//! Keeper runs as `lockkeeper serve` in a process of its own (an in-process server cannot be
//! killed without killing the test). Each test binary compiles this module separately and uses
//! only part of it, hence the `dead_code` allowance.

#![allow(dead_code)]

use std::fs;
use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::SeedableRng;
use rand::rngs::StdRng;
use zookeeper_client::{Client, Stat};

/// The `lockkeeper` binary built for these tests.
pub(crate) const LOCKKEEPER: &str = env!("CARGO_BIN_EXE_lockkeeper");

/// What Keeper prints on stdout once it listens, after recovery.
const SERVING: &str = "lockkeeper serving ZooKeeper clients on ";
const SERVING_TLS: &str = "lockkeeper serving ZooKeeper clients over TLS on ";

/// How long a start (recovery included) may take on a loaded machine.
pub(crate) const START_LIMIT: Duration = Duration::from_secs(120);

/// The longest a single client interaction may take. Generous: the machine is shared.
pub(crate) const OP_LIMIT: Duration = Duration::from_secs(30);

/// A `lockkeeper serve` child process. Killed with SIGKILL and reaped on drop.
pub(crate) struct KeeperProcess {
    child: Child,
    addr: SocketAddr,
    /// The secure listener's address, with `--secure-listen`.
    secure_addr: Option<SocketAddr>,
    /// When the process was spawned.
    pub spawned_at: Instant,
    /// When the server said it was serving: recovery is over at this instant.
    pub ready_at: Instant,
    stderr: Arc<Mutex<String>>,
    stderr_done: mpsc::Receiver<()>,
    exited: Option<ExitStatus>,
}

/// A start that did not reach "serving": the exit status (if the process ended in time) and
/// everything it wrote on stderr.
#[derive(Debug)]
pub(crate) struct StartFailure {
    pub status: Option<ExitStatus>,
    pub stderr: String,
}

impl std::fmt::Display for StartFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "keeper did not start (status {:?}); stderr:\n{}",
            self.status,
            tail(&self.stderr, 40)
        )
    }
}

/// The command line common to every server these tests start: loopback port chosen by the
/// kernel (printed back on stdout), every four-letter word allowed, fsync on every commit.
pub(crate) fn serve_args(data_dir: &Path) -> Vec<String> {
    vec![
        "serve".into(),
        "--listen".into(),
        "127.0.0.1:0".into(),
        "--data-dir".into(),
        data_dir.display().to_string(),
        "--sync".into(),
        "always".into(),
        "--4lw-whitelist".into(),
        "*".into(),
    ]
}

/// A `lockkeeper` command whose process dies with the test: the kernel sends it SIGKILL when
/// the thread that spawned it ends, so a test killed by a runner leaves no server behind.
fn lockkeeper_command(args: &[String]) -> Command {
    let mut command = Command::new(LOCKKEEPER);
    command
        .args(args)
        // The torn-tail warning is asserted on: keep it visible whatever the caller's RUST_LOG.
        .env("RUST_LOG", "info,zookeeper_client=error")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    lockkeeper_testkit::die_with_parent(&mut command);
    command
}

impl KeeperProcess {
    /// Starts `lockkeeper serve` on `data_dir` with the common flags plus `extra`, and waits
    /// until it serves. Panics (with its stderr) if it does not.
    pub(crate) fn start(data_dir: &Path, extra: &[&str]) -> KeeperProcess {
        KeeperProcess::try_start(data_dir, extra).unwrap_or_else(|failure| {
            panic!(
                "start keeper on {} with {extra:?}: {failure}",
                data_dir.display()
            )
        })
    }

    /// Starts the server and waits (bounded by [`START_LIMIT`]) until it prints its serving
    /// line, or returns how it failed: a server that refuses a corrupt data dir exits instead.
    pub(crate) fn try_start(
        data_dir: &Path,
        extra: &[&str],
    ) -> Result<KeeperProcess, StartFailure> {
        KeeperProcess::try_start_with_env(data_dir, extra, &[])
    }

    /// [`KeeperProcess::try_start`] with `env` added to the server's environment.
    pub(crate) fn try_start_with_env(
        data_dir: &Path,
        extra: &[&str],
        env: &[(&str, &std::ffi::OsStr)],
    ) -> Result<KeeperProcess, StartFailure> {
        let mut args = serve_args(data_dir);
        args.extend(extra.iter().map(ToString::to_string));
        let spawned_at = Instant::now();
        let mut command = lockkeeper_command(&args);
        command.envs(env.iter().copied());
        let mut child = command.spawn().expect("spawn lockkeeper serve");
        let stdout = child.stdout.take().expect("piped stdout");
        let stderr_pipe = child.stderr.take().expect("piped stderr");
        let stderr = Arc::new(Mutex::new(String::new()));
        let (stderr_done_tx, stderr_done) = mpsc::channel();
        {
            let stderr = Arc::clone(&stderr);
            std::thread::spawn(move || {
                for line in BufReader::new(stderr_pipe).lines().map_while(Result::ok) {
                    let mut text = stderr
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    text.push_str(&strip_ansi(&line));
                    text.push('\n');
                }
                let _ = stderr_done_tx.send(());
            });
        }
        let (lines_tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if lines_tx.send(line).is_err() {
                    break;
                }
            }
        });
        let deadline = Instant::now() + START_LIMIT;
        let mut process = KeeperProcess {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            secure_addr: None,
            spawned_at,
            ready_at: Instant::now(),
            stderr,
            stderr_done,
            exited: None,
        };
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match lines.recv_timeout(left.min(Duration::from_millis(200))) {
                Ok(line) => {
                    if let Some(addr) = line.strip_prefix(SERVING_TLS) {
                        process.secure_addr = Some(
                            addr.trim()
                                .parse()
                                .unwrap_or_else(|e| panic!("serving line {line:?}: {e}")),
                        );
                    }
                    if let Some(addr) = line.strip_prefix(SERVING) {
                        process.addr = addr
                            .trim()
                            .parse()
                            .unwrap_or_else(|e| panic!("serving line {line:?}: {e}"));
                        process.ready_at = Instant::now();
                        // Keep draining stdout so the server never blocks on a full pipe.
                        std::thread::spawn(move || for _ in lines {});
                        return Ok(process);
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if left.is_zero() {
                        process.kill9();
                        return Err(StartFailure {
                            status: None,
                            stderr: process.stderr_text(),
                        });
                    }
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    // Stdout closed: the process is ending without having served.
                    let status = process.wait_exit(Duration::from_secs(30));
                    if status.is_none() {
                        process.kill9();
                    }
                    return Err(StartFailure {
                        status,
                        stderr: process.stderr_text(),
                    });
                }
            }
        }
    }

    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The secure listener's address; panics without one.
    #[allow(dead_code)] // not every test binary uses it
    pub(crate) fn secure_addr(&self) -> SocketAddr {
        self.secure_addr.expect("started with --secure-listen")
    }

    pub(crate) fn connect_string(&self) -> String {
        self.addr.to_string()
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The server's log once it contains `needle`, or whatever it has after `within` (the log is
    /// read by a background thread, so a line written before the server listened may still be
    /// on its way when the test looks).
    pub(crate) fn stderr_containing(&self, needle: &str, within: Duration) -> String {
        let deadline = Instant::now() + within;
        loop {
            let text = self.stderr_text();
            if text.contains(needle) || Instant::now() >= deadline {
                return text;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Everything the server wrote on stderr so far (its log).
    pub(crate) fn stderr_text(&self) -> String {
        self.stderr
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The server's resident memory now and at its peak so far, in KiB (`VmRSS` and `VmHWM`
    /// of `/proc/PID/status`).
    pub(crate) fn memory_kib(&self) -> (u64, u64) {
        let path = format!("/proc/{}/status", self.child.id());
        let status = fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {path}: {e}"));
        let field = |name: &str| {
            status
                .lines()
                .find_map(|line| line.strip_prefix(name))
                .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
                .unwrap_or_else(|| panic!("no {name} line in {path}:\n{status}"))
        };
        (field("VmRSS:"), field("VmHWM:"))
    }

    /// Sends `signal` (SIGSTOP to freeze the server, SIGCONT to thaw it) to exactly this PID.
    pub(crate) fn signal(&self, signal: libc::c_int) {
        assert!(self.exited.is_none(), "signal {signal} to an exited server");
        // SAFETY: kill(2) with our own child's PID, not reaped yet, so not reused.
        let rc = unsafe { libc::kill(self.child.id() as libc::pid_t, signal) };
        assert_eq!(
            rc,
            0,
            "kill({}, {signal}): {}",
            self.child.id(),
            std::io::Error::last_os_error()
        );
    }

    /// Crashes the server: SIGKILL to exactly this PID, then reaps it.
    pub(crate) fn kill9(&mut self) {
        if self.exited.is_some() {
            return;
        }
        // `Child::kill` sends SIGKILL to this PID only; an already-exited child is fine.
        let _ = self.child.kill();
        self.exited = self.child.wait().ok();
        self.drain_stderr();
    }

    /// Stops the server the polite way (SIGTERM), SIGKILL if it does not exit within `limit`.
    pub(crate) fn terminate(&mut self, limit: Duration) -> Option<ExitStatus> {
        if self.exited.is_none() {
            // SAFETY: kill(2) with our own child's PID, which we have not reaped yet, so the
            // PID cannot have been reused by another process.
            unsafe {
                libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM);
            }
            if self.wait_exit(limit).is_none() {
                self.kill9();
            }
        }
        self.exited
    }

    /// Waits (bounded) for the process to exit on its own; its status, or None on timeout.
    fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + limit;
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => {
                    self.exited = Some(status);
                    self.drain_stderr();
                    return Some(status);
                }
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                _ => return None,
            }
        }
    }

    /// Waits (bounded) until the stderr reader saw EOF, so the captured log is complete.
    fn drain_stderr(&self) {
        let _ = self.stderr_done.recv_timeout(Duration::from_secs(5));
    }
}

impl Drop for KeeperProcess {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// `text` without ANSI escape sequences (terminal colours), which the server's log may carry
/// even into a pipe, and which would split `offset=N` into pieces.
pub(crate) fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' && chars.peek() == Some(&'[') {
            chars.next();
            // Parameters and intermediates, up to the final byte in '@'..='~'.
            for c in chars.by_ref() {
                if ('@'..='~').contains(&c) {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The last `lines` lines of `text`.
pub(crate) fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// What `lockkeeper verify DIR` said.
#[derive(Debug)]
pub(crate) struct VerifyOutcome {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl VerifyOutcome {
    /// Stdout and stderr together: where a line lands is the tool's choice.
    pub(crate) fn text(&self) -> String {
        format!("{}\n{}", self.stdout, self.stderr)
    }
}

/// Runs `lockkeeper verify data_dir` (bounded to 120 s) and returns its exit code and output.
pub(crate) fn verify(data_dir: &Path) -> VerifyOutcome {
    let mut child = lockkeeper_command(&["verify".into(), data_dir.display().to_string()])
        .spawn()
        .expect("spawn lockkeeper verify");
    let mut stdout = child.stdout.take().expect("piped stdout");
    let mut stderr = child.stderr.take().expect("piped stderr");
    let out = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stdout.read_to_string(&mut text);
        text
    });
    let err = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        match child.try_wait().expect("wait for lockkeeper verify") {
            Some(status) => break status,
            None if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            None => {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "lockkeeper verify {} did not finish in 120 s",
                    data_dir.display()
                );
            }
        }
    };
    VerifyOutcome {
        code: status.code(),
        stdout: strip_ansi(&out.join().expect("stdout reader")),
        stderr: strip_ansi(&err.join().expect("stderr reader")),
    }
}

// ---------------------------------------------------------------------------------------------
// The data directory's files, read offline.
// ---------------------------------------------------------------------------------------------

/// The 8-byte magic that opens every log segment.
pub(crate) const LOG_MAGIC: &[u8; 8] = b"LKTXNLOG";
/// Segment header: magic, u32 version, u32 zero.
pub(crate) const LOG_HEADER_LEN: u64 = 16;
/// Record framing before the payload: u32 len, u32 crc32c.
pub(crate) const RECORD_FRAME_LEN: u64 = 8;

/// A data-dir file whose name is `<prefix>.<16 hex digits of a zxid>`.
#[derive(Debug, Clone)]
pub(crate) struct NamedFile {
    pub path: PathBuf,
    pub zxid: i64,
}

impl NamedFile {
    pub(crate) fn file_name(&self) -> String {
        self.path
            .file_name()
            .expect("a file name")
            .to_string_lossy()
            .into_owned()
    }
}

/// Files named `prefix.<zxid>` in `dir` (not `.tmp` leftovers), oldest first.
fn named_files(dir: &Path, prefix: &str) -> Vec<NamedFile> {
    let mut files: Vec<NamedFile> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("list {}: {e}", dir.display()))
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let hex = name.strip_prefix(prefix)?.strip_prefix('.')?;
            if hex.len() != 16 {
                return None;
            }
            let zxid = u64::from_str_radix(hex, 16).ok()? as i64;
            Some(NamedFile {
                path: entry.path(),
                zxid,
            })
        })
        .collect();
    files.sort_by_key(|f| f.zxid);
    files
}

/// The log segments of `dir`, oldest first.
pub(crate) fn log_segments(dir: &Path) -> Vec<NamedFile> {
    named_files(dir, "log")
}

/// The complete snapshots of `dir` (no `.tmp`), oldest first.
pub(crate) fn snapshots(dir: &Path) -> Vec<NamedFile> {
    named_files(dir, "snapshot")
}

/// One record of a log segment, located by parsing the framing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RecordSpan {
    /// Offset of the record's `len` field in the file.
    pub offset: u64,
    /// Payload length.
    pub len: u32,
    pub zxid: i64,
}

impl RecordSpan {
    /// Offset one past the record's last byte.
    pub(crate) fn end(&self) -> u64 {
        self.offset + RECORD_FRAME_LEN + u64::from(self.len)
    }
}

/// Why parsing a segment stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SegmentEnd {
    /// A `len` of 0: the written part ends here (the rest is preallocation).
    EndMarker(u64),
    /// The file ends exactly after a record.
    Eof(u64),
    /// A record runs past the end of the file (cut short) at this offset.
    CutShort(u64),
    /// A record at this offset fails its checksum.
    BadChecksum(u64),
}

/// A parsed segment: its valid records in order and how the parse ended.
#[derive(Debug, Clone)]
pub(crate) struct ParsedSegment {
    pub records: Vec<RecordSpan>,
    pub end: SegmentEnd,
}

/// Parses a log segment's bytes: header, then `len | crc32c | payload` records until `len` is
/// 0, the file ends, or a record is damaged. Panics on a bad header (not a segment at all).
pub(crate) fn parse_segment(bytes: &[u8]) -> ParsedSegment {
    assert!(
        bytes.len() as u64 >= LOG_HEADER_LEN,
        "segment shorter than its header"
    );
    assert_eq!(&bytes[..8], LOG_MAGIC, "segment magic");
    assert_eq!(
        u32::from_be_bytes(bytes[8..12].try_into().expect("4 bytes")),
        1,
        "segment version"
    );
    let mut records = Vec::new();
    let mut offset = LOG_HEADER_LEN;
    let total = bytes.len() as u64;
    let end = loop {
        if offset == total {
            break SegmentEnd::Eof(offset);
        }
        if offset + RECORD_FRAME_LEN > total {
            break SegmentEnd::CutShort(offset);
        }
        let at = offset as usize;
        let len = u32::from_be_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
        if len == 0 {
            break SegmentEnd::EndMarker(offset);
        }
        let crc = u32::from_be_bytes(bytes[at + 4..at + 8].try_into().expect("4 bytes"));
        let payload_start = offset + RECORD_FRAME_LEN;
        let payload_end = payload_start + u64::from(len);
        if payload_end > total {
            break SegmentEnd::CutShort(offset);
        }
        let payload = &bytes[payload_start as usize..payload_end as usize];
        if crc32c(payload) != crc || payload.len() < 16 {
            break SegmentEnd::BadChecksum(offset);
        }
        let zxid = i64::from_be_bytes(payload[..8].try_into().expect("8 bytes"));
        records.push(RecordSpan { offset, len, zxid });
        offset = payload_end;
    };
    ParsedSegment { records, end }
}

/// Reads and parses the segment at `path`.
pub(crate) fn read_segment(path: &Path) -> ParsedSegment {
    let bytes = fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    parse_segment(&bytes)
}

/// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the log's record checksum.
pub(crate) fn crc32c(data: &[u8]) -> u32 {
    static TABLE: std::sync::OnceLock<[u32; 256]> = std::sync::OnceLock::new();
    let table = TABLE.get_or_init(|| {
        let mut table = [0u32; 256];
        for (i, slot) in table.iter_mut().enumerate() {
            let mut crc = i as u32;
            for _ in 0..8 {
                crc = if crc & 1 != 0 {
                    (crc >> 1) ^ 0x82F6_3B78
                } else {
                    crc >> 1
                };
            }
            *slot = crc;
        }
        table
    });
    let mut crc = !0u32;
    for &byte in data {
        crc = table[((crc ^ u32::from(byte)) & 0xff) as usize] ^ (crc >> 8);
    }
    !crc
}

/// Copies every regular file of `from` into `to` (created), so each damage case works on its
/// own copy of one recorded data directory.
pub(crate) fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap_or_else(|e| panic!("create {}: {e}", to.display()));
    for entry in fs::read_dir(from).unwrap_or_else(|e| panic!("list {}: {e}", from.display())) {
        let entry = entry.expect("directory entry");
        if entry.file_type().expect("file type").is_file() {
            fs::copy(entry.path(), to.join(entry.file_name()))
                .unwrap_or_else(|e| panic!("copy {}: {e}", entry.path().display()));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Seeds and clients.
// ---------------------------------------------------------------------------------------------

/// The seed from `env_var` if set (decimal or 0x-hex), else a fresh one; printed either way so
/// a failing run can be replayed.
pub(crate) fn seeded_rng(env_var: &str) -> (u64, StdRng) {
    let seed = match std::env::var(env_var) {
        Ok(text) => {
            let text = text.trim();
            let parsed = match text.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => text.parse(),
            };
            parsed.unwrap_or_else(|e| panic!("{env_var}={text:?} is not a u64: {e}"))
        }
        Err(_) => rand::random(),
    };
    eprintln!("seed: {env_var}={seed}");
    (seed, StdRng::seed_from_u64(seed))
}

/// Awaits `fut` at most `limit`; a timeout fails the test naming `what`.
pub(crate) async fn within<T>(
    what: &str,
    limit: Duration,
    fut: impl std::future::Future<Output = T>,
) -> T {
    lockkeeper_testkit::within(limit, what, fut).await
}

/// A new session on `connect` (bounded), panicking with the reason if it cannot be opened.
pub(crate) async fn connect(connect: &str) -> Client {
    within(
        "connect",
        OP_LIMIT,
        Client::connector()
            .with_session_timeout(Duration::from_secs(20))
            .connect(connect),
    )
    .await
    .unwrap_or_else(|e| panic!("connect to {connect}: {e}"))
}

/// The zxid a write left in its stat: mzxid covers creates (mzxid = czxid) and setData.
pub(crate) fn write_zxid(stat: &Stat) -> i64 {
    stat.mzxid
}

/// The epoch half of a zxid.
pub(crate) fn epoch(zxid: i64) -> i64 {
    zxid >> 32
}

/// Reads many nodes at once (up to `parallel` requests in flight), returning for each path
/// its data and stat, or None if it does not exist. Any other error fails the test.
pub(crate) async fn read_nodes(
    client: &Client,
    paths: &[String],
    parallel: usize,
) -> Vec<Option<(Vec<u8>, Stat)>> {
    use futures::StreamExt;
    let results: Vec<Option<(Vec<u8>, Stat)>> = futures::stream::iter(paths.iter())
        .map(|path| async move {
            match within("get_data", OP_LIMIT, client.get_data(path)).await {
                Ok(found) => Some(found),
                Err(zookeeper_client::Error::NoNode) => None,
                Err(e) => panic!("get_data {path}: {e}"),
            }
        })
        .buffered(parallel)
        .collect()
        .await;
    results
}

/// Polls `four_letter_word(addr, "mntr")` until its `zk_server_state` is `state`, at most
/// `limit`; the last answer if it never is.
pub(crate) fn wait_server_state(
    addr: SocketAddr,
    state: &str,
    limit: Duration,
) -> Result<(), String> {
    let deadline = Instant::now() + limit;
    let mut last = String::new();
    while Instant::now() < deadline {
        match lockkeeper_testkit::try_four_letter_word(addr, "mntr", Duration::from_secs(5)) {
            Ok(answer) => {
                if mntr_state(&answer).as_deref() == Some(state) {
                    return Ok(());
                }
                last = answer;
            }
            Err(e) => last = format!("mntr failed: {e}"),
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Err(last)
}

/// The `zk_server_state` value of an `mntr` answer.
pub(crate) fn mntr_state(answer: &str) -> Option<String> {
    answer.lines().find_map(|line| {
        line.strip_prefix("zk_server_state\t")
            .map(|v| v.trim().to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The checksum the log uses: CRC-32C's published check value.
    #[test]
    fn crc32c_check_value() {
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c(b""), 0);
    }

    fn record(out: &mut Vec<u8>, zxid: i64, body: &[u8]) {
        let mut payload = Vec::new();
        payload.extend_from_slice(&zxid.to_be_bytes());
        payload.extend_from_slice(&7i64.to_be_bytes());
        payload.extend_from_slice(body);
        out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
        out.extend_from_slice(&crc32c(&payload).to_be_bytes());
        out.extend_from_slice(&payload);
    }

    fn header() -> Vec<u8> {
        let mut out = LOG_MAGIC.to_vec();
        out.extend_from_slice(&1u32.to_be_bytes());
        out.extend_from_slice(&0u32.to_be_bytes());
        out
    }

    #[test]
    fn ansi_colours_are_stripped() {
        let line = "\u{1b}[33m WARN\u{1b}[0m torn \u{1b}[3moffset\u{1b}[0m\u{1b}[2m=\u{1b}[0m14313";
        assert_eq!(strip_ansi(line), " WARN torn offset=14313");
    }

    #[test]
    fn segment_parser_finds_records_and_damage() {
        let mut bytes = header();
        record(&mut bytes, 0x1_0000_0001, b"first");
        record(&mut bytes, 0x1_0000_0002, b"second txn");
        let written = bytes.len();
        bytes.extend_from_slice(&[0u8; 64]);
        let parsed = parse_segment(&bytes);
        assert_eq!(parsed.records.len(), 2);
        assert_eq!(parsed.records[0].offset, LOG_HEADER_LEN);
        assert_eq!(parsed.records[1].zxid, 0x1_0000_0002);
        assert_eq!(parsed.records[1].end() as usize, written);
        assert_eq!(parsed.end, SegmentEnd::EndMarker(written as u64));

        let second = parsed.records[1].offset;
        let cut = parse_segment(&bytes[..written - 3]);
        assert_eq!(cut.records.len(), 1);
        assert_eq!(cut.end, SegmentEnd::CutShort(second));

        let mut flipped = bytes.clone();
        flipped[second as usize + 12] ^= 0x40;
        let bad = parse_segment(&flipped);
        assert_eq!(bad.records.len(), 1);
        assert_eq!(bad.end, SegmentEnd::BadChecksum(second));
    }
}
