//! Recovery: rebuilding the state from the data dir at start, and `lockkeeper verify`.
//!
//! The newest snapshot that checks out is loaded, then every log record after its zxid is
//! replayed in order. A record cut short or failing its checksum at the very end of the last
//! segment is a torn tail: a write that was never acknowledged (replies wait for the sync), so it
//! is dropped and the segment truncated. Damage anywhere else means acknowledged data may be
//! missing, so recovery refuses and names the file and offset.

use std::fmt;
use std::fs::{self, OpenOptions};
use std::path::{Path, PathBuf};

use bytes::Bytes;
use lockkeeper_proto::Reader;

use crate::disk::log::{
    RECORD_HEADER_LEN, SEGMENT_HEADER_LEN, SEGMENT_MAGIC, segment_name, sync_dir,
};
use crate::disk::snapshot::{self, snapshot_name};
use crate::state::apply::{self, State};
use crate::state::session::Sessions;
use crate::state::tree::DataTree;
use crate::state::txn::Txn;

/// The zxid of the very first txn a data dir ever holds (epoch 1, counter 1): a log that starts
/// there is complete even without a snapshot.
pub(crate) const FIRST_ZXID: i64 = (1 << 32) | 1;

/// Whether recovery may change files (truncate a torn tail, remove stale temp files).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// At start: truncate a torn tail and remove stale temp files.
    Repair,
    /// For `lockkeeper verify`: report, change nothing.
    Check,
}

/// Damage that recovery will not paper over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Corruption {
    /// The damaged file.
    pub file: PathBuf,
    /// Where in it the damage starts, in bytes.
    pub offset: u64,
    /// What is wrong there.
    pub reason: String,
}

impl fmt::Display for Corruption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "corrupt {} at offset {}: {}",
            self.file.display(),
            self.offset,
            self.reason
        )
    }
}

impl std::error::Error for Corruption {}

/// A line about one file, for logs and `lockkeeper verify`.
#[derive(Debug, Clone)]
pub struct FileReport {
    /// The snapshot or log segment.
    pub file: PathBuf,
    /// What recovery made of it, e.g. `valid, 12 nodes, zxid 0x100000003`.
    pub status: String,
}

/// A torn tail found (and, in repair mode, cut off).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornTail {
    /// The last log segment, where the tail was.
    pub file: PathBuf,
    /// Where the incomplete record starts: the segment's length after the repair.
    pub offset: u64,
    /// The bytes from there to the old end of the segment.
    pub dropped_bytes: u64,
}

/// What a data dir holds: the state (its parts as the core's `State` has them) and how it was
/// read.
pub struct Recovered {
    /// The nodes.
    pub tree: DataTree,
    /// The live sessions, ephemerals' owners among them.
    pub sessions: Sessions,
    /// The zxid of the last transaction recovered; the server continues after it.
    pub last_zxid: i64,
    /// The zxid of the snapshot loaded, if one was.
    pub snapshot_zxid: Option<i64>,
    /// The number of log records replayed on top of the snapshot.
    pub replayed: u64,
    /// The torn tail found at the end of the log, if any.
    pub torn_tail: Option<TornTail>,
    /// One line per file looked at, in the order read.
    pub files: Vec<FileReport>,
}

impl Recovered {
    /// The recovered state, as the core applies txns to it.
    pub(crate) fn into_state(self) -> State {
        State {
            tree: self.tree,
            sessions: self.sessions,
            last_zxid: self.last_zxid,
        }
    }
}

/// Rebuilds the state stored in `dir` (an empty or missing dir is a fresh server).
pub fn recover(dir: &Path, mode: Mode) -> Result<Recovered, Corruption> {
    recover_through(dir, mode, i64::MAX)
}

/// [`recover`], leaving out the log records past zxid `through`. After a disk fault the core
/// reloads only what the durable mark covers: a record written but never published may still be
/// on disk (its group failed after it, or its sync ended after the fault), and the log cuts it
/// off when it resumes, so state rebuilt from it would be state no reply may reveal and no
/// restart would bring back.
pub(crate) fn recover_through(
    dir: &Path,
    mode: Mode,
    through: i64,
) -> Result<Recovered, Corruption> {
    let io_error = |e: std::io::Error| Corruption {
        file: dir.to_path_buf(),
        offset: 0,
        reason: e.to_string(),
    };
    if mode == Mode::Repair {
        fs::create_dir_all(dir).map_err(io_error)?;
        remove_stale_temp_files(dir);
    } else if !dir.exists() {
        return Err(Corruption {
            file: dir.to_path_buf(),
            offset: 0,
            reason: "no such directory".into(),
        });
    }
    let (snapshots, logs) = snapshot::list(dir).map_err(io_error)?;
    let mut files = Vec::new();

    let mut base = None;
    for zxid in snapshots.iter().rev() {
        let path = dir.join(snapshot_name(*zxid));
        if base.is_some() {
            // Reading it would only slow the start down: the newer one is sound.
            files.push(FileReport {
                file: path,
                status: "older; not read".into(),
            });
            continue;
        }
        match snapshot::load(&path) {
            Ok(loaded) if base.is_none() => {
                files.push(FileReport {
                    file: path,
                    status: format!("valid, {} nodes, zxid {zxid:#x}", loaded.nodes.len()),
                });
                base = Some(loaded);
            }
            Ok(_) => files.push(FileReport {
                file: path,
                status: "valid (older, not needed)".into(),
            }),
            Err(reason) => {
                tracing::warn!(file = %path.display(), %reason, "skipping unusable snapshot");
                files.push(FileReport {
                    file: path,
                    status: format!("unusable: {reason}"),
                });
            }
        }
    }
    let (mut state, snapshot_zxid) = match base {
        Some(loaded) => {
            let tree = DataTree::restore(loaded.acls, loaded.nodes);
            (
                State::restore(tree, &loaded.sessions, loaded.zxid),
                Some(loaded.zxid),
            )
        }
        None => {
            // Without a snapshot, the logs must reach back to the first txn ever.
            if let Some(first) = logs.first().filter(|first| **first != FIRST_ZXID) {
                let file = dir.join(segment_name(*first));
                let reason = if snapshots.is_empty() {
                    "no snapshot, and the log does not start at the first transaction".to_string()
                } else {
                    "no usable snapshot, and the log does not reach back far enough to replace it"
                        .to_string()
                };
                return Err(Corruption {
                    file,
                    offset: 0,
                    reason,
                });
            }
            (State::empty(), None)
        }
    };

    let from = snapshot_zxid.unwrap_or(0);
    // The segment holding `from + 1` is the last one starting at or before it.
    let first_needed = logs
        .iter()
        .rposition(|start| *start <= from + 1)
        .unwrap_or(0);
    let needed = &logs[first_needed.min(logs.len())..];
    let mut replayed = 0;
    let mut torn_tail = None;
    for (i, start) in needed.iter().enumerate() {
        let path = dir.join(segment_name(*start));
        let is_last = i + 1 == needed.len();
        let bytes = fs::read(&path).map_err(|e| Corruption {
            file: path.clone(),
            offset: 0,
            reason: e.to_string(),
        })?;
        let scan = scan_segment(&path, &bytes, is_last)?;
        let mut count = 0;
        let mut past = 0;
        for record in scan.records {
            if record.zxid <= from {
                continue;
            }
            if record.zxid > through {
                past += 1;
                continue;
            }
            if record.zxid <= state.last_zxid {
                return Err(Corruption {
                    file: path.clone(),
                    offset: record.offset,
                    reason: format!(
                        "zxid {:#x} does not follow {:#x}",
                        record.zxid, state.last_zxid
                    ),
                });
            }
            apply::apply(&mut state, &record.txn, record.zxid, record.time);
            count += 1;
        }
        replayed += count;
        let past = match past {
            0 => String::new(),
            n => format!(", {n} past zxid {through:#x} left out"),
        };
        let status = match &scan.torn_at {
            Some(offset) => format!(
                "{count} records replayed{past}; torn tail at offset {offset} ({} bytes dropped)",
                scan.end.saturating_sub(*offset)
            ),
            None => format!("{count} records replayed{past}"),
        };
        files.push(FileReport {
            file: path.clone(),
            status,
        });
        if let Some(offset) = scan.torn_at {
            if mode == Mode::Repair {
                truncate(&path, offset).map_err(|e| Corruption {
                    file: path.clone(),
                    offset,
                    reason: e.to_string(),
                })?;
                tracing::warn!(file = %path.display(), offset, dropped = scan.end.saturating_sub(offset), "truncated torn tail (never acknowledged)");
            }
            torn_tail = Some(TornTail {
                file: path,
                offset,
                dropped_bytes: scan.end.saturating_sub(offset),
            });
        }
    }
    Ok(Recovered {
        tree: state.tree,
        sessions: state.sessions,
        last_zxid: state.last_zxid,
        snapshot_zxid,
        replayed,
        torn_tail,
        files,
    })
}

/// Every transaction the log segments in `dir` hold, in zxid order, with its zxid: what a
/// checker reads to learn the server's own order of events (which node existed when). Read
/// only; a torn tail of the last segment is left out, as recovery would. Segments purged
/// after a snapshot are not there: the history starts at the oldest segment kept.
pub fn history(dir: &Path) -> Result<Vec<(i64, Txn)>, Corruption> {
    let (_, logs) = snapshot::list(dir).map_err(|e| Corruption {
        file: dir.to_path_buf(),
        offset: 0,
        reason: e.to_string(),
    })?;
    let mut history = Vec::new();
    for (i, start) in logs.iter().enumerate() {
        let path = dir.join(segment_name(*start));
        let bytes = fs::read(&path).map_err(|e| Corruption {
            file: path.clone(),
            offset: 0,
            reason: e.to_string(),
        })?;
        let scan = scan_segment(&path, &bytes, i + 1 == logs.len())?;
        history.extend(scan.records.into_iter().map(|r| (r.zxid, r.txn)));
    }
    Ok(history)
}

struct Record {
    offset: u64,
    zxid: i64,
    time: i64,
    txn: Txn,
}

struct Scan {
    records: Vec<Record>,
    /// Where a torn tail starts, if the segment ends in one.
    torn_at: Option<u64>,
    /// Bytes in use (up to the zero padding or the end of the file).
    end: u64,
}

/// Scans a segment's bytes as [`scan_segment`] does, for the fuzz targets (`crate::fuzzing`).
#[cfg(feature = "fuzzing")]
pub(crate) fn scan_bytes(bytes: &[u8], is_last: bool) {
    let _ = scan_segment(Path::new("fuzzed-segment"), bytes, is_last);
}

/// Reads the records of one segment. A bad record is a torn tail only in the last segment, and
/// only if nothing valid follows it.
fn scan_segment(path: &Path, bytes: &[u8], is_last: bool) -> Result<Scan, Corruption> {
    let corrupt = |offset: u64, reason: String| Corruption {
        file: path.to_path_buf(),
        offset,
        reason,
    };
    let header_len = SEGMENT_HEADER_LEN as usize;
    // The whole header is checked: magic, version 1, and the reserved zero word.
    let header_ok = bytes.len() >= header_len
        && &bytes[..8] == SEGMENT_MAGIC
        && bytes[8..12] == 1u32.to_be_bytes()
        && bytes[12..16] == [0; 4];
    if !header_ok {
        // A crash right after creating the newest segment can leave it shorter than its header.
        if is_last
            && bytes.iter().skip(8.min(bytes.len())).all(|b| *b == 0)
            && bytes.len() < header_len
        {
            return Ok(Scan {
                records: Vec::new(),
                torn_at: Some(0),
                end: bytes.len() as u64,
            });
        }
        return Err(corrupt(0, "not a log segment (bad header)".into()));
    }
    let used_end = bytes
        .iter()
        .rposition(|b| *b != 0)
        .map_or(header_len, |i| i + 1)
        .max(header_len);
    let mut records = Vec::new();
    let mut pos = header_len;
    while pos + RECORD_HEADER_LEN <= bytes.len() {
        let len = u32::from_be_bytes([bytes[pos], bytes[pos + 1], bytes[pos + 2], bytes[pos + 3]])
            as usize;
        if len == 0 {
            // Zero padding: the end, unless bytes were written past it.
            if pos >= used_end {
                return Ok(Scan {
                    records,
                    torn_at: None,
                    end: pos as u64,
                });
            }
            return bad_record(
                path,
                bytes,
                pos,
                used_end,
                is_last,
                records,
                "zero length before the end of the data",
            );
        }
        match decode_record(bytes, pos, len) {
            Ok(record) => {
                records.push(record);
                pos += RECORD_HEADER_LEN + len;
            }
            Err(reason) => {
                return bad_record(path, bytes, pos, used_end, is_last, records, &reason);
            }
        }
    }
    if pos < bytes.len() {
        return bad_record(
            path,
            bytes,
            pos,
            used_end,
            is_last,
            records,
            "record header cut short",
        );
    }
    Ok(Scan {
        records,
        torn_at: None,
        end: pos as u64,
    })
}

/// Whether a whole, checksummed record newer than `after` starts at `at`.
fn valid_record_at(bytes: &[u8], at: usize, after: i64) -> bool {
    let Some(header) = bytes.get(at..at + RECORD_HEADER_LEN) else {
        return false;
    };
    let len = u32::from_be_bytes([header[0], header[1], header[2], header[3]]) as usize;
    // A payload holds at least a zxid and a time.
    len >= 16 && decode_record(bytes, at, len).is_ok_and(|r| r.zxid > after)
}

fn decode_record(bytes: &[u8], pos: usize, len: usize) -> Result<Record, String> {
    let payload_start = pos + RECORD_HEADER_LEN;
    let Some(payload) = bytes.get(payload_start..payload_start + len) else {
        return Err("record cut short".into());
    };
    let crc = u32::from_be_bytes([
        bytes[pos + 4],
        bytes[pos + 5],
        bytes[pos + 6],
        bytes[pos + 7],
    ]);
    if crc32c::crc32c(payload) != crc {
        return Err("checksum mismatch".into());
    }
    let mut r = Reader::new(Bytes::copy_from_slice(payload));
    let zxid = r.read_i64().map_err(|e| e.to_string())?;
    let time = r.read_i64().map_err(|e| e.to_string())?;
    let txn = Txn::decode(&mut r).map_err(|e| format!("undecodable txn: {e}"))?;
    Ok(Record {
        offset: pos as u64,
        zxid,
        time,
        txn,
    })
}

/// Decides whether the bad record at `pos` is a torn tail or corruption.
fn bad_record(
    path: &Path,
    bytes: &[u8],
    pos: usize,
    used_end: usize,
    is_last: bool,
    records: Vec<Record>,
    reason: &str,
) -> Result<Scan, Corruption> {
    let corrupt = |reason: String| Corruption {
        file: path.to_path_buf(),
        offset: pos as u64,
        reason,
    };
    if !is_last {
        return Err(corrupt(format!(
            "{reason} (not at the end of the last segment)"
        )));
    }
    // A torn tail is the last thing written: if any valid record lies after the bad one, the
    // damage is in the middle of acknowledged data. The bad record's own length cannot be
    // trusted to find the next one, so every later offset is tried.
    let last_zxid = records.last().map_or(i64::MIN, |r| r.zxid);
    if let Some(found) = (pos + 1..used_end).find(|at| valid_record_at(bytes, *at, last_zxid)) {
        return Err(corrupt(format!(
            "{reason}, with a valid record after it at offset {found}"
        )));
    }
    Ok(Scan {
        records,
        torn_at: Some(pos as u64),
        end: used_end.max(pos) as u64,
    })
}

fn truncate(path: &Path, offset: u64) -> std::io::Result<()> {
    let file = OpenOptions::new().write(true).open(path)?;
    file.set_len(offset)?;
    file.sync_all()?;
    if let Some(dir) = path.parent() {
        sync_dir(dir)?;
    }
    Ok(())
}

fn remove_stale_temp_files(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        if name
            .to_str()
            .is_some_and(|n| n.starts_with("snapshot.") && n.ends_with(".tmp"))
        {
            let _ = fs::remove_file(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::SyncMode;
    use crate::disk::log::TxnLog;
    use crate::disk::snapshot::{Encoder, SnapshotMsg};
    use crate::state::tree::NodeSink;
    use crate::state::txn;
    use std::os::unix::fs::FileExt;

    fn create(path: &str, data: &'static [u8]) -> Txn {
        Txn::Create {
            path: path.into(),
            data: Some(Bytes::from_static(data)),
            acl: crate::state::acl::open_acl(),
            ephemeral_owner: 0,
        }
    }

    /// Logs `txns` at consecutive zxids from FIRST_ZXID and waits for them to be durable.
    fn write_log(dir: &Path, txns: &[Txn]) {
        let (events, _rx) = tokio::sync::mpsc::unbounded_channel();
        let mut log =
            TxnLog::open(dir, SyncMode::Always, std::time::Duration::ZERO, 0, events).unwrap();
        for (i, txn) in txns.iter().enumerate() {
            log.append(FIRST_ZXID + i as i64, 1000, txn);
        }
        log.flush();
        drop(log);
    }

    fn segment(dir: &Path) -> PathBuf {
        dir.join(segment_name(FIRST_ZXID))
    }

    /// The test log's segment, opened to read and damage it.
    fn open_segment(dir: &Path) -> fs::File {
        OpenOptions::new()
            .read(true)
            .write(true)
            .open(segment(dir))
            .unwrap()
    }

    #[test]
    fn replays_the_log_into_the_same_tree() {
        let dir = tempfile::tempdir().unwrap();
        write_log(
            dir.path(),
            &[
                create("/a", b"1"),
                create("/a/b", b"2"),
                Txn::SetData {
                    path: "/a".into(),
                    data: None,
                    version: 1,
                },
            ],
        );
        let r = recover(dir.path(), Mode::Repair).unwrap();
        assert_eq!(r.last_zxid, FIRST_ZXID + 2);
        assert_eq!(r.replayed, 3);
        let a = r.tree.get("/a").unwrap();
        assert_eq!((a.data.clone(), a.version, a.num_children), (None, 1, 1));
        assert_eq!(r.tree.get("/a/b").unwrap().data.as_deref(), Some(&b"2"[..]));
    }

    #[test]
    fn the_history_is_every_record_in_zxid_order() {
        let dir = tempfile::tempdir().unwrap();
        let txns = [
            create("/a", b"1"),
            create("/b", b"2"),
            Txn::Delete { path: "/a".into() },
        ];
        write_log(dir.path(), &txns);
        let history = history(dir.path()).unwrap();
        let zxids: Vec<i64> = history.iter().map(|(zxid, _)| *zxid).collect();
        assert_eq!(zxids, [FIRST_ZXID, FIRST_ZXID + 1, FIRST_ZXID + 2]);
        let read: Vec<Txn> = history.into_iter().map(|(_, txn)| txn).collect();
        assert_eq!(read, txns);
    }

    #[test]
    fn a_bounded_recovery_leaves_out_the_records_past_its_bound_and_says_so() {
        let dir = tempfile::tempdir().unwrap();
        write_log(
            dir.path(),
            &[create("/a", b"1"), create("/b", b"2"), create("/c", b"3")],
        );
        let r = recover_through(dir.path(), Mode::Check, FIRST_ZXID + 1).unwrap();
        assert_eq!((r.last_zxid, r.replayed), (FIRST_ZXID + 1, 2));
        assert!(r.tree.get("/b").is_some());
        assert!(
            r.tree.get("/c").is_none(),
            "a record past the bound was applied"
        );
        let status = &r.files.last().unwrap().status;
        assert!(status.contains("1 past zxid"), "{status}");
        // The file is untouched: an unbounded recovery still finds all three.
        assert_eq!(recover(dir.path(), Mode::Check).unwrap().replayed, 3);
    }

    /// Where each record of the segment starts, and where the data ends.
    fn record_offsets(path: &Path) -> (Vec<u64>, u64) {
        let bytes = fs::read(path).unwrap();
        let mut pos = SEGMENT_HEADER_LEN as usize;
        let mut offsets = Vec::new();
        loop {
            let len = u32::from_be_bytes(bytes[pos..pos + 4].try_into().unwrap()) as usize;
            if len == 0 {
                return (offsets, pos as u64);
            }
            offsets.push(pos as u64);
            pos += RECORD_HEADER_LEN + len;
        }
    }

    #[test]
    fn a_record_cut_short_at_the_end_is_a_torn_tail_and_is_truncated() {
        let dir = tempfile::tempdir().unwrap();
        write_log(
            dir.path(),
            &[create("/a", b"1"), create("/b", b"2"), create("/c", b"3")],
        );
        let (offsets, end) = record_offsets(&segment(dir.path()));
        // Zero the last record from its middle on, as a crash during the write leaves it.
        let cut = offsets[2] + 10;
        let file = open_segment(dir.path());
        file.write_all_at(&vec![0; (end - cut) as usize], cut)
            .unwrap();
        let check = recover(dir.path(), Mode::Check).unwrap();
        assert_eq!(check.torn_tail.as_ref().map(|t| t.offset), Some(offsets[2]));
        let r = recover(dir.path(), Mode::Repair).unwrap();
        assert!(r.tree.get("/b").is_some() && r.tree.get("/c").is_none());
        assert_eq!(fs::metadata(segment(dir.path())).unwrap().len(), offsets[2]);
        // Once cut, the log is clean.
        assert!(
            recover(dir.path(), Mode::Check)
                .unwrap()
                .torn_tail
                .is_none()
        );
    }

    #[test]
    fn damage_followed_by_valid_records_is_corruption_named_by_file_and_offset() {
        let dir = tempfile::tempdir().unwrap();
        write_log(
            dir.path(),
            &[create("/a", b"1"), create("/b", b"2"), create("/c", b"3")],
        );
        let (offsets, _) = record_offsets(&segment(dir.path()));
        let file = open_segment(dir.path());
        file.write_all_at(b"X", offsets[1] + 20).unwrap();
        let err = recover(dir.path(), Mode::Repair)
            .err()
            .expect("must refuse");
        assert_eq!(
            (err.file.clone(), err.offset),
            (segment(dir.path()), offsets[1])
        );
        assert!(err.to_string().contains("corrupt"), "{err}");
    }

    #[test]
    fn a_damaged_length_field_followed_by_valid_records_is_corruption() {
        for damage in [[0x40u8, 0, 0, 0], [0, 0, 0, 0]] {
            let dir = tempfile::tempdir().unwrap();
            let txns: Vec<Txn> = (0..6).map(|i| create(&format!("/n{i}"), b"x")).collect();
            write_log(dir.path(), &txns);
            let (offsets, _) = record_offsets(&segment(dir.path()));
            let file = open_segment(dir.path());
            let mut len = [0u8; 4];
            file.read_exact_at(&mut len, offsets[2]).unwrap();
            let damaged: Vec<u8> = if damage == [0; 4] {
                vec![0; 4]
            } else {
                len.iter().zip(damage).map(|(b, d)| b ^ d).collect()
            };
            file.write_all_at(&damaged, offsets[2]).unwrap();
            let err = recover(dir.path(), Mode::Check)
                .err()
                .expect("records after the damage were acknowledged");
            assert_eq!(err.offset, offsets[2], "{err}");
        }
    }

    #[test]
    fn a_cut_inside_a_length_field_is_a_torn_tail() {
        for into in 1..4 {
            let dir = tempfile::tempdir().unwrap();
            write_log(dir.path(), &[create("/a", b"1"), create("/b", b"2")]);
            let (offsets, _) = record_offsets(&segment(dir.path()));
            let file = open_segment(dir.path());
            file.set_len(offsets[1] + into).unwrap();
            let r = recover(dir.path(), Mode::Repair).unwrap();
            assert_eq!(r.torn_tail.map(|t| t.offset), Some(offsets[1]));
            assert!(r.tree.get("/a").is_some() && r.tree.get("/b").is_none());
        }
    }

    #[test]
    fn any_damaged_header_byte_is_corruption() {
        for byte in 0..SEGMENT_HEADER_LEN {
            let dir = tempfile::tempdir().unwrap();
            write_log(dir.path(), &[create("/a", b"1")]);
            let file = open_segment(dir.path());
            let mut b = [0u8; 1];
            file.read_exact_at(&mut b, byte).unwrap();
            file.write_all_at(&[b[0] ^ 0x5a], byte).unwrap();
            let err = recover(dir.path(), Mode::Check).err();
            assert!(err.is_some_and(|e| e.offset == 0), "header byte {byte}");
        }
    }

    #[test]
    fn a_log_that_does_not_reach_back_without_a_snapshot_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        write_log(dir.path(), &[create("/a", b"1")]);
        fs::rename(
            segment(dir.path()),
            dir.path().join(segment_name(FIRST_ZXID + 5)),
        )
        .unwrap();
        assert!(recover(dir.path(), Mode::Check).is_err());
    }

    #[test]
    fn a_snapshot_taken_while_the_tree_changes_holds_the_state_at_its_zxid() {
        let dir = tempfile::tempdir().unwrap();
        let mut tree = DataTree::new();
        let mut zxid = FIRST_ZXID;
        for i in 0..500 {
            txn::apply(
                &mut tree,
                &create(&format!("/n{i:03}"), b"old"),
                zxid,
                0,
                &mut Vec::new(),
            );
            zxid += 1;
        }
        let at = zxid - 1;
        let expected: Vec<(String, Option<Bytes>)> = (0..500)
            .map(|i| (format!("/n{i:03}"), Some(Bytes::from_static(b"old"))))
            .collect();
        let mut encoder = Encoder::new(at, &[], &tree.acls());
        let mut bytes = encoder.take_bytes();
        tree.start_capture(at, Box::new(encoder));
        // Walk a little, then change nodes on both sides of the cursor, delete some, add some.
        bytes.extend(tree.capture_step(100));
        for i in [5, 250, 499] {
            let set = Txn::SetData {
                path: format!("/n{i:03}"),
                data: Some(Bytes::from_static(b"new")),
                version: 1,
            };
            txn::apply(&mut tree, &set, zxid, 0, &mut Vec::new());
            zxid += 1;
        }
        txn::apply(
            &mut tree,
            &Txn::Delete {
                path: "/n300".into(),
            },
            zxid,
            0,
            &mut Vec::new(),
        );
        txn::apply(
            &mut tree,
            &create("/n2999", b"late"),
            zxid + 1,
            0,
            &mut Vec::new(),
        );
        while !tree.capture_walked() {
            bytes.extend(tree.capture_step(64));
        }
        bytes.extend(tree.finish_capture());
        let writer = crate::disk::snapshot::spawn_writer(dir.path().to_path_buf(), 3).unwrap();
        writer.send(SnapshotMsg::Start { zxid: at }).unwrap();
        writer
            .send(SnapshotMsg::Chunk(bytes[..bytes.len() - 9].to_vec()))
            .unwrap();
        writer
            .send(SnapshotMsg::Finish(bytes[bytes.len() - 9..].to_vec()))
            .unwrap();
        drop(writer);
        let path = dir.path().join(snapshot_name(at));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !path.exists() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let loaded = crate::disk::snapshot::load(&path).unwrap();
        let mut got: Vec<(String, Option<Bytes>)> = loaded
            .nodes
            .into_iter()
            .filter(|(path, _)| path.starts_with("/n"))
            .map(|(path, node)| (path, node.data.map(|d| Bytes::copy_from_slice(&d))))
            .collect();
        got.sort();
        assert_eq!(got, expected);
    }
}
