//! Naming a backend: `--backend URL` or `LOCKKEEPER_BACKEND`, shared by every operator command.
//!
//! One URL names any backend: `zk://host:port[,host:port...][/chroot]`, `redis://host:port`,
//! `redis+sentinel://host:port[,host:port...]/MASTER`, `redis+cluster://host:port[,...]` and
//! `etcd://host:port[,host:port...]`; over TLS, `zk+tls://`, `rediss://` and `etcd+https://`,
//! with `--tls-ca`, `--tls-cert` and `--tls-key` (or `LOCKKEEPER_TLS_CA`, `_CERT`, `_KEY`).
//! [`Backend::parse`] turns it into a typed [`Backend`] before anything is dialled, and
//! [`Backend::connect`] turns that into a connected [`Handle`] within the connect timeout.
//!
//! Invariants:
//! - every failure is a [`Failure`]: one line naming the URL (its password masked) and what is
//!   wrong, with the exit code scripts match on: a malformed URL or unknown scheme is
//!   [`exit::USAGE`], a backend that does not answer in time is [`exit::UNAVAILABLE`] and
//!   names the address dialled;
//! - connecting never takes much longer than `--connect-timeout`, whatever the backend does:
//!   the library bounds it, and a last timer here bounds the library;
//! - an `etcd://` URL parses in every build, so its mistakes are named the same way; a build
//!   without the `etcd` feature (on by default, turned off with `--no-default-features`)
//!   refuses to connect to it with a usage error saying how to build one that can.

use std::fmt;
use std::process::ExitCode;
use std::time::Duration;

use lockkeeper::TlsFiles;
use lockkeeper::redis::{Redis, RedisOptions};
use lockkeeper::zk::{ConnectionState, Session, StateStream};

use crate::exit;

/// Default ports, as each server ships them.
const ZK_PORT: u16 = 2181;
const REDIS_PORT: u16 = 6379;
const SENTINEL_PORT: u16 = 26379;
const ETCD_PORT: u16 = 2379;

/// The schemes a backend URL may have, for the error that names an unknown one.
const SCHEMES: &str = "zk://, zk+tls://, redis://, rediss://, redis+sentinel://, \
                       redis+cluster://, etcd:// or etcd+https://";

/// How long a holder may go unheard before the backend gives its lock away, when the command
/// is not told otherwise: the ZooKeeper session timeout, the Redis lease that the watchdog
/// renews every third of it, or the etcd lease's TTL. Ten seconds rides out a
/// garbage-collection pause or a network blip, yet a crashed holder's lock is free again
/// within ten seconds.
pub(crate) const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(10);

/// The backend options every operator command flattens into its arguments.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct BackendArgs {
    /// The coordination backend: `zk://host:port[,host:port...][/chroot]`, `redis://host:port`,
    /// `redis+sentinel://host:port[,host:port...]/MASTER`, `redis+cluster://host:port[,...]`,
    /// `etcd://host:port[,host:port...]`; over TLS `zk+tls://...`, `rediss://...`,
    /// `etcd+https://...`.
    #[arg(
        long,
        env = "LOCKKEEPER_BACKEND",
        default_value = "zk://127.0.0.1:2181"
    )]
    pub backend: String,
    /// How long connecting to the backend may take before giving up with exit code 69
    /// (e.g. 500ms, 5s).
    #[arg(long, value_name = "D", default_value = "5s", value_parser = parse_duration)]
    pub connect_timeout: Duration,
    /// With a TLS backend (`zk+tls://`, `rediss://`, `etcd+https://`): the CA certificates
    /// (PEM) that signed the servers' certificates. `rediss://` without it trusts the system's
    /// CAs.
    #[arg(long, value_name = "PEM", env = "LOCKKEEPER_TLS_CA")]
    pub tls_ca: Option<std::path::PathBuf>,
    /// With a TLS backend: this client's certificate (PEM), for servers that require one; its
    /// subject is the client's `x509` id on ZooKeeper and Keeper. Needs --tls-key and --tls-ca.
    #[arg(long, value_name = "PEM", env = "LOCKKEEPER_TLS_CERT")]
    pub tls_cert: Option<std::path::PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, value_name = "PEM", env = "LOCKKEEPER_TLS_KEY")]
    pub tls_key: Option<std::path::PathBuf>,
    /// With ZooKeeper or Keeper: authenticate with SASL DIGEST-MD5 as this user (its id under
    /// the `sasl` ACL scheme). Needs the password, best given as LOCKKEEPER_SASL_PASSWORD.
    #[arg(long, value_name = "USER", env = "LOCKKEEPER_SASL_USER")]
    pub sasl_user: Option<String>,
    /// The password of --sasl-user (a flag shows in `ps`; the variable does not).
    #[arg(
        long,
        value_name = "PASSWORD",
        env = "LOCKKEEPER_SASL_PASSWORD",
        hide_env_values = true
    )]
    pub sasl_password: Option<String>,
}

impl BackendArgs {
    /// Parses `--backend` and connects to it, with `session_timeout` as the ZooKeeper session
    /// timeout or the Redis lease.
    pub(crate) async fn connect(
        &self,
        session_timeout: Duration,
    ) -> Result<(Backend, Handle), Failure> {
        let backend = Backend::parse(&self.backend)?;
        let tls = self.tls(&backend)?;
        let sasl = self.sasl(&backend)?;
        let handle = backend
            .connect(&ConnectOptions {
                connect_timeout: self.connect_timeout,
                session_timeout,
                tls,
                sasl,
            })
            .await?;
        // ZooKeeper bounds the session timeout (2 to 20 ticks) and grants what fits without a
        // word: a holder that asked for 1 s and got 4 s keeps a dead process's lock four times
        // as long as planned. Said once, with the value in force.
        if let Handle::Zk(session) = &handle {
            let granted = session.session_timeout();
            if granted != session_timeout {
                eprintln!(
                    "lockkeeper: warning: --session-timeout {session_timeout:?} is outside what \
                     {backend} allows; it granted {granted:?}, which is used"
                );
            }
        }
        Ok((backend, handle))
    }
}

impl BackendArgs {
    /// The SASL user and password, for a ZooKeeper backend only, and both or neither.
    fn sasl(&self, backend: &Backend) -> Result<Option<(String, String)>, Failure> {
        match (&self.sasl_user, &self.sasl_password) {
            (None, None) => Ok(None),
            (Some(_), Some(_)) if !matches!(backend, Backend::Zk { .. }) => {
                Err(Failure::usage(format!(
                    "--sasl-user is for ZooKeeper and Keeper (zk://, zk+tls://), not {backend}"
                )))
            }
            (Some(user), Some(password)) => Ok(Some((user.clone(), password.clone()))),
            _ => Err(Failure::usage(
                "--sasl-user and --sasl-password (or LOCKKEEPER_SASL_PASSWORD) go together",
            )),
        }
    }

    /// The TLS files for `backend`, checked against its scheme: given only to a TLS backend,
    /// a certificate with its key and a CA; `None` for a plain backend, and for `rediss://`
    /// without `--tls-ca` (the system's CAs).
    fn tls(&self, backend: &Backend) -> Result<Option<TlsFiles>, Failure> {
        let given = self.tls_ca.is_some() || self.tls_cert.is_some() || self.tls_key.is_some();
        if !backend.is_tls() {
            return match given {
                true => Err(Failure::usage(format!(
                    "--tls-ca, --tls-cert and --tls-key are for a TLS backend (zk+tls://, \
                     rediss://, etcd+https://), not {backend}"
                ))),
                false => Ok(None),
            };
        }
        let cert = match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => Some((cert.clone(), key.clone())),
            (None, None) => None,
            _ => return Err(Failure::usage("--tls-cert and --tls-key go together")),
        };
        match &self.tls_ca {
            Some(ca) => Ok(Some(TlsFiles {
                ca: ca.clone(),
                cert,
            })),
            None if matches!(backend, Backend::Redis { .. }) && cert.is_none() => Ok(None),
            None => Err(Failure::usage(format!(
                "{backend} needs --tls-ca (or LOCKKEEPER_TLS_CA): the CA certificates that \
                 signed the servers' certificates"
            ))),
        }
    }
}

/// A parsed backend URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Backend {
    /// ZooKeeper or Keeper: the ensemble's `host:port`s and the chroot every path is under.
    Zk {
        hosts: Vec<String>,
        chroot: Option<String>,
        /// Over TLS (`zk+tls://`).
        tls: bool,
    },
    /// One Redis server. `url` is what the client dials (`redis://[auth@]host:port[/db]`).
    Redis { url: String },
    /// The master that these Sentinels (`redis://host:port` each) know as `master`.
    RedisSentinel {
        sentinels: Vec<String>,
        master: String,
    },
    /// A Redis Cluster, reached through any of its `nodes` (`redis://[auth@]host:port` each).
    RedisCluster { nodes: Vec<String> },
    /// An etcd cluster, reached through any of its members (`host:port` each), over TLS with
    /// `tls` (`etcd+https://`).
    Etcd { endpoints: Vec<String>, tls: bool },
}

/// A connected backend, as the commands use it.
#[derive(Clone, Debug)]
pub(crate) enum Handle {
    Zk(Session),
    Redis(Redis),
    /// A session: one lease, kept alive, to which every lock key of the command is attached.
    #[cfg(feature = "etcd")]
    Etcd(lockkeeper::etcd::Session),
}

/// Waits until `session` is connected again after a disconnection or a new session replaced an
/// expired one, so that a command can set its watches again (a new session has none).
///
/// The state stream is the prompt signal; the one-second look at [`Session::state`] is the
/// fallback for a change reported before `states` was read (the stream only carries later
/// ones). A closed session never comes back: that is [`exit::UNAVAILABLE`] naming `what`.
pub(crate) async fn connection_back(
    session: &Session,
    states: &mut StateStream,
    what: &str,
) -> Result<(), Failure> {
    let closed = || Failure::unavailable(format!("{what}: the session was closed"));
    loop {
        tokio::select! {
            state = states.next() => match state {
                Some(ConnectionState::Reconnected | ConnectionState::Connected) => return Ok(()),
                Some(ConnectionState::Closed) | None => return Err(closed()),
                Some(_) => {}
            },
            () = tokio::time::sleep(Duration::from_secs(1)) => match session.state() {
                ConnectionState::Connected | ConnectionState::Reconnected => return Ok(()),
                ConnectionState::Closed => return Err(closed()),
                ConnectionState::Suspended | ConnectionState::Lost => {}
            },
        }
    }
}

/// What connecting may take and what the connection promises.
#[derive(Clone, Debug)]
pub(crate) struct ConnectOptions {
    /// The bound on connecting (exit 69 past it).
    pub connect_timeout: Duration,
    /// The ZooKeeper session timeout, the Redis watchdog lease, or the etcd lease's TTL.
    pub session_timeout: Duration,
    /// The TLS files of a TLS backend.
    pub tls: Option<TlsFiles>,
    /// SASL DIGEST-MD5's user and password, for ZooKeeper.
    pub sasl: Option<(String, String)>,
}

/// A command's failure: a one-line message and the exit code it ends with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Failure {
    pub code: u8,
    pub message: String,
}

impl Failure {
    pub(crate) fn usage(message: impl Into<String>) -> Failure {
        Failure {
            code: exit::USAGE,
            message: message.into(),
        }
    }

    pub(crate) fn unavailable(message: impl Into<String>) -> Failure {
        Failure {
            code: exit::UNAVAILABLE,
            message: message.into(),
        }
    }

    pub(crate) fn software(message: impl Into<String>) -> Failure {
        Failure {
            code: exit::SOFTWARE,
            message: message.into(),
        }
    }

    /// A library error met while working on `what` (a lock name, a backend), with the exit code
    /// its kind calls for: a bad argument is the caller's (64), a backend that stopped
    /// answering is unavailable (69), anything else is ours (70).
    pub(crate) fn from_lib(what: &str, err: lockkeeper::Error) -> Failure {
        use lockkeeper::Error;
        let code = match &err {
            Error::InvalidArgument(_) => exit::USAGE,
            Error::Connect { .. } | Error::RetriesExhausted { .. } | Error::SessionLost => {
                exit::UNAVAILABLE
            }
            Error::Redis(e) if e.is_io_error() || e.is_timeout() || e.is_connection_dropped() => {
                exit::UNAVAILABLE
            }
            // A request the backend never answered (a timed wait's withdrawal past its
            // deadline, say): the backend stopped answering, which is not our failure.
            e if e.is_connection_loss() => exit::UNAVAILABLE,
            _ => exit::SOFTWARE,
        };
        Failure {
            code,
            message: format!("{what}: {err}"),
        }
    }

    /// Prints `lockkeeper COMMAND: MESSAGE` on stderr and gives the exit code.
    pub(crate) fn report(&self, command: &str) -> ExitCode {
        eprintln!("lockkeeper {command}: {}", self.message);
        exit::code(self.code)
    }
}

impl Backend {
    /// Whether it is reached over TLS.
    pub(crate) fn is_tls(&self) -> bool {
        match self {
            Backend::Zk { tls, .. } | Backend::Etcd { tls, .. } => *tls,
            Backend::Redis { url } => url.starts_with("rediss://"),
            Backend::RedisSentinel { .. } | Backend::RedisCluster { .. } => false,
        }
    }

    /// Parses a backend URL; a [`Failure`] with [`exit::USAGE`] names the URL and the fault.
    pub(crate) fn parse(url: &str) -> Result<Backend, Failure> {
        let shown = redact(url);
        let bad = |why: String| Failure::usage(format!("backend URL {shown:?}: {why}"));
        let Some((scheme, rest)) = url.split_once("://") else {
            return Err(bad(format!("no scheme; expected {SCHEMES}")));
        };
        if rest.contains(['?', '#']) {
            return Err(bad("query strings and fragments are not supported".into()));
        }
        let (auth, rest) = match rest.rsplit_once('@') {
            Some((auth, rest)) => (Some(auth), rest),
            None => (None, rest),
        };
        let (authority, path) = match rest.find('/') {
            Some(slash) => (&rest[..slash], &rest[slash..]),
            None => (rest, ""),
        };
        match scheme.to_ascii_lowercase().as_str() {
            scheme @ ("zk" | "zookeeper" | "zk+tls" | "zookeeper+tls") => {
                if auth.is_some() {
                    return Err(bad("zk:// takes no user name or password".into()));
                }
                let hosts = hosts(authority, ZK_PORT).map_err(bad)?;
                let chroot = chroot(path).map_err(bad)?;
                let tls = scheme.ends_with("+tls");
                Ok(Backend::Zk { hosts, chroot, tls })
            }
            scheme @ ("redis" | "rediss") => {
                let mut hosts = hosts(authority, REDIS_PORT).map_err(bad)?;
                if hosts.len() > 1 {
                    return Err(bad("redis:// names one server; for several use \
                         redis+cluster:// or redis+sentinel://"
                        .into()));
                }
                let db = match path.trim_start_matches('/') {
                    "" => String::new(),
                    db if db.parse::<u32>().is_ok() => format!("/{db}"),
                    db => return Err(bad(format!("{db:?} is not a database number"))),
                };
                let host = hosts.remove(0);
                Ok(Backend::Redis {
                    url: format!("{scheme}://{}{host}{db}", at(auth)),
                })
            }
            "redis+sentinel" => {
                if auth.is_some() {
                    return Err(bad(
                        "redis+sentinel:// takes no user name or password".into()
                    ));
                }
                let sentinels = hosts(authority, SENTINEL_PORT).map_err(bad)?;
                let master = path.trim_start_matches('/');
                if master.is_empty() || master.contains('/') {
                    return Err(bad("needs the master's name: \
                         redis+sentinel://host:port[,host:port...]/MASTER"
                        .into()));
                }
                Ok(Backend::RedisSentinel {
                    sentinels: sentinels
                        .into_iter()
                        .map(|h| format!("redis://{h}"))
                        .collect(),
                    master: master.to_string(),
                })
            }
            "redis+cluster" => {
                let nodes = hosts(authority, REDIS_PORT).map_err(bad)?;
                if !path.is_empty() && path != "/" {
                    return Err(bad(
                        "a cluster has no database number or path after the hosts".into(),
                    ));
                }
                Ok(Backend::RedisCluster {
                    nodes: nodes
                        .into_iter()
                        .map(|h| format!("redis://{}{h}", at(auth)))
                        .collect(),
                })
            }
            scheme @ ("etcd" | "etcd+https") => {
                if auth.is_some() {
                    return Err(bad("etcd:// takes no user name or password".into()));
                }
                if !path.is_empty() && path != "/" {
                    return Err(bad(format!(
                        "etcd:// takes no path after the hosts (got {path:?}); the lock's name \
                         is the command's NAME"
                    )));
                }
                let endpoints = hosts(authority, ETCD_PORT).map_err(bad)?;
                let tls = scheme == "etcd+https";
                Ok(Backend::Etcd { endpoints, tls })
            }
            other => Err(bad(format!("unknown scheme {other:?}; expected {SCHEMES}"))),
        }
    }

    /// Connects within `options.connect_timeout`: [`exit::UNAVAILABLE`] names the address
    /// and why (refused, timed out, not the right kind of server).
    pub(crate) async fn connect(&self, options: &ConnectOptions) -> Result<Handle, Failure> {
        if options.connect_timeout.is_zero() || options.session_timeout.is_zero() {
            return Err(Failure::usage(
                "--connect-timeout and --session-timeout must be greater than zero",
            ));
        }
        let connecting = async {
            match self {
                Backend::Zk { hosts, chroot, .. } => {
                    let connect_string = format!(
                        "{}{}",
                        hosts.join(","),
                        chroot.as_deref().unwrap_or_default()
                    );
                    let mut builder = Session::builder(&connect_string)
                        .session_timeout(options.session_timeout)
                        .connection_timeout(options.connect_timeout);
                    if let Some(files) = &options.tls {
                        builder = builder.tls(files.clone());
                    }
                    if let Some((user, password)) = &options.sasl {
                        builder = builder.sasl_digest(user, password);
                    }
                    builder.connect().await.map(Handle::Zk)
                }
                Backend::Redis { url } => Redis::connect_with(url, redis_options(options))
                    .await
                    .map(Handle::Redis),
                Backend::RedisSentinel { sentinels, master } => {
                    Redis::connect_sentinel(sentinels, master, redis_options(options))
                        .await
                        .map(Handle::Redis)
                }
                Backend::RedisCluster { nodes } => {
                    Redis::connect_cluster(nodes, redis_options(options))
                        .await
                        .map(Handle::Redis)
                }
                #[cfg(feature = "etcd")]
                Backend::Etcd { endpoints, .. } => {
                    let mut builder = lockkeeper::etcd::Session::builder(&endpoints.join(","))
                        .ttl(options.session_timeout)
                        .connect_timeout(options.connect_timeout);
                    if let Some(files) = &options.tls {
                        builder = builder.tls(files.clone());
                    }
                    builder.connect().await.map(Handle::Etcd)
                }
                #[cfg(not(feature = "etcd"))]
                Backend::Etcd { .. } => Err(lockkeeper::Error::InvalidArgument(
                    "this lockkeeper was built without etcd support (its default feature `etcd` \
                     was turned off); build it with the default features: \
                     `cargo build --release -p lockkeeper-cli`"
                        .into(),
                )),
            }
        };
        // The library keeps to the connect timeout; this is the backstop that makes the
        // promise of a bounded wait hold even if it did not.
        let backstop = options.connect_timeout + Duration::from_secs(2);
        match tokio::time::timeout(backstop, connecting).await {
            Ok(Ok(handle)) => Ok(handle),
            Ok(Err(lockkeeper::Error::InvalidArgument(why))) => {
                Err(Failure::usage(format!("backend {self}: {why}")))
            }
            Ok(Err(lockkeeper::Error::Zk(lockkeeper::zk::client::Error::AuthFailed))) => {
                Err(Failure {
                    code: exit::NO_PERMISSION,
                    message: format!(
                        "backend {self} refused the credentials (--sasl-user and its password)"
                    ),
                })
            }
            Ok(Err(err)) => Err(Failure::unavailable(format!(
                "backend {self} is unreachable: {err}"
            ))),
            Err(_) => Err(Failure::unavailable(format!(
                "backend {self} is unreachable: no connection within {backstop:?}"
            ))),
        }
    }
}

/// The URL again, in canonical form (default ports filled in) with any password masked: what
/// messages name.
impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let strip = |url: &str| url.trim_start_matches("redis://").to_string();
        match self {
            Backend::Zk { hosts, chroot, tls } => write!(
                f,
                "{}://{}{}",
                if *tls { "zk+tls" } else { "zk" },
                hosts.join(","),
                chroot.as_deref().unwrap_or_default()
            ),
            Backend::Redis { url } => write!(f, "{}", redact(url)),
            Backend::RedisSentinel { sentinels, master } => {
                let hosts: Vec<String> = sentinels.iter().map(|s| strip(s)).collect();
                write!(f, "redis+sentinel://{}/{master}", hosts.join(","))
            }
            Backend::RedisCluster { nodes } => {
                let hosts: Vec<String> = nodes.iter().map(|n| strip(&redact(n))).collect();
                write!(f, "redis+cluster://{}", hosts.join(","))
            }
            Backend::Etcd { endpoints, tls } => write!(
                f,
                "{}://{}",
                if *tls { "etcd+https" } else { "etcd" },
                endpoints.join(",")
            ),
        }
    }
}

fn redis_options(options: &ConnectOptions) -> RedisOptions {
    let redis = RedisOptions::new()
        .connect_timeout(options.connect_timeout)
        .watchdog_timeout(options.session_timeout);
    match &options.tls {
        Some(files) => redis.tls(files.clone()),
        None => redis,
    }
}

/// `auth@` for a URL, or nothing.
fn at(auth: Option<&str>) -> String {
    auth.map(|a| format!("{a}@")).unwrap_or_default()
}

/// `url` with the password of its `user:password@` part replaced by `***`.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let Some((auth, hosts)) = rest.rsplit_once('@') else {
        return url.to_string();
    };
    match auth.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:***@{hosts}"),
        None => url.to_string(),
    }
}

/// Parses `host[:port],host[:port]...` into `host:port`s, `default_port` where none is given.
fn hosts(authority: &str, default_port: u16) -> Result<Vec<String>, String> {
    if authority.is_empty() {
        return Err("names no host".into());
    }
    authority
        .split(',')
        .map(|host| {
            let host = host.trim();
            let (name, port) = if let Some(v6) = host.strip_prefix('[') {
                // [::1]:2181
                match v6.split_once(']') {
                    Some((addr, rest)) => (format!("[{addr}]"), rest.strip_prefix(':')),
                    None => return Err(format!("host {host:?} lacks its closing ']'")),
                }
            } else {
                match host.split_once(':') {
                    Some((name, port)) => (name.to_string(), Some(port)),
                    None => (host.to_string(), None),
                }
            };
            if name.is_empty() || name == "[]" {
                return Err(format!("an empty host name in {authority:?}"));
            }
            if name.contains(|c: char| c.is_whitespace() || c.is_control()) {
                return Err(format!(
                    "host {name:?} contains a space or control character"
                ));
            }
            let port = match port {
                None => default_port,
                Some(port) => match port.parse::<u16>() {
                    Ok(p) if p > 0 => p,
                    _ => return Err(format!("{port:?} is not a port number (1-65535)")),
                },
            };
            Ok(format!("{name}:{port}"))
        })
        .collect()
}

/// Checks a ZooKeeper chroot (`/app`, `/a/b`) by ZooKeeper's path rules; `""` or `"/"` is none.
fn chroot(path: &str) -> Result<Option<String>, String> {
    if path.is_empty() || path == "/" {
        return Ok(None);
    }
    lockkeeper_proto::path::validate(path).map_err(|why| format!("chroot {path:?}: {why}"))?;
    Ok(Some(path.to_string()))
}

/// The duration flags (`--timeout`, `--kill-after`, ...) read `250ms`, `5s`, `1.5s`, `2m`, `1h`
/// (a bare number is seconds) as the benchmark's do: one parser for every command.
pub(crate) use lockkeeper_load::parse_duration;

#[cfg(test)]
mod tests {
    use super::*;

    fn zk(hosts: &[&str], chroot: Option<&str>) -> Backend {
        Backend::Zk {
            hosts: hosts.iter().map(ToString::to_string).collect(),
            chroot: chroot.map(str::to_string),
            tls: false,
        }
    }

    #[test]
    fn zookeeper_urls() {
        assert_eq!(
            Backend::parse("zk://127.0.0.1:2181"),
            Ok(zk(&["127.0.0.1:2181"], None))
        );
        assert_eq!(
            Backend::parse("zk://a:1,b,[::1]:3/app/x"),
            Ok(zk(&["a:1", "b:2181", "[::1]:3"], Some("/app/x")))
        );
        assert_eq!(Backend::parse("zk://a/"), Ok(zk(&["a:2181"], None)));
        assert_eq!(
            Backend::parse("zk://a:1,b:2/app").unwrap().to_string(),
            "zk://a:1,b:2/app"
        );
    }

    #[test]
    fn redis_urls() {
        assert_eq!(
            Backend::parse("redis://h"),
            Ok(Backend::Redis {
                url: "redis://h:6379".into()
            })
        );
        assert_eq!(
            Backend::parse("redis://:pw@h:7/2"),
            Ok(Backend::Redis {
                url: "redis://:pw@h:7/2".into()
            })
        );
        assert_eq!(
            Backend::parse("redis://:secret@h:7").unwrap().to_string(),
            "redis://:***@h:7"
        );
        assert_eq!(
            Backend::parse("redis+sentinel://a,b:1/mymaster"),
            Ok(Backend::RedisSentinel {
                sentinels: vec!["redis://a:26379".into(), "redis://b:1".into()],
                master: "mymaster".into()
            })
        );
        assert_eq!(
            Backend::parse("redis+cluster://a:1,b:2"),
            Ok(Backend::RedisCluster {
                nodes: vec!["redis://a:1".into(), "redis://b:2".into()]
            })
        );
    }

    #[test]
    fn bad_urls_are_usage_errors_naming_url_and_fault() {
        for (url, fault) in [
            ("127.0.0.1:2181", "no scheme"),
            ("http://x", "unknown scheme \"http\""),
            ("etcd://", "names no host"),
            ("etcd://a:99999", "not a port number"),
            ("etcd://u:p@a", "no user name"),
            ("etcd://a/locks", "no path after the hosts"),
            ("zk://", "names no host"),
            ("zk://a:port", "not a port number"),
            ("zk://a:0", "not a port number"),
            ("zk://a,,b", "empty host"),
            ("zk://a/app/", "must not end with / character"),
            ("zk://a//b", "empty node name"),
            ("zk://a/app/..", "relative paths not allowed"),
            ("zk://a/app\u{7f}", "invalid character in path"),
            ("zk://u:p@a", "no user name"),
            ("redis://a,b", "names one server"),
            ("redis://a/x", "not a database number"),
            ("redis+sentinel://a", "master's name"),
            ("redis+cluster://a/3", "no database number"),
            ("redis://a?x=1", "query strings"),
        ] {
            let failure = Backend::parse(url).expect_err(url);
            assert_eq!(failure.code, exit::USAGE, "{url}");
            assert!(
                failure.message.contains(fault),
                "{url}: {}",
                failure.message
            );
            assert!(failure.message.contains("backend URL"), "{url}");
        }
        let failure = Backend::parse("redis://:hunter2@a/x").unwrap_err();
        assert!(!failure.message.contains("hunter2"), "{}", failure.message);
    }

    #[test]
    fn tls_urls_name_their_scheme_and_want_their_files() {
        for (url, shown) in [
            ("zk+tls://a:2281/app", "zk+tls://a:2281/app"),
            ("zookeeper+tls://a", "zk+tls://a:2181"),
            ("rediss://a", "rediss://a:6379"),
            ("etcd+https://a:1", "etcd+https://a:1"),
        ] {
            let backend = Backend::parse(url).unwrap();
            assert!(backend.is_tls(), "{url}");
            assert_eq!(backend.to_string(), shown);
        }
        let args = |ca: Option<&str>, cert: Option<&str>, key: Option<&str>| BackendArgs {
            backend: String::new(),
            connect_timeout: Duration::from_secs(1),
            tls_ca: ca.map(Into::into),
            tls_cert: cert.map(Into::into),
            tls_key: key.map(Into::into),
            sasl_user: None,
            sasl_password: None,
        };
        let zk_tls = Backend::parse("zk+tls://a").unwrap();
        let plain = Backend::parse("zk://a").unwrap();
        let rediss = Backend::parse("rediss://a").unwrap();
        let refused = |args: BackendArgs, backend: &Backend, fault: &str| {
            let failure = args.tls(backend).expect_err(fault);
            assert_eq!(failure.code, exit::USAGE);
            assert!(failure.message.contains(fault), "{}", failure.message);
        };
        refused(args(None, None, None), &zk_tls, "needs --tls-ca");
        refused(
            args(Some("ca"), None, None),
            &plain,
            "are for a TLS backend",
        );
        refused(args(Some("ca"), Some("c"), None), &zk_tls, "go together");
        refused(args(None, Some("c"), Some("k")), &rediss, "needs --tls-ca");
        assert_eq!(
            args(None, None, None).tls(&rediss),
            Ok(None),
            "the system's CAs"
        );
        assert_eq!(
            args(Some("ca"), Some("c"), Some("k")).tls(&zk_tls),
            Ok(Some(TlsFiles {
                ca: "ca".into(),
                cert: Some(("c".into(), "k".into())),
            }))
        );
    }

    #[test]
    fn etcd_urls() {
        assert_eq!(
            Backend::parse("etcd://a,b:1,[::1]:2"),
            Ok(Backend::Etcd {
                endpoints: vec!["a:2379".into(), "b:1".into(), "[::1]:2".into()],
                tls: false,
            })
        );
        assert_eq!(
            Backend::parse("etcd://127.0.0.1:2379/")
                .unwrap()
                .to_string(),
            "etcd://127.0.0.1:2379"
        );
    }

    /// Nothing listens on the port: exit 69 naming the address, within the connect timeout.
    #[tokio::test]
    async fn unreachable_backends_fail_in_bounded_time() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let options = ConnectOptions {
            connect_timeout: Duration::from_secs(1),
            session_timeout: DEFAULT_SESSION_TIMEOUT,
            tls: None,
            sasl: None,
        };
        #[cfg_attr(not(feature = "etcd"), allow(unused_mut))]
        let mut urls = vec![
            format!("zk://127.0.0.1:{port}"),
            format!("redis://127.0.0.1:{port}"),
        ];
        #[cfg(feature = "etcd")]
        urls.push(format!("etcd://127.0.0.1:{port}"));
        for url in urls {
            let started = std::time::Instant::now();
            let failure = Backend::parse(&url)
                .unwrap()
                .connect(&options)
                .await
                .expect_err(&url);
            assert!(started.elapsed() < Duration::from_secs(3), "{url}");
            assert_eq!(failure.code, exit::UNAVAILABLE, "{url}");
            assert!(
                failure.message.contains(&format!("127.0.0.1:{port}")),
                "{url}: {}",
                failure.message
            );
        }
    }
}
