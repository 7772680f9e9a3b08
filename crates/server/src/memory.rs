//! Memory after a burst: giving back what a flood of connections and sessions freed.
//!
//! A connection with its session costs about 13 KB (read buffer, its reply queue's first block,
//! two tasks), allocated from the malloc arenas of whichever runtime threads ran it. When
//! thousands go at once, glibc's malloc keeps what they freed: it hands memory back to the OS
//! only from the top of an arena, and the freed chunks sit between longer-lived ones. Measured on
//! `lockkeeper serve` (release build) with `scripts/session-flood`: 5,000 sessions opened and
//! left to expire, four times over, took RSS from 6 MB to 70 MB with the sessions open, and it
//! stayed at 67, 73, 80 and 81 MB after each round had expired; `malloc_trim(0)` from a debugger
//! then brought it to 11 MB. With the trim below it is back at 9 MB after every round; the trim
//! takes about 7 ms, off the core's thread.
//!
//! So the core counts departures (connections closed, sessions ended) and, once a burst of them
//! is over, asks malloc to return free pages to the OS, on a blocking thread because trimming
//! walks every arena, and shrinks the core's own maps, which never shrink by themselves.
//!
//! Invariants: a trim never runs on the core's thread, never more than one at a time, and only
//! after a quiet second, so a burst still going on is not trimmed piece by piece.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Departures that make a burst worth a trim.
const BURST: u64 = 1000;
/// How long departures must have stopped before the trim.
const QUIET: Duration = Duration::from_secs(1);

/// Counts departures and says when a burst of them is over.
#[derive(Default)]
pub(crate) struct AfterBurst {
    departed: u64,
    last: Option<Instant>,
    trimming: Arc<AtomicBool>,
}

impl AfterBurst {
    /// A connection closed or a session ended.
    pub(crate) fn departed(&mut self, now: Instant) {
        self.departed += 1;
        self.last = Some(now);
    }

    /// True once per burst, when it is over: the caller shrinks its maps, then calls
    /// [`AfterBurst::trim`].
    pub(crate) fn due(&mut self, now: Instant) -> bool {
        let quiet = self
            .last
            .is_some_and(|last| now.duration_since(last) >= QUIET);
        if self.departed < BURST || !quiet || self.trimming.load(Ordering::Acquire) {
            return false;
        }
        self.departed = 0;
        true
    }

    /// Returns malloc's free pages to the OS, off the calling thread.
    pub(crate) fn trim(&self) {
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        {
            self.trimming.store(true, Ordering::Release);
            let trimming = self.trimming.clone();
            let started = Instant::now();
            tokio::task::spawn_blocking(move || {
                // SAFETY: malloc_trim only takes glibc's own arena locks; any thread may call it.
                unsafe { libc::malloc_trim(0) };
                trimming.store(false, Ordering::Release);
                tracing::debug!(
                    elapsed_us = started.elapsed().as_micros() as u64,
                    "returned free memory to the OS after a burst of departures"
                );
            });
        }
    }
}

/// Gives back a map's spare capacity once it holds less than a quarter of it: a map keeps its
/// largest size forever otherwise.
pub(crate) fn shrink<K: Eq + Hash, V>(map: &mut HashMap<K, V>) {
    if map.capacity() > 4 * map.len().max(16) {
        map.shrink_to_fit();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_is_due_once_and_only_after_a_quiet_second() {
        let mut burst = AfterBurst::default();
        let start = Instant::now();
        for _ in 0..BURST - 1 {
            burst.departed(start);
        }
        assert!(!burst.due(start + QUIET), "too few departures");
        burst.departed(start);
        assert!(!burst.due(start), "the burst may still be going on");
        assert!(burst.due(start + QUIET));
        assert!(!burst.due(start + QUIET), "once per burst");
    }

    #[test]
    fn maps_shrink_when_mostly_empty() {
        let mut map: HashMap<u64, u64> = (0..10_000).map(|i| (i, i)).collect();
        map.retain(|k, _| *k < 10);
        let before = map.capacity();
        shrink(&mut map);
        assert!(
            map.capacity() < before / 100,
            "{} of {before}",
            map.capacity()
        );
        assert_eq!(map.len(), 10);
    }
}
