//! The queue run of `bench --recipes`: producers put items into one queue while consumers take
//! them at least once (an item is removed only after its consumer acknowledged it), lockkeeper's
//! `DistributedQueue` here and Curator's `DistributedQueue` with a lock path in the JVM, on the
//! same layout. The figure is items per second, from the common start to the last item consumed.
//!
//! Invariants: every item is named (`item-<n>`, each `n` once), so the run can tell that every
//! item was consumed exactly once: a duplicate or a missing item fails it (a queue that loses or
//! repeats items would otherwise look fast). Producers stop at the limit; consumers then drain
//! what was produced, bounded by [`DRAIN_LIMIT`]. Sessions are opened before the clock starts and
//! closed after it stops.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use lockkeeper::zk::Delivery;
use tokio::sync::Barrier;

use crate::BoxError;
use crate::locks::{close_all, open_many};
use crate::stats::rate;

/// Bound on draining the queue after the producers stopped: far beyond a healthy run's.
pub(super) const DRAIN_LIMIT: Duration = Duration::from_secs(60);

/// How long a consumer waits for an item before it looks again whether the run is over.
const TAKE_WAIT: Duration = Duration::from_millis(100);

/// Items through one queue, produced and consumed by several sessions.
#[derive(Clone, Debug)]
pub(crate) struct Queued {
    pub producers: usize,
    pub consumers: usize,
    /// Items consumed, each exactly once (checked).
    pub items: u64,
    /// From the common start to the last item consumed.
    pub elapsed: Duration,
}

impl Queued {
    pub(crate) fn per_sec(&self) -> f64 {
        rate(self.items, self.elapsed)
    }
}

/// The shape of one queue run, the same on both sides.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Shape {
    pub producers: usize,
    pub consumers: usize,
    /// Items over all producers; producer `p` puts items `p`, `p + producers`, ...
    pub items: u32,
}

/// Fails unless `consumed` (item names, in any order) holds each of the `produced` items
/// `item-0` .. `item-<produced - 1>` exactly once.
pub(super) fn check_once(path: &str, produced: u64, consumed: &[String]) -> Result<(), BoxError> {
    let mut seen: HashMap<&str, u32> = HashMap::new();
    for item in consumed {
        *seen.entry(item.as_str()).or_default() += 1;
    }
    let repeated = seen.values().filter(|&&n| n > 1).count();
    let missing = (0..produced)
        .filter(|n| !seen.contains_key(format!("item-{n}").as_str()))
        .count();
    let strange = seen
        .keys()
        .filter(|name| {
            name.strip_prefix("item-")
                .and_then(|n| n.parse::<u64>().ok())
                .is_none_or(|n| n >= produced)
        })
        .count();
    if repeated + missing + strange > 0 {
        return Err(format!(
            "queue {path}: of {produced} items produced, {missing} were never consumed, \
             {repeated} were consumed more than once, {strange} consumed were never produced"
        )
        .into());
    }
    Ok(())
}

/// What the producers and consumers of one lockkeeper run share.
#[derive(Default)]
struct Progress {
    produced: AtomicU64,
    consumed: AtomicU64,
    producers_done: AtomicBool,
    /// Microseconds from the common start to the latest consumption.
    last_consumed_us: AtomicU64,
}

/// One run of lockkeeper's `DistributedQueue` at `path`, consumed at least once.
pub(super) async fn run(
    connect: &str,
    path: &str,
    shape: Shape,
    limit: Duration,
    connect_limit: Duration,
) -> Result<Queued, BoxError> {
    let Shape {
        producers,
        consumers,
        items,
    } = shape;
    let opened = open_many(connect, producers + consumers, connect_limit).await?;
    let mut queues = Vec::with_capacity(opened.len());
    for session in &opened {
        match session.distributed_queue(path) {
            Ok(queue) => queues.push(queue),
            Err(e) => {
                close_all(opened).await;
                return Err(e.into());
            }
        }
    }
    let progress = Arc::new(Progress::default());
    let start = Arc::new(Barrier::new(producers + consumers + 1));
    let started = Arc::new(std::sync::OnceLock::<Instant>::new());
    let mut producing = Vec::with_capacity(producers);
    let mut consuming = Vec::with_capacity(consumers);
    for (i, queue) in queues.into_iter().enumerate() {
        let (start, progress, started) = (start.clone(), progress.clone(), started.clone());
        if i < producers {
            producing.push(tokio::spawn(async move {
                start.wait().await;
                let deadline = Instant::now() + limit;
                let mut n = i as u64;
                while n < u64::from(items) && Instant::now() < deadline {
                    queue.put(format!("item-{n}").as_bytes()).await?;
                    progress.produced.fetch_add(1, Ordering::SeqCst);
                    n += producers as u64;
                }
                Ok::<_, BoxError>(())
            }));
        } else {
            consuming.push(tokio::spawn(async move {
                start.wait().await;
                let drain_by = Instant::now() + limit + DRAIN_LIMIT;
                let mut mine = Vec::new();
                loop {
                    let done = progress.producers_done.load(Ordering::SeqCst);
                    let produced = progress.produced.load(Ordering::SeqCst);
                    if done && progress.consumed.load(Ordering::SeqCst) >= produced {
                        return Ok::<_, BoxError>(mine);
                    }
                    if Instant::now() >= drain_by {
                        return Err(format!(
                            "queue {}: {} of {produced} items consumed within {:?}",
                            queue.path(),
                            progress.consumed.load(Ordering::SeqCst),
                            limit + DRAIN_LIMIT
                        )
                        .into());
                    }
                    let Some(taken) = queue.take_timeout(Delivery::AtLeastOnce, TAKE_WAIT).await?
                    else {
                        continue;
                    };
                    let names: Vec<String> = taken
                        .items()
                        .iter()
                        .map(|item| String::from_utf8_lossy(item).into_owned())
                        .collect();
                    taken.ack().await?;
                    if let Some(t0) = started.get() {
                        let us = t0.elapsed().as_micros() as u64;
                        progress.last_consumed_us.fetch_max(us, Ordering::SeqCst);
                    }
                    progress
                        .consumed
                        .fetch_add(names.len() as u64, Ordering::SeqCst);
                    mine.extend(names);
                }
            }));
        }
    }
    let _ = started.set(Instant::now());
    start.wait().await;
    let mut failure: Option<BoxError> = None;
    for task in producing {
        match task.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => failure = failure.or(Some(e)),
            Err(e) => failure = failure.or(Some(format!("producing task: {e}").into())),
        }
    }
    progress.producers_done.store(true, Ordering::SeqCst);
    let mut consumed = Vec::new();
    for task in consuming {
        match task.await {
            Ok(Ok(mine)) => consumed.extend(mine),
            Ok(Err(e)) => failure = failure.or(Some(e)),
            Err(e) => failure = failure.or(Some(format!("consuming task: {e}").into())),
        }
    }
    close_all(opened).await;
    if let Some(e) = failure {
        return Err(e);
    }
    let produced = progress.produced.load(Ordering::SeqCst);
    check_once(path, produced, &consumed)?;
    Ok(Queued {
        producers,
        consumers,
        items: consumed.len() as u64,
        elapsed: Duration::from_micros(progress.last_consumed_us.load(Ordering::SeqCst)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(ns: &[u64]) -> Vec<String> {
        ns.iter().map(|n| format!("item-{n}")).collect()
    }

    #[test]
    fn every_item_exactly_once_or_the_run_fails() {
        assert!(check_once("/q", 3, &names(&[2, 0, 1])).is_ok());
        let twice = check_once("/q", 3, &names(&[0, 1, 1, 2])).unwrap_err();
        assert!(
            twice.to_string().contains("1 were consumed more than once"),
            "{twice}"
        );
        let lost = check_once("/q", 3, &names(&[0, 2])).unwrap_err();
        assert!(lost.to_string().contains("1 were never consumed"), "{lost}");
        let extra = check_once("/q", 2, &names(&[0, 1, 7])).unwrap_err();
        assert!(
            extra.to_string().contains("1 consumed were never produced"),
            "{extra}"
        );
        let q = Queued {
            producers: 4,
            consumers: 4,
            items: 500,
            elapsed: Duration::from_millis(250),
        };
        assert_eq!(q.per_sec(), 2000.0);
    }
}
