//! The queues against Keeper and Apache ZooKeeper: order, the two delivery modes (what happens
//! to an item whose consumer stops or whose session ends), blocking takes woken by watches,
//! the priority and simple queues, and bad input. Curator interop is in `queue/curator.rs`,
//! the multi-process fault test in `queue/faults.rs`.

mod support;

#[path = "queue/curator.rs"]
mod curator;
#[allow(dead_code)]
#[path = "counter/cutter.rs"]
mod cutter;
#[path = "queue/faults.rs"]
mod faults;
#[allow(dead_code)]
#[path = "curator/jvm.rs"]
mod jvm;
#[allow(dead_code)]
#[path = "curator/zk.rs"]
mod zk;

use std::time::Duration;

use lockkeeper::Error;
use lockkeeper::zk::ConnectionState;
use lockkeeper::zk::{Delivery, Session};
use support::{Partition, children, for_each_backend, session, wait_state};

const WAIT: Duration = Duration::from_secs(10);

async fn take_one(queue: &lockkeeper::zk::DistributedQueue, delivery: Delivery) -> Vec<u8> {
    let taken = tokio::time::timeout(WAIT, queue.take(delivery))
        .await
        .expect("an item within the wait")
        .expect("take");
    let item = taken.items()[0].clone();
    taken.ack().await.expect("ack");
    item
}

async fn close(session: Session) {
    session.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn at_least_once_acks_requeues_and_redelivers() {
    for_each_backend(|connect| async move {
        let s = session(&connect).await;
        let queue = s.distributed_queue("/q/alo").unwrap();
        queue.put_all(&[b"a", b"b", b"c"]).await.unwrap();
        assert_eq!(children(&s, "/q/alo").await.len(), 3, "one node per item");

        // The head is locked by its taker: a second consumer gets the next one.
        let mut names = children(&s, "/q/alo").await;
        names.sort();
        let a = queue.take(Delivery::AtLeastOnce).await.unwrap();
        assert_eq!(a.items(), [b"a".to_vec()]);
        assert_eq!(a.node(), format!("/q/alo/{}", names[0]), "the head's node");
        assert_eq!(a.delivery(), Delivery::AtLeastOnce);
        let other = s.distributed_queue("/q/alo").unwrap();
        let b = other.take(Delivery::AtLeastOnce).await.unwrap();
        assert_eq!(b.items(), [b"b".to_vec()]);
        assert_eq!(children(&s, "/q/alo-locks").await.len(), 2);

        // Dropped unacknowledged: delivered again. Requeued: goes to the back.
        drop(a);
        b.requeue().await.unwrap();
        let mut rest = Vec::new();
        for _ in 0..3 {
            rest.push(take_one(&other, Delivery::AtLeastOnce).await);
        }
        assert_eq!(rest.last().unwrap(), b"b", "requeued to the back: {rest:?}");
        rest.sort();
        assert_eq!(rest, [b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]);
        assert!(
            queue
                .try_take(Delivery::AtLeastOnce)
                .await
                .unwrap()
                .is_none()
        );
        assert!(children(&s, "/q/alo").await.is_empty());
        assert!(
            children(&s, "/q/alo-locks").await.is_empty(),
            "ack removes the lock"
        );

        // Release gives the item back in its place: a fresh consumer sees it first.
        queue.put_all(&[b"x", b"y"]).await.unwrap();
        let x = queue.take(Delivery::AtLeastOnce).await.unwrap();
        x.release().await.unwrap();
        let fresh = s.distributed_queue("/q/alo").unwrap();
        assert_eq!(take_one(&fresh, Delivery::AtLeastOnce).await, b"x");
        assert_eq!(take_one(&fresh, Delivery::AtLeastOnce).await, b"y");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dead_consumers_item_goes_to_the_next_consumer_and_its_ack_is_refused() {
    for_each_backend(|connect| async move {
        let s = session(&connect).await;
        let dying = session(&connect).await;
        let queue = s.distributed_queue("/q/dead").unwrap();
        queue.put(b"job").await.unwrap();
        let held = dying
            .distributed_queue("/q/dead")
            .unwrap()
            .take(Delivery::AtLeastOnce)
            .await
            .unwrap();
        assert!(held.is_held());
        assert!(
            queue
                .try_take(Delivery::AtLeastOnce)
                .await
                .unwrap()
                .is_none(),
            "locked"
        );

        // A consumer blocked on the queue wakes when the lock goes (a child watch on the
        // lock path: the item itself does not change).
        let waiter = {
            let queue = queue.clone();
            tokio::spawn(async move { queue.take(Delivery::AtLeastOnce).await })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!waiter.is_finished(), "taken while still locked");
        close(dying).await;
        tokio::time::timeout(WAIT, held.lost())
            .await
            .expect("lost() after the session ends");
        let taken = tokio::time::timeout(WAIT, waiter)
            .await
            .expect("the waiter wakes")
            .unwrap()
            .unwrap();
        assert_eq!(taken.items(), [b"job".to_vec()]);
        // The first consumer's late ack cannot remove the item the second one holds.
        assert!(matches!(held.ack().await, Err(Error::ItemLost { .. })));
        assert_eq!(children(&s, "/q/dead").await.len(), 1);
        taken.ack().await.unwrap();
        assert!(children(&s, "/q/dead").await.is_empty());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn at_most_once_removes_before_handing_out_and_takes_wake_on_puts() {
    for_each_backend(|connect| async move {
        let s = session(&connect).await;
        let queue = s.distributed_queue("/q/amo").unwrap();
        let waiter = {
            let queue = queue.clone();
            tokio::spawn(async move { queue.take(Delivery::AtMostOnce).await })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!waiter.is_finished());
        queue.put(b"first").await.unwrap();
        let taken = tokio::time::timeout(WAIT, waiter)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!(taken.items(), [b"first".to_vec()]);
        assert!(
            children(&s, "/q/amo").await.is_empty(),
            "removed before handed out"
        );
        assert!(matches!(
            taken.requeue().await,
            Err(Error::InvalidArgument(_))
        ));

        // consume: a failing handler's item is gone (at-most-once), the rest are handled.
        queue.put_all(&[b"1", b"fail", b"2"]).await.unwrap();
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let consumer = {
            let queue = queue.clone();
            let seen = seen.clone();
            tokio::spawn(async move {
                queue
                    .consume(Delivery::AtMostOnce, |item| {
                        let seen = seen.clone();
                        async move {
                            seen.lock().unwrap().push(item.clone());
                            if item == b"fail" {
                                Err("refused")
                            } else {
                                Ok(())
                            }
                        }
                    })
                    .await
            })
        };
        let deadline = tokio::time::Instant::now() + WAIT;
        while seen.lock().unwrap().len() < 3 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{:?}",
                seen.lock().unwrap()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        consumer.abort();
        assert_eq!(
            *seen.lock().unwrap(),
            [b"1".to_vec(), b"fail".to_vec(), b"2".to_vec()]
        );
        assert!(
            queue
                .try_take(Delivery::AtMostOnce)
                .await
                .unwrap()
                .is_none()
        );
        assert!(
            queue
                .take_timeout(Delivery::AtMostOnce, Duration::from_millis(200))
                .await
                .unwrap()
                .is_none()
        );
    })
    .await;
}

/// A blocking take outlives its session: when the consumer's session expires while it waits,
/// the take carries on in the session that replaces it and gets the next item put; only a try
/// (`try_take`) answers the loss, since it cannot see the queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_waiting_take_follows_its_session_into_the_next() {
    for_each_backend(|connect| async move {
        let path = "/q/follows";
        let partition = Partition::start(&connect).await;
        let consumer = session(&partition.connect_string()).await;
        let producer = session(&connect).await;
        let queue = consumer.distributed_queue(path).unwrap();
        let waiter = {
            let queue = queue.clone();
            tokio::spawn(async move { queue.take(Delivery::AtMostOnce).await })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!waiter.is_finished(), "a take of an empty queue returned");
        partition.cut();
        wait_state(&consumer, ConnectionState::Lost).await;
        partition.heal();
        wait_state(&consumer, ConnectionState::Reconnected).await;
        assert!(!waiter.is_finished(), "the take ended with its session");
        producer
            .distributed_queue(path)
            .unwrap()
            .put(b"after")
            .await
            .unwrap();
        let taken = tokio::time::timeout(Duration::from_secs(60), waiter)
            .await
            .expect("the take got the item in its new session")
            .unwrap()
            .expect("take");
        assert_eq!(taken.items(), [b"after".to_vec()]);
    })
    .await;
}

/// A claim the server refuses (no permission to delete the item, or to create its lock) is the
/// take's error, not an item skipped: a consumer without the rights must hear why it gets
/// nothing, instead of spinning over items it can never take.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_claim_the_server_refuses_is_the_takes_error() {
    use lockkeeper_zk_client::{Acl, CreateMode, CreateOptions, Id, perms};
    for_each_backend(|connect| async move {
        let s = session(&connect).await;
        let client = s.client().expect("client");
        let anyone = |perms| {
            vec![Acl {
                perms,
                id: Id {
                    scheme: "world".into(),
                    id: "anyone".into(),
                },
            }]
        };
        let persistent = |acl| CreateOptions::new(CreateMode::Persistent).with_acl(acl);
        // At most once: the item's delete is refused (no DELETE on the queue node).
        let queue = s.distributed_queue("/q/no-delete").unwrap();
        queue.put(b"kept").await.unwrap();
        client
            .set_acl("/q/no-delete", &anyone(perms::READ | perms::CREATE), None)
            .await
            .unwrap();
        let taken = tokio::time::timeout(WAIT, queue.try_take(Delivery::AtMostOnce))
            .await
            .expect("the take answered");
        assert!(
            matches!(taken, Err(Error::Zk(lockkeeper_zk_client::Error::NoAuth))),
            "a refused delete: {:?}",
            taken.map(|t| t.map(|t| t.node().to_owned()))
        );
        // At least once: the lock node's create is refused (no CREATE on the locks node).
        client
            .create("/q/no-lock-locks", b"", &persistent(anyone(perms::READ)))
            .await
            .unwrap();
        let queue = s.distributed_queue("/q/no-lock").unwrap();
        queue.put(b"kept").await.unwrap();
        let taken = tokio::time::timeout(WAIT, queue.try_take(Delivery::AtLeastOnce))
            .await
            .expect("the take answered");
        assert!(
            matches!(taken, Err(Error::Zk(lockkeeper_zk_client::Error::NoAuth))),
            "a refused lock: {:?}",
            taken.map(|t| t.map(|t| t.node().to_owned()))
        );
        assert_eq!(children(&s, "/q/no-lock").await.len(), 1, "the item stays");
    })
    .await;
}

/// An at-least-once item whose lock was deleted behind its consumer (an operator, a forced
/// cleanup) cannot be acked: the ack says `ItemLost`, and the item stays for the next consumer.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_ack_after_the_lock_was_deleted_is_item_lost() {
    for_each_backend(|connect| async move {
        let s = session(&connect).await;
        let other = session(&connect).await;
        let queue = s.distributed_queue("/q/unlocked").unwrap();
        queue.put(b"x").await.unwrap();
        let taken = queue.take(Delivery::AtLeastOnce).await.unwrap();
        let name = taken.node().rsplit('/').next().unwrap().to_owned();
        other
            .client()
            .expect("client")
            .delete(&format!("/q/unlocked-locks/{name}"), None)
            .await
            .expect("delete the lock");
        assert!(
            matches!(taken.ack().await, Err(Error::ItemLost { .. })),
            "an ack without the lock"
        );
        assert_eq!(children(&s, "/q/unlocked").await, [name], "the item stays");
    })
    .await;
}

/// An at-least-once item given back or acknowledged at once leaves no watch behind: the
/// watch on its lock node goes out before the lock's delete or not at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn items_settled_at_once_leave_no_watch_on_the_server() {
    for_each_backend(|connect| async move {
        let s = session(&connect).await;
        let queue = s.distributed_queue("/q/settled").unwrap();
        for _ in 0..25 {
            queue.put(b"x").await.unwrap();
            let taken = queue.take(Delivery::AtLeastOnce).await.unwrap();
            taken.release().await.unwrap();
            let taken = queue.take(Delivery::AtLeastOnce).await.unwrap();
            taken.ack().await.unwrap();
        }
        let addr = connect.parse().expect("a single host:port");
        assert_eq!(
            lockkeeper_testkit::total_watches(addr),
            0,
            "watches left on the server after settled items"
        );
    })
    .await;
}

/// Where a connection cut lands in a first take: the claim's lock create, or (before the lock
/// path exists) its creation during the listing.
#[derive(Clone, Copy, PartialEq)]
enum Cut {
    Claim,
    Listing,
}

/// Puts one item at `path`, arms a cut at the consumer's next write and takes at least once:
/// the take must come back with the item once the connection is back, never with the cut.
async fn take_through_a_cut(connect: String, path: &str, cut: Cut) {
    let cutter = cutter::WriteCutter::start(&connect).await;
    let consumer = session(&cutter.connect_string()).await;
    let producer = session(&connect).await;
    producer
        .distributed_queue(path)
        .unwrap()
        .put(b"x")
        .await
        .unwrap();
    if cut == Cut::Claim {
        // The lock path exists, so the first write the consumer sends is the claim's lock.
        producer
            .client()
            .expect("client")
            .mkdir(
                &format!("{path}-locks"),
                &lockkeeper_zk_client::CreateOptions::new(
                    lockkeeper_zk_client::CreateMode::Persistent,
                ),
            )
            .await
            .unwrap();
    }
    let queue = consumer.distributed_queue(path).unwrap();
    cutter.arm();
    let taken = tokio::time::timeout(Duration::from_secs(60), queue.take(Delivery::AtLeastOnce))
        .await
        .expect("the take answered")
        .expect("the item, once the connection is back");
    assert!(cutter.fired(), "the cut hit the take");
    assert_eq!(taken.items(), [b"x".to_vec()]);
    taken.ack().await.unwrap();
}

/// A lock create whose answer is lost with the connection does not fail the take: the claim
/// deletes its lock if it was made, and the item is taken once the connection is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_claim_whose_answer_is_lost_is_tried_again() {
    for_each_backend(|connect| take_through_a_cut(connect, "/q/cut-claim", Cut::Claim)).await;
}

/// A waiting take whose listing is cut by a connection blip (here the cut hits the lock path's
/// creation, the first write of a first take) lists again once the connection is back, rather
/// than failing while its session lives on.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_take_cut_off_while_listing_lists_again() {
    for_each_backend(|connect| take_through_a_cut(connect, "/q/cut-list", Cut::Listing)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn priority_and_simple_queues_and_bad_input() {
    for_each_backend(|connect| async move {
        let s = session(&connect).await;

        let prio = s.priority_queue("/q/prio").unwrap();
        prio.put(b"low", 10).await.unwrap();
        prio.put(b"neg", -5).await.unwrap();
        prio.put(b"min", i32::MIN).await.unwrap();
        prio.put(b"zero", 0).await.unwrap();
        let mut order = Vec::new();
        while let Some(t) = prio.try_take(Delivery::AtLeastOnce).await.unwrap() {
            order.push(String::from_utf8(t.items()[0].clone()).unwrap());
            t.ack().await.unwrap();
        }
        assert_eq!(order, ["min", "neg", "zero", "low"]);

        // Empty items are items; nodes that are not queue items are ignored.
        let queue = s.distributed_queue("/q/mixed").unwrap();
        queue.put(b"").await.unwrap();
        let client = s.client().unwrap();
        let opts =
            &lockkeeper_zk_client::CreateOptions::new(lockkeeper_zk_client::CreateMode::Persistent);
        client
            .create("/q/mixed/foreign", b"not an item", opts)
            .await
            .unwrap();
        client
            .create("/q/mixed/queue-bogus", b"no envelope", opts)
            .await
            .unwrap();
        queue.put_multi(&[b"m1", b"m2"]).await.unwrap();
        let empty = queue.take(Delivery::AtLeastOnce).await.unwrap();
        assert_eq!(empty.items(), [Vec::<u8>::new()]);
        empty.ack().await.unwrap();
        let multi = tokio::time::timeout(WAIT, queue.take(Delivery::AtLeastOnce))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            multi.items(),
            [b"m1".to_vec(), b"m2".to_vec()],
            "one node, two items"
        );
        multi.ack().await.unwrap();
        assert!(
            queue
                .try_take(Delivery::AtLeastOnce)
                .await
                .unwrap()
                .is_none()
        );
        let mut left = children(&s, "/q/mixed").await;
        left.sort();
        assert_eq!(left, ["foreign", "queue-bogus"], "foreign nodes left alone");
        // At-most-once removes before it reads, so a corrupt item goes (as with Curator).
        let fresh = s.distributed_queue("/q/mixed").unwrap();
        assert!(
            fresh
                .try_take(Delivery::AtMostOnce)
                .await
                .unwrap()
                .is_none()
        );
        assert_eq!(children(&s, "/q/mixed").await, ["foreign"]);
        assert!(matches!(
            queue.put_multi(&[]).await,
            Err(Error::InvalidArgument(_))
        ));

        for bad in ["", "q", "/q/", "/"] {
            let err = s.distributed_queue(bad).unwrap_err().to_string();
            assert!(err.contains("queue path"), "{bad:?}: {err}");
            assert!(s.simple_queue(bad).is_err());
        }
        assert!(queue.clone().with_lock_path("/q/mixed").is_err());

        // The simple queue: raw bytes in qn- nodes.
        let simple = s.simple_queue("/q/simple").unwrap();
        assert_eq!(simple.poll().await.unwrap(), None);
        assert_eq!(simple.peek().await.unwrap(), None);
        simple.offer(b"one").await.unwrap();
        simple.offer(b"").await.unwrap();
        client
            .create("/q/simple/zz-foreign", b"x", opts)
            .await
            .unwrap();
        let names = children(&s, "/q/simple").await;
        assert_eq!(names.iter().filter(|n| n.starts_with("qn-")).count(), 2);
        assert_eq!(simple.peek().await.unwrap().as_deref(), Some(&b"one"[..]));
        assert_eq!(simple.take().await.unwrap(), b"one");
        assert_eq!(simple.poll().await.unwrap().as_deref(), Some(&b""[..]));
        assert_eq!(
            simple
                .take_timeout(Duration::from_millis(200))
                .await
                .unwrap(),
            None
        );
        assert!(simple.take_timeout(Duration::ZERO).await.is_err());
        let waiter = {
            let simple = simple.clone();
            tokio::spawn(async move { simple.take().await })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!waiter.is_finished());
        simple.offer(b"late").await.unwrap();
        let got = tokio::time::timeout(WAIT, waiter)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert_eq!(got, b"late");
    })
    .await;
}
