//! Shared counters against Keeper and Apache ZooKeeper: exact totals under contention (8
//! sessions x 500 increments), the promoted lock, exhausted retries, overflow, the node bytes,
//! the watched SharedCount, bad input. `counter/faults.rs`: connection faults (a write whose
//! answer is lost is never applied twice); `counter/interop.rs`: the same counters read and
//! written by Curator 5.4's `SharedCount` and `DistributedAtomicLong` and by kazoo's
//! `Counter(support_curator=True)`.

mod support;

// Shared with the other Curator tests, which use more of it.
#[allow(dead_code)]
#[path = "curator/jvm.rs"]
mod jvm;

#[path = "counter/cutter.rs"]
mod cutter;
#[path = "counter/faults.rs"]
mod faults;
#[path = "counter/interop.rs"]
mod interop;

use std::time::{Duration, Instant};

use lockkeeper::Error;
use lockkeeper::zk::{AtomicLong, RetryPolicy, Session, SharedCount, VersionedCount};
use lockkeeper_zk_client::{CreateMode, CreateOptions};
use support::{children, for_each_backend, read_only_dir, session};

/// Bound on anything a test waits for (the machine may be loaded).
const LIMIT: Duration = Duration::from_secs(60);

/// The bytes of `path` as a plain client reads them.
async fn raw_bytes(session: &Session, path: &str) -> Vec<u8> {
    session
        .client()
        .expect("client")
        .get_data(path)
        .await
        .unwrap_or_else(|e| panic!("read {path}: {e}"))
        .0
}

/// Creates (or overwrites) `path` holding exactly `data`, behind the recipes' backs.
async fn put_raw(session: &Session, path: &str, data: &[u8]) {
    let client = session.client().expect("client");
    let options = CreateOptions::new(CreateMode::Persistent);
    if let Some(i) = path.rfind('/').filter(|&i| i > 0) {
        let _ = client.mkdir(&path[..i], &options).await;
    }
    match client.create(path, data, &options).await {
        Ok(_) => {}
        Err(lockkeeper_zk_client::Error::NodeExists) => {
            client.set_data(path, data, None).await.expect("set raw");
        }
        Err(e) => panic!("create {path}: {e}"),
    }
}

/// Waits (bounded) until `count`'s cache shows `value`.
async fn wait_count(count: &SharedCount, value: i32) {
    let deadline = Instant::now() + LIMIT;
    while count.load() != value {
        assert!(
            Instant::now() < deadline,
            "{} never showed {value}: {:?}",
            count.path(),
            count.versioned()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// `sessions` sessions each incrementing the counter at `path` `each` times, the counter made
/// by `counter` from a session; fails unless every increment returned a distinct new value
/// (none applied twice or lost) and the node ends holding the total, as Curator stores it.
async fn increments_are_exact(
    connect: &str,
    path: &'static str,
    sessions: usize,
    each: usize,
    counter: impl Fn(&Session, &'static str) -> AtomicLong + Copy + Send + 'static,
) {
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..sessions {
        let connect = connect.to_string();
        tasks.push(tokio::spawn(async move {
            let session = session(&connect).await;
            let counter = counter(&session, path);
            let mut seen = Vec::with_capacity(each);
            for _ in 0..each {
                seen.push(counter.add_fetch(1).await.expect("increment"));
            }
            seen
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        let seen = tokio::time::timeout(LIMIT * 4, task)
            .await
            .expect("the increments end in time")
            .unwrap();
        all.extend(seen);
    }
    let elapsed = started.elapsed();
    all.sort_unstable();
    let total = (sessions * each) as i64;
    let expected: Vec<i64> = (1..=total).collect();
    assert_eq!(all, expected, "the values the increments returned");
    let observer = session(connect).await;
    let counter = observer.atomic_long(path).unwrap();
    assert_eq!(counter.load().await.unwrap(), total);
    assert_eq!(raw_bytes(&observer, path).await, total.to_be_bytes());
    eprintln!("{total} increments from {sessions} sessions in {elapsed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_sessions_times_500_increments_is_exactly_4000() {
    for_each_backend(|connect| async move {
        let path = "/counters/contended";
        let ensemble = support::is_ensemble(&connect);
        increments_are_exact(&connect, path, 8, 500, move |session, path| {
            let counter = session.atomic_long(path).unwrap();
            if ensemble {
                // A follower answers reads from its own, possibly older, copy, so each
                // writer loses more rounds; the count must come out exact all the same.
                return counter.optimistic_retries(RetryPolicy::exponential(
                    Duration::from_millis(5),
                    Duration::from_millis(500),
                    200,
                ));
            }
            counter
        })
        .await;
    })
    .await;
}

/// Retries without a pause (what the benchmark's `spin` does) read and write back to back:
/// the counts must come out exact on that path too, on a counter that starts absent.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn increments_retried_at_once_are_exact() {
    for_each_backend(|connect| async move {
        increments_are_exact(&connect, "/counters/spinning", 4, 250, |session, path| {
            let spin = RetryPolicy::exponential(Duration::ZERO, Duration::ZERO, 10_000);
            session.atomic_long(path).unwrap().optimistic_retries(spin)
        })
        .await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn promoted_increments_are_exact_and_leave_no_lock_node() {
    for_each_backend(|connect| async move {
        const SESSIONS: usize = 8;
        const EACH: usize = 50;
        let path = "/counters/promoted";
        let lock = "/counters/promoted-lock";
        let mut tasks = Vec::new();
        for _ in 0..SESSIONS {
            let connect = connect.clone();
            tasks.push(tokio::spawn(async move {
                let session = session(&connect).await;
                // One optimistic attempt, then the lock: most contended updates promote.
                let counter = session
                    .atomic_long(path)
                    .unwrap()
                    .optimistic_retries(RetryPolicy::never())
                    .promote_to_lock(lock, LIMIT)
                    .unwrap();
                for _ in 0..EACH {
                    counter.add_fetch(1).await.expect("promoted increment");
                }
            }));
        }
        for task in tasks {
            tokio::time::timeout(LIMIT * 4, task)
                .await
                .expect("the increments end in time")
                .unwrap();
        }
        let observer = session(&connect).await;
        let total = observer.atomic_long(path).unwrap().load().await.unwrap();
        assert_eq!(total, (SESSIONS * EACH) as i64);
        assert_eq!(
            children(&observer, lock).await,
            Vec::<String>::new(),
            "a promoted update left its lock node behind"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn exhausted_retries_are_contended_and_write_nothing() {
    for_each_backend(|connect| async move {
        const SESSIONS: usize = 8;
        const EACH: usize = 50;
        let path = "/counters/exhausted";
        let mut tasks = Vec::new();
        for _ in 0..SESSIONS {
            let connect = connect.clone();
            tasks.push(tokio::spawn(async move {
                let session = session(&connect).await;
                let counter = session
                    .atomic_long(path)
                    .unwrap()
                    .optimistic_retries(RetryPolicy::never());
                let (mut applied, mut contended) = (0i64, 0usize);
                for _ in 0..EACH {
                    match counter.add_fetch(1).await {
                        Ok(_) => applied += 1,
                        Err(Error::Contended {
                            path: named,
                            attempts,
                        }) => {
                            assert_eq!((named.as_str(), attempts), (path, 1));
                            contended += 1;
                        }
                        Err(other) => panic!("increment: {other}"),
                    }
                }
                (applied, contended)
            }));
        }
        let (mut applied, mut contended) = (0, 0);
        for task in tasks {
            let (a, c) = tokio::time::timeout(LIMIT * 4, task)
                .await
                .expect("the increments end in time")
                .unwrap();
            applied += a;
            contended += c;
        }
        eprintln!("{applied} applied, {contended} gave up after one attempt");
        assert!(
            contended > 0,
            "8 sessions with one attempt each never collided"
        );
        // A contended increment wrote nothing; every applied one counted once.
        let observer = session(&connect).await;
        assert_eq!(
            observer.atomic_long(path).unwrap().load().await.unwrap(),
            applied
        );
        let message = Error::Contended {
            path: path.into(),
            attempts: 3,
        }
        .to_string();
        assert!(
            message.contains(path) && message.contains("3 attempts"),
            "{message}"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn atomic_long_wraps_on_overflow_as_curator_does() {
    for_each_backend(|connect| async move {
        let session = session(&connect).await;
        let path = "/counters/overflow";
        let counter = session.atomic_long(path).unwrap();
        counter.store(i64::MAX).await.unwrap();
        assert_eq!(counter.add_fetch(1).await.unwrap(), i64::MIN);
        assert_eq!(raw_bytes(&session, path).await, [0x80, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(counter.add_fetch(-1).await.unwrap(), i64::MAX);
        assert_eq!(counter.add_fetch(i64::MIN).await.unwrap(), -1);
        assert_eq!(raw_bytes(&session, path).await, [0xff; 8]);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn atomic_long_reads_absent_and_empty_as_zero_and_compares_values() {
    for_each_backend(|connect| async move {
        let session = session(&connect).await;
        let counter = session.atomic_long("/counters/deep/cas").unwrap();
        assert_eq!(counter.load().await.unwrap(), 0, "absent reads as 0");
        assert_eq!(counter.compare_exchange(4, 9).await.unwrap(), Err(0));
        assert_eq!(
            counter.compare_exchange(0, 5).await.unwrap(),
            Ok(0),
            "an absent node is 0"
        );
        assert_eq!(
            raw_bytes(&session, "/counters/deep/cas").await,
            5i64.to_be_bytes()
        );
        assert_eq!(counter.compare_exchange(4, 9).await.unwrap(), Err(5));
        assert_eq!(
            counter.load().await.unwrap(),
            5,
            "a failed CAS wrote nothing"
        );
        assert_eq!(counter.compare_exchange(5, -7).await.unwrap(), Ok(5));
        assert_eq!(counter.load().await.unwrap(), -7);
        assert!(!counter.initialize(100).await.unwrap(), "it exists already");
        assert_eq!(counter.add_fetch(-3).await.unwrap(), -10);
        // As Rust's atomics: fetch_add and fetch_sub answer the value before.
        assert_eq!(counter.fetch_add(4).await.unwrap(), -10);
        assert_eq!(counter.fetch_sub(1).await.unwrap(), -6);
        assert_eq!(counter.load().await.unwrap(), -7);

        let fresh = session.atomic_long("/counters/initialized").unwrap();
        assert!(fresh.initialize(100).await.unwrap());
        assert_eq!(fresh.add_fetch(1).await.unwrap(), 101);

        put_raw(&session, "/counters/empty-long", &[]).await;
        let empty = session.atomic_long("/counters/empty-long").unwrap();
        assert_eq!(empty.load().await.unwrap(), 0, "empty reads as 0");
        assert_eq!(empty.add_fetch(3).await.unwrap(), 3);
        assert_eq!(
            raw_bytes(&session, "/counters/empty-long").await,
            3i64.to_be_bytes()
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_count_seeds_once_watches_and_try_sets_by_version() {
    for_each_backend(|connect| async move {
        let path = "/counters/shared";
        let one = session(&connect).await;
        let two = session(&connect).await;
        let first = one.shared_count(path, 7).await.unwrap();
        assert_eq!(first.load(), 7);
        assert_eq!(raw_bytes(&one, path).await, [0, 0, 0, 7]);
        // A second seed does not overwrite the value.
        let second = two.shared_count(path, 99).await.unwrap();
        assert_eq!(second.load(), 7);

        // A set on one side reaches the other side's cache and its changes() stream.
        let mut changes = second.changes();
        first.store(-2).await.unwrap();
        assert_eq!(
            first.load(),
            -2,
            "the writer's cache has its own write at once"
        );
        assert_eq!(raw_bytes(&one, path).await, [0xff, 0xff, 0xff, 0xfe]);
        let seen = tokio::time::timeout(LIMIT, changes.next())
            .await
            .expect("a change within the limit")
            .expect("the stream is open");
        assert_eq!(seen.value, -2);
        assert_eq!(second.versioned(), seen);

        // try_set against a stale version fails, writes nothing, and refreshes the cache.
        let stale = VersionedCount {
            value: 7,
            version: seen.version - 1,
        };
        assert!(!second.try_set(&stale, 1000).await.unwrap());
        assert_eq!(second.read().await.unwrap().value, -2);
        let current = second.versioned();
        assert!(second.try_set(&current, 8).await.unwrap());
        assert_eq!(second.load(), 8);
        wait_count(&first, 8).await;
        // first's view is of the same version now, so its older snapshot is stale.
        assert!(!first.try_set(&current, 9).await.unwrap());
        assert_eq!(first.load(), 8);
        let never = VersionedCount {
            value: 8,
            version: -1,
        };
        assert!(
            !first.try_set(&never, 9).await.unwrap(),
            "version -1 must never become an unconditional set"
        );
        assert_eq!(first.read().await.unwrap().value, 8);

        // Deleted: the cache keeps the last value at version -1 and follows the node's
        // return; set() recreates it.
        one.client().unwrap().delete(path, None).await.unwrap();
        let deadline = Instant::now() + LIMIT;
        while second.versioned().version != -1 {
            assert!(Instant::now() < deadline, "the deletion was never seen");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(second.load(), 8);
        first.store(11).await.unwrap();
        wait_count(&second, 11).await;
        assert_eq!(
            second.versioned().version,
            0,
            "a recreated node starts at 0"
        );

        // The stream ends with the last handle.
        let clone = second.clone();
        let mut changes = second.changes();
        drop(second);
        drop(clone);
        assert_eq!(
            tokio::time::timeout(LIMIT, changes.next()).await.unwrap(),
            None
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_count_reads_an_empty_node_as_its_seed() {
    for_each_backend(|connect| async move {
        let session = session(&connect).await;
        let path = "/counters/empty-shared";
        put_raw(&session, path, &[]).await;
        let count = session.shared_count(path, 5).await.unwrap();
        assert_eq!(count.load(), 5);
        assert!(
            raw_bytes(&session, path).await.is_empty(),
            "the seed does not overwrite"
        );
        let seen = count.versioned();
        assert!(count.try_set(&seen, 6).await.unwrap());
        assert_eq!(raw_bytes(&session, path).await, [0, 0, 0, 6]);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_byte_counts_are_errors_naming_the_path() {
    for_each_backend(|connect| async move {
        let session = session(&connect).await;
        for (path, data) in [
            ("/counters/bad/long-3", &[1u8, 2, 3][..]),
            ("/counters/bad/long-4", &[0, 0, 0, 1]),
            ("/counters/bad/long-9", &[0, 0, 0, 0, 0, 0, 0, 0, 1]),
        ] {
            put_raw(&session, path, data).await;
            let counter = session.atomic_long(path).unwrap();
            for outcome in [
                counter.load().await,
                counter.add_fetch(1).await,
                counter.compare_exchange(0, 1).await.map(|_| 0),
            ] {
                let message = outcome.expect_err("a wrong length is an error").to_string();
                assert!(
                    message.starts_with(&format!("{path}: "))
                        && message.contains(&format!("holds {} bytes", data.len())),
                    "{message}"
                );
            }
            assert_eq!(raw_bytes(&session, path).await, data, "nothing was written");
            // set() replaces whatever is there.
            counter.store(12).await.unwrap();
            assert_eq!(counter.add_fetch(1).await.unwrap(), 13);
        }
        for (path, data) in [
            ("/counters/bad/count-1", &[9u8][..]),
            ("/counters/bad/count-8", &[0, 0, 0, 0, 0, 0, 0, 1]),
        ] {
            put_raw(&session, path, data).await;
            let message = session
                .shared_count(path, 0)
                .await
                .expect_err("a wrong length is an error")
                .to_string();
            assert!(
                message.starts_with(&format!("{path}: "))
                    && message.contains(&format!("holds {} bytes", data.len())),
                "{message}"
            );
        }
        // Garbage written after the start: the cache keeps the last good value, read() says
        // what is wrong, and a good value is followed again.
        let path = "/counters/bad/later";
        let count = session.shared_count(path, 3).await.unwrap();
        put_raw(&session, path, b"garbage").await;
        match count.read().await {
            Err(Error::Corrupt { path: at, why }) => {
                assert_eq!(at, path);
                assert!(why.contains("holds 7 bytes"), "{why}");
            }
            other => panic!("expected Corrupt, got {other:?}"),
        }
        assert_eq!(count.load(), 3);
        put_raw(&session, path, &4i32.to_be_bytes()).await;
        wait_count(&count, 4).await;
    })
    .await;
}

/// A deletion of a node never written since its seed (version 0) is seen as absent (version
/// -1), so a try_set against version 0 cannot write to a node created again later; and a change
/// is reported once: reading the node again, present or absent, adds nothing to `changes()`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_count_sees_a_fresh_node_deleted_and_reports_each_change_once() {
    for_each_backend(|connect| async move {
        let path = "/counters/fresh-deleted";
        let s = session(&connect).await;
        let other = session(&connect).await;
        let count = s.shared_count(path, 3).await.unwrap();
        assert_eq!(
            count.versioned(),
            VersionedCount {
                value: 3,
                version: 0
            }
        );
        let mut changes = count.changes();

        // A write, seen once; reading the same state again reports nothing more.
        other
            .shared_count(path, 0)
            .await
            .unwrap()
            .store(4)
            .await
            .unwrap();
        let seen = tokio::time::timeout(LIMIT, changes.next())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(seen.value, 4);
        assert_eq!(count.read().await.unwrap(), seen);
        assert!(
            futures_util::FutureExt::now_or_never(changes.next()).is_none(),
            "the same state reported twice"
        );

        // Deleted at its first version: seen as absent, once.
        other.client().unwrap().delete(path, None).await.unwrap();
        let gone = tokio::time::timeout(LIMIT, changes.next())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            gone,
            VersionedCount {
                value: 4,
                version: -1
            }
        );
        assert_eq!(count.read().await.unwrap(), gone);
        assert!(
            futures_util::FutureExt::now_or_never(changes.next()).is_none(),
            "the deletion reported twice"
        );

        // The same at version 0: a fresh node, never written, deleted.
        let fresh_path = "/counters/fresh-deleted-0";
        let fresh = s.shared_count(fresh_path, 8).await.unwrap();
        let mut fresh_changes = fresh.changes();
        other
            .client()
            .unwrap()
            .delete(fresh_path, None)
            .await
            .unwrap();
        let gone = tokio::time::timeout(LIMIT, fresh_changes.next())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            gone,
            VersionedCount {
                value: 8,
                version: -1
            }
        );
        assert!(
            !fresh.try_set(&gone, 9).await.unwrap(),
            "nothing to set at version -1"
        );
    })
    .await;
}

/// While its node is absent, a shared count waits on an exists watch (one watch on the
/// server), rather than reading the node again and again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_absent_count_waits_on_a_watch() {
    for_each_backend(|connect| async move {
        if support::is_ensemble(&connect) {
            eprintln!("skipped on an ensemble: the watch count is one server's");
            return;
        }
        let path = "/counters/absent-watched";
        let s = session(&connect).await;
        let count = s.shared_count(path, 1).await.unwrap();
        let mut changes = count.changes();
        session(&connect)
            .await
            .client()
            .unwrap()
            .delete(path, None)
            .await
            .unwrap();
        let gone = tokio::time::timeout(LIMIT, changes.next())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(gone.version, -1);
        // The data watch fired with the deletion; the exists watch replaces it.
        support::wait_watches(&connect, 1).await;
        put_raw(&s, path, &5i32.to_be_bytes()).await;
        wait_count(&count, 5).await;
    })
    .await;
}

/// Each handle names its node; a seed the server refuses (no create permission on the parent)
/// fails the start instead of a count that exists only in memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handles_name_their_node_and_a_refused_seed_is_an_error() {
    for_each_backend(|connect| async move {
        let session = session(&connect).await;
        assert_eq!(
            session.atomic_long("/counters/named").unwrap().path(),
            "/counters/named"
        );
        let count = session
            .shared_count("/counters/named-count", 1)
            .await
            .unwrap();
        assert_eq!(count.path(), "/counters/named-count");

        // Anyone may read under /counters-ro; nobody may create there.
        read_only_dir(&session, "/counters-ro").await;
        match session.shared_count("/counters-ro/count", 5).await {
            Err(Error::Zk(lockkeeper_zk_client::Error::NoAuth)) => {}
            other => panic!("a seed the server refuses: {other:?}"),
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_paths_and_zero_timeouts_are_refused_by_name() {
    for_each_backend(|connect| async move {
        let session = session(&connect).await;
        let invalid = |outcome: Result<(), Error>, needles: &[&str]| match outcome {
            Err(Error::InvalidArgument(message)) => {
                for needle in needles {
                    assert!(message.contains(needle), "{needle:?} not in {message:?}");
                }
            }
            other => panic!("expected InvalidArgument, got {other:?}"),
        };
        for path in ["counter", "", "/counters/", "/a//b", "/zookeeper/c"] {
            let named = format!("counter path {path:?}");
            invalid(session.atomic_long(path).map(drop), &[&named]);
            invalid(session.shared_count(path, 0).await.map(drop), &[&named]);
        }
        let counter = session.atomic_long("/counters/ok").unwrap();
        invalid(
            counter
                .clone()
                .promote_to_lock("/counters/ok-lock", Duration::ZERO)
                .map(drop),
            &[
                "\"/counters/ok\"",
                "\"/counters/ok-lock\"",
                "greater than zero",
            ],
        );
        invalid(
            counter
                .promote_to_lock("ok-lock", Duration::from_secs(1))
                .map(drop),
            &["lock path \"ok-lock\""],
        );
        assert_eq!(children(&session, "/").await, vec!["zookeeper".to_owned()]);
    })
    .await;
}
