//! Writes whose answers a leader kill lost: counter increments and queue puts, each applied
//! once or not at all, and the caller told when it cannot know which.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use lockkeeper::Error;
use tokio::time::{Instant, timeout};

use crate::harness::{ONE_ENSEMBLE, TEST_LIMIT, blocking, cut_off, ensemble, spread_sessions};

/// Counter increments and queue puts in flight while the ensemble's leader is killed: the
/// writes whose answers are lost are exactly the ones the library may not know about. An
/// increment is applied once or not at all (every value an increment returned is distinct,
/// and the final count exceeds the acknowledged ones by no more than the calls that failed
/// unsure), and every acknowledged queue item is there exactly once, with no item twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn counter_and_queue_writes_through_a_leader_kill() {
    let _turn = ONE_ENSEMBLE.lock().await;
    let Some(zk) = ensemble().await else { return };
    let stop = Arc::new(AtomicBool::new(false));
    let values = Arc::new(StdMutex::new(Vec::<i64>::new()));
    let unsure_increments = Arc::new(AtomicUsize::new(0));
    let queued = Arc::new(StdMutex::new(Vec::<String>::new()));
    let unsure_puts = Arc::new(StdMutex::new(Vec::<String>::new()));
    let mut sessions = spread_sessions(&zk, 6).await;
    let producers = sessions.split_off(4);
    let mut workers = Vec::new();
    for session in sessions {
        let (stop, values, unsure) = (stop.clone(), values.clone(), unsure_increments.clone());
        workers.push(tokio::spawn(async move {
            let counter = session.atomic_long("/ensemble/counter").unwrap();
            while !stop.load(Ordering::SeqCst) {
                match counter.add_fetch(1).await {
                    Ok(value) => values.lock().unwrap().push(value),
                    Err(err) if cut_off(&err) => {
                        unsure.fetch_add(1, Ordering::SeqCst);
                    }
                    // Given up under contention: never applied.
                    Err(Error::Contended { .. }) => {}
                    Err(err) => panic!("increment: {err}"),
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            session
        }));
    }
    for (p, session) in producers.into_iter().enumerate() {
        let (stop, queued, unsure) = (stop.clone(), queued.clone(), unsure_puts.clone());
        workers.push(tokio::spawn(async move {
            let queue = session.distributed_queue("/ensemble/queue").unwrap();
            let mut n = 0;
            while !stop.load(Ordering::SeqCst) {
                let item = format!("p{p}-{n}");
                n += 1;
                match queue.put(item.as_bytes()).await {
                    Ok(()) => queued.lock().unwrap().push(item),
                    Err(err) if cut_off(&err) => unsure.lock().unwrap().push(item),
                    Err(err) => panic!("put: {err}"),
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            session
        }));
    }
    let progress = || values.lock().unwrap().len() + queued.lock().unwrap().len();
    let deadline = Instant::now() + TEST_LIMIT;
    while progress() < 40 {
        assert!(Instant::now() < deadline, "no writes before the kill");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let old_leader = blocking({
        let zk = zk.clone();
        move || zk.kill_leader()
    })
    .await;
    let at_kill = progress();
    while progress() < at_kill + 40 {
        assert!(Instant::now() < deadline, "no writes after the kill");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    blocking({
        let zk = zk.clone();
        move || zk.restart(old_leader)
    })
    .await;
    stop.store(true, Ordering::SeqCst);
    let mut sessions = Vec::new();
    for worker in workers {
        let session = timeout(Duration::from_secs(30), worker)
            .await
            .expect("writers stop")
            .expect("a writer panicked");
        sessions.push(session);
    }

    let values = values.lock().unwrap().clone();
    let unsure = unsure_increments.load(Ordering::SeqCst);
    let reader = &sessions[0];
    let last = reader
        .atomic_long("/ensemble/counter")
        .unwrap()
        .load()
        .await
        .unwrap();
    let mut distinct = values.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(
        distinct.len(),
        values.len(),
        "two increments returned one value"
    );
    let acknowledged = i64::try_from(values.len()).unwrap();
    assert!(
        acknowledged <= last && last <= acknowledged + i64::try_from(unsure).unwrap(),
        "{acknowledged} increments acknowledged, {unsure} unsure, and the counter says {last}"
    );

    let queue = reader.distributed_queue("/ensemble/queue").unwrap();
    let mut taken = Vec::new();
    while let Some(item) = queue
        .try_take(lockkeeper::zk::Delivery::AtMostOnce)
        .await
        .unwrap()
    {
        for bytes in item.items() {
            taken.push(String::from_utf8(bytes.clone()).unwrap());
        }
        assert!(taken.len() < 100_000, "the queue does not end");
    }
    let queued = queued.lock().unwrap().clone();
    let unsure_puts = unsure_puts.lock().unwrap().clone();
    let mut counted = std::collections::HashMap::<&str, usize>::new();
    for item in &taken {
        *counted.entry(item).or_default() += 1;
    }
    for item in &queued {
        assert_eq!(counted.get(item.as_str()), Some(&1), "acknowledged {item}");
    }
    for (item, count) in &counted {
        assert_eq!(*count, 1, "{item} was queued {count} times");
        assert!(
            queued.iter().chain(&unsure_puts).any(|q| q == item),
            "{item} was never put"
        );
    }
    eprintln!(
        "counter: {acknowledged} increments acknowledged, {unsure} unsure, final {last}; queue: \
         {} puts acknowledged, {} unsure, {} items taken",
        queued.len(),
        unsure_puts.len(),
        taken.len()
    );
}
