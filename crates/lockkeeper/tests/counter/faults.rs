//! Counters under connection faults: connections cut while increments are in flight, a write
//! whose answer is lost, a session lost to a partition.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use lockkeeper::Error;
use lockkeeper::zk::ConnectionState;

use super::cutter::WriteCutter;
use super::support::{Partition, for_each_backend, session, wait_state};
use super::{LIMIT, wait_count};

/// Connections cut again and again while increments are in flight: an increment whose answer
/// was lost is either proved unapplied and sent again, or reported as unknown; none is ever
/// applied twice (Curator and kazoo retry the whole update there and can count it twice).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn increments_cut_off_mid_write_are_never_applied_twice() {
    for_each_backend(|connect| async move {
        // Bounds the loop if the cuts take far longer than planned.
        const MAX_ROUNDS: usize = 20_000;
        let path = "/counters/cut";
        let partition = Partition::start(&connect).await;
        let through = session(&partition.connect_string()).await;
        let counter = through.atomic_long(path).unwrap();
        let writer = session(&connect).await;
        let rival = writer.atomic_long(path).unwrap();
        let cutting_done = AtomicBool::new(false);
        let cutting = async {
            // Short cuts: the session survives them (4 s timeout); requests in flight do not.
            for _ in 0..30 {
                tokio::time::sleep(Duration::from_millis(60)).await;
                partition.cut();
                tokio::time::sleep(Duration::from_millis(30)).await;
                partition.heal();
            }
            cutting_done.store(true, Ordering::SeqCst);
        };
        let incrementing = async {
            let (mut applied, mut unknown, mut refused, mut rounds) = (Vec::new(), 0i64, 0, 0);
            while !cutting_done.load(Ordering::SeqCst) && rounds < MAX_ROUNDS {
                rounds += 1;
                // A second writer keeps the node moving, so that a lost write is often
                // ambiguous rather than provably unapplied.
                rival.add_fetch(1).await.expect("rival increment");
                match counter.add_fetch(1).await {
                    Ok(value) => applied.push(value),
                    Err(Error::Zk(_) | Error::SessionLost) => unknown += 1,
                    // Retries exhausted or contended: provably not written.
                    Err(Error::RetriesExhausted { .. } | Error::Contended { .. }) => refused += 1,
                    Err(other) => panic!("increment through the cut connection: {other}"),
                }
            }
            (applied, unknown, refused, rounds)
        };
        let ((mut applied, unknown, refused, rounds), ()) =
            tokio::time::timeout(LIMIT * 4, async { tokio::join!(incrementing, cutting) })
                .await
                .expect("the increments end in time");
        let total = rival.load().await.unwrap();
        let ours = total - rounds as i64;
        eprintln!(
            "{rounds} rounds: {} applied, {unknown} unknown, {refused} refused; the counter holds {ours} of ours",
            applied.len()
        );
        let count = applied.len() as i64;
        assert!(
            count <= ours && ours <= count + unknown,
            "{count} acknowledged + {unknown} unknown increments, but {ours} were applied"
        );
        applied.sort_unstable();
        applied.dedup();
        assert_eq!(
            applied.len() as i64,
            count,
            "two increments returned one value"
        );
    })
    .await;
}

/// The write of an update leaves, and the connection drops before its answer: the update is
/// either proved unapplied and sent again (`Ok`), or reported as unknown (the connection-loss
/// error); an increment is never applied twice, and a `try_set` never answers `false` for a
/// write that went through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_whose_answer_is_lost_is_applied_at_most_once() {
    for_each_backend(|connect| async move {
        const ROUNDS: usize = 10;
        if super::support::is_ensemble(&connect) {
            eprintln!("skipped on an ensemble: the write cutter relays one server");
            return;
        }
        let path = "/counters/answer-lost";
        let cutter = WriteCutter::start(&connect).await;
        let through = session(&cutter.connect_string()).await;
        let observer = session(&connect).await;
        let check = observer.atomic_long(path).unwrap();

        let counter = through.atomic_long(path).unwrap();
        let (mut expected, mut resent, mut unknown) = (0i64, 0, 0);
        for round in 0..ROUNDS {
            cutter.arm();
            let outcome = counter.add_fetch(1).await;
            assert!(cutter.fired(), "round {round}: the write was not cut");
            let now = check.load().await.unwrap();
            match outcome {
                Ok(value) => {
                    expected += 1;
                    assert_eq!((value, now), (expected, expected), "round {round}");
                    resent += 1;
                }
                Err(Error::Zk(_)) => {
                    assert!(
                        now == expected || now == expected + 1,
                        "round {round}: {now} after {expected} and one unknown increment"
                    );
                    expected = now;
                    unknown += 1;
                }
                Err(other) => panic!("round {round}: increment: {other}"),
            }
        }

        let count_path = "/counters/answer-lost-count";
        let count = through.shared_count(count_path, 0).await.unwrap();
        let raw = observer.shared_count(count_path, 0).await.unwrap();
        for round in 0..ROUNDS {
            let seen = count.read().await.unwrap();
            cutter.arm();
            let outcome = count.try_set(&seen, seen.value + 1).await;
            assert!(cutter.fired(), "round {round}: the try_set was not cut");
            let now = raw.read().await.unwrap().value;
            match outcome {
                Ok(true) => assert_eq!(now, seen.value + 1, "round {round}"),
                Ok(false) => panic!("round {round}: try_set said false with no other writer"),
                Err(Error::Zk(_)) => assert!(
                    now == seen.value || now == seen.value + 1,
                    "round {round}: {now} after {} and one unknown try_set",
                    seen.value
                ),
                Err(other) => panic!("round {round}: try_set: {other}"),
            }
        }
        eprintln!("increments: {resent} proved unapplied and sent again, {unknown} unknown");
    })
    .await;
}

/// A session lost to a partition: the SharedCount catches up with what was written meanwhile
/// and keeps following in the new session; the AtomicLong carries on with the same value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counters_carry_on_after_the_session_is_lost() {
    for_each_backend(|connect| async move {
        let path = "/counters/after-loss";
        let long_path = "/counters/after-loss-long";
        let partition = Partition::start(&connect).await;
        let through = session(&partition.connect_string()).await;
        let count = through.shared_count(path, 1).await.unwrap();
        let counter = through.atomic_long(long_path).unwrap();
        assert_eq!(counter.add_fetch(10).await.unwrap(), 10);
        let writer = session(&connect).await;
        let other = writer.shared_count(path, 0).await.unwrap();

        partition.cut();
        wait_state(&through, ConnectionState::Lost).await;
        other.store(77).await.unwrap();
        partition.heal();
        wait_count(&count, 77).await;
        other.store(78).await.unwrap();
        wait_count(&count, 78).await;
        assert_eq!(counter.add_fetch(1).await.unwrap(), 11);
    })
    .await;
}

/// A shared count whose seeding create went through but whose answer was lost: the node is
/// there (the seed, created by this very request), so the count starts with it instead of
/// failing on the lost answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seed_whose_answer_was_lost_starts_the_count() {
    for_each_backend(|connect| async move {
        if super::support::is_ensemble(&connect) {
            eprintln!("skipped on an ensemble: the write cutter relays one server");
            return;
        }
        let parent = "/counters/seed-cut";
        let path = "/counters/seed-cut/count";
        let observer = session(&connect).await;
        // The parent exists, so the first write the cutter sees is the seed's create.
        observer
            .client()
            .unwrap()
            .mkdir(
                parent,
                &lockkeeper_zk_client::CreateOptions::new(
                    lockkeeper_zk_client::CreateMode::Persistent,
                ),
            )
            .await
            .unwrap();
        let cutter = WriteCutter::start(&connect).await;
        let through = session(&cutter.connect_string()).await;
        cutter.arm();
        let count = tokio::time::timeout(LIMIT, through.shared_count(path, 42))
            .await
            .expect("started after the reconnection")
            .expect("a lost seed answer is settled by reading the node");
        assert!(cutter.fired(), "the seed's create was not cut");
        assert_eq!(count.load(), 42);
        assert_eq!(observer.shared_count(path, 0).await.unwrap().load(), 42);
    })
    .await;
}

/// A write whose *request* was lost (the connection cut before it reached the server) leaves
/// the node as it was read, which the counter proves by reading it again, so it sends the
/// write again in the same call: the update is applied once and its answer is known.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_lost_before_the_server_is_sent_again() {
    for_each_backend(|connect| async move {
        if super::support::is_ensemble(&connect) {
            eprintln!("skipped on an ensemble: the write cutter relays one server");
            return;
        }
        let path = "/counters/request-lost";
        let cutter = WriteCutter::start(&connect).await;
        let through = session(&cutter.connect_string()).await;
        let observer = session(&connect).await;
        let counter = through.atomic_long(path).unwrap();
        // The first write creates the node: a create lost on the way is sent again too.
        cutter.arm_before();
        assert_eq!(counter.add_fetch(5).await.unwrap(), 5);
        assert!(cutter.fired(), "the create was not cut");
        for round in 1..=3 {
            cutter.arm_before();
            let value = tokio::time::timeout(LIMIT, counter.add_fetch(1))
                .await
                .expect("answered after the reconnection")
                .unwrap_or_else(|e| panic!("round {round}: a provably unsent write failed: {e}"));
            assert!(cutter.fired(), "round {round}: the write was not cut");
            assert_eq!(value, 5 + round, "round {round}");
            assert_eq!(
                observer.atomic_long(path).unwrap().load().await.unwrap(),
                5 + round
            );
        }
    })
    .await;
}
