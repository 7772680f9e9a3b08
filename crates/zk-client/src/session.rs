//! One ZooKeeper session: the requests in flight, the connection they go out on, and the task
//! that reads the replies and keeps the session connected.
//!
//! The request path has no thread hop: a caller encodes its request, takes the next xid,
//! queues its reply slot and writes the frame to the socket itself, all under one lock, so
//! frames leave in xid order whoever sends them. Only bytes the socket would not take at once
//! are left for the session task to write when the socket is writable again. A caller that
//! sends many requests at once (a pipeline) may hold its writes back under a [`Cork`] and
//! have them leave in one write when it is dropped: the server then reads them in one go.
//!
//! The session task owns everything else: it reads frames and answers the oldest reply slot
//! with each (ZooKeeper answers one session's requests in order, so a reply for any other xid
//! is a protocol error that drops the connection), registers the watch a read asked for before
//! reading the next frame, delivers notifications, pings when the connection is idle, drops a
//! connection that has been silent for two thirds of the session timeout, and reconnects.
//!
//! Invariants:
//! - every reply slot is answered exactly once: by its reply, or with `ConnectionLoss` when
//!   its connection (or a connection attempt it waited for) ends, or with the session's end;
//! - a request made while disconnected waits for the next connection attempt, as ZooKeeper's
//!   own client queues it, and is sent after the watches are re-registered;
//! - after the session ends (expired, closed, authentication refused) every request fails at
//!   once with that end, and every watcher has been told.

use std::collections::VecDeque;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use lockkeeper_proto::{
    AuthPacket, ConnectRequest, ConnectResponse, EventType as WireEventType, Jute, Reader,
    ReplyHeader, Request, RequestHeader, SetWatches2, WatcherEvent, XID_AUTH, XID_NOTIFICATION,
    XID_PING, XID_SET_WATCHES, decode_frame, encode_frame,
};
use tokio::sync::{Notify, mpsc, oneshot};
use tokio::time::Instant;

use crate::error::{Error, HostFailure, Result};
use crate::path::ConnectString;
use crate::socket::Socket;
use crate::watch::{EventType, Paths, Registration, SessionState, Table};

/// The largest frame read (ZooKeeper's default `jute.maxbuffer`, plus room for the header).
pub(crate) const MAX_FRAME: usize = 0xfffff + 1024;
/// How long a close waits for the server to end the session.
const CLOSE_WAIT: Duration = Duration::from_secs(2);

/// The server's answer: its error code (if not Ok) and the body after the header. A failed
/// multi's body still says which operation failed.
pub(crate) struct Reply {
    pub error: Option<Error>,
    pub body: Bytes,
}

/// The session's settings, fixed at connect time.
pub(crate) struct Settings {
    pub connect: ConnectString,
    pub session_timeout: Duration,
    pub connection_timeout: Duration,
    pub auth: Vec<(String, Vec<u8>)>,
    /// Give up after one round over the hosts instead of trying until the timeout.
    pub one_round: bool,
    /// Connect over TLS with this configuration.
    pub tls: Option<Arc<lockkeeper_tls::ClientConfig>>,
    /// Authenticate every connection with SASL DIGEST-MD5 as this user, with this password.
    pub sasl: Option<(String, crate::sasl::Password)>,
}

/// What the server gave the session at its first handshake.
#[derive(Clone, Debug, Default)]
pub(crate) struct Identity {
    pub id: i64,
    pub password: Bytes,
    pub timeout: Duration,
}

/// Everything the client handles and the session task share.
pub(crate) struct Shared {
    pub settings: Settings,
    pub identity: Mutex<Identity>,
    out: Mutex<Outbox>,
    watches: Mutex<Table>,
    states: Mutex<States>,
    /// The newest zxid seen in any reply: a reconnection must reach a server at least this
    /// current.
    last_zxid: AtomicI64,
    /// Wakes the session task: bytes left to write, or a close asked for.
    wake: Notify,
}

struct Outbox {
    next_xid: i32,
    pending: VecDeque<Pending>,
    /// Encoded frames not written yet.
    unsent: Vec<u8>,
    /// The connection requests go out on; `None` while (re)connecting.
    stream: Option<Arc<Socket>>,
    /// Set when the session has ended: the error every new request gets.
    ended: Option<Error>,
    /// When bytes last went out: pings are sent only on an idle connection.
    last_sent: Instant,
    close_asked: bool,
    /// Live [`Cork`]s: while any is, a request is queued but not written by its caller.
    corked: usize,
}

struct Pending {
    xid: i32,
    tx: oneshot::Sender<Result<Reply>>,
    registration: Option<Registration>,
}

struct States {
    current: SessionState,
    listeners: Vec<mpsc::UnboundedSender<SessionState>>,
}

/// Holds a session's writes back while it lives: requests sent meanwhile are queued in order
/// and leave together, in as few writes as the socket allows, when the last cork is dropped.
/// See [`Client::cork`](crate::Client::cork).
#[must_use = "the writes are held back only while the cork lives"]
pub struct Cork {
    shared: Arc<Shared>,
}

impl Drop for Cork {
    fn drop(&mut self) {
        let mut out = lock(&self.shared.out);
        out.corked -= 1;
        if out.corked == 0 && !matches!(out.flush(), Ok(true)) {
            self.shared.wake.notify_one();
        }
    }
}

impl std::fmt::Debug for Cork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cork").finish_non_exhaustive()
    }
}

/// Takes a std mutex, which is only ever held for a few non-blocking steps: a panic while
/// holding one leaves data that is still consistent, so poisoning is ignored.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Outbox {
    /// Writes what the socket takes now. `Ok(true)` when everything went out.
    fn flush(&mut self) -> io::Result<bool> {
        let Some(stream) = &self.stream else {
            return Ok(false);
        };
        while !self.unsent.is_empty() {
            match stream.try_write(&self.unsent) {
                Ok(n) => {
                    self.unsent.drain(..n);
                    self.last_sent = Instant::now();
                }
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(err) => return Err(err),
            }
        }
        // What a TLS session took but the socket did not.
        match stream.try_flush() {
            Ok(()) => Ok(true),
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => Ok(false),
            Err(err) => Err(err),
        }
    }

    /// The next xid, from 1 up, wrapping back to 1.
    fn take_xid(&mut self) -> i32 {
        self.next_xid = if self.next_xid == i32::MAX {
            1
        } else {
            self.next_xid + 1
        };
        self.next_xid
    }

    fn push_frame(&mut self, xid: i32, request: &Request) {
        encode_request(&mut self.unsent, xid, request);
    }
}

/// Appends one request frame (header and body) to `out`.
fn encode_request(out: &mut Vec<u8>, xid: i32, request: &Request) {
    encode_frame(out, |body| {
        RequestHeader {
            xid,
            op: request.op_code().code(),
        }
        .write(body);
        request.encode_body(body);
    });
}

/// The most path bytes one `setWatches2` frame carries, as ZooKeeper's own client splits
/// them: a session watching more than fits one frame (`jute.maxbuffer`, 1 MiB by default)
/// would otherwise be refused on every reconnection.
const SET_WATCHES_MAX_BYTES: usize = 128 * 1024;

impl Shared {
    pub(crate) fn new(settings: Settings) -> Shared {
        Shared {
            settings,
            identity: Mutex::new(Identity::default()),
            out: Mutex::new(Outbox {
                next_xid: 0,
                pending: VecDeque::new(),
                unsent: Vec::new(),
                stream: None,
                ended: None,
                last_sent: Instant::now(),
                close_asked: false,
                corked: 0,
            }),
            watches: Mutex::new(Table::default()),
            states: Mutex::new(States {
                current: SessionState::Disconnected,
                listeners: Vec::new(),
            }),
            last_zxid: AtomicI64::new(0),
            wake: Notify::new(),
        }
    }

    /// Sends `request` (or queues it until connected) and returns where its reply will come.
    pub(crate) fn submit(
        &self,
        request: &Request,
        registration: Option<Registration>,
    ) -> oneshot::Receiver<Result<Reply>> {
        self.submit_on(&mut lock(&self.out), request, registration)
    }

    /// [`Shared::submit`] with the outbox already locked.
    fn submit_on(
        &self,
        out: &mut Outbox,
        request: &Request,
        registration: Option<Registration>,
    ) -> oneshot::Receiver<Result<Reply>> {
        let (tx, rx) = oneshot::channel();
        if let Some(ended) = &out.ended {
            let _ = tx.send(Err(ended.clone()));
            return rx;
        }
        let xid = out.take_xid();
        out.push_frame(xid, request);
        out.pending.push_back(Pending {
            xid,
            tx,
            registration,
        });
        // Whatever the socket does not take (or an error writing) is the task's to handle.
        if out.corked == 0 && !matches!(out.flush(), Ok(true)) {
            self.wake.notify_one();
        }
        rx
    }

    /// Holds this session's writes back until the returned cork is dropped.
    pub(crate) fn cork(self: &Arc<Self>) -> Cork {
        lock(&self.out).corked += 1;
        Cork {
            shared: self.clone(),
        }
    }

    /// Asks the session task to end the session (once).
    pub(crate) fn request_close(&self) {
        lock(&self.out).close_asked = true;
        self.wake.notify_one();
    }

    pub(crate) fn state(&self) -> SessionState {
        lock(&self.states).current
    }

    /// A receiver of every state from now on, and the state now.
    pub(crate) fn subscribe(&self) -> (SessionState, mpsc::UnboundedReceiver<SessionState>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut states = lock(&self.states);
        if !states.current.is_terminated() {
            states.listeners.push(tx);
        }
        (states.current, rx)
    }

    fn set_state(&self, state: SessionState) {
        {
            let mut states = lock(&self.states);
            if states.current == state {
                return;
            }
            states.current = state;
            states.listeners.retain(|tx| tx.send(state).is_ok());
            if state.is_terminated() {
                states.listeners.clear();
            }
        }
        lock(&self.watches).session(state);
    }

    /// The last persistent watcher of `path` was dropped: forget it, and remove the watch
    /// from the server once no other watcher of this client needs it.
    pub(crate) fn unwatch(&self, path: &str, recursive: bool) {
        // Outbox before table, as `on_frame` takes them: the requests in flight and the table
        // are then seen at one moment.
        let mut out = lock(&self.out);
        let mut watches = lock(&self.watches);
        if watches.prune_persistent(path, recursive) {
            self.remove_unwanted(&mut out, &mut watches, path);
        }
    }

    /// Decides again every removal that waits ([`Table::wanted_removals`]): after an answer
    /// that carried a watch or a notification, which may have been what held one back. Also
    /// catches a one-shot watch whose receiver was dropped unfired at the next such frame. The
    /// set is empty but for the few paths whose persistent watchers were dropped meanwhile.
    fn remove_all_unwanted(&self, out: &mut Outbox, watches: &mut Table) {
        for path in watches.wanted_removals() {
            self.remove_unwanted(out, watches, &path);
        }
    }

    /// The server may hold a watch on `path` that no watcher here wants: remove every watch of
    /// this session there, or note the removal for later.
    ///
    /// A live persistent watcher wants the server's watch: nothing to remove (its own drop
    /// decides again). A one-shot watch waiting to fire, or a request in flight that may leave
    /// a watch there (a removal sent now would reach the server after it), would go with the
    /// removal: it waits, and the reply or the notification decides again.
    fn remove_unwanted(&self, out: &mut Outbox, watches: &mut Table, path: &str) {
        if watches.persistent_watched(path) {
            watches.removal_done(path);
            return;
        }
        let in_flight = out.pending.iter().any(|pending| {
            pending
                .registration
                .as_ref()
                .is_some_and(|registration| registration.path() == path)
        });
        if in_flight || watches.oneshot_watched(path) {
            watches.want_removal(path);
            return;
        }
        watches.removal_done(path);
        // The answer does not matter: a watch the server no longer has is as good as removed.
        drop(self.submit_on(
            out,
            &Request::RemoveWatches(lockkeeper_proto::PathWatcherTypeRequest {
                path: path.to_owned(),
                watcher_type: lockkeeper_proto::WatcherType::Any.code(),
            }),
            None,
        ));
    }

    pub(crate) fn negotiated_timeout(&self) -> Duration {
        lock(&self.identity).timeout
    }

    /// Fails every request waiting in the outbox with `why` and forgets the connection.
    fn drop_connection(&self, why: &Error) {
        let pending = {
            let mut out = lock(&self.out);
            out.stream = None;
            out.unsent.clear();
            lock(&self.watches).forget_wanted_removals();
            std::mem::take(&mut out.pending)
        };
        for pending in pending {
            let _ = pending.tx.send(Err(why.clone()));
        }
    }

    /// Ends the session for good with `why` (`state` is what watchers are told).
    fn end(&self, why: Error, state: SessionState) {
        lock(&self.out).ended = Some(why.clone());
        self.drop_connection(&why);
        self.set_state(state);
    }

    /// Reads one frame from the server.
    fn on_frame(&self, frame: Bytes) -> Result<()> {
        let mut r = Reader::new(frame);
        let header = ReplyHeader::read(&mut r).map_err(protocol)?;
        if header.zxid > 0 {
            self.last_zxid.fetch_max(header.zxid, Ordering::Relaxed);
        }
        match header.xid {
            XID_NOTIFICATION => {
                let event = WatcherEvent::read(&mut r).map_err(protocol)?;
                let event_type = match WireEventType::try_from(event.event_type) {
                    Ok(WireEventType::NodeCreated) => EventType::NodeCreated,
                    Ok(WireEventType::NodeDeleted) => EventType::NodeDeleted,
                    Ok(WireEventType::NodeDataChanged) => EventType::NodeDataChanged,
                    Ok(WireEventType::NodeChildrenChanged) => EventType::NodeChildrenChanged,
                    // Session events and watch removals are the client's own business.
                    _ => return Ok(()),
                };
                let shown = self.settings.connect.client_path(&event.path);
                let waiting = {
                    let mut watches = lock(&self.watches);
                    watches.fire(event_type, &event.path, &shown);
                    watches.removals_wait()
                };
                // The one-shot watches it fired may have been what held a removal back. Locked
                // again in order (the decision reads only what is there now), so a notification
                // takes the outbox's lock only while a removal waits.
                if waiting {
                    let mut out = lock(&self.out);
                    self.remove_all_unwanted(&mut out, &mut lock(&self.watches));
                }
                Ok(())
            }
            XID_PING => Ok(()),
            XID_AUTH => match Error::from_code(header.err) {
                None => Ok(()),
                Some(_) => Err(Error::AuthFailed),
            },
            XID_SET_WATCHES => {
                if let Some(err) = Error::from_code(header.err) {
                    tracing::warn!(%err, "the server refused to restore this session's watches");
                }
                Ok(())
            }
            xid => {
                // The outbox stays locked until the registration is in the table, so that
                // `unwatch` sees it in one place or the other.
                let mut out = lock(&self.out);
                let pending = match out.pending.front() {
                    Some(front) if front.xid == xid => out.pending.pop_front(),
                    _ => None,
                };
                let Some(pending) = pending else {
                    return Err(Error::Protocol(format!(
                        "a reply to xid {xid}, which is not the oldest request in flight"
                    )));
                };
                let error = Error::from_code(header.err);
                if let Some(registration) = pending.registration {
                    let path = registration.path().to_owned();
                    let mut watches = lock(&self.watches);
                    let abandoned = watches.register(
                        registration,
                        error.is_none(),
                        error == Some(Error::NoNode),
                    );
                    // Its watcher was dropped before the server answered: its watch is one
                    // more to remove. And this answer may have been what held a removal back.
                    if abandoned
                        .is_some_and(|(path, recursive)| watches.prune_persistent(&path, recursive))
                    {
                        watches.want_removal(&path);
                    }
                    self.remove_all_unwanted(&mut out, &mut watches);
                }
                drop(out);
                let _ = pending.tx.send(Ok(Reply {
                    error,
                    body: r.rest(),
                }));
                Ok(())
            }
        }
    }
}

fn protocol(err: lockkeeper_proto::DecodeError) -> Error {
    Error::Protocol(format!("an unreadable reply: {err}"))
}

/// An established connection, handshake done.
pub(crate) struct Connection {
    stream: Arc<Socket>,
    host: String,
    /// Bytes read after the handshake's reply.
    buf: BytesMut,
}

/// How one connection ended.
enum End {
    /// The connection broke; the session may live on.
    Lost(Error),
    /// The session is over.
    Over(Error, SessionState),
}

/// Connects the first time: every host in turn until one establishes a session or the
/// connection timeout passes. The error names each host tried and why it failed. Hosts that
/// answer, but not as ZooKeeper, will not become ZooKeeper by waiting: when every host is of
/// that kind, it fails at once.
pub(crate) async fn first_connection(shared: &Shared) -> Result<Connection> {
    let settings = &shared.settings;
    let deadline = Instant::now() + settings.connection_timeout;
    let mut failures: Vec<(String, HostFailure)> = Vec::new();
    let mut hosts = settings.connect.hosts.clone();
    shuffle(&mut hosts);
    let mut round = 0u32;
    loop {
        for (tried, host) in hosts.iter().enumerate() {
            let now = Instant::now();
            if now >= deadline {
                return Err(connect_error(settings, failures));
            }
            // A silent host gets its share of the time left, so it cannot keep the others
            // from being tried; the last host of a round gets all of it.
            let share = deadline.saturating_duration_since(now) / (hosts.len() - tried) as u32;
            let until = now + share.max(Duration::from_millis(100).min(deadline - now));
            match handshake(shared, host, until).await {
                Ok(connection) => return Ok(connection),
                Err(Failure::Refused(err)) => return Err(err),
                Err(Failure::Host(why)) => {
                    failures.retain(|(h, _)| h != host);
                    failures.push((host.clone(), why));
                }
            }
        }
        round += 1;
        let hopeless = failures.len() == hosts.len()
            && failures
                .iter()
                .all(|(_, why)| matches!(why, HostFailure::NotZooKeeper(_)));
        if settings.one_round || hopeless {
            return Err(connect_error(settings, failures));
        }
        let pause = Duration::from_millis(50 * u64::from(round.min(10)));
        if Instant::now() + pause >= deadline {
            return Err(connect_error(settings, failures));
        }
        tokio::time::sleep(pause).await;
    }
}

fn connect_error(settings: &Settings, failures: Vec<(String, HostFailure)>) -> Error {
    Error::Connect {
        hosts: settings.connect.hosts.join(","),
        timeout: settings.connection_timeout,
        failures,
    }
}

/// Why an attempt on one host failed.
enum Failure {
    /// This host, for this reason; another may do.
    Host(HostFailure),
    /// The session itself was refused (expired): no host will do.
    Refused(Error),
}

/// Opens a connection to `host` and establishes (or resumes) the session on it.
async fn handshake(shared: &Shared, host: &str, deadline: Instant) -> Result<Connection, Failure> {
    let limit = deadline.saturating_duration_since(Instant::now());
    // Set once the TCP connection is up: a timeout before is no connection, after it no answer.
    let connected = AtomicBool::new(false);
    let attempt = async {
        let stream = Socket::connect(host, shared.settings.tls.as_ref(), &connected)
            .await
            .map_err(Failure::Host)?;
        let identity = lock(&shared.identity).clone();
        let timeout =
            i32::try_from(shared.settings.session_timeout.as_millis()).unwrap_or(i32::MAX);
        let mut request = ConnectRequest::new_session(timeout);
        request.last_zxid_seen = shared.last_zxid.load(Ordering::Relaxed);
        if identity.id != 0 {
            request.session_id = identity.id;
            request.passwd = identity.password.clone();
        }
        let mut frame = Vec::new();
        encode_frame(&mut frame, |body| request.write(body));
        stream.write_all(&frame).await.map_err(|err| {
            Failure::Host(HostFailure::Io(format!(
                "sending the session request: {err}"
            )))
        })?;
        let mut buf = BytesMut::with_capacity(4096);
        let body = loop {
            match decode_frame(&mut buf, MAX_FRAME) {
                Ok(Some(body)) => break body,
                Ok(None) => {}
                Err(_) => return Err(Failure::Host(HostFailure::NotZooKeeper(shown(&buf)))),
            }
            match stream.read_buf(&mut buf).await {
                Ok(0) if buf.is_empty() => return Err(Failure::Host(HostFailure::Closed)),
                Ok(0) => return Err(Failure::Host(HostFailure::NotZooKeeper(shown(&buf)))),
                Ok(_) => {}
                Err(err) => return Err(Failure::Host(HostFailure::Io(err.to_string()))),
            }
        };
        let response = ConnectResponse::read(&mut Reader::new(body.clone()))
            .map_err(|_| Failure::Host(HostFailure::NotZooKeeper(shown(&body))))?;
        if response.timeout <= 0 {
            return Err(if identity.id == 0 {
                Failure::Host(HostFailure::SessionRefused)
            } else {
                Failure::Refused(Error::SessionExpired)
            });
        }
        if identity.id != 0 && response.session_id != identity.id {
            return Err(Failure::Refused(Error::SessionExpired));
        }
        *lock(&shared.identity) = Identity {
            id: response.session_id,
            password: response.passwd,
            timeout: Duration::from_millis(u64::try_from(response.timeout).unwrap_or(0)),
        };
        if let Some((user, password)) = &shared.settings.sasl {
            let xid = || lock(&shared.out).take_xid();
            crate::sasl::authenticate(&stream, &mut buf, xid, user, &password.0)
                .await
                .map_err(|refusal| match refusal {
                    crate::sasl::Refusal::Credentials(why) => {
                        tracing::warn!(host, user, why, "SASL authentication refused");
                        Failure::Refused(Error::AuthFailed)
                    }
                    crate::sasl::Refusal::Host(failure) => Failure::Host(failure),
                })?;
        }
        Ok(Connection {
            stream: Arc::new(stream),
            host: host.to_owned(),
            buf,
        })
    };
    match tokio::time::timeout(limit, attempt).await {
        Ok(outcome) => outcome,
        Err(_) if connected.load(Ordering::Relaxed) => {
            Err(Failure::Host(HostFailure::NoAnswer(limit)))
        }
        Err(_) => Err(Failure::Host(HostFailure::ConnectTimedOut(limit))),
    }
}

/// The first bytes of an answer that is not ZooKeeper's, for the error message: printable
/// ASCII as it is, the rest escaped.
fn shown(answer: &[u8]) -> String {
    const SHOWN: usize = 48;
    let mut text = answer[..answer.len().min(SHOWN)].escape_ascii().to_string();
    if answer.len() > SHOWN {
        text.push_str("...");
    }
    format!("it answered \"{text}\"")
}

fn shuffle(hosts: &mut [String]) {
    use rand::seq::SliceRandom;
    hosts.shuffle(&mut rand::thread_rng());
}

/// The session task: serves `connection` (already [`install`]ed), then reconnects whenever
/// one ends, until the session is over.
pub(crate) async fn run(shared: Arc<Shared>, mut connection: Connection) {
    loop {
        match serve(&shared, &mut connection).await {
            End::Over(why, state) => {
                shared.end(why, state);
                return;
            }
            End::Lost(why) => {
                tracing::debug!(host = connection.host, %why, "connection lost; reconnecting");
                shared.drop_connection(&why);
                shared.set_state(SessionState::Disconnected);
            }
        }
        connection = match reconnect(&shared).await {
            Ok(connection) => connection,
            Err((why, state)) => {
                shared.end(why, state);
                return;
            }
        };
        install(&shared, &connection, false);
    }
}

/// Makes `connection` the one requests go out on: the watches and credentials first, then
/// whatever was queued while disconnected.
pub(crate) fn install(shared: &Shared, connection: &Connection, first: bool) {
    let mut preamble = Vec::new();
    for (scheme, auth) in &shared.settings.auth {
        encode_request(
            &mut preamble,
            XID_AUTH,
            &Request::Auth(AuthPacket {
                auth_type: 0,
                scheme: scheme.clone(),
                auth: Bytes::from(auth.clone()),
            }),
        );
    }
    if !first {
        let paths = lock(&shared.watches).paths();
        let relative_zxid = shared.last_zxid.load(Ordering::Relaxed);
        for chunk in set_watches(paths, relative_zxid) {
            encode_request(&mut preamble, XID_SET_WATCHES, &Request::SetWatches(chunk));
        }
    }
    {
        let mut out = lock(&shared.out);
        preamble.append(&mut out.unsent);
        out.unsent = preamble;
        out.stream = Some(connection.stream.clone());
        out.last_sent = Instant::now();
        if !matches!(out.flush(), Ok(true)) {
            shared.wake.notify_one();
        }
    }
    shared.set_state(SessionState::SyncConnected);
}

/// The `setWatches2` requests that restore `paths`, each at most [`SET_WATCHES_MAX_BYTES`] of
/// paths; none when nothing is watched.
fn set_watches(paths: Paths, relative_zxid: i64) -> Vec<SetWatches2> {
    let empty = || SetWatches2 {
        relative_zxid,
        ..SetWatches2::default()
    };
    let mut chunks = Vec::new();
    let mut chunk = empty();
    let mut bytes = 0;
    /// Where a kind of watch goes in the request.
    type Field = fn(&mut SetWatches2) -> &mut Vec<String>;
    let kinds: [(Vec<String>, Field); 5] = [
        (paths.data, |c| &mut c.data_watches),
        (paths.exist, |c| &mut c.exist_watches),
        (paths.child, |c| &mut c.child_watches),
        (paths.persistent, |c| &mut c.persistent_watches),
        (paths.recursive, |c| &mut c.persistent_recursive_watches),
    ];
    for (list, field) in kinds {
        for path in list {
            if bytes > 0 && bytes + path.len() > SET_WATCHES_MAX_BYTES {
                chunks.push(std::mem::replace(&mut chunk, empty()));
                bytes = 0;
            }
            bytes += path.len();
            field(&mut chunk).push(path);
        }
    }
    if bytes > 0 {
        chunks.push(chunk);
    }
    chunks
}

/// Reads and writes one connection until it breaks or the session ends.
async fn serve(shared: &Shared, connection: &mut Connection) -> End {
    let stream = connection.stream.clone();
    let timeout = shared.negotiated_timeout();
    // ZooKeeper's own client: silent for 2/3 of the timeout means gone; ping at half that.
    let read_timeout = timeout * 2 / 3;
    let ping_after = read_timeout / 2;
    let mut last_heard = Instant::now();
    let mut want_write = false;
    let mut closing: Option<(oneshot::Receiver<Result<Reply>>, Instant)> = None;
    // Armed for the earliest moment a ping or the silence limit could be due, and only moved
    // when it fires: sends and replies only push those moments later, so a timer that fires
    // early just looks and re-arms, and no frame pays for a timer of its own.
    let timer = tokio::time::sleep(ping_after.min(read_timeout));
    tokio::pin!(timer);
    loop {
        // Frames already buffered (the handshake may have read some) go first.
        loop {
            match decode_frame(&mut connection.buf, MAX_FRAME) {
                Ok(Some(frame)) => match shared.on_frame(frame) {
                    Ok(()) => {}
                    Err(Error::AuthFailed) => {
                        return End::Over(Error::AuthFailed, SessionState::AuthFailed);
                    }
                    Err(err) => return End::Lost(lost(connection, &err.to_string())),
                },
                Ok(None) => break,
                Err(err) => return End::Lost(lost(connection, &err.to_string())),
            }
        }
        tokio::select! {
            readable = stream.readable() => {
                if let Err(err) = readable {
                    return End::Lost(lost(connection, &err.to_string()));
                }
                match stream.try_read_buf(&mut connection.buf) {
                    // The server closes the connection right after answering a close.
                    Ok(0) if closing.is_some() => {
                        return End::Over(Error::ClientClosed, SessionState::Closed);
                    }
                    Ok(0) => return End::Lost(lost(connection, "closed by the server")),
                    Ok(_) => last_heard = Instant::now(),
                    Err(err) if err.kind() == io::ErrorKind::WouldBlock => {}
                    Err(err) => return End::Lost(lost(connection, &err.to_string())),
                }
            }
            () = shared.wake.notified() => {
                let close_asked = lock(&shared.out).close_asked;
                if close_asked && closing.is_none() {
                    let reply = shared.submit(&Request::CloseSession, None);
                    closing = Some((reply, Instant::now() + CLOSE_WAIT));
                }
                want_write = true;
            }
            writable = stream.writable(), if want_write => {
                if let Err(err) = writable {
                    return End::Lost(lost(connection, &err.to_string()));
                }
                match lock(&shared.out).flush() {
                    Ok(done) => want_write = !done,
                    Err(err) => return End::Lost(lost(connection, &err.to_string())),
                }
            }
            () = &mut timer => {
                let now = Instant::now();
                let silent_at = last_heard + read_timeout;
                if now >= silent_at {
                    let why = format!("no answer for {read_timeout:?}");
                    return End::Lost(lost(connection, &why));
                }
                let mut out = lock(&shared.out);
                // Bytes still waiting for the socket make a ping pointless: the silence limit
                // already covers a server that stopped reading.
                if now >= out.last_sent + ping_after && out.unsent.is_empty() {
                    out.push_frame(XID_PING, &Request::Ping);
                    // Counted as sent when queued, so the timer never re-arms in the past.
                    out.last_sent = now;
                    match out.flush() {
                        Ok(done) => want_write = !done,
                        Err(err) => return End::Lost(lost(connection, &err.to_string())),
                    }
                }
                timer.as_mut().reset((out.last_sent + ping_after).min(silent_at));
            }
            () = close_done(&mut closing) => {
                return End::Over(Error::ClientClosed, SessionState::Closed);
            }
        }
    }
}

/// Resolves once the close request is answered (either way) or its wait has passed.
async fn close_done(closing: &mut Option<(oneshot::Receiver<Result<Reply>>, Instant)>) {
    match closing {
        Some((reply, until)) => {
            let until = *until;
            tokio::select! {
                _ = reply => {}
                () = tokio::time::sleep_until(until) => {}
            }
        }
        None => std::future::pending().await,
    }
}

fn lost(connection: &Connection, why: &str) -> Error {
    Error::ConnectionLoss(format!("{}: {why}", connection.host))
}

/// Connects again after a loss: hosts in turn (each attempt bounded by the session timeout
/// over the number of hosts, as ZooKeeper's client bounds it), failing the requests queued
/// meanwhile at each failed attempt, until one resumes the session, the server says it has
/// expired, or a close is asked for.
async fn reconnect(shared: &Shared) -> std::result::Result<Connection, (Error, SessionState)> {
    let settings = &shared.settings;
    let mut hosts = settings.connect.hosts.clone();
    shuffle(&mut hosts);
    // ZooKeeper's own client gives each host its share of the session timeout. A host that
    // accepts and never answers (a ZooKeeper still starting can hold a connection that way)
    // would then keep a session with one host from its next, answered, attempt until the
    // server had expired it: no attempt waits longer than the connection timeout.
    let per_host = (shared.negotiated_timeout() / hosts.len().max(1) as u32)
        .min(settings.connection_timeout)
        .max(Duration::from_millis(100));
    let mut round = 0u32;
    loop {
        for host in &hosts {
            if lock(&shared.out).close_asked {
                return Err((Error::ClientClosed, SessionState::Closed));
            }
            let attempt = handshake(shared, host, Instant::now() + per_host);
            let outcome = tokio::select! {
                outcome = attempt => outcome,
                () = close_asked(shared) => {
                    return Err((Error::ClientClosed, SessionState::Closed));
                }
            };
            match outcome {
                Ok(connection) => return Ok(connection),
                Err(Failure::Refused(err)) => return Err((err, SessionState::Expired)),
                Err(Failure::Host(why)) => {
                    tracing::debug!(host, %why, "reconnect attempt failed");
                    shared.drop_connection(&Error::ConnectionLoss(format!("{host}: {why}")));
                }
            }
        }
        round += 1;
        let pause = Duration::from_millis(20 * u64::from(round.min(25)));
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            () = close_asked(shared) => return Err((Error::ClientClosed, SessionState::Closed)),
        }
    }
}

/// Resolves once a close has been asked for.
async fn close_asked(shared: &Shared) {
    loop {
        if lock(&shared.out).close_asked {
            return;
        }
        shared.wake.notified().await;
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_wrong_answer_is_shown_escaped_once_and_cut() {
        assert_eq!(
            shown(b"HTTP/1.1 400\r\n"),
            "it answered \"HTTP/1.1 400\\r\\n\""
        );
        assert!(shown(&[b'x'; 100]).ends_with("x...\""));
    }

    use super::*;

    #[test]
    fn set_watches_is_split_into_frames_of_at_most_128_kib_of_paths() {
        assert!(
            set_watches(Paths::default(), 7).is_empty(),
            "nothing watched"
        );
        let long = |i: usize| format!("/{i:0>1000}");
        let paths = Paths {
            data: (0..200).map(long).collect(),
            recursive: vec!["/r".to_owned()],
            ..Paths::default()
        };
        let chunks = set_watches(paths, 42);
        assert_eq!(chunks.len(), 2, "200 kB of paths");
        let mut data = 0;
        for chunk in &chunks {
            assert_eq!(chunk.relative_zxid, 42);
            let bytes: usize = chunk.data_watches.iter().map(String::len).sum::<usize>()
                + chunk
                    .persistent_recursive_watches
                    .iter()
                    .map(String::len)
                    .sum::<usize>();
            assert!(bytes <= SET_WATCHES_MAX_BYTES, "{bytes}");
            data += chunk.data_watches.len();
        }
        assert_eq!(data, 200, "every path sent once");
        assert_eq!(chunks[1].persistent_recursive_watches, ["/r"]);
    }
}
