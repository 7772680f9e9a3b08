//! [`Session`]: one etcd lease, kept alive, and the one place that knows whether it still is.
//!
//! Every key a recipe writes is attached to the session's lease, so when the process dies the
//! lease runs out and etcd deletes the keys: that is what frees a crashed holder's lock. The
//! session renews the lease every third of its TTL (as Go's `concurrency.Session` does) on a
//! keep-alive stream, and keeps its own conservative deadline ([`Session::valid_until`]): the
//! time the last *successful* renewal was sent, plus the TTL etcd granted, minus the drift
//! allowance of [`crate::grant`]. etcd cannot expire the lease before that instant.
//!
//! Invariants:
//! - **Loss is final.** Once the deadline passes without a renewal, a renewal answers that the
//!   lease is gone, or the session is closed, [`Session::lost`] resolves and
//!   [`Session::is_alive`] is false for good, even if a later renewal would have succeeded:
//!   the holders were told to stop, so the lease is revoked (best effort) rather than trusted
//!   again. Open a new session to go on.
//! - **A paused process knows first.** The deadline is read from the monotonic clock, which
//!   runs through SIGSTOP; the keep-alive task checks it before every renewal, so a process
//!   resumed after its TTL reports the loss without a round trip.
//! - **Nothing waits unbounded on an unreachable cluster.** Connecting is bounded by the
//!   connect timeout; every request afterwards by the request timeout (the connect timeout
//!   too), so a dead cluster turns into errors and, one TTL later, a lost session.

use std::collections::HashMap;
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tonic::transport::ClientTlsConfig;

use crate::TlsFiles;
use crate::error::{ConnectCause, Error, Result};
use crate::etcd::error::EtcdError;
use crate::etcd::rpc::Client;
use crate::grant::trusted_until;
use crate::probe::{combine, dial};
use crate::sync::lock;

/// The session TTL when none is given: Go's `concurrency.DefaultTTL` (60 s).
pub const DEFAULT_TTL: Duration = Duration::from_secs(60);
/// How long connecting may take when no connect timeout is given.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The shortest wait for a keep-alive answer before the stream is opened anew.
const MIN_PATIENCE: Duration = Duration::from_secs(1);
/// How long a failed request or stream waits before it is tried again.
pub(crate) const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// A connection to an etcd cluster with one lease, kept alive until the session is closed or
/// lost. Clones share the lease. The recipes ([`mutex`](Session::mutex),
/// [`rw_lock`](Session::rw_lock), [`semaphore`](Session::semaphore),
/// [`election`](Session::election)) attach their keys to it.
///
/// ```no_run
/// # async fn demo() -> lockkeeper::Result<()> {
/// use std::time::Duration;
/// use lockkeeper::etcd::Session;
///
/// let session = Session::builder("127.0.0.1:2379,127.0.0.1:22379")
///     .ttl(Duration::from_secs(10))
///     .connect()
///     .await?;
/// println!("lease {:x}", session.lease_id());
/// session.close().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Session {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    lease: i64,
    ttl: Duration,
    endpoints: String,
    life: Arc<watch::Sender<Life>>,
    keep_alive: StdMutex<Option<JoinHandle<()>>>,
    /// One in-process lock per key whose name is the same for every acquisition of the
    /// session (`NAME/{lease:x}`, the Go layout): two handles of this session on one lock must
    /// not both believe the one key is theirs.
    local: LocalLocks,
}

/// The session's in-process locks, one per key (see `Inner::local`).
#[derive(Default)]
struct LocalLocks(StdMutex<HashMap<Vec<u8>, Arc<tokio::sync::Mutex<()>>>>);

impl LocalLocks {
    /// The lock of `key`. Forgets the locks nobody holds or waits for, so the map stays as
    /// small as the set of locks in use.
    fn of(&self, key: &[u8]) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = lock(&self.0);
        locks.retain(|_, mutex| Arc::strong_count(mutex) > 1);
        Arc::clone(locks.entry(key.to_vec()).or_default())
    }
}

/// What the session knows about its lease.
#[derive(Clone, Copy, Debug)]
struct Life {
    valid_until: Instant,
    ended: bool,
}

/// Settings for [`Session::builder`].
#[derive(Clone, Debug)]
#[must_use = "nothing connects until `connect()`"]
pub struct SessionBuilder {
    endpoints: String,
    ttl: Duration,
    connect_timeout: Duration,
    tls: Option<TlsFiles>,
}

impl SessionBuilder {
    /// The lease TTL (default 60 s, as Go's concurrency package). etcd counts leases in whole
    /// seconds: a fraction is rounded up, zero is refused, and etcd itself raises a TTL below
    /// its minimum (about 1.5 election timeouts); the granted TTL is what the session trusts.
    pub fn ttl(mut self, ttl: Duration) -> SessionBuilder {
        self.ttl = ttl;
        self
    }

    /// How long connecting may take in all (default 5 s); also the timeout of each request.
    pub fn connect_timeout(mut self, timeout: Duration) -> SessionBuilder {
        self.connect_timeout = timeout;
        self
    }

    /// Connects over TLS (`https://` endpoints, or plain `host:port` ones): each member's
    /// certificate must be signed by `files.ca` and valid for its host name; `files.cert` is
    /// presented to members that ask for one (`--client-cert-auth`). Default: plain HTTP/2.
    pub fn tls(mut self, files: TlsFiles) -> SessionBuilder {
        self.tls = Some(files);
        self
    }

    /// Connects and grants the lease. [`Error::Connect`] naming each address and what happened
    /// there when no member granted it within the connect timeout;
    /// [`Error::InvalidArgument`] for an empty endpoint list, a zero TTL or timeout.
    pub async fn connect(self) -> Result<Session> {
        let addresses = parse_endpoints(&self.endpoints, self.tls.is_some())?;
        let tls = self.tls.as_ref().map(tls_config).transpose()?;
        let ttl_secs = whole_seconds(self.ttl)?;
        if self.connect_timeout.is_zero() {
            return Err(Error::InvalidArgument(format!(
                "connect_timeout for the etcd endpoints {:?} must be greater than zero",
                self.endpoints
            )));
        }
        let limit = self.connect_timeout;
        let deadline = Instant::now() + limit;
        let granted = tokio::time::timeout_at(attempt_deadline(deadline, limit), async {
            let client = Client::connect(&addresses, limit, tls.as_ref())?;
            let sent = Instant::now();
            let grant = client.grant(ttl_secs).await?;
            Ok::<_, EtcdError>((client, sent, grant))
        })
        .await;
        let (client, sent, grant) = match granted {
            Ok(Ok(granted)) => granted,
            Ok(Err(err)) if tls.is_some() => return Err(tls_failure(&addresses, &err)),
            Ok(Err(err)) => return Err(diagnose(&addresses, deadline, limit, Some(err)).await),
            Err(_) => return Err(diagnose(&addresses, deadline, limit, None).await),
        };
        let granted_ttl = Duration::from_secs(u64::try_from(grant.ttl).unwrap_or(0));
        if granted_ttl.is_zero() {
            return Err(Error::Connect {
                address: addresses.join(","),
                cause: ConnectCause::Rejected(format!(
                    "the lease was granted with TTL {} ({})",
                    grant.ttl, grant.error
                )),
            });
        }
        let life = Arc::new(watch::Sender::new(Life {
            valid_until: trusted_until(sent, granted_ttl),
            ended: false,
        }));
        let inner = Arc::new(Inner {
            client: client.clone(),
            lease: grant.id,
            ttl: granted_ttl,
            endpoints: addresses.join(","),
            life: Arc::clone(&life),
            keep_alive: StdMutex::default(),
            local: LocalLocks::default(),
        });
        let task = tokio::spawn(keep_alive(client, grant.id, granted_ttl, life));
        *lock(&inner.keep_alive) = Some(task);
        Ok(Session { inner })
    }
}

/// When a connection attempt with `limit` in all, ending at `deadline`, gives up: a failure is
/// diagnosed within the limit too, so the attempt leaves the probes a fifth of it (at most 1 s).
fn attempt_deadline(deadline: Instant, limit: Duration) -> Instant {
    deadline - (limit / 5).min(Duration::from_secs(1))
}

impl Session {
    /// Connects to `endpoints` (`host:port[,host:port]`, an `http://` in front allowed) with
    /// the default TTL (60 s) and connect timeout (5 s).
    pub async fn connect(endpoints: &str) -> Result<Session> {
        Session::builder(endpoints).connect().await
    }

    /// A session with settings other than the defaults.
    pub fn builder(endpoints: &str) -> SessionBuilder {
        SessionBuilder {
            endpoints: endpoints.to_owned(),
            ttl: DEFAULT_TTL,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            tls: None,
        }
    }

    /// The lease's ID; keys of this session are named after it in hex (`NAME/{id:x}`), as
    /// etcdctl prints them.
    pub fn lease_id(&self) -> i64 {
        self.inner.lease
    }

    /// The TTL etcd granted.
    pub fn ttl(&self) -> Duration {
        self.inner.ttl
    }

    /// The endpoints, as given (without `http://`).
    pub fn endpoints(&self) -> &str {
        &self.inner.endpoints
    }

    /// Whether the lease is certainly still alive: not lost, not closed, and within
    /// [`valid_until`](Session::valid_until). Local state only, no round trip.
    pub fn is_alive(&self) -> bool {
        let life = *self.inner.life.borrow();
        !life.ended && Instant::now() < life.valid_until
    }

    /// The instant until which etcd cannot have expired the lease: the send time of the last
    /// successful renewal, plus the granted TTL, minus 1% + 2 ms for clock drift. `None` once
    /// the session is lost.
    pub fn valid_until(&self) -> Option<Instant> {
        let life = *self.inner.life.borrow();
        self.is_alive().then_some(life.valid_until)
    }

    /// Resolves once the session is lost: a renewal found the lease gone, renewals failed until
    /// the deadline passed, or the session was closed. Cancel-safe.
    pub async fn lost(&self) {
        lost(&self.inner.life).await;
    }

    /// Revokes the lease, which deletes every key of the session (releasing its locks and
    /// ending its candidacies), and ends the session. [`Error::SessionLost`] when it was lost
    /// already (its keys are gone or going anyway).
    pub async fn close(&self) -> Result<()> {
        if !self.is_alive() {
            self.end();
            return Err(Error::SessionLost);
        }
        self.end();
        self.client().revoke(self.inner.lease).await?;
        Ok(())
    }

    fn end(&self) {
        self.inner.life.send_modify(|life| life.ended = true);
        if let Some(task) = lock(&self.inner.keep_alive).take() {
            task.abort();
        }
    }

    /// The session's client: its connections to the cluster, shared by every recipe.
    pub(crate) fn client(&self) -> &Client {
        &self.inner.client
    }

    /// The in-process lock of `key` (see `Inner::local`).
    pub(crate) fn local_lock(&self, key: &[u8]) -> Arc<tokio::sync::Mutex<()>> {
        self.inner.local.of(key)
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        let Some(task) = lock(&self.keep_alive).take() else {
            return;
        };
        task.abort();
        if self.life.borrow().ended {
            return;
        }
        // The last handle went without close(): revoke, so the keys do not outlive the
        // session by a TTL.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let (client, lease) = (self.client.clone(), self.lease);
            runtime.spawn(async move {
                let _ = client.revoke(lease).await;
            });
        }
    }
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("endpoints", &self.inner.endpoints)
            .field("lease", &format_args!("{:x}", self.inner.lease))
            .field("ttl", &self.inner.ttl)
            .field("alive", &self.is_alive())
            .finish()
    }
}

async fn lost(life: &watch::Sender<Life>) {
    let mut seen = life.subscribe();
    loop {
        let now = *seen.borrow_and_update();
        if now.ended || Instant::now() >= now.valid_until {
            return;
        }
        tokio::select! {
            changed = seen.changed() => if changed.is_err() { return },
            () = tokio::time::sleep_until(now.valid_until) => {}
        }
    }
}

/// Renews the lease every third of its TTL until it is lost; then marks the session lost and
/// revokes the lease (best effort).
async fn keep_alive(client: Client, lease: i64, ttl: Duration, life: Arc<watch::Sender<Life>>) {
    let every = ttl / 3;
    'stream: loop {
        let valid_until = life.borrow().valid_until;
        if Instant::now() >= valid_until {
            break;
        }
        let patience = (Instant::now() + every.max(MIN_PATIENCE)).min(valid_until);
        let opened = tokio::time::timeout_at(patience, client.keep_alive(lease)).await;
        let mut keeper = match opened {
            Ok(Ok(Some(stream))) => stream,
            Ok(Ok(None)) => {
                tracing::warn!(lease, "etcd answered that the session's lease is gone");
                break;
            }
            Ok(Err(err)) => {
                tracing::debug!(lease, %err, "opening the keep-alive stream failed");
                tokio::time::sleep(RETRY_PAUSE).await;
                continue;
            }
            Err(_) => continue,
        };
        loop {
            let valid_until = life.borrow().valid_until;
            // Checked before each renewal: a process resumed after a pause past its deadline
            // must not renew a lease that etcd may have expired and handed on.
            if Instant::now() >= valid_until {
                break 'stream;
            }
            let sent = Instant::now();
            if keeper.renew().await.is_err() {
                tokio::time::sleep(RETRY_PAUSE).await;
                continue 'stream;
            }
            // A member that does not answer within a renewal interval (stopped, cut off) is left
            // for a new stream, which the balanced channel may open on another member; an
            // answer later than the deadline is no use at all.
            let patience = (sent + every.max(MIN_PATIENCE)).min(valid_until);
            let answer = tokio::time::timeout_at(patience, keeper.answer()).await;
            match answer {
                Ok(Ok(Some(answer))) if answer.ttl > 0 => {
                    let granted = Duration::from_secs(u64::try_from(answer.ttl).unwrap_or(0));
                    life.send_modify(|life| {
                        life.valid_until = life.valid_until.max(trusted_until(sent, granted));
                    });
                }
                Ok(Ok(Some(_))) => {
                    tracing::warn!(lease, "etcd answered that the session's lease is gone");
                    break 'stream;
                }
                Ok(Ok(None) | Err(_)) => {
                    tokio::time::sleep(RETRY_PAUSE).await;
                    continue 'stream;
                }
                // Past the deadline the loop's first check ends the session.
                Err(_) => continue 'stream,
            }
            tokio::time::sleep_until(sent + every).await;
        }
    }
    life.send_modify(|life| life.ended = true);
    tracing::warn!(lease, "the etcd session is lost");
    let _ = client.revoke(lease).await;
}

/// `host:port` addresses of an endpoint list; an `http://` prefix is taken off.
/// The `host:port` of each endpoint. `https://` ones need `tls` (files to trust the members
/// by), and with it `http://` ones are refused: one session is all TLS or none.
fn parse_endpoints(endpoints: &str, tls: bool) -> Result<Vec<String>> {
    let mut addresses = Vec::new();
    for endpoint in endpoints.split(',') {
        let endpoint = endpoint.trim();
        let (scheme, address) = match endpoint.split_once("://") {
            Some((scheme, address)) => (Some(scheme), address),
            None => (None, endpoint),
        };
        match (scheme, tls) {
            (None, _) | (Some("http"), false) | (Some("https"), true) => {}
            (Some("https"), false) => {
                return Err(Error::InvalidArgument(format!(
                    "etcd endpoint {endpoint:?} in {endpoints:?}: https:// needs the TLS files \
                     (SessionBuilder::tls: the CA that signed the members' certificates)"
                )));
            }
            (Some(scheme), _) => {
                return Err(Error::InvalidArgument(format!(
                    "etcd endpoint {endpoint:?} in {endpoints:?}: {scheme}:// where the \
                     session is {}",
                    if tls {
                        "over TLS (https://)"
                    } else {
                        "plain (http://)"
                    }
                )));
            }
        }
        let address = address.strip_suffix('/').unwrap_or(address);
        let port_ok = address
            .rsplit_once(':')
            .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
        if !port_ok {
            return Err(Error::InvalidArgument(format!(
                "etcd endpoint {endpoint:?} in {endpoints:?} is not host:port"
            )));
        }
        addresses.push(address.to_owned());
    }
    Ok(addresses)
}

/// A TTL in the whole seconds etcd takes, rounded up; zero is refused.
/// tonic's TLS settings for `files`, whose files are read here (and named if unusable).
fn tls_config(files: &TlsFiles) -> Result<ClientTlsConfig> {
    use tonic::transport::{Certificate, Identity};
    // Parsed whole first, so a file that is not PEM is named rather than tonic's error.
    files
        .config()
        .map_err(|e| Error::InvalidArgument(format!("TLS: {e}")))?;
    let read = |path: &std::path::Path| {
        std::fs::read(path).map_err(|e| {
            Error::InvalidArgument(format!("TLS: cannot read {}: {e}", path.display()))
        })
    };
    let mut config = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(read(&files.ca)?));
    if let Some((cert, key)) = &files.cert {
        config = config.identity(Identity::from_pem(read(cert)?, read(key)?));
    }
    Ok(config)
}

/// A TLS connection that failed: the transport's own account, which carries the TLS reason
/// (a plain-text probe could not tell it).
fn tls_failure(addresses: &[String], err: &EtcdError) -> Error {
    Error::Connect {
        address: addresses.join(","),
        cause: ConnectCause::Other(format!("TLS: {err}")),
    }
}

fn whole_seconds(ttl: Duration) -> Result<i64> {
    if ttl.is_zero() {
        return Err(Error::InvalidArgument(
            "ttl of an etcd session must be at least 1 s (etcd counts leases in whole seconds), got 0s"
                .into(),
        ));
    }
    let secs = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
    i64::try_from(secs)
        .map_err(|_| Error::InvalidArgument(format!("ttl of an etcd session is too long: {ttl:?}")))
}

/// Why no member granted the lease: each address dialled, by `deadline` (the connect
/// timeout's end), to tell a dead port from a live one that would not answer in time.
async fn diagnose(
    addresses: &[String],
    deadline: Instant,
    limit: Duration,
    err: Option<EtcdError>,
) -> Error {
    let mut causes = Vec::new();
    for address in addresses {
        let cause = match dial(address, deadline, limit).await {
            Err(cause) => cause,
            Ok(_) => match &err {
                Some(err) => match err.status_message() {
                    Some(answered) => ConnectCause::Rejected(answered.to_owned()),
                    None => ConnectCause::Other(err.to_string()),
                },
                None => ConnectCause::NoAnswer(limit),
            },
        };
        causes.push((address.clone(), cause));
    }
    Error::Connect {
        address: addresses.join(","),
        cause: combine(causes),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_parsed_and_bad_ones_named() {
        assert_eq!(
            parse_endpoints("127.0.0.1:2379, http://h:1/", false).unwrap(),
            vec!["127.0.0.1:2379".to_owned(), "h:1".to_owned()]
        );
        for bad in [
            "",
            "h",
            "h:",
            ":1",
            "h:x",
            "a:1,",
            "https://h:1",
            "ftp://h:1",
        ] {
            let err = parse_endpoints(bad, false).unwrap_err().to_string();
            assert!(err.contains(&format!("{bad:?}")), "{bad}: {err}");
        }
        assert_eq!(
            parse_endpoints("https://h:1,h:2", true).unwrap(),
            vec!["h:1".to_owned(), "h:2".to_owned()]
        );
        assert!(parse_endpoints("http://h:1", true).is_err());
    }

    #[test]
    fn a_connection_attempt_leaves_the_diagnosis_a_fifth_of_the_limit_up_to_a_second() {
        let deadline = Instant::now() + Duration::from_secs(60);
        let share = |limit| deadline - attempt_deadline(deadline, limit);
        assert_eq!(share(Duration::from_secs(2)), Duration::from_millis(400));
        assert_eq!(share(Duration::from_secs(30)), Duration::from_secs(1));
    }

    #[test]
    fn local_locks_are_one_per_key_and_forgotten_when_unused() {
        let locks = LocalLocks::default();
        let a = locks.of(b"a");
        assert!(Arc::ptr_eq(&a, &locks.of(b"a")), "one lock per key");
        drop(a);
        let b = locks.of(b"b");
        let kept: Vec<Vec<u8>> = lock(&locks.0).keys().cloned().collect();
        assert_eq!(kept, vec![b"b".to_vec()], "a's lock, unused, is forgotten");
        drop(b);
    }

    #[test]
    fn ttls_are_whole_seconds_rounded_up() {
        assert_eq!(whole_seconds(Duration::from_millis(1500)).unwrap(), 2);
        assert_eq!(whole_seconds(Duration::from_secs(3)).unwrap(), 3);
        assert!(matches!(
            whole_seconds(Duration::ZERO),
            Err(Error::InvalidArgument(_))
        ));
    }
}
