//! The client handle: one method per ZooKeeper operation.
//!
//! Every operation is *sent when called*, not when its future is first polled: the request is
//! written before the method returns, so two calls made one after the other reach the server in
//! that order even if their futures are awaited together (or the second first). The futures
//! own what they need (`'static`), so they can be spawned or dropped freely; dropping one only
//! discards the answer.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use lockkeeper_proto::{
    Acl, AddWatchMode, AddWatchRequest, Create2Response, CreateMode, GetAclResponse,
    GetAllChildrenNumberResponse, GetChildren2Response, GetDataResponse, Jute, OpCode, PathRequest,
    PathVersionRequest, PathWatchRequest, Reader, Request, SetAclRequest, SetDataRequest, Stat,
    StatResponse, StringsResponse, request::CreateOp,
};
use tokio::sync::{mpsc, oneshot};

use crate::error::{Error, Result};
use crate::path::{ConnectString, check};
use crate::session::{self, Cork, Reply, Settings, Shared, lock};
use crate::watch::{Kind, OneshotWatcher, PersistentWatcher, Registration, Removal, SessionState};

/// How a node is created: its mode, its ACL and, for the TTL modes, its time to live.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CreateOptions {
    /// Persistent, ephemeral, sequential, container or TTL.
    pub mode: CreateMode,
    /// The new node's ACL; must not be empty.
    pub acl: Vec<Acl>,
    /// Required by (and only allowed for) the `...WithTtl` modes.
    pub ttl: Option<Duration>,
}

impl CreateOptions {
    /// `mode`, open to everyone (`world:anyone`, all permissions).
    pub fn new(mode: CreateMode) -> CreateOptions {
        CreateOptions {
            mode,
            acl: lockkeeper_proto::open_acl(),
            ttl: None,
        }
    }

    /// These options with `acl` instead of `world:anyone`.
    pub fn with_acl(mut self, acl: Vec<Acl>) -> CreateOptions {
        self.acl = acl;
        self
    }

    /// These options with a time to live, for the `...WithTtl` modes.
    pub fn with_ttl(mut self, ttl: Duration) -> CreateOptions {
        self.ttl = Some(ttl);
        self
    }

    /// The create request for `path` (the server's path), or why these options are invalid.
    pub(crate) fn request(&self, path: String, data: &[u8]) -> Result<CreateOp> {
        if self.acl.is_empty() {
            return Err(Error::InvalidAcl);
        }
        let op = match (self.mode, self.ttl) {
            (mode, Some(ttl)) if mode.is_ttl() => {
                if ttl.is_zero() {
                    return Err(Error::BadArguments(format!(
                        "{path:?}: a TTL must be at least 1 ms"
                    )));
                }
                OpCode::CreateTtl
            }
            (mode, None) if mode.is_ttl() => {
                return Err(Error::BadArguments(format!(
                    "{path:?}: mode {mode:?} needs a TTL"
                )));
            }
            (mode, Some(_)) => {
                return Err(Error::BadArguments(format!(
                    "{path:?}: a TTL is only for the ...WithTtl modes, not {mode:?}"
                )));
            }
            (CreateMode::Container, None) => OpCode::CreateContainer,
            (_, None) => OpCode::Create2,
        };
        Ok(CreateOp {
            op,
            path,
            data: Some(Bytes::copy_from_slice(data)),
            acl: self.acl.clone(),
            flags: self.mode.code(),
            ttl: self
                .ttl
                .map_or(0, |ttl| i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX)),
        })
    }
}

/// Settings for a connection, from [`Client::connector`].
#[derive(Clone, Debug)]
pub struct Connector {
    session_timeout: Duration,
    connection_timeout: Duration,
    auth: Vec<(String, Vec<u8>)>,
    create_chroot: bool,
    one_round: bool,
    tls: Option<crate::TlsFiles>,
    sasl: Option<(String, crate::sasl::Password)>,
}

impl Default for Connector {
    fn default() -> Self {
        Connector {
            session_timeout: Duration::from_secs(10),
            connection_timeout: Duration::from_secs(5),
            auth: Vec::new(),
            create_chroot: false,
            one_round: false,
            tls: None,
            sasl: None,
        }
    }
}

impl Connector {
    /// The session timeout asked for (the server may grant another within its bounds).
    /// Default 10 s.
    pub fn session_timeout(mut self, timeout: Duration) -> Connector {
        self.session_timeout = timeout;
        self
    }

    /// How long the first connection may take, over all hosts, and the longest a reconnection
    /// waits on one host for its answer before trying the next (or the same one again).
    /// Default 5 s.
    pub fn connection_timeout(mut self, timeout: Duration) -> Connector {
        self.connection_timeout = timeout;
        self
    }

    /// Credentials sent on every connection (`addauth`), e.g. `("digest", b"user:password")`.
    pub fn auth(mut self, scheme: &str, auth: &[u8]) -> Connector {
        self.auth.push((scheme.to_owned(), auth.to_vec()));
        self
    }

    /// Tries each host once and fails, naming each host and what happened there, instead of
    /// trying them again until the connection timeout. For tools where nothing listening is a
    /// mistake to report at once (a benchmark's target, a probe), not a server still starting.
    /// Each host's handshake is still bounded by the connection timeout. Default off.
    pub fn one_round(mut self, one_round: bool) -> Connector {
        self.one_round = one_round;
        self
    }

    /// Creates the connect string's chroot (and its ancestors) if it is missing, as Curator
    /// creates its namespace: otherwise the first request below it fails with a bare NoNode.
    pub fn create_chroot(mut self, create: bool) -> Connector {
        self.create_chroot = create;
        self
    }

    /// Connects over TLS (to Keeper's secure listener, or ZooKeeper's `secureClientPort`):
    /// servers must present a certificate signed by `files.ca` and valid for the host name in
    /// the connect string; `files.cert`, a client certificate, is for servers that ask for
    /// one. The files are read when [`connect`](Connector::connect) is called. Default off.
    pub fn tls(mut self, files: crate::TlsFiles) -> Connector {
        self.tls = Some(files);
        self
    }

    /// Authenticates every connection with SASL DIGEST-MD5 as `user` (ZooKeeper's
    /// `DigestLoginModule` users; the session's id under the `sasl` ACL scheme), right after
    /// its handshake and before any other request. Refused credentials end the connect (and,
    /// later, the session) with [`Error::AuthFailed`]; the password is never sent, only
    /// proven. Default off.
    pub fn sasl_digest(mut self, user: &str, password: &str) -> Connector {
        self.sasl = Some((user.to_owned(), crate::sasl::Password(password.to_owned())));
        self
    }

    /// Establishes a session on one of the hosts of `connect_string`
    /// (`host:port,host:port[/chroot]`). With [`tls`](Connector::tls), a file that cannot be
    /// used is `BadArguments`, naming it.
    pub async fn connect(self, connect_string: &str) -> Result<Client> {
        let connect = ConnectString::parse(connect_string)?;
        let tls = match &self.tls {
            Some(files) => Some(
                files
                    .config()
                    .map_err(|e| Error::BadArguments(format!("TLS: {e}")))?,
            ),
            None => None,
        };
        let shared = Arc::new(Shared::new(Settings {
            connect,
            session_timeout: self.session_timeout,
            connection_timeout: self.connection_timeout,
            auth: self.auth,
            one_round: self.one_round,
            tls,
            sasl: self.sasl,
        }));
        let connection = session::first_connection(&shared).await?;
        session::install(&shared, &connection, true);
        tokio::spawn(session::run(shared.clone(), connection));
        let client = Client {
            handle: Arc::new(Handle { shared }),
        };
        if let (true, Some(chroot)) = (self.create_chroot, client.connect_string().chroot.clone())
            && let Err(err) = client.create_chroot(&chroot).await
        {
            client.close().await;
            return Err(err);
        }
        Ok(client)
    }
}

/// A ZooKeeper session. Clones share it; it is closed when [`close`](Client::close) is called
/// or the last clone is dropped.
#[derive(Clone)]
pub struct Client {
    handle: Arc<Handle>,
}

/// Ends the session when the last [`Client`] clone goes.
struct Handle {
    shared: Arc<Shared>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.shared.request_close();
    }
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("session_id", &format_args!("0x{:x}", self.session_id()))
            .field("state", &self.state())
            .finish()
    }
}

/// The states a session goes through, from the moment [`Client::state_watcher`] was called.
#[derive(Debug)]
pub struct StateWatcher {
    last: SessionState,
    rx: mpsc::UnboundedReceiver<SessionState>,
}

impl StateWatcher {
    /// The state last reported by [`changed`](StateWatcher::changed) (at first, the state when
    /// the watcher was made).
    pub fn state(&self) -> SessionState {
        self.last
    }

    /// The next state. Once the session is over, its final state every time.
    pub async fn changed(&mut self) -> SessionState {
        if !self.last.is_terminated() {
            self.last = self.rx.recv().await.unwrap_or(SessionState::Closed);
        }
        self.last
    }
}

/// A node's data and stat.
pub type DataAndStat = (Vec<u8>, Stat);

impl Client {
    /// Connects with the default settings (10 s session timeout, 5 s to connect).
    pub async fn connect(connect_string: &str) -> Result<Client> {
        Connector::default().connect(connect_string).await
    }

    /// Settings for a connection.
    pub fn connector() -> Connector {
        Connector::default()
    }

    fn shared(&self) -> &Shared {
        &self.handle.shared
    }

    fn connect_string(&self) -> &ConnectString {
        &self.shared().settings.connect
    }

    /// The session id the server assigned.
    pub fn session_id(&self) -> i64 {
        lock(&self.shared().identity).id
    }

    /// The session's password, with [`session_id`](Client::session_id) enough to resume it.
    pub fn session_password(&self) -> Vec<u8> {
        lock(&self.shared().identity).password.to_vec()
    }

    /// The session timeout the server granted.
    pub fn session_timeout(&self) -> Duration {
        self.shared().negotiated_timeout()
    }

    /// The state of the session now.
    pub fn state(&self) -> SessionState {
        self.shared().state()
    }

    /// The session's states from now on.
    pub fn state_watcher(&self) -> StateWatcher {
        let (last, rx) = self.shared().subscribe();
        StateWatcher { last, rx }
    }

    /// Ends the session: the server deletes its ephemeral nodes. Returns once the server has
    /// answered, or after 2 s without an answer; every clone is closed with it.
    pub async fn close(&self) {
        let mut states = self.state_watcher();
        self.shared().request_close();
        while !states.state().is_terminated() {
            states.changed().await;
        }
    }

    /// Sends `request` now and returns its reply's future; an error answer is an `Err`.
    fn send(
        &self,
        request: Result<Request>,
        registration: Option<Registration>,
    ) -> impl Future<Output = Result<Reply>> + Send + 'static + use<> {
        let reply = self.send_keeping_errors(request, registration);
        async move {
            let reply = reply.await?;
            match reply.error {
                None => Ok(reply),
                Some(err) => Err(err),
            }
        }
    }

    /// [`send`](Client::send), with an error answer returned as a reply (its body may matter).
    fn send_keeping_errors(
        &self,
        request: Result<Request>,
        registration: Option<Registration>,
    ) -> impl Future<Output = Result<Reply>> + Send + 'static + use<> {
        let rx = request.map(|request| self.shared().submit(&request, registration));
        async move {
            match rx {
                Ok(rx) => rx.await.unwrap_or(Err(Error::ClientClosed)),
                Err(err) => Err(err),
            }
        }
    }

    /// Creates a node; returns its stat and its path (with the sequence number, for a
    /// sequential mode).
    pub fn create(
        &self,
        path: &str,
        data: &[u8],
        options: &CreateOptions,
    ) -> impl Future<Output = Result<(Stat, String)>> + Send + 'static + use<> {
        let request = self
            .server_path(path, options.mode.is_sequential())
            .and_then(|path| options.request(path, data))
            .map(Request::Create);
        let reply = self.send(request, None);
        let connect = self.connect_string().clone();
        async move {
            let created: Create2Response = decode(reply.await?)?;
            Ok((created.stat, connect.client_path(&created.path)))
        }
    }

    /// Deletes a node, if its version is `version` (any version for `None`).
    pub fn delete(
        &self,
        path: &str,
        version: Option<i32>,
    ) -> impl Future<Output = Result<()>> + Send + 'static + use<> {
        let request = self.server_path(path, false).map(|path| {
            Request::Delete(PathVersionRequest {
                path,
                version: version.unwrap_or(-1),
            })
        });
        let reply = self.send(request, None);
        async move { reply.await.map(drop) }
    }

    /// A node's data and stat.
    pub fn get_data(
        &self,
        path: &str,
    ) -> impl Future<Output = Result<DataAndStat>> + Send + 'static + use<> {
        let reply = self.read(path, OpCode::GetData);
        async move { data_and_stat(reply.await?) }
    }

    /// A node's data and stat, and a watch that fires when the node changes or is deleted.
    pub fn get_and_watch_data(
        &self,
        path: &str,
    ) -> impl Future<Output = Result<(Vec<u8>, Stat, OneshotWatcher)>> + Send + 'static {
        let (reply, watcher) = self.watched_read(path, OpCode::GetData, Kind::Data, false);
        async move {
            let (data, stat) = data_and_stat(reply.await?)?;
            Ok((data, stat, watcher))
        }
    }

    /// A node's stat, or `None` if it does not exist.
    pub fn check_stat(
        &self,
        path: &str,
    ) -> impl Future<Output = Result<Option<Stat>>> + Send + 'static + use<> {
        let reply = self.read(path, OpCode::Exists);
        async move { optional_stat(reply.await) }
    }

    /// A node's stat (or `None`), and a watch that fires when it is created, changed or
    /// deleted.
    pub fn check_and_watch_stat(
        &self,
        path: &str,
    ) -> impl Future<Output = Result<(Option<Stat>, OneshotWatcher)>> + Send + 'static {
        let (reply, watcher) = self.watched_read(path, OpCode::Exists, Kind::Data, true);
        async move { Ok((optional_stat(reply.await)?, watcher)) }
    }

    /// Holds back the writes of requests sent from now on, until the returned [`Cork`] is
    /// dropped; they then leave together. For a caller that sends many requests at once (a
    /// pipeline refilled after a batch of replies): one write, and one read on the server,
    /// for all of them instead of one each. Requests still leave in the order they were
    /// made, and nothing is sent while the cork lives: drop it before awaiting a reply.
    pub fn cork(&self) -> Cork {
        self.handle.shared.cork()
    }

    /// A node's children (names, unsorted).
    pub fn list_children(
        &self,
        path: &str,
    ) -> impl Future<Output = Result<Vec<String>>> + Send + 'static + use<> {
        let reply = self.read(path, OpCode::GetChildren);
        async move { Ok(decode::<StringsResponse>(reply.await?)?.strings) }
    }

    /// A node's children, and a watch that fires when one is added or removed (or the node is
    /// deleted).
    pub fn list_and_watch_children(
        &self,
        path: &str,
    ) -> impl Future<Output = Result<(Vec<String>, OneshotWatcher)>> + Send + 'static {
        let (reply, watcher) = self.watched_read(path, OpCode::GetChildren, Kind::Child, false);
        async move {
            let children = decode::<StringsResponse>(reply.await?)?.strings;
            Ok((children, watcher))
        }
    }

    /// A node's children and its stat.
    pub fn get_children(
        &self,
        path: &str,
    ) -> impl Future<Output = Result<(Vec<String>, Stat)>> + Send + 'static + use<> {
        let reply = self.read(path, OpCode::GetChildren2);
        async move {
            let listed: GetChildren2Response = decode(reply.await?)?;
            Ok((listed.children, listed.stat))
        }
    }

    /// Sets a node's data, if its version is `version` (any for `None`); returns the new stat.
    pub fn set_data(
        &self,
        path: &str,
        data: &[u8],
        version: Option<i32>,
    ) -> impl Future<Output = Result<Stat>> + Send + 'static + use<> {
        let request = self.server_path(path, false).map(|path| {
            Request::SetData(SetDataRequest {
                path,
                data: Some(Bytes::copy_from_slice(data)),
                version: version.unwrap_or(-1),
            })
        });
        let reply = self.send(request, None);
        async move { Ok(decode::<StatResponse>(reply.await?)?.stat) }
    }

    /// A node's ACL and stat.
    pub fn get_acl(
        &self,
        path: &str,
    ) -> impl Future<Output = Result<(Vec<Acl>, Stat)>> + Send + 'static + use<> {
        let request = self
            .server_path(path, false)
            .map(|path| Request::GetAcl(PathRequest { path }));
        let reply = self.send(request, None);
        async move {
            let got: GetAclResponse = decode(reply.await?)?;
            Ok((got.acl, got.stat))
        }
    }

    /// Sets a node's ACL, if its ACL version is `version` (any for `None`).
    pub fn set_acl(
        &self,
        path: &str,
        acl: &[Acl],
        version: Option<i32>,
    ) -> impl Future<Output = Result<Stat>> + Send + 'static + use<> {
        let request = self.server_path(path, false).map(|path| {
            Request::SetAcl(SetAclRequest {
                path,
                acl: acl.to_vec(),
                version: version.unwrap_or(-1),
            })
        });
        let reply = self.send(request, None);
        async move { Ok(decode::<StatResponse>(reply.await?)?.stat) }
    }

    /// Waits until the server this session is connected to has caught up with the leader.
    pub fn sync(&self, path: &str) -> impl Future<Output = Result<()>> + Send + 'static + use<> {
        let request = self
            .server_path(path, false)
            .map(|path| Request::Sync(PathRequest { path }));
        let reply = self.send(request, None);
        async move { reply.await.map(drop) }
    }

    /// The number of nodes below `path` (not counting it).
    pub fn count_descendants(
        &self,
        path: &str,
    ) -> impl Future<Output = Result<i32>> + Send + 'static + use<> {
        let request = self
            .server_path(path, false)
            .map(|path| Request::GetAllChildrenNumber(PathRequest { path }));
        let reply = self.send(request, None);
        async move { Ok(decode::<GetAllChildrenNumberResponse>(reply.await?)?.total_number) }
    }

    /// The ephemeral nodes this session owns whose paths start with `prefix`.
    pub fn list_ephemerals(
        &self,
        prefix: &str,
    ) -> impl Future<Output = Result<Vec<String>>> + Send + 'static + use<> {
        let request = self
            .server_path(prefix, true)
            .map(|path| Request::GetEphemerals(PathRequest { path }));
        let reply = self.send(request, None);
        let connect = self.connect_string().clone();
        async move {
            let listed: StringsResponse = decode(reply.await?)?;
            Ok(listed
                .strings
                .iter()
                .map(|path| connect.client_path(path))
                .collect())
        }
    }

    /// Watches `path` until the watcher is dropped: the node alone (`Persistent`) or its whole
    /// subtree (`PersistentRecursive`). Needs ZooKeeper 3.6 or later (or Keeper).
    pub fn watch(
        &self,
        path: &str,
        mode: AddWatchMode,
    ) -> impl Future<Output = Result<PersistentWatcher>> + Send + 'static + use<> {
        let recursive = mode == AddWatchMode::PersistentRecursive;
        let client = Arc::downgrade(&self.handle.shared);
        let (request, registration, watcher) = match self.server_path(path, false) {
            Ok(path) => {
                let (tx, rx) = mpsc::unbounded_channel();
                let request = Request::AddWatch(AddWatchRequest {
                    path: path.clone(),
                    mode: mode.code(),
                });
                let registration = Registration::Persistent {
                    recursive,
                    path: path.clone(),
                    tx,
                };
                let removal = Removal {
                    path,
                    recursive,
                    client,
                };
                let watcher = PersistentWatcher::new(rx, removal);
                (Ok(request), Some(registration), Ok(watcher))
            }
            Err(err) => (Err(err.clone()), None, Err(err)),
        };
        let reply = self.send(request, registration);
        async move {
            reply.await?;
            watcher
        }
    }

    /// Creates `path` and every missing ancestor with `options` (a persistent or container
    /// mode); a node already there, the path itself included, is fine. The path is created
    /// first; only if its parent is missing are the ancestors sent, all together, so this takes
    /// one round trip, or two when ancestors are missing.
    pub fn mkdir(
        &self,
        path: &str,
        options: &CreateOptions,
    ) -> impl Future<Output = Result<()>> + Send + 'static + use<> {
        let mode = options.mode;
        let checked = self.server_path(path, false).and_then(|server_path| {
            if mode.is_sequential() || mode.is_ephemeral() {
                return Err(Error::BadArguments(format!(
                    "mkdir {path:?}: mode {mode:?} cannot make a path of nodes"
                )));
            }
            Ok(server_path)
        });
        self.make_dirs(checked, options.clone())
    }

    /// Creates `server_path` (a path on the server, chroot or not) and its missing ancestors.
    fn make_dirs(
        &self,
        server_path: Result<String>,
        options: CreateOptions,
    ) -> impl Future<Output = Result<()>> + Send + 'static + use<> {
        let create = |path: &str| {
            let request = options.request(path.to_owned(), &[]).map(Request::Create);
            self.send(request, None)
        };
        let first = server_path.map(|path| {
            let reply = create(&path);
            (path, reply)
        });
        let client = self.clone();
        async move {
            let (path, first) = first?;
            match first.await {
                Ok(_) | Err(Error::NodeExists) => return Ok(()),
                Err(Error::NoNode) => {}
                Err(err) => return Err(err),
            }
            let create = |path: &str| {
                let request = options.request(path.to_owned(), &[]).map(Request::Create);
                client.send(request, None)
            };
            let creates: Vec<_> = prefixes(&path).map(create).collect();
            let mut first_error = None;
            for create in creates {
                match create.await {
                    Ok(_) | Err(Error::NodeExists) => {}
                    Err(err) => {
                        first_error.get_or_insert(err);
                    }
                }
            }
            first_error.map_or(Ok(()), Err)
        }
    }

    /// Creates `chroot` and its ancestors, by their paths on the server.
    async fn create_chroot(&self, chroot: &str) -> Result<()> {
        let made = self
            .make_dirs(
                Ok(chroot.to_owned()),
                CreateOptions::new(CreateMode::Persistent),
            )
            .await;
        match made {
            Ok(()) => Ok(()),
            Err(err) if err.is_connection_loss() || err.is_terminal() => Err(err),
            Err(err) => Err(Error::BadArguments(format!(
                "cannot create the chroot {chroot:?}: {err}"
            ))),
        }
    }

    /// A batch of writes applied atomically: all or none.
    pub fn multi(&self) -> crate::multi::MultiWriter<'_> {
        crate::multi::MultiWriter::new(self)
    }

    /// A batch of reads answered together, each on its own.
    pub fn multi_read(&self) -> crate::multi::MultiReader<'_> {
        crate::multi::MultiReader::new(self)
    }

    /// Sends a batch: a failed multi's body names the operation that failed.
    pub(crate) fn send_batch(
        &self,
        request: Result<Request>,
    ) -> impl Future<Output = Result<Reply>> + Send + 'static + use<> {
        self.send_keeping_errors(request, None)
    }

    pub(crate) fn client_path(&self, path: &str) -> String {
        self.connect_string().client_path(path)
    }

    /// The server's path for the caller's `path`, once it is checked (`sequential`: as the
    /// prefix of a sequential create).
    pub(crate) fn server_path(&self, path: &str, sequential: bool) -> Result<String> {
        check(path, sequential)?;
        Ok(self.connect_string().server_path(path))
    }

    /// A read of `op` on `path`, leaving no watch.
    fn read(
        &self,
        path: &str,
        op: OpCode,
    ) -> impl Future<Output = Result<Reply>> + Send + 'static + use<> {
        let request = self
            .server_path(path, false)
            .map(|path| read_request(op, path, false));
        self.send(request, None)
    }

    /// A read of `op` on `path` that leaves a one-shot watch of `kind` (for exists, `exists`:
    /// on a missing node too), and the watcher it will wake.
    fn watched_read(
        &self,
        path: &str,
        op: OpCode,
        kind: Kind,
        exists: bool,
    ) -> (
        impl Future<Output = Result<Reply>> + Send + 'static,
        OneshotWatcher,
    ) {
        let (tx, rx) = oneshot::channel();
        let (request, registration) = match self.server_path(path, false) {
            Ok(path) => {
                let request = read_request(op, path.clone(), true);
                let registration = Registration::Oneshot {
                    kind,
                    exists,
                    path,
                    tx,
                };
                (Ok(request), Some(registration))
            }
            Err(err) => (Err(err), None),
        };
        (self.send(request, registration), OneshotWatcher::new(rx))
    }
}

/// The request of a read of `op` (getData, exists, getChildren or getChildren2) on `path`.
fn read_request(op: OpCode, path: String, watch: bool) -> Request {
    let body = PathWatchRequest { path, watch };
    match op {
        OpCode::GetData => Request::GetData(body),
        OpCode::Exists => Request::Exists(body),
        OpCode::GetChildren2 => Request::GetChildren2(body),
        _ => Request::GetChildren(body),
    }
}

/// Every ancestor of `path` below the root, then `path`: `/a`, `/a/b`, `/a/b/c`.
fn prefixes(path: &str) -> impl Iterator<Item = &str> {
    path.match_indices('/')
        .skip(1)
        .map(|(at, _)| &path[..at])
        .chain((path != "/").then_some(path))
}

/// Reads a reply body as `T`.
pub(crate) fn decode<T: Jute>(reply: Reply) -> Result<T> {
    T::read(&mut Reader::new(reply.body))
        .map_err(|err| Error::Protocol(format!("an unreadable reply: {err}")))
}

fn data_and_stat(reply: Reply) -> Result<DataAndStat> {
    let got: GetDataResponse = decode(reply)?;
    Ok((
        got.data.map(|data| data.to_vec()).unwrap_or_default(),
        got.stat,
    ))
}

fn optional_stat(reply: Result<Reply>) -> Result<Option<Stat>> {
    match reply {
        Ok(reply) => Ok(Some(decode::<StatResponse>(reply)?.stat)),
        Err(Error::NoNode) => Ok(None),
        Err(err) => Err(err),
    }
}
