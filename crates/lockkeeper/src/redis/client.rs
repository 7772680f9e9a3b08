//! The [`Redis`] handle: the connections every lock of the family shares, and its options.

use std::sync::Arc;
use std::time::Duration;

use super::conn::{Conn, Timeouts, within};
use super::diagnose::{connect_error, connect_error_of_many};
use super::keys::{self, DEFAULT_PREFIX};
use super::lease::{DEFAULT_WATCHDOG_TTL, LeaseSpec, check_ttl};
use super::pubsub::{PubSource, Subscriber};
use crate::{ConnectCause, Error, Result, TlsFiles};

/// Settings of a [`Redis`] handle.
///
/// ```
/// use std::time::Duration;
/// use lockkeeper::redis::RedisOptions;
///
/// let options = RedisOptions::new()
///     .key_prefix("billing")
///     .watchdog_timeout(Duration::from_secs(10))
///     .connect_timeout(Duration::from_secs(3));
/// # let _ = options;
/// ```
#[derive(Clone, Debug)]
pub struct RedisOptions {
    prefix: String,
    watchdog: Duration,
    connect_timeout: Duration,
    response_timeout: Duration,
    tls: Option<TlsFiles>,
}

impl Default for RedisOptions {
    fn default() -> RedisOptions {
        RedisOptions {
            prefix: DEFAULT_PREFIX.to_string(),
            watchdog: DEFAULT_WATCHDOG_TTL,
            connect_timeout: Duration::from_secs(5),
            response_timeout: Duration::from_secs(5),
            tls: None,
        }
    }
}

impl RedisOptions {
    /// The defaults: prefix `lockkeeper`, 30 s watchdog lease, 5 s to connect, 5 s to answer.
    pub fn new() -> RedisOptions {
        RedisOptions::default()
    }

    /// The first part of every key (`PREFIX:lease:{name}`), to keep applications sharing one
    /// Redis apart. Must not contain braces.
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> RedisOptions {
        self.prefix = prefix.into();
        self
    }

    /// The lease the watchdog keeps renewing for locks taken without an explicit lease
    /// (Redisson's `lockWatchdogTimeout`, 30 s by default). A holder that dies keeps the lock
    /// for at most this long.
    pub fn watchdog_timeout(mut self, ttl: Duration) -> RedisOptions {
        self.watchdog = ttl;
        self
    }

    /// How long connecting may take in all: the TCP connection, the library's handshake and
    /// the first `PING`, with the library's reconnection attempts. Past it, or sooner when the
    /// server refuses, connecting fails with [`Error::Connect`] naming the address and the
    /// cause (refused, timed out, not Redis). Default 5 s.
    pub fn connect_timeout(mut self, timeout: Duration) -> RedisOptions {
        self.connect_timeout = timeout;
        self
    }

    /// How long one command may wait for its answer.
    pub fn response_timeout(mut self, timeout: Duration) -> RedisOptions {
        self.response_timeout = timeout;
        self
    }

    /// The TLS files for a `rediss://` server: the server's certificate must be signed by
    /// `files.ca` (instead of a CA the system trusts) and valid for the URL's host;
    /// `files.cert` is presented to a server that asks for a client certificate
    /// (`tls-auth-clients`). Without it, `rediss://` trusts the system's CAs.
    pub fn tls(mut self, files: TlsFiles) -> RedisOptions {
        self.tls = Some(files);
        self
    }

    fn check(&self) -> Result<()> {
        keys::check_prefix(&self.prefix)?;
        check_ttl("watchdog timeout", self.watchdog)?;
        check_ttl("connect timeout", self.connect_timeout)?;
        check_ttl("response timeout", self.response_timeout)?;
        Ok(())
    }

    fn timeouts(&self) -> Timeouts {
        Timeouts {
            connect: self.connect_timeout,
            response: self.response_timeout,
        }
    }
}

/// A connection to Redis (one server, a cluster, or a Sentinel-managed master) that hands out
/// locks. Cheap to clone: clones share the command connection and the pub/sub connection.
///
/// A handle holds at most two connections: one for commands (multiplexed: every lock of the
/// handle shares it, and it reconnects on its own) and, from the first time one of its locks
/// has to wait, one pub/sub connection that all its waiters share, each lock's channel
/// subscribed while someone waits on it. Clone a handle rather than connecting again.
///
/// Each handle has an *owner id* (a random UUID unless set with [`Redis::with_owner_id`]),
/// which is what reentrant locks count re-entries for.
///
/// ```no_run
/// # async fn demo() -> lockkeeper::Result<()> {
/// use lockkeeper::redis::Redis;
///
/// let redis = Redis::connect("redis://127.0.0.1:6379").await?;
/// let guard = redis.lease_lock("orders").lock().await?;
/// println!("holding orders with fencing token {}", guard.fencing_token());
/// guard.release().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Redis {
    shared: Arc<Shared>,
    owner: Arc<str>,
}

struct Shared {
    conn: Conn,
    subscriber: Subscriber,
    options: RedisOptions,
}

impl Redis {
    /// Connects to one Redis server (`redis://host:port[/db]`, `rediss://` for TLS) with
    /// default options. Fails if the server does not answer `PING` like Redis.
    pub async fn connect(url: &str) -> Result<Redis> {
        Redis::connect_with(url, RedisOptions::default()).await
    }

    /// Connects to one Redis server with `options`.
    pub async fn connect_with(url: &str, options: RedisOptions) -> Result<Redis> {
        options.check()?;
        check_url(url)?;
        let client = open(url, options.tls.as_ref())?;
        let address = client.get_connection_info().addr().to_string();
        // The library gets three quarters of the time; if it fails, a probe of the address
        // says why in what is left, so the whole call stays within the connect timeout.
        let limit = options.connect_timeout;
        let deadline = tokio::time::Instant::now() + limit;
        let connecting = within(
            limit * 3 / 4,
            Conn::single(client.clone(), options.timeouts()),
        );
        let conn = match connecting.await {
            Ok(conn) => conn,
            // Plain-text probes cannot say why a TLS connection failed; the library's error
            // carries the TLS reason.
            Err(err) if is_tls(url) && !err.is_connection_refusal() => {
                return Err(Error::Connect {
                    address,
                    cause: ConnectCause::Other(format!("TLS: {err}")),
                });
            }
            Err(err) => return Err(connect_error(&address, err, deadline, limit).await),
        };
        let subscriber = Subscriber::start(PubSource::Single(Box::new(client)), options.timeouts());
        Ok(Redis::new(conn, subscriber, options))
    }

    /// Connects to a Redis Cluster through any of `nodes` (URLs). Each lock's keys share a hash
    /// tag, so its scripts run on the one node owning its slot.
    pub async fn connect_cluster<S: AsRef<str>>(
        nodes: &[S],
        options: RedisOptions,
    ) -> Result<Redis> {
        options.check()?;
        if nodes.is_empty() {
            return Err(Error::InvalidArgument(
                "a cluster needs at least one node URL".into(),
            ));
        }
        let urls: Vec<String> = nodes.iter().map(|n| n.as_ref().to_string()).collect();
        let mut clients = Vec::new();
        for url in &urls {
            check_url(url)?;
            clients.push(redis::Client::open(url.as_str())?);
        }
        let conn = Conn::cluster(&urls, options.timeouts())
            .await
            .map_err(|err| connect_error_of_many(&urls, err, options.connect_timeout))?;
        let subscriber = Subscriber::start(PubSource::Cluster(clients), options.timeouts());
        Ok(Redis::new(conn, subscriber, options))
    }

    /// Connects to the master that the Sentinels at `sentinels` (URLs) know as `master_name`,
    /// and follows it through failovers (a connection that errors or finds a read-only replica
    /// asks the Sentinels again).
    pub async fn connect_sentinel<S: AsRef<str>>(
        sentinels: &[S],
        master_name: &str,
        options: RedisOptions,
    ) -> Result<Redis> {
        options.check()?;
        if sentinels.is_empty() {
            return Err(Error::InvalidArgument(
                "Sentinel needs at least one sentinel URL".into(),
            ));
        }
        if master_name.is_empty() {
            return Err(Error::InvalidArgument(
                "the Sentinel master name must not be empty".into(),
            ));
        }
        let urls: Vec<String> = sentinels.iter().map(|n| n.as_ref().to_string()).collect();
        for url in &urls {
            check_url(url)?;
        }
        let conn = Conn::sentinel(&urls, master_name, options.timeouts())
            .await
            .map_err(|err| connect_error_of_many(&urls, err, options.connect_timeout))?;
        let Some(sentinel) = conn.as_sentinel() else {
            unreachable!("Conn::sentinel returns a Sentinel connection");
        };
        let subscriber =
            Subscriber::start(PubSource::Sentinel(sentinel.clone()), options.timeouts());
        Ok(Redis::new(conn, subscriber, options))
    }

    fn new(conn: Conn, subscriber: Subscriber, options: RedisOptions) -> Redis {
        Redis {
            shared: Arc::new(Shared {
                conn,
                subscriber,
                options,
            }),
            owner: Arc::from(uuid::Uuid::new_v4().to_string()),
        }
    }

    /// This handle's owner id: the identity reentrant locks count re-entries for.
    pub fn owner_id(&self) -> &str {
        &self.owner
    }

    /// A handle sharing this one's connections with another owner id. Reentrant locks taken
    /// through handles (in any task or process) with the same owner id count as one owner.
    pub fn with_owner_id(&self, owner: impl Into<String>) -> Result<Redis> {
        let owner = owner.into();
        keys::check_owner(&owner)?;
        Ok(Redis {
            shared: Arc::clone(&self.shared),
            owner: Arc::from(owner),
        })
    }

    /// The options this handle was made with.
    pub fn options(&self) -> &RedisOptions {
        &self.shared.options
    }

    /// Sends one raw command (for inspection and tests: `PTTL`, `EXISTS`, ...).
    pub async fn command<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T> {
        let mut conn = self.conn();
        Ok(cmd.query_async(&mut conn).await?)
    }

    /// Lets the clean-up this handle's locks left to background tasks finish: a dropped guard's
    /// release, an abandoned wait's place in line, an acquisition whose answer came after its
    /// caller stopped waiting (given back). Call it before the process exits: one that ends
    /// first cuts that work short, and a place left at the head of a line turns `try_lock`
    /// callers away until it lapses. Waits at most three response timeouts (a script the
    /// server has forgotten costs two more round trips); `true` if everything finished. Guards
    /// still held are not released by it, and the handle keeps working afterwards.
    ///
    /// ```no_run
    /// # async fn demo(redis: lockkeeper::redis::Redis) -> lockkeeper::Result<()> {
    /// let lock = redis.lease_lock("nightly");
    /// let waiting = tokio::time::timeout(std::time::Duration::from_secs(1), lock.lock()).await;
    /// drop(waiting); // gave up: the place in line is left in a background task
    /// redis.close().await; // ... which is done before the process exits
    /// # Ok(()) }
    /// ```
    pub async fn close(&self) -> bool {
        self.shared
            .conn
            .settle(3 * self.shared.options.response_timeout)
            .await
    }

    pub(crate) fn conn(&self) -> Conn {
        self.shared.conn.clone()
    }

    pub(crate) fn subscriber(&self) -> &Subscriber {
        &self.shared.subscriber
    }

    pub(crate) fn prefix(&self) -> &str {
        &self.shared.options.prefix
    }

    /// The lease settings a new lock starts with.
    pub(crate) fn default_lease(&self) -> LeaseSpec {
        LeaseSpec::new(self.shared.options.watchdog)
    }
}

impl std::fmt::Debug for Redis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redis")
            .field("owner", &self.owner)
            .field("options", &self.shared.options)
            .finish_non_exhaustive()
    }
}

fn is_tls(url: &str) -> bool {
    url.get(..9)
        .is_some_and(|scheme| scheme.eq_ignore_ascii_case("rediss://"))
}

/// A client of the server at `url`; a `rediss://` one with `tls`'s CA and certificate when
/// given. A TLS file that cannot be read is named.
fn open(url: &str, tls: Option<&TlsFiles>) -> Result<redis::Client> {
    let Some(files) = tls.filter(|_| is_tls(url)) else {
        return Ok(redis::Client::open(url)?);
    };
    let read = |path: &std::path::Path| {
        std::fs::read(path).map_err(|e| {
            Error::InvalidArgument(format!("TLS: cannot read {}: {e}", path.display()))
        })
    };
    // Parsed here as well, so a file that is not PEM is named rather than the library's
    // error.
    files
        .config()
        .map_err(|e| Error::InvalidArgument(format!("TLS: {e}")))?;
    let client_tls = match &files.cert {
        Some((cert, key)) => Some(redis::ClientTlsConfig {
            client_cert: read(cert)?,
            client_key: read(key)?,
        }),
        None => None,
    };
    let certificates = redis::TlsCertificates {
        client_tls,
        root_cert: Some(read(&files.ca)?),
    };
    Ok(redis::Client::build_with_tls(url, certificates)?)
}

fn check_url(url: &str) -> Result<()> {
    if url.trim().is_empty() {
        return Err(Error::InvalidArgument(
            "the Redis URL must not be empty".into(),
        ));
    }
    Ok(())
}
