//! Where the log's work runs: who takes the groups the core queues, writes them and syncs
//! them (the writing itself is the parent module's [`Shared::take_group`]). Invariants: a
//! flush that queued something either wakes a worker or is taken by the one at work before it
//! stops; the task has one group's sync in flight at a time, the threads at most two.
//!
//! - **On a multi-threaded tokio runtime, one task.** A flush wakes it when it is not at work,
//!   as a rule on the core's own thread (tokio's slot for the task woken last), where it runs
//!   once the core yields (at once when the core has nothing more queued; under a burst, when
//!   the core's cooperative budget runs out). One client's lone light write that woke
//!   nobody is written and synced right there, with no other thread woken: the core, if a
//!   request wakes it meanwhile, runs on another worker. A group that may hold the thread
//!   while others need the core (it waits for the woken's write, several flushes, records
//!   that woke watchers, a big group, a slow disk; see `holds_long`), and every group on a
//!   runtime of one worker, first hands the thread's other tasks, the core among them, to a
//!   thread of the blocking pool (`block_in_place`); `lk_log_handoffs` counts those. While it
//!   is at work, flushes wake nobody: it takes what was queued during its sync before it
//!   stops, so under a steady load the syncs run back to back. The task lives on the runtime
//!   the log was opened in (the server's core and log share one); should that runtime shut
//!   down first, a thread inherits the work.
//! - **Elsewhere (a current-thread runtime, no runtime), two threads** that take turns at the
//!   segment files: the one holding the writer waits on the queue, writes a group, lets go and
//!   syncs it; meanwhile the other can write the next group and, if it is small
//!   (`OVERLAP_MAX`), start its sync.

use std::io;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{Ordering, fence};
use std::thread::JoinHandle;

use tokio::runtime::{Handle, RuntimeFlavor};
use tokio::sync::Notify;

use super::{SYNCERS, Shared};
use crate::sync::lock;

/// Where the log's work runs (see the module doc).
pub(super) enum Workers {
    /// One task on a multi-threaded runtime, woken by a flush when it is not at work.
    Task(Arc<Notify>),
    /// Threads of their own, waiting on the queue.
    Threads(Vec<JoinHandle<()>>),
}

/// Where the workers will run, decided before the log is built: a segment opens one descriptor
/// per worker that syncs.
pub(super) enum Placement {
    Task(Handle),
    Threads,
}

/// The thread a group is taken on, which decides whether a group that may hold it long is
/// taken after a thread hand-off (see the module doc).
#[derive(Clone, Copy)]
pub(super) enum On {
    /// A thread of the log's own (log threads, the heir): it blocks.
    OwnThread,
    /// A runtime's worker, in the log task: a group that may hold it long first hands the
    /// worker's other tasks to another thread; with no other worker to run them, every group
    /// does.
    Worker { alone: bool },
}

impl On {
    /// Whether a group that may hold the thread `long` is taken after a hand-off.
    pub(super) fn hands_off(self, long: bool) -> bool {
        match self {
            On::OwnThread => false,
            On::Worker { alone } => long || alone,
        }
    }
}

impl Placement {
    /// A task on the current runtime if it is multi-threaded, else threads.
    pub(super) fn here() -> Placement {
        match Handle::try_current() {
            Ok(runtime) if runtime.runtime_flavor() == RuntimeFlavor::MultiThread => {
                Placement::Task(runtime)
            }
            _ => Placement::Threads,
        }
    }

    /// How many workers sync at once, each through its own descriptor of a segment.
    pub(super) fn syncers(&self) -> usize {
        match self {
            Placement::Task(_) => 1,
            Placement::Threads => SYNCERS,
        }
    }
}

impl Workers {
    pub(super) fn start(placement: Placement, shared: &Arc<Shared>) -> io::Result<Workers> {
        match placement {
            Placement::Task(runtime) => {
                let wake = Arc::new(Notify::new());
                let on = On::Worker {
                    alone: runtime.metrics().num_workers() < 2,
                };
                runtime.spawn(shared.clone().task(wake.clone(), on));
                Ok(Workers::Task(wake))
            }
            Placement::Threads => {
                let threads = (0..SYNCERS)
                    .map(|me| {
                        let shared = shared.clone();
                        std::thread::Builder::new()
                            .name(format!("keeper-log-{me}"))
                            .spawn(move || shared.run(me))
                    })
                    .collect::<io::Result<Vec<_>>>()?;
                Ok(Workers::Threads(threads))
            }
        }
    }

    /// Something was queued: wakes the task if it is not at work. If it is, it takes this
    /// after its sync (see [`Shared::work`]), and waking it would only move the core's
    /// thread's other tasks to another thread for nothing.
    pub(super) fn wake(&self, shared: &Shared) {
        if let Workers::Task(wake) = self {
            // Pairs with the fence in `Shared::work`: either this sees the task gone, or the
            // task sees what was queued.
            fence(Ordering::SeqCst);
            if !shared.working.load(Ordering::SeqCst) {
                wake.notify_one();
            }
        }
    }

    /// After [`Shared::close`]: the task is let go, threads joined.
    pub(super) fn stop(&mut self) {
        match self {
            Workers::Task(wake) => wake.notify_waiters(),
            Workers::Threads(threads) => {
                for thread in threads.drain(..) {
                    let _ = thread.join();
                }
            }
        }
    }
}

impl Shared {
    /// The log task: waits for a flush's wake-up and works until the log closes.
    async fn task(self: Arc<Self>, wake: Arc<Notify>, on: On) {
        let _heir = Heir(self.clone());
        loop {
            // Listening before looking at `closed`, so the stop's wake-up cannot fall between
            // the two.
            let woken = wake.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            if self.closed.load(Ordering::SeqCst) {
                return;
            }
            woken.await;
            // A wake-up stored while the task was at work may find its batch taken.
            if self.queued_msgs.load(Ordering::SeqCst) == 0 {
                continue;
            }
            // Here, on the thread the flush woke this task on (see `On::hands_off` for when a
            // group lets the thread's other tasks go first).
            let worked = std::panic::catch_unwind(AssertUnwindSafe(|| self.work(on)));
            if worked.is_err() {
                self.working.store(false, Ordering::SeqCst);
                self.panicked();
            }
        }
    }

    /// The thread that carries on the log task's work once its runtime is gone: waits for
    /// groups as a log thread does, through the one descriptor the task's segments have, until
    /// the queue closes. A panic fails the log (see `FailOnPanic`) and the thread goes on
    /// waiting, so a resume finds a worker, as it does after the task's panic.
    fn inherit(&self) {
        while std::panic::catch_unwind(AssertUnwindSafe(|| self.run(0))).is_err() {}
    }

    /// One log thread: waits for a group and takes it, until the queue closes (the log's drop
    /// writes and syncs what is left itself).
    fn run(&self, me: usize) {
        loop {
            let writer = lock(&self.writer);
            let Ok(first) = writer.rx.recv() else {
                return;
            };
            self.take_group(me, writer, first, On::OwnThread);
        }
    }

    /// The log task's work: takes groups until nothing is queued. A flush that sees the task
    /// at work wakes nobody, so after it clears `working` it looks once more.
    fn work(&self, on: On) {
        self.working.store(true, Ordering::SeqCst);
        loop {
            let mut took = false;
            while self.take_queued(on) {
                took = true;
            }
            self.working.store(false, Ordering::SeqCst);
            fence(Ordering::SeqCst);
            if self.queued_msgs.load(Ordering::SeqCst) == 0 {
                return;
            }
            self.working.store(true, Ordering::SeqCst);
            if !took {
                // Counted, yet not in the queue: its sender is between the count and the send.
                std::thread::yield_now();
            }
        }
    }

    /// Takes what is queued, if anything (a stored wake-up may find it taken already); says
    /// whether it did.
    fn take_queued(&self, on: On) -> bool {
        let writer = lock(&self.writer);
        let Ok(first) = writer.rx.try_recv() else {
            return false;
        };
        self.take_group(0, writer, first, on);
        true
    }
}

/// Held by the log task. The runtime drops the task's future, unfinished, when it shuts down;
/// if the log is still open then (its owner outlived the runtime the log was opened in), a
/// thread takes the work over, so what is flushed afterwards still becomes durable and its
/// replies are released, instead of waiting for the log's drop.
struct Heir(Arc<Shared>);

impl Drop for Heir {
    fn drop(&mut self) {
        if self.0.closed.load(Ordering::SeqCst) {
            return;
        }
        let shared = self.0.clone();
        // If no thread can be had, the work waits for the log's drop, which writes it itself.
        let _ = std::thread::Builder::new()
            .name("keeper-log-heir".into())
            .spawn(move || shared.inherit());
    }
}
