//! The log stage of the pipeline: where a txn becomes durable before anyone may see it.
//!
//! The core appends each txn here before applying it and calls [`TxnLog::flush`] at the end of
//! every batch of requests. A log worker drains every batch that is queued, writes them as one
//! group, syncs it and publishes the durable zxid; batches that arrive during a sync wait for
//! the next group, so many writes share one fdatasync (group commit). Marks are published in
//! the order the groups were written, and never past a failed sync, so the durable zxid means
//! everything up to it is on disk.
//!
//! Where the workers run, a task or two threads, is the `workers` module's concern.
//!
//! **Waiting for the woken.** A write whose watch events woke someone is usually followed at
//! once by that someone's own write: a lock's next holder releases or re-queues, a queue's
//! consumer takes the item. Under contention the two halves of a lock handoff (the releaser's
//! re-queue and the woken holder's release) would each get a sync of their own, the second
//! waiting for the first. So after publishing a group that woke watchers, the next group, if
//! it is a single flush, waits up to the follow window from that publication for one more
//! flush and syncs both together. The wait is taken once per such publication and only by a
//! group that starts inside the window; a write that woke nobody never waits. The window is
//! the server's `follow_window` (400 µs by default: long enough for a woken client to hear
//! the event, read and answer with a write on a busy machine, short next to a sync on a slow
//! disk).
//!
//! **Buffers.** A flush's buffer comes back from the writer once written (see
//! [`Shared::recycle`]), so a steady load allocates none.
//!
//! Every reply and watch event is held until the durable zxid reaches the state it reveals; the
//! thread that publishes a mark writes what it released to the sockets itself (see
//! [`crate::disk::durable`]), after letting go of the publish lock.
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
//! When a write or sync fails, or a worker panics while it writes, nothing more is written or
//! published (the mark stays where the disk is), and the writer tells the core. The core counts
//! the fault on the mark ([`TxnLog::abandon_pending`]) once it has stopped queueing replies for
//! the state the fault may have lost, so that one count covers everything queued until then:
//! what was durable at the fault is sent, the rest dropped. It then goes read-only until a
//! [`TxnLog::resume`] succeeds, which cuts the current segment back to the mark. A segment is
//! closed only once all it holds is published, so no other segment holds a record past the
//! mark, and what the core reloads after a fault (through the mark) is what a restart replays.

mod workers;

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, mpsc};
use std::time::{Duration, Instant};

use tokio::sync::mpsc as tokio_mpsc;

use crate::config::SyncMode;
use crate::disk::durable::{Durable, DurableMark};
use crate::metrics::Summary;
use crate::state::txn::Txn;
use crate::sync::lock;
use crate::trace::SyncStamps;
use workers::{On, Placement, Workers};

pub(crate) const SEGMENT_MAGIC: &[u8; 8] = b"LKTXNLOG";
pub(crate) const SEGMENT_HEADER_LEN: u64 = 16;
/// Bytes before each payload: length and checksum.
pub(crate) const RECORD_HEADER_LEN: usize = 8;
/// Segments are rolled once they pass this size.
const SEGMENT_SIZE: u64 = 64 << 20;
/// Zeros are written ahead of the records in steps of this size.
const ZERO_STEP: u64 = 1 << 20;
/// Log threads (where the log runs threads), so syncs in flight at once: while one syncs a
/// group, the other writes the next and starts its sync. On disks that overlap flushes (most
/// SSDs and virtual disks) a write arriving during a sync then waits for its own sync, not for
/// the one in flight too.
const SYNCERS: usize = 2;
/// A group bigger than this waits for the sync in flight instead of starting a second one:
/// lock handoffs write a record or two per group and gain a sync's time from the overlap,
/// while under a heavy load groups are large and parallel syncs only split them (more syncs,
/// more wake-ups, the same bytes), which costs throughput on a machine short of CPU.
const OVERLAP_MAX: usize = 1024;
/// A sync longer than this (a slow disk) would hold the log task's thread, and the tasks
/// waiting behind it there, too long: the next group hands them to another thread first.
const QUICK_SYNC_US: u64 = 1000;
/// A new segment starts with fewer zeros, so creating one (at every snapshot) costs a short sync.
const FIRST_ZEROS: u64 = 64 << 10;
/// A flush's buffer starts this big.
const BATCH_CAPACITY: usize = 64 << 10;
/// Written buffers kept for the next flushes, and the biggest one kept (a burst's big buffer
/// is let go rather than held for ever).
const SPARE_BUFFERS: usize = 8;
const SPARE_MAX_CAPACITY: usize = 1 << 20;

pub(crate) fn segment_name(first_zxid: i64) -> String {
    format!("log.{first_zxid:016x}")
}

/// What the log workers tell the core.
#[derive(Debug)]
pub(crate) enum LogEvent {
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
        /// Applying these records fired watch events: whoever they woke may write next.
        wakes: bool,
    },
    /// The next record starts a new segment (at a snapshot, so old segments can be purged).
    Roll,
    /// After a fault: cut the damaged segment back to its durable end, start a new one.
    Resume { next_zxid: i64 },
}

pub(crate) struct TxnLog {
    batch: Vec<u8>,
    batch_first: Option<i64>,
    batch_last: i64,
    /// A txn of this batch fired watch events.
    batch_wakes: bool,
    sent_last: i64,
    tx: Option<mpsc::Sender<WriterMsg>>,
    durable: Arc<DurableMark>,
    shared: Arc<Shared>,
    workers: Workers,
    /// Every fdatasync of the writer, for `/metrics`' `fsynctime`.
    fsync_time: Arc<Summary>,
}

impl TxnLog {
    /// Starts the log's workers on `dir`: one task on a multi-threaded tokio runtime, else two
    /// threads (see the module doc). The first record opens a new segment, so a restarted
    /// server never appends to a segment a crash may have left torn.
    pub(crate) fn open(
        dir: &Path,
        sync: SyncMode,
        follow_window: Duration,
        last_zxid: i64,
        events: tokio_mpsc::UnboundedSender<LogEvent>,
    ) -> io::Result<TxnLog> {
        let durable = DurableMark::new(last_zxid);
        let (tx, rx) = mpsc::channel();
        let fsync_time = Summary::fsync_time();
        let placement = Placement::here();
        let shared = Arc::new(Shared {
            writer: Mutex::new(Writer {
                rx,
                dir: dir.to_path_buf(),
                syncers: placement.syncers(),
                segment: None,
                needed: 0,
                next_job: 0,
            }),
            publish: Mutex::new(Publish {
                epoch: 0,
                next: 0,
                finished: Vec::new(),
            }),
            follow: Mutex::new(Follow {
                window: follow_window,
                until: None,
            }),
            spare: Mutex::new(Vec::new()),
            dir: dir.to_path_buf(),
            failed: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            queued_msgs: AtomicUsize::new(0),
            working: AtomicBool::new(false),
            last_sync_us: AtomicU64::new(0),
            handoffs: AtomicU64::new(0),
            #[cfg(test)]
            panic_at_write: AtomicBool::new(false),
            #[cfg(test)]
            fail_at_new_segment: AtomicBool::new(false),
            syncing: Mutex::new(Syncing::default()),
            synced: Condvar::new(),
            sync,
            durable: durable.clone(),
            events,
            fsync_time: fsync_time.clone(),
        });
        let workers = Workers::start(placement, &shared)?;
        Ok(TxnLog {
            batch: Vec::with_capacity(BATCH_CAPACITY),
            batch_first: None,
            batch_last: last_zxid,
            batch_wakes: false,
            sent_last: last_zxid,
            tx: Some(tx),
            durable,
            shared,
            workers,
            fsync_time,
        })
    }

    pub(crate) fn fsync_time(&self) -> Arc<Summary> {
        self.fsync_time.clone()
    }

    /// Groups taken so far after a thread hand-off (see the `workers` module).
    pub(crate) fn handoffs(&self) -> u64 {
        self.shared.handoffs.load(Ordering::Relaxed)
    }

    /// Queues `txn` at `zxid` for the next flush.
    pub(crate) fn append(&mut self, zxid: i64, time: i64, txn: &Txn) {
        encode_record(&mut self.batch, zxid, time, txn);
        self.batch_first.get_or_insert(zxid);
        self.batch_last = zxid;
    }

    /// The txn appended last fired watch events (see the module doc).
    pub(crate) fn woke_watchers(&mut self) {
        self.batch_wakes = true;
    }

    /// Records a zxid with nothing to log (a rejected write still consumes a zxid, as in
    /// ZooKeeper), so the durable mark can pass it.
    pub(crate) fn skip(&mut self, zxid: i64) {
        self.batch_last = zxid;
    }

    /// Ends a batch: hands everything appended since the last flush to the writer.
    pub(crate) fn flush(&mut self) {
        if self.batch_last == self.sent_last {
            return;
        }
        let bytes = std::mem::replace(&mut self.batch, self.shared.spare_buffer());
        let first_zxid = self.batch_first.take();
        self.sent_last = self.batch_last;
        let wakes = std::mem::take(&mut self.batch_wakes);
        self.send(WriterMsg::Records {
            bytes,
            first_zxid,
            last_zxid: self.batch_last,
            flushed: Instant::now(),
            wakes,
        });
    }

    /// Starts a new segment with the next record.
    pub(crate) fn roll(&mut self) {
        self.flush();
        self.send(WriterMsg::Roll);
    }

    /// Asks the writer to leave the failed state; it answers with a [`LogEvent`].
    pub(crate) fn resume(&mut self, next_zxid: i64) {
        self.batch.clear();
        self.batch_first = None;
        self.batch_wakes = false;
        self.batch_last = next_zxid - 1;
        self.sent_last = next_zxid - 1;
        self.send(WriterMsg::Resume { next_zxid });
    }

    fn send(&self, msg: WriterMsg) {
        if let Some(tx) = &self.tx {
            // The receiver lives in `shared` as long as this log does, so a send cannot fail
            // while `tx` is set; if it somehow does, nothing becomes durable and replies stay
            // held. Counted before it is sent, so a worker that finds the count at zero finds
            // the queue empty too.
            self.shared.queued_msgs.fetch_add(1, Ordering::SeqCst);
            let _ = tx.send(msg);
            self.workers.wake(&self.shared);
        }
    }

    /// The durable mark this log moves.
    pub(crate) fn durable(&self) -> Arc<DurableMark> {
        self.durable.clone()
    }

    pub(crate) fn durable_zxid(&self) -> i64 {
        self.durable.get().zxid
    }

    /// Counts a disk fault on the mark, once per fault, when the core has heard of it: every
    /// reply queued until now that reveals more than was durable at the fault is dropped (the
    /// state it reveals may never become durable) and its connection closes; what was durable
    /// is still sent.
    pub(crate) fn abandon_pending(&self) {
        self.durable.publish(Durable::fault).write();
    }
}

impl Drop for TxnLog {
    /// Writes and syncs what is queued, here, then stops the workers.
    fn drop(&mut self) {
        self.flush();
        self.tx.take();
        // On this thread: a task cannot be waited for here, as the runtime may need this very
        // thread to run it.
        self.shared.close();
        self.workers.stop();
        // What still waits for the mark waits for nothing now: its connections close.
        self.durable.publish(|d| d.stopped = true).write();
    }
}

/// Whether taking `queued` may hold its thread long while others need the core: while it
/// waits for the woken's write (`follows`: the core makes that write); where others write now
/// or will at once (more than one flush, records that woke watchers, a group over
/// `OVERLAP_MAX` bytes); where the last sync took over `QUICK_SYNC_US` (a slow disk). What is
/// left, one client's lone light flush that woke nobody, after a quick sync, is written and
/// synced sooner than a thread is handed over, and nobody waits for the core meanwhile.
fn holds_long(sync: SyncMode, follows: bool, queued: &[WriterMsg], last_sync_us: u64) -> bool {
    let wakes = |msg: &WriterMsg| matches!(msg, WriterMsg::Records { wakes: true, .. });
    sync == SyncMode::Always
        && (follows
            || queued.len() > 1
            || queued.iter().any(wakes)
            || queued_bytes(queued) > OVERLAP_MAX
            || last_sync_us > QUICK_SYNC_US)
}

pub(crate) fn encode_record(out: &mut Vec<u8>, zxid: i64, time: i64, txn: &Txn) {
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

/// One segment file as the syncing workers see it. Each log thread syncs through its own
/// descriptor, opened before any record is written: Linux reports a writeback error once per
/// open file, so two threads sharing one descriptor could each miss an error the other took.
/// The log task has one; the log's drop uses the first, one sync at a time.
struct SegmentFile {
    /// One per syncing worker, indexed by the worker's number.
    files: Vec<File>,
    path: PathBuf,
    /// End of the last record whose sync was published (every earlier sync succeeded too).
    durable_end: AtomicU64,
}

struct Segment {
    disk: Arc<SegmentFile>,
    /// Where the next record goes.
    offset: u64,
    /// Bytes of the file written so far (header, records, zeros ahead).
    zeroed: u64,
}

/// What the log workers share. `writer` is held while a worker waits for, drains and writes a
/// group; `publish` orders the durable marks; a worker holding `writer` may take `publish`,
/// never the reverse.
struct Shared {
    writer: Mutex<Writer>,
    /// Taken last: no other lock is taken while it is held.
    follow: Mutex<Follow>,
    /// Written flush buffers, cleared, for the next flushes (see [`Shared::recycle`]).
    spare: Mutex<Vec<Vec<u8>>>,
    /// The data directory, for naming it in a failure without taking `writer`.
    dir: PathBuf,
    publish: Mutex<Publish>,
    /// Set by the first write or sync that fails; cleared by a successful resume.
    failed: AtomicBool,
    /// The core is gone and [`Shared::close`] has run or is running: the log task ends (the
    /// threads end when the queue closes).
    closed: AtomicBool,
    /// Messages sent to the queue and not yet taken from it.
    queued_msgs: AtomicUsize,
    /// The log task is at work; never set with threads.
    working: AtomicBool,
    /// How long the last sync took, in microseconds (see [`holds_long`]).
    last_sync_us: AtomicU64,
    /// Groups the log task took after handing its thread's other tasks over (`mntr`'s
    /// `lk_log_handoffs`).
    handoffs: AtomicU64,
    /// Tests: the next record write panics.
    #[cfg(test)]
    panic_at_write: AtomicBool,
    /// Tests: the next segment cannot be created.
    #[cfg(test)]
    fail_at_new_segment: AtomicBool,
    /// Groups whose sync is in flight, and the signal when the last one ends.
    syncing: Mutex<Syncing>,
    synced: Condvar,
    sync: SyncMode,
    durable: Arc<DurableMark>,
    events: tokio_mpsc::UnboundedSender<LogEvent>,
    fsync_time: Arc<Summary>,
}

/// The writing side: the queue from the core and the segment being written.
struct Writer {
    rx: mpsc::Receiver<WriterMsg>,
    dir: PathBuf,
    segment: Option<Segment>,
    /// Workers that sync at once: each segment opens a descriptor for each.
    syncers: usize,
    /// Room the last failed write needed: resuming must prove at least this much fits.
    needed: u64,
    /// Number of the next group's sync: marks are published in this order.
    next_job: u64,
}

/// Syncs finish in any order; their marks are published in the order their groups were
/// written, and only while no sync has failed since the group was written.
struct Publish {
    /// Bumped at every fault, so a sync from before it is never published.
    epoch: u64,
    /// The oldest group not yet published.
    next: u64,
    /// Groups whose sync finished before an older group's did.
    finished: Vec<Job>,
}

/// Waiting for the woken (see the module doc).
struct Follow {
    /// The server's `follow_window`.
    window: Duration,
    /// Set when a published group woke watchers: until when the next group waits for the
    /// woken to write. Taken by the next group.
    until: Option<Instant>,
}

impl Publish {
    /// Takes a group whose sync succeeded; returns the newest group that can now be published
    /// (every group before it has finished), having marked the segments durable up to it. It
    /// `wakes` if any of the groups published with it did.
    fn finish(&mut self, job: Job) -> Option<Job> {
        if job.epoch != self.epoch {
            return None;
        }
        self.finished.push(job);
        let mut newest = None;
        while let Some(i) = self.finished.iter().position(|j| j.seq == self.next) {
            let job = self.finished.swap_remove(i);
            self.next += 1;
            if let Some((segment, end)) = &job.segment {
                segment.durable_end.fetch_max(*end, Ordering::SeqCst);
            }
            let mut job = job;
            job.wakes |= newest.as_ref().is_some_and(|j: &Job| j.wakes);
            newest = Some(job);
        }
        newest
    }

    /// A write or sync failed: nothing written before now may be published.
    fn fault(&mut self) {
        self.epoch += 1;
        self.finished.clear();
    }

    /// The log is writable again: publishing goes on from group `next`.
    fn restart(&mut self, next: u64) {
        self.next = next;
        self.finished.clear();
    }
}

/// One written group on its way to the disk.
struct Job {
    seq: u64,
    epoch: u64,
    zxid: i64,
    /// The segment and the end of the group in it (`None` for a group that wrote no record).
    segment: Option<(Arc<SegmentFile>, u64)>,
    /// A txn of the group fired watch events.
    wakes: bool,
    flushed: Instant,
    received: Instant,
    written: Instant,
    synced: Instant,
}

impl Shared {
    /// Writes `first` and everything queued behind it as one group, lets go of the writer while
    /// it syncs (so the other thread, in thread mode, can write the next), then publishes. On a
    /// runtime's worker (`on`), a group that may hold the thread long (see [`holds_long`]) runs
    /// after the thread's other tasks were handed to another thread; the rest runs right here.
    fn take_group(&self, me: usize, mut writer: MutexGuard<'_, Writer>, first: WriterMsg, on: On) {
        // Dropped before `writer` (a parameter outlives the body's locals), so a panic marks the
        // log failed before anyone else can take the writer.
        let _failed_if_panicking = FailOnPanic(self);
        let received = Instant::now();
        let mut queued = vec![first];
        queued.extend(writer.rx.try_iter());
        let follow_until = lock(&self.follow)
            .until
            .take()
            .filter(|_| self.sync == SyncMode::Always && queued.len() == 1);
        let long = holds_long(
            self.sync,
            follow_until.is_some(),
            &queued,
            self.last_sync_us.load(Ordering::Relaxed),
        );
        let take = move || {
            if let Some(until) = follow_until {
                // The last group woke watchers: give the woken a moment to write, and sync both.
                let wait = until.saturating_duration_since(Instant::now());
                if let Ok(next) = writer.rx.recv_timeout(wait) {
                    queued.push(next);
                    queued.extend(writer.rx.try_iter());
                }
            }
            if self.sync == SyncMode::Always && queued_bytes(&queued) > OVERLAP_MAX {
                // A big group: the load is heavy, and syncs in parallel would only split the
                // groups and spend CPU; let the sync in flight end and take what came meanwhile.
                self.wait_for_syncs();
                queued.extend(writer.rx.try_iter());
            }
            self.taken(&queued);
            let Some(job) = writer.write_group(self, me, queued, received) else {
                return;
            };
            let in_flight = SyncInFlight::start(self);
            drop(writer);
            self.sync_and_publish(me, job);
            drop(in_flight);
        };
        if on.hands_off(long) {
            self.handoffs.fetch_add(1, Ordering::Relaxed);
            tokio::task::block_in_place(take);
        } else {
            take();
        }
    }

    /// The core is gone (the queue is closed): writes what is still queued, syncs and
    /// publishes it, so its replies still go out, on the calling thread. Holding the writer, no
    /// group can start meanwhile, and the syncs in flight end before anything here is written,
    /// so no descriptor syncs twice at once.
    fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        let mut writer = lock(&self.writer);
        self.wait_for_syncs();
        let queued: Vec<WriterMsg> = writer.rx.try_iter().collect();
        self.taken(&queued);
        if let Some(job) = writer.write_group(self, 0, queued, Instant::now()) {
            self.sync_and_publish(0, job);
        }
    }

    /// A buffer for the core's next flush: a written one if there is one, else a new one.
    fn spare_buffer(&self) -> Vec<u8> {
        lock(&self.spare)
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(BATCH_CAPACITY))
    }

    /// A flush's buffer, written: kept for a later flush, unless enough are kept already or a
    /// burst made it big.
    fn recycle(&self, mut bytes: Vec<u8>) {
        if bytes.capacity() > SPARE_MAX_CAPACITY {
            return;
        }
        bytes.clear();
        let mut spare = lock(&self.spare);
        if spare.len() < SPARE_BUFFERS {
            spare.push(bytes);
        }
    }

    /// `queued` left the queue.
    fn taken(&self, queued: &[WriterMsg]) {
        self.queued_msgs.fetch_sub(queued.len(), Ordering::SeqCst);
    }

    /// Waits until no group's sync is in flight.
    fn wait_for_syncs(&self) {
        let mut syncing = lock(&self.syncing);
        while syncing.in_flight > 0 {
            syncing.waiting += 1;
            syncing = self
                .synced
                .wait(syncing)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            syncing.waiting -= 1;
        }
    }

    fn sync_and_publish(&self, me: usize, mut job: Job) {
        if let Some((segment, end)) = &job.segment
            && self.sync == SyncMode::Always
            && segment.durable_end.load(Ordering::SeqCst) < *end
        {
            if let Err(e) = segment.files[me].sync_data() {
                self.fail(&segment.path, e);
                return;
            }
            job.synced = Instant::now();
            let took = job.synced - job.written;
            self.fsync_time.observe(took);
            self.last_sync_us.store(
                u64::try_from(took.as_micros()).unwrap_or(u64::MAX),
                Ordering::Relaxed,
            );
        }
        let released = {
            let mut publish = lock(&self.publish);
            let Some(job) = publish.finish(job) else {
                return;
            };
            if job.wakes {
                let mut follow = lock(&self.follow);
                follow.until = Some(Instant::now() + follow.window);
            }
            // Under the publish lock, so marks go out in the order their groups were written.
            self.durable.publish(|d| {
                d.sync = Some(SyncStamps {
                    after: d.zxid,
                    flushed: job.flushed,
                    received: job.received,
                    written: job.written,
                    synced: job.synced,
                });
                d.zxid = d.zxid.max(job.zxid);
            })
        };
        // The replies this sync made durable leave from here, with no other thread to wake.
        released.write();
    }

    /// A log worker panicked, maybe halfway through a group: as after a failed write, nothing
    /// more is published until a resume has started a clean segment (the core probes for it).
    /// Takes no lock but `publish`: the panic may have left `writer` held on this thread.
    fn panicked(&self) {
        self.fail(
            &self.dir,
            io::Error::other("a transaction log worker panicked"),
        );
    }

    /// Stops all publishing until a resume: the groups in flight may never reach the disk.
    fn fail(&self, path: &Path, error: io::Error) {
        lock(&self.publish).fault();
        if self.failed.swap(true, Ordering::SeqCst) {
            return;
        }
        let file = path.display().to_string();
        tracing::error!(%error, file, "transaction log write failed: no more writes are accepted until the disk recovers");
        // The mark stops here; the core counts the fault when it hears of it (abandon_pending),
        // after what it queued meanwhile, so one count covers both.
        let _ = self.events.send(LogEvent::Failed(error.to_string()));
    }
}

impl Shared {
    /// Tests make a record write panic, or the next segment fail to open, where they choose.
    #[cfg(test)]
    fn injected_fault(&self, opening_segment: bool) -> io::Result<()> {
        if self.panic_at_write.swap(false, Ordering::SeqCst) {
            panic!("a record write panicked (test)");
        }
        if opening_segment && self.fail_at_new_segment.swap(false, Ordering::SeqCst) {
            return Err(io::Error::other("no room for a new segment (test)"));
        }
        Ok(())
    }

    #[cfg(not(test))]
    fn injected_fault(&self, _opening_segment: bool) -> io::Result<()> {
        Ok(())
    }
}

/// Held while a worker takes a group: if the worker panics, the log fails (see
/// [`Shared::panicked`]) before the writer is let go, so nothing written after the group the
/// panic may have left half-written, not even by the log's drop, is ever published.
struct FailOnPanic<'a>(&'a Shared);

impl Drop for FailOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.panicked();
        }
    }
}

/// What [`Shared::wait_for_syncs`] waits on.
#[derive(Default)]
struct Syncing {
    /// Groups whose sync is in flight.
    in_flight: usize,
    /// Workers waiting for none to be.
    waiting: usize,
}

/// A group's sync in flight, counted in [`Shared::syncing`] until dropped: a panic while
/// syncing or publishing still ends the count, so nobody waits for it forever.
struct SyncInFlight<'a>(&'a Shared);

impl<'a> SyncInFlight<'a> {
    fn start(shared: &'a Shared) -> SyncInFlight<'a> {
        lock(&shared.syncing).in_flight += 1;
        SyncInFlight(shared)
    }
}

impl Drop for SyncInFlight<'_> {
    fn drop(&mut self) {
        let mut syncing = lock(&self.0.syncing);
        syncing.in_flight -= 1;
        // Only when somebody waits: a notification is a system call even when nobody does,
        // and every sync would pay it.
        if syncing.in_flight == 0 && syncing.waiting > 0 {
            self.0.synced.notify_all();
        }
    }
}

/// The bytes of records in `queued`.
fn queued_bytes(queued: &[WriterMsg]) -> usize {
    queued
        .iter()
        .map(|msg| match msg {
            WriterMsg::Records { bytes, .. } => bytes.len(),
            WriterMsg::Roll | WriterMsg::Resume { .. } => 0,
        })
        .sum()
}

impl Writer {
    /// Writes everything queued (group commit: what arrived during the last sync goes
    /// together) and returns the group's sync job, if there is anything to publish.
    fn write_group(
        &mut self,
        shared: &Shared,
        me: usize,
        queued: Vec<WriterMsg>,
        received: Instant,
    ) -> Option<Job> {
        // Through which zxid this group has written, and whether those records woke watchers.
        let mut reached: Option<(i64, bool)> = None;
        let mut newest_flush = received;
        for msg in queued {
            match msg {
                WriterMsg::Records {
                    bytes,
                    first_zxid,
                    last_zxid,
                    flushed,
                    wakes,
                } => {
                    if shared.failed.load(Ordering::SeqCst) {
                        newest_flush = flushed;
                        continue;
                    }
                    if self
                        .segment
                        .as_ref()
                        .is_some_and(|s| s.offset >= SEGMENT_SIZE)
                    {
                        self.roll(shared, me, reached.take(), newest_flush, received);
                    }
                    newest_flush = flushed;
                    if shared.failed.load(Ordering::SeqCst) {
                        continue;
                    }
                    self.needed = bytes.len() as u64 + ZERO_STEP;
                    if let (false, Some(first_zxid)) = (bytes.is_empty(), first_zxid)
                        && let Err(e) = self.write(shared, me, first_zxid, &bytes)
                    {
                        self.fail(shared, e);
                        continue;
                    }
                    shared.recycle(bytes);
                    let woke_before = reached.is_some_and(|(_, woke)| woke);
                    reached = Some((last_zxid, woke_before || wakes));
                }
                WriterMsg::Roll => self.roll(shared, me, reached.take(), newest_flush, received),
                WriterMsg::Resume { next_zxid } => self.resume(shared, next_zxid),
            }
        }
        let (zxid, wakes) = reached?;
        if shared.failed.load(Ordering::SeqCst) {
            return None;
        }
        Some(self.job(shared, zxid, wakes, newest_flush, received))
    }

    /// The sync job for what this group wrote, through `zxid`, to the current segment.
    fn job(
        &mut self,
        shared: &Shared,
        zxid: i64,
        wakes: bool,
        flushed: Instant,
        received: Instant,
    ) -> Job {
        let written = Instant::now();
        let seq = self.next_job;
        self.next_job += 1;
        Job {
            seq,
            epoch: lock(&shared.publish).epoch,
            zxid,
            segment: self.segment.as_ref().map(|s| (s.disk.clone(), s.offset)),
            wakes,
            flushed,
            received,
            written,
            // Without syncs the stage is zero, not the cost of reading the clock.
            synced: written,
        }
    }

    /// Closes the current segment: the next record starts a new one. Whatever the segment
    /// holds is synced and published first, what this group wrote to it (through `pending`)
    /// as a job of its own, so no segment but the current one ever holds a record past the
    /// durable mark: a resume cuts back only the current segment, and a record synced at a
    /// roll but never published would otherwise outlive the fault and come back at the next
    /// start, after the core had reloaded without it. After a fault the segment stays, for the
    /// resume to cut back.
    fn roll(
        &mut self,
        shared: &Shared,
        me: usize,
        pending: Option<(i64, bool)>,
        flushed: Instant,
        received: Instant,
    ) {
        // Every earlier group's sync ends, published or failed, before this segment closes.
        shared.wait_for_syncs();
        if let Some((zxid, wakes)) = pending {
            let job = self.job(shared, zxid, wakes, flushed, received);
            shared.sync_and_publish(me, job);
        }
        if !shared.failed.load(Ordering::SeqCst) {
            self.segment = None;
        }
    }

    fn write(
        &mut self,
        shared: &Shared,
        me: usize,
        first_zxid: i64,
        bytes: &[u8],
    ) -> io::Result<()> {
        shared.injected_fault(self.segment.is_none())?;
        let segment = match &mut self.segment {
            Some(segment) => segment,
            None => self
                .segment
                .insert(open_segment(&self.dir, first_zxid, self.syncers)?),
        };
        let file = &segment.disk.files[me];
        let end = segment.offset + bytes.len() as u64;
        while segment.zeroed < end + FIRST_ZEROS {
            zero_fill(file, segment.zeroed, ZERO_STEP)?;
            segment.zeroed += ZERO_STEP;
        }
        file.write_all_at(bytes, segment.offset)?;
        segment.offset = end;
        Ok(())
    }

    fn fail(&self, shared: &Shared, error: io::Error) {
        let path = self.segment.as_ref().map(|s| s.disk.path.clone());
        shared.fail(path.as_deref().unwrap_or(&self.dir), error);
    }

    fn resume(&mut self, shared: &Shared, next_zxid: i64) {
        let attempt = (|| -> io::Result<Segment> {
            if let Some(segment) = self.segment.take() {
                // Whatever lies past the published end was never acknowledged.
                let file = &segment.disk.files[0];
                file.set_len(segment.disk.durable_end.load(Ordering::SeqCst))?;
                file.sync_all()?;
            }
            let mut segment = open_segment(&self.dir, next_zxid, self.syncers)?;
            // Prove the disk takes writes again, with room for what failed, before accepting any.
            while segment.zeroed < SEGMENT_HEADER_LEN + self.needed {
                zero_fill(&segment.disk.files[0], segment.zeroed, ZERO_STEP)?;
                segment.zeroed += ZERO_STEP;
            }
            segment.disk.files[0].sync_all()?;
            Ok(segment)
        })();
        match attempt {
            Ok(segment) => {
                self.segment = Some(segment);
                lock(&shared.publish).restart(self.next_job);
                shared.failed.store(false, Ordering::SeqCst);
                tracing::warn!("transaction log writable again");
                let _ = shared.events.send(LogEvent::Resumed);
            }
            Err(e) => {
                let _ = shared.events.send(LogEvent::StillFailing(e.to_string()));
            }
        }
    }
}

/// Creates a segment with its first zeros and makes its directory entry durable; it has a
/// descriptor for each of `syncers` workers.
fn open_segment(dir: &Path, first_zxid: i64, syncers: usize) -> io::Result<Segment> {
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
    // The other threads' descriptors, opened before any record is written (see SegmentFile).
    let mut files = vec![file];
    for _ in 1..syncers {
        files.push(OpenOptions::new().write(true).open(&path)?);
    }
    Ok(Segment {
        disk: Arc::new(SegmentFile {
            files,
            path,
            durable_end: AtomicU64::new(SEGMENT_HEADER_LEN),
        }),
        offset: SEGMENT_HEADER_LEN,
        zeroed: FIRST_ZEROS,
    })
}

/// Writes `len` (at most one step) zeros at `offset`; the next sync makes them durable with
/// the records.
fn zero_fill(file: &File, offset: u64, len: u64) -> io::Result<()> {
    static ZEROS: [u8; ZERO_STEP as usize] = [0; ZERO_STEP as usize];
    file.write_all_at(&ZEROS[..len.min(ZERO_STEP) as usize], offset)
}

pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests;
