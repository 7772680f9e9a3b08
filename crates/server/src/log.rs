//! The log stage of the pipeline: where a txn becomes durable before anyone may see it.
//!
//! The core appends each txn here before applying it and calls [`TxnLog::flush`] at the end of
//! every batch of requests. One writer thread owns the segment files: it drains every batch that
//! is queued, writes them, syncs once, and publishes the durable zxid. Batches that arrive while
//! a sync is in flight wait for the next one, so many writes share one fdatasync (group commit).
//! Connection writers hold every reply and watch event until the durable zxid reaches the state
//! it reveals.
//!
//! A segment is `log.<zxid of its first record, 16 hex digits>`: a 16-byte header (`LKTXNLOG`,
//! version, zero), then records `u32 len | u32 crc32c(payload) | payload`, payload =
//! `i64 zxid | i64 time | txn`, then zeros (len 0 ends the segment).
//!
//! The writer keeps written zeros ahead of the records. A sync then only overwrites blocks the
//! file already has; appending to a hole or to a fallocated range would also change the file's
//! block map, which costs a journal commit on every sync. It also means a full disk shows up while
//! zero-filling ahead, before a record needs the space.
//!
//! When a write or sync fails, nothing more is written or published: the writer bumps the fault
//! count (so held replies are dropped, never sent) and tells the core, which goes read-only until
//! a [`TxnLog::resume`] succeeds.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, mpsc};
use std::thread::JoinHandle;
use std::time::Instant;

use tokio::sync::{mpsc as tokio_mpsc, watch};

use crate::config::SyncMode;
use crate::metrics::Summary;
use crate::trace::SyncStamps;
use crate::txn::Txn;

pub const SEGMENT_MAGIC: &[u8; 8] = b"LKTXNLOG";
pub const SEGMENT_HEADER_LEN: u64 = 16;
/// Bytes before each payload: length and checksum.
pub const RECORD_HEADER_LEN: usize = 8;
/// Segments are rolled once they pass this size.
const SEGMENT_SIZE: u64 = 64 << 20;
/// Zeros are written ahead of the records in steps of this size.
const ZERO_STEP: u64 = 1 << 20;
/// A new segment starts with fewer zeros, so creating one (at every snapshot) costs a short sync.
const FIRST_ZEROS: u64 = 64 << 10;

pub fn segment_name(first_zxid: i64) -> String {
    format!("log.{first_zxid:016x}")
}

/// What connection writers wait on: the newest durable zxid, and how many disk faults have
/// happened (a reply queued before a fault is dropped, never sent).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Durable {
    pub zxid: i64,
    pub faults: u64,
    /// When the sync that reached `zxid` went through each stage, for [`crate::trace`]; `None`
    /// before the first sync of this run.
    pub sync: Option<SyncStamps>,
}

/// What the writer thread tells the core.
#[derive(Debug)]
pub enum LogEvent {
    Failed(String),
    Resumed,
    StillFailing(String),
}

enum WriterMsg {
    Records {
        bytes: Vec<u8>,
        first_zxid: Option<i64>,
        last_zxid: i64,
        /// When the core flushed it, for [`crate::trace`].
        flushed: Instant,
    },
    /// The next record starts a new segment (at a snapshot, so old segments can be purged).
    Roll,
    /// After a fault: cut the damaged segment back to its durable end, start a new one.
    Resume { next_zxid: i64 },
}

pub struct TxnLog {
    batch: Vec<u8>,
    batch_first: Option<i64>,
    batch_last: i64,
    sent_last: i64,
    tx: Option<mpsc::Sender<WriterMsg>>,
    durable: Arc<watch::Sender<Durable>>,
    thread: Option<JoinHandle<()>>,
    /// Every fdatasync of the writer, for `/metrics`' `fsynctime`.
    fsync_time: Arc<Summary>,
}

impl TxnLog {
    /// Starts the writer thread on `dir`. The first record opens a new segment, so a restarted
    /// server never appends to a segment a crash may have left torn.
    pub fn open(
        dir: &Path,
        sync: SyncMode,
        last_zxid: i64,
        events: tokio_mpsc::UnboundedSender<LogEvent>,
    ) -> io::Result<TxnLog> {
        let durable = Arc::new(watch::Sender::new(Durable {
            zxid: last_zxid,
            faults: 0,
            sync: None,
        }));
        let (tx, rx) = mpsc::channel();
        let fsync_time = Summary::fsync_time();
        let writer = Writer {
            dir: dir.to_path_buf(),
            sync,
            segment: None,
            durable: durable.clone(),
            events,
            failed: false,
            needed: 0,
            fsync_time: fsync_time.clone(),
        };
        let thread = std::thread::Builder::new()
            .name("keeper-log".into())
            .spawn(move || writer.run(rx))?;
        Ok(TxnLog {
            batch: Vec::with_capacity(64 * 1024),
            batch_first: None,
            batch_last: last_zxid,
            sent_last: last_zxid,
            tx: Some(tx),
            durable,
            thread: Some(thread),
            fsync_time,
        })
    }

    pub(crate) fn fsync_time(&self) -> Arc<Summary> {
        self.fsync_time.clone()
    }

    /// Queues `txn` at `zxid` for the next flush.
    pub fn append(&mut self, zxid: i64, time: i64, txn: &Txn) {
        encode_record(&mut self.batch, zxid, time, txn);
        self.batch_first.get_or_insert(zxid);
        self.batch_last = zxid;
    }

    /// Records a zxid with nothing to log (a rejected write still consumes a zxid, as in
    /// ZooKeeper), so the durable mark can pass it.
    pub fn skip(&mut self, zxid: i64) {
        self.batch_last = zxid;
    }

    /// Ends a batch: hands everything appended since the last flush to the writer.
    pub fn flush(&mut self) {
        if self.batch_last == self.sent_last {
            return;
        }
        let bytes = std::mem::replace(&mut self.batch, Vec::with_capacity(64 * 1024));
        let first_zxid = self.batch_first.take();
        self.sent_last = self.batch_last;
        self.send(WriterMsg::Records {
            bytes,
            first_zxid,
            last_zxid: self.batch_last,
            flushed: Instant::now(),
        });
    }

    /// Starts a new segment with the next record.
    pub fn roll(&mut self) {
        self.flush();
        self.send(WriterMsg::Roll);
    }

    /// Asks the writer to leave the failed state; it answers with a [`LogEvent`].
    pub fn resume(&mut self, next_zxid: i64) {
        self.batch.clear();
        self.batch_first = None;
        self.batch_last = next_zxid - 1;
        self.sent_last = next_zxid - 1;
        self.send(WriterMsg::Resume { next_zxid });
    }

    fn send(&self, msg: WriterMsg) {
        if let Some(tx) = &self.tx {
            // The writer only exits when this sender is dropped, so a send cannot fail while
            // `tx` is set; if it somehow does, nothing becomes durable and replies stay held.
            let _ = tx.send(msg);
        }
    }

    pub fn durable(&self) -> watch::Receiver<Durable> {
        self.durable.subscribe()
    }

    pub fn durable_zxid(&self) -> i64 {
        self.durable.borrow().zxid
    }

    /// Drops every reply still waiting for durability (after a fault, the state they reveal
    /// may never become durable): their connections close instead.
    pub fn abandon_pending(&self) {
        self.durable.send_modify(|d| d.faults += 1);
    }
}

impl Drop for TxnLog {
    /// Lets the writer finish what is queued (and sync it), then joins it.
    fn drop(&mut self) {
        self.flush();
        self.tx.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

pub fn encode_record(out: &mut Vec<u8>, zxid: i64, time: i64, txn: &Txn) {
    let start = out.len();
    out.extend_from_slice(&[0; RECORD_HEADER_LEN]);
    out.extend_from_slice(&zxid.to_be_bytes());
    out.extend_from_slice(&time.to_be_bytes());
    txn.encode(out);
    let payload = &out[start + RECORD_HEADER_LEN..];
    let len = payload.len() as u32;
    let crc = crc32c::crc32c(payload);
    out[start..start + 4].copy_from_slice(&len.to_be_bytes());
    out[start + 4..start + 8].copy_from_slice(&crc.to_be_bytes());
}

struct Segment {
    file: File,
    path: PathBuf,
    /// Where the next record goes.
    offset: u64,
    /// Bytes reserved on disk.
    /// Bytes of the file written so far (header, records, zeros ahead).
    zeroed: u64,
    /// End of the last record known to be on disk.
    durable_offset: u64,
}

struct Writer {
    dir: PathBuf,
    sync: SyncMode,
    segment: Option<Segment>,
    durable: Arc<watch::Sender<Durable>>,
    events: tokio_mpsc::UnboundedSender<LogEvent>,
    failed: bool,
    /// Room the last failed write needed: resuming must prove at least this much fits.
    needed: u64,
    fsync_time: Arc<Summary>,
}

impl Writer {
    fn run(mut self, rx: mpsc::Receiver<WriterMsg>) {
        while let Ok(first) = rx.recv() {
            let received = Instant::now();
            // Everything queued while the previous sync ran goes into this one (group commit).
            let mut reached = None;
            let mut newest_flush = received;
            for msg in std::iter::once(first).chain(rx.try_iter()) {
                match msg {
                    WriterMsg::Records {
                        bytes,
                        first_zxid,
                        last_zxid,
                        flushed,
                    } => {
                        newest_flush = flushed;
                        if self.failed {
                            continue;
                        }
                        self.needed = bytes.len() as u64 + ZERO_STEP;
                        if let (false, Some(first_zxid)) = (bytes.is_empty(), first_zxid)
                            && let Err(e) = self.write(first_zxid, &bytes)
                        {
                            self.fail(e);
                            continue;
                        }
                        reached = Some(last_zxid);
                    }
                    WriterMsg::Roll => {
                        if !self.failed
                            && let Err(e) = self.sync_segment()
                        {
                            self.fail(e);
                        }
                        self.segment = None;
                    }
                    WriterMsg::Resume { next_zxid } => self.resume(next_zxid),
                }
            }
            if let (Some(zxid), false) = (reached, self.failed) {
                let written = Instant::now();
                match self.sync_segment() {
                    Ok(()) => {
                        // Without syncs the stage is zero, not the cost of reading the clock.
                        let synced = if self.sync == SyncMode::Always {
                            Instant::now()
                        } else {
                            written
                        };
                        self.durable.send_modify(|d| {
                            d.sync = Some(SyncStamps {
                                after: d.zxid,
                                flushed: newest_flush,
                                received,
                                written,
                                synced,
                            });
                            d.zxid = d.zxid.max(zxid);
                        })
                    }
                    Err(e) => self.fail(e),
                }
            }
        }
        if !self.failed {
            let _ = self.sync_segment();
        }
    }

    fn write(&mut self, first_zxid: i64, bytes: &[u8]) -> io::Result<()> {
        if self
            .segment
            .as_ref()
            .is_some_and(|s| s.offset >= SEGMENT_SIZE)
        {
            self.sync_segment()?;
            self.segment = None;
        }
        let segment = match &mut self.segment {
            Some(segment) => segment,
            None => self.segment.insert(open_segment(&self.dir, first_zxid)?),
        };
        let end = segment.offset + bytes.len() as u64;
        while segment.zeroed < end + FIRST_ZEROS {
            zero_fill(&segment.file, segment.zeroed, ZERO_STEP)?;
            segment.zeroed += ZERO_STEP;
        }
        segment.file.write_all_at(bytes, segment.offset)?;
        segment.offset = end;
        Ok(())
    }

    fn sync_segment(&mut self) -> io::Result<()> {
        if let Some(segment) = &mut self.segment {
            if self.sync == SyncMode::Always && segment.durable_offset != segment.offset {
                let started = Instant::now();
                segment.file.sync_data()?;
                self.fsync_time.observe(started.elapsed());
            }
            segment.durable_offset = segment.offset;
        }
        Ok(())
    }

    fn fail(&mut self, error: io::Error) {
        let file = self
            .segment
            .as_ref()
            .map(|s| s.path.display().to_string())
            .unwrap_or_default();
        tracing::error!(%error, file, "transaction log write failed: no more writes are accepted until the disk recovers");
        self.failed = true;
        self.durable.send_modify(|d| d.faults += 1);
        let _ = self.events.send(LogEvent::Failed(error.to_string()));
    }

    fn resume(&mut self, next_zxid: i64) {
        let attempt = (|| -> io::Result<Segment> {
            if let Some(segment) = self.segment.take() {
                // Whatever lies past the durable end was never acknowledged.
                segment.file.set_len(segment.durable_offset)?;
                segment.file.sync_all()?;
            }
            let mut segment = open_segment(&self.dir, next_zxid)?;
            // Prove the disk takes writes again, with room for what failed, before accepting any.
            while segment.zeroed < SEGMENT_HEADER_LEN + self.needed {
                zero_fill(&segment.file, segment.zeroed, ZERO_STEP)?;
                segment.zeroed += ZERO_STEP;
            }
            segment.file.sync_all()?;
            segment.durable_offset = segment.offset;
            Ok(segment)
        })();
        match attempt {
            Ok(segment) => {
                self.segment = Some(segment);
                self.failed = false;
                tracing::warn!("transaction log writable again");
                let _ = self.events.send(LogEvent::Resumed);
            }
            Err(e) => {
                let _ = self.events.send(LogEvent::StillFailing(e.to_string()));
            }
        }
    }
}

/// Creates a segment with its first zeros and makes its directory entry durable.
fn open_segment(dir: &Path, first_zxid: i64) -> io::Result<Segment> {
    let path = dir.join(segment_name(first_zxid));
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)?;
    let mut header = [0u8; SEGMENT_HEADER_LEN as usize];
    header[..8].copy_from_slice(SEGMENT_MAGIC);
    header[8..12].copy_from_slice(&1u32.to_be_bytes());
    zero_fill(&file, 0, FIRST_ZEROS)?;
    file.write_all_at(&header, 0)?;
    file.sync_all()?;
    sync_dir(dir)?;
    Ok(Segment {
        file,
        path,
        offset: SEGMENT_HEADER_LEN,
        zeroed: FIRST_ZEROS,
        durable_offset: SEGMENT_HEADER_LEN,
    })
}

/// Writes `len` (at most one step) zeros at `offset`; the next sync makes them durable with
/// the records.
fn zero_fill(file: &File, offset: u64, len: u64) -> io::Result<()> {
    static ZEROS: [u8; ZERO_STEP as usize] = [0; ZERO_STEP as usize];
    file.write_all_at(&ZEROS[..len.min(ZERO_STEP) as usize], offset)
}

pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}
