//! Trace: where a durable write's time goes, stage by stage, always on.
//!
//! A write's reply crosses three stages before it reaches the socket: the connection's reader,
//! the core and a log worker (a task on the core's thread, or a thread of its own; see
//! [`crate::disk::log`]), which writes the reply to the socket itself once its sync made it durable
//! (or the core does, at the end of its batch, when the log was faster). Each stamps an
//! [`Instant`] where it hands the work on, and whoever finally writes a reply which had to wait
//! for durability turns the stamps into stage durations and adds them to [`StageTimes`].
//!
//! The stages, each from one stamp to the next:
//!
//! | stage       | from                                        | to                                       |
//! |-------------|---------------------------------------------|------------------------------------------|
//! | `queue`     | the reader decoded the frame                | the core took the request                |
//! | `core`      | the core took the request                   | its reply was queued (prep, log append, apply) |
//! | `batch`     | the reply was queued                        | the core flushed its batch to the log writer |
//! | `handoff`   | the batch was flushed                       | the log worker received it               |
//! | `write`     | the log worker received it                  | its write(2) returned                    |
//! | `fdatasync` | the write returned                          | fdatasync returned (zero without `--sync always`) |
//! | `wake`      | the durable zxid was published              | the message was taken for the socket     |
//! | `socket`    | the message was taken                       | encode and write(2) to the socket returned |
//!
//! and beside them `reaction`: on one connection, from the write(2) that carries a watch event
//! (stamped before it, so a client that answers before the write returns is still seen) to the
//! next request (other than a ping) decoded there. That is the client's part of a lock
//! handoff: event delivery, the recipe's logic, its next request and the loopback hop.
//!
//! Invariants:
//! - **Cheap**: a few `Instant::now()` per request and a few relaxed atomic adds per traced
//!   reply; nothing is allocated per request. The stamps travel in values that already travel
//!   (the request message, the reply, the log's batch and its published `Durable` mark).
//! - **The stages add up**: each stamp is clamped to be no earlier than the one before, so the
//!   stages of one reply sum to exactly its time from decode to socket, never more; a client
//!   that measures around the request sees at least that.
//! - **Only replies that wait for the log are traced**: a message a request's handling queued
//!   while the log was not yet durable as far as it reveals (a write's reply, the watch events it
//!   fires, a read behind a write), at most one per socket write, and only if the log's mark
//!   seen when it is taken is the sync that covered it (its zxid lies in the range that sync made
//!   durable). So a synchronous client's every write is traced once. When several core batches
//!   share one sync, `batch` and `handoff` are measured against the last of them (the one whose
//!   flush the sync carries). `wake` is what the publishing thread spends on the
//!   connections released before this one; or, when the core writes the reply (the log was
//!   faster than the core's batch), the time from the publication to the core's write; or, when
//!   the connection's writer task writes it (a full socket, a busy core, a large backlog), the
//!   time until that task took it, wake-up included.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A stage, in pipeline order, then `reaction`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// From the frame's decoding to the core taking the request.
    Queue,
    /// The core's prep, log append and apply, until the reply is queued.
    Core,
    /// From the queued reply to the core flushing its batch to the log writer.
    Batch,
    /// From the flush to the log worker receiving the batch.
    Handoff,
    /// The log worker's write(2).
    Write,
    /// The log's fdatasync (zero unless syncing always).
    Fdatasync,
    /// From the durable zxid's publication to the message being taken for the socket.
    Wake,
    /// Encoding the message and writing it to the socket.
    Socket,
    /// The client's part: from a watch event's write to the connection's next request.
    Reaction,
}

impl Stage {
    /// The write path's stages in order: all but [`Stage::Reaction`], the client's share.
    pub const PIPELINE: [Stage; 8] = [
        Stage::Queue,
        Stage::Core,
        Stage::Batch,
        Stage::Handoff,
        Stage::Write,
        Stage::Fdatasync,
        Stage::Wake,
        Stage::Socket,
    ];

    /// Every stage: the pipeline's, then [`Stage::Reaction`].
    pub const ALL: [Stage; 9] = {
        let mut all = [Stage::Reaction; 9];
        let mut i = 0;
        while i < Stage::PIPELINE.len() {
            all[i] = Stage::PIPELINE[i];
            i += 1;
        }
        all
    };

    /// The name in `mntr` keys and the Prometheus `stage` label.
    pub fn name(self) -> &'static str {
        match self {
            Stage::Queue => "queue",
            Stage::Core => "core",
            Stage::Batch => "batch",
            Stage::Handoff => "handoff",
            Stage::Write => "write",
            Stage::Fdatasync => "fdatasync",
            Stage::Wake => "wake",
            Stage::Socket => "socket",
            Stage::Reaction => "reaction",
        }
    }
}

/// Count, sum and max of one stage, in nanoseconds.
#[derive(Debug, Default)]
struct Counter {
    count: AtomicU64,
    sum_ns: AtomicU64,
    max_ns: AtomicU64,
}

/// What a reader of [`StageTimes`] gets for one stage; times in microseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct StageValue {
    pub stage: Stage,
    pub count: u64,
    pub sum_us: f64,
    pub max_us: f64,
}

/// Every stage's totals since the server started, shared by all connection tasks (the only
/// writers) and read by `mntr` and `/metrics`. Relaxed atomics: each number is exact, but a
/// reader may see one stage's count a reply ahead of another's.
#[derive(Debug)]
pub(crate) struct StageTimes {
    stages: [Counter; 9],
    /// The zero of the instants kept as integers (see [`StageTimes::nanos`]).
    base: Instant,
}

impl Default for StageTimes {
    fn default() -> StageTimes {
        StageTimes {
            stages: Default::default(),
            base: Instant::now(),
        }
    }
}

impl StageTimes {
    pub(crate) fn record(&self, stage: Stage, took: Duration) {
        let ns = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        let c = &self.stages[stage as usize];
        c.count.fetch_add(1, Ordering::Relaxed);
        c.sum_ns.fetch_add(ns, Ordering::Relaxed);
        c.max_ns.fetch_max(ns, Ordering::Relaxed);
    }

    /// Every stage's totals, in [`Stage::ALL`] order.
    pub(crate) fn values(&self) -> [StageValue; 9] {
        Stage::ALL.map(|stage| {
            let c = &self.stages[stage as usize];
            StageValue {
                stage,
                count: c.count.load(Ordering::Relaxed),
                sum_us: c.sum_ns.load(Ordering::Relaxed) as f64 / 1000.0,
                max_us: c.max_ns.load(Ordering::Relaxed) as f64 / 1000.0,
            }
        })
    }

    /// `at` as nanoseconds since this server's start, never 0 (0 means "none" where an instant
    /// is kept in an atomic, as [`Reaction`] does).
    fn nanos(&self, at: Instant) -> u64 {
        let ns = at.saturating_duration_since(self.base).as_nanos();
        u64::try_from(ns).unwrap_or(u64::MAX).max(1)
    }

    /// Records the stages of one reply that waited for durability: `request` stamped by the
    /// reader and the core, `sync` by the log worker, `taken` and `sent` by whoever wrote it to
    /// the socket.
    pub(crate) fn record_reply(
        &self,
        request: &RequestStamps,
        sync: &SyncStamps,
        taken: Instant,
        sent: Instant,
    ) {
        let points = [
            request.received,
            request.taken,
            request.queued,
            sync.flushed,
            sync.received,
            sync.written,
            sync.synced,
            taken,
            sent,
        ];
        let mut previous = points[0];
        for (stage, &point) in Stage::PIPELINE.iter().zip(&points[1..]) {
            let point = point.max(previous);
            self.record(*stage, point - previous);
            previous = point;
        }
    }
}

/// The stamps a request collects before the log, carried by its reply to whoever writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RequestStamps {
    /// The reader decoded the frame.
    pub received: Instant,
    /// The core took the request.
    pub taken: Instant,
    /// The core queued this message on the connection's outbox.
    pub queued: Instant,
}

/// The stamps of one sync of the log, published with the durable mark it reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SyncStamps {
    /// The zxid durable before this sync: the sync covered `(after, Durable::zxid]`.
    pub after: i64,
    /// The core flushed the newest batch this sync carries.
    pub flushed: Instant,
    /// The log worker received the first batch of this sync.
    pub received: Instant,
    /// The log worker's writes returned.
    pub written: Instant,
    /// fdatasync returned (equal to `written` when the log does not sync); also when the
    /// durable mark was published.
    pub synced: Instant,
}

/// One connection's half of `reaction`: its writer notes when it wrote a watch event, its
/// reader takes the note at the next request.
#[derive(Debug, Default)]
pub(crate) struct Reaction {
    /// Nanoseconds since [`StageTimes`]' base of the last event written, 0 for none.
    event_written: AtomicU64,
}

impl Reaction {
    pub(crate) fn event_written(&self, times: &StageTimes, at: Instant) {
        self.event_written.store(times.nanos(at), Ordering::Relaxed);
    }

    /// A request was decoded at `at`: records the reaction to the event written before it.
    pub(crate) fn request_received(&self, times: &StageTimes, at: Instant) {
        let written = self.event_written.swap(0, Ordering::Relaxed);
        if written != 0 {
            let now = times.nanos(at);
            times.record(
                Stage::Reaction,
                Duration::from_nanos(now.saturating_sub(written)),
            );
        }
    }
}

/// The sending side of one connection: the reply that last waited for the log, kept until the
/// write that sends it, and whether a watch event is among what is being written.
#[derive(Debug)]
pub(crate) struct SendTrace {
    stages: Arc<StageTimes>,
    reaction: Arc<Reaction>,
    /// The stamps of the reply that waited, the log's sync that released it, when it was taken.
    waited: Option<(RequestStamps, SyncStamps, Instant)>,
    /// A watch event is encoded and not yet written.
    event: bool,
}

impl SendTrace {
    pub(crate) fn new(stages: Arc<StageTimes>, reaction: Arc<Reaction>) -> SendTrace {
        SendTrace {
            stages,
            reaction,
            waited: None,
            event: false,
        }
    }

    /// A message that reveals `visible_at` is taken for the socket, the log's newest sync being
    /// `sync`. Keeps its stamps (if it was queued before the log was durable that far), the
    /// first such message's of a write, if `sync` is the one that covered it: a later mark
    /// would charge this reply for another batch's stages.
    pub(crate) fn took(
        &mut self,
        stamps: Option<RequestStamps>,
        visible_at: i64,
        sync: Option<SyncStamps>,
        event: bool,
    ) {
        self.event |= event;
        if let (None, Some(request), Some(sync)) = (self.waited, stamps, sync)
            && sync.after < visible_at
        {
            self.waited = Some((request, sync, Instant::now()));
        }
    }

    /// What was encoded goes to the socket now. A watch event among it is noted before the
    /// write: the client may read it and send its next request before the write returns here,
    /// and the reader must then find the note.
    pub(crate) fn sending(&mut self, at: Instant) {
        if std::mem::take(&mut self.event) {
            self.reaction.event_written(&self.stages, at);
        }
    }

    /// What was encoded is on the socket at `at`.
    pub(crate) fn written(&mut self, at: Instant) {
        if let Some((request, sync, taken)) = self.waited.take() {
            self.stages.record_reply(&request, &sync, taken, at);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stages_of_one_reply_add_up_to_its_whole_time_even_with_stamps_out_of_order() {
        let times = StageTimes::default();
        let t0 = Instant::now();
        let us = |n: u64| t0 + Duration::from_micros(n);
        let request = RequestStamps {
            received: t0,
            taken: us(10),
            queued: us(30),
        };
        // The log worker received the batch "before" the flush that the sync carries.
        let sync = SyncStamps {
            after: 0,
            flushed: us(40),
            received: us(35),
            written: us(60),
            synced: us(160),
        };
        times.record_reply(&request, &sync, us(170), us(200));
        let v = times.values();
        let sums: Vec<f64> = v.iter().map(|s| s.sum_us).collect();
        assert_eq!(sums, [10.0, 20.0, 10.0, 0.0, 20.0, 100.0, 10.0, 30.0, 0.0]);
        assert_eq!(sums.iter().sum::<f64>(), 200.0);
        assert!(v[..8].iter().all(|s| s.count == 1));
        assert_eq!(v[8].count, 0);

        let reaction = Reaction::default();
        reaction.request_received(&times, us(300));
        assert_eq!(times.values()[8].count, 0, "no event was written");
        reaction.event_written(&times, us(300));
        reaction.request_received(&times, us(450));
        reaction.request_received(&times, us(500));
        let r = times.values()[8];
        assert_eq!((r.count, r.sum_us, r.max_us), (1, 150.0, 150.0));
    }
}
