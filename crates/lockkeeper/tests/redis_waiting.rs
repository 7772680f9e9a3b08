//! Waiting: the line that keeps waiters from starving, its clean-up when a wait ends without
//! the lock, and waiting across a restart of the server.

mod support_redis;

use std::time::Duration;

use lockkeeper::LockOptions;
use lockkeeper::redis::{Redis, RedisOptions};
use lockkeeper_testkit::{RedisNode, RedisServer};
use support_redis::{connect, eventually, raw};

/// The line of the lease lock `lock` (see the `line` module of `lockkeeper::redis`).
fn line_keys(lock: &lockkeeper::redis::LeaseLock) -> (String, String) {
    (
        format!("{}:line", lock.key()),
        format!("{}:line:deadlines", lock.key()),
    )
}

async fn line_len(
    conn: &mut redis::aio::MultiplexedConnection,
    lock: &lockkeeper::redis::LeaseLock,
) -> i64 {
    redis::cmd("ZCARD")
        .arg(line_keys(lock).0)
        .query_async(conn)
        .await
        .expect("ZCARD")
}

#[tokio::test]
async fn a_free_lock_goes_to_the_longest_waiter_until_its_place_lapses() {
    let server = RedisServer::start();
    let redis = connect(&server).await;
    let lock = redis.lease_lock("line");
    let mut raw = raw(&server).await;
    // A waiter that joined the line a second ago (longer than newcomers may barge in ahead of
    // it) and then went quiet (paused, or its process died): its place lapses two seconds from
    // now, by the server's clock.
    let (line, deadlines) = line_keys(&lock);
    let time: Vec<u64> = redis::cmd("TIME")
        .query_async(&mut raw)
        .await
        .expect("TIME");
    let now_ms = time[0] * 1000 + time[1] / 1000;
    let _: () = redis::pipe()
        .cmd("ZADD")
        .arg(&line)
        .arg(now_ms - 1000)
        .arg("quiet-waiter")
        .ignore()
        .cmd("ZADD")
        .arg(&deadlines)
        .arg(now_ms + 2000)
        .arg("quiet-waiter")
        .ignore()
        .query_async(&mut raw)
        .await
        .expect("ZADD");

    assert!(
        lock.try_lock().await.expect("try_lock").is_none(),
        "the free lock is promised to the waiter at the head of the line"
    );
    let started = tokio::time::Instant::now();
    let guard = lock
        .lock_timeout(Duration::from_secs(30))
        .await
        .expect("lock_timeout")
        .expect("acquired once the quiet waiter's place lapsed");
    assert!(
        started.elapsed() >= Duration::from_millis(1500),
        "not before the place lapsed: {:?}",
        started.elapsed()
    );
    assert_eq!(
        line_len(&mut raw, &lock).await,
        0,
        "the line is empty again"
    );
    guard.release().await.expect("release");
}

/// A holder that vanishes without releasing (its process died: no release, no message) frees
/// the lock when its lease runs out, and a waiter without a deadline takes it then: it wakes
/// on its own a little past the expiry the failed attempt reported, not only on a release
/// message that will never come.
#[tokio::test]
async fn a_waiter_without_a_deadline_takes_a_lock_whose_holder_vanished() {
    let server = RedisServer::start();
    let redis = connect(&server).await;
    let lease = Duration::from_secs(1);
    let lock = redis
        .lease_lock("vanished")
        .with_options(LockOptions::new().lease(lease))
        .unwrap();
    let guard = lock.lock().await.expect("lock");
    // The holder's process died: nothing releases, nothing is published.
    std::mem::forget(guard);
    let waiter = connect(&server)
        .await
        .lease_lock("vanished")
        .with_options(LockOptions::new().lease(lease))
        .unwrap();
    let taken = tokio::time::timeout(Duration::from_secs(30), waiter.lock())
        .await
        .expect("the waiter took the lock once the lease ran out")
        .expect("lock");
    taken.release().await.expect("release");
}

#[tokio::test]
async fn a_newcomer_may_barge_in_while_the_head_of_the_line_has_not_waited_long() {
    let server = RedisServer::start();
    let redis = connect(&server).await;
    let lock = redis.lease_lock("barging");
    let mut raw = raw(&server).await;
    let (line, deadlines) = line_keys(&lock);
    let time: Vec<u64> = redis::cmd("TIME")
        .query_async(&mut raw)
        .await
        .expect("TIME");
    let now_ms = time[0] * 1000 + time[1] / 1000;
    // The head joined just now: within the starvation threshold a free lock goes to whoever
    // asks first, which keeps a contended lock changing hands without a wake-up round trip.
    let _: () = redis::pipe()
        .cmd("ZADD")
        .arg(&line)
        .arg(now_ms + 5000)
        .arg("fresh-waiter")
        .ignore()
        .cmd("ZADD")
        .arg(&deadlines)
        .arg(now_ms + 10000)
        .arg("fresh-waiter")
        .ignore()
        .query_async(&mut raw)
        .await
        .expect("ZADD");
    let guard = lock
        .try_lock()
        .await
        .expect("try_lock")
        .expect("a newcomer barges in ahead of a waiter that has not waited long");
    guard.release().await.expect("release");
    // Once the head has waited past the threshold, the free lock is kept for it.
    let _: () = redis::cmd("ZADD")
        .arg(&line)
        .arg(now_ms - 1000)
        .arg("fresh-waiter")
        .query_async(&mut raw)
        .await
        .expect("ZADD");
    assert!(
        lock.try_lock().await.expect("try_lock").is_none(),
        "a starving head of the line is not barged"
    );
}

#[tokio::test]
async fn waiters_are_served_in_the_order_they_lined_up() {
    let server = RedisServer::start();
    let lock = connect(&server).await.lease_lock("order");
    let mut raw = raw(&server).await;
    let guard = lock.lock().await.expect("lock");
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut waiters = Vec::new();
    for i in 0..4 {
        let mine = connect(&server).await.lease_lock("order");
        let tx = tx.clone();
        waiters.push(tokio::spawn(async move {
            let guard = mine
                .lock_timeout(Duration::from_secs(60))
                .await
                .expect("lock_timeout")
                .expect("acquired");
            tx.send(i).expect("send");
            tokio::time::sleep(Duration::from_millis(20)).await;
            guard.release().await.expect("release");
        }));
        // Let each one fail its first attempt (and line up) before the next starts.
        let expected = i + 1;
        eventually(Duration::from_secs(20), "the waiter lined up", || {
            let (mut raw, lock) = (raw.clone(), lock.clone());
            async move { line_len(&mut raw, &lock).await == expected }
        })
        .await;
    }
    guard.release().await.expect("release");
    let mut order = Vec::new();
    for _ in 0..4 {
        let next = tokio::time::timeout(Duration::from_secs(60), rx.recv())
            .await
            .expect("every waiter acquires")
            .expect("a waiter");
        order.push(next);
    }
    assert_eq!(order, vec![0, 1, 2, 3]);
    for waiter in waiters {
        waiter.await.expect("waiter");
    }
    assert_eq!(line_len(&mut raw, &lock).await, 0);
}

#[tokio::test]
async fn a_wait_that_ends_without_the_lock_leaves_the_line() {
    let server = RedisServer::start();
    let lock = connect(&server).await.lease_lock("leaving");
    let mut raw = raw(&server).await;
    let guard = lock.lock().await.expect("lock");
    let other = connect(&server).await.lease_lock("leaving");
    // Timed out.
    assert!(
        other
            .lock_timeout(Duration::from_millis(300))
            .await
            .expect("lock_timeout")
            .is_none()
    );
    // Cancelled while sleeping.
    let waiting = tokio::spawn({
        let other = other.clone();
        async move { other.lock().await }
    });
    eventually(
        Duration::from_secs(20),
        "the cancelled waiter lined up",
        || {
            let mut raw = raw.clone();
            let lock = lock.clone();
            async move { line_len(&mut raw, &lock).await >= 1 }
        },
    )
    .await;
    waiting.abort();
    let _ = waiting.await;
    eventually(Duration::from_secs(2), "the line is empty", || {
        let mut raw = raw.clone();
        let lock = lock.clone();
        async move { line_len(&mut raw, &lock).await == 0 }
    })
    .await;
    guard.release().await.expect("release");
    // Nobody in line: a newcomer takes the free lock at once.
    let next = other.try_lock().await.expect("try_lock").expect("free");
    next.release().await.expect("release");
    let _ = line_len(&mut raw, &lock).await;
}

/// `Redis::close` returns only once an abandoned wait has left the line (its clean-up runs in
/// a background task, which a process exiting right away would cut short), and the handle
/// keeps working afterwards.
#[tokio::test]
async fn close_waits_for_an_abandoned_wait_to_leave_the_line() {
    let server = RedisServer::start();
    let lock = connect(&server).await.lease_lock("closing");
    let mut raw = raw(&server).await;
    let guard = lock.lock().await.expect("lock");
    let waiter_handle = connect(&server).await;
    let other = waiter_handle.lease_lock("closing");
    let waiting = tokio::spawn({
        let other = other.clone();
        async move { other.lock().await }
    });
    eventually(Duration::from_secs(20), "the waiter lined up", || {
        let mut raw = raw.clone();
        let lock = lock.clone();
        async move { line_len(&mut raw, &lock).await >= 1 }
    })
    .await;
    waiting.abort();
    let _ = waiting.await;
    assert!(waiter_handle.close().await, "the clean-up finished in time");
    assert_eq!(
        line_len(&mut raw, &lock).await,
        0,
        "close returned before the abandoned wait left the line"
    );
    guard.release().await.expect("release");
    let next = other.try_lock().await.expect("try_lock").expect("free");
    next.release().await.expect("release");
}

#[tokio::test]
async fn waiting_survives_a_server_restart() {
    let node = RedisNode::start();
    let options = RedisOptions::new()
        .connect_timeout(Duration::from_secs(2))
        .response_timeout(Duration::from_secs(2));
    let a = Redis::connect_with(&node.url(), options.clone())
        .await
        .expect("connect");
    let b = Redis::connect_with(&node.url(), options)
        .await
        .expect("connect");
    // Both handles have waited once, so both have a subscriber connection.
    let warm = a.lease_lock("restart").lock().await.expect("lock");
    let b_wait = tokio::spawn({
        let b = b.clone();
        async move {
            b.lease_lock("restart")
                .lock_timeout(Duration::from_secs(30))
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    warm.release().await.expect("release");
    b_wait
        .await
        .expect("waiter")
        .expect("lock_timeout")
        .expect("acquired")
        .release()
        .await
        .expect("release");

    node.kill();
    let outcome = tokio::time::timeout(
        Duration::from_secs(30),
        b.lease_lock("restart").lock_timeout(Duration::from_secs(5)),
    )
    .await
    .expect("an unreachable server is an error, not a hang");
    assert!(outcome.is_err(), "{outcome:?}");
    node.restart();

    // The same handles reconnect on their own, commands and pub/sub alike.
    let mut guard = None;
    for _ in 0..100 {
        match a
            .lease_lock("restart")
            .with_options(LockOptions::new().lease(Duration::from_secs(60)))
            .unwrap()
            .lock()
            .await
        {
            Ok(g) => {
                guard = Some(g);
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    let guard = guard.expect("the handle reconnected after the restart");
    let waiter = tokio::spawn({
        let b = b.clone();
        async move {
            loop {
                match b
                    .lease_lock("restart")
                    .lock_timeout(Duration::from_secs(40))
                    .await
                {
                    Ok(acquired) => return acquired,
                    // The first calls after the restart may still see the broken connection.
                    Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                }
            }
        }
    });
    // The waiter's handle subscribed again on the restarted server.
    let channel = format!("{}:released", guard_key(&a));
    let mut raw = redis::Client::open(node.url())
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("raw connection");
    eventually(
        Duration::from_secs(20),
        "a subscriber on the restarted server",
        || {
            let (mut raw, channel) = (raw.clone(), channel.clone());
            async move {
                let numsub: (String, i64) = redis::cmd("PUBSUB")
                    .arg("NUMSUB")
                    .arg(&channel)
                    .query_async(&mut raw)
                    .await
                    .expect("PUBSUB NUMSUB");
                numsub.1 >= 1
            }
        },
    )
    .await;
    let _ = &mut raw;
    guard.release().await.expect("release");
    let acquired = tokio::time::timeout(Duration::from_secs(30), waiter)
        .await
        .expect("the waiter acquires")
        .expect("waiter")
        .expect("acquired");
    acquired.release().await.expect("release");
}

fn guard_key(redis: &Redis) -> String {
    redis.lease_lock("restart").key().to_string()
}
