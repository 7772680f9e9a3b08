//! Snapshots: the whole state at one zxid, written in the background so recovery need not replay
//! the log from the beginning.
//!
//! Taking one must not stall requests, and the core owns the tree, so the tree's capture
//! (`state::tree`) walks it a chunk at a time between batches of requests, recording each node
//! as it was at the snapshot's zxid (a write ahead of the walk records the pre-image first).
//! The [`Encoder`] here turns what the capture records into the file's bytes. A writer thread
//! streams them to `snapshot.<zxid>.tmp`, and once the log is durable up to that zxid, syncs,
//! renames it into place, syncs the directory and purges what is no longer needed.
//!
//! File: `LKSNAPSH`, u32 version, i64 zxid, sessions (i32 count, then id, timeout, password), ACL
//! table (i32 count, then each ACL), node records in tree order (tag 1, path, data, ACL index,
//! stat fields), end (tag 0, i64 node count), u32 crc32c of all bytes before it.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, mpsc};
use std::time::Instant;

use bytes::Bytes;
use lockkeeper_proto::{Acl, DecodeError, Jute, Reader};

use crate::disk::log::{segment_name, sync_dir};
use crate::metrics::Summary;
use crate::state::session::SessionRecord;
use crate::state::tree::{Node, NodeRecord, NodeSink};

pub(crate) const SNAPSHOT_MAGIC: &[u8; 8] = b"LKSNAPSH";
const NODE_TAG: u8 = 1;
const END_TAG: u8 = 0;

pub(crate) fn snapshot_name(zxid: i64) -> String {
    format!("snapshot.{zxid:016x}")
}

/// A snapshot's encoder: the header (zxid, sessions, ACL table), then each node the tree's
/// capture records, then the end record. The capture decides *which* nodes and in what state;
/// this decides their bytes.
pub(crate) struct Encoder {
    /// ACL (by the address of its shared allocation) -> index in the snapshot's ACL table.
    acl_index: HashMap<usize, i32>,
    out: Vec<u8>,
    count: i64,
}

impl Encoder {
    /// Starts a snapshot at `zxid` with the server's sessions and every ACL in use (nodes refer
    /// to ACLs by their index in this table, so a node costs four bytes of ACL).
    pub(crate) fn new(zxid: i64, sessions: &[SessionRecord], acls: &[Arc<[Acl]>]) -> Encoder {
        let mut out = Vec::with_capacity(64 * 1024);
        out.extend_from_slice(SNAPSHOT_MAGIC);
        out.extend_from_slice(&2u32.to_be_bytes());
        zxid.write(&mut out);
        (sessions.len() as i32).write(&mut out);
        for s in sessions {
            s.id.write(&mut out);
            s.timeout_ms.write(&mut out);
            out.extend_from_slice(&s.passwd);
        }
        (acls.len() as i32).write(&mut out);
        let mut acl_index = HashMap::with_capacity(acls.len());
        for (i, acl) in acls.iter().enumerate() {
            acl.to_vec().write(&mut out);
            acl_index.insert(Arc::as_ptr(acl) as *const Acl as usize, i as i32);
        }
        Encoder {
            acl_index,
            out,
            count: 0,
        }
    }
}

impl NodeSink for Encoder {
    fn node(&mut self, path: &str, node: &Node) {
        encode_node(&mut self.out, path, node, &self.acl_index);
        self.count += 1;
    }

    /// Takes the bytes produced so far, to stream them to the writer.
    fn take_bytes(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.out)
    }

    /// The closing bytes (before the checksum, which the writer adds).
    fn finish(mut self: Box<Self>) -> Vec<u8> {
        self.out.push(END_TAG);
        self.count.write(&mut self.out);
        std::mem::take(&mut self.out)
    }
}

fn encode_node(out: &mut Vec<u8>, path: &str, node: &Node, acl_index: &HashMap<usize, i32>) {
    out.push(NODE_TAG);
    path.to_string().write(out);
    lockkeeper_proto::jute::write_data(out, node.data.as_deref());
    // Every ACL a recorded node can have existed when the snapshot started (a node whose ACL
    // changed since was recorded before the change). Were one missing, -1 makes the file
    // unusable at load, never silently wrong.
    let index = acl_index.get(&(Arc::as_ptr(&node.acl) as *const Acl as usize));
    index.copied().unwrap_or(-1).write(out);
    for v in [node.czxid, node.mzxid, node.ctime, node.mtime] {
        v.write(out);
    }
    for v in [node.version, node.aversion, node.child_creations] {
        v.write(out);
    }
    node.ephemeral_owner.write(out);
    node.pzxid.write(out);
}

pub(crate) struct Loaded {
    pub zxid: i64,
    pub sessions: Vec<SessionRecord>,
    pub acls: Vec<Arc<[Acl]>>,
    pub nodes: Vec<NodeRecord>,
}

/// Reads and checks a whole snapshot file. `Err` says why it cannot be used.
pub(crate) fn load(path: &Path) -> Result<Loaded, String> {
    let bytes = fs::read(path).map_err(|e| format!("cannot read: {e}"))?;
    load_bytes(&bytes)
}

/// Checks and parses a snapshot file's bytes (see [`load`]).
pub(crate) fn load_bytes(bytes: &[u8]) -> Result<Loaded, String> {
    if bytes.len() < 8 + 4 + 8 + 4 + 1 + 8 + 4 || &bytes[..8] != SNAPSHOT_MAGIC {
        return Err("not a snapshot (bad magic or too short)".into());
    }
    let (body, crc) = bytes.split_at(bytes.len() - 4);
    let stored = u32::from_be_bytes([crc[0], crc[1], crc[2], crc[3]]);
    if crc32c::crc32c(body) != stored {
        return Err("checksum mismatch".into());
    }
    parse(Bytes::copy_from_slice(&body[8..])).map_err(|e| format!("malformed: {e}"))
}

fn parse(body: Bytes) -> Result<Loaded, DecodeError> {
    let mut r = Reader::new(body);
    let _version = r.read_i32()?;
    let zxid = r.read_i64()?;
    let session_count = r.read_i32()?;
    let mut sessions = Vec::new();
    for _ in 0..session_count.max(0) {
        let id = r.read_i64()?;
        let timeout_ms = r.read_i32()?;
        let mut passwd = [0u8; 16];
        passwd.copy_from_slice(&r.read_raw(16)?);
        sessions.push(SessionRecord {
            id,
            timeout_ms,
            passwd,
        });
    }
    let acl_count = r.read_i32()?;
    let mut acls: Vec<Arc<[Acl]>> = Vec::new();
    for _ in 0..acl_count.max(0) {
        acls.push(Vec::<Acl>::read(&mut r)?.into());
    }
    let mut nodes = Vec::new();
    loop {
        match read_u8(&mut r)? {
            NODE_TAG => {
                let path = r.read_string()?;
                let data: Option<Bytes> = Jute::read(&mut r)?;
                let index = r.read_i32()?;
                let acl = usize::try_from(index).ok().and_then(|i| acls.get(i));
                let node = Node {
                    data: data.map(|d| Box::from(&d[..])),
                    acl: acl.cloned().ok_or(DecodeError::NegativeLength(index))?,
                    czxid: r.read_i64()?,
                    mzxid: r.read_i64()?,
                    ctime: r.read_i64()?,
                    mtime: r.read_i64()?,
                    version: r.read_i32()?,
                    aversion: r.read_i32()?,
                    child_creations: r.read_i32()?,
                    ephemeral_owner: r.read_i64()?,
                    pzxid: r.read_i64()?,
                    num_children: 0, // counted by `DataTree::restore`
                };
                nodes.push((path, node));
            }
            END_TAG => {
                let count = r.read_i64()?;
                if count != nodes.len() as i64 {
                    return Err(DecodeError::TrailingBytes(count.unsigned_abs() as usize));
                }
                r.finish()?;
                return Ok(Loaded {
                    zxid,
                    sessions,
                    acls,
                    nodes,
                });
            }
            other => return Err(DecodeError::UnknownOpCode(i32::from(other))),
        }
    }
}

fn read_u8(r: &mut Reader) -> Result<u8, DecodeError> {
    Ok(r.read_raw(1)?[0])
}

/// What the core streams to the snapshot writer thread.
pub(crate) enum SnapshotMsg {
    Start {
        zxid: i64,
    },
    Chunk(Vec<u8>),
    /// The closing bytes; the log is durable up to the snapshot's zxid by now.
    Finish(Vec<u8>),
}

/// A snapshot file being written.
struct InProgress {
    zxid: i64,
    /// When the core started the snapshot (it sends `Start` as it does), for `snapshottime`.
    started: Instant,
    tmp: PathBuf,
    file: io::BufWriter<File>,
    crc: u32,
    unsynced: u64,
}

/// The file is synced every this many bytes while it is written. One sync of the whole file at
/// the end would queue the log's syncs behind hundreds of MiB of dirty pages.
const SYNC_EVERY: u64 = 4 << 20;

impl InProgress {
    fn start(dir: &Path, zxid: i64) -> io::Result<InProgress> {
        let tmp = dir.join(format!("{}.tmp", snapshot_name(zxid)));
        let file = io::BufWriter::with_capacity(1 << 20, File::create(&tmp)?);
        Ok(InProgress {
            zxid,
            started: Instant::now(),
            tmp,
            file,
            crc: 0,
            unsynced: 0,
        })
    }

    fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.crc = crc32c::crc32c_append(self.crc, bytes);
        self.file.write_all(bytes)?;
        self.unsynced += bytes.len() as u64;
        if self.unsynced >= SYNC_EVERY {
            self.file.flush()?;
            self.file.get_ref().sync_data()?;
            self.unsynced = 0;
        }
        Ok(())
    }

    /// Adds the closing bytes and the checksum, syncs, renames into place, syncs the directory.
    fn finish(mut self, dir: &Path, last: &[u8]) -> io::Result<()> {
        self.write(last)?;
        let sum = self.crc;
        self.file.write_all(&sum.to_be_bytes())?;
        let file = self
            .file
            .into_inner()
            .map_err(std::io::IntoInnerError::into_error)?;
        file.sync_all()?;
        fs::rename(&self.tmp, dir.join(snapshot_name(self.zxid)))?;
        sync_dir(dir)?;
        tracing::info!(zxid = format_args!("{:#x}", self.zxid), "snapshot written");
        Ok(())
    }
}

/// The thread that writes snapshots and purges old files. Dropping it lets the thread finish
/// what is queued and joins it, so nothing writes to the data dir once the core is gone (and the
/// data dir lock, dropped after it, is released only then).
pub(crate) struct SnapshotWriter {
    tx: Option<mpsc::Sender<SnapshotMsg>>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// Every snapshot written, for `/metrics`' `snapshottime`.
    snapshot_time: Arc<Summary>,
}

impl SnapshotWriter {
    /// Queues `msg` for the writer thread.
    pub(crate) fn send(&self, msg: SnapshotMsg) -> Result<(), mpsc::SendError<SnapshotMsg>> {
        match &self.tx {
            Some(tx) => tx.send(msg),
            None => Err(mpsc::SendError(msg)),
        }
    }

    pub(crate) fn snapshot_time(&self) -> Arc<Summary> {
        self.snapshot_time.clone()
    }
}

impl Drop for SnapshotWriter {
    fn drop(&mut self) {
        self.tx.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Starts the thread that writes snapshots and purges old files.
pub(crate) fn spawn_writer(dir: PathBuf, retain: usize) -> io::Result<SnapshotWriter> {
    let (tx, rx) = mpsc::channel();
    let snapshot_time = Summary::snapshot_time();
    let timing = snapshot_time.clone();
    let thread = std::thread::Builder::new().name("keeper-snapshot".into()).spawn(move || {
        let mut current: Option<InProgress> = None;
        for msg in rx {
            let result = match msg {
                SnapshotMsg::Start { zxid } => InProgress::start(&dir, zxid).map(|s| current = Some(s)),
                SnapshotMsg::Chunk(bytes) => current.as_mut().map_or(Ok(()), |s| s.write(&bytes)),
                SnapshotMsg::Finish(bytes) => match current.take() {
                    Some(s) => {
                        let started = s.started;
                        s.finish(&dir, &bytes)
                            .map(|()| timing.observe(started.elapsed()))
                            .and_then(|()| purge(&dir, retain))
                    }
                    None => Ok(()),
                },
            };
            if let Err(error) = result {
                tracing::error!(%error, "snapshot failed; recovery will use the previous snapshot and more log");
                if let Some(s) = current.take() {
                    let _ = fs::remove_file(s.tmp);
                }
            }
        }
    })?;
    Ok(SnapshotWriter {
        tx: Some(tx),
        thread: Some(thread),
        snapshot_time,
    })
}

/// Keeps the newest `retain` snapshots and the log segments needed to recover from the oldest
/// of them: a segment can go once the next one starts at or before that snapshot's zxid + 1.
pub(crate) fn purge(dir: &Path, retain: usize) -> io::Result<()> {
    let (mut snapshots, logs) = list(dir)?;
    snapshots.sort_unstable();
    if snapshots.len() <= retain.max(1) {
        return Ok(());
    }
    let keep_from = snapshots.len() - retain.max(1);
    for zxid in &snapshots[..keep_from] {
        fs::remove_file(dir.join(snapshot_name(*zxid)))?;
    }
    let oldest = snapshots[keep_from];
    for pair in logs.windows(2) {
        if pair[1] <= oldest + 1 {
            fs::remove_file(dir.join(segment_name(pair[0])))?;
        }
    }
    Ok(())
}

/// Snapshot zxids and log segment start zxids in `dir`, each sorted ascending.
pub(crate) fn list(dir: &Path) -> io::Result<(Vec<i64>, Vec<i64>)> {
    let mut snapshots = Vec::new();
    let mut logs = Vec::new();
    for entry in fs::read_dir(dir)? {
        let name = entry?.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(hex) = name.strip_prefix("snapshot.").filter(|h| h.len() == 16) {
            if let Ok(z) = u64::from_str_radix(hex, 16) {
                snapshots.push(z as i64);
            }
        } else if let Some(hex) = name.strip_prefix("log.").filter(|h| h.len() == 16)
            && let Ok(z) = u64::from_str_radix(hex, 16)
        {
            logs.push(z as i64);
        }
    }
    snapshots.sort_unstable();
    logs.sort_unstable();
    Ok((snapshots, logs))
}
