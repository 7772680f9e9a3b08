//! The command connection behind a [`Redis`](super::Redis) handle: one Redis, a Redis Cluster,
//! or the master a set of Sentinels points at.
//!
//! All three reconnect on their own, so a lock call after a blip just works (or fails once and
//! works on the next call): [`ConnectionManager`] re-dials one server, the cluster connection
//! re-reads the slot map, and [`SentinelConn`] asks the Sentinels for the current master
//! whenever the old one stops answering or turns out to be a read-only replica. Every variant
//! implements [`ConnectionLike`], so the lock scripts run on any of them unchanged.
//!
//! The connection also keeps track of the clean-up the locks leave to background tasks (a
//! dropped guard's release, an abandoned wait's place in line, an acquisition whose answer came
//! after its caller stopped waiting), so that [`Redis::close`](super::Redis::close) can wait
//! for them before the process exits.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::{
    ConnectionLike, ConnectionManager, ConnectionManagerConfig, MultiplexedConnection,
};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo};
use redis::sentinel::SentinelClient;
use redis::{
    AsyncConnectionConfig, Client, Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, Value,
};
use tokio_util::task::TaskTracker;

/// The connection lock scripts are sent on, and its background clean-up. Cloning is cheap and
/// shares both.
#[derive(Clone)]
pub(crate) struct Conn {
    link: Link,
    cleanups: TaskTracker,
}

/// Which kind of deployment the connection reaches.
#[derive(Clone)]
enum Link {
    /// The connection and the server's `host:port`, for messages about the server itself.
    Single(ConnectionManager, Arc<str>),
    Cluster(ClusterConnection),
    Sentinel(SentinelConn),
}

impl Conn {
    fn new(link: Link) -> Conn {
        Conn {
            link,
            cleanups: TaskTracker::new(),
        }
    }

    /// Runs clean-up work in a task of its own, counted until it ends (see [`Conn::settle`]).
    /// On the given runtime: the callers are `Drop` implementations, which may run outside one.
    pub(crate) fn spawn_cleanup<F>(&self, runtime: &tokio::runtime::Handle, work: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.cleanups.spawn_on(work, runtime);
    }

    /// Waits until the clean-up tasks started so far (and any they start) have ended, for at
    /// most `limit`; whether they all did.
    pub(crate) async fn settle(&self, limit: Duration) -> bool {
        // Closing the tracker only lets `wait` finish once it is empty; tasks can still be
        // added. Reopened afterwards, so a handle that keeps being used keeps counting.
        self.cleanups.close();
        let settled = tokio::time::timeout(limit, self.cleanups.wait())
            .await
            .is_ok();
        self.cleanups.reopen();
        settled
    }

    /// The Sentinel connection, if that is what this is (the pub/sub side follows its master).
    pub(crate) fn as_sentinel(&self) -> Option<&SentinelConn> {
        match &self.link {
            Link::Sentinel(sentinel) => Some(sentinel),
            _ => None,
        }
    }

    /// Connects to one server and checks that it is Redis (it must answer `PING` with `PONG`).
    pub(crate) async fn single(client: Client, timeouts: Timeouts) -> Result<Conn, RedisError> {
        let address = Arc::from(client.get_connection_info().addr().to_string());
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(timeouts.connect))
            .set_response_timeout(Some(timeouts.response))
            .set_number_of_retries(2)
            .set_max_delay(Duration::from_secs(1));
        let manager = within(
            timeouts.connect,
            ConnectionManager::new_with_config(client, config),
        )
        .await?;
        let mut conn = Conn::new(Link::Single(manager, address));
        conn.check_is_redis(timeouts).await?;
        Ok(conn)
    }

    /// Connects to a Redis Cluster through any of its nodes.
    pub(crate) async fn cluster(nodes: &[String], timeouts: Timeouts) -> Result<Conn, RedisError> {
        let client = redis::cluster::ClusterClient::builder(nodes.to_vec())
            .connection_timeout(timeouts.connect)
            .response_timeout(timeouts.response)
            .build()?;
        let connection = within(timeouts.connect, client.get_async_connection()).await?;
        let mut conn = Conn::new(Link::Cluster(connection));
        conn.check_is_redis(timeouts).await?;
        Ok(conn)
    }

    /// Connects to the master the Sentinels name `master`.
    pub(crate) async fn sentinel(
        sentinels: &[String],
        master: &str,
        timeouts: Timeouts,
    ) -> Result<Conn, RedisError> {
        let client = SentinelClient::build(
            sentinels.to_vec(),
            master,
            None,
            redis::sentinel::SentinelServerType::Master,
        )?;
        let conn = SentinelConn {
            shared: Arc::new(SentinelShared {
                client: tokio::sync::Mutex::new(client),
                current: Mutex::new(None),
                timeouts,
            }),
        };
        let mut conn = Conn::new(Link::Sentinel(conn));
        conn.check_is_redis(timeouts).await?;
        Ok(conn)
    }

    /// Sends `cmd` to every server that holds this connection's keys, for questions about the
    /// servers themselves (a fence asks how they persist): the one server, the master the
    /// Sentinels name now, or each primary of the cluster. Each answer comes with the
    /// `host:port` it came from; a server's error answer, or a failure to reach it, is that
    /// server's entry. A cluster whose primaries could not all be asked is one entry, named
    /// after the cluster.
    pub(crate) async fn ask_each_primary(
        &self,
        cmd: &Cmd,
    ) -> Vec<(String, Result<Value, RedisError>)> {
        match &self.link {
            Link::Single(manager, address) => {
                let answer = cmd.query_async(&mut manager.clone()).await;
                vec![(address.to_string(), answer)]
            }
            Link::Sentinel(sentinel) => {
                // A connection of its own to the master the Sentinels name, so that the
                // address reported is the one that answered.
                let timeouts = sentinel.shared.timeouts;
                let master = match sentinel.master_client().await {
                    Ok(master) => master,
                    Err(err) => return vec![("the Sentinels' master".to_owned(), Err(err))],
                };
                let address = master.get_connection_info().addr().to_string();
                let config = AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(timeouts.connect))
                    .set_response_timeout(Some(timeouts.response));
                let answer = async {
                    let mut conn = within(
                        timeouts.connect,
                        master.get_multiplexed_async_connection_with_config(&config),
                    )
                    .await?;
                    cmd.query_async(&mut conn).await
                };
                vec![(address, answer.await)]
            }
            Link::Cluster(cluster) => {
                let routing = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
                // Without a response policy the answers come back as a map from each
                // primary's address to its answer, a server's error answer included.
                match cluster.clone().route_command(cmd.clone(), routing).await {
                    Ok(Value::Map(answers)) => answers
                        .into_iter()
                        .map(|(address, answer)| {
                            let address = match address {
                                Value::BulkString(bytes) => {
                                    String::from_utf8_lossy(&bytes).into_owned()
                                }
                                other => format!("{other:?}"),
                            };
                            let answer = match answer {
                                Value::ServerError(err) => Err(RedisError::from(err)),
                                value => Ok(value),
                            };
                            (address, answer)
                        })
                        .collect(),
                    Ok(other) => vec![(
                        "the cluster's primaries".to_owned(),
                        Err(unexpected_reply("per-primary answers", other)),
                    )],
                    Err(err) => vec![("the cluster's primaries".to_owned(), Err(err))],
                }
            }
        }
    }

    /// `PING` must come back as `PONG`: anything else (a garbage reply, an HTTP server, a
    /// silent port) is reported here rather than as a puzzling script failure later.
    async fn check_is_redis(&mut self, timeouts: Timeouts) -> Result<(), RedisError> {
        let reply: Value = within(timeouts.response, redis::cmd("PING").query_async(self)).await?;
        let pong = match &reply {
            Value::SimpleString(s) => s == "PONG",
            Value::BulkString(b) => b == b"PONG",
            _ => false,
        };
        if pong {
            return Ok(());
        }
        Err(RedisError::from((
            ErrorKind::UnexpectedReturnType,
            "the server did not answer PING with PONG; is it Redis?",
            format!("{reply:?}"),
        )))
    }
}

/// Connect and response time limits, from [`RedisOptions`](super::RedisOptions).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Timeouts {
    pub connect: Duration,
    pub response: Duration,
}

/// Runs `future` for at most `limit`; running out is an I/O timeout error.
pub(crate) async fn within<T>(
    limit: Duration,
    future: impl Future<Output = Result<T, RedisError>>,
) -> Result<T, RedisError> {
    match tokio::time::timeout(limit, future).await {
        Ok(result) => result,
        Err(_) => Err(timed_out()),
    }
}

/// The error for a server that did not answer in time.
pub(crate) fn timed_out() -> RedisError {
    RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        "the Redis server did not answer in time",
    ))
}

/// The connection to a Sentinel-managed master. It caches a multiplexed connection to the
/// master and drops it on errors that mean "this is not (or no longer) the master": I/O errors,
/// timeouts and `READONLY` (a demoted master). The next command asks the Sentinels again.
#[derive(Clone)]
pub(crate) struct SentinelConn {
    shared: Arc<SentinelShared>,
}

struct SentinelShared {
    client: tokio::sync::Mutex<SentinelClient>,
    current: Mutex<Option<MultiplexedConnection>>,
    timeouts: Timeouts,
}

impl SentinelConn {
    async fn connection(&self) -> Result<MultiplexedConnection, RedisError> {
        if let Some(conn) = self.cached() {
            return Ok(conn);
        }
        let mut sentinel = self.shared.client.lock().await;
        // Another task may have connected while we waited for the Sentinel client.
        if let Some(conn) = self.cached() {
            return Ok(conn);
        }
        let timeouts = self.shared.timeouts;
        let master = within(timeouts.connect, sentinel.async_get_client()).await?;
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(timeouts.connect))
            .set_response_timeout(Some(timeouts.response));
        let conn = within(
            timeouts.connect,
            master.get_multiplexed_async_connection_with_config(&config),
        )
        .await?;
        *self.lock_current() = Some(conn.clone());
        Ok(conn)
    }

    fn cached(&self) -> Option<MultiplexedConnection> {
        self.lock_current().clone()
    }

    fn lock_current(&self) -> std::sync::MutexGuard<'_, Option<MultiplexedConnection>> {
        // The cache is a plain Option: a panic elsewhere cannot leave it half-written.
        crate::sync::lock(&self.shared.current)
    }

    fn forget_on(&self, error: &RedisError) {
        let stale = error.is_io_error()
            || error.is_timeout()
            || error.is_connection_dropped()
            || error.is_connection_refusal()
            || error.code() == Some("READONLY");
        if stale {
            *self.lock_current() = None;
        }
    }

    /// The Redis client of the current master, for the pub/sub connection.
    pub(crate) async fn master_client(&self) -> Result<Client, RedisError> {
        let mut sentinel = self.shared.client.lock().await;
        within(self.shared.timeouts.connect, sentinel.async_get_client()).await
    }
}

impl ConnectionLike for SentinelConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let mut conn = self.connection().await?;
            let result = conn.req_packed_command(cmd).await;
            if let Err(error) = &result {
                self.forget_on(error);
            }
            result
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let mut conn = self.connection().await?;
            let result = conn.req_packed_commands(pipeline, offset, count).await;
            if let Err(error) = &result {
                self.forget_on(error);
            }
            result
        })
    }

    fn get_db(&self) -> i64 {
        0
    }
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match &mut self.link {
            Link::Single(c, _) => c.req_packed_command(cmd),
            Link::Cluster(c) => c.req_packed_command(cmd),
            Link::Sentinel(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match &mut self.link {
            Link::Single(c, _) => c.req_packed_commands(pipeline, offset, count),
            Link::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
            Link::Sentinel(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match &self.link {
            Link::Single(c, _) => c.get_db(),
            Link::Cluster(c) => c.get_db(),
            Link::Sentinel(c) => c.get_db(),
        }
    }
}

/// The error for a script answer of the wrong shape (a script of another version under the
/// same name, or a key of another type).
pub(crate) fn unexpected_reply(what: &'static str, reply: impl std::fmt::Debug) -> RedisError {
    RedisError::from((ErrorKind::UnexpectedReturnType, what, format!("{reply:?}")))
}
