//! The distributed queue under faults: 4 consumer processes (this test binary re-run by
//! `test_child`, each with a 4 s session) take items while the test SIGKILLs one at random
//! every 100-400 ms and starts a replacement, against Keeper and Apache ZooKeeper.
//!
//! Each consumer appends the item to its own log (one `write` per line, so a SIGKILL cannot
//! lose a line already written) when it handles it, with 1 ms of further work after that line
//! and before the ack (at-least-once) or between the take and the line (at-most-once), so
//! that kills land in the window each mode pays for. Asserted, once the queue is empty:
//! - at-least-once: every item was handled (nothing lost); duplicates are counted and reported
//!   (an item handled by a consumer killed before its ack is handled again by another);
//! - at-most-once: no item was handled twice; losses are counted and reported (an item taken
//!   by a consumer killed before its log line).
//!
//! And CURATOR-605: a consumer SIGSTOPped mid-handler past its session timeout loses the item
//! to another consumer only after its session can have expired, and once it runs again its
//! handler takes no further step (without the `lost()` race in `consume` it does: checked).
//!
//! `LOCKKEEPER_QUEUE_ITEMS` sets the item count (default 2,000, so the suite stays short; the
//! docs/guide/queues.md quotes a run with 10,000).

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use lockkeeper::zk::{Delivery, Session};
use lockkeeper_testkit::test_child::{self, ChildProcess};
use rand::Rng;
use tokio::time::Instant;

use crate::support::{for_each_backend, session};

const TEST: &str = "faults::queue_consumers_sigkilled_at_random";
const CONSUMERS: usize = 4;
/// The bound on one mode's run on one backend: restarts make consumers slow (a fresh process
/// and session every 100-400 ms, a killed one's items locked until its session expires).
fn limit(items: usize) -> Duration {
    Duration::from_secs(30) + Duration::from_millis(10) * items as u32
}

fn items() -> usize {
    std::env::var("LOCKKEEPER_QUEUE_ITEMS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(2_000)
}

/// A consumer process: takes items forever, logging each as it is handled.
async fn consumer_child() {
    let var = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("{name} unset"));
    let delivery = match var("QUEUE_MODE").as_str() {
        "at-least-once" => Delivery::AtLeastOnce,
        _ => Delivery::AtMostOnce,
    };
    let session = Session::builder(&var("QUEUE_CONNECT"))
        .session_timeout(Duration::from_secs(4))
        .connect()
        .await
        .expect("consumer session");
    let queue = session.distributed_queue(&var("QUEUE_PATH")).unwrap();
    let mut log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(var("QUEUE_LOG"))
        .expect("consumer log");
    loop {
        let taken = queue.take(delivery).await.expect("take");
        // The handler: its side effect is the log line; 1 ms of further work follows it
        // (at-least-once: a kill then leaves a handled, unacknowledged item) or precedes it
        // (at-most-once: a kill then loses a removed item).
        if delivery == Delivery::AtMostOnce {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        for item in taken.items() {
            let mut line = item.clone();
            line.push(b'\n');
            log.write_all(&line).expect("log line");
        }
        if delivery == Delivery::AtLeastOnce {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        match taken.ack().await {
            Ok(()) | Err(lockkeeper::Error::ItemLost { .. }) => {}
            Err(err) => panic!("ack: {err}"),
        }
    }
}

struct Run {
    handled: HashMap<String, usize>,
    kills: usize,
    took: Duration,
}

async fn run(connect: &str, mode: &str, dir: &Path) -> Run {
    let producer = session(connect).await;
    let path = format!("/faults/{mode}");
    let queue = producer.distributed_queue(&path).unwrap();
    let count = items();
    for start in (0..count).step_by(200) {
        let batch: Vec<String> = (start..count.min(start + 200))
            .map(|i| format!("i-{i}"))
            .collect();
        let refs: Vec<&[u8]> = batch.iter().map(String::as_bytes).collect();
        queue.put_all(&refs).await.expect("put a batch");
    }
    let spawn = |n: usize| {
        let log = dir.join(format!("{mode}-{n}.log"));
        ChildProcess::spawn(
            TEST,
            "consumer",
            &[
                ("QUEUE_CONNECT", connect.to_owned()),
                ("QUEUE_MODE", mode.to_owned()),
                ("QUEUE_PATH", path.clone()),
                ("QUEUE_LOG", log.display().to_string()),
            ],
        )
    };
    let started = Instant::now();
    let mut spawned = 0;
    let mut consumers: Vec<ChildProcess> = (0..CONSUMERS)
        .map(|_| {
            spawned += 1;
            spawn(spawned)
        })
        .collect();
    let client = producer.client().unwrap();
    let mut kills = 0;
    let mut next_kill = Instant::now() + Duration::from_millis(300);
    loop {
        let left = client
            .list_children(&path)
            .await
            .expect("list the queue")
            .iter()
            .filter(|n| n.starts_with("queue-"))
            .count();
        if left == 0 {
            break;
        }
        assert!(
            started.elapsed() < limit(count),
            "{left} of {count} items left after {:?} ({kills} kills)",
            limit(count)
        );
        if Instant::now() >= next_kill {
            let victim = rand::thread_rng().gen_range(0..consumers.len());
            consumers[victim].kill();
            kills += 1;
            spawned += 1;
            consumers[victim] = spawn(spawned);
            next_kill =
                Instant::now() + Duration::from_millis(rand::thread_rng().gen_range(100..400));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let took = started.elapsed();
    // Let a consumer that just removed an item (at-most-once) write its line.
    tokio::time::sleep(Duration::from_millis(300)).await;
    drop(consumers);
    let mut handled: HashMap<String, usize> = HashMap::new();
    for n in 1..=spawned {
        let log = dir.join(format!("{mode}-{n}.log"));
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        for line in text.lines() {
            *handled.entry(line.to_owned()).or_default() += 1;
        }
    }
    Run {
        handled,
        kills,
        took,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_consumers_sigkilled_at_random() {
    if test_child::role().is_some() {
        return consumer_child().await;
    }
    for_each_backend(|connect| async move {
        let dir = tempfile::tempdir().unwrap();
        let dir: PathBuf = dir.path().to_owned();
        let count = items();
        let expected = |i: usize| format!("i-{i}");

        let alo = run(&connect, "at-least-once", &dir).await;
        let lost: Vec<String> = (0..count)
            .map(expected)
            .filter(|i| !alo.handled.contains_key(i))
            .collect();
        let duplicates: usize = alo.handled.values().map(|n| n - 1).sum();
        eprintln!(
            "at-least-once: {count} items, {} kills, {:.1?}: {} lost, {duplicates} handled again",
            alo.kills,
            alo.took,
            lost.len()
        );
        assert!(lost.is_empty(), "at-least-once lost {lost:?}");
        assert_eq!(alo.handled.len(), count, "only the items put were handled");

        let amo = run(&connect, "at-most-once", &dir).await;
        let twice: Vec<(&String, &usize)> = amo.handled.iter().filter(|(_, n)| **n > 1).collect();
        let losses = (0..count)
            .map(expected)
            .filter(|i| !amo.handled.contains_key(i))
            .count();
        eprintln!(
            "at-most-once: {count} items, {} kills, {:.1?}: {losses} lost, {} handled twice",
            amo.kills,
            amo.took,
            twice.len()
        );
        assert!(twice.is_empty(), "at-most-once handled twice: {twice:?}");
        assert!(amo.kills > 0 && alo.kills > 0, "the consumers were killed");
    })
    .await;
}

const PAUSED_TEST: &str = "faults::a_paused_consumer_stops_before_its_item_is_taken_again";

/// The paused consumer: `consume` with a handler that logs `start`, then a `step` every
/// 100 ms for 30 s, then `end`.
async fn paused_child() {
    let var = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("{name} unset"));
    let session = Session::builder(&var("QUEUE_CONNECT"))
        .session_timeout(Duration::from_secs(4))
        .connect()
        .await
        .expect("consumer session");
    let queue = session.distributed_queue("/faults/paused").unwrap();
    let log = var("QUEUE_LOG");
    let line = move |text: &str| {
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .expect("log");
        file.write_all(format!("{text}\n").as_bytes())
            .expect("log line");
    };
    let _ = queue
        .consume(Delivery::AtLeastOnce, |_item| {
            let line = line.clone();
            async move {
                line("start");
                for _ in 0..300 {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    line("step");
                }
                line("end");
                Ok::<(), String>(())
            }
        })
        .await;
}

/// CURATOR-605: a consumer paused (SIGSTOP) mid-handler past its session timeout. Another
/// consumer takes the item once the paused one's session has expired; when the paused process
/// runs again, its handler is dropped before it takes another step (its session's local
/// deadline passed while it was stopped), and its lock cannot remove the item the other holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_consumer_stops_before_its_item_is_taken_again() {
    if test_child::role().is_some() {
        return paused_child().await;
    }
    for_each_backend(|connect| async move {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("paused.log");
        let steps = || {
            std::fs::read_to_string(&log)
                .unwrap_or_default()
                .lines()
                .filter(|l| *l == "step")
                .count()
        };
        let other = session(&connect).await;
        let queue = other.distributed_queue("/faults/paused").unwrap();
        queue.put(b"job").await.unwrap();
        let child = ChildProcess::spawn(
            PAUSED_TEST,
            "paused",
            &[
                ("QUEUE_CONNECT", connect.clone()),
                ("QUEUE_LOG", log.display().to_string()),
            ],
        );
        let deadline = Instant::now() + Duration::from_secs(60);
        while steps() < 3 {
            assert!(Instant::now() < deadline, "the handler never ran");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        child.signal("STOP");
        let stopped = Instant::now();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let before = steps();
        let taken =
            tokio::time::timeout(Duration::from_secs(30), queue.take(Delivery::AtLeastOnce))
                .await
                .expect("the item is taken once the paused session expired")
                .unwrap();
        // The paused session was last heard at most a heartbeat (a quarter of 4 s) before
        // the stop, so the server could expire it from 3 s after the stop on.
        assert!(
            stopped.elapsed() >= Duration::from_millis(2900),
            "taken {:?} after the pause, before the paused session could expire",
            stopped.elapsed()
        );
        child.signal("CONT");
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(
            steps(),
            before,
            "the paused handler ran on after it resumed"
        );
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(!text.contains("end"), "{text}");
        assert_eq!(taken.items(), [b"job".to_vec()]);
        taken.ack().await.expect("the second consumer's ack");
        drop(child);
    })
    .await;
}
