//! Shared counters against Keeper and Apache ZooKeeper: exact totals under contention (8
//! sessions x 500 increments), the promoted lock, exhausted retries, overflow, the node bytes,
//! the watched SharedCount, bad input; and the same counters read and written by Curator 5.4's
//! `SharedCount` and `DistributedAtomicLong` (`curator/Counters.java`) and by kazoo's
//! `Counter(support_curator=True)` (`kazoo/counter.py`).

mod support;

// Shared with the other Curator tests, which use more of it.
#[allow(dead_code)]
#[path = "curator/jvm.rs"]
mod jvm;

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use jvm::Jvm;
use lockkeeper::Error;
use lockkeeper::zk::{ConnectionState, RetryPolicy, Session, SharedCount, VersionedCount};
use lockkeeper_testkit::python3;
use support::{Partition, children, for_each_backend, session, wait_state};
use zookeeper_client::{Acls, CreateMode};

/// Bound on anything a test waits for (the machine may be loaded).
const LIMIT: Duration = Duration::from_secs(60);
/// Bound on a JVM's start and on one of its answers.
const JVM_LIMIT: Duration = Duration::from_secs(120);

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
    let options = CreateMode::Persistent.with_acls(Acls::anyone_all());
    if let Some(i) = path.rfind('/').filter(|&i| i > 0) {
        let _ = client.mkdir(&path[..i], &options).await;
    }
    match client.create(path, data, &options).await {
        Ok(_) => {}
        Err(zookeeper_client::Error::NodeExists) => {
            client.set_data(path, data, None).await.expect("set raw");
        }
        Err(e) => panic!("create {path}: {e}"),
    }
}

/// Waits (bounded) until `count`'s cache shows `value`.
async fn wait_count(count: &SharedCount, value: i32) {
    let deadline = Instant::now() + LIMIT;
    while count.get() != value {
        assert!(
            Instant::now() < deadline,
            "{} never showed {value}: {:?}",
            count.path(),
            count.versioned()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_sessions_times_500_increments_is_exactly_4000() {
    for_each_backend(|connect| async move {
        const SESSIONS: usize = 8;
        const EACH: usize = 500;
        let path = "/counters/contended";
        let started = Instant::now();
        let mut tasks = Vec::new();
        for _ in 0..SESSIONS {
            let connect = connect.clone();
            tasks.push(tokio::spawn(async move {
                let session = session(&connect).await;
                let counter = session.atomic_long(path).unwrap();
                let mut seen = Vec::with_capacity(EACH);
                for _ in 0..EACH {
                    seen.push(counter.increment().await.expect("increment"));
                }
                seen
            }));
        }
        let mut all = Vec::new();
        for task in tasks {
            all.extend(
                tokio::time::timeout(LIMIT * 4, task)
                    .await
                    .expect("the increments end in time")
                    .unwrap(),
            );
        }
        let elapsed = started.elapsed();
        // Each increment returned a distinct new value: none was applied twice or lost.
        all.sort_unstable();
        let expected: Vec<i64> = (1..=(SESSIONS * EACH) as i64).collect();
        assert_eq!(all, expected, "the values the increments returned");
        let observer = session(&connect).await;
        assert_eq!(
            observer.atomic_long(path).unwrap().get().await.unwrap(),
            4000
        );
        assert_eq!(raw_bytes(&observer, path).await, 4000i64.to_be_bytes());
        eprintln!(
            "{} increments from {SESSIONS} sessions in {elapsed:?}",
            SESSIONS * EACH
        );
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
                    counter.increment().await.expect("promoted increment");
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
        let total = observer.atomic_long(path).unwrap().get().await.unwrap();
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
                    match counter.increment().await {
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
            observer.atomic_long(path).unwrap().get().await.unwrap(),
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
                rival.increment().await.expect("rival increment");
                match counter.increment().await {
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
        let total = rival.get().await.unwrap();
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

/// A loopback proxy that, when armed, lets the next write request (create or setData) through
/// to the server and then closes the connection before the answer can come back: the write
/// is in the server's hands, and its outcome is unknown to the client.
struct WriteCutter {
    addr: std::net::SocketAddr,
    armed: Arc<AtomicBool>,
    accept: tokio::task::JoinHandle<()>,
}

impl WriteCutter {
    async fn start(upstream: &str) -> WriteCutter {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the proxy");
        let addr = listener.local_addr().expect("proxy address");
        let armed = Arc::new(AtomicBool::new(false));
        let upstream = upstream.to_owned();
        let accept = tokio::spawn({
            let armed = armed.clone();
            async move {
                // Aborted when the WriteCutter is dropped; the relays end with their sockets.
                while let Ok((client, _)) = listener.accept().await {
                    let Ok(server) = tokio::net::TcpStream::connect(&upstream).await else {
                        continue;
                    };
                    tokio::spawn(relay(client, server, armed.clone()));
                }
            }
        });
        WriteCutter {
            addr,
            armed,
            accept,
        }
    }

    fn connect_string(&self) -> String {
        self.addr.to_string()
    }

    fn arm(&self) {
        self.armed.store(true, Ordering::SeqCst);
    }

    /// Whether the armed cut has happened.
    fn fired(&self) -> bool {
        !self.armed.load(Ordering::SeqCst)
    }
}

impl Drop for WriteCutter {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// Relays one connection frame by frame (4-byte length, then the request: xid, op code);
/// the first frame is the handshake, which has no op code.
async fn relay(
    client: tokio::net::TcpStream,
    server: tokio::net::TcpStream,
    armed: Arc<AtomicBool>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    const WRITES: [i32; 3] = [
        lockkeeper_proto::OpCode::Create as i32,
        lockkeeper_proto::OpCode::Create2 as i32,
        lockkeeper_proto::OpCode::SetData as i32,
    ];
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let answers =
        tokio::spawn(async move { tokio::io::copy(&mut server_read, &mut client_write).await });
    let mut handshake = true;
    loop {
        let mut length = [0u8; 4];
        if client_read.read_exact(&mut length).await.is_err() {
            break;
        }
        let mut frame = vec![0u8; u32::from_be_bytes(length) as usize];
        if client_read.read_exact(&mut frame).await.is_err() {
            break;
        }
        let op = frame
            .get(4..8)
            .map(|b| i32::from_be_bytes([b[0], b[1], b[2], b[3]]));
        let is_write = !handshake && op.is_some_and(|op| WRITES.contains(&op));
        handshake = false;
        if server_write.write_all(&length).await.is_err()
            || server_write.write_all(&frame).await.is_err()
        {
            break;
        }
        if is_write
            && armed
                .compare_exchange(true, false, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
        {
            // The request is on its way to the server; its answer will find no one.
            break;
        }
    }
    answers.abort();
}

/// The write of an update leaves, and the connection drops before its answer: the update is
/// either proved unapplied and sent again (`Ok`), or reported as unknown (the connection-loss
/// error); an increment is never applied twice, and a `try_set` never answers `false` for a
/// write that went through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_whose_answer_is_lost_is_applied_at_most_once() {
    for_each_backend(|connect| async move {
        const ROUNDS: usize = 10;
        let path = "/counters/answer-lost";
        let cutter = WriteCutter::start(&connect).await;
        let through = session(&cutter.connect_string()).await;
        let observer = session(&connect).await;
        let check = observer.atomic_long(path).unwrap();

        let counter = through.atomic_long(path).unwrap();
        let (mut expected, mut resent, mut unknown) = (0i64, 0, 0);
        for round in 0..ROUNDS {
            cutter.arm();
            let outcome = counter.increment().await;
            assert!(cutter.fired(), "round {round}: the write was not cut");
            let now = check.get().await.unwrap();
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn atomic_long_wraps_on_overflow_as_curator_does() {
    for_each_backend(|connect| async move {
        let session = session(&connect).await;
        let path = "/counters/overflow";
        let counter = session.atomic_long(path).unwrap();
        counter.set(i64::MAX).await.unwrap();
        assert_eq!(counter.increment().await.unwrap(), i64::MIN);
        assert_eq!(raw_bytes(&session, path).await, [0x80, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(counter.decrement().await.unwrap(), i64::MAX);
        assert_eq!(counter.add(i64::MIN).await.unwrap(), -1);
        assert_eq!(raw_bytes(&session, path).await, [0xff; 8]);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn atomic_long_reads_absent_and_empty_as_zero_and_compares_values() {
    for_each_backend(|connect| async move {
        let session = session(&connect).await;
        let counter = session.atomic_long("/counters/deep/cas").unwrap();
        assert_eq!(counter.get().await.unwrap(), 0, "absent reads as 0");
        assert!(!counter.compare_and_set(4, 9).await.unwrap());
        assert!(
            counter.compare_and_set(0, 5).await.unwrap(),
            "an absent node is 0"
        );
        assert_eq!(
            raw_bytes(&session, "/counters/deep/cas").await,
            5i64.to_be_bytes()
        );
        assert!(!counter.compare_and_set(4, 9).await.unwrap());
        assert_eq!(
            counter.get().await.unwrap(),
            5,
            "a failed CAS wrote nothing"
        );
        assert!(counter.compare_and_set(5, -7).await.unwrap());
        assert_eq!(counter.get().await.unwrap(), -7);
        assert!(!counter.initialize(100).await.unwrap(), "it exists already");
        assert_eq!(counter.add(-3).await.unwrap(), -10);

        let fresh = session.atomic_long("/counters/initialized").unwrap();
        assert!(fresh.initialize(100).await.unwrap());
        assert_eq!(fresh.increment().await.unwrap(), 101);

        put_raw(&session, "/counters/empty-long", &[]).await;
        let empty = session.atomic_long("/counters/empty-long").unwrap();
        assert_eq!(empty.get().await.unwrap(), 0, "empty reads as 0");
        assert_eq!(empty.add(3).await.unwrap(), 3);
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
        assert_eq!(first.get(), 7);
        assert_eq!(raw_bytes(&one, path).await, [0, 0, 0, 7]);
        // A second seed does not overwrite the value.
        let second = two.shared_count(path, 99).await.unwrap();
        assert_eq!(second.get(), 7);

        // A set on one side reaches the other side's cache and its changes() stream.
        let mut changes = second.changes();
        first.set(-2).await.unwrap();
        assert_eq!(
            first.get(),
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
        assert_eq!(second.get(), 8);
        wait_count(&first, 8).await;
        // first's view is of the same version now, so its older snapshot is stale.
        assert!(!first.try_set(&current, 9).await.unwrap());
        assert_eq!(first.get(), 8);
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
        assert_eq!(second.get(), 8);
        first.set(11).await.unwrap();
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
        assert_eq!(counter.add(10).await.unwrap(), 10);
        let writer = session(&connect).await;
        let other = writer.shared_count(path, 0).await.unwrap();

        partition.cut();
        wait_state(&through, ConnectionState::Lost).await;
        other.set(77).await.unwrap();
        partition.heal();
        wait_count(&count, 77).await;
        other.set(78).await.unwrap();
        wait_count(&count, 78).await;
        assert_eq!(counter.increment().await.unwrap(), 11);
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
        assert_eq!(count.get(), 5);
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
                counter.get().await,
                counter.increment().await,
                counter.compare_and_set(0, 1).await.map(i64::from),
            ] {
                let message = outcome.expect_err("a wrong length is an error").to_string();
                assert!(
                    message.contains(&format!("{path:?}"))
                        && message.contains(&format!("holds {} bytes", data.len())),
                    "{message}"
                );
            }
            assert_eq!(raw_bytes(&session, path).await, data, "nothing was written");
            // set() replaces whatever is there.
            counter.set(12).await.unwrap();
            assert_eq!(counter.increment().await.unwrap(), 13);
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
                message.contains(&format!("{path:?}"))
                    && message.contains(&format!("holds {} bytes", data.len())),
                "{message}"
            );
        }
        // Garbage written after the start: the cache keeps the last good value, read() says
        // what is wrong, and a good value is followed again.
        let path = "/counters/bad/later";
        let count = session.shared_count(path, 3).await.unwrap();
        put_raw(&session, path, b"garbage").await;
        let message = count.read().await.unwrap_err().to_string();
        assert!(message.contains("holds 7 bytes"), "{message}");
        assert_eq!(count.get(), 3);
        put_raw(&session, path, &4i32.to_be_bytes()).await;
        wait_count(&count, 4).await;
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

// ---------------------------------------------------------------------------------------
// Curator and kazoo.

/// Runs `kazoo/counter.py` against `connect`: one step, one line of output (the value).
fn kazoo(connect: &str, args: &[&str]) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/kazoo/counter.py");
    let output = Command::new(python3())
        .arg(script)
        .arg(connect)
        .args(args)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .expect("run python3");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "kazoo {args:?} failed ({}):\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout.trim().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kazoo_counter_with_curator_support_shares_shared_count() {
    for_each_backend(|connect| async move {
        let session = session(&connect).await;
        // lockkeeper seeds and sets; kazoo reads, adds, and its adds are seen by the watch.
        let path = "/interop/kazoo/shared";
        let count = session.shared_count(path, 41).await.unwrap();
        assert_eq!(kazoo(&connect, &[path, "read"]), "41");
        assert_eq!(kazoo(&connect, &[path, "add", "1"]), "42");
        wait_count(&count, 42).await;
        count.set(-5).await.unwrap();
        assert_eq!(kazoo(&connect, &[path, "add", "-10"]), "-15");
        wait_count(&count, -15).await;
        assert_eq!(count.read().await.unwrap().value, -15);

        // kazoo creates the node (empty, then 4 bytes); lockkeeper reads what it wrote.
        let path = "/interop/kazoo/from-kazoo";
        assert_eq!(kazoo(&connect, &[path, "add", "2147483647"]), "2147483647");
        assert_eq!(raw_bytes(&session, path).await, [0x7f, 0xff, 0xff, 0xff]);
        let count = session.shared_count(path, 0).await.unwrap();
        assert_eq!(count.get(), i32::MAX);
        // kazoo refuses to go past i32::MAX (struct.error) and leaves the node as it was.
        assert_eq!(kazoo(&connect, &[path, "add", "1"]), "error: struct.error");
        assert_eq!(count.read().await.unwrap().value, i32::MAX);

        // Contention: kazoo's adds and lockkeeper's try_set loop on one node lose nothing.
        let path = "/interop/kazoo/contended";
        let count = session.shared_count(path, 0).await.unwrap();
        let kazoo_side = {
            let connect = connect.clone();
            tokio::task::spawn_blocking(move || kazoo(&connect, &[path, "add-each", "1", "200"]))
        };
        for _ in 0..200 {
            loop {
                let seen = count.read().await.unwrap();
                if count.try_set(&seen, seen.value + 1).await.unwrap() {
                    break;
                }
            }
        }
        assert_eq!(kazoo_side.await.unwrap(), "done");
        assert_eq!(count.read().await.unwrap().value, 400);
    })
    .await;
}

#[test]
fn curator_reads_lockkeepers_counters_and_lockkeeper_reads_curators() {
    for server in lockkeeper_testkit::both() {
        let connect = server.connect_string();
        let on = server.name();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let session = rt.block_on(session(&connect));
        let mut curator = Jvm::spawn("Counters", &[&connect]);
        curator.expect_line("READY", JVM_LIMIT);
        let mut ask = |command: &str| curator.request(command, JVM_LIMIT);

        // SharedCount: lockkeeper writes, Curator reads; Curator writes, lockkeeper reads.
        let path = "/interop/curator/shared";
        let count = rt.block_on(session.shared_count(path, 17)).unwrap();
        assert_eq!(ask(&format!("count-get {path} 99")), "OK 17 0", "on {on}");
        rt.block_on(count.set(-3)).unwrap();
        assert_eq!(ask(&format!("count-get {path} 99")), "OK -3 1", "on {on}");
        assert_eq!(ask(&format!("count-set {path} 123456")), "OK", "on {on}");
        rt.block_on(wait_count(&count, 123456));
        // Curator's versioned try-set against the versions of the writes so far.
        assert_eq!(
            ask(&format!("count-tryset {path} 1 123456 5")),
            "OK false",
            "on {on}"
        );
        assert_eq!(
            ask(&format!("count-tryset {path} 2 123456 5")),
            "OK true",
            "on {on}"
        );
        rt.block_on(wait_count(&count, 5));
        assert_eq!(count.versioned().version, 3);
        // Curator's watch sees lockkeeper's write.
        curator.send(&format!("count-await {path} 2024"));
        assert_eq!(curator.next_line(JVM_LIMIT), "WATCHING", "on {on}");
        rt.block_on(count.set(2024)).unwrap();
        assert_eq!(curator.next_line(JVM_LIMIT), "OK 2024", "on {on}");
        let mut ask = |command: &str| curator.request(command, JVM_LIMIT);
        // Curator seeds a node; lockkeeper reads the seed.
        let seeded = "/interop/curator/seeded";
        assert_eq!(ask(&format!("count-get {seeded} -8")), "OK -8 0", "on {on}");
        let count = rt.block_on(session.shared_count(seeded, 0)).unwrap();
        assert_eq!(count.get(), -8);

        // DistributedAtomicLong: each side increments what the other wrote.
        let path = "/interop/curator/long";
        let counter = session.atomic_long(path).unwrap();
        assert_eq!(
            ask(&format!("long-get {path}")),
            "OK 0",
            "absent reads 0 on {on}"
        );
        assert_eq!(
            rt.block_on(counter.add(1_000_000_000_000)).unwrap(),
            1_000_000_000_000
        );
        assert_eq!(
            ask(&format!("long-add {path} 5")),
            "OK 1000000000005",
            "on {on}"
        );
        assert_eq!(rt.block_on(counter.decrement()).unwrap(), 1_000_000_000_004);
        assert_eq!(
            ask(&format!("long-get {path}")),
            "OK 1000000000004",
            "on {on}"
        );
        assert_eq!(ask(&format!("long-cas {path} 1000000000004 -1")), "OK true");
        assert!(rt.block_on(counter.compare_and_set(-1, i64::MAX)).unwrap());
        // Both wrap at the top.
        assert_eq!(
            ask(&format!("long-add {path} 1")),
            "OK -9223372036854775808"
        );
        assert_eq!(rt.block_on(counter.get()).unwrap(), i64::MIN);

        // Contention across the languages: Curator's increments (with its promoted lock) and
        // lockkeeper's (with the same lock path) add up exactly.
        let path = "/interop/curator/contended";
        let lock = "/interop/curator/contended-lock";
        curator.send(&format!("long-inc-many {path} {lock} 300"));
        let counter = session
            .atomic_long(path)
            .unwrap()
            .promote_to_lock(lock, LIMIT)
            .unwrap();
        rt.block_on(async {
            for _ in 0..300 {
                counter.increment().await.expect("increment beside Curator");
            }
        });
        assert_eq!(curator.next_line(JVM_LIMIT), "OK 300", "on {on}");
        assert_eq!(rt.block_on(counter.get()).unwrap(), 600, "on {on}");

        assert_eq!(curator.request("quit", JVM_LIMIT), "BYE");
        let finished = curator.finish(JVM_LIMIT);
        assert!(finished.success, "{}", finished.transcript);
    }
}
