//! Curator 5.4's queues (`curator/Queues.java`) and lockkeeper's on the same paths, against
//! Keeper and Apache ZooKeeper: a Java `DistributedQueue` producer with lockkeeper consumers,
//! lockkeeper producers with a Curator consumer (in Curator's locking mode) and a lockkeeper
//! consumer sharing its lock path, Curator's priority encoding read back in order, and the
//! simple queue both ways. With no failure, every item is consumed exactly once.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lockkeeper::zk::{Delivery, DistributedQueue};
use lockkeeper_testkit::both;

use crate::jvm::Jvm;
use crate::zk::{JVM_START, STEP, connect, lock_nodes, runtime};

/// Runs lockkeeper consumers on `queue` until `want` items were taken in all (bounded by
/// [`STEP`]); every item taken is acknowledged. Returns the items per taken node.
async fn consume_until(
    queue: &DistributedQueue,
    consumers: usize,
    want: usize,
) -> Vec<Vec<String>> {
    let taken: Arc<Mutex<Vec<Vec<String>>>> = Arc::default();
    let total = || taken.lock().unwrap().iter().map(Vec::len).sum::<usize>();
    let deadline = tokio::time::Instant::now() + STEP;
    let mut tasks = Vec::new();
    for _ in 0..consumers {
        let (queue, taken) = (queue.clone(), taken.clone());
        tasks.push(tokio::spawn(async move {
            while tokio::time::Instant::now() < deadline {
                let count: usize = taken.lock().unwrap().iter().map(Vec::len).sum();
                if count >= want {
                    break;
                }
                let next = queue
                    .take_timeout(Delivery::AtLeastOnce, Duration::from_millis(500))
                    .await
                    .expect("take");
                if let Some(node) = next {
                    let items = node
                        .items()
                        .iter()
                        .map(|i| String::from_utf8(i.clone()).unwrap())
                        .collect();
                    node.ack().await.expect("ack");
                    taken.lock().unwrap().push(items);
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(total(), want, "items taken within {STEP:?}");
    Arc::try_unwrap(taken).unwrap().into_inner().unwrap()
}

fn exactly_once<'a>(items: impl IntoIterator<Item = &'a String>, expected: &[String]) {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for item in items {
        *counts.entry(item).or_default() += 1;
    }
    let twice: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "delivered more than once: {twice:?}");
    let missing: Vec<_> = expected
        .iter()
        .filter(|e| !counts.contains_key(e.as_str()))
        .collect();
    assert!(missing.is_empty(), "never delivered: {missing:?}");
    assert_eq!(counts.len(), expected.len(), "unexpected items: {counts:?}");
}

fn start(connect: &str, args: &[&str]) -> Jvm {
    let mut all = vec![connect];
    all.extend_from_slice(args);
    let mut jvm = Jvm::spawn("Queues", &all);
    jvm.expect_line("READY", JVM_START);
    jvm
}

fn quit(mut jvm: Jvm) {
    jvm.send("quit");
    jvm.expect_line("BYE", STEP);
}

#[test]
fn curator_producer_lockkeeper_consumers() {
    let rt = runtime();
    for server in both() {
        eprintln!("--- against {}", server.name());
        let connect = server.connect_string();
        let count = 300;
        let mut java = start(
            &connect,
            &["produce", "/interop/q1", "-", &count.to_string()],
        );
        java.send("go");
        let nodes = rt.block_on(async {
            let session = connect_session(&*server).await;
            let queue = session.distributed_queue("/interop/q1").unwrap();
            consume_until(&queue, 3, count + 2).await
        });
        java.expect_line(&format!("PUT {}", count + 2), STEP);
        let mut expected: Vec<String> = (0..count).map(|i| format!("j-{i}")).collect();
        expected.extend(["m-0".to_owned(), "m-1".to_owned()]);
        exactly_once(nodes.iter().flatten(), &expected);
        assert!(
            nodes.contains(&vec!["m-0".to_owned(), "m-1".to_owned()]),
            "Curator's putMulti is one node with both items"
        );
        rt.block_on(async {
            assert!(lock_nodes(&*server, "/interop/q1").await.is_empty());
        });
        quit(java);
    }
}

async fn connect_session(server: &dyn lockkeeper_testkit::TestServer) -> lockkeeper::zk::Session {
    connect(server).await
}

#[test]
fn lockkeeper_producers_curator_and_lockkeeper_consumers() {
    let rt = runtime();
    for server in both() {
        eprintln!("--- against {}", server.name());
        let connect = server.connect_string();
        let (path, locks) = ("/interop/q2", "/interop/q2-locks");
        let mut java = start(&connect, &["consume", path, locks, "0"]);
        java.send("go");
        let session = rt.block_on(connect_session(&*server));
        let queue = session
            .distributed_queue(path)
            .unwrap()
            .with_lock_path(locks)
            .unwrap();
        // 100 single puts, 100 in batches of 20 (one multi each), 50 two-item nodes.
        let mut expected = Vec::new();
        rt.block_on(async {
            for i in 0..100 {
                let item = format!("one-{i}");
                queue.put(item.as_bytes()).await.unwrap();
                expected.push(item);
            }
            for batch in 0..5 {
                let items: Vec<String> = (0..20).map(|i| format!("all-{batch}-{i}")).collect();
                let refs: Vec<&[u8]> = items.iter().map(String::as_bytes).collect();
                queue.put_all(&refs).await.unwrap();
                expected.extend(items);
            }
            for i in 0..50 {
                let (a, b) = (format!("multi-{i}-a"), format!("multi-{i}-b"));
                queue
                    .put_multi(&[a.as_bytes(), b.as_bytes()])
                    .await
                    .unwrap();
                expected.extend([a, b]);
            }
        });
        // A lockkeeper consumer competes with Curator's for the same items and locks.
        let ours: Arc<Mutex<Vec<String>>> = Arc::default();
        let consumer = {
            let (queue, ours) = (queue.clone(), ours.clone());
            rt.spawn(async move {
                loop {
                    let node = queue.take(Delivery::AtLeastOnce).await.expect("take");
                    let items: Vec<String> = node
                        .items()
                        .iter()
                        .map(|i| String::from_utf8(i.clone()).unwrap())
                        .collect();
                    node.ack().await.expect("ack");
                    ours.lock().unwrap().extend(items);
                }
            })
        };
        let mut theirs = Vec::new();
        let deadline = std::time::Instant::now() + STEP;
        while theirs.len() + ours.lock().unwrap().len() < expected.len() {
            assert!(
                std::time::Instant::now() < deadline,
                "only {} + {} of {}: {}",
                theirs.len(),
                ours.lock().unwrap().len(),
                expected.len(),
                java.transcript()
            );
            if let Some(line) = java.line_within(Duration::from_millis(100)) {
                let item = line
                    .strip_prefix("GOT ")
                    .unwrap_or_else(|| panic!("{line}"));
                theirs.push(item.to_owned());
            }
        }
        // Anything delivered twice would show up a little later.
        std::thread::sleep(Duration::from_millis(500));
        while let Some(line) = java.line_within(Duration::from_millis(10)) {
            theirs.push(line.trim_start_matches("GOT ").to_owned());
        }
        consumer.abort();
        let ours = ours.lock().unwrap().clone();
        eprintln!(
            "Curator consumed {}, lockkeeper {}",
            theirs.len(),
            ours.len()
        );
        exactly_once(theirs.iter().chain(ours.iter()), &expected);
        quit(java);
    }
}

#[test]
fn priority_and_simple_queues_interoperate() {
    let rt = runtime();
    for server in both() {
        eprintln!("--- against {}", server.name());
        let connect = server.connect_string();
        let session = rt.block_on(connect_session(&*server));

        // Curator's priority encoding, read back in priority order.
        let mut java = start(&connect, &["priority-produce", "/interop/prio", "-", "0"]);
        java.send("go 5 -3 0 100 -2147483648 2147483647 -1");
        java.expect_line("PUT 7", STEP);
        let order = rt.block_on(async {
            let queue = session.priority_queue("/interop/prio").unwrap();
            let mut order = Vec::new();
            while let Some(node) = queue.try_take(Delivery::AtMostOnce).await.unwrap() {
                order.push(String::from_utf8(node.items()[0].clone()).unwrap());
            }
            order
        });
        assert_eq!(
            order,
            [
                "p-2147483648",
                "p-3",
                "p-1",
                "p0",
                "p5",
                "p100",
                "p2147483647"
            ]
        );
        quit(java);

        // Simple queue, Curator to lockkeeper.
        let mut java = start(&connect, &["simple-produce", "/interop/simple", "-", "40"]);
        java.send("go");
        let got = rt.block_on(async {
            let queue = session.simple_queue("/interop/simple").unwrap();
            let mut got = Vec::new();
            for _ in 0..40 {
                let item = tokio::time::timeout(STEP, queue.take())
                    .await
                    .unwrap()
                    .unwrap();
                got.push(String::from_utf8(item).unwrap());
            }
            got
        });
        java.expect_line("PUT 40", STEP);
        let expected: Vec<String> = (0..40).map(|i| format!("s-{i}")).collect();
        assert_eq!(got, expected, "in order");
        quit(java);

        // And lockkeeper to Curator.
        let mut java = start(&connect, &["simple-take", "/interop/simple2", "-", "40"]);
        java.send("go");
        rt.block_on(async {
            let queue = session.simple_queue("/interop/simple2").unwrap();
            for i in 0..40 {
                queue.offer(format!("r-{i}").as_bytes()).await.unwrap();
            }
        });
        for i in 0..40 {
            let line = java.next_line(STEP);
            assert_eq!(line, format!("GOT r-{i}"), "{}", java.transcript());
        }
        quit(java);
    }
}
