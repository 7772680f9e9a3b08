//! One Redlock master: its connection, the three commands Redlock sends it, and the fan-out
//! that sends one of them to every master at once.
//!
//! Every call is bounded by the per-node timeout, connection set-up included, because a master
//! that is down or slow must cost a round no more than that: the whole point of Redlock is
//! that a minority of masters can be gone. Connecting runs as its own task, so that a connect
//! slower than one round's timeout still completes and the next round finds the master ready.

use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Poll;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, RedisError};
use tokio::sync::Notify;

use crate::redis::conn::within;
use crate::redis::lease::millis;

/// Deletes the key only if it still holds our token: after our lease ran out someone else's
/// key may be there.
const RELEASE: &str = r"
if redis.call('get', KEYS[1]) == ARGV[1] then
    return redis.call('del', KEYS[1])
end
return 0
";

/// Sets a new TTL only if the key still holds our token.
const EXTEND: &str = r"
if redis.call('get', KEYS[1]) == ARGV[1] then
    return redis.call('pexpire', KEYS[1], ARGV[2])
end
return 0
";

/// One independent Redis master.
pub(super) struct Node {
    url: String,
    client: Client,
    connect_timeout: Duration,
    current: Mutex<Option<MultiplexedConnection>>,
    connecting: AtomicBool,
    connected: Notify,
    last_connect_error: Mutex<Option<String>>,
}

impl Node {
    /// A master at `url`; nothing is sent until the first command.
    pub(super) fn open(url: &str, connect_timeout: Duration) -> Result<Node, RedisError> {
        Ok(Node {
            url: url.to_string(),
            client: Client::open(url)?,
            connect_timeout,
            current: Mutex::new(None),
            connecting: AtomicBool::new(false),
            connected: Notify::new(),
            last_connect_error: Mutex::new(None),
        })
    }

    pub(super) fn url(&self) -> &str {
        &self.url
    }

    /// `SET key token NX PX ttl`: whether this master now holds the lock for us.
    pub(super) async fn acquire(
        self: &Arc<Self>,
        limit: Duration,
        key: &str,
        token: &str,
        ttl: Duration,
    ) -> Result<bool, RedisError> {
        let cmd = redis::cmd("SET")
            .arg(key)
            .arg(token)
            .arg("NX")
            .arg("PX")
            .arg(millis(ttl))
            .clone();
        self.run(limit, |mut conn| async move {
            let reply: Option<String> = cmd.query_async(&mut conn).await?;
            Ok(reply.is_some())
        })
        .await
    }

    /// Compare-and-delete: whether our key was there and is gone now.
    pub(super) async fn release(
        self: &Arc<Self>,
        limit: Duration,
        key: &str,
        token: &str,
    ) -> Result<bool, RedisError> {
        let cmd = eval(RELEASE, key).arg(token).clone();
        self.run(limit, |mut conn| async move {
            let deleted: i64 = cmd.query_async(&mut conn).await?;
            Ok(deleted == 1)
        })
        .await
    }

    /// Compare-and-`PEXPIRE`: whether our key was there and now lives for `ttl`.
    pub(super) async fn extend(
        self: &Arc<Self>,
        limit: Duration,
        key: &str,
        token: &str,
        ttl: Duration,
    ) -> Result<bool, RedisError> {
        let cmd = eval(EXTEND, key).arg(token).arg(millis(ttl)).clone();
        self.run(limit, |mut conn| async move {
            let extended: i64 = cmd.query_async(&mut conn).await?;
            Ok(extended == 1)
        })
        .await
    }

    /// Runs `call` on this master's connection, all of it (connecting too) within `limit`. A
    /// connection that failed is dropped so that the next call dials again.
    async fn run<T, F, Fut>(self: &Arc<Self>, limit: Duration, call: F) -> Result<T, RedisError>
    where
        F: FnOnce(MultiplexedConnection) -> Fut,
        Fut: Future<Output = Result<T, RedisError>>,
    {
        within(limit, async {
            let conn = self.connection().await?;
            let result = call(conn).await;
            if let Err(error) = &result
                && (error.is_io_error()
                    || error.is_connection_dropped()
                    || error.is_connection_refusal()
                    || error.is_unrecoverable_error())
            {
                *self.lock_current() = None;
            }
            result
        })
        .await
    }

    /// The cached connection, or the outcome of a (shared, background) connect.
    async fn connection(self: &Arc<Self>) -> Result<MultiplexedConnection, RedisError> {
        let notified = self.connected.notified();
        tokio::pin!(notified);
        // Registered before looking, so a connect finishing in between still wakes us.
        notified.as_mut().enable();
        if let Some(conn) = self.lock_current().clone() {
            return Ok(conn);
        }
        if !self.connecting.swap(true, Ordering::AcqRel) {
            tokio::spawn(Arc::clone(self).connect());
        }
        notified.await;
        if let Some(conn) = self.lock_current().clone() {
            return Ok(conn);
        }
        let why = crate::sync::lock(&self.last_connect_error)
            .clone()
            .unwrap_or_else(|| "connection lost".to_string());
        Err(RedisError::from(std::io::Error::new(
            std::io::ErrorKind::NotConnected,
            format!("Redlock master {}: {why}", self.url),
        )))
    }

    async fn connect(self: Arc<Self>) {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            // Each call is bounded by the caller's per-node timeout instead.
            .set_response_timeout(None);
        let outcome = within(
            self.connect_timeout,
            self.client
                .get_multiplexed_async_connection_with_config(&config),
        )
        .await;
        match outcome {
            Ok(conn) => *self.lock_current() = Some(conn),
            Err(error) => {
                *crate::sync::lock(&self.last_connect_error) = Some(error.to_string());
            }
        }
        self.connecting.store(false, Ordering::Release);
        self.connected.notify_waiters();
    }

    fn lock_current(&self) -> MutexGuard<'_, Option<MultiplexedConnection>> {
        // A plain Option: a panic elsewhere cannot leave it half-written.
        crate::sync::lock(&self.current)
    }
}

/// `EVAL script 1 key`, the arguments to follow. The whole script every time, not `EVALSHA`:
/// one request that works on a master that just restarted with an empty script cache, and
/// that still runs if it was sent before its caller gave up waiting (a release must).
fn eval(script: &str, key: &str) -> redis::Cmd {
    redis::cmd("EVAL").arg(script).arg(1).arg(key).clone()
}

/// Runs every future at once on the current task and returns their outputs in order. (No
/// spawning: a round dropped half-way drops its requests with it.)
pub(super) async fn join_all<F: Future>(futures: Vec<F>) -> Vec<F::Output> {
    let mut pending: Vec<Pin<Box<F>>> = futures.into_iter().map(Box::pin).collect();
    let mut outputs: Vec<Option<F::Output>> = pending.iter().map(|_| None).collect();
    poll_fn(|cx| {
        let mut done = true;
        for (future, output) in pending.iter_mut().zip(outputs.iter_mut()) {
            if output.is_none() {
                match future.as_mut().poll(cx) {
                    Poll::Ready(value) => *output = Some(value),
                    Poll::Pending => done = false,
                }
            }
        }
        if done { Poll::Ready(()) } else { Poll::Pending }
    })
    .await;
    outputs.into_iter().flatten().collect()
}

/// What one round of a command over every master came to.
#[derive(Debug, Default)]
pub(super) struct Tally {
    /// Masters that answered yes (acquired, extended, deleted).
    pub yes: usize,
    /// Masters that answered no (busy, not ours).
    pub no: usize,
    /// Masters that failed or did not answer in time, with the first such error.
    pub failed: usize,
    pub first_error: Option<RedisError>,
}

impl Tally {
    pub(super) fn of(results: Vec<Result<bool, RedisError>>) -> Tally {
        let mut tally = Tally::default();
        for result in results {
            match result {
                Ok(true) => tally.yes += 1,
                Ok(false) => tally.no += 1,
                Err(error) => {
                    tally.failed += 1;
                    tally.first_error.get_or_insert(error);
                }
            }
        }
        tally
    }

    /// Whether the failures alone made a majority impossible (as opposed to other holders).
    pub(super) fn unreachable(&self, quorum: usize) -> bool {
        self.failed > self.yes + self.no + self.failed - quorum
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn join_all_keeps_order_and_runs_concurrently() {
        // Each future waits for all three: only a concurrent join gets past the barrier.
        let barrier = Arc::new(tokio::sync::Barrier::new(3));
        let futures = [3u8, 1, 2]
            .into_iter()
            .map(|n| {
                let barrier = Arc::clone(&barrier);
                async move {
                    barrier.wait().await;
                    n
                }
            })
            .collect();
        let outputs = tokio::time::timeout(Duration::from_secs(60), join_all(futures))
            .await
            .expect("the futures ran one after another");
        assert_eq!(outputs, vec![3, 1, 2]);
        assert!(
            join_all(Vec::<std::future::Ready<()>>::new())
                .await
                .is_empty()
        );
    }

    fn failure() -> Result<bool, RedisError> {
        Err(RedisError::from(std::io::Error::from(
            std::io::ErrorKind::ConnectionRefused,
        )))
    }

    #[test]
    fn a_tally_tells_busy_from_unreachable() {
        // 5 masters, quorum 3: two failures still leave a majority possible.
        let tally = Tally::of(vec![Ok(false), Ok(false), Ok(true), failure(), failure()]);
        assert_eq!((tally.yes, tally.no, tally.failed), (1, 2, 2));
        assert!(!tally.unreachable(3));
        assert!(tally.first_error.is_some());
        let tally = Tally::of(vec![Ok(true), Ok(true), failure(), failure(), failure()]);
        assert!(tally.unreachable(3));
        assert!(!Tally::of(vec![Ok(true); 3]).unreachable(2));
    }
}
