//! The ZooKeeper session every recipe runs in, and the connection states it reports.
//!
//! The client (`lockkeeper-zk-client`) gives one ZooKeeper session per `Client`: when that session expires the
//! client is dead for good. A service wants its locks to work again afterwards, so a
//! [`Session`] is a chain of *generations*, each one `Client` and its health; when a generation
//! ends (expiry, or a suspension longer than the session timeout) the monitor task reports
//! `Lost` and connects the next one. Lock guards keep the generation they were granted in: its
//! end is exactly the moment their ephemeral nodes can be gone, which is what `lost()` reports.
//!
//! Each generation also keeps the one deadline its holders can trust without asking anyone:
//! the server cannot expire the session before the send time of the newest request it
//! answered plus the negotiated timeout (less a drift allowance, [`crate::grant`]). A
//! heartbeat read every quarter of the timeout keeps that deadline ahead while all is well; a
//! process that was paused past it (SIGSTOP, a stalled VM) finds it passed the moment it
//! runs again, before any round trip, and a suspension that outlasts it ends the generation.

use lockkeeper_zk_client::TlsFiles;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex as StdMutex, Weak};
use std::time::Duration;

use lockkeeper_zk_client::{Client, SessionState};
use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::ReusableBoxFuture;

use crate::error::{Error, Result};
use crate::grant::trusted_until;
use crate::zk::connect::Attempt;
use crate::zk::retry::RetryPolicy;

/// How long [`Session::close`] waits for the server to end the session: one round trip on a
/// working connection, bounded so that closing behind a dead one does not hang.
const CLOSE_WAIT: Duration = Duration::from_secs(2);

/// What a [`Session`] reports as its connection changes, in Curator's words.
///
/// ```no_run
/// # async fn demo(session: lockkeeper::zk::Session) {
/// use lockkeeper::zk::ConnectionState;
///
/// if session.state() == ConnectionState::Suspended {
///     // Held locks may be gone: pause writes until Reconnected (or Lost).
/// }
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ConnectionState {
    /// The first session is established.
    Connected,
    /// The connection dropped; the session may still be alive on the server. Locks held now
    /// may be lost without anyone telling us, so guards report `lost()` from here on.
    Suspended,
    /// Connected again: the same session after a suspension, or a new session after `Lost`.
    Reconnected,
    /// The session expired (or stayed suspended past its timeout): its ephemeral nodes, and so
    /// every lock and lease it held, are gone. A new session is being connected.
    Lost,
    /// [`Session::close`] was called; nothing more will be reported.
    Closed,
}

/// The health of one generation, as its guards and waiters need it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Health {
    Connected,
    Suspended,
    /// Expired, timed out or closed: nothing this generation created still exists.
    Ended,
}

/// One ZooKeeper session: a client and its health.
pub(crate) struct Generation {
    /// `None` once the session is closed, so that `close()` really ends the server session
    /// (it ends when the last clone of the client is dropped).
    client: StdMutex<Option<Client>>,
    health: watch::Sender<Health>,
    session_id: i64,
    /// The negotiated session timeout.
    timeout: Duration,
    /// When the newest request the server answered was sent. The server heard from the
    /// session no earlier than that, so it cannot have expired it before `heard + timeout`.
    heard: watch::Sender<Instant>,
    retry: RetryPolicy,
    /// Shared with the [`Session`]: counts watch notifications delivered to lock waiters.
    notifications: Arc<AtomicU64>,
}

impl Generation {
    /// The client, or `SessionLost` once this generation has ended.
    pub(crate) fn client(&self) -> Result<Client> {
        if *self.health.borrow() == Health::Ended {
            return Err(Error::SessionLost);
        }
        // The lock only guards an Option swap: a std mutex, never held across an await.
        let client = crate::sync::lock(&self.client);
        client.clone().ok_or(Error::SessionLost)
    }

    pub(crate) fn health(&self) -> Health {
        *self.health.borrow()
    }

    pub(crate) fn session_id(&self) -> i64 {
        self.session_id
    }

    pub(crate) fn retry_policy(&self) -> RetryPolicy {
        self.retry
    }

    /// Until when this session is certainly alive on the server, as far as the client can
    /// know without asking: see the module docs.
    pub(crate) fn valid_until(&self) -> Instant {
        trusted_until(*self.heard.borrow(), self.timeout)
    }

    /// Records that the server answered a request sent at `sent`.
    pub(crate) fn heard_at(&self, sent: Instant) {
        self.heard.send_if_modified(|heard| {
            let newer = sent > *heard;
            if newer {
                *heard = sent;
            }
            newer
        });
    }

    /// Resolves once [`valid_until`](Generation::valid_until) has passed without being moved
    /// on by an answer from the server.
    pub(crate) async fn untrusted(&self) {
        let mut heard = self.heard.subscribe();
        loop {
            let until = trusted_until(*heard.borrow_and_update(), self.timeout);
            if Instant::now() >= until {
                return;
            }
            tokio::select! {
                () = tokio::time::sleep_until(until) => {}
                changed = heard.changed() => {
                    // The sender lives as long as the generation, which outlives `self`.
                    if changed.is_err() {
                        return std::future::pending().await;
                    }
                }
            }
        }
    }

    pub(crate) fn count_notification(&self) {
        self.notifications.fetch_add(1, Ordering::Relaxed);
    }

    /// Resolves once this generation is no longer `Connected` (suspended or ended).
    pub(crate) async fn unhealthy(&self) {
        let mut health = self.health.subscribe();
        // An Err means the sender is gone, which only happens when the generation is dropped.
        let _ = health.wait_for(|h| *h != Health::Connected).await;
    }

    /// Resolves once this generation has ended.
    pub(crate) async fn ended(&self) {
        let mut health = self.health.subscribe();
        let _ = health.wait_for(|h| *h == Health::Ended).await;
    }

    /// Waits while suspended; `Ok` once connected again, `SessionLost` if it ends instead.
    pub(crate) async fn connected(&self) -> Result<()> {
        let mut health = self.health.subscribe();
        match health
            .wait_for(|h| *h != Health::Suspended)
            .await
            .map(|h| *h)
        {
            Ok(Health::Connected) => Ok(()),
            _ => Err(Error::SessionLost),
        }
    }

    /// Runs an idempotent operation, retrying connection losses under the retry policy.
    ///
    /// Retries stay in this generation: an operation on behalf of a session (its ephemeral
    /// nodes) must never be carried over to the next session.
    pub(crate) async fn retry<T, F, Fut>(&self, mut op: F) -> Result<T>
    where
        F: FnMut(Client) -> Fut,
        Fut: Future<Output = std::result::Result<T, lockkeeper_zk_client::Error>>,
    {
        let mut attempt = 1;
        loop {
            let client = self.client()?;
            let sent = Instant::now();
            let outcome = op(client).await;
            match outcome {
                Ok(value) => {
                    self.heard_at(sent);
                    return Ok(value);
                }
                Err(err) if is_terminal(&err) => return Err(Error::SessionLost),
                Err(err) if is_connection_loss(&err) => {
                    if attempt >= self.retry.max_attempts() {
                        return Err(Error::RetriesExhausted {
                            attempts: attempt,
                            last: err,
                        });
                    }
                    // A session that ends meanwhile ends the retries: nothing can succeed in
                    // this generation any more.
                    tokio::select! {
                        () = tokio::time::sleep(self.retry.delay(attempt)) => {}
                        () = self.ended() => return Err(Error::SessionLost),
                    }
                    attempt += 1;
                }
                Err(err) => {
                    // An error answer is an answer: the server heard the request.
                    self.heard_at(sent);
                    return Err(Error::Zk(err));
                }
            }
        }
    }

    fn end(&self) {
        self.health.send_replace(Health::Ended);
        crate::sync::lock(&self.client).take();
    }
}

/// A connection loss: the request may or may not have been applied.
pub(crate) fn is_connection_loss(err: &lockkeeper_zk_client::Error) -> bool {
    err.is_connection_loss()
}

/// The session is over: nothing will succeed in this generation again.
pub(crate) fn is_terminal(err: &lockkeeper_zk_client::Error) -> bool {
    // A session moved to another connection is as good as gone for this one.
    err.is_terminal() || matches!(err, lockkeeper_zk_client::Error::SessionMoved)
}

/// Settings for [`Session::builder`].
///
/// ```no_run
/// # async fn demo() -> lockkeeper::Result<()> {
/// use std::time::Duration;
/// use lockkeeper::zk::{RetryPolicy, Session};
///
/// let session = Session::builder("127.0.0.1:2181,127.0.0.1:2182/myapp")
///     .session_timeout(Duration::from_secs(10))
///     .retry_policy(RetryPolicy::exponential(Duration::from_millis(50), Duration::from_secs(2), 6))
///     .connect()
///     .await?;
/// # drop(session); Ok(()) }
/// ```
#[derive(Clone)]
pub struct SessionBuilder {
    connect_string: String,
    session_timeout: Duration,
    connection_timeout: Duration,
    retry: RetryPolicy,
    tls: Option<TlsFiles>,
    /// SASL DIGEST-MD5's user and password.
    sasl: Option<(String, String)>,
}

/// Everything but the SASL password.
impl std::fmt::Debug for SessionBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionBuilder")
            .field("connect_string", &self.connect_string)
            .field("session_timeout", &self.session_timeout)
            .field("connection_timeout", &self.connection_timeout)
            .field("retry", &self.retry)
            .field("tls", &self.tls)
            .field("sasl_user", &self.sasl.as_ref().map(|(user, _)| user))
            .finish()
    }
}

impl SessionBuilder {
    /// The session timeout to ask the server for (it may grant between 2 and 20 ticks).
    /// Shorter detects dead holders sooner; longer rides out longer pauses. Default 10 s.
    pub fn session_timeout(mut self, timeout: Duration) -> SessionBuilder {
        self.session_timeout = timeout;
        self
    }

    /// How long [`connect`](SessionBuilder::connect) may take in all: it keeps trying the
    /// hosts of the connect string until a session is established or this time has passed,
    /// then fails with [`Error::Connect`] naming each host and what happened there (refused,
    /// timed out, not a ZooKeeper server). Default 5 s. It also bounds each attempt to connect
    /// a new session after `Lost`, sets how soon a silent connection is given up (the client
    /// library pings within it), and caps how long a suspended session's reconnection waits
    /// on a host that accepted it without answering before it tries again.
    pub fn connection_timeout(mut self, timeout: Duration) -> SessionBuilder {
        self.connection_timeout = timeout;
        self
    }

    /// The retry policy for idempotent operations after a connection loss, and for the pauses
    /// between attempts to connect a new session after `Lost`. The first connect is bounded by
    /// the [connection timeout](SessionBuilder::connection_timeout) alone.
    pub fn retry_policy(mut self, retry: RetryPolicy) -> SessionBuilder {
        self.retry = retry;
        self
    }

    /// Connects over TLS, to Keeper's secure listener or ZooKeeper's `secureClientPort`: each
    /// server must present a certificate that `files.ca` signed, valid for its host name in the
    /// connect string; `files.cert` (a certificate and its key) is presented to servers that
    /// ask for one, and is who the session is under the `x509` ACL scheme. The files are read
    /// at each connection, so renewed ones are picked up by the next. Default: plain TCP.
    pub fn tls(mut self, files: TlsFiles) -> SessionBuilder {
        self.tls = Some(files);
        self
    }

    /// Authenticates every connection with SASL DIGEST-MD5 as `user`, as ZooKeeper's
    /// `DigestLoginModule` users do: the session is `sasl:<user>` to ACLs. Credentials the
    /// server refuses fail [`connect`](SessionBuilder::connect) at once with
    /// `Error::Zk(AuthFailed)` (the password is proven, never sent). Default: none.
    pub fn sasl_digest(mut self, user: &str, password: &str) -> SessionBuilder {
        self.sasl = Some((user.to_owned(), password.to_owned()));
        self
    }

    /// Connects the first session within the connection timeout.
    ///
    /// [`Error::Connect`] names the hosts and why each failed (a TLS handshake's failure
    /// says its reason); [`Error::InvalidArgument`] is a malformed connect string, a zero
    /// timeout or a TLS file that cannot be used (naming it).
    pub async fn connect(self) -> Result<Session> {
        if self.session_timeout.is_zero() || self.connection_timeout.is_zero() {
            return Err(Error::InvalidArgument(
                "session and connection timeouts must be greater than zero".into(),
            ));
        }
        if let Some(files) = &self.tls {
            files
                .config()
                .map_err(|e| Error::InvalidArgument(format!("TLS: {e}")))?;
        }
        let notifications = Arc::new(AtomicU64::new(0));
        let generation = connect_generation(&self, &notifications, false).await?;
        let (events, _) = broadcast::channel(64);
        let (current, _) = watch::channel(generation.clone());
        let (state, _) = watch::channel(ConnectionState::Connected);
        let shared = Arc::new(Shared {
            builder: self,
            current,
            events,
            state,
            notifications,
        });
        let monitor = tokio::spawn(monitor(shared.clone(), generation));
        Ok(Session {
            inner: Arc::new(Inner {
                shared,
                monitor: StdMutex::new(Some(monitor)),
            }),
        })
    }
}

/// A connection to ZooKeeper (or Keeper) that the lock recipes run in. Cheap to clone.
///
/// The connect string is a comma-separated host list with an optional chroot, as in every
/// ZooKeeper client: `"10.0.0.1:2181,10.0.0.2:2181/myapp"`.
///
/// ```no_run
/// # async fn demo() -> lockkeeper::Result<()> {
/// use lockkeeper::zk::{ConnectionState, Session};
///
/// let session = Session::connect("127.0.0.1:2181").await?;
/// let mut states = session.states();
/// tokio::spawn(async move {
///     while let Some(state) = states.next().await {
///         if state == ConnectionState::Lost {
///             eprintln!("session lost: every lock it held is gone");
///         }
///     }
/// });
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Session {
    inner: Arc<Inner>,
}

/// Owned by the `Session` handles: dropping the last one stops the monitor.
struct Inner {
    shared: Arc<Shared>,
    monitor: StdMutex<Option<JoinHandle<()>>>,
}

/// Shared by the handles and the monitor task.
struct Shared {
    builder: SessionBuilder,
    current: watch::Sender<Arc<Generation>>,
    events: broadcast::Sender<ConnectionState>,
    state: watch::Sender<ConnectionState>,
    notifications: Arc<AtomicU64>,
}

impl Session {
    /// Connects with default settings (10 s session timeout, default retry policy).
    pub async fn connect(connect_string: &str) -> Result<Session> {
        Session::builder(connect_string).connect().await
    }

    /// Starts building a session with non-default settings.
    pub fn builder(connect_string: &str) -> SessionBuilder {
        SessionBuilder {
            connect_string: connect_string.to_owned(),
            session_timeout: Duration::from_secs(10),
            connection_timeout: Duration::from_secs(5),
            retry: RetryPolicy::default(),
            tls: None,
            sasl: None,
        }
    }

    /// The current connection state.
    pub fn state(&self) -> ConnectionState {
        *self.inner.shared.state.borrow()
    }

    /// A stream of the connection states from now on.
    pub fn states(&self) -> StateStream {
        StateStream::new(self.inner.shared.events.subscribe())
    }

    /// The id of the current ZooKeeper session (it changes after `Lost`).
    pub fn session_id(&self) -> i64 {
        self.generation().session_id()
    }

    /// The current generation's client, for operations the recipes do not cover.
    ///
    /// Fails with [`Error::SessionLost`] after [`close`](Session::close).
    pub fn client(&self) -> Result<Client> {
        self.generation().client()
    }

    /// Watch notifications delivered to this session's lock waiters so far: one per waiter
    /// woken. A [`Mutex`](crate::zk::Mutex) release wakes at most two waiters (the next
    /// holder, and the waiter behind it, which lists again early); [`SimpleLock`] wakes them
    /// all.
    ///
    /// [`SimpleLock`]: crate::zk::SimpleLock
    pub fn notifications(&self) -> u64 {
        self.inner.shared.notifications.load(Ordering::Relaxed)
    }

    /// The negotiated session timeout of the current session.
    pub fn session_timeout(&self) -> Duration {
        self.generation()
            .client()
            .map(|c| c.session_timeout())
            .unwrap_or(self.inner.shared.builder.session_timeout)
    }

    /// Ends the session: its ephemeral nodes (every lock it holds) are deleted by the server,
    /// guards report `lost()`, and states report `Closed`.
    ///
    /// Returns once the server has ended the session (or after 2 s if it does not
    /// answer), so a process that exits right after closing leaves no session behind: one
    /// that exits first leaves its session, and its locks, to expire a session timeout later.
    pub async fn close(&self) {
        if let Some(monitor) = self.inner.take_monitor() {
            monitor.abort();
        }
        let generation = self.generation();
        // Closing the client ends the session for every handle of it, including those that
        // operations and caches still hold.
        let client = generation.client().ok();
        generation.end();
        self.inner.shared.report(ConnectionState::Closed);
        if let Some(client) = client {
            let _ = tokio::time::timeout(CLOSE_WAIT, client.close()).await;
        }
    }

    /// The generation new operations run in.
    pub(crate) fn generation(&self) -> Arc<Generation> {
        self.inner.shared.current.borrow().clone()
    }

    /// The generation new operations run in, once it is connected.
    pub(crate) async fn connected_generation(&self) -> Result<Arc<Generation>> {
        let mut current = self.inner.shared.current.subscribe();
        loop {
            let generation = current.borrow_and_update().clone();
            match generation.connected().await {
                Ok(()) => return Ok(generation),
                Err(_) if self.state() == ConnectionState::Closed => {
                    return Err(Error::SessionLost);
                }
                // Ended: wait for the monitor to connect the next generation.
                Err(_) => {
                    if current.changed().await.is_err() {
                        return Err(Error::SessionLost);
                    }
                }
            }
        }
    }
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("connect_string", &self.inner.shared.builder.connect_string)
            .field("session_id", &format_args!("0x{:x}", self.session_id()))
            .field("state", &self.state())
            .finish()
    }
}

impl Inner {
    fn take_monitor(&self) -> Option<JoinHandle<()>> {
        crate::sync::lock(&self.monitor).take()
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(monitor) = self.take_monitor() {
            monitor.abort();
        }
    }
}

impl Shared {
    fn report(&self, state: ConnectionState) {
        self.state.send_replace(state);
        // No receivers is fine: nobody is listening.
        let _ = self.events.send(state);
    }
}

/// The connection states of a [`Session`], from the moment [`Session::states`] was called.
///
/// ```no_run
/// # async fn demo(session: lockkeeper::zk::Session) {
/// let mut states = session.states();
/// while let Some(state) = states.next().await {
///     println!("session is now {state:?}");
/// }
/// # }
/// ```
///
/// It is also a [`Stream`](futures_util::Stream) of the same states, for its combinators.
pub struct StateStream {
    /// The wait for the next state, owning the receiver it waits on.
    next: ReusableBoxFuture<'static, NextState>,
}

/// A state waited for (`None`: no more), and the receiver to wait on next.
type NextState = (
    Option<ConnectionState>,
    broadcast::Receiver<ConnectionState>,
);

async fn next_state(mut events: broadcast::Receiver<ConnectionState>) -> NextState {
    loop {
        match events.recv().await {
            Ok(state) => return (Some(state), events),
            Err(broadcast::error::RecvError::Lagged(_)) => continue,
            Err(broadcast::error::RecvError::Closed) => return (None, events),
        }
    }
}

impl StateStream {
    fn new(events: broadcast::Receiver<ConnectionState>) -> StateStream {
        StateStream {
            next: ReusableBoxFuture::new(next_state(events)),
        }
    }

    /// The next state; `None` after `Closed` or when the session is dropped. A reader that
    /// falls far behind skips the oldest states, never the latest.
    pub async fn next(&mut self) -> Option<ConnectionState> {
        futures_util::StreamExt::next(self).await
    }
}

impl futures_util::Stream for StateStream {
    type Item = ConnectionState;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<ConnectionState>> {
        let (state, events) = std::task::ready!(self.next.poll(cx));
        if state == Some(ConnectionState::Closed) {
            // Nothing follows `Closed`: the stream ends with it.
            self.next.set(async move { (None, events) });
        } else {
            self.next.set(next_state(events));
        }
        std::task::Poll::Ready(state)
    }
}

/// Connects a session: the first one (`persistent` false) within the connection timeout, a
/// later one after `Lost` (`persistent` true) by attempting until it works, pausing between
/// attempts as the retry policy says.
async fn connect_generation(
    builder: &SessionBuilder,
    notifications: &Arc<AtomicU64>,
    persistent: bool,
) -> Result<Arc<Generation>> {
    let mut attempt = 1;
    let (client, started) = loop {
        let started = Instant::now();
        let connecting = Attempt {
            connect_string: &builder.connect_string,
            session_timeout: builder.session_timeout,
            connection_timeout: builder.connection_timeout,
            tls: builder.tls.as_ref(),
            sasl: builder.sasl.as_ref(),
        }
        .connect()
        .await;
        match connecting {
            Ok(client) => break (client, started),
            Err(
                err @ (Error::InvalidArgument(_)
                | Error::Zk(lockkeeper_zk_client::Error::AuthFailed)),
            ) => {
                return Err(err);
            }
            Err(err) if !persistent => return Err(err),
            Err(err) => {
                tracing::warn!(attempt, %err, "connecting a new ZooKeeper session failed");
                let delay = builder
                    .retry
                    .delay(attempt.min(builder.retry.max_attempts()));
                tokio::time::sleep(delay).await;
                attempt += 1;
            }
        }
    };
    let (health, _) = watch::channel(Health::Connected);
    let timeout = client.session_timeout();
    let generation = Arc::new(Generation {
        session_id: client.session_id(),
        client: StdMutex::new(Some(client)),
        health,
        timeout,
        // The server created the session after the connect request left, so no earlier.
        heard: watch::Sender::new(started),
        retry: builder.retry,
        notifications: notifications.clone(),
    });
    tokio::spawn(heartbeat(Arc::downgrade(&generation), timeout / 4));
    Ok(generation)
}

/// Reads the (chroot's) root every `period` while connected, so that the server's answers
/// keep the generation's deadline ahead even when no lock operation runs. Ends with the
/// generation.
async fn heartbeat(generation: Weak<Generation>, period: Duration) {
    let period = period.max(Duration::from_millis(10));
    loop {
        tokio::time::sleep(period).await;
        let Some(generation) = generation.upgrade() else {
            return;
        };
        match generation.health() {
            Health::Ended => return,
            // The client library is reconnecting; nothing to hear until it has.
            Health::Suspended => continue,
            Health::Connected => {}
        }
        let Ok(client) = generation.client() else {
            return;
        };
        let sent = Instant::now();
        match tokio::time::timeout(period, client.check_stat("/")).await {
            Ok(Ok(_)) => generation.heard_at(sent),
            Ok(Err(err)) if !is_connection_loss(&err) && !is_terminal(&err) => {
                generation.heard_at(sent);
            }
            Ok(Err(_)) | Err(_) => {}
        }
    }
}

/// Follows the current generation's state; when it ends, reports `Lost` and connects the next.
async fn monitor(shared: Arc<Shared>, mut generation: Arc<Generation>) {
    loop {
        follow(&shared, &generation).await;
        generation.end();
        shared.report(ConnectionState::Lost);
        // Keep trying until it works or the session is closed (which aborts this task): a
        // service expects its locks to become available again after an outage.
        let next = match connect_generation(&shared.builder, &shared.notifications, true).await {
            Ok(next) => next,
            Err(err) => {
                tracing::error!(%err, "cannot connect a new ZooKeeper session");
                return;
            }
        };
        shared.current.send_replace(next.clone());
        shared.report(ConnectionState::Reconnected);
        generation = next;
    }
}

/// Mirrors one generation's client state into its health until the session ends. A
/// suspension that outlasts the generation's deadline counts as the end: the server may have
/// expired the session by then, though the client cannot hear it until it reconnects.
async fn follow(shared: &Shared, generation: &Generation) {
    let Ok(client) = generation.client() else {
        return;
    };
    let mut states = client.state_watcher();
    drop(client);
    let mut state = states.state();
    loop {
        match state {
            SessionState::SyncConnected => {
                if generation.health() == Health::Suspended {
                    generation.health.send_replace(Health::Connected);
                    shared.report(ConnectionState::Reconnected);
                }
                state = states.changed().await;
            }
            SessionState::Disconnected => {
                if generation.health() != Health::Suspended {
                    generation.health.send_replace(Health::Suspended);
                    shared.report(ConnectionState::Suspended);
                }
                tokio::select! {
                    next = states.changed() => state = next,
                    () = generation.untrusted() => return,
                }
            }
            SessionState::Expired | SessionState::AuthFailed | SessionState::Closed => return,
        }
    }
}
